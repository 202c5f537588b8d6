# Copy (NVM CS §3.3.2) on QEMU's controller through our driver, checked through the kernel:
#  1. nvme-dd writes random data to four source ranges of namespace 1 and a marker to a second
#     destination;
#  2. nvme-hello --copy sends ONE Copy of the four ranges to LBA 2000 and prints the limits the
#     namespace reports, which must be the ones the boot gave QEMU (COPY_MSSRL, COPY_MCL,
#     COPY_MSRC; QEMU's defaults 128, 128, 127 without them); a Copy over each limit and one
#     with a source outside the namespace are refused by our driver, naming the limit, with
#     exit 1 and no panic;
#  3. the kernel's nvme driver reads the destination (O_DIRECT): it must equal the sources in
#     list order, and the second destination, target of the refused Copies, the marker.
# Run in the metadata boot of tests/run-all.sh, whose namespace 1 carries the limits:
#   --ns 512:16M:mssrl=16,mcl=64,msrc=7 ... --guest-env COPY_MSSRL=16 (and COPY_MCL, COPY_MSRC)
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

echo "== 3: the kernel reads the destination"
bind_kernel
dev=$(ns_blockdev 1)
dd if="$dev" of=/tmp/dest bs="$lba" count="$total" skip="$DEST" iflag=direct 2>/dev/null
cmp /tmp/expected /tmp/dest || fail "the kernel reads other data at LBA $DEST than the Copy's sources"
echo "ok: $total blocks at LBA $DEST equal the 4 source ranges in order (read by the kernel, $dev)"
dd if="$dev" of=/tmp/after bs="$lba" count=4 skip="$REFUSED" iflag=direct 2>/dev/null
cmp /tmp/marker /tmp/after || fail "a refused Copy changed LBA $REFUSED"
echo "ok: the refused Copies left LBA $REFUSED as it was"
