//! Submission and completion queues: creation, and each poll pass's work on them: new CQ
//! heads, new SQ tails, and fetching a bounded batch of commands per SQ ([`FETCH_BATCH`]) to
//! execute.
//!
//! INVARIANTS: `head`/`tail` stay `< size` (doorbell values outside are refused and counted);
//! an SQ fetches only while its CQ can take the completion without holding more than one
//! ring's worth ([`Device::cq_can_accept`]).

use std::collections::VecDeque;
use std::time::Instant;

use nvme_spec::queue::{SubmissionEntry, SQE_SIZE};
use nvme_spec::regs::{cq_head_doorbell, sq_tail_doorbell};

use super::{Completion, Cq, CqInterrupt, Deferred, Device, Outcome, Sq, FETCH_BATCH};
use crate::dma::GuestView;
use crate::stats::bump;

impl Device {
    /// Creates a completion queue (admin at enable, I/O from Create I/O Completion Queue).
    pub(super) fn create_cq(
        &mut self,
        qid: u16,
        base: u64,
        size: u32,
        interrupt: CqInterrupt,
        view: Option<&GuestView<'_>>,
    ) {
        let doorbell = self.doorbell_source(cq_head_doorbell(qid, self.stride), view);
        self.cqs[usize::from(qid)] = Some(Cq {
            base,
            size,
            head: 0,
            tail: 0,
            phase: true,
            interrupt,
            interrupt_due: false,
            held: VecDeque::with_capacity(size as usize),
            doorbell,
        });
    }

    /// Creates a submission queue bound to completion queue `cqid`.
    pub(super) fn create_sq(
        &mut self,
        qid: u16,
        base: u64,
        size: u32,
        cqid: u16,
        view: Option<&GuestView<'_>>,
    ) {
        let doorbell = self.doorbell_source(sq_tail_doorbell(qid, self.stride), view);
        self.sqs[usize::from(qid)] = Some(Sq {
            base,
            size,
            head: 0,
            tail: 0,
            cqid,
            doorbell,
        });
    }

    pub(super) fn poll_cq_head(&mut self, view: &GuestView<'_>, qid: usize) -> bool {
        let Some(mut cq) = self.cqs[qid].take() else {
            return false;
        };
        let mut busy = false;
        if let Some(head) = self.read_doorbell(view, &mut cq.doorbell, false) {
            if head < cq.size {
                cq.head = head;
                busy = true;
            } else {
                self.invalid_doorbell(qid, "CQ head", head, cq.size);
            }
        }
        let head = cq.head;
        self.write_event_idx(view, &mut cq.doorbell, head);
        busy |= self.flush_held(view, &mut cq);
        self.cqs[qid] = Some(cq);
        busy
    }

    /// Takes a new SQ tail, then fetches and executes up to [`FETCH_BATCH`] commands.
    pub(super) fn poll_sq(&mut self, view: &GuestView<'_>, qid: usize) -> bool {
        let Some(mut sq) = self.sqs[qid].take() else {
            return false;
        };
        let mut new_tail = false;
        if let Some(tail) = self.read_doorbell(view, &mut sq.doorbell, true) {
            if tail < sq.size {
                sq.tail = tail;
                new_tail = true;
            } else {
                self.invalid_doorbell(qid, "SQ tail", tail, sq.size);
            }
        }
        let cqid = usize::from(sq.cqid);
        self.sqs[qid] = Some(sq);
        if new_tail {
            // PCIe delivers posted writes in order: a CQ head doorbell the host wrote before
            // this tail has reached the controller by the time the tail has. This pass read
            // the CQ heads before the SQ tails, so look again before posting anything.
            self.poll_cq_head(view, cqid);
        }
        if qid == 0 {
            self.admin.aborts_this_pass = 0;
        }

        let sq_id = qid as u16;
        let mut fetched = 0;
        while fetched < FETCH_BATCH {
            // Commands may create or delete other queues (never their own), so the SQ is
            // borrowed afresh for each fetch.
            let Some(sq) = self.sqs[qid].as_ref() else {
                break;
            };
            let (cqid, ring_base) = (sq.cqid, sq.base);
            // Fatal status stops fetching at once, even mid-pass.
            if sq.head == sq.tail || !self.cq_can_accept(cqid) || self.shared.faults.is_fatal() {
                break;
            }
            let addr = ring_base + u64::from(sq.head) * SQE_SIZE as u64;
            let sqe = match view.read_dwords::<{ SQE_SIZE / 4 }>(addr) {
                Ok(dwords) => parse_sqe(&dwords),
                Err(fault) => {
                    // The ring itself is unreachable: nothing sensible can be completed.
                    self.dma_error(fault, "submission queue entry fetch");
                    log::error!(
                        "sim: SQ {qid} ring at IOVA {ring_base:#x} is not mapped: controller fatal"
                    );
                    self.shared.faults.set_fatal();
                    break;
                }
            };
            let sq_head = match self.sqs[qid].as_mut() {
                Some(sq) => {
                    sq.head = (sq.head + 1) % sq.size;
                    sq.head as u16
                }
                None => break,
            };
            fetched += 1;
            // A fused pair is executed as one unit (`fused`), never deferred.
            if qid != 0 && sqe.fuse() == 0 {
                if let Some(how) = self.shared.faults.take_execution_delay() {
                    bump(&self.shared.counters.commands_deferred);
                    log::debug!(
                        "sim: deferring cid {} of SQ {qid} by {:?} ({how:?})",
                        sqe.cid(),
                        how.delay
                    );
                    self.deferred.push(Deferred {
                        due: Instant::now() + how.delay,
                        sq_id,
                        cqid,
                        sqe,
                        how,
                    });
                    continue;
                }
            }
            let outcome = if qid == 0 {
                bump(&self.shared.counters.admin_commands);
                self.admin_command(view, &sqe)
            } else if self.opens_fused_pair(&sqe) {
                let second = self.fetch_fused_second(view, qid);
                let (first, second_outcome) =
                    self.fused_pair(view, &sqe, second.as_ref().map(|(e, _)| e));
                self.post_outcome(view, (sq_id, cqid, sq_head), &sqe, first);
                if let (Some((entry, head)), Some(outcome)) = (second, second_outcome) {
                    fetched += 1;
                    self.post_outcome(view, (sq_id, cqid, head), &entry, outcome);
                }
                continue;
            } else {
                self.io_command(view, &sqe)
            };
            self.post_outcome(view, (sq_id, cqid, sq_head), &sqe, outcome);
        }
        if let Some(mut sq) = self.sqs[qid].take() {
            let head = sq.head;
            self.write_event_idx(view, &mut sq.doorbell, head);
            self.sqs[qid] = Some(sq);
        }
        fetched > 0
    }

    /// Posts the completion of `sqe` (fetched from SQ `sq_id`, bound to CQ `cqid`, leaving
    /// the SQ head at `sq_head`) unless it stays outstanding; errors go to the error log.
    fn post_outcome(
        &mut self,
        view: &GuestView<'_>,
        (sq_id, cqid, sq_head): (u16, u16, u16),
        sqe: &SubmissionEntry,
        outcome: Outcome,
    ) {
        if let Outcome::Complete { status, dw0 } = outcome {
            if !status.is_success() {
                self.admin.record_error(sq_id, sqe, status);
            }
            let completion = Completion {
                dw0,
                sq_head,
                sq_id,
                cid: sqe.cid(),
                status,
            };
            self.complete(view, cqid, completion);
        }
    }

    /// Whether the CQ can take one more completion without holding more than one ring's worth.
    fn cq_can_accept(&self, cqid: u16) -> bool {
        self.cqs[usize::from(cqid)]
            .as_ref()
            .is_some_and(|cq| cq.held.len() < cq.size as usize)
    }
}

/// Decodes a submission queue entry from its 16 little-endian dwords.
pub(super) fn parse_sqe(dwords: &[u32; SQE_SIZE / 4]) -> SubmissionEntry {
    let mut bytes = [0u8; SQE_SIZE];
    for (chunk, dword) in bytes.chunks_exact_mut(4).zip(dwords) {
        chunk.copy_from_slice(&dword.to_le_bytes());
    }
    SubmissionEntry::from_bytes(&bytes)
}
