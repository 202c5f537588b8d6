# NVMe/TCP: our initiator against the kernel's NVMe-oF target (nvmet + nvmet-tcp) on
# 127.0.0.1:4420, configured through configfs with two namespaces: a memory-backed null_blk
# device with 4 KiB blocks (nsid 1) and a loop device over a file with 512-byte blocks (nsid 2).
# Runs discovery, nvme-identify, nvme-hello, an nvme-dd round trip (checked against the backing file and
# through the kernel's own NVMe/TCP host), an nvme-perf smoke run, SQLite through our VFS on
# namespace 2 (nvme-sqlite: workload, --verify-only in a new process, the same checksum as
# SQLite's default VFS on a kernel file), and bad input and faults:
# nothing listening, a wrong subsystem NQN, the port removed mid-run. Each must fail with a
# clear message, quickly, without a panic.
# shellcheck source=/dev/null # the guest path of tests/qemu/lib.sh
. /tests/lib.sh

NQN=$NVMF_NQN
CFG=$NVMF_CFG
PORT=$NVMF_PORT
TRID=$NVMF_TRID
NS2_MB=16

echo "== loopback, modules, target"
nvmf_target_up $NS2_MB

echo "== nvme-identify $TRID"
# shellcheck disable=SC2086 # unquoted on purpose: the tools also take the id as several words
timeout 60 nvme-identify $TRID | tee /tmp/id.out
grep -q "^Namespace 1" /tmp/id.out || fail "nvme-identify did not list namespace 1"
grep -q "^Namespace 2" /tmp/id.out || fail "nvme-identify did not list namespace 2"
grep -A6 "^Namespace 1" /tmp/id.out | grep -q "Block size: *4096 bytes" || fail "namespace 1 is not 4 KiB"
grep -A6 "^Namespace 2" /tmp/id.out | grep -q "Block size: *512 bytes" || fail "namespace 2 is not 512 B"
grep -q "Model: *Linux" /tmp/id.out || fail "the model is not the kernel target's"
timeout 60 nvme-identify --json "$TRID" >/tmp/id.json
grep -q '"nsid": *2' /tmp/id.json || fail "nvme-identify --json lacks namespace 2"

echo "== discovery (no subnqn: the discovery subsystem lists the port's subsystems)"
timeout 60 nvme-identify trtype:TCP traddr:127.0.0.1 trsvcid:$PORT | tee /tmp/disc.out
grep -q "subsystem .*traddr:127.0.0.1 trsvcid:$PORT subnqn:$NQN\$" /tmp/disc.out || fail "discovery did not list $NQN"

echo "== nvme-hello"
# shellcheck disable=SC2086 # as above
timeout 60 nvme-hello --nsid 2 --write-lba 8 $TRID | tee /tmp/hello.out
grep -q "Hello world" /tmp/hello.out || fail "nvme-hello --write-lba 8 did not print the greeting"
dd if=/tmp/ns2.img of=/tmp/blk8 bs=512 skip=8 count=1 2>/dev/null
[ "$(head -c 12 /tmp/blk8)" = "Hello world!" ] || fail "block 8 of the backing file lacks the greeting"
timeout 60 nvme-hello --nsid 1 --write-lba 3 "$TRID" | grep -q "Hello world" || fail "nvme-hello on the 4 KiB namespace"

echo "== nvme-dd round trip (512-byte namespace, checked on the backing file)"
dd if=/dev/urandom of=/tmp/in.bin bs=64k count=16 2>/dev/null
timeout 120 nvme-dd --device "$TRID" if=/tmp/in.bin of=nvme:2 bs=64k seek=4 --qd 8 --no-progress
dd if=/tmp/ns2.img of=/tmp/file.bin bs=64k skip=4 count=16 2>/dev/null
cmp /tmp/in.bin /tmp/file.bin || fail "the backing file differs from what nvme-dd wrote over TCP"
timeout 120 nvme-dd --device "$TRID" if=nvme:2 of=/tmp/out.bin bs=64k skip=4 count=16 --no-progress
cmp /tmp/in.bin /tmp/out.bin || fail "nvme-dd read back different data over TCP"
echo "== nvme-dd round trip (4 KiB null_blk namespace, R2T and C2HData)"
timeout 120 nvme-dd --device "$TRID" if=/tmp/in.bin of=nvme:1 bs=256k --qd 4 --no-progress
timeout 120 nvme-dd --device "$TRID" if=nvme:1 of=/tmp/out1.bin bs=256k count=4 --no-progress
cmp /tmp/in.bin /tmp/out1.bin || fail "nvme-dd round trip on namespace 1 differs"

echo "== header and data digests, and the C2HData SUCCESS shortcut (I/O queues connect without SQ flow control)"
RUST_LOG=nvme_tcp=info timeout 120 nvme-dd --device "$TRID hdgst:1 ddgst:1" if=nvme:2 of=/tmp/dig.bin \
    bs=64k skip=4 count=16 --no-progress 2>/tmp/dig.err
cmp /tmp/in.bin /tmp/dig.bin || fail "a read with digests returned different data"
grep "queue 1 closed" /tmp/dig.err | sed 's/^/    /'
grep -q "digests header true data true" /tmp/dig.err || fail "the target did not enable both digests"
grep "queue 1 closed" /tmp/dig.err | grep -qv " 0 success shortcuts" || fail "nvmet sent no C2HData with SUCCESS"
# In-capsule writes (8 KiB records) to namespace 1, R2T/H2CData writes (64 KiB) to namespace 2.
RUST_LOG=nvme_tcp=info timeout 120 nvme-dd --device "$TRID hdgst:1 ddgst:1" if=/tmp/in.bin of=nvme:1 \
    bs=8k seek=32 --no-progress 2>/tmp/dig.err
grep "queue 1 closed" /tmp/dig.err | sed 's/^/    /'
grep "queue 1 closed" /tmp/dig.err | grep -qv " 0 in-capsule writes" || fail "no in-capsule write went out"
timeout 120 nvme-dd --device "$TRID" if=nvme:1 of=/tmp/dig1.bin bs=64k skip=4 count=16 --no-progress
cmp /tmp/in.bin /tmp/dig1.bin || fail "in-capsule writes with digests stored different data"
RUST_LOG=nvme_tcp=info timeout 120 nvme-dd --device "$TRID hdgst:1 ddgst:1" if=/tmp/in.bin of=nvme:2 \
    bs=64k seek=40 --no-progress 2>/tmp/dig.err
grep "queue 1 closed" /tmp/dig.err | sed 's/^/    /'
grep "queue 1 closed" /tmp/dig.err | grep -qv " 0 R2Ts" || fail "no write went by R2T"
dd if=/tmp/ns2.img of=/tmp/dig2.bin bs=64k skip=40 count=16 2>/dev/null
cmp /tmp/in.bin /tmp/dig2.bin || fail "R2T writes with digests stored different data"

echo "== cross-check through the kernel's NVMe/TCP host"
if nvmf_host_available; then
    dev=$(nvmf_host_connect $((NS2_MB * 2048)))
    dd if="$dev" of=/tmp/kernel.bin bs=64k skip=4 count=16 iflag=direct 2>/dev/null
    cmp /tmp/in.bin /tmp/kernel.bin || fail "the kernel's NVMe/TCP host reads different data from $dev"
    echo "    ok: $dev (kernel host) reads what nvme-dd wrote"
    nvmf_host_disconnect
else
    echo "@@WARN nvme-tcp host module unavailable: kernel cross-check skipped"
fi

echo "== nvme-perf smoke"
timeout 60 nvme-perf "$TRID" -n 2 -w randread -q 16 -t 1 --quiet --json >/tmp/perf.json 2>/tmp/perf.err || {
    cat /tmp/perf.err
    fail "nvme-perf randread over TCP failed"
}
grep -q '"errors": *0' /tmp/perf.json || { cat /tmp/perf.json; fail "nvme-perf reported errors"; }
ios=$(sed -n 's/.*"ios": *\([0-9][0-9]*\).*/\1/p' /tmp/perf.json | head -n1)
[ "${ios:-0}" -gt 0 ] || fail "nvme-perf completed no I/O"
echo "    ok: randread QD16, $ios I/Os"
timeout 60 nvme-perf "$TRID" -n 1 -w randwrite -q 8 -t 1 --quiet --json >/tmp/perf.json 2>/tmp/perf.err || {
    cat /tmp/perf.err
    fail "nvme-perf randwrite over TCP failed"
}
grep -q '"errors": *0' /tmp/perf.json || { cat /tmp/perf.json; fail "nvme-perf randwrite reported errors"; }

echo "== SQLite through our VFS on the 512-byte namespace (nvme-sqlite over TCP)"
# The store is formatted over namespace 2: the blocks checked above are not read again (the
# reset check below writes its own block first).
sq_sum() { sed -n 's/^checksum: //p' "$1"; }
timeout 120 nvme-sqlite --device "$TRID" --nsid 2 --format -n 2000 -m 100 >/tmp/sqt1.out 2>&1 || {
    cat /tmp/sqt1.out
    fail "nvme-sqlite over TCP failed"
}
grep -q "^integrity_check: ok" /tmp/sqt1.out || { cat /tmp/sqt1.out; fail "integrity_check not ok over TCP"; }
ours=$(sq_sum /tmp/sqt1.out)
[ -n "$ours" ] || { cat /tmp/sqt1.out; fail "nvme-sqlite over TCP printed no checksum"; }
timeout 120 nvme-sqlite --device "$TRID" --nsid 2 --verify-only >/tmp/sqt2.out 2>&1 || {
    cat /tmp/sqt2.out
    fail "nvme-sqlite --verify-only over TCP failed"
}
grep -q "^integrity_check: ok" /tmp/sqt2.out || { cat /tmp/sqt2.out; fail "integrity_check not ok on reopen over TCP"; }
[ "$(sq_sum /tmp/sqt2.out)" = "$ours" ] || fail "reopened checksum over TCP $(sq_sum /tmp/sqt2.out) != $ours"
rm -f /tmp/sqt-kernel.db
timeout 120 nvme-sqlite --kernel-file /tmp/sqt-kernel.db -n 2000 -m 100 >/tmp/sqt3.out 2>&1 || {
    cat /tmp/sqt3.out
    fail "nvme-sqlite on a kernel file failed"
}
[ "$(sq_sum /tmp/sqt3.out)" = "$ours" ] || fail "kernel file checksum $(sq_sum /tmp/sqt3.out) != ours over TCP $ours"
echo "    ok: SQLite on namespace 2 over TCP, reopened in a new process, checksum $ours as on a kernel file"

echo "== bad input: nothing listening, wrong subsystem, malformed transport id"
expect_fail "cannot connect to 127.0.0.1:4421;listens there" \
    timeout 30 nvme-identify trtype:TCP traddr:127.0.0.1 trsvcid:4421 subnqn:$NQN
expect_fail "no subsystem;nqn.2026-01.test:nope" \
    timeout 30 nvme-hello trtype:TCP traddr:127.0.0.1 trsvcid:$PORT subnqn:nqn.2026-01.test:nope
expect_fail "has no traddr" nvme-identify trtype:TCP subnqn:$NQN
expect_fail "discovery subsystem;nvme-identify" nvme-hello trtype:TCP traddr:127.0.0.1 trsvcid:$PORT
expect_fail "not an IPv4 or IPv6 address" nvme-identify trtype:TCP traddr:localhost subnqn:$NQN

echo "== the port removed while nvme-perf runs"
set +e
timeout 60 nvme-perf "$TRID" -n 2 -w randread -q 8 -t 20 --quiet >/tmp/cut.out 2>/tmp/cut.err &
pid=$!
sleep 3
rm "$CFG/ports/1/subsystems/$NQN"
start=$(date +%s)
wait $pid
rc=$?
end=$(date +%s)
set -e
sed 's/^/    stderr: /' /tmp/cut.err | head -n 5
[ "$rc" != 0 ] || fail "nvme-perf succeeded although the port went away"
[ "$rc" != 101 ] || fail "nvme-perf panicked when the port went away"
[ "$rc" != 124 ] || fail "nvme-perf hung when the port went away"
grep -qi "closed the connection\|connection" /tmp/cut.err || fail "nvme-perf did not say the connection was lost"
echo "    ok: exit $rc $((end - start)) s after the port went away"

echo "== the port back: a new run works"
ln -s "$CFG/subsystems/$NQN" "$CFG/ports/1/subsystems/$NQN"
timeout 60 nvme-perf "$TRID" -n 2 -w randread -q 8 -t 1 --quiet --json >/tmp/back.json 2>/tmp/back.err || {
    cat /tmp/back.err
    fail "nvme-perf failed after the port came back"
}
grep -q '"errors": *0' /tmp/back.json || { cat /tmp/back.json; fail "nvme-perf reported errors after the port came back"; }
timeout 60 nvme-identify --health "$TRID" >/tmp/health.out || fail "nvme-identify --health over TCP failed"
grep -q "^SMART / Health Information of 127.0.0.1:$PORT/$NQN" /tmp/health.out || { cat /tmp/health.out; fail "no SMART log over TCP"; }
grep -q "^Error Information Log: " /tmp/health.out || fail "no Error Information log over TCP"
sed -n '1,4p;/^Error Information Log/p' /tmp/health.out | sed 's/^/    /'
ios=$(sed -n 's/.*"ios": *\([0-9][0-9]*\).*/\1/p' /tmp/back.json | head -n1)
[ "${ios:-0}" -gt 0 ] || fail "nvme-perf completed no I/O after the port came back"
echo "    ok: nvme-perf ($ios I/Os, 0 errors) and nvme-identify --health over TCP after the port came back"
# A controller reset against the kernel's target: CC.EN=0 on the old association, a new
# admin Connect, CC.EN=1, and the I/O queue reconnected with its queue id, between a write
# and its read-back.
timeout 60 nvme-hello --nsid 2 --write-lba 12 --reset "$TRID" >/tmp/reset.out 2>&1 || {
    cat /tmp/reset.out
    fail "nvme-hello --reset over TCP failed"
}
grep -q "Controller reset" /tmp/reset.out || { cat /tmp/reset.out; fail "nvme-hello did not reset"; }
grep -q "Hello world" /tmp/reset.out || { cat /tmp/reset.out; fail "no greeting read back after the reset"; }
dd if=/tmp/ns2.img of=/tmp/blk12 bs=512 skip=12 count=1 2>/dev/null
[ "$(head -c 12 /tmp/blk12)" = "Hello world!" ] || fail "block 12 of the backing file lacks the greeting"
echo "    ok: write, controller reset over TCP, read back through the reconnected queue"
# The C API over TCP (tcpapi): examples/c/hello.c, given the transport id, writes the last block
# of namespace 1 and reads it back; the block is then read from the target's device.
command -v hello_c >/dev/null || fail "hello_c is not in the guest (tests/qemu/build-c-guest.sh failed?)"
timeout 60 hello_c "$TRID" --write >/tmp/hello_c.out 2>&1 || { cat /tmp/hello_c.out; fail "hello_c over TCP failed"; }
lba=$(sed -n 's/^namespace 1 LBA \([0-9][0-9]*\): wrote and read back 4096 bytes: OK$/\1/p' /tmp/hello_c.out)
[ -n "$lba" ] || { cat /tmp/hello_c.out; fail "hello_c did not write and read back a block of namespace 1 over TCP"; }
first=$(dd if=/dev/nullb0 bs=4096 skip="$lba" count=1 iflag=direct 2>/dev/null | od -An -tx1 -N4 | tr -d ' \n')
[ "$first" = "030a1118" ] || fail "block $lba of /dev/nullb0 lacks hello_c's pattern (starts $first)"
echo "    ok: hello_c (C API) wrote LBA $lba of namespace 1 over TCP, read it back; the target's device holds it"
rm "$CFG/ports/1/subsystems/$NQN"

echo "== cleanup"
nvmf_target_down
