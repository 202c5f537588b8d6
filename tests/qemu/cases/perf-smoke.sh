# nvme-perf runs without errors on both engines: ours on vfio-pci (polled, and hybrid with MSI-X
# interrupts delivered through VFIO eventfds), then io_uring on the kernel's block device.
. /tests/lib.sh

check() {
    label=$1
    shift
    echo "+ $*"
    "$@" --json >/tmp/perf.json 2>/tmp/perf.err || { cat /tmp/perf.err; fail "$label failed"; }
    grep -q '"errors": *0' /tmp/perf.json || { cat /tmp/perf.json; fail "$label reported errors"; }
    ios=$(sed -n 's/.*"ios": *\([0-9][0-9]*\).*/\1/p' /tmp/perf.json | head -n1)
    [ "${ios:-0}" -gt 0 ] || { cat /tmp/perf.json; fail "$label completed no I/O"; }
    echo "    ok: $label, $ios I/Os"
}

bind_vfio
check "polled randread" nvme-perf "$NVME_BDF" -n 1 -w randread -q 32 -t 1 --quiet
check "polled randwrite" nvme-perf "$NVME_BDF" -n 2 -w randwrite -q 32 -t 1 --quiet
check "hybrid interrupts" nvme-perf "$NVME_BDF" -n 1 -w randrw -q 4 -t 1 --quiet --interrupts
check "no shadow doorbells" nvme-perf "$NVME_BDF" -n 1 -w randread -q 32 -t 1 --quiet --no-shadow-doorbells
bind_kernel
BLK=$(ns_blockdev 1)
check "io_uring interrupts" nvme-perf --engine io_uring "$BLK" -w randread -q 32 -t 1 --quiet
