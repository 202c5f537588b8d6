//! One host connection: the ICReq/ICResp handshake, then one queue (admin or I/O, chosen by
//! its Fabrics Connect). The receive side ([`rx`]) frames PDUs into command slots; commands
//! run on the admin side ([`admin`], [`fabrics`]) or go to the backend ([`io`]); the send side
//! ([`tx`]) writes responses and read data.
//!
//! A command occupies a slot from its capsule until its last response bytes are sent: at most
//! the queue size (SQSIZE + 1 of Connect) are outstanding, a host sending more ends the
//! connection. The slot index is also the R2T's transfer tag, so H2CData finds its command
//! without a lookup.

mod admin;
mod fabrics;
mod io;
mod rx;
mod tx;

use std::net::{Shutdown, TcpStream};
use std::os::fd::AsFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nvme_core::{DmaBuffer, DmaMapper, Error, HostMemory, IoQueue};
use nvme_driver::InterruptArm;
use nvme_spec::regs::{Cc, ShutdownStatus};
use nvme_spec::status::generic;
use nvme_spec::tcp::{self, flags, pdu_type, CapsuleResp, CommonHeader, PduFrame};
use nvme_spec::{CompletionEntry, Status, StatusCodeType, SubmissionEntry};
use nvme_vfio::FdWait;

use crate::backend::Backend;
use crate::server::Shared;
use crate::trace::{self, Ev};
use rx::{DataDst, Event, Rx, RxError};
use tx::Tx;

/// Slots of a connection before Connect sizes its queue.
const INITIAL_SLOTS: usize = 4;
/// PDUs received per connection in one poll pass (fairness between connections).
const EVENTS_PER_PASS: usize = 64;
/// Buffers allocated together when a connection's pool is empty (one mapping).
const POOL_BATCH: usize = 8;
/// Longest wait for a closing connection's backend commands.
const DRAIN_LIMIT: Duration = Duration::from_secs(5);
/// Header area on top of the data in the largest PDU accepted.
const PDU_OVERHEAD: usize = 256;
/// In-capsule data of admin commands (the Fabrics admin queue's fixed IOCCSZ, NVMe Base 2.0
/// §6.3: 8 KiB of data after the 64-byte SQE, as the Linux host assumes).
pub(crate) const ADMIN_IN_CAPSULE: usize = 8192;
/// CPDA the target asks for (0: 4-byte alignment of host data).
const CPDA: u8 = 0;

/// What a connection needs before its poll group may block ([`Conn::add_wait_fds`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WaitPrep {
    /// Its descriptors are in the set: it has nothing to do until one of them is ready.
    Added,
    /// It has work now (a completion is in its ring, or it is to close): do not block.
    Ready,
    /// Commands are at a backend queue that cannot signal completions: poll it (sleep
    /// between passes), do not block.
    Polled,
}

/// Where a command is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SlotState {
    Free,
    /// In-capsule data arriving.
    Capsule,
    /// R2T sent, H2CData arriving.
    H2C,
    /// At the backend (or waiting for room in its queue).
    Backend,
    /// Response queued, not yet sent.
    Done,
}

/// One outstanding command.
pub(crate) struct Slot {
    pub cid: u16,
    pub sqe: SubmissionEntry,
    pub state: SlotState,
    /// Its data buffer (write data received into it, read data sent from it).
    pub buf: Option<DmaBuffer>,
    /// Bytes of data (the SGL length).
    pub len: usize,
    /// H2C bytes received.
    pub got: usize,
}

impl Slot {
    fn free() -> Self {
        Self {
            cid: 0,
            sqe: SubmissionEntry::new(0),
            state: SlotState::Free,
            buf: None,
            len: 0,
            got: 0,
        }
    }
}

/// What the connection is, after its Connect.
pub(crate) enum Role<B: Backend> {
    Unbound,
    Admin(admin::AdminState),
    Io(io::IoState<B>),
}

/// What the data PDU being received belongs to.
#[derive(Clone, Copy, Debug)]
enum Pending {
    None,
    Capsule(u16),
    H2C { slot: u16, len: usize, last: bool },
}

/// One connection, owned by a poll group.
pub(crate) struct Conn<B: Backend> {
    s: Arc<Shared<B>>,
    stream: TcpStream,
    peer: String,
    rx: Rx,
    tx: Tx,
    slots: Vec<Slot>,
    free: Vec<u16>,
    released: Vec<u16>,
    pool: Vec<DmaBuffer>,
    mapper: Arc<dyn DmaMapper>,
    buf_size: usize,
    pending: Pending,
    handshaken: bool,
    /// Alignment of C2H data the host asked for (HPDA), bytes.
    c2h_align: usize,
    maxh2cdata: usize,
    qid: u16,
    qsize: u16,
    sqhd: u16,
    sqfc_disabled: bool,
    role: Role<B>,
    /// Set when the connection is to end once its queued bytes are sent.
    closing: Option<String>,
    closed: bool,
    /// When the connection was accepted (the Connect deadline counts from it).
    accepted: Instant,
    /// Whether the next pass reads the socket: false for one pass after the group woke from
    /// a wait in which this socket was not ready (no read that could only say EAGAIN).
    rx_hint: bool,
}

impl<B: Backend> Conn<B> {
    pub fn new(stream: TcpStream, s: Arc<Shared<B>>) -> Self {
        let peer = stream
            .peer_addr()
            .map_or_else(|_| "?".into(), |a| a.to_string());
        let mut c = Self {
            rx: Rx::new(
                tcp::pda_align(CPDA),
                (ADMIN_IN_CAPSULE + PDU_OVERHEAD) as u32,
            ),
            tx: Tx::default(),
            slots: Vec::new(),
            free: Vec::new(),
            released: Vec::new(),
            pool: Vec::new(),
            mapper: Arc::new(HostMemory::new()),
            buf_size: ADMIN_IN_CAPSULE,
            pending: Pending::None,
            handshaken: false,
            c2h_align: 1,
            maxh2cdata: ADMIN_IN_CAPSULE,
            qid: 0,
            qsize: INITIAL_SLOTS as u16,
            sqhd: 0,
            sqfc_disabled: false,
            role: Role::Unbound,
            closing: None,
            closed: false,
            accepted: Instant::now(),
            rx_hint: true,
            s,
            stream,
            peer,
        };
        c.resize_slots(INITIAL_SLOTS);
        c
    }

    /// Grows the slot table to `n` (never shrinks: slots in use keep their index).
    fn resize_slots(&mut self, n: usize) {
        let old = self.slots.len();
        if n <= old {
            return;
        }
        self.slots.resize_with(n, Slot::free);
        self.free.reserve(n - old);
        for i in (old..n).rev() {
            self.free.push(i as u16);
        }
        self.released.reserve(n);
    }

    /// A data buffer from the pool (allocated in a batch when the pool is empty).
    fn take_buffer(&mut self) -> Result<DmaBuffer, Error> {
        if let Some(b) = self.pool.pop() {
            return Ok(b);
        }
        let mut batch = DmaBuffer::allocate_many(&self.mapper, POOL_BATCH, self.buf_size)?;
        let b = batch.pop().expect("a batch");
        self.pool.append(&mut batch);
        Ok(b)
    }

    /// Switches the buffer pool to `mapper` with buffers of `size` bytes.
    fn use_pool(&mut self, mapper: Arc<dyn DmaMapper>, size: usize) {
        self.pool.clear();
        self.mapper = mapper;
        self.buf_size = size;
    }

    /// Ends the connection now: backend commands drained (bounded), association ended for an
    /// admin queue.
    pub fn close(&mut self, why: &str) {
        if self.closed {
            return;
        }
        self.closed = true;
        log::info!(
            "nvme-target: {} (queue {}): closing: {why}",
            self.peer,
            self.qid
        );
        let _ = self.stream.shutdown(Shutdown::Both);
        match &mut self.role {
            Role::Admin(a) => self.s.registry.end(a.cntlid),
            Role::Io(io) => {
                io.drain(DRAIN_LIMIT);
                self.s.registry.leave(io.cntlid, self.qid);
            }
            Role::Unbound => {}
        }
        self.role = Role::Unbound;
    }

    /// Ends the connection after what is queued is sent.
    fn close_after_send(&mut self, why: String) {
        if self.closing.is_none() {
            self.closing = Some(why);
        }
    }

    /// A protocol error: a C2HTermReq with `fes` (NVMe/TCP §3.6.2.4; no digests), then the
    /// connection ends.
    fn fatal(&mut self, fes: u16, why: String) {
        self.s.stats.protocol_errors.fetch_add(1, Ordering::Relaxed);
        if self.handshaken {
            let mut t = tcp::TermReq::from_bytes(&[0; tcp::TermReq::SIZE]);
            t.ch.pdu_type = pdu_type::C2H_TERM_REQ;
            t.fes = fes;
            let mut h = t.to_bytes();
            self.tx.push_pdu(&mut h, None, tcp::Digests::default(), 1);
        }
        self.close_after_send(why);
    }

    /// One pass: liveness, receive, backend, send. (alive, progress).
    pub fn poll(&mut self, now: Instant) -> (bool, bool) {
        self.pass(Some(now))
    }

    /// A pass without liveness checks and socket reads: completions of the backend queue
    /// pair become responses, and queued bytes are sent. (alive, progress).
    pub fn poll_backend_only(&mut self) -> (bool, bool) {
        self.pass(None)
    }

    /// Whether commands of this connection are at its backend queue pair.
    pub fn at_backend(&mut self) -> bool {
        match &mut self.role {
            Role::Io(io) => io.queue_mut().in_flight() > 0,
            _ => false,
        }
    }

    /// `now`: a full pass; `None`: no liveness checks, no receive.
    fn pass(&mut self, now: Option<Instant>) -> (bool, bool) {
        if self.closed {
            return (false, false);
        }
        let mut progress = false;
        if let Some(now) = now {
            if self.closing.is_none() {
                self.check_liveness(now);
            }
            if self.closing.is_none() && std::mem::replace(&mut self.rx_hint, true) {
                progress |= self.receive();
            }
        }
        progress |= self.poll_backend();
        let slots = &self.slots;
        match self.tx.flush(&mut self.stream, slots, &mut self.released) {
            Ok(p) => progress |= p,
            Err(e) => {
                self.close(&format!("send: {e}"));
                return (false, true);
            }
        }
        while let Some(slot) = self.released.pop() {
            self.release(slot);
        }
        if let Some(why) = &self.closing {
            if self.tx.is_empty() {
                let why = why.clone();
                self.close(&why);
                return (false, true);
            }
        }
        (true, progress)
    }

    /// After a wait: whether its socket was ready (read it in the next pass).
    pub fn set_rx_hint(&mut self, ready: bool) {
        self.rx_hint = ready;
    }

    /// Adds what wakes this connection to `w`, for a poll group with nothing to do: its
    /// socket (readable while it receives; writable while it has bytes queued) and, with
    /// commands at the backend, the queue pair's interrupt eventfd (armed: an entry already
    /// in the ring makes this [`WaitPrep::Ready`] instead).
    /// With [`WaitPrep::Added`], the socket is the last descriptor added.
    pub fn add_wait_fds(&mut self, w: &mut FdWait) -> WaitPrep {
        if self.closed || (self.closing.is_some() && self.tx.is_empty()) {
            return WaitPrep::Ready;
        }
        if let Role::Io(io) = &mut self.role {
            if io.queue_mut().in_flight() > 0 || io.has_waiting() {
                match B::arm_interrupt(io.queue_mut()) {
                    Some(InterruptArm::Wait(fd)) => {
                        w.add(fd, true, false);
                    }
                    Some(InterruptArm::Ready) => return WaitPrep::Ready,
                    None => return WaitPrep::Polled,
                }
            }
        }
        w.add(
            self.stream.as_fd(),
            self.closing.is_none(),
            !self.tx.is_empty(),
        );
        WaitPrep::Added
    }

    fn check_liveness(&mut self, now: Instant) {
        match &self.role {
            Role::Admin(a) if a.expired(now) => {
                self.s.stats.kato_expiries.fetch_add(1, Ordering::Relaxed);
                let why = format!(
                    "Keep Alive timer expired ({:?})",
                    a.kato.unwrap_or_default()
                );
                log::warn!("nvme-target: {}: {why}", self.peer);
                self.close_after_send(why);
            }
            Role::Io(io) if !io.alive.load(Ordering::Acquire) => {
                self.close_after_send("its association ended".into());
            }
            Role::Unbound if now.duration_since(self.accepted) > self.s.config.connect_timeout => {
                self.s.stats.protocol_errors.fetch_add(1, Ordering::Relaxed);
                self.close_after_send(format!(
                    "no Connect within {:?} of accepting the connection",
                    self.s.config.connect_timeout
                ));
            }
            _ => {}
        }
    }

    /// Receives and handles what the socket has (bounded per pass). The I/O commands of one
    /// pass reach the backend queue pair plugged: one tail doorbell write for all of them
    /// (NVMe Base 2.0 §3.3.1: the host may add several entries before updating the tail).
    fn receive(&mut self) -> bool {
        let plugged = match &mut self.role {
            Role::Io(io) => io.plug(),
            _ => false,
        };
        let progress = self.receive_pass();
        if plugged {
            // A connection that closed in the pass has dropped its queue pair already.
            if let Role::Io(io) = &mut self.role {
                io.unplug();
            }
        }
        progress
    }

    fn receive_pass(&mut self) -> bool {
        let mut progress = false;
        self.rx.new_pass();
        for _ in 0..EVENTS_PER_PASS {
            match self.rx.pump(&mut self.stream, &mut self.slots) {
                Ok(None) => break,
                Ok(Some(ev)) => {
                    progress = true;
                    self.on_event(ev);
                    if self.closing.is_some() {
                        break;
                    }
                }
                Err(RxError::Closed) => {
                    self.close("the host closed the connection");
                    return true;
                }
                Err(RxError::Pdu(e)) => {
                    let fes = match e {
                        tcp::PduError::Digest { kind: "header", .. } => {
                            tcp::fes::HEADER_DIGEST_ERROR
                        }
                        tcp::PduError::PlenTooLarge { .. } => tcp::fes::DATA_LIMIT_EXCEEDED,
                        _ => tcp::fes::INVALID_HEADER_FIELD,
                    };
                    self.fatal(fes, e.to_string());
                    break;
                }
                Err(e) => {
                    self.close(&e.to_string());
                    return true;
                }
            }
        }
        progress
    }

    fn on_event(&mut self, ev: Event) {
        match ev {
            Event::IcReq(req) => self.icreq(req),
            Event::Header { ch, data_len } => self.on_header(ch, data_len),
            Event::Data => match std::mem::replace(&mut self.pending, Pending::None) {
                Pending::Capsule(slot) => self.execute(slot),
                Pending::H2C { slot, len, last } => self.h2c_data_done(slot, len, last),
                Pending::None => self.fatal(tcp::fes::PDU_SEQUENCE_ERROR, "stray data".into()),
            },
        }
    }

    fn on_header(&mut self, ch: CommonHeader, data_len: usize) {
        if !self.handshaken {
            return self.fatal(tcp::fes::PDU_SEQUENCE_ERROR, "PDU before ICReq".into());
        }
        match ch.pdu_type {
            pdu_type::CAPSULE_CMD => self.capsule(data_len),
            pdu_type::H2C_DATA => self.h2c_data(ch, data_len),
            pdu_type::H2C_TERM_REQ => {
                self.close_after_send("the host terminated the connection".into())
            }
            t => self.fatal(
                tcp::fes::INVALID_HEADER_FIELD,
                format!("unexpected {} PDU", pdu_type::name(t)),
            ),
        }
    }

    /// A command capsule: a slot, then its data (in the capsule, or asked for with R2T), or
    /// straight to execution.
    fn capsule(&mut self, data_len: usize) {
        let raw: [u8; 64] = self.rx.header()[CommonHeader::SIZE..tcp::CapsuleCmd::SIZE]
            .try_into()
            .expect("HLEN checked");
        let sqe = SubmissionEntry::from_bytes(&raw);
        self.sqhd = (self.sqhd + 1) % self.qsize.max(1);
        let Some(slot) = self.free.pop() else {
            return self.fatal(
                tcp::fes::PDU_SEQUENCE_ERROR,
                format!("more than {} commands outstanding", self.slots.len()),
            );
        };
        let id = sqe.sgl_id();
        let len = sqe.sgl_len() as usize;
        {
            let s = &mut self.slots[usize::from(slot)];
            s.cid = sqe.cid();
            s.sqe = sqe;
            s.len = len;
            s.got = 0;
            s.state = SlotState::Capsule;
        }
        if id != tcp::sgl::IN_CAPSULE_DATA && id != tcp::sgl::TRANSPORT_DATA {
            if data_len > 0 {
                // Its data would have no destination.
                return self.fatal(
                    tcp::fes::INVALID_HEADER_FIELD,
                    format!("SGL identifier {id:#04x} with in-capsule data"),
                );
            }
            return self.respond(slot, err(generic::SGL_DESCRIPTOR_TYPE_INVALID), 0, 0);
        }
        let in_capsule_max = if self.qid == 0 {
            ADMIN_IN_CAPSULE
        } else {
            self.s.config.in_capsule_bytes
        };
        if data_len > 0 {
            if id != tcp::sgl::IN_CAPSULE_DATA || data_len != len || len > in_capsule_max {
                return self.fatal(
                    tcp::fes::DATA_LIMIT_EXCEEDED,
                    format!(
                        "in-capsule data of {data_len} bytes (SGL {len}, at most {in_capsule_max})"
                    ),
                );
            }
            if !self.give_buffer(slot) {
                return;
            }
            self.pending = Pending::Capsule(slot);
            self.rx.expect_data(DataDst {
                slot,
                offset: 0,
                len,
            });
            return;
        }
        if id == tcp::sgl::IN_CAPSULE_DATA && len > 0 {
            return self.fatal(
                tcp::fes::INVALID_HEADER_FIELD,
                "in-capsule SGL without data".into(),
            );
        }
        // Host-to-controller data comes by R2T (opcode bit 0: data to the controller, NVMe
        // Base 2.0 §3.3.3.1; the Fabrics opcode 7Fh has it set, Connect carries data).
        if len > 0 && sqe.opcode() & 1 != 0 {
            if len > self.buf_size {
                return self.respond(slot, err(generic::DATA_SGL_LENGTH_INVALID), 0, 0);
            }
            if !self.give_buffer(slot) {
                return;
            }
            self.slots[usize::from(slot)].state = SlotState::H2C;
            self.send_r2t(slot, len);
            return;
        }
        self.execute(slot);
    }

    /// Gives `slot` a buffer; false (connection closing) if none can be had.
    fn give_buffer(&mut self, slot: u16) -> bool {
        match self.take_buffer() {
            Ok(b) => {
                self.slots[usize::from(slot)].buf = Some(b);
                true
            }
            Err(e) => {
                self.close_after_send(format!("no data buffer: {e}"));
                false
            }
        }
    }

    /// R2T for all `len` bytes of `slot`'s data; the slot index is the transfer tag
    /// (NVMe/TCP §3.6.2.10; one R2T per command, within any MAXR2T).
    fn send_r2t(&mut self, slot: u16, len: usize) {
        let r2t = tcp::R2T {
            ch: CommonHeader {
                pdu_type: pdu_type::R2T,
                ..Default::default()
            },
            cccid: self.slots[usize::from(slot)].cid,
            ttag: slot,
            r2to: 0,
            r2tl: len as u32,
            rsvd: 0,
        };
        let mut h = r2t.to_bytes();
        self.tx
            .push_pdu(&mut h, None, self.rx.digests, self.c2h_align);
    }

    /// An H2CData header: checked against its R2T (NVMe/TCP §3.6.2.8), data into the slot.
    fn h2c_data(&mut self, ch: CommonHeader, data_len: usize) {
        let raw: [u8; tcp::H2CData::SIZE] = self.rx.header()[..tcp::H2CData::SIZE]
            .try_into()
            .expect("HLEN checked");
        let h = tcp::H2CData::from_bytes(&raw);
        let slot = h.ttag;
        let ok = self.slots.get(usize::from(slot)).is_some_and(|s| {
            s.state == SlotState::H2C
                && s.cid == h.cccid
                && h.datao as usize == s.got
                && s.got + data_len <= s.len
        });
        if !ok {
            return self.fatal(
                tcp::fes::DATA_OUT_OF_RANGE,
                format!(
                    "H2CData cccid {:#x} ttag {} offset {} length {data_len} matches no R2T",
                    h.cccid, h.ttag, h.datao
                ),
            );
        }
        if data_len > self.maxh2cdata {
            return self.fatal(
                tcp::fes::DATA_LIMIT_EXCEEDED,
                format!(
                    "H2CData of {data_len} bytes, MAXH2CDATA {}",
                    self.maxh2cdata
                ),
            );
        }
        self.pending = Pending::H2C {
            slot,
            len: data_len,
            last: ch.flags & flags::LAST_PDU != 0,
        };
        self.rx.expect_data(DataDst {
            slot,
            offset: h.datao as usize,
            len: data_len,
        });
    }

    fn h2c_data_done(&mut self, slot: u16, len: usize, last: bool) {
        let s = &mut self.slots[usize::from(slot)];
        s.got += len;
        let complete = s.got == s.len;
        if complete != last {
            return self.fatal(
                tcp::fes::PDU_SEQUENCE_ERROR,
                "LAST_PDU does not end the R2T's data".into(),
            );
        }
        if complete {
            self.execute(slot);
        }
    }

    /// Runs a command whose data (if any) is in its slot.
    fn execute(&mut self, slot: u16) {
        trace::ev(Ev::Recv, self.slots[usize::from(slot)].cid.into(), 0);
        self.slots[usize::from(slot)].state = SlotState::Backend;
        let sqe = self.slots[usize::from(slot)].sqe;
        if sqe.opcode() == nvme_spec::fabrics::FABRICS_OPCODE {
            return self.fabrics(slot);
        }
        match self.role {
            Role::Unbound => self.respond(slot, err(generic::COMMAND_SEQUENCE_ERROR), 0, 0),
            Role::Admin(_) => self.admin(slot),
            Role::Io(_) => self.io_submit(slot),
        }
    }

    /// Queues the response capsule of `slot` and its release.
    fn respond(&mut self, slot: u16, status: Status, dw0: u32, dw1: u32) {
        let cid = self.slots[usize::from(slot)].cid;
        self.slots[usize::from(slot)].state = SlotState::Done;
        self.respond_cid(cid, status, dw0, dw1);
        self.tx.push_release(slot);
    }

    /// Queues a response capsule for command `cid` (NVMe/TCP §3.6.2.7).
    fn respond_cid(&mut self, cid: u16, status: Status, dw0: u32, dw1: u32) {
        let mut cqe = CompletionEntry::new(dw0, self.sqhd, self.qid, cid, status, false);
        cqe.dw1 = dw1;
        let ch = CommonHeader {
            pdu_type: pdu_type::CAPSULE_RESP,
            ..Default::default()
        };
        let mut h = CapsuleResp { ch, cqe }.to_bytes();
        self.tx
            .push_pdu(&mut h, None, self.rx.digests, self.c2h_align);
    }

    /// The C2HData header of `len` bytes for `slot` (LAST_PDU, and SUCCESS when `success`).
    fn c2h_header(
        &self,
        slot: u16,
        len: usize,
        success: bool,
    ) -> (PduFrame, [u8; tcp::C2HData::SIZE]) {
        let frame = PduFrame::new(
            usize::from(tcp::SHORT_HLEN),
            Some(len),
            self.rx.digests,
            self.c2h_align,
        );
        let f = flags::LAST_PDU | if success { flags::SUCCESS } else { 0 };
        let h = tcp::C2HData {
            ch: frame.header(pdu_type::C2H_DATA, f),
            cccid: self.slots[usize::from(slot)].cid,
            rsvd1: 0,
            datao: 0,
            datal: len as u32,
            rsvd2: 0,
        };
        (frame, h.to_bytes())
    }

    /// Sends `data` (built by the target: admin pages) as the command's C2HData, then its
    /// successful response.
    fn respond_data(&mut self, slot: u16, data: &[u8]) {
        let len = data.len().min(self.slots[usize::from(slot)].len);
        if len > 0 {
            let (_, mut h) = self.c2h_header(slot, len, false);
            self.tx
                .push_pdu(&mut h, Some(&data[..len]), self.rx.digests, self.c2h_align);
        }
        self.respond(slot, Status::SUCCESS, 0, 0);
    }

    /// Sends `len` bytes of `slot`'s buffer as C2HData, with the SUCCESS flag instead of a
    /// response capsule when the queue has SQ flow control disabled (NVMe/TCP §3.6.2.9).
    fn respond_slot_data(&mut self, slot: u16, len: usize) {
        let shortcut = self.sqfc_disabled;
        let (frame, h) = self.c2h_header(slot, len, shortcut);
        let Some(data) = self.slots[usize::from(slot)]
            .buf
            .as_ref()
            .map(|b| &b[..len])
        else {
            return self.respond(slot, retry(generic::INTERNAL_ERROR), 0, 0);
        };
        self.tx.push_slot_pdu(&frame, &h, slot, 0, data);
        if shortcut {
            self.slots[usize::from(slot)].state = SlotState::Done;
            self.tx.push_release(slot);
        } else {
            self.respond(slot, Status::SUCCESS, 0, 0);
        }
    }

    /// Frees a slot whose response is sent: its buffer back to the pool.
    fn release(&mut self, slot: u16) {
        let s = &mut self.slots[usize::from(slot)];
        trace::ev(Ev::Sent, s.cid.into(), 0);
        s.state = SlotState::Free;
        if let Some(b) = s.buf.take() {
            if b.len() == self.buf_size && self.pool.len() < self.slots.len() {
                self.pool.push(b);
            }
        }
        self.free.push(slot);
    }

    /// The NVMe status a backend error completes a host command with.
    fn status_of(e: &Error) -> Status {
        match e {
            Error::Command { status, .. } => *status,
            Error::LbaOutOfRange { .. } => err(generic::LBA_OUT_OF_RANGE),
            Error::InactiveNamespace { .. } | Error::StaleNamespace { .. } => {
                err(generic::INVALID_NAMESPACE_OR_FORMAT)
            }
            Error::ZeroLength | Error::NotBlockMultiple { .. } | Error::InvalidRequest(_) => {
                err(generic::INVALID_FIELD)
            }
            Error::Unsupported { .. } => err(generic::INVALID_OPCODE),
            _ => retry(generic::INTERNAL_ERROR),
        }
    }
}

/// A generic status with Do Not Retry (NVMe Base 2.0 §4.6.1.2.1).
pub(crate) fn err(sc: u8) -> Status {
    Status::new(StatusCodeType::Generic.raw(), sc, true)
}

/// A generic status the host may retry.
pub(crate) fn retry(sc: u8) -> Status {
    Status::new(StatusCodeType::Generic.raw(), sc, false)
}

/// CSTS from CC and the shutdown state (NVMe Base 2.0 §3.1.4.6).
pub(crate) fn csts_of(cc: Cc, shst: ShutdownStatus) -> nvme_spec::regs::Csts {
    nvme_spec::regs::Csts::new(cc.en(), false, shst)
}
