//! I/O queue pairs: one submission queue and its completion queue, owned by one thread.
//!
//! The I/O path, in small steps:
//! 1. validate the request against the namespace (range, block multiple, buffer size and
//!    alignment) before anything is reserved;
//! 2. take a request slot (its tag is the command id) from the pair's [`TagSet`]: the next
//!    plug-reserved one inside a plug, otherwise a pop from the local free stack;
//! 3. fill the 64-byte entry (only the fields the command uses), the data pointer (PRP1,
//!    PRP1+PRP2, or a PRP list in the slot's preallocated page), copy it into the ring;
//! 4. ring the tail doorbell: at once outside a plug, once at the end of a plugged batch;
//! 5. [`QueuePair::poll`] reaps completions by phase tag, validates each one (queue id, command
//!    id in range, in flight and of the current generation), completes the request, and writes
//!    the head doorbell once per batch. [`QueuePair::poll_deferred`] leaves that write to the
//!    next tail doorbell, so that a loop that resubmits from what it reaped writes the CQ head
//!    and the SQ tail back to back (one pause of the vCPU for both under emulation).
//!
//! A transfer larger than the per-command limit (MDTS) is split into child commands whose
//! slots are all reserved before anything is submitted; the caller sees one completion.
//!
//! INVARIANT: a buffer moved into a slot is given back only after every command that
//! references it has completed. A request whose command timed out (or whose controller
//! reported a fatal status) is reported to the caller at once, without its buffer, but its
//! slots stay *retired*: the tag (so its command id), the slot's PRP-list/DSM page and the
//! buffer are not reused until the late completion of every command of the request arrives
//! (an Abort that succeeds makes the controller post it), or until the queue is deleted or
//! the controller stopped when the pair drops. A controller that cannot be stopped leaks
//! them (see `teardown`).
//!
//! The code is split by concern: [`options`](QueuePairOptions), `create`, `submit`
//! (validation, slots, data pointers, doorbells), `split` (transfers over MDTS),
//! `software_queue`, `reap` (completions), `timeout` (the epoch clock, expiry, aborts),
//! `health` (CSTS checks), `recover` (re-creating the queues after a reset), `sync`,
//! `interrupts` and `drop`. This file holds the pair's state and its small accessors.

mod create;
mod drop;
mod interrupts;
mod options;
mod sync;

pub use options::{QueuePairOptions, DEFAULT_QUEUE_DEPTH};

use std::cell::Cell;
use std::collections::VecDeque;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::flags::WriteFlags;
use nvme_pool::{Tag, TagSet};
use nvme_spec::queue::SubmissionEntry;
use nvme_spec::queue::DSM_MAX_RANGES;
use nvme_spec::regs::Csts;
use nvme_spec::sgl::{self, Psdt};
use nvme_spec::{command, opcode, regs, Status};
use nvme_vfio::{DmaBuffer, DmaDomain, InterruptEvent};

use crate::controller::{Inner, TimeoutAction, ALL_ONES, STATE_FAILED, STATE_RESETTING};
use crate::error::{log_occurrence, Error, IoFailure, Result};
use crate::namespace::Namespace;
use crate::prp::{self, PrpLayout};
use crate::ring::{CqRing, SlotPages, SqRing};

/// A finished I/O, handed to the poll callback.
#[derive(Debug)]
pub struct Completion {
    /// The value given at submission.
    pub user_data: u64,
    /// Command-specific result (completion dword 0) or the error.
    pub result: std::result::Result<u32, Error>,
    /// The data buffer, given back. `None` for commands without data, or when the
    /// controller may still access it (timeout, fatal status).
    pub buffer: Option<DmaBuffer>,
}

/// Counters of one queue pair (plain fields: reading them costs nothing).
#[derive(Clone, Debug, Default)]
pub struct QueuePairStats {
    /// Commands written to the submission ring.
    pub commands_submitted: u64,
    /// Requests completed (a split transfer counts once).
    pub requests_completed: u64,
    /// Completion entries consumed.
    pub completions_reaped: u64,
    /// SQ tail updates published (MMIO or shadow doorbell).
    pub sq_doorbell_updates: u64,
    /// MMIO writes to the SQ tail doorbell (fewer than updates with shadow doorbells).
    pub sq_doorbell_writes: u64,
    /// CQ head updates published (MMIO or shadow doorbell).
    pub cq_doorbell_updates: u64,
    /// MMIO writes to the CQ head doorbell.
    pub cq_doorbell_writes: u64,
    /// Calls to `poll`.
    pub polls: u64,
    /// Calls to `poll` that found nothing.
    pub idle_polls: u64,
    /// Completion entries rejected (bad queue id, command id not in flight, stale generation).
    pub bad_completions: u64,
    /// Completion entries whose SQ head pointer lay outside the entries submitted and not yet
    /// consumed (ignored: trusting it would overwrite entries the device has not fetched).
    pub bad_sq_heads: u64,
    /// Commands that timed out.
    pub timeouts: u64,
    /// Completions of commands that had timed out (their retired slots were released).
    pub late_completions: u64,
}

/// Per-slot request state. Recycled, never zeroed as a whole: each submission sets the fields
/// the command uses.
struct Slot {
    /// Tag of the group head (own tag for a single command or the head itself).
    head: Tag,
    /// A command is outstanding in this slot (cleared only by its completion).
    awaiting: bool,
    /// The outstanding command timed out (or the controller failed): it is not expired again.
    /// `epoch` then holds the epoch of the expiry.
    expired: bool,
    /// An Abort for the expired command was submitted.
    abort_sent: bool,
    /// Epoch (see `QueuePair::epoch`) when the command was submitted.
    epoch: u32,
    // Fields below are meaningful on a group head only.
    /// Commands of the group still outstanding.
    remaining: u16,
    /// Opcode, for messages.
    opcode: u8,
    /// A synchronous caller waits for this request.
    sync: bool,
    /// The caller already got this request's completion (an error, after a timeout); the
    /// slots stay retired until the device returns every command of the group.
    reported: bool,
    /// First error status of the group (`Status::SUCCESS` while none): two bytes and no drop
    /// glue on the hot path; the `Error` is built only when the request fails.
    status: Status,
    /// Completion dword 0 of the (last) command.
    dw0: u32,
    user_data: u64,
    buffer: Option<DmaBuffer>,
}

/// An I/O submission/completion queue pair. `Send` but not `Sync`: one thread owns it.
pub struct QueuePair {
    // Hot fields first.
    sq: SqRing,
    cq: CqRing,
    tags: TagSet<Slot>,
    pages: SlotPages,
    qid: u16,
    page_size: usize,
    /// Low bits that must be clear in an SGL Data Block's address and length; `u64::MAX`
    /// when data pointers are PRPs (no transfer passes the test).
    sgl_mask: u64,
    max_transfer: usize,
    max_completions: usize,
    plugged: bool,
    /// Set during [`QueuePair::poll_deferred`]: reaping leaves the CQ head doorbell to the
    /// next [`QueuePair::ring`] (or poll).
    defer_cq_head: bool,
    epoch: u32,
    stats: QueuePairStats,
    deferred: VecDeque<Completion>,
    sync_done: Option<Completion>,
    // Cold fields.
    epoch_started: Instant,
    epoch_length: Duration,
    /// Last CSTS read by the health check.
    health_checked: Instant,
    timeout: Duration,
    /// Requests reported to the caller whose slots are still retired.
    retired: u16,
    /// Submissions waiting for room (see `QueuePairOptions::software_queue`).
    queued: VecDeque<Queued>,
    /// Capacity of `queued` (0: off).
    queue_limit: usize,
    /// DMA domain of the controller: buffers from any other are refused.
    domain: DmaDomain,
    /// The controller's state word when this pair's queues were (re)created; any difference
    /// (failed, resetting, a new reset generation) sends submissions and polls to the slow
    /// path.
    ctrl_state: u64,
    /// Copy of each slot's last command, by tag index, when requests are resubmitted after
    /// a reset (`QueuePairOptions::resubmit_after_reset`).
    saved: Option<Box<[SubmissionEntry]>>,
    /// Interrupt vector of the completion queue (to re-create it after a reset).
    vector: Option<u16>,
    irq: Option<Arc<InterruptEvent>>,
    ctrl: Arc<Inner>,
    _not_sync: PhantomData<Cell<()>>,
}

/// Epochs a command may live before it is declared timed out (the timeout is split into
/// `TIMEOUT_EPOCHS - 1` epochs, so a command fails between 1x and 1.34x its timeout).
const TIMEOUT_EPOCHS: u32 = 4;

/// Idle polls between clock reads (a slowly polling owner sees timeouts late by at most
/// about `TIMEOUT_EPOCHS` times this many of its poll intervals).
const IDLE_POLLS_PER_CLOCK_CHECK: u64 = 32;

/// Busy polls between clock reads.
const POLLS_PER_CLOCK_CHECK: u64 = 4096;

impl QueuePair {
    /// Queue id of this pair.
    pub fn qid(&self) -> u16 {
        self.qid
    }

    /// Entries of each ring, as created (the requested depth, or the clamped default).
    pub fn depth(&self) -> u32 {
        self.sq.entries()
    }

    /// Most requests in flight at once (ring entries - 1).
    pub fn capacity(&self) -> u16 {
        self.tags.capacity()
    }

    /// Requests in flight.
    pub fn in_flight(&self) -> u16 {
        self.tags.in_use()
    }

    /// Counters.
    pub fn stats(&self) -> &QueuePairStats {
        &self.stats
    }

    /// Request-slot pool counters.
    pub fn pool_stats(&self) -> &nvme_pool::TagStats {
        self.tags.stats()
    }

    /// Most bytes one command transfers (MDTS, capped by one PRP list page); larger
    /// requests are split.
    pub fn max_transfer_bytes(&self) -> usize {
        self.max_transfer
    }

    /// Starts a batch of `n` requests: reserves `n` slots at once (all or nothing), and defers
    /// the tail doorbell to [`QueuePair::unplug`].
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
    pub fn unplug(&mut self) {
        self.tags.unplug();
        self.plugged = false;
        self.ring();
    }

    /// Writes the tail doorbell if commands were queued since the last write; first the CQ
    /// head doorbell if a [`QueuePair::poll_deferred`] left it unwritten.
    #[inline]
    pub fn ring(&mut self) {
        self.publish_cq_head();
        if let Some(mmio) = self.sq.publish() {
            self.stats.sq_doorbell_updates += 1;
            self.stats.sq_doorbell_writes += mmio as u64;
        }
    }

    #[inline(always)]
    fn after_submit(&mut self) {
        if !self.plugged {
            self.ring();
        }
    }

    /// Queues a read of `blocks` blocks at `lba` into `buf`. The buffer comes back in the
    /// [`Completion`]; on a rejected submission it comes back in the error, untouched.
    #[inline]
    pub fn submit_read(
        &mut self,
        ns: &Namespace,
        lba: u64,
        blocks: u32,
        buf: DmaBuffer,
        user_data: u64,
    ) -> std::result::Result<(), IoFailure> {
        let r = self.submit_rw(opcode::nvm::READ, ns, lba, blocks, buf, false, user_data);
        self.queue_if_full(r, opcode::nvm::READ, ns, lba, blocks, false, user_data)
    }

    /// Queues a write of `blocks` blocks at `lba` from `buf`; [`WriteFlags::FUA`] forces the
    /// data to non-volatile media before completion.
    #[inline]
    pub fn submit_write(
        &mut self,
        ns: &Namespace,
        lba: u64,
        blocks: u32,
        buf: DmaBuffer,
        flags: WriteFlags,
        user_data: u64,
    ) -> std::result::Result<(), IoFailure> {
        let fua = flags.fua();
        let r = self.submit_rw(opcode::nvm::WRITE, ns, lba, blocks, buf, fua, user_data);
        self.queue_if_full(r, opcode::nvm::WRITE, ns, lba, blocks, fua, user_data)
    }

    /// Queues a Compare of `blocks` blocks at `lba` with `buf`; a mismatch completes with the
    /// Compare Failure status.
    pub fn submit_compare(
        &mut self,
        ns: &Namespace,
        lba: u64,
        blocks: u32,
        buf: DmaBuffer,
        user_data: u64,
    ) -> std::result::Result<(), IoFailure> {
        let r = self.submit_rw(opcode::nvm::COMPARE, ns, lba, blocks, buf, false, user_data);
        self.queue_if_full(r, opcode::nvm::COMPARE, ns, lba, blocks, false, user_data)
    }

    /// A submission refused with `QueueFull` goes to the software queue when it has room.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn queue_if_full(
        &mut self,
        submitted: std::result::Result<Tag, IoFailure>,
        op: u8,
        ns: &Namespace,
        lba: u64,
        blocks: u32,
        fua: bool,
        user_data: u64,
    ) -> std::result::Result<(), IoFailure> {
        match submitted {
            Ok(_) => Ok(()),
            Err(f) => self.enqueue(f, op, ns, lba, blocks, fua, user_data),
        }
    }

    #[cold]
    #[allow(clippy::too_many_arguments)]
    fn enqueue(
        &mut self,
        failure: IoFailure,
        op: u8,
        ns: &Namespace,
        lba: u64,
        blocks: u32,
        fua: bool,
        user_data: u64,
    ) -> std::result::Result<(), IoFailure> {
        if !matches!(failure.error, Error::QueueFull { .. })
            || self.queued.len() >= self.queue_limit
        {
            return Err(failure);
        }
        let Some(buffer) = failure.buffer else {
            return Err(failure);
        };
        self.queued.push_back(Queued {
            op,
            ns: ns.clone(),
            lba,
            blocks,
            fua,
            user_data,
            buffer,
        });
        Ok(())
    }

    /// Submits queued requests while there is room; one that fails for another reason
    /// completes with that error (into `deferred`).
    #[cold]
    fn drain_queued(&mut self) {
        let mut submitted = false;
        while let Some(q) = self.queued.pop_front() {
            let plugged = self.plugged;
            self.plugged = true;
            let r = self.submit_rw(q.op, &q.ns, q.lba, q.blocks, q.buffer, q.fua, q.user_data);
            self.plugged = plugged;
            match r {
                Ok(_) => submitted = true,
                Err(f) if matches!(f.error, Error::QueueFull { .. }) => {
                    let buffer = f.buffer.expect("a refused submission returns its buffer");
                    self.queued.push_front(Queued { buffer, ..q });
                    break;
                }
                Err(f) => {
                    self.stats.requests_completed += 1;
                    self.deferred.push_back(Completion {
                        user_data: q.user_data,
                        result: Err(f.error),
                        buffer: f.buffer,
                    });
                }
            }
        }
        if submitted && !self.plugged {
            self.ring();
        }
    }

    /// Requests waiting in the software queue.
    pub fn queued(&self) -> usize {
        self.queued.len()
    }

    /// Queues a Flush of the namespace's volatile write cache.
    pub fn submit_flush(&mut self, ns: &Namespace, user_data: u64) -> Result<()> {
        ns.check_current()?;
        self.submit_single(command::flush(ns.nsid()), None, 0, user_data)
            .map(drop)
            .map_err(|f| f.error)
    }

    /// Queues a Write Zeroes of `blocks` blocks at `lba` (`deallocate`: the controller may
    /// deallocate them instead of writing).
    pub fn submit_write_zeroes(
        &mut self,
        ns: &Namespace,
        lba: u64,
        blocks: u32,
        deallocate: bool,
        user_data: u64,
    ) -> Result<()> {
        self.submit_write_zeroes_inner(ns, lba, blocks, deallocate, user_data)
            .map(drop)
    }

    fn submit_write_zeroes_inner(
        &mut self,
        ns: &Namespace,
        lba: u64,
        blocks: u32,
        deallocate: bool,
        user_data: u64,
    ) -> Result<Tag> {
        ns.check_range(lba, blocks as u64)?;
        if blocks > MAX_BLOCKS_PER_COMMAND {
            return Err(Error::InvalidRequest(format!(
                "write zeroes of {blocks} blocks exceeds {MAX_BLOCKS_PER_COMMAND} per command"
            )));
        }
        let sqe = command::write_zeroes(ns.nsid(), lba, blocks, deallocate, false);
        self.submit_single(sqe, None, 0, user_data)
            .map_err(|f| f.error)
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

    fn submit_deallocate_inner(
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
            ns.check_range(lba, blocks as u64)?;
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

    fn submit_raw_inner(
        &mut self,
        sqe: SubmissionEntry,
        data: Option<(DmaBuffer, usize)>,
        user_data: u64,
    ) -> std::result::Result<Tag, IoFailure> {
        let (buf, len) = match data {
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
        self.submit_single(sqe, buf, len, user_data)
    }

    #[inline(always)]
    fn check_buffer(&self, buf: &DmaBuffer, needed: usize) -> Result<()> {
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
    fn foreign(&self, buf: &DmaBuffer) -> Error {
        Error::ForeignBuffer {
            buffer: buf.domain(),
            controller: self.ctrl.name.clone(),
            controller_domain: self.domain,
        }
    }

    /// Whether one more command may be submitted now (controller state, SQ room); a free slot
    /// is the caller's to find.
    #[inline(always)]
    fn check_room(&mut self) -> Result<()> {
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
    fn queue_full(&self) -> Error {
        Error::QueueFull {
            qid: self.qid,
            depth: self.sq.entries(),
        }
    }

    /// Read/Write/Compare: validation, then one command or a split group.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn submit_rw(
        &mut self,
        op: u8,
        ns: &Namespace,
        lba: u64,
        blocks: u32,
        buf: DmaBuffer,
        fua: bool,
        user_data: u64,
    ) -> std::result::Result<Tag, IoFailure> {
        if let Err(e) = ns.check_range(lba, blocks as u64) {
            return Err(IoFailure::new(e, Some(buf)));
        }
        let bytes = ns.blocks_to_bytes(blocks as u64) as usize;
        if let Err(e) = self.check_buffer(&buf, bytes) {
            return Err(IoFailure::new(e, Some(buf)));
        }
        if bytes <= self.max_transfer {
            let sqe = rw_command(op, ns.nsid(), lba, blocks, fua);
            return self.submit_single(sqe, Some(buf), bytes, user_data);
        }
        self.submit_split(op, ns, lba, blocks, buf, fua, user_data)
    }

    /// One command, one slot. The fast path: single-page transfers touch no list code.
    #[inline(always)]
    fn submit_single(
        &mut self,
        mut sqe: SubmissionEntry,
        buf: Option<DmaBuffer>,
        len: usize,
        user_data: u64,
    ) -> std::result::Result<Tag, IoFailure> {
        if let Err(e) = self.check_room() {
            return Err(IoFailure::new(e, buf));
        }
        let addr = buf.as_ref().map(|b| b.iova().0);
        let epoch = self.epoch;
        let Some((tag, slot)) = self.tags.alloc_mut() else {
            return Err(IoFailure::new(self.queue_full(), buf));
        };
        fill_group_head(slot, tag, epoch, sqe.opcode(), user_data, buf, 1);
        if let Some(addr) = addr {
            debug_assert!(len > 0, "callers reject zero-length data transfers");
            self.set_data_pointer(&mut sqe, tag.index(), addr, len);
        }
        self.push_command(tag, sqe);
        self.after_submit();
        Ok(tag)
    }

    /// A transfer larger than one command: child commands reserved all at once.
    #[cold]
    #[allow(clippy::too_many_arguments)]
    fn submit_split(
        &mut self,
        op: u8,
        ns: &Namespace,
        lba: u64,
        blocks: u32,
        buf: DmaBuffer,
        fua: bool,
        user_data: u64,
    ) -> std::result::Result<Tag, IoFailure> {
        let block_size = ns.block_size() as usize;
        let chunk_blocks = ((self.max_transfer / block_size) as u32).min(MAX_BLOCKS_PER_COMMAND);
        let commands = blocks.div_ceil(chunk_blocks) as usize;
        let free = self.tags.available().min(self.sq.free_entries() as u16) as u32;
        if commands as u32 > free {
            let capacity = self.tags.capacity() as u32;
            let error = if commands as u32 > capacity {
                Error::TransferTooLarge {
                    bytes: blocks as usize * block_size,
                    commands,
                    max_per_command: chunk_blocks as usize * block_size,
                    free,
                    capacity,
                }
            } else {
                Error::QueueFull {
                    qid: self.qid,
                    depth: self.sq.entries(),
                }
            };
            return Err(IoFailure::new(error, Some(buf)));
        }
        let mut tags = [Tag::default(); MAX_COMMANDS_PER_REQUEST];
        if commands > MAX_COMMANDS_PER_REQUEST
            || !self.tags.alloc_many(commands as u16, &mut tags[..commands])
        {
            let error = Error::TransferTooLarge {
                bytes: blocks as usize * block_size,
                commands,
                max_per_command: chunk_blocks as usize * block_size,
                free,
                capacity: self.tags.capacity() as u32,
            };
            return Err(IoFailure::new(error, Some(buf)));
        }
        let base = buf.iova().0;
        let head = tags[0];
        let mut sqes = [SubmissionEntry::default(); MAX_COMMANDS_PER_REQUEST];
        for (i, &tag) in tags[..commands].iter().enumerate() {
            let first = i as u32 * chunk_blocks;
            let n = chunk_blocks.min(blocks - first);
            let mut sqe = rw_command(op, ns.nsid(), lba + first as u64, n, fua);
            let offset = first as u64 * block_size as u64;
            self.set_data_pointer(
                &mut sqe,
                tag.index(),
                base + offset,
                n as usize * block_size,
            );
            sqes[i] = sqe;
            if i > 0 {
                self.tags.get_mut(tag).head = head;
            }
        }
        self.start_group(head, op, user_data, Some(buf), commands as u16);
        for (i, &tag) in tags[..commands].iter().enumerate() {
            if i > 0 {
                let slot = self.tags.get_mut(tag);
                slot.awaiting = true;
                slot.expired = false;
                slot.epoch = self.epoch;
            }
            self.push_command(tag, sqes[i]);
        }
        self.after_submit();
        Ok(head)
    }

    /// Fills the data pointer: with SGLs one Data Block descriptor for the whole transfer (a
    /// `DmaBuffer` is contiguous in IOVA space, so no segment list is ever needed; NVMe Base
    /// 2.0 §4.1.2), otherwise PRP1/PRP2 or a PRP list in the slot's page (§4.1.1).
    #[inline(always)]
    fn set_data_pointer(&mut self, sqe: &mut SubmissionEntry, index: usize, addr: u64, len: usize) {
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
    fn start_group(
        &mut self,
        tag: Tag,
        op: u8,
        user_data: u64,
        buffer: Option<DmaBuffer>,
        commands: u16,
    ) {
        let epoch = self.epoch;
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
    fn push_command(&mut self, tag: Tag, mut sqe: SubmissionEntry) {
        sqe.set_cid(tag.cid());
        if let Some(saved) = self.saved.as_deref_mut() {
            saved[tag.index()] = sqe;
        }
        self.sq.push(&sqe);
        self.stats.commands_submitted += 1;
    }

    /// The controller's state word differs from this pair's snapshot: says why submissions
    /// must fail, or re-creates the queues after a reset and carries on.
    #[cold]
    fn sync_state(&mut self) -> Result<()> {
        let state = self.ctrl.state();
        if state == self.ctrl_state {
            return Ok(());
        }
        if state & STATE_FAILED != 0 {
            if self.ctrl.is_removed() {
                return Err(Error::Removed {
                    controller: self.ctrl.name.clone(),
                    why: "its registers read all ones",
                });
            }
            return Err(Error::Failed {
                controller: self.ctrl.name.clone(),
            });
        }
        if state & STATE_RESETTING != 0 {
            return Err(Error::Resetting {
                controller: self.ctrl.name.clone(),
            });
        }
        self.recover(state)
    }

    /// After a controller reset (new generation in `state`): fails every request that was in
    /// flight with [`Error::Reset`] (into `deferred`, or `sync_done` for a synchronous
    /// caller), or with `resubmit_after_reset` keeps those not yet reported for resubmission;
    /// releases retired slots, empties the rings, re-creates both queues and submits the kept
    /// commands again.
    ///
    /// The reset disabled the controller before it could get here (CSTS.RDY read 0), so no
    /// command of the old generation can still touch the rings, slot pages or buffers.
    #[cold]
    fn recover(&mut self, state: u64) -> Result<()> {
        let live: Vec<Tag> = self.tags.iter_in_use().collect();
        let resubmit = self.saved.is_some();
        // Commands to submit again: awaiting commands of groups not yet reported.
        let mut again = Vec::new();
        let mut heads = Vec::with_capacity(live.len());
        for &tag in &live {
            let slot = self.tags.get(tag);
            let head = slot.head;
            if resubmit && !self.tags.get(head).reported {
                if slot.awaiting {
                    again.push(tag);
                }
                continue;
            }
            if head == tag {
                heads.push(tag);
            } else {
                self.tags.free(tag);
            }
        }
        let mut failed = 0;
        for head in heads {
            let slot = self.tags.get_mut(head);
            let buffer = slot.buffer.take();
            let (reported, sync, user_data) = (slot.reported, slot.sync, slot.user_data);
            self.tags.free(head);
            if reported {
                // Already reported (timed out): only the buffer was still held.
                drop(buffer);
                continue;
            }
            failed += 1;
            let completion = Completion {
                user_data,
                result: Err(Error::Reset {
                    controller: self.ctrl.name.clone(),
                }),
                buffer,
            };
            if sync {
                self.sync_done = Some(completion);
            } else {
                self.deferred.push_back(completion);
            }
        }
        self.stats.requests_completed += failed;
        self.retired = 0;
        self.sq.reset();
        self.cq.reset();
        if let Some(shadow) = &self.ctrl.shadow {
            self.sq
                .set_shadow(Some(shadow.slot(2 * self.qid as usize, 0)));
            self.cq
                .set_shadow(Some(shadow.slot(2 * self.qid as usize + 1, 0)));
        }
        let depth = self.sq.entries();
        let ctrl = self.ctrl.clone();
        ctrl.admin(
            command::create_io_cq(self.qid, depth, self.cq.iova().0, self.vector),
            None,
        )?;
        ctrl.admin(
            command::create_io_sq(self.qid, depth, self.sq.iova().0, self.qid),
            None,
        )?;
        self.ctrl_state = state;
        self.epoch_started = Instant::now();
        let resubmitted = again.len();
        if let Some(saved) = self.saved.take() {
            // At most `depth - 1` commands were in flight, so the empty ring holds them all.
            for &tag in &again {
                let epoch = self.epoch;
                let slot = self.tags.get_mut(tag);
                slot.expired = false;
                slot.abort_sent = false;
                slot.epoch = epoch;
                self.sq.push(&saved[tag.index()]);
                self.stats.commands_submitted += 1;
            }
            self.saved = Some(saved);
            self.ring();
        }
        log::info!(
            "{} queue {}: re-created after a reset; {failed} requests failed with a \
             retryable error, {resubmitted} commands submitted again",
            self.ctrl.name,
            self.qid
        );
        Ok(())
    }

    /// Reaps up to the pair's batch cap of completions, calling `f` for each finished
    /// request, and writes the CQ head doorbell once. Returns the number of requests
    /// finished. Also detects timed-out commands and a fatal controller status.
    #[inline]
    pub fn poll<F: FnMut(Completion)>(&mut self, f: F) -> usize {
        // A head an earlier `poll_deferred` left unwritten is written now.
        self.publish_cq_head();
        self.poll_inner(f)
    }

    /// As [`QueuePair::poll`], but the CQ head doorbell is not written here: the next
    /// [`QueuePair::ring`] / [`QueuePair::unplug`] writes it just before the SQ tail
    /// doorbell, or the next [`QueuePair::poll`] writes it. For a loop that reaps, then
    /// submits what the completions freed: both doorbells go out back to back, as SPDK's and
    /// libvfn's completion callbacks do. Safe to call repeatedly without submitting: the CQ
    /// cannot overflow, since no new command reaches the device before the next tail
    /// doorbell, which writes the head first.
    #[inline]
    pub fn poll_deferred<F: FnMut(Completion)>(&mut self, f: F) -> usize {
        self.defer_cq_head = true;
        let done = self.poll_inner(f);
        self.defer_cq_head = false;
        done
    }

    /// Writes the CQ head doorbell if the head moved since the last write.
    #[inline(always)]
    fn publish_cq_head(&mut self) {
        if let Some(mmio) = self.cq.publish() {
            self.stats.cq_doorbell_updates += 1;
            self.stats.cq_doorbell_writes += mmio as u64;
        }
    }

    #[inline(always)]
    fn poll_inner<F: FnMut(Completion)>(&mut self, mut f: F) -> usize {
        self.stats.polls += 1;
        if self.ctrl.state() != self.ctrl_state {
            self.poll_state_changed();
        }
        let mut done = 0;
        while let Some(c) = self.deferred.pop_front() {
            f(c);
            done += 1;
        }
        let reaped = self.reap(&mut f);
        done += reaped;
        if reaped > 0 && !self.queued.is_empty() {
            self.drain_queued();
            while let Some(c) = self.deferred.pop_front() {
                f(c);
                done += 1;
            }
        }
        let clock_due = if done == 0 {
            self.stats.idle_polls += 1;
            self.stats.idle_polls % IDLE_POLLS_PER_CLOCK_CHECK == 0
        } else {
            self.stats.polls % POLLS_PER_CLOCK_CHECK == 0
        };
        if clock_due {
            done += self.check_clock_counted(&mut f);
        }
        done
    }

    /// [`QueuePair::check_clock`], returning how many requests it finished (timed out, or
    /// failed with the controller) so that `poll`'s count includes them.
    #[cold]
    fn check_clock_counted<F: FnMut(Completion)>(&mut self, f: &mut F) -> usize {
        let mut finished = 0;
        self.check_clock(&mut |c| {
            finished += 1;
            f(c)
        });
        finished
    }

    /// A poll saw the controller's state change: after a reset, recover now (the failed
    /// requests are delivered by this poll); a failed or resetting controller is left to the
    /// timeout clock.
    #[cold]
    fn poll_state_changed(&mut self) {
        let state = self.ctrl.state();
        if state & (STATE_FAILED | STATE_RESETTING) != 0 {
            return;
        }
        if let Err(e) = self.recover(state) {
            log::error!(
                "{} queue {}: re-creating the queues after a reset failed: {e}",
                self.ctrl.name,
                self.qid
            );
        }
    }

    #[inline(always)]
    fn reap<F: FnMut(Completion)>(&mut self, f: &mut F) -> usize {
        let mut finished = 0;
        let mut consumed = 0;
        // The SQ head of the batch's last valid entry: only the newest one matters, so it is
        // checked once per batch.
        let mut sq_head = None;
        while consumed < self.max_completions {
            let Some(cqe) = self.cq.pop() else { break };
            consumed += 1;
            if cqe.sq_id != self.qid {
                self.reject(&cqe, "wrong submission queue id");
                continue;
            }
            let Some((tag, slot)) = self.tags.lookup_mut(cqe.cid) else {
                self.reject(&cqe, "command id not in flight");
                continue;
            };
            if !slot.awaiting {
                self.reject(&cqe, "command already completed");
                continue;
            }
            slot.awaiting = false;
            let head_tag = slot.head;
            sq_head = Some((cqe.sq_head, cqe.cid));
            let status = cqe.status();
            // A slot heads its own group exactly when its head has its index (a child's head is
            // another slot; both tags are live, so the index decides).
            if status.is_success()
                && head_tag.index() == tag.index()
                && slot.remaining == 1
                && !(slot.reported | slot.sync)
            {
                // The common case, a successful request of one command: complete it from the
                // one slot already at hand (what `finish_command` + `complete_group` do for
                // groups and errors). A result known to be `Ok` here lets an inlined callback
                // skip its error handling without the `Completion` ever reaching memory.
                let user_data = slot.user_data;
                let buffer = slot.buffer.take();
                self.tags.free(tag);
                self.stats.requests_completed += 1;
                f(Completion {
                    user_data,
                    result: Ok(cqe.dw0),
                    buffer,
                });
                finished += 1;
                continue;
            }
            let outcome = if status.is_success() {
                Outcome::Done(cqe.dw0)
            } else {
                Outcome::Status(status)
            };
            if self.finish_command(tag, head_tag, outcome, f) {
                finished += 1;
            }
        }
        if let Some((head, cid)) = sq_head {
            if !self.sq.update_head(head) {
                self.bad_sq_head(head, cid);
            }
        }
        if consumed > 0 {
            self.stats.completions_reaped += consumed as u64;
            if !self.defer_cq_head {
                self.publish_cq_head();
            }
        }
        finished
    }

    #[cold]
    fn reject(&mut self, cqe: &nvme_spec::CompletionEntry, why: &str) {
        self.stats.bad_completions += 1;
        if log_occurrence(self.stats.bad_completions) {
            log::warn!(
                "{} queue {}: rejected completion (cid {:#x}, sq id {}, status {}): {why} \
                 ({} rejected so far; further ones are logged sparsely)",
                self.ctrl.name,
                self.qid,
                cqe.cid,
                cqe.sq_id,
                cqe.status(),
                self.stats.bad_completions
            );
        }
    }

    #[cold]
    fn bad_sq_head(&mut self, head: u16, cid: u16) {
        self.stats.bad_sq_heads += 1;
        if log_occurrence(self.stats.bad_sq_heads) {
            log::warn!(
                "{} queue {}: ignored SQ head {head} in a completion (cid {cid:#x}): outside \
                 the entries submitted and not yet consumed ({} so far)",
                self.ctrl.name,
                self.qid,
                self.stats.bad_sq_heads
            );
        }
    }

    /// Records the outcome of command `tag` (already marked not awaiting) of the group headed
    /// by `head_tag`; completes its request when it was the group's last. Returns whether a
    /// request finished.
    #[inline(always)]
    fn finish_command<F: FnMut(Completion)>(
        &mut self,
        tag: Tag,
        head_tag: Tag,
        outcome: Outcome,
        f: &mut F,
    ) -> bool {
        if head_tag != tag {
            // The device is done with this command and its PRP-list page.
            self.tags.free(tag);
        }
        let head = self.tags.get_mut(head_tag);
        if head.reported {
            self.late_completion(head_tag);
            return false;
        }
        match outcome {
            Outcome::Done(dw0) => head.dw0 = dw0,
            Outcome::Status(status) => {
                if head.status.is_success() {
                    head.status = status;
                }
            }
        }
        head.remaining -= 1;
        if head.remaining > 0 {
            return false;
        }
        self.complete_group(head_tag, f);
        true
    }

    #[inline(always)]
    fn complete_group<F: FnMut(Completion)>(&mut self, head_tag: Tag, f: &mut F) {
        let head = self.tags.get_mut(head_tag);
        let status = head.status;
        let buffer = head.buffer.take();
        let user_data = head.user_data;
        let dw0 = head.dw0;
        let sync = head.sync;
        let opcode = head.opcode;
        self.tags.free(head_tag);
        self.stats.requests_completed += 1;
        let completion = Completion {
            user_data,
            result: if status.is_success() {
                Ok(dw0)
            } else {
                Err(command_error(opcode, status))
            },
            buffer,
        };
        self.deliver(sync, completion, f);
    }

    #[inline(always)]
    fn deliver<F: FnMut(Completion)>(&mut self, sync: bool, completion: Completion, f: &mut F) {
        if sync {
            self.sync_done = Some(completion);
        } else {
            f(completion);
        }
    }

    /// A command of a request already reported as failed (timeout, fatal status) completed:
    /// once the last one is back, the request's buffer and head slot are released.
    #[cold]
    fn late_completion(&mut self, head_tag: Tag) {
        self.stats.late_completions += 1;
        let head = self.tags.get_mut(head_tag);
        head.remaining -= 1;
        if head.remaining > 0 {
            return;
        }
        // Every command of the group is back: nothing references the buffer any more.
        drop(head.buffer.take());
        self.tags.free(head_tag);
        self.retired -= 1;
    }

    /// Reports the request of a command that will not complete in time with `error`, at
    /// once and without its buffer; its slots stay retired until the device returns its
    /// commands (see the module INVARIANT).
    #[cold]
    fn report_lost<F: FnMut(Completion)>(&mut self, head_tag: Tag, error: Error, f: &mut F) {
        let head = self.tags.get_mut(head_tag);
        if head.reported {
            return;
        }
        head.reported = true;
        let sync = head.sync;
        let user_data = head.user_data;
        self.retired += 1;
        self.stats.requests_completed += 1;
        let completion = Completion {
            user_data,
            result: Err(error),
            buffer: None,
        };
        self.deliver(sync, completion, f);
    }

    /// Advances the timeout clock; fails commands older than the timeout and, on a fatal
    /// controller status, every command in flight.
    #[cold]
    fn check_clock<F: FnMut(Completion)>(&mut self, f: &mut F) {
        let now = Instant::now();
        // Health: at most every HEALTH_INTERVAL, one CSTS read (never on the per-I/O path).
        let mut dead = None;
        if now.duration_since(self.health_checked) >= HEALTH_INTERVAL {
            self.health_checked = now;
            dead = self.check_health();
            // Collect asynchronous events (and re-post their requests) if the admin queue
            // is free; never waits for it.
            self.ctrl.poll_admin();
        }
        if self.tags.in_use() == 0 {
            self.epoch_started = now;
            return;
        }
        let fatal = dead.is_some();
        if !fatal && now.duration_since(self.epoch_started) < self.epoch_length {
            return;
        }
        if now.duration_since(self.epoch_started) >= self.epoch_length {
            self.epoch = self.epoch.wrapping_add(1);
            self.epoch_started = now;
        }
        let mut expired = [None::<Tag>; EXPIRE_BATCH];
        loop {
            let mut n = 0;
            for tag in self.tags.iter_in_use() {
                let slot = self.tags.get(tag);
                if slot.awaiting
                    && !slot.expired
                    && (fatal || self.epoch.wrapping_sub(slot.epoch) >= TIMEOUT_EPOCHS)
                {
                    expired[n] = Some(tag);
                    n += 1;
                    if n == EXPIRE_BATCH {
                        break;
                    }
                }
            }
            if n == 0 {
                break;
            }
            for tag in expired[..n].iter().flatten().copied() {
                self.expire(tag, dead, f);
            }
        }
        if self.retired > 0 && dead.is_none() {
            self.follow_up_timeouts();
        }
    }

    /// Timed-out commands still outstanding: sends the Aborts the admin queue was too busy
    /// for, and with [`TimeoutAction::AbortThenReset`] resets the controller when one is still
    /// outstanding a whole timeout after it expired.
    #[cold]
    fn follow_up_timeouts(&mut self) {
        let action = self.ctrl.timeout_action;
        if action == TimeoutAction::None || self.ctrl.is_failed() {
            return;
        }
        self.ctrl.poll_admin();
        let mut unsent = [None::<Tag>; EXPIRE_BATCH];
        let mut n = 0;
        let mut overdue = false;
        for tag in self.tags.iter_in_use() {
            let slot = self.tags.get(tag);
            if !(slot.awaiting && slot.expired) {
                continue;
            }
            if !slot.abort_sent && n < EXPIRE_BATCH {
                unsent[n] = Some(tag);
                n += 1;
            }
            overdue |= self.epoch.wrapping_sub(slot.epoch) >= TIMEOUT_EPOCHS;
        }
        for tag in unsent[..n].iter().flatten().copied() {
            let sent = self.ctrl.abort_async(self.qid, tag.cid());
            self.tags.get_mut(tag).abort_sent = sent;
        }
        if overdue && action == TimeoutAction::AbortThenReset {
            log::error!(
                "{} queue {}: a timed-out command is still outstanding after its abort; \
                 resetting the controller",
                self.ctrl.name,
                self.qid
            );
            self.ctrl.abort_stats_mut().resets += 1;
            if let Err(e) = self.ctrl.reset() {
                log::error!("{}: reset after a timeout failed: {e}", self.ctrl.name);
            }
            // This pair recovers on its next poll, like every other one.
        }
    }

    /// Reads CSTS once: all ones (the device is gone) or CFS (fatal) mark the controller
    /// failed and stop it (a removed device cannot be confirmed stopped: its memory leaks).
    /// Returns which, if either.
    #[cold]
    fn check_health(&mut self) -> Option<Dead> {
        if self.ctrl.release_requested() {
            log::error!(
                "{}: the kernel asks for the device back (unbind or hot-unplug); failing all \
                 I/O: close the controller to release it",
                self.ctrl.name
            );
            self.ctrl.mark_removed();
            return Some(Dead::Released);
        }
        if self.ctrl.is_removed() {
            return Some(Dead::Removed);
        }
        let raw = self.ctrl.mmio.read32(regs::CSTS);
        let dead = if raw == ALL_ONES {
            Dead::Removed
        } else if Csts(raw).cfs() {
            Dead::Fatal
        } else {
            return None;
        };
        if dead == Dead::Removed && !self.ctrl.is_removed() {
            log::error!(
                "{}: registers read all ones: the device is gone; failing all I/O",
                self.ctrl.name
            );
            self.ctrl.mark_removed();
        } else if !self.ctrl.is_failed() {
            log::error!(
                "{}: {}; failing all I/O and stopping the controller",
                self.ctrl.name,
                match dead {
                    Dead::Fatal => "Controller Fatal Status (CSTS.CFS=1)",
                    _ => "registers read all ones: the device is gone",
                }
            );
            self.ctrl.fail_and_stop();
        }
        Some(dead)
    }

    #[cold]
    fn expire<F: FnMut(Completion)>(&mut self, tag: Tag, dead: Option<Dead>, f: &mut F) {
        let cid = tag.cid();
        self.stats.timeouts += 1;
        // The slot stays allocated and awaiting: its late completion releases it.
        let epoch = self.epoch;
        let slot = self.tags.get_mut(tag);
        slot.expired = true;
        slot.abort_sent = false;
        slot.epoch = epoch;
        let head_tag = self.tags.get(tag).head;
        let command = command_name(self.tags.get(head_tag).opcode);
        let error = if let Some(dead) = dead {
            match dead {
                Dead::Fatal => Error::ControllerFatal {
                    controller: self.ctrl.name.clone(),
                },
                Dead::Removed => Error::Removed {
                    controller: self.ctrl.name.clone(),
                    why: "its registers read all ones",
                },
                Dead::Released => Error::Removed {
                    controller: self.ctrl.name.clone(),
                    why: "the kernel asked for the device back",
                },
            }
        } else {
            log::error!(
                "{} queue {}: {command} (cid {cid:#x}) timed out after {:?}",
                self.ctrl.name,
                self.qid,
                self.timeout
            );
            // If the abort succeeds the controller completes the command with Command Abort
            // Requested, which releases its retired slot. Never blocks: a busy admin queue
            // means a retry at the next clock tick.
            if self.ctrl.timeout_action != TimeoutAction::None {
                let sent = self.ctrl.abort_async(self.qid, cid);
                self.tags.get_mut(tag).abort_sent = sent;
            }
            Error::Timeout {
                command,
                cid,
                timeout: self.timeout,
            }
        };
        self.report_lost(head_tag, error, f);
    }

    /// Requests reported as failed (timeout, fatal status) whose slots, PRP pages and
    /// buffers are still retired because the device has not returned their commands.
    pub fn retired(&self) -> usize {
        self.retired as usize
    }
}

/// A read, write or compare waiting in the software queue.
struct Queued {
    op: u8,
    ns: Namespace,
    lba: u64,
    blocks: u32,
    fua: bool,
    user_data: u64,
    buffer: DmaBuffer,
}

/// Why every command in flight is lost at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dead {
    /// CSTS.CFS: Controller Fatal Status.
    Fatal,
    /// Registers read all ones: surprise removal or link down.
    Removed,
    /// The kernel asked for the device back (VFIO device request: unbind, hot-unplug).
    Released,
}

/// Most time between two CSTS reads of a polled queue pair (fail-fast on a dead device).
const HEALTH_INTERVAL: Duration = Duration::from_millis(50);

/// How one command ended.
enum Outcome {
    /// Success, with completion dword 0.
    Done(u32),
    /// The controller reported an error status.
    Status(Status),
}

/// Most commands one split request may use (its transfer is at most this many times
/// [`QueuePair::max_transfer_bytes`]).
pub const MAX_COMMANDS_PER_REQUEST: usize = 256;

/// Timed-out commands handled per scan pass.
const EXPIRE_BATCH: usize = 64;

/// Most blocks one Read/Write/Compare/Write Zeroes command moves (16-bit 0-based NLB).
pub const MAX_BLOCKS_PER_COMMAND: u32 = 1 << 16;

/// Fills the slot of a request's first (or only) command: the group head, `commands` long.
#[inline(always)]
fn fill_group_head(
    slot: &mut Slot,
    tag: Tag,
    epoch: u32,
    op: u8,
    user_data: u64,
    buffer: Option<DmaBuffer>,
    commands: u16,
) {
    slot.head = tag;
    slot.awaiting = true;
    slot.expired = false;
    slot.epoch = epoch;
    slot.remaining = commands;
    slot.opcode = op;
    slot.sync = false;
    slot.reported = false;
    slot.status = Status::SUCCESS;
    slot.dw0 = 0;
    slot.user_data = user_data;
    // Every path that frees a group head takes its buffer first, so the old value is `None`
    // and has nothing to drop; not dropping it saves the check and the call. Were it ever
    // `Some` (a driver bug), forgetting it leaks that buffer's mapping instead of freeing
    // memory the device might still reach.
    let old = std::mem::replace(&mut slot.buffer, buffer);
    debug_assert!(old.is_none(), "a freed request slot still held its buffer");
    std::mem::forget(old);
}

#[inline(always)]
fn rw_command(op: u8, nsid: u32, lba: u64, blocks: u32, fua: bool) -> SubmissionEntry {
    match op {
        opcode::nvm::WRITE => command::write(nsid, lba, blocks, fua),
        opcode::nvm::COMPARE => command::compare(nsid, lba, blocks),
        _ => command::read(nsid, lba, blocks),
    }
}

/// The reset generation of a controller state word (flags masked off).
fn generation(state: u64) -> u64 {
    state & !(STATE_FAILED | STATE_RESETTING)
}

fn command_name(op: u8) -> &'static str {
    opcode::nvm::name(op)
}

#[cold]
fn command_error(op: u8, status: Status) -> Error {
    Error::Command {
        command: command_name(op),
        status,
    }
}
