# Benchmark: our NVMe/TCP initiator against the kernel's NVMe/TCP host, side by side in one boot,
# both against the kernel's target (nvmet + nvmet-tcp, tests/qemu/lib.sh nvmf_target_up) on
# 127.0.0.1:4420 and the same namespace: nsid 1, a memory-backed null_blk device with 4 KiB
# blocks. 4 KiB random reads at QD1 and QD128:
#   ours-qd{1,128}            nvme-perf "$TRID" -n 1 (one TCP connection, busy polling)
#   ours-yield-qd{1,128}      the same with --yield-idle: sched_yield after a poll that found
#                             nothing, so that the target's threads on the same CPU run at once
#   ours-wait-qd{1,128}       the same with --interrupts: after 64 empty polls, block in a read
#                             of the socket (TcpQueuePair::wait_for_completion)
#   base-qd{1,128}            the same with nvme-perf-base, when tests/tcp-bench.sh put a
#                             baseline build into the guest (BASE=...): A/B of a change
#   kernel-irq-qd{1,128}      nvme-perf --engine io_uring on the kernel host's block device,
#                             no IORING_SETUP_IOPOLL (the task sleeps until the completion)
#   kernel-polled-qd{1,128}   the same with --iopoll, on the poll queue the host was connected
#                             with (nr_poll_queues=1); skipped with a note where it fails
# Every run prints `@@BENCH <label> <json>` (nvme-perf --json) and a readable line; the order of
# the sides rotates each repetition. tests/tcp-bench.sh (tests/qemu/bench-report.py --tcp) turns
# the log into medians and per-repetition ratios. Afterwards, where strace is in the guest
# (tests/tcp-bench.sh installs it), one run of each side at QD1 and QD128 under `strace -c -f`
# counts the syscalls (`@@STRACE <label> <line>`, closed by `@@STRACE-END <label> ios=N`).
# Knobs: TCPBENCH_REPS (default 5), TCPBENCH_TIME seconds a run (default 5), TCPBENCH_STRACE=0
# (no strace runs), TCPBENCH_AB=0 (no ours-yield / ours-wait runs).
# shellcheck source=/dev/null # the guest path of tests/qemu/lib.sh
. /tests/lib.sh
PATH=$PATH:/usr/local/bin

REPS=${TCPBENCH_REPS:-5}
T=${TCPBENCH_TIME:-5}
STRACE=${TCPBENCH_STRACE:-1}
AB=${TCPBENCH_AB:-1}
TRID=$NVMF_TRID

# First value of a JSON key in nvme-perf's pretty-printed output (one key per line).
jget() {
    sed -n "s/^ *\"$1\": *\\([0-9.e+-]*\\),\\{0,1\\}\$/\\1/p" "$2" | head -n1
}

# Per-CPU time during a run from /proc/stat: `@@CPU <label> cpuN busy% user% system% softirq%`
# for each CPU (user includes nice), to see whether the initiator and the target share one.
cpu_split() {
    awk -v l="$1" 'NR == FNR { for (i = 2; i <= 9; i++) a[$1, i] = $i; next }
        { tot = 0; for (i = 2; i <= 9; i++) { d[i] = $i - a[$1, i]; tot += d[i] }
          if (tot == 0) tot = 1
          s = s sprintf(" %s %.0f %.0f %.0f %.0f", $1, 100 * (tot - d[5] - d[6]) / tot,
              100 * (d[2] + d[3]) / tot, 100 * (d[4] + d[7]) / tot, 100 * d[8] / tot) }
        END { print "@@CPU " l s }' /tmp/stat0 /tmp/stat1
}

emit() {
    label=$1
    shift
    grep "^cpu[0-9]" /proc/stat >/tmp/stat0
    if "$@" >/tmp/tb.json 2>/tmp/tb.err; then
        grep "^cpu[0-9]" /proc/stat >/tmp/stat1
        echo "@@BENCH $label $(tr -d '\n' </tmp/tb.json)"
        cpu_split "$label"
        awk -v l="$label" '
            /"iops":/ { gsub(/[",]/, "", $2); iops = $2 }
            /"avg":/ && !avg { gsub(/[",]/, "", $2); avg = $2 }
            /"50":/ && !p50 { gsub(/[",]/, "", $2); p50 = $2 }
            /"99":/ && !p99 { gsub(/[",]/, "", $2); p99 = $2 }
            END { printf "    %-20s IOPS %8.0f  avg %8.1f us  p50 %8.1f us  p99 %8.1f us\n",
                  l, iops, avg / 1000, p50 / 1000, p99 / 1000 }' /tmp/tb.json
    else
        echo "bench run $label failed:"
        cat /tmp/tb.err
        return 1
    fi
}

run_ours() {
    for q in 1 128; do
        emit "ours-qd$q" nvme-perf "$TRID" -n 1 -w randread -b 4096 -q "$q" -t "$T" --quiet --json
        if [ "$AB" = 1 ]; then
            emit "ours-yield-qd$q" nvme-perf "$TRID" -n 1 -w randread -b 4096 -q "$q" -t "$T" \
                --yield-idle --quiet --json
            emit "ours-wait-qd$q" nvme-perf "$TRID" -n 1 -w randread -b 4096 -q "$q" -t "$T" \
                --interrupts --quiet --json
        fi
    done
}

run_base() {
    for q in 1 128; do
        emit "base-qd$q" nvme-perf-base "$TRID" -n 1 -w randread -b 4096 -q "$q" -t "$T" --quiet --json
    done
}

run_kernel() {
    for q in 1 128; do
        emit "kernel-irq-qd$q" nvme-perf --engine io_uring "$KDEV" -w randread -b 4096 -q "$q" -t "$T" \
            --quiet --json
        if [ "$POLLED" = 1 ]; then
            emit "kernel-polled-qd$q" nvme-perf --engine io_uring "$KDEV" -w randread -b 4096 -q "$q" \
                -t "$T" --iopoll --quiet --json
        fi
    done
}

echo "== target: nvmet-tcp on 127.0.0.1:$NVMF_PORT, nsid 1 = null_blk (memory-backed, 4 KiB)"
nvmf_target_up
nvmf_host_available || fail "the kernel's NVMe/TCP host (nvme-tcp) is not available"
# One poll queue besides the default (interrupt-driven) ones, for io_uring's IOPOLL.
KDEV=$(nvmf_host_connect "$NVMF_NS1_SECTORS" ",nr_poll_queues=1")
kblk=${KDEV#/dev/}
kctrl=""
for c in /sys/class/nvme/nvme*; do
    [ "$(cat "$c/subsysnqn" 2>/dev/null)" = "$NVMF_NQN" ] && kctrl=${c##*/}
done
echo "guest: $(nproc) CPUs, kernel $(uname -r)," \
    "clocksource $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource); kernel host: $KDEV on $kctrl," \
    "queues $(cat "/sys/class/nvme/$kctrl/queue_count" 2>/dev/null || echo '?') (admin included)," \
    "io_poll $(cat "/sys/block/$kblk/queue/io_poll" 2>/dev/null || echo '?')"
echo "ours: $TRID, nsid 1; both sides read the same $NVMF_NS1_GB GiB namespace"

# Both sides must see the same namespace: one 4 KiB block written by ours reads back through
# the kernel's host.
dd if=/dev/urandom of=/tmp/blk.bin bs=4096 count=1 2>/dev/null
nvme-dd --device "$TRID" if=/tmp/blk.bin of=nvme:1 bs=4096 seek=7 --no-progress
dd if="$KDEV" of=/tmp/kblk.bin bs=4096 skip=7 count=1 iflag=direct 2>/dev/null
cmp /tmp/blk.bin /tmp/kblk.bin || fail "the kernel host's $KDEV is not the namespace ours writes to"
echo "    ok: a block written by ours over TCP reads back through $KDEV"

POLLED=1
if ! nvme-perf --engine io_uring "$KDEV" -w randread -q 1 -t 1 --iopoll --quiet --json >/dev/null 2>/tmp/tb.err; then
    POLLED=0
    echo "@@WARN io_uring --iopoll fails on $KDEV: polled kernel runs skipped"
    sed 's/^/    /' /tmp/tb.err
fi

WHO="ours"
command -v nvme-perf-base >/dev/null && WHO="$WHO base"
WHO="$WHO kernel"
n=0
for w in $WHO; do n=$((n + 1)); done
echo "tcp-bench: $WHO; $REPS repetitions of $T s; polled kernel runs: $POLLED"

rep=1
while [ "$rep" -le "$REPS" ]; do
    # Rotate the order: each side goes first in turn.
    shift_by=$(((rep - 1) % n))
    seq=""
    i=0
    for w in $WHO; do
        [ "$i" -lt "$shift_by" ] || seq="$seq $w"
        i=$((i + 1))
    done
    i=0
    for w in $WHO; do
        [ "$i" -ge "$shift_by" ] || seq="$seq $w"
        i=$((i + 1))
    done
    echo "== repetition $rep of $REPS:$seq"
    for w in $seq; do "run_$w"; done
    rep=$((rep + 1))
done

# Syscalls per I/O: each run under strace -c, slowed down by the tracing (count the calls, not
# the rates), and once more with one I/O (--ios 1: start-up and teardown), labelled
# <label>-setup, which the report subtracts.
straced() {
    label=$1
    shift
    set +e
    strace -c -f -o /tmp/strace.out "$@" -t "$T" --quiet --json >/tmp/st.json 2>/dev/null
    rc=$?
    strace -c -f -o /tmp/strace1.out "$@" --ios 1 --quiet --json >/tmp/st1.json 2>/dev/null
    rc1=$?
    set -e
    sed "s/^/@@STRACE $label /" /tmp/strace.out
    echo "@@STRACE-END $label ios=$(jget ios /tmp/st.json) rc=$rc"
    sed "s/^/@@STRACE $label-setup /" /tmp/strace1.out
    echo "@@STRACE-END $label-setup ios=$(jget ios /tmp/st1.json) rc=$rc1"
}
if [ "$STRACE" = 1 ] && command -v strace >/dev/null; then
    echo "== syscalls under strace -c -f"
    for q in 1 128; do
        for w in $WHO; do
            case $w in
            ours) straced "ours-qd$q" nvme-perf "$TRID" -n 1 -w randread -b 4096 -q "$q" ;;
            base) straced "base-qd$q" nvme-perf-base "$TRID" -n 1 -w randread -b 4096 -q "$q" ;;
            kernel)
                straced "kernel-irq-qd$q" nvme-perf --engine io_uring "$KDEV" -w randread -b 4096 -q "$q"
                [ "$POLLED" = 0 ] ||
                    straced "kernel-polled-qd$q" nvme-perf --engine io_uring "$KDEV" -w randread -b 4096 \
                        -q "$q" --iopoll
                ;;
            esac
        done
    done
fi

echo "== cleanup"
nvmf_host_disconnect
nvmf_target_down
