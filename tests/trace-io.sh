#!/usr/bin/env bash
# What QEMU's emulated NVMe controller does per I/O for our nvme-perf and for the peers, counted
# from QEMU's own trace events in one guest boot (the layout of tests/bench.sh: one vCPU,
# intel-iommu, a null-co 4 KiB-LBA namespace). Prints a table (tests/qemu/trace-per-io.py).
#
# Usage: [BASE=old/nvme-perf] [SPDK_PERF=...] [LIBVFN_PERF=...] [TRACE_TIME=2] [TRACE_IOTLB_HITS=1] [TRACE_LIGHT=1]
#        [NO_BUILD=1] tests/trace-io.sh
#
# Traced: MMIO doorbell writes, shadow doorbell reads and EventIdx writes, command fetches,
# completions queued, PRP/SGL mappings, IOTLB misses (and hits with TRACE_IOTLB_HITS=1: about 8
# per I/O, which slows the trace further), controller enables (to cut the trace into runs).
# The trace goes to target/qemu-trace.log, the serial log to target/trace-guest.log, the table's
# data to target/trace-per-io.json.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
T=${TRACE_TIME:-2}
EXTRA=""
HUGEPAGES=64
if [ -n "${SPDK_PERF:-}" ]; then
    EXTRA="$EXTRA spdk_nvme_perf=$SPDK_PERF"
    HUGEPAGES=256
fi
[ -z "${LIBVFN_PERF:-}" ] || EXTRA="$EXTRA libvfn-perf=$LIBVFN_PERF"
# BASE: a baseline build of nvme-perf, traced as base-qd128 / base-qd1 after ours.
[ -z "${BASE:-}" ] || EXTRA="$EXTRA nvme-perf-base=$BASE"
TRACE=(
    --trace 'pci_nvme_mmio_doorbell_*' --trace 'pci_nvme_shadow_doorbell_*'
    --trace 'pci_nvme_eventidx_*' --trace pci_nvme_io_cmd --trace pci_nvme_enqueue_req_completion
    --trace pci_nvme_map_prp --trace pci_nvme_map_sgl --trace pci_nvme_irq_msix
    --trace pci_nvme_mmio_start_success --trace vtd_iotlb_page_update
)
[ "${TRACE_IOTLB_HITS:-0}" != 1 ] || TRACE+=(--trace vtd_iotlb_page_hit)
# TRACE_LIGHT=1: only doorbells, fetches and completions (less slow-down, for timing).
[ "${TRACE_LIGHT:-0}" != 1 ] || TRACE=(
    --trace 'pci_nvme_mmio_doorbell_*' --trace pci_nvme_io_cmd
    --trace pci_nvme_enqueue_req_completion --trace pci_nvme_mmio_start_success
)
GUEST_EXTRA_BINS=${EXTRA# } GUEST_HUGEPAGES=$HUGEPAGES \
    "$ROOT/tests/qemu/run.sh" --ns 4096:8G:null --smp 1 --qpairs 4 \
    --append "TRACE_TIME=$T" --case-timeout 900 --timeout 1500 \
    "${TRACE[@]}" --trace-log "$ROOT/target/qemu-trace.log" \
    --log "$ROOT/target/trace-guest.log" ${NO_BUILD:+--no-build} trace-io.sh
python3 "$ROOT/tests/qemu/trace-per-io.py" "$ROOT/target/qemu-trace.log" \
    "$ROOT/target/trace-guest.log" --json "$ROOT/target/trace-per-io.json"
