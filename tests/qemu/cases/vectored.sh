# Vectored I/O on QEMU's controller through our driver, checked through the kernel:
#  1. nvme-hello --writev writes 16 scattered 4 KiB pages (each its own DMA buffer, none next
#     to another) in ONE Write, reads them back in one vectored Read and compares: once with
#     SGLs (QEMU offers them: 16 Data Block descriptors in one Last Segment, NVMe Base §4.1.2)
#     and once with --no-sgl (one PRP list, §4.1.1);
#  2. 32 unaligned pieces of 2052 bytes (pieces start and end inside pages) with SGLs; the same
#     with --no-sgl is refused by our driver naming piece 0 and the PRP rule, exit 1, no panic,
#     and nothing written (a marker there stays);
#  3. the kernel's nvme driver reads the three ranges (O_DIRECT): each equals its source.
# Run in the metadata boot of tests/run-all.sh (after copy.sh; namespace 1 is plain, 512 B).
# shellcheck source=/dev/null # the guest path of tests/qemu/lib.sh
. /tests/lib.sh

lba=$NVME_NS1_LBA
blocks=$((NVME_NS1_BYTES / lba))
len=$((16 * 4096))
n=$((len / lba))
SGL=8000
PRP=$((SGL + n))
ODD=$((PRP + n))
REFUSED=$((ODD + n))
[ $((REFUSED + n)) -le "$blocks" ] || fail "namespace 1 ($blocks blocks) is too small"

hello() {
    if ! nvme-hello --nsid 1 "$@" "$NVME_BDF" </dev/null >/tmp/hello.out 2>/tmp/hello.err; then
        cat /tmp/hello.out /tmp/hello.err
        fail "nvme-hello $* failed"
    fi
    cat /tmp/hello.out
}
expect_line() {
    grep -qF -- "$1" /tmp/hello.out || fail "nvme-hello did not print '$1'"
}

bind_vfio
for f in sgl prp odd; do
    dd if=/dev/urandom of=/tmp/v-$f bs=4096 count=16 iflag=fullblock 2>/dev/null
done
dd if=/dev/urandom of=/tmp/v-marker bs=4096 count=16 iflag=fullblock 2>/dev/null
if ! nvme-dd --device "$NVME_BDF" if=/tmp/v-marker of=nvme:1 bs="$lba" count="$n" seek="$REFUSED" </dev/null 2>/tmp/ndd.err; then
    cat /tmp/ndd.err
    fail "nvme-dd could not write the marker"
fi

echo "== 1: 16 scattered pages in one command, SGL and PRP list"
hello --writev /tmp/v-sgl --writev-lba "$SGL"
expect_line "Vectored write of 16 pieces ($len bytes, $n blocks) at LBA $SGL: ok (one command)"
expect_line "Vectored read of 16 pieces at LBA $SGL: equal to the data written"
hello --no-sgl --writev /tmp/v-prp --writev-lba "$PRP"
expect_line "Vectored write of 16 pieces ($len bytes, $n blocks) at LBA $PRP: ok (one command)"
expect_line "Vectored read of 16 pieces at LBA $PRP: equal to the data written"

echo "== 2: unaligned pieces: SGL Data Blocks; refused as PRPs"
hello --writev /tmp/v-odd --writev-lba "$ODD" --piece-bytes 2052
expect_line "Vectored write of 32 pieces ($len bytes, $n blocks) at LBA $ODD: ok (one command)"
expect_line "Vectored read of 32 pieces at LBA $ODD: equal to the data written"
expect_fail "piece 0;ends inside a 4096-byte page;PRP" \
    nvme-hello --nsid 1 --no-sgl --writev /tmp/v-odd --writev-lba "$REFUSED" --piece-bytes 2052 "$NVME_BDF"
! grep -qi panicked /tmp/expect.err || fail "nvme-hello panicked"

echo "== 3: the kernel reads what the vectored writes wrote"
bind_kernel
dev=$(ns_blockdev 1)
for f in sgl:$SGL prp:$PRP odd:$ODD marker:$REFUSED; do
    name=${f%%:*}
    at=${f#*:}
    dd if="$dev" of=/tmp/back bs="$lba" count="$n" skip="$at" iflag=direct 2>/dev/null
    cmp /tmp/v-"$name" /tmp/back || fail "the kernel reads other data at LBA $at than the $name source"
    echo "ok: $n blocks at LBA $at equal the $name source (read by the kernel, $dev)"
done
