# Per-I/O device work under QEMU tracing: ours, then each peer present (as tests/bench.sh installs
# them), 4 KiB random reads at QD128 and QD1 with each tool's default flags, plus our A/B
# variants. Run by tests/trace-io.sh, which boots with `run.sh --trace ...` and reduces the trace
# with tests/qemu/trace-per-io.py. Each run creates exactly one I/O submission queue, which is
# how the reducer cuts the trace into runs; this case prints their labels in order as
# `@@TRACE-RUN <label>` (and the tool's own output, for its I/O count).
# Knobs: TRACE_TIME (seconds a run, default 2).
# shellcheck source=/dev/null # the guest path of tests/qemu/lib.sh
. /tests/lib.sh
PATH=$PATH:/usr/local/bin
T=${TRACE_TIME:-2}
NSID=1

run() {
    label=$1
    shift
    echo "@@TRACE-RUN $label"
    set +e
    "$@" >/tmp/trace-run.out 2>&1
    rc=$?
    set -e
    sed "s/^/@@TRACE-OUT $label /" /tmp/trace-run.out
    [ "$rc" = 0 ] || fail "$label exited $rc"
}

echo "clocksource: $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource)" \
    "(available: $(cat /sys/devices/system/clocksource/clocksource0/available_clocksource))"
dmesg | grep -iE "hypervisor|clocksource|tsc" | sed 's/^/dmesg: /' || true
grep -m1 -o -w hypervisor /proc/cpuinfo | sed 's/^/cpu flag: /' || true
bind_vfio
ours() {
    label=$1
    shift
    run "$label" nvme-perf "$NVME_BDF" -n "$NSID" -w randread -b 4096 -t "$T" "$@"
}
ours ours-qd128 -q 128
ours ours-qd1 -q 1 --submit-batch 1 --complete-batch 1
ours ours-qd128-no-sgl -q 128 --no-sgl
ours ours-qd1-no-sgl -q 1 --submit-batch 1 --complete-batch 1 --no-sgl
ours ours-qd128-no-shadow-doorbells -q 128 --no-shadow-doorbells
ours ours-qd1-no-shadow-doorbells -q 1 --submit-batch 1 --complete-batch 1 --no-shadow-doorbells
ours ours-qd1-untimed -q 1 --submit-batch 1 --complete-batch 1 --no-latency
# A baseline build of ours (tests/trace-io.sh's BASE=), for a before/after in one boot.
if command -v nvme-perf-base >/dev/null; then
    for qd in 128 1; do
        run "base-qd$qd" nvme-perf-base "$NVME_BDF" -n "$NSID" -w randread -b 4096 -t "$T" \
            -q "$qd" --submit-batch "$qd" --complete-batch "$qd"
    done
fi

if command -v spdk_nvme_perf >/dev/null; then
    mkdir -p /var/tmp /var/run /dev/shm
    grep -q ' /dev/shm ' /proc/mounts || mount -t tmpfs tmpfs /dev/shm
    : >/tmp/openssl.cnf
    for qd in 128 1; do
        OPENSSL_CONF=/tmp/openssl.cnf run "spdk-qd$qd" spdk_nvme_perf -q "$qd" -o 4096 \
            -w randread -t "$T" --iova-mode pa -r "trtype:PCIe traddr:$NVME_BDF ns:$NSID"
    done
fi
if command -v libvfn-perf >/dev/null; then
    for qd in 128 1; do
        run "libvfn-qd$qd" libvfn-perf -d "$NVME_BDF" -N "$NSID" -q "$qd" -p randread -t "$T"
    done
fi
echo "@@TRACE-RUN end"
