//! Completions (NVMe Base 2.0 §4.6): the completion faults, delayed completions, writing
//! entries to the CQ ring with its phase tag, Asynchronous Event completions and MSI-X
//! interrupts.
//!
//! INVARIANTS: an entry is written only while the ring is not full, so an entry the host has
//! not reaped is never overwritten; the others wait in the CQ's `held` queue, in order. A CQ
//! interrupts at most once per poll pass.

use std::time::Instant;

use nvme_spec::queue::{CompletionEntry, CQE_SIZE};
use nvme_spec::status::Status;

use super::{Completion, Cq, CqInterrupt, Delayed, Device, ADMIN_VECTOR};
use crate::dma::GuestView;
use crate::faults::{CORRUPT_CID_MASK, WRONG_SQID_MASK};
use crate::stats::bump;

impl Device {
    /// Applies completion faults, then queues the completion (possibly delayed: the delay
    /// counts from execution, which happens right after the fetch).
    pub(super) fn complete(&mut self, view: &GuestView<'_>, cqid: u16, mut completion: Completion) {
        let faults = &self.shared.faults;
        if faults.take_drop() {
            log::debug!(
                "sim: dropping completion of cid {} on SQ {} (fault)",
                completion.cid,
                completion.sq_id
            );
            return;
        }
        if faults.take_bogus_sq_head() {
            if let Some(sq) = self
                .sqs
                .get(usize::from(completion.sq_id))
                .and_then(Option::as_ref)
            {
                completion.sq_head = ((sq.tail + 1) % sq.size) as u16;
            }
        }
        if faults.take_corrupt_cid() {
            completion.cid ^= CORRUPT_CID_MASK;
        }
        if faults.take_wrong_sqid() {
            completion.sq_id ^= WRONG_SQID_MASK;
        }
        let copies = if faults.take_duplicate() { 2 } else { 1 };
        let delay = faults.delay();
        // Reading the clock only when a delay is armed keeps it off the fast path.
        let due = (!delay.is_zero()).then(|| Instant::now() + delay);
        for _ in 0..copies {
            match due {
                None => self.post(view, cqid, completion),
                Some(due) => self.delayed.push_back(Delayed {
                    due,
                    cqid,
                    completion,
                }),
            }
        }
    }

    /// Moves due delayed completions to their queues.
    pub(super) fn release_delayed(&mut self, view: &GuestView<'_>) -> bool {
        if self.delayed.is_empty() {
            return false;
        }
        let now = Instant::now();
        let mut moved = false;
        while self.delayed.front().is_some_and(|d| d.due <= now) {
            let Some(d) = self.delayed.pop_front() else {
                break;
            };
            self.post(view, d.cqid, d.completion);
            moved = true;
        }
        moved
    }

    /// Queues a completion on its CQ and writes as many held entries as fit.
    /// Completes outstanding Asynchronous Event Requests with the events tests raised.
    pub(super) fn raise_events(&mut self, view: &GuestView<'_>) -> bool {
        let mut raised = false;
        while !self.admin.aer_cids.is_empty() {
            let Some(dw0) = self.shared.faults.take_async_event() else {
                break;
            };
            let cid = self.admin.aer_cids.pop_front().expect("checked non-empty");
            self.admin.aers_outstanding -= 1;
            let sq_head = self.sqs[0].as_ref().map_or(0, |sq| sq.head as u16);
            self.post(
                view,
                0,
                Completion {
                    dw0,
                    sq_head,
                    sq_id: 0,
                    cid,
                    status: Status::SUCCESS,
                },
            );
            raised = true;
        }
        raised
    }

    fn post(&mut self, view: &GuestView<'_>, cqid: u16, completion: Completion) {
        let Some(mut cq) = self.cqs[usize::from(cqid)].take() else {
            log::debug!("sim: completion for deleted CQ {cqid} discarded");
            return;
        };
        if cq.is_full() || !cq.held.is_empty() {
            // Completion Queue flow control (NVMe Base 2.0 §3.3.1.2.2): no free slot as the
            // host last published the head, so this completion waits for a head doorbell.
            bump(&self.shared.counters.cq_full_waits);
        }
        cq.held.push_back(completion);
        self.flush_held(view, &mut cq);
        self.cqs[usize::from(cqid)] = Some(cq);
    }

    /// Writes held completions while the ring has room; true when any was written.
    pub(super) fn flush_held(&self, view: &GuestView<'_>, cq: &mut Cq) -> bool {
        let mut wrote = false;
        while !cq.is_full() {
            let Some(c) = cq.held.front().copied() else {
                break;
            };
            let entry = CompletionEntry::new(c.dw0, c.sq_head, c.sq_id, c.cid, c.status, cq.phase);
            let dwords = [
                entry.dw0,
                entry.dw1,
                u32::from(entry.sq_head) | u32::from(entry.sq_id) << 16,
                u32::from(entry.cid) | u32::from(entry.status) << 16,
            ];
            let addr = cq.base + u64::from(cq.tail) * CQE_SIZE as u64;
            if let Err(fault) = view.write_cqe(addr, dwords) {
                self.dma_error(fault, "completion queue entry write");
                log::error!(
                    "sim: CQ ring at IOVA {:#x} is not mapped: controller fatal",
                    cq.base
                );
                self.shared.faults.set_fatal();
                break;
            }
            cq.held.pop_front();
            bump(&self.shared.counters.completions_posted);
            cq.tail += 1;
            if cq.tail == cq.size {
                cq.tail = 0;
                cq.phase = !cq.phase;
            }
            wrote = true;
        }
        cq.interrupt_due |= wrote;
        wrote
    }

    /// Signals the vector of every CQ that had entries posted since its last interrupt: one
    /// interrupt per CQ per poll pass, however many entries the pass posted.
    pub(super) fn raise_interrupts(&mut self) {
        let counters = &self.shared.counters;
        for (qid, cq) in self.cqs.iter_mut().enumerate() {
            let Some(cq) = cq.as_mut().filter(|cq| cq.interrupt_due) else {
                continue;
            };
            cq.interrupt_due = false;
            let (vector, required) = match cq.interrupt {
                CqInterrupt::Polled => continue,
                CqInterrupt::Vector(v) => (v, true),
                CqInterrupt::Admin => (ADMIN_VECTOR, false),
            };
            // The eventfd write is a system call, which orders the CQE stores before it: a host
            // woken by the event (through the kernel) sees the entries it announces.
            match self.routes.event(vector).map(|event| event.signal()) {
                Some(Ok(())) => bump(&counters.interrupts_signalled),
                Some(Err(err)) => {
                    bump(&counters.interrupts_lost);
                    log::warn!("sim: CQ {qid}: cannot signal MSI-X vector {vector}: {err}");
                }
                None if required => {
                    bump(&counters.interrupts_lost);
                    log::debug!(
                        "sim: CQ {qid}: interrupt lost, MSI-X vector {vector} is not routed \
                         (enable MSI-X with at least {} vectors)",
                        u32::from(vector) + 1
                    );
                }
                None => {}
            }
        }
    }
}
