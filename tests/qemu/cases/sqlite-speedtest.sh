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
# Knobs for quick A/Bs: SQLITE_SPEEDTEST_MODES (default "delete wal"; commas or spaces), SQLITE_SPEEDTEST_SIDES
# (default "ours ext4 ours-nofua memdb", run in this order in odd repetitions and reversed in
# even ones) and, when /usr/local/bin/libnvme_sqlite-base.so exists (e.g. GUEST_EXTRA_BINS=
# "libnvme_sqlite-base.so=PATH", a build of another commit), the side `base-nofua`: that
# extension with fua=off, compared with `ours-nofua` in the same boot. The side `ours-irq`
# (in SQLITE_SPEEDTEST_SIDES) is `ours-nofua` with the URI parameter irq=on: the VFS's waits
# block on MSI-X after a short spin instead of polling.
# Run with: GUEST_EXTRA_BINS=speedtest1=target/speedtest1/speedtest1 tests/qemu/run.sh \
#   --ns 512:64M --ns 4096:64M sqlite-speedtest.sh
# shellcheck source=/dev/null # the guest path of tests/qemu/lib.sh
. /tests/lib.sh

SIZES=$(echo "${SQLITE_SPEEDTEST_SIZE:-5}" | tr , ' ')
REPS=${SQLITE_SPEEDTEST_REPS:-3}
MODES=$(echo "${SQLITE_SPEEDTEST_MODES:-delete wal}" | tr , " ")
SIDES=$(echo "${SQLITE_SPEEDTEST_SIDES:-ours ext4 ours-nofua memdb}" | tr , " ")
EXT=/usr/local/bin/libnvme_sqlite.so
BASE_EXT=/usr/local/bin/libnvme_sqlite-base.so
if [ -f "$BASE_EXT" ]; then
    case " $SIDES " in *" base-nofua "*) ;; *) SIDES="$SIDES base-nofua" ;; esac
fi
REVERSED=
for s in $SIDES; do REVERSED="$s $REVERSED"; done

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

# ours REP MODE [SIDE FUA [EXTENSION [IRQ]]]
ours() {
    side=${3:-ours} fua=${4:-on} ext=${5:-$EXT} irq=${6:-off}
    bind_vfio
    # An empty store for each run (twice the runs of one database each would not fit in 64M).
    nvme-sqlite --device "$NVME_BDF" --nsid 2 --format -n 1 -m 1 >/tmp/stf.out 2>&1 ||
        { cat /tmp/stf.out; fail "formatting namespace 2 failed"; }
    NVME_SQLITE_EXT=$ext speedtest1 --vfs nvme --journal "$2" --size "$SIZE" \
        "file:speed-$2-$SIZE-$1-$fua.db?vfs=nvme&device=$NVME_BDF&nsid=2&format=ifblank&fua=$fua&irq=$irq" >/tmp/st.out 2>&1 ||
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
# side SIDE REP MODE
side() {
    case $1 in
    ours) ours "$2" "$3" ;;
    ours-nofua) ours "$2" "$3" ours-nofua off ;;
    base-nofua) ours "$2" "$3" base-nofua off "$BASE_EXT" ;;
    ours-irq) ours "$2" "$3" ours-irq off "$EXT" on ;;
    ext4) kernel "$2" "$3" ;;
    memdb) memdb "$2" "$3" ;;
    *) fail "unknown side $1 in SQLITE_SPEEDTEST_SIDES" ;;
    esac
}

for SIZE in $SIZES; do
    for mode in $MODES; do
        r=1
        while [ "$r" -le "$REPS" ]; do
            if [ $((r % 2)) = 1 ]; then order=$SIDES; else order=$REVERSED; fi
            for s in $order; do side "$s" "$r" "$mode"; done
            r=$((r + 1))
        done
    done
done

modes=
for SIZE in $SIZES; do for m in $MODES; do modes="$modes $m@$SIZE"; done; done
echo "| journal@size | side | speedtest1 total (s), median (range) | runs |"
for mode in $modes; do
    for s in $SIDES; do
        echo "| $mode | $s | $(summ 5 "$s" "$mode" /tmp/speed) | $REPS |"
    done
done
head="| journal@size | test |"
for s in $SIDES; do head="$head $s (s) |"; done
echo "$head"
for mode in $modes; do
    for t in $(awk '{ print $5 }' /tmp/speedphase | sort -un); do
        row="| $mode | $t |"
        for s in $SIDES; do
            row="$row $(summ 6 "$s" "$mode" /tmp/speedphase "$t" | cut -d' ' -f1) |"
        done
        echo "$row"
    done
done
