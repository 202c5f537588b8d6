# SQLite side by side (issue 13's table): the nvme-sqlite workload through our VFS on vfio-pci
# and with SQLite's default VFS on ext4 (mkfs.ext4 from e2fsprogs) over the kernel's nvme
# driver, same controller and namespace size, for the DELETE and WAL journal modes,
# SQLITE_BENCH_REPS runs each (default 5), in alternating order, synchronous=FULL (the
# workload sets it). Our side runs twice per repetition: with the write-behind queue's FUA
# barrier (`ours`, the default) and with Write + Flush for every barrier (`ours-nofua`,
# `--no-fua`), to measure what FUA saves; in DELETE mode also a third time without SQLite's
# batch-atomic writes (`ours-nobatch`, `--no-fua --no-batch-atomic`: the rollback journal
# path), to measure what the redo area saves. SQLITE_BENCH_MODES (default "delete wal")
# picks the journal modes; SQLITE_BENCH_IRQ=1 adds the side `ours-irq` (`--no-fua --irq`:
# the VFS's waits block on MSI-X after a short spin instead of polling). Prints one
# "@@SQLBENCH side mode rep elapsed_s commits_per_s" line per run, one
# "@@SQLPHASE side mode rep phase ms" line per phase, then the medians with ranges and the
# per-phase medians.
# shellcheck source=/dev/null # the guest path of tests/qemu/lib.sh
. /tests/lib.sh

N=${SQLITE_BENCH_ROWS:-3000}
M=${SQLITE_BENCH_BATCH:-100}
REPS=${SQLITE_BENCH_REPS:-5}
MODES=$(echo "${SQLITE_BENCH_MODES:-delete wal}" | tr , " ")
IRQ=${SQLITE_BENCH_IRQ:-0}

command -v mkfs.ext4 >/dev/null || fail "no mkfs.ext4 in the guest (run.sh copies e2fsprogs' mke2fs)"
modprobe crc32c_generic
modprobe ext4
mkdir -p /mnt/sq

# record SIDE MODE REP OUTFILE
record() {
    elapsed=$(sed -n 's/^elapsed: \([0-9.]*\) s/\1/p' "$4")
    cps=$(sed -n 's/.*rows\/s, \([0-9.]*\) commits\/s.*/\1/p' "$4")
    grep -q "^integrity_check: ok" "$4" || { cat "$4"; fail "$1 $2 run $3: integrity_check not ok"; }
    echo "@@SQLBENCH $1 $2 $3 $elapsed $cps" | tee -a /tmp/sqlbench
    sed -n 's/^phase \([a-z]*\) *\([0-9.]*\) ms.*/\1 \2/p' "$4" | while read -r phase ms; do
        echo "@@SQLPHASE $1 $2 $3 $phase $ms" >>/tmp/sqlphase
    done
    grep -E '^(io|cache):' "$4" | sed "s/^/@@SQLIO $1 $2 $3 /" || true
}

# ours REP MODE [SIDE FLAGS...]
ours() {
    rep=$1 mode=$2 side=${3:-ours}
    shift 2
    if [ $# -gt 0 ]; then shift; fi
    bind_vfio
    nvme-sqlite --device "$NVME_BDF" --nsid 2 --format --journal-mode "$mode" -n "$N" -m "$M" \
        "$@" >/tmp/sqb.out 2>&1 || { cat /tmp/sqb.out; fail "our VFS run failed"; }
    record "$side" "$mode" "$rep" /tmp/sqb.out
}

kernel() {
    bind_kernel
    dev=$(ns_blockdev 2)
    mkfs.ext4 -q -F "$dev" >/dev/null || fail "mkfs.ext4 $dev failed"
    mount -t ext4 "$dev" /mnt/sq
    # Field 15 of the block device's stat: flush requests completed (the device Flushes ext4
    # sends for the run, journal commits included).
    stat=/sys/block/${dev#/dev/}/stat
    f0=$(awk '{ print $15 }' "$stat")
    nvme-sqlite --kernel-file /mnt/sq/bench.db --journal-mode "$2" -n "$N" -m "$M" \
        >/tmp/sqb.out 2>&1 || { umount /mnt/sq; cat /tmp/sqb.out; fail "ext4 run failed"; }
    f1=$(awk '{ print $15 }' "$stat")
    umount /mnt/sq
    echo "@@SQLFLUSH ext4 $2 $1 $((f1 - f0))"
    record ext4 "$2" "$1" /tmp/sqb.out
}

: >/tmp/sqlbench
: >/tmp/sqlphase
for mode in $MODES; do
    r=1
    while [ "$r" -le "$REPS" ]; do
        if [ $((r % 2)) = 1 ]; then
            ours "$r" "$mode"
            kernel "$r" "$mode"
            ours "$r" "$mode" ours-nofua --no-fua
            [ "$IRQ" = 0 ] || ours "$r" "$mode" ours-irq --no-fua --irq
            [ "$mode" = wal ] || ours "$r" "$mode" ours-nobatch --no-fua --no-batch-atomic
        else
            [ "$mode" = wal ] || ours "$r" "$mode" ours-nobatch --no-fua --no-batch-atomic
            [ "$IRQ" = 0 ] || ours "$r" "$mode" ours-irq --no-fua --irq
            ours "$r" "$mode" ours-nofua --no-fua
            kernel "$r" "$mode"
            ours "$r" "$mode"
        fi
        r=$((r + 1))
    done
done

echo "| journal | side | total time (s), median (range) | insert commits/s, median (range) | runs |"
sides() {
    irq=; [ "$IRQ" = 0 ] || irq=ours-irq
    if [ "$1" = wal ]; then echo ours ours-nofua $irq ext4; else echo ours ours-nofua $irq ours-nobatch ext4; fi
}
for mode in $MODES; do
    for side in $(sides $mode); do
        echo "| $mode | $side | $(summ 5 $side $mode /tmp/sqlbench) | $(summ 6 $side $mode /tmp/sqlbench) | $REPS |"
    done
done
echo "| journal | side | create | insert | update | delete | query | verify (ms, medians) |"
for mode in $MODES; do
    for side in $(sides $mode); do
        row="| $mode | $side |"
        for phase in create insert update delete query verify; do
            row="$row $(summ 6 $side $mode /tmp/sqlphase $phase | cut -d' ' -f1) |"
        done
        echo "$row"
    done
done
