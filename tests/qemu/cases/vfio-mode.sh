# The VFIO mode the tools report is the one this boot is for (run.sh --vfio-mode sets
# EXPECT_VFIO_MODE and NVME_VFIO_MODE), and the mode's own rules hold:
#   type1:   /dev/vfio/<group>; iommufd refused with the reason when the kernel lacks it
#   iommufd: the device cdev and /dev/iommu exist; forcing type1 on the same kernel works too
#   noiommu: hugepage-setup.sh, asked explicitly (NVME_VFIO_MODE=noiommu on its command line),
#            says it enables the UNSAFE mode; /dev/vfio/noiommu-<group>; the tools warn exactly
#            once; without NVME_VFIO_MODE=noiommu they refuse the device; reset sets
#            enable_unsafe_noiommu_mode back to what it was before config
# Without EXPECT_VFIO_MODE (a stock-kernel boot) the expectation is the automatic choice:
# iommufd when the cdev and /dev/iommu exist, else type1.
# shellcheck source=/dev/null # the guest path of tests/qemu/lib.sh
. /tests/lib.sh

noiommu_param=/sys/module/vfio/parameters/enable_unsafe_noiommu_mode
param_before=$(cat "$noiommu_param" 2>/dev/null || echo absent)
# hugepage-setup.sh enables the unsafe no-IOMMU mode only when asked (and only without an
# IOMMU): a no-IOMMU boot asks on the command line, not just through the boot's environment.
if [ "${EXPECT_VFIO_MODE:-}" = noiommu ]; then
    out=$(NVME_VFIO_MODE=noiommu PCI_ALLOWED=$NVME_BDF HUGEMEM=$CASE_HUGEMEM hugepage-setup.sh config 2>&1) ||
        fail "hugepage-setup.sh config (NVME_VFIO_MODE=noiommu) failed: $out"
else
    out=$(PCI_ALLOWED=$NVME_BDF HUGEMEM=$CASE_HUGEMEM hugepage-setup.sh config 2>&1) ||
        fail "hugepage-setup.sh config failed: $out"
fi
echo "$out"
group=$(readlink "/sys/bus/pci/devices/$NVME_BDF/iommu_group")
group=${group##*/}
cdev=""
for c in "/sys/bus/pci/devices/$NVME_BDF"/vfio-dev/vfio*; do
    # Linux 6.1-6.5 have the sysfs entry but no /dev/vfio/devices/ node (the cdev is 6.6+).
    [ -e "/dev/vfio/devices/${c##*/}" ] && cdev=${c##*/}
done

expected=${EXPECT_VFIO_MODE:-}
if [ -z "$expected" ]; then
    if [ -n "$cdev" ] && [ -e /dev/iommu ]; then expected=iommufd; else expected=type1; fi
fi
echo "group $group, cdev '${cdev:-none}', expecting VFIO mode $expected (NVME_VFIO_MODE=${NVME_VFIO_MODE:-unset})"

# identify_mode [ENV=VALUE...]: runs nvme-identify with info logs; prints the mode it reports.
identify_mode() {
    env RUST_LOG=nvme_vfio=info "$@" nvme-identify "$NVME_BDF" >/tmp/mode.out 2>/tmp/mode.err ||
        { cat /tmp/mode.err; fail "nvme-identify failed ($*)"; }
    sed -n 's/.*opened through VFIO (VFIO mode \([a-z0-9]*\),.*/\1/p' /tmp/mode.err
}

got=$(identify_mode)
[ "$got" = "$expected" ] || { cat /tmp/mode.err; fail "tools report VFIO mode '$got', expected '$expected'"; }
echo "ok: nvme-identify reports VFIO mode $got"
# run.sh gives QEMU's controller serial number deadbeef.
grep -q deadbeef /tmp/mode.out || fail "no identify report (serial deadbeef) in mode $got"

# A wrong mode name is refused with the list of valid ones.
expect_fail "type1|iommufd|noiommu" env NVME_VFIO_MODE=bogus nvme-identify "$NVME_BDF"

case "$expected" in
type1)
    [ -e "/dev/vfio/$group" ] || fail "no /dev/vfio/$group in type1 mode"
    if [ -z "$cdev" ]; then
        expect_fail "CONFIG_VFIO_DEVICE_CDEV" env NVME_VFIO_MODE=iommufd nvme-identify "$NVME_BDF"
    fi
    ;;
iommufd)
    { [ -n "$cdev" ] && [ -c "/dev/vfio/devices/$cdev" ]; } || fail "no VFIO device cdev for $NVME_BDF"
    [ -c /dev/iommu ] || fail "no /dev/iommu"
    # The same kernel still offers the container interface: both modes in one boot.
    got=$(identify_mode NVME_VFIO_MODE=type1)
    [ "$got" = type1 ] || fail "NVME_VFIO_MODE=type1 gave mode '$got'"
    echo "ok: type1 works next to iommufd"
    ;;
noiommu)
    echo "$out" | grep -q "UNSAFE no-IOMMU" || fail "hugepage-setup.sh did not say it enables the unsafe no-IOMMU mode"
    [ "$(cat /sys/module/vfio/parameters/enable_unsafe_noiommu_mode)" = Y ] ||
        fail "enable_unsafe_noiommu_mode is not set"
    [ -c "/dev/vfio/noiommu-$group" ] || fail "no /dev/vfio/noiommu-$group"
    hugepage-setup.sh status | grep "^$NVME_BDF .* noiommu-$group " ||
        fail "hugepage-setup.sh status does not show the no-IOMMU group noiommu-$group"
    n=$(grep -c "can read and write ALL memory" /tmp/mode.err || true)
    [ "$n" = 1 ] || { cat /tmp/mode.err; fail "the no-IOMMU warning appeared $n times, want once"; }
    # 16 x 1 MiB buffers in one mapping (8 hugepages) must form one physical range: the pool
    # reserved at boot is one, in some order, and pagemap.rs lays the pages out in physical
    # order. Random data goes to MiB 32..48 of namespace 1 (clear of integrity.sh and hello.sh)
    # and is read back three times: the hugepage pool hands pages out last-freed first, so after
    # one run has freed its pages the next gets them in another order and must reorder them; a
    # wrong physical address would show as different bytes.
    dd if=/dev/urandom of=/tmp/src bs=1048576 count=16 2>/dev/null
    ndd_big() {
        RUST_LOG=nvme_vfio=debug nvme-dd --device "$NVME_BDF" --qd 16 bs=1048576 count=16 "$@" \
            2>/tmp/big.err || { cat /tmp/big.err; fail "nvme-dd $* (16 MiB in 8 hugepages) failed"; }
        if grep "reordered into physical order" /tmp/big.err; then reordered=$((reordered + 1)); fi
    }
    reordered=0
    ndd_big if=/tmp/src of=nvme:1 seek=32
    for run in 1 2 3; do
        rm -f /tmp/big
        ndd_big if=nvme:1 skip=32 of=/tmp/big
        cmp /tmp/src /tmp/big || fail "run $run: 16 MiB read back in no-IOMMU mode differ from what was written"
    done
    echo "ok: 16 MiB written and read back 3 times; $reordered of 4 runs reordered their hugepages"
    rm -f /tmp/big /tmp/src
    # Opting in is explicit: automatic choice (and the other modes) refuse a no-IOMMU group.
    expect_fail "no-IOMMU group;NVME_VFIO_MODE=noiommu" env -u NVME_VFIO_MODE nvme-identify "$NVME_BDF"
    expect_fail "NVME_VFIO_MODE=noiommu" env NVME_VFIO_MODE=iommufd nvme-identify "$NVME_BDF"
    ;;
*) fail "unknown EXPECT_VFIO_MODE '$expected'" ;;
esac
bind_kernel
# reset undoes what config switched on (a no-IOMMU boot) and leaves it alone otherwise.
param_after=$(cat "$noiommu_param" 2>/dev/null || echo absent)
[ "$param_after" = "$param_before" ] ||
    fail "enable_unsafe_noiommu_mode is $param_after after reset, it was $param_before before config"
