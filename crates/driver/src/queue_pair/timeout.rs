//! The timeout clock: commands are stamped with an epoch; every few polls the clock advances
//! and commands `TIMEOUT_EPOCHS` old (or all, on a dead controller) expire. Expired requests
//! are reported at once without their buffer; Aborts and, with
//! `TimeoutAction::AbortThenReset`, a reset follow up.
//!
//! INVARIANT: an expired request's slots stay retired (tag, PRP page, buffer) until the
//! device returns every command of it (see the module INVARIANT of `queue_pair`). The clock
//! is read only every `POLLS_PER_CLOCK_CHECK` busy or `IDLE_POLLS_PER_CLOCK_CHECK` idle polls,
//! never per I/O.

use std::time::Instant;

use nvme_core::{Error, TimeoutAction};
use nvme_pool::Tag;

use super::health::{Dead, HEALTH_INTERVAL};
use super::reap::command_name;
use super::{Completion, QueuePair};

/// Idle polls between clock reads (a slowly polling owner sees timeouts late by at most
/// about `TIMEOUT_EPOCHS` times this many of its poll intervals).
pub(super) const IDLE_POLLS_PER_CLOCK_CHECK: u64 = 32;

/// Busy polls between clock reads.
pub(super) const POLLS_PER_CLOCK_CHECK: u64 = 4096;

/// Timed-out commands handled per scan pass.
const EXPIRE_BATCH: usize = 64;

impl QueuePair {
    /// [`QueuePair::check_clock`] for `poll`: the requests it finishes (timed out, or failed
    /// with the controller) are appended to `deferred`, for `poll` to deliver and count.
    #[cold]
    pub(super) fn check_clock_deferred(&mut self) {
        // `deferred` keeps its capacity (one entry per slot) through the swap, so these
        // pushes never allocate.
        let mut spill = std::mem::take(&mut self.deferred);
        self.check_clock(&mut |c| spill.push_back(c));
        spill.append(&mut self.deferred);
        self.deferred = spill;
    }

    /// Reports the request of a command that will not complete in time with `error`, at
    /// once and without its buffer; its slots stay retired until the device returns its
    /// commands (see the module INVARIANT).
    #[cold]
    fn report_lost<F: FnMut(Completion)>(&mut self, head_tag: Tag, error: Error, f: &mut F) {
        let head = self.tags.get_mut(head_tag);
        if head.reported {
            return;
        }
        head.reported = true;
        head.simple = false;
        let sync = head.sync;
        let user_data = head.user_data;
        self.retired += 1;
        self.stats.requests_completed += 1;
        let completion = Completion {
            user_data,
            result: Err(error),
            buffer: None,
            pieces: None,
        };
        self.deliver(sync, completion, f);
    }

    /// Advances the timeout clock; fails commands older than the timeout and, on a fatal
    /// controller status, every command in flight.
    #[cold]
    pub(super) fn check_clock<F: FnMut(Completion)>(&mut self, f: &mut F) {
        let now = Instant::now();
        // Health: at most every HEALTH_INTERVAL, one CSTS read (never on the per-I/O path).
        let mut dead = None;
        if now >= self.health_due {
            self.health_due = now + HEALTH_INTERVAL;
            dead = self.check_health();
            // Collect asynchronous events (and re-post their requests) if the admin queue
            // is free; never waits for it.
            self.ctrl.poll_admin();
        }
        if self.tags.in_use() == 0 {
            self.clock.restart(now);
            return;
        }
        let fatal = dead.is_some();
        if !self.clock.advance(now) && !fatal {
            return;
        }
        let mut expired = [None::<Tag>; EXPIRE_BATCH];
        loop {
            let mut n = 0;
            for tag in self.tags.iter_in_use() {
                let slot = self.tags.get(tag);
                if slot.awaiting && !slot.expired && (fatal || self.clock.is_old(slot.epoch)) {
                    expired[n] = Some(tag);
                    n += 1;
                    if n == EXPIRE_BATCH {
                        break;
                    }
                }
            }
            if n == 0 {
                break;
            }
            for tag in expired[..n].iter().flatten().copied() {
                self.expire(tag, dead, f);
            }
        }
        if self.retired > 0 && dead.is_none() {
            self.follow_up_timeouts();
        }
    }

    /// Timed-out commands still outstanding: sends the Aborts the admin queue was too busy
    /// for, and with [`TimeoutAction::AbortThenReset`] resets the controller when one is still
    /// outstanding a whole timeout after it expired.
    #[cold]
    fn follow_up_timeouts(&mut self) {
        let action = self.ctrl.timeout_action;
        if action == TimeoutAction::None || self.ctrl.is_failed() {
            return;
        }
        self.ctrl.poll_admin();
        let mut unsent = [None::<Tag>; EXPIRE_BATCH];
        let mut n = 0;
        let mut overdue = false;
        for tag in self.tags.iter_in_use() {
            let slot = self.tags.get(tag);
            if !(slot.awaiting && slot.expired) {
                continue;
            }
            if !slot.abort_sent && n < EXPIRE_BATCH {
                unsent[n] = Some(tag);
                n += 1;
            }
            overdue |= self.clock.is_old(slot.epoch);
        }
        for tag in unsent[..n].iter().flatten().copied() {
            let sent = self.ctrl.abort_async(self.qid, tag.cid());
            self.tags.get_mut(tag).abort_sent = sent;
        }
        if overdue && action == TimeoutAction::AbortThenReset {
            log::error!(
                "{} queue {}: a timed-out command is still outstanding after its abort; \
                 resetting the controller",
                self.ctrl.name,
                self.qid
            );
            self.ctrl.abort_stats_mut().resets += 1;
            if let Err(e) = self.ctrl.reset() {
                log::error!("{}: reset after a timeout failed: {e}", self.ctrl.name);
            }
            // This pair recovers on its next poll, like every other one.
        }
    }

    #[cold]
    fn expire<F: FnMut(Completion)>(&mut self, tag: Tag, dead: Option<Dead>, f: &mut F) {
        let cid = tag.cid();
        self.stats.timeouts += 1;
        // The slot stays allocated and awaiting: its late completion releases it.
        let epoch = self.clock.epoch();
        let slot = self.tags.get_mut(tag);
        slot.expired = true;
        slot.abort_sent = false;
        slot.epoch = epoch;
        let head_tag = self.tags.get(tag).head;
        let command = command_name(self.tags.get(head_tag).opcode);
        let error = if let Some(dead) = dead {
            match dead {
                Dead::Fatal => Error::ControllerFatal {
                    controller: self.ctrl.name.clone(),
                },
                Dead::Removed => Error::Removed {
                    controller: self.ctrl.name.clone(),
                    why: "its registers read all ones",
                },
                Dead::Released => Error::Removed {
                    controller: self.ctrl.name.clone(),
                    why: "the kernel asked for the device back",
                },
            }
        } else {
            log::error!(
                "{} queue {}: {command} (cid {cid:#x}) timed out after {:?}",
                self.ctrl.name,
                self.qid,
                self.timeout
            );
            // If the abort succeeds the controller completes the command with Command Abort
            // Requested, which releases its retired slot. Never blocks: a busy admin queue
            // means a retry at the next clock tick.
            if self.ctrl.timeout_action != TimeoutAction::None {
                let sent = self.ctrl.abort_async(self.qid, cid);
                self.tags.get_mut(tag).abort_sent = sent;
            }
            Error::Timeout {
                command,
                cid,
                timeout: self.timeout,
            }
        };
        self.report_lost(head_tag, error, f);
    }
}
