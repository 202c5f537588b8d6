//! Transfers larger than one command (the controller's MDTS, capped by one PRP-list page):
//! split into child commands of at most `max_transfer` bytes, all of whose slots are reserved
//! before anything is submitted; the caller sees one completion.
//!
//! INVARIANT: all or nothing: either every child command is in the ring, or none is and the
//! buffer comes back in the error. Child slots point at the group head, which holds the
//! buffer until the last child completes.

use nvme_core::split::SplitPlan;
use nvme_core::{Error, IoCommand, IoFailure, Namespace, NvmCommand};
use nvme_pool::Tag;
use nvme_spec::queue::SubmissionEntry;
use nvme_vfio::DmaBuffer;

use super::QueuePair;

/// Most commands one split request may use (its transfer is at most this many times
/// [`QueuePair::max_transfer_bytes`]).
pub const MAX_COMMANDS_PER_REQUEST: usize = 256;

impl QueuePair {
    /// A transfer larger than one command: child commands reserved all at once.
    /// `cmd` moves data and has a range (the caller checked both, and the buffer).
    #[cold]
    pub(super) fn submit_split(
        &mut self,
        ns: &Namespace,
        cmd: IoCommand,
        buf: DmaBuffer,
        user_data: u64,
    ) -> std::result::Result<Tag, IoFailure> {
        let range = cmd.range().expect("a split command has a range");
        let block_size = ns.block_size() as usize;
        let capacity = self.tags.capacity() as u32;
        let free = self.tags.available().min(self.sq.free_entries() as u16) as u32;
        let plan = match SplitPlan::new(
            range,
            block_size,
            self.max_transfer,
            capacity,
            free,
            self.qid,
            self.sq.entries(),
        ) {
            Ok(plan) => plan,
            Err(error) => return Err(IoFailure::new(error, Some(buf))),
        };
        let commands = plan.commands as usize;
        let mut tags = [Tag::default(); MAX_COMMANDS_PER_REQUEST];
        if commands > MAX_COMMANDS_PER_REQUEST
            || !self.tags.alloc_many(commands as u16, &mut tags[..commands])
        {
            let error = Error::TransferTooLarge {
                bytes: range.blocks as usize * block_size,
                commands,
                max_per_command: plan.chunk_blocks as usize * block_size,
                free,
                capacity,
            };
            return Err(IoFailure::new(error, Some(buf)));
        }
        let base = buf.iova().0;
        let head = tags[0];
        let mut sqes = [SubmissionEntry::default(); MAX_COMMANDS_PER_REQUEST];
        for (i, &tag) in tags[..commands].iter().enumerate() {
            let part = plan.part(i as u32);
            let mut sqe = cmd.with_range(part).sqe_on(ns);
            let offset = (part.lba - range.lba) * block_size as u64;
            self.set_data_pointer(
                &mut sqe,
                tag.index(),
                base + offset,
                part.blocks as usize * block_size,
            );
            sqes[i] = sqe;
            if i > 0 {
                self.tags.get_mut(tag).head = head;
            }
        }
        self.start_group(
            head,
            cmd.opcode().byte(),
            user_data,
            Some(buf),
            commands as u16,
        );
        for (i, &tag) in tags[..commands].iter().enumerate() {
            if i > 0 {
                let slot = self.tags.get_mut(tag);
                slot.awaiting = true;
                slot.simple = false;
                slot.expired = false;
                slot.epoch = self.clock.epoch();
            }
            self.push_command(tag, sqes[i]);
        }
        self.after_submit();
        Ok(head)
    }
}
