//! The redo area: batch-atomic writes (SQLite's `SQLITE_IOCAP_BATCH_ATOMIC`, used by a
//! SQLite built with `SQLITE_ENABLE_BATCH_ATOMIC_WRITE`) with one device Flush per commit.
//!
//! The blocks between the second directory copy and the data area (the directory copies end
//! well before the first 1 MiB boundary, `crate::dir::Layout`) are split into two slots. A
//! batch (the database pages SQLite writes between `SQLITE_FCNTL_BEGIN_ATOMIC_WRITE` and
//! `SQLITE_FCNTL_COMMIT_ATOMIC_WRITE`) is written as one record into slot `seq % 2`, then
//! one Flush makes it durable (the commit point), and only then are the pages written to
//! their home blocks, without a Flush of their own. Record layout (little endian), in the
//! slot's first block and the blocks after it:
//!
//! ```text
//! offset  size  field
//!      0     8  magic "NVMEREDO"
//!      8     4  version (1)
//!     12     4  number of writes
//!     16     8  sequence number (rises by one per record)
//!     24     8  directory generation the record belongs to
//!     32     8  the file's length after the batch
//!     40     8  payload bytes (the writes, right after the header)
//!     48     4  CRC32 of header (this field zeroed) and payload
//!     52    12  reserved (0)
//!     64    64  file name (NUL padded)
//!    128        payload: per write, offset u64, length u32, then its bytes
//! ```
//!
//! Rules (`crate::store` keeps them):
//! - a torn record fails its CRC (it covers every payload byte) and is ignored: the batch is
//!   then wholly absent, and its commit was never acknowledged (the Flush had not returned);
//! - the header lies in one block, and one block is always written atomically (AWUPF is
//!   0-based), so a header is old or new, never mixed;
//! - a record is replayed at open only when its generation equals the directory's: every
//!   directory write (`Store::persist`) is preceded by a Flush that made the home writes of
//!   earlier records durable, so the new generation retires them; a write to the batch's
//!   file outside a batch first persists the directory, so an old record can never be
//!   replayed over newer data;
//! - record N+1 goes to the other slot than record N, and record N+2 overwrites N only after
//!   N+1's Flush made N's home writes durable;
//! - formatting zeroes both slot headers (a new store starts at generation 1 again).

use crate::dir::{u32_at, u64_at, Layout, MAX_NAME};
use crate::error::{Error, Result};

/// Magic number at the start of a record.
pub const MAGIC: &[u8; 8] = b"NVMEREDO";
const VERSION: u32 = 1;
const CRC_AT: usize = 48;
const NAME_AT: usize = 64;
const NAME_FIELD: usize = 64;
/// Header bytes before the payload.
const HEADER: usize = NAME_AT + NAME_FIELD;
/// Bytes before each write's data in the payload (offset u64, length u32).
const WRITE_HEADER: usize = 12;
/// Smallest slot worth advertising batch-atomic writes for.
const MIN_SLOT_BYTES: u64 = 64 * 1024;

/// Where the two slots are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Area {
    first: u64,
    slot_blocks: u64,
    block_size: u64,
}

impl Area {
    /// The redo area of `layout`: the blocks between the directory copies and the data area.
    pub(crate) fn new(layout: &Layout) -> Self {
        let first = 2 * layout.dir_blocks;
        Self {
            first,
            slot_blocks: layout.data_start.saturating_sub(first) / 2,
            block_size: u64::from(layout.block_size),
        }
    }

    /// Whether the slots are large enough to offer batch-atomic writes.
    pub(crate) fn usable(&self) -> bool {
        self.slot_blocks * self.block_size >= MIN_SLOT_BYTES
    }

    /// Bytes one record may take.
    pub(crate) fn capacity(&self) -> u64 {
        self.slot_blocks * self.block_size
    }

    /// First LBA of slot `slot` (0 or 1).
    pub(crate) fn slot_lba(&self, slot: u64) -> u64 {
        self.first + (slot % 2) * self.slot_blocks
    }

    /// One block of zeroes (an empty slot header).
    pub(crate) fn blank_header(&self) -> Vec<u8> {
        vec![0; self.block_size as usize]
    }
}

/// A decoded record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Record {
    pub seq: u64,
    pub generation: u64,
    pub name: String,
    pub len: u64,
    pub writes: Vec<(u64, Vec<u8>)>,
}

fn crc(header: &[u8], payload: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&header[..CRC_AT]);
    h.update(&[0; 4]);
    h.update(&header[CRC_AT + 4..HEADER]);
    h.update(payload);
    h.finalize()
}

/// Bytes `writes` take as a record, padded to whole blocks.
pub(crate) fn record_bytes(area: &Area, writes: &[(u64, Vec<u8>)]) -> u64 {
    let payload: u64 = writes.iter().map(|(_, d)| payload_bytes(d.len())).sum();
    padded_record_bytes(area, payload)
}

/// Bytes one write of `len` bytes adds to a record's payload.
pub(crate) fn payload_bytes(len: usize) -> u64 {
    (WRITE_HEADER + len) as u64
}

/// Bytes a record with `payload` payload bytes takes, padded to whole blocks.
pub(crate) fn padded_record_bytes(area: &Area, payload: u64) -> u64 {
    (HEADER as u64 + payload).div_ceil(area.block_size) * area.block_size
}

/// Serialises a record; `None` when it does not fit a slot (or a write is over 4 GiB).
pub(crate) fn encode(area: &Area, rec: &Record) -> Option<Vec<u8>> {
    let total = record_bytes(area, &rec.writes);
    if total > area.capacity() || rec.name.len() > MAX_NAME {
        return None;
    }
    let mut b = Vec::with_capacity(total as usize);
    b.resize(HEADER, 0);
    b[0..8].copy_from_slice(MAGIC);
    b[8..12].copy_from_slice(&VERSION.to_le_bytes());
    b[12..16].copy_from_slice(&u32::try_from(rec.writes.len()).ok()?.to_le_bytes());
    b[16..24].copy_from_slice(&rec.seq.to_le_bytes());
    b[24..32].copy_from_slice(&rec.generation.to_le_bytes());
    b[32..40].copy_from_slice(&rec.len.to_le_bytes());
    b[NAME_AT..NAME_AT + rec.name.len()].copy_from_slice(rec.name.as_bytes());
    for (offset, data) in &rec.writes {
        b.extend_from_slice(&offset.to_le_bytes());
        b.extend_from_slice(&u32::try_from(data.len()).ok()?.to_le_bytes());
        b.extend_from_slice(data);
    }
    let payload = (b.len() - HEADER) as u64;
    b[40..48].copy_from_slice(&payload.to_le_bytes());
    let c = crc(&b[..HEADER], &b[HEADER..]);
    b[CRC_AT..CRC_AT + 4].copy_from_slice(&c.to_le_bytes());
    b.resize(total as usize, 0);
    Some(b)
}

/// What a slot's header says.
pub(crate) enum Header {
    /// No record (no magic, another version, or a header that fails its bounds).
    None,
    /// A record of `bytes` bytes in all (header and payload, padded to blocks).
    Some { bytes: u64 },
}

/// Reads the header block `b` of a slot: how many bytes to read for the whole record.
pub(crate) fn header(area: &Area, b: &[u8]) -> Header {
    if b.len() < HEADER || &b[0..8] != MAGIC || u32_at(b, 8) != VERSION {
        return Header::None;
    }
    let payload = u64_at(b, 40);
    let bytes = (HEADER as u64)
        .saturating_add(payload)
        .div_ceil(area.block_size)
        .saturating_mul(area.block_size);
    if bytes > area.capacity() {
        return Header::None;
    }
    Header::Some { bytes }
}

/// Decodes a whole record read from a slot. `Ok(None)`: torn or stale (the CRC fails).
/// `Err`: a record whose CRC holds but whose contents do not (only a lying device or a bug
/// writes that).
pub(crate) fn decode(b: &[u8]) -> Result<Option<Record>> {
    if b.len() < HEADER {
        return Ok(None);
    }
    let payload_len = u64_at(b, 40) as usize;
    let Some(payload) = b.get(HEADER..HEADER.saturating_add(payload_len)) else {
        return Ok(None);
    };
    let stored = u32_at(b, CRC_AT);
    let computed = crc(&b[..HEADER], payload);
    if stored != computed {
        log::debug!("redo record ignored: CRC {stored:#x} stored, {computed:#x} computed");
        return Ok(None);
    }
    let bad = |why: String| Error::RedoCorrupt(why);
    let name_field = &b[NAME_AT..NAME_AT + NAME_FIELD];
    let end = name_field
        .iter()
        .position(|&c| c == 0)
        .unwrap_or(NAME_FIELD);
    let name = std::str::from_utf8(&name_field[..end])
        .map_err(|_| bad("file name is not UTF-8".into()))?
        .to_owned();
    if name.is_empty() {
        return Err(bad("empty file name".into()));
    }
    let count = u32_at(b, 12) as usize;
    let mut writes = Vec::new();
    let mut at = 0usize;
    for k in 0..count {
        let head = payload
            .get(at..at + WRITE_HEADER)
            .ok_or_else(|| bad(format!("write {k} of {count} runs past the payload")))?;
        let offset = u64_at(head, 0);
        let n = u32_at(head, 8) as usize;
        let data = payload
            .get(at + WRITE_HEADER..at + WRITE_HEADER + n)
            .ok_or_else(|| {
                bad(format!(
                    "write {k} of {count} ({n} bytes) runs past the payload"
                ))
            })?;
        writes.push((offset, data.to_vec()));
        at += WRITE_HEADER + n;
    }
    if at != payload.len() {
        return Err(bad(format!(
            "{} payload bytes after the last of {count} writes",
            payload.len() - at
        )));
    }
    Ok(Some(Record {
        seq: u64_at(b, 16),
        generation: u64_at(b, 24),
        name,
        len: u64_at(b, 32),
        writes,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn area(bs: u32) -> Area {
        Area::new(&Layout::new(bs, (64 << 20) / u64::from(bs)).unwrap())
    }

    fn rec() -> Record {
        Record {
            seq: 7,
            generation: 3,
            name: "app.db".into(),
            len: 12_288,
            writes: vec![(0, vec![1; 4096]), (8192, vec![2; 4096]), (100, vec![3; 5])],
        }
    }

    #[test]
    fn slots_lie_between_the_directory_and_the_data_area() {
        for bs in [512u32, 4096, 65536] {
            let layout = Layout::new(bs, (64 << 20) / u64::from(bs)).unwrap();
            let a = Area::new(&layout);
            assert!(a.usable(), "{bs}");
            assert_eq!(a.slot_lba(0), 2 * layout.dir_blocks);
            assert!(a.slot_lba(1) + a.slot_blocks <= layout.data_start);
        }
    }

    #[test]
    fn a_record_round_trips_and_a_torn_one_is_ignored() {
        let a = area(4096);
        let r = rec();
        let b = encode(&a, &r).unwrap();
        assert_eq!(b.len() % 4096, 0);
        assert!(
            matches!(header(&a, &b[..4096]), Header::Some { bytes } if bytes == b.len() as u64)
        );
        assert_eq!(decode(&b).unwrap(), Some(r.clone()));
        // A torn record: any payload block that did not make it fails the CRC.
        for block in 1..b.len() / 4096 {
            let mut t = b.clone();
            t[block * 4096..(block + 1) * 4096].fill(0);
            assert_eq!(decode(&t).unwrap(), None, "block {block}");
        }
        // Not a record at all.
        assert!(matches!(header(&a, &a.blank_header()), Header::None));
    }

    #[test]
    fn too_large_a_batch_is_refused() {
        let a = area(4096);
        let mut r = rec();
        r.writes = vec![(0, vec![0; a.capacity() as usize])];
        assert!(encode(&a, &r).is_none());
    }

    #[test]
    fn a_checksummed_record_with_bad_contents_is_an_error() {
        let a = area(512);
        let mut b = encode(&a, &rec()).unwrap();
        // Claim one more write than the payload holds and fix the CRC.
        b[12..16].copy_from_slice(&4u32.to_le_bytes());
        let payload = u64_at(&b, 40) as usize;
        let c = crc(&b[..HEADER], &b[HEADER..HEADER + payload]);
        b[CRC_AT..CRC_AT + 4].copy_from_slice(&c.to_le_bytes());
        let e = decode(&b).unwrap_err();
        assert!(e.to_string().contains("runs past the payload"), "{e}");
    }
}
