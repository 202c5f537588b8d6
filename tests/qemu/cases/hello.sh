# nvme-hello: with --write-lba it writes "Hello world!" to that block, reads it back and prints
# "Hello world"; without it, it only reads and prints a block and must leave the device as it was.
# shellcheck source=/dev/null # the guest path of tests/qemu/lib.sh
. /tests/lib.sh

ns1=$(ns_blockdev 1)
lba=$NVME_NS1_LBA
# LBA 0 gets a recognisable marker plus random bytes, LBA 8 zeroes, both through the kernel.
{
    printf 'hello-marker-42'
    dd if=/dev/urandom bs=$((lba - 15)) count=1 2>/dev/null
} >/tmp/blk0
[ "$(wc -c </tmp/blk0)" = "$lba" ] || fail "could not make a $lba-byte test block"
dd if=/tmp/blk0 of="$ns1" bs="$lba" count=1 conv=notrunc,fsync oflag=direct 2>/dev/null
dd if=/dev/zero of="$ns1" bs="$lba" count=1 seek=8 conv=notrunc,fsync oflag=direct 2>/dev/null

bind_vfio
echo "== write mode"
nvme-hello --write-lba 8 "$NVME_BDF" | tee /tmp/hello.out
grep -q "Hello world" /tmp/hello.out || fail "nvme-hello --write-lba 8 did not print 'Hello world'"

echo "== default, read-only mode"
nvme-hello "$NVME_BDF" | tee /tmp/read.out
grep -q "|hello-marker-42" /tmp/read.out || fail "nvme-hello did not show the marker the kernel wrote to LBA 0"
grep -q "Nothing was written" /tmp/read.out || fail "nvme-hello did not say that it wrote nothing"
nvme-hello --lba 8 "$NVME_BDF" | tee /tmp/read8.out
grep -q "|Hello world!" /tmp/read8.out || fail "nvme-hello --lba 8 did not show the greeting written before"
expect_fail "cannot be used with" nvme-hello --lba 1 --write-lba 2 "$NVME_BDF"

echo "== the kernel sees LBA 0 unchanged and the greeting at LBA 8"
bind_kernel
ns1=$(ns_blockdev 1)
dd if="$ns1" of=/tmp/after0 bs="$lba" count=1 iflag=direct 2>/dev/null
cmp /tmp/blk0 /tmp/after0 || fail "the default mode of nvme-hello changed LBA 0"
dd if="$ns1" of=/tmp/after8 bs="$lba" count=1 skip=8 iflag=direct 2>/dev/null
[ "$(head -c 12 /tmp/after8)" = "Hello world!" ] || fail "LBA 8 does not start with the greeting: $(head -c 16 /tmp/after8 | od -c | head -n 2)"
