# Namespaces with metadata formats must be refused cleanly, without harming the plain ones.
# Run with: --ns 512:16M --ns 512:16M:ms=8,mset=1 --ns 4096:16M:ms=16,mset=0
# (namespace 2: 8 bytes of metadata inline after each block (extended LBA); namespace 3: 16 bytes
# in a separate buffer). nvme-dd reading or writing namespace 2 or 3 must fail with an error that
# says "metadata" and names the namespace (no panic), and namespace 1 must still round-trip.
# shellcheck source=/dev/null # the guest path of tests/qemu/lib.sh
. /tests/lib.sh

[ "$NVME_NS_COUNT" -ge 3 ] || fail "needs 3 namespaces (see the header of this case), got $NVME_NS_COUNT"

roundtrip() {
    dd if=/dev/urandom of=/tmp/w bs=4096 count=1 2>/dev/null
    rm -f /tmp/r
    nvme-dd --device "$NVME_BDF" if=/tmp/w of=nvme:1 bs=4096 count=1 seek="$1" ||
        fail "nvme-dd could not write namespace 1 ($2)"
    nvme-dd --device "$NVME_BDF" if=nvme:1 of=/tmp/r bs=4096 count=1 skip="$1" ||
        fail "nvme-dd could not read namespace 1 ($2)"
    cmp /tmp/w /tmp/r || fail "namespace 1 read back differs from what was written ($2)"
    echo "ok: namespace 1 round trip ($2)"
}

# refused NSID ARGS...: nvme-dd must fail, say "metadata", name the namespace and not panic.
refused() {
    ns=$1
    shift
    expect_fail "metadata" nvme-dd --device "$NVME_BDF" "$@"
    if grep -qi "panicked" /tmp/expect.err /tmp/expect.out; then
        fail "nvme-dd $* panicked"
    fi
    grep -Eiq "(namespace|nsid|ns)[ :=#]*$ns([^0-9]|\$)" /tmp/expect.err ||
        fail "the error of 'nvme-dd $*' does not name namespace $ns"
}

bind_vfio
roundtrip 3 "before"
dd if=/dev/urandom of=/tmp/w bs=4096 count=1 2>/dev/null
for ns in 2 3; do
    refused "$ns" if="nvme:$ns" of=/tmp/x bs=4096 count=1
    refused "$ns" if=/tmp/w of="nvme:$ns" bs=4096 count=1
done
roundtrip 5 "after the refusals"

# nvme-identify lists the refused namespaces with the reason.
nvme-identify "$NVME_BDF" >/tmp/id.out || fail "nvme-identify failed"
for ns in 2 3; do
    grep -A1 "^Namespace $ns (not usable by this driver)" /tmp/id.out | grep -q "metadata" ||
        fail "nvme-identify does not show namespace $ns as unusable because of its metadata"
done
echo "ok: nvme-identify lists namespaces 2 and 3 as unusable (metadata)"
