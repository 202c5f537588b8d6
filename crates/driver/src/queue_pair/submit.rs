//! Submission: batching (plug/unplug, the tail doorbell), the asynchronous submit calls, and
//! the hot-path steps they share (validate, take a slot, fill the entry and its data
//! pointer, copy it into the ring, ring the doorbell).
//!
//! INVARIANT: a request is validated (namespace range, buffer domain, size and alignment)
//! before any slot is reserved, and a refused submission gives its buffer back untouched in
//! the [`IoFailure`]. Every function here on the per-I/O path is `#[inline]`/
//! `#[inline(always)]`: no allocation, lock or syscall per I/O.

use nvme_core::command::{CommandContext, DataDirection};
use nvme_core::{Error, IoCommand, IoFailure, Namespace, NvmCommand, Result};
use nvme_pool::Tag;
use nvme_spec::opcode::NvmOpcode;
use nvme_spec::queue::SubmissionEntry;
use nvme_spec::queue::DSM_MAX_RANGES;
use nvme_spec::sgl::{self, Psdt};
use nvme_spec::{command, Status};
use nvme_vfio::DmaBuffer;

use super::{QueuePair, Slot};
use crate::prp::{self, PrpLayout};

#[cfg(doc)]
use super::Completion;

/// Most blocks one Read/Write/Compare/Write Zeroes/Verify command addresses (16-bit 0-based NLB).
pub const MAX_BLOCKS_PER_COMMAND: u32 = 1 << 16;

impl QueuePair {
    /// Starts a batch of `n` requests: reserves `n` slots at once (all or nothing), and defers
    /// the tail doorbell to [`QueuePair::unplug`].
    #[inline]
    pub fn plug(&mut self, n: u16) -> Result<()> {
        if n as u32 > self.sq.free_entries() {
            return Err(Error::QueueFull {
                qid: self.qid,
                depth: self.sq.entries(),
            });
        }
        self.tags.plug(n).map_err(|_| Error::QueueFull {
            qid: self.qid,
            depth: self.sq.entries(),
        })?;
        self.plugged = true;
        Ok(())
    }

    /// Ends a batch: returns unused reservations and rings the doorbell once.
    #[inline]
    pub fn unplug(&mut self) {
        self.tags.unplug();
        self.plugged = false;
        self.ring();
    }

    /// Writes the tail doorbell if commands were queued since the last write; first the CQ
    /// head doorbell if the CQ's slack is used up (see [`QueuePair::poll_deferred`]): the
    /// new commands could otherwise find the controller's view of the CQ full. Always inlined: it
    /// runs after every unplugged submission, and the compiler's own choice left it out of
    /// line in nvme-perf's loop once (a call and its register saves per I/O).
    #[inline(always)]
    pub fn ring(&mut self) {
        self.publish_cq_head();
        if let Some(mmio) = self.sq.publish() {
            self.stats.sq_doorbell_updates += 1;
            if mmio {
                self.stats.sq_doorbell_writes += 1;
            }
        }
    }

    #[inline(always)]
    pub(super) fn after_submit(&mut self) {
        if !self.plugged {
            self.ring();
        }
    }

    /// Queues any typed NVM command (`nvme_core::command`: `Read`, `Write`, `Compare`,
    /// `Flush`, `WriteZeroes`, ...): `buf` is the data buffer of a command that moves data
    /// (required then, refused otherwise). Transfers above one command are split. The buffer
    /// comes back in the [`Completion`]; on a rejected submission it comes back in the error,
    /// untouched. With a software queue, a data command that finds the queue full waits there.
    #[inline(always)]
    pub fn submit<C: NvmCommand>(
        &mut self,
        ns: &Namespace,
        cmd: C,
        buf: Option<DmaBuffer>,
        user_data: u64,
    ) -> std::result::Result<(), IoFailure> {
        let r = self.submit_cmd(ns, cmd, buf, user_data);
        self.queue_if_full(r, ns, cmd, user_data)
    }

    /// [`QueuePair::submit`] with the buffer in the caller's place: `buf` is taken only when
    /// the request is accepted (or waits in the software queue); a refused submission leaves
    /// it there, untouched (`None` only where the device may still reach it: a split request
    /// refused part-way), and returns the error alone. For a caller that keeps its buffers
    /// in a table: no move out of the table and back per I/O.
    #[inline(always)]
    pub fn submit_in_place<C: NvmCommand>(
        &mut self,
        ns: &Namespace,
        cmd: C,
        buf: &mut Option<DmaBuffer>,
        user_data: u64,
    ) -> Result<()> {
        match self.submit_cmd_in_place(ns, cmd, buf, user_data) {
            Ok(_) => Ok(()),
            Err(e) => self.enqueue_in_place(e, ns, cmd, buf, user_data),
        }
    }

    /// Queues a Dataset Management deallocate (trim) of up to 256 `(lba, blocks)` ranges.
    pub fn submit_deallocate(
        &mut self,
        ns: &Namespace,
        ranges: &[(u64, u32)],
        user_data: u64,
    ) -> Result<()> {
        self.submit_deallocate_inner(ns, ranges, user_data)
            .map(drop)
    }

    pub(super) fn submit_deallocate_inner(
        &mut self,
        ns: &Namespace,
        ranges: &[(u64, u32)],
        user_data: u64,
    ) -> Result<Tag> {
        if ranges.is_empty() || ranges.len() > DSM_MAX_RANGES {
            return Err(Error::BadRangeCount {
                count: ranges.len(),
                max: DSM_MAX_RANGES,
            });
        }
        for &(lba, blocks) in ranges {
            ns.check_blocks(lba, blocks as u64)?;
        }
        let sqe = command::dataset_management(ns.nsid(), ranges.len() as u32, true);
        let tag = self.alloc_one()?;
        let index = tag.index();
        // Range entry (NVM CS §3.2.3): context attributes, length in blocks (1-based), LBA.
        self.pages.write_u64s(
            index,
            ranges
                .iter()
                .flat_map(|&(lba, blocks)| [(blocks as u64) << 32, lba]),
        );
        let mut sqe = sqe;
        sqe.prp1 = self.pages.iova(index).0;
        self.start_group(tag, sqe.opcode(), user_data, None, 1);
        self.push_command(tag, sqe);
        self.after_submit();
        Ok(tag)
    }

    /// Queues any I/O command (the raw path): the driver fills the command id and the data
    /// pointer (`len` bytes of `data`, or zero without data); the caller is responsible for
    /// the other fields. The transfer must fit in one command
    /// ([`QueuePair::max_transfer_bytes`]).
    ///
    /// # Safety
    /// The driver cannot tell how many bytes an arbitrary command transfers. The caller
    /// guarantees that the command, as the controller interprets it (opcode, NLB/NUMD and
    /// the other dwords), transfers at most `len` bytes, and no data when `data` is `None`,
    /// and names no other host memory (e.g. a metadata pointer). Otherwise the controller
    /// writes or reads memory the program owns.
    pub unsafe fn submit_raw(
        &mut self,
        sqe: SubmissionEntry,
        data: Option<(DmaBuffer, usize)>,
        user_data: u64,
    ) -> std::result::Result<(), IoFailure> {
        self.submit_raw_inner(sqe, data, user_data).map(drop)
    }

    pub(super) fn submit_raw_inner(
        &mut self,
        sqe: SubmissionEntry,
        data: Option<(DmaBuffer, usize)>,
        user_data: u64,
    ) -> std::result::Result<Tag, IoFailure> {
        let (mut buf, len) = match data {
            Some((b, len)) => (Some(b), len),
            None => (None, 0),
        };
        // The data pointer is always the driver's: none without a buffer.
        let mut sqe = sqe;
        sqe.set_psdt(Psdt::Prp);
        sqe.prp1 = 0;
        sqe.prp2 = 0;
        sqe.mptr = 0;
        if let Some(b) = &buf {
            if let Err(e) = self.check_buffer(b, len) {
                return Err(IoFailure::new(e, buf));
            }
            if len > self.max_transfer {
                return Err(IoFailure::new(
                    Error::TransferTooLarge {
                        bytes: len,
                        commands: len.div_ceil(self.max_transfer),
                        max_per_command: self.max_transfer,
                        free: self.tags.available() as u32,
                        capacity: self.tags.capacity() as u32,
                    },
                    buf,
                ));
            }
        }
        match self.submit_single(sqe, &mut buf, len, user_data) {
            Ok(tag) => Ok(tag),
            Err(e) => Err(IoFailure::new(e, buf)),
        }
    }

    #[inline(always)]
    pub(super) fn check_buffer(&self, buf: &DmaBuffer, needed: usize) -> Result<()> {
        if buf.domain() != self.domain {
            return Err(self.foreign(buf));
        }
        if needed == 0 {
            return Err(Error::ZeroLength);
        }
        if buf.len() < needed {
            return Err(Error::BufferTooSmall {
                needed,
                len: buf.len(),
            });
        }
        if buf.iova().0 & 3 != 0 {
            return Err(Error::BufferMisaligned {
                iova: buf.iova().0,
                align: 4,
            });
        }
        Ok(())
    }

    #[cold]
    pub(super) fn foreign(&self, buf: &DmaBuffer) -> Error {
        Error::ForeignBuffer {
            buffer: buf.domain(),
            controller: self.ctrl.name.clone(),
            controller_domain: self.domain,
        }
    }

    /// Whether one more command may be submitted now (controller state, SQ room); a free slot
    /// is the caller's to find.
    #[inline(always)]
    pub(super) fn check_room(&mut self) -> Result<()> {
        if self.ctrl.state() != self.ctrl_state {
            self.sync_state()?;
        }
        if self.sq.is_full() {
            return Err(self.queue_full());
        }
        Ok(())
    }

    #[inline(always)]
    fn alloc_one(&mut self) -> Result<Tag> {
        self.check_room()?;
        match self.tags.alloc() {
            Some(tag) => Ok(tag),
            None => Err(self.queue_full()),
        }
    }

    /// The error of a submission that found no free slot (built only then: an eagerly built
    /// `Error` costs a construction and a drop on every submission).
    #[cold]
    pub(super) fn queue_full(&self) -> Error {
        Error::QueueFull {
            qid: self.qid,
            depth: self.sq.entries(),
        }
    }

    /// [`QueuePair::submit_cmd_in_place`] for a buffer passed by value: a refusal hands it
    /// back in the [`IoFailure`].
    #[inline(always)]
    pub(super) fn submit_cmd<C: NvmCommand>(
        &mut self,
        ns: &Namespace,
        cmd: C,
        mut buf: Option<DmaBuffer>,
        user_data: u64,
    ) -> std::result::Result<Tag, IoFailure> {
        match self.submit_cmd_in_place(ns, cmd, &mut buf, user_data) {
            Ok(tag) => Ok(tag),
            Err(e) => Err(IoFailure::new(e, buf)),
        }
    }

    /// Any typed command: a data command goes to [`QueuePair::submit_data_cmd`]; one
    /// without data is validated (namespace, range, no buffer) and takes one slot. `buf` is
    /// the caller's place: taken by the slot, left there on a refusal. Monomorphic per
    /// command type; for the built-in types every trait call folds to constants.
    #[inline(always)]
    pub(super) fn submit_cmd_in_place<C: NvmCommand>(
        &mut self,
        ns: &Namespace,
        cmd: C,
        buf: &mut Option<DmaBuffer>,
        user_data: u64,
    ) -> Result<Tag> {
        // The command's direction, not only its opcode's: a Zone Management Send moves data
        // for one action only. Folds to a constant for the built-in commands.
        if cmd.direction() != DataDirection::None {
            return self.submit_data_cmd(ns, cmd, buf, user_data);
        }
        let blocks = match cmd.range() {
            Some(r) => {
                // No block data moves: the whole namespace, whatever its metadata.
                ns.check_blocks(r.lba, r.blocks as u64)?;
                r.blocks
            }
            None => {
                ns.check_current()?;
                0
            }
        };
        if buf.is_some() || blocks > MAX_BLOCKS_PER_COMMAND {
            return Err(no_data_refused(cmd.opcode(), blocks, buf.is_some()));
        }
        cmd.check(ns, &self.command_context(), None)?;
        self.submit_single(cmd.sqe_on(ns), &mut None, 0, user_data)
    }

    /// What a command's own check ([`NvmCommand::check`]) may look at: two pointers, read only
    /// by the commands that have such a check.
    #[inline(always)]
    pub(super) fn command_context(&self) -> CommandContext<'_> {
        CommandContext {
            controller: &self.ctrl.name,
            identify: &self.ctrl.identify,
        }
    }

    /// A command that moves data, with its buffer: validation (namespace, range, buffer, the
    /// command's own check), then one command or, above one command's transfer, a split
    /// group (for a command that may be split). `buf` is the caller's place (`None` is
    /// refused here), taken only by the slot: a refusal leaves it there, so no step of the
    /// inlined chain copies the buffer through the stack.
    #[inline(always)]
    pub(super) fn submit_data_cmd<C: NvmCommand>(
        &mut self,
        ns: &Namespace,
        cmd: C,
        buf: &mut Option<DmaBuffer>,
        user_data: u64,
    ) -> Result<Tag> {
        let Some(data) = buf.as_ref() else {
            return Err(buffer_required(cmd.opcode()));
        };
        cmd.check_range(ns)?;
        // The range's bytes for most commands; Copy's is its source range list.
        let bytes = cmd.data_bytes(ns);
        self.check_buffer(data, bytes)?;
        cmd.check(ns, &self.command_context(), Some(data))?;
        if bytes <= self.max_transfer {
            let sqe = cmd.sqe_on(ns);
            return self.submit_single(sqe, buf, bytes, user_data);
        }
        self.submit_large(ns, cmd, buf, bytes, user_data)
    }

    /// A data command above one command's transfer: split, if the command may be. A split
    /// refused part-way keeps the buffer (the device may reach it), so `buf` is `None` then.
    #[cold]
    fn submit_large<C: NvmCommand>(
        &mut self,
        ns: &Namespace,
        cmd: C,
        buf: &mut Option<DmaBuffer>,
        bytes: usize,
        user_data: u64,
    ) -> Result<Tag> {
        if !cmd.splittable() {
            return Err(not_splittable(cmd.opcode(), bytes, self.max_transfer));
        }
        let Some(data) = buf.take() else {
            return Err(buffer_required(cmd.opcode()));
        };
        match self.submit_split(ns, IoCommand::of(cmd), data, user_data) {
            Ok(tag) => Ok(tag),
            Err(f) => {
                *buf = f.buffer;
                Err(f.error)
            }
        }
    }

    /// One command, one slot. The fast path: single-page transfers touch no list code.
    /// `buf` (the caller's place) is taken by the slot; a refusal leaves it there.
    #[inline(always)]
    pub(super) fn submit_single(
        &mut self,
        mut sqe: SubmissionEntry,
        buf: &mut Option<DmaBuffer>,
        len: usize,
        user_data: u64,
    ) -> Result<Tag> {
        self.check_room()?;
        let addr = buf.as_ref().map(|b| b.iova().0);
        let epoch = self.clock.epoch();
        let Some((tag, slot)) = self.tags.alloc_mut() else {
            return Err(self.queue_full());
        };
        fill_group_head(slot, tag, epoch, sqe.opcode(), user_data, buf.take(), 1);
        if let Some(addr) = addr {
            debug_assert!(len > 0, "callers reject zero-length data transfers");
            self.set_data_pointer(&mut sqe, tag.index(), addr, len);
        }
        self.push_command(tag, sqe);
        self.after_submit();
        Ok(tag)
    }

    /// Fills the data pointer: with SGLs one Data Block descriptor for the whole transfer (a
    /// `DmaBuffer` is contiguous in IOVA space, so no segment list is ever needed; NVMe Base
    /// 2.0 §4.1.2), otherwise PRP1/PRP2 or a PRP list in the slot's page (§4.1.1).
    #[inline(always)]
    pub(super) fn set_data_pointer(
        &mut self,
        sqe: &mut SubmissionEntry,
        index: usize,
        addr: u64,
        len: usize,
    ) {
        // `len` is at most `max_transfer` (a few MiB), so it fits the descriptor's 32 bits.
        debug_assert!(len <= u32::MAX as usize);
        if (addr | len as u64) & self.sgl_mask == 0 {
            sqe.set_psdt(Psdt::SglMptrContiguous);
            sqe.prp1 = addr;
            sqe.prp2 = sgl::data_block_qword(len as u32);
            return;
        }
        match prp::layout(nvme_vfio::Iova(addr), len, self.page_size) {
            PrpLayout::Direct { prp1, prp2 } => {
                sqe.prp1 = prp1;
                sqe.prp2 = prp2;
            }
            PrpLayout::List {
                prp1,
                first_list_entry,
                entries,
            } => {
                let step = self.page_size as u64;
                self.pages.write_u64s(
                    index,
                    (0..entries as u64).map(|k| first_list_entry + k * step),
                );
                sqe.prp1 = prp1;
                sqe.prp2 = self.pages.iova(index).0;
            }
        }
    }

    /// [`fill_group_head`] on the slot of live tag `tag`, in this pair's current epoch.
    pub(super) fn start_group(
        &mut self,
        tag: Tag,
        op: u8,
        user_data: u64,
        buffer: Option<DmaBuffer>,
        commands: u16,
    ) {
        let epoch = self.clock.epoch();
        fill_group_head(
            self.tags.get_mut(tag),
            tag,
            epoch,
            op,
            user_data,
            buffer,
            commands,
        );
    }

    #[inline(always)]
    pub(super) fn push_command(&mut self, tag: Tag, mut sqe: SubmissionEntry) {
        sqe.set_cid(tag.cid());
        if let Some(saved) = self.saved.as_deref_mut() {
            saved[tag.index()] = sqe;
        }
        self.sq.push(&sqe);
        self.stats.commands_submitted += 1;
    }
}

/// Fills the slot of a request's first (or only) command: the group head, `commands` long.
#[inline(always)]
pub(super) fn fill_group_head(
    slot: &mut Slot,
    tag: Tag,
    epoch: u32,
    op: u8,
    user_data: u64,
    buffer: Option<DmaBuffer>,
    commands: u16,
) {
    // In `Slot`'s memory order, so that the constant stores run together and merge.
    slot.user_data = user_data;
    slot.head = tag;
    slot.remaining = commands;
    slot.epoch = epoch;
    slot.dw0 = 0;
    slot.status = Status::SUCCESS;
    slot.opcode = op;
    slot.awaiting = true;
    slot.expired = false;
    slot.sync = false;
    slot.reported = false;
    slot.simple = commands == 1;
    // Every path that frees a group head takes its buffer first, so the old value is `None`
    // and has nothing to drop; not dropping it saves the check and the call. Were it ever
    // `Some` (a driver bug), forgetting it leaks that buffer's mapping instead of freeing
    // memory the device might still reach.
    let old = std::mem::replace(&mut slot.buffer, buffer);
    debug_assert!(old.is_none(), "a freed request slot still held its buffer");
    std::mem::forget(old);
}

/// A command without data refused: it came with a buffer, or addresses more blocks than
/// one command can (such commands are not split).
#[cold]
fn no_data_refused(op: NvmOpcode, blocks: u32, with_buffer: bool) -> Error {
    let name = op.name();
    if with_buffer {
        Error::InvalidRequest(format!("{name} moves no data: submit it without a buffer"))
    } else {
        Error::InvalidRequest(format!(
            "{name} of {blocks} blocks exceeds {MAX_BLOCKS_PER_COMMAND} per command"
        ))
    }
}

/// A command that must reach the controller whole (Copy) whose data exceeds one command.
#[cold]
fn not_splittable(op: NvmOpcode, bytes: usize, max: usize) -> Error {
    Error::InvalidRequest(format!(
        "{}: its {bytes}-byte data is more than one command carries ({max} bytes, MDTS), and it \
         cannot be split",
        op.name()
    ))
}

/// A data command submitted without its buffer.
#[cold]
fn buffer_required(op: NvmOpcode) -> Error {
    Error::InvalidRequest(format!("{} moves data: submit it with a buffer", op.name()))
}
