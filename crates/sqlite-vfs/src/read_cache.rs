//! The store's block cache: a fixed number of blocks in process memory (allocated once, at
//! [`Store::open`](crate::Store::open)), direct-mapped by LBA, write-through. It holds device
//! blocks, not file bytes, so it needs no rule of its own for truncation, deletion,
//! checkpoints or relocation: a cached block is exactly what the device holds at that LBA.
//!
//! How it stays exact (every device access of the store goes through it):
//! - a write copies its blocks into the cache (write-allocate: SQLite reads back WAL frames
//!   it wrote, at checkpoints and from readers) before handing them to the device, which
//!   under write-behind holds them from then on for every read (`crate::write_behind`);
//! - a write or Flush that fails empties the whole cache: a failed NVMe Write leaves its
//!   range indeterminate, and a failure of a write in flight is returned by a later call
//!   that does not say which range it was;
//! - a read that misses first marks the slots it fills invalid, then reads the device
//!   straight into them, and marks them valid only when the read succeeded.
//!
//! Every connection of the process to a namespace shares its one store (one VFS per
//! namespace, [`crate::NvmeVfs::register`]), so one connection's write is seen by the
//! others' reads. Nothing else may write the namespace while the store is open.
//!
//! A miss reads the whole missing run of the request with one command (a WAL frame, 24 +
//! page bytes, spans two blocks: one command, not two), and when it starts where the
//! previous miss ended (a sequential scan) it reads ahead up to [`READ_AHEAD_BYTES`]. The
//! durability contract is untouched: the cache never delays or drops a write or a Flush.

use crate::device::BlockDevice;
use crate::error::Result;

/// Bytes of blocks cached (capped at the device's size).
pub(crate) const CACHE_BYTES: usize = 16 << 20;
/// Most bytes a sequential miss reads beyond the request.
pub(crate) const READ_AHEAD_BYTES: usize = 64 << 10;

/// A tag of a slot that holds no block.
const EMPTY: u64 = u64::MAX;

/// Counters of the cache.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CacheStats {
    /// Blocks served from the cache.
    pub hits: u64,
    /// Device reads the cache issued (each one command run, possibly several blocks).
    pub fills: u64,
    /// Blocks read ahead of a request.
    pub ahead: u64,
}

/// A direct-mapped block cache (see the module documentation).
pub(crate) struct BlockCache {
    bs: usize,
    /// `slots * bs` bytes.
    data: Vec<u8>,
    /// The LBA each slot holds, or [`EMPTY`].
    tags: Vec<u64>,
    /// One past the last block the previous miss read: a miss there is sequential.
    next_seq: u64,
    ahead_blocks: u64,
    stats: CacheStats,
}

impl BlockCache {
    /// A cache of up to `bytes` in blocks of `block_size` for a device of `blocks` blocks
    /// (at least one slot).
    pub(crate) fn new(block_size: u32, blocks: u64, bytes: usize) -> Self {
        let bs = block_size as usize;
        let slots = (bytes / bs).clamp(1, blocks.clamp(1, usize::MAX as u64) as usize);
        Self {
            bs,
            data: vec![0; slots * bs],
            tags: vec![EMPTY; slots],
            next_seq: EMPTY,
            ahead_blocks: (READ_AHEAD_BYTES / bs) as u64,
            stats: CacheStats::default(),
        }
    }

    pub(crate) fn stats(&self) -> CacheStats {
        self.stats
    }

    fn slot(&self, lba: u64) -> usize {
        (lba % self.tags.len() as u64) as usize
    }

    /// Forgets every block (after a failure whose range is unknown).
    pub(crate) fn clear(&mut self) {
        self.tags.fill(EMPTY);
        self.next_seq = EMPTY;
    }

    /// Reads `buf.len()` bytes starting `within` bytes into block `lba` (`within` below the
    /// block size; `buf` may end mid-block).
    pub(crate) fn read_at(
        &mut self,
        dev: &mut dyn BlockDevice,
        lba: u64,
        within: usize,
        buf: &mut [u8],
    ) -> Result<()> {
        let bs = self.bs;
        debug_assert!(within < bs);
        let blocks = (within + buf.len()).div_ceil(bs) as u64;
        let end = lba + blocks;
        let (mut at, mut done, mut from) = (lba, 0, within);
        // Blocks below this one came in with this call's last fill (not hits).
        let mut filled = lba;
        while done < buf.len() {
            let slot = self.slot(at);
            if self.tags[slot] != at {
                filled = self.fill(dev, at, end)?;
            } else if at >= filled {
                self.stats.hits += 1;
            }
            let n = (bs - from).min(buf.len() - done);
            let off = slot * bs + from;
            buf[done..done + n].copy_from_slice(&self.data[off..off + n]);
            done += n;
            from = 0;
            at += 1;
        }
        Ok(())
    }

    /// Reads whole blocks at `lba` (`buf.len()` a multiple of the block size).
    pub(crate) fn read(
        &mut self,
        dev: &mut dyn BlockDevice,
        lba: u64,
        buf: &mut [u8],
    ) -> Result<()> {
        self.read_at(dev, lba, 0, buf)
    }

    /// Fills the cache from the missing block `lba` up to `end` (the request's end, or a
    /// read-ahead window past it when the miss is sequential), with one device read into
    /// the slots, which never wraps around the end of the cache.
    /// Returns one past the last block read.
    fn fill(&mut self, dev: &mut dyn BlockDevice, lba: u64, end: u64) -> Result<u64> {
        let bs = self.bs;
        let sequential = lba == self.next_seq;
        let mut stop = end;
        if sequential {
            stop = stop.max(lba + self.ahead_blocks);
        }
        let slot = self.slot(lba);
        stop = stop
            .min(dev.blocks())
            .min(lba + (self.tags.len() - slot) as u64)
            .max(lba + 1);
        // Stop before a block already cached (inside the request it need not be read again;
        // ahead of it, it is the next sequential miss's business).
        let mut n = 1;
        while lba + (n as u64) < stop && self.tags[slot + n] != lba + n as u64 {
            n += 1;
        }
        for t in &mut self.tags[slot..slot + n] {
            *t = EMPTY;
        }
        self.next_seq = EMPTY;
        dev.read(lba, &mut self.data[slot * bs..(slot + n) * bs])?;
        for (i, t) in self.tags[slot..slot + n].iter_mut().enumerate() {
            *t = lba + i as u64;
        }
        self.stats.fills += 1;
        self.stats.ahead += (lba + n as u64).saturating_sub(end);
        self.next_seq = lba + n as u64;
        Ok(self.next_seq)
    }

    /// Read-modify-writes block `lba` in its slot: `data` at byte `within`, the rest as the
    /// device holds it (read when not cached) or, when `fresh` (nothing of the block is ever
    /// read back) and not cached, zeroes; then writes the block to the device from the slot.
    /// Returns whether the block was cached.
    pub(crate) fn patch(
        &mut self,
        dev: &mut dyn BlockDevice,
        lba: u64,
        within: usize,
        data: &[u8],
        fresh: bool,
    ) -> Result<bool> {
        let bs = self.bs;
        let slot = self.slot(lba);
        let hit = self.tags[slot] == lba;
        if !hit {
            if fresh {
                self.data[slot * bs..(slot + 1) * bs].fill(0);
                self.tags[slot] = lba;
            } else {
                self.fill(dev, lba, lba + 1)?;
            }
        } else {
            self.stats.hits += 1;
        }
        let block = &mut self.data[slot * bs..(slot + 1) * bs];
        block[within..within + data.len()].copy_from_slice(data);
        let r = dev.write(lba, block);
        if r.is_err() {
            self.clear();
        }
        r.map(|()| hit)
    }

    /// Writes whole blocks at `lba` through the cache to the device.
    pub(crate) fn write(&mut self, dev: &mut dyn BlockDevice, lba: u64, data: &[u8]) -> Result<()> {
        let bs = self.bs;
        let slots = self.tags.len();
        // A write larger than the cache: only its last `slots` blocks can stay.
        let blocks = (data.len() / bs) as u64;
        let skip = blocks.saturating_sub(slots as u64);
        for i in 0..blocks {
            let slot = self.slot(lba + i);
            if i < skip {
                if self.tags[slot] == lba + i {
                    self.tags[slot] = EMPTY;
                }
                continue;
            }
            let src = i as usize * bs;
            self.data[slot * bs..(slot + 1) * bs].copy_from_slice(&data[src..src + bs]);
            self.tags[slot] = lba + i;
        }
        let r = dev.write(lba, data);
        if r.is_err() {
            self.clear();
        }
        r
    }

    /// The device's Flush; a failure empties the cache.
    pub(crate) fn flush(&mut self, dev: &mut dyn BlockDevice) -> Result<()> {
        let r = dev.flush();
        if r.is_err() {
            self.clear();
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;
    use crate::MemDevice;

    /// A memory device that counts reads and fails the next write or flush on request.
    struct Counting {
        mem: MemDevice,
        reads: u64,
        blocks_read: u64,
        fail_next: bool,
    }

    impl BlockDevice for Counting {
        fn block_size(&self) -> u32 {
            self.mem.block_size()
        }
        fn blocks(&self) -> u64 {
            self.mem.blocks()
        }
        fn read(&mut self, lba: u64, buf: &mut [u8]) -> Result<()> {
            self.reads += 1;
            self.blocks_read += (buf.len() / 512) as u64;
            self.mem.read(lba, buf)
        }
        fn write(&mut self, lba: u64, buf: &[u8]) -> Result<()> {
            if std::mem::take(&mut self.fail_next) {
                // Half the write lands: the range is indeterminate.
                self.mem.write(lba, &buf[..512])?;
                return Err(Error::BuffersLost);
            }
            self.mem.write(lba, buf)
        }
        fn flush(&mut self) -> Result<()> {
            self.mem.flush()
        }
    }

    fn device(blocks: u64) -> Counting {
        let mut mem = MemDevice::new(512, blocks);
        for (i, b) in mem.bytes_mut().iter_mut().enumerate() {
            *b = (i * 7 % 251) as u8;
        }
        Counting {
            mem,
            reads: 0,
            blocks_read: 0,
            fail_next: false,
        }
    }

    fn medium(d: &mut Counting, at: usize, len: usize) -> Vec<u8> {
        d.mem.bytes_mut()[at..at + len].to_vec()
    }

    #[test]
    fn an_unaligned_span_is_one_read_and_then_cached() {
        let mut d = device(1024);
        let mut c = BlockCache::new(512, 1024, 64 * 512);
        let mut buf = vec![0; 536];
        // A WAL frame's page: 24 bytes into block 10, across into block 11.
        c.read_at(&mut d, 10, 24, &mut buf).unwrap();
        assert_eq!(buf, medium(&mut d, 10 * 512 + 24, 536));
        assert_eq!((d.reads, d.blocks_read), (1, 2));
        c.read_at(&mut d, 10, 24, &mut buf).unwrap();
        assert_eq!(d.reads, 1, "the second read is served from the cache");
        assert_eq!(c.stats().hits, 2);
    }

    #[test]
    fn a_sequential_miss_reads_ahead_and_a_random_one_does_not() {
        let mut d = device(4096);
        let mut c = BlockCache::new(512, 4096, 1024 * 512);
        let mut buf = vec![0; 512];
        c.read(&mut d, 500, &mut buf).unwrap();
        assert_eq!(d.blocks_read, 1);
        c.read(&mut d, 501, &mut buf).unwrap();
        let ahead = (READ_AHEAD_BYTES / 512) as u64;
        assert_eq!(d.blocks_read, 1 + ahead);
        for lba in 502..501 + ahead {
            c.read(&mut d, lba, &mut buf).unwrap();
            assert_eq!(buf, medium(&mut d, lba as usize * 512, 512), "block {lba}");
        }
        assert_eq!(d.reads, 2, "the window was read with one command");
        c.read(&mut d, 3000, &mut buf).unwrap();
        assert_eq!(
            d.blocks_read,
            2 + ahead,
            "a random miss reads only its block"
        );
        // Read-ahead stops at the end of the device.
        c.read(&mut d, 3001, &mut buf).unwrap();
        c.read(&mut d, 4095, &mut buf).unwrap();
        c.read(&mut d, 4094, &mut buf).unwrap();
        assert_eq!(buf, medium(&mut d, 4094 * 512, 512));
    }

    #[test]
    fn writes_are_seen_by_later_reads_and_reach_the_device() {
        let mut d = device(256);
        let mut c = BlockCache::new(512, 256, 16 * 512);
        let mut buf = vec![0; 3 * 512];
        c.read(&mut d, 4, &mut buf).unwrap();
        let new = vec![0xab; 2 * 512];
        c.write(&mut d, 5, &new).unwrap();
        let reads = d.reads;
        c.read(&mut d, 4, &mut buf).unwrap();
        assert_eq!(d.reads, reads);
        assert_eq!(&buf[512..], &new[..]);
        assert_eq!(buf, medium(&mut d, 4 * 512, 3 * 512));
        // Aliasing slots (lba 21 maps to the slot of 5): the newer block wins.
        c.write(&mut d, 21, &[0xcd; 512]).unwrap();
        c.read(&mut d, 5, &mut buf[..512]).unwrap();
        assert_eq!(&buf[..512], &medium(&mut d, 5 * 512, 512)[..]);
        c.read(&mut d, 21, &mut buf[..512]).unwrap();
        assert_eq!(&buf[..512], &[0xcd; 512][..]);
        // A write larger than the cache.
        let big: Vec<u8> = (0..40 * 512).map(|i| (i % 13) as u8).collect();
        c.write(&mut d, 100, &big).unwrap();
        let mut back = vec![0; big.len()];
        c.read(&mut d, 100, &mut back).unwrap();
        assert_eq!(back, big);
    }

    #[test]
    fn a_patch_keeps_the_rest_of_the_block() {
        let mut d = device(64);
        let mut c = BlockCache::new(512, 64, 16 * 512);
        let before = medium(&mut d, 3 * 512, 512);
        assert!(!c.patch(&mut d, 3, 100, &[9; 24], false).unwrap());
        assert_eq!(d.reads, 1);
        let mut want = before;
        want[100..124].fill(9);
        assert_eq!(medium(&mut d, 3 * 512, 512), want);
        assert!(c.patch(&mut d, 3, 0, &[8; 4], false).unwrap());
        assert_eq!(d.reads, 1, "the second patch found the block cached");
        want[..4].fill(8);
        let mut buf = vec![0; 512];
        c.read(&mut d, 3, &mut buf).unwrap();
        assert_eq!((&buf, d.reads), (&want, 1));
        // Fresh: no read, zeroes around the data, on the device and in the cache.
        assert!(!c.patch(&mut d, 40, 10, &[7; 2], true).unwrap());
        assert_eq!(d.reads, 1);
        let mut want = vec![0; 512];
        want[10..12].fill(7);
        assert_eq!(medium(&mut d, 40 * 512, 512), want);
        c.read(&mut d, 40, &mut buf).unwrap();
        assert_eq!(buf, want);
        // A failed patch empties the cache.
        d.fail_next = true;
        assert!(c.patch(&mut d, 3, 0, &[1; 4], false).is_err());
        c.read(&mut d, 3, &mut buf).unwrap();
        assert_eq!((buf, d.reads), (medium(&mut d, 3 * 512, 512), 2));
    }

    #[test]
    fn a_failed_write_leaves_nothing_cached() {
        let mut d = device(256);
        let mut c = BlockCache::new(512, 256, 16 * 512);
        let mut buf = vec![0; 2 * 512];
        c.read(&mut d, 8, &mut buf).unwrap();
        d.fail_next = true;
        assert!(c.write(&mut d, 8, &[0x55; 1024]).is_err());
        let reads = d.reads;
        c.read(&mut d, 8, &mut buf).unwrap();
        assert_eq!(d.reads, reads + 1, "read again from the device");
        assert_eq!(buf, medium(&mut d, 8 * 512, 1024), "what the device holds");
    }
}
