# Data integrity of nvme-dd against the kernel nvme driver on the same namespaces:
#  1. ours writes random data;
#  2. the kernel reads what we wrote (O_DIRECT, so not from its page cache);
#  3. the kernel writes new data, and ours reads it back.
# The kernel is the witness both ways: 2 checks our write path, 3 our read path. (Reading our
# own writes back with nvme-dd in step 1 would check nothing 2 and 3 do not, and costs one
# process start with a controller bring-up per transfer, about a second under TCG.)
# Each (namespace, size) pair gets its own region so all of them can be checked after rebinding.
# shellcheck source=/dev/null # the guest path of tests/qemu/lib.sh
. /tests/lib.sh

# Sizes checked on each namespace; 512 B only fits the 512 B-LBA namespace. A layout with many
# namespaces may check fewer (run.sh --guest-env INTEGRITY_SIZES=512,4096,...; at most 7 sizes).
SIZES=$(echo "${INTEGRITY_SIZES:-512,4096,8192,12288,65536,1048576,2097152}" | tr , ' ')
# Each size's region starts at index * REGION bytes (any I/O here is at most 2 MiB).
REGION=$((4 * 1024 * 1024))

# Prints "nsid size seek" lines for every transfer this case makes.
plan() {
    # Namespace ids as configured ("nsid:lba:bytes ..."); they need not be 1..N.
    for entry in $NVME_NS_LAYOUT; do
        ns=${entry%%:*}
        lba=
        eval "lba=\$NVME_NS${ns}_LBA"
        idx=0
        for size in $SIZES; do
            idx=$((idx + 1))
            [ $((size % lba)) = 0 ] || continue
            # Start one transfer past the region start so small sizes are not 4 KiB aligned.
            echo "$ns $size $((idx * REGION / size + 1))"
        done
    done
}

# ndd ARGS...: nvme-dd on the test controller; its transfer statistics are shown only on failure.
ndd() {
    if ! nvme-dd --device "$NVME_BDF" "$@" </dev/null 2>/tmp/ndd.err; then
        cat /tmp/ndd.err
        fail "nvme-dd $* failed"
    fi
}

# nvme_read NSID SIZE SKIP: nvme-dd reads SIZE bytes at block SKIP into /tmp/r.
nvme_read() {
    rm -f /tmp/r
    ndd if="nvme:$1" of=/tmp/r bs="$2" count=1 skip="$3"
    [ -f /tmp/r ] || fail "nvme-dd exited 0 but did not create its output file /tmp/r"
}

# random FILE SIZE: SIZE bytes from /dev/urandom.
random() {
    dd if=/dev/urandom of="$1" bs="$2" count=1 iflag=fullblock 2>/dev/null
}

# Kernel read of SIZE bytes at block SKIP of DEV into FILE, bypassing the page cache.
kernel_read() {
    if ! dd if="$1" of="$4" bs="$2" count=1 skip="$3" iflag=direct 2>/dev/null; then
        sync
        echo 3 >/proc/sys/vm/drop_caches
        dd if="$1" of="$4" bs="$2" count=1 skip="$3" 2>/dev/null
    fi
}

kernel_write() {
    if ! dd if="$4" of="$1" bs="$2" count=1 seek="$3" oflag=direct conv=notrunc,fsync 2>/dev/null; then
        dd if="$4" of="$1" bs="$2" count=1 seek="$3" conv=notrunc,fsync 2>/dev/null
    fi
}

plan >/tmp/plan
echo "transfers (nsid size seek):"
cat /tmp/plan

echo "== 1: nvme-dd writes"
bind_vfio
while read -r ns size seek; do
    p=/tmp/ours.$ns.$size
    random "$p" "$size"
    ndd if="$p" of="nvme:$ns" bs="$size" count=1 seek="$seek"
    echo "ok ns$ns size=$size seek=$seek (ours wrote)"
done </tmp/plan

echo "== 2: kernel reads what nvme-dd wrote"
bind_kernel
while read -r ns size seek; do
    dev=$(ns_blockdev "$ns")
    rm -f /tmp/k
    kernel_read "$dev" "$size" "$seek" /tmp/k
    cmp "/tmp/ours.$ns.$size" /tmp/k || fail "ns$ns $size B at block $seek: kernel reads different data than nvme-dd wrote"
    echo "ok ns$ns size=$size seek=$seek (ours -> kernel $dev)"
done </tmp/plan

echo "== 3: kernel writes, nvme-dd reads"
while read -r ns size seek; do
    dev=$(ns_blockdev "$ns")
    q=/tmp/kernel.$ns.$size
    random "$q" "$size"
    kernel_write "$dev" "$size" "$seek" "$q"
done </tmp/plan
bind_vfio
while read -r ns size seek; do
    nvme_read "$ns" "$size" "$seek"
    cmp "/tmp/kernel.$ns.$size" /tmp/r || fail "ns$ns $size B at block $seek: nvme-dd reads different data than the kernel wrote"
    echo "ok ns$ns size=$size seek=$seek (kernel -> ours)"
done </tmp/plan
echo "all transfers match"
