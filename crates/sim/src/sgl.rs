//! Scatter Gather List walking (NVMe Base 2.0 §4.1.2), as the device sees it, and the choice
//! between PRPs and SGLs by a command's PSDT (CDW0 bits 15:14).
//!
//! SGL Descriptor 1 sits in the command's Data Pointer. A Data Block descriptor there is the
//! whole buffer; a Segment or Last Segment descriptor points to an array of descriptors in
//! guest memory, read in chunks. Inside a segment every descriptor is a Data Block except
//! possibly the last, which may be a Segment (more follow) or a Last Segment (the final array,
//! which holds Data Blocks only). The emulator offers sub type Address only, no Bit Bucket,
//! no Keyed or Transport descriptors (Identify SGLS = 01b: byte granularity), and requires
//! the descriptors to add up to exactly the transfer length (SGLS bit 18 "longer SGL" clear).
//!
//! Like the PRP walker this allocates nothing; it calls back once per piece, split at memory
//! page boundaries so a buffer spanning adjacent IOMMU mappings works as it does with PRPs.

use nvme_spec::queue::SubmissionEntry;
use nvme_spec::sgl::{descriptor_subtype, descriptor_type, Psdt, SglDescriptor};
use nvme_spec::status::generic;

use crate::dma::GuestView;
use crate::prp::{self, generic_status, Fail};

/// Descriptors read from guest memory at once.
const CHUNK: usize = 32;
/// Segments followed before a command is refused (bounds a list that points to itself).
pub(crate) const MAX_SEGMENTS: usize = 256;

fn fail(sc: u8) -> Fail {
    Fail::Status(generic_status(sc))
}

/// Walks the data pointer of an I/O command by its PSDT: PRPs (00b), or an SGL (01b, MPTR
/// then a contiguous metadata buffer) when `sgl_offered`. 10b (metadata SGL) is not offered
/// and 11b is reserved: Invalid Field in Command.
pub(crate) fn walk_data_pointer(
    view: &GuestView<'_>,
    sqe: &SubmissionEntry,
    sgl_offered: bool,
    len: usize,
    page: usize,
    segment: impl FnMut(u64, usize, usize) -> Result<(), Fail>,
) -> Result<(), Fail> {
    match Psdt::from_raw(sqe.psdt()) {
        Some(Psdt::Prp) => prp::walk(view, sqe.prp1, sqe.prp2, len, page, segment),
        Some(Psdt::SglMptrContiguous) if sgl_offered => walk(
            view,
            SglDescriptor::from_qwords(sqe.prp1, sqe.prp2),
            len,
            page,
            segment,
        ),
        _ => Err(fail(generic::INVALID_FIELD)),
    }
}

/// Calls `segment(iova, piece_len, transfer_offset)` for each piece of a `len`-byte transfer
/// described by the SGL whose first descriptor is `first`. `page` is the memory page size.
pub(crate) fn walk(
    view: &GuestView<'_>,
    first: SglDescriptor,
    len: usize,
    page: usize,
    mut segment: impl FnMut(u64, usize, usize) -> Result<(), Fail>,
) -> Result<(), Fail> {
    let mut done = 0usize;
    let mut data = |d: &SglDescriptor| -> Result<(), Fail> {
        if d.subtype() != descriptor_subtype::ADDRESS {
            return Err(fail(generic::SGL_DESCRIPTOR_TYPE_INVALID));
        }
        let n = d.length as usize;
        if n > len - done {
            return Err(fail(generic::DATA_SGL_LENGTH_INVALID));
        }
        let mut at = 0usize;
        while at < n {
            let addr = d.address.wrapping_add(at as u64);
            let step = (n - at).min(page - (addr as usize & (page - 1)));
            segment(addr, step, done + at)?;
            at += step;
        }
        done += n;
        Ok(())
    };
    let mut next = match first.descriptor_type() {
        descriptor_type::DATA_BLOCK => {
            data(&first)?;
            None
        }
        descriptor_type::SEGMENT | descriptor_type::LAST_SEGMENT => Some(first),
        _ => return Err(fail(generic::SGL_DESCRIPTOR_TYPE_INVALID)),
    };
    let mut segments = 0;
    let mut raw = [0u64; 2 * CHUNK];
    while let Some(seg) = next.take() {
        segments += 1;
        if segments > MAX_SEGMENTS {
            return Err(fail(generic::INVALID_NUMBER_OF_SGL_DESCRIPTORS));
        }
        let size = SglDescriptor::SIZE as u32;
        if seg.subtype() != descriptor_subtype::ADDRESS {
            return Err(fail(generic::SGL_DESCRIPTOR_TYPE_INVALID));
        }
        if seg.length == 0 || seg.length % size != 0 {
            return Err(fail(generic::INVALID_SGL_SEGMENT_DESCRIPTOR));
        }
        let last = seg.descriptor_type() == descriptor_type::LAST_SEGMENT;
        let count = (seg.length / size) as usize;
        let mut index = 0;
        while index < count {
            let n = (count - index).min(CHUNK);
            view.read_qwords(
                seg.address + (index * SglDescriptor::SIZE) as u64,
                &mut raw[..2 * n],
            )?;
            for k in 0..n {
                let d = SglDescriptor::from_qwords(raw[2 * k], raw[2 * k + 1]);
                match d.descriptor_type() {
                    descriptor_type::DATA_BLOCK => data(&d)?,
                    descriptor_type::SEGMENT | descriptor_type::LAST_SEGMENT => {
                        // Only the last descriptor of a segment that is not itself the last
                        // may point further (§4.1.2: Invalid SGL Segment Descriptor).
                        if last || index + k + 1 != count {
                            return Err(fail(generic::INVALID_SGL_SEGMENT_DESCRIPTOR));
                        }
                        next = Some(d);
                    }
                    _ => return Err(fail(generic::SGL_DESCRIPTOR_TYPE_INVALID)),
                }
            }
            index += n;
        }
    }
    if done != len {
        return Err(fail(generic::DATA_SGL_LENGTH_INVALID));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dma::SimDma;
    use nvme_spec::status::Status;
    use nvme_vfio::dma::PAGE_SIZE;
    use nvme_vfio::DmaMapper;
    use std::ptr::NonNull;

    #[repr(C, align(4096))]
    struct Page([u8; PAGE_SIZE]);

    const PAGES: usize = 8;
    const P: u64 = PAGE_SIZE as u64;

    fn setup() -> (SimDma, u64, Box<[Page; PAGES]>) {
        let dma = SimDma::new();
        let mut mem = Box::new(std::array::from_fn(|_| Page([0; PAGE_SIZE])));
        let ptr = NonNull::new(mem[0].0.as_mut_ptr()).unwrap();
        // SAFETY: `mem` is returned to the caller, which keeps it alive past `dma`.
        let iova = unsafe { dma.map(ptr, PAGES * PAGE_SIZE) }.unwrap().0;
        (dma, iova, mem)
    }

    /// Writes descriptors into guest page `page` from byte `at`.
    fn put(mem: &mut [Page; PAGES], page: usize, at: usize, ds: &[SglDescriptor]) {
        for (i, d) in ds.iter().enumerate() {
            let o = at + i * 16;
            mem[page].0[o..o + 16].copy_from_slice(&d.to_bytes());
        }
    }

    fn collect(
        view: &GuestView<'_>,
        first: SglDescriptor,
        len: usize,
    ) -> Result<Vec<(u64, usize, usize)>, Fail> {
        let mut out = Vec::new();
        walk(view, first, len, PAGE_SIZE, |a, l, o| {
            out.push((a, l, o));
            Ok(())
        })?;
        Ok(out)
    }

    fn sc(f: Result<Vec<(u64, usize, usize)>, Fail>) -> u8 {
        match f {
            Err(Fail::Status(s)) => {
                assert_eq!(s, Status::new(0, s.sc(), true));
                s.sc()
            }
            other => panic!("expected a status, got {other:?}"),
        }
    }

    #[test]
    fn one_data_block_in_the_command_split_at_pages() {
        let (dma, base, _mem) = setup();
        let view = dma.view();
        let d = SglDescriptor::data_block(base + 512, 2 * PAGE_SIZE as u32);
        assert_eq!(
            collect(&view, d, 2 * PAGE_SIZE).unwrap(),
            vec![
                (base + 512, PAGE_SIZE - 512, 0),
                (base + P, PAGE_SIZE, PAGE_SIZE - 512),
                (base + 2 * P, 512, 2 * PAGE_SIZE - 512),
            ]
        );
        // Byte granularity: an odd address and length are fine.
        let d = SglDescriptor::data_block(base + 3, 5);
        assert_eq!(collect(&view, d, 5).unwrap(), vec![(base + 3, 5, 0)]);
    }

    #[test]
    fn segment_chain_then_last_segment() {
        let (dma, base, mut mem) = setup();
        // Segment in page 1: two data blocks and a Last Segment pointer to page 2, which holds
        // one more data block.
        put(
            &mut mem,
            1,
            0,
            &[
                SglDescriptor::data_block(base + 4 * P, 1024),
                SglDescriptor::data_block(base + 5 * P + 100, 200),
                SglDescriptor::last_segment(base + 2 * P + 32, 16),
            ],
        );
        put(
            &mut mem,
            2,
            32,
            &[SglDescriptor::data_block(base + 6 * P, 2048)],
        );
        let view = dma.view();
        let first = SglDescriptor::segment(base + P, 48);
        assert_eq!(
            collect(&view, first, 1024 + 200 + 2048).unwrap(),
            vec![
                (base + 4 * P, 1024, 0),
                (base + 5 * P + 100, 200, 1024),
                (base + 6 * P, 2048, 1224),
            ]
        );
        // The same list described as too short or too long for the transfer.
        assert_eq!(
            sc(collect(&view, first, 4000)),
            generic::DATA_SGL_LENGTH_INVALID
        );
        assert_eq!(
            sc(collect(&view, first, 3000)),
            generic::DATA_SGL_LENGTH_INVALID
        );
    }

    #[test]
    fn many_descriptors_span_chunks() {
        let (dma, base, mut mem) = setup();
        let n = CHUNK + 5;
        let ds: Vec<_> = (0..n)
            .map(|i| SglDescriptor::data_block(base + 3 * P + 64 * i as u64, 64))
            .collect();
        put(&mut mem, 1, 0, &ds);
        let view = dma.view();
        let segs = collect(
            &view,
            SglDescriptor::last_segment(base + P, 16 * n as u32),
            64 * n,
        )
        .unwrap();
        assert_eq!(segs.len(), n);
        assert_eq!(
            segs[n - 1],
            (base + 3 * P + 64 * (n as u64 - 1), 64, 64 * (n - 1))
        );
    }

    #[test]
    fn malformed_lists_fail_with_their_status() {
        let (dma, base, mut mem) = setup();
        // A segment pointer that is not the last descriptor of its segment.
        put(
            &mut mem,
            1,
            0,
            &[
                SglDescriptor::segment(base + 2 * P, 16),
                SglDescriptor::data_block(base + 4 * P, 512),
            ],
        );
        // The last segment itself pointing further.
        put(&mut mem, 2, 0, &[SglDescriptor::segment(base + 3 * P, 16)]);
        // A segment that points to itself.
        put(&mut mem, 3, 0, &[SglDescriptor::segment(base + 3 * P, 16)]);
        let view = dma.view();
        assert_eq!(
            sc(collect(&view, SglDescriptor::segment(base + P, 32), 512)),
            generic::INVALID_SGL_SEGMENT_DESCRIPTOR
        );
        assert_eq!(
            sc(collect(
                &view,
                SglDescriptor::last_segment(base + 2 * P, 16),
                512
            )),
            generic::INVALID_SGL_SEGMENT_DESCRIPTOR
        );
        assert_eq!(
            sc(collect(
                &view,
                SglDescriptor::segment(base + 3 * P, 16),
                512
            )),
            generic::INVALID_NUMBER_OF_SGL_DESCRIPTORS
        );
        assert_eq!(
            sc(collect(&view, SglDescriptor::segment(base + P, 24), 512)),
            generic::INVALID_SGL_SEGMENT_DESCRIPTOR,
            "segment length not a multiple of 16"
        );
        let bit_bucket = SglDescriptor::new(descriptor_type::BIT_BUCKET, 0, 512);
        assert_eq!(
            sc(collect(&view, bit_bucket, 512)),
            generic::SGL_DESCRIPTOR_TYPE_INVALID
        );
        let offset = SglDescriptor::from_qwords(base, 512 | 0x01 << 56);
        assert_eq!(
            sc(collect(&view, offset, 512)),
            generic::SGL_DESCRIPTOR_TYPE_INVALID
        );
        // A segment outside every mapping is a DMA fault (Data Transfer Error upstream).
        let unmapped = SglDescriptor::last_segment(base + 64 * P, 16);
        assert!(matches!(collect(&view, unmapped, 512), Err(Fail::Dma(_))));
    }

    #[test]
    fn psdt_selects_prp_or_sgl() {
        let (dma, base, _mem) = setup();
        let view = dma.view();
        let mut sqe = SubmissionEntry::new(0x02);
        let (q0, q1) = SglDescriptor::data_block(base + 8, 1024).to_qwords();
        sqe.prp1 = q0;
        sqe.prp2 = q1;
        sqe.set_psdt(Psdt::SglMptrContiguous);
        let mut seen = Vec::new();
        let mut record = |a: u64, l: usize, o: usize| {
            seen.push((a, l, o));
            Ok(())
        };
        walk_data_pointer(&view, &sqe, true, 1024, PAGE_SIZE, &mut record).unwrap();
        assert_eq!(seen, vec![(base + 8, 1024, 0)]);
        let refused = walk_data_pointer(&view, &sqe, false, 1024, PAGE_SIZE, |_, _, _| Ok(()));
        assert_eq!(
            refused,
            Err(fail(generic::INVALID_FIELD)),
            "SGL not offered"
        );
        sqe.set_psdt(Psdt::SglMptrSgl);
        let refused = walk_data_pointer(&view, &sqe, true, 1024, PAGE_SIZE, |_, _, _| Ok(()));
        assert_eq!(refused, Err(fail(generic::INVALID_FIELD)), "metadata SGL");
        sqe.set_psdt(Psdt::Prp);
        sqe.prp2 = 0;
        let mut seen = Vec::new();
        walk_data_pointer(&view, &sqe, false, 1024, PAGE_SIZE, |a, l, o| {
            seen.push((a, l, o));
            Ok(())
        })
        .unwrap();
        assert_eq!(seen, vec![(base + 8, 1024, 0)]);
    }
}
