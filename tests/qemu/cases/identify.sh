# nvme-identify through vfio-pci, then cross-checked against the kernel nvme driver's sysfs view.
# shellcheck source=/dev/null # the guest path of tests/qemu/lib.sh
. /tests/lib.sh

bind_vfio
nvme-identify "$NVME_BDF"
nvme-identify --json "$NVME_BDF" >/tmp/id.json
cat /tmp/id.json
bind_kernel
guest-check identify /tmp/id.json --sysfs /sys
