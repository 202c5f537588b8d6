#!/usr/bin/env bash
# The main job on a machine without NVMe hardware: boot a QEMU guest with an emulated NVMe
# controller and an IOMMU, bind the controller to vfio-pci, and run nvme-identify (checked
# against the kernel driver) and nvme-hello through our userspace driver.
# Options are passed on to run.sh (see tests/qemu/run.sh --help).
set -euo pipefail
exec "$(dirname "${BASH_SOURCE[0]}")/run.sh" "$@" identify.sh hello.sh
