# Namespace management on two controllers of one NVMe subsystem (layout subsys: QEMU nvme-subsys,
# CNTLID 0 and 1, namespaces 1 and 2 shared, namespace 3 detached): nvme-admin list-subsys (one
# subsystem, namespaces 1 and 2 with two paths each; nvme-cli's list-subsys the witness of the
# NQN and addresses) and nvme-dd --verify-through (written through controller 0, read back
# through controller 1 by the same process); nvme-admin list-ctrl;
# attach-ns of namespace 3 to controller 0 (list-ns, id-ns, nvme-dd writes and reads it), then to
# controller 1 (the same bytes read through it: one namespace, two paths); detach-ns from both
# (gone from list-ns, nvme-dd refused); format of namespace 2 to LBA format 0 (512 B), refused
# without --force; then nvme-cli on the kernel driver as the witness: the same controller list,
# active and allocated namespaces, namespace 2's new format, and namespace 3 attached by nvme-cli
# holds the pattern written through us.
# shellcheck source=/dev/null # the guest path of tests/qemu/lib.sh
. /tests/lib.sh

[ "${NVME_SUBSYS:-0}" = 1 ] && [ -n "${NVME2_BDF:-}" ] ||
    fail "this case needs two controllers of one subsystem: run.sh --layout subsys"
d=/tmp/subsys
rm -rf "$d"
mkdir -p "$d"

# jvals FILE KEY: the values of every "KEY": number in a JSON file, blank-separated (any
# formatting: ours and nvme-cli's).
jvals() {
    tr -d ' \t\n' <"$1" | grep -o "\"$2\":[0-9]*" | sed 's/.*://' | tr '\n' ' ' | sed 's/ $//'
}
# jstrs FILE KEY: the values of every "KEY": "string" in a JSON file, blank-separated.
jstrs() {
    tr -d ' \t\n' <"$1" | grep -o "\"$2\":\"[^\"]*\"" | sed 's/^"[^"]*":"//; s/"$//' | tr '\n' ' ' |
        sed 's/ $//'
}
# jpaths FILE NSID: namespace NSID's "Paths" in nvme-admin list-subsys's JSON ('"NSID":N,
# "Paths":[...]', keys in serde_json's sorted order).
jpaths() {
    tr -d ' \t\n' <"$1" | grep -o "\"NSID\":$2,\"Paths\":\[[^]]*\]" | sed 's/.*"Paths"://'
}
# jpath_ns FILE NAME: the namespaces path NAME reaches in nvme-admin list-subsys's JSON.
jpath_ns() {
    tr -d ' \t\n' <"$1" | grep -o "\"Name\":\"$2\",\"Namespaces\":\[[0-9,]*\]" | sed 's/.*://'
}
# expect_eq WHAT GOT WANT
expect_eq() {
    [ "$2" = "$3" ] || fail "$1: got '$2', expected '$3'"
    echo "   ok: $1 = '$2'"
}
admin() {
    nvme-admin "$@" -o json
}

echo "== both controllers on vfio-pci"
PCI_ALLOWED="$NVME_BDF $NVME2_BDF" HUGEMEM=$CASE_HUGEMEM hugepage-setup.sh config >/dev/null
admin list-ctrl "$NVME_BDF" >"$d/ours-list-ctrl.json"
cat "$d/ours-list-ctrl.json"
expect_eq "controllers of the subsystem" "$(jvals "$d/ours-list-ctrl.json" ctrl_id)" "0 1"
expect_eq "num_ctrl" "$(jvals "$d/ours-list-ctrl.json" num_ctrl)" 2
admin list-ctrl "$NVME_BDF" -n 1 >"$d/ns1-ctrls.json"
expect_eq "controllers of shared namespace 1" "$(jvals "$d/ns1-ctrls.json" ctrl_id)" "0 1"
admin list-ctrl "$NVME_BDF" -n 3 >"$d/ns3-ctrls.json"
expect_eq "controllers of detached namespace 3" "$(jvals "$d/ns3-ctrls.json" num_ctrl)" 0
admin list-ns "$NVME_BDF" >"$d/list-ns.json"
expect_eq "active namespaces at boot" "$(jvals "$d/list-ns.json" nsid)" "1 2"
# Namespace 1 is shared (NMIC bit 0) and is one namespace: the same Identify Namespace data and
# identifiers (ns-descs) through both controllers.
admin id-ns "$NVME_BDF" -n 1 >"$d/id-ns1-a.json"
admin id-ns "$NVME2_BDF" -n 1 >"$d/id-ns1-b.json"
expect_eq "namespace 1 NMIC" "$(jvals "$d/id-ns1-a.json" nmic)" 1
cmp "$d/id-ns1-a.json" "$d/id-ns1-b.json" || fail "namespace 1's Identify data differs between the controllers"
admin ns-descs "$NVME_BDF" -n 1 >"$d/descs1-a.json"
admin ns-descs "$NVME2_BDF" -n 1 >"$d/descs1-b.json"
cat "$d/descs1-a.json"
cmp "$d/descs1-a.json" "$d/descs1-b.json" || fail "namespace 1's identifiers differ between the controllers"
echo "   ok: namespace 1 has the same Identify data and identifiers through both controllers"

# list-subsys: the driver recognises the two controllers as one subsystem and namespaces 1 and
# 2 as one namespace each with two paths (SUBNQN, CNTLID, CMIC, NMIC, NGUID/EUI64/UUID).
echo "== list-subsys: one subsystem, two paths, shared namespaces as one"
admin list-subsys "$NVME_BDF" "$NVME2_BDF" >"$d/ours-subsys.json"
cat "$d/ours-subsys.json"
nqn=$(jstrs "$d/ours-subsys.json" NQN)
expect_eq "subsystems listed" "$(echo "$nqn" | wc -w)" 1
case $nqn in *subsys0) ;; *) fail "list-subsys NQN '$nqn' is not the QEMU subsystem's" ;; esac
expect_eq "path addresses" "$(jstrs "$d/ours-subsys.json" Address)" "$NVME_BDF $NVME2_BDF"
expect_eq "path CNTLIDs" "$(jvals "$d/ours-subsys.json" CNTLID)" "0 1"
expect_eq "namespaces of the subsystem" "$(jvals "$d/ours-subsys.json" NSID)" "1 2"
expect_eq "namespace 1's paths" "$(jpaths "$d/ours-subsys.json" 1)" '["nvme0","nvme1"]'
expect_eq "namespace 2's paths" "$(jpaths "$d/ours-subsys.json" 2)" '["nvme0","nvme1"]'
! grep -q KeptApart "$d/ours-subsys.json" || fail "list-subsys kept a namespace apart"

echo "== a write through controller 0 read back through controller 1, in one process"
dd if=/dev/urandom of="$d/mp-pattern" bs=4096 count=16 2>/dev/null
nvme-dd --device "$NVME_BDF" --verify-through "$NVME2_BDF" if="$d/mp-pattern" of=nvme:1 \
    bs=4096 count=16 seek=64 </dev/null 2>"$d/verify.err" || { cat "$d/verify.err"; fail "nvme-dd --verify-through failed"; }
grep "verified" "$d/verify.err"
grep -q "verified: 65536 bytes read back through $NVME2_BDF (controller 1)" "$d/verify.err" ||
    fail "nvme-dd --verify-through did not report the read-back through controller 1"
nvme-dd --device "$NVME2_BDF" if=nvme:1 of="$d/mp-back" bs=4096 count=16 skip=64 </dev/null
cmp "$d/mp-pattern" "$d/mp-back" || fail "namespace 1 read through controller 1 differs"
echo "   ok: 64 KiB written through controller 0, read back through controller 1"

# The raw Firmware Slot log (03h) as bytes, for nvme-cli's get-log below; QEMU 7.2 has no
# Device Self-test (OACS bit 4 clear): refused before anything is sent.
nvme-admin get-log "$NVME_BDF" --log-id 3 --log-len 512 --raw-binary >"$d/ours-fw.bin"
[ "$(wc -c <"$d/ours-fw.bin")" = 512 ] || fail "get-log -b did not write 512 bytes"
nvme-admin get-log "$NVME_BDF" -i 3 -l 64 | head -3
expect_fail "Device Self-test;OACS bit 4" nvme-admin device-self-test "$NVME_BDF" -s 1
expect_fail "OACS bit 4" nvme-admin self-test-log "$NVME_BDF"

echo "== attach namespace 3 to controller 0"
admin attach-ns "$NVME_BDF" -n 3 -c 0 >"$d/attach.json"
cat "$d/attach.json"
grep -q '"attach-ns": "Success"' "$d/attach.json" || fail "attach-ns did not report Success"
expect_eq "added by the rescan" "$(tr -d ' \n' <"$d/attach.json" | grep -o '"added":\[[0-9,]*\]')" '"added":[3]'
admin list-ns "$NVME_BDF" >"$d/list-ns.json"
expect_eq "active namespaces after attach" "$(jvals "$d/list-ns.json" nsid)" "1 2 3"
admin id-ns "$NVME_BDF" -n 3 >"$d/id-ns3.json"
expect_eq "namespace 3 size (4 KiB blocks)" "$(jvals "$d/id-ns3.json" nsze)" $((16 * 1024 * 1024 / 4096))
admin list-ctrl "$NVME_BDF" -n 3 >"$d/ns3-ctrls.json"
expect_eq "controllers of namespace 3" "$(jvals "$d/ns3-ctrls.json" ctrl_id)" 0
expect_fail "Namespace Already Attached" nvme-admin attach-ns "$NVME_BDF" -n 3 -c 0
# Namespace 3 is reachable through controller 0 only; --verify-through controller 1 refuses it
# before anything is written (controller 1 reports it inactive: zeroed Identify data, NMIC 0).
admin list-subsys "$NVME_BDF" "$NVME2_BDF" >"$d/subsys-ns3.json"
expect_eq "namespace 3's paths" "$(jpaths "$d/subsys-ns3.json" 3)" '["nvme0"]'
expect_eq "namespaces through nvme0" "$(jpath_ns "$d/subsys-ns3.json" nvme0)" "[1,2,3]"
expect_eq "namespaces through nvme1" "$(jpath_ns "$d/subsys-ns3.json" nvme1)" "[1,2]"
expect_fail "does not reach the namespace 3;nothing was written" nvme-dd --device "$NVME_BDF" \
    --verify-through "$NVME2_BDF" if="$d/mp-pattern" of=nvme:3 bs=4096 count=1

echo "== I/O on namespace 3 through controller 0"
dd if=/dev/urandom of="$d/pattern" bs=4096 count=8 2>/dev/null
nvme-dd --device "$NVME_BDF" if="$d/pattern" of=nvme:3 bs=4096 count=8 seek=16 </dev/null
nvme-dd --device "$NVME_BDF" if=nvme:3 of="$d/back0" bs=4096 count=8 skip=16 </dev/null
cmp "$d/pattern" "$d/back0" || fail "namespace 3 read back through controller 0 differs"
echo "   ok: 32 KiB written and read back"

echo "== attach namespace 3 to controller 1 too, from controller 1 (its own CNTLID)"
admin attach-ns "$NVME2_BDF" -n 3 >"$d/attach1.json"
expect_eq "controllers named" "$(tr -d ' \n' <"$d/attach1.json" | grep -o '"controllers":\[[0-9,]*\]')" '"controllers":[1]'
admin list-ctrl "$NVME_BDF" -n 3 >"$d/ns3-ctrls.json"
expect_eq "controllers of namespace 3" "$(jvals "$d/ns3-ctrls.json" ctrl_id)" "0 1"
nvme-dd --device "$NVME2_BDF" if=nvme:3 of="$d/back1" bs=4096 count=8 skip=16 </dev/null
cmp "$d/pattern" "$d/back1" || fail "namespace 3 read through controller 1 differs from what controller 0 wrote"
echo "   ok: controller 1 reads what controller 0 wrote"

echo "== detach namespace 3 from both"
admin detach-ns "$NVME_BDF" -n 3 -c 0,1 >"$d/detach.json"
cat "$d/detach.json"
expect_eq "removed by the rescan" "$(tr -d ' \n' <"$d/detach.json" | grep -o '"removed":\[[0-9,]*\]')" '"removed":[3]'
admin list-ns "$NVME_BDF" >"$d/list-ns.json"
expect_eq "active namespaces after detach" "$(jvals "$d/list-ns.json" nsid)" "1 2"
admin list-ns "$NVME2_BDF" >"$d/list-ns2.json"
expect_eq "active namespaces of controller 1 after detach" "$(jvals "$d/list-ns2.json" nsid)" "1 2"
admin list-ctrl "$NVME_BDF" -n 3 >"$d/ns3-ctrls.json"
expect_eq "controllers of namespace 3" "$(jvals "$d/ns3-ctrls.json" num_ctrl)" 0
expect_fail "namespace 3" nvme-dd --device "$NVME_BDF" if=nvme:3 of=/tmp/x bs=4096 count=1
expect_fail "Namespace Not Attached" nvme-admin detach-ns "$NVME_BDF" -n 3 -c 0

echo "== format namespace 2 (4 KiB) to LBA format 0 (512 B)"
expect_fail "not confirmed;--force" nvme-admin format "$NVME_BDF" -n 2 --lbaf 0 </dev/null
admin id-ns "$NVME_BDF" -n 2 >"$d/id-ns2.json"
expect_eq "namespace 2 FLBAS after the refusal" "$(jvals "$d/id-ns2.json" flbas)" 4
expect_fail "LBA format 8 is not offered" nvme-admin format "$NVME_BDF" -n 2 --lbaf 8 --force
admin format "$NVME_BDF" -n 2 --lbaf 0 --force >"$d/format.json"
cat "$d/format.json"
expect_eq "block size after format" "$(jvals "$d/format.json" block_size)" 512
admin id-ns "$NVME_BDF" -n 2 >"$d/ours-id-ns2.json"
expect_eq "namespace 2 FLBAS" "$(jvals "$d/ours-id-ns2.json" flbas)" 0
expect_eq "namespace 2 size (512 B blocks)" "$(jvals "$d/ours-id-ns2.json" nsze)" $((64 * 1024 * 1024 / 512))
# Controller 1 sees the new format of the shared namespace too.
admin id-ns "$NVME2_BDF" -n 2 >"$d/id-ns2-b.json"
expect_eq "namespace 2 FLBAS through controller 1" "$(jvals "$d/id-ns2-b.json" flbas)" 0
nvme-dd --device "$NVME_BDF" if="$d/pattern" of=nvme:2 bs=512 count=8 </dev/null
nvme-dd --device "$NVME_BDF" if=nvme:2 of="$d/back2" bs=512 count=8 </dev/null
head -c 4096 "$d/pattern" | cmp - "$d/back2" || fail "namespace 2 in 512-byte blocks reads back differently"
echo "   ok: 8 blocks of 512 B read back"

echo "== the kernel driver (nvme-cli) as the witness"
bind_kernel
# Both controllers on the kernel: nvme-cli's list-subsys shows our subsystem and paths.
PCI_ALLOWED="$NVME2_BDF" hugepage-setup.sh reset >/dev/null
i=0
until [ "$(nvme list-subsys -o json 2>/dev/null | tr -d ' \n' | grep -o '"Address":"[^"]*"' | wc -l)" -ge 2 ]; do
    i=$((i + 1))
    [ "$i" -lt 100 ] || fail "nvme-cli list-subsys did not show both controllers within 10 s"
    sleep 0.1
done
nvme list-subsys -o json >"$d/kernel-subsys.json"
cat "$d/kernel-subsys.json"
expect_eq "nvme-cli list-subsys NQN" "$(jstrs "$d/kernel-subsys.json" NQN)" "$nqn"
sorted() { tr ' ' '\n' | sort | tr '\n' ' ' | sed 's/ $//'; }
expect_eq "nvme-cli list-subsys addresses" "$(jstrs "$d/kernel-subsys.json" Address | sorted)" \
    "$(jstrs "$d/ours-subsys.json" Address | sorted)"
command -v nvme >/dev/null 2>&1 || fail "nvme-cli is not in the guest (run.sh copies the host's /usr/sbin/nvme)"
dev=/dev/$(ls "/sys/bus/pci/devices/$NVME_BDF/nvme")
echo "   nvme-cli: $(nvme version | head -1), device $dev"
nvme list-ctrl "$dev" -o json >"$d/kernel-list-ctrl.json"
expect_eq "nvme-cli list-ctrl" "$(jvals "$d/kernel-list-ctrl.json" ctrl_id)" "$(jvals "$d/ours-list-ctrl.json" ctrl_id)"
expect_eq "nvme-cli num_ctrl" "$(jvals "$d/kernel-list-ctrl.json" num_ctrl)" 2
nvme get-log "$dev" --log-id=3 --log-len=512 --raw-binary >"$d/kernel-fw.bin"
cmp "$d/ours-fw.bin" "$d/kernel-fw.bin" || fail "nvme-cli get-log 03h differs from ours"
echo "   ok: get-log 03h (512 bytes) equals nvme-cli's"
nvme list-ns "$dev" -o json >"$d/kernel-list-ns.json"
expect_eq "nvme-cli list-ns" "$(jvals "$d/kernel-list-ns.json" nsid)" "1 2"
nvme list-ns "$dev" --all -o json >"$d/kernel-list-ns-all.json"
expect_eq "nvme-cli list-ns --all (allocated)" "$(jvals "$d/kernel-list-ns-all.json" nsid)" "1 2 3"
nvme id-ns "$dev" -n 2 -o json >"$d/kernel-id-ns2.json"
for k in flbas nsze ncap nlbaf nmic; do
    expect_eq "nvme-cli id-ns -n 2 $k" "$(jvals "$d/kernel-id-ns2.json" $k)" "$(jvals "$d/ours-id-ns2.json" $k)"
done
b2=$(ns_blockdev 2)
expect_eq "kernel block size of namespace 2" "$(cat "/sys/block/${b2#/dev/}/queue/logical_block_size")" 512
dd if="$b2" of="$d/kback2" bs=512 count=8 iflag=direct 2>/dev/null
cmp "$d/back2" "$d/kback2" || fail "the kernel reads namespace 2 differently"
echo "   ok: the kernel reads namespace 2 (512 B blocks) as we wrote it"

echo "== nvme-cli attaches namespace 3; the kernel reads the pattern we wrote"
nvme attach-ns "$dev" -n 3 -c 0
i=0
until (ns_blockdev 3) >/dev/null 2>&1; do
    i=$((i + 1))
    [ "$i" -lt 100 ] || fail "the kernel did not create namespace 3 within 10 s of attach-ns"
    sleep 0.1
done
b3=$(ns_blockdev 3)
dd if="$b3" of="$d/kback3" bs=4096 count=8 skip=16 iflag=direct 2>/dev/null
cmp "$d/pattern" "$d/kback3" || fail "the kernel reads namespace 3 differently from what we wrote"
echo "   ok: the kernel reads our pattern on namespace 3"
nvme detach-ns "$dev" -n 3 -c 0
