# Benchmark: our driver (vfio-pci) against the kernel's io_uring on the same emulated controller
# in the same guest, 4 KiB random reads at QD128 and QD1, repeated in alternating order.
# Every run prints one line `@@BENCH <label> <json>`; tests/bench.sh turns them into medians.
# Knobs (kernel command line words become the environment of /init): BENCH_REPS, BENCH_TIME,
# BENCH_AB=0 to skip the A/B runs of our mechanisms.
. /tests/lib.sh

REPS=${BENCH_REPS:-3}
T=${BENCH_TIME:-5}
AB=${BENCH_AB:-1}
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
    ours ours-qd128 -q 128
    ours ours-qd128-untimed -q 128 --no-latency
    ours ours-qd1 -q 1 --submit-batch 1 --complete-batch 1
    if [ "$AB" = 1 ]; then
        ours ours-qd128-no-request-cache -q 128 --no-request-cache
        ours ours-qd128-no-batch-prefetch -q 128 --no-batch-prefetch
        ours ours-qd128-no-shadow-doorbells -q 128 --no-shadow-doorbells
        ours ours-qd128-interrupts -q 128 --interrupts
        ours ours-qd1-interrupts -q 1 --submit-batch 1 --complete-batch 1 --interrupts
    fi
}

run_kernel() {
    bind_kernel
    BLK=$(ns_blockdev "$NSID")
    echo "kernel: $BLK, poll queues: $(cat /sys/module/nvme/parameters/poll_queues 2>/dev/null)"
    kernel uring-polled-qd128 -q 128 --iopoll
    kernel uring-polled-qd128-untimed -q 128 --iopoll --no-latency
    kernel uring-polled-qd1 -q 1 --submit-batch 1 --complete-batch 1 --iopoll
    kernel uring-irq-qd128 -q 128
    kernel uring-irq-qd1 -q 1 --submit-batch 1 --complete-batch 1
}

rep=1
while [ "$rep" -le "$REPS" ]; do
    echo "== repetition $rep of $REPS"
    if [ $((rep % 2)) = 1 ]; then
        run_ours
        run_kernel
    else
        run_kernel
        run_ours
    fi
    rep=$((rep + 1))
done
