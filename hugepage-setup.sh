#!/bin/sh
# hugepage-setup.sh: prepare a Linux host (or the QEMU test guest) for the userspace NVMe driver.
#
#   config  reserve hugepages, load vfio-pci and bind NVMe controllers to it
#   reset   give the controllers this script bound back to the kernel's nvme driver, and undo
#           the other changes config recorded (node owners, the no-IOMMU switch)
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
# VFIO mode the driver will use (the driver reads the same variable): noiommu is the explicit
# request for 'config' to enable VFIO's unsafe no-IOMMU mode, which it only does on a machine
# without an IOMMU.
NVME_VFIO_MODE=${NVME_VFIO_MODE:-}
NOIOMMU_PARAM=/sys/module/vfio/parameters/enable_unsafe_noiommu_mode
# 1: also give TARGET_USER /dev/iommu (iommufd mode). It is one node for every iommufd user of the
# machine, so by default it is left alone.
IOMMUFD_USER=${IOMMUFD_USER:-}
IOMMUFD_NODE=/dev/iommu
# Registered IOMMUs (dmar0, ivhd0, ...); empty without one.
IOMMU_CLASS=/sys/class/iommu
# How long to wait for /dev/vfio/<group> or driver (re)binding to show up, in tenths of a second.
SETTLE_TENTHS=50
# Controllers that 'config' bound to vfio-pci, one BDF a line; 'reset' gives back only these.
STATE_DIR=${NVME_USERSPACE_STATE_DIR:-/run/nvme-userspace}
STATE_FILE=$STATE_DIR/bound
# The other changes 'config' made, one a line "KIND WHO OLD PATH", for 'reset' to undo exactly:
#   owner BDF UID:GID:MODE PATH  config chowned PATH to TARGET_USER: a VFIO node of controller BDF,
#                                or with BDF "-" a shared one (/dev/iommu, a hugetlbfs mount it
#                                made); before, PATH had this owner, group and octal mode
#   param - VALUE PATH           config wrote the kernel parameter PATH, which held VALUE before
# The first record of a PATH wins: it holds the state before any 'config'.
CHANGES_FILE=$STATE_DIR/changes
# Largest HUGEMEM accepted, in MiB (16 TiB): keeps the page arithmetic far from overflow.
HUGEMEM_MAX=16777216

usage() {
    cat <<EOF
Usage: $PROG [config|reset|status|help]

  config   Reserve HUGEMEM MiB of hugepages (never lowers an existing reservation), load
           vfio-pci and bind NVMe controllers to it.
  reset    Give the controllers that 'config' bound (recorded in $STATE_FILE) back to the
           kernel nvme driver; with PCI_ALLOWED, exactly the controllers it names. Puts back
           the owner and mode of every node 'config' chowned for them (without PCI_ALLOWED:
           every node it chowned) and, once none of that remains, of /dev/iommu and its
           hugetlbfs mount, and the previous enable_unsafe_noiommu_mode (all recorded in
           $CHANGES_FILE). The hugepage reservation and the mount stay.
  status   Show NVMe PCI functions (BDF, vendor:device, driver, IOMMU group, namespaces)
           and hugepage totals.
  help     Show this text.

Environment:
  HUGEMEM=MiB          hugepage memory to reserve, a positive whole number (default 256)
  PCI_ALLOWED="BDF..." only touch these controllers (space-separated, e.g. "0000:01:00.0");
                       default: config binds every free NVMe controller (class $NVME_CLASS),
                       reset gives back the ones config bound
  TARGET_USER=name     make the bound controllers' own VFIO nodes (/dev/vfio/<group>, and
                       /dev/vfio/devices/vfioN where the kernel has it) and the hugetlbfs mount
                       this script creates usable by this user (who also needs a memlock
                       limit, see 'ulimit -l'); 'reset' gives them back
  IOMMUFD_USER=1       with TARGET_USER, also chown /dev/iommu to that user, which the driver's
                       iommufd mode opens (Linux 6.6+). /dev/iommu is one node for the whole
                       machine, so this is a system-wide grant; without it /dev/iommu is left
                       alone and TARGET_USER runs the tools with NVME_VFIO_MODE=type1
  HUGETLBFS_MOUNT=dir  where to mount hugetlbfs if none is mounted (default /dev/hugepages)
  NVME_VFIO_MODE=noiommu
                       the explicit request for VFIO's unsafe no-IOMMU mode, on a machine without
                       an IOMMU only (refused when /sys/class/iommu or an IOMMU group shows one):
                       'config' sets vfio's enable_unsafe_noiommu_mode=1 (UNSAFE: the device can
                       then DMA to all memory; the kernel needs CONFIG_VFIO_NOIOMMU), the group
                       node is /dev/vfio/noiommu-<group>, and 'reset' sets the previous value
                       back. The driver must be run with the same NVME_VFIO_MODE=noiommu (as root).

A controller is never bound while any namespace or partition on it is in use: mounted, active
swap, held by dm/md/LVM/bcache (sysfs holders/), opened exclusively (ZFS vdev, btrfs member,
...), open in a process (a VM disk, dd, ...), backing a loop device or exported by nvmet.
Without PCI_ALLOWED, a controller holding the root filesystem, /boot or swap is never bound.
The exclusive-open check uses the blkexcl helper (target/release/blkexcl), perl or python3.
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

# Succeeds when the machine has an IOMMU: one registered in /sys/class/iommu, or an IOMMU group
# that is not one of the groups VFIO's no-IOMMU mode makes for itself (named vfio-noiommu).
iommu_present() {
    for i in "$IOMMU_CLASS"/*; do
        [ -e "$i" ] && return 0
    done
    for g in /sys/kernel/iommu_groups/*; do
        [ -e "$g" ] || continue
        [ "$(cat "$g/name" 2>/dev/null)" = vfio-noiommu ] || return 0
    done
    return 1
}

require_iommu() {
    if [ "$NVME_VFIO_MODE" = noiommu ]; then
        enable_noiommu
        return 0
    fi
    if ! iommu_enabled; then
        die "no IOMMU groups in /sys/kernel/iommu_groups: VFIO needs an IOMMU. Enable VT-d (Intel) or
AMD-Vi (AMD) in the firmware setup and boot Linux with intel_iommu=on (Intel) or amd_iommu=on (AMD).
Without an IOMMU (e.g. a cloud VM), NVME_VFIO_MODE=noiommu uses VFIO's unsafe no-IOMMU mode."
    fi
}

# No-IOMMU mode, asked for with NVME_VFIO_MODE=noiommu, and only where no IOMMU exists: with one,
# devices get ordinary IOMMU groups anyway and the switch would only drop the protection for
# whatever vfio-pci binds next. vfio must offer the mode (CONFIG_VFIO_NOIOMMU) and have it on
# before vfio-pci probes the device, which then gets a no-IOMMU group (/dev/vfio/noiommu-<group>).
# The previous value goes to CHANGES_FILE first, so that 'reset' can set it back.
enable_noiommu() {
    if iommu_present; then
        die "NVME_VFIO_MODE=noiommu asks for VFIO's unsafe no-IOMMU mode, but this machine has an IOMMU
($IOMMU_CLASS or /sys/kernel/iommu_groups is not empty): not enabling it. Use the IOMMU: run
without NVME_VFIO_MODE=noiommu (the driver then takes type1 or iommufd)"
    fi
    [ -e "$NOIOMMU_PARAM" ] || modprobe vfio 2>/dev/null
    [ -e "$NOIOMMU_PARAM" ] || die "NVME_VFIO_MODE=noiommu: this kernel's vfio has no
enable_unsafe_noiommu_mode parameter ($NOIOMMU_PARAM): it needs CONFIG_VFIO_NOIOMMU=y"
    en_old=$(cat "$NOIOMMU_PARAM") || die "cannot read $NOIOMMU_PARAM"
    case "$en_old" in
    Y | 1) info "VFIO no-IOMMU mode is already enabled (UNSAFE: devices bound now can DMA to all memory)" ;;
    *)
        [ -n "$(change_old param - "$NOIOMMU_PARAM")" ] || change_set param - "$NOIOMMU_PARAM" "$en_old"
        info "enabling VFIO's UNSAFE no-IOMMU mode ($NOIOMMU_PARAM = 1, 'reset' sets it back to $en_old): a device bound to vfio-pci without an IOMMU can read and write all memory"
        echo 1 >"$NOIOMMU_PARAM" || die "cannot write $NOIOMMU_PARAM"
        ;;
    esac
}

# The VFIO group node of IOMMU group $1 (/dev/vfio/noiommu-N for a no-IOMMU group).
group_node() {
    if [ "$(cat "/sys/kernel/iommu_groups/$1/name" 2>/dev/null)" = vfio-noiommu ] ||
        [ -e "/dev/vfio/noiommu-$1" ]; then
        echo "/dev/vfio/noiommu-$1"
    else
        echo "/dev/vfio/$1"
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

# Runs the exclusive-open probe (see exclusive_prober) on /dev/$1. Prints a reason when the device
# is held exclusively, and also when it cannot be checked (an unknown state counts as in use).
exclusive_busy() {
    case "$EXCL_PROBER" in
    blkexcl:*)
        "${EXCL_PROBER#blkexcl:}" "/dev/$1" >/dev/null 2>&1
        rc=$?
        ;;
    perl)
        perl -MFcntl -e 'sysopen(my $f, $ARGV[0], O_RDONLY | O_EXCL) and exit 0; exit($!{EBUSY} ? 1 : 2)' "/dev/$1"
        rc=$?
        ;;
    python3)
        python3 -c 'import errno, os, sys
try:
    os.close(os.open(sys.argv[1], os.O_RDONLY | os.O_EXCL))
except OSError as e:
    sys.exit(1 if e.errno == errno.EBUSY else 2)' "/dev/$1"
        rc=$?
        ;;
    *) rc=2 ;;
    esac
    case "$rc" in
    0) ;;
    1) echo "/dev/$1 is opened exclusively by someone (a filesystem, swap, ZFS, btrfs, dm/md, or a process)" ;;
    *) echo "/dev/$1 could not be checked with an exclusive open (${EXCL_PROBER:-no prober}); treating it as in use" ;;
    esac
}

# Chooses how to open a block device with O_EXCL (busybox sh cannot): our blkexcl helper (in PATH,
# next to this script or in its target/release/), else perl, else python3. Sets EXCL_PROBER.
exclusive_prober() {
    EXCL_PROBER=
    here=$(dirname "$0")
    for b in "$(command -v blkexcl 2>/dev/null)" "$here/blkexcl" "$here/target/release/blkexcl"; do
        if [ -n "$b" ] && [ -x "$b" ]; then
            EXCL_PROBER=blkexcl:$b
            return 0
        fi
    done
    if command -v perl >/dev/null 2>&1 && perl -MFcntl -e 1 2>/dev/null; then
        EXCL_PROBER=perl
    elif command -v python3 >/dev/null 2>&1; then
        EXCL_PROBER=python3
    else
        die "cannot check whether a drive is in use: no way to open a block device exclusively.
Build the helper (cargo build --release -p blkexcl, next to this script in target/release/) or
install perl or python3"
    fi
}

# Prints "PATH PID" for every file under /dev/ that a process has open (like fuser), from one
# 'ls -l' of all /proc/<pid>/fd/ directories (a header line "/proc/<pid>/fd:" per process).
opened_by_processes() {
    # shellcheck disable=SC2012 # busybox find has no -lname/-printf; /dev names are plain
    ls -l /proc/[0-9]*/fd/ 2>/dev/null | awk '
        /^\/proc\/[0-9]+\/fd\/?:$/ { split($0, a, "/"); pid = a[3]; next }
        / -> \/dev\// { sub(/.* -> /, ""); print $0, pid }'
}

# Prints why block device $1 (a disk or a partition, under /sys/class/block) is in use;
# prints nothing when it is free. OPEN_FDS must hold the output of opened_by_processes.
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
    if grep -q "^/dev/${dev}[[:space:]]" /proc/swaps 2>/dev/null; then
        echo "/dev/$dev is active swap"
    fi
    for h in "$sysdir"/holders/*; do
        [ -e "$h" ] && echo "/dev/$dev is held by ${h##*/} (device-mapper, md, LVM, bcache, ...)"
    done
    for l in /sys/block/loop*/loop/backing_file; do
        [ -r "$l" ] && [ "$(cat "$l" 2>/dev/null)" = "/dev/$dev" ] &&
            echo "/dev/$dev backs loop device /dev/$(basename "$(dirname "$(dirname "$l")")") (losetup -d it)"
    done
    for p in /sys/kernel/config/nvmet/subsystems/*/namespaces/*; do
        [ -r "$p/device_path" ] && [ "$(cat "$p/enable" 2>/dev/null)" = 1 ] &&
            [ "$(cat "$p/device_path")" = "/dev/$dev" ] &&
            echo "/dev/$dev is exported by the NVMe target (nvmet) as $p"
    done
    echo "$OPEN_FDS" | awk -v d="/dev/$dev" '$1 == d { print $2 }' | sort -u |
        while read -r pid; do
            echo "/dev/$dev is open in process $pid ($(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | cut -c1-60))"
        done
    exclusive_busy "$dev"
}

# Prints every reason the controller at BDF is in use (all its namespaces and their partitions).
controller_users() {
    OPEN_FDS=$(opened_by_processes)
    for ns in $(namespaces_of "$1"); do
        block_dev_users "$ns"
        for p in /sys/class/block/"$ns"/"$ns"p*; do
            [ -e "$p" ] && block_dev_users "${p##*/}"
        done
    done
}

# Prints the whole disks (e.g. nvme0n1) under the block device with major:minor $1: a partition
# resolves to its disk, a dm/md device to the disks under its slaves/, recursively.
disks_under() {
    d=$(cd "/sys/dev/block/$1" 2>/dev/null && pwd -P) || return 0
    [ -e "$d/partition" ] && d=${d%/*}
    found_slave=0
    for sl in "$d"/slaves/*; do
        [ -e "$sl/dev" ] || continue
        found_slave=1
        # A subshell: POSIX sh has no local variables, and the recursion reuses d and found_slave.
        (disks_under "$(cat "$sl/dev")")
    done
    [ "$found_slave" = 1 ] || echo "${d##*/}"
}

# Prints "disk what" lines for the disks that hold the root filesystem, /boot, /boot/efi or swap.
system_disks() {
    # mountinfo: field 3 is major:minor (0:N for btrfs and other virtual ids), field 5 the mount
    # point, and the source follows the " - fstype" separator.
    awk '$5 == "/" || $5 == "/boot" || $5 == "/boot/efi" {
        for (i = 7; i <= NF; i++) if ($i == "-") break
        print $5, $3, $(i + 2)
    }' /proc/self/mountinfo 2>/dev/null | while read -r mp mm src; do
        case "$mm" in
        0:*) ;;
        *) for k in $(disks_under "$mm"); do echo "$k $mp"; done ;;
        esac
        case "$src" in
        /dev/*)
            b=$(basename "$(readlink -f "$src" 2>/dev/null || echo "$src")")
            smm=$(cat "/sys/class/block/$b/dev" 2>/dev/null) &&
                for k in $(disks_under "$smm"); do echo "$k $mp"; done
            ;;
        esac
    done
    awk 'NR > 1 { print $1 }' /proc/swaps 2>/dev/null | while read -r sw; do
        case "$sw" in
        /dev/*)
            b=$(basename "$(readlink -f "$sw" 2>/dev/null || echo "$sw")")
            smm=$(cat "/sys/class/block/$b/dev" 2>/dev/null) || continue
            ;;
        *)
            # A swap file: the device of the filesystem it lives on.
            smm=$(stat -c '%d' "$sw" 2>/dev/null) || continue
            smm="$((smm >> 8 & 0xfff)):$(((smm & 0xff) | (smm >> 12 & 0xfff00)))"
            ;;
        esac
        for k in $(disks_under "$smm"); do echo "$k swap ($sw)"; done
    done
}

# Prints why the controller at BDF runs the system (root filesystem, /boot, swap); empty if not.
controller_system_use() {
    sys=$(system_disks | sort -u)
    for ns in $(namespaces_of "$1"); do
        echo "$sys" | awk -v d="$ns" '$1 == d { $1 = ""; print "/dev/" d " holds" $0 }'
    done
}

# Waits up to SETTLE_TENTHS/10 s for the function at BDF $1 to be bound to driver $2.
wait_driver() {
    i=0
    while [ "$i" -lt "$SETTLE_TENTHS" ]; do
        [ "$(driver_of "$1")" = "$2" ] && return 0
        sleep 0.1 2>/dev/null || sleep 1
        i=$((i + 1))
    done
    [ "$(driver_of "$1")" = "$2" ]
}

# Waits up to SETTLE_TENTHS/10 s for path $1 to exist.
wait_path() {
    i=0
    while [ "$i" -lt "$SETTLE_TENTHS" ]; do
        [ -e "$1" ] && return 0
        sleep 0.1 2>/dev/null || sleep 1
        i=$((i + 1))
    done
    [ -e "$1" ]
}

# HUGEMEM must be a positive whole number of MiB (no sign, unit, fraction or leading zero).
validate_hugemem() {
    case "$HUGEMEM" in
    "" | *[!0-9]* | 0*)
        die "HUGEMEM='$HUGEMEM' is not a positive whole number of MiB; write e.g. HUGEMEM=256 (for 256 MiB)"
        ;;
    esac
    if [ "${#HUGEMEM}" -gt 8 ] || [ "$HUGEMEM" -gt "$HUGEMEM_MAX" ]; then
        die "HUGEMEM=$HUGEMEM MiB is more than the $HUGEMEM_MAX MiB this script accepts; ask for less"
    fi
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
    before=$(cat "$target")
    if [ "$before" -ge "$pages" ]; then
        info "$before hugepages of ${hp_kb} kB already reserved (HUGEMEM=$HUGEMEM MiB needs $pages); leaving it"
    else
        echo "$pages" >"$target" || die "cannot write $pages to $target"
    fi
    got=$(cat "$target")
    if [ "$got" -lt "$pages" ]; then
        warn "asked for $pages hugepages of ${hp_kb} kB (HUGEMEM=$HUGEMEM MiB) but the kernel gave $got;
memory is fragmented or short: free some, lower HUGEMEM, or reserve at boot with hugepages=$pages"
    elif [ "$got" != "$before" ]; then
        info "reserved $got hugepages of ${hp_kb} kB ($((got * hp_kb / 1024)) MiB)"
    fi
    if ! awk '$3 == "hugetlbfs" { found = 1 } END { exit !found }' /proc/mounts; then
        if mkdir -p "$HUGETLBFS_MOUNT" && mount -t hugetlbfs nodev "$HUGETLBFS_MOUNT"; then
            info "mounted hugetlbfs on $HUGETLBFS_MOUNT"
            # Only a mount this script created changes owner; existing ones belong to someone else.
            if [ -n "$TARGET_USER" ]; then
                grant_node - "$HUGETLBFS_MOUNT"
                info "$HUGETLBFS_MOUNT now owned by $TARGET_USER ('reset' gives it back, the mount stays)"
            fi
        else
            warn "could not mount hugetlbfs on $HUGETLBFS_MOUNT (anonymous MAP_HUGETLB still works)"
        fi
    elif [ -n "$TARGET_USER" ]; then
        info "hugetlbfs is already mounted; its owner is left as it is (the tools use anonymous MAP_HUGETLB)"
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

# Records (or with $2 = remove, forgets) that this script bound BDF $1 to vfio-pci.
state_record() {
    mkdir -p "$STATE_DIR" || die "cannot create $STATE_DIR"
    others=$(grep -vxF "$1" "$STATE_FILE" 2>/dev/null)
    {
        [ -z "$others" ] || echo "$others"
        [ "${2:-}" = remove ] || echo "$1"
    } >"$STATE_FILE.new" || die "cannot write $STATE_FILE.new"
    mv "$STATE_FILE.new" "$STATE_FILE" || die "cannot write $STATE_FILE"
}

# Rewrites CHANGES_FILE without the record (kind $1, controller $2, path $3), with the record
# "$1 $2 $4 $3" instead when $4 (the old value) is given.
change_set() {
    mkdir -p "$STATE_DIR" || die "cannot create $STATE_DIR"
    {
        if [ -f "$CHANGES_FILE" ]; then
            while read -r cs_kind cs_who cs_old cs_path; do
                [ -n "$cs_kind" ] || continue
                [ "$cs_kind $cs_who $cs_path" = "$1 $2 $3" ] || echo "$cs_kind $cs_who $cs_old $cs_path"
            done <"$CHANGES_FILE"
        fi
        [ -z "${4:-}" ] || echo "$1 $2 $4 $3"
    } >"$CHANGES_FILE.new" || die "cannot write $CHANGES_FILE.new"
    mv "$CHANGES_FILE.new" "$CHANGES_FILE" || die "cannot write $CHANGES_FILE"
}

# Prints the old value recorded for (kind $1, controller $2, path $3), nothing if there is none.
# $2 = "*" matches any controller, "!BDF" any but BDF.
change_old() {
    [ -f "$CHANGES_FILE" ] || return 0
    while read -r co_kind co_who co_old co_path; do
        if [ "$co_kind" != "$1" ] || [ "$co_path" != "$3" ]; then continue; fi
        case "$2" in
        "*") ;;
        "!"*) [ "$co_who" != "${2#!}" ] || continue ;;
        *) [ "$co_who" = "$2" ] || continue ;;
        esac
        echo "$co_old"
        return 0
    done <"$CHANGES_FILE"
}

# Chowns node $2 to TARGET_USER for controller $1 ("-": a shared node), having recorded its owner
# and mode for 'reset'. A node already recorded (an earlier config, or another controller of
# the same IOMMU group) keeps the first record's values: the state before any config.
grant_node() {
    gn_old=$(change_old owner "*" "$2")
    if [ -z "$gn_old" ]; then
        gn_old=$(stat -c '%u:%g:%a' "$2") || die "cannot read the owner and mode of $2"
    fi
    [ -n "$(change_old owner "$1" "$2")" ] || change_set owner "$1" "$2" "$gn_old"
    chown "$TARGET_USER" "$2" || die "cannot chown $2 to $TARGET_USER"
}

# Gives node $2 back the owner and mode recorded for controller $1, then forgets the record. While
# another controller still has a record of the same node (one IOMMU group, not given back yet)
# the node stays as it is; the last one restores it. A node that is gone (the kernel removes a
# device's VFIO nodes when it leaves vfio-pci) has nothing to restore.
restore_node() {
    rn_old=$(change_old owner "$1" "$2")
    [ -n "$rn_old" ] || return 0
    rn_uid=${rn_old%%:*}
    rn_gid=${rn_old#*:}
    rn_mode=${rn_gid#*:}
    rn_gid=${rn_gid%%:*}
    # UID:GID:MODE: decimal ids, an octal mode, nothing else.
    case "$rn_old" in
    *[!0-9:]* | *:*:*:* | :* | *::* | *: | *:*:*[!0-7]*) rn_ok="" ;;
    *:*:*) rn_ok=1 ;;
    *) rn_ok="" ;;
    esac
    case "$rn_ok" in
    "") warn "$CHANGES_FILE: unreadable record '$rn_old' for $2; leaving $2 as it is" ;;
    *)
        if [ "$1" != - ] && [ -n "$(change_old owner "!$1" "$2")" ]; then
            info "$2 stays as it is: another controller config set up uses it too"
        elif [ ! -e "$2" ]; then
            info "$2 went away with the device; nothing to give back"
        elif [ "$(stat -c '%u:%g:%a' "$2" 2>/dev/null)" != "$rn_uid:$rn_gid:$rn_mode" ]; then
            { chown "$rn_uid:$rn_gid" "$2" && chmod "$rn_mode" "$2"; } ||
                die "cannot give $2 back its owner $rn_uid:$rn_gid and mode $rn_mode"
            info "$2 back to owner $rn_uid:$rn_gid, mode $rn_mode"
        fi
        ;;
    esac
    change_set owner "$1" "$2"
}

# Restores every node recorded for controller $1 ("*": for every controller, not the shared ones).
restore_nodes_of() {
    rno_records=$(cat "$CHANGES_FILE" 2>/dev/null)
    while read -r rno_kind rno_who _ rno_path; do
        if [ "$rno_kind" != owner ] || [ "$rno_who" = - ]; then continue; fi
        [ "$1" = "*" ] || [ "$rno_who" = "$1" ] || continue
        restore_node "$rno_who" "$rno_path"
    done <<EOF
$rno_records
EOF
}

# Once nothing config set up for a controller remains (none it bound, no node of one it chowned),
# undoes the shared changes: /dev/iommu and hugetlbfs mount owners, and kernel parameters.
undo_shared() {
    if [ -s "$STATE_FILE" ] || grep -q '^owner [^-]' "$CHANGES_FILE" 2>/dev/null; then
        [ ! -s "$CHANGES_FILE" ] ||
            info "shared changes kept while controllers config set up remain (see '$0 status')"
        return 0
    fi
    us_records=$(cat "$CHANGES_FILE" 2>/dev/null)
    while read -r us_kind _ us_old us_path; do
        case "$us_kind" in
        owner)
            # A hugetlbfs mount: only while it is still mounted (not the directory under it).
            if [ "$us_path" = "$HUGETLBFS_MOUNT" ] && ! is_hugetlbfs_mount "$us_path"; then
                info "$us_path is no longer a hugetlbfs mount; leaving it as it is"
                change_set owner - "$us_path"
            else
                restore_node - "$us_path"
            fi
            ;;
        param)
            case "$us_old" in
            Y | N | 0 | 1) ;;
            *)
                warn "$CHANGES_FILE: unreadable value '$us_old' for $us_path; leaving it as it is"
                change_set param - "$us_path"
                continue
                ;;
            esac
            if [ -e "$us_path" ] && [ "$(cat "$us_path")" != "$us_old" ]; then
                echo "$us_old" >"$us_path" || die "cannot set $us_path back to $us_old"
                info "$us_path back to $us_old"
            fi
            change_set param - "$us_path"
            ;;
        esac
    done <<EOF
$us_records
EOF
    rm -f "$CHANGES_FILE"
}

# Succeeds when directory $1 is a hugetlbfs mount point (/proc/mounts writes a blank as \040).
is_hugetlbfs_mount() {
    awk -v m="$(printf '%s' "$1" | sed 's/ /\\040/g')" '$2 == m && $3 == "hugetlbfs" { f = 1 } END { exit !f }' /proc/mounts
}

# Gives TARGET_USER /dev/iommu when IOMMUFD_USER=1 asks for it (see usage); otherwise says, where
# it matters (a device cdev exists, so the driver's automatic choice is iommufd), how to get on.
grant_iommufd() {
    if [ "$IOMMUFD_USER" != 1 ]; then
        if [ -n "$TARGET_USER" ] && [ -n "$CDEV_SEEN" ] && [ -e "$IOMMUFD_NODE" ]; then
            info "$IOMMUFD_NODE (one node for every iommufd user) is left as it is: as $TARGET_USER, run the tools with NVME_VFIO_MODE=type1, or give it with IOMMUFD_USER=1"
        fi
        return 0
    fi
    if [ ! -e "$IOMMUFD_NODE" ]; then
        warn "IOMMUFD_USER=1, but there is no $IOMMUFD_NODE (modprobe iommufd; CONFIG_IOMMUFD); nothing to give"
        return 0
    fi
    grant_node - "$IOMMUFD_NODE"
    info "$IOMMUFD_NODE now owned by $TARGET_USER (IOMMUFD_USER=1: a grant for the whole machine; 'reset' gives it back)"
}

# Clears driver_override of BDF $1 and lets the PCI core probe it again, so a failed bind does
# not leave the device pinned to a driver nobody asked for (or to none at all).
undo_override() {
    echo >"$SYSFS_PCI/devices/$1/driver_override" 2>/dev/null
    [ -n "$(driver_of "$1")" ] || echo "$1" >"$SYSFS_PCI/drivers_probe" 2>/dev/null
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
        if [ -z "$PCI_ALLOWED" ]; then
            sysuse=$(controller_system_use "$bdf")
            if [ -n "$sysuse" ]; then
                echo "$PROG: $bdf ($ids) is in use: it holds the running system, not binding it:" >&2
                echo "$sysuse" | sed 's/^/    /' >&2
                echo "    without PCI_ALLOWED a system disk is never bound; name the controller in PCI_ALLOWED only if you really mean it" >&2
                return 2
            fi
        fi
        users=$(controller_users "$bdf")
        if [ -n "$users" ]; then
            echo "$PROG: $bdf ($ids) is in use, not binding it:" >&2
            echo "$users" | sed 's/^/    /' >&2
            echo "    unmount it / swapoff it / stop its users first, or leave it out of PCI_ALLOWED" >&2
            return 2
        fi
        echo "$VFIO_DRIVER" >"$dev/driver_override" || die "cannot write $dev/driver_override"
        if [ -n "$drv" ] && ! echo "$bdf" >"$dev/driver/unbind"; then
            undo_override "$bdf"
            die "cannot unbind $bdf from $drv (driver_override cleared again); see dmesg"
        fi
        echo "$bdf" >"$SYSFS_PCI/drivers_probe" 2>/dev/null
        if ! wait_driver "$bdf" "$VFIO_DRIVER"; then
            undo_override "$bdf"
            die "$bdf did not bind to $VFIO_DRIVER (driver_override cleared again, now: '$(driver_of "$bdf")'); see dmesg"
        fi
        state_record "$bdf"
        info "$bdf ($ids) ${drv:-no driver} -> $VFIO_DRIVER"
    fi
    group=$(iommu_group_of "$bdf")
    [ -n "$group" ] || die "$bdf has no IOMMU group; is the IOMMU enabled (intel_iommu=on / amd_iommu=on)?"
    node=$(group_node "$group")
    if ! wait_path "$node"; then
        die "$node did not appear for $bdf"
    fi
    case "$node" in
    */noiommu-*)
        [ "$NVME_VFIO_MODE" = noiommu ] ||
            warn "$bdf is in no-IOMMU group $node: the driver needs NVME_VFIO_MODE=noiommu to use it"
        info "$bdf is in no-IOMMU group $node (no DMA isolation)"
        ;;
    esac
    # Only this controller's own nodes change hands: its group node and, where the kernel has it
    # (Linux 6.6+), its VFIO device cdev. /dev/iommu is shared: see grant_iommufd.
    for c in "$dev"/vfio-dev/vfio*; do
        [ -e "/dev/vfio/devices/${c##*/}" ] && CDEV_SEEN=1
    done
    if [ -n "$TARGET_USER" ]; then
        grant_node "$bdf" "$node"
        info "$node (IOMMU group $group) now owned by $TARGET_USER"
        for c in "$dev"/vfio-dev/vfio*; do
            [ -e "/dev/vfio/devices/${c##*/}" ] || continue
            grant_node "$bdf" "/dev/vfio/devices/${c##*/}"
            info "/dev/vfio/devices/${c##*/} (VFIO device cdev) now owned by $TARGET_USER"
        done
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
    validate_hugemem
    case "$IOMMUFD_USER" in
    "" | 0) ;;
    1) [ -n "$TARGET_USER" ] || die "IOMMUFD_USER=1 gives /dev/iommu to TARGET_USER; name the user with TARGET_USER=name" ;;
    *) die "IOMMUFD_USER='$IOMMUFD_USER': write IOMMUFD_USER=1 to give TARGET_USER /dev/iommu, or leave it unset" ;;
    esac
    CDEV_SEEN=""
    require_iommu
    reserve_hugepages
    load_vfio
    list=$(selected_functions) || exit 1
    if [ -z "$list" ]; then
        die "no NVMe controllers (PCI class $NVME_CLASS) found"
    fi
    exclusive_prober
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
    grant_iommufd
    return 0
}

cmd_reset() {
    require_root reset
    if [ -n "$PCI_ALLOWED" ]; then
        list=$(selected_functions) || exit 1
    else
        list=$(cat "$STATE_FILE" 2>/dev/null)
        if [ -z "$list" ]; then
            info "no controllers to give back: 'config' bound none ($STATE_FILE is empty or absent);"
            info "to give back one bound by other means, name it: PCI_ALLOWED=BDF $0 reset"
        fi
    fi
    if [ -n "$list" ]; then
        modprobe "$KERNEL_DRIVER" 2>/dev/null
        [ -d "$SYSFS_PCI/drivers/$KERNEL_DRIVER" ] || die "the kernel nvme driver is not available (modprobe $KERNEL_DRIVER failed)"
    fi
    for bdf in $list; do
        dev=$SYSFS_PCI/devices/$bdf
        # Each controller's nodes are given back once it is off vfio-pci (most then are gone with
        # it; a group node other functions still hold is not): a failed unbind keeps the records.
        if [ ! -e "$dev" ]; then
            info "$bdf is gone (hot-unplugged?); forgetting it"
            state_record "$bdf" remove
            restore_nodes_of "$bdf"
            continue
        fi
        drv=$(driver_of "$bdf")
        override=$(cat "$dev/driver_override" 2>/dev/null)
        if [ "$drv" = "$KERNEL_DRIVER" ] && [ "$override" = "(null)" ]; then
            info "$bdf already bound to $KERNEL_DRIVER"
            state_record "$bdf" remove
            restore_nodes_of "$bdf"
            continue
        fi
        if [ "$drv" != "" ] && [ "$drv" != "$VFIO_DRIVER" ] && [ "$drv" != "$KERNEL_DRIVER" ]; then
            warn "$bdf is bound to $drv, leaving it alone"
            continue
        fi
        # An empty write (a lone newline) clears the override.
        echo >"$dev/driver_override" || die "cannot clear $dev/driver_override"
        if [ "$drv" = "$VFIO_DRIVER" ] && ! echo "$bdf" >"$dev/driver/unbind"; then
            echo "$VFIO_DRIVER" >"$dev/driver_override" 2>/dev/null
            die "cannot unbind $bdf from $VFIO_DRIVER (is a process still using it?)"
        fi
        echo "$bdf" >"$SYSFS_PCI/drivers_probe" 2>/dev/null
        if ! wait_driver "$bdf" "$KERNEL_DRIVER"; then
            die "$bdf did not bind to $KERNEL_DRIVER (now: '$(driver_of "$bdf")'); see dmesg"
        fi
        state_record "$bdf" remove
        info "$bdf ${drv:-no driver} -> $KERNEL_DRIVER"
        restore_nodes_of "$bdf"
    done
    # A plain reset undoes every node config chowned, also of controllers it found on vfio-pci
    # (which stay there).
    [ -n "$PCI_ALLOWED" ] || restore_nodes_of "*"
    undo_shared
}

cmd_status() {
    if ! iommu_enabled; then
        warn "no IOMMU groups: VFIO cannot be used (enable VT-d/AMD-Vi, boot with intel_iommu=on or amd_iommu=on)"
    fi
    printf '%-14s %-11s %-10s %-10s %s\n' BDF VENDOR:DEV DRIVER GROUP NAMESPACES
    found=0
    for bdf in $(all_nvme_functions); do
        found=1
        dev=$SYSFS_PCI/devices/$bdf
        ids="$(sed 's/^0x//' "$dev/vendor"):$(sed 's/^0x//' "$dev/device")"
        drv=$(driver_of "$bdf")
        grp=$(iommu_group_of "$bdf")
        # A no-IOMMU group (NVME_VFIO_MODE=noiommu) shows as noiommu-N, its /dev/vfio node name.
        if [ -n "$grp" ] && [ "$(group_node "$grp")" = "/dev/vfio/noiommu-$grp" ]; then grp=noiommu-$grp; fi
        ns=""
        if [ "$drv" = "$KERNEL_DRIVER" ]; then
            ns=$(namespaces_of "$bdf" | tr '\n' ' ')
        fi
        printf '%-14s %-11s %-10s %-10s %s\n' "$bdf" "$ids" "${drv:--}" "${grp:--}" "${ns:--}"
    done
    [ "$found" = 1 ] || echo "(no NVMe controllers, PCI class $NVME_CLASS)"
    if [ -s "$STATE_FILE" ]; then
        echo "bound by '$PROG config' (what 'reset' gives back): $(tr '\n' ' ' <"$STATE_FILE")"
    fi
    if [ -s "$CHANGES_FILE" ]; then
        echo "changed by '$PROG config' (what 'reset' puts back; KIND WHO OLD PATH):"
        sed 's/^/    /' "$CHANGES_FILE"
    fi
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
