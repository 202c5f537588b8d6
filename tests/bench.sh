#!/usr/bin/env bash
# The side-by-side benchmark: one guest boot, one emulated controller with a null-co backed
# 4 KiB-LBA namespace, kernel booted with nvme.poll_queues=1, one vCPU. Our nvme-perf on
# vfio-pci against nvme-perf's io_uring engine on the kernel's block device (polled and
# interrupt-driven), repeated in alternating order; medians and ratios go to
# docs/performance.md. Usage: tests/bench.sh [REPS [SECONDS]]
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
REPS=${1:-5}
SECS=${2:-5}
LOG=$ROOT/target/bench-guest.log
mkdir -p "$ROOT/target"
"$ROOT/tests/qemu/run.sh" --ns 4096:8G:null --smp 1 --qpairs 4 \
    --append "nvme.poll_queues=1 BENCH_REPS=$REPS BENCH_TIME=$SECS" \
    --case-timeout $((REPS * 30 * SECS + 300)) --timeout $((REPS * 30 * SECS + 900)) \
    --log "$LOG" bench.sh
python3 "$ROOT/tests/qemu/bench-report.py" "$LOG" --update "$ROOT/docs/performance.md" \
    --command "tests/bench.sh $REPS $SECS"
