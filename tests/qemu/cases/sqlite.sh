# SQLite on a namespace through our VFS (issue 13): the workload passes integrity_check, a new
# process with --verify-only sees the same checksum, a run killed with SIGKILL mid-transaction
# reopens consistent, a second process on the namespace is refused with VFIO's exclusivity
# named (issue 22 item 5), and the same workload with SQLite's default VFS on ext4 over the
# kernel's nvme driver (same controller) gives the same checksum.
# shellcheck source=/dev/null # the guest path of tests/qemu/lib.sh
. /tests/lib.sh

N=3000
M=100

checksum() { sed -n 's/^checksum: //p' "$1"; }

bind_vfio
nvme-sqlite --device "$NVME_BDF" --nsid 1 --format -n "$N" -m "$M" | tee /tmp/sq1.out
grep -q "^integrity_check: ok" /tmp/sq1.out || fail "integrity_check not ok after the workload"
ours=$(checksum /tmp/sq1.out)
[ -n "$ours" ] || fail "no checksum printed"

# A new process reopens the database through the on-disk directory.
nvme-sqlite --device "$NVME_BDF" --nsid 1 --verify-only | tee /tmp/sq2.out
grep -q "^integrity_check: ok" /tmp/sq2.out || fail "integrity_check not ok on reopen"
[ "$(checksum /tmp/sq2.out)" = "$ours" ] || fail "reopened checksum $(checksum /tmp/sq2.out) != $ours"
echo "ok: --verify-only in a new process sees checksum $ours"

# Killed mid-run (WAL and DELETE): the database reopens consistent.
for mode in wal delete; do
    nvme-sqlite --device "$NVME_BDF" --nsid 1 --format --db "killed-$mode.db" \
        --journal-mode "$mode" -n 200000 -m 50 >/tmp/sqk.out 2>&1 &
    pid=$!
    sleep 3
    if [ "$mode" = wal ]; then
        # A second process on the namespace the first one holds: VFIO refuses it (the IOMMU
        # group is exclusive to one process), and the error says so and how to get in.
        expect_fail "is in use;exclusive to one process;only through the first" \
            nvme-sqlite --device "$NVME_BDF" --nsid 1 --db "killed-$mode.db" --verify-only
        kill -0 "$pid" 2>/dev/null || { cat /tmp/sqk.out; fail "the first process did not survive"; }
    fi
    kill -9 "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    nvme-sqlite --device "$NVME_BDF" --nsid 1 --db "killed-$mode.db" --journal-mode "$mode" \
        --verify-only >/tmp/sqv.out 2>&1 || {
        cat /tmp/sqk.out /tmp/sqv.out
        fail "reopening after SIGKILL ($mode) failed"
    }
    grep -q "^integrity_check: ok" /tmp/sqv.out || {
        cat /tmp/sqv.out
        fail "integrity_check not ok after SIGKILL ($mode)"
    }
    echo "ok: killed $mode run reopens consistent ($(grep '^rows:' /tmp/sqv.out))"
done

# The same workload through the kernel's nvme driver and ext4 (e2fsprogs' mkfs.ext4, copied
# into the guest by run.sh): same checksum.
bind_kernel
dev=$(ns_blockdev 2)
modprobe crc32c_generic
modprobe ext4
mkfs.ext4 -q -F "$dev" >/dev/null || fail "mkfs.ext4 $dev failed"
mkdir -p /mnt/sq
mount -t ext4 "$dev" /mnt/sq
nvme-sqlite --kernel-file /mnt/sq/bench.db -n "$N" -m "$M" | tee /tmp/sqe.out
umount /mnt/sq
grep -q "^integrity_check: ok" /tmp/sqe.out || fail "integrity_check not ok on the kernel file system"
[ "$(checksum /tmp/sqe.out)" = "$ours" ] || fail "kernel file system checksum $(checksum /tmp/sqe.out) != ours $ours"
echo "ok: the kernel's ext4 driver gives the same checksum $ours"
grep "^elapsed" /tmp/sq1.out /tmp/sqe.out
