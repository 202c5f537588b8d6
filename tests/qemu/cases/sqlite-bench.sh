# SQLite side by side (issue 13's table): the nvme-sqlite workload through our VFS on vfio-pci
# and with SQLite's default VFS on ext4 (mkfs.ext4 from e2fsprogs) over the kernel's nvme
# driver, same controller and namespace size, for the DELETE and WAL journal modes,
# SQLITE_BENCH_REPS runs each (default 5), in alternating order. Prints one
# "@@SQLBENCH side mode rep elapsed_s commits_per_s" line per run and the medians.
# shellcheck source=/dev/null # the guest path of tests/qemu/lib.sh
. /tests/lib.sh

N=${SQLITE_BENCH_ROWS:-3000}
M=${SQLITE_BENCH_BATCH:-100}
REPS=${SQLITE_BENCH_REPS:-5}

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
}

ours() {
    bind_vfio
    nvme-sqlite --device "$NVME_BDF" --nsid 2 --format --journal-mode "$2" -n "$N" -m "$M" \
        >/tmp/sqb.out 2>&1 || { cat /tmp/sqb.out; fail "our VFS run failed"; }
    record ours "$2" "$1" /tmp/sqb.out
}

kernel() {
    bind_kernel
    dev=$(ns_blockdev 2)
    mkfs.ext4 -q -F "$dev" >/dev/null || fail "mkfs.ext4 $dev failed"
    mount -t ext4 "$dev" /mnt/sq
    nvme-sqlite --kernel-file /mnt/sq/bench.db --journal-mode "$2" -n "$N" -m "$M" \
        >/tmp/sqb.out 2>&1 || { umount /mnt/sq; cat /tmp/sqb.out; fail "ext4 run failed"; }
    umount /mnt/sq
    record ext4 "$2" "$1" /tmp/sqb.out
}

: >/tmp/sqlbench
for mode in delete wal; do
    rep=1
    while [ "$rep" -le "$REPS" ]; do
        if [ $((rep % 2)) = 1 ]; then
            ours "$rep" "$mode"
            kernel "$rep" "$mode"
        else
            kernel "$rep" "$mode"
            ours "$rep" "$mode"
        fi
        rep=$((rep + 1))
    done
done

# median FIELD SIDE MODE: the median of column FIELD (5: elapsed, 6: commits/s).
median() {
    awk -v s="$2" -v m="$3" '$2 == s && $3 == m { print $'"$1"' }' /tmp/sqlbench | sort -n |
        awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else printf "%.3f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
echo "| journal | side | median total time (s) | median insert commits/s | runs |"
for mode in delete wal; do
    for side in ours ext4; do
        echo "| $mode | $side | $(median 5 $side $mode) | $(median 6 $side $mode) | $REPS |"
    done
done
