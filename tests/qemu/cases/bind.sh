# Binding round trip and what hugepage-setup.sh may and may not touch:
#  - config puts the controller on vfio-pci, creates /dev/vfio/<group> and records it;
#    reset (without PCI_ALLOWED) gives back what config recorded, and the namespaces return;
#  - a controller put on vfio-pci by other means (by hand here; a VM in real life) is left alone
#    by a plain reset, and only given back when PCI_ALLOWED names it;
#  - config never lowers nr_hugepages, raises it when asked for more, and refuses a bad HUGEMEM;
#  - with TARGET_USER only the controller's own VFIO nodes change owner: the shared /dev/iommu
#    only with IOMMUFD_USER=1; NVME_VFIO_MODE=noiommu is refused while an IOMMU is present,
#    without touching (or trying to load) vfio's enable_unsafe_noiommu_mode; reset puts back the
#    owner and mode of every node config chowned, also of a controller it leaves on vfio-pci.
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

echo "== TARGET_USER: only the controller's own nodes change hands, and reset gives them back"
user=4242 # TARGET_USER as a numeric uid: the guest has no /etc/passwd
noiommu_param=/sys/module/vfio/parameters/enable_unsafe_noiommu_mode
owner() { stat -c '%u:%g:%a' "$1"; }
# The stock 6.1 kernel has no iommufd (CONFIG_IOMMUFD unset), hence no /dev/iommu: a stand-in
# character device of that name (/dev/null's numbers) shows whether the script touches the node.
standin=""
if [ ! -e /dev/iommu ]; then
    mknod /dev/iommu c 1 3
    chmod 600 /dev/iommu
    standin=1
fi
iommu_before=$(owner /dev/iommu)
param_before=$(cat "$noiommu_param" 2>/dev/null || echo absent)
echo "/dev/iommu ${standin:+(stand-in) }$iommu_before; enable_unsafe_noiommu_mode: $param_before"
unchanged_globals() {
    [ "$(owner /dev/iommu)" = "$iommu_before" ] ||
        fail "$1: /dev/iommu is $(owner /dev/iommu), was $iommu_before"
    [ "$(cat "$noiommu_param" 2>/dev/null || echo absent)" = "$param_before" ] ||
        fail "$1: enable_unsafe_noiommu_mode is $(cat "$noiommu_param"), was $param_before"
}

PCI_ALLOWED=$NVME_BDF TARGET_USER=$user hugepage-setup.sh config
[ "$(driver)" = vfio-pci ] || fail "config with TARGET_USER did not bind (driver $(driver))"
[ "$(owner "/dev/vfio/$group" | cut -d: -f1)" = "$user" ] ||
    fail "/dev/vfio/$group is $(owner "/dev/vfio/$group"), expected owner $user"
for c in "$dev"/vfio-dev/vfio*; do
    n=/dev/vfio/devices/${c##*/}
    [ ! -e "$n" ] || [ "$(owner "$n" | cut -d: -f1)" = "$user" ] || fail "$n is $(owner "$n"), expected owner $user"
done
unchanged_globals "config with TARGET_USER (no IOMMUFD_USER)"
PCI_ALLOWED=$NVME_BDF hugepage-setup.sh reset
[ "$(driver)" = nvme ] || fail "reset did not give the controller back (driver $(driver))"
# The group had only this function: its node went with the unbind (a new one starts as root's).
[ ! -e "/dev/vfio/$group" ] || [ "$(owner "/dev/vfio/$group" | cut -d: -f1)" = 0 ] ||
    fail "after reset /dev/vfio/$group is $(owner "/dev/vfio/$group")"
unchanged_globals "reset"
wait_namespaces

echo "== NVME_VFIO_MODE=noiommu with an IOMMU present: refused, nothing changed or tried"
# The script must not even try: on this kernel the parameter does not exist, so the attempt (load
# vfio with enable_unsafe_noiommu_mode=1, then look for the parameter) is all there is to see.
# With vfio unloaded first, an attempt shows as a loaded vfio module; busybox sh runs its own
# modprobe applet whatever PATH says, so a logging stand-in for modprobe would see nothing.
vfio_unloaded=""
for m in vfio_pci vfio_pci_core vfio_iommu_type1 vfio; do
    rmmod "$m" 2>/dev/null || true
done
if [ ! -d /sys/module/vfio ]; then
    vfio_unloaded=1
else
    echo "vfio stays loaded (built in or in use); only the messages show whether the script tried"
fi
expect_fail "has an IOMMU;not enabling it" env NVME_VFIO_MODE=noiommu PCI_ALLOWED="$NVME_BDF" \
    TARGET_USER=$user hugepage-setup.sh config
! grep -i "enable_unsafe_noiommu_mode parameter" /tmp/expect.err ||
    fail "the refused no-IOMMU config went looking for the parameter"
if [ -n "$vfio_unloaded" ]; then
    [ ! -d /sys/module/vfio ] || fail "the refused no-IOMMU config loaded vfio (it tried to enable the unsafe mode)"
fi
for m in vfio vfio_iommu_type1 vfio_pci; do
    [ -d "/sys/module/$m" ] || modprobe "$m"
done
[ "$(driver)" = nvme ] || fail "the refused no-IOMMU config moved the controller to $(driver)"
unchanged_globals "refused NVME_VFIO_MODE=noiommu config"

echo "== a node that outlives the reset: a controller config found on vfio-pci and leaves there"
echo vfio-pci >"$dev/driver_override"
echo "$NVME_BDF" >"$dev/driver/unbind"
echo "$NVME_BDF" >/sys/bus/pci/drivers_probe
[ "$(driver)" = vfio-pci ] || fail "manual bind to vfio-pci failed (driver $(driver))"
node_before=$(owner "/dev/vfio/$group")
PCI_ALLOWED=$NVME_BDF TARGET_USER=$user hugepage-setup.sh config
[ "$(owner "/dev/vfio/$group" | cut -d: -f1)" = "$user" ] ||
    fail "config did not give /dev/vfio/$group to $user ($(owner "/dev/vfio/$group"))"
hugepage-setup.sh reset
[ "$(driver)" = vfio-pci ] || fail "plain reset gave back a controller config did not bind (driver $(driver))"
[ "$(owner "/dev/vfio/$group")" = "$node_before" ] ||
    fail "plain reset left /dev/vfio/$group as $(owner "/dev/vfio/$group"), it was $node_before before config"
PCI_ALLOWED=$NVME_BDF hugepage-setup.sh reset
[ "$(driver)" = nvme ] || fail "PCI_ALLOWED reset did not give the controller back (driver $(driver))"
wait_namespaces

echo "== IOMMUFD_USER=1: /dev/iommu changes hands only when asked, and reset gives it back"
expect_fail "TARGET_USER" env IOMMUFD_USER=1 PCI_ALLOWED="$NVME_BDF" hugepage-setup.sh config
[ "$(driver)" = nvme ] || fail "the refused IOMMUFD_USER config moved the controller to $(driver)"
PCI_ALLOWED=$NVME_BDF TARGET_USER=$user IOMMUFD_USER=1 hugepage-setup.sh config
[ "$(owner /dev/iommu | cut -d: -f1)" = "$user" ] || fail "IOMMUFD_USER=1 left /dev/iommu as $(owner /dev/iommu)"
PCI_ALLOWED=$NVME_BDF hugepage-setup.sh reset
[ "$(owner /dev/iommu)" = "$iommu_before" ] ||
    fail "reset left /dev/iommu as $(owner /dev/iommu), it was $iommu_before before config"
wait_namespaces

echo "== a hugetlbfs mount config creates for TARGET_USER is given back to its owner by reset"
if ! awk '$3 == "hugetlbfs" { print $2 }' /proc/mounts | grep -qvxF /dev/hugepages; then
    umount /dev/hugepages 2>/dev/null || true
    PCI_ALLOWED=$NVME_BDF TARGET_USER=$user hugepage-setup.sh config
    awk '$2 == "/dev/hugepages" && $3 == "hugetlbfs" { f = 1 } END { exit !f }' /proc/mounts ||
        fail "config did not mount hugetlbfs on /dev/hugepages"
    [ "$(owner /dev/hugepages | cut -d: -f1)" = "$user" ] ||
        fail "the hugetlbfs mount config made is $(owner /dev/hugepages), expected owner $user"
    PCI_ALLOWED=$NVME_BDF hugepage-setup.sh reset
    [ "$(owner /dev/hugepages | cut -d: -f1,2)" = 0:0 ] ||
        fail "reset left the hugetlbfs mount as $(owner /dev/hugepages), it was root's"
    wait_namespaces
else
    echo "skipped: another hugetlbfs mount exists, so config would not mount one"
fi
unchanged_globals "the end"
[ -z "$standin" ] || rm -f /dev/iommu
