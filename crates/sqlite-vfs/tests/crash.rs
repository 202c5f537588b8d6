//! Power-failure images: a device that models a volatile write cache (writes since the last
//! flush may each be lost, block by block, in any combination) takes crash images while
//! SQLite commits transactions through the VFS; every image must reopen with
//! `integrity_check` = ok and show either the last committed transaction or the one in
//! flight, never a mix.

use std::sync::{Arc, Mutex};

use nvme_sqlite_vfs::workload::JournalMode;
use nvme_sqlite_vfs::{BlockDevice, Format, MemDevice, NvmeVfs};

const IMAGES: usize = 48;
const TXNS: u64 = 30;
const ROWS_PER_TXN: u64 = 40;

struct CrashState {
    bs: usize,
    current: Vec<u8>,
    durable: Vec<u8>,
    /// Blocks written since the last flush, in order.
    pending: Vec<(usize, Vec<u8>)>,
    rng: u64,
    ops: u64,
    candidates: u64,
    /// (image, last committed transaction, the one in flight).
    images: Vec<(Vec<u8>, u64, u64)>,
    committed: u64,
    recording: bool,
}

impl CrashState {
    fn rand(&mut self) -> u64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng
    }

    /// Maybe takes a crash image now (reservoir sample over the candidate points).
    fn maybe_image(&mut self) {
        self.ops += 1;
        if !self.recording || self.ops % 7 != 0 {
            return;
        }
        self.candidates += 1;
        let slot = if self.images.len() < IMAGES {
            None
        } else {
            let r = self.rand() % self.candidates;
            if r as usize >= IMAGES {
                return;
            }
            Some(r as usize)
        };
        let mut img = self.durable.clone();
        for k in 0..self.pending.len() {
            if self.rand() % 2 == 0 {
                let (at, block) = &self.pending[k];
                img[*at..*at + self.bs].copy_from_slice(block);
            }
        }
        let entry = (img, self.committed, self.committed + 1);
        match slot {
            None => self.images.push(entry),
            Some(i) => self.images[i] = entry,
        }
    }
}

struct CrashDevice {
    bs: u32,
    blocks: u64,
    state: Arc<Mutex<CrashState>>,
}

impl BlockDevice for CrashDevice {
    fn block_size(&self) -> u32 {
        self.bs
    }
    fn blocks(&self) -> u64 {
        self.blocks
    }
    fn read(&mut self, lba: u64, buf: &mut [u8]) -> nvme_sqlite_vfs::Result<()> {
        let s = self.state.lock().unwrap();
        let at = lba as usize * s.bs;
        buf.copy_from_slice(&s.current[at..at + buf.len()]);
        Ok(())
    }
    fn write(&mut self, lba: u64, buf: &[u8]) -> nvme_sqlite_vfs::Result<()> {
        let mut s = self.state.lock().unwrap();
        s.maybe_image();
        let bs = s.bs;
        let at = lba as usize * bs;
        s.current[at..at + buf.len()].copy_from_slice(buf);
        for (k, block) in buf.chunks(bs).enumerate() {
            s.pending.push((at + k * bs, block.to_vec()));
        }
        Ok(())
    }
    fn flush(&mut self) -> nvme_sqlite_vfs::Result<()> {
        let mut s = self.state.lock().unwrap();
        s.maybe_image();
        let pending = std::mem::take(&mut s.pending);
        let bs = s.bs;
        for (at, block) in pending {
            s.durable[at..at + bs].copy_from_slice(&block);
        }
        Ok(())
    }
}

fn crash_run(bs: u32, journal: JournalMode, seed: u64) {
    let bytes = 8usize << 20;
    let state = Arc::new(Mutex::new(CrashState {
        bs: bs as usize,
        current: vec![0; bytes],
        durable: vec![0; bytes],
        pending: Vec::new(),
        rng: seed,
        ops: 0,
        candidates: 0,
        images: Vec::new(),
        committed: 0,
        recording: false,
    }));
    let dev = CrashDevice {
        bs,
        blocks: (bytes / bs as usize) as u64,
        state: state.clone(),
    };
    let name = format!("crash-{bs}-{}", journal.as_str());
    {
        let vfs = NvmeVfs::register(&name, Box::new(dev), Format::IfBlank).unwrap();
        let conn = vfs.open("c.db").unwrap();
        conn.execute_batch(&format!(
            "PRAGMA journal_mode={}; PRAGMA synchronous=FULL;
             CREATE TABLE t(id INTEGER PRIMARY KEY, v BLOB NOT NULL);
             CREATE TABLE meta(txn INTEGER NOT NULL); INSERT INTO meta VALUES (0);",
            journal.as_str()
        ))
        .unwrap();
        state.lock().unwrap().recording = true;
        for txn in 1..=TXNS {
            let tx = conn.unchecked_transaction().unwrap();
            for r in 0..ROWS_PER_TXN {
                let id = (txn - 1) * ROWS_PER_TXN + r;
                tx.execute(
                    "INSERT INTO t VALUES (?1, randomblob(300 + ?1 % 500))",
                    [id as i64],
                )
                .unwrap();
            }
            // Rewrite older pages too, so the rollback journal / WAL carries real work.
            tx.execute(
                "UPDATE t SET v = randomblob(length(v)) WHERE id % 11 = ?1",
                [(txn % 11) as i64],
            )
            .unwrap();
            tx.execute("UPDATE meta SET txn = ?1", [txn as i64])
                .unwrap();
            tx.commit().unwrap();
            state.lock().unwrap().committed = txn;
        }
        state.lock().unwrap().recording = false;
    }
    let images = std::mem::take(&mut state.lock().unwrap().images);
    assert!(images.len() >= IMAGES / 2, "only {} images", images.len());
    for (k, (img, lo, hi)) in images.into_iter().enumerate() {
        let mut mem = MemDevice::new(bs, (bytes / bs as usize) as u64);
        mem.bytes_mut().copy_from_slice(&img);
        let vfs = NvmeVfs::register(&format!("{name}-img{k}"), Box::new(mem), Format::Never)
            .unwrap_or_else(|e| panic!("image {k}: {}", nvme_sqlite_vfs::error_chain(&e)));
        let conn = vfs.open("c.db").unwrap();
        let ok: String = conn
            .query_row("PRAGMA integrity_check", [], |r| r.get(0))
            .unwrap();
        assert_eq!(ok, "ok", "image {k}");
        // Before the schema was committed there is no table: only possible at txn 0.
        let txn: u64 = match conn.query_row("SELECT txn FROM meta", [], |r| r.get::<_, i64>(0)) {
            Ok(t) => t as u64,
            Err(e) => {
                assert_eq!(lo, 0, "image {k}: {e}");
                continue;
            }
        };
        assert!(
            txn == lo || txn == hi,
            "image {k}: txn {txn}, expected {lo} or {hi}"
        );
        let rows: i64 = conn
            .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
            .unwrap();
        assert_eq!(rows as u64, txn * ROWS_PER_TXN, "image {k}");
    }
}

#[test]
fn crash_images_delete_journal_4k() {
    crash_run(4096, JournalMode::Delete, 0x5eed_0001);
}

#[test]
fn crash_images_wal_4k() {
    crash_run(4096, JournalMode::Wal, 0x5eed_0002);
}

#[test]
fn crash_images_delete_journal_512() {
    crash_run(512, JournalMode::Delete, 0x5eed_0003);
}

#[test]
fn crash_images_wal_512() {
    crash_run(512, JournalMode::Wal, 0x5eed_0004);
}
