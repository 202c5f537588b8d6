//! `nvme-sqlite`: a fixed SQLite workload on an NVMe namespace through `nvme-sqlite-vfs` (no
//! kernel block layer, no file system), on the in-process emulator (`sim`), or on a normal
//! file with SQLite's default VFS (`--kernel-file`, for a side-by-side with ext4).
//!
//! ```text
//! nvme-sqlite --device 0000:00:04.0 --format -n 100000 -m 1000 --journal-mode wal
//! nvme-sqlite --device 0000:00:04.0 --verify-only
//! nvme-sqlite --device sim -n 10000
//! nvme-sqlite --device "trtype:TCP traddr:192.0.2.1 trsvcid:4420 subnqn:NQN" --format
//! nvme-sqlite --kernel-file /mnt/ext4/bench.db -n 100000 -m 1000
//! nvme-sqlite --device 0000:00:04.0 --db log.db --journal-mode wal --commits 100000  # "acked N" lines
//! nvme-sqlite --device 0000:00:04.0 --db log.db --check-commits 517
//! ```

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Instant;

use clap::{Parser, ValueEnum};
use nvme_driver::ControllerOptions;
// The emulator's controller is a PCIe `Controller` on the emulator's transport.
#[cfg(any(test, feature = "emulator"))]
use nvme_driver::Controller;
use nvme_tool_support::{parse_target, AnyController, Target, TargetError};
// DEVICE `sim` needs the `emulator` feature (off in a plain build); unit tests always have it
// (nvme-sim is also a dev-dependency).
#[cfg(any(test, feature = "emulator"))]
use nvme_driver::Transport;
#[cfg(any(test, feature = "emulator"))]
use nvme_sim::{SimConfig, SimController, SimNamespace};
use nvme_sqlite_vfs::workload::{self, JournalMode, Params, Summary, Timings};
use nvme_sqlite_vfs::{Format, NvmeDevice, NvmeVfs, StoreStats};

/// Size of the emulated namespace `sim` runs on (memory backed).
#[cfg(any(test, feature = "emulator"))]
const SIM_BYTES: u64 = 256 << 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Journal {
    Delete,
    Wal,
}

/// SQLite workload on an NVMe namespace through our userspace driver.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Cli {
    /// PCI address (0000:00:04.0), transport id ("trtype:PCIe traddr:0000:00:04.0"), NVMe/TCP
    /// transport id ("trtype:TCP traddr:192.0.2.1 trsvcid:4420 subnqn:NQN"), or `sim` for
    /// the in-process emulator (a fresh, memory-backed namespace).
    #[arg(
        long,
        required_unless_present = "kernel_file",
        conflicts_with = "kernel_file"
    )]
    device: Option<String>,
    /// Run on this normal file with SQLite's default VFS instead (kernel file system).
    #[arg(long, value_name = "PATH")]
    kernel_file: Option<PathBuf>,
    /// Namespace holding the database.
    #[arg(long, default_value_t = 1)]
    nsid: u32,
    /// Block size of the emulated namespace (`sim` only).
    #[arg(long, default_value_t = 4096)]
    sim_block_size: u32,
    /// Database name inside the namespace's directory.
    #[arg(long, default_value = "bench.db")]
    db: String,
    /// SQLite journal mode.
    #[arg(long, value_enum, default_value = "delete")]
    journal_mode: Journal,
    /// Rows to insert.
    #[arg(short = 'n', default_value_t = 10_000)]
    rows: u64,
    /// Rows per insert transaction.
    #[arg(short = 'm', default_value_t = 100)]
    batch: u64,
    /// Reopen an existing database and check it (integrity_check and the table checksum).
    #[arg(long)]
    verify_only: bool,
    /// Write a fresh, empty directory to the namespace first (drops every file on it).
    #[arg(long, conflicts_with = "verify_only")]
    format: bool,
    /// Never send a barrier's lone pending write with FUA (always Write, then Flush): to
    /// measure what FUA saves.
    #[arg(long)]
    no_fua: bool,
    /// Open the controller with MSI-X interrupts: the VFS's waits (barriers, reads) block on
    /// the queue's vector after a short spin instead of polling until the completion (PCIe
    /// and the emulator).
    #[arg(long)]
    irq: bool,
    /// Do not offer SQLite batch-atomic writes (SQLITE_IOCAP_BATCH_ATOMIC through the
    /// store's redo area): DELETE mode then commits through its rollback journal, as
    /// before; to measure what batch-atomic writes save.
    #[arg(long)]
    no_batch_atomic: bool,
    /// Instead of the workload: check an existing database (integrity_check) and print the
    /// rows of this SQL query, one `row: ` line each with the columns joined by `|` (as the
    /// sqlite3 shell prints them), e.g. to read back what another program wrote.
    #[arg(long, value_name = "SQL", conflicts_with_all = ["verify_only", "format"])]
    query: Option<String>,
    /// Instead of the workload: the commit log (`workload::commit_log`), COUNT more
    /// single-row transactions with synchronous=FULL, continuing an existing log; prints
    /// `acked N` (and flushes stdout) as soon as commit N's COMMIT has returned, for a crash
    /// test that kills the machine and then checks with --check-commits.
    #[arg(long, value_name = "COUNT", conflicts_with_all = ["verify_only", "query"])]
    commits: Option<u64>,
    /// Instead of the workload: check a commit log (integrity_check, the state after exactly
    /// one commit) and that it holds every commit up to ACKED, the last one a crashed run
    /// acknowledged.
    #[arg(long, value_name = "ACKED", conflicts_with_all = ["verify_only", "query", "format", "commits"])]
    check_commits: Option<u64>,
}

/// Why `nvme-sqlite` failed.
#[derive(Debug, thiserror::Error)]
enum ToolError {
    #[error(transparent)]
    Device(#[from] TargetError),
    #[error("opening the controller failed")]
    Driver(#[from] nvme_driver::Error),
    #[error("opening the SQLite store on the namespace failed")]
    Vfs(#[from] nvme_sqlite_vfs::Error),
    #[error("SQLite failed")]
    Sqlite(#[from] rusqlite::Error),
    #[error("integrity_check reported: {0}")]
    Integrity(String),
    #[error("-n and -m must be at least 1")]
    Params,
    #[error("commit {acked} was acknowledged before the crash, but the database holds only commits 1..={found}: the VFS acknowledged a commit before it was durable")]
    Lost { acked: u64, found: u64 },
    #[error("the database is not the state after one commit: {0} (a commit was applied halfway)")]
    Torn(String),
    #[cfg(not(any(test, feature = "emulator")))]
    #[error("this build has no emulator: rebuild with --features emulator to use --device sim")]
    NoEmulator,
}

fn main() -> ExitCode {
    nvme_tool_support::main(run)
}

/// An emulator configuration; each emulator gets its own serial number, so each is its own
/// NVM subsystem (a namespace serves one VFS at a time per process, and the tests run
/// several emulators at once).
#[cfg(any(test, feature = "emulator"))]
fn sim_config(block_size: u32) -> SimConfig {
    static SERIAL: AtomicU32 = AtomicU32::new(0);
    SimConfig {
        serial: format!("SQLSIM{}", SERIAL.fetch_add(1, Ordering::Relaxed)),
        namespaces: vec![SimNamespace {
            nsid: 1,
            block_size,
            blocks: SIM_BYTES / u64::from(block_size),
            ..SimNamespace::default()
        }],
        null_io: false,
        ..SimConfig::default()
    }
}

fn run(cli: &Cli) -> Result<(), ToolError> {
    if cli.rows == 0 || cli.batch == 0 {
        return Err(ToolError::Params);
    }
    if let Some(path) = &cli.kernel_file {
        let conn = rusqlite::Connection::open(path)?;
        println!(
            "target: kernel file {} (SQLite default VFS)",
            path.display()
        );
        return exercise(cli, &conn).map(drop);
    }
    let target = parse_target(cli.device.as_deref().unwrap_or_default())?;
    if target == Target::Emulator {
        // A fresh emulator is blank: format it (verify-only then reports the blank namespace).
        #[cfg(any(test, feature = "emulator"))]
        {
            let sim = SimController::start(sim_config(cli.sim_block_size));
            run_on_sim(cli, &sim, !cli.verify_only).map(drop)
        }
        #[cfg(not(any(test, feature = "emulator")))]
        {
            Err(ToolError::NoEmulator)
        }
    } else {
        let ctrl = AnyController::open(&target, ControllerOptions::default().interrupts(cli.irq))?;
        run_on_controller(cli, ctrl, false).map(drop)
    }
}

/// Runs on an emulator the caller keeps alive (tests reopen the same medium).
#[cfg(any(test, feature = "emulator"))]
fn run_on_sim(cli: &Cli, sim: &SimController, format: bool) -> Result<Summary, ToolError> {
    let transport = Transport::new(sim.mmio(), sim.dma(), "sim").with_interrupts(sim.interrupts());
    let ctrl = Controller::new(transport, ControllerOptions::default().interrupts(cli.irq))?;
    run_on_controller(cli, ctrl.into(), format)
}

fn run_on_controller(cli: &Cli, ctrl: AnyController, format: bool) -> Result<Summary, ToolError> {
    static SEQ: AtomicU32 = AtomicU32::new(0);
    let name = format!("nvme-sqlite-{}", SEQ.fetch_add(1, Ordering::Relaxed));
    let mut dev = NvmeDevice::new(ctrl, cli.nsid)?;
    dev.set_fua(!cli.no_fua);
    let bs = nvme_sqlite_vfs::BlockDevice::block_size(&dev);
    let atomic = nvme_sqlite_vfs::BlockDevice::atomic_write_bytes(&dev);
    println!(
        "target: {} nsid {} ({} blocks of {bs} B, atomic write unit {atomic} B)",
        dev.controller().name(),
        cli.nsid,
        dev.namespace().blocks(),
    );
    let format = if cli.format || format {
        Format::Always
    } else {
        Format::Never
    };
    let vfs = NvmeVfs::register(&name, Box::new(dev), format)?;
    if cli.no_batch_atomic {
        vfs.with_store(|s| s.set_batch_atomic(false))?;
    }
    println!(
        "vfs: {name}, sector size {bs} B, device characteristics {:#x}",
        vfs.device_characteristics()
    );
    let before = vfs.with_store(|s| s.stats())?;
    let summary = {
        let conn = vfs.open(&cli.db)?;
        exercise(cli, &conn)?
    };
    let after = vfs.with_store(|s| s.stats())?;
    print_store(&vfs, before, after)?;
    Ok(summary)
}

fn print_store(vfs: &NvmeVfs, before: StoreStats, after: StoreStats) -> Result<(), ToolError> {
    println!(
        "store: {} flushes, {} directory writes, {} relocations, {} partial-block RMW ({} without a read), {} batch-atomic commits",
        after.flushes - before.flushes,
        after.dir_writes - before.dir_writes,
        after.relocations - before.relocations,
        after.rmw - before.rmw,
        after.rmw_cached - before.rmw_cached,
        after.batches - before.batches
    );
    println!(
        "cache: {} block hits, {} fills, {} blocks read ahead",
        after.cache_hits - before.cache_hits,
        after.cache_fills - before.cache_fills,
        after.read_ahead_blocks - before.read_ahead_blocks
    );
    if let Some(io) = vfs.with_store(|s| s.io_stats())? {
        println!(
            "io: {} writes ({} merged) in {} write commands ({} FUA), {} flushes, {} reads, at most {} writes in flight, {} overlap waits, {} blocked waits, {} failed",
            io.writes,
            io.merged,
            io.write_commands,
            io.fua_writes,
            io.flush_commands,
            io.read_commands,
            io.max_in_flight,
            io.overlap_waits,
            io.blocked_waits,
            io.failed_writes
        );
    }
    for f in vfs.with_store(|s| s.files())? {
        println!(
            "file: {:<24} start LBA {:>10}  {:>8} blocks  {:>12} bytes",
            f.name, f.start, f.alloc, f.len
        );
    }
    Ok(())
}

/// The workload (or the verification) on an open connection; prints the result lines.
fn exercise(cli: &Cli, conn: &rusqlite::Connection) -> Result<Summary, ToolError> {
    let started = Instant::now();
    if let Some(sql) = &cli.query {
        let integrity: String = conn.query_row("PRAGMA integrity_check", [], |r| r.get(0))?;
        println!("integrity_check: {integrity}");
        if integrity != "ok" {
            return Err(ToolError::Integrity(integrity));
        }
        let rows = query_rows(conn, sql)?;
        for row in &rows {
            println!("row: {row}");
        }
        println!("rows: {}", rows.len());
        return Ok(Summary {
            integrity,
            rows: rows.len() as u64,
            checksum: 0,
            range_total: 0,
        });
    }
    if let Some(count) = cli.commits {
        use std::io::Write;
        let last = workload::commit_log::run(conn, journal_mode(cli), count, |i| {
            // One line per acknowledged commit, out at once: the console is what a crash
            // test's host watches. A failed console write must not stop the log.
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "acked {i}").and_then(|()| out.flush());
        })?;
        println!("commits: {count} (last {last})");
        return Ok(Summary {
            integrity: String::new(),
            rows: last,
            checksum: 0,
            range_total: 0,
        });
    }
    if let Some(acked) = cli.check_commits {
        let found = workload::commit_log::check(conn)?;
        println!(
            "integrity_check: {}\ncommits: {} (acknowledged before the crash: {acked})",
            found.integrity, found.last
        );
        if found.integrity != "ok" {
            return Err(ToolError::Integrity(found.integrity));
        }
        if let Some(torn) = found.torn {
            return Err(ToolError::Torn(torn));
        }
        if found.last < acked {
            return Err(ToolError::Lost {
                acked,
                found: found.last,
            });
        }
        return Ok(Summary {
            integrity: found.integrity,
            rows: found.last,
            checksum: 0,
            range_total: 0,
        });
    }
    let summary = if cli.verify_only {
        workload::verify(conn)?
    } else {
        let (summary, timings) = workload::run(
            conn,
            Params {
                rows: cli.rows,
                batch: cli.batch,
                journal: journal_mode(cli),
            },
        )?;
        print_timings(cli, &timings);
        summary
    };
    println!(
        "integrity_check: {}\nrows: {}\nchecksum: {:08x}\nelapsed: {:.3} s",
        summary.integrity,
        summary.rows,
        summary.checksum,
        started.elapsed().as_secs_f64()
    );
    if summary.integrity != "ok" {
        return Err(ToolError::Integrity(summary.integrity));
    }
    Ok(summary)
}

fn journal_mode(cli: &Cli) -> JournalMode {
    match cli.journal_mode {
        Journal::Delete => JournalMode::Delete,
        Journal::Wal => JournalMode::Wal,
    }
}

/// The rows of `sql`, each as its columns joined by `|` (NULL empty, blobs in hex).
fn query_rows(conn: &rusqlite::Connection, sql: &str) -> rusqlite::Result<Vec<String>> {
    use rusqlite::types::ValueRef;
    let mut stmt = conn.prepare(sql)?;
    let columns = stmt.column_count();
    let mut rows = stmt.query([])?;
    let mut out = Vec::new();
    while let Some(row) = rows.next()? {
        let mut cells = Vec::with_capacity(columns);
        for i in 0..columns {
            cells.push(match row.get_ref(i)? {
                ValueRef::Null => String::new(),
                ValueRef::Integer(v) => v.to_string(),
                ValueRef::Real(v) => v.to_string(),
                ValueRef::Text(t) => String::from_utf8_lossy(t).into_owned(),
                ValueRef::Blob(b) => b.iter().map(|x| format!("{x:02x}")).collect(),
            });
        }
        out.push(cells.join("|"));
    }
    Ok(out)
}

fn print_timings(cli: &Cli, t: &Timings) {
    for (phase, d) in &t.phases {
        let extra = if *phase == "insert" && d.as_secs_f64() > 0.0 {
            format!(
                "  ({:.0} rows/s, {:.0} commits/s)",
                cli.rows as f64 / d.as_secs_f64(),
                cli.rows.div_ceil(cli.batch) as f64 / d.as_secs_f64()
            )
        } else {
            String::new()
        };
        println!("phase {phase:<7} {:>9.3} ms{extra}", d.as_secs_f64() * 1e3);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cli(args: &[&str]) -> Cli {
        Cli::try_parse_from(std::iter::once("nvme-sqlite").chain(args.iter().copied()))
            .expect("args")
    }

    #[test]
    fn sim_workload_then_verify_only_and_kernel_file_agree() {
        for (mode, bs) in [("delete", 4096u32), ("wal", 512)] {
            let sim = SimController::start(sim_config(bs));
            let args = [
                "--device",
                "sim",
                "-n",
                "1500",
                "-m",
                "100",
                "--journal-mode",
                mode,
            ];
            let first =
                run_on_sim(&cli(&[&args[..], &["--format"]].concat()), &sim, false).unwrap();
            assert_eq!(first.integrity, "ok");
            // A new controller on the same medium: --verify-only finds the same table.
            let again =
                run_on_sim(&cli(&["--device", "sim", "--verify-only"]), &sim, false).unwrap();
            assert_eq!(again.checksum, first.checksum);
            assert_eq!(again.rows, first.rows);
            // The same workload through SQLite's default VFS on a normal file.
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("k.db");
            let kargs = [
                "--kernel-file",
                path.to_str().unwrap(),
                "-n",
                "1500",
                "-m",
                "100",
                "--journal-mode",
                mode,
            ];
            let conn = rusqlite::Connection::open(&path).unwrap();
            let kernel = exercise(&cli(&kargs), &conn).unwrap();
            assert_eq!(kernel, first);
        }
    }

    #[test]
    fn query_prints_the_rows_of_an_existing_database() {
        let sim = SimController::start(sim_config(4096));
        let w = run_on_sim(
            &cli(&["--device", "sim", "-n", "50", "-m", "10"]),
            &sim,
            true,
        )
        .unwrap();
        let q = cli(&[
            "--device",
            "sim",
            "--query",
            "SELECT count(*), 'x', NULL FROM kv",
        ]);
        let s = run_on_sim(&q, &sim, false).unwrap();
        assert_eq!((s.integrity.as_str(), s.rows), ("ok", 1));
        let transport = Transport::new(sim.mmio(), sim.dma(), "sim");
        let ctrl = Controller::new(transport, ControllerOptions::default()).unwrap();
        let vfs = NvmeVfs::register(
            "query-test",
            Box::new(NvmeDevice::new(ctrl, 1).unwrap()),
            Format::Never,
        )
        .unwrap();
        let conn = vfs.open("bench.db").unwrap();
        assert_eq!(
            query_rows(&conn, "SELECT count(*), 'x', NULL, x'0aff' FROM kv").unwrap(),
            [format!("{}|x||0aff", w.rows)]
        );
    }

    #[test]
    fn commits_continue_and_check_commits_finds_lost_ones() {
        for (mode, bs) in [("wal", 4096u32), ("delete", 512)] {
            let sim = SimController::start(sim_config(bs));
            let run = |args: &[&str], format| {
                let base = ["--device", "sim", "--db", "log.db", "--journal-mode", mode];
                run_on_sim(&cli(&[&base[..], args].concat()), &sim, format)
            };
            assert_eq!(run(&["--commits", "7"], true).unwrap().rows, 7);
            assert_eq!(run(&["--commits", "5"], false).unwrap().rows, 12);
            assert_eq!(run(&["--check-commits", "12"], false).unwrap().rows, 12);
            assert_eq!(run(&["--check-commits", "3"], false).unwrap().rows, 12);
            let err = run(&["--check-commits", "13"], false).unwrap_err();
            assert!(
                matches!(
                    err,
                    ToolError::Lost {
                        acked: 13,
                        found: 12
                    }
                ),
                "{err}"
            );
        }
    }

    #[test]
    fn verify_only_on_a_blank_namespace_is_a_clear_error() {
        let sim = SimController::start(sim_config(4096));
        let err = run_on_sim(&cli(&["--device", "sim", "--verify-only"]), &sim, false).unwrap_err();
        let report = nvme_tool_support::error_report(&err);
        assert!(report.contains("no SQLite directory"), "{report}");
    }

    #[test]
    fn workload_then_verify_only_on_an_nvme_tcp_namespace() {
        use nvme_tcp::fake::{Config, FakeTarget};
        let t = FakeTarget::start(Config {
            subnqn: "nqn.2026-01.test:nvme-sqlite".into(),
            namespaces: vec![(1, 12, 8192)],
            ..Config::default()
        });
        let trid = t.trid().to_string();
        let args = ["--device", trid.as_str(), "-n", "800", "-m", "100"];
        run(&cli(&[&args[..], &["--format"]].concat())).unwrap();
        run(&cli(&["--device", trid.as_str(), "--verify-only"])).unwrap();
        let bad = parse_target("trtype:TCP subnqn:nqn.2026-01.test:x").unwrap_err();
        assert!(matches!(bad, TargetError::Tcp(_)), "{bad}");
    }

    #[test]
    fn device_and_kernel_file_conflict() {
        assert!(
            Cli::try_parse_from(["nvme-sqlite", "--device", "sim", "--kernel-file", "x"]).is_err()
        );
        assert!(Cli::try_parse_from(["nvme-sqlite"]).is_err());
    }
}
