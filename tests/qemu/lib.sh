# Helpers for the guest test cases (busybox sh); a case loads them with `. /tests/lib.sh`.
# The cases run under `sh -e`: any failing command outside an if/||/&& ends the case.

# Hugepage memory a case reserves when it binds the controller, in MiB.
CASE_HUGEMEM=${CASE_HUGEMEM:-128}

fail() {
    echo "FAIL: $*" >&2
    exit 1
}

# Binds the test controller to vfio-pci.
bind_vfio() {
    PCI_ALLOWED=$NVME_BDF HUGEMEM=$CASE_HUGEMEM hugepage-setup.sh config
}

# Gives the controller back to the kernel nvme driver and waits (~10 s) for its namespaces.
bind_kernel() {
    PCI_ALLOWED=$NVME_BDF hugepage-setup.sh reset
    i=0
    until [ "$(ls -d /sys/block/nvme*n* 2>/dev/null | wc -l)" -ge "$NVME_NS_COUNT" ]; do
        i=$((i + 1))
        [ "$i" -lt 100 ] || fail "the kernel nvme driver did not create $NVME_NS_COUNT namespaces within 10 s"
        sleep 0.1
    done
}

# Prints /dev/<block device> of namespace NSID under the kernel driver.
ns_blockdev() {
    for b in /sys/block/nvme*n*; do
        if [ "$(cat "$b/nsid")" = "$1" ]; then
            echo "/dev/${b##*/}"
            return 0
        fi
    done
    fail "no kernel block device for nsid $1"
}

# expect_fail "TEXT1;TEXT2" CMD ARGS...: CMD must exit non-zero but not with the Rust panic code
# (101), and its stderr must contain every TEXT (case-insensitive).
expect_fail() {
    texts=$1
    shift
    echo "+ $* (expected to fail)"
    set +e
    "$@" >/tmp/expect.out 2>/tmp/expect.err
    rc=$?
    set -e
    sed 's/^/    stderr: /' /tmp/expect.err
    [ "$rc" != 0 ] || fail "'$*' succeeded but should have failed"
    [ "$rc" != 101 ] || fail "'$*' panicked (exit 101) instead of reporting an error"
    [ "$rc" != 127 ] || fail "'$1' is not installed in the guest"
    old_ifs=$IFS
    IFS=';'
    for t in $texts; do
        grep -qiF -- "$t" /tmp/expect.err || { IFS=$old_ifs; fail "stderr of '$*' does not mention '$t'"; }
    done
    IFS=$old_ifs
    echo "    ok: exit $rc, mentions: $texts"
}
