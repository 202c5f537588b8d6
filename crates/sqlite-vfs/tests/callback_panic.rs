//! A panic inside a SQLite callback (here: in the block device, under xWrite or xRead) must
//! not unwind into SQLite's C frames (undefined behaviour, or an abort of the whole process
//! since Rust 1.81): SQLite gets an I/O error, the process keeps running, and the VFS refuses
//! all further I/O (its in-memory directory may be half-updated) until it is dropped. The
//! medium then reopens consistently with a new VFS.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use nvme_sqlite_vfs::{BlockDevice, Error, Format, MemDevice, NvmeVfs, Result};
use rusqlite::ErrorCode;

const OFF: u8 = 0;
const PANIC_ON_WRITE: u8 = 1;
const PANIC_ON_READ: u8 = 2;

/// Memory shared between VFS instances (so a new VFS can reopen it), with a switch that
/// makes the next write or read panic.
#[derive(Clone)]
struct PanickingDevice {
    mem: Arc<Mutex<MemDevice>>,
    switch: Arc<AtomicU8>,
}

impl PanickingDevice {
    fn new() -> Self {
        Self {
            mem: Arc::new(Mutex::new(MemDevice::new(4096, 2048))),
            switch: Arc::new(AtomicU8::new(OFF)),
        }
    }

    fn mem(&self) -> std::sync::MutexGuard<'_, MemDevice> {
        self.mem.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn trip(&self, on: u8) {
        if self
            .switch
            .compare_exchange(on, OFF, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            panic!("injected panic in the block device");
        }
    }
}

impl BlockDevice for PanickingDevice {
    fn block_size(&self) -> u32 {
        self.mem().block_size()
    }
    fn blocks(&self) -> u64 {
        self.mem().blocks()
    }
    fn read(&mut self, lba: u64, buf: &mut [u8]) -> Result<()> {
        self.trip(PANIC_ON_READ);
        self.mem().read(lba, buf)
    }
    fn write(&mut self, lba: u64, buf: &[u8]) -> Result<()> {
        self.trip(PANIC_ON_WRITE);
        self.mem().write(lba, buf)
    }
    fn flush(&mut self) -> Result<()> {
        self.mem().flush()
    }
}

/// Error records logged by the crate.
struct Capture(Mutex<Vec<String>>);

impl log::Log for Capture {
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        m.level() <= log::Level::Error
    }
    fn log(&self, r: &log::Record<'_>) {
        if self.enabled(r.metadata()) {
            let mut v = self.0.lock().unwrap_or_else(|e| e.into_inner());
            v.push(r.args().to_string());
        }
    }
    fn flush(&self) {}
}

static CAPTURE: Capture = Capture(Mutex::new(Vec::new()));

fn capture_log() {
    if log::set_logger(&CAPTURE).is_ok() {
        log::set_max_level(log::LevelFilter::Error);
    }
}

/// Asserts that an error was logged naming `callback` and the injected panic's message.
fn assert_panic_logged(callback: &str) {
    let v = CAPTURE.0.lock().unwrap_or_else(|e| e.into_inner());
    assert!(
        v.iter().any(|m| m.contains(&format!("{callback} panicked"))
            && m.contains("injected panic in the block device")),
        "{v:?}"
    );
}

fn io_error(r: rusqlite::Result<impl std::fmt::Debug>) {
    match r {
        Err(e) => assert_eq!(
            e.sqlite_error_code(),
            Some(ErrorCode::SystemIoFailure),
            "{e}"
        ),
        Ok(v) => panic!("expected an I/O error, got Ok({v:?})"),
    }
}

fn count(conn: &rusqlite::Connection) -> rusqlite::Result<i64> {
    conn.query_row("SELECT count(*) FROM t", [], |r| r.get(0))
}

/// Reopens the medium with a new VFS: the committed rows are there and the database is whole.
fn reopen_and_check(dev: &PanickingDevice, name: &str, rows: i64) {
    let vfs = NvmeVfs::register(name, Box::new(dev.clone()), Format::Never).expect("reopen");
    let conn = vfs.open("p.db").expect("open");
    let ok: String = conn
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .expect("integrity_check");
    assert_eq!(ok, "ok");
    assert_eq!(count(&conn).expect("count"), rows);
}

fn setup(dev: &PanickingDevice, name: &str) -> (NvmeVfs, rusqlite::Connection) {
    capture_log();
    let vfs = NvmeVfs::register(name, Box::new(dev.clone()), Format::IfBlank).expect("register");
    let conn = vfs.open("p.db").expect("open");
    conn.execute_batch("CREATE TABLE t(x); INSERT INTO t VALUES (1); INSERT INTO t VALUES (2);")
        .expect("sql");
    (vfs, conn)
}

fn assert_broken(vfs: &NvmeVfs) {
    let err = vfs
        .with_store(|s| s.files())
        .expect_err("store after a panic");
    let msg = err.to_string();
    assert!(matches!(err, Error::Panicked { .. }), "{msg}");
    assert!(msg.contains("injected panic in the block device"), "{msg}");
}

#[test]
fn a_panic_under_xwrite_is_an_io_error_and_the_vfs_refuses_io_after_it() {
    let dev = PanickingDevice::new();
    let (vfs, conn) = setup(&dev, "panic-write");
    // WAL: the commit goes through xWrite (in rollback mode a batch-atomic commit writes
    // from xFileControl instead).
    let mode: String = conn
        .query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))
        .expect("wal");
    assert_eq!(mode, "wal");
    dev.switch.store(PANIC_ON_WRITE, Ordering::Release);
    io_error(conn.execute("INSERT INTO t VALUES (3)", []));
    assert_eq!(
        dev.switch.load(Ordering::Acquire),
        OFF,
        "the panic happened"
    );
    assert_panic_logged("xWrite");
    // Still running; no half-updated state is reused: every later I/O fails too.
    io_error(count(&conn));
    let err = vfs.open("other.db").expect_err("xOpen on a broken VFS");
    assert_eq!(
        err.sqlite_error_code(),
        Some(ErrorCode::CannotOpen),
        "{err}"
    );
    assert_broken(&vfs);
    drop(conn);
    drop(vfs);
    reopen_and_check(&dev, "panic-write-again", 2);
}

#[test]
fn a_panic_under_xread_is_an_io_error_too() {
    let dev = PanickingDevice::new();
    let (vfs, conn) = setup(&dev, "panic-read");
    // 1 MiB more than the first reads after a reopen bring in (the directory, and what the
    // block cache reads ahead of it).
    conn.execute_batch(
        "CREATE TABLE big(b);
         WITH RECURSIVE n(i) AS (VALUES(1) UNION ALL SELECT i + 1 FROM n WHERE i < 256)
         INSERT INTO big SELECT randomblob(4000) FROM n;",
    )
    .expect("big");
    drop(conn);
    drop(vfs);
    // A new VFS has an empty block cache and a new connection an empty page cache: a scan
    // of `big` reads the device.
    let vfs =
        NvmeVfs::register("panic-read-cold", Box::new(dev.clone()), Format::Never).expect("reopen");
    let conn = vfs.open("p.db").expect("open");
    let scan = |c: &rusqlite::Connection| {
        c.query_row("SELECT sum(length(b)) FROM big", [], |r| r.get::<_, i64>(0))
    };
    dev.switch.store(PANIC_ON_READ, Ordering::Release);
    io_error(scan(&conn));
    assert_eq!(
        dev.switch.load(Ordering::Acquire),
        OFF,
        "the panic happened"
    );
    assert_panic_logged("xRead");
    io_error(count(&conn));
    assert_broken(&vfs);
    drop(conn);
    drop(vfs);
    reopen_and_check(&dev, "panic-read-again", 2);
}

#[test]
fn a_panic_in_a_with_store_closure_breaks_the_vfs_too() {
    let dev = PanickingDevice::new();
    let (vfs, conn) = setup(&dev, "panic-with-store");
    let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        vfs.with_store(|_| panic!("a panic while holding the store"))
    }));
    assert!(unwound.is_err());
    let err = vfs
        .with_store(|s| s.files())
        .expect_err("store after a panic");
    assert!(matches!(err, Error::Panicked { .. }), "{err}");
    io_error(conn.execute("INSERT INTO t VALUES (3)", []));
    drop(conn);
    drop(vfs);
    reopen_and_check(&dev, "panic-with-store-again", 2);
}
