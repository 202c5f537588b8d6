# hugepage-setup.sh must refuse a controller with active swap or a mounted filesystem on any
# namespace: exit non-zero, say why, and leave it on the kernel nvme driver.
. /tests/lib.sh

driver() {
    d=$(readlink "/sys/bus/pci/devices/$NVME_BDF/driver")
    echo "${d##*/}"
}

# refused WHY: config must fail, mention "in use" and WHY, and not move the controller.
refused() {
    expect_fail "in use;$1" env PCI_ALLOWED="$NVME_BDF" HUGEMEM="$CASE_HUGEMEM" hugepage-setup.sh config
    [ "$(driver)" = nvme ] || fail "controller moved to '$(driver)' although it is in use"
}

ns1=$(ns_blockdev 1)
mkswap "$ns1" >/dev/null
swapon "$ns1"
refused "active swap"
swapoff "$ns1"

ns2=$(ns_blockdev 2)
modprobe crc32c_generic
modprobe ext4
# The fs block size must be at least the 4 KiB LBA size of this namespace.
mke2fs -q -b 4096 "$ns2" >/dev/null
mkdir -p /mnt/ns2
mount -t ext2 "$ns2" /mnt/ns2
refused "mounted"
umount /mnt/ns2

# Free again: now it binds.
bind_vfio
[ "$(driver)" = vfio-pci ] || fail "controller not on vfio-pci after the disks were released"
