//! An in-process NVMe/TCP target for tests: a listener thread and one thread per connection,
//! serving Connect, Property Get/Set, Identify, Set Features (queues), Keep Alive, Abort,
//! Get Log Page (Error Information, SMART / Health, Discovery), Read, Write (in-capsule and
//! R2T/H2CData), Flush, Verify and Copy on in-memory namespaces, with fault modes. Each admin Connect is a
//! new association with its own controller id (7, 8, ...) and CC; an I/O Connect must name a
//! live one; when an admin connection ends its controller's I/O connections are closed (as
//! the kernel's nvmet does). The namespaces belong to the subsystem and outlive
//! associations. `stop` / `restart` take the port away and back.
//! Its command handling is written from the specification independently of the host code it
//! tests; PDU framing and the header checks are the one codec of `nvme_spec::tcp`, which has
//! its own unit tests (round trip of every PDU type, each check refusing its field).

#![allow(clippy::field_reassign_with_default, missing_docs)]

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU16, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use nvme_spec::fabrics::{self, fctype, ConnectData};
use nvme_spec::opcode;
use nvme_spec::opcode::log_page;
use nvme_spec::regs::{self, Cap, Cc, Csts, ShutdownStatus};
use nvme_spec::status::generic;
use nvme_spec::tcp::{self, flags, pdu_type, CapsuleResp, CommonHeader, Digests, PduError};
use nvme_spec::{CompletionEntry, Status, SubmissionEntry};

mod hostile;
pub use hostile::{Hostile, R2T_FLOOD};

/// Transfer tag of the fake's R2Ts for a command's data.
const PULL_TTAG: u16 = 0x55;

mod liveness;
pub use liveness::Unresponsive;

mod pages;

mod config;
pub use config::{Config, Counters};

mod copy;
pub use copy::{COPY_MCL, COPY_MSRC, COPY_MSSRL};

/// What the fake target does wrong, on I/O queues' Read/Write commands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    None,
    /// Read data with a wrong data digest.
    BadDataDigest,
    /// A PDU header with a wrong header digest in answer to a read.
    BadHeaderDigest,
    /// 32 bytes of garbage instead of an answer.
    Garbage,
    /// The connection is closed instead of an answer.
    Reset,
    /// The command is swallowed (never answered).
    Silent,
    /// A C2HTermReq instead of an answer.
    TermReq,
    /// The command is held (never answered) but an Abort for it is honoured: the command
    /// completes with Command Abort Requested (SCT 0h, SC 07h) and the Abort with dword 0
    /// bit 0 clear. (With `Silent` an Abort is declined: dword 0 bit 0 set.)
    Hold,
    /// A protocol violation in answer to a Read or Write (`fake/hostile.rs`); commands it
    /// does not apply to are served normally.
    Hostile(Hostile),
}

/// One association: its CC and its I/O connections.
#[derive(Default)]
struct Ctrl {
    cc: u32,
    io: Vec<TcpStream>,
}

/// A held command: where to send its completion.
struct Held {
    w: Arc<Mutex<TcpStream>>,
    hdgst: bool,
    /// A held write's effect, applied if the association ends with late writes on.
    write: Option<liveness::HeldWrite>,
}

struct State {
    config: Config,
    port: u16,
    disks: Mutex<HashMap<u32, Vec<u8>>>,
    counters: Counters,
    fault: Mutex<Fault>,
    next_cntlid: AtomicU16,
    ctrls: Mutex<HashMap<u16, Ctrl>>,
    /// Held commands by (controller id, queue id, command id).
    held: Mutex<HashMap<(u16, u16, u16), Held>>,
    /// Every connection accepted (closed by `stop`).
    conns: Mutex<Vec<TcpStream>>,
    stopped: AtomicBool,
    live: liveness::Liveness,
}

/// First controller id handed out.
const FIRST_CNTLID: u16 = 7;
/// Error Information log entries the fake keeps (Identify ELPE + 1).
pub const ERROR_LOG_ENTRIES: usize = 4;
/// Composite temperature the fake's SMART log reports (Kelvin).
pub const SMART_TEMPERATURE_K: u16 = 310;
/// Power-on hours the fake's SMART log reports.
pub const SMART_POWER_ON_HOURS: u128 = 42;
/// Error count of the newest error log entry.
pub const NEWEST_ERROR_COUNT: u64 = 5;

pub struct FakeTarget {
    pub addr: SocketAddr,
    state: Arc<State>,
    listener: Mutex<Option<JoinHandle<()>>>,
}

fn spawn_listener(listener: TcpListener, s: Arc<State>) -> JoinHandle<()> {
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            if s.stopped.load(Ordering::SeqCst) {
                return;
            }
            let Ok(stream) = stream else { return };
            if let Ok(c) = stream.try_clone() {
                s.conns.lock().unwrap().push(c);
            }
            let s = s.clone();
            std::thread::spawn(move || {
                if let Err(e) = serve(stream, &s) {
                    if e.kind() != std::io::ErrorKind::UnexpectedEof {
                        eprintln!("fake target: connection closed: {e}");
                    }
                }
            });
        }
    })
}

/// Largest PLEN the fake accepts from the host.
const MAX_PLEN: u32 = 1 << 24;

/// Frames a PDU with the codec: header bytes (common header included, its length and digest
/// fields filled here), optional data, digests as negotiated, data aligned to `align`; with
/// `corrupt_data` the data digest is off by one bit.
fn frame(
    mut header: Vec<u8>,
    data: Option<&[u8]>,
    digests: Digests,
    align: usize,
    corrupt_data: bool,
) -> Vec<u8> {
    let mut out = Vec::new();
    let f = tcp::frame_pdu(&mut out, &mut header, data, digests, align);
    if let (true, Some(at)) = (corrupt_data, f.data_digest_at()) {
        out[at] ^= 1;
    }
    out
}

/// A CapsuleResp PDU header (`frame` fills its common header).
fn capsule_resp(sqid: u16, cid: u16, status: Status, dw0: u32, dw1: u32) -> Vec<u8> {
    let mut cqe = CompletionEntry::new(dw0, 0, sqid, cid, status, false);
    cqe.dw1 = dw1;
    let ch = CommonHeader {
        pdu_type: pdu_type::CAPSULE_RESP,
        ..Default::default()
    };
    CapsuleResp { ch, cqe }.to_bytes().to_vec()
}

impl FakeTarget {
    pub fn start(config: Config) -> FakeTarget {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        let addr = listener.local_addr().expect("local addr");
        let disks = config
            .namespaces
            .iter()
            .map(|&(nsid, shift, blocks)| (nsid, vec![0u8; (blocks << shift) as usize]))
            .collect();
        let state = Arc::new(State {
            fault: Mutex::new(config.fault),
            config,
            port: addr.port(),
            disks: Mutex::new(disks),
            counters: Counters::default(),
            next_cntlid: AtomicU16::new(FIRST_CNTLID),
            ctrls: Mutex::new(HashMap::new()),
            held: Mutex::new(HashMap::new()),
            conns: Mutex::new(Vec::new()),
            stopped: AtomicBool::new(false),
            live: Default::default(),
        });
        let handle = spawn_listener(listener, state.clone());
        FakeTarget {
            addr,
            state,
            listener: Mutex::new(Some(handle)),
        }
    }

    /// Changes the fault mode (connections check it at each I/O command).
    pub fn set_fault(&self, fault: Fault) {
        *self.state.fault.lock().unwrap() = fault;
    }

    /// Takes the port away: nothing listens any more and every open connection is closed
    /// (a target that went down). The namespaces keep their data.
    pub fn stop(&self) {
        self.state.stopped.store(true, Ordering::SeqCst);
        if let Some(h) = self.listener.lock().unwrap().take() {
            // Wake the accept call; the loop sees `stopped` and drops the listener.
            let _ = TcpStream::connect(self.addr);
            let _ = h.join();
        }
        for c in self.state.conns.lock().unwrap().drain(..) {
            let _ = c.shutdown(Shutdown::Both);
        }
    }

    /// Listens again on the same address after `stop`.
    pub fn restart(&self) {
        let mut slot = self.listener.lock().unwrap();
        if slot.is_some() {
            return;
        }
        self.state.stopped.store(false, Ordering::SeqCst);
        let listener = TcpListener::bind(self.addr).expect("bind the same port again");
        *slot = Some(spawn_listener(listener, self.state.clone()));
    }

    pub fn trid(&self) -> crate::TransportId {
        crate::TransportId::parse(&format!(
            "trtype:TCP traddr:{} trsvcid:{} subnqn:{}",
            self.addr.ip(),
            self.addr.port(),
            self.state.config.subnqn
        ))
        .expect("valid")
    }

    pub fn counters(&self) -> &Counters {
        &self.state.counters
    }

    /// The bytes of namespace `nsid` at `offset`.
    pub fn disk(&self, nsid: u32, offset: usize, len: usize) -> Vec<u8> {
        self.state.disks.lock().unwrap()[&nsid][offset..offset + len].to_vec()
    }

    pub fn fill(&self, nsid: u32, offset: usize, data: &[u8]) {
        self.state.disks.lock().unwrap().get_mut(&nsid).unwrap()[offset..offset + data.len()]
            .copy_from_slice(data);
    }
}

struct Conn<'a> {
    s: TcpStream,
    /// Writes go through this (an Abort on the admin connection may answer a held command
    /// of this one from another thread).
    w: Arc<Mutex<TcpStream>>,
    cntlid: u16,
    st: &'a State,
    digests: Digests,
    /// Data alignment the host asked for in ICReq (HPDA), bytes.
    c2h_align: usize,
    qid: u16,
    /// The queue was connected with SQ flow control disabled.
    sqfc_disabled: bool,
    io_seen: u64,
    pending: std::collections::VecDeque<(SubmissionEntry, Vec<u8>)>,
}

type Res<T> = std::io::Result<T>;

fn bad(what: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_owned())
}

/// A host PDU that breaks a rule of the codec's checks.
fn bad_pdu(e: PduError) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, format!("host PDU: {e}"))
}

impl Conn<'_> {
    /// Builds and sends a PDU: header bytes (common header included), optional data.
    fn send(&mut self, header: Vec<u8>, data: Option<&[u8]>, corrupt_data: bool) -> Res<()> {
        let out = frame(header, data, self.digests, self.c2h_align, corrupt_data);
        self.write_all(&out)
    }

    fn write_all(&self, bytes: &[u8]) -> Res<()> {
        self.w.lock().unwrap().write_all(bytes)
    }

    fn respond(&mut self, cid: u16, status: Status, dw0: u32, dw1: u32) -> Res<()> {
        let h = capsule_resp(self.qid, cid, status, dw0, dw1);
        self.send(h, None, false)
    }

    /// Reads one PDU: (common header, header bytes after the common header, data). The
    /// header is checked by the codec (HLEN, HDGSTF, PLEN, PDO and its alignment to CPDA,
    /// DDGSTF, DATAL, digests) before the rest of the PDU is read.
    fn recv(&mut self) -> Res<(CommonHeader, Vec<u8>, Vec<u8>)> {
        let mut raw = [0u8; CommonHeader::SIZE];
        self.s.read_exact(&mut raw)?;
        let ch = CommonHeader::from_bytes(&raw);
        let hlen = tcp::check_hlen(&ch).map_err(bad_pdu)?;
        let align = tcp::pda_align(self.st.config.cpda);
        let layout =
            tcp::check_layout(&ch, hlen, self.digests, MAX_PLEN, align).map_err(bad_pdu)?;
        let mut pdu = vec![0u8; layout.plen];
        pdu[..CommonHeader::SIZE].copy_from_slice(&raw);
        self.s.read_exact(&mut pdu[CommonHeader::SIZE..])?;
        if let Some(at) = layout.header_digest() {
            let got = pdu[at].try_into().expect("4 bytes");
            tcp::check_digest("header", &pdu[..hlen], got).map_err(bad_pdu)?;
        }
        let mut data = Vec::new();
        if tcp::has_data(&ch) {
            let datal = (ch.pdu_type == pdu_type::H2C_DATA)
                .then(|| tcp::H2CData::from_bytes(pdu[..hlen].try_into().expect("HLEN 24")).datal);
            let at = tcp::check_data_length(&ch, self.digests, datal).map_err(bad_pdu)?;
            if self.digests.data {
                let got = pdu[at.end..].try_into().expect("4 bytes");
                tcp::check_digest("data", &pdu[at.clone()], got).map_err(bad_pdu)?;
            }
            data = pdu[at].to_vec();
        }
        pdu.truncate(hlen);
        Ok((ch, pdu.split_off(CommonHeader::SIZE), data))
    }

    /// Gets a command's data by R2T/H2CData.
    fn pull(&mut self, cid: u16, len: usize) -> Res<Vec<u8>> {
        self.st.counters.r2ts.fetch_add(1, Ordering::Relaxed);
        self.send(hostile::r2t(cid, PULL_TTAG, 0, len as u32), None, false)?;
        let mut out = vec![0u8; len];
        let mut got = 0;
        loop {
            let (ch, hdr, data) = self.recv()?;
            if ch.pdu_type == pdu_type::CAPSULE_CMD && hdr.len() == 64 {
                // A pipelined command: served after this one.
                let sqe = SubmissionEntry::from_bytes(&hdr.try_into().unwrap());
                self.pending.push_back((sqe, data));
                continue;
            }
            if ch.pdu_type != pdu_type::H2C_DATA {
                return Err(bad("expected H2CData"));
            }
            let cccid = u16::from_le_bytes([hdr[0], hdr[1]]);
            let ttag = u16::from_le_bytes([hdr[2], hdr[3]]);
            let datao = u32::from_le_bytes(hdr[4..8].try_into().unwrap()) as usize;
            let datal = u32::from_le_bytes(hdr[8..12].try_into().unwrap()) as usize;
            if cccid != cid || ttag != PULL_TTAG || datao != got || datal != data.len() {
                return Err(bad("H2CData fields"));
            }
            if datal > self.st.config.maxh2cdata as usize {
                return Err(bad("H2CData above MAXH2CDATA"));
            }
            out[datao..datao + datal].copy_from_slice(&data);
            got += datal;
            let last = ch.flags & flags::LAST_PDU != 0;
            if last != (got == len) {
                return Err(bad("LAST_PDU"));
            }
            if last {
                return Ok(out);
            }
        }
    }

    /// Whether a `bytes`-long transfer exceeds the configured MDTS (NVMe Base 2.0 §5.17.2.1:
    /// MDTS is a power of two in units of CAP.MPSMIN; this fake's MPSMIN is 0, 4 KiB pages).
    fn over_mdts(&self, bytes: usize) -> bool {
        let mdts = self.st.config.mdts;
        mdts != 0
            && (1usize << regs::PAGE_SIZE_SHIFT_BASE)
                .checked_shl(u32::from(mdts))
                .is_some_and(|max| bytes > max)
    }

    /// Sends read data in C2HData PDUs; with the shortcut the last one carries SUCCESS.
    fn push(&mut self, cid: u16, data: &[u8], fault: Fault) -> Res<()> {
        let chunk = self.st.config.c2h_chunk.max(1);
        let shortcut = self.st.config.success_shortcut && self.sqfc_disabled;
        let n = data.len().div_ceil(chunk);
        for (i, part) in data.chunks(chunk).enumerate() {
            let last = i + 1 == n;
            let f = if last {
                flags::LAST_PDU | if shortcut { flags::SUCCESS } else { 0 }
            } else {
                0
            };
            let h = hostile::c2h(cid, f, (i * chunk) as u32, part.len() as u32);
            let corrupt = last && fault == Fault::BadDataDigest;
            if last && fault == Fault::BadHeaderDigest && self.digests.header {
                // Same PDU with a flipped header digest (its top bit).
                let mut out = Vec::new();
                let framed = tcp::frame_pdu(
                    &mut out,
                    &mut h.clone(),
                    Some(part),
                    self.digests,
                    self.c2h_align,
                );
                let at = framed.header_digest_at().expect("header digests are on");
                out[at + tcp::DIGEST_SIZE - 1] ^= 0x80;
                return self.write_all(&out);
            }
            self.send(h, Some(part), corrupt)?;
        }
        if !shortcut {
            self.respond(cid, Status::SUCCESS, 0, 0)?;
        }
        Ok(())
    }

    fn command(&mut self, sqe: SubmissionEntry, data: Vec<u8>) -> Res<bool> {
        let cid = sqe.cid();
        let len = sqe.sgl_len() as usize;
        let in_capsule = sqe.sgl_id() == tcp::sgl::IN_CAPSULE_DATA;
        if sqe.sgl_id() != tcp::sgl::IN_CAPSULE_DATA && sqe.sgl_id() != tcp::sgl::TRANSPORT_DATA {
            return Err(bad("SGL identifier"));
        }
        if in_capsule && data.len() != len {
            return Err(bad("in-capsule length"));
        }
        let ok = Status::SUCCESS;
        if sqe.opcode() == fabrics::FABRICS_OPCODE {
            match fabrics::fctype_of(&sqe) {
                fctype::CONNECT => {
                    let data = if in_capsule {
                        data
                    } else {
                        self.pull(cid, len)?
                    };
                    let data: [u8; 1024] = data.try_into().map_err(|_| bad("connect data"))?;
                    let cd = ConnectData::from_bytes(&data);
                    let qid = fabrics::connect_qid(&sqe);
                    self.sqfc_disabled =
                        fabrics::connect_cattr(&sqe) & fabrics::CATTR_DISABLE_SQ_FLOW_CONTROL != 0;
                    let discovery =
                        cd.subnqn == fabrics::nqn_field(fabrics::DISCOVERY_NQN).unwrap();
                    if cd.subnqn != fabrics::nqn_field(&self.st.config.subnqn).unwrap()
                        && !discovery
                    {
                        return self
                            .respond(
                                cid,
                                Status::new(1, fabrics::status::CONNECT_INVALID_PARAMETERS, true),
                                1 << 16 | 256,
                                0,
                            )
                            .map(|_| true);
                    }
                    if qid == 0 {
                        self.cntlid = self.st.next_cntlid.fetch_add(1, Ordering::SeqCst);
                        self.st
                            .ctrls
                            .lock()
                            .unwrap()
                            .insert(self.cntlid, Ctrl::default());
                        self.st
                            .counters
                            .admin_connects
                            .fetch_add(1, Ordering::Relaxed);
                        let kato = fabrics::connect_kato_ms(&sqe);
                        if self.st.config.enforce_kato && kato != 0 {
                            self.s
                                .set_read_timeout(Some(Duration::from_millis(u64::from(kato))))?;
                        }
                    } else {
                        let mut ctrls = self.st.ctrls.lock().unwrap();
                        let Some(ctrl) = ctrls.get_mut(&cd.cntlid) else {
                            drop(ctrls);
                            // Connect Invalid Parameters, the CNTLID field of the data.
                            return self
                                .respond(
                                    cid,
                                    Status::new(
                                        1,
                                        fabrics::status::CONNECT_INVALID_PARAMETERS,
                                        true,
                                    ),
                                    fabrics::connect_invalid_data_field(
                                        fabrics::CONNECT_DATA_CNTLID_OFFSET,
                                    ),
                                    0,
                                )
                                .map(|_| true);
                        };
                        ctrl.io.push(self.s.try_clone()?);
                        self.cntlid = cd.cntlid;
                    }
                    self.qid = qid;
                    self.st.counters.connects.fetch_add(1, Ordering::Relaxed);
                    self.respond(cid, ok, u32::from(self.cntlid), 0)?;
                }
                fctype::PROPERTY_GET => {
                    let cc = Cc(self
                        .st
                        .ctrls
                        .lock()
                        .unwrap()
                        .get(&self.cntlid)
                        .map_or(0, |c| c.cc));
                    let v: u64 = match fabrics::property_offset(&sqe) as usize {
                        regs::CAP => Cap::new(self.st.config.mqes, true, 2, 0, true, 0, 0).0,
                        regs::VS => 0x0001_0400,
                        regs::CC => u64::from(cc.0),
                        regs::CSTS => {
                            u64::from(Csts::new(cc.en(), false, ShutdownStatus::Normal).0)
                        }
                        _ => {
                            return self
                                .respond(cid, Status::new(0, generic::INVALID_FIELD, true), 0, 0)
                                .map(|_| true)
                        }
                    };
                    self.respond(cid, ok, v as u32, (v >> 32) as u32)?;
                }
                fctype::PROPERTY_SET => {
                    if fabrics::property_offset(&sqe) as usize == regs::CC {
                        if let Some(c) = self.st.ctrls.lock().unwrap().get_mut(&self.cntlid) {
                            liveness::cc_written(self.st, self.cntlid, c.cc, sqe.cdw12);
                            c.cc = sqe.cdw12;
                        }
                    }
                    self.respond(cid, ok, 0, 0)?;
                }
                _ => self.respond(cid, Status::new(0, generic::INVALID_OPCODE, true), 0, 0)?,
            }
            return Ok(true);
        }
        if self.qid == 0 {
            match sqe.opcode() {
                opcode::admin::IDENTIFY => match self.identify(&sqe) {
                    Some(page) => self.push(cid, &page[..len.min(4096)], Fault::None)?,
                    None => {
                        self.respond(cid, Status::new(0, generic::INVALID_FIELD, true), 0, 0)?
                    }
                },
                opcode::admin::GET_LOG_PAGE if sqe.cdw10 & 0xFF == 0x70 => {
                    let page = pages::discovery_log(self.st.port, &self.st.config.subnqn, len);
                    self.push(cid, &page[..len], Fault::None)?;
                }
                opcode::admin::GET_LOG_PAGE if sqe.cdw10 as u8 == log_page::SMART_HEALTH => {
                    self.st.counters.log_pages.fetch_add(1, Ordering::Relaxed);
                    let page = pages::smart_log();
                    self.push(cid, &page[..len.min(page.len())], Fault::None)?;
                }
                opcode::admin::GET_LOG_PAGE if sqe.cdw10 as u8 == log_page::ERROR_INFORMATION => {
                    self.st.counters.log_pages.fetch_add(1, Ordering::Relaxed);
                    let page = pages::error_log();
                    self.push(cid, &page[..len.min(page.len())], Fault::None)?;
                }
                opcode::admin::ABORT => {
                    self.st.counters.aborts.fetch_add(1, Ordering::Relaxed);
                    let sqid = sqe.cdw10 as u16;
                    let acid = (sqe.cdw10 >> 16) as u16;
                    let held = self
                        .st
                        .held
                        .lock()
                        .unwrap()
                        .remove(&(self.cntlid, sqid, acid));
                    let mut dw0 = nvme_spec::command::ABORT_DW0_NOT_ABORTED;
                    if let Some(h) = held {
                        let resp = capsule_resp(
                            sqid,
                            acid,
                            Status::new(0, generic::ABORT_REQUESTED, false),
                            0,
                            0,
                        );
                        let digests = Digests {
                            header: h.hdgst,
                            data: false,
                        };
                        let out = frame(resp, None, digests, 1, false);
                        if h.w.lock().unwrap().write_all(&out).is_ok() {
                            self.st
                                .counters
                                .aborts_honoured
                                .fetch_add(1, Ordering::Relaxed);
                            dw0 = 0;
                        }
                    }
                    self.respond(cid, ok, dw0, 0)?;
                }
                opcode::admin::SET_FEATURES => self.respond(cid, ok, 3 | 3 << 16, 0)?,
                opcode::admin::KEEP_ALIVE => {
                    self.st.counters.keep_alives.fetch_add(1, Ordering::Relaxed);
                    self.respond(cid, ok, 0, 0)?
                }
                _ => self.respond(cid, Status::new(0, generic::INVALID_OPCODE, true), 0, 0)?,
            }
            return Ok(true);
        }
        // I/O queue.
        self.st.counters.io_commands.fetch_add(1, Ordering::Relaxed);
        let op = sqe.opcode();
        let fault = if op != opcode::nvm::FLUSH && self.io_seen >= self.st.config.fault_after {
            *self.st.fault.lock().unwrap()
        } else {
            Fault::None
        };
        self.io_seen += 1;
        match fault {
            Fault::Garbage => {
                self.write_all(&[0xA5; 32])?;
                return Ok(true);
            }
            Fault::Hold => {
                let write = (op == opcode::nvm::WRITE && in_capsule)
                    .then(|| {
                        let &(_, shift, _) =
                            self.st.config.namespaces.iter().find(|n| n.0 == sqe.nsid)?;
                        let offset = (nvme_spec::command::slba(&sqe) << shift) as usize;
                        Some((sqe.nsid, offset, data.clone()))
                    })
                    .flatten();
                let held = Held {
                    w: self.w.clone(),
                    hdgst: self.digests.header,
                    write,
                };
                self.st
                    .held
                    .lock()
                    .unwrap()
                    .insert((self.cntlid, self.qid, cid), held);
                return Ok(true);
            }
            Fault::Reset => return Ok(false),
            Fault::Silent => return Ok(true),
            Fault::TermReq => {
                // Termination requests carry no digests (NVMe/TCP §3.6.2.4).
                let mut t = tcp::TermReq::from_bytes(&[0; tcp::TermReq::SIZE]);
                t.ch.pdu_type = pdu_type::C2H_TERM_REQ;
                t.fes = tcp::fes::INVALID_HEADER_FIELD;
                t.fei = 4u32.to_le_bytes();
                let h = frame(t.to_bytes().to_vec(), None, Digests::default(), 1, false);
                self.write_all(&h)?;
                return Ok(false);
            }
            Fault::Hostile(h) if self.hostile(h, op, cid, len, in_capsule)? => return Ok(true),
            _ => {}
        }
        let Some(&(_, shift, blocks)) = self.st.config.namespaces.iter().find(|n| n.0 == sqe.nsid)
        else {
            self.respond(cid, Status::new(0, 0x0B, true), 0, 0)?; // Invalid Namespace
            return Ok(true);
        };
        if op == opcode::nvm::COPY {
            // Its data is the source range list, not blocks.
            self.copy(sqe, data, in_capsule, shift, blocks)?;
            return Ok(true);
        }
        let slba = nvme_spec::command::slba(&sqe);
        let nlb = u64::from(nvme_spec::command::nlb(&sqe));
        let bytes = (nlb << shift) as usize;
        let offset = (slba << shift) as usize;
        // Verify and Write Zeroes address blocks but move no data.
        let moves_data = matches!(op, opcode::nvm::READ | opcode::nvm::WRITE);
        if op != opcode::nvm::FLUSH && (slba + nlb > blocks || (moves_data && bytes != len)) {
            self.respond(cid, Status::new(0, 0x80, true), 0, 0)?; // LBA Out of Range
            return Ok(true);
        }
        if moves_data && self.over_mdts(bytes) {
            self.st.counters.over_mdts.fetch_add(1, Ordering::Relaxed);
            self.respond(cid, Status::new(0, generic::INVALID_FIELD, true), 0, 0)?;
            return Ok(true);
        }
        match op {
            opcode::nvm::READ => {
                let d = self.st.disks.lock().unwrap()[&sqe.nsid][offset..offset + bytes].to_vec();
                self.push(cid, &d, fault)?;
            }
            opcode::nvm::WRITE => {
                let d = if in_capsule {
                    self.st
                        .counters
                        .in_capsule_writes
                        .fetch_add(1, Ordering::Relaxed);
                    data
                } else {
                    self.pull(cid, len)?
                };
                self.st.disks.lock().unwrap().get_mut(&sqe.nsid).unwrap()[offset..offset + bytes]
                    .copy_from_slice(&d);
                self.respond(cid, ok, 0, 0)?;
            }
            opcode::nvm::WRITE_ZEROES => {
                self.st.disks.lock().unwrap().get_mut(&sqe.nsid).unwrap()[offset..offset + bytes]
                    .fill(0);
                self.respond(cid, ok, 0, 0)?;
            }
            opcode::nvm::FLUSH | opcode::nvm::VERIFY => self.respond(cid, ok, 0, 0)?,
            _ => self.respond(cid, Status::new(0, generic::INVALID_OPCODE, true), 0, 0)?,
        }
        Ok(true)
    }
}

fn serve(mut s: TcpStream, st: &Arc<State>) -> Res<()> {
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    s.set_nodelay(true)?;
    let mut req = [0u8; 128];
    s.read_exact(&mut req)?;
    let icreq = tcp::IcReq::from_bytes(&req);
    if icreq.ch.pdu_type != pdu_type::IC_REQ || icreq.ch.hlen != 128 || icreq.ch.plen != 128 {
        return Err(bad("ICReq"));
    }
    let resp = tcp::IcResp {
        ch: CommonHeader {
            pdu_type: pdu_type::IC_RESP,
            flags: 0,
            hlen: 128,
            pdo: 0,
            plen: 128,
        },
        pfv: 0,
        cpda: st.config.cpda,
        dgst: icreq.dgst,
        maxh2cdata: st.config.maxh2cdata,
        rsvd: [0; 112],
    };
    s.write_all(&resp.to_bytes())?;
    let w = Arc::new(Mutex::new(s.try_clone()?));
    let mut c = Conn {
        s,
        w,
        cntlid: fabrics::CNTLID_DYNAMIC,
        st,
        digests: Digests::from_dgst(icreq.dgst),
        c2h_align: tcp::pda_align(icreq.hpda),
        qid: 0,
        sqfc_disabled: false,
        io_seen: 0,
        pending: Default::default(),
    };
    let result = serve_commands(&mut c);
    // Other handles (the writer, the stop list, held commands) keep the socket open:
    // close it explicitly.
    let _ = c.s.shutdown(Shutdown::Both);
    if c.qid == 0 && c.cntlid != fabrics::CNTLID_DYNAMIC {
        if let Err(e) = &result {
            if st.config.enforce_kato
                && matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                )
            {
                st.counters.kato_expiries.fetch_add(1, Ordering::Relaxed);
            }
        }
        // The association ends: its I/O connections go with it.
        if let Some(ctrl) = st.ctrls.lock().unwrap().remove(&c.cntlid) {
            for io in ctrl.io {
                let _ = io.shutdown(Shutdown::Both);
            }
        }
        liveness::end_association(st, c.cntlid);
    }
    result
}

fn serve_commands(c: &mut Conn) -> Res<()> {
    loop {
        if let Some((sqe, data)) = c.pending.pop_front() {
            if !c.command(sqe, data)? {
                return Ok(());
            }
            continue;
        }
        liveness::wait_while_deaf(c.st, c.cntlid, c.qid);
        let (ch, hdr, data) = c.recv()?;
        if ch.pdu_type != pdu_type::CAPSULE_CMD || hdr.len() != 64 {
            return Err(bad("expected CapsuleCmd"));
        }
        let sqe = SubmissionEntry::from_bytes(&hdr.try_into().unwrap());
        if liveness::muted(c.st, c.cntlid, c.qid).is_some() {
            continue;
        }
        if !c.command(sqe, data)? {
            return Ok(());
        }
    }
}
