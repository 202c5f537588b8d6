# The SQLite loadable extension (crates/sqlite-ext, issue 22 item 4) in unmodified programs: the
# distribution's sqlite3 shell `.load`s libnvme_sqlite.so and writes databases (DELETE and WAL
# journal) on namespace 1 of the QEMU controller through our driver, with the default VFS still
# working in the same process; Python's sqlite3 module does the same when run.sh could give the
# guest a python3; nvme-sqlite (our Rust tool, linking the VFS crate) reads every database back.
# shellcheck source=/dev/null # the guest path of tests/qemu/lib.sh
. /tests/lib.sh

EXT=/usr/local/bin/libnvme_sqlite.so
command -v sqlite3 >/dev/null || fail "no sqlite3 shell in the guest (run.sh adds the host's sqlite3)"
[ -f "$EXT" ] || fail "no $EXT in the guest (run.sh builds crates/sqlite-ext into target/release)"
URI="vfs=nvme&device=$NVME_BDF&nsid=1"

bind_vfio
# format=ifblank: an earlier case may have left a store on namespace 1 (its files stay), or
# other data (then an empty store is written).
sqlite3 >/tmp/ext1.out 2>/tmp/ext1.err <<EOF
.bail on
.log stderr
.load $EXT
.open file:ext-shell.db?$URI&format=ifblank
DROP TABLE IF EXISTS t;
CREATE TABLE t(k INTEGER PRIMARY KEY, v TEXT);
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 3000)
  INSERT INTO t SELECT i, printf('shell-%05d', i) FROM n;
PRAGMA integrity_check;
SELECT count(*), sum(k), max(v) FROM t;
.open file:ext-wal.db?$URI
PRAGMA journal_mode=WAL;
DROP TABLE IF EXISTS w;
CREATE TABLE w(x);
BEGIN; INSERT INTO w VALUES ('wal-1'); INSERT INTO w VALUES ('wal-2'); COMMIT;
SELECT group_concat(x) FROM w;
.open /tmp/plain.db
CREATE TABLE p(x);
INSERT INTO p VALUES ('default vfs');
SELECT x FROM p;
EOF
cat /tmp/ext1.out
expected="ok
3000|4501500|shell-03000
wal
wal-1,wal-2
default vfs"
[ "$(cat /tmp/ext1.out)" = "$expected" ] || {
    cat /tmp/ext1.err
    fail "the sqlite3 shell through the extension printed something else"
}
[ -s /tmp/plain.db ] || fail "the default VFS wrote no /tmp/plain.db"
echo "ok: the sqlite3 shell wrote ext-shell.db (DELETE) and ext-wal.db (WAL) on nsid 1, and /tmp/plain.db"

# A clear error for a device that is not ours (the host bridge is bound to no vfio-pci).
printf '.load %s\n.open file:x.db?vfs=nvme&device=0000:00:00.0\nCREATE TABLE t(x);\n' "$EXT" |
    sqlite3 >/dev/null 2>/tmp/ext2.err || true
grep -q "nvme VFS: .*0000:00:00.0" /tmp/ext2.err || {
    cat /tmp/ext2.err
    fail "no nvme VFS message for a device that is not bound to vfio-pci"
}
echo "ok: refused: $(head -n 1 /tmp/ext2.err)"

if command -v python3 >/dev/null; then
    PYTHONHOME=/usr python3 -S - "$EXT" "$NVME_BDF" >/tmp/ext3.out 2>&1 <<'PY' || {
import sqlite3, sys
ext, bdf = sys.argv[1], sys.argv[2]
c = sqlite3.connect(":memory:")
c.enable_load_extension(True)
c.load_extension(ext)
c.close()
db = sqlite3.connect("file:ext-py.db?vfs=nvme&device=%s&nsid=1" % bdf, uri=True)
db.execute("DROP TABLE IF EXISTS t")
db.execute("CREATE TABLE t(k INTEGER PRIMARY KEY, v BLOB)")
with db:
    db.executemany("INSERT INTO t VALUES (?, ?)", [(i, bytes([i % 251]) * 512) for i in range(1000)])
db.close()
db = sqlite3.connect("file:ext-py.db?vfs=nvme&device=%s&nsid=1" % bdf, uri=True)
assert all(v == bytes([k % 251]) * 512 for k, v in db.execute("SELECT k, v FROM t"))
print("python", db.execute("PRAGMA integrity_check").fetchone()[0],
      *db.execute("SELECT count(*), sum(k) FROM t").fetchone())
PY
        cat /tmp/ext3.out
        fail "Python's sqlite3 through the extension failed"
    }
    cat /tmp/ext3.out
    [ "$(cat /tmp/ext3.out)" = "python ok 1000 499500" ] || fail "Python printed something else"
    echo "ok: Python's sqlite3 wrote ext-py.db on nsid 1"
else
    echo "note: no python3 in the guest (the host's has no loadable-extension sqlite3); Python skipped"
fi

# Our Rust tool reads what the unmodified programs wrote.
q() {
    nvme-sqlite --device "$NVME_BDF" --nsid 1 --db "$1" --query "$2" >/tmp/extq.out 2>&1 || {
        cat /tmp/extq.out
        fail "nvme-sqlite --query on $1 failed"
    }
    grep -q "^integrity_check: ok" /tmp/extq.out || fail "$1: integrity_check not ok"
    sed -n 's/^row: //p' /tmp/extq.out
}
got=$(q ext-shell.db "SELECT count(*), sum(k), max(v) FROM t")
[ "$got" = "3000|4501500|shell-03000" ] || fail "nvme-sqlite read $got from ext-shell.db"
got=$(q ext-wal.db "SELECT group_concat(x) FROM w")
[ "$got" = "wal-1,wal-2" ] || fail "nvme-sqlite read $got from ext-wal.db"
if command -v python3 >/dev/null; then
    got=$(q ext-py.db "SELECT count(*), sum(k), sum(length(v)) FROM t")
    [ "$got" = "1000|499500|512000" ] || fail "nvme-sqlite read $got from ext-py.db"
fi
echo "ok: nvme-sqlite reads back every database the extension wrote"
