# The distribution's fio with our ioengine over NVMe/TCP, against the kernel's nvmet-tcp target
# on 127.0.0.1 (its own boot, like nvmf-tcp.sh; issue 26 item 2, NVMe/TCP part): a job file of
# several jobs writes with verify (crc32c on namespace 1, null_blk, 4 KiB blocks; md5 with
# bssplit and fsync on namespace 2, a loop device, 512-byte blocks), then reads both back with
# verify; then a pattern fio wrote reads back through nvme-dd over the same transport id.
# fio and the engine come in through GUEST_EXTRA_BINS (see tests/run-all.sh).
# shellcheck source=/dev/null # the guest path of tests/qemu/lib.sh
. /tests/lib.sh

ENGINE=/usr/local/bin/nvme-fio.so
command -v fio >/dev/null || fail "fio is not in the guest (GUEST_EXTRA_BINS=fio=/usr/bin/fio)"
[ -f "$ENGINE" ] || fail "$ENGINE is not in the guest (tools/fio-engine/build.sh, GUEST_EXTRA_BINS)"
nvmf_target_up 64
# fio splits filenames on ':': '=' between key and value, and the NQN's colons escaped.
NQN_ESC=$(echo "$NVMF_NQN" | sed 's/:/\\:/g')
DEV="trtype=TCP adrfam=IPv4 traddr=127.0.0.1 trsvcid=$NVMF_PORT subnqn=$NQN_ESC"

cat >/tmp/verify.fio <<JOB
[global]
ioengine=external:$ENGINE
thread=1
iodepth=16
iodepth_batch_submit=4
size=8M

[write-ns1]
filename=$DEV ns=1
rw=randwrite
bs=4k
verify=crc32c

[write-ns2]
filename=$DEV ns=2
rw=randwrite
bssplit=512/30:4k/40:32k/30
verify=md5
fsync=16
end_fsync=1

[read-ns1]
stonewall
filename=$DEV ns=1
rw=randread
bs=4k
verify=crc32c

[read-ns2]
filename=$DEV ns=2
rw=randread
bssplit=512/30:4k/40:32k/30
verify=md5
JOB

echo "== fio over NVMe/TCP: write with verify, read back with verify"
rc=0
timeout 240 fio /tmp/verify.fio >/tmp/fio.out 2>&1 || rc=$?
grep -E "^[a-z0-9-]+: \\(groupid|issued rwts|verify|nvme-userspace" /tmp/fio.out || true
[ $rc -eq 0 ] || { cat /tmp/fio.out; fail "fio exited $rc"; }
for job in write-ns1 write-ns2 read-ns1 read-ns2; do
    grep -q "^$job: (groupid=[0-9]*, jobs=1): err= 0" /tmp/fio.out || fail "fio job $job did not pass"
done

echo "== fio writes a pattern over NVMe/TCP, nvme-dd reads it back"
timeout 120 fio --name=pattern --thread=1 --ioengine=external:"$ENGINE" --filename="$DEV ns=2" \
    --rw=write --bs=64k --offset=2M --size=1M --iodepth=4 --buffer_pattern=0x5aa5c33c \
    >/tmp/pat.out 2>&1 || { cat /tmp/pat.out; fail "fio pattern write failed"; }
printf '\132\245\303\074' >/tmp/want
i=0
while [ $i -lt 18 ]; do cat /tmp/want /tmp/want >/tmp/want2 && mv /tmp/want2 /tmp/want; i=$((i + 1)); done
rm -f /tmp/got
timeout 120 nvme-dd --device "$NVMF_TRID" if=nvme:2 of=/tmp/got bs=64k count=16 skip=32 \
    --no-progress </dev/null 2>/tmp/ndd.err || { cat /tmp/ndd.err; fail "nvme-dd failed"; }
cmp /tmp/want /tmp/got || fail "nvme-dd did not read back what fio wrote over NVMe/TCP"
echo "ok: 1 MiB written by fio at 2 MiB of namespace 2 reads back through nvme-dd"
nvmf_target_down
echo "ok: fio with the engine over NVMe/TCP"
