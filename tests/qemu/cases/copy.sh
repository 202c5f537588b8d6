# Copy (NVM CS §3.3.2) on QEMU's controller through our driver, checked through the kernel:
#  1. nvme-dd writes random data to four source ranges of namespace 1 and a marker to a second
#     destination;
#  2. nvme-hello --copy sends ONE Copy of the four ranges to LBA 2000 and prints the limits the
#     namespace reports, which must be the ones the boot gave QEMU (COPY_MSSRL, COPY_MCL,
#     COPY_MSRC; QEMU's defaults 128, 128, 127 without them); a Copy over each limit and one
#     with a source outside the namespace are refused by our driver, naming the limit, with
#     exit 1 and no panic;
#  3. Write Uncorrectable and the fused Compare and Write, which QEMU 7.2 does not offer (ONCS
#     15Dh: bit 1 clear; FUSES 0), are refused by our driver naming that Identify field, with
#     exit 1 and nothing sent (the marker stays, step 4);
#  4. the kernel's nvme driver reads the destination (O_DIRECT): it must equal the sources in
#     list order, and the second destination, target of the refused commands, the marker;
#  5. with a fifth namespace formatted with the 64-bit guard (QEMU pi=3,pif=2, 16 bytes of
#     metadata): the kernel writes sources, ONE Copy in descriptor format 1h (40-byte entries)
#     through nvme-hello copies them, the kernel reads the destination with its integrity
#     checks on (PI type 3: the copied guards and application tags are checked, reference tags
#     are not, which a Copy without PRACT keeps as the sources'); a format 0h Copy there is
#     refused by QEMU with
#     Invalid Format (Command Specific 0Ah).
# Run in the metadata boot of tests/run-all.sh, whose namespace 1 carries the limits:
#   --ns 512:16M:mssrl=16,mcl=64,msrc=7 ... --guest-env COPY_MSSRL=16 (and COPY_MCL, COPY_MSRC)
#   and, for step 5, namespace 5: --ns 512:16M:ms=16,mset=0,pi=3,pif=2
# shellcheck source=/dev/null # the guest path of tests/qemu/lib.sh
. /tests/lib.sh

MSSRL=${COPY_MSSRL:-128}
MCL=${COPY_MCL:-128}
MSRC=${COPY_MSRC:-127}
lba=$NVME_NS1_LBA
blocks=$((NVME_NS1_BYTES / lba))
# Source ranges "LBA:BLOCKS": one as long as MSSRL allows (at most 16 here), the others short,
# out of order on the medium; DEST and REFUSED lie after them.
long=16
[ "$MSSRL" -ge "$long" ] || long=$MSSRL
RANGES="100:4 300:$long 50:2 700:1"
total=$((4 + long + 2 + 1))
DEST=2000
REFUSED=4000
[ "$total" -le "$MCL" ] || fail "the case's $total blocks exceed MCL $MCL: adjust RANGES"
[ $((REFUSED + 2 * MSSRL + 1)) -le "$blocks" ] || fail "namespace 1 ($blocks blocks) is too small"

ndd() {
    if ! nvme-dd --device "$NVME_BDF" "$@" </dev/null 2>/tmp/ndd.err; then
        cat /tmp/ndd.err
        fail "nvme-dd $* failed"
    fi
}

bind_vfio
echo "== 1: nvme-dd writes the sources and a marker"
rm -f /tmp/expected
for r in $RANGES; do
    at=${r%%:*}
    n=${r#*:}
    dd if=/dev/urandom of=/tmp/src bs="$lba" count="$n" iflag=fullblock 2>/dev/null
    ndd if=/tmp/src of=nvme:1 bs="$lba" count="$n" seek="$at"
    cat /tmp/src >>/tmp/expected
done
dd if=/dev/urandom of=/tmp/marker bs="$lba" count=4 iflag=fullblock 2>/dev/null
ndd if=/tmp/marker of=nvme:1 bs="$lba" count=4 seek="$REFUSED"

echo "== 2: one Copy through nvme-hello, and the refused ones"
list=$(echo "$RANGES" | tr ' ' ,)
nvme-hello --nsid 1 --copy "$list" --copy-to "$DEST" --lba "$DEST" "$NVME_BDF" | tee /tmp/copy.out
grep -q "Copy limits of namespace 1: $((MSRC + 1)) ranges (MSRC + 1), $MSSRL blocks a range (MSSRL), $MCL blocks in all (MCL)" /tmp/copy.out ||
    fail "nvme-hello does not report the limits given to QEMU (MSSRL $MSSRL, MCL $MCL, MSRC $MSRC)"
grep -q "Copy of 4 source ranges ($total blocks) to LBA $DEST..$((DEST + total)): ok" /tmp/copy.out ||
    fail "nvme-hello did not report the Copy"

# One range of MSSRL + 1 blocks.
expect_fail "MSSRL;namespace 1" nvme-hello --nsid 1 --copy "0:$((MSSRL + 1))" --copy-to "$REFUSED" "$NVME_BDF"
# MSRC + 2 ranges of one block.
many=$(i=0; while [ "$i" -lt $((MSRC + 2)) ]; do printf '%s:1,' "$i"; i=$((i + 1)); done)
expect_fail "MSRC" nvme-hello --nsid 1 --copy "${many%,}" --copy-to "$REFUSED" "$NVME_BDF"
# More than MCL blocks in all, each range within MSSRL, within MSRC + 1 ranges.
n=$((MCL / MSSRL + 1))
[ "$n" -le $((MSRC + 1)) ] || fail "MCL $MCL / MSSRL $MSSRL needs $n ranges, more than MSRC + 1"
over=$(i=0; while [ "$i" -lt "$n" ]; do printf '%s:%s,' $((i * MSSRL)) "$MSSRL"; i=$((i + 1)); done)
expect_fail "MCL" nvme-hello --nsid 1 --copy "${over%,}" --copy-to "$REFUSED" "$NVME_BDF"
# A source range past the end of the namespace.
expect_fail "outside namespace 1" nvme-hello --nsid 1 --copy "$((blocks - 1)):2" --copy-to "$REFUSED" "$NVME_BDF"
for f in /tmp/expect.err /tmp/expect.out; do
    ! grep -qi panicked "$f" || fail "nvme-hello panicked"
done

echo "== 3: commands QEMU 7.2 does not offer are refused before anything is sent"
expect_fail "Write Uncorrectable;ONCS bit 1;nothing was sent" \
    nvme-hello --nsid 1 --write-uncorrectable "$REFUSED" "$NVME_BDF"
expect_fail "Compare and Write;FUSES bit 0;nothing was sent" \
    nvme-hello --nsid 1 --compare-and-write "$REFUSED" "$NVME_BDF"
for f in /tmp/expect.err /tmp/expect.out; do
    ! grep -qi panicked "$f" || fail "nvme-hello panicked"
done

echo "== 4: the kernel reads the destination"
bind_kernel
dev=$(ns_blockdev 1)
dd if="$dev" of=/tmp/dest bs="$lba" count="$total" skip="$DEST" iflag=direct 2>/dev/null
cmp /tmp/expected /tmp/dest || fail "the kernel reads other data at LBA $DEST than the Copy's sources"
echo "ok: $total blocks at LBA $DEST equal the 4 source ranges in order (read by the kernel, $dev)"
dd if="$dev" of=/tmp/after bs="$lba" count=4 skip="$REFUSED" iflag=direct 2>/dev/null
cmp /tmp/marker /tmp/after || fail "a refused Copy changed LBA $REFUSED"
echo "ok: the refused Copies left LBA $REFUSED as it was"

[ "$NVME_NS_COUNT" -ge 5 ] || exit 0
echo "== 5: Copy descriptor format 1h on namespace 5 (64-bit guard protection information)"
dev5=$(ns_blockdev 5)
rm -f /tmp/expected5
for r in $RANGES; do
    at=${r%%:*}
    n=${r#*:}
    dd if=/dev/urandom of=/tmp/src bs="$lba" count="$n" iflag=fullblock 2>/dev/null
    # Retried: right after the rebind the kernel may still be revalidating the namespace.
    tries=0
    until dd if=/tmp/src of="$dev5" bs="$lba" count="$n" seek="$at" oflag=direct conv=notrunc 2>/tmp/dd5.err; do
        tries=$((tries + 1))
        [ "$tries" -lt 5 ] && { sleep 1; continue; }
        dmesg | tail -20
        fail "the kernel could not write namespace 5 ($dev5) at LBA $at: $(cat /tmp/dd5.err)"
    done
    [ "$tries" -eq 0 ] || echo "note: the kernel's write to $dev5 at LBA $at took $((tries + 1)) tries: $(cat /tmp/dd5.err)"
    cat /tmp/src >>/tmp/expected5
done
sync
bind_vfio
nvme-hello --nsid 5 --copy "$list" --copy-to "$DEST" --copy-format 1 "$NVME_BDF" | tee /tmp/copy5.out
grep -q "Copy of 4 source ranges ($total blocks) to LBA $DEST..$((DEST + total)): ok (the controller copied them; descriptor format 1h)" /tmp/copy5.out ||
    fail "nvme-hello did not report the format 1h Copy on namespace 5"
expect_fail "Copy;Invalid Format" \
    nvme-hello --nsid 5 --copy "0:1" --copy-to "$REFUSED" --copy-format 0 "$NVME_BDF"
bind_kernel
dev5=$(ns_blockdev 5)
dd if="$dev5" of=/tmp/dest5 bs="$lba" count="$total" skip="$DEST" iflag=direct 2>/dev/null ||
    fail "the kernel could not read namespace 5's destination"
cmp /tmp/expected5 /tmp/dest5 || fail "namespace 5: the format 1h Copy's destination differs from its sources"
echo "ok: format 1h Copy of $total blocks on the 64-bit guard namespace equals its sources (read by the kernel, $dev5)"
