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
//! The code is split by concern (the options struct lives in `nvme-core`): `create`, `submit` (validation, slots, data
//! pointers, doorbells), `split` (transfers over MDTS), `software_queue`, `reap`
//! (completions), `timeout` (the epoch clock, expiry, aborts), `health` (CSTS checks),
//! `recover` (the controller's state changed: reset recovery), `sync`, `interrupts` and
//! `drop`. This file holds the pair's state, its invariants and small accessors.

mod create;
mod drop;
mod fused;
mod health;
mod interrupts;
mod metadata;
mod reap;
mod recover;
mod software_queue;
mod split;
mod submit;
mod sync;
mod timeout;
mod vectored;

pub use interrupts::InterruptArm;
pub use nvme_core::{Completion, QueuePairOptions};

/// Ring entries of a PCIe queue pair created with the default options (clamped to
/// CAP.MQES+1).
pub const DEFAULT_QUEUE_DEPTH: u32 = 256;
pub use split::MAX_COMMANDS_PER_REQUEST;
pub use submit::MAX_BLOCKS_PER_COMMAND;

use std::cell::Cell;
use std::collections::VecDeque;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nvme_core::{EpochClock, IoVec};
use nvme_pool::{Tag, TagSet};
use nvme_spec::queue::SubmissionEntry;
use nvme_spec::Status;
use nvme_vfio::{DmaBuffer, DmaDomain, InterruptEvent};

use crate::controller::Inner;
use crate::ring::{CqRing, SlotPages, SqRing};
use software_queue::Queued;

/// Counters of one queue pair (plain fields: reading them costs nothing).
#[derive(Clone, Debug, Default)]
pub struct QueuePairStats {
    /// Commands written to the submission ring.
    pub commands_submitted: u64,
    /// Requests completed (a split transfer counts once).
    pub requests_completed: u64,
    /// Completion entries consumed.
    pub completions_reaped: u64,
    // The two counters one doorbell update increments are not neighbours: side by side, the
    // compiler turned the pair of increments into a 128-bit load, subtract and store (four
    // instructions for two, on every doorbell update).
    /// SQ tail updates published (MMIO or shadow doorbell).
    pub sq_doorbell_updates: u64,
    /// CQ head updates published (MMIO or shadow doorbell).
    pub cq_doorbell_updates: u64,
    /// MMIO writes to the SQ tail doorbell (fewer than updates with shadow doorbells).
    pub sq_doorbell_writes: u64,
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
    /// Vectored requests submitted (`QueuePair::submit_vectored`).
    pub vectored_requests: u64,
}

/// Per-slot request state. Recycled, never zeroed as a whole: each submission sets the fields
/// the command uses.
///
/// `repr(C)` with the fields `fill_group_head` sets to constants on the single-command path
/// next to each other (`status` .. `simple`: eight bytes, then `dw0`), so the compiler writes
/// them with one or two stores instead of one store per field. Not a device structure.
#[repr(C)]
struct Slot {
    user_data: u64,
    buffer: Option<DmaBuffer>,
    /// The pieces of a vectored request (its data then is these, not `buffer`); like
    /// `buffer`, given back only once the device is done with them.
    pieces: Option<Box<IoVec>>,
    /// Tag of the group head (own tag for a single command or the head itself).
    head: Tag,
    // Fields below up to `simple` are meaningful on a group head only (`awaiting` and
    // `expired` excepted).
    /// Commands of the group still outstanding.
    remaining: u16,
    /// Epoch (see `QueuePair::epoch`) when the command was submitted.
    epoch: u32,
    /// Completion dword 0 of the (last) command.
    dw0: u32,
    /// First error status of the group (`Status::SUCCESS` while none): two bytes and no drop
    /// glue on the hot path; the `Error` is built only when the request fails.
    status: Status,
    /// Opcode, for messages.
    opcode: u8,
    /// A command is outstanding in this slot (cleared only by its completion).
    awaiting: bool,
    /// The outstanding command timed out (or the controller failed): it is not expired again.
    /// `epoch` then holds the epoch of the expiry.
    expired: bool,
    /// A synchronous caller waits for this request.
    sync: bool,
    /// The caller already got this request's completion (an error, after a timeout); the
    /// slots stay retired until the device returns every command of the group.
    reported: bool,
    /// The request is one command in this slot (its own group head), with no vectored
    /// pieces, no synchronous waiter and not yet reported: its successful completion takes
    /// reap's fast path (one test instead of the head, count, flags and pieces checks).
    /// Set by `fill_group_head` for one-command requests; cleared by every path that makes
    /// the slot anything else (a child command, pieces, `sync`, `reported`).
    simple: bool,
    /// An Abort for the expired command was submitted.
    abort_sent: bool,
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
    /// Stamps commands and ages them (the shared clock of `nvme_core`).
    clock: EpochClock,
    stats: QueuePairStats,
    deferred: VecDeque<Completion>,
    sync_done: Option<Completion>,
    // Cold fields.
    /// When the health check reads CSTS next (a comparison every few polls, no subtraction).
    health_due: Instant,
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

    /// Requests reported as failed (timeout, fatal status) whose slots, PRP pages and
    /// buffers are still retired because the device has not returned their commands.
    pub fn retired(&self) -> usize {
        self.retired as usize
    }
}
