# Benchmark (issue 23 item 1): our NVMe/TCP target (nvme-target, the QEMU controller through
# VFIO and our driver) against the kernel's nvmet-tcp target (configfs, backed by the kernel
# nvme driver's block device of the same namespace), in one boot on one controller, rebound
# between the phases. Both on 127.0.0.1 (loopback); the load is the kernel's NVMe/TCP host
# (`nvme connect`-style options on /dev/nvme-fabrics, default queues) with fio's io_uring
# engine on its block device: 4 KiB random reads, direct=1, QD1 and QD128, TB_REPS repetitions
# of TB_TIME seconds, the phases' order alternating per repetition. Run by tests/target-bench.sh
# (report: tests/qemu/target-bench-report.py); not in tests/run-all.sh. Needs fio in the guest
# (GUEST_EXTRA_BINS=fio=/usr/bin/fio).
#
# Phases: kernel (nvmet-tcp), ours (nvme-target --threads 1), sleep (the same with
# --idle-spins 0: the poll group blocks after every pass that found nothing instead of
# spinning first; since that is the default now, TB_SLEEP=0 leaves it out), and base (nvme-target-base, the same as ours with
# a baseline build, when tests/target-bench.sh put one into the guest: A/B of a change to
# crates/target).
#
# TB_PIN=1: fio runs on CPU 0 only (--cpus_allowed=0) and nvme-target on CPU 1 only (taskset),
# so that our polling thread never shares a CPU with fio or the host's io_work for fio's queue.
# TB_PIN=same: fio and nvme-target both on CPU 0 only, where the host's io_work for fio's
# queue runs too (a target that blocks instead of spinning: a QD1 round without a hand-over
# to the other CPU, as the kernel target's can be).
#
# TB_TRACE=1: then one more run of ours at QD1 with its round trace (trace_phase).
#
# Every run prints
#   @@TB <label> <fio's JSON output on one line>
#   @@TBCPU <label> target=T kworker=K busy=B ticks (USER_HZ, 100 a second)
# where, over the run: T is the target's CPU (ours: utime + stime of the nvme-target process,
# all threads, /proc/PID/stat; kernel: = K), K the utime + stime of every kworker thread (the
# per-thread deltas of /proc/PID/stat of the threads named kworker*: nvmet-tcp's io_work, but
# also the kernel host's own io_work and whatever else ran on the shared worker pools), B the
# busy time of the whole guest (/proc/stat "cpu": everything but idle and iowait).
# shellcheck source=/dev/null # the guest path of tests/qemu/lib.sh
. /tests/lib.sh
PATH=$PATH:/usr/local/bin

REPS=${TB_REPS:-3}
T=${TB_TIME:-5}
NSID=1
LOG=/tmp/nvme-target.log
K_NQN=nqn.2026-01.test:kernel-target
O_NQN=nqn.2026-01.test:our-target
K_PORT=4420
O_PORT=4421
command -v fio >/dev/null || fail "fio is not in the guest (GUEST_EXTRA_BINS=fio=/usr/bin/fio)"

ip link set lo up
ip addr add 127.0.0.1/8 dev lo 2>/dev/null || true
modprobe nvmet
modprobe nvmet-tcp
nvmf_host_available || fail "the kernel's NVMe/TCP host (nvme-tcp) is not in the guest"

# A failing step must not leave a target holding the controller.
TPID=""
cleanup() {
    nvmf_host_disconnect 2>/dev/null || true
    [ -z "$TPID" ] || kill -TERM "$TPID" 2>/dev/null || true
    sleep 1
    [ -z "$TPID" ] || kill -KILL "$TPID" 2>/dev/null || true
}
trap cleanup EXIT

# snap FILE: "pid comm ticks" (utime + stime) of every thread the kernel lists as a process
# (kernel threads are), then "busy ticks" of the whole guest.
snap() {
    awk '{ o = index($0, "("); c = index($0, ") ");
           comm = substr($0, o + 1, c - o - 1); n = split(substr($0, c + 2), f, " ");
           if (n >= 13) print $1, comm, f[12] + f[13] }' /proc/[0-9]*/stat 2>/dev/null >"$1"
    awk '$1 == "cpu" { print "busy", $2 + $3 + $4 + $7 + $8 + $9 }' /proc/stat >>"$1"
}

# kworker_ticks BEFORE AFTER: CPU ticks the kworker threads used between the two snapshots
# (a thread that appeared counts from 0; one that exited is lost: kworkers rarely exit).
kworker_ticks() {
    awk 'NR == FNR { if ($2 ~ /^kworker/) b[$1] = $3; next }
         $2 ~ /^kworker/ { s += $3 - b[$1] } END { print s + 0 }' "$1" "$2"
}

busy_ticks() {
    awk 'NR == FNR { if ($1 == "busy") b = $2; next } $1 == "busy" { print $2 - b }' "$1" "$2"
}

pid_ticks() { awk '{ c = index($0, ") "); split(substr($0, c + 2), f, " "); print f[12] + f[13] }' "/proc/$1/stat"; }

# fio_run LABEL DEV QD [PID]: one fio run; its JSON and the CPU line (PID: our target).
fio_run() {
    label=$1
    dev=$2
    qd=$3
    pid=${4:-}
    snap /tmp/snap0
    [ -z "$pid" ] || p0=$(pid_ticks "$pid")
    pin=""
    [ "${TB_PIN:-0}" = 0 ] || pin=--cpus_allowed=0
    if ! fio $pin --name=tb --filename="$dev" --rw=randread --bs=4k --ioengine=io_uring --direct=1 \
        --iodepth="$qd" --iodepth_batch_submit="$qd" --iodepth_batch_complete_min=1 \
        --time_based=1 --runtime="$T" --norandommap=1 --randrepeat=0 \
        --lat_percentiles=1 --percentile_list=50:99 --output-format=json >/tmp/tb.json 2>/tmp/tb.err; then
        cat /tmp/tb.err
        fail "fio failed on $dev ($label)"
    fi
    snap /tmp/snap1
    kw=$(kworker_ticks /tmp/snap0 /tmp/snap1)
    busy=$(busy_ticks /tmp/snap0 /tmp/snap1)
    if [ -n "$pid" ]; then tgt=$(($(pid_ticks "$pid") - p0)); else tgt=$kw; fi
    echo "@@TB $label $(tr -d '\n' </tmp/tb.json)"
    echo "@@TBCPU $label target=$tgt kworker=$kw busy=$busy"
    awk -v l="$label" -v t="$tgt" -v k="$kw" '/"iops" :/ && !i { gsub(/,/, "", $3); i = $3 }
        END { printf "    %-14s IOPS %8.0f  target CPU %5.2f s  kworkers %5.2f s\n", l, i, t / 100, k / 100 }' /tmp/tb.json
}

# host_attach NQN PORT: the kernel host connects; prints its block device of the namespace.
host_attach() {
    NVMF_NQN=$1
    NVMF_PORT=$2
    nvmf_host_connect "$SECTORS"
}

host_detach() {
    NVMF_NQN=$1
    nvmf_host_disconnect
    i=0
    while [ -b "$2" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
}

kernel_phase() {
    bind_kernel
    kdev=$(ns_blockdev $NSID)
    NVMF_NQN=$K_NQN NVMF_PORT=$K_PORT NVMF_NS1_DEV=$kdev nvmf_target_up
    dev=$(host_attach $K_NQN $K_PORT)
    echo "  kernel: nvmet-tcp on 127.0.0.1:$K_PORT over $kdev; host device $dev"
    for q in 1 128; do fio_run kernel-qd$q "$dev" $q; done
    host_detach $K_NQN "$dev"
    NVMF_NQN=$K_NQN nvmf_target_down
}

# our_phase NAME BINARY [ARGS...]: nvme-target (or the baseline build) serving the controller.
our_phase() {
    name=$1
    bin=$2
    shift 2
    bind_vfio
    NVME_TARGET_BIN=$bin
    nvme_target_start $LOG $O_NQN "$NVME_BDF" --listen 127.0.0.1:$O_PORT --subnqn $O_NQN \
        -n $NSID --threads 1 "$@"
    dev=$(host_attach $O_NQN $O_PORT)
    echo "  $name: $bin on 127.0.0.1:$O_PORT; host device $dev"
    for q in 1 128; do fio_run $name-qd$q "$dev" $q $TPID; done
    host_detach $O_NQN "$dev"
    kill -TERM $TPID
    wait $TPID || fail "$bin did not stop cleanly"
    TPID=""
}

# trace_phase: nvme-target with NVME_TARGET_TRACE (crates/target/src/trace.rs) at QD1 for T s;
# prints the trace as "@@TGTTRACE <line>" (tests/qemu/target-trace-report.py sums it up).
trace_phase() {
    bind_vfio
    rm -f /tmp/tgt.trace
    NVME_TARGET_TRACE=/tmp/tgt.trace nvme_target_start $LOG $O_NQN "$NVME_BDF" \
        --listen 127.0.0.1:$O_PORT --subnqn $O_NQN -n $NSID --threads 1
    dev=$(host_attach $O_NQN $O_PORT)
    echo "  trace: nvme-target on 127.0.0.1:$O_PORT; host device $dev"
    fio_run trace-qd1 "$dev" 1 $TPID
    host_detach $O_NQN "$dev"
    kill -TERM $TPID
    wait $TPID || fail "nvme-target did not stop cleanly"
    TPID=""
    [ -s /tmp/tgt.trace ] || fail "nvme-target wrote no trace to /tmp/tgt.trace"
    sed 's/^/@@TGTTRACE /' /tmp/tgt.trace
}

case "${TB_PIN:-0}" in
0) ;;
same) NVME_TARGET_CPUS=0 ;;
*) NVME_TARGET_CPUS=1 ;;
esac
bind_kernel
SECTORS=$(cat "/sys/block/$(basename "$(ns_blockdev $NSID)")/size")
PHASES="kernel ours"
[ "${TB_SLEEP:-1}" = 0 ] || PHASES="$PHASES sleep"
command -v nvme-target-base >/dev/null && PHASES="$PHASES base"
echo "guest: $(nproc) CPUs, kernel $(uname -r); namespace $NSID: $SECTORS sectors; phases: $PHASES;" \
    "$REPS repetitions of $T s; pinned: ${TB_PIN:-0}"

r=1
while [ $r -le "$REPS" ]; do
    if [ $((r % 2)) = 1 ]; then seq=$PHASES; else seq=$(echo "$PHASES" | awk '{ for (i = NF; i > 0; i--) printf "%s ", $i }'); fi
    echo "== repetition $r of $REPS: $seq"
    for p in $seq; do
        case $p in
        kernel) kernel_phase ;;
        ours) our_phase ours nvme-target ;;
        sleep) our_phase sleep nvme-target --idle-spins 0 ;;
        base) our_phase base nvme-target-base ;;
        esac
    done
    r=$((r + 1))
done
[ "${TB_TRACE:-0}" = 0 ] || trace_phase
bind_kernel
echo "ok: target-bench done"
