# nvme-identify through vfio-pci, then cross-checked against the kernel nvme driver's sysfs view.
# Without a device it lists the NVMe functions (like `nvme list`): the QEMU controller on
# vfio-pci with its model and namespaces, and on a two-controller layout the second one too.
# shellcheck source=/dev/null # the guest path of tests/qemu/lib.sh
. /tests/lib.sh

bind_vfio
nvme-identify "$NVME_BDF"
nvme-identify --json "$NVME_BDF" >/tmp/id.json
cat /tmp/id.json

echo "== nvme-identify without a device: the list"
nvme-identify | tee /tmp/list.txt
grep -q "^$NVME_BDF  vfio-pci  attachable 1b36:0010 " /tmp/list.txt ||
    fail "the list does not show $NVME_BDF on vfio-pci as attachable QEMU controller 1b36:0010"
grep -q "^$NVME_BDF .* QEMU NVMe Ctrl " /tmp/list.txt || fail "the list does not show the model of $NVME_BDF"
[ "$(grep -c '^  namespace ' /tmp/list.txt)" -ge "$NVME_NS_COUNT" ] ||
    fail "the list shows fewer than $NVME_NS_COUNT namespaces"
want=1
if [ -n "${NVME2_BDF:-}" ]; then
    want=2
    grep -q "^$NVME2_BDF " /tmp/list.txt || fail "the list does not show the second controller $NVME2_BDF"
fi
found=$(grep -c '^[0-9a-f]\{4\}:[0-9a-f]\{2\}:[0-9a-f]\{2\}\.[0-7] ' /tmp/list.txt)
[ "$found" = "$want" ] || fail "the list shows $found NVMe functions, the guest has $want"
nvme-identify --json >/tmp/list.json
grep -q "\"address\": \"$NVME_BDF\"" /tmp/list.json || fail "the JSON list lacks $NVME_BDF"
echo "    ok: $found NVMe function(s) listed"

bind_kernel
nvme-identify | tee /tmp/list2.txt
grep -q "^$NVME_BDF  nvme      other " /tmp/list2.txt || fail "after reset the list does not show $NVME_BDF on nvme"
guest-check identify /tmp/id.json --sysfs /sys
