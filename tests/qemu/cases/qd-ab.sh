# Short A/B of our nvme-perf against a baseline build of it (`nvme-perf-base`, when
# tests/qd-ab.sh put one into the guest) and the peers SPDK and libvfn, at QD1 and QD128, in one
# boot with the order rotated each repetition: the quick check of a hot-path change that
# tests/bench.sh's full table takes an hour for. Output as in bench.sh (@@BENCH / @@PEER lines),
# labels ours-qd{1,128}, base-qd{1,128}, spdk-qd{1,128}, libvfn-qd{1,128}.
# Knobs: AB_REPS (default 3), AB_TIME seconds a run (default 3).
# shellcheck source=/dev/null # the guest path of tests/qemu/lib.sh
. /tests/lib.sh
PATH=$PATH:/usr/local/bin

REPS=${AB_REPS:-3}
T=${AB_TIME:-3}
NSID=1

emit() {
    label=$1
    shift
    if "$@" >/tmp/ab.json 2>/tmp/ab.err; then
        echo "@@BENCH $label $(tr -d '\n' </tmp/ab.json)"
    else
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
        OPENSSL_CONF=/tmp/openssl.cnf peer "spdk-qd$q" spdk_nvme_perf -o 4096 -w randread -t "$T" \
            --iova-mode pa -r "trtype:PCIe traddr:$NVME_BDF ns:$NSID" -q "$q"
    done
}
run_libvfn() {
    for q in 128 1; do
        peer "libvfn-qd$q" libvfn-perf -d "$NVME_BDF" -N "$NSID" -p randread -t "$T" -q "$q"
    done
}

WHO="ours"
command -v nvme-perf-base >/dev/null && WHO="$WHO base"
if command -v spdk_nvme_perf >/dev/null; then
    WHO="$WHO spdk"
    mkdir -p /var/tmp /var/run /dev/shm
    grep -q ' /dev/shm ' /proc/mounts || mount -t tmpfs tmpfs /dev/shm
    : >/tmp/openssl.cnf
fi
command -v libvfn-perf >/dev/null && WHO="$WHO libvfn"
echo "qd-ab: $WHO, $REPS repetitions of $T s"
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
