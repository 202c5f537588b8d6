# Benchmark: our driver (vfio-pci) against the kernel's io_uring on the same emulated controller
# in the same guest, 4 KiB random reads at QD128 and QD1, repeated in alternating order; with
# them, when tests/bench.sh put them into the guest (/usr/local/bin), the peers SPDK
# (spdk_nvme_perf) and libvfn (examples/perf, installed as libvfn-perf), both on vfio-pci too and
# run with their own default flags but for queue depth, I/O size, pattern and time.
# Every run of nvme-perf prints one line `@@BENCH <label> <json>`; every peer run prints its
# output as `@@PEER <label> <line>` lines closed by `@@PEER-END <label> rc=N`. tests/bench.sh
# (tests/qemu/bench-report.py) turns them into medians.
# The QD1 runs of nvme-perf add their latency histogram (--histogram: `histogram_ns` in the JSON).
# Knobs (kernel command line words become the environment of /init): BENCH_REPS, BENCH_TIME,
# BENCH_AB=0 to skip the A/B runs of our mechanisms, BENCH_SWEEP=1 to add, after the repetitions,
# one queue-depth sweep (QD 1, 2, 4, ..., 256; BENCH_SWEEP_TIME seconds a point, default
# BENCH_TIME) of ours, the peers and the kernel's polled io_uring, labelled <who>-sweep-qd<N>
# (tests/qemu/bench-plots.py draws it).
# BENCH_LOAD=1 (tests/bench.sh with BENCH_LOAD=N; run.sh --host-load) adds to every repetition a
# loaded phase: the guest asks the host for its CPU hog ("@@HOST load on"), runs ours, the peers
# and the kernel's polled io_uring at QD128 and QD1 with the labels of the quiet runs plus
# "-loaded", and switches the hog off again; odd repetitions run the quiet phase first, even
# ones the loaded phase. The A/B runs of our mechanisms stay in the quiet phase only.
# shellcheck source=/dev/null # the guest path of tests/qemu/lib.sh
. /tests/lib.sh
PATH=$PATH:/usr/local/bin

REPS=${BENCH_REPS:-3}
T=${BENCH_TIME:-5}
AB=${BENCH_AB:-1}
SWEEP=${BENCH_SWEEP:-0}
LOAD=${BENCH_LOAD:-0}
# "" in the quiet phase, "-loaded" in the loaded one: the suffix of every label.
PHASE=""
# Seconds the guest waits after asking the host to switch its load (the host reads the serial
# log 5 times a second and starts the hog at once).
LOAD_SETTLE=2
SWEEP_T=${BENCH_SWEEP_TIME:-$T}
SWEEP_QDS="1 2 4 8 16 32 64 128 256"
NSID=1

emit() {
    label=$1
    shift
    if "$@" >/tmp/bench.json 2>/tmp/bench.err; then
        echo "@@BENCH $label $(tr -d '\n' </tmp/bench.json)"
    else
        echo "bench run $label failed:"
        cat /tmp/bench.err
        return 1
    fi
}

ours() {
    label=$1
    shift
    emit "$label" nvme-perf "$NVME_BDF" -n "$NSID" -w randread -b 4096 -t "$T" --quiet --json "$@"
}

kernel() {
    label=$1
    shift
    emit "$label" nvme-perf --engine io_uring "$BLK" -w randread -b 4096 -t "$T" --quiet --json "$@"
}

run_ours() {
    bind_vfio
    ours "ours-qd128$PHASE" -q 128
    [ -n "$PHASE" ] || ours ours-qd128-untimed -q 128 --no-latency
    ours "ours-qd1$PHASE" -q 1 --submit-batch 1 --complete-batch 1 --histogram
    # As the peers run (neither spdk_nvme_perf without -L nor libvfn's perf times each I/O):
    # no clock read per I/O, in both phases (item 5: what the per-I/O clock costs under load).
    ours "ours-qd1-untimed$PHASE" -q 1 --submit-batch 1 --complete-batch 1 --no-latency
    if [ "$AB" = 1 ] && [ -z "$PHASE" ]; then
        # Per-I/O contexts: a Box from the cache, and Box::new (the default is one per slot).
        ours ours-qd128-contexts-cache -q 128 --contexts cache
        ours ours-qd128-contexts-box -q 128 --contexts box
        ours ours-qd128-no-batch-prefetch -q 128 --no-batch-prefetch
        # Shadow doorbells: the driver's rule leaves them off under TCG; this forces them on.
        ours ours-qd128-shadow-doorbells -q 128 --shadow-doorbells
        ours ours-qd1-shadow-doorbells -q 1 --submit-batch 1 --complete-batch 1 --shadow-doorbells
        ours ours-qd128-no-sgl -q 128 --no-sgl
        ours ours-qd1-no-sgl -q 1 --submit-batch 1 --complete-batch 1 --no-sgl
        ours ours-qd128-interrupts -q 128 --interrupts
        ours ours-qd1-interrupts -q 1 --submit-batch 1 --complete-batch 1 --interrupts
    fi
}

# Runs one peer benchmark and prints its output (stdout and stderr) for bench-report.py.
peer() {
    label=$1
    shift
    set +e
    "$@" >/tmp/peer.out 2>&1
    rc=$?
    set -e
    sed "s/^/@@PEER $label /" /tmp/peer.out
    echo "@@PEER-END $label rc=$rc"
    [ "$rc" = 0 ] || echo "peer run $label failed (exit $rc)"
}

spdk() {
    label=$1
    shift
    # The default flags of spdk_nvme_perf but for depth, size, pattern, time and the device, and
    # --iova-mode pa: with DPDK's default (IOVA = virtual address) it cannot map its memory, whose
    # addresses lie above the 39 bits that QEMU's intel-iommu translates ("IOVA exceeding limits
    # of current DMA mask"). OPENSSL_CONF: SPDK's start-up loads the OpenSSL configuration, which
    # the guest does not have; an empty one will do.
    OPENSSL_CONF=/tmp/openssl.cnf peer "$label" spdk_nvme_perf -o 4096 -w randread -t "$T" \
        --iova-mode pa -r "trtype:PCIe traddr:$NVME_BDF ns:$NSID" "$@"
}

libvfn() {
    label=$1
    shift
    peer "$label" libvfn-perf -d "$NVME_BDF" -N "$NSID" -p randread -t "$T" "$@"
}

run_spdk() {
    bind_vfio
    spdk "spdk-qd128$PHASE" -q 128
    spdk "spdk-qd1$PHASE" -q 1
}

run_libvfn() {
    bind_vfio
    libvfn "libvfn-qd128$PHASE" -q 128
    libvfn "libvfn-qd1$PHASE" -q 1
}

# The peers that tests/bench.sh installed; each needs the controller on vfio-pci, SPDK also its
# environment (spdk_env_setup, tests/qemu/lib.sh).
PEERS=""
if command -v spdk_nvme_perf >/dev/null; then
    PEERS="$PEERS spdk"
    spdk_env_setup
fi
command -v libvfn-perf >/dev/null && PEERS="$PEERS libvfn"
if [ -n "$PEERS" ]; then
    echo "peers:$PEERS; hugepages: $(cat /proc/sys/vm/nr_hugepages)"
else
    echo "peers: none (tests/bench.sh installs them when SPDK_PERF / LIBVFN_PERF name their binaries)"
fi

run_kernel() {
    bind_kernel
    BLK=$(ns_blockdev "$NSID")
    echo "kernel: $BLK, poll queues: $(cat /sys/module/nvme/parameters/poll_queues 2>/dev/null)"
    kernel "uring-polled-qd128$PHASE" -q 128 --iopoll
    [ -n "$PHASE" ] || kernel uring-polled-qd128-untimed -q 128 --iopoll --no-latency
    kernel "uring-polled-qd1$PHASE" -q 1 --submit-batch 1 --complete-batch 1 --iopoll --histogram
    [ -n "$PHASE" ] && return
    kernel uring-irq-qd128 -q 128
    kernel uring-irq-qd1 -q 1 --submit-batch 1 --complete-batch 1 --histogram
}

# Odd repetitions run ours, the peers, then the kernel; even ones the reverse order.
ORDER="ours$PEERS kernel"
REVERSE=""
for s in $ORDER; do REVERSE="$s $REVERSE"; done

# One phase of a repetition: every runner in the order $seq; the loaded phase between the
# host's hog switched on and off.
run_phase() {
    PHASE=$1
    if [ -n "$PHASE" ]; then
        echo "@@HOST load on"
        sleep "$LOAD_SETTLE"
    fi
    for s in $seq; do
        "run_$s"
    done
    if [ -n "$PHASE" ]; then
        echo "@@HOST load off"
        sleep "$LOAD_SETTLE"
    fi
    PHASE=""
}

PHASES=quiet
PHASES_REVERSE=quiet
[ "$LOAD" = 0 ] || { PHASES="quiet loaded"; PHASES_REVERSE="loaded quiet"; }
rep=1
while [ "$rep" -le "$REPS" ]; do
    echo "== repetition $rep of $REPS"
    if [ $((rep % 2)) = 1 ]; then
        seq=$ORDER phases=$PHASES
    else
        seq=$REVERSE phases=$PHASES_REVERSE
    fi
    for p in $phases; do
        echo "== $p phase"
        if [ "$p" = loaded ]; then run_phase -loaded; else run_phase ""; fi
    done
    rep=$((rep + 1))
done

# The queue-depth sweep: each of ours, the peers and the kernel (polled) through every depth,
# BENCH_SWEEP_TIME seconds a point (T is set to it before they run), with the default flags but
# for the depth.
sweep_ours() {
    bind_vfio
    for qd in $SWEEP_QDS; do
        ours "ours-sweep-qd$qd" -q "$qd"
    done
}

sweep_spdk() {
    bind_vfio
    for qd in $SWEEP_QDS; do
        spdk "spdk-sweep-qd$qd" -q "$qd"
    done
}

sweep_libvfn() {
    bind_vfio
    for qd in $SWEEP_QDS; do
        libvfn "libvfn-sweep-qd$qd" -q "$qd"
    done
}

sweep_kernel() {
    bind_kernel
    BLK=$(ns_blockdev "$NSID")
    for qd in $SWEEP_QDS; do
        kernel "uring-polled-sweep-qd$qd" -q "$qd" --iopoll
    done
}

if [ "$SWEEP" = 1 ]; then
    echo "== queue-depth sweep ($SWEEP_T s a point): $ORDER"
    T=$SWEEP_T
    for s in $ORDER; do
        "sweep_$s"
    done
fi
