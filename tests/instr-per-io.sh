#!/usr/bin/env bash
# Per-I/O instruction count of nvme-perf against the in-process emulator (callgrind), the way
# docs/performance.md measures it: worker thread only, (Ir(2N) - Ir(N)) / N with the remaining
# idle polls priced at IDLE_IR each.
#
#   tests/instr-per-io.sh [QD...]        (default: 1 128)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
IDLE_IR=${IDLE_IR:-109.4}
N=${N:-10000}
QDS=("$@")
[ ${#QDS[@]} -gt 0 ] || QDS=(1 128)
command -v valgrind >/dev/null || { echo "instr-per-io.sh: needs valgrind (apt-get install valgrind)" >&2; exit 2; }
cargo build --release -q -p nvme-perf
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
run() { # qd ios -> "Ir idle_polls"
    local qd=$1 ios=$2
    valgrind --tool=callgrind --separate-threads=yes --callgrind-out-file="$OUT/q$qd-n$ios.%p" \
        target/release/nvme-perf sim -q "$qd" --ios "$ios" --quiet --json --yield-idle \
        >"$OUT/q$qd-n$ios.json" 2>/dev/null
    local ir idle
    ir=$(grep -h '^totals:' "$OUT"/q"$qd"-n"$ios".*-03 | awk '{print $2}')
    idle=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d.get("idle_polls", d.get("stats",{}).get("idle_polls",0)))' "$OUT/q$qd-n$ios.json")
    echo "$ir $idle"
}
for qd in "${QDS[@]}"; do
    read -r ir1 idle1 < <(run "$qd" "$N")
    read -r ir2 idle2 < <(run "$qd" $((2 * N)))
    python3 - "$qd" "$N" "$ir1" "$idle1" "$ir2" "$idle2" "$IDLE_IR" <<'PY'
import sys
qd, n, ir1, idle1, ir2, idle2, idle_ir = sys.argv[1:]
n = int(n); ir1, ir2 = int(ir1), int(ir2); idle1, idle2 = int(idle1), int(idle2)
per = ((ir2 - ir1) - (idle2 - idle1) * float(idle_ir)) / n
print(f"QD {qd}: {per:.0f} instructions per I/O (Ir {ir1} -> {ir2}, idle polls {idle1} -> {idle2})")
PY
done
