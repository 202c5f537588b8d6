//! I/O commands, forwarded to the connection's backend queue pair (NVM Command Set 1.0
//! §3.3): Read, Write, Flush, Write Zeroes, Dataset Management (deallocate). Write data is
//! already in the slot's DMA buffer; read data lands in it and is sent from it.
//!
//! INVARIANT: a command reaches the backend only after its namespace (of this subsystem), its
//! LBA range and its length are checked here; the slot index is the backend's user data, so a
//! completion finds its slot without a lookup.

use std::collections::VecDeque;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nvme_core::command::{Flush, Read, Write, WriteZeroes};
use nvme_core::{DmaBuffer, Error, IoFailure, IoQueue, Namespace, WriteFlags};
use nvme_spec::command;
use nvme_spec::opcode::nvm;
use nvme_spec::queue::DsmRange;
use nvme_spec::status::generic;
use nvme_spec::Status;

use super::{err, Conn, Role, SlotState};
use crate::backend::Backend;
use crate::trace::{self, Ev};

/// Dataset Management ranges at most (NVM CS §3.2.3: NR is 8 bits, 0's based).
const DSM_MAX_RANGES: usize = 256;

/// The I/O side of a connection: its backend queue pair.
pub(crate) struct IoState<B: Backend> {
    pub cntlid: u16,
    pub subsys: usize,
    /// Cleared when the association ends.
    pub alive: Arc<AtomicBool>,
    queue: B::Queue,
    /// Slots waiting for room in the backend queue, in order.
    waiting: VecDeque<u16>,
    /// Completions of one poll (kept for its capacity).
    done: Vec<(u16, Result<u32, Error>, Option<DmaBuffer>)>,
}

impl<B: Backend> IoState<B> {
    pub fn new(
        cntlid: u16,
        subsys: usize,
        alive: Arc<AtomicBool>,
        queue: B::Queue,
        entries: usize,
    ) -> Self {
        Self {
            cntlid,
            subsys,
            alive,
            queue,
            waiting: VecDeque::with_capacity(entries),
            done: Vec::with_capacity(entries),
        }
    }

    /// Defers the backend's tail doorbell until [`IoState::unplug`] (a plug of no
    /// reservations: submissions take their slots as usual). False if the queue refused.
    pub fn plug(&mut self) -> bool {
        self.queue.plug(0).is_ok()
    }

    /// Whether commands wait for room in the backend queue.
    pub fn has_waiting(&self) -> bool {
        !self.waiting.is_empty()
    }

    /// The backend queue pair.
    pub fn queue_mut(&mut self) -> &mut B::Queue {
        &mut self.queue
    }

    /// Ends [`IoState::plug`]: one doorbell write for what was submitted meanwhile.
    pub fn unplug(&mut self) {
        self.queue.unplug();
    }

    /// Polls the backend until nothing is in flight or `limit` passed (a closing
    /// connection: buffers the device may still write are not handed back before that).
    pub fn drain(&mut self, limit: Duration) {
        let end = Instant::now() + limit;
        while self.queue.in_flight() > 0 && Instant::now() < end {
            self.queue.poll(|_| {});
        }
    }
}

/// What a checked I/O command is.
enum Op {
    Read {
        lba: u64,
        blocks: u32,
    },
    Write {
        lba: u64,
        blocks: u32,
        fua: bool,
    },
    Flush,
    WriteZeroes {
        lba: u64,
        blocks: u32,
        deallocate: bool,
    },
    Deallocate {
        ranges: usize,
    },
    /// Done without the backend (a Dataset Management without the deallocate attribute).
    Nothing,
}

impl<B: Backend> Conn<B> {
    fn io_mut(&mut self) -> &mut IoState<B> {
        match &mut self.role {
            Role::Io(io) => io,
            _ => unreachable!("I/O commands run on I/O connections"),
        }
    }

    /// Checks the command in `slot` against its namespace: the operation, or the status to
    /// complete it with.
    fn check_io(&self, slot: u16, ns: &Namespace, max_io: usize) -> Result<Op, Status> {
        let s = &self.slots[usize::from(slot)];
        let sqe = &s.sqe;
        let range = || {
            let (lba, blocks) = (command::slba(sqe), command::nlb(sqe));
            if lba
                .checked_add(u64::from(blocks))
                .map_or(true, |end| end > ns.blocks())
            {
                return Err(err(generic::LBA_OUT_OF_RANGE));
            }
            Ok((lba, blocks))
        };
        let data_len = |blocks: u32| {
            let bytes = ns.blocks_to_bytes(u64::from(blocks)) as usize;
            if bytes > max_io {
                return Err(err(generic::INVALID_FIELD));
            }
            if bytes != s.len {
                return Err(err(generic::DATA_SGL_LENGTH_INVALID));
            }
            Ok(bytes)
        };
        match sqe.opcode() {
            nvm::READ => {
                let (lba, blocks) = range()?;
                data_len(blocks)?;
                Ok(Op::Read { lba, blocks })
            }
            nvm::WRITE => {
                let (lba, blocks) = range()?;
                data_len(blocks)?;
                Ok(Op::Write {
                    lba,
                    blocks,
                    fua: command::fua(sqe),
                })
            }
            nvm::FLUSH => Ok(Op::Flush),
            nvm::WRITE_ZEROES => {
                let (lba, blocks) = range()?;
                Ok(Op::WriteZeroes {
                    lba,
                    blocks,
                    deallocate: command::write_zeroes_deallocate(sqe),
                })
            }
            nvm::DATASET_MANAGEMENT => {
                let ranges = command::dsm_ranges(sqe) as usize;
                if ranges == 0 || ranges > DSM_MAX_RANGES || s.len < ranges * DsmRange::SIZE {
                    return Err(err(generic::DATA_SGL_LENGTH_INVALID));
                }
                if !command::dsm_deallocate(sqe) {
                    return Ok(Op::Nothing);
                }
                Ok(Op::Deallocate { ranges })
            }
            _ => Err(err(generic::INVALID_OPCODE)),
        }
    }

    /// Checks an I/O command and submits it to the backend.
    pub(super) fn io_submit(&mut self, slot: u16) {
        let shared = self.s.clone();
        let sub = &shared.subsystems[self.io_mut().subsys];
        let nsid = self.slots[usize::from(slot)].sqe.nsid;
        let Some(ns) = sub.namespace(nsid) else {
            return self.respond(slot, err(generic::INVALID_NAMESPACE_OR_FORMAT), 0, 0);
        };
        let op = match self.check_io(slot, ns, sub.max_io) {
            Ok(op) => op,
            Err(st) => return self.respond(slot, st, 0, 0),
        };
        if matches!(op, Op::Read { .. }) && !self.give_buffer(slot) {
            return;
        }
        let user = u64::from(slot);
        let buf = self.slots[usize::from(slot)].buf.take();
        let mut list = [(0u64, 0u32); DSM_MAX_RANGES];
        let mut count = 0;
        match op {
            Op::Nothing => {
                self.slots[usize::from(slot)].buf = buf;
                return self.respond(slot, Status::SUCCESS, 0, 0);
            }
            Op::Deallocate { ranges } => {
                let data = buf.as_deref().unwrap_or(&[]);
                for (i, out) in list.iter_mut().enumerate().take(ranges) {
                    let Some(raw) = data
                        .get(i * DsmRange::SIZE..(i + 1) * DsmRange::SIZE)
                        .and_then(|b| b.try_into().ok())
                    else {
                        break;
                    };
                    let r = DsmRange::from_bytes(&raw);
                    if r.slba
                        .checked_add(u64::from(r.nlb))
                        .map_or(true, |e| e > ns.blocks())
                    {
                        self.slots[usize::from(slot)].buf = buf;
                        return self.respond(slot, err(generic::LBA_OUT_OF_RANGE), 0, 0);
                    }
                    if r.nlb != 0 {
                        *out = (r.slba, r.nlb);
                        count += 1;
                    }
                }
                if count == 0 {
                    self.slots[usize::from(slot)].buf = buf;
                    return self.respond(slot, Status::SUCCESS, 0, 0);
                }
            }
            _ => {}
        }
        let io = self.io_mut();
        let r: Result<(), IoFailure> = match op {
            Op::Read { lba, blocks, .. } => io.queue.submit(ns, Read::new(lba, blocks), buf, user),
            Op::Write { lba, blocks, fua } => {
                let flags = if fua {
                    WriteFlags::FUA
                } else {
                    WriteFlags::NONE
                };
                io.queue
                    .submit(ns, Write::new(lba, blocks).flags(flags), buf, user)
            }
            Op::Flush => io
                .queue
                .submit(ns, Flush, None, user)
                .map_err(|f| keep(f, buf)),
            Op::WriteZeroes {
                lba,
                blocks,
                deallocate,
            } => io
                .queue
                .submit(
                    ns,
                    WriteZeroes::new(lba, blocks).with_deallocate(deallocate),
                    None,
                    user,
                )
                .map_err(|f| keep(f, buf)),
            Op::Deallocate { .. } => {
                // The range list stays in the slot's buffer until the response is sent.
                let r = B::submit_deallocate(&mut io.queue, ns, &list[..count], user);
                self.slots[usize::from(slot)].buf = buf;
                r.map_err(|e| IoFailure {
                    error: e,
                    buffer: self.slots[usize::from(slot)].buf.take(),
                    pieces: None,
                })
            }
            Op::Nothing => Ok(()),
        };
        if r.is_ok() {
            trace::ev(Ev::Submit, self.slots[usize::from(slot)].cid.into(), 0);
        }
        if let Err(f) = r {
            self.slots[usize::from(slot)].buf = f.buffer;
            if matches!(f.error, Error::QueueFull { .. }) {
                self.io_mut().waiting.push_back(slot);
            } else {
                self.respond(slot, Self::status_of(&f.error), 0, 0);
            }
        }
    }

    /// Polls the backend queue pair: completions become responses; waiting commands are
    /// submitted again. True if anything completed.
    pub(super) fn poll_backend(&mut self) -> bool {
        let Role::Io(io) = &mut self.role else {
            return false;
        };
        let mut done = std::mem::take(&mut io.done);
        io.queue
            .poll(|c| done.push((c.user_data as u16, c.result, c.buffer)));
        let progress = !done.is_empty();
        for (slot, result, buf) in done.drain(..) {
            self.complete(slot, result, buf);
        }
        let Role::Io(io) = &mut self.role else {
            return progress;
        };
        io.done = done;
        let n = io.waiting.len();
        for _ in 0..n {
            let Role::Io(io) = &mut self.role else { break };
            let Some(slot) = io.waiting.pop_front() else {
                break;
            };
            self.io_submit(slot);
        }
        progress
    }

    fn complete(&mut self, slot: u16, result: Result<u32, Error>, buf: Option<DmaBuffer>) {
        let Some(s) = self.slots.get_mut(usize::from(slot)) else {
            return;
        };
        if s.state != SlotState::Backend {
            return;
        }
        trace::ev(Ev::Complete, s.cid.into(), 0);
        s.buf = buf;
        match result {
            Ok(_) if s.sqe.opcode() == nvm::READ => {
                let len = s.len;
                self.respond_slot_data(slot, len)
            }
            Ok(dw0) => self.respond(slot, Status::SUCCESS, dw0, 0),
            Err(e) => {
                log::debug!("nvme-target: {}: backend: {e}", self.peer);
                self.respond(slot, Self::status_of(&e), 0, 0)
            }
        }
    }
}

/// A refused no-data submission keeps the slot's buffer (for the pool).
fn keep(f: IoFailure, buf: Option<DmaBuffer>) -> IoFailure {
    IoFailure { buffer: buf, ..f }
}
