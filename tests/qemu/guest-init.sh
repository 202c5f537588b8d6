#!/bin/sh
# /init of the test guest (busybox sh). Prepares the system, runs each case with `sh -e`,
# prints one "@@CASE <name> PASS|FAIL rc=N" line per case and "@@DONE" at the end, then reports
# the overall result through isa-debug-exit and powers off.
#
# Environment exported to the cases:
#   NVME_BDF          PCI address of QEMU's NVMe controller (vendor:device 1b36:0010)
#   NVME_NS_COUNT     number of namespaces (attached at boot)
#   NVME_NS_LAYOUT    "nsid:lba_bytes:size_bytes ..." as configured on the host
#   NVME_NS<NSID>_LBA, NVME_NS<NSID>_BYTES   the same per namespace (nsids may have gaps)
#   NVME_SECTORS      size of namespace 1 in 512-byte sectors
#   NVME_MDTS, NVME_QPAIRS             controller settings
#   NVME2_BDF, NVME2_NS_COUNT, NVME2_NS_LAYOUT, NVME2_NS<NSID>_LBA, NVME2_NS<NSID>_BYTES
#                     the second controller (run.sh --ctrl2-ns or --subsys), when there is one
#   NVME_SUBSYS       1 when both controllers are in one NVMe subsystem (run.sh --subsys), else 0;
#                     NVME_SUBSYS_NQN its NQN; NVME_NS_DETACHED the "nsid:lba:bytes" of the
#                     namespaces attached to no controller at boot (not in NVME_NS_LAYOUT/COUNT)
# Each case starts with the controller bound to the kernel nvme driver, and the second
# controller (if any) bound to vfio-pci, so the kernel sees the first controller's namespaces only.

export PATH=/bin:/sbin:/usr/local/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /tmp
mkdir -p /dev/hugepages && mount -t hugetlbfs nodev /dev/hugepages
echo 1 >/proc/sys/kernel/printk 2>/dev/null # keep kernel chatter off the console

. /etc/harness.conf

# Writes one byte to the isa-debug-exit port; QEMU exits with status (byte << 1) | 1.
debug_exit() {
    printf "\\$(printf '%03o' "$1")" | dd of=/dev/port bs=1 seek="$DEBUG_EXIT_PORT" count=1 2>/dev/null
}

finish() {
    echo "@@DONE pass=$PASSED fail=$FAILED"
    sync
    if [ "$FAILED" = 0 ]; then debug_exit 0; else debug_exit 1; fi
    poweroff -f
}

PASSED=0
FAILED=0

for m in $(cat /etc/modules); do
    modprobe "$m" || echo "@@WARN modprobe $m failed"
done
echo "$GUEST_HUGEPAGES" >/proc/sys/vm/nr_hugepages

# Prints the QEMU NVMe functions, one a line, in PCI address order (the order of their -device
# options: the first is run.sh's nvme0).
find_nvmes() {
    for d in /sys/bus/pci/devices/*; do
        id="$(sed 's/^0x//' "$d/vendor"):$(sed 's/^0x//' "$d/device")"
        [ "$id" != "$QEMU_NVME_ID" ] || echo "${d##*/}"
    done
}
find_nvme() {
    find_nvmes | sed -n "${1}p" | grep .
}
NVME_BDF=$(find_nvme 1) || {
    echo "@@ERROR no PCI function $QEMU_NVME_ID (QEMU NVMe) in the guest"
    FAILED=1
    finish
}
NVME2_BDF=""
if [ "${NVME2_NS_COUNT:-0}" -gt 0 ]; then
    NVME2_BDF=$(find_nvme 2) || {
        echo "@@ERROR no second PCI function $QEMU_NVME_ID (QEMU NVMe) in the guest"
        FAILED=1
        finish
    }
    for ns in $NVME2_NS_LAYOUT; do
        k=${ns%%:*}
        rest=${ns#*:}
        eval "export NVME2_NS${k}_LBA=${rest%%:*} NVME2_NS${k}_BYTES=${rest#*:}"
    done
fi
export NVME_BDF NVME_NS_COUNT NVME_NS_LAYOUT NVME_MDTS NVME_QPAIRS NVME2_BDF NVME2_NS_COUNT NVME2_NS_LAYOUT
export NVME_SUBSYS NVME_SUBSYS_NQN NVME_NS_DETACHED
for ns in $NVME_NS_LAYOUT; do
    k=${ns%%:*}
    rest=${ns#*:}
    eval "export NVME_NS${k}_LBA=${rest%%:*} NVME_NS${k}_BYTES=${rest#*:}"
done
NVME_SECTORS=$((NVME_NS1_BYTES / 512))
export NVME_SECTORS

# Waits (up to ~10 s) until the kernel driver has created all namespace block devices.
wait_kernel_namespaces() {
    i=0
    while [ "$i" -lt 100 ]; do
        n=$(ls -d /sys/block/nvme*n* 2>/dev/null | wc -l)
        [ "$n" -ge "$NVME_NS_COUNT" ] && return 0
        sleep 0.1
        i=$((i + 1))
    done
    return 1
}

# Puts the controller back on the kernel nvme driver if a case left it elsewhere, and the second
# controller (if any) on vfio-pci.
restore_kernel_driver() {
    if [ -n "$NVME2_BDF" ]; then
        drv=$(readlink "/sys/bus/pci/devices/$NVME2_BDF/driver" 2>/dev/null)
        if [ "${drv##*/}" != vfio-pci ]; then
            PCI_ALLOWED=$NVME2_BDF HUGEMEM=2 hugepage-setup.sh config >/dev/null ||
                echo "@@WARN binding the second controller to vfio-pci failed"
        fi
    fi
    drv=$(readlink "/sys/bus/pci/devices/$NVME_BDF/driver" 2>/dev/null)
    if [ "${drv##*/}" != nvme ]; then
        PCI_ALLOWED=$NVME_BDF hugepage-setup.sh reset >/dev/null || echo "@@WARN reset failed"
    fi
    wait_kernel_namespaces || echo "@@WARN namespaces did not appear under the nvme driver"
}

echo "@@GUEST up: kernel $(uname -r), NVMe at $NVME_BDF, namespaces: $NVME_NS_LAYOUT${NVME2_BDF:+; second NVMe at $NVME2_BDF, namespaces: $NVME2_NS_LAYOUT}"
restore_kernel_driver

for c in $CASES; do
    echo "@@CASE-BEGIN $c"
    t0=$(date +%s)
    (cd /tmp && timeout "$CASE_TIMEOUT" sh -e "/tests/cases/$c")
    rc=$?
    t1=$(date +%s)
    if [ "$rc" = 0 ]; then
        echo "@@CASE $c PASS ($((t1 - t0))s)"
        PASSED=$((PASSED + 1))
    else
        [ "$rc" = 143 ] && echo "@@WARN $c killed after ${CASE_TIMEOUT}s (--case-timeout)"
        echo "@@CASE $c FAIL rc=$rc ($((t1 - t0))s)"
        FAILED=$((FAILED + 1))
    fi
    restore_kernel_driver
done
finish
