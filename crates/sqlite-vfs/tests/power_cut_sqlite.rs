//! SQLite through the VFS, the real driver and the emulator's power-loss model
//! (`nvme_sim::SimWriteCache`), cut at many points per seed.
//!
//! One workload run per seed records the controller's medium events; the run of every seed
//! but the first also cuts the power live at a seeded event (the workload then fails with
//! I/O errors), and that medium is powered on in a new emulated controller, reattached by a
//! new driver and checked through `NvmeDevice` (and compared with the replay's image of the
//! same cut). The recorded stream is then replayed through the same model to the other cut
//! points and each image is checked through the VFS on an in-memory view of it.
//!
//! After every cut, reopening must give `integrity_check` = ok and a state that is exactly
//! the state after some commit `m` (the `meta` counter, the row count and the sum of the
//! update counters agree with what the workload saw after commit `m`: nothing half applied),
//! with `m` at most the last commit that had started. `synchronous=FULL`: `m` is at least
//! the last acknowledged commit. `synchronous=NORMAL`: no lower bound (a suffix of recent
//! commits may be lost), counted.
//!
//! `POWER_CUTS=20000 cargo test --release -p nvme-sqlite-vfs --test power_cut_sqlite` runs a
//! longer job; `POWER_SEED=s [POWER_CUT=n]` replays one failure (see `tests/power/mod.rs`).

mod power;

use std::sync::Mutex;

use nvme_sim::{MediumEvent, SimConfig, SimController, SimMedium};
use nvme_sqlite_vfs::workload::JournalMode;
use nvme_sqlite_vfs::{BlockDevice, Format, NvmeVfs};
use power::{config, cut_points, nvme_device, pattern, replay_cuts, vfs_name, Figures, Knobs};
use rusqlite::params;

/// Rows each transaction inserts.
const ROWS: u64 = 12;
/// Transactions per run.
const TXNS: u64 = 30;
/// Namespace size.
const NS_BYTES: u64 = 4 << 20;
/// Spreads the live cut points over the seeds.
const LIVE_CUT_MIX: u64 = 0x2545_f491_4f6c_dd1d;
/// WAL pages before an automatic checkpoint (small, so runs checkpoint several times).
const WAL_CHECKPOINT_PAGES: u32 = 16;
/// Every `BIG_EVERY`-th transaction also rewrites a blob of `BIG_BYTES`: larger than a redo
/// slot, so in DELETE mode the batch-atomic write is refused mid-batch and SQLite commits
/// that transaction through its rollback journal (the fallback is cut too).
const BIG_EVERY: u64 = 10;
const BIG_BYTES: usize = 600 << 10;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Synchronous {
    Full,
    Normal,
}

impl Synchronous {
    fn as_str(self) -> &'static str {
        match self {
            Synchronous::Full => "FULL",
            Synchronous::Normal => "NORMAL",
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Mode {
    bs: u32,
    journal: JournalMode,
    sync: Synchronous,
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} synchronous={} {} B blocks",
            self.journal.as_str(),
            self.sync.as_str(),
            self.bs
        )
    }
}

/// One transaction as the workload saw it.
#[derive(Clone, Copy, Debug)]
struct Txn {
    /// Medium events before its first statement.
    started: u64,
    /// Medium events when its commit returned.
    acked: Option<u64>,
}

/// `sum(upd)` after commit `k`: commit `j` adds one to every row of commits 1..=j whose id is
/// `j` modulo 7.
fn upd_sum(k: u64) -> i64 {
    (1..=k)
        .map(|j| (0..j * ROWS).filter(|id| id % 7 == j % 7).count() as i64)
        .sum()
}

/// What one workload run recorded.
struct Recorded {
    config: SimConfig,
    journal: Vec<MediumEvent>,
    /// Events when the store was formatted / the schema committed.
    formatted: Option<u64>,
    schema: Option<u64>,
    /// Transactions 1.. (index 0 is transaction 1).
    txns: Vec<Txn>,
    /// The medium the live cut left, when the run was cut.
    live: Option<SimMedium>,
}

fn run(mode: Mode, seed: u64, cut_after: Option<u64>) -> Recorded {
    // One emulated controller at a time: the device thread and the driver both poll, and
    // the tests of this binary run in parallel on few cores (the replays need none).
    let _one = power::EMULATOR.lock().unwrap_or_else(|p| p.into_inner());
    let config = config(mode.bs, NS_BYTES / u64::from(mode.bs), seed, cut_after);
    let sim = SimController::start(config.clone());
    let mut rec = Recorded {
        config,
        journal: Vec::new(),
        formatted: None,
        schema: None,
        txns: Vec::new(),
        live: None,
    };
    let result = workload(&sim, mode, &mut rec);
    if let Err(e) = &result {
        assert!(
            cut_after.is_some() && sim.is_powered_off(),
            "seed {seed} ({mode}): the workload failed without a power cut: {e}"
        );
    }
    if sim.is_powered_off() {
        rec.live = Some(sim.medium());
    }
    rec.journal = sim.take_journal();
    rec
}

fn workload(sim: &SimController, mode: Mode, rec: &mut Recorded) -> Result<(), String> {
    let err = |e: &dyn std::error::Error| nvme_sqlite_vfs::error_chain(e);
    let vfs = NvmeVfs::register(&vfs_name("pwr"), nvme_device(sim), Format::IfBlank)
        .map_err(|e| err(&e))?;
    rec.formatted = Some(sim.medium_events());
    let conn = vfs.open("p.db").map_err(|e| err(&e))?;
    conn.execute_batch(&format!(
        "PRAGMA journal_mode={}; PRAGMA synchronous={}; PRAGMA wal_autocheckpoint={WAL_CHECKPOINT_PAGES};
         CREATE TABLE t(id INTEGER PRIMARY KEY, txn INTEGER NOT NULL, upd INTEGER NOT NULL, v BLOB NOT NULL);
         CREATE INDEX t_txn ON t(txn);
         CREATE TABLE big(b BLOB NOT NULL);
         CREATE TABLE meta(txn INTEGER NOT NULL); INSERT INTO meta VALUES (0);",
        mode.journal.as_str(),
        mode.sync.as_str()
    ))
    .map_err(|e| err(&e))?;
    rec.schema = Some(sim.medium_events());
    for k in 1..=TXNS {
        rec.txns.push(Txn {
            started: sim.medium_events(),
            acked: None,
        });
        let tx = conn.unchecked_transaction().map_err(|e| err(&e))?;
        for r in 0..ROWS {
            let id = (k - 1) * ROWS + r;
            let blob = pattern(200 + (id as usize * 37) % 900, id);
            tx.execute(
                "INSERT INTO t VALUES (?1, ?2, 0, ?3)",
                params![id as i64, k as i64, blob],
            )
            .map_err(|e| err(&e))?;
        }
        // Rewrite older pages too, so the journal / WAL carries real work.
        tx.execute(
            "UPDATE t SET upd = upd + 1, v = substr(v, 2) || substr(v, 1, 1) WHERE id % 7 = ?1",
            [(k % 7) as i64],
        )
        .map_err(|e| err(&e))?;
        if k % BIG_EVERY == 0 {
            tx.execute("DELETE FROM big", []).map_err(|e| err(&e))?;
            tx.execute("INSERT INTO big VALUES (?1)", [pattern(BIG_BYTES, k)])
                .map_err(|e| err(&e))?;
        }
        tx.execute("UPDATE meta SET txn = ?1", [k as i64])
            .map_err(|e| err(&e))?;
        let batches = vfs.with_store(|s| s.stats().batches).map_err(|e| err(&e))?;
        tx.commit().map_err(|e| err(&e))?;
        if k % BIG_EVERY == 0 && matches!(mode.journal, JournalMode::Delete) {
            // A large transaction commits through the journal, not as a batch.
            let after = vfs.with_store(|s| s.stats().batches).map_err(|e| err(&e))?;
            assert_eq!(after, batches, "{mode}: large commit {k} was batch-atomic");
        }
        rec.txns.last_mut().expect("pushed above").acked = Some(sim.medium_events());
    }
    // DELETE mode commits through the redo area (batch-atomic writes): this suite must
    // exercise that path, not the rollback journal's.
    let batches = vfs.with_store(|s| s.stats().batches).map_err(|e| err(&e))?;
    if matches!(mode.journal, JournalMode::Delete) {
        assert!(
            batches >= TXNS / 2,
            "{mode}: only {batches} of {TXNS} commits were batch-atomic"
        );
    }
    Ok(())
}

/// Checks the database on `dev`, the medium after a cut at `cut` events; returns the
/// commits it had to account for and whether an acknowledged one was lost.
fn check(
    rec: &Recorded,
    mode: Mode,
    seed: u64,
    cut: u64,
    dev: Box<dyn BlockDevice>,
) -> (u64, bool) {
    let at = format!("seed {seed} cut {cut} ({mode})");
    let acked = rec
        .txns
        .iter()
        .rposition(|t| t.acked.is_some_and(|a| a <= cut))
        .map_or(0, |i| i as u64 + 1);
    let started = rec
        .txns
        .iter()
        .rposition(|t| t.started < cut)
        .map_or(0, |i| i as u64 + 1);
    let vfs = match NvmeVfs::register(&vfs_name("chk"), dev, Format::Never) {
        Ok(v) => v,
        Err(e) => {
            assert!(
                rec.formatted.map_or(true, |f| cut < f),
                "{at}: the formatted store does not open: {}",
                nvme_sqlite_vfs::error_chain(&e)
            );
            return (0, false);
        }
    };
    let conn = vfs
        .open("p.db")
        .unwrap_or_else(|e| panic!("{at}: open: {e}"));
    let ok: String = conn
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap_or_else(|e| panic!("{at}: integrity_check: {e}"));
    assert_eq!(ok, "ok", "{at}: integrity_check");
    let m = match conn.query_row("SELECT txn FROM meta", [], |r| r.get::<_, i64>(0)) {
        Ok(m) => m as u64,
        Err(e) => {
            // NORMAL may lose the schema's commit too (the first of the suffix).
            let lost = rec.schema.is_some_and(|s| s <= cut);
            assert!(
                !lost || mode.sync == Synchronous::Normal,
                "{at}: the committed schema is gone: {e}"
            );
            return (0, lost);
        }
    };
    assert!(
        m <= started,
        "{at}: commit {m} found, but only {started} had started"
    );
    let lost = m < acked;
    if mode.sync == Synchronous::Full {
        assert!(
            !lost,
            "{at}: commit {acked} was acknowledged before the cut, the database has {m}"
        );
    }
    let state = |q: &str| -> i64 {
        conn.query_row(q, [], |r| r.get::<_, Option<i64>>(0))
            .unwrap_or_else(|e| panic!("{at}: {q}: {e}"))
            .unwrap_or(0)
    };
    assert_eq!(
        state("SELECT count(*) FROM t") as u64,
        m * ROWS,
        "{at}: rows after commit {m}"
    );
    assert_eq!(
        state("SELECT max(txn) FROM t") as u64,
        m,
        "{at}: newest rows' commit"
    );
    assert_eq!(
        state("SELECT sum(upd) FROM t"),
        upd_sum(m),
        "{at}: updates after commit {m}"
    );
    // The large blob of the newest large transaction up to m, whole (a journal commit).
    let big_k = m / BIG_EVERY * BIG_EVERY;
    let big: Vec<Vec<u8>> = conn
        .prepare("SELECT b FROM big")
        .and_then(|mut q| q.query_map([], |r| r.get(0))?.collect())
        .unwrap_or_else(|e| panic!("{at}: SELECT b FROM big: {e}"));
    let want: Vec<Vec<u8>> = if big_k == 0 {
        Vec::new()
    } else {
        vec![pattern(BIG_BYTES, big_k)]
    };
    assert!(
        big == want,
        "{at}: the large blob after commit {m} (of commit {big_k}) is wrong"
    );
    (started.max(acked), lost)
}

/// Events of a full run of each mode (its first seed's run), from which the other seeds
/// draw their live cut points.
static FULL_RUN_EVENTS: Mutex<Vec<(String, u64)>> = Mutex::new(Vec::new());

fn full_run_events(mode: Mode) -> Option<u64> {
    let runs = FULL_RUN_EVENTS.lock().unwrap_or_else(|p| p.into_inner());
    let key = mode.to_string();
    runs.iter().find(|(k, _)| *k == key).map(|&(_, n)| n)
}

fn suite(mode: Mode, base_seed: u64, default_seeds: u64, default_cuts: usize) {
    let knobs = Knobs::from_env(default_seeds, default_cuts);
    let mut figures = Figures::default();
    for seed in knobs.seeds(base_seed) {
        // The first seed runs to the end (and measures the run); the others cut live at a
        // seeded point past the first quarter of a run, and reattach through the driver.
        let known = full_run_events(mode);
        let cut_after = match (seed == base_seed, known) {
            (false, Some(events)) => {
                Some(events / 4 + seed.wrapping_mul(LIVE_CUT_MIX) % (events * 3 / 4).max(1))
            }
            _ => None,
        };
        let rec = run(mode, seed, cut_after);
        if cut_after.is_none() {
            FULL_RUN_EVENTS
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push((mode.to_string(), rec.journal.len() as u64));
        }
        figures.seeds += 1;
        figures.events += rec.journal.len() as u64;
        if let Some(live) = &rec.live {
            // The live cut, through a new controller on the same medium and the real driver.
            let events = rec.journal.len() as u64;
            let _one = power::EMULATOR.lock().unwrap_or_else(|p| p.into_inner());
            let sim = SimController::start_on(rec.config.clone(), live);
            let (n, lost) = check(&rec, mode, seed, events, nvme_device(&sim));
            figures.commits_checked += n;
            figures.lost_acked += u64::from(lost);
            figures.live_reattaches += 1;
            // The replay's image of that cut is the live one.
            replay_cuts(&rec.config, &rec.journal, &[events], |_, mut dev| {
                let bs = mode.bs as usize;
                let want = live.bytes(power::NSID);
                let mut block = vec![0; bs];
                for lba in 0..dev.blocks() {
                    dev.read(lba, &mut block).unwrap();
                    assert!(
                        block[..] == want[lba as usize * bs..][..bs],
                        "seed {seed} cut {events} ({mode}): block {lba} differs between the live cut and the replay"
                    );
                }
            });
        }
        let cuts = match knobs.only_cut {
            Some(c) => vec![c],
            None => cut_points(&rec.journal, knobs.cuts_per_seed, seed),
        };
        figures.cuts_losing_writes += replay_cuts(&rec.config, &rec.journal, &cuts, |cut, dev| {
            let (n, lost) = check(&rec, mode, seed, cut, dev);
            figures.cuts += 1;
            figures.commits_checked += n;
            figures.lost_acked += u64::from(lost);
        });
    }
    // Printed for docs/sqlite.md (`cargo test ... -- --nocapture`).
    println!("power cuts, {mode}: {figures:?}");
}

fn mode(bs: u32, journal: JournalMode, sync: Synchronous) -> Mode {
    Mode { bs, journal, sync }
}

/// Seeds per test and cut points per test (6 tests: 2,520 cut points by default; few seeds,
/// many cuts each: the emulator runs cost, the replayed cuts hardly).
const SEEDS: u64 = 3;
const CUTS: usize = 420;

#[test]
fn wal_full_4k() {
    suite(
        mode(4096, JournalMode::Wal, Synchronous::Full),
        0x1000,
        SEEDS,
        CUTS,
    );
}

#[test]
fn delete_full_4k() {
    suite(
        mode(4096, JournalMode::Delete, Synchronous::Full),
        0x2000,
        SEEDS,
        CUTS,
    );
}

#[test]
fn wal_normal_4k() {
    suite(
        mode(4096, JournalMode::Wal, Synchronous::Normal),
        0x3000,
        SEEDS,
        CUTS,
    );
}

#[test]
fn delete_normal_4k() {
    suite(
        mode(4096, JournalMode::Delete, Synchronous::Normal),
        0x4000,
        SEEDS,
        CUTS,
    );
}

#[test]
fn wal_full_512() {
    suite(
        mode(512, JournalMode::Wal, Synchronous::Full),
        0x5000,
        SEEDS,
        CUTS,
    );
}

#[test]
fn delete_full_512() {
    suite(
        mode(512, JournalMode::Delete, Synchronous::Full),
        0x6000,
        SEEDS,
        CUTS,
    );
}
