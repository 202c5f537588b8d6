//! The workload through the VFS on the in-process NVMe emulator, against the same workload
//! on a temporary file with SQLite's default VFS.

use std::sync::atomic::{AtomicU32, Ordering};

use nvme_driver::{Controller, ControllerOptions, Transport};
use nvme_sim::{SimConfig, SimController, SimNamespace};
use nvme_sqlite_vfs::workload::{self, JournalMode, Params, Summary};
use nvme_sqlite_vfs::{Error, Format, NvmeDevice, NvmeVfs};

const NS_BYTES: u64 = 64 << 20;

/// A new emulated controller. Each gets its own serial number: the tests of this binary run
/// in parallel, and one subsystem's namespace serves one VFS at a time.
fn sim() -> SimController {
    static SERIAL: AtomicU32 = AtomicU32::new(0);
    SimController::start(SimConfig {
        serial: format!("EMU{}", SERIAL.fetch_add(1, Ordering::Relaxed)),
        namespaces: vec![
            SimNamespace {
                nsid: 1,
                block_size: 4096,
                blocks: NS_BYTES / 4096,
                ..SimNamespace::default()
            },
            SimNamespace {
                nsid: 2,
                block_size: 512,
                blocks: NS_BYTES / 512,
                ..SimNamespace::default()
            },
        ],
        null_io: false,
        ..SimConfig::default()
    })
}

fn controller(sim: &SimController) -> Controller {
    let transport = Transport::new(sim.mmio(), sim.dma(), "sim");
    Controller::new(transport, ControllerOptions::default()).expect("controller")
}

fn vfs(sim: &SimController, nsid: u32, format: Format) -> Result<NvmeVfs, Error> {
    static N: AtomicU32 = AtomicU32::new(0);
    let name = format!("nvme-test-{}", N.fetch_add(1, Ordering::Relaxed));
    let dev = NvmeDevice::new(controller(sim), nsid)?;
    NvmeVfs::register(&name, Box::new(dev), format)
}

fn reference(p: Params) -> Summary {
    let dir = tempfile::tempdir().expect("tempdir");
    let conn = rusqlite::Connection::open(dir.path().join("ref.db")).expect("open");
    workload::run(&conn, p).expect("reference workload").0
}

fn roundtrip(nsid: u32, journal: JournalMode) {
    let p = Params {
        rows: 3000,
        batch: 250,
        journal,
    };
    let expected = reference(p);
    assert_eq!(expected.integrity, "ok");
    let sim = sim();
    {
        let vfs = vfs(&sim, nsid, Format::IfBlank).expect("register");
        let conn = vfs.open("bench.db").expect("open");
        let (got, _) = workload::run(&conn, p).expect("workload");
        assert_eq!(got, expected);
        drop(conn);
        let files: Vec<String> = vfs
            .with_store(|s| s.files().into_iter().map(|f| f.name).collect())
            .expect("store");
        assert!(files.contains(&"bench.db".to_owned()), "{files:?}");
    }
    // Reopen: a new controller on the same emulated medium finds the database.
    let vfs = vfs(&sim, nsid, Format::Never).expect("reopen");
    let conn = vfs.open("bench.db").expect("open again");
    let again = workload::verify(&conn).expect("verify");
    assert_eq!(again.integrity, "ok");
    assert_eq!(again.checksum, expected.checksum);
    assert_eq!(again.rows, expected.rows);
}

#[test]
fn delete_journal_4k_blocks() {
    roundtrip(1, JournalMode::Delete);
}

#[test]
fn wal_4k_blocks() {
    roundtrip(1, JournalMode::Wal);
}

#[test]
fn delete_journal_512_blocks() {
    roundtrip(2, JournalMode::Delete);
}

#[test]
fn wal_512_blocks() {
    roundtrip(2, JournalMode::Wal);
}

#[test]
fn blank_namespace_is_refused_without_format() {
    let sim = sim();
    let err = vfs(&sim, 1, Format::Never).expect_err("blank");
    assert!(matches!(err, Error::NotFormatted), "{err}");
}

#[test]
fn corrupt_directory_is_refused() {
    let sim = sim();
    drop(vfs(&sim, 1, Format::IfBlank).expect("format"));
    // Flip a byte inside both directory copies (A at LBA 0, B at LBA 1 for 4 KiB blocks).
    for at in [100u64, 4096 + 100] {
        let mut b = sim.read_disk(1, at, 1);
        b[0] ^= 0xff;
        sim.write_disk(1, at, &b);
    }
    let err = vfs(&sim, 1, Format::Never).expect_err("corrupt");
    let msg = nvme_sqlite_vfs::error_chain(&err);
    assert!(matches!(err, Error::DirectoryCorrupt { .. }), "{msg}");
    assert!(msg.contains("bad checksum"), "{msg}");
}

#[test]
fn one_torn_directory_copy_falls_back_to_the_other() {
    let sim = sim();
    {
        let vfs = vfs(&sim, 1, Format::IfBlank).expect("format");
        let conn = vfs.open("t.db").expect("open");
        conn.execute_batch("CREATE TABLE t(x); INSERT INTO t VALUES (42);")
            .expect("sql");
    }
    // Damage copy A only.
    let mut b = sim.read_disk(1, 200, 1);
    b[0] ^= 0xff;
    sim.write_disk(1, 200, &b);
    let vfs = vfs(&sim, 1, Format::Never).expect("reopen");
    let conn = vfs.open("t.db").expect("open");
    // Whichever copy survived, it is a consistent state: the table is either there with its
    // row, or the newest copy was the damaged one and t.db reads as it was one persist ago.
    let r: rusqlite::Result<i64> = conn.query_row("SELECT x FROM t", [], |r| r.get(0));
    if let Ok(x) = r {
        assert_eq!(x, 42);
    }
}
