//! Fused Compare and Write (NVMe Base 2.0 §3.4.2): the two commands of
//! [`CompareAndWrite`] in adjacent submission queue entries, behind one doorbell, as one
//! request of two commands (the Compare heads the group and holds the buffer; the Write is
//! its child). The request's status is the Compare's when the Write was only aborted because
//! the Compare failed (`reap`'s group status rule), so a miscompare reads as Compare Failure.
//!
//! INVARIANT: both slots and both ring entries are reserved before either entry is written,
//! so the pair is never split by a full queue; nothing else is pushed between the two (one
//! owner thread). After a controller reset a fused pair is never resubmitted (`recover`):
//! its request fails with a retryable error instead, since the two entries could not be
//! kept adjacent and alone would complete with Missing Fused Command.

use nvme_core::fused::{CompareAndWrite, REPORTED_OPCODE};
use nvme_core::{Error, IoFailure, Namespace};
use nvme_pool::Tag;
use nvme_vfio::DmaBuffer;

use super::QueuePair;

impl QueuePair {
    /// Queues a fused Compare and Write of `cmd`'s blocks: `buf` holds the compare data, then
    /// the write data ([`CompareAndWrite::data_bytes`] in all). One completion for both
    /// commands: `Ok` when the blocks matched and were written, the Compare Failure status
    /// when they differed (nothing was written; `nvme_core::fused::outcome` tells the two
    /// apart). Refused before anything is sent when the controller does not offer the fused
    /// operation (Identify Controller FUSES bit 0) or Compare, beyond ACWU, beyond one
    /// command's transfer, or without two free entries.
    pub fn submit_compare_and_write(
        &mut self,
        ns: &Namespace,
        cmd: CompareAndWrite,
        buf: DmaBuffer,
        user_data: u64,
    ) -> std::result::Result<(), IoFailure> {
        self.submit_fused(ns, cmd, buf, user_data).map(drop)
    }

    fn submit_fused(
        &mut self,
        ns: &Namespace,
        cmd: CompareAndWrite,
        buf: DmaBuffer,
        user_data: u64,
    ) -> std::result::Result<Tag, IoFailure> {
        if let Err(e) = cmd.check(ns, &self.command_context()) {
            return Err(IoFailure::new(e, Some(buf)));
        }
        let half = cmd.half_bytes(ns);
        if let Err(e) = self.check_buffer(&buf, 2 * half) {
            return Err(IoFailure::new(e, Some(buf)));
        }
        if half > self.max_transfer {
            let error = Error::InvalidRequest(format!(
                "{}: {half} bytes per command is more than one command carries ({} bytes, \
                 MDTS), and a fused pair cannot be split",
                nvme_core::fused::COMPARE_AND_WRITE,
                self.max_transfer
            ));
            return Err(IoFailure::new(error, Some(buf)));
        }
        if let Err(e) = self.check_room() {
            return Err(IoFailure::new(e, Some(buf)));
        }
        let mut tags = [Tag::default(); 2];
        if self.sq.free_entries() < 2 || !self.tags.alloc_many(2, &mut tags) {
            return Err(IoFailure::new(self.queue_full(), Some(buf)));
        }
        let [head, second] = tags;
        let base = buf.iova().0;
        let [mut compare, mut write] = cmd.sqes(ns.nsid());
        self.set_data_pointer(&mut compare, head.index(), base, half);
        self.set_data_pointer(&mut write, second.index(), base + half as u64, half);
        self.start_group(head, REPORTED_OPCODE.byte(), user_data, Some(buf), 2);
        let epoch = self.clock.epoch();
        let slot = self.tags.get_mut(second);
        slot.head = head;
        slot.awaiting = true;
        slot.simple = false;
        slot.expired = false;
        slot.epoch = epoch;
        self.push_command(head, compare);
        self.push_command(second, write);
        self.after_submit();
        Ok(head)
    }
}
