# A stalled device (issue 10): namespace 1 sits behind a QEMU throttle filter (run.sh
# --ns ...:throttle). During a verifying write run the host throttles it to 1 IOPS for 12 s,
# far past the 2 s I/O timeout, then releases it. QMP `stop` would freeze the guest's clock
# too; a throttled backend stalls only the device.
#
# Expected: the stalled commands time out, the driver aborts them and (QEMU declines aborts)
# resets the controller; I/Os the reset cuts off are resubmitted; after the release I/O
# resumes; every acknowledged write reads back (0 mismatches, 0 errors).
# shellcheck disable=SC1091 # /tests/lib.sh exists in the guest only
. /tests/lib.sh

number() {
    sed -n "s/.*\"$1\": *\([0-9][0-9]*\).*/\1/p" /tmp/perf.json | head -n1
}

bind_vfio
set -- nvme-perf "$NVME_BDF" -n 1 --verify -w randwrite -q 16 --range-blocks 4096 -t 26 \
    --io-timeout 2 --tolerate-timeouts --json
echo "+ $*"
"$@" >/tmp/perf.json 2>/tmp/perf.err &
pid=$!
sleep 5
kill -0 "$pid" 2>/dev/null || { cat /tmp/perf.json /tmp/perf.err; fail "nvme-perf ended before the stall"; }
echo "@@HOST throttle 1 1"
sleep 12
echo "@@HOST throttle 1 0"
wait "$pid"
rc=$?
grep -c "timed out after" /tmp/perf.err | sed 's/^/timeout messages: /'
grep -E "reset|abort" /tmp/perf.err | tail -n 5
[ "$rc" = 0 ] || { cat /tmp/perf.json; tail -n 20 /tmp/perf.err; fail "nvme-perf exited $rc across the stall"; }
errors=$(number errors)
timed_out=$(number timed_out_ios)
retried=$(number retried_ios)
mismatches=$(number mismatches)
final=$(number blocks_verified_final)
ios=$(number ios)
aborts=$(number aborts_sent)
aborted=$(number aborts_succeeded)
declined=$(number aborts_declined)
resets=$(number timeout_resets)
echo "ios=$ios errors=$errors timed_out_ios=$timed_out retried_ios=$retried mismatches=$mismatches blocks_verified_final=$final"
echo "aborts_sent=$aborts aborts_succeeded=$aborted aborts_declined=$declined timeout_resets=$resets"
[ "$errors" = 0 ] || { cat /tmp/perf.json; fail "I/O errors across the stall"; }
[ "${timed_out:-0}" -gt 0 ] || { cat /tmp/perf.json; fail "the stall caused no timeout: not a stall"; }
[ "${aborts:-0}" -gt 0 ] || { cat /tmp/perf.json; fail "no Abort was sent for the timed-out commands"; }
[ "$mismatches" = 0 ] || { cat /tmp/perf.json; fail "verify mismatches across the stall"; }
[ "${final:-0}" -gt 0 ] || { cat /tmp/perf.json; fail "nothing verified in the final pass"; }
# I/O resumed: the last seconds after the release run at full speed (hundreds of I/Os).
[ "${ios:-0}" -gt 500 ] || { cat /tmp/perf.json; fail "I/O did not resume after the stall (ios=$ios)"; }
echo "ok: $timed_out I/Os timed out ($aborts aborts: $aborted aborted, $declined declined; $resets resets), $retried resubmitted; $final blocks verified, no mismatch"
