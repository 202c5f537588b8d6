# nvme-ublk serves namespace 2 of the QEMU controller (through our driver) as /dev/ublkbN; it
# needs the harness's 6.12 guest kernel (CONFIG_BLK_DEV_UBLK: run.sh --vfio-mode, run-all's
# iommufd boot). Steps:
#   1. the block device has the namespace's block size and size;
#   2. mkfs.ext4 (on the first 48 MiB), mount, write files, sync, umount, mount again: the same
#      checksums read back through ublk; fio verify=crc32c on a file of it (when fio is in
#      the guest); a known pattern written raw at 56 MiB with dd (O_DIRECT, fsync); a discard;
#   3. clean stop (SIGTERM): exit 0, the ublk device gone; nvme-dd reads the pattern and the
#      ext4 superblock back from the controller through the driver;
#   4. killed server: a second pattern written and fsync'ed (acknowledged), reads in flight,
#      kill -9: the readers fail (EIO or the device gone) instead of hanging; a restarted
#      nvme-ublk serves the second pattern and the ext4 files unchanged; SIGTERM again.
# shellcheck source=/dev/null # the guest path of tests/qemu/lib.sh
. /tests/lib.sh

NSID=2 # 4096-byte blocks, 64 MiB in the default layout
LOG=/tmp/nvme-ublk.log
SECTORS=$((64 * 2048))

[ -e /dev/ublk-control ] || fail "no /dev/ublk-control: this kernel has no ublk driver (CONFIG_BLK_DEV_UBLK; run.sh --vfio-mode boots the harness's kernel)"
modprobe ext4 2>/dev/null || true

# A failing step must not leave the server holding the controller (the harness rebinds it to
# the kernel driver after the case, which waits for vfio-pci's user to let go).
UPID=""
cleanup() {
    [ -z "$UPID" ] || kill -TERM "$UPID" 2>/dev/null || true
    sleep 1
    [ -z "$UPID" ] || kill -KILL "$UPID" 2>/dev/null || true
}
trap cleanup EXIT

# start_ublk: starts nvme-ublk in the background (UPID), waits for its "serving" line, sets DEV.
start_ublk() {
    nvme-ublk "$NVME_BDF" -n $NSID --queues 2 >$LOG 2>&1 &
    UPID=$!
    i=0
    until grep -q "nvme-ublk: serving" $LOG; do
        i=$((i + 1))
        [ "$i" -lt 300 ] || { cat $LOG; fail "nvme-ublk did not start within 30 s"; }
        kill -0 $UPID 2>/dev/null || { cat $LOG; fail "nvme-ublk exited"; }
        sleep 0.1
    done
    sed 's/^/    /' $LOG
    DEV=$(sed -n 's|.* as \(/dev/ublkb[0-9]*\) .*|\1|p' $LOG)
    i=0
    until [ -b "$DEV" ]; do
        i=$((i + 1))
        [ "$i" -lt 100 ] || fail "no block device $DEV"
        sleep 0.1
    done
}

# stop_ublk: SIGTERM, exit status 0, the device gone.
stop_ublk() {
    kill -TERM $UPID
    rc=0
    wait $UPID || rc=$?
    UPID=""
    sed 's/^/    /' $LOG | tail -2
    [ $rc = 0 ] || fail "nvme-ublk exited $rc on SIGTERM"
    grep -q "nvme-ublk: stopped" $LOG || fail "nvme-ublk did not report a clean stop"
    [ ! -e "$DEV" ] || fail "$DEV still exists after the stop"
    [ ! -e "/sys/block/${DEV#/dev/}" ] || fail "/sys/block/${DEV#/dev/} still exists after the stop"
    echo "    ok: stopped, $DEV removed"
}

echo "== nvme-ublk on $NVME_BDF, namespace $NSID"
bind_vfio
# The refusals come first: a namespace that does not exist, then a bad option.
expect_fail "namespace" nvme-ublk "$NVME_BDF" -n 77
expect_fail "--queues" nvme-ublk "$NVME_BDF" --queues 0
start_ublk
b=${DEV#/dev/}
lbs=$(cat /sys/block/$b/queue/logical_block_size)
size=$(cat /sys/block/$b/size)
nq=$(ls -d /sys/block/$b/mq/* | wc -l)
echo "    $DEV: $lbs-byte blocks, $size sectors, $nq hardware queues, discard max $(cat /sys/block/$b/queue/discard_max_bytes) bytes, write cache '$(cat /sys/block/$b/queue/write_cache)'"
[ "$lbs" = 4096 ] || fail "$DEV has $lbs-byte blocks, the namespace 4096"
[ "$size" = $SECTORS ] || fail "$DEV has $size sectors, the namespace $SECTORS"
[ "$nq" = 2 ] || fail "$DEV has $nq queues, asked 2"

echo "== mkfs.ext4 (48 MiB), mount, write files, sync, umount; mount again, same checksums"
mkfs.ext4 -q -F -b 4096 "$DEV" 48M
mkdir -p /mnt/u
mount -t ext4 "$DEV" /mnt/u
for f in a b c; do
    dd if=/dev/urandom of=/mnt/u/$f bs=1M count=3 2>/dev/null
done
mkdir /mnt/u/dir
i=0
while [ $i -lt 40 ]; do echo "file $i" >/mnt/u/dir/f$i; i=$((i + 1)); done
sync
(cd /mnt/u && md5sum a b c dir/f0 dir/f39) >/tmp/usums
sed 's/^/    /' /tmp/usums
umount /mnt/u
echo 3 >/proc/sys/vm/drop_caches
mount -t ext4 "$DEV" /mnt/u
(cd /mnt/u && md5sum -c -s /tmp/usums) || fail "the files read back differently through $DEV"
echo "    ok: the files read back through $DEV"

if command -v fio >/dev/null; then
    echo "== fio verify=crc32c on the ext4 (8 MiB file, 4 KiB random writes, io_uring QD8, O_DIRECT)"
    timeout 300 fio --name=verify --filename=/mnt/u/fio.dat --size=8M --bs=4k --rw=randwrite \
        --ioengine=io_uring --iodepth=8 --direct=1 --verify=crc32c --do_verify=1 --thread \
        >/tmp/fio.out 2>&1 || { cat /tmp/fio.out; fail "fio verify through $DEV failed"; }
    grep -q "err= 0" /tmp/fio.out || { cat /tmp/fio.out; fail "fio reported errors"; }
    grep -E "WRITE:|READ:" /tmp/fio.out | sed 's/^/    /'
    rm /mnt/u/fio.dat
else
    echo "@@WARN fio is not in this guest: the fio verify step is skipped"
fi
umount /mnt/u

echo "== a pattern written raw at 56 MiB (O_DIRECT, fsync), outside the file system"
dd if=/dev/urandom of=/tmp/pat1 bs=1M count=1 2>/dev/null
dd if=/tmp/pat1 of="$DEV" bs=1M seek=56 count=1 oflag=direct conv=fsync 2>/dev/null
dd if="$DEV" of=/tmp/back1 bs=1M skip=56 count=1 iflag=direct 2>/dev/null
cmp /tmp/pat1 /tmp/back1 || fail "the pattern read back differently through $DEV"

echo "== discard reaches the device (Deallocate; mkfs.ext4 discarded the whole device too)"
blkdiscard -o $((60 << 20)) -l $((1 << 20)) "$DEV"
echo "    ok: blkdiscard of 1 MiB at 60 MiB"

echo "== clean stop (SIGTERM)"
stop_ublk

echo "== the data through our driver after the stop: nvme-dd reads the pattern and the superblock"
timeout 60 nvme-dd --device "$NVME_BDF" if=nvme:$NSID of=/tmp/dd1 bs=1M skip=56 count=1 --no-progress
cmp /tmp/pat1 /tmp/dd1 || fail "nvme-dd reads something else at 56 MiB than was written through ublk"
timeout 60 nvme-dd --device "$NVME_BDF" if=nvme:$NSID of=/tmp/sb.bin bs=4096 count=1 --no-progress
magic=$(dd if=/tmp/sb.bin bs=1 skip=1080 count=2 2>/dev/null | od -An -tx1 | tr -d ' \n')
[ "$magic" = "53ef" ] || fail "no ext4 superblock on namespace $NSID (magic '$magic')"
echo "    ok: the pattern and the ext4 superblock (magic ef53)"

echo "== killed server (kill -9): acknowledged data kept, in-flight I/O fails, no hang"
start_ublk
dd if=/dev/urandom of=/tmp/pat2 bs=1M count=1 2>/dev/null
dd if=/tmp/pat2 of="$DEV" bs=1M seek=52 count=1 oflag=direct conv=fsync 2>/dev/null
# Readers in flight when the server dies.
(
    while dd if="$DEV" of=/dev/null bs=64k count=128 iflag=direct 2>/dev/null; do :; done
    echo done >/tmp/reader.end
) &
RPID=$!
sleep 1
kill -9 $UPID
wait $UPID 2>/dev/null || true
UPID=""
i=0
while [ ! -f /tmp/reader.end ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
[ -f /tmp/reader.end ] || fail "reads of $DEV still hang 30 s after the server was killed"
wait $RPID 2>/dev/null || true
if dd if="$DEV" of=/dev/null bs=4k count=1 iflag=direct 2>/dev/null; then
    fail "$DEV still serves reads after the server was killed"
fi
echo "    ok: the readers ended with an error $((i / 10)) s after kill -9 ($DEV: $([ -e "$DEV" ] && echo 'fails I/O' || echo gone))"

echo "== restarted: the acknowledged pattern and the files are there"
start_ublk
dd if="$DEV" of=/tmp/back2 bs=1M skip=52 count=1 iflag=direct 2>/dev/null
cmp /tmp/pat2 /tmp/back2 || fail "the fsync'ed pattern at 52 MiB is lost after kill -9"
mount -t ext4 -o ro "$DEV" /mnt/u
(cd /mnt/u && md5sum -c -s /tmp/usums) || fail "the files differ after the restart"
umount /mnt/u
echo "    ok: pattern and files after the restart"
stop_ublk
echo "ok: ublk served namespace $NSID through our driver"
