//! Submission: a command takes a free slot of the tag set (its command id is the tag's cid:
//! slot index plus generation), gets its SGL (in-capsule data or transport data by R2T), and
//! its capsule is appended to the send buffer.
//!
//! INVARIANT: a refused submission (queue failed, no free slot) gives its buffer back in the
//! [`IoFailure`] and touches no slot; a busy slot keeps the command exactly as sent, so a
//! resubmission on a new connection sends it unchanged.

use nvme_core::{DmaBuffer, Error, IoFailure, IoVec};
use nvme_spec::tcp::{self, pdu_type, CapsuleCmd, PduFrame};
use nvme_spec::SubmissionEntry;

use super::{Queue, Tag, Waiter};
use crate::r2t::R2tState;

impl Queue {
    /// Starts a batch: reserves `n` slots (all or nothing) and holds the capsules in the send
    /// buffer until [`Queue::unplug`].
    pub(crate) fn plug(&mut self, n: u16) -> Result<(), Error> {
        self.tags.plug(n).map_err(|_| Error::QueueFull {
            qid: self.qid,
            depth: u32::from(self.capacity()) + 1,
        })?;
        self.plugged = true;
        Ok(())
    }

    /// Ends a batch: unused reservations go back to the free slots (the caller flushes).
    pub(crate) fn unplug(&mut self) {
        self.tags.unplug();
        self.plugged = false;
    }

    /// Holds capsules in the send buffer (as a plugged batch does) until
    /// [`Queue::release_tx`]; returns what to pass to it.
    pub(crate) fn hold_tx(&mut self) -> bool {
        std::mem::replace(&mut self.plugged, true)
    }

    /// Ends [`Queue::hold_tx`]: sends what is held unless a plugged batch was already open.
    pub(crate) fn release_tx(&mut self, was_plugged: bool) {
        self.plugged = was_plugged;
        if !was_plugged {
            self.flush_tx();
        }
    }

    /// Sends a command capsule. `buffer` holds `len` bytes of data moving in the direction
    /// `to_device` says (ignored when `len` is 0). On a refusal the buffer comes back.
    pub(crate) fn submit(
        &mut self,
        mut sqe: SubmissionEntry,
        buffer: Option<DmaBuffer>,
        len: usize,
        to_device: bool,
        user_data: u64,
        waiter: Waiter,
    ) -> Result<(), IoFailure> {
        if let Some(error) = self.closed_error() {
            return Err(IoFailure {
                error,
                buffer,
                pieces: None,
            });
        }
        let epoch = self.clock.epoch();
        let in_capsule = to_device && len > 0 && len <= self.in_capsule_max;
        let Some((tag, slot)) = self.tags.alloc_mut() else {
            return Err(IoFailure {
                error: Error::QueueFull {
                    qid: self.qid,
                    depth: u32::from(self.capacity()) + 1,
                },
                buffer,
                pieces: None,
            });
        };
        sqe.set_cid(tag.cid());
        if in_capsule {
            sqe.set_sgl(tcp::sgl::IN_CAPSULE_DATA, 0, len as u32);
        } else {
            sqe.set_sgl(tcp::sgl::TRANSPORT_DATA, 0, len as u32);
        }
        slot.to_device = to_device;
        slot.waiter = waiter;
        slot.opcode = sqe.opcode();
        slot.len = if buffer.is_some() { len } else { 0 };
        slot.received = 0;
        slot.epoch = epoch;
        slot.user_data = user_data;
        slot.buffer = buffer;
        slot.sqe = sqe;
        slot.expired = false;
        slot.abort_sent = false;
        slot.r2t = R2tState::new(if in_capsule { len } else { 0 });
        self.encode(tag);
        if !self.plugged {
            self.flush_tx();
        }
        Ok(())
    }

    /// Sends a vectored command's capsule: its `len` bytes of data are `pieces`, in order,
    /// moving in the direction `to_device` says. A write's data always goes by R2T (never in
    /// the capsule), as H2CData PDUs that each stay within one piece. On a refusal the pieces
    /// come back.
    pub(crate) fn submit_vectored(
        &mut self,
        mut sqe: SubmissionEntry,
        pieces: Box<IoVec>,
        len: usize,
        to_device: bool,
        user_data: u64,
        waiter: Waiter,
    ) -> Result<(), IoFailure> {
        if let Some(error) = self.closed_error() {
            return Err(IoFailure::vectored(error, pieces));
        }
        let epoch = self.clock.epoch();
        let depth = u32::from(self.capacity()) + 1;
        let Some((tag, slot)) = self.tags.alloc_mut() else {
            let error = Error::QueueFull {
                qid: self.qid,
                depth,
            };
            return Err(IoFailure::vectored(error, pieces));
        };
        sqe.set_cid(tag.cid());
        sqe.set_sgl(tcp::sgl::TRANSPORT_DATA, 0, len as u32);
        slot.to_device = to_device;
        slot.waiter = waiter;
        slot.opcode = sqe.opcode();
        slot.len = len;
        slot.received = 0;
        slot.epoch = epoch;
        slot.user_data = user_data;
        slot.buffer = None;
        slot.pieces = Some(pieces);
        slot.sqe = sqe;
        slot.expired = false;
        slot.abort_sent = false;
        slot.r2t = R2tState::new(0);
        self.encode(tag);
        if !self.plugged {
            self.flush_tx();
        }
        Ok(())
    }

    /// Appends the command capsule of the live slot of `tag` (its saved command, in-capsule
    /// data when the command says so) to the send buffer.
    pub(super) fn encode(&mut self, tag: Tag) {
        let slot = self.tags.get(tag);
        let sqe = slot.sqe;
        let len = sqe.sgl_len() as usize;
        let in_capsule = sqe.sgl_id() == tcp::sgl::IN_CAPSULE_DATA && len > 0;
        let frame = PduFrame::new(
            CapsuleCmd::SIZE,
            in_capsule.then_some(len),
            self.neg.digests(),
            self.neg.cpda_align,
        );
        let pdu = CapsuleCmd {
            ch: frame.header(pdu_type::CAPSULE_CMD, 0),
            sqe,
        };
        let data =
            in_capsule.then(|| &slot.buffer.as_ref().expect("in-capsule data has a buffer")[..len]);
        frame.encode(&mut self.tx, &pdu.to_bytes(), data);
        if in_capsule {
            self.stats.in_capsule_writes += 1;
        }
        self.stats.commands_submitted += 1;
    }
}
