# nvme-identify must refuse bad input with a helpful message, never a panic.
# shellcheck source=/dev/null # the guest path of tests/qemu/lib.sh
. /tests/lib.sh

# The controller is bound to the kernel nvme driver here: the tool must say how to hand it over.
drv=$(readlink "/sys/bus/pci/devices/$NVME_BDF/driver")
[ "${drv##*/}" = nvme ] || fail "precondition: $NVME_BDF should be bound to nvme, is ${drv##*/}"
expect_fail "nvme;hugepage-setup.sh" nvme-identify "$NVME_BDF"

# A well-formed address with nothing behind it.
expect_fail "no PCI function" nvme-identify 0000:00:1f.7
# Not an address at all: the message must show the expected form.
expect_fail "0000:" nvme-identify zz:zz
# A PCI function that exists but is not an NVMe controller (the q35 host bridge).
expect_fail "not an NVMe" nvme-identify 0000:00:00.0
