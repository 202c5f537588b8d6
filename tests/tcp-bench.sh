#!/usr/bin/env bash
# NVMe/TCP side by side in one guest boot: our initiator (nvme-perf on a TCP transport id) against
# the kernel's NVMe/TCP host (nvme-perf --engine io_uring on its block device, interrupt-driven
# and polled), both on the kernel's nvmet-tcp target over loopback and the same memory-backed
# null_blk namespace; 4 KiB random reads at QD1 and QD128, REPS repetitions of SECS seconds in
# rotating order (tests/qemu/cases/nvmf-tcp-bench.sh). Prints medians and per-repetition ratios
# (tests/qemu/bench-report.py --tcp) and, with --update, rewrites the block in
# docs/performance.md ("NVMe/TCP: our initiator vs the kernel's NVMe/TCP host").
#
# Usage: [BASE=path/to/old/nvme-perf] [SMP=1] [TCPBENCH_AB=0] [TCPBENCH_STRACE=0] [NO_BUILD=1]
#        tests/tcp-bench.sh [REPS [SECS]] [--update]
#
# BASE: a baseline build of nvme-perf (static, e.g. a copy of target/guest/x86_64-unknown-linux-gnu/
# release/nvme-perf from before a change) run as `base-*` in the same boot: the A/B of a change
# to crates/tcp. SMP: guest vCPUs (default 1, as tests/bench.sh: under TCG a second vCPU made
# every side slower and the runs far noisier, see docs/performance.md). strace, where the host has it, goes into the guest for the syscall counts
# (TCPBENCH_STRACE=0: no strace runs). TCPBENCH_AB=0 leaves out the ours-yield-* and ours-wait-*
# runs (nvme-perf --yield-idle, --interrupts).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
UPDATE=0
ARGS=()
for a in "$@"; do
    if [ "$a" = --update ]; then UPDATE=1; else ARGS+=("$a"); fi
done
REPS=${ARGS[0]:-5}
SECS=${ARGS[1]:-5}
SMP=${SMP:-1}
LOG=$ROOT/target/tcp-bench-guest.log
mkdir -p "$ROOT/target"

EXTRA=""
SIDES=2
if [ -n "${BASE:-}" ]; then
    [ -x "$BASE" ] || { echo "tcp-bench.sh: BASE=$BASE is not an executable file" >&2; exit 2; }
    EXTRA="$EXTRA nvme-perf-base=$BASE"
    SIDES=3
fi
STRACE=$(command -v strace || true)
[ -z "$STRACE" ] || EXTRA="$EXTRA $STRACE"
# Per repetition: two runs a side, four for the kernel (interrupts and polled), and a few
# seconds of start-up each under TCG; the strace runs once more.
RUNS=$((2 * SIDES + 6))
CASE_TIMEOUT=$(((REPS + 1) * RUNS * (SECS + 15) + 300))
GUEST_EXTRA_BINS=${EXTRA# } \
    "$ROOT/tests/qemu/run.sh" --smp "$SMP" \
    --guest-env "TCPBENCH_REPS=$REPS" --guest-env "TCPBENCH_TIME=$SECS" \
    --guest-env "TCPBENCH_AB=${TCPBENCH_AB:-1}" --guest-env "TCPBENCH_STRACE=${TCPBENCH_STRACE:-1}" \
    --case-timeout "$CASE_TIMEOUT" --timeout $((CASE_TIMEOUT + 600)) \
    --log "$LOG" ${NO_BUILD:+--no-build} nvmf-tcp-bench.sh
CMD="tests/tcp-bench.sh $REPS $SECS"
[ "$SMP" = 1 ] || CMD="SMP=$SMP $CMD"
[ -z "${BASE:-}" ] || CMD="BASE=.../nvme-perf $CMD"
[ "${TCPBENCH_AB:-1}" = 1 ] || CMD="TCPBENCH_AB=0 $CMD"
[ "${TCPBENCH_STRACE:-1}" = 1 ] || CMD="TCPBENCH_STRACE=0 $CMD"
if [ "$UPDATE" = 1 ]; then
    python3 "$ROOT/tests/qemu/bench-report.py" "$LOG" --tcp --command "$CMD" \
        --update "$ROOT/docs/performance.md"
else
    python3 "$ROOT/tests/qemu/bench-report.py" "$LOG" --tcp --command "$CMD"
fi
