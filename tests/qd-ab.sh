#!/usr/bin/env bash
# Short A/B in one guest boot (the layout of tests/bench.sh): our nvme-perf, a baseline build of
# it and the peers at QD1 and QD128, order rotated each repetition; prints medians and the
# medians of per-repetition ratios (tests/qemu/ab-report.py).
#
# Usage: [BASE=path/to/old/nvme-perf] [SPDK_PERF=...] [LIBVFN_PERF=...] [AB_ASLR=0] [NO_BUILD=1]
#        tests/qd-ab.sh [REPS [SECS]]
# AB_ASLR=0 turns the guest's address-space randomisation off (each program at the same
# addresses in every run).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
REPS=${1:-3}
SECS=${2:-3}
LOG=$ROOT/target/qd-ab-guest.log
EXTRA=""
HUGEPAGES=64
[ -z "${BASE:-}" ] || EXTRA="$EXTRA nvme-perf-base=$BASE"
if [ -n "${SPDK_PERF:-}" ]; then
    EXTRA="$EXTRA spdk_nvme_perf=$SPDK_PERF"
    HUGEPAGES=256
fi
[ -z "${LIBVFN_PERF:-}" ] || EXTRA="$EXTRA libvfn-perf=$LIBVFN_PERF"
CASE_TIMEOUT=$((REPS * (16 * SECS + 60) + 300))
GUEST_EXTRA_BINS=${EXTRA# } GUEST_HUGEPAGES=$HUGEPAGES \
    "$ROOT/tests/qemu/run.sh" --ns 4096:8G:null --smp 1 --qpairs 4 \
    --append "AB_REPS=$REPS AB_TIME=$SECS${AB_ASLR:+ AB_ASLR=$AB_ASLR}" \
    --case-timeout "$CASE_TIMEOUT" --timeout $((CASE_TIMEOUT + 600)) \
    --log "$LOG" ${NO_BUILD:+--no-build} qd-ab.sh
python3 "$ROOT/tests/qemu/ab-report.py" "$LOG"
