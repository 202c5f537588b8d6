# Benchmark (issue 23 item 2): fio's io_uring engine on /dev/ublkbN (nvme-ublk serving the
# namespace through our driver) against fio's io_uring engine on the kernel nvme driver's block
# device of the same namespace, in one boot on one controller (rebound between the phases):
# 4 KiB random reads, O_DIRECT, QD1 and QD32, UB_REPS repetitions of UB_TIME seconds a run,
# the phases' order alternating per repetition. Needs the harness's 6.12 kernel (run.sh
# --vfio-mode) and fio (GUEST_EXTRA_BINS=fio=/usr/bin/fio). Not in tests/run-all.sh.
# nvme-ublk runs twice a repetition: as by default (ublk-spin-*: polls without sleeping while
# requests are in flight) and with --poll-sleep-us 20 (ublk-*: sleeps 20 us between polls once
# the device has been slow to answer for a few polls).
# Each run prints `@@UBLK <label> <IOPS>`; labels ublk[-spin]-qd{1,32}, kernel-qd{1,32}; the server's
# CPU time per ublk run as `@@UBLK-CPU <label> <seconds>`. The last lines are the medians and
# the ratios ublk / kernel.
# shellcheck source=/dev/null # the guest path of tests/qemu/lib.sh
. /tests/lib.sh
PATH=$PATH:/usr/local/bin

REPS=${UB_REPS:-3}
T=${UB_TIME:-5}
NSID=2
LOG=/tmp/nvme-ublk.log
command -v fio >/dev/null || fail "fio is not in the guest (GUEST_EXTRA_BINS=fio=/usr/bin/fio)"
[ -e /dev/ublk-control ] || fail "no /dev/ublk-control (run.sh --vfio-mode boots a kernel with ublk)"

# A failing step must not leave the server holding the controller (the harness rebinds it to
# the kernel driver after the case, which waits for vfio-pci's user to let go).
UPID=""
cleanup() {
    [ -z "$UPID" ] || kill -TERM "$UPID" 2>/dev/null || true
    sleep 1
    [ -z "$UPID" ] || kill -KILL "$UPID" 2>/dev/null || true
}
trap cleanup EXIT

# fio_iops LABEL DEV QD: one fio run; prints @@UBLK LABEL IOPS (0 on failure).
fio_iops() {
    if fio --name=ub --filename="$2" --rw=randread --bs=4k --ioengine=io_uring --direct=1 \
        --iodepth="$3" --iodepth_batch_submit="$3" --iodepth_batch_complete_min=1 \
        --time_based=1 --runtime="$T" --norandommap=1 --randrepeat=0 --thread --minimal \
        >/tmp/ub.out 2>/tmp/ub.err; then
        # Terse format v3: field 8 is the read IOPS.
        echo "@@UBLK $1 $(tail -n1 /tmp/ub.out | cut -d';' -f8)" | tee -a /tmp/ub.all
    else
        cat /tmp/ub.err
        echo "@@UBLK $1 0" | tee -a /tmp/ub.all
    fi
}

# cpu_ticks PID: user + system clock ticks of PID.
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }

# ublk_phase NAME [nvme-ublk options]: the ublk runs, labelled NAME-qd*.
ublk_phase() {
    name=$1
    shift
    bind_vfio
    nvme-ublk "$NVME_BDF" -n $NSID --queues 2 "$@" >$LOG 2>&1 &
    UPID=$!
    i=0
    until grep -q "nvme-ublk: serving" $LOG; do
        i=$((i + 1))
        [ "$i" -lt 300 ] || { cat $LOG; fail "nvme-ublk did not start"; }
        sleep 0.1
    done
    dev=$(sed -n 's|.* as \(/dev/ublkb[0-9]*\) .*|\1|p' $LOG)
    until [ -b "$dev" ]; do sleep 0.1; done
    for q in 1 32; do
        c0=$(cpu_ticks $UPID)
        fio_iops $name-qd$q "$dev" $q
        c1=$(cpu_ticks $UPID)
        echo "@@UBLK-CPU $name-qd$q $(awk -v t=$((c1 - c0)) -v hz="$(getconf CLK_TCK 2>/dev/null || echo 100)" 'BEGIN { printf "%.2f", t / hz }')"
    done
    kill -TERM $UPID
    wait $UPID || fail "nvme-ublk did not stop cleanly"
    UPID=""
}

kernel_phase() {
    bind_kernel
    kdev=$(ns_blockdev $NSID)
    for q in 1 32; do fio_iops kernel-qd$q "$kdev" $q; done
}

: >/tmp/ub.all
r=1
while [ $r -le "$REPS" ]; do
    echo "== repetition $r of $REPS (${T} s a run)"
    if [ $((r % 2)) = 1 ]; then
        ublk_phase ublk --poll-sleep-us 20
        ublk_phase ublk-spin
        kernel_phase
    else
        kernel_phase
        ublk_phase ublk-spin
        ublk_phase ublk --poll-sleep-us 20
    fi
    r=$((r + 1))
done

echo "== medians (IOPS) and ratios"
median() { sed -n "s/^@@UBLK $1 //p" /tmp/ub.all | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
ratio() { awk -v u="$1" -v k="$2" 'BEGIN { if (k > 0) printf "%.2f", u / k; else print "n/a" }'; }
for q in 1 32; do
    u=$(median ublk-qd$q)
    s=$(median ublk-spin-qd$q)
    k=$(median kernel-qd$q)
    echo "@@UBLK-MEDIAN qd$q ublk=$u ublk-spin=$s kernel=$k ratio=$(ratio "$u" "$k") spin-ratio=$(ratio "$s" "$k")"
done
