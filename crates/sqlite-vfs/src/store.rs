//! Files on a block device: a directory (see [`crate::dir`]) and one contiguous extent per
//! file, allocated first-fit from the data area.
//!
//! Durability rules (the VFS's `xSync` and `xDelete` rely on them):
//! - data writes go straight to the device (no cache here) and become durable at the next
//!   flush;
//! - a new directory copy is written only after a flush has made every earlier data write
//!   durable, and is itself followed by a flush ([`Store::persist`]);
//! - copies alternate between two slots with a rising generation, so a torn directory write
//!   leaves the previous copy intact;
//! - an extent leaves a file (delete, relocation) only through [`Store::persist`], so blocks
//!   that the on-disk directory still assigns to a file are never handed to another file;
//! - a batch-atomic write ([`Store::begin_batch`] .. [`Store::commit_batch`]) is one redo
//!   record and one flush before any of its pages reach their home blocks (`crate::redo`).

use crate::device::BlockDevice;
use crate::dir::{self, Decoded, Entry, Layout, MAX_FILES, MAX_NAME};
use crate::error::{Error, Result};
use crate::read_cache::{BlockCache, CACHE_BYTES};
use crate::redo::Area;

mod batch;

/// Smallest extent a new file gets (bytes); growth at least doubles.
const MIN_EXTENT_BYTES: u64 = 256 * 1024;
/// Bytes moved per step when a file is relocated.
const COPY_CHUNK: usize = 1 << 20;
/// SQLite names a database's write-ahead log `<database>-wal`.
const WAL_SUFFIX: &str = "-wal";

/// What the directory on the medium records for `e`. A write-ahead log that is not empty is
/// recorded as long as its whole extent, so appending frames within the extent changes
/// nothing on the medium and its commits need no directory write. SQLite allows this: a WAL
/// is read on recovery only up to the last valid commit frame (each frame carries the WAL
/// header's salts and a running checksum), which is what makes SQLite's own reuse of a WAL
/// from its start (without truncating it) safe; the blocks past the valid frames are
/// zeroes, stale frames or a deleted file's blocks, and end the scan.
fn on_medium(e: &Entry, block_size: u64) -> Entry {
    let mut m = e.clone();
    if e.name.ends_with(WAL_SUFFIX) && e.len > 0 {
        m.len = e.alloc * block_size;
    }
    m
}

/// What to do with a namespace that holds no directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Refuse it ([`Error::NotFormatted`]).
    Never,
    /// Format it when neither directory copy carries the magic number.
    IfBlank,
    /// Format it unconditionally, dropping every file.
    Always,
}

/// A file as listed by [`Store::files`].
pub type FileInfo = Entry;

/// One write of an open batch: its offset in the file and its bytes.
type BatchWrite = (u64, Vec<u8>);

/// The batch-atomic write being collected ([`Store::begin_batch`]).
struct Batch {
    /// The file it writes.
    file: String,
    /// Its writes, in order.
    writes: Vec<BatchWrite>,
    /// Payload bytes of every write offered to the batch, as a redo record
    /// (`redo::payload_bytes`). Once that is larger than a slot the batch has overflowed:
    /// `writes` were dropped, and every further write and the commit fail with
    /// [`Error::BatchTooLarge`] (SQLite then rolls the batch back and commits through its
    /// journal).
    payload: u64,
}

/// Counters.
#[derive(Debug, Default, Clone, Copy)]
pub struct StoreStats {
    /// Directory copies written.
    pub dir_writes: u64,
    /// Device flushes.
    pub flushes: u64,
    /// Files moved to a larger extent.
    pub relocations: u64,
    /// Read-modify-write cycles for partial blocks.
    pub rmw: u64,
    /// Of those, how many needed no device read (the block was in the one-block cache, or
    /// lay wholly past the end of the file).
    pub rmw_cached: u64,
    /// Batch-atomic writes committed through the redo area.
    pub batches: u64,
    /// Redo records replayed when the store was opened.
    pub replayed: u64,
    /// Blocks the block cache served without a device read.
    pub cache_hits: u64,
    /// Device reads the block cache issued (one command run each, possibly many blocks).
    pub cache_fills: u64,
    /// Blocks read ahead of a request (a sequential miss).
    pub read_ahead_blocks: u64,
}

/// The files of one namespace.
pub struct Store {
    dev: Box<dyn BlockDevice>,
    layout: Layout,
    generation: u64,
    entries: Vec<Entry>,
    dir_dirty: bool,
    data_dirty: bool,
    /// The entries as the directory copy last written (or read) records them
    /// ([`on_medium`]): a change of `entries` that leaves these alone needs no directory
    /// write.
    persisted: Vec<Entry>,
    /// Every device read and write goes through it (`crate::read_cache`); a partial-block
    /// write is read-modify-written in its slot, so appending records that straddle blocks
    /// (journal, WAL) costs no extra read and no extra copy.
    cache: BlockCache,
    stats: StoreStats,
    /// The redo area's slots.
    area: Area,
    /// The batch being collected.
    batch: Option<Batch>,
    /// The file whose batch was rolled back and not yet written since: its next home write
    /// or truncate first makes everything durable ([`Store::sync`]). SQLite's fallback after a
    /// refused batch writes its in-memory rollback journal to the journal file and then the
    /// pages, with no `xSync` of the journal in between (`sqlite3PagerCommitPhaseOne`); the
    /// journal must be durable (and named by the directory) before any page is overwritten.
    sync_before_home: Option<String>,
    /// Sequence number of the next redo record.
    redo_seq: u64,
    /// The file whose redo records of the current generation may be replayed at open: its
    /// length and extent size may be ahead of the directory on the medium (the records
    /// carry them), and a write to it outside a batch first persists the directory.
    redo_file: Option<String>,
    /// Per redo slot: its record's home writes were issued and no flush has followed yet, so
    /// the slot must not be overwritten before one.
    unflushed_apply: [bool; 2],
    /// [`Store::set_batch_atomic`].
    batch_on: bool,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("layout", &self.layout)
            .field("generation", &self.generation)
            .field("entries", &self.entries)
            .finish()
    }
}

impl Store {
    /// Opens the store on `dev` (formatting per `format`).
    pub fn open(dev: Box<dyn BlockDevice>, format: Format) -> Result<Self> {
        let layout = Layout::new(dev.block_size(), dev.blocks())?;
        let mut store = Self {
            cache: BlockCache::new(layout.block_size, dev.blocks(), CACHE_BYTES),
            dev,
            layout,
            generation: 0,
            entries: Vec::new(),
            dir_dirty: false,
            data_dirty: false,
            persisted: Vec::new(),
            stats: StoreStats::default(),
            area: Area::new(&layout),
            batch: None,
            sync_before_home: None,
            redo_seq: 1,
            redo_file: None,
            unflushed_apply: [false; 2],
            batch_on: true,
        };
        if format == Format::Always {
            store.format()?;
            return Ok(store);
        }
        let mut copies = Vec::with_capacity(2);
        for slot in 0..2 {
            let mut b = vec![0; layout.dir_bytes()];
            store
                .cache
                .read(&mut *store.dev, layout.dir_lba(slot), &mut b)?;
            copies.push(dir::decode(&layout, &b));
        }
        let best = copies
            .iter()
            .filter_map(|c| match c {
                Decoded::Valid {
                    generation,
                    entries,
                } => Some((*generation, entries)),
                _ => None,
            })
            .max_by_key(|(g, _)| *g);
        if let Some((generation, entries)) = best {
            for (slot, c) in copies.iter().enumerate() {
                if let Decoded::Corrupt(why) = c {
                    log::warn!(
                        "directory copy {} is unusable ({why}); using the other copy (generation {generation})",
                        ["A", "B"][slot]
                    );
                }
            }
            store.generation = generation;
            store.entries = entries.clone();
            store.persisted = entries.clone();
            store.replay()?;
            return Ok(store);
        }
        let describe = |c: &Decoded| match c {
            Decoded::Blank => "no magic number".to_owned(),
            Decoded::Corrupt(why) => why.clone(),
            Decoded::Valid { .. } => "valid".to_owned(),
        };
        if copies.iter().all(|c| matches!(c, Decoded::Blank)) {
            if format == Format::IfBlank {
                store.format()?;
                return Ok(store);
            }
            return Err(Error::NotFormatted);
        }
        Err(Error::DirectoryCorrupt {
            a: describe(&copies[0]),
            b: describe(&copies[1]),
        })
    }

    fn format(&mut self) -> Result<()> {
        self.entries.clear();
        self.generation = 0;
        // A new store counts generations from 1 again: no record of an earlier one may match.
        if self.area.usable() {
            let blank = self.area.blank_header();
            self.data_dirty = true;
            for slot in 0..2 {
                self.cache
                    .write(&mut *self.dev, self.area.slot_lba(slot), &blank)?;
            }
        }
        // Two persists: both slots then hold an empty directory (generations 1 and 2).
        self.persist()?;
        self.persist()
    }

    /// The geometry.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// Counters.
    pub fn stats(&self) -> StoreStats {
        let c = self.cache.stats();
        StoreStats {
            cache_hits: c.hits,
            cache_fills: c.fills,
            read_ahead_blocks: c.ahead,
            ..self.stats
        }
    }

    /// The device's I/O counters ([`crate::BlockDevice::io_stats`]), when it keeps any.
    pub fn io_stats(&self) -> Option<crate::IoStats> {
        self.dev.io_stats()
    }

    /// The device's atomic write unit in bytes.
    pub fn atomic_write_bytes(&self) -> u32 {
        self.dev.atomic_write_bytes()
    }

    /// The generation of the directory last written or read.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Every file.
    pub fn files(&self) -> Vec<FileInfo> {
        self.entries.clone()
    }

    fn find(&self, name: &str) -> Result<usize> {
        self.entries
            .iter()
            .position(|e| e.name == name)
            .ok_or_else(|| Error::NotFound(name.to_owned()))
    }

    /// Whether `name` exists.
    pub fn exists(&self, name: &str) -> bool {
        self.entries.iter().any(|e| e.name == name)
    }

    /// Length of `name` in bytes.
    pub fn len(&self, name: &str) -> Result<u64> {
        Ok(self.entries[self.find(name)?].len)
    }

    /// Creates an empty file (not durable until the next sync or persist).
    pub fn create(&mut self, name: &str) -> Result<()> {
        if name.is_empty() || name.len() > MAX_NAME || name.contains('\0') {
            return Err(Error::BadName(name.to_owned()));
        }
        if self.exists(name) {
            return Err(Error::Exists(name.to_owned()));
        }
        if self.entries.len() >= MAX_FILES {
            return Err(Error::DirectoryFull(MAX_FILES));
        }
        let want = MIN_EXTENT_BYTES.div_ceil(u64::from(self.layout.block_size));
        let (start, alloc) = match self.first_fit(want, usize::MAX) {
            Some(start) => (start, want),
            None => (0, 0),
        };
        self.entries.push(Entry {
            name: name.to_owned(),
            start,
            alloc,
            len: 0,
        });
        self.dir_dirty = true;
        Ok(())
    }

    /// Deletes `name` durably: flush, directory without it, flush.
    pub fn delete(&mut self, name: &str) -> Result<()> {
        let i = self.find(name)?;
        self.entries.remove(i);
        self.dir_dirty = true;
        self.persist()
    }

    /// First LBA of a free run of `blocks` blocks, not counting entry `skip`'s extent as used
    /// (`usize::MAX`: count every extent; an extent being replaced stays reserved until the
    /// directory no longer names it).
    fn first_fit(&self, blocks: u64, skip: usize) -> Option<u64> {
        let mut used: Vec<(u64, u64)> = self
            .entries
            .iter()
            .enumerate()
            .filter(|(i, e)| *i != skip && e.alloc > 0)
            .map(|(_, e)| (e.start, e.start + e.alloc))
            .collect();
        used.sort_unstable();
        let mut at = self.layout.data_start;
        for (s, e) in used {
            if s >= at && s - at >= blocks {
                return Some(at);
            }
            at = at.max(e);
        }
        (self.layout.total_blocks.checked_sub(at)? >= blocks).then_some(at)
    }

    /// Blocks free right after entry `i`'s extent.
    fn room_after(&self, i: usize) -> u64 {
        let end = self.entries[i].start + self.entries[i].alloc;
        let next = self
            .entries
            .iter()
            .enumerate()
            .filter(|(j, e)| *j != i && e.alloc > 0 && e.start >= end)
            .map(|(_, e)| e.start)
            .min()
            .unwrap_or(self.layout.total_blocks);
        next - end
    }

    /// Makes entry `i`'s extent hold at least `bytes`.
    fn reserve(&mut self, i: usize, bytes: u64) -> Result<()> {
        let bs = u64::from(self.layout.block_size);
        let need = bytes.div_ceil(bs);
        let cur = self.entries[i].alloc;
        if need <= cur {
            return Ok(());
        }
        let min = MIN_EXTENT_BYTES.div_ceil(bs);
        let want = need.max(cur.saturating_mul(2)).max(min);
        if cur > 0 {
            let room = self.room_after(i);
            for size in [want, need] {
                if size - cur <= room {
                    // Growing in place: the new blocks were free, nothing else moves.
                    self.entries[i].alloc = size;
                    self.dir_dirty = true;
                    return Ok(());
                }
            }
        }
        for size in [want, need] {
            // The old extent is still counted as used here (skip = usize::MAX), so the copy
            // never overlaps it.
            if let Some(start) = self.first_fit(size, usize::MAX) {
                return self.relocate(i, start, size);
            }
        }
        Err(Error::NoSpace {
            name: self.entries[i].name.clone(),
            bytes,
        })
    }

    /// Moves entry `i` to `start` with `alloc` blocks and persists the directory before the
    /// old extent can be reused.
    fn relocate(&mut self, i: usize, start: u64, alloc: u64) -> Result<()> {
        let bs = u64::from(self.layout.block_size);
        let (old, len) = (self.entries[i].start, self.entries[i].len);
        let mut left = len.div_ceil(bs);
        let step = (COPY_CHUNK as u64 / bs).max(1);
        let mut buf = vec![0; (step.min(left.max(1)) * bs) as usize];
        let mut done = 0;
        // Dirty before the first write: a copy that fails part-way has still written blocks.
        self.data_dirty = true;
        while left > 0 {
            let n = step.min(left);
            let b = &mut buf[..(n * bs) as usize];
            self.cache.read(&mut *self.dev, old + done, b)?;
            self.cache.write(&mut *self.dev, start + done, b)?;
            done += n;
            left -= n;
        }
        self.entries[i].start = start;
        self.entries[i].alloc = alloc;
        self.dir_dirty = true;
        self.stats.relocations += 1;
        self.persist()
    }

    /// Reads from `name` at `offset`; returns the bytes read (fewer than `buf.len()` past the
    /// end of the file; the rest of `buf` is untouched).
    pub fn read(&mut self, name: &str, offset: u64, buf: &mut [u8]) -> Result<usize> {
        let i = self.find(name)?;
        let e = &self.entries[i];
        if offset >= e.len {
            return Ok(0);
        }
        let n = (e.len - offset).min(buf.len() as u64) as usize;
        let start = e.start;
        self.read_blocks(start, offset, &mut buf[..n])?;
        Ok(n)
    }

    /// Writes `data` to `name` at `offset`, growing it (a gap is zero-filled). Inside a
    /// batch on `name` the write is collected, and reaches the device at
    /// [`Store::commit_batch`].
    pub fn write(&mut self, name: &str, offset: u64, data: &[u8]) -> Result<()> {
        if let Some(b) = self.batch.as_mut().filter(|b| b.file == name) {
            offset
                .checked_add(data.len() as u64)
                .ok_or_else(|| Error::NoSpace {
                    name: name.to_owned(),
                    bytes: u64::MAX,
                })?;
            return b.collect(&self.area, offset, data);
        }
        self.sync_if_rolled_back(name)?;
        self.retire(name)?;
        self.write_home(name, offset, data)
    }

    /// [`Store::write`] without the batch and the redo checks.
    pub(super) fn write_home(&mut self, name: &str, offset: u64, data: &[u8]) -> Result<()> {
        let i = self.find(name)?;
        let end = offset
            .checked_add(data.len() as u64)
            .ok_or_else(|| Error::NoSpace {
                name: name.to_owned(),
                bytes: u64::MAX,
            })?;
        self.reserve(i, end)?;
        let len = self.entries[i].len;
        if offset > len {
            self.zero(i, len, offset)?;
        }
        let start = self.entries[i].start;
        self.write_blocks(start, offset, data, len.max(offset))?;
        if end > self.entries[i].len {
            self.entries[i].len = end;
            self.dir_dirty = true;
        }
        Ok(())
    }

    fn zero(&mut self, i: usize, from: u64, to: u64) -> Result<()> {
        let zeros = vec![0u8; COPY_CHUNK];
        let start = self.entries[i].start;
        let mut at = from;
        while at < to {
            let n = (to - at).min(COPY_CHUNK as u64) as usize;
            self.write_blocks(start, at, &zeros[..n], at)?;
            at += n as u64;
        }
        Ok(())
    }

    /// Sets the length of `name`; growing zero-fills. The extent is kept (space is given
    /// back when the file is deleted).
    pub fn truncate(&mut self, name: &str, size: u64) -> Result<()> {
        let i = self.find(name)?;
        let len = self.entries[i].len;
        if size != len {
            self.sync_if_rolled_back(name)?;
            self.retire(name)?;
        }
        if size > len {
            self.reserve(i, size)?;
            self.zero(i, len, size)?;
        }
        if size != len {
            self.entries[i].len = size;
            self.dir_dirty = true;
        }
        Ok(())
    }

    /// Makes every write so far durable, and the directory if it changed.
    pub fn sync(&mut self) -> Result<()> {
        if self.dir_dirty && !self.directory_unchanged() {
            self.persist()
        } else if self.data_dirty {
            // Only changes the medium's directory does not record (a WAL growing inside its
            // extent), if any: the data's Flush is all.
            self.dir_dirty = false;
            if cfg!(feature = "broken-skip-flush") {
                // Deliberately broken (test-only feature): data stays in the volatile cache.
                return Ok(());
            }
            self.flush()
        } else {
            self.dir_dirty = false;
            Ok(())
        }
    }

    /// Whether the directory on the medium already records every entry as it is now. The
    /// file of live redo records ([`Store::commit_batch`]) may be longer and hold a larger
    /// extent at the same start: replaying its records at open restores both.
    fn directory_unchanged(&self) -> bool {
        let bs = u64::from(self.layout.block_size);
        self.entries.len() == self.persisted.len()
            && self.entries.iter().zip(&self.persisted).all(|(e, p)| {
                let m = on_medium(e, bs);
                m == *p
                    || (self.redo_file.as_deref() == Some(e.name.as_str())
                        && m.name == p.name
                        && m.start == p.start
                        && m.len >= p.len
                        && m.alloc >= p.alloc)
            })
    }

    fn flush(&mut self) -> Result<()> {
        self.cache.flush(&mut *self.dev)?;
        self.stats.flushes += 1;
        self.data_dirty = false;
        self.unflushed_apply = [false; 2];
        Ok(())
    }

    /// Flush (data before directory), write the next directory copy, flush.
    pub fn persist(&mut self) -> Result<()> {
        if self.data_dirty {
            self.flush()?;
        }
        let generation = self.generation + 1;
        let bs = u64::from(self.layout.block_size);
        let medium: Vec<Entry> = self.entries.iter().map(|e| on_medium(e, bs)).collect();
        let copy = dir::encode(&self.layout, generation, &medium);
        self.cache
            .write(&mut *self.dev, self.layout.dir_lba(generation % 2), &copy)?;
        self.stats.dir_writes += 1;
        self.flush()?;
        self.generation = generation;
        self.dir_dirty = false;
        self.persisted = medium;
        // The flush before the directory made the home writes of every redo record durable;
        // records of older generations are never replayed.
        self.redo_file = None;
        Ok(())
    }

    /// Reads `buf.len()` bytes at byte `offset` of the extent starting at `base`, through
    /// the block cache (one device read for the blocks of the span it misses).
    fn read_blocks(&mut self, base: u64, offset: u64, buf: &mut [u8]) -> Result<()> {
        let bs = u64::from(self.layout.block_size);
        let within = (offset % bs) as usize;
        self.cache
            .read_at(&mut *self.dev, base + offset / bs, within, buf)
    }

    /// Writes `data` at byte `offset` of the extent at `base`; partial blocks are
    /// read-modify-written, except blocks that start at or past `valid_end` (the file's
    /// length before this write): nothing there is ever read back, so they are not read and
    /// their unwritten bytes become zeroes.
    ///
    /// The store is marked dirty before the first device write: a write that fails part-way
    /// may have stored some of its blocks (earlier pieces, or part of the failed command: a
    /// failed NVMe Write leaves its range indeterminate), and the next [`Store::sync`] must
    /// flush them.
    fn write_blocks(&mut self, base: u64, offset: u64, data: &[u8], valid_end: u64) -> Result<()> {
        let bs = self.layout.block_size as usize;
        let mut pos = offset;
        let mut done = 0;
        if !data.is_empty() {
            self.data_dirty = true;
        }
        while done < data.len() {
            let lba = base + pos / bs as u64;
            let within = (pos % bs as u64) as usize;
            let rest = data.len() - done;
            if within != 0 || rest < bs {
                let n = (bs - within).min(rest);
                let block_start = pos - within as u64;
                // Past the old end nothing is ever read back: no device read for it.
                let fresh = block_start >= valid_end;
                let hit =
                    self.cache
                        .patch(&mut *self.dev, lba, within, &data[done..done + n], fresh)?;
                if hit || fresh {
                    self.stats.rmw_cached += 1;
                }
                self.stats.rmw += 1;
                done += n;
                pos += n as u64;
            } else {
                let n = rest / bs * bs;
                self.cache
                    .write(&mut *self.dev, lba, &data[done..done + n])?;
                done += n;
                pos += n as u64;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::MemDevice;

    fn store(bs: u32, blocks: u64) -> Store {
        Store::open(Box::new(MemDevice::new(bs, blocks)), Format::IfBlank).expect("format")
    }

    /// xorshift, deterministic.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
    }

    #[test]
    fn unaligned_writes_and_reads_match_a_model() {
        for bs in [512u32, 4096] {
            let mut s = store(bs, (16 << 20) / u64::from(bs));
            s.create("f").unwrap();
            s.create("g").unwrap();
            let mut model: Vec<u8> = Vec::new();
            let mut rng = Rng(0x1234_5678 + u64::from(bs));
            for round in 0..400 {
                let off = rng.next() % 300_000;
                let len = 1 + (rng.next() % 9000) as usize;
                let data: Vec<u8> = (0..len).map(|k| (round + k) as u8 ^ 0xa5).collect();
                s.write("f", off, &data).unwrap();
                // Interleave writes to another file so extents sit next to each other and
                // `f` has to relocate when it grows.
                s.write("g", (round * 10) as u64, &[round as u8; 10])
                    .unwrap();
                let end = off as usize + len;
                if model.len() < end {
                    model.resize(end, 0);
                }
                model[off as usize..end].copy_from_slice(&data);
                assert_eq!(s.len("f").unwrap(), model.len() as u64);
                let roff = rng.next() % (model.len() as u64 + 10);
                let rlen = (rng.next() % 10_000) as usize;
                let mut buf = vec![0xeeu8; rlen];
                let n = s.read("f", roff, &mut buf).unwrap();
                let avail = model.len().saturating_sub(roff as usize).min(rlen);
                assert_eq!(n, avail, "bs {bs} round {round}");
                assert_eq!(&buf[..n], &model[roff as usize..roff as usize + n]);
            }
            let mut all = vec![0; model.len()];
            assert_eq!(s.read("f", 0, &mut all).unwrap(), model.len());
            assert_eq!(all, model);
            assert!(s.stats().rmw > 0);
            assert!(s.stats().relocations > 0);
        }
    }

    #[test]
    fn rmw_keeps_neighbouring_bytes() {
        let mut s = store(4096, 1024);
        s.create("f").unwrap();
        s.write("f", 0, &[1u8; 8192]).unwrap();
        s.write("f", 4000, &[2u8; 200]).unwrap();
        let mut b = vec![0; 8192];
        s.read("f", 0, &mut b).unwrap();
        assert!(b[..4000].iter().all(|&x| x == 1));
        assert!(b[4000..4200].iter().all(|&x| x == 2));
        assert!(b[4200..].iter().all(|&x| x == 1));
    }

    #[test]
    fn gaps_and_growing_truncate_read_as_zeroes() {
        let mut s = store(512, 8192);
        s.create("f").unwrap();
        // Dirty the extent's blocks through another file first, then free them.
        s.create("junk").unwrap();
        s.write("junk", 0, &[0xffu8; 100_000]).unwrap();
        s.delete("junk").unwrap();
        s.write("f", 10, b"abc").unwrap();
        s.write("f", 5000, b"xyz").unwrap();
        s.truncate("f", 9000).unwrap();
        let mut b = vec![0xeeu8; 9000];
        assert_eq!(s.read("f", 0, &mut b).unwrap(), 9000);
        assert_eq!(&b[10..13], b"abc");
        assert_eq!(&b[5000..5003], b"xyz");
        assert!(b[..10].iter().all(|&x| x == 0));
        assert!(b[13..5000].iter().all(|&x| x == 0));
        assert!(b[5003..].iter().all(|&x| x == 0));
        s.truncate("f", 11).unwrap();
        assert_eq!(s.len("f").unwrap(), 11);
        let mut b = [0u8; 4];
        assert_eq!(s.read("f", 9, &mut b).unwrap(), 2);
    }

    #[test]
    fn sync_persists_lengths_and_reopen_finds_them() {
        let mut s = store(4096, 2048);
        s.create("db").unwrap();
        s.write("db", 0, &[7u8; 10_000]).unwrap();
        s.sync().unwrap();
        // An unsynced length change is not in the directory on the medium.
        s.write("db", 10_000, &[8u8; 100]).unwrap();
        let dev = std::mem::replace(&mut s.dev, Box::new(MemDevice::new(4096, 2048)));
        let mut r = Store::open(dev, Format::Never).unwrap();
        assert_eq!(r.len("db").unwrap(), 10_000);
        let mut b = vec![0; 10_000];
        r.read("db", 0, &mut b).unwrap();
        assert!(b.iter().all(|&x| x == 7));
    }

    #[test]
    fn directory_full_and_no_space_are_errors() {
        let mut s = store(4096, 1024);
        for i in 0..crate::dir::MAX_FILES {
            s.create(&format!("f{i}")).unwrap();
        }
        assert!(matches!(s.create("x"), Err(Error::DirectoryFull(_))));
        assert!(matches!(
            s.write("f0", 0, &vec![0u8; 8 << 20]),
            Err(Error::NoSpace { .. })
        ));
        assert!(matches!(s.create(&"n".repeat(64)), Err(Error::BadName(_))));
    }

    #[test]
    fn garbage_directory_is_refused_not_panicking() {
        let mut dev = MemDevice::new(512, 8192);
        let layout = Layout::new(512, 8192).unwrap();
        // Valid checksum, nonsense contents: an extent past the end.
        let mut copy = crate::dir::encode(
            &layout,
            1,
            &[Entry {
                name: "x".into(),
                start: 1 << 40,
                alloc: 5,
                len: 0,
            }],
        );
        let n = copy.len();
        dev.bytes_mut()[..n].copy_from_slice(&copy);
        copy[20] ^= 1;
        dev.bytes_mut()[n..2 * n].copy_from_slice(&copy);
        let err = Store::open(Box::new(dev), Format::Never).unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, Error::DirectoryCorrupt { .. }), "{msg}");
        assert!(msg.contains("outside the data area"), "{msg}");
        assert!(msg.contains("bad checksum"), "{msg}");
    }

    #[test]
    fn a_wal_growing_inside_its_extent_needs_no_directory_write() {
        let mut s = store(4096, 2048);
        s.create("db").unwrap();
        s.create("db-wal").unwrap();
        s.write("db-wal", 0, &[1u8; 5000]).unwrap();
        s.sync().unwrap();
        let dirs = s.stats().dir_writes;
        let flushes = s.stats().flushes;
        // Appending frames inside the 256 KiB extent: a Flush, no directory write.
        for k in 1..10u64 {
            s.write("db-wal", k * 5000, &[k as u8 + 1; 5000]).unwrap();
            s.sync().unwrap();
        }
        assert_eq!(
            s.stats().dir_writes,
            dirs,
            "WAL appends rewrote the directory"
        );
        assert_eq!(s.stats().flushes, flushes + 9);
        // Another file's growth still writes it.
        s.write("db", 0, &[9u8; 5000]).unwrap();
        s.sync().unwrap();
        assert_eq!(s.stats().dir_writes, dirs + 1);
        // Truncating the WAL to nothing is recorded (SQLite's checkpoint(TRUNCATE)).
        s.truncate("db-wal", 0).unwrap();
        s.sync().unwrap();
        assert_eq!(s.stats().dir_writes, dirs + 2);
        s.write("db-wal", 0, &[3u8; 100]).unwrap();
        s.sync().unwrap();
        // On the medium the WAL spans its extent: what was written, then what the extent held.
        let dev = std::mem::replace(&mut s.dev, Box::new(MemDevice::new(4096, 2048)));
        let mut r = Store::open(dev, Format::Never).unwrap();
        let alloc = r.files().iter().find(|f| f.name == "db-wal").unwrap().alloc;
        assert_eq!(r.len("db-wal").unwrap(), alloc * 4096);
        let mut b = vec![0; 100];
        r.read("db-wal", 0, &mut b).unwrap();
        assert_eq!(b, [3u8; 100]);
        assert_eq!(
            r.len("db").unwrap(),
            5000,
            "other files keep their exact length"
        );
    }
}
