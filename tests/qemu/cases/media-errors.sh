# Media errors: QEMU fails the requests that touch chosen sectors (blkdebug injects EIO), and our
# tools must report the NVMe status of exactly those requests while everything else goes on.
# Run with: --ns 4096:16M:bad=r2048,w4096 --ns 512:16M
# Namespace 1 (4 KiB blocks): reads touching 512-byte sector 2048 (LBA 256) and writes touching
# sector 4096 (LBA 512) fail with EIO, which QEMU's NVMe controller completes as Unrecovered Read
# Error (SCT 2h, SC 81h) and Write Fault (SCT 2h, SC 80h).
# shellcheck source=/dev/null # the guest path of tests/qemu/lib.sh
. /tests/lib.sh

[ "$NVME_NS_COUNT" -ge 2 ] || fail "needs 2 namespaces (see the header of this case), got $NVME_NS_COUNT"

BAD_READ_LBA=256
BAD_WRITE_LBA=512

# no_panic LABEL: the last expect_fail's output holds no Rust panic.
no_panic() {
    if grep -qi "panicked" /tmp/expect.err /tmp/expect.out; then
        fail "$1 panicked"
    fi
}

# roundtrip NSID LBA: writes 4 KiB of random data at block LBA (4 KiB blocks) and reads it back.
roundtrip() {
    dd if=/dev/urandom of=/tmp/w bs=4096 count=4 2>/dev/null
    rm -f /tmp/r
    nvme-dd --device "$NVME_BDF" if=/tmp/w of="nvme:$1" bs=4096 count=4 seek="$2" ||
        fail "nvme-dd could not write namespace $1 at block $2"
    nvme-dd --device "$NVME_BDF" if="nvme:$1" of=/tmp/r bs=4096 count=4 skip="$2" ||
        fail "nvme-dd could not read namespace $1 at block $2"
    cmp /tmp/w /tmp/r || fail "namespace $1 block $2: read back differs from what was written"
    echo "ok: namespace $1 round trip at block $2"
}

# perf_errors WORKLOAD BLOCKS STATUS: nvme-perf with 64 KiB I/Os (16 blocks) over the first BLOCKS
# blocks of namespace 1, the last 16 of which hold a bad LBA: about 1 I/O in BLOCKS/16 fails, so
# even a slow (TCG) run reaches it at once. nvme-perf stops at the first failed I/O (as fio does),
# and must still print its report (JSON) with the errors counted and STATUS as the first error,
# and exit 1.
perf_errors() {
    cmd="nvme-perf $NVME_BDF -n 1 -w $1 -b 65536 -q 4 -t 3 --range-blocks $2 --json"
    echo "+ $cmd (expected to report failed I/Os)"
    set +e
    $cmd >/tmp/perf.json 2>/tmp/perf.err
    rc=$?
    set -e
    [ "$rc" = 1 ] || { cat /tmp/perf.json /tmp/perf.err; fail "nvme-perf $1 exited $rc, not 1 (failed I/Os)"; }
    if grep -qi "panicked" /tmp/perf.err; then
        fail "nvme-perf $1 panicked"
    fi
    errors=$(sed -n 's/.*"errors": *\([0-9][0-9]*\).*/\1/p' /tmp/perf.json | head -n1)
    ios=$(sed -n 's/.*"ios": *\([0-9][0-9]*\).*/\1/p' /tmp/perf.json | head -n1)
    first=$(sed -n 's/.*"first_error": *"\(.*\)".*/\1/p' /tmp/perf.json | head -n1)
    echo "    errors=$errors ios=$ios first_error: $first"
    [ "${errors:-0}" -ge 1 ] || { cat /tmp/perf.json /tmp/perf.err; fail "nvme-perf $1 counted no errors over the bad LBA"; }
    [ -n "$ios" ] || { cat /tmp/perf.json; fail "nvme-perf $1 printed no report"; }
    echo "$first" | grep -qiF "$3" || { cat /tmp/perf.json; fail "nvme-perf $1: first error is not '$3'"; }
    echo "    ok: $errors failed I/O(s) reported, $ios I/Os, first error: $3"
}

bind_vfio

# Reads: the one covering the bad sector fails with the media status; its neighbours do not.
expect_fail "Unrecovered Read Error" nvme-dd --device "$NVME_BDF" if=nvme:1 of=/tmp/x bs=4096 \
    count=8 skip=$((BAD_READ_LBA - 4))
no_panic "nvme-dd reading the bad sector"
expect_fail "Unrecovered Read Error" nvme-dd --device "$NVME_BDF" if=nvme:1 of=/tmp/x bs=4096 \
    count=1 skip=$BAD_READ_LBA
no_panic "nvme-dd reading the bad block"
nvme-dd --device "$NVME_BDF" if=nvme:1 of=/tmp/x bs=4096 count=$BAD_READ_LBA skip=0 ||
    fail "reading blocks 0..$((BAD_READ_LBA - 1)) (before the bad one) failed"
nvme-dd --device "$NVME_BDF" if=nvme:1 of=/tmp/x bs=4096 count=256 skip=$((BAD_READ_LBA + 1)) ||
    fail "reading the 256 blocks after the bad one failed"
echo "ok: reads around the bad block succeed"

# Writes: the one covering the bad sector fails with the media status; reading it does not.
dd if=/dev/urandom of=/tmp/w bs=4096 count=4 2>/dev/null
expect_fail "Write Fault" nvme-dd --device "$NVME_BDF" if=/tmp/w of=nvme:1 bs=4096 count=4 \
    seek=$((BAD_WRITE_LBA - 2))
no_panic "nvme-dd writing the bad sector"
nvme-dd --device "$NVME_BDF" if=nvme:1 of=/tmp/x bs=4096 count=4 skip=$((BAD_WRITE_LBA - 2)) ||
    fail "reading the blocks around the bad write sector failed"
echo "ok: the blocks around the bad write sector read fine"
roundtrip 1 $((BAD_WRITE_LBA + 1))
roundtrip 1 $((BAD_WRITE_LBA - 8))
roundtrip 2 100

# nvme-perf reports the failed I/Os with their status.
perf_errors randread $((BAD_READ_LBA + 16)) "Unrecovered Read Error"
perf_errors randwrite $((BAD_WRITE_LBA + 16)) "Write Fault"

# The controller is still fine afterwards, in a new process.
roundtrip 1 1000
expect_fail "Unrecovered Read Error" nvme-dd --device "$NVME_BDF" if=nvme:1 of=/tmp/x bs=4096 \
    count=1 skip=$BAD_READ_LBA
no_panic "nvme-dd reading the bad block again"
echo "ok: media errors reported on exactly the bad requests"
