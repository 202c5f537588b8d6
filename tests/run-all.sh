#!/usr/bin/env bash
# Runs every test layer: the doc reference check, unit tests, loom model checks, then the QEMU
# guest cases.
# Keeps going after a failure so one run shows everything; exits non-zero if anything failed.
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT" || exit 2
RESULTS=()
FAILED=0

step() {
    local name=$1
    shift
    echo
    echo "==== $name: $*"
    local t0=$SECONDS
    if "$@"; then
        RESULTS+=("PASS  $name ($((SECONDS - t0))s)")
    else
        RESULTS+=("FAIL  $name ($((SECONDS - t0))s)")
        FAILED=1
    fi
}

# Docs name files, constants and tests; a rename must not leave them dangling (seconds).
step "doc references" python3 tests/doc-refs.py

step "unit tests" cargo test --workspace

# The Rust examples, run against the in-process emulator (the C examples run in nvme-capi's
# tests above).
step "examples" sh -c 'cargo run -q -p nvme-driver --example hello -- sim &&
    cargo run -q -p nvme-driver --example per_thread -- sim 4 5000 &&
    cargo run -q -p nvme-driver --example two_controllers -- sim &&
    cargo run -q -p nvme-driver --example app_memory -- sim &&
    cargo run -q -p nvme-poll --example tokio_local -- sim 8 200'

# The distribution's fio with our ioengine (tools/fio-engine) against the in-process emulator:
# write then read back with verify=md5/crc32c over two namespaces, trim, and the refusals
# (bad filename, no device, offset past the end, thread=0) (seconds).
step "fio engine" tests/fio-engine.sh

# The NVMe/TCP receive path fuzzed for 30 s (libFuzzer where cargo-fuzz and nightly exist, else a
# release proptest run of the structured property): no panic, one completion per request, bounded
# buffers, every buffer back (docs/nvme-tcp.md, "A hostile target").
step "tcp fuzz (short)" tests/tcp-fuzz.sh 30

# A plain release build (tools and C library for a real machine) compiles no emulator, and
# `nvme-perf sim` there fails with a clear error. Before the instruction budget, which rebuilds
# nvme-perf with the emulator.
step "no emulator in release builds" tests/no-emulator.sh

# Per-I/O instruction counts (callgrind) against tests/instr-budget.txt: fails on +5 %.
step "instruction budget" tests/instr-per-io.sh --check

if [ -f crates/pool/tests/loom.rs ]; then
    step "loom" env RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR="$ROOT/target/loom" \
        cargo test -p nvme-pool --test loom --release
else
    echo
    echo "==== loom: skipped (crates/pool/tests/loom.rs does not exist yet)"
    RESULTS+=("SKIP  loom (no crates/pool/tests/loom.rs)")
fi

# The default layout plus a 16 MiB Controller Memory Buffer (BAR 2, CAP.CMBS; the driver leaves
# it unused, so every case must behave exactly as without it): the `cmb` layout's check, without
# a boot of its own.
step "qemu guest" tests/qemu/run.sh --cmb 16 bind.sh vfio-mode.sh identify.sh bad-input.sh hello.sh integrity.sh in-use.sh perf-smoke.sh recovery.sh sqlite.sh sqlite-ext.sh c-api.sh admin.sh control.sh
# Its own boot: namespaces with metadata formats (2: 8 bytes inline, extended LBA; 3: 16 bytes in a
# separate buffer; 4: protection information type 1 in 8 separate bytes; 5: PI type 3 with the
# 64-bit guard, for metadata.sh's 64-bit guard round trips and copy.sh's Copy descriptor format
# 1h) next to a plain one,
# which carries Copy limits other than QEMU's defaults for copy.sh (MSSRL 16, MCL 64, MSRC 7),
# and vectored.sh; namespace 6 is zoned (1 MiB zones, MOR 4, MAR 8) for zns.sh. The first qemu
# step built the guest binaries.
step "qemu guest (metadata namespaces, Copy limits, zoned)" tests/qemu/run.sh --no-build \
    --ns 512:16M:mssrl=16,mcl=64,msrc=7 --ns 512:16M:ms=8,mset=1 --ns 4096:16M:ms=16,mset=0 \
    --ns 512:16M:ms=8,mset=0,pi=1 --ns 512:16M:ms=16,mset=0,pi=3,pif=2 \
    --ns 4096:16M:zoned=true,zoned.zone_size=1M,zoned.max_open=4,zoned.max_active=8 \
    --guest-env COPY_MSSRL=16 --guest-env COPY_MCL=64 --guest-env COPY_MSRC=7 \
    metadata.sh copy.sh vectored.sh zns.sh
# Its own boot: namespace 1's image behind blkdebug, EIO on reads of 512-byte sector 2048 (LBA 256)
# and writes of sector 4096 (LBA 512): media errors on exactly those requests.
step "qemu guest (media errors)" tests/qemu/run.sh --no-build \
    --ns 4096:16M:bad=r2048,w4096 --ns 512:16M media-errors.sh
# The distribution's fio (with its shared libraries) and our fio engine, built for a real
# machine (no emulator), for the guest boots that run fio: this one and layout two-ctrl's below.
# shellcheck disable=SC2317 # called through step
fio_guest_bins() {
    tools/fio-engine/build.sh --release >&2 &&
        echo "fio=$(command -v fio) nvme-fio.so=$PWD/target/fio-engine/nvme-fio.so"
}
# One boot for NVMe/TCP (a boot of its own keeps the target's configfs state and the kernel
# host's nvme devices away from the other cases): our initiator against the kernel's nvmet-tcp
# target on 127.0.0.1 (nvmf-tcp.sh; the emulated NVMe controller is not used), fio with our
# engine over NVMe/TCP against the same kind of target (fio-tcp.sh), and our own NVMe/TCP target
# serving the QEMU controller to the kernel's host (target-tcp.sh: ext4, fio verify). Each case
# takes its kernel target down again.
# shellcheck disable=SC2317 # called through step
qemu_tcp() {
    local bins
    bins=$(fio_guest_bins) &&
        GUEST_EXTRA_BINS=$bins tests/qemu/run.sh --no-build nvmf-tcp.sh fio-tcp.sh target-tcp.sh
}
step "qemu guest (NVMe/TCP, fio over TCP, our target)" qemu_tcp
# The core cases on every other controller layout of tests/qemu/layouts (many namespaces with
# gaps in their ids, MDTS 1 and 0, one queue pair, 4 KiB-only namespaces, two controllers), one
# boot each.
# integrity.sh checks four of its seven sizes in these boots and the VFIO-mode boots below
# (one block, three pages, 1 and 2 MiB: split above MDTS in every layout that lowers it); the
# first qemu step checks all seven. Each size is two nvme-dd runs and two kernel dd runs, a
# few seconds each under TCG. A layout's own INTEGRITY_SIZES (given after this one) wins.
LAYOUT_INTEGRITY_SIZES=512,12288,1048576,2097152
# shellcheck disable=SC2317 # called through step
qemu_layouts() {
    local name t0 failed=() extra bins
    for name in $(tests/qemu/run.sh --list-layouts | awk '/^[^[:space:]]/ { print $1 }'); do
        # default: the first qemu step; cmb: that step's controller has the CMB.
        # subsys: its own boot below, with subsys.sh alone.
        case $name in default | cmb | subsys) continue ;; esac
        t0=$SECONDS
        extra=()
        bins=""
        # A layout with a second controller also runs the two-controller case.
        tests/qemu/run.sh --list-layouts | grep -A1 "^$name " | grep -q -- --ctrl2-ns &&
            extra=(two-controllers.sh)
        # two-ctrl also runs fio with our engine (fio.sh: write/read verify over two namespaces,
        # data read back through nvme-dd, the refusals, one job over both controllers).
        if [ "$name" = two-ctrl ]; then
            bins=$(fio_guest_bins) || { failed+=("$name (fio engine build)"); continue; }
            extra+=(fio.sh)
        fi
        if GUEST_EXTRA_BINS=$bins tests/qemu/run.sh --no-build \
            --guest-env INTEGRITY_SIZES=$LAYOUT_INTEGRITY_SIZES \
            --layout "$name" identify.sh hello.sh integrity.sh bad-input.sh \
            ${extra[@]+"${extra[@]}"}; then
            echo "==== layout $name: PASS ($((SECONDS - t0))s)"
        else
            echo "==== layout $name: FAIL ($((SECONDS - t0))s)"
            failed+=("$name")
        fi
    done
    [ ${#failed[@]} -eq 0 ] || { echo "==== layouts failed: ${failed[*]}"; return 1; }
}
step "qemu guest (layouts)" qemu_layouts
# Its own short boot: two controllers of one NVMe subsystem (layout subsys): nvme-admin
# list-subsys and nvme-dd --verify-through (one namespace, two paths), nvme-admin
# list-ctrl, attach-ns / detach-ns of the detached namespace 3 with I/O through both
# controllers, format of namespace 2, and nvme-cli on the kernel driver as the witness.
step "qemu guest (NVMe subsystem)" tests/qemu/run.sh --no-build --layout subsys subsys.sh
# Its own boot: namespace 1 behind a QEMU throttle filter, throttled to 1 IOPS for 12 s during a
# verifying run (past the I/O timeout) and released: aborts, resets, no lost acknowledged write.
step "qemu guest (stalled device)" tests/qemu/run.sh --no-build \
    --ns 512:64M:throttle --ns 4096:16M stalled-device.sh
# SQLite through our VFS while the host SIGKILLs QEMU itself (issue 22 item 2): four short boots
# on two named images with the write cache on; three kill points (WAL, DELETE, WAL) at seeded
# random moments, each checked by the next boot (every acknowledged commit there). What this
# does and does not prove: docs/sqlite.md, "QEMU killed".
step "qemu guest (SQLite, QEMU killed)" tests/sqlite-qkill.sh --no-build
# The harness's own guest kernel (Linux 6.12 from Debian's linux-source-6.12, tinyconfig plus
# tests/qemu/guest-kernel.config): built once (see docs/testing.md for the cost), then cached
# under target/guest-kernel/ keyed by package version and config.
step "guest kernel (build or cache)" tests/qemu/guest-kernel.sh
# The core cases in the VFIO modes Debian's stock kernel cannot run, on the default layout, one
# boot each with that kernel: iommufd (device cdev + /dev/iommu, IOAS mappings) and no-IOMMU
# (no emulated IOMMU, physical addresses, hugepage memory). vfio-mode.sh asserts the mode the
# tools report; perf-smoke and recovery add MSI-X interrupts, the device request interrupt and
# controller resets in each mode. The first qemu step's boot covers type1 on the stock kernel.
# The iommufd boot also runs ublk.sh (nvme-ublk: /dev/ublkbN served through our driver).
# shellcheck disable=SC2317 # called through step
qemu_vfio_modes() {
    local mode t0 failed=() extra bins
    for mode in iommufd noiommu; do
        t0=$SECONDS
        extra=()
        bins=""
        # ublk.sh needs a kernel with the ublk driver (this one): the iommufd boot runs it,
        # with the distribution's fio for its verify step.
        if [ "$mode" = iommufd ]; then
            extra=(ublk.sh)
            ! command -v fio >/dev/null || bins="fio=$(command -v fio)"
        fi
        if GUEST_EXTRA_BINS=$bins tests/qemu/run.sh --no-build \
            --guest-env INTEGRITY_SIZES=$LAYOUT_INTEGRITY_SIZES \
            --vfio-mode "$mode" vfio-mode.sh identify.sh hello.sh integrity.sh \
            bad-input.sh perf-smoke.sh recovery.sh ${extra[@]+"${extra[@]}"}; then
            echo "==== vfio mode $mode: PASS ($((SECONDS - t0))s)"
        else
            echo "==== vfio mode $mode: FAIL ($((SECONDS - t0))s)"
            failed+=("$mode")
        fi
    done
    [ ${#failed[@]} -eq 0 ] || { echo "==== vfio modes failed: ${failed[*]}"; return 1; }
}
step "qemu guest (vfio modes)" qemu_vfio_modes
# Its own boot: the controller behind a pcie-root-port. First a second controller is hot-added on
# a free root port (QMP device_add), attached by the uevent monitor, read from and hot-removed
# while the first keeps reading (hotplug.sh); then the first is hot-unplugged (QMP device_del)
# under load; it is gone afterwards, so nothing else can run in this boot.
step "qemu guest (hot-plug, hot-unplug)" tests/qemu/run.sh --no-build --hotplug hotplug.sh hot-unplug.sh

echo
echo "==== run-all summary"
printf '  %s\n' "${RESULTS[@]}"
exit "$FAILED"
