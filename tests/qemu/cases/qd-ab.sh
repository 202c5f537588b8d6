# Short A/B of our nvme-perf against a baseline build of it (`nvme-perf-base`, when
# tests/qd-ab.sh put one into the guest) and the peers SPDK and libvfn, at QD1 and QD128, in one
# boot with the order rotated each repetition: the quick check of a hot-path change that
# tests/bench.sh's full table takes an hour for. Output as in bench.sh (@@BENCH / @@PEER lines),
# labels ours-qd{1,128}, base-qd{1,128}, spdk-qd{1,128}, libvfn-qd{1,128}.
# Knobs: AB_REPS (default 3), AB_TIME seconds a run (default 3), AB_ASLR=0 (every program
# loads at the same addresses in every run: the guest's randomize_va_space set to 0).
# After each run, `@@SCHED <label> ctxt=N intr=N secs=S` gives the guest's context switches and
# interrupts during it (whole guest, from /proc/stat; with one vCPU every switch takes the CPU
# from the polling loop) and its wall time, start-up and exit included (/proc/uptime).
# shellcheck source=/dev/null # the guest path of tests/qemu/lib.sh
. /tests/lib.sh
PATH=$PATH:/usr/local/bin

REPS=${AB_REPS:-3}
T=${AB_TIME:-3}
NSID=1

# The guest's context-switch and interrupt totals (/proc/stat) and its uptime in centiseconds,
# as "CTXT INTR CS".
sched_totals() {
    awk '$1 == "ctxt" { c = $2 } $1 == "intr" { i = $2 } END { print c, i }' /proc/stat
    awk '{ split($1, u, "."); print u[1] * 100 + u[2] }' /proc/uptime
}
sched_begin() {
    # shellcheck disable=SC2046 # three numbers
    set -- $(sched_totals)
    S_CTXT=$1
    S_INTR=$2
    S_CS=$3
}
sched_end() {
    label=$1
    # shellcheck disable=SC2046
    set -- $(sched_totals)
    cs=$(($3 - S_CS))
    echo "@@SCHED $label ctxt=$(($1 - S_CTXT)) intr=$(($2 - S_INTR)) secs=$((cs / 100)).$((cs / 10 % 10))$((cs % 10))"
}

emit() {
    label=$1
    shift
    sched_begin
    if "$@" >/tmp/ab.json 2>/tmp/ab.err; then
        sched_end "$label"
        echo "@@BENCH $label $(tr -d '\n' </tmp/ab.json)"
    else
        sched_end "$label"
        echo "ab run $label failed:"
        cat /tmp/ab.err
    fi
}

# Same flags as bench.sh's ours-qd128 / ours-qd1.
run_ours() {
    emit ours-qd128 nvme-perf "$NVME_BDF" -n "$NSID" -w randread -b 4096 -t "$T" --quiet --json -q 128
    emit ours-qd1 nvme-perf "$NVME_BDF" -n "$NSID" -w randread -b 4096 -t "$T" --quiet --json \
        -q 1 --submit-batch 1 --complete-batch 1
}
run_base() {
    emit base-qd128 nvme-perf-base "$NVME_BDF" -n "$NSID" -w randread -b 4096 -t "$T" --quiet --json -q 128
    emit base-qd1 nvme-perf-base "$NVME_BDF" -n "$NSID" -w randread -b 4096 -t "$T" --quiet --json \
        -q 1 --submit-batch 1 --complete-batch 1
}
run_spdk() {
    for q in 128 1; do
        sched_begin
        OPENSSL_CONF=/tmp/openssl.cnf peer "spdk-qd$q" spdk_nvme_perf -o 4096 -w randread -t "$T" \
            --iova-mode pa -r "trtype:PCIe traddr:$NVME_BDF ns:$NSID" -q "$q"
        sched_end "spdk-qd$q"
    done
}
run_libvfn() {
    for q in 128 1; do
        sched_begin
        peer "libvfn-qd$q" libvfn-perf -d "$NVME_BDF" -N "$NSID" -p randread -t "$T" -q "$q"
        sched_end "libvfn-qd$q"
    done
}

WHO="ours"
command -v nvme-perf-base >/dev/null && WHO="$WHO base"
if command -v spdk_nvme_perf >/dev/null; then
    WHO="$WHO spdk"
    spdk_env_setup
fi
command -v libvfn-perf >/dev/null && WHO="$WHO libvfn"
echo "qd-ab: $WHO, $REPS repetitions of $T s"
[ "${AB_ASLR:-}" != 0 ] || echo 0 >/proc/sys/kernel/randomize_va_space
echo "randomize_va_space: $(cat /proc/sys/kernel/randomize_va_space)"
echo "transparent_hugepage: $(cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null || echo none)"
clocksource() {
    echo "clocksource $1: $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource)"
}
clocksource before
bind_vfio
rep=1
while [ "$rep" -le "$REPS" ]; do
    echo "== repetition $rep of $REPS"
    # Rotate the order: each program goes first in turn.
    seq=""
    n=0
    for w in $WHO; do n=$((n + 1)); done
    shift_by=$(((rep - 1) % n))
    i=0
    for w in $WHO; do
        if [ "$i" -ge "$shift_by" ]; then seq="$seq $w"; fi
        i=$((i + 1))
    done
    i=0
    for w in $WHO; do
        if [ "$i" -lt "$shift_by" ]; then seq="$seq $w"; fi
        i=$((i + 1))
    done
    for w in $seq; do "run_$w"; done
    rep=$((rep + 1))
done
clocksource after
dmesg | grep -iE "clocksource|unstable" | tail -3 | sed 's/^/dmesg: /' || true
