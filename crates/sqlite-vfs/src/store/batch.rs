//! Batch-atomic writes of the store: collecting a batch, committing it through the redo
//! area with one flush, retiring records, replaying them at open (`crate::redo` has the
//! record format and the rules).

use super::{Batch, Store};
use crate::error::{Error, Result};
use crate::redo::{self, Area, Record};

impl Batch {
    /// Adds a write. The first write that makes the batch larger than a redo slot of `area`
    /// fails with [`Error::BatchTooLarge`] and drops what was collected: SQLite falls back to
    /// its journal on an I/O error inside the batch, so a large transaction does not copy all
    /// its pages into memory first only to be refused at the commit.
    pub(super) fn collect(&mut self, area: &Area, offset: u64, data: &[u8]) -> Result<()> {
        self.payload = self.payload.saturating_add(redo::payload_bytes(data.len()));
        let bytes = redo::padded_record_bytes(area, self.payload);
        if bytes > area.capacity() {
            self.writes = Vec::new();
            return Err(Error::BatchTooLarge {
                bytes,
                capacity: area.capacity(),
            });
        }
        self.writes.push((offset, data.to_vec()));
        Ok(())
    }
}

impl Store {
    /// Whether batch-atomic writes are offered: the redo slots are large enough and
    /// [`Store::set_batch_atomic`] did not turn them off.
    pub fn batch_atomic(&self) -> bool {
        self.batch_on && self.area.usable()
    }

    /// Offers batch-atomic writes (`SQLITE_IOCAP_BATCH_ATOMIC`, the default where the redo
    /// area is large enough) or not. Takes effect for a VFS registered afterwards; records
    /// already on the medium are replayed at open either way.
    pub fn set_batch_atomic(&mut self, on: bool) {
        self.batch_on = on;
    }

    /// Starts collecting a batch of writes to `name` (`SQLITE_FCNTL_BEGIN_ATOMIC_WRITE`).
    pub fn begin_batch(&mut self, name: &str) -> Result<()> {
        self.find(name)?;
        if self.batch.is_some() || !self.batch_atomic() {
            return Err(Error::BatchOrder(name.to_owned()));
        }
        self.sync_before_home = None;
        self.batch = Some(Batch {
            file: name.to_owned(),
            writes: Vec::new(),
            payload: 0,
        });
        Ok(())
    }

    /// Drops the batch being collected (`SQLITE_FCNTL_ROLLBACK_ATOMIC_WRITE`): nothing of it
    /// reached the device.
    pub fn rollback_batch(&mut self, name: &str) {
        if self.batch.as_ref().is_some_and(|b| b.file == name) {
            self.batch = None;
            self.sync_before_home = Some(name.to_owned());
        }
    }

    /// The barrier after a rolled-back batch (`Store::sync_before_home`): before the first
    /// home write or truncate of `name`, everything written so far (SQLite's journal) is
    /// made durable.
    pub(super) fn sync_if_rolled_back(&mut self, name: &str) -> Result<()> {
        if self.sync_before_home.as_deref() == Some(name) {
            self.sync_before_home = None;
            if !cfg!(feature = "broken-no-fallback-barrier") {
                self.sync()?;
            }
        }
        Ok(())
    }

    /// Writes the batch atomically and durably (`SQLITE_FCNTL_COMMIT_ATOMIC_WRITE`): the
    /// record into the next redo slot, one flush (the commit point), then the pages to their
    /// home blocks (durable by the next flush; until then the record covers them). A batch
    /// larger than a slot fails with [`Error::BatchTooLarge`] before anything is written
    /// (SQLite then commits through its rollback journal).
    pub fn commit_batch(&mut self, name: &str) -> Result<()> {
        let (writes, payload) = match self.batch.take() {
            Some(b) if b.file == name => (b.writes, b.payload),
            other => {
                self.batch = other;
                return Err(Error::BatchOrder(name.to_owned()));
            }
        };
        // Before anything else: an overflowed batch has dropped its writes.
        let bytes = redo::padded_record_bytes(&self.area, payload);
        if bytes > self.area.capacity() {
            return Err(Error::BatchTooLarge {
                bytes,
                capacity: self.area.capacity(),
            });
        }
        if writes.is_empty() {
            return Ok(());
        }
        if self.redo_file.as_deref().is_some_and(|f| f != name) {
            // Another file's records: the slots hold one file's records at a time.
            self.persist()?;
        }
        let i = self.find(name)?;
        let end = writes
            .iter()
            .map(|(o, d)| o + d.len() as u64)
            .max()
            .unwrap_or(0);
        let len = self.entries[i].len.max(end);
        // Room first: a relocation persists the directory, which would retire the record.
        self.reserve(i, len)?;
        let rec = Record {
            seq: self.redo_seq,
            generation: self.generation,
            name: name.to_owned(),
            len,
            writes,
        };
        let Some(bytes) = redo::encode(&self.area, &rec) else {
            return Err(Error::BatchTooLarge {
                bytes,
                capacity: self.area.capacity(),
            });
        };
        if cfg!(feature = "broken-batch-early-apply") {
            // Deliberately broken (test-only feature): the pages reach their home blocks
            // before the record is durable, so a cut can leave half a batch applied.
            for (offset, data) in &rec.writes {
                self.write_home(name, *offset, data)?;
            }
        }
        // Marked before the write: a record that lands although its write or flush fails
        // is replayable, so later writes to the file must retire it first.
        let slot = (rec.seq % 2) as usize;
        if self.unflushed_apply[slot] {
            // Only after a failed commit: the record this one overwrites still covers home
            // writes no flush has made durable.
            self.flush()?;
        }
        self.data_dirty = true;
        self.redo_file = Some(name.to_owned());
        self.redo_seq += 1;
        self.cache
            .write(&mut *self.dev, self.area.slot_lba(rec.seq), &bytes)?;
        self.flush()?;
        self.stats.batches += 1;
        if !cfg!(feature = "broken-batch-early-apply") {
            for (offset, data) in &rec.writes {
                self.write_home(name, *offset, data)?;
            }
        }
        // The home writes need no flush of their own: the durable record covers them until
        // the next flush, and its slot is not reused before one.
        self.data_dirty = false;
        self.unflushed_apply[slot] = true;
        Ok(())
    }

    /// At open: applies the redo records of the directory's generation in sequence order,
    /// then persists the directory (which retires them).
    pub(super) fn replay(&mut self) -> Result<()> {
        if !self.area.usable() {
            return Ok(());
        }
        let mut records = Vec::new();
        let bs = self.layout.block_size as usize;
        for slot in 0..2 {
            let lba = self.area.slot_lba(slot);
            let mut head = vec![0; bs];
            self.cache.read(&mut *self.dev, lba, &mut head)?;
            let redo::Header::Some { bytes } = redo::header(&self.area, &head) else {
                continue;
            };
            let mut b = vec![0; bytes as usize];
            self.cache.read(&mut *self.dev, lba, &mut b)?;
            if let Some(rec) = redo::decode(&b)? {
                self.redo_seq = self.redo_seq.max(rec.seq.saturating_add(1));
                if rec.generation == self.generation {
                    records.push(rec);
                }
            }
        }
        if records.is_empty() {
            return Ok(());
        }
        records.sort_by_key(|r| r.seq);
        for rec in &records {
            if !self.exists(&rec.name) {
                return Err(Error::RedoCorrupt(format!(
                    "record {} names `{}`, which the directory does not hold",
                    rec.seq, rec.name
                )));
            }
            log::info!(
                "replaying redo record {} ({} writes to `{}`)",
                rec.seq,
                rec.writes.len(),
                rec.name
            );
            // The length first, without zero-filling: the directory's length may lag behind
            // pages that earlier, retired records (or this one's home writes) put there.
            let i = self.find(&rec.name)?;
            self.reserve(i, rec.len)?;
            if self.entries[i].len < rec.len {
                self.entries[i].len = rec.len;
                self.dir_dirty = true;
            }
            for (offset, data) in &rec.writes {
                self.write_home(&rec.name, *offset, data)?;
            }
            self.stats.replayed += 1;
        }
        self.dir_dirty = true;
        self.persist()
    }

    /// Persists the directory when `name` has redo records that could be replayed at open:
    /// a write to it outside a batch must never be overwritten by an older record.
    pub(super) fn retire(&mut self, name: &str) -> Result<()> {
        if self.redo_file.as_deref() == Some(name) {
            self.persist()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Format, Store};
    use crate::device::MemDevice;
    use crate::error::Error;

    fn store(bs: u32, blocks: u64) -> Store {
        Store::open(Box::new(MemDevice::new(bs, blocks)), Format::IfBlank).expect("format")
    }

    #[test]
    fn a_batch_is_one_flush_and_is_replayed_when_its_home_writes_are_lost() {
        for bs in [512u32, 4096] {
            let blocks = (8 << 20) / u64::from(bs);
            let mut s = store(bs, blocks);
            s.create("db").unwrap();
            s.write("db", 0, &[1u8; 8192]).unwrap();
            s.sync().unwrap();
            let (flushes, dirs) = (s.stats().flushes, s.stats().dir_writes);
            s.begin_batch("db").unwrap();
            s.write("db", 4096, &[2u8; 4096]).unwrap();
            s.write("db", 8192, &[3u8; 4096]).unwrap(); // grows the file
            s.write("db", 100, &[4u8; 10]).unwrap();
            // Nothing reached the device yet: the old contents read back.
            let mut b = vec![0; 4096];
            s.read("db", 4096, &mut b).unwrap();
            assert!(b.iter().all(|&x| x == 1));
            s.commit_batch("db").unwrap();
            s.sync().unwrap();
            assert_eq!(s.stats().flushes, flushes + 1, "{bs}: one flush per batch");
            assert_eq!(s.stats().dir_writes, dirs, "{bs}: no directory write");
            assert_eq!(s.len("db").unwrap(), 12_288);
            // Lose the home writes (as a power cut may, after the record's flush).
            let start = s.files()[0].start;
            let bsz = bs as usize;
            s.dev
                .write(start, &[1u8; 8192][..(8192 / bsz) * bsz])
                .unwrap();
            s.dev
                .write(start + 8192 / u64::from(bs), &vec![0u8; 4096])
                .unwrap();
            let dev = std::mem::replace(&mut s.dev, Box::new(MemDevice::new(bs, blocks)));
            let mut r = Store::open(dev, Format::Never).unwrap();
            assert_eq!(r.stats().replayed, 1, "{bs}");
            assert_eq!(r.len("db").unwrap(), 12_288, "{bs}");
            let mut all = vec![0; 12_288];
            r.read("db", 0, &mut all).unwrap();
            assert!(all[..100].iter().all(|&x| x == 1));
            assert_eq!(&all[100..110], &[4u8; 10]);
            assert!(all[110..4096].iter().all(|&x| x == 1));
            assert!(all[4096..8192].iter().all(|&x| x == 2), "{bs}");
            assert!(all[8192..].iter().all(|&x| x == 3), "{bs}");
            // Replayed once: the directory was persisted, a later open replays nothing.
            let dev = std::mem::replace(&mut r.dev, Box::new(MemDevice::new(bs, blocks)));
            assert_eq!(Store::open(dev, Format::Never).unwrap().stats().replayed, 0);
        }
    }

    #[test]
    fn a_write_outside_a_batch_is_never_overwritten_by_an_old_record() {
        let mut s = store(4096, 2048);
        s.create("db").unwrap();
        s.write("db", 0, &[1u8; 4096]).unwrap();
        s.sync().unwrap();
        s.begin_batch("db").unwrap();
        s.write("db", 0, &[2u8; 4096]).unwrap();
        s.commit_batch("db").unwrap();
        // A direct write to the same page (a commit through the rollback journal).
        s.write("db", 0, &[3u8; 4096]).unwrap();
        s.sync().unwrap();
        let dev = std::mem::replace(&mut s.dev, Box::new(MemDevice::new(4096, 2048)));
        let mut r = Store::open(dev, Format::Never).unwrap();
        assert_eq!(r.stats().replayed, 0);
        let mut b = vec![0; 4096];
        r.read("db", 0, &mut b).unwrap();
        assert!(b.iter().all(|&x| x == 3));
    }

    #[test]
    fn a_rolled_back_batch_makes_the_journal_durable_before_the_next_home_write() {
        let mut s = store(4096, 4096);
        s.create("db").unwrap();
        s.create("db-journal").unwrap();
        s.write("db", 0, &[1u8; 4096]).unwrap();
        s.sync().unwrap();
        // The refused batch, then SQLite's fallback: the journal written, no xSync.
        s.begin_batch("db").unwrap();
        let cap = s.area.capacity() as usize;
        s.write("db", 0, &vec![2u8; cap]).unwrap_err();
        s.rollback_batch("db");
        s.write("db-journal", 0, &[3u8; 8192]).unwrap();
        let before = s.stats();
        // A write to another file does not trigger the barrier; the database's first does.
        s.write("db-journal", 8192, &[3u8; 4096]).unwrap();
        assert_eq!(s.stats().flushes, before.flushes);
        s.write("db", 0, &[2u8; 4096]).unwrap();
        let after = s.stats();
        assert!(
            after.flushes > before.flushes,
            "no flush before the page write"
        );
        assert!(
            after.dir_writes > before.dir_writes,
            "the journal's length not persisted"
        );
        // Once only.
        s.write("db", 4096, &[2u8; 4096]).unwrap();
        assert_eq!(s.stats().flushes, after.flushes);
    }

    #[test]
    fn batches_out_of_order_or_too_large_are_errors() {
        let mut s = store(4096, 4096);
        s.create("db").unwrap();
        assert!(matches!(s.commit_batch("db"), Err(Error::BatchOrder(_))));
        s.begin_batch("db").unwrap();
        assert!(matches!(s.begin_batch("db"), Err(Error::BatchOrder(_))));
        s.write("db", 0, &vec![5u8; 1 << 20]).unwrap_err();
        assert!(matches!(
            s.commit_batch("db"),
            Err(Error::BatchTooLarge { .. })
        ));
        // The write that overflows a slot is refused at once, and so is every later one
        // and the commit.
        s.begin_batch("db").unwrap();
        let cap = s.area.capacity() as usize;
        s.write("db", 0, &vec![5u8; cap / 2]).unwrap();
        assert!(matches!(
            s.write("db", cap as u64, &vec![5u8; cap / 2]),
            Err(Error::BatchTooLarge { .. })
        ));
        assert!(matches!(
            s.write("db", 0, &[5u8; 512]),
            Err(Error::BatchTooLarge { .. })
        ));
        assert!(matches!(
            s.commit_batch("db"),
            Err(Error::BatchTooLarge { .. })
        ));
        // Nothing was written; a rolled-back batch leaves nothing either.
        assert_eq!(s.len("db").unwrap(), 0);
        s.begin_batch("db").unwrap();
        s.write("db", 0, &[6u8; 4096]).unwrap();
        s.rollback_batch("db");
        assert_eq!(s.len("db").unwrap(), 0);
        s.set_batch_atomic(false);
        assert!(matches!(s.begin_batch("db"), Err(Error::BatchOrder(_))));
    }
}
