//! Completion: [`QueuePair::poll`] / [`QueuePair::poll_deferred`] reap the completion queue
//! by phase tag, validate each entry, complete requests and publish the CQ head.
//!
//! INVARIANT: nothing the device posts is trusted: an entry with the wrong SQ id, a command
//! id not in flight or already completed is rejected and counted; an SQ head outside the
//! entries submitted is ignored. A request's buffer is given back only with the completion of
//! its last command. The per-I/O path here is `#[inline]`/`#[inline(always)]`.

use nvme_core::{fused, log_occurrence, Error};
use nvme_pool::Tag;
use nvme_spec::{opcode, Status};

use super::timeout::{IDLE_POLLS_PER_CLOCK_CHECK, POLLS_PER_CLOCK_CHECK};
use super::{Completion, QueuePair};

/// `reap`'s packed SQ head while no valid entry was seen (cid FFFFh is never in flight).
const NO_SQ_HEAD: u32 = u32::MAX;

/// How one command ended.
enum Outcome {
    /// Success, with completion dword 0.
    Done(u32),
    /// The controller reported an error status.
    Status(Status),
}

impl QueuePair {
    /// Reaps up to the pair's batch cap of completions, calling `f` for each finished
    /// request, and writes the CQ head doorbell when the ring's slack is used up (see
    /// [`QueuePair::poll_deferred`]). Returns the number of requests finished. Also detects
    /// timed-out commands and a fatal controller status.
    #[inline]
    pub fn poll<F: FnMut(Completion)>(&mut self, f: F) -> usize {
        self.poll_inner::<false, F>(f)
    }

    /// As [`QueuePair::poll`], but the CQ head doorbell is not written here: the next
    /// [`QueuePair::ring`] / [`QueuePair::unplug`] writes it just before the SQ tail
    /// doorbell, and only once the CQ's slack is used up. The CQ has more entries than the
    /// commands that can be outstanding (twice the SQ, at least a page of entries, within
    /// CAP.MQES), so the head needs to reach the controller only once per that many
    /// completions: about one CQ head doorbell per 255 I/Os at queue depth 1 instead of one
    /// per I/O. Safe to call repeatedly without submitting: the controller's view of the
    /// ring is never full while a command is outstanding (`CqRing::publish_lazy`). Waiting
    /// for an interrupt publishes the head at once.
    #[inline]
    pub fn poll_deferred<F: FnMut(Completion)>(&mut self, f: F) -> usize {
        self.poll_inner::<true, F>(f)
    }

    /// Writes the CQ head doorbell if the head moved since the last write and the CQ's
    /// slack is used up (`CqRing::publish_lazy`).
    #[inline(always)]
    pub(super) fn publish_cq_head(&mut self) {
        let published = self.cq.publish_lazy();
        self.count_cq_doorbell(published);
    }

    /// Writes the CQ head doorbell now if the head moved since the last write (before
    /// blocking on the interrupt: the controller's interrupt logic sees every entry reaped).
    pub(super) fn publish_cq_head_now(&mut self) {
        let published = self.cq.publish();
        self.count_cq_doorbell(published);
    }

    #[inline(always)]
    fn count_cq_doorbell(&mut self, published: Option<bool>) {
        if let Some(mmio) = published {
            self.stats.cq_doorbell_updates += 1;
            if mmio {
                self.stats.cq_doorbell_writes += 1;
            }
        }
    }

    #[inline(always)]
    fn poll_inner<const DEFER_CQ_HEAD: bool, F: FnMut(Completion)>(&mut self, mut f: F) -> usize {
        self.stats.polls += 1;
        if self.ctrl.state() != self.ctrl_state {
            self.poll_state_changed();
        }
        let mut done = 0;
        while let Some(c) = self.deferred.pop_front() {
            f(c);
            done += 1;
        }
        let reaped = self.reap::<DEFER_CQ_HEAD, F>(&mut f);
        done += reaped;
        if reaped > 0 && !self.queued.is_empty() {
            self.drain_queued();
            while let Some(c) = self.deferred.pop_front() {
                f(c);
                done += 1;
            }
        }
        let clock_due = if done == 0 {
            self.stats.idle_polls += 1;
            self.stats.idle_polls % IDLE_POLLS_PER_CLOCK_CHECK == 0
        } else {
            self.stats.polls % POLLS_PER_CLOCK_CHECK == 0
        };
        if clock_due {
            // Out of line and without `f`: a callback whose address reached a call that is
            // not inlined would have to be built in memory on every poll (its captures
            // stored one by one, ~24 instructions per poll for nvme-perf's), even when the
            // clock is not due. The requests it finishes come back through `deferred`.
            self.check_clock_deferred();
            while let Some(c) = self.deferred.pop_front() {
                f(c);
                done += 1;
            }
        }
        done
    }

    /// With `DEFER_CQ_HEAD`, the CQ head doorbell is left to the next ring or poll
    /// ([`QueuePair::poll_deferred`]).
    #[inline(always)]
    pub(super) fn reap<const DEFER_CQ_HEAD: bool, F: FnMut(Completion)>(
        &mut self,
        f: &mut F,
    ) -> usize {
        // An empty queue (most polls of a QD1 loop) leaves before anything else: the loop's
        // setup below (what the compiler hoists out of it for an inlined callback) is not paid
        // by a poll that finds nothing.
        if !self.cq.ready() {
            return 0;
        }
        let mut finished = 0;
        let mut consumed = 0;
        // The SQ head of the batch's last valid entry: only the newest one matters, so it is
        // checked once per batch. Packed as `head << 16 | cid` (one register per entry, not an
        // `Option` of a pair); `NO_SQ_HEAD` while none: a valid entry's cid passed `lookup`,
        // which never accepts the reserved cid FFFFh.
        let mut sq_head = NO_SQ_HEAD;
        // Each phase tag is loaded once: `ready` above for the first entry, then after each
        // entry for the next (`take_ready` does not test it again). `max_completions >= 1`.
        loop {
            let cqe = self.cq.take_ready();
            consumed += 1;
            'entry: {
                if cqe.sq_id != self.qid {
                    self.reject_wrong_sq(cqe.cid, cqe.sq_id, cqe.status());
                    break 'entry;
                }
                let Some((tag, slot)) = self.tags.lookup_mut(cqe.cid) else {
                    self.reject_not_in_flight(cqe.cid, cqe.sq_id, cqe.status());
                    break 'entry;
                };
                if !slot.awaiting {
                    self.reject_completed(cqe.cid, cqe.sq_id, cqe.status());
                    break 'entry;
                }
                slot.awaiting = false;
                let head_tag = slot.head;
                sq_head = u32::from(cqe.sq_head) << 16 | u32::from(cqe.cid);
                let status = cqe.status();
                // `simple`: one command heading its own group, no pieces, no synchronous waiter,
                // not reported (every path that makes a slot anything else clears it).
                if status.is_success() && slot.simple {
                    // The common case, a successful request of one command (not vectored: its
                    // pieces go through `complete_group`): complete it from the
                    // one slot already at hand (what `finish_command` + `complete_group` do for
                    // groups and errors). A result known to be `Ok` here lets an inlined callback
                    // skip its error handling without the `Completion` ever reaching memory.
                    //
                    // The buffer goes from the slot straight into the callback, and the slot
                    // is freed after it: freed first, the buffer would have to be kept aside
                    // (on the stack) across the free. The callback cannot reach this pair
                    // (`poll` holds it), so the order is not visible to it; were it to panic,
                    // the slot (no longer awaiting, its buffer gone) would stay unused.
                    let user_data = slot.user_data;
                    // `pieces: None` known here: an inlined callback drops no vector.
                    f(Completion {
                        user_data,
                        result: Ok(cqe.dw0),
                        buffer: slot.buffer.take(),
                        pieces: None,
                    });
                    // `tag` is what `lookup_mut` returned just above.
                    self.tags.free_found(tag);
                    self.stats.requests_completed += 1;
                    finished += 1;
                    break 'entry;
                }
                let outcome = if status.is_success() {
                    Outcome::Done(cqe.dw0)
                } else {
                    Outcome::Status(status)
                };
                if self.finish_command(tag, head_tag, outcome, f) {
                    finished += 1;
                }
            }
            if consumed >= self.max_completions || !self.cq.ready() {
                break;
            }
        }
        if sq_head != NO_SQ_HEAD {
            let (head, cid) = ((sq_head >> 16) as u16, sq_head as u16);
            if !self.sq.update_head(head) {
                self.bad_sq_head(head, cid);
            }
        }
        // At least one entry was consumed (the queue was ready).
        self.stats.completions_reaped += consumed as u64;
        if !DEFER_CQ_HEAD {
            self.publish_cq_head();
        }
        finished
    }

    /// Counts and logs a completion entry that matches no request. Its fields come by value:
    /// a reference would make the reaping loop keep a copy of every entry in memory (six
    /// stores per completion) for this cold call's sake.
    ///
    /// Each reason has its own out-of-line entry below: with one call taking the reason as an
    /// argument, the compiler merged the three call sites into one and set up the message's
    /// pointer and length on the reaping path, before knowing whether the entry was bad.
    #[cold]
    #[inline(never)]
    fn reject(&mut self, cid: u16, sq_id: u16, status: Status, why: &str) {
        self.stats.bad_completions += 1;
        if log_occurrence(self.stats.bad_completions) {
            log::warn!(
                "{} queue {}: rejected completion (cid {:#x}, sq id {}, status {}): {why} \
                 ({} rejected so far; further ones are logged sparsely)",
                self.ctrl.name,
                self.qid,
                cid,
                sq_id,
                status,
                self.stats.bad_completions
            );
        }
    }

    #[cold]
    #[inline(never)]
    fn reject_wrong_sq(&mut self, cid: u16, sq_id: u16, status: Status) {
        self.reject(cid, sq_id, status, "wrong submission queue id");
    }

    #[cold]
    #[inline(never)]
    fn reject_not_in_flight(&mut self, cid: u16, sq_id: u16, status: Status) {
        self.reject(cid, sq_id, status, "command id not in flight");
    }

    #[cold]
    #[inline(never)]
    fn reject_completed(&mut self, cid: u16, sq_id: u16, status: Status) {
        self.reject(cid, sq_id, status, "command already completed");
    }

    #[cold]
    fn bad_sq_head(&mut self, head: u16, cid: u16) {
        self.stats.bad_sq_heads += 1;
        if log_occurrence(self.stats.bad_sq_heads) {
            log::warn!(
                "{} queue {}: ignored SQ head {head} in a completion (cid {cid:#x}): outside \
                 the entries submitted and not yet consumed ({} so far)",
                self.ctrl.name,
                self.qid,
                self.stats.bad_sq_heads
            );
        }
    }

    /// Records the outcome of command `tag` (already marked not awaiting) of the group headed
    /// by `head_tag`; completes its request when it was the group's last. Returns whether a
    /// request finished.
    #[inline(always)]
    fn finish_command<F: FnMut(Completion)>(
        &mut self,
        tag: Tag,
        head_tag: Tag,
        outcome: Outcome,
        f: &mut F,
    ) -> bool {
        if head_tag != tag {
            // The device is done with this command and its PRP-list page.
            self.tags.free(tag);
        }
        let head = self.tags.get_mut(head_tag);
        if head.reported {
            self.late_completion(head_tag);
            return false;
        }
        match outcome {
            Outcome::Done(dw0) => head.dw0 = dw0,
            Outcome::Status(status) => {
                // The first error decides, except that a fused command's abort because its
                // partner failed gives way to the partner's own status (Compare Failure).
                if head.status.is_success() || fused::is_fused_abort(head.status) {
                    head.status = status;
                }
            }
        }
        head.remaining -= 1;
        if head.remaining > 0 {
            return false;
        }
        self.complete_group(head_tag, f);
        true
    }

    #[inline(always)]
    fn complete_group<F: FnMut(Completion)>(&mut self, head_tag: Tag, f: &mut F) {
        let head = self.tags.get_mut(head_tag);
        let status = head.status;
        let buffer = head.buffer.take();
        let pieces = head.pieces.take();
        let user_data = head.user_data;
        let dw0 = head.dw0;
        let sync = head.sync;
        let opcode = head.opcode;
        self.tags.free(head_tag);
        self.stats.requests_completed += 1;
        let completion = Completion {
            user_data,
            result: if status.is_success() {
                Ok(dw0)
            } else {
                Err(command_error(opcode, status))
            },
            buffer,
            pieces,
        };
        self.deliver(sync, completion, f);
    }

    #[inline(always)]
    pub(super) fn deliver<F: FnMut(Completion)>(
        &mut self,
        sync: bool,
        completion: Completion,
        f: &mut F,
    ) {
        if sync {
            self.sync_done = Some(completion);
        } else {
            f(completion);
        }
    }

    /// A command of a request already reported as failed (timeout, fatal status) completed:
    /// once the last one is back, the request's buffer and head slot are released.
    #[cold]
    fn late_completion(&mut self, head_tag: Tag) {
        self.stats.late_completions += 1;
        let head = self.tags.get_mut(head_tag);
        head.remaining -= 1;
        if head.remaining > 0 {
            return;
        }
        // Every command of the group is back: nothing references the buffer any more.
        drop(head.buffer.take());
        drop(head.pieces.take());
        self.tags.free(head_tag);
        self.retired -= 1;
    }
}

pub(super) fn command_name(op: u8) -> &'static str {
    opcode::nvm::name(op)
}

#[cold]
fn command_error(op: u8, status: Status) -> Error {
    Error::command(command_name(op), status)
}
