# SQLite's own benchmark, speedtest1 (built by tests/speedtest1/build.sh from Debian's sqlite3
# source, never committed), side by side in one boot: through the nvme VFS extension on
# namespace 2 bound to vfio-pci, and with the default VFS on a fresh ext4 over the kernel's nvme
# driver. DELETE and WAL journals, synchronous=FULL (the distribution's default for both, which
# speedtest1 keeps), SQLITE_SPEEDTEST_REPS runs each (default 3) in alternating order,
# ours twice per repetition: `ours` (FUA barriers, the default) and `ours-nofua` (URI
# parameter fua=off: every barrier Write + Flush, the durability of ext4's fsync on an
# emulated controller that ignores FUA, docs/sqlite.md), and once `memdb` (speedtest1
# --memdb: no file I/O at all, the CPU floor any VFS could reach in this guest),
# --size SQLITE_SPEEDTEST_SIZE (default 5; a list such as 5,10 runs every size in turn: at 5
# the run is mostly SQLite's own CPU time under TCG, docs/sqlite.md). Prints
# "@@SPEEDTEST side mode@size rep total_s" per run, "@@SPEEDPHASE side mode@size rep test
# seconds" per test, then medians with ranges.
# Run with: GUEST_EXTRA_BINS=speedtest1=target/speedtest1/speedtest1 tests/qemu/run.sh \
#   --ns 512:64M --ns 4096:64M sqlite-speedtest.sh
# shellcheck source=/dev/null # the guest path of tests/qemu/lib.sh
. /tests/lib.sh

SIZES=$(echo "${SQLITE_SPEEDTEST_SIZE:-5}" | tr , ' ')
REPS=${SQLITE_SPEEDTEST_REPS:-3}
EXT=/usr/local/bin/libnvme_sqlite.so

command -v speedtest1 >/dev/null ||
    fail "no speedtest1 in the guest: build it with tests/speedtest1/build.sh and pass GUEST_EXTRA_BINS=speedtest1=target/speedtest1/speedtest1"
[ -f "$EXT" ] || fail "no $EXT in the guest (run.sh copies it when the sqlite3 shell is installed)"
command -v mkfs.ext4 >/dev/null || fail "no mkfs.ext4 in the guest"
modprobe crc32c_generic
modprobe ext4
mkdir -p /mnt/sq

# record SIDE MODE REP OUTFILE
record() {
    total=$(sed -n 's/^ *TOTAL\.* *\([0-9.]*\)s$/\1/p' "$4")
    [ -n "$total" ] || { cat "$4"; fail "$1 $2 run $3: no TOTAL line"; }
    grep -q "integrity_check" "$4" || { cat "$4"; fail "$1 $2 run $3: no integrity_check test"; }
    echo "@@SPEEDTEST $1 $2@$SIZE $3 $total" | tee -a /tmp/speed
    sed -n 's/^ *\([0-9][0-9]*\) - .*\.\.\. *\([0-9.]*\)s$/\1 \2/p' "$4" | while read -r t s; do
        echo "@@SPEEDPHASE $1 $2@$SIZE $3 $t $s" >>/tmp/speedphase
    done
}

# ours REP MODE [SIDE FUA]
ours() {
    side=${3:-ours} fua=${4:-on}
    bind_vfio
    # An empty store for each run (twice the runs of one database each would not fit in 64M).
    nvme-sqlite --device "$NVME_BDF" --nsid 2 --format -n 1 -m 1 >/tmp/stf.out 2>&1 ||
        { cat /tmp/stf.out; fail "formatting namespace 2 failed"; }
    NVME_SQLITE_EXT=$EXT speedtest1 --vfs nvme --journal "$2" --size "$SIZE" \
        "file:speed-$2-$SIZE-$1-$fua.db?vfs=nvme&device=$NVME_BDF&nsid=2&format=ifblank&fua=$fua" >/tmp/st.out 2>&1 ||
        { cat /tmp/st.out; fail "speedtest1 on our VFS failed"; }
    record "$side" "$2" "$1" /tmp/st.out
    # The database is readable through the Rust tool, integrity ok.
    nvme-sqlite --device "$NVME_BDF" --nsid 2 --db "speed-$2-$SIZE-$1-$fua.db" --query 'SELECT count(*) FROM t3' \
        >/tmp/stq.out 2>&1 || { cat /tmp/stq.out; fail "nvme-sqlite could not read speedtest1's database"; }
    grep -q "^integrity_check: ok" /tmp/stq.out || { cat /tmp/stq.out; fail "integrity_check not ok"; }
}

memdb() {
    NVME_SQLITE_EXT=$EXT speedtest1 --memdb --journal "$2" --size "$SIZE" >/tmp/st.out 2>&1 ||
        { cat /tmp/st.out; fail "speedtest1 --memdb failed"; }
    record memdb "$2" "$1" /tmp/st.out
}

kernel() {
    bind_kernel
    dev=$(ns_blockdev 2)
    mkfs.ext4 -q -F "$dev" >/dev/null || fail "mkfs.ext4 $dev failed"
    mount -t ext4 "$dev" /mnt/sq
    speedtest1 --journal "$2" --size "$SIZE" /mnt/sq/speed.db >/tmp/st.out 2>&1 ||
        { umount /mnt/sq; cat /tmp/st.out; fail "speedtest1 on ext4 failed"; }
    umount /mnt/sq
    record ext4 "$2" "$1" /tmp/st.out
}

: >/tmp/speed
: >/tmp/speedphase
for SIZE in $SIZES; do
    for mode in delete wal; do
        r=1
        while [ "$r" -le "$REPS" ]; do
            if [ $((r % 2)) = 1 ]; then
                ours "$r" "$mode"
                kernel "$r" "$mode"
                ours "$r" "$mode" ours-nofua off
                memdb "$r" "$mode"
            else
                memdb "$r" "$mode"
                ours "$r" "$mode" ours-nofua off
                kernel "$r" "$mode"
                ours "$r" "$mode"
            fi
            r=$((r + 1))
        done
    done
done

modes=
for SIZE in $SIZES; do modes="$modes delete@$SIZE wal@$SIZE"; done
echo "| journal@size | side | speedtest1 total (s), median (range) | runs |"
for mode in $modes; do
    for side in memdb ours ours-nofua ext4; do
        echo "| $mode | $side | $(summ 5 $side "$mode" /tmp/speed) | $REPS |"
    done
done
echo "| journal@size | test | memdb (s) | ours (s) | ours-nofua (s) | ext4 (s) |"
for mode in $modes; do
    for t in $(awk '{ print $5 }' /tmp/speedphase | sort -un); do
        echo "| $mode | $t | $(summ 6 memdb $mode /tmp/speedphase "$t" | cut -d' ' -f1) | $(summ 6 ours $mode /tmp/speedphase "$t" | cut -d' ' -f1) | $(summ 6 ours-nofua $mode /tmp/speedphase "$t" | cut -d' ' -f1) | $(summ 6 ext4 $mode /tmp/speedphase "$t" | cut -d' ' -f1) |"
    done
done
