# The distribution's fio with our ioengine (tools/fio-engine, target/fio-engine/nvme-fio.so)
# in the guest, on the QEMU controller bound to vfio-pci (issue 26 item 2, PCIe part):
# 1. a job file of several jobs: random writes with verify (md5 on namespace 1, 512-byte
#    blocks, bssplit, fsync; crc32c on namespace 2, 4 KiB blocks), then, after a stonewall,
#    random and sequential reads of both with verify, then trims;
# 2. data written through fio reads back through nvme-dd: fio writes a 4-byte pattern over
#    1 MiB of namespace 1 at 2 MiB, nvme-dd reads it, cmp with the expected bytes;
# 3. the refusals on the real device path: a bad filename and an offset past the end exit
#    non-zero with the engine's message;
# 4. with a second controller (layout two-ctrl): one job over namespaces of both, write and
#    read with verify.
# fio and the engine come in through GUEST_EXTRA_BINS (tests/run-all.sh:
# GUEST_EXTRA_BINS="fio=/usr/bin/fio nvme-fio.so=target/fio-engine/nvme-fio.so").
# shellcheck source=/dev/null # the guest path of tests/qemu/lib.sh
. /tests/lib.sh

ENGINE=/usr/local/bin/nvme-fio.so
command -v fio >/dev/null || fail "fio is not in the guest (GUEST_EXTRA_BINS=fio=/usr/bin/fio)"
[ -f "$ENGINE" ] || fail "$ENGINE is not in the guest (tools/fio-engine/build.sh, GUEST_EXTRA_BINS)"
bind_vfio
# fio splits filenames on ':': the PCI address with dots (SPDK's spelling).
ADDR=$(echo "$NVME_BDF" | tr ':' '.')
DEV="trtype=PCIe traddr=$ADDR"

cat >/tmp/verify.fio <<JOB
[global]
ioengine=external:$ENGINE
thread=1
iodepth=16
iodepth_batch_submit=4
iodepth_batch_complete_min=1
size=8M

[write-ns1]
filename=$DEV ns=1
rw=randwrite
bssplit=512/20:4k/50:16k/30
verify=md5
fsync=16
end_fsync=1

[write-ns2]
filename=$ADDR ns=2
rw=randwrite
bs=8k
verify=crc32c

[read-ns1]
stonewall
filename=$DEV ns=1
rw=randread
bssplit=512/20:4k/50:16k/30
verify=md5

[read-ns2]
filename=$ADDR ns=2
rw=read
bs=8k
verify=crc32c

[trim-ns2]
stonewall
filename=$DEV ns=2
offset=32M
size=4M
rw=randtrim
bs=64k
JOB

echo "== fio: write with verify, read back with verify, trim ($DEV)"
rc=0
fio /tmp/verify.fio >/tmp/fio.out 2>&1 || rc=$?
grep -E "^[a-z0-9-]+: \(groupid|issued rwts|verify|nvme-userspace" /tmp/fio.out || true
[ $rc -eq 0 ] || { cat /tmp/fio.out; fail "fio exited $rc"; }
for job in write-ns1 write-ns2 read-ns1 read-ns2 trim-ns2; do
    grep -q "^$job: (groupid=[0-9]*, jobs=1): err= 0" /tmp/fio.out || fail "fio job $job did not pass"
done

echo "== fio writes a pattern, nvme-dd reads it back"
fio --name=pattern --thread=1 --ioengine=external:"$ENGINE" --filename="$DEV ns=1" \
    --rw=write --bs=64k --offset=2M --size=1M --iodepth=4 --buffer_pattern=0x5aa5c33c \
    >/tmp/pat.out 2>&1 || { cat /tmp/pat.out; fail "fio pattern write failed"; }
# The expected MiB: the 4 bytes doubled 18 times.
printf '\132\245\303\074' >/tmp/want
i=0
while [ $i -lt 18 ]; do cat /tmp/want /tmp/want >/tmp/want2 && mv /tmp/want2 /tmp/want; i=$((i + 1)); done
rm -f /tmp/got
nvme-dd --device "$NVME_BDF" if=nvme:1 of=/tmp/got bs=64k count=16 skip=32 </dev/null 2>/tmp/ndd.err ||
    { cat /tmp/ndd.err; fail "nvme-dd failed"; }
cmp /tmp/want /tmp/got || fail "nvme-dd did not read back what fio wrote"
echo "   1 MiB written by fio at 2 MiB of namespace 1 reads back through nvme-dd"

echo "== refusals"
fio --name=bad --thread=1 --ioengine=external:"$ENGINE" --filename="trtype=PCIe traddr=zz" \
    --rw=read --bs=4k --size=1M >/tmp/bad.out 2>&1 && fail "fio accepted a bad filename"
grep -q "names no controller" /tmp/bad.out || { cat /tmp/bad.out; fail "no clear error for a bad filename"; }
fio --name=past --thread=1 --ioengine=external:"$ENGINE" --filename="$DEV ns=1" --rw=write \
    --bs=4k --offset=64M --size=1M >/tmp/past.out 2>&1 && fail "fio accepted an offset past the end"
grep -q "is outside" /tmp/past.out || { cat /tmp/past.out; fail "no clear error for an offset past the end"; }
if [ -n "${NVME2_BDF:-}" ]; then
    # Layout two-ctrl: one job over namespaces of both controllers (one DMA context, one queue
    # pair on each), write with verify, then a read job with verify.
    echo "== one job over two controllers ($NVME_BDF, $NVME2_BDF)"
    PCI_ALLOWED="$NVME_BDF $NVME2_BDF" HUGEMEM=$CASE_HUGEMEM hugepage-setup.sh config
    FILES="$DEV ns=2:$(echo "$NVME2_BDF" | tr ':' '.') ns=1"
    for rw in randwrite randread; do
        rc=0
        fio --name="two-$rw" --thread=1 --ioengine=external:"$ENGINE" --filename="$FILES" \
            --rw=$rw --bs=4k --iodepth=16 --size=16M --verify=crc32c >/tmp/two.out 2>&1 || rc=$?
        grep -E "groupid|issued rwts|nvme-userspace" /tmp/two.out || true
        [ $rc -eq 0 ] || { cat /tmp/two.out; fail "fio $rw over two controllers exited $rc"; }
    done
fi
echo "ok: fio with the engine in the guest"
