//! The admin queue: one command at a time, submitted and polled to completion under the
//! controller's admin lock. Admin commands are rare (bring-up, queue creation, identify), so
//! simplicity wins over batching here.
//!
//! Completions are validated like I/O completions: an entry whose command id is not the one
//! outstanding (stale, duplicated or corrupt) is counted and skipped, never trusted.

use std::sync::Arc;
use std::time::{Duration, Instant};

use nvme_core::{log_occurrence, Error, Result};
use nvme_spec::queue::{CompletionEntry, SubmissionEntry};
use nvme_spec::regs::{self, Csts};
use nvme_spec::{opcode, Status};
use nvme_vfio::{DmaBuffer, DmaMapper, Mmio};

use crate::prp;
use crate::ring::{CqRing, ShadowSlot, SlotPages, SqRing};

/// Spins between clock checks while waiting for a completion.
const SPINS_PER_CHECK: u32 = 256;
/// After this long spinning, the waiter sleeps between checks.
const SPIN_PHASE: Duration = Duration::from_millis(2);
/// Sleep between checks once the spin phase is over.
const SLEEP_STEP: Duration = Duration::from_micros(50);

/// Admin submission/completion queue pair (queue id 0).
pub(crate) struct AdminQueue {
    sq: SqRing,
    cq: CqRing,
    prp_page: SlotPages,
    next_cid: u16,
    /// Commands submitted without waiting (Abort), by command id; their completions are
    /// picked up by whoever uses the queue next ([`AdminQueue::reap_async`] or a waiting
    /// `execute`).
    in_flight_async: Vec<(u16, u8)>,
    /// Completions of those commands (with their opcodes), not yet taken by
    /// [`AdminQueue::take_async`].
    finished_async: Vec<(u8, CompletionEntry)>,
    /// Completions rejected because their command id or queue id did not match.
    pub(crate) bad_completions: u64,
}

/// Most commands in flight without a waiter: Aborts (the controller's Abort Command Limit is
/// at least 1 and commonly 4) plus Asynchronous Event Requests (at most 4 kept posted).
pub(crate) const MAX_ASYNC_COMMANDS: usize = 8;

impl AdminQueue {
    pub(crate) fn new(
        mmio: &Mmio,
        dma: &Arc<dyn DmaMapper>,
        entries: u32,
        stride: usize,
        page_size: usize,
    ) -> Result<Self> {
        let sq = SqRing::new(
            dma,
            entries,
            mmio.doorbell(regs::sq_tail_doorbell(0, stride)),
        )?;
        let cq = CqRing::new(
            dma,
            entries,
            0,
            mmio.doorbell(regs::cq_head_doorbell(0, stride)),
        )?;
        let prp_page = SlotPages::new(dma, 1, page_size)?;
        Ok(Self {
            sq,
            cq,
            prp_page,
            next_cid: 0,
            in_flight_async: Vec::with_capacity(MAX_ASYNC_COMMANDS),
            finished_async: Vec::with_capacity(MAX_ASYNC_COMMANDS),
            bad_completions: 0,
        })
    }

    /// Entries in each admin ring.
    pub(crate) fn entries(&self) -> u32 {
        self.sq.entries()
    }

    /// Index of the next SQ entry and of the next CQ entry.
    pub(crate) fn positions(&self) -> (u32, u32) {
        (self.sq.tail(), self.cq.head())
    }

    /// Empties both rings for a controller that was disabled (reset): the next command goes
    /// to entry 0, MMIO doorbells only until shadow doorbells are configured again. Commands
    /// submitted without a waiter are forgotten (the disable ended them).
    pub(crate) fn reset(&mut self) {
        self.sq.reset();
        self.cq.reset();
        self.in_flight_async.clear();
        self.finished_async.clear();
    }

    /// Submits a command without waiting for it (no data transfer); returns its command id,
    /// or `None` when [`MAX_ASYNC_COMMANDS`] are already out or the ring is full.
    pub(crate) fn submit_async(&mut self, mut sqe: SubmissionEntry) -> Option<u16> {
        if self.in_flight_async.len() >= MAX_ASYNC_COMMANDS || self.sq.is_full() {
            return None;
        }
        let opcode = sqe.opcode();
        let cid = self.next_cid;
        self.next_cid = self.next_cid.wrapping_add(1);
        sqe.set_cid(cid);
        sqe.prp1 = 0;
        sqe.prp2 = 0;
        self.sq.push(&sqe);
        let _ = self.sq.publish();
        self.in_flight_async.push((cid, opcode));
        Some(cid)
    }

    /// Consumes every completion posted so far (no command is being waited for).
    pub(crate) fn reap_async(&mut self) {
        while let Some(cqe) = self.cq.pop() {
            let _ = self.cq.publish();
            if !self.take_if_async(&cqe) {
                self.bad_completions += 1;
                if log_occurrence(self.bad_completions) {
                    log::warn!(
                        "admin queue: ignoring completion with command id {:#x} / SQ id {} \
                         (nothing outstanding has that id; {} ignored so far)",
                        cqe.cid,
                        cqe.sq_id,
                        self.bad_completions
                    );
                }
            }
        }
    }

    /// Completions of commands submitted with [`AdminQueue::submit_async`] since the last call.
    pub(crate) fn take_async(&mut self) -> impl Iterator<Item = (u8, CompletionEntry)> + '_ {
        self.finished_async.drain(..)
    }

    /// Whether any command submitted without a waiter is still out.
    pub(crate) fn has_async(&self) -> bool {
        !self.in_flight_async.is_empty()
    }

    /// Commands with opcode `opcode` submitted without a waiter and still out.
    pub(crate) fn async_count(&self, opcode: u8) -> usize {
        self.in_flight_async
            .iter()
            .filter(|&&(_, op)| op == opcode)
            .count()
    }

    /// Records `cqe` if it completes a command submitted without a waiter.
    fn take_if_async(&mut self, cqe: &CompletionEntry) -> bool {
        if cqe.sq_id != 0 {
            return false;
        }
        let Some(i) = self.in_flight_async.iter().position(|&(c, _)| c == cqe.cid) else {
            return false;
        };
        let (_, opcode) = self.in_flight_async.swap_remove(i);
        if !self.sq.update_head(cqe.sq_head) {
            self.bad_completions += 1;
        }
        self.finished_async.push((opcode, *cqe));
        true
    }

    /// Routes the admin doorbells through shadow doorbells.
    pub(crate) fn set_shadow(&mut self, sq: ShadowSlot, cq: ShadowSlot) {
        self.sq.set_shadow(Some(sq));
        self.cq.set_shadow(Some(cq));
    }

    pub(crate) fn sq_iova(&self) -> u64 {
        self.sq.iova().0
    }

    pub(crate) fn cq_iova(&self) -> u64 {
        self.cq.iova().0
    }

    /// Submits `sqe` (with `data` as its data buffer, if any) and waits for its completion.
    ///
    /// The command id is assigned here. On timeout the caller must treat the controller as
    /// failed: the command may still complete and write `data` later.
    pub(crate) fn execute(
        &mut self,
        mmio: &Mmio,
        page_size: usize,
        mut sqe: SubmissionEntry,
        data: Option<(&DmaBuffer, usize)>,
        timeout: Duration,
    ) -> Result<CompletionEntry> {
        let name = opcode::admin::name(sqe.opcode());
        if let Some((buf, len)) = data {
            if len > buf.len() {
                return Err(Error::BufferTooSmall {
                    needed: len,
                    len: buf.len(),
                });
            }
            if buf.iova().0 % 4 != 0 {
                return Err(Error::BufferMisaligned {
                    iova: buf.iova().0,
                    align: 4,
                });
            }
            if len > prp::max_bytes_with_one_list(page_size) {
                return Err(Error::InvalidRequest(format!(
                    "admin data transfer of {len} bytes exceeds {} bytes",
                    prp::max_bytes_with_one_list(page_size)
                )));
            }
            match prp::layout(buf.iova(), len, page_size) {
                prp::PrpLayout::Direct { prp1, prp2 } => {
                    sqe.prp1 = prp1;
                    sqe.prp2 = prp2;
                }
                prp::PrpLayout::List {
                    prp1,
                    first_list_entry,
                    entries,
                } => {
                    self.prp_page.write_u64s(
                        0,
                        (0..entries as u64).map(|i| first_list_entry + i * page_size as u64),
                    );
                    sqe.prp1 = prp1;
                    sqe.prp2 = self.prp_page.iova(0).0;
                }
            }
        }
        let cid = self.next_cid;
        self.next_cid = self.next_cid.wrapping_add(1);
        sqe.set_cid(cid);
        // One command at a time under the admin lock, so the ring cannot be full unless the
        // controller stopped consuming: report that as a timeout of this command.
        if self.sq.is_full() {
            return Err(Error::Timeout {
                command: name,
                cid,
                timeout,
            });
        }
        self.sq.push(&sqe);
        let _ = self.sq.publish();

        let start = Instant::now();
        let mut spins = 0u32;
        loop {
            while let Some(cqe) = self.cq.pop() {
                let _ = self.cq.publish();
                if (cqe.cid != cid || cqe.sq_id != 0) && self.take_if_async(&cqe) {
                    continue;
                }
                if cqe.cid != cid || cqe.sq_id != 0 {
                    self.bad_completions += 1;
                    if log_occurrence(self.bad_completions) {
                        log::warn!(
                            "admin queue: ignoring completion with command id {:#x} / SQ id {} \
                             (expected {cid:#x} / 0; {} ignored so far, logged sparsely)",
                            cqe.cid,
                            cqe.sq_id,
                            self.bad_completions
                        );
                    }
                    // A controller that floods the queue with bogus entries must not keep us
                    // here past the command's deadline.
                    if start.elapsed() >= timeout {
                        return Err(Error::Timeout {
                            command: name,
                            cid,
                            timeout,
                        });
                    }
                    continue;
                }
                if !self.sq.update_head(cqe.sq_head) {
                    self.bad_completions += 1;
                }
                let status: Status = cqe.status();
                if !status.is_success() {
                    return Err(Error::Command {
                        command: name,
                        status,
                    });
                }
                return Ok(cqe);
            }
            spins += 1;
            if spins % SPINS_PER_CHECK == 0 {
                let waited = start.elapsed();
                if Csts(mmio.read32(regs::CSTS)).cfs() {
                    return Err(Error::ControllerFatal {
                        controller: String::new(),
                    });
                }
                if waited >= timeout {
                    return Err(Error::Timeout {
                        command: name,
                        cid,
                        timeout,
                    });
                }
                if waited >= SPIN_PHASE {
                    std::thread::sleep(SLEEP_STEP);
                }
            }
            std::hint::spin_loop();
        }
    }
}
