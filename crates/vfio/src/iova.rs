//! IOVA allocation: which device addresses each DMA mapping gets.
//!
//! The allocator starts from the valid IOVA ranges the IOMMU reports (the
//! `VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE` capability, parsed by [`parse_iova_ranges`]), or from
//! [`FALLBACK_RANGE`] on kernels without it. It is a first-fit free list keyed by start address:
//! mappings are created at setup time, not per I/O, so simplicity wins over speed.
//!
//! INVARIANTS: free blocks are disjoint, non-adjacent (merged on free) and never contain
//! address 0; every live allocation is recorded with its length, and lies inside one of the
//! original ranges.

use std::collections::BTreeMap;
use std::ops::Range;

use vfio_bindings::bindings::vfio::VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE;

use crate::dma::{DmaError, Iova, HUGEPAGE_SIZE, PAGE_SIZE};

/// IOVA space used when the kernel does not report valid ranges: from 1 MiB (clear of the
/// low addresses some platforms reserve) to 2^39 (within the 39-bit address width that every
/// VT-d and AMD-Vi implementation supports).
pub const FALLBACK_RANGE: Range<u64> = (1 << 20)..(1 << 39);

/// A first-fit allocator of IOVA ranges.
#[derive(Debug)]
pub struct IovaAllocator {
    /// Free blocks: start -> end (exclusive).
    free: BTreeMap<u64, u64>,
    /// Live allocations: start -> length.
    live: BTreeMap<u64, u64>,
    /// Smallest alignment (and length granule) of an allocation.
    granule: u64,
}

fn align_up(value: u64, align: u64) -> Option<u64> {
    debug_assert!(align.is_power_of_two());
    value.checked_add(align - 1).map(|v| v & !(align - 1))
}

impl IovaAllocator {
    /// An allocator over `ranges` (start inclusive, end exclusive). Overlapping ranges are
    /// merged; addresses below `granule` (so IOVA 0) are never handed out. `granule` is the
    /// IOMMU's smallest page size and is raised to [`PAGE_SIZE`] if smaller.
    pub fn new(ranges: &[Range<u64>], granule: u64) -> Self {
        let granule = granule.max(PAGE_SIZE as u64).next_power_of_two();
        let mut this = Self {
            free: BTreeMap::new(),
            live: BTreeMap::new(),
            granule,
        };
        for r in ranges {
            // Whole granules only, and never address 0.
            let (Some(start), end) = (
                align_up(r.start.max(granule), granule),
                r.end & !(granule - 1),
            ) else {
                continue;
            };
            if start < end {
                this.insert_free(start, end);
            }
        }
        this
    }

    /// An allocator over [`FALLBACK_RANGE`].
    pub fn fallback() -> Self {
        Self::new(&[FALLBACK_RANGE], PAGE_SIZE as u64)
    }

    /// Total free bytes.
    pub fn free_bytes(&self) -> u64 {
        self.free.iter().map(|(s, e)| e - s).sum()
    }

    /// Reserves `len` bytes (rounded up to the granule). The start is aligned to
    /// [`HUGEPAGE_SIZE`] when `len >= HUGEPAGE_SIZE` (so the IOMMU can use 2 MiB pages), else
    /// to the granule.
    pub fn allocate(&mut self, len: usize) -> Result<Iova, DmaError> {
        let exhausted = DmaError::IovaExhausted { len };
        let size = align_up((len as u64).max(1), self.granule).ok_or(exhausted)?;
        let align = if size >= HUGEPAGE_SIZE as u64 {
            (HUGEPAGE_SIZE as u64).max(self.granule)
        } else {
            self.granule
        };
        let found = self.free.iter().find_map(|(&start, &end)| {
            let at = align_up(start, align)?;
            (at.checked_add(size)? <= end).then_some((start, end, at))
        });
        let Some((start, end, at)) = found else {
            return Err(DmaError::IovaExhausted { len });
        };
        self.free.remove(&start);
        if start < at {
            self.free.insert(start, at);
        }
        if at + size < end {
            self.free.insert(at + size, end);
        }
        self.live.insert(at, size);
        Ok(Iova(at))
    }

    /// Returns the allocation starting at `iova` to the free list; gives its (rounded) length,
    /// or `None` if no allocation starts there.
    pub fn free(&mut self, iova: Iova) -> Option<u64> {
        let size = self.live.remove(&iova.0)?;
        self.insert_free(iova.0, iova.0 + size);
        Some(size)
    }

    /// Narrows the free space to `ranges` (the IOMMU's valid ranges changed, e.g. because
    /// another IOMMU group joined the container): free bytes outside every range are dropped
    /// for good; live allocations are untouched (the kernel refuses a join that would
    /// invalidate them).
    pub fn restrict(&mut self, ranges: &[Range<u64>]) {
        let before = self.free_bytes();
        let old = std::mem::take(&mut self.free);
        for (start, end) in old {
            for r in ranges {
                let s = align_up(start.max(r.start), self.granule);
                let e = end.min(r.end) & !(self.granule - 1);
                if let Some(s) = s.filter(|&s| s < e) {
                    self.insert_free(s, e);
                }
            }
        }
        let after = self.free_bytes();
        if after != before {
            log::debug!("IOVA space narrowed to {ranges:x?}: {before:#x} -> {after:#x} free bytes");
        }
    }

    /// Adds `[start, end)` to the free list, merging with overlapping or adjacent blocks.
    fn insert_free(&mut self, mut start: u64, mut end: u64) {
        // Absorb every block that overlaps or touches [start, end).
        while let Some((&s, &e)) = self.free.range(..=end).next_back() {
            if e < start {
                break;
            }
            self.free.remove(&s);
            start = start.min(s);
            end = end.max(e);
        }
        self.free.insert(start, end);
    }
}

/// Size of `vfio_info_cap_header` (id: u16, version: u16, next: u32).
const CAP_HEADER_LEN: usize = 8;
/// Offset of `iova_ranges[]` in `vfio_iommu_type1_info_cap_iova_range` (header, nr_iovas,
/// reserved).
const IOVA_RANGES_OFFSET: usize = CAP_HEADER_LEN + 8;
/// Size of one `vfio_iova_range` (start, end: u64 each).
const IOVA_RANGE_LEN: usize = 16;
/// Upper bound on capabilities walked, against a malformed (cyclic) chain.
const MAX_CAPS: usize = 64;

fn read_u16(buf: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(
        buf.get(at..at.checked_add(2)?)?.try_into().ok()?,
    ))
}

fn read_u32(buf: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(
        buf.get(at..at.checked_add(4)?)?.try_into().ok()?,
    ))
}

fn read_u64(buf: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(
        buf.get(at..at.checked_add(8)?)?.try_into().ok()?,
    ))
}

/// Finds the IOVA-range capability in a `VFIO_IOMMU_GET_INFO` buffer whose chain starts at
/// `cap_offset` (offsets are from the start of the buffer; 0 ends the chain). Returns the
/// ranges with exclusive ends (the kernel reports inclusive ends), or `None` when the
/// capability is absent or malformed.
pub fn parse_iova_ranges(buf: &[u8], cap_offset: u32) -> Option<Vec<Range<u64>>> {
    let mut offset = cap_offset as usize;
    for _ in 0..MAX_CAPS {
        if offset == 0 {
            return None;
        }
        let id = read_u16(buf, offset)?;
        let next = read_u32(buf, offset + 4)?;
        if u32::from(id) == VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE {
            let count = read_u32(buf, offset + CAP_HEADER_LEN)? as usize;
            let mut ranges = Vec::with_capacity(count.min(MAX_CAPS));
            for i in 0..count {
                let at = offset + IOVA_RANGES_OFFSET + i * IOVA_RANGE_LEN;
                let (start, last) = (read_u64(buf, at)?, read_u64(buf, at + 8)?);
                if last >= start {
                    ranges.push(start..last.saturating_add(1));
                }
            }
            return Some(ranges);
        }
        offset = next as usize;
    }
    None
}

#[cfg(test)]
// One-range spaces are what these tests mean, not a typo for `(a..b).collect()`.
#[allow(clippy::single_range_in_vec_init)]
mod tests {
    use super::*;

    const KIB4: u64 = PAGE_SIZE as u64;
    const MIB2: u64 = HUGEPAGE_SIZE as u64;

    #[test]
    fn allocations_stay_inside_ranges_and_skip_zero() {
        let ranges = [0..0x10_000, 0x100_000..0x108_000];
        let mut a = IovaAllocator::new(&ranges, KIB4);
        assert_eq!(a.free_bytes(), 0xf000 + 0x8000);
        let mut got = Vec::new();
        while let Ok(iova) = a.allocate(PAGE_SIZE) {
            got.push(iova.0);
        }
        assert_eq!(got.len(), 15 + 8);
        assert!(!got.contains(&0));
        for g in &got {
            assert!(
                ranges.iter().any(|r| r.start <= *g && g + KIB4 <= r.end),
                "{g:#x}"
            );
            assert_eq!(g % KIB4, 0);
        }
        got.sort();
        got.dedup();
        assert_eq!(got.len(), 23, "no IOVA handed out twice");
    }

    #[test]
    fn restrict_drops_free_space_outside_the_new_ranges_only() {
        let mut a = IovaAllocator::new(&[0x10_000..0x20_000], KIB4);
        let live = a.allocate(PAGE_SIZE).unwrap();
        assert_eq!(live.0, 0x10_000);
        // A joining group reserves 0x14_000..0x16_000 (plus everything above 0x1f_000).
        a.restrict(&[0x10_000..0x14_000, 0x16_000..0x1f_000]);
        assert_eq!(a.free_bytes(), 0x3000 + 0x9000);
        let mut got = Vec::new();
        while let Ok(iova) = a.allocate(PAGE_SIZE) {
            got.push(iova.0);
        }
        assert_eq!(got.len(), 12);
        assert!(got
            .iter()
            .all(|&g| !(0x14_000..0x16_000).contains(&g) && g < 0x1f_000 && g != live.0));
        // The live allocation comes back as free space.
        assert_eq!(a.free(live), Some(KIB4));
        assert_eq!(a.allocate(PAGE_SIZE).unwrap(), live);
    }

    #[test]
    fn large_allocations_are_hugepage_aligned() {
        let mut a = IovaAllocator::new(&[0x1000..(1 << 30)], KIB4);
        let small = a.allocate(100).unwrap();
        assert_eq!(small, Iova(0x1000));
        let big = a.allocate(HUGEPAGE_SIZE + 1).unwrap();
        assert_eq!(big.0 % MIB2, 0);
        assert_eq!(
            big.0, MIB2,
            "first 2 MiB boundary above the small allocation"
        );
        // The gap below the big allocation is still usable by small ones.
        let small2 = a.allocate(PAGE_SIZE).unwrap();
        assert_eq!(small2, Iova(0x2000));
        // Its length was rounded up to whole 4 KiB pages.
        assert_eq!(a.free(big), Some(MIB2 + KIB4));
    }

    #[test]
    fn freed_space_is_reused_and_merged() {
        let mut a = IovaAllocator::new(&[FALLBACK_RANGE], KIB4);
        let total = a.free_bytes();
        let x = a.allocate(PAGE_SIZE).unwrap();
        let y = a.allocate(PAGE_SIZE).unwrap();
        let z = a.allocate(PAGE_SIZE).unwrap();
        assert_eq!(
            (x.0, y.0, z.0),
            (1 << 20, (1 << 20) + KIB4, (1 << 20) + 2 * KIB4)
        );
        assert_eq!(a.free(y), Some(KIB4));
        assert_eq!(
            a.allocate(PAGE_SIZE).unwrap(),
            y,
            "first fit reuses the hole"
        );
        assert_eq!(a.free(y), Some(KIB4));
        assert_eq!(a.free(x), Some(KIB4));
        assert_eq!(a.free(z), Some(KIB4));
        assert_eq!(a.free(z), None, "double free is refused");
        assert_eq!(a.free_bytes(), total);
        assert_eq!(
            a.free.len(),
            1,
            "neighbouring free blocks merge back into one"
        );
        // Two pages now fit where x and y were.
        assert_eq!(a.allocate(2 * PAGE_SIZE).unwrap(), x);
    }

    #[test]
    fn exhaustion_is_an_error() {
        let mut a = IovaAllocator::new(&[0x1000..0x3000], KIB4);
        assert!(
            matches!(a.allocate(3 * PAGE_SIZE), Err(DmaError::IovaExhausted { len }) if len == 3 * PAGE_SIZE)
        );
        let first = a.allocate(PAGE_SIZE).unwrap();
        a.allocate(PAGE_SIZE).unwrap();
        assert!(matches!(
            a.allocate(1),
            Err(DmaError::IovaExhausted { len: 1 })
        ));
        a.free(first).unwrap();
        assert_eq!(a.allocate(1).unwrap(), first);
        // A 2 MiB request needs a 2 MiB-aligned hole, which this space lacks.
        let mut b = IovaAllocator::new(&[0x1000..(MIB2 + MIB2 - KIB4)], KIB4);
        assert!(b.allocate(HUGEPAGE_SIZE).is_err());
        assert!(a.allocate(usize::MAX).is_err());
    }

    #[test]
    fn granule_rounds_ranges_and_lengths() {
        let g = 0x10_000; // 64 KiB IOMMU pages
        let mut a = IovaAllocator::new(&[0x1234..0x50_000], g);
        let x = a.allocate(1).unwrap();
        assert_eq!(x, Iova(0x10_000));
        assert_eq!(a.allocate(1).unwrap(), Iova(0x20_000));
        assert_eq!(a.free(x), Some(g));
    }

    /// Builds a GET_INFO-like buffer: 24-byte fixed part, an unrelated capability, then the
    /// IOVA-range capability.
    fn info_buffer(ranges: &[(u64, u64)]) -> (Vec<u8>, u32) {
        let mut buf = vec![0u8; 24];
        let other = buf.len();
        let iova_cap = other + 16;
        // Unrelated capability (id 3, DMA_AVAIL), pointing at the next one.
        buf.extend_from_slice(&3u16.to_ne_bytes());
        buf.extend_from_slice(&1u16.to_ne_bytes());
        buf.extend_from_slice(&(iova_cap as u32).to_ne_bytes());
        buf.extend_from_slice(&[0; 8]);
        buf.extend_from_slice(&(VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE as u16).to_ne_bytes());
        buf.extend_from_slice(&1u16.to_ne_bytes());
        buf.extend_from_slice(&0u32.to_ne_bytes());
        buf.extend_from_slice(&(ranges.len() as u32).to_ne_bytes());
        buf.extend_from_slice(&0u32.to_ne_bytes());
        for (s, e) in ranges {
            buf.extend_from_slice(&s.to_ne_bytes());
            buf.extend_from_slice(&e.to_ne_bytes());
        }
        (buf, other as u32)
    }

    #[test]
    fn parses_iova_range_capability() {
        // A typical x86 answer: everything except the interrupt window at 0xfee00000.
        let (buf, off) = info_buffer(&[(0, 0xfedf_ffff), (0xfef0_0000, u64::MAX)]);
        let ranges = parse_iova_ranges(&buf, off).unwrap();
        assert_eq!(ranges, [0..0xfee0_0000, 0xfef0_0000..u64::MAX]);
        let mut a = IovaAllocator::new(&ranges, KIB4);
        assert_eq!(
            a.allocate(PAGE_SIZE).unwrap(),
            Iova(KIB4),
            "IOVA 0 is skipped"
        );
    }

    #[test]
    fn missing_or_truncated_capability_is_none() {
        let (buf, off) = info_buffer(&[(0, 0xffff)]);
        assert_eq!(parse_iova_ranges(&buf, 0), None);
        assert_eq!(parse_iova_ranges(&buf[..buf.len() - 1], off), None);
        // A chain that loops on itself ends.
        let mut cyclic = vec![0u8; 32];
        cyclic[24..26].copy_from_slice(&3u16.to_ne_bytes());
        cyclic[28..32].copy_from_slice(&24u32.to_ne_bytes());
        assert_eq!(parse_iova_ranges(&cyclic, 24), None);
    }
}
