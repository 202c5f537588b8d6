#!/usr/bin/env bash
# The side-by-side benchmark: one guest boot, one emulated controller with a null-co backed
# 4 KiB-LBA namespace, kernel booted with nvme.poll_queues=1, one vCPU. Our nvme-perf on
# vfio-pci against nvme-perf's io_uring engine on the kernel's block device (polled and
# interrupt-driven) and, when their binaries are named, the peers SPDK and libvfn, repeated in
# alternating order; medians and ratios go to docs/performance.md.
#
# Usage: [SPDK_PERF=.../spdk_nvme_perf] [LIBVFN_PERF=.../examples/perf] tests/bench.sh [REPS [SECONDS]]
#
# SPDK_PERF: SPDK's spdk_nvme_perf (build/bin/spdk_nvme_perf); LIBVFN_PERF: libvfn's
# examples/perf (build/examples/perf). Both are built outside this repository (see "Peers" in
# docs/performance.md); either may be left out. BENCH_AB=0 skips the A/B runs of our mechanisms.
# BENCH_SWEEP=1 adds a queue-depth sweep (QD 1, 2, 4, ..., 256, SECS a point) and then draws the
# plots of docs/performance.md (tests/qemu/bench-plots.py) instead of updating its table: the plots
# want one short repetition (e.g. `BENCH_SWEEP=1 tests/bench.sh 1 2`), the table several long ones.
# BENCH_LOAD=N[:NICE] (e.g. BENCH_LOAD=2, one per host CPU) adds the busy host: every repetition
# also runs ours, the peers and the kernel's polled io_uring at QD128 and QD1 while the host runs
# N busy-loop processes (`sh -c 'while :; do :; done'`) at nice NICE (default 0), started when the
# guest asks for them and stopped after that phase and whenever the run ends (run.sh --host-load);
# the report puts every ratio quiet and loaded side by side, with the host's load averages.
# BENCH_UPDATE=0 prints the report without rewriting docs/performance.md (smoke runs, a shared
# host).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
REPS=${1:-5}
SECS=${2:-5}
LOG=$ROOT/target/bench-guest.log
mkdir -p "$ROOT/target"

EXTRA=""
HUGEPAGES=64
PEER_RUNS=0
if [ -n "${SPDK_PERF:-}" ]; then
    [ -x "$SPDK_PERF" ] || { echo "bench.sh: SPDK_PERF=$SPDK_PERF is not an executable file" >&2; exit 2; }
    EXTRA="$EXTRA spdk_nvme_perf=$SPDK_PERF"
    # DPDK takes its memory from the hugepage pool as it needs it: 512 MiB leave plenty.
    HUGEPAGES=256
    PEER_RUNS=$((PEER_RUNS + 2))
fi
if [ -n "${LIBVFN_PERF:-}" ]; then
    [ -x "$LIBVFN_PERF" ] || { echo "bench.sh: LIBVFN_PERF=$LIBVFN_PERF is not an executable file" >&2; exit 2; }
    EXTRA="$EXTRA libvfn-perf=$LIBVFN_PERF"
    PEER_RUNS=$((PEER_RUNS + 2))
fi
[ -n "$EXTRA" ] || echo "bench.sh: no peers (set SPDK_PERF and/or LIBVFN_PERF to their binaries to add them)"

AB=${BENCH_AB:-1}
SWEEP=${BENCH_SWEEP:-0}
UPDATE=${BENCH_UPDATE:-1}
LOAD=${BENCH_LOAD:-}
LOAD_ARGS=()
GUEST_LOAD=0
if [ -n "$LOAD" ]; then
    [[ "$LOAD" =~ ^[1-9][0-9]*(:-?[0-9]+)?$ ]] ||
        { echo "bench.sh: BENCH_LOAD=$LOAD: give N[:NICE], N busy-loop processes on the host (e.g. BENCH_LOAD=$(nproc))" >&2; exit 2; }
    LOAD_ARGS=(--host-load "$LOAD")
    GUEST_LOAD=1
fi
# Time allowed per repetition: 36 * SECS for our and the kernel's 16 runs, and for each peer
# run twice its length plus 20 s of start-up (DPDK's takes seconds under TCG).
PER_REP=$(((36 + 2 * PEER_RUNS) * SECS + 20 * PEER_RUNS))
# The loaded phase: 4 runs of ours and the kernel and the peer runs, each allowed three times
# its length (and the peers 30 s of start-up), plus the two 2 s waits for the host's hog.
[ -z "$LOAD" ] || PER_REP=$((PER_REP + (12 + 3 * PEER_RUNS) * SECS + 30 * PEER_RUNS + 4))
CASE_TIMEOUT=$((REPS * PER_REP + 300))
# The sweep: 9 depths, each run of ours, the kernel and the peers twice its length, the peers'
# start-up 20 s.
[ "$SWEEP" != 1 ] || CASE_TIMEOUT=$((CASE_TIMEOUT + 9 * ((2 + PEER_RUNS / 2) * 2 * SECS + 10 * PEER_RUNS)))
GUEST_EXTRA_BINS=${EXTRA# } GUEST_HUGEPAGES=$HUGEPAGES \
    "$ROOT/tests/qemu/run.sh" --ns 4096:8G:null --smp 1 --qpairs 4 \
    --append "nvme.poll_queues=1 BENCH_REPS=$REPS BENCH_TIME=$SECS BENCH_AB=$AB BENCH_SWEEP=$SWEEP BENCH_LOAD=$GUEST_LOAD" \
    ${LOAD_ARGS[@]+"${LOAD_ARGS[@]}"} --case-timeout "$CASE_TIMEOUT" --timeout $((CASE_TIMEOUT + 600)) \
    --log "$LOG" bench.sh
if [ "$SWEEP" = 1 ]; then
    python3 "$ROOT/tests/qemu/bench-report.py" "$LOG"
    exec python3 "$ROOT/tests/qemu/bench-plots.py" "$LOG"
fi
CMD="tests/bench.sh $REPS $SECS"
[ "$AB" = 1 ] || CMD="BENCH_AB=0 $CMD"
[ -z "$LOAD" ] || CMD="BENCH_LOAD=$LOAD $CMD"
[ -z "${LIBVFN_PERF:-}" ] || CMD="LIBVFN_PERF=.../libvfn/build/examples/perf $CMD"
[ -z "${SPDK_PERF:-}" ] || CMD="SPDK_PERF=.../spdk/build/bin/spdk_nvme_perf $CMD"
UPDATE_ARGS=()
[ "$UPDATE" = 0 ] || UPDATE_ARGS=(--update "$ROOT/docs/performance.md")
python3 "$ROOT/tests/qemu/bench-report.py" "$LOG" ${UPDATE_ARGS[@]+"${UPDATE_ARGS[@]}"} --command "$CMD"
