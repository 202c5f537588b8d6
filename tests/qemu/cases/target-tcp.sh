# Our NVMe/TCP target (nvme-target) serves the QEMU controller through our driver; the kernel's
# NVMe/TCP host attaches with `nvme connect`-style options on /dev/nvme-fabrics (loopback),
# mkfs.ext4, mount, write files, sync, umount, fio with verify=crc32c when fio is in the guest,
# disconnect, stop the target with SIGTERM (exit 0). Then the data checks out through our tools
# (nvme-dd reads the ext4 superblock from the controller) and, with the controller given back
# to the kernel's nvme driver, the same files with the same checksums on a kernel mount.
# Also: a host NQN not on the list is refused, and the target keeps serving.
# shellcheck source=/dev/null # the guest path of tests/qemu/lib.sh
. /tests/lib.sh

NQN=nqn.2026-01.test:ours
HOST=nqn.2026-01.test:guest-host
PORT=4421
NSID=2 # 4096-byte blocks, 64 MiB in the default layout
LOG=/tmp/nvme-target.log

ip link set lo up
ip addr add 127.0.0.1/8 dev lo 2>/dev/null || true
modprobe crc32c_generic
modprobe ext4
nvmf_host_available || fail "the kernel's NVMe/TCP host (nvme-tcp) is not in the guest"

echo "== nvme-target on $NVME_BDF (namespace $NSID as nsid 1), 127.0.0.1:$PORT"
bind_vfio
nvme_target_start $LOG $NQN "$NVME_BDF" --listen 127.0.0.1:$PORT --subnqn $NQN -n 1=$NSID \
    --allow-host $HOST --threads 2
sed 's/^/    /' $LOG

echo "== a host not on the list is refused (and the target keeps serving)"
set +e
echo "transport=tcp,traddr=127.0.0.1,trsvcid=$PORT,nqn=$NQN,hostnqn=nqn.2026-01.test:intruder" \
    >/dev/nvme-fabrics 2>/tmp/refused.err
rc=$?
set -e
[ "$rc" != 0 ] || fail "the kernel host connected with a host NQN that is not allowed"
kill -0 $TPID || fail "nvme-target died on a refused host"
echo "    ok: refused ($(cat /tmp/refused.err))"

echo "== kernel host connects"
for b in /sys/block/nvme*; do echo "$b"; done >/tmp/before
t0=$(date +%s)
echo "transport=tcp,traddr=127.0.0.1,trsvcid=$PORT,nqn=$NQN,hostnqn=$HOST" >/dev/nvme-fabrics
SECTORS=$((64 * 2048))
DEV=""
i=0
while [ -z "$DEV" ] && [ "$i" -lt 200 ]; do
    for b in /sys/block/nvme*; do
        grep -qxF "$b" /tmp/before && continue
        if [ "$(cat "$b/size" 2>/dev/null)" = "$SECTORS" ] && [ -b "/dev/${b##*/}" ]; then DEV=/dev/${b##*/}; fi
    done
    [ -n "$DEV" ] || sleep 0.1
    i=$((i + 1))
done
[ -n "$DEV" ] || { cat $LOG; dmesg | tail -20; fail "no block device of $SECTORS sectors from our target"; }
echo "    ok: $DEV ($(cat /sys/block/${DEV#/dev/}/queue/logical_block_size)-byte blocks) in $(($(date +%s) - t0)) s"
CTRL=$(basename "$(readlink -f /sys/block/${DEV#/dev/}/device)")
echo "    controller $CTRL: model '$(cat /sys/class/nvme/$CTRL/model 2>/dev/null)'"

echo "== mkfs.ext4, mount, write files, sync, umount"
mkfs.ext4 -q -F -b 4096 "$DEV"
mkdir -p /mnt/t
mount -t ext4 "$DEV" /mnt/t
for f in a b c; do
    dd if=/dev/urandom of=/mnt/t/$f bs=1M count=4 2>/dev/null
done
mkdir /mnt/t/dir
i=0
while [ $i -lt 50 ]; do echo "file $i" >/mnt/t/dir/f$i; i=$((i + 1)); done
sync
(cd /mnt/t && md5sum a b c dir/f0 dir/f49) >/tmp/sums
cat /tmp/sums | sed 's/^/    /'
umount /mnt/t

if command -v fio >/dev/null; then
    echo "== fio over the kernel host, verify=crc32c (8 MiB file on the ext4, 4 KiB random writes, O_DIRECT)"
    # On a file of the file system (checked below), not the raw device.
    mount -t ext4 "$DEV" /mnt/t
    timeout 240 fio --name=verify --filename=/mnt/t/fio.dat --size=8M --bs=4k --rw=randwrite \
        --ioengine=psync --direct=1 --verify=crc32c --do_verify=1 --iodepth=1 >/tmp/fio.out 2>&1 ||
        { cat /tmp/fio.out; fail "fio verify over our target failed"; }
    grep -q "err= 0" /tmp/fio.out || { cat /tmp/fio.out; fail "fio reported errors"; }
    grep -E "WRITE:|READ:" /tmp/fio.out | sed 's/^/    /'
    rm /mnt/t/fio.dat
    umount /mnt/t
else
    echo "@@WARN fio is not in this guest: the fio verify step is skipped"
fi

echo "== disconnect, stop the target (SIGTERM)"
echo 1 >/sys/class/nvme/$CTRL/delete_controller
i=0
while [ -b "$DEV" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
kill -TERM $TPID
rc=0
wait $TPID || rc=$?
sed 's/^/    /' $LOG | tail -3
[ $rc = 0 ] || fail "nvme-target exited $rc on SIGTERM"
grep -q "nvme-target: stopped" $LOG || fail "nvme-target did not report a clean stop"

echo "== the data through our tools: nvme-dd reads the superblock from the controller"
timeout 60 nvme-dd --device "$NVME_BDF" if=nvme:$NSID of=/tmp/sb.bin bs=4096 count=1 --no-progress
# ext4 magic 0xEF53 at byte 1080 (superblock at 1024, s_magic at offset 56).
magic=$(dd if=/tmp/sb.bin bs=1 skip=1080 count=2 2>/dev/null | od -An -tx1 | tr -d ' \n')
[ "$magic" = "53ef" ] || fail "no ext4 superblock on namespace $NSID (magic '$magic')"
echo "    ok: ext4 superblock (magic ef53)"

echo "== the controller back to the kernel nvme driver: mount, same files"
bind_kernel
kdev=$(ns_blockdev $NSID)
mount -t ext4 -o ro "$kdev" /mnt/t
(cd /mnt/t && md5sum -c /tmp/sums) | sed 's/^/    /'
(cd /mnt/t && md5sum -c -s /tmp/sums) || fail "the files differ on the kernel driver's mount"
[ "$(ls /mnt/t/dir | wc -l)" = 50 ] || fail "the directory lost files"
umount /mnt/t
echo "ok: ext4 written through our NVMe/TCP target reads back on the kernel driver"
