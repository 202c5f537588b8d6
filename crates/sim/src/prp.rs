//! Physical Region Page walking (NVMe Base 2.0 §4.1.1), as the device sees it.
//!
//! A transfer of `len` bytes is described by PRP1 and PRP2:
//! - PRP1 addresses the first byte and may carry an offset into its memory page, which must be
//!   dword aligned;
//! - if the rest fits in one page, PRP2 addresses that page (offset zero);
//! - otherwise PRP2 points to a PRP list: 8-byte entries, each addressing a whole page (offset
//!   zero), filling the list page from PRP2's offset to the end. When more entries are needed
//!   than fit, the last entry of the list page points to the next list page instead of data.
//!
//! The walker allocates nothing; it calls back once per contiguous segment.

use nvme_spec::status::{generic, Status, StatusCodeType};

use crate::dma::{DmaFault, GuestView};

/// Why a command failed before or while moving data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fail {
    /// Complete with this status.
    Status(Status),
    /// The device touched an unmapped IOVA: complete with Data Transfer Error and count it.
    Dma(DmaFault),
}

impl From<DmaFault> for Fail {
    fn from(fault: DmaFault) -> Self {
        Fail::Dma(fault)
    }
}

/// A Generic Command Status value with DNR set.
pub(crate) fn generic_status(sc: u8) -> Status {
    Status::new(StatusCodeType::Generic.raw(), sc, true)
}

fn invalid_offset() -> Fail {
    Fail::Status(generic_status(generic::INVALID_PRP_OFFSET))
}

/// PRP entries are dword aligned (the two low bits are reserved).
const PRP1_ALIGN: u64 = 4;
/// A PRP list pointer addresses 8-byte entries.
const PRP_ENTRY_SIZE: u64 = 8;
/// PRP list entries read from guest memory at once (one 4 KiB page of entries).
const LIST_CHUNK: usize = 512;

/// Calls `segment(iova, seg_len, transfer_offset)` for each piece of a `len`-byte transfer
/// described by `prp1`/`prp2`, in order. `page` is the memory page size (CC.MPS).
pub(crate) fn walk(
    view: &GuestView<'_>,
    prp1: u64,
    prp2: u64,
    len: usize,
    page: usize,
    mut segment: impl FnMut(u64, usize, usize) -> Result<(), Fail>,
) -> Result<(), Fail> {
    if len == 0 {
        return Ok(());
    }
    let page64 = page as u64;
    if prp1 % PRP1_ALIGN != 0 {
        return Err(invalid_offset());
    }
    let first = len.min(page - (prp1 % page64) as usize);
    segment(prp1, first, 0)?;
    let mut done = first;
    if done == len {
        return Ok(());
    }
    if len - done <= page {
        if prp2 % page64 != 0 {
            return Err(invalid_offset());
        }
        return segment(prp2, len - done, done);
    }

    // PRP2 is a PRP list pointer.
    let mut list = prp2;
    let mut entries = [0u64; LIST_CHUNK];
    // Every list page yields at least one data entry unless it only holds a chain pointer;
    // bound the hops so a list that points to itself cannot loop forever.
    let mut hops_left = len.div_ceil(page) + 1;
    loop {
        if list % PRP_ENTRY_SIZE != 0 || hops_left == 0 {
            return Err(invalid_offset());
        }
        hops_left -= 1;
        let slots = ((page64 - list % page64) / PRP_ENTRY_SIZE) as usize;
        let pages_left = (len - done).div_ceil(page);
        let chained = pages_left > slots;
        let data_slots = if chained { slots - 1 } else { pages_left };
        let mut index = 0;
        while index < data_slots {
            let n = (data_slots - index).min(LIST_CHUNK);
            view.read_qwords(list + index as u64 * PRP_ENTRY_SIZE, &mut entries[..n])?;
            for &entry in &entries[..n] {
                if entry % page64 != 0 {
                    return Err(invalid_offset());
                }
                let seg = (len - done).min(page);
                segment(entry, seg, done)?;
                done += seg;
            }
            index += n;
        }
        if done == len {
            return Ok(());
        }
        let mut next = [0u64; 1];
        view.read_qwords(list + (slots as u64 - 1) * PRP_ENTRY_SIZE, &mut next)?;
        list = next[0];
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dma::SimDma;
    use nvme_vfio::dma::PAGE_SIZE;
    use nvme_vfio::DmaMapper;
    use std::ptr::NonNull;

    #[repr(C, align(4096))]
    struct Page([u8; PAGE_SIZE]);

    const PAGES: usize = 8;

    /// Maps `PAGES` pages and returns (dma, iova of page 0, memory).
    fn setup() -> (SimDma, u64, Box<[Page; PAGES]>) {
        let dma = SimDma::new();
        let mut mem = Box::new(std::array::from_fn(|_| Page([0; PAGE_SIZE])));
        let ptr = NonNull::new(mem[0].0.as_mut_ptr()).unwrap();
        // SAFETY: `mem` is returned to the caller, which keeps it alive past `dma`.
        let iova = unsafe { dma.map(ptr, PAGES * PAGE_SIZE) }.unwrap().0;
        (dma, iova, mem)
    }

    fn collect(
        view: &GuestView<'_>,
        prp1: u64,
        prp2: u64,
        len: usize,
    ) -> Result<Vec<(u64, usize, usize)>, Fail> {
        let mut out = Vec::new();
        walk(view, prp1, prp2, len, PAGE_SIZE, |a, l, o| {
            out.push((a, l, o));
            Ok(())
        })?;
        Ok(out)
    }

    fn write_list(mem: &mut [Page; PAGES], page: usize, index: usize, value: u64) {
        mem[page].0[index * 8..index * 8 + 8].copy_from_slice(&value.to_le_bytes());
    }

    #[test]
    fn one_and_two_page_transfers() {
        let (dma, base, _mem) = setup();
        let view = dma.view();
        let p = PAGE_SIZE as u64;
        assert_eq!(
            collect(&view, base + 512, 0, 1024).unwrap(),
            vec![(base + 512, 1024, 0)]
        );
        assert_eq!(
            collect(&view, base + 3072, base + p, 2048).unwrap(),
            vec![(base + 3072, 1024, 0), (base + p, 1024, 1024)]
        );
        assert_eq!(
            collect(&view, base + 2, 0, 4),
            Err(invalid_offset()),
            "PRP1 not dword aligned"
        );
        assert_eq!(
            collect(&view, base, base + p + 8, 8192),
            Err(invalid_offset()),
            "PRP2 offset"
        );
    }

    #[test]
    fn list_with_offset_prp1_and_chaining() {
        let (dma, base, mut mem) = setup();
        let p = PAGE_SIZE as u64;
        // List in page 1 starting at its last two slots: one data entry, then a chain pointer
        // to page 2, whose entries finish the transfer.
        let list = base + p + p - 16;
        write_list(&mut mem, 1, 510, base + 3 * p);
        write_list(&mut mem, 1, 511, base + 2 * p);
        write_list(&mut mem, 2, 0, base + 4 * p);
        write_list(&mut mem, 2, 1, base + 5 * p);
        let view = dma.view();
        // 512 bytes in PRP1's page + 3 full pages.
        let segs = collect(&view, base + p - 512, list, 512 + 3 * PAGE_SIZE).unwrap();
        assert_eq!(
            segs,
            vec![
                (base + p - 512, 512, 0),
                (base + 3 * p, PAGE_SIZE, 512),
                (base + 4 * p, PAGE_SIZE, 512 + PAGE_SIZE),
                (base + 5 * p, PAGE_SIZE, 512 + 2 * PAGE_SIZE),
            ]
        );
    }

    #[test]
    fn misaligned_entry_and_unmapped_list_fail() {
        let (dma, base, mut mem) = setup();
        let p = PAGE_SIZE as u64;
        write_list(&mut mem, 1, 0, base + 2 * p + 4);
        write_list(&mut mem, 1, 1, base + 3 * p);
        let view = dma.view();
        assert_eq!(
            collect(&view, base, base + p, 3 * PAGE_SIZE),
            Err(invalid_offset())
        );
        let unmapped = base + 64 * p;
        assert!(matches!(
            collect(&view, base, unmapped, 3 * PAGE_SIZE),
            Err(Fail::Dma(_))
        ));
    }

    #[test]
    fn self_referencing_list_terminates() {
        let (dma, base, mut mem) = setup();
        let p = PAGE_SIZE as u64;
        let list = base + p + p - 8; // one slot: always a chain pointer when more pages remain
        write_list(&mut mem, 1, 511, list);
        let view = dma.view();
        assert_eq!(
            collect(&view, base, list, 3 * PAGE_SIZE),
            Err(invalid_offset())
        );
    }
}
