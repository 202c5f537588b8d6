#!/bin/sh
# hugepage-setup.sh: prepare a Linux host (or the QEMU test guest) for the userspace NVMe driver.
#
#   config  reserve hugepages, load vfio-pci and bind NVMe controllers to it
#   reset   give the controllers back to the kernel's nvme driver
#   status  list NVMe functions, their drivers, IOMMU groups, namespaces and hugepages
#   help    usage
#
# POSIX sh on purpose: it runs under bash on a host and under busybox ash inside the test guest.
# Binding uses the sysfs driver_override mechanism: write the driver name to
# /sys/bus/pci/devices/<BDF>/driver_override, unbind from the current driver, then ask the PCI
# core to probe again (/sys/bus/pci/drivers_probe), which now only matches the override.

set -u

PROG=hugepage-setup.sh
SYSFS_PCI=/sys/bus/pci
# PCI class code of an NVM Express I/O controller: base class 01h (mass storage),
# subclass 08h (non-volatile memory), programming interface 02h (NVM Express).
NVME_CLASS=0x010802
VFIO_DRIVER=vfio-pci
KERNEL_DRIVER=nvme
HUGEMEM=${HUGEMEM:-256}
PCI_ALLOWED=${PCI_ALLOWED:-}
TARGET_USER=${TARGET_USER:-}
HUGETLBFS_MOUNT=${HUGETLBFS_MOUNT:-/dev/hugepages}
# How long to wait for /dev/vfio/<group> or driver (re)binding to show up, in tenths of a second.
SETTLE_TENTHS=50

usage() {
    cat <<EOF
Usage: $PROG [config|reset|status|help]

  config   Reserve HUGEMEM MiB of hugepages, load vfio-pci and bind NVMe controllers to it.
  reset    Unbind NVMe controllers from vfio-pci and give them back to the kernel nvme driver.
  status   Show NVMe PCI functions (BDF, vendor:device, driver, IOMMU group, namespaces)
           and hugepage totals.
  help     Show this text.

Environment:
  HUGEMEM=MiB          hugepage memory to reserve (default 256)
  PCI_ALLOWED="BDF..." only touch these controllers (space-separated, e.g. "0000:01:00.0");
                       default: every NVMe controller (class $NVME_CLASS)
  TARGET_USER=name     make /dev/vfio/<group> and the hugetlbfs mount usable by this user
                       (that user also needs a memlock limit, see 'ulimit -l')
  HUGETLBFS_MOUNT=dir  where to mount hugetlbfs if none is mounted (default /dev/hugepages)

A controller that has a mounted filesystem, active swap or a holder (dm, md, ...) on any of its
namespaces is never bound: it is reported and skipped.
config and reset need root. VFIO needs an IOMMU: enable VT-d (Intel) or AMD-Vi (AMD) in the
firmware and boot with intel_iommu=on or amd_iommu=on.
EOF
}

info() { echo "$PROG: $*"; }
warn() { echo "$PROG: warning: $*" >&2; }
die() {
    echo "$PROG: error: $*" >&2
    exit 1
}

require_root() {
    if [ "$(id -u)" != 0 ]; then
        die "'$1' must run as root (try: sudo $0 $1)"
    fi
}

# Succeeds when at least one IOMMU group exists, i.e. the kernel runs with an IOMMU enabled.
iommu_enabled() {
    for g in /sys/kernel/iommu_groups/*; do
        [ -e "$g" ] && return 0
    done
    return 1
}

require_iommu() {
    if ! iommu_enabled; then
        die "no IOMMU groups in /sys/kernel/iommu_groups: VFIO needs an IOMMU. Enable VT-d (Intel) or
AMD-Vi (AMD) in the firmware setup and boot Linux with intel_iommu=on (Intel) or amd_iommu=on (AMD)."
    fi
}

# Normalise a BDF to the full domain form (01:00.0 -> 0000:01:00.0), lower case.
normalize_bdf() {
    b=$(echo "$1" | tr 'A-F' 'a-f')
    case "$b" in
    *:*:*.*) echo "$b" ;;
    *:*.*) echo "0000:$b" ;;
    *) echo "$b" ;;
    esac
}

# Basename of a symlink target, or empty when the link does not exist.
link_name() {
    if [ -L "$1" ]; then
        t=$(readlink "$1")
        echo "${t##*/}"
    fi
}

driver_of() { link_name "$SYSFS_PCI/devices/$1/driver"; }
iommu_group_of() { link_name "$SYSFS_PCI/devices/$1/iommu_group"; }

is_nvme_function() {
    [ -r "$SYSFS_PCI/devices/$1/class" ] && [ "$(cat "$SYSFS_PCI/devices/$1/class")" = "$NVME_CLASS" ]
}

# All NVMe-class PCI functions, one BDF per line.
all_nvme_functions() {
    for d in "$SYSFS_PCI"/devices/*; do
        [ -e "$d/class" ] || continue
        bdf=${d##*/}
        is_nvme_function "$bdf" && echo "$bdf"
    done
}

# The functions this invocation may touch: PCI_ALLOWED if set (each must exist and be NVMe),
# otherwise every NVMe function.
selected_functions() {
    if [ -z "$PCI_ALLOWED" ]; then
        all_nvme_functions
        return 0
    fi
    for a in $PCI_ALLOWED; do
        bdf=$(normalize_bdf "$a")
        if [ ! -e "$SYSFS_PCI/devices/$bdf" ]; then
            die "PCI_ALLOWED names $a, but there is no PCI function $bdf (see 'lspci -D' or '$0 status')"
        fi
        if ! is_nvme_function "$bdf"; then
            die "PCI_ALLOWED names $bdf, which is not an NVMe controller (class $(cat "$SYSFS_PCI/devices/$bdf/class"), expected $NVME_CLASS)"
        fi
        echo "$bdf"
    done
}

# Namespace block devices (e.g. nvme0n1) of the controller at BDF, one per line. With native
# NVMe multipath the controller directory holds hidden path devices (nvme0c0n1); the usable
# block device is the head, whose name drops the "c<N>" part.
namespaces_of() {
    for c in "$SYSFS_PCI/devices/$1"/nvme/nvme*; do
        [ -d "$c" ] || continue
        for n in "$c"/nvme*n*; do
            [ -e "$n" ] || continue
            echo "${n##*/}" | sed 's/c[0-9][0-9]*n/n/'
        done
    done | sort -u
}

# Prints why block device $1 (a disk or a partition, under /sys/class/block) is in use;
# prints nothing when it is free.
block_dev_users() {
    dev=$1
    sysdir=/sys/class/block/$dev
    majmin=$(cat "$sysdir/dev" 2>/dev/null)
    if grep -q "^/dev/$dev " /proc/mounts 2>/dev/null; then
        echo "/dev/$dev is mounted"
    elif [ -n "$majmin" ] && [ -r /proc/self/mountinfo ] &&
        awk -v mm="$majmin" '$3 == mm { found = 1 } END { exit !found }' /proc/self/mountinfo; then
        echo "/dev/$dev ($majmin) is mounted"
    fi
    if grep -q "^/dev/$dev[[:space:]]" /proc/swaps 2>/dev/null; then
        echo "/dev/$dev is active swap"
    fi
    for h in "$sysdir"/holders/*; do
        [ -e "$h" ] && echo "/dev/$dev is held by ${h##*/} (device-mapper, md, ...)"
    done
}

# Prints every reason the controller at BDF is in use (all its namespaces and their partitions).
controller_users() {
    for ns in $(namespaces_of "$1"); do
        block_dev_users "$ns"
        for p in /sys/class/block/"$ns"/"$ns"p*; do
            [ -e "$p" ] && block_dev_users "${p##*/}"
        done
    done
}

# Waits up to SETTLE_TENTHS/10 s for a condition (a shell command string) to hold.
wait_for() {
    i=0
    while [ "$i" -lt "$SETTLE_TENTHS" ]; do
        if eval "$1"; then return 0; fi
        sleep 0.1 2>/dev/null || sleep 1
        i=$((i + 1))
    done
    eval "$1"
}

reserve_hugepages() {
    hp_kb=$(awk '/^Hugepagesize:/ { print $2 }' /proc/meminfo)
    if [ -z "$hp_kb" ]; then
        die "this kernel has no hugepage support (no Hugepagesize in /proc/meminfo; CONFIG_HUGETLBFS)"
    fi
    pages=$((HUGEMEM * 1024 / hp_kb))
    node=/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages
    if [ "$hp_kb" = 2048 ] && [ -w "$node" ]; then
        target=$node
    else
        target=/proc/sys/vm/nr_hugepages
    fi
    echo "$pages" >"$target" || die "cannot write $pages to $target"
    got=$(cat "$target")
    if [ "$got" -lt "$pages" ]; then
        warn "asked for $pages hugepages of ${hp_kb} kB (HUGEMEM=$HUGEMEM MiB) but the kernel gave $got;
memory is fragmented or short: free some, lower HUGEMEM, or reserve at boot with hugepages=$pages"
    else
        info "reserved $got hugepages of ${hp_kb} kB ($((got * hp_kb / 1024)) MiB)"
    fi
    if ! awk '$3 == "hugetlbfs" { found = 1 } END { exit !found }' /proc/mounts; then
        if mkdir -p "$HUGETLBFS_MOUNT" && mount -t hugetlbfs nodev "$HUGETLBFS_MOUNT"; then
            info "mounted hugetlbfs on $HUGETLBFS_MOUNT"
        else
            warn "could not mount hugetlbfs on $HUGETLBFS_MOUNT (anonymous MAP_HUGETLB still works)"
        fi
    fi
    if [ -n "$TARGET_USER" ]; then
        awk '$3 == "hugetlbfs" { print $2 }' /proc/mounts | while read -r m; do
            chown "$TARGET_USER" "$m" || warn "cannot chown $m to $TARGET_USER"
        done
    fi
}

load_vfio() {
    if [ -d "$SYSFS_PCI/drivers/$VFIO_DRIVER" ]; then
        return 0
    fi
    modprobe "$VFIO_DRIVER" 2>/dev/null
    if [ ! -d "$SYSFS_PCI/drivers/$VFIO_DRIVER" ]; then
        die "the $VFIO_DRIVER driver is not available: 'modprobe $VFIO_DRIVER' failed and it is not built in
(install the kernel's extra modules, e.g. linux-modules-extra-\$(uname -r) on Ubuntu)"
    fi
}

# Binds one function to vfio-pci. Returns 0 on success, 2 when skipped because it is in use.
bind_one() {
    bdf=$1
    dev=$SYSFS_PCI/devices/$bdf
    drv=$(driver_of "$bdf")
    ids="$(sed "s/^0x//" "$dev/vendor"):$(sed "s/^0x//" "$dev/device")"
    if [ "$drv" = "$VFIO_DRIVER" ]; then
        info "$bdf ($ids) already bound to $VFIO_DRIVER"
    else
        users=$(controller_users "$bdf")
        if [ -n "$users" ]; then
            echo "$PROG: $bdf ($ids) is in use, not binding it:" >&2
            echo "$users" | sed 's/^/    /' >&2
            echo "    unmount it / swapoff it / stop its users first, or leave it out of PCI_ALLOWED" >&2
            return 2
        fi
        echo "$VFIO_DRIVER" >"$dev/driver_override" || die "cannot write $dev/driver_override"
        if [ -n "$drv" ]; then
            echo "$bdf" >"$dev/driver/unbind" || die "cannot unbind $bdf from $drv"
        fi
        echo "$bdf" >"$SYSFS_PCI/drivers_probe" 2>/dev/null
        if ! wait_for "[ \"\$(driver_of $bdf)\" = $VFIO_DRIVER ]"; then
            die "$bdf did not bind to $VFIO_DRIVER (now: '$(driver_of "$bdf")'); see dmesg"
        fi
        info "$bdf ($ids) ${drv:-no driver} -> $VFIO_DRIVER"
    fi
    group=$(iommu_group_of "$bdf")
    [ -n "$group" ] || die "$bdf has no IOMMU group; is the IOMMU enabled (intel_iommu=on / amd_iommu=on)?"
    if ! wait_for "[ -e /dev/vfio/$group ]"; then
        die "/dev/vfio/$group did not appear for $bdf"
    fi
    if [ -n "$TARGET_USER" ]; then
        chown "$TARGET_USER" "/dev/vfio/$group" || die "cannot chown /dev/vfio/$group to $TARGET_USER"
        info "/dev/vfio/$group (IOMMU group $group) now owned by $TARGET_USER"
    fi
    # Other functions in the same group must also be bound to vfio-pci (or to no driver) before
    # VFIO lets a process open the group.
    for other in /sys/kernel/iommu_groups/"$group"/devices/*; do
        o=${other##*/}
        [ "$o" = "$bdf" ] && continue
        od=$(driver_of "$o")
        case "$od" in
        "" | "$VFIO_DRIVER" | pcieport) ;;
        *) warn "IOMMU group $group also holds $o (driver $od): VFIO will refuse the group until it is unbound" ;;
        esac
    done
    return 0
}

cmd_config() {
    require_root config
    require_iommu
    reserve_hugepages
    load_vfio
    list=$(selected_functions) || exit 1
    if [ -z "$list" ]; then
        die "no NVMe controllers (PCI class $NVME_CLASS) found"
    fi
    bound=0
    busy=0
    for bdf in $list; do
        if bind_one "$bdf"; then
            bound=$((bound + 1))
        else
            busy=$((busy + 1))
        fi
    done
    # A busy controller is an error when it was asked for by name, or when nothing was bound at all;
    # when scanning every controller, skipping the one the system runs from is expected.
    if [ "$busy" -gt 0 ] && { [ -n "$PCI_ALLOWED" ] || [ "$bound" = 0 ]; }; then
        echo "$PROG: error: $busy controller(s) skipped because they are in use" >&2
        exit 2
    fi
    return 0
}

cmd_reset() {
    require_root reset
    list=$(selected_functions) || exit 1
    modprobe "$KERNEL_DRIVER" 2>/dev/null
    [ -d "$SYSFS_PCI/drivers/$KERNEL_DRIVER" ] || die "the kernel nvme driver is not available (modprobe $KERNEL_DRIVER failed)"
    for bdf in $list; do
        dev=$SYSFS_PCI/devices/$bdf
        drv=$(driver_of "$bdf")
        override=$(cat "$dev/driver_override" 2>/dev/null)
        if [ "$drv" = "$KERNEL_DRIVER" ] && [ "$override" = "(null)" ]; then
            info "$bdf already bound to $KERNEL_DRIVER"
            continue
        fi
        if [ "$drv" != "" ] && [ "$drv" != "$VFIO_DRIVER" ] && [ "$drv" != "$KERNEL_DRIVER" ]; then
            warn "$bdf is bound to $drv, leaving it alone"
            continue
        fi
        # An empty write (a lone newline) clears the override.
        echo >"$dev/driver_override" || die "cannot clear $dev/driver_override"
        if [ "$drv" = "$VFIO_DRIVER" ]; then
            echo "$bdf" >"$dev/driver/unbind" || die "cannot unbind $bdf from $VFIO_DRIVER (is a process still using it?)"
        fi
        echo "$bdf" >"$SYSFS_PCI/drivers_probe" 2>/dev/null
        if ! wait_for "[ \"\$(driver_of $bdf)\" = $KERNEL_DRIVER ]"; then
            die "$bdf did not bind to $KERNEL_DRIVER (now: '$(driver_of "$bdf")'); see dmesg"
        fi
        info "$bdf ${drv:-no driver} -> $KERNEL_DRIVER"
    done
}

cmd_status() {
    if ! iommu_enabled; then
        warn "no IOMMU groups: VFIO cannot be used (enable VT-d/AMD-Vi, boot with intel_iommu=on or amd_iommu=on)"
    fi
    printf '%-14s %-11s %-10s %-6s %s\n' BDF VENDOR:DEV DRIVER GROUP NAMESPACES
    found=0
    for bdf in $(all_nvme_functions); do
        found=1
        dev=$SYSFS_PCI/devices/$bdf
        ids="$(sed 's/^0x//' "$dev/vendor"):$(sed 's/^0x//' "$dev/device")"
        drv=$(driver_of "$bdf")
        grp=$(iommu_group_of "$bdf")
        ns=""
        if [ "$drv" = "$KERNEL_DRIVER" ]; then
            ns=$(namespaces_of "$bdf" | tr '\n' ' ')
        fi
        printf '%-14s %-11s %-10s %-6s %s\n' "$bdf" "$ids" "${drv:--}" "${grp:--}" "${ns:--}"
    done
    [ "$found" = 1 ] || echo "(no NVMe controllers, PCI class $NVME_CLASS)"
    echo
    awk '/^HugePages_Total:|^HugePages_Free:|^Hugepagesize:/ { print }' /proc/meminfo
}

case "${1:-help}" in
config) cmd_config ;;
reset) cmd_reset ;;
status) cmd_status ;;
help | -h | --help) usage ;;
*)
    usage >&2
    exit 1
    ;;
esac
