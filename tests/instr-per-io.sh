#!/usr/bin/env bash
# Instructions per I/O of the driver's hot path, counted by callgrind (deterministic: the
# same binary and arguments give the same count whatever else the machine does).
#
#   tests/instr-per-io.sh            print the counts for QD 1 and QD 128
#   tests/instr-per-io.sh --check    also compare with tests/instr-budget.txt and fail when a
#                                    count exceeds its budget by more than 5 %
#   tests/instr-per-io.sh --update   rewrite tests/instr-budget.txt from this run
#   PERF_ARGS="--contexts cache" tests/instr-per-io.sh
#                                    the same counts with extra nvme-perf options (an A/B;
#                                    the budget holds for the defaults only)
#
# How: `nvme-perf sim --inline-device` runs the in-process emulator's poll passes on the
# worker thread (no second thread, no idle spinning to correct for). Two runs of N and 2N
# 4 KiB random reads; per I/O = (Ir(2N) - Ir(N)) / N of the worker thread, which cancels setup.
# The emulator's own work (inclusive cost of `SimController::step`) and the admin commands'
# wait loops around the run (setup, not per I/O) are subtracted, so the
# "loop" figure is everything nvme-perf's worker does per I/O (driver, pool, PRNG, latency
# histogram, clock reads), and "driver+pool" is the part whose source lines lie in
# crates/driver, crates/pool and crates/core (code inlined into the loop included; crates/core
# holds the namespace checks and error types the PCIe hot path inlines, moved out of
# crates/driver by issue 20).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
MODE=${1:-print}
N=${N:-10000}
# Repetitions; the medians are reported (clock-driven paths vary a little between runs).
REPS=${REPS:-7}
# Extra nvme-perf options for an A/B (word-split on purpose).
PERF_ARGS=${PERF_ARGS:-}
if [ -n "$PERF_ARGS" ] && [ "$MODE" != print ]; then
    echo "instr-per-io.sh: PERF_ARGS is for A/B prints; --check and --update use the defaults" >&2
    exit 2
fi
BUDGET=tests/instr-budget.txt
TOLERANCE=1.05
command -v valgrind >/dev/null || {
    echo "instr-per-io.sh: needs valgrind (apt-get install valgrind)" >&2
    exit 2
}
# DEVICE `sim` is the `emulator` feature (a plain release build has none).
cargo build --release -q -p nvme-perf --features emulator
OUT=$(mktemp -d)
[ -z "${KEEP:-}" ] || echo "instr-per-io.sh: keeping $OUT" >&2
trap '[ -n "${KEEP:-}" ] || rm -rf "$OUT"' EXIT

measure() { # QD IOS REP -> files under $OUT
    local run="$OUT/q$1-n$2-r$3"
    # shellcheck disable=SC2086 # PERF_ARGS is split into words on purpose
    valgrind --tool=callgrind --separate-threads=yes --callgrind-out-file="$run.%p" \
        target/release/nvme-perf sim -q "$1" --ios "$2" --quiet --json --inline-device $PERF_ARGS \
        >"$run.json" 2>"$run.err" || {
        cat "$run.err" >&2
        exit 1
    }
    # With one job the worker is the main thread (the first; the emulator's is the second).
    callgrind_annotate --auto=no --threshold=100 "$run".*-01 >"$run.self" 2>/dev/null
    callgrind_annotate --auto=no --threshold=100 --inclusive=yes "$run".*-01 \
        >"$run.incl" 2>/dev/null
}

# The runs are independent and each is one process on one core (valgrind serialises its
# threads), and a count does not depend on what else runs: JOBS of them at a time (default 2,
# the cores of the CI machine) take half the wall time of one after the other.
JOBS=${JOBS:-2}
running=()
failed=0
for rep in $(seq "$REPS"); do
    for qd in 1 128; do
        for ios in "$N" $((2 * N)); do
            measure "$qd" "$ios" "$rep" &
            running+=($!)
            if [ "${#running[@]}" -ge "$JOBS" ]; then
                wait "${running[0]}" || failed=1
                running=("${running[@]:1}")
            fi
        done
    done
done
for pid in "${running[@]}"; do wait "$pid" || failed=1; done
[ "$failed" = 0 ] || exit 1

python3 - "$OUT" "$N" "$MODE" "$BUDGET" "$TOLERANCE" "$REPS" <<'PY'
import re, statistics, sys
out, n, mode, budget_path, tolerance, reps = sys.argv[1:]
n = int(n); tolerance = float(tolerance); reps = int(reps)

def number(s):
    return int(s.replace(",", ""))

def parse(path):
    """(total, {file:function -> Ir}) of one callgrind_annotate listing."""
    total, rows = None, {}
    for line in open(path):
        m = re.match(r"\s*([\d,]+)\s+\(\s*[\d.]+%\)\s+PROGRAM TOTALS", line)
        if m:
            total = number(m.group(1))
            continue
        m = re.match(r"\s*([\d,]+)\s+\(\s*[\d.]+%\)\s+(\S.*?)(?: \[.*\])?$", line)
        if m and ":" in m.group(2):
            rows[m.group(2)] = rows.get(m.group(2), 0) + number(m.group(1))
    return total, rows

ADMIN_SPIN = ":nvme_driver::admin::AdminQueue::execute"

def figures(qd, ios, rep):
    total, self_rows = parse(f"{out}/q{qd}-n{ios}-r{rep}.self")
    _, incl_rows = parse(f"{out}/q{qd}-n{ios}-r{rep}.incl")
    device = max(v for k, v in incl_rows.items()
                 if k.endswith("crates/sim/src/lib.rs:nvme_sim::SimController::step"))
    # Admin commands (queue creation and deletion around the run) spin on the worker thread
    # for as long as the emulator takes to answer: setup, never per I/O, but a different
    # count in every run. Their own cost (with what is inlined into them) is left out.
    admin = sum(v for k, v in self_rows.items() if k.endswith(ADMIN_SPIN))
    ours = sum(v for k, v in self_rows.items()
               if re.search(r"(^|/)crates/(core|driver|pool)/src/", k.split(":")[0])
               and not k.endswith(ADMIN_SPIN))
    return total - device - admin, ours

samples = {}
for qd in (1, 128):
    for rep in range(1, reps + 1):
        loop1, ours1 = figures(qd, n, rep)
        loop2, ours2 = figures(qd, 2 * n, rep)
        samples.setdefault(f"qd{qd}_loop", []).append((loop2 - loop1) / n)
        samples.setdefault(f"qd{qd}_driver_pool", []).append((ours2 - ours1) / n)
result = {k: statistics.median(v) for k, v in samples.items()}
for k, v in result.items():
    spread = ", ".join(f"{x:.0f}" for x in samples[k])
    print(f"{k:20s} {v:8.1f} instructions per I/O (median of {spread})")

if mode == "--update":
    with open(budget_path, "w") as f:
        f.write("# Instructions per 4 KiB random read (tests/instr-per-io.sh); CI fails above +5 %.\n")
        for k, v in result.items():
            f.write(f"{k} {round(v)}\n")
    print(f"wrote {budget_path}")
elif mode == "--check":
    budget = {}
    for line in open(budget_path):
        line = line.split("#")[0].split()
        if len(line) == 2:
            budget[line[0]] = float(line[1])
    failed = False
    for k, limit in budget.items():
        got = result.get(k)
        if got is None:
            continue
        verdict = "ok" if got <= limit * tolerance else "OVER BUDGET"
        failed |= verdict != "ok"
        print(f"{k:20s} {got:8.1f} vs budget {limit:6.0f} (+5 % = {limit * tolerance:6.0f}): {verdict}")
    sys.exit(1 if failed else 0)
PY
