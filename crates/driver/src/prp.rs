//! Physical Region Page (PRP) data pointers (NVMe Base 2.0 §4.1.1).
//!
//! A transfer of `len` bytes at IOVA `addr` (contiguous in IOVA space, since one `DmaBuffer`
//! is one IOMMU mapping) touches `pages(addr, len)` memory pages:
//! - one page: PRP1 = addr, PRP2 = 0 (the single-page fast path: no list code runs);
//! - two pages: PRP1 = addr, PRP2 = start of the second page;
//! - more: PRP1 = addr, PRP2 = IOVA of a PRP list holding the start of pages 2..n. The list
//!   lives in the request slot's preallocated page, so one list page covers
//!   `page_size / 8 + 1` pages and the driver caps each command's transfer below that (no
//!   chained lists are ever needed).

use nvme_vfio::Iova;

/// Where the data pointer of one command comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PrpLayout {
    /// PRP1 only, or PRP1 + PRP2 as a second page address.
    Direct { prp1: u64, prp2: u64 },
    /// PRP1 + a list of `entries` page addresses starting at `first_list_entry`, step one page.
    List {
        prp1: u64,
        first_list_entry: u64,
        entries: usize,
    },
}

/// Number of memory pages touched by `[addr, addr + len)`.
#[cfg(test)]
pub(crate) fn pages(addr: Iova, len: usize, page_size: usize) -> usize {
    let offset = (addr.0 as usize) & (page_size - 1);
    (offset + len).div_ceil(page_size)
}

/// Computes the data pointer for a transfer. `len` must be non-zero and `addr` dword-aligned
/// (checked by the caller, which reports the error to the user).
#[inline(always)]
pub(crate) fn layout(addr: Iova, len: usize, page_size: usize) -> PrpLayout {
    debug_assert!(len > 0 && addr.0 % 4 == 0);
    let offset = (addr.0 as usize) & (page_size - 1);
    let first_page_bytes = page_size - offset;
    if len <= first_page_bytes {
        return PrpLayout::Direct {
            prp1: addr.0,
            prp2: 0,
        };
    }
    let second_page = addr.0 + first_page_bytes as u64;
    if len <= first_page_bytes + page_size {
        return PrpLayout::Direct {
            prp1: addr.0,
            prp2: second_page,
        };
    }
    let entries = (len - first_page_bytes).div_ceil(page_size);
    PrpLayout::List {
        prp1: addr.0,
        first_list_entry: second_page,
        entries,
    }
}

/// Most bytes one command can move with a single PRP list page, for a buffer that starts
/// page-aligned (the worst case, an unaligned start, loses at most one page of it).
pub(crate) fn max_bytes_with_one_list(page_size: usize) -> usize {
    // One page through PRP1 plus one entry per u64 of the list page, minus one page to cover
    // an unaligned start.
    (page_size / 8) * page_size
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: usize = 4096;

    #[test]
    fn single_page_uses_prp1_only() {
        assert_eq!(
            layout(Iova(0x10000), 512, PAGE),
            PrpLayout::Direct {
                prp1: 0x10000,
                prp2: 0
            }
        );
        assert_eq!(
            layout(Iova(0x10000), 4096, PAGE),
            PrpLayout::Direct {
                prp1: 0x10000,
                prp2: 0
            }
        );
        // Offset start that still fits in the first page.
        assert_eq!(
            layout(Iova(0x10200), 3584, PAGE),
            PrpLayout::Direct {
                prp1: 0x10200,
                prp2: 0
            }
        );
    }

    #[test]
    fn two_pages_use_prp2_as_page_pointer() {
        assert_eq!(
            layout(Iova(0x10000), 8192, PAGE),
            PrpLayout::Direct {
                prp1: 0x10000,
                prp2: 0x11000
            }
        );
        // 4 KiB starting mid-page crosses into a second page.
        assert_eq!(
            layout(Iova(0x10200), 4096, PAGE),
            PrpLayout::Direct {
                prp1: 0x10200,
                prp2: 0x11000
            }
        );
        assert_eq!(pages(Iova(0x10200), 4096, PAGE), 2);
    }

    #[test]
    fn three_or_more_pages_use_a_list() {
        assert_eq!(
            layout(Iova(0x10000), 12288, PAGE),
            PrpLayout::List {
                prp1: 0x10000,
                first_list_entry: 0x11000,
                entries: 2
            }
        );
        assert_eq!(
            layout(Iova(0x10800), 8192, PAGE),
            PrpLayout::List {
                prp1: 0x10800,
                first_list_entry: 0x11000,
                entries: 2
            }
        );
        let big = max_bytes_with_one_list(PAGE);
        match layout(Iova(0x10004), big, PAGE) {
            PrpLayout::List { entries, .. } => assert!(entries <= PAGE / 8),
            other => panic!("unexpected {other:?}"),
        }
    }
}
