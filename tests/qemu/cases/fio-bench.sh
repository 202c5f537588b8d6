# Benchmark (issue 26 item 3): the distribution's fio with our ioengine against fio's own
# io_uring engine on the kernel nvme driver, and each against its engine-free twin (our
# nvme-perf; fio's t/io_uring and nvme-perf --engine io_uring), in one boot on one controller:
# 4 KiB random reads at QD1 and QD128, FB_REPS repetitions of FB_TIME seconds a run.
# Each repetition runs two phases, the controller on vfio-pci (nvme-perf, fio + nvme-fio.so,
# and fio + SPDK's plugin when tests/fio-bench.sh was given SPDK_FIO_PLUGIN) and on the kernel
# nvme driver (fio io_uring, t/io_uring, nvme-perf --engine io_uring, all polled with fixed
# buffers and registered files: the host boots the guest with nvme.poll_queues=1); odd
# repetitions start with vfio-pci, even ones with the kernel, and the programs of a phase
# rotate, so that each goes first in turn.
# Every run prints one line (a failed one too, as {"failed": 1}): `@@BENCH <label> <json>`
# (nvme-perf's --json), `@@FIO <label> <json>` (fio's --output-format=json, on one line), or
# `@@PEER <label> <line>` lines closed by `@@PEER-END <label> rc=N` (t/io_uring's per-second
# IOPS lines). tests/fio-bench.sh (tests/qemu/fio-bench-report.py) turns them into medians
# and ratios.
# Labels: perf-qd{1,128} (nvme-perf, ours), fio-ours-qd*, fio-spdk-qd*, fio-uring-qd*,
# t-uring-qd*, perf-uring-qd*.
# Batching is the same for every program: a submission batch and a completion batch of the
# whole queue depth, i.e. one doorbell (one io_uring_enter) per round.
# fio, nvme-fio.so, t/io_uring and SPDK's spdk_nvme come in through GUEST_EXTRA_BINS
# (tests/fio-bench.sh).
# shellcheck source=/dev/null # the guest path of tests/qemu/lib.sh
. /tests/lib.sh
PATH=$PATH:/usr/local/bin

REPS=${FB_REPS:-3}
T=${FB_TIME:-3}
NSID=1
ENGINE=/usr/local/bin/nvme-fio.so
command -v fio >/dev/null || fail "fio is not in the guest (GUEST_EXTRA_BINS=fio=/usr/bin/fio)"
[ -f "$ENGINE" ] || fail "$ENGINE is not in the guest (tools/fio-engine/build.sh, GUEST_EXTRA_BINS)"
command -v t-io_uring >/dev/null || echo "t/io_uring is not in the guest: its runs are skipped"
SPDK_PLUGIN=/usr/local/bin/spdk_nvme
if [ -f "$SPDK_PLUGIN" ]; then
    # What cases/bench.sh gives spdk_nvme_perf (tests/fio-bench.sh raised GUEST_HUGEPAGES).
    spdk_env_setup
    # DPDK must run with IOVA = physical address here: its virtual addresses lie above the 39
    # bits QEMU's intel-iommu translates (cases/bench.sh passes spdk_nvme_perf --iova-mode pa).
    # The plugin has no option for it; SPDK's env chooses pa by itself only on an Intel CPU
    # whose IOMMU is narrower than 48 bits, and TCG's `-cpu max` says AuthenticAMD. So for
    # the plugin's runs /proc/cpuinfo is covered by a copy saying GenuineIntel (the IOMMU
    # width SPDK then reads is the real one); nothing of SPDK is changed.
    sed 's/^vendor_id.*/vendor_id\t: GenuineIntel/' /proc/cpuinfo >/tmp/cpuinfo-intel
    echo "SPDK fio plugin: $SPDK_PLUGIN; hugepages: $(cat /proc/sys/vm/nr_hugepages)"
else
    echo "SPDK fio plugin: none (tests/fio-bench.sh installs it when SPDK_FIO_PLUGIN names it)"
fi
# fio splits filenames on ':': the PCI address with dots (SPDK's spelling).
ADDR=$(echo "$NVME_BDF" | tr ':' '.')

emit() {
    label=$1
    shift
    if "$@" >/tmp/fb.json 2>/tmp/fb.err; then
        echo "@@BENCH $label $(tr -d '\n' </tmp/fb.json)"
    else
        echo "fio-bench run $label failed:"
        cat /tmp/fb.err
        echo "@@BENCH $label {\"failed\": 1}"
    fi
}

# fio_run LABEL QD ARGS...: one fio job, the batching of the other programs, JSON on one line.
fio_run() {
    label=$1
    q=$2
    shift 2
    # FIO_ENV: variables for this fio only (SPDK's plugin: LD_PRELOAD), `env` with none else.
    # shellcheck disable=SC2086 # FIO_ENV is a list of NAME=VALUE words without spaces
    if env $FIO_ENV fio --name=fb --rw=randread --bs=4k --iodepth="$q" --iodepth_batch_submit="$q" \
        --iodepth_batch_complete_min=1 --iodepth_batch_complete_max="$q" \
        --time_based=1 --runtime="$T" --norandommap=1 --randrepeat=0 \
        --output-format=json --output=/tmp/fb.json "$@" >/tmp/fb.err 2>&1; then
        echo "@@FIO $label $(tr -d '\n' </tmp/fb.json)"
    else
        echo "fio-bench run $label failed:"
        cat /tmp/fb.err /tmp/fb.json 2>/dev/null || true
        echo "@@FIO $label {\"failed\": 1}"
    fi
}

FIO_ENV=""

# ---- the controller on vfio-pci
run_perf() {
    for q in 128 1; do
        emit "perf-qd$q" nvme-perf "$NVME_BDF" -n "$NSID" -w randread -b 4096 -t "$T" \
            --quiet --json -q "$q" --submit-batch "$q" --complete-batch "$q"
    done
}
run_fio_ours() {
    # The release engine; it has no latency clock of its own (fio times the I/O), and
    # nvme_batch=1 (the default) holds a batch's submissions for one doorbell at commit.
    for q in 128 1; do
        fio_run "fio-ours-qd$q" "$q" --thread=1 --ioengine="external:$ENGINE" \
            --filename="trtype=PCIe traddr=$ADDR ns=$NSID" --nvme_batch=1
    done
}

run_fio_spdk() {
    # SPDK's plugin as its README says: LD_PRELOAD (not ioengine=external:, which races at
    # fio's exit), ioengine=spdk, thread=1, the transport id with dots; the same jobs and
    # batching as ours. It polls in fio's getevents; its controller thread only sleeps here.
    covered=0
    if mount -o bind /tmp/cpuinfo-intel /proc/cpuinfo; then
        covered=1
    else
        echo "fio-bench: could not cover /proc/cpuinfo; SPDK's env will pick IOVA = VA"
    fi
    FIO_ENV="LD_PRELOAD=$SPDK_PLUGIN OPENSSL_CONF=/tmp/openssl.cnf"
    for q in 128 1; do
        fio_run "fio-spdk-qd$q" "$q" --thread=1 --ioengine=spdk \
            --filename="trtype=PCIe traddr=$ADDR ns=$NSID"
        # What DPDK chose (the IOVA mode above), as far as its start-up says it.
        grep -i "iova" /tmp/fb.err | head -n 2 || true
    done
    FIO_ENV=""
    [ "$covered" = 0 ] || umount /proc/cpuinfo
}

# ---- the controller on the kernel nvme driver (polled queue)
run_fio_uring() {
    for q in 128 1; do
        fio_run "fio-uring-qd$q" "$q" --thread=1 --ioengine=io_uring --filename="$BLK" \
            --direct=1 --hipri=1 --fixedbufs=1 --registerfiles=1
    done
}
run_t_uring() {
    command -v t-io_uring >/dev/null || return 0
    for q in 128 1; do
        # -p polled, -B fixed buffers, -F registered files, -O O_DIRECT, -R random, one thread.
        peer "t-uring-qd$q" t-io_uring -d "$q" -s "$q" -c "$q" -b 4096 -p 1 -B 1 -F 1 -O 1 \
            -R 1 -n 1 -r "$T" "$BLK"
    done
}
run_perf_uring() {
    for q in 128 1; do
        emit "perf-uring-qd$q" nvme-perf --engine io_uring "$BLK" -w randread -b 4096 -t "$T" \
            --quiet --json -q "$q" --submit-batch "$q" --complete-batch "$q" --iopoll
    done
}

# rotate N WORDS...: the words, starting at the Nth (0-based), wrapping around.
rotate() {
    by=$1
    shift
    n=$#
    out=""
    i=0
    for w in "$@"; do
        [ "$i" -lt "$((by % n))" ] || out="$out $w"
        i=$((i + 1))
    done
    i=0
    for w in "$@"; do
        [ "$i" -ge "$((by % n))" ] || out="$out $w"
        i=$((i + 1))
    done
    echo "$out"
}

phase_vfio() {
    bind_vfio
    progs="perf fio_ours"
    [ ! -f "$SPDK_PLUGIN" ] || progs="$progs fio_spdk"
    # shellcheck disable=SC2086 # progs is a word list
    for w in $(rotate "$1" $progs); do "run_$w"; done
}
phase_kernel() {
    bind_kernel
    BLK=$(ns_blockdev "$NSID")
    echo "kernel: $BLK, poll queues: $(cat /sys/module/nvme/parameters/poll_queues 2>/dev/null)," \
        "io_poll: $(cat "/sys/block/${BLK#/dev/}/queue/io_poll" 2>/dev/null)"
    for w in $(rotate "$1" fio_uring t_uring perf_uring); do "run_$w"; done
}

echo "fio-bench: $REPS repetitions of $T s; fio $(fio --version)"
echo "clocksource: $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource)"
rep=1
while [ "$rep" -le "$REPS" ]; do
    echo "== repetition $rep of $REPS"
    if [ $((rep % 2)) = 1 ]; then
        phase_vfio "$((rep - 1))"
        phase_kernel "$((rep - 1))"
    else
        phase_kernel "$((rep - 1))"
        phase_vfio "$((rep - 1))"
    fi
    rep=$((rep + 1))
done
echo "clocksource after: $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource)"
