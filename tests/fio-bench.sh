#!/usr/bin/env bash
# The fio side-by-side table (issue 26 item 3) in ONE guest boot: on one null-backed 4 KiB
# namespace, one vCPU, 4 KiB random reads at QD1 and QD128, REPS times in rotated order:
#   - on vfio-pci: our nvme-perf, and the distribution's fio with our engine
#     (target/fio-engine/nvme-fio.so, the release build without the emulator);
#   - on the kernel nvme driver (booted with nvme.poll_queues=1): fio's io_uring engine
#     (hipri, fixedbufs, registerfiles, direct), fio's t/io_uring from the same fio source
#     package (built here under target/fio-engine), and nvme-perf --engine io_uring;
#   - when SPDK_FIO_PLUGIN names SPDK's NVMe fio plugin (build/fio/spdk_nvme of an SPDK
#     configured --with-fio=<this fio source tree>), fio with ioengine=spdk on vfio-pci too.
# Prints the host load before and after (other builds share this machine) and the report of
# tests/qemu/fio-bench-report.py: medians, ranges, and the two costs of going through fio.
#
# Usage: [NO_BUILD=1] [SPDK_FIO_PLUGIN=.../build/fio/spdk_nvme] tests/fio-bench.sh [REPS [SECS]]
#        (defaults 3 and 3)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
REPS=${1:-3}
SECS=${2:-3}
LOG=$ROOT/target/fio-bench-guest.log
export CARGO_INCREMENTAL=${CARGO_INCREMENTAL:-0}

# The release engine (no emulator), and with it fio's configured source tree.
if [ -z "${NO_BUILD:-}" ] || [ ! -f "$ROOT/target/fio-engine/nvme-fio.so" ]; then
    "$ROOT/tools/fio-engine/build.sh" --release
fi
FIO_SRC=$ROOT/target/fio-engine/fio-src-$(dpkg-query -W -f '${Version}' fio)
[ -f "$FIO_SRC/config-host.h" ] || { echo "fio-bench: $FIO_SRC is not configured" >&2; exit 1; }
# t/io_uring of the same fio version, built in that tree (nothing of it is committed).
if [ ! -x "$FIO_SRC/t/io_uring" ]; then
    make -C "$FIO_SRC" -s -j2 t/io_uring >/dev/null
fi

EXTRA="fio=$(command -v fio) nvme-fio.so=$ROOT/target/fio-engine/nvme-fio.so t-io_uring=$FIO_SRC/t/io_uring"
HUGEPAGES=64
SPDK_RUNS=0
if [ -n "${SPDK_FIO_PLUGIN:-}" ]; then
    # The plugin is loaded into the distribution's fio, so it must have been built against
    # the headers of that fio version (SPDK's configure --with-fio=$FIO_SRC); a plugin built
    # against another fio's structures would misread them without an error.
    { [ -f "$SPDK_FIO_PLUGIN" ] && [ -x "$SPDK_FIO_PLUGIN" ]; } ||
        { echo "fio-bench: SPDK_FIO_PLUGIN=$SPDK_FIO_PLUGIN is not an executable file" >&2; exit 2; }
    # run.sh copies it with the shared libraries ldd lists (libnuma, libssl, ...).
    EXTRA="$EXTRA spdk_nvme=$SPDK_FIO_PLUGIN"
    # DPDK takes its memory from the hugepage pool as it needs it (as in tests/bench.sh).
    HUGEPAGES=256
    SPDK_RUNS=2
fi

HOST_LOAD_BEFORE=$(uptime)
# Each SPDK run also pays DPDK's start-up (seconds under TCG): 20 s allowed for it.
CASE_TIMEOUT=$((REPS * ((10 + SPDK_RUNS) * (SECS + 6) + 20 * SPDK_RUNS + 60) + 300))
GUEST_EXTRA_BINS=$EXTRA GUEST_HUGEPAGES=$HUGEPAGES \
    "$ROOT/tests/qemu/run.sh" --ns 4096:8G:null --smp 1 \
    --append "nvme.poll_queues=1 FB_REPS=$REPS FB_TIME=$SECS" \
    --case-timeout "$CASE_TIMEOUT" --timeout $((CASE_TIMEOUT + 900)) \
    --log "$LOG" ${NO_BUILD:+--no-build} fio-bench.sh
HOST_LOAD_AFTER=$(uptime)
CMD="tests/fio-bench.sh $REPS $SECS"
[ -z "${SPDK_FIO_PLUGIN:-}" ] || CMD="SPDK_FIO_PLUGIN=.../spdk-fio/build/fio/spdk_nvme $CMD"
python3 "$ROOT/tests/qemu/fio-bench-report.py" "$LOG" \
    --host-load "before: ${HOST_LOAD_BEFORE# }" --host-load "after: ${HOST_LOAD_AFTER# }" \
    --command "$CMD"
