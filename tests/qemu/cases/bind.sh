# Binding round trip and what hugepage-setup.sh may and may not touch:
#  - config puts the controller on vfio-pci, creates /dev/vfio/<group> and records it;
#    reset (without PCI_ALLOWED) gives back what config recorded, and the namespaces return;
#  - a controller put on vfio-pci by other means (by hand here; a VM in real life) is left alone
#    by a plain reset, and only given back when PCI_ALLOWED names it;
#  - config never lowers nr_hugepages, raises it when asked for more, and refuses a bad HUGEMEM.
# shellcheck source=/dev/null # the guest path of tests/qemu/lib.sh
. /tests/lib.sh

STATE=/run/nvme-userspace/bound
driver() {
    d=$(readlink "/sys/bus/pci/devices/$NVME_BDF/driver")
    echo "${d##*/}"
}
wait_namespaces() {
    i=0
    # shellcheck disable=SC2012 # counting sysfs names
    until [ "$(ls -d /sys/block/nvme*n* 2>/dev/null | wc -l)" -ge "$NVME_NS_COUNT" ]; do
        i=$((i + 1))
        [ "$i" -lt 100 ] || fail "namespaces did not come back under nvme"
        sleep 0.1
    done
}

echo "== config / reset round trip"
PCI_ALLOWED=$NVME_BDF hugepage-setup.sh config
group=$(readlink "/sys/bus/pci/devices/$NVME_BDF/iommu_group")
group=${group##*/}
ls -l /dev/vfio
[ "$(driver)" = vfio-pci ] || fail "driver is $(driver), expected vfio-pci"
[ -c "/dev/vfio/$group" ] || fail "/dev/vfio/$group missing"
[ ! -e /sys/block/nvme0n1 ] || fail "nvme0n1 still present while bound to vfio-pci"
grep -qxF "$NVME_BDF" "$STATE" || fail "config did not record $NVME_BDF in $STATE"
hugepage-setup.sh status
# No PCI_ALLOWED: gives back what config bound.
hugepage-setup.sh reset
[ "$(driver)" = nvme ] || fail "plain reset did not give back the controller config bound (driver $(driver))"
! grep -qxF "$NVME_BDF" "$STATE" 2>/dev/null || fail "reset left $NVME_BDF in $STATE"
wait_namespaces
hugepage-setup.sh status

echo "== a controller bound to vfio-pci by hand is not ours to give back"
dev=/sys/bus/pci/devices/$NVME_BDF
echo vfio-pci >"$dev/driver_override"
echo "$NVME_BDF" >"$dev/driver/unbind"
echo "$NVME_BDF" >/sys/bus/pci/drivers_probe
[ "$(driver)" = vfio-pci ] || fail "manual bind to vfio-pci failed (driver $(driver))"
hugepage-setup.sh reset | tee /tmp/reset.out
[ "$(driver)" = vfio-pci ] || fail "plain reset gave back a controller it did not bind (driver $(driver))"
# config finds it already on vfio-pci: that does not make it ours either.
PCI_ALLOWED=$NVME_BDF HUGEMEM=$CASE_HUGEMEM hugepage-setup.sh config
hugepage-setup.sh reset
[ "$(driver)" = vfio-pci ] || fail "reset gave back a controller config found already bound (driver $(driver))"
# Named explicitly, it is given back.
PCI_ALLOWED=$NVME_BDF hugepage-setup.sh reset
[ "$(driver)" = nvme ] || fail "PCI_ALLOWED reset did not give the controller back (driver $(driver))"
[ "$(cat "$dev/driver_override")" = "(null)" ] || fail "driver_override left as '$(cat "$dev/driver_override")'"
wait_namespaces

echo "== hugepages: never lowered, raised on demand, bad HUGEMEM refused"
nr=/proc/sys/vm/nr_hugepages
echo 100 >"$nr"
[ "$(cat "$nr")" = 100 ] || fail "could not set up 100 hugepages (got $(cat "$nr"))"
PCI_ALLOWED=$NVME_BDF HUGEMEM=2 hugepage-setup.sh config
[ "$(cat "$nr")" = 100 ] || fail "config with HUGEMEM=2 changed nr_hugepages from 100 to $(cat "$nr")"
PCI_ALLOWED=$NVME_BDF hugepage-setup.sh reset
wait_namespaces
PCI_ALLOWED=$NVME_BDF HUGEMEM=300 hugepage-setup.sh config
[ "$(cat "$nr")" -ge 150 ] || fail "config with HUGEMEM=300 left nr_hugepages at $(cat "$nr"), expected >= 150"
PCI_ALLOWED=$NVME_BDF hugepage-setup.sh reset
wait_namespaces
before=$(cat "$nr")
for bad in abc 0 -5 1.5 256M 012 " 64" 99999999999; do
    expect_fail "HUGEMEM" env PCI_ALLOWED="$NVME_BDF" HUGEMEM="$bad" hugepage-setup.sh config
    [ "$(driver)" = nvme ] || fail "HUGEMEM='$bad' was refused but the controller moved to $(driver)"
done
[ "$(cat "$nr")" = "$before" ] || fail "a refused config changed nr_hugepages from $before to $(cat "$nr")"
