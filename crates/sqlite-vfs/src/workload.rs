//! The fixed SQLite workload `nvme-sqlite` runs (and the tests compare across VFSes): create
//! a table with an index, insert `rows` rows in transactions of `batch`, update every 5th
//! row, delete every 7th, run range queries, then `PRAGMA integrity_check` and a CRC32 over
//! the whole table in primary-key order. Everything is deterministic, so the same parameters
//! give the same checksum on any VFS.

use std::time::{Duration, Instant};

use rusqlite::{params, Connection};

/// SQLite journal modes the workload runs under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JournalMode {
    /// Rollback journal, deleted at commit.
    Delete,
    /// Write-ahead log.
    Wal,
}

impl JournalMode {
    /// The PRAGMA value.
    pub fn as_str(self) -> &'static str {
        match self {
            JournalMode::Delete => "delete",
            JournalMode::Wal => "wal",
        }
    }
}

/// Workload parameters.
#[derive(Debug, Clone, Copy)]
pub struct Params {
    /// Rows inserted.
    pub rows: u64,
    /// Rows per insert transaction.
    pub batch: u64,
    /// Journal mode.
    pub journal: JournalMode,
}

/// What a run (or a verification) found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    /// `PRAGMA integrity_check` output ("ok" when sound).
    pub integrity: String,
    /// Rows in the table.
    pub rows: u64,
    /// CRC32 of the table contents in id order.
    pub checksum: u32,
    /// Sum of the range query results (0 for a verification).
    pub range_total: i64,
}

/// Time spent per phase.
#[derive(Debug, Clone, Default)]
pub struct Timings {
    /// (phase, duration).
    pub phases: Vec<(&'static str, Duration)>,
}

fn value(i: u64) -> Vec<u8> {
    xorshift_bytes(
        i.wrapping_mul(0x9E37_79B9_7F4A_7C15),
        50 + (i % 200) as usize,
    )
}

/// `len` pseudo-random bytes from `seed` (xorshift64; the same bytes for the same arguments).
fn xorshift_bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn key(i: u64, rows: u64) -> String {
    format!("key-{:010}", i.wrapping_mul(7919) % rows.max(1))
}

/// Runs the workload on a fresh database behind `conn`.
pub fn run(conn: &Connection, p: Params) -> rusqlite::Result<(Summary, Timings)> {
    let mut t = Timings::default();
    let mut phase = Instant::now();
    let mut mark = |t: &mut Timings, name| {
        t.phases.push((name, phase.elapsed()));
        phase = Instant::now();
    };
    let mode: String = conn.query_row(
        &format!("PRAGMA journal_mode={}", p.journal.as_str()),
        [],
        |r| r.get(0),
    )?;
    if mode != p.journal.as_str() {
        return Err(rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_ERROR),
            Some(format!(
                "journal mode {} was refused (SQLite kept {mode})",
                p.journal.as_str()
            )),
        ));
    }
    // Durability as the comparison with ext4 needs it: every commit synced (SQLite's default,
    // set explicitly so a build with another default measures the same thing).
    conn.execute_batch("PRAGMA synchronous=FULL")?;
    conn.execute_batch(
        "DROP TABLE IF EXISTS kv;
         CREATE TABLE kv(id INTEGER PRIMARY KEY, k TEXT NOT NULL, v BLOB NOT NULL, n INTEGER NOT NULL);
         CREATE INDEX kv_k ON kv(k);",
    )?;
    mark(&mut t, "create");
    let batch = p.batch.max(1);
    let mut i = 0;
    while i < p.rows {
        let tx = conn.unchecked_transaction()?;
        {
            let mut st =
                tx.prepare_cached("INSERT INTO kv(id, k, v, n) VALUES (?1, ?2, ?3, ?4)")?;
            for j in i..(i + batch).min(p.rows) {
                st.execute(params![j as i64, key(j, p.rows), value(j), (j * 3) as i64])?;
            }
        }
        tx.commit()?;
        i += batch;
    }
    mark(&mut t, "insert");
    let tx = conn.unchecked_transaction()?;
    tx.execute(
        "UPDATE kv SET n = n + 1, v = CAST(substr(v, 2) || x'5a' AS BLOB) WHERE id % 5 = 0",
        [],
    )?;
    tx.commit()?;
    mark(&mut t, "update");
    let tx = conn.unchecked_transaction()?;
    tx.execute("DELETE FROM kv WHERE id % 7 = 3", [])?;
    tx.commit()?;
    mark(&mut t, "delete");
    let mut range_total = 0i64;
    {
        let mut st = conn.prepare(
            "SELECT count(*), coalesce(sum(n), 0), coalesce(sum(length(v)), 0) FROM kv WHERE k BETWEEN ?1 AND ?2",
        )?;
        for q in 0..20u64 {
            let lo = key(q * 13, p.rows);
            let hi = format!("{lo}~");
            let (c, s, l): (i64, i64, i64) =
                st.query_row(params![lo, hi], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
            range_total = range_total.wrapping_add(c).wrapping_add(s).wrapping_add(l);
        }
        let (c, s): (i64, i64) = conn.query_row(
            "SELECT count(*), coalesce(sum(n), 0) FROM kv WHERE id BETWEEN ?1 AND ?2",
            params![(p.rows / 4) as i64, (p.rows / 2) as i64],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
        range_total = range_total.wrapping_add(c).wrapping_add(s);
    }
    mark(&mut t, "query");
    let mut summary = verify(conn)?;
    summary.range_total = range_total;
    mark(&mut t, "verify");
    Ok((summary, t))
}

/// `PRAGMA integrity_check` and the table checksum of an existing database.
pub fn verify(conn: &Connection) -> rusqlite::Result<Summary> {
    let integrity = {
        let mut st = conn.prepare("PRAGMA integrity_check")?;
        let lines: Vec<String> = st
            .query_map([], |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?;
        lines.join("\n")
    };
    let mut h = crc32fast::Hasher::new();
    let mut rows = 0;
    let mut st = conn.prepare("SELECT id, k, v, n FROM kv ORDER BY id")?;
    let mut q = st.query([])?;
    while let Some(r) = q.next()? {
        let id: i64 = r.get(0)?;
        let k: String = r.get(1)?;
        let v: Vec<u8> = r.get(2)?;
        let n: i64 = r.get(3)?;
        h.update(&id.to_le_bytes());
        h.update(&(k.len() as u64).to_le_bytes());
        h.update(k.as_bytes());
        h.update(&(v.len() as u64).to_le_bytes());
        h.update(&v);
        h.update(&n.to_le_bytes());
        rows += 1;
    }
    Ok(Summary {
        integrity,
        rows,
        checksum: h.finalize(),
        range_total: 0,
    })
}

/// The commit log: a workload of single-row transactions, each acknowledged to the caller as
/// soon as its `COMMIT` returns, for crash tests that kill the whole machine and then check
/// that every acknowledged commit survived (`tests/qemu/cases/sqlite-qkill.sh`).
///
/// Commit `i` (from 1) inserts row `i` into `acks` (about 1-3 KiB, indexed by a key) and sets
/// the single row of `tally` to `i`: at least three b-tree pages in different places change in
/// every commit, so a commit applied halfway shows as a `tally` that disagrees with the last
/// row, a missing row or an index `integrity_check` complains about.
pub mod commit_log {
    use rusqlite::{params, Connection, OptionalExtension};

    use super::JournalMode;

    /// Pages in the WAL before SQLite checkpoints (its default is 1000): small, so that a run
    /// of a few hundred commits checkpoints and restarts the WAL several times.
    pub const WAL_AUTOCHECKPOINT: u32 = 64;

    /// Row `i`'s key, in an order unrelated to `i` (index pages change all over).
    pub fn key(i: u64) -> String {
        format!("ack-{:016x}", i.wrapping_mul(0x9E37_79B9_7F4A_7C15))
    }

    /// Row `i`'s payload: 1000 to 2999 bytes, a function of `i` only.
    pub fn payload(i: u64) -> Vec<u8> {
        let len = 1000 + (i.wrapping_mul(7919) % 2000) as usize;
        super::xorshift_bytes(i.wrapping_mul(0xD1B5_4A32_D192_ED03), len)
    }

    /// Commits `count` more single-row transactions (continuing after the last row an
    /// existing log holds; creating the tables on an empty database) with `synchronous=FULL`
    /// in `journal` mode, calling `acked(i)` after commit `i`'s `COMMIT` returned. Returns
    /// the last commit number.
    pub fn run(
        conn: &Connection,
        journal: JournalMode,
        count: u64,
        mut acked: impl FnMut(u64),
    ) -> rusqlite::Result<u64> {
        let mode: String = conn.query_row(
            &format!("PRAGMA journal_mode={}", journal.as_str()),
            [],
            |r| r.get(0),
        )?;
        if mode != journal.as_str() {
            return Err(rusqlite::Error::SqliteFailure(
                rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_ERROR),
                Some(format!(
                    "journal mode {} was refused (SQLite kept {mode})",
                    journal.as_str()
                )),
            ));
        }
        conn.execute_batch(&format!(
            "PRAGMA synchronous=FULL; PRAGMA wal_autocheckpoint={WAL_AUTOCHECKPOINT};
             CREATE TABLE IF NOT EXISTS acks(n INTEGER PRIMARY KEY, k TEXT NOT NULL, v BLOB NOT NULL);
             CREATE INDEX IF NOT EXISTS acks_k ON acks(k);
             CREATE TABLE IF NOT EXISTS tally(one INTEGER PRIMARY KEY CHECK (one = 1), last INTEGER NOT NULL);"
        ))?;
        let start: u64 = conn
            .query_row("SELECT last FROM tally WHERE one = 1", [], |r| {
                r.get::<_, i64>(0)
            })
            .optional()?
            .map_or(0, |v| v.max(0) as u64);
        for i in start + 1..=start + count {
            let tx = conn.unchecked_transaction()?;
            tx.execute(
                "INSERT INTO acks(n, k, v) VALUES (?1, ?2, ?3)",
                params![i as i64, key(i), payload(i)],
            )?;
            tx.execute(
                "INSERT INTO tally(one, last) VALUES (1, ?1) ON CONFLICT(one) DO UPDATE SET last = ?1",
                params![i as i64],
            )?;
            tx.commit()?;
            acked(i);
        }
        Ok(start + count)
    }

    /// What [`check`] found in a commit log.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct Found {
        /// `PRAGMA integrity_check` output ("ok" when sound).
        pub integrity: String,
        /// The last commit the database holds (0: none).
        pub last: u64,
        /// The first thing that is not the state after commit `last` (a gap, a wrong payload
        /// or key, a `tally` that disagrees), if any.
        pub torn: Option<String>,
    }

    /// Checks an existing commit log: `integrity_check`, then that the database is exactly
    /// the state after some commit `last` (rows 1..=last, each with its own key and payload,
    /// and `tally` = `last`).
    pub fn check(conn: &Connection) -> rusqlite::Result<Found> {
        let integrity = {
            let mut st = conn.prepare("PRAGMA integrity_check")?;
            let lines: Vec<String> = st
                .query_map([], |r| r.get(0))?
                .collect::<rusqlite::Result<_>>()?;
            lines.join("\n")
        };
        let tally: Option<i64> = conn
            .query_row("SELECT last FROM tally WHERE one = 1", [], |r| r.get(0))
            .optional()?;
        let mut torn = None;
        let mut last = 0u64;
        let mut st = conn.prepare("SELECT n, k, v FROM acks ORDER BY n")?;
        let mut q = st.query([])?;
        while let Some(r) = q.next()? {
            let n: i64 = r.get(0)?;
            let expect = last + 1;
            if n != expect as i64 {
                torn = Some(format!("row {expect} is missing (the next row is {n})"));
                break;
            }
            if r.get::<_, String>(1)? != key(expect) || r.get::<_, Vec<u8>>(2)? != payload(expect) {
                torn = Some(format!(
                    "row {expect} does not hold what commit {expect} wrote"
                ));
                break;
            }
            last = expect;
        }
        if torn.is_none() && tally.unwrap_or(0) != last as i64 {
            torn = Some(format!(
                "tally says commit {} but the rows end at {last}",
                tally.unwrap_or(0)
            ));
        }
        Ok(Found {
            integrity,
            last,
            torn,
        })
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn runs_continue_and_check_sees_the_last_commit() {
            for journal in [JournalMode::Wal, JournalMode::Delete] {
                let dir = tempfile::tempdir().unwrap();
                let path = dir.path().join("log.db");
                let conn = Connection::open(&path).unwrap();
                let mut seen = Vec::new();
                assert_eq!(run(&conn, journal, 5, |i| seen.push(i)).unwrap(), 5);
                assert_eq!(run(&conn, journal, 3, |i| seen.push(i)).unwrap(), 8);
                assert_eq!(seen, (1..=8).collect::<Vec<_>>());
                drop(conn);
                let conn = Connection::open(&path).unwrap();
                let found = check(&conn).unwrap();
                assert_eq!(
                    found,
                    Found {
                        integrity: "ok".into(),
                        last: 8,
                        torn: None
                    }
                );
            }
        }

        #[test]
        fn check_reports_a_gap_a_wrong_payload_and_a_stale_tally() {
            let dir = tempfile::tempdir().unwrap();
            let conn = Connection::open(dir.path().join("log.db")).unwrap();
            run(&conn, JournalMode::Delete, 6, |_| {}).unwrap();
            conn.execute("UPDATE tally SET last = 5", []).unwrap();
            let f = check(&conn).unwrap();
            assert_eq!(f.last, 6);
            assert!(f.torn.unwrap().contains("tally says commit 5"));
            conn.execute("UPDATE acks SET v = x'00' WHERE n = 4", [])
                .unwrap();
            let f = check(&conn).unwrap();
            assert_eq!(f.last, 3);
            assert!(f.torn.unwrap().contains("row 4 does not hold"));
            conn.execute("DELETE FROM acks WHERE n = 2", []).unwrap();
            let f = check(&conn).unwrap();
            assert_eq!(f.last, 1);
            assert!(f.torn.unwrap().contains("row 2 is missing"));
            assert_eq!(f.integrity, "ok");
        }
    }
}
