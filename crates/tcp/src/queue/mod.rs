//! One NVMe/TCP queue: a non-blocking TCP connection, the PDU codec, and the request slots
//! (an `nvme_pool::TagSet`, the table the PCIe queue pair uses: command id = slot index plus a
//! generation, so a stale or duplicated CCCID from the target matches no request). The admin
//! queue and every I/O queue pair are one of these.
//!
//! Receive path (no allocation): bytes are read into a fixed buffer; a PDU header is parsed
//! once it is complete (header digest checked), then C2HData payload is copied straight into
//! the caller's buffer as it arrives (data digest accumulated), so a PDU of any size passes
//! through a buffer of fixed size (parsing and every check on target input: `queue/rx.rs`,
//! per-command R2T rules: `r2t.rs`). Send path: PDUs are appended to a reusable byte vector and
//! written as far as the socket takes them; the rest goes out on the next submit or poll.
//!
//! Any protocol violation, digest mismatch, connection reset or end of stream fails the
//! queue: the socket is shut down, every outstanding request completes with
//! `Error::Transport` (its buffer given back: no device can touch it), and later
//! submissions fail with the same error.
//!
//! This file keeps the queue's state and its creation; one file per concern below it:
//! `connect.rs` (ICReq/ICResp handshake), `submit.rs` (slots and command capsules),
//! `link.rs` (socket reads and writes, back-pressure), `rx.rs` (PDU parsing and checks),
//! `complete.rs` (finishing requests, failing the queue, poll), `timeout.rs` (epochs, expiry,
//! Abort bookkeeping), `recover.rs` (abandon, keep, resend across connections).

use std::collections::VecDeque;
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use nvme_core::split::Splitter;
use nvme_core::{Completion, DmaBuffer, EpochClock, Error, IoVec};
use nvme_pool::{Tag, TagSet};
use nvme_spec::tcp::{self, Digests};
use nvme_spec::SubmissionEntry;

mod complete;
mod connect;
mod link;
mod recover;
mod rx;
mod submit;
mod timeout;

pub(crate) use connect::handshake;

use crate::error::TcpError;
use crate::r2t::R2tState;
#[cfg(doc)]
use crate::r2t::TX_HIGH_WATER;

/// Receive buffer size: holds any non-data PDU with room to batch many small ones.
pub(crate) const RX_BUFFER: usize = 64 * 1024;
/// Largest PLEN accepted (a C2HData PDU carries at most the transfer; 16 MiB is far above
/// what this host asks for), so a garbage length is caught at once.
const MAX_PLEN: u32 = 16 << 20;
/// Polls without progress between clock reads (timeouts, keep-alive).
pub(crate) const IDLE_POLLS_PER_CLOCK_CHECK: u32 = 32;

/// Connection parameters agreed by ICReq/ICResp.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Negotiated {
    pub hdgst: bool,
    pub ddgst: bool,
    /// Data alignment the controller asks of host PDUs, bytes.
    pub cpda_align: usize,
    /// Largest H2CData payload.
    pub maxh2cdata: usize,
}

impl Negotiated {
    /// The digests of the connection, as the PDU codec takes them.
    pub(crate) const fn digests(&self) -> Digests {
        Digests {
            header: self.hdgst,
            data: self.ddgst,
        }
    }
}

/// Per-request state, recycled: the value of a [`TagSet`] slot (whether it is in use, and its
/// command id, are the tag set's).
struct Slot {
    /// Direction: data moves host to controller.
    to_device: bool,
    /// Who takes the completion.
    waiter: Waiter,
    opcode: u8,
    /// Bytes of data the command moves.
    len: usize,
    /// C2HData bytes received so far.
    received: usize,
    /// Epoch at submission (timeouts).
    epoch: u32,
    user_data: u64,
    buffer: Option<DmaBuffer>,
    /// The pieces of a vectored request (its data then is these, in order, not `buffer`).
    pieces: Option<Box<IoVec>>,
    /// The command as sent (command id and SGL filled in): sent again unchanged when the
    /// request is resubmitted on a new connection.
    sqe: SubmissionEntry,
    /// The command outlived its timeout and waits for the outcome of its Abort.
    expired: bool,
    /// An Abort for it went out on the admin queue.
    abort_sent: bool,
    /// What R2Ts asked of it so far (`r2t.rs`).
    r2t: R2tState,
}

impl Slot {
    /// The request has data (a buffer or pieces).
    fn has_data(&self) -> bool {
        self.buffer.is_some() || self.pieces.is_some()
    }

    /// Copies received data to byte `pos` of the request's data.
    fn write_data(&mut self, pos: usize, src: &[u8]) {
        match (&mut self.buffer, &mut self.pieces) {
            (Some(buf), _) => buf[pos..pos + src.len()].copy_from_slice(src),
            (None, Some(pieces)) => pieces.write_at(pos, src),
            (None, None) => unreachable!("validated: a read slot has a buffer"),
        }
    }

    /// The request's data from byte `pos`, contiguous up to `len` bytes (less at the end of
    /// a piece of a vectored request).
    fn data_at(&self, pos: usize, len: usize) -> &[u8] {
        match (&self.buffer, &self.pieces) {
            (Some(buf), _) => &buf[pos..pos + len],
            (None, Some(pieces)) => {
                let run = pieces.contiguous_at(pos);
                &run[..len.min(run.len())]
            }
            (None, None) => unreachable!("validated: a write slot has a buffer"),
        }
    }
}

/// Who takes a request's completion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Waiter {
    /// The ready list that `poll` delivers.
    Poll,
    /// The synchronous waiter (`sync_done`).
    Sync,
    /// The queue's [`Splitter`]: a piece of a split request, its user data the piece id.
    Piece,
}

impl Waiter {
    /// The waiter of a whole request: synchronous or polled.
    #[inline(always)]
    pub(crate) fn of(sync: bool) -> Self {
        if sync {
            Waiter::Sync
        } else {
            Waiter::Poll
        }
    }
}

/// Receive state.
#[derive(Clone, Copy, Debug)]
enum Rx {
    /// Waiting for a complete PDU header.
    Header,
    /// Copying C2HData payload into the slot of `tag` at `pos` (live while in this state:
    /// every path that frees a slot outside `data_done` also resets the receive state).
    Data {
        tag: Tag,
        pos: usize,
        remaining: usize,
        datal: usize,
        pdu_flags: u8,
        crc: u32,
    },
    /// Waiting for the data digest of a finished C2HData payload.
    DataDigest {
        tag: Tag,
        datal: usize,
        pdu_flags: u8,
        crc: u32,
    },
}

/// Counters of one queue.
#[derive(Clone, Debug, Default)]
pub struct TcpQueueStats {
    /// Requests larger than one command, sent as several (each command also counts in
    /// `commands_submitted` and `requests_completed`).
    pub split_requests: u64,
    /// Command capsules sent.
    pub commands_submitted: u64,
    /// Requests completed (successfully or not).
    pub requests_completed: u64,
    /// PDUs received.
    pub pdus_received: u64,
    /// C2HData PDUs that completed their command with the SUCCESS flag (no CapsuleResp).
    pub success_shortcuts: u64,
    /// R2T PDUs answered.
    pub r2ts: u64,
    /// Writes whose data went in the command capsule.
    pub in_capsule_writes: u64,
    /// Calls to poll.
    pub polls: u64,
    /// Polls that found nothing.
    pub idle_polls: u64,
}

/// The common core of the admin queue and I/O queue pairs.
pub(crate) struct Queue {
    stream: TcpStream,
    pub addr: SocketAddr,
    pub qid: u16,
    pub controller: Arc<str>,
    pub neg: Negotiated,
    /// Largest in-capsule data this queue may send (admin: 8 KiB; I/O: IOCCSZ * 16 - 64).
    pub in_capsule_max: usize,
    rx: Box<[u8]>,
    rx_head: usize,
    rx_tail: usize,
    rx_state: Rx,
    tx: Vec<u8>,
    tx_head: usize,
    /// Bytes written to the socket since the connection opened (R2T bookkeeping).
    tx_sent: u64,
    /// PDU handling stopped with bytes left in `rx` because `tx` is over
    /// [`TX_HIGH_WATER`]; resumed once the socket has taken enough.
    rx_paused: bool,
    /// Don't write to the socket at each submission (plugged batch: [`Queue::plug`]).
    plugged: bool,
    /// Request slots: command ids with generations.
    tags: TagSet<Slot>,
    /// Scratch list of the tags in use for the cold paths that complete or resend them while
    /// walking (abandon, fail, timeouts): allocated once with room for every slot.
    live: Vec<Tag>,
    pub failed: Option<Arc<TcpError>>,
    pub deferred: VecDeque<Completion>,
    sync_done: Option<Completion>,
    /// Completion dword 0 of the last synchronous command, kept also when it failed (a
    /// refused Connect names the bad parameter there).
    pub sync_dw0: u32,
    /// Completion dword 1 of the last synchronous command (Property Get of 8 bytes).
    pub sync_dw1: u32,
    pub stats: TcpQueueStats,
    /// Timeouts: the shared clock of `nvme_core`, read every few polls.
    pub clock: EpochClock,
    /// Requests larger than one command, in flight as pieces (`Waiter::Piece` slots).
    pub split: Splitter,
    pub timeout: Duration,
    pub polls_since_clock: u32,
    /// What a command that outlives `timeout` gets: `false` fails the queue at once (the
    /// command with `Error::Timeout`, the others with the transport error); `true` marks it
    /// expired and raises `timeout_work` so that the owner sends an Abort and escalates.
    pub abort_on_timeout: bool,
    /// Set by the clock when a command expired or an expired one is overdue; the owner
    /// handles it (cold path) and clears it.
    pub timeout_work: bool,
    /// I/O queues: the controller's state word and the value the owning pair last acted
    /// on. A connection that fails while they differ (a reset has started: the target may
    /// close the old association's connections before the pair looks at the word) leaves
    /// its requests in flight for the pair's reset handling (`Error::Reset`, or resubmitted).
    pub state_watch: Option<(Arc<std::sync::atomic::AtomicU64>, u64)>,
    /// Fuzzing and tests: an in-memory pipe that replaces the socket's reads and writes
    /// (`fuzzing.rs`).
    #[cfg(any(test, feature = "fuzzing"))]
    pub mem: Option<crate::fuzzing::MemPipe>,
}

/// The size and time limits of a new [`Queue`].
pub(crate) struct QueueLimits {
    /// Request slots (queue entries - 1).
    pub(crate) slots: u16,
    /// Largest write sent as in-capsule data.
    pub(crate) in_capsule_max: usize,
    /// Per-command timeout.
    pub(crate) timeout: Duration,
}

impl Queue {
    pub(crate) fn new(
        stream: TcpStream,
        addr: SocketAddr,
        qid: u16,
        controller: Arc<str>,
        neg: Negotiated,
        limits: QueueLimits,
    ) -> Self {
        let QueueLimits {
            slots,
            in_capsule_max,
            timeout,
        } = limits;
        Queue {
            stream,
            addr,
            qid,
            controller,
            neg,
            in_capsule_max,
            rx: vec![0u8; RX_BUFFER].into_boxed_slice(),
            rx_head: 0,
            rx_tail: 0,
            rx_state: Rx::Header,
            tx: Vec::with_capacity(RX_BUFFER),
            tx_head: 0,
            tx_sent: 0,
            rx_paused: false,
            plugged: false,
            tags: TagSet::new(slots, |_| Slot {
                to_device: false,
                waiter: Waiter::Poll,
                opcode: 0,
                len: 0,
                received: 0,
                epoch: 0,
                user_data: 0,
                buffer: None,
                pieces: None,
                sqe: SubmissionEntry::default(),
                expired: false,
                abort_sent: false,
                r2t: R2tState::default(),
            }),
            live: Vec::with_capacity(usize::from(slots)),
            failed: None,
            deferred: VecDeque::with_capacity(usize::from(slots)),
            sync_done: None,
            sync_dw0: 0,
            sync_dw1: 0,
            stats: TcpQueueStats::default(),
            clock: EpochClock::new(timeout),
            split: Splitter::default(),
            timeout,
            polls_since_clock: 0,
            abort_on_timeout: false,
            timeout_work: false,
            state_watch: None,
            #[cfg(any(test, feature = "fuzzing"))]
            mem: None,
        }
    }

    /// Slots (most commands in flight at once).
    pub(crate) fn capacity(&self) -> u16 {
        self.tags.capacity()
    }

    /// Requests in flight (slots in use).
    pub(crate) fn in_flight(&self) -> u16 {
        self.tags.in_use()
    }

    /// The tags in use, in index order, in the scratch list taken out of the queue (no
    /// allocation: it has room for every slot), so that the caller may complete or resend them
    /// while walking it; give it back with [`Queue::put_live`].
    fn take_live(&mut self) -> Vec<Tag> {
        let mut live = std::mem::take(&mut self.live);
        live.clear();
        live.extend(self.tags.iter_in_use());
        live
    }

    /// Returns the scratch list [`Queue::take_live`] lent.
    fn put_live(&mut self, live: Vec<Tag>) {
        self.live = live;
    }

    fn transport_error(&self, source: Arc<TcpError>) -> Error {
        Error::Transport {
            controller: self.controller.to_string(),
            source,
        }
    }

    /// The error every request gets once the queue has failed.
    pub(crate) fn closed_error(&self) -> Option<Error> {
        self.failed.clone().map(|s| self.transport_error(s))
    }

    /// Sizes of the send queue (bytes held, sent or not) and of the receive buffer.
    #[cfg(any(test, feature = "fuzzing"))]
    #[cfg(any(test, feature = "fuzzing"))]
    pub(crate) fn buffer_sizes(&self) -> (usize, usize) {
        (self.tx.len(), self.rx.len())
    }

    /// Closes the connection (the queue is being dropped).
    pub(crate) fn close(&mut self) {
        let _ = self.stream.shutdown(Shutdown::Both);
    }

    /// The socket, for a queue that only ran the Fabrics Connect of another one.
    pub(crate) fn into_stream(self) -> TcpStream {
        self.stream
    }
}

/// Bytes of data a command carries in its capsule (0 when it moves data by R2T/C2HData).
fn in_capsule_len(sqe: &SubmissionEntry) -> usize {
    if sqe.sgl_id() == tcp::sgl::IN_CAPSULE_DATA {
        sqe.sgl_len() as usize
    } else {
        0
    }
}

/// Name of an opcode for messages (admin and I/O opcodes overlap; I/O names are used for
/// the data commands this host issues on I/O queues).
pub(crate) fn command_name(op: u8) -> &'static str {
    match op {
        nvme_spec::opcode::nvm::READ => "Read",
        nvme_spec::opcode::nvm::WRITE => "Write",
        nvme_spec::opcode::nvm::FLUSH => "Flush",
        nvme_spec::opcode::nvm::COPY => "Copy",
        nvme_spec::opcode::admin::IDENTIFY => "Identify",
        nvme_spec::opcode::admin::KEEP_ALIVE => "Keep Alive",
        nvme_spec::fabrics::FABRICS_OPCODE => "Fabrics command",
        _ => "command",
    }
}
