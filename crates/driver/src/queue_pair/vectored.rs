//! Vectored I/O on PCIe: one Read/Write/Compare whose data is an [`IoVec`] of pieces.
//!
//! The data pointer (NVMe Base 2.0 §4.1) is chosen per request:
//! - the controller offers SGLs (`sgl_mask` is not `u64::MAX`) and every piece meets its
//!   alignment: one SGL Data Block descriptor per piece (§4.1.2.2), in an SGL segment in the
//!   request slot's page, which SGL Descriptor 1 names with a Last Segment descriptor (a
//!   segment of Data Blocks only, §4.1.2); a single piece is one Data Block in the command;
//! - otherwise a PRP list (§4.1.1): every piece but the first starts page aligned and every
//!   piece but the last ends page aligned, so the pages of all pieces, in order, form one PRP
//!   chain (PRP1 = the first piece's address, then every later page start); a piece that
//!   breaks this is refused by index with [`Error::IoVecPiece`] naming the rule.
//!
//! MDTS: a vectored request is one command; above [`QueuePair::max_transfer_bytes`] it is
//! refused with [`Error::IoVecTooLarge`] (not split: splitting would cut pieces or need
//! several commands' completion order for one vector).
//!
//! INVARIANT (as for plain buffers): every check runs before a slot is taken, a refused
//! request gets its whole `IoVec` back untouched in the [`IoFailure`], and the pieces stay in
//! the request slot until every command referencing them is back.

use nvme_core::iovec::{check_vectored, piece_error};
use nvme_core::{Error, IoFailure, IoVec, Namespace, NvmCommand, PieceRule};
use nvme_pool::Tag;
use nvme_spec::queue::SubmissionEntry;
use nvme_spec::sgl::{Psdt, SglDescriptor, SGL_DESCRIPTOR_SIZE};

use super::submit::fill_group_head;
use super::QueuePair;

/// Bytes of one PRP entry (NVMe Base 2.0 §4.1.1).
const PRP_ENTRY_SIZE: usize = 8;

/// How a vectored request's data pointer is built.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// SGL Data Block descriptors, one per piece.
    Sgl,
    /// One PRP chain over the pieces' pages, `entries` after PRP1.
    Prp { entries: usize },
}

impl QueuePair {
    /// Queues a vectored Read, Write or Compare: `pieces` are its data in order (see the
    /// module doc for the PRP and SGL rules). Every piece comes back in order in the
    /// completion's `pieces`; a refused request gets them back in [`IoFailure::pieces`],
    /// untouched. Not queued in the software queue: a full ring refuses with `QueueFull`.
    pub fn submit_vectored<C: NvmCommand>(
        &mut self,
        ns: &Namespace,
        cmd: C,
        pieces: Box<IoVec>,
        user_data: u64,
    ) -> std::result::Result<(), IoFailure> {
        self.submit_vectored_inner(ns, cmd, pieces, user_data)
            .map(drop)
    }

    fn submit_vectored_inner<C: NvmCommand>(
        &mut self,
        ns: &Namespace,
        cmd: C,
        pieces: Box<IoVec>,
        user_data: u64,
    ) -> std::result::Result<Tag, IoFailure> {
        let shape = match self.check_vectored(ns, &cmd, &pieces) {
            Ok(shape) => shape,
            Err(e) => return Err(IoFailure::vectored(e, pieces)),
        };
        if let Err(e) = self.check_room() {
            return Err(IoFailure::vectored(e, pieces));
        }
        let epoch = self.clock.epoch();
        let Some((tag, slot)) = self.tags.alloc_mut() else {
            return Err(IoFailure::vectored(self.queue_full(), pieces));
        };
        let mut sqe = cmd.sqe_on(ns);
        fill_group_head(slot, tag, epoch, sqe.opcode(), user_data, None, 1);
        match shape {
            Shape::Sgl => self.sgl_pointer(&mut sqe, tag.index(), &pieces),
            Shape::Prp { entries } => self.prp_pointer(&mut sqe, tag.index(), &pieces, entries),
        }
        let slot = self.tags.get_mut(tag);
        slot.simple = false;
        let old = slot.pieces.replace(pieces);
        debug_assert!(old.is_none(), "a freed request slot still held pieces");
        std::mem::forget(old);
        self.stats.vectored_requests += 1;
        self.push_command(tag, sqe);
        self.after_submit();
        Ok(tag)
    }

    /// Every check of a vectored request; the data pointer shape it gets.
    fn check_vectored<C: NvmCommand>(
        &self,
        ns: &Namespace,
        cmd: &C,
        pieces: &IoVec,
    ) -> nvme_core::Result<Shape> {
        let bytes = check_vectored(ns, cmd, pieces)?;
        if let Some(p) = pieces.iter().find(|p| p.domain() != self.domain) {
            return Err(self.foreign(p));
        }
        if bytes > self.max_transfer {
            return Err(Error::IoVecTooLarge {
                bytes,
                max_per_command: self.max_transfer,
            });
        }
        cmd.check(ns, &self.command_context(), None)?;
        let sgl_fits =
            |p: &nvme_core::DmaBuffer| (p.iova().0 | p.len() as u64) & self.sgl_mask == 0;
        if self.sgl_mask != u64::MAX && pieces.iter().all(sgl_fits) {
            return Ok(Shape::Sgl);
        }
        // PRP list (NVMe Base 2.0 §4.1.1): a piece after the first starts at a page, one
        // before the last ends at one.
        let page = self.page_size as u64;
        let last = pieces.len() - 1;
        for (i, p) in pieces.iter().enumerate() {
            let start = p.iova().0;
            let rule = if i > 0 && start % page != 0 {
                Some(PieceRule::StartNotPageAligned {
                    page_size: self.page_size,
                })
            } else if i < last && (start + p.len() as u64) % page != 0 {
                Some(PieceRule::EndNotPageAligned {
                    page_size: self.page_size,
                })
            } else {
                None
            };
            if let Some(rule) = rule {
                return Err(piece_error(i, p, rule));
            }
        }
        let entries = prp_entries(pieces, page).count();
        // One list page per command (the driver never chains PRP lists); `max_transfer`
        // keeps a PRP-shaped request within it, this guards the arithmetic.
        if entries > 1 && entries > self.page_size / PRP_ENTRY_SIZE {
            return Err(Error::IoVecTooLarge {
                bytes,
                max_per_command: self.max_transfer,
            });
        }
        Ok(Shape::Prp { entries })
    }

    /// SGL data pointer: a single piece is one Data Block in the command; more are a segment
    /// of Data Blocks in the slot's page named by a Last Segment descriptor (§4.1.2).
    fn sgl_pointer(&mut self, sqe: &mut SubmissionEntry, index: usize, pieces: &IoVec) {
        sqe.set_psdt(Psdt::SglMptrContiguous);
        let descriptor = if pieces.len() == 1 {
            let p = pieces.get(0).expect("one piece");
            SglDescriptor::data_block(p.iova().0, p.len() as u32)
        } else {
            self.pages.write_u64s(
                index,
                pieces.iter().flat_map(|p| {
                    let (a, b) = SglDescriptor::data_block(p.iova().0, p.len() as u32).to_qwords();
                    [a, b]
                }),
            );
            let segment_bytes = (pieces.len() * SGL_DESCRIPTOR_SIZE) as u32;
            SglDescriptor::last_segment(self.pages.iova(index).0, segment_bytes)
        };
        let (prp1, prp2) = descriptor.to_qwords();
        sqe.prp1 = prp1;
        sqe.prp2 = prp2;
    }

    /// PRP data pointer over the pieces' pages: PRP1 is the first piece's address; one more
    /// page goes in PRP2, more in a PRP list in the slot's page (§4.1.1).
    fn prp_pointer(
        &mut self,
        sqe: &mut SubmissionEntry,
        index: usize,
        pieces: &IoVec,
        entries: usize,
    ) {
        let page = self.page_size as u64;
        sqe.set_psdt(Psdt::Prp);
        sqe.prp1 = pieces.get(0).expect("at least one piece").iova().0;
        sqe.prp2 = match entries {
            0 => 0,
            1 => prp_entries(pieces, page).next().expect("one entry"),
            _ => {
                self.pages.write_u64s(index, prp_entries(pieces, page));
                self.pages.iova(index).0
            }
        };
    }
}

/// The PRP entries after PRP1: the start of every page of the transfer but the first piece's
/// first page, in order.
fn prp_entries(pieces: &IoVec, page: u64) -> impl Iterator<Item = u64> + '_ {
    pieces.iter().enumerate().flat_map(move |(i, p)| {
        let start = p.iova().0;
        let end = start + p.len() as u64;
        let first = if i == 0 {
            (start & !(page - 1)) + page
        } else {
            start
        };
        (first..end).step_by(page as usize)
    })
}
