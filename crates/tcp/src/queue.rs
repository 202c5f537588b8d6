//! One NVMe/TCP queue: a non-blocking TCP connection, the PDU codec, and the request slots
//! (command id = slot index). The admin queue and every I/O queue pair are one of these.
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

use std::collections::VecDeque;
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nvme_core::{Completion, DmaBuffer, Error, IoFailure};
use nvme_spec::tcp::{
    self, dgst, pdu_type, CapsuleCmd, CommonHeader, Digests, IcReq, IcResp, PduFrame, TermReq,
};
use nvme_spec::SubmissionEntry;

mod rx;

use crate::error::TcpError;
use crate::r2t::{R2tState, TX_COMPACT, TX_HIGH_WATER};

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

/// Per-request state, recycled.
struct Slot {
    busy: bool,
    /// Direction: data moves host to controller.
    to_device: bool,
    sync: bool,
    opcode: u8,
    /// Bytes of data the command moves.
    len: usize,
    /// C2HData bytes received so far.
    received: usize,
    /// Epoch at submission (timeouts).
    epoch: u32,
    user_data: u64,
    buffer: Option<DmaBuffer>,
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

/// Receive state.
#[derive(Clone, Copy, Debug)]
enum Rx {
    /// Waiting for a complete PDU header.
    Header,
    /// Copying C2HData payload into slot `cid` at `pos`.
    Data {
        cid: u16,
        pos: usize,
        remaining: usize,
        datal: usize,
        pdu_flags: u8,
        crc: u32,
    },
    /// Waiting for the data digest of a finished C2HData payload.
    DataDigest {
        cid: u16,
        datal: usize,
        pdu_flags: u8,
        crc: u32,
    },
}

/// Counters of one queue.
#[derive(Clone, Debug, Default)]
pub struct TcpQueueStats {
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
    /// Don't write to the socket at each submission (plugged batch).
    pub plugged: bool,
    slots: Vec<Slot>,
    free: Vec<u16>,
    pub in_flight: u16,
    pub failed: Option<Arc<TcpError>>,
    pub deferred: VecDeque<Completion>,
    sync_done: Option<Completion>,
    /// Completion dword 0 of the last synchronous command, kept also when it failed (a
    /// refused Connect names the bad parameter there).
    pub sync_dw0: u32,
    /// Completion dword 1 of the last synchronous command (Property Get of 8 bytes).
    pub sync_dw1: u32,
    pub stats: TcpQueueStats,
    // Timeouts: the clock is read every few polls; a command older than `TIMEOUT_EPOCHS`
    // epochs has timed out.
    pub epoch: u32,
    epoch_started: Instant,
    epoch_length: Duration,
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

/// Epochs a command may live (the timeout is split into `TIMEOUT_EPOCHS - 1` epochs): the
/// same clock as PCIe, one definition in `nvme-core`.
use nvme_core::TIMEOUT_EPOCHS;

/// Connects, sends ICReq and checks ICResp (blocking, with `timeout`), then switches the socket
/// to non-blocking mode.
pub(crate) fn handshake(
    addr: SocketAddr,
    qid: u16,
    want_hdgst: bool,
    want_ddgst: bool,
    timeout: Duration,
) -> Result<(TcpStream, Negotiated), TcpError> {
    let stream = TcpStream::connect_timeout(&addr, timeout)
        .map_err(|source| TcpError::Connect { addr, source })?;
    let io = |source| TcpError::Io { addr, qid, source };
    stream.set_nodelay(true).map_err(io)?;
    stream.set_read_timeout(Some(timeout)).map_err(io)?;
    stream.set_write_timeout(Some(timeout)).map_err(io)?;
    // ICReq and ICResp go before digests are on (NVMe/TCP §3.6.2.2).
    let ic = PduFrame::new(IcReq::SIZE, None, Digests::default(), 1);
    let req = IcReq {
        ch: ic.header(pdu_type::IC_REQ, 0),
        pfv: tcp::PFV_1_0,
        hpda: 0,
        dgst: if want_hdgst { dgst::HEADER } else { 0 } | if want_ddgst { dgst::DATA } else { 0 },
        maxr2t: crate::r2t::MAXR2T,
        rsvd: [0; 112],
    };
    (&stream).write_all(&req.to_bytes()).map_err(io)?;
    let mut raw = [0u8; IcResp::SIZE];
    (&stream)
        .read_exact(&mut raw)
        .map_err(|source| match source.kind() {
            ErrorKind::WouldBlock | ErrorKind::TimedOut => TcpError::Timeout {
                addr,
                qid,
                what: "waiting for ICResp",
                timeout,
            },
            ErrorKind::UnexpectedEof | ErrorKind::ConnectionReset => TcpError::Closed { addr, qid },
            _ => TcpError::Io { addr, qid, source },
        })?;
    let handshake_err = |what: String| TcpError::Handshake { addr, qid, what };
    let ch = CommonHeader::from_bytes(raw[..CommonHeader::SIZE].try_into().expect("8 bytes"));
    if ch.pdu_type == pdu_type::C2H_TERM_REQ {
        let t = TermReq::from_bytes(raw[..TermReq::SIZE].try_into().expect("24 bytes"));
        return Err(TcpError::Terminated {
            addr,
            qid,
            fes: t.fes,
            fei: t.fei(),
            name: tcp::fes::name(t.fes),
        });
    }
    if ch.pdu_type != pdu_type::IC_RESP
        || ch.hlen != tcp::IC_HLEN
        || ch.plen != u32::from(tcp::IC_HLEN)
    {
        return Err(handshake_err(format!(
            "a {} PDU (type {:#x}, hlen {}, plen {}) instead of ICResp",
            pdu_type::name(ch.pdu_type),
            ch.pdu_type,
            ch.hlen,
            ch.plen
        )));
    }
    let resp = IcResp::from_bytes(&raw);
    if resp.pfv != tcp::PFV_1_0 {
        return Err(handshake_err(format!(
            "PDU format version {} (this host speaks version 1.0)",
            resp.pfv
        )));
    }
    if resp.cpda > tcp::PDA_MAX {
        return Err(handshake_err(format!(
            "CPDA {} (at most {})",
            resp.cpda,
            tcp::PDA_MAX
        )));
    }
    if resp.maxh2cdata < tcp::MIN_MAXH2CDATA {
        return Err(handshake_err(format!(
            "MAXH2CDATA {} (at least {})",
            resp.maxh2cdata,
            tcp::MIN_MAXH2CDATA
        )));
    }
    let hdgst = resp.dgst & dgst::HEADER != 0;
    let ddgst = resp.dgst & dgst::DATA != 0;
    if (hdgst && !want_hdgst) || (ddgst && !want_ddgst) {
        return Err(handshake_err(format!(
            "digests {:#x} enabled that were not asked for",
            resp.dgst
        )));
    }
    if hdgst != want_hdgst || ddgst != want_ddgst {
        log::info!(
            "{addr} queue {qid}: target enabled header digest {hdgst}, data digest {ddgst} \
             (asked {want_hdgst}, {want_ddgst})"
        );
    }
    stream.set_nonblocking(true).map_err(io)?;
    Ok((
        stream,
        Negotiated {
            hdgst,
            ddgst,
            cpda_align: (usize::from(resp.cpda) + 1) * tcp::PDA_UNIT,
            maxh2cdata: resp.maxh2cdata as usize,
        },
    ))
}

impl Queue {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        stream: TcpStream,
        addr: SocketAddr,
        qid: u16,
        controller: Arc<str>,
        neg: Negotiated,
        slots: u16,
        in_capsule_max: usize,
        timeout: Duration,
    ) -> Self {
        let epoch_length = (timeout / (TIMEOUT_EPOCHS - 1)).max(Duration::from_millis(1));
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
            slots: (0..slots)
                .map(|_| Slot {
                    busy: false,
                    to_device: false,
                    sync: false,
                    opcode: 0,
                    len: 0,
                    received: 0,
                    epoch: 0,
                    user_data: 0,
                    buffer: None,
                    sqe: SubmissionEntry::default(),
                    expired: false,
                    abort_sent: false,
                    r2t: R2tState::default(),
                })
                .collect(),
            free: (0..slots).rev().collect(),
            in_flight: 0,
            failed: None,
            deferred: VecDeque::with_capacity(usize::from(slots)),
            sync_done: None,
            sync_dw0: 0,
            sync_dw1: 0,
            stats: TcpQueueStats::default(),
            epoch: 0,
            epoch_started: Instant::now(),
            epoch_length,
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
        self.slots.len() as u16
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

    // ----- submission ------------------------------------------------------------------

    /// Sends a command capsule. `buffer` holds `len` bytes of data moving in the direction
    /// `to_device` says (ignored when `len` is 0). On a refusal the buffer comes back.
    pub(crate) fn submit(
        &mut self,
        mut sqe: SubmissionEntry,
        buffer: Option<DmaBuffer>,
        len: usize,
        to_device: bool,
        user_data: u64,
        sync: bool,
    ) -> Result<(), IoFailure> {
        if let Some(error) = self.closed_error() {
            return Err(IoFailure { error, buffer });
        }
        let Some(cid) = self.free.pop() else {
            return Err(IoFailure {
                error: Error::QueueFull {
                    qid: self.qid,
                    depth: u32::from(self.capacity()) + 1,
                },
                buffer,
            });
        };
        sqe.set_cid(cid);
        let in_capsule = to_device && len > 0 && len <= self.in_capsule_max;
        if in_capsule {
            sqe.set_sgl(tcp::sgl::IN_CAPSULE_DATA, 0, len as u32);
        } else {
            sqe.set_sgl(tcp::sgl::TRANSPORT_DATA, 0, len as u32);
        }
        let slot = &mut self.slots[usize::from(cid)];
        slot.busy = true;
        slot.to_device = to_device;
        slot.sync = sync;
        slot.opcode = sqe.opcode();
        slot.len = if buffer.is_some() { len } else { 0 };
        slot.received = 0;
        slot.epoch = self.epoch;
        slot.user_data = user_data;
        slot.buffer = buffer;
        slot.sqe = sqe;
        slot.expired = false;
        slot.abort_sent = false;
        slot.r2t = R2tState::new(if in_capsule { len } else { 0 });
        self.in_flight += 1;
        self.encode(cid);
        if !self.plugged {
            self.flush_tx();
        }
        Ok(())
    }

    /// Appends the command capsule of busy slot `cid` (its saved command, in-capsule data
    /// when the command says so) to the send buffer.
    fn encode(&mut self, cid: u16) {
        let slot = &self.slots[usize::from(cid)];
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

    // ----- recovery --------------------------------------------------------------------

    /// Drops the connection for a reset or reconnect: the socket is shut down and every
    /// request in flight is settled: an expired one (its timeout already passed) completes
    /// with `Error::Timeout`; with `keep` the others stay in their slots to be sent again on
    /// the next connection ([`Queue::resend`]), else they complete with `error()`. Buffers
    /// come back with every completion: no device holds them, and the socket that could
    /// have written them is gone. Later submissions fail with `reason` until
    /// [`Queue::attach`].
    pub(crate) fn abandon(
        &mut self,
        keep: bool,
        reason: TcpError,
        mut error: impl FnMut() -> Error,
    ) {
        let _ = self.stream.shutdown(Shutdown::Both);
        self.failed = Some(Arc::new(reason));
        self.tx.clear();
        self.tx_head = 0;
        self.rx_state = Rx::Header;
        self.rx_paused = false;
        self.rx_head = 0;
        self.rx_tail = 0;
        self.timeout_work = false;
        for cid in 0..self.slots.len() as u16 {
            let s = &self.slots[usize::from(cid)];
            if !s.busy {
                continue;
            }
            if s.expired {
                let e = Error::Timeout {
                    command: command_name(s.opcode),
                    cid,
                    timeout: self.timeout,
                };
                self.finish(cid, Err(e));
            } else if !keep {
                self.finish(cid, Err(error()));
            }
        }
    }

    /// Completes every request kept by [`Queue::abandon`] with `error()` (the new
    /// connection could not be made).
    pub(crate) fn drop_kept(&mut self, mut error: impl FnMut() -> Error) {
        for cid in 0..self.slots.len() as u16 {
            if self.slots[usize::from(cid)].busy {
                self.finish(cid, Err(error()));
            }
        }
    }

    /// Settles the requests [`Queue::abandon`] kept for a controller reset, once the reset
    /// is done: with `unknown` (the old association's commands were not confirmed stopped)
    /// every command other than a read or a flush completes with `unknown_error(command)`
    /// (a write may still run on the target: never resubmitted); the rest stay kept when
    /// `resubmit`, else complete with `error()`.
    pub(crate) fn settle_kept(
        &mut self,
        resubmit: bool,
        unknown: bool,
        mut error: impl FnMut() -> Error,
        mut unknown_error: impl FnMut(&'static str) -> Error,
    ) {
        for cid in 0..self.slots.len() as u16 {
            let s = &self.slots[usize::from(cid)];
            if !s.busy {
                continue;
            }
            let harmless = matches!(
                s.opcode,
                nvme_spec::opcode::nvm::READ | nvme_spec::opcode::nvm::FLUSH
            );
            if unknown && !harmless {
                let e = unknown_error(command_name(s.opcode));
                self.finish(cid, Err(e));
            } else if !resubmit {
                self.finish(cid, Err(error()));
            }
        }
    }

    /// Closes the queue because its association was declared lost: every request still
    /// here completes once with the transport error `reason`, later submissions fail with it.
    pub(crate) fn close_lost(&mut self, reason: Arc<TcpError>) {
        let _ = self.stream.shutdown(Shutdown::Both);
        self.failed = Some(reason.clone());
        self.tx.clear();
        self.tx_head = 0;
        self.rx_state = Rx::Header;
        self.rx_head = 0;
        self.rx_tail = 0;
        self.timeout_work = false;
        for cid in 0..self.slots.len() as u16 {
            if self.slots[usize::from(cid)].busy {
                let e = self.transport_error(reason.clone());
                self.finish(cid, Err(e));
            }
        }
    }

    /// Takes a new connection (same queue id, already connected by Fabrics Connect).
    pub(crate) fn attach(&mut self, stream: TcpStream, neg: Negotiated) {
        let _ = self.stream.shutdown(Shutdown::Both);
        self.stream = stream;
        self.neg = neg;
        self.failed = None;
        self.tx.clear();
        self.tx_head = 0;
        self.rx_state = Rx::Header;
        self.rx_paused = false;
        self.rx_head = 0;
        self.rx_tail = 0;
        self.plugged = false;
        self.timeout_work = false;
        self.epoch_started = Instant::now();
    }

    /// Sends the requests [`Queue::abandon`] kept again, with fresh timeouts. Returns how
    /// many.
    pub(crate) fn resend(&mut self) -> usize {
        let mut n = 0;
        for cid in 0..self.slots.len() as u16 {
            let epoch = self.epoch;
            let s = &mut self.slots[usize::from(cid)];
            if !s.busy {
                continue;
            }
            s.received = 0;
            s.r2t = R2tState::new(in_capsule_len(&s.sqe));
            s.epoch = epoch;
            s.expired = false;
            s.abort_sent = false;
            self.encode(cid);
            n += 1;
        }
        self.flush_tx();
        n
    }

    /// Expired commands whose Abort has not gone out yet: (command id) for each, at most
    /// `out.len()`. Returns how many were written.
    pub(crate) fn expired_unaborted(&self, out: &mut [u16]) -> usize {
        let mut n = 0;
        for (cid, s) in self.slots.iter().enumerate() {
            if n == out.len() {
                break;
            }
            if s.busy && s.expired && !s.abort_sent {
                out[n] = cid as u16;
                n += 1;
            }
        }
        n
    }

    /// Notes that the Abort of `cid` went out.
    pub(crate) fn mark_abort_sent(&mut self, cid: u16) {
        if let Some(s) = self.slots.get_mut(usize::from(cid)) {
            s.abort_sent = true;
        }
    }

    /// Whether an expired command has been outstanding for a whole further timeout (its
    /// Abort was declined, failed or not answered).
    pub(crate) fn expired_overdue(&self) -> bool {
        let epoch = self.epoch;
        self.slots
            .iter()
            .any(|s| s.busy && s.expired && epoch.wrapping_sub(s.epoch) >= TIMEOUT_EPOCHS)
    }

    /// Takes the completion of the synchronous request, if it has finished.
    pub(crate) fn take_sync_done(&mut self) -> Option<Completion> {
        self.sync_done.take()
    }

    /// Writes queued PDUs as far as the socket takes them.
    pub(crate) fn flush_tx(&mut self) {
        while self.tx_head < self.tx.len() {
            match self.link_write() {
                Ok(n) if n > 0 => {
                    self.tx_head += n;
                    self.tx_sent += n as u64;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    if self.tx_head >= TX_COMPACT {
                        // The socket is slow to drain: drop what it took (cold path), so
                        // the buffer holds the backlog, not everything since the last
                        // complete flush.
                        self.tx.drain(..self.tx_head);
                        self.tx_head = 0;
                    }
                    return;
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                other => {
                    // The target may have said why before closing (C2HTermReq): read what
                    // is left so that reason wins over a bare "connection reset".
                    self.tx.clear();
                    self.tx_head = 0;
                    self.receive();
                    let err = match other {
                        Err(source) => self.io_error(source),
                        _ => TcpError::Closed {
                            addr: self.addr,
                            qid: self.qid,
                        },
                    };
                    self.fail(err);
                    return;
                }
            }
        }
        self.tx.clear();
        self.tx_head = 0;
    }

    fn io_error(&self, source: std::io::Error) -> TcpError {
        match source.kind() {
            ErrorKind::ConnectionReset | ErrorKind::BrokenPipe | ErrorKind::ConnectionAborted => {
                TcpError::Closed {
                    addr: self.addr,
                    qid: self.qid,
                }
            }
            _ => TcpError::Io {
                addr: self.addr,
                qid: self.qid,
                source,
            },
        }
    }

    // ----- failure ---------------------------------------------------------------------

    /// Closes the queue: later submissions fail, and every outstanding request is completed
    /// with the error (delivered by the next poll, or to a synchronous waiter).
    pub(crate) fn fail(&mut self, error: TcpError) {
        if self.failed.is_some() {
            return;
        }
        log::error!("{}: {error}", self.controller);
        let error = Arc::new(error);
        self.failed = Some(error.clone());
        let _ = self.stream.shutdown(Shutdown::Both);
        self.tx.clear();
        self.tx_head = 0;
        self.rx_state = Rx::Header;
        self.rx_paused = false;
        self.rx_head = 0;
        self.rx_tail = 0;
        if let Some((word, seen)) = &self.state_watch {
            if word.load(std::sync::atomic::Ordering::Acquire) != *seen {
                log::info!(
                    "{} queue {}: failed during a controller reset; its requests follow the reset",
                    self.controller,
                    self.qid
                );
                return;
            }
        }
        for cid in 0..self.slots.len() as u16 {
            if self.slots[usize::from(cid)].busy {
                let e = self.transport_error(error.clone());
                self.finish(cid, Err(e));
            }
        }
    }

    /// Fails the queue because commands timed out: those complete with `Error::Timeout`,
    /// the others with the transport error.
    pub(crate) fn fail_timed_out(&mut self) {
        let timeout = self.timeout;
        let epoch = self.epoch;
        for cid in 0..self.slots.len() as u16 {
            let s = &self.slots[usize::from(cid)];
            if s.busy && (s.expired || epoch.wrapping_sub(s.epoch) >= TIMEOUT_EPOCHS) {
                let e = Error::Timeout {
                    command: command_name(s.opcode),
                    cid,
                    timeout,
                };
                self.finish(cid, Err(e));
            }
        }
        self.fail(TcpError::ClosedAfterTimeout {
            addr: self.addr,
            qid: self.qid,
        });
    }

    /// Completes slot `cid`: frees it and hands the completion to a synchronous waiter or to
    /// the ready list that `poll` delivers (preallocated: no allocation).
    fn finish(&mut self, cid: u16, result: Result<u32, Error>) {
        let slot = &mut self.slots[usize::from(cid)];
        debug_assert!(slot.busy);
        slot.busy = false;
        let c = Completion {
            user_data: slot.user_data,
            result,
            buffer: slot.buffer.take(),
        };
        let sync = slot.sync;
        self.free.push(cid);
        self.in_flight -= 1;
        self.stats.requests_completed += 1;
        if sync {
            self.sync_done = Some(c);
        } else {
            self.deferred.push_back(c);
        }
    }

    // ----- polling ---------------------------------------------------------------------

    /// Sends what is queued, receives and handles every complete PDU, checks timeouts every
    /// few polls, and hands up to `max` completions to `f`. Returns how many it handed.
    pub(crate) fn poll<F: FnMut(Completion)>(&mut self, max: usize, mut f: F) -> usize {
        self.stats.polls += 1;
        self.progress();
        let mut n = 0;
        while n < max {
            let Some(c) = self.deferred.pop_front() else {
                break;
            };
            f(c);
            n += 1;
        }
        if n == 0 {
            self.stats.idle_polls += 1;
        }
        self.polls_since_clock += 1;
        n
    }

    /// Network progress without delivering completions: send, receive, parse, timeouts.
    pub(crate) fn progress(&mut self) {
        if self.failed.is_some() {
            return;
        }
        if self.tx_head < self.tx.len() {
            self.flush_tx();
        }
        if self.in_flight > 0 {
            self.receive();
        }
        if self.polls_since_clock >= IDLE_POLLS_PER_CLOCK_CHECK {
            self.polls_since_clock = 0;
            self.check_clock();
        }
    }

    /// Advances the epoch when its time is up and fails the queue if a command is older
    /// than its timeout.
    pub(crate) fn check_clock(&mut self) {
        if self.in_flight == 0 || self.failed.is_some() {
            self.epoch_started = Instant::now();
            return;
        }
        let now = Instant::now();
        if now.duration_since(self.epoch_started) < self.epoch_length {
            return;
        }
        self.epoch = self.epoch.wrapping_add(1);
        self.epoch_started = now;
        let epoch = self.epoch;
        if !self.abort_on_timeout {
            if self
                .slots
                .iter()
                .any(|s| s.busy && epoch.wrapping_sub(s.epoch) >= TIMEOUT_EPOCHS)
            {
                self.fail_timed_out();
            }
            return;
        }
        // Abort policy: a command past its timeout is marked expired (its age restarts, so
        // that a further timeout later it is overdue); the owner sends the Abort.
        for cid in 0..self.slots.len() {
            let s = &mut self.slots[cid];
            if !s.busy || epoch.wrapping_sub(s.epoch) < TIMEOUT_EPOCHS {
                continue;
            }
            self.timeout_work = true;
            if !s.expired {
                s.expired = true;
                s.abort_sent = false;
                s.epoch = epoch;
                log::error!(
                    "{} queue {}: {} (cid {cid:#x}) timed out after {:?}",
                    self.controller,
                    self.qid,
                    command_name(s.opcode),
                    self.timeout
                );
            }
        }
        if self
            .slots
            .iter()
            .any(|s| s.busy && s.expired && !s.abort_sent)
        {
            self.timeout_work = true;
        }
    }

    /// Runs until the synchronous request completes (or `deadline` passes: then the queue
    /// is failed and the request completes with the error). Other completions wait in the
    /// ready list for the next `poll`.
    pub(crate) fn wait_sync(&mut self, deadline: Instant, what: &'static str) -> Completion {
        let mut idle = 0u32;
        loop {
            if let Some(c) = self.sync_done.take() {
                return c;
            }
            let before = self.stats.pdus_received;
            self.progress();
            if self.sync_done.is_some() {
                continue;
            }
            if self.stats.pdus_received == before {
                idle += 1;
                if idle > 64 {
                    std::thread::sleep(Duration::from_micros(50));
                }
                if idle % 64 == 0 && Instant::now() >= deadline {
                    let timeout = self.timeout;
                    self.fail(TcpError::Timeout {
                        addr: self.addr,
                        qid: self.qid,
                        what,
                        timeout,
                    });
                }
            } else {
                idle = 0;
            }
        }
    }

    fn malformed(&mut self, pdu: u8, what: String) {
        self.fail(TcpError::Malformed {
            addr: self.addr,
            qid: self.qid,
            pdu: pdu_type::name(pdu),
            what,
        });
    }

    /// Reads what the socket has and handles it.
    fn receive(&mut self) {
        // A few reads per poll at most: a busy connection cannot starve the caller.
        for _ in 0..4 {
            match self.read_some() {
                Some(true) => {}
                Some(false) | None => return,
            }
        }
    }

    /// One read into the receive buffer, then the PDUs it completed are handled.
    /// `Some(true)`: the read filled the buffer (more may be waiting); `Some(false)`: it
    /// did not; `None`: nothing to read (or the queue failed).
    fn read_some(&mut self) -> Option<bool> {
        if self.rx_paused {
            // Back-pressure: nothing more is read or handled until the queued PDUs have
            // gone out (`flush_tx` at each poll).
            if self.tx_backlog() > TX_HIGH_WATER {
                return None;
            }
            self.rx_paused = false;
            self.parse();
            if self.rx_paused || self.failed.is_some() {
                return None;
            }
        }
        loop {
            if self.rx_head == self.rx_tail {
                self.rx_head = 0;
                self.rx_tail = 0;
            } else if self.rx_tail == self.rx.len() {
                self.rx.copy_within(self.rx_head..self.rx_tail, 0);
                self.rx_tail -= self.rx_head;
                self.rx_head = 0;
            }
            match self.link_read() {
                Ok(0) => {
                    self.fail(TcpError::Closed {
                        addr: self.addr,
                        qid: self.qid,
                    });
                    return None;
                }
                Ok(n) => {
                    self.rx_tail += n;
                    self.parse();
                    return (self.failed.is_none()).then_some(self.rx_tail == self.rx.len());
                }
                // Also a blocking read (wait_readable) whose SO_RCVTIMEO passed (EAGAIN).
                Err(e) if e.kind() == ErrorKind::WouldBlock => return None,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(source) => {
                    let err = self.io_error(source);
                    self.fail(err);
                    return None;
                }
            }
        }
    }

    /// Blocks until the target sends something or `timeout` passes, and handles what came
    /// (instead of spinning on empty polls: a target on the same CPU gets it). Returns
    /// whether completions are ready for `poll`. The socket is blocking for this one read
    /// (SO_RCVTIMEO = `timeout`), non-blocking again afterwards.
    pub(crate) fn wait_readable(&mut self, timeout: Duration) -> bool {
        if self.failed.is_none() && self.tx_head < self.tx.len() {
            self.flush_tx();
        }
        if !self.deferred.is_empty() || self.failed.is_some() || self.in_flight == 0 {
            return !self.deferred.is_empty();
        }
        let set = |s: &TcpStream| {
            s.set_read_timeout(Some(timeout.max(Duration::from_millis(1))))?;
            s.set_nonblocking(false)
        };
        if let Err(source) = set(&self.stream) {
            let err = self.io_error(source);
            self.fail(err);
            return true;
        }
        let _ = self.read_some();
        if self.failed.is_none() {
            if let Err(source) = self.stream.set_nonblocking(true) {
                let err = self.io_error(source);
                self.fail(err);
            }
        }
        !self.deferred.is_empty()
    }

    /// Reads from the socket into the free end of the receive buffer.
    fn link_read(&mut self) -> std::io::Result<usize> {
        let buf = &mut self.rx[self.rx_tail..];
        #[cfg(any(test, feature = "fuzzing"))]
        if let Some(m) = self.mem.as_mut() {
            return m.read(buf);
        }
        (&self.stream).read(buf)
    }

    /// Writes the unsent part of the send buffer to the socket.
    fn link_write(&mut self) -> std::io::Result<usize> {
        let buf = &self.tx[self.tx_head..];
        #[cfg(any(test, feature = "fuzzing"))]
        if let Some(m) = self.mem.as_mut() {
            return m.write(buf);
        }
        (&self.stream).write(buf)
    }

    /// Sizes of the send queue (bytes held, sent or not) and of the receive buffer.
    #[cfg(any(test, feature = "fuzzing"))]
    #[cfg(any(test, feature = "fuzzing"))]
    pub(crate) fn buffer_sizes(&self) -> (usize, usize) {
        (self.tx.len(), self.rx.len())
    }

    /// Bytes queued for sending and not yet taken by the socket.
    fn tx_backlog(&self) -> usize {
        self.tx.len() - self.tx_head
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
        nvme_spec::opcode::admin::IDENTIFY => "Identify",
        nvme_spec::opcode::admin::KEEP_ALIVE => "Keep Alive",
        nvme_spec::fabrics::FABRICS_OPCODE => "Fabrics command",
        _ => "command",
    }
}
