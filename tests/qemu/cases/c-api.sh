# The C API from C in the guest: the examples of examples/c, linked statically against
# libnvme_userspace.a (tests/qemu/build-c-guest.sh), on the QEMU controller bound to vfio-pci.
# 1. hello_c (read-only), then qd_loop's write/read-verify loop at QD 128 on namespace 1 (and its
#    Write Zeroes, Deallocate, Flush and Copy checks: QEMU offers Copy).
# 2. Rate: 4 KiB random reads over namespace 1 at QD 128, qd_loop --randread against
#    nvme-perf -w randread -q 128, RUNS rounds of SECS seconds each (the two back to back in a
#    round, which one goes first alternating); prints both medians and the median of the rounds'
#    ratios ("c-api rate: ..."): a pair run seconds apart sees the same host load, two medians
#    over the whole case do not. The target is a ratio within 10 % of 1; the case fails only
#    below MIN_RATIO (default 0.75), as TCG timing on a shared host is noisy.
# shellcheck source=/dev/null # the guest path of tests/qemu/lib.sh
. /tests/lib.sh

RUNS=${C_API_RUNS:-5}
SECS=${C_API_SECS:-2}
MIN_RATIO=${C_API_MIN_RATIO:-0.75}

command -v qd_loop >/dev/null || fail "qd_loop is not in the guest (tests/qemu/build-c-guest.sh failed?)"
bind_vfio

echo "== hello_c (read-only)"
hello_c "$NVME_BDF" | tee /tmp/hello_c.out
grep -q "namespace 1: " /tmp/hello_c.out || fail "hello_c did not list namespace 1"

echo "== qd_loop: write/read-verify at QD 128"
qd_loop "$NVME_BDF" --write 128 4000 | tee /tmp/qd_loop.out
grep -q "qd_loop: QD 128: 4000 writes, 4000 reads verified" /tmp/qd_loop.out ||
    fail "qd_loop did not verify 4000 reads at QD 128"
grep -q "write zeroes, deallocate, flush: OK" /tmp/qd_loop.out || fail "qd_loop: trim/zeroes/flush checks"
grep -q "qd_loop: copy of 2 ranges (16 blocks) to LBA 64: OK" /tmp/qd_loop.out ||
    fail "qd_loop: the Copy through the C API (QEMU offers Copy) did not read back"
grep -q "qd_loop: done" /tmp/qd_loop.out || fail "qd_loop did not finish"

echo "== rate: C qd_loop against nvme-perf, 4 KiB random reads, QD 128, $RUNS x ${SECS}s each"
c_rates="" rust_rates="" ratios=""
rust_rate() {
    nvme-perf "$NVME_BDF" -n 1 -w randread -b 4096 -q 128 -t "$SECS" --quiet --json >/tmp/perf.json 2>/tmp/perf.err ||
        { cat /tmp/perf.err; fail "nvme-perf failed"; }
    grep -q '"errors": *0' /tmp/perf.json || { cat /tmp/perf.json; fail "nvme-perf reported errors"; }
    r=$(sed -n 's/.*"iops": *\([0-9][0-9]*\).*/\1/p' /tmp/perf.json | head -n1)
    [ -n "$r" ] || { cat /tmp/perf.json; fail "no iops in nvme-perf's JSON"; }
}
c_rate() {
    qd_loop "$NVME_BDF" --randread 128 "$SECS" >/tmp/rate.out || fail "qd_loop --randread failed"
    c=$(sed -n 's/^qd_loop: randread QD 128: .*: \([0-9][0-9]*\) IOPS$/\1/p' /tmp/rate.out)
    [ -n "$c" ] || { cat /tmp/rate.out; fail "no rate line from qd_loop"; }
}
i=0
while [ "$i" -lt "$RUNS" ]; do
    i=$((i + 1))
    if [ $((i % 2)) = 1 ]; then rust_rate && c_rate; else c_rate && rust_rate; fi
    q=$(awk -v c="$c" -v r="$r" 'BEGIN { printf "%.3f", c / r }')
    echo "   round $i: nvme-perf $r IOPS, C qd_loop $c IOPS, ratio $q"
    rust_rates="$rust_rates $r" c_rates="$c_rates $c" ratios="$ratios $q"
done
median() { printf '%s\n' "$@" | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
# shellcheck disable=SC2086 # one word per rate
rm=$(median $rust_rates) cm=$(median $c_rates) ratio=$(median $ratios)
echo "c-api rate: C qd_loop median $cm IOPS, nvme-perf median $rm IOPS, median ratio of the rounds $ratio (QD 128, 4 KiB randread, $RUNS x ${SECS}s)"
awk -v x="$ratio" -v m="$MIN_RATIO" 'BEGIN { exit !(x >= m) }' ||
    fail "the C program reached $ratio of nvme-perf's rate (below $MIN_RATIO)"
echo "ok: C API in the guest"
