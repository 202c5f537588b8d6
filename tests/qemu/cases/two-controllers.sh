# Two controllers in one process and one DMA context (layouts two-ctrl, two-ctrl-1group): the
# two_controllers example opens both through vfio-pci in one VFIO container, writes a pattern on
# the first, reads it back into a buffer of the shared pool, writes that buffer on the second and
# reads it back. Then the kernel driver reads 64 KiB at byte offset 1 MiB of namespace 1 of each
# controller: both hold the same pattern, starting with the example's marker.
# shellcheck source=/dev/null # the guest path of tests/qemu/lib.sh
. /tests/lib.sh

[ -n "${NVME2_BDF:-}" ] || fail "this case needs a second controller: run.sh --ctrl2-ns ... (layout two-ctrl)"
both="$NVME_BDF $NVME2_BDF"

# Random bytes where the example will write, on the first controller (through the kernel), so
# stale data cannot pass for the copy.
dd if=/dev/urandom of="$(ns_blockdev 1)" bs=65536 seek=16 count=1 conv=notrunc,fsync oflag=direct 2>/dev/null

echo "== both controllers on vfio-pci, one process, one DMA context"
PCI_ALLOWED="$both" HUGEMEM=$CASE_HUGEMEM hugepage-setup.sh config
two_controllers "$NVME_BDF" "$NVME2_BDF" | tee /tmp/two.out
grep -q "A=$NVME_BDF B=$NVME2_BDF in one DMA context" /tmp/two.out ||
    fail "the example did not report both controllers in one DMA context"
# Two IOMMU groups joined one container, or (TWO_CTRL_GROUPS=1, run.sh --ctrl2-same-group) both
# functions are in one group, which joined once.
groups=$(sed -n 's/.*IOMMU groups \[\([0-9, ]*\)\].*/\1/p' /tmp/two.out | tr -d ',')
echo "   IOMMU groups in the context: $groups"
want=${TWO_CTRL_GROUPS:-2}
# shellcheck disable=SC2086 # count the words
set -- $groups
[ "$#" = "$want" ] || fail "expected $want IOMMU group(s) in the context, the example reports '$groups'"
grep -q "read back on B: OK" /tmp/two.out || fail "the example did not verify the copy on B"
# One function twice in one context: refused (its group is attached already, so the kernel would
# hand out a second device fd; two drivers on one controller would undo each other).
expect_fail "already open in this DMA context" two_controllers "$NVME_BDF" "$NVME_BDF"
if [ "$want" = 1 ]; then
    # One IOMMU group, two DMA contexts (two processes): the second cannot have the group, and
    # the error says to open the group's functions in one context.
    nvme-perf "$NVME_BDF" -n 1 -w randread -b 4096 -t 4 --quiet >/tmp/perf.out 2>&1 &
    perf=$!
    sleep 2
    expect_fail "is in use;exclusive to one process;one DMA context" nvme-identify "$NVME2_BDF"
    wait "$perf" || { cat /tmp/perf.out; fail "nvme-perf on $NVME_BDF failed"; }
fi

echo "== the kernel reads the pattern on the first controller"
bind_kernel
dd if="$(ns_blockdev 1)" of=/tmp/a.bin bs=65536 skip=16 count=1 iflag=direct 2>/dev/null
[ "$(head -c 23 /tmp/a.bin)" = "two-controllers pattern" ] ||
    fail "controller 1 does not hold the pattern: $(head -c 32 /tmp/a.bin | od -c | head -n 2)"

echo "== the kernel reads the same bytes on the second controller"
PCI_ALLOWED=$NVME_BDF HUGEMEM=$CASE_HUGEMEM hugepage-setup.sh config >/dev/null
PCI_ALLOWED=$NVME2_BDF hugepage-setup.sh reset >/dev/null
i=0
until [ "$(ls -d /sys/block/nvme*n* 2>/dev/null | wc -l)" -ge "$NVME2_NS_COUNT" ]; do
    i=$((i + 1))
    [ "$i" -lt 100 ] || fail "the kernel did not create the second controller's namespaces within 10 s"
    sleep 0.1
done
dd if="$(ns_blockdev 1)" of=/tmp/b.bin bs=65536 skip=16 count=1 iflag=direct 2>/dev/null
cmp /tmp/a.bin /tmp/b.bin || fail "the second controller's copy differs from the first's"
echo "   64 KiB identical on both controllers"
