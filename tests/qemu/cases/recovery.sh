# Controller resets under a verifying load: nvme-perf resets QEMU's NVMe controller every second
# of a 6 s mixed run on a file-backed namespace (ns 1: 512 B LBAs, 64 MiB); I/Os a reset cuts off
# are resubmitted, and every block read (workload and final pass) must check. Requires exit 0,
# no errors, at least 3 resets and 0 mismatches.
# shellcheck disable=SC1091 # /tests/lib.sh exists in the guest only
. /tests/lib.sh

# number KEY: the first integer value of "KEY" in /tmp/perf.json (busybox has no jq).
number() {
    sed -n "s/.*\"$1\": *\([0-9][0-9]*\).*/\1/p" /tmp/perf.json | head -n1
}

bind_vfio
set -- nvme-perf "$NVME_BDF" -n 1 --verify -w randrw --range-blocks 16384 -t 6 --reset-interval 1
echo "+ $*"
"$@" --json >/tmp/perf.json 2>/tmp/perf.err || {
    cat /tmp/perf.json /tmp/perf.err
    fail "nvme-perf with resets failed"
}
errors=$(number errors)
resets=$(number resets)
retried=$(number retried_ios)
mismatches=$(number mismatches)
verified=$(number blocks_verified)
echo "errors=$errors resets=$resets retried_ios=$retried mismatches=$mismatches blocks_verified=$verified"
[ "$errors" = 0 ] || { cat /tmp/perf.json; fail "I/O errors despite retries"; }
[ "${resets:-0}" -ge 3 ] || { cat /tmp/perf.json; fail "expected >= 3 resets, got ${resets:-none}"; }
[ "$mismatches" = 0 ] || { cat /tmp/perf.json; fail "verify mismatches after resets"; }
[ "${verified:-0}" -gt 0 ] || { cat /tmp/perf.json; fail "nothing was verified"; }
echo "ok: $resets resets, $retried I/Os retried, $verified blocks verified, no mismatch"
