#!/usr/bin/env bash
# Our NVMe/TCP target against the kernel's nvmet-tcp, side by side in one guest boot on one
# controller (tests/qemu/cases/target-bench.sh): the kernel's NVMe/TCP host loads each with
# fio (io_uring, direct=1, 4 KiB random reads) at QD1 and QD128 over loopback, REPS
# repetitions of SECS seconds, order alternating. Prints the table of
# tests/qemu/target-bench-report.py (IOPS, QD1 latency, target CPU per I/O, ratios).
# Not part of tests/run-all.sh (a benchmark).
#
# Usage: [BASE=path/to/old/nvme-target] [SMP=2] [TB_SLEEP=0] [TB_PIN=1|same] [TB_TRACE=1] [NO_BUILD=1]
#        [APPEND="kernel args"]
#        tests/target-bench.sh [REPS [SECS]]
#
# BASE: a baseline build of nvme-target (static, e.g. a copy of
# target/guest/x86_64-unknown-linux-gnu/release/nvme-target from before a change), run as the
# `base` side in the same boot: the A/B of a change to crates/target. TB_SLEEP=0: no `sleep`
# side (nvme-target --idle-spins 0, the default since 2026-12-03). TB_TRACE=1: a last QD1 run
# of ours with NVME_TARGET_TRACE; its summary: tests/qemu/target-trace-report.py on the log. TB_PIN=1: fio on CPU 0, nvme-target on CPU 1; TB_PIN=same: both on CPU 0. APPEND: extra guest kernel
# arguments (run.sh --append), e.g. `no_timer_check` where a heavily loaded host makes the
# guest panic early with "timer doesn't work through Interrupt-remapped IO-APIC".
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
REPS=${1:-3}
SECS=${2:-5}
SMP=${SMP:-2}
LOG=$ROOT/target/target-bench-guest.log
mkdir -p "$ROOT/target"
FIO=$(command -v fio) || { echo "target-bench.sh: fio is not installed (apt-get install fio)" >&2; exit 2; }
EXTRA="fio=$FIO"
PHASES=3
if [ -n "${BASE:-}" ]; then
    [ -x "$BASE" ] || { echo "target-bench.sh: BASE=$BASE is not an executable file" >&2; exit 2; }
    EXTRA="$EXTRA nvme-target-base=$BASE"
    PHASES=4
fi
# Per repetition and phase: two runs, a rebind and a connect (about 20 s under TCG).
CASE_TIMEOUT=$((REPS * PHASES * (2 * (SECS + 10) + 30) + 300))
GUEST_EXTRA_BINS=$EXTRA \
    "$ROOT/tests/qemu/run.sh" --ns 4096:8G:null --smp "$SMP" \
    --guest-env "TB_REPS=$REPS" --guest-env "TB_TIME=$SECS" --guest-env "TB_SLEEP=${TB_SLEEP:-1}" \
    --guest-env "TB_PIN=${TB_PIN:-0}" --guest-env "TB_TRACE=${TB_TRACE:-0}" \
    --case-timeout "$CASE_TIMEOUT" --timeout $((CASE_TIMEOUT + 600)) --append "${APPEND:-}" \
    --log "$LOG" ${NO_BUILD:+--no-build} target-bench.sh
CMD="tests/target-bench.sh $REPS $SECS"
[ "$SMP" = 2 ] || CMD="SMP=$SMP $CMD"
[ -z "${BASE:-}" ] || CMD="BASE=.../nvme-target $CMD"
[ -z "${APPEND:-}" ] || CMD="APPEND=$APPEND $CMD"
[ "${TB_SLEEP:-1}" = 1 ] || CMD="TB_SLEEP=0 $CMD"
[ "${TB_PIN:-0}" = 0 ] || CMD="TB_PIN=$TB_PIN $CMD"
python3 "$ROOT/tests/qemu/target-bench-report.py" "$LOG" --command "$CMD"
