//! A read-heavy workload in the style of speedtest1's tests 100-200 (one large insert, LIKE
//! scans, a subquery join, CREATE INDEX, VACUUM) through the VFS on the in-process emulator,
//! against the same statements on SQLite's default VFS: the results must be equal. With
//! `--nocapture` it prints the device reads each journal mode needed (the block cache's
//! figures: docs/sqlite.md "SQLite's own benchmark: speedtest1").
//!
//! Also: two connections of one process share the VFS's block cache, so a row one writes is
//! what the other reads next (no stale block).

use std::sync::atomic::{AtomicU32, Ordering};

use nvme_driver::{Controller, ControllerOptions, Transport};
use nvme_sim::{SimConfig, SimController, SimNamespace};
use nvme_sqlite_vfs::{Format, NvmeDevice, NvmeVfs};
use rusqlite::Connection;

static N: AtomicU32 = AtomicU32::new(0);

fn vfs(block_size: u32) -> (SimController, NvmeVfs) {
    let n = N.fetch_add(1, Ordering::Relaxed);
    let sim = SimController::start(SimConfig {
        serial: format!("READ{n}"),
        namespaces: vec![SimNamespace {
            nsid: 1,
            block_size,
            blocks: (64 << 20) / u64::from(block_size),
            ..SimNamespace::default()
        }],
        null_io: false,
        ..SimConfig::default()
    });
    let vfs = register(&sim, Format::Always);
    (sim, vfs)
}

/// A VFS (with its own store and an empty block cache) on namespace 1 of `sim`.
fn register(sim: &SimController, format: Format) -> NvmeVfs {
    let n = N.fetch_add(1, Ordering::Relaxed);
    let transport = Transport::new(sim.mmio(), sim.dma(), "sim");
    let ctrl = Controller::new(transport, ControllerOptions::default()).expect("controller");
    let dev = NvmeDevice::new(ctrl, 1).expect("device");
    NvmeVfs::register(&format!("nvme-read-{n}"), Box::new(dev), format).expect("register")
}

/// Queries of the finished workload's database, read cold.
const COLD: [&str; 3] = [
    "SELECT count(*), sum(b), sum(length(c)) FROM t1",
    "SELECT count(*), min(c), max(c) FROM t1 WHERE c > '2'",
    "SELECT sum(t1.b) FROM t1 WHERE t1.a IN (SELECT a FROM t2 WHERE b % 5 = 0)",
];

fn cold(conn: &Connection) -> Vec<String> {
    COLD.iter()
        .map(|sql| {
            conn.query_row(sql, [], |r| {
                Ok((0..3)
                    .map(|i| format!("{:?}", r.get_ref(i).map(|v| v.as_i64().ok())))
                    .collect::<Vec<_>>()
                    .join(","))
            })
            .unwrap()
        })
        .collect()
}

/// The workload's results, one string per query.
fn workload(conn: &Connection, journal: &str) -> Vec<String> {
    conn.pragma_update(None, "journal_mode", journal).unwrap();
    conn.execute_batch(
        "PRAGMA synchronous=FULL; PRAGMA cache_size=-2000;
         CREATE TABLE t1(a INTEGER, b INTEGER, c TEXT);
         BEGIN;
         WITH RECURSIVE n(i) AS (VALUES(1) UNION ALL SELECT i + 1 FROM n WHERE i < 30000)
         INSERT INTO t1 SELECT i, (i * 7919) % 100003,
             printf('%d %x %s %d', i, i * 2654435761 % 4294967296,
                    substr('abcdefghijklmnopqrstuvwxyz', 1 + i % 20, 6), i * i % 9973)
             || substr(hex(zeroblob(40)), 1, 1 + i % 60) FROM n;
         COMMIT;
         CREATE TABLE t2 AS SELECT a, b FROM t1 WHERE a % 3 = 0;",
    )
    .unwrap();
    let q = |sql: &str| -> String {
        let mut st = conn.prepare(sql).unwrap();
        let cols = st.column_count();
        let rows: Vec<String> = st
            .query_map([], |r| {
                Ok((0..cols)
                    .map(|i| format!("{:?}", r.get_ref(i).unwrap()))
                    .collect::<Vec<_>>()
                    .join(","))
            })
            .unwrap()
            .map(|r| r.unwrap())
            .collect();
        rows.join(";")
    };
    let mut out = Vec::new();
    for pat in ["%ghij%", "%7 %", "%b%"] {
        out.push(q(&format!(
            "SELECT count(*), sum(length(c)) FROM t1 WHERE c LIKE '{pat}'"
        )));
    }
    out.push(q(
        "SELECT sum(t1.b) FROM t1 WHERE t1.a IN (SELECT a FROM t2 WHERE b % 5 = 0)",
    ));
    conn.execute_batch("CREATE INDEX t1c ON t1(c); CREATE INDEX t1b ON t1(b);")
        .unwrap();
    out.push(q("SELECT count(*), min(c), max(c) FROM t1 WHERE c > '2'"));
    conn.execute_batch(
        "UPDATE t1 SET b = b + 1 WHERE a % 10 = 0; DELETE FROM t1 WHERE a % 17 = 0; VACUUM;",
    )
    .unwrap();
    out.push(q("SELECT count(*), sum(b), sum(length(c)) FROM t1"));
    out.push(q("PRAGMA integrity_check"));
    out
}

fn run(block_size: u32, journal: &str) {
    let reference = Connection::open_in_memory().unwrap();
    let expected = workload(&reference, "memory");
    let (sim, vfs) = vfs(block_size);
    let before = vfs.with_store(|s| s.io_stats()).unwrap().unwrap();
    let conn = vfs.open("read.db").unwrap();
    let got = workload(&conn, journal);
    assert_eq!(got, expected, "{journal} {block_size} B: results differ");
    drop(conn);
    let io = vfs.with_store(|s| s.io_stats()).unwrap().unwrap();
    let st = vfs.with_store(|s| s.stats()).unwrap();
    println!(
        "{journal} {block_size} B: {} read commands, {} write commands, {} flushes; store {st:?}",
        io.read_commands - before.read_commands,
        io.write_commands - before.write_commands,
        io.flush_commands - before.flush_commands,
    );
    // A new store on the same medium: every block comes from the device, through fills
    // and read-ahead.
    drop(vfs);
    let vfs = register(&sim, Format::Never);
    let conn = vfs.open("read.db").unwrap();
    assert_eq!(
        cold(&conn),
        cold(&reference),
        "{journal} {block_size} B: cold reads"
    );
    drop(conn);
    let io = vfs.with_store(|s| s.io_stats()).unwrap().unwrap();
    println!(
        "{journal} {block_size} B, reopened: {} read commands; store {:?}",
        io.read_commands,
        vfs.with_store(|s| s.stats()).unwrap()
    );
}

#[test]
fn wal_4k() {
    run(4096, "wal");
}

#[test]
fn delete_4k() {
    run(4096, "delete");
}

#[test]
fn wal_512() {
    run(512, "wal");
}

#[test]
fn a_write_by_one_connection_is_read_by_another() {
    for journal in ["wal", "delete"] {
        let (_sim, vfs) = vfs(4096);
        let a = vfs.open("shared.db").unwrap();
        a.pragma_update(None, "journal_mode", journal).unwrap();
        a.execute_batch(
            "CREATE TABLE t(k INTEGER PRIMARY KEY, v TEXT);
             WITH RECURSIVE n(i) AS (VALUES(1) UNION ALL SELECT i + 1 FROM n WHERE i < 2000)
             INSERT INTO t SELECT i, printf('%0500d', i) FROM n;",
        )
        .unwrap();
        let b = vfs.open("shared.db").unwrap();
        for round in 0..20i64 {
            // b reads (its blocks now cached), a rewrites them, b reads again.
            let sum = |c: &Connection| -> i64 {
                c.query_row("SELECT sum(CAST(v AS INTEGER)) FROM t", [], |r| r.get(0))
                    .unwrap()
            };
            let s = sum(&b);
            a.execute(
                "UPDATE t SET v = printf('%0500d', CAST(v AS INTEGER) + 1) WHERE k % 3 = ?1",
                [round % 3],
            )
            .unwrap();
            let changed = a
                .query_row(
                    "SELECT count(*) FROM t WHERE k % 3 = ?1",
                    [round % 3],
                    |r| r.get::<_, i64>(0),
                )
                .unwrap();
            assert_eq!(
                sum(&b),
                s + changed,
                "{journal} round {round}: b read stale rows"
            );
            if round % 5 == 4 && journal == "wal" {
                b.execute_batch("PRAGMA wal_checkpoint(TRUNCATE);").unwrap();
            }
        }
        assert_eq!(
            b.query_row("PRAGMA integrity_check", [], |r| r.get::<_, String>(0))
                .unwrap(),
            "ok"
        );
    }
}
