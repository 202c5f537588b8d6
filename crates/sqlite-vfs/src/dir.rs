//! The on-disk directory: two copies (A at LBA 0, B right after it), each `dir_bytes` long
//! (4 KiB or one block, whichever is larger):
//!
//! ```text
//! offset  size  field
//!      0     8  magic "NVMESQLT"
//!      8     4  version (1)
//!     12     4  entry slots (MAX_FILES)
//!     16     8  generation (copy g lives in slot g % 2; the valid copy with the highest wins)
//!     24     4  block size in bytes
//!     28     4  reserved (0)
//!     32     8  first LBA of the data area
//!     40     8  blocks covered by the store (the namespace size when formatted)
//!     48    12  reserved (0)
//!     60     4  CRC32 of the whole copy with this field zeroed
//!     64  96*N  entries: name[64] (NUL padded; empty = free), start LBA u64,
//!               allocated blocks u64, byte length u64, reserved u64
//! ```
//! All integers little endian.

/// Magic number at the start of each directory copy.
pub const MAGIC: &[u8; 8] = b"NVMESQLT";
/// Format version.
pub const VERSION: u32 = 1;
/// Entry slots in the directory.
pub const MAX_FILES: usize = 32;
/// Longest file name in bytes.
pub const MAX_NAME: usize = 63;
/// Minimum size of one directory copy.
pub const MIN_DIR_BYTES: usize = 4096;

const HEADER: usize = 64;
const ENTRY: usize = 96;
const NAME_FIELD: usize = 64;
const CRC_AT: usize = 60;

/// One file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// File name as SQLite gives it.
    pub name: String,
    /// First LBA of its extent.
    pub start: u64,
    /// Blocks in its extent.
    pub alloc: u64,
    /// Current length in bytes (<= alloc * block size).
    pub len: u64,
}

/// Geometry of the store on a namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// Block size in bytes.
    pub block_size: u32,
    /// Blocks per directory copy.
    pub dir_blocks: u64,
    /// First LBA of the data area (1 MiB aligned).
    pub data_start: u64,
    /// Blocks covered.
    pub total_blocks: u64,
}

impl Layout {
    /// The layout for a device of `blocks` blocks of `block_size`.
    pub fn new(block_size: u32, blocks: u64) -> crate::Result<Self> {
        if !block_size.is_power_of_two() || !(512..=65536).contains(&block_size) {
            return Err(crate::Error::BlockSize(block_size));
        }
        let bs = u64::from(block_size);
        let dir_blocks = (MIN_DIR_BYTES as u64).div_ceil(bs);
        let align = ((1 << 20) / bs).max(1);
        let data_start = (2 * dir_blocks).div_ceil(align) * align;
        let needed = data_start + align;
        if blocks < needed {
            return Err(crate::Error::TooSmall {
                blocks,
                block_size,
                needed,
            });
        }
        Ok(Self {
            block_size,
            dir_blocks,
            data_start,
            total_blocks: blocks,
        })
    }

    /// Bytes per directory copy.
    pub fn dir_bytes(&self) -> usize {
        (self.dir_blocks * u64::from(self.block_size)) as usize
    }

    /// First LBA of directory copy `slot` (0 or 1).
    pub fn dir_lba(&self, slot: u64) -> u64 {
        slot * self.dir_blocks
    }
}

/// What a directory copy holds.
#[derive(Debug)]
pub enum Decoded {
    /// No magic number: never written.
    Blank,
    /// Magic present but the copy is unusable, and why.
    Corrupt(String),
    /// A valid copy: its generation and entries.
    Valid {
        /// Generation number.
        generation: u64,
        /// Files.
        entries: Vec<Entry>,
    },
}

/// Little-endian u32 at `at` (the caller bounds `at + 4` by the block).
pub(crate) fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut a = [0; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(a)
}

/// Little-endian u64 at `at` (the caller bounds `at + 8` by the block).
pub(crate) fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

fn checksum(copy: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&copy[..CRC_AT]);
    h.update(&[0; 4]);
    h.update(&copy[CRC_AT + 4..]);
    h.finalize()
}

/// Serialises one directory copy.
pub fn encode(layout: &Layout, generation: u64, entries: &[Entry]) -> Vec<u8> {
    let mut b = vec![0u8; layout.dir_bytes()];
    b[0..8].copy_from_slice(MAGIC);
    b[8..12].copy_from_slice(&VERSION.to_le_bytes());
    b[12..16].copy_from_slice(&(MAX_FILES as u32).to_le_bytes());
    b[16..24].copy_from_slice(&generation.to_le_bytes());
    b[24..28].copy_from_slice(&layout.block_size.to_le_bytes());
    b[32..40].copy_from_slice(&layout.data_start.to_le_bytes());
    b[40..48].copy_from_slice(&layout.total_blocks.to_le_bytes());
    for (i, e) in entries.iter().take(MAX_FILES).enumerate() {
        let at = HEADER + i * ENTRY;
        let name = e.name.as_bytes();
        b[at..at + name.len().min(MAX_NAME)].copy_from_slice(&name[..name.len().min(MAX_NAME)]);
        b[at + NAME_FIELD..at + NAME_FIELD + 8].copy_from_slice(&e.start.to_le_bytes());
        b[at + NAME_FIELD + 8..at + NAME_FIELD + 16].copy_from_slice(&e.alloc.to_le_bytes());
        b[at + NAME_FIELD + 16..at + NAME_FIELD + 24].copy_from_slice(&e.len.to_le_bytes());
    }
    let crc = checksum(&b);
    b[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_le_bytes());
    b
}

/// Parses and validates one directory copy against the layout of the device it was read from.
pub fn decode(layout: &Layout, b: &[u8]) -> Decoded {
    if b.len() < layout.dir_bytes() || &b[0..8] != MAGIC {
        return Decoded::Blank;
    }
    let b = &b[..layout.dir_bytes()];
    let stored = u32_at(b, CRC_AT);
    let computed = checksum(b);
    if stored != computed {
        return Decoded::Corrupt(format!(
            "bad checksum (stored {stored:#010x}, computed {computed:#010x})"
        ));
    }
    match check(layout, b) {
        Ok((generation, entries)) => Decoded::Valid {
            generation,
            entries,
        },
        Err(why) => Decoded::Corrupt(why),
    }
}

fn check(layout: &Layout, b: &[u8]) -> Result<(u64, Vec<Entry>), String> {
    let version = u32_at(b, 8);
    if version != VERSION {
        return Err(format!("version {version}, this build reads {VERSION}"));
    }
    let slots = u32_at(b, 12) as usize;
    if slots != MAX_FILES {
        return Err(format!("{slots} entry slots, expected {MAX_FILES}"));
    }
    let bs = u32_at(b, 24);
    if bs != layout.block_size {
        return Err(format!(
            "written for {bs} B blocks, the namespace has {} B blocks",
            layout.block_size
        ));
    }
    let data_start = u64_at(b, 32);
    if data_start != layout.data_start {
        return Err(format!(
            "data area at LBA {data_start}, expected {}",
            layout.data_start
        ));
    }
    let total = u64_at(b, 40);
    if total > layout.total_blocks || total <= data_start {
        return Err(format!(
            "covers {total} blocks, the namespace has {}",
            layout.total_blocks
        ));
    }
    let bs = u64::from(bs);
    let mut entries: Vec<Entry> = Vec::new();
    for i in 0..MAX_FILES {
        let at = HEADER + i * ENTRY;
        let raw = &b[at..at + NAME_FIELD];
        let end = raw.iter().position(|&c| c == 0).unwrap_or(NAME_FIELD);
        if end == 0 {
            continue;
        }
        if end > MAX_NAME || raw[end..].iter().any(|&c| c != 0) {
            return Err(format!("entry {i}: malformed name"));
        }
        let name = std::str::from_utf8(&raw[..end])
            .map_err(|_| format!("entry {i}: name is not UTF-8"))?
            .to_owned();
        let start = u64_at(b, at + NAME_FIELD);
        let alloc = u64_at(b, at + NAME_FIELD + 8);
        let len = u64_at(b, at + NAME_FIELD + 16);
        let end_lba = start.checked_add(alloc);
        if alloc > 0 && (start < data_start || !matches!(end_lba, Some(e) if e <= total)) {
            return Err(format!(
                "entry `{name}`: extent {start}+{alloc} outside the data area"
            ));
        }
        if !matches!(alloc.checked_mul(bs), Some(cap) if len <= cap) {
            return Err(format!(
                "entry `{name}`: length {len} exceeds its {alloc} blocks"
            ));
        }
        for other in &entries {
            if other.name == name {
                return Err(format!("entry `{name}` appears twice"));
            }
            if alloc > 0
                && other.alloc > 0
                && start < other.start + other.alloc
                && other.start < start + alloc
            {
                return Err(format!("entries `{name}` and `{}` overlap", other.name));
            }
        }
        entries.push(Entry {
            name,
            start,
            alloc,
            len,
        });
    }
    Ok((u64_at(b, 16), entries))
}
