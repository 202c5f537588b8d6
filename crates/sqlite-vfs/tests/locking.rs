//! Two connections of one process on one database: the in-process lock levels and WAL-index
//! locks make SQLite behave as on a normal file (writers exclude each other, readers see
//! committed data, WAL readers keep their snapshot).

use nvme_sqlite_vfs::{Format, MemDevice, NvmeVfs};

fn vfs(name: &str) -> NvmeVfs {
    NvmeVfs::register(name, Box::new(MemDevice::new(4096, 4096)), Format::IfBlank).unwrap()
}

/// Two connections that report SQLITE_BUSY at once (rusqlite's default waits 5 s).
fn pair(vfs: &NvmeVfs, db: &str) -> (rusqlite::Connection, rusqlite::Connection) {
    let a = vfs.open(db).unwrap();
    let b = vfs.open(db).unwrap();
    a.busy_timeout(std::time::Duration::ZERO).unwrap();
    b.busy_timeout(std::time::Duration::ZERO).unwrap();
    (a, b)
}

fn busy(e: rusqlite::Error) -> bool {
    e.sqlite_error_code() == Some(rusqlite::ErrorCode::DatabaseBusy)
}

#[test]
fn rollback_journal_writers_exclude_each_other() {
    let vfs = vfs("lock-delete");
    let (a, b) = pair(&vfs, "l.db");
    a.execute_batch("CREATE TABLE t(x); INSERT INTO t VALUES (1);")
        .unwrap();
    a.execute_batch("BEGIN IMMEDIATE; INSERT INTO t VALUES (2);")
        .unwrap();
    let e = b.execute_batch("BEGIN IMMEDIATE").unwrap_err();
    assert!(busy(e));
    // A reader still sees the committed state while `a` holds RESERVED.
    let n: i64 = b
        .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 1);
    a.execute_batch("COMMIT").unwrap();
    let n: i64 = b
        .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 2);
    // A reader holding SHARED keeps a writer from committing (EXCLUSIVE needs no readers).
    b.execute_batch("BEGIN; SELECT count(*) FROM t;").unwrap();
    a.execute_batch("BEGIN IMMEDIATE; INSERT INTO t VALUES (3);")
        .unwrap();
    assert!(busy(a.execute_batch("COMMIT").unwrap_err()));
    b.execute_batch("COMMIT").unwrap();
    a.execute_batch("COMMIT").unwrap();
}

#[test]
fn wal_readers_keep_their_snapshot() {
    let vfs = vfs("lock-wal");
    let (a, b) = pair(&vfs, "w.db");
    let mode: String = a
        .query_row("PRAGMA journal_mode=wal", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    a.execute_batch("CREATE TABLE t(x); INSERT INTO t VALUES (1);")
        .unwrap();
    b.execute_batch("BEGIN").unwrap();
    let n: i64 = b
        .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 1);
    a.execute_batch("INSERT INTO t VALUES (2)").unwrap();
    let n: i64 = b
        .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 1, "snapshot");
    b.execute_batch("COMMIT").unwrap();
    let n: i64 = b
        .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 2);
    a.execute_batch("BEGIN IMMEDIATE").unwrap();
    assert!(busy(b.execute_batch("BEGIN IMMEDIATE").unwrap_err()));
    a.execute_batch("COMMIT").unwrap();
    let (busy_, _, _): (i64, i64, i64) = a
        .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })
        .unwrap();
    assert_eq!(busy_, 0);
}
