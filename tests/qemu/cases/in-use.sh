# hugepage-setup.sh must refuse a controller whose namespaces are in use: active swap, a mounted
# filesystem, a loop device over it, a process that has it open, an exclusive opener (what ZFS,
# btrfs and dm/md do); exit non-zero, say why, and leave it on the kernel nvme driver. Without
# PCI_ALLOWED, a controller holding swap or /boot is refused as a system disk.
# shellcheck source=/dev/null # the guest path of tests/qemu/lib.sh
. /tests/lib.sh

driver() {
    d=$(readlink "/sys/bus/pci/devices/$NVME_BDF/driver")
    echo "${d##*/}"
}

# refused WHY [PCI_ALLOWED]: config must fail, mention "in use" and WHY (';'-separated texts),
# and not move the controller. PCI_ALLOWED defaults to the test controller; pass "" for none.
refused() {
    expect_fail "in use;$1" env PCI_ALLOWED="${2-$NVME_BDF}" HUGEMEM="$CASE_HUGEMEM" hugepage-setup.sh config
    [ "$(driver)" = nvme ] || fail "controller moved to '$(driver)' although it is in use"
}

ns1=$(ns_blockdev 1)
ns2=$(ns_blockdev 2)

echo "== swap"
mkswap "$ns1" >/dev/null
swapon "$ns1"
refused "active swap;opened exclusively"
refused "running system;swap;never bound" ""
swapoff "$ns1"

echo "== mounted filesystem, also as /boot"
modprobe crc32c_generic
modprobe ext4
# The fs block size must be at least the 4 KiB LBA size of this namespace.
mke2fs -q -b 4096 "$ns2" >/dev/null
mkdir -p /mnt/ns2
mount -t ext2 "$ns2" /mnt/ns2
refused "mounted"
umount /mnt/ns2
mkdir -p /boot
mount -t ext2 "$ns2" /boot
refused "mounted"
refused "running system;/boot" ""
umount /boot

echo "== loop device over a namespace"
modprobe loop
losetup /dev/loop0 "$ns1"
refused "loop0"
losetup -d /dev/loop0

echo "== a process has the namespace open (a VM disk, dd, ...)"
# shellcheck disable=SC2217 # sleep only keeps the descriptor open
sleep 600 <"$ns1" &
opener=$!
sleep 0.2
refused "open in process $opener"
kill "$opener"
wait "$opener" || true

echo "== an exclusive opener (what ZFS, btrfs and dm/md do)"
blkexcl --hold "$ns2" &
holder=$!
sleep 0.5
blkexcl "$ns2" && fail "blkexcl says $ns2 is free while blkexcl --hold has it"
refused "opened exclusively"
kill "$holder"
wait "$holder" || true

# Free again: now it binds, also without PCI_ALLOWED (the only controller in the guest).
blkexcl "$ns1" "$ns2" || fail "blkexcl says a namespace is busy after all users are gone"
HUGEMEM=$CASE_HUGEMEM hugepage-setup.sh config
[ "$(driver)" = vfio-pci ] || fail "controller not on vfio-pci after the disks were released"
