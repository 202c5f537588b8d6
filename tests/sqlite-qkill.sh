#!/usr/bin/env bash
# SQLite on our VFS survives QEMU itself being killed (issue 22 item 2; docs/sqlite.md,
# "QEMU killed").
#
#   tests/sqlite-qkill.sh [run.sh options, e.g. --no-build]
#
# Two namespaces on named image files that outlive the boots (target/qkill/, made fresh at
# the start), each with its volatile write cache on: 1 (4 KiB blocks) holds a WAL commit log,
# 2 (512 B blocks) a DELETE one (tests/qemu/cases/sqlite-qkill.sh; nvme-sqlite --commits,
# synchronous=FULL, one row per commit). Each round is one boot: the guest checks the logs
# killed in earlier rounds, then runs one log, printing "acked N" after each COMMIT returned;
# the host sends SIGKILL to QEMU at a seeded random moment after a seeded number of those
# lines (run.sh --kill-after) and takes the last "acked N" in the console log as acknowledged.
# A last boot checks everything: integrity_check ok, exactly the state after one commit, and
# every acknowledged commit there.
#
# Environment:
#   QKILL_SEED=N       the seed of the kill points (default: from the clock; printed)
#   QKILL_MODES="..."  the journal mode killed in each round (default "wal delete")
#   QKILL_BROKEN=FEATURE  run a build of nvme-sqlite with this test-only feature of the VFS
#                      (broken-batch-early-apply, broken-skip-flush) to see whether the case
#                      catches it (docs/sqlite.md says what a kill of QEMU can catch)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
D=$ROOT/target/qkill
SEED=${QKILL_SEED:-$(date +%s)}
read -r -a MODES <<<"${QKILL_MODES:-wal delete}"
# The number of acknowledged commits before the kill, and the largest delay after it (ms).
MIN_ACKS=15
SPREAD_ACKS=60
MAX_DELAY_MS=1500
RUN_OPTS=("$@")

nsid_of() {
    case $1 in
    wal) echo 1 ;;
    delete) echo 2 ;;
    *) echo "sqlite-qkill.sh: mode '$1' is not wal or delete" >&2; exit 2 ;;
    esac
}

rm -rf "$D"
mkdir -p "$D"
NS=(--ns "4096:64M:image=$D/ns1.img:write-cache=on" --ns "512:64M:image=$D/ns2.img:write-cache=on")
EXTRA=()
if [ -n "${QKILL_BROKEN:-}" ]; then
    # The tool alone with the broken VFS, in run.sh's guest target directory (the feature
    # gives its crates their own artifacts), copied out; then the normal build again, so the
    # guest's own nvme-sqlite stays the real one.
    echo "sqlite-qkill: building nvme-sqlite with nvme-sqlite-vfs/$QKILL_BROKEN"
    out=$ROOT/target/guest/x86_64-unknown-linux-gnu/release
    for features in "nvme-sqlite-vfs/$QKILL_BROKEN" ""; do
        RUSTFLAGS='-C target-feature=+crt-static' CARGO_TARGET_DIR=$ROOT/target/guest \
            cargo build --release --target x86_64-unknown-linux-gnu -p nvme-sqlite \
            ${features:+--features "$features"}
        [ -z "$features" ] || cp "$out/nvme-sqlite" "$D/nvme-sqlite-broken"
    done
    export GUEST_EXTRA_BINS="${GUEST_EXTRA_BINS:-} nvme-sqlite-broken=$D/nvme-sqlite-broken"
    EXTRA=(--guest-env NVME_SQLITE=nvme-sqlite-broken)
fi

RANDOM=$SEED
echo "sqlite-qkill: seed $SEED, kill rounds: ${MODES[*]}"
declare -A ACKED=()
SUMMARY=()
boot() {
    local round=$1 run=$2 check="" m
    for m in "${!ACKED[@]}"; do check="$check,$m:$(nsid_of "$m"):${ACKED[$m]}"; done
    check=${check#,}
    local args=(--timeout 420 --case-timeout 360 --log "$D/boot$round.log"
        "${NS[@]}" ${EXTRA[@]+"${EXTRA[@]}"} ${RUN_OPTS[@]+"${RUN_OPTS[@]}"})
    [ -z "$check" ] || args+=(--guest-env "QKILL_CHECK=$check")
    if [ -n "$run" ]; then
        local n=$((MIN_ACKS + RANDOM % SPREAD_ACKS)) kseed=$RANDOM
        args+=(--guest-env "QKILL_RUN=$run:$(nsid_of "$run")" --kill-after "$n:$kseed:$MAX_DELAY_MS")
        [ -n "${ACKED[$run]:-}" ] || args+=(--guest-env QKILL_FORMAT=1)
        echo "==== sqlite-qkill round $round: check '${check:-nothing}', run $run, kill after $n acknowledged commits (+0..${MAX_DELAY_MS} ms, seed $kseed)"
    else
        echo "==== sqlite-qkill round $round: check '$check'"
    fi
    local rc
    set +e
    tests/qemu/run.sh "${args[@]}" sqlite-qkill.sh 2>&1 | tee "$D/run$round.out"
    rc=${PIPESTATUS[0]}
    set -e
    grep -a '^@@QKILL check' "$D/boot$round.log" | sed 's/^@@QKILL /  /' || true
    [ "$rc" = 0 ] || { echo "sqlite-qkill: round $round FAILED (log: $D/boot$round.log)"; return 1; }
    if [ -n "$run" ]; then
        local a
        a=$(grep -a '^acked [0-9][0-9]*$' "$D/boot$round.log" | awk '{ if ($2 > m) m = $2 } END { print m + 0 }')
        [ "$a" -gt 0 ] || { echo "sqlite-qkill: round $round: no acknowledged commit"; return 1; }
        SUMMARY+=("round $round: $run killed $(sed -n 's/.*QEMU killed (SIGKILL) \([0-9]*\) ms after acknowledged commit line \([0-9]*\).*/\1 ms after line \2/p' "$D/run$round.out" | head -1), last acknowledged $a")
        ACKED[$run]=$a
    fi
}

r=0
for mode in "${MODES[@]}"; do
    r=$((r + 1))
    boot "$r" "$mode" || exit 1
    # Only the first boot builds (when not given --no-build).
    RUN_OPTS+=(--no-build)
done
boot $((r + 1)) "" || exit 1
echo "==== sqlite-qkill: PASS (seed $SEED)"
printf '  %s\n' "${SUMMARY[@]}"
for f in "$D"/boot*.log; do
    grep -a '^@@QKILL check' "$f" | sed "s|^@@QKILL |  $(basename "$f" .log): |" || true
done
