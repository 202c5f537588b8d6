//! Fuzzing seam of the receive path (not a public API: `feature = "fuzzing"` for
//! `crates/tcp/fuzz`, and the proptest property in `cargo test`).
//!
//! [`run`] builds one queue on a loopback connection (as after a valid ICResp, with the
//! digests the case asks for), submits the case's commands (command id i for the i-th),
//! then writes the case's bytes to the socket from the target's side, in the case's chunk
//! sizes, polling the queue between chunks; the target side reads what the host sends only
//! when the case says so (to exercise back-pressure). It panics if an invariant breaks:
//! - no panic in the queue (the fuzzer sees one as a crash);
//! - at most one completion per request (counted by user data);
//! - the send backlog under its bound and the receive buffer at its fixed size;
//! - once the queue is closed every request has completed exactly once, with its buffer.
//!
//! [`Op`] and [`encode`] turn a structure-aware script (valid headers with mutated fields,
//! C2HData / CapsuleResp / R2T for the real command ids, truncations, random bytes) into
//! the byte stream; [`Case::from_bytes`] decodes any byte string into a case, so the
//! coverage-guided fuzzer reaches both raw and structured streams.

#![allow(missing_docs)]

use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use nvme_core::DmaBuffer;
use nvme_spec::command;
use nvme_spec::tcp::{self, flags, pdu_type, Digests, TermReq};
use nvme_spec::{CompletionEntry, Status};
use nvme_vfio::DmaMapper;

use crate::error::TcpError;
use crate::queue::{self, Negotiated, Queue, QueueLimits, Waiter};
use crate::r2t::{TX_COMPACT, TX_HIGH_WATER};
use nvme_core::HostMemory;

/// Largest data length of one command in a case.
pub const MAX_LEN: usize = 16 * 1024;
/// In-capsule data limit of the fuzzed queue.
const IN_CAPSULE_MAX: usize = 4096;
/// Slots of the fuzzed queue.
const SLOTS: u16 = 8;
/// MAXH2CDATA of the fuzzed connection.
const MAXH2CDATA: usize = 8192;

/// A command the case submits before the stream starts.
#[derive(Clone, Copy, Debug)]
pub enum Cmd {
    Read(usize),
    /// Data by R2T when above the in-capsule limit.
    Write(usize),
    Flush,
}

/// One element of the target's byte stream.
#[derive(Clone, Debug)]
pub enum Op {
    /// CapsuleResp for command `cid` (an index into the case's commands when small).
    Resp { cid: u16, ok: bool },
    /// C2HData for `cid`: `datao`, `datal` and the flags as given; the payload follows.
    Data {
        cid: u16,
        datao: u32,
        datal: u32,
        flags: u8,
    },
    /// The rest of command `cid`'s read data (in order), with LAST_PDU and optionally SUCCESS.
    DataRest { cid: u16, success: bool },
    /// R2T for `cid`.
    R2t {
        cid: u16,
        ttag: u16,
        offset: u32,
        len: u32,
    },
    /// C2HTermReq.
    TermReq { fes: u16 },
    /// Raw bytes.
    Raw(Vec<u8>),
    /// Flip bits of the byte `at` bytes back from the end of the stream so far.
    Flip { back: u16, xor: u8 },
    /// Drop the last `n` bytes of the stream so far (a truncated PDU).
    Truncate(u16),
}

/// A whole case.
#[derive(Clone, Debug)]
pub struct Case {
    pub hdgst: bool,
    pub ddgst: bool,
    pub cmds: Vec<Cmd>,
    pub ops: Vec<Op>,
    /// Sizes of the writes to the socket (cycled); 0 means the rest of the stream.
    pub chunks: Vec<u16>,
    /// The target side reads what the host sends.
    pub drain: bool,
    /// The target closes its end after the stream (EOF).
    pub eof: bool,
    /// A real loopback socket (else an in-memory pipe: faster, same queue code).
    pub socket: bool,
}

/// Little reader for [`Case::from_bytes`].
struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn u8(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&b, rest)) => {
                self.0 = rest;
                b
            }
            None => 0,
        }
    }
    fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }
    fn empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl Case {
    /// Decodes any byte string: a header byte (digests, drain, raw mode), the commands, then
    /// either the rest as raw stream or a script of ops.
    pub fn from_bytes(data: &[u8]) -> Case {
        let mut b = Bytes(data);
        let head = b.u8();
        let ncmds = usize::from(b.u8() % (SLOTS as u8 + 1));
        let cmds = (0..ncmds)
            .map(|_| {
                let k = b.u8();
                let len = (usize::from(b.u16()) % (MAX_LEN / 512) + 1) * 512;
                match k % 3 {
                    0 => Cmd::Read(len),
                    1 => Cmd::Write(len),
                    _ => Cmd::Flush,
                }
            })
            .collect();
        let chunks = vec![b.u16() % 2048, b.u16() % 97, b.u16()];
        let mut ops = Vec::new();
        if head & 8 != 0 {
            ops.push(Op::Raw(b.0.to_vec()));
        } else {
            while !b.empty() && ops.len() < 64 {
                let cid = |b: &mut Bytes| {
                    let v = b.u8();
                    if v < 0xF0 {
                        u16::from(v % 16)
                    } else {
                        b.u16()
                    }
                };
                let op = match b.u8() % 9 {
                    0 => Op::Resp {
                        cid: cid(&mut b),
                        ok: b.u8() & 1 == 0,
                    },
                    1 => Op::Data {
                        cid: cid(&mut b),
                        datao: b.u32() % (2 * MAX_LEN as u32),
                        datal: b.u32() % (2 * MAX_LEN as u32),
                        flags: b.u8() & 0x0C,
                    },
                    2 | 3 => Op::DataRest {
                        cid: cid(&mut b),
                        success: b.u8() & 1 == 0,
                    },
                    4 => Op::R2t {
                        cid: cid(&mut b),
                        ttag: b.u16(),
                        offset: b.u32() % (2 * MAX_LEN as u32),
                        len: b.u32() % (2 * MAX_LEN as u32),
                    },
                    5 => Op::TermReq { fes: b.u16() },
                    6 => {
                        let n = usize::from(b.u8() % 64);
                        Op::Raw((0..n).map(|_| b.u8()).collect())
                    }
                    7 => Op::Flip {
                        back: b.u16(),
                        xor: b.u8() | 1,
                    },
                    _ => Op::Truncate(u16::from(b.u8())),
                };
                ops.push(op);
            }
        }
        Case {
            hdgst: head & 1 != 0,
            ddgst: head & 2 != 0,
            cmds,
            ops,
            chunks,
            drain: head & 4 == 0,
            eof: head & 16 != 0,
            socket: false,
        }
    }
}

/// Frames a PDU as a controller would (digests as negotiated), with the codec.
fn frame(out: &mut Vec<u8>, mut header: Vec<u8>, data: Option<&[u8]>, hd: bool, dd: bool) {
    let digests = Digests {
        header: hd,
        data: dd,
    };
    // The host asks for no alignment beyond HPDA 0 (4 bytes, which 24 + 4 already meet).
    tcp::frame_pdu(out, &mut header, data, digests, 1);
}

fn short_header(t: u8, f: u8, cid: u16, a: u16, b: u32, c: u32) -> Vec<u8> {
    let mut h = vec![t, f, 0, 0, 0, 0, 0, 0];
    h.extend_from_slice(&cid.to_le_bytes());
    h.extend_from_slice(&a.to_le_bytes());
    h.extend_from_slice(&b.to_le_bytes());
    h.extend_from_slice(&c.to_le_bytes());
    h.extend_from_slice(&[0; 4]);
    h
}

/// The byte stream of a case's ops.
pub fn encode(case: &Case) -> Vec<u8> {
    let (hd, dd) = (case.hdgst, case.ddgst);
    let mut out = Vec::new();
    // Read data sent so far per command (DataRest continues from there).
    let mut sent = [0usize; SLOTS as usize];
    let len_of = |cid: u16| match case.cmds.get(usize::from(cid)) {
        Some(Cmd::Read(l)) | Some(Cmd::Write(l)) => *l,
        _ => 512,
    };
    for op in &case.ops {
        match op {
            Op::Resp { cid, ok } => {
                let status = if *ok {
                    Status::SUCCESS
                } else {
                    Status::new(0, 0x80, true)
                };
                let cqe = CompletionEntry::new(0, 0, 1, *cid, status, false);
                let mut h = vec![pdu_type::CAPSULE_RESP, 0, 0, 0, 0, 0, 0, 0];
                h.extend_from_slice(&cqe.to_bytes());
                frame(&mut out, h, None, hd, dd);
            }
            Op::Data {
                cid,
                datao,
                datal,
                flags,
            } => {
                let data = vec![0xA5u8; *datal as usize];
                let h = short_header(pdu_type::C2H_DATA, *flags, *cid, 0, *datao, *datal);
                frame(&mut out, h, Some(&data), hd, dd);
            }
            Op::DataRest { cid, success } => {
                let len = len_of(*cid);
                let at = sent.get(usize::from(*cid)).copied().unwrap_or(0).min(len);
                let n = (len - at).max(1);
                let f = flags::LAST_PDU | if *success { flags::SUCCESS } else { 0 };
                let data = vec![0x3Cu8; n];
                let h = short_header(pdu_type::C2H_DATA, f, *cid, 0, at as u32, n as u32);
                frame(&mut out, h, Some(&data), hd, dd);
                if let Some(s) = sent.get_mut(usize::from(*cid)) {
                    *s = at + n;
                }
            }
            Op::R2t {
                cid,
                ttag,
                offset,
                len,
            } => {
                let h = short_header(pdu_type::R2T, 0, *cid, *ttag, *offset, *len);
                frame(&mut out, h, None, hd, dd);
            }
            Op::TermReq { fes } => {
                // No digests on termination requests (NVMe/TCP §3.6.2.4).
                let mut t = TermReq::from_bytes(&[0; TermReq::SIZE]);
                t.ch.pdu_type = pdu_type::C2H_TERM_REQ;
                t.fes = *fes;
                tcp::frame_pdu(&mut out, &mut t.to_bytes(), None, Digests::default(), 1);
            }
            Op::Raw(bytes) => out.extend_from_slice(bytes),
            Op::Flip { back, xor } => {
                if !out.is_empty() {
                    let i = out.len() - 1 - usize::from(*back) % out.len();
                    out[i] ^= xor;
                }
            }
            Op::Truncate(n) => {
                let keep = out.len().saturating_sub(usize::from(*n));
                out.truncate(keep);
            }
        }
    }
    out
}

/// An in-memory connection in place of the socket: the target's bytes, released to the
/// host in the case's chunks, and a sink for what the host sends that takes at most
/// `room` bytes unless the target drains it.
pub struct MemPipe {
    input: Vec<u8>,
    pos: usize,
    released: usize,
    eof: bool,
    drain: bool,
    held: usize,
}

/// What an undrained [`MemPipe`] takes before writes would block (a socket's buffers).
const MEM_ROOM: usize = 256 * 1024;

impl MemPipe {
    pub(crate) fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        if self.pos < self.released {
            let n = buf.len().min(self.released - self.pos);
            buf[..n].copy_from_slice(&self.input[self.pos..self.pos + n]);
            self.pos += n;
            Ok(n)
        } else if self.eof {
            Ok(0)
        } else {
            Err(ErrorKind::WouldBlock.into())
        }
    }

    pub(crate) fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.drain {
            return Ok(buf.len());
        }
        let n = buf.len().min(MEM_ROOM - self.held);
        if n == 0 && !buf.is_empty() {
            return Err(ErrorKind::WouldBlock.into());
        }
        self.held += n;
        Ok(n)
    }
}

thread_local! {
    /// Requests that completed successfully in this thread's last [`run`].
    static SUCCESSES: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    static LISTENER: TcpListener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    /// A socket for queues whose I/O goes through a `MemPipe` (never read or written).
    static IDLE: TcpStream = socket_pair().0;
    /// Buffers of `MAX_LEN` bytes, reused across cases (they come back with completions).
    static BUFFERS: std::cell::RefCell<Vec<DmaBuffer>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A connected loopback pair: (host side, target side).
fn socket_pair() -> (TcpStream, TcpStream) {
    LISTENER.with(|l| {
        let addr = l.local_addr().expect("local addr");
        let host = TcpStream::connect(addr).expect("connect loopback");
        let (target, _) = l.accept().expect("accept");
        (host, target)
    })
}

/// Largest send backlog a case may see: the high-water mark, one R2T's answer (at most
/// one command's data plus the H2CData headers), and the command capsules.
fn tx_bound() -> usize {
    let h2c_pdus = MAX_LEN.div_ceil(MAXH2CDATA);
    TX_HIGH_WATER
        + TX_COMPACT
        + MAX_LEN
        + h2c_pdus * 256
        + usize::from(SLOTS) * (IN_CAPSULE_MAX + 256)
}

/// The target's end of the connection.
enum Peer {
    Socket(TcpStream),
    Memory,
}

/// Runs one case and checks the invariants (panics when one breaks).
pub fn run(case: &Case) {
    SUCCESSES.with(|s| s.set(0));
    let stream = encode(case);
    let (host, mut peer) = if case.socket {
        let (host, target) = socket_pair();
        host.set_nonblocking(true).expect("non-blocking");
        target.set_nonblocking(true).expect("non-blocking");
        // No Nagle delay on either side (the host's handshake sets it too): the stream's
        // last small write must arrive while the case still polls.
        host.set_nodelay(true).expect("nodelay");
        target.set_nodelay(true).expect("nodelay");
        (host, Peer::Socket(target))
    } else {
        let idle = IDLE.with(|s| s.try_clone()).expect("dup the idle socket");
        (idle, Peer::Memory)
    };
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], nvme_spec::tcp::DEFAULT_PORT));
    let neg = Negotiated {
        hdgst: case.hdgst,
        ddgst: case.ddgst,
        cpda_align: 4,
        maxh2cdata: MAXH2CDATA,
    };
    let mut q = Queue::new(
        host,
        addr,
        1,
        Arc::from("fuzz"),
        neg,
        QueueLimits {
            slots: SLOTS,
            in_capsule_max: IN_CAPSULE_MAX,
            timeout: Duration::from_secs(3600),
        },
    );
    if let Peer::Memory = peer {
        q.mem = Some(MemPipe {
            input: stream.clone(),
            pos: 0,
            released: 0,
            eof: false,
            drain: case.drain,
            held: 0,
        });
    }
    let mut submitted = Vec::new();
    for (i, cmd) in case.cmds.iter().take(usize::from(SLOTS)).enumerate() {
        let (sqe, len, to_device) = match *cmd {
            Cmd::Read(l) => (command::read(1, 0, (l / 512) as u32), l, false),
            Cmd::Write(l) => (command::write(1, 0, (l / 512) as u32, false), l, true),
            Cmd::Flush => (command::flush(1), 0, false),
        };
        let buffer = (len > 0).then(|| {
            BUFFERS.with(|b| b.borrow_mut().pop()).unwrap_or_else(|| {
                let mapper: Arc<dyn DmaMapper> = Arc::new(HostMemory::new());
                DmaBuffer::allocate(&mapper, MAX_LEN).expect("host memory")
            })
        });
        let has_buffer = buffer.is_some();
        q.submit(sqe, buffer, len, to_device, i as u64, Waiter::Poll)
            .expect("a fresh queue takes SLOTS commands");
        submitted.push(has_buffer);
    }
    let mut done = vec![0u32; submitted.len()];
    let deliver = |q: &mut Queue, done: &mut Vec<u32>| {
        while let Some(c) = q.deferred.pop_front() {
            let i = c.user_data as usize;
            done[i] += 1;
            assert!(done[i] == 1, "request {i} completed twice");
            if c.result.is_ok() {
                SUCCESSES.with(|s| s.set(s.get() + 1));
            }
            assert_eq!(
                c.buffer.is_some(),
                submitted[i],
                "request {i} came back without its buffer"
            );
            if let Some(b) = c.buffer {
                BUFFERS.with(|p| p.borrow_mut().push(b));
            }
        }
    };
    let mut scratch = [0u8; 16 * 1024];
    let mut at = 0;
    let mut chunk_i = 0;
    let mut stalls = 0;
    let min_chunk = stream.len().div_ceil(256).max(1);
    while at < stream.len() && q.failed.is_none() && stalls < 64 {
        let c = case
            .chunks
            .get(chunk_i % case.chunks.len().max(1))
            .copied()
            .unwrap_or(0);
        chunk_i += 1;
        // Chunk 0: the rest at once; at most 256 chunks per stream (a long stream in
        // one-byte pieces costs time the fuzzer spends better elsewhere).
        let n = match usize::from(c) {
            0 => stream.len() - at,
            c => c.max(min_chunk).min(stream.len() - at),
        };
        match &mut peer {
            Peer::Socket(target) => {
                match target.write(&stream[at..at + n]) {
                    Ok(w) => {
                        at += w;
                        stalls = 0;
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => stalls += 1,
                    Err(_) => break,
                }
                if case.drain {
                    while let Ok(r) = target.read(&mut scratch) {
                        if r == 0 {
                            break;
                        }
                    }
                }
            }
            Peer::Memory => {
                let m = q.mem.as_mut().expect("memory pipe");
                // Bytes the host has not read yet count as unwritten (a full socket).
                if m.released - m.pos > MEM_ROOM {
                    stalls += 1;
                } else {
                    at += n;
                    m.released = at;
                    stalls = 0;
                }
            }
        }
        for _ in 0..2 {
            q.progress();
            check_bounds(&q);
            deliver(&mut q, &mut done);
        }
    }
    if case.eof {
        match &peer {
            Peer::Socket(target) => {
                let _ = target.shutdown(std::net::Shutdown::Write);
            }
            Peer::Memory => q.mem.as_mut().expect("memory pipe").eof = true,
        }
    }
    // Let the host take what is still on the socket (until it has nothing left to do, or
    // nothing arrives for a while), then close the queue.
    let mut quiet = 0;
    let patience = if case.socket { 50 } else { 3 };
    while q.in_flight() > 0 && q.failed.is_none() && quiet < patience {
        let before = (q.stats.pdus_received, q.in_flight());
        q.progress();
        check_bounds(&q);
        deliver(&mut q, &mut done);
        if (q.stats.pdus_received, q.in_flight()) == before {
            quiet += 1;
        } else {
            quiet = 0;
        }
    }
    if q.failed.is_none() {
        q.fail(TcpError::Closed { addr, qid: 1 });
    }
    deliver(&mut q, &mut done);
    assert_eq!(q.in_flight(), 0, "requests left in flight after the close");
    assert!(
        done.iter().all(|&d| d == 1),
        "every request completes exactly once: {done:?}"
    );
}

fn check_bounds(q: &Queue) {
    let (tx, rx) = q.buffer_sizes();
    assert!(
        tx <= tx_bound(),
        "send backlog {tx} over its bound {}",
        tx_bound()
    );
    assert_eq!(rx, queue::RX_BUFFER, "the receive buffer changed size");
}

/// Requests that completed successfully in this thread's last [`run`].
pub fn last_run_successes() -> usize {
    SUCCESSES.with(|s| s.get())
}

/// A case of raw bytes, for quick checks.
pub fn run_bytes(data: &[u8]) {
    run(&Case::from_bytes(data));
}
