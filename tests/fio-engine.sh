#!/usr/bin/env bash
# The fio ioengine (tools/fio-engine) run by the distribution's fio binary against the
# in-process emulator (filename `sim ns=N`; the engine built with --emulator): several jobs on
# two namespaces of two block sizes write with verify=md5 / verify=crc32c (bssplit, iodepth
# batches, fsync and end_fsync as Flush), then other jobs read everything back with verify in
# the same process, then a trim job; and the refusals: a read-verify of blocks never written
# fails verification (verification is real), a bad filename, an absent device, a namespace
# the controller lacks, an offset past the end, and thread=0 each exit non-zero with the
# engine's message. `fio --enghelp=PATH` lists the engine options. The controller options
# (nvme_sgl, nvme_shadow_doorbells) pass verify both ways; jobs of one controller asking for
# different ones are refused. Seconds.
#
#   tests/fio-engine.sh        (needs fio: apt-get install fio; builds the engine first)
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
FAILED=0
ENGINE=$ROOT/target/fio-engine/nvme-fio-emulator.so
WORK=$ROOT/target/fio-engine/test
mkdir -p "$WORK"

"$ROOT/tools/fio-engine/build.sh" --emulator --debug || exit 1

pass() { echo "ok   $1"; }
fail() { echo "FAIL $1"; FAILED=1; }

# run NAME EXPECTED_EXIT(0|nonzero) GREP_PATTERN fio-args...
run() {
    local name=$1 want=$2 pattern=$3
    shift 3
    local out=$WORK/$name.log rc
    (cd "$WORK" && timeout 120 fio "$@") >"$out" 2>&1
    rc=$?
    if [ "$want" = 0 ] && [ $rc -ne 0 ]; then
        fail "$name: fio exited $rc"; sed 's/^/    /' "$out" | tail -20; return
    fi
    if [ "$want" != 0 ] && { [ $rc -eq 0 ] || [ $rc -eq 124 ]; }; then
        fail "$name: fio exited $rc, wanted a failure"; sed 's/^/    /' "$out" | tail -20; return
    fi
    if ! grep -q -- "$pattern" "$out"; then
        fail "$name: no \`$pattern\` in the output"; sed 's/^/    /' "$out" | tail -20; return
    fi
    pass "$name (exit $rc)"
}

cat >"$WORK/verify.fio" <<JOB
[global]
ioengine=external:$ENGINE
thread=1
iodepth=16
iodepth_batch_submit=4
iodepth_batch_complete_min=1
size=8M

[write-ns1]
filename=sim ns=1
rw=randwrite
bssplit=512/20:4k/50:16k/30
verify=md5
do_verify=1
fsync=8
end_fsync=1

[write-ns2]
filename=sim ns=2
rw=randwrite
bs=8k
verify=crc32c
do_verify=1

[read-ns1]
stonewall
filename=sim ns=1
rw=randread
bssplit=512/20:4k/50:16k/30
verify=md5

[read-ns2]
filename=sim ns=2
rw=read
bs=8k
verify=crc32c
nvme_batch=0

[trim-ns2]
stonewall
filename=sim ns=2
rw=randtrim
bs=64k
JOB
run verify 0 "read-ns2: (groupid=1, jobs=1): err= 0" "$WORK/verify.fio"
# Every job ran without error, and the reads read what was written.
for job in write-ns1 write-ns2 read-ns1 read-ns2 trim-ns2; do
    if grep -q "^$job: (groupid=[0-9]*, jobs=1): err= 0" "$WORK/verify.log"; then
        pass "verify: $job err=0"
    else
        fail "verify: $job"
    fi
done
grep -q "issued rwts: total=0,0,128,0" "$WORK/verify.log" && pass "verify: 128 trims issued" ||
    fail "verify: trims"

# Fresh emulator, nothing written: verification must fail (so the passes above mean something).
run unwritten nonzero "bad magic header" --name=r --thread=1 --ioengine=external:"$ENGINE" \
    --filename="sim ns=1" --rw=randread --bs=4k --size=1M --verify=crc32c
run bad-filename nonzero "names no controller" --name=r --thread=1 --ioengine=external:"$ENGINE" \
    --filename="trtype=PCIe traddr=zz" --rw=read --bs=4k --size=1M
run no-device nonzero "could not be opened through VFIO" --name=r --thread=1 \
    --ioengine=external:"$ENGINE" --filename="trtype=PCIe traddr=0000.7f.1f.7 ns=1" --rw=read \
    --bs=4k --size=1M
run bad-namespace nonzero "namespace 7 is not active" --name=r --thread=1 \
    --ioengine=external:"$ENGINE" --filename="sim ns=7" --rw=read --bs=4k --size=1M
run offset-past-end nonzero "is outside \`sim ns=1\`" --name=w --thread=1 \
    --ioengine=external:"$ENGINE" --filename="sim ns=1" --rw=write --bs=4k --offset=15M --size=2M
run no-thread nonzero "thread=1 is required" --name=w --ioengine=external:"$ENGINE" \
    --filename="sim ns=1" --rw=write --bs=4k --size=1M
run enghelp 0 "nvme_batch" --enghelp="$ENGINE"
for opt in nvme_shadow_doorbells nvme_sgl nvme_vfio_mode; do
    grep -q "^$opt" "$WORK/enghelp.log" && pass "enghelp: $opt" || fail "enghelp: $opt not listed"
done

# Controller options: PRPs forced and MMIO doorbells only (the emulator offers SGLs and
# shadow doorbells), then SGLs with shadow doorbells, in two processes; each writes with
# verify and reads back with verify in a later job.
for o in "nvme_sgl=0 nvme_shadow_doorbells=never" "nvme_sgl=1 nvme_shadow_doorbells=always"; do
    name="options-${o// /-}"
    name=${name//=/}
    cat >"$WORK/$name.fio" <<JOB
[global]
ioengine=external:$ENGINE
thread=1
iodepth=8
iodepth_batch_submit=4
filename=sim ns=1
size=4M
verify=crc32c
${o// /$'\n'}

[write]
rw=randwrite
bssplit=4k/50:12k/50

[read]
stonewall
rw=randread
bs=4k
JOB
    run "$name" 0 "read: (groupid=1, jobs=1): err= 0" "$WORK/$name.fio"
done
# Jobs sharing one controller must ask for the same options (it is opened once).
cat >"$WORK/options-conflict.fio" <<JOB
[global]
ioengine=external:$ENGINE
thread=1
filename=sim ns=1
rw=write
bs=4k
size=1M

[prp]
nvme_sgl=0

[sgl]
stonewall
nvme_sgl=1
JOB
run options-conflict nonzero "already open with other" "$WORK/options-conflict.fio"

[ $FAILED = 0 ] && echo "fio-engine.sh: all passed" || echo "fio-engine.sh: FAILED"
exit $FAILED
