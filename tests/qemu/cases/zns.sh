# Zoned namespaces (ZNS CS 1.1) on QEMU's controller through our driver, witnessed by the kernel:
#  1. nvme-admin zns id-ns / report-zones on the zoned namespace (ZNS_NSID, default the last one):
#     the zone size and MOR/MAR the boot gave QEMU, every zone Empty (the driver enabled the Zoned
#     Namespace Command Set: CC.CSS = 110b and the I/O Command Set Profile, else QEMU refuses the
#     zone commands with Invalid Opcode);
#  2. zone-append twice to zone 1 (the LBAs returned follow each other), finish zone 2, open zone
#     3, append to zone 4 and close it, append to zone 5 and reset it, close zone 1; our report
#     shows each state and write pointer (the opened zone is Empty again: every nvme-admin run
#     resets the controller, which closes QEMU's open zones; the open limit is therefore tested
#     on the emulator only, crates/driver/tests/zns.rs);
#  3. bad input refused with a message and exit 1 (a plain namespace, an append off a zone start);
#  3b. the C API (examples/c/zones.c, zones_c): vectored writes and reads on namespace 1 read back
#     equal (QEMU offers SGLs: unaligned pieces too; above MDTS refused), then on zones 8-11 the
#     zone report, three Zone Appends returning consecutive LBAs (write pointer +6), a finished
#     zone's NVME_ERR_ZONE_FULL, a reset, an invalid transition's NVME_ERR_ZONE_INVALID_TRANSITION;
#  4. the kernel's nvme driver takes the controller back: util-linux blkzone reports the same write
#     pointers and states (zones 8-11 as the C program left them), and the appended
#     data reads back (O_DIRECT) at the LBAs the appends returned (the C appends' too).
# Run in the metadata boot of tests/run-all.sh, whose last namespace is
#   --ns 4096:16M:zoned=true,zoned.zone_size=1M,zoned.max_open=4,zoned.max_active=8
# shellcheck source=/dev/null # the guest path of tests/qemu/lib.sh
. /tests/lib.sh

ZNS=${ZNS_NSID:-$NVME_NS_COUNT}
MOR=${ZNS_MAX_OPEN:-4}
MAR=${ZNS_MAX_ACTIVE:-8}
eval "lba=\$NVME_NS${ZNS}_LBA bytes=\$NVME_NS${ZNS}_BYTES"
[ "$lba" = 4096 ] || fail "namespace $ZNS should have 4096-byte blocks (see the header), has '$lba'"
ZONE=256 # blocks: 1 MiB zones
command -v blkzone >/dev/null || fail "blkzone (util-linux) is not in the guest"

adm() {
    sub=$1
    shift
    if ! nvme-admin zns "$sub" "$NVME_BDF" -n "$ZNS" -o json "$@" </dev/null >/tmp/adm.out 2>/tmp/adm.err; then
        cat /tmp/adm.err
        fail "nvme-admin zns $sub $* failed"
    fi
}

# "SLBA STATE WP" per zone of the last report (serde_json sorts the keys: slba, state, wp).
zones() {
    awk -F': ' '/"slba"/ {gsub(/[ ,]/, "", $2); s = $2}
        /"state"/ {gsub(/[ ",]/, "", $2); st = $2}
        /"wp"/ {gsub(/[ ,]/, "", $2); print s, st, $2}' /tmp/adm.out
}

# expect_zone N STATE WP: zone N of our last report (WP "*": any; a Full zone's write pointer
# is not valid, ZNS §3.4.2.2.3, QEMU reports all ones).
expect_zone() {
    got=$(zones | sed -n "$(($1 + 1))p")
    case "$got" in
    "$(($1 * ZONE)) $2 "$3) ;;
    *) fail "zone $1: our report says '$got', expected '$(($1 * ZONE)) $2 $3'" ;;
    esac
}

append() { # append ZONE FILE: prints the LBA written
    adm zone-append -s $(($1 * ZONE)) -z "$(wc -c <"$2")" -d "$2"
    sed -n 's/^ *"lba": \([0-9]*\),*$/\1/p' /tmp/adm.out
}

bind_vfio
echo "== 1: identify and an empty report"
adm id-ns
grep -q "\"mor\": $((MOR - 1))," /tmp/adm.out || fail "MOR is not $((MOR - 1)) (0-based): $(cat /tmp/adm.out)"
grep -q "\"mar\": $((MAR - 1))," /tmp/adm.out || fail "MAR is not $((MAR - 1)) (0-based)"
grep -Eq "\"zsze\": $ZONE,?$" /tmp/adm.out || fail "no LBA format with a zone size of $ZONE blocks"
adm report-zones
total=$(sed -n 's/^ *"nr_zones": \([0-9]*\),*$/\1/p' /tmp/adm.out)
[ "$total" = $((bytes / lba / ZONE)) ] || fail "nr_zones '$total', expected $((bytes / lba / ZONE))"
[ "$(zones | grep -c ' EMPTY ')" = "$total" ] || fail "not every zone is Empty at the start"

echo "== 2: appends and zone management"
dd if=/dev/urandom of=/tmp/a bs=4096 count=2 2>/dev/null
dd if=/dev/urandom of=/tmp/b bs=4096 count=2 2>/dev/null
dd if=/dev/urandom of=/tmp/c bs=4096 count=1 2>/dev/null
la=$(append 1 /tmp/a)
lb=$(append 1 /tmp/b)
[ "$la" = "$ZONE" ] && [ "$lb" = $((ZONE + 2)) ] || fail "appends to zone 1 landed at '$la', '$lb'"
adm finish-zone -s $((2 * ZONE))
adm open-zone -s $((3 * ZONE))
lc=$(append 4 /tmp/c)
[ "$lc" = $((4 * ZONE)) ] || fail "append to zone 4 landed at '$lc'"
adm close-zone -s $((4 * ZONE))
append 5 /tmp/a >/dev/null
adm reset-zone -s $((5 * ZONE))
adm close-zone -s "$ZONE"
adm report-zones
expect_zone 0 EMPTY 0
expect_zone 1 CLOSED $((ZONE + 4))
expect_zone 2 FULL "*"
# Each nvme-admin run resets the controller, and QEMU then closes the open zones (ZNS: a
# controller reset takes an open zone to Closed, or Empty when nothing was written): the zone
# opened above is Empty again.
expect_zone 3 EMPTY $((3 * ZONE))
expect_zone 4 CLOSED $((4 * ZONE + 1))
expect_zone 5 EMPTY $((5 * ZONE))
expect_zone 6 EMPTY $((6 * ZONE))
adm report-zones -S 5
[ "$(zones | cut -d' ' -f1,2)" = "$((2 * ZONE)) FULL" ] || fail "the Full filter reports '$(zones)'"

echo "== 3: bad input"
expect_fail "namespace 1 is not a zoned namespace" nvme-admin zns report-zones "$NVME_BDF" -n 1
expect_fail "not a zone start" nvme-admin zns zone-append "$NVME_BDF" -n "$ZNS" -s 3 -z 4096 -d /tmp/c
expect_fail "not a positive multiple" nvme-admin zns zone-append "$NVME_BDF" -n "$ZNS" -z 100 -d /tmp/c

echo "== 3b: the C API (zones_c: vectored I/O on namespace 1, zones 8-11)"
command -v zones_c >/dev/null || fail "zones_c is not in the guest (tests/qemu/build-c-guest.sh failed?)"
zones_c "$NVME_BDF" --write 1 "$ZNS" 8 >/tmp/zones_c.out 2>&1 || { cat /tmp/zones_c.out; fail "zones_c failed"; }
cat /tmp/zones_c.out
for want in "vectored: page-aligned pieces: 3 pieces written, 2 read back, 16384 bytes equal: OK" \
    "vectored: unaligned pieces (SGL): 3 pieces written, 2 read back" \
    "bytes above the 524288-byte transfer refused: OK" \
    "zones: append: LBAs $((8 * ZONE)) $((8 * ZONE + 2)) $((8 * ZONE + 4)), write pointer $((8 * ZONE + 6))" \
    "zones: full zone: the zone is full" "zones: reset: Empty" \
    "zones: offline of an empty zone: invalid zone state transition" "zones: done"; do
    grep -qF "$want" /tmp/zones_c.out || fail "zones_c did not print '$want'"
done

echo "== 4: the kernel's view"
bind_kernel
dev=$(ns_blockdev "$ZNS")
blkzone report "$dev" >/tmp/blkzone.out
head -8 /tmp/blkzone.out
# "ZONE WP-OFFSET COND" in 4 KiB blocks (blkzone counts 512-byte sectors from the zone start).
sed -n 's/.*start: *\(0x[0-9a-f]*\),.*wptr *\(0x[0-9a-f]*\) .*zcond: *[0-9]*(\([a-z]*\)).*/\1 \2 \3/p' \
    /tmp/blkzone.out | while read -r start wp cond; do
    echo "$(($start / 8 / ZONE)) $(($wp / 8)) $cond"
done >/tmp/kzones
[ "$(wc -l </tmp/kzones)" = "$total" ] || fail "blkzone reports $(wc -l </tmp/kzones) zones, we $total"
kzone() {
    got=$(sed -n "$(($1 + 1))p" /tmp/kzones)
    echo "$got" | grep -Eq "^$1 $2 ($3)\$" || fail "blkzone: zone $1 is '$got', expected wp $2, state $3"
}
kzone 0 0 em
kzone 1 4 cl
kzone 2 "[0-9]+" fu
kzone 3 0 em
kzone 4 1 cl
kzone 5 0 em
kzone 6 0 em
# As zones_c left them: zone 8 written 6 blocks (implicitly open, closed by the reset when the
# kernel took the controller), 9 finished, 10 reset, 11 untouched.
kzone 8 6 "cl|oi"
kzone 9 "[0-9]+" fu
kzone 10 0 em
kzone 11 0 em
dd if="$dev" of=/tmp/back bs=4096 count=4 skip="$ZONE" iflag=direct 2>/dev/null
cat /tmp/a /tmp/b | cmp - /tmp/back || fail "the kernel reads other data in zone 1 than the appends wrote"
dd if="$dev" of=/tmp/back bs=4096 count=1 skip=$((4 * ZONE)) iflag=direct 2>/dev/null
cmp /tmp/c /tmp/back || fail "the kernel reads other data in zone 4 than the append wrote"
# zones_c appended 2 blocks of 'a', then 'b', then 'c' to zone 8.
for ch in a b c; do head -c 8192 /dev/zero | tr '\000' "$ch"; done >/tmp/abc
dd if="$dev" of=/tmp/back bs=4096 count=6 skip=$((8 * ZONE)) iflag=direct 2>/dev/null
cmp /tmp/abc /tmp/back || fail "the kernel reads other data in zone 8 than the C API's appends wrote"
echo "zns: zone states, write pointers and appended data agree between our tools and the kernel"
