# Binding round trip: hugepage-setup.sh config puts the controller on vfio-pci and creates
# /dev/vfio/<group>; reset gives it back to the kernel nvme driver and its namespaces return.
export PCI_ALLOWED=$NVME_BDF

hugepage-setup.sh config
group=$(readlink "/sys/bus/pci/devices/$NVME_BDF/iommu_group")
group=${group##*/}
driver=$(readlink "/sys/bus/pci/devices/$NVME_BDF/driver")
ls -l /dev/vfio
[ "${driver##*/}" = vfio-pci ] || { echo "driver is ${driver##*/}, expected vfio-pci"; exit 1; }
[ -c "/dev/vfio/$group" ] || { echo "/dev/vfio/$group missing"; exit 1; }
[ ! -e /sys/block/nvme0n1 ] || { echo "nvme0n1 still present while bound to vfio-pci"; exit 1; }
hugepage-setup.sh status

hugepage-setup.sh reset
i=0
until [ "$(ls -d /sys/block/nvme*n* 2>/dev/null | wc -l)" -ge "$NVME_NS_COUNT" ]; do
    i=$((i + 1))
    [ "$i" -lt 100 ] || { echo "namespaces did not come back under nvme"; exit 1; }
    sleep 0.1
done
hugepage-setup.sh status
