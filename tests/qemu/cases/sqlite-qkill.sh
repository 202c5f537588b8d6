# SQLite through our VFS while the host kills QEMU itself (issue 22 item 2; run by
# tests/sqlite-qkill.sh, one boot per round, on named images that outlive the boots).
#
#   QKILL_CHECK=MODE:NSID:ACKED,...  first check the commit log qkill-MODE.db on namespace NSID:
#                                    integrity_check ok, exactly the state after one commit,
#                                    and every commit up to ACKED (the last the host saw
#                                    acknowledged before it killed QEMU) present
#   QKILL_RUN=MODE:NSID              then run that commit log (journal mode MODE, synchronous
#                                    FULL) until the host kills QEMU; nvme-sqlite prints
#                                    "acked N" after each COMMIT returned
#   QKILL_FORMAT=1                   format namespace NSID of QKILL_RUN first (its first round)
#   NVME_SQLITE                      the nvme-sqlite binary (default nvme-sqlite; the host gives
#                                    a deliberately broken build to show the case can fail)
# shellcheck source=/dev/null # the guest path of tests/qemu/lib.sh
. /tests/lib.sh

SQ=${NVME_SQLITE:-nvme-sqlite}
bind_vfio
for item in $(echo "${QKILL_CHECK:-}" | tr , ' '); do
    mode=${item%%:*}
    rest=${item#*:}
    nsid=${rest%%:*}
    acked=${rest#*:}
    if ! "$SQ" --device "$NVME_BDF" --nsid "$nsid" --db "qkill-$mode.db" \
        --check-commits "$acked" >/tmp/qk.out 2>&1; then
        cat /tmp/qk.out
        echo "@@QKILL check mode=$mode nsid=$nsid acked=$acked result=FAIL"
        fail "the $mode commit log on namespace $nsid after the kill (acknowledged: $acked)"
    fi
    cat /tmp/qk.out
    found=$(sed -n 's/^commits: \([0-9]*\) .*/\1/p' /tmp/qk.out)
    echo "@@QKILL check mode=$mode nsid=$nsid acked=$acked found=$found result=ok"
done
if [ -n "${QKILL_RUN:-}" ]; then
    mode=${QKILL_RUN%%:*}
    nsid=${QKILL_RUN#*:}
    fmt=""
    [ "${QKILL_FORMAT:-0}" != 1 ] || fmt=--format
    echo "@@QKILL run mode=$mode nsid=$nsid $fmt"
    # In the foreground, straight to the console: each "acked N" line leaves at once.
    # shellcheck disable=SC2086 # $fmt is empty or one word
    "$SQ" --device "$NVME_BDF" --nsid "$nsid" --db "qkill-$mode.db" --journal-mode "$mode" \
        $fmt --commits 1000000000
    fail "the commit log ended before the host killed QEMU"
fi
