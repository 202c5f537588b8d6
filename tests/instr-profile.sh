#!/usr/bin/env bash
# Per-instruction profile of nvme-perf's worker round (the companion of instr-per-io.sh):
# every instruction of `run_worker` (driver code inlined into it included) executed per I/O,
# in address order, with its source line and disassembly.
#
#   tests/instr-profile.sh [QD]          default QD 1; N=10000 I/Os (and 2N)
#   PERF_ARGS="--contexts cache" tests/instr-profile.sh
#
# How: callgrind with --dump-instr=yes counts each instruction; two runs of N and 2N 4 KiB
# random reads (`sim --inline-device`, as instr-per-io.sh), and the difference over N is the
# count per I/O (setup cancels). Only functions of the worker's crates (nvme-perf, driver,
# pool, core) are listed; the last line is their total. The admin commands' wait loops
# around the run (`AdminQueue::execute`) vary with time and are listed too; instr-per-io.sh
# subtracts them, so its figure is a little lower.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
QD=${1:-1}
N=${N:-10000}
PERF_ARGS=${PERF_ARGS:-}
command -v valgrind >/dev/null || {
    echo "instr-profile.sh: needs valgrind (apt-get install valgrind)" >&2
    exit 2
}
cargo build --release -q -p nvme-perf --features emulator
BIN=target/release/nvme-perf
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
for n in "$N" $((2 * N)); do
    # shellcheck disable=SC2086 # PERF_ARGS is split into words on purpose
    valgrind --tool=callgrind --separate-threads=yes --dump-instr=yes --compress-pos=no \
        --compress-strings=no --callgrind-out-file="$OUT/r$n.%p" \
        "$BIN" sim -q "$QD" --ios "$n" --quiet --json --inline-device $PERF_ARGS \
        >/dev/null 2>"$OUT/err$n" || {
        cat "$OUT/err$n" >&2
        exit 1
    }
done
objdump -d --no-show-raw-insn "$BIN" >"$OUT/dis"
python3 - "$OUT" "$N" <<'PY'
import collections, glob, re, sys
out, n = sys.argv[1], int(sys.argv[2])
src = {}
# The worker's own crates (the emulator, and the spec helpers it calls, are not the worker's).
WORKER = ("nvme_perf::", "nvme_driver::", "nvme_pool::", "nvme_core::", "<nvme_driver", "<nvme_perf")

def load(pattern):
    # With one job the worker is the main thread (the first; the emulator's is the second).
    (path,) = glob.glob(pattern)
    counts = collections.Counter()
    fn = fl = fi = obj = None
    skip_next = False
    for line in open(path):
        if line.startswith("fn="):
            fn, fi = line[3:].strip(), None
        elif line.startswith("fl="):
            fl, fi = line[3:].strip(), None
        elif line.startswith(("fi=", "fe=")):
            fi = line[3:].strip()
        elif line.startswith("ob="):
            obj = line[3:].strip()
        elif line.startswith("calls="):
            skip_next = True  # the next cost line is a call's inclusive cost
        else:
            m = re.match(r"(0x[0-9a-f]+) (\d+) (\d+)", line)
            if not m:
                continue
            if skip_next:
                skip_next = False
                continue
            if "nvme-perf" not in (obj or "") or not (fn or "").startswith(WORKER):
                continue
            addr = int(m.group(1), 16)
            counts[addr] += int(m.group(3))
            src[addr] = (fi or fl or "?").split("/")[-1] + ":" + m.group(2)
    return counts

a = load(f"{out}/r{n}.*-01")
b = load(f"{out}/r{2 * n}.*-01")
per_io = {k: (b[k] - a.get(k, 0)) / n for k in b}
dis = {}
for line in open(f"{out}/dis"):
    m = re.match(r"\s*([0-9a-f]+):\s*(.*)", line)
    if m:
        dis[int(m.group(1), 16)] = m.group(2).strip()
total = 0.0
for addr in sorted(per_io):
    v = per_io[addr]
    if v < 0.5:
        continue
    total += v
    print(f"{addr:#x} {v:5.2f} {src[addr]:28.28} {dis.get(addr, '?')[:80]}")
print(f"total {total:.1f} instructions per I/O (functions of nvme-perf, driver, pool and core)")
PY
