//! Timeouts: the epoch clock (read every few polls), expiry of commands older than
//! `TIMEOUT_EPOCHS` epochs, and the bookkeeping of the Abort the owner sends for them.
//!
//! INVARIANT: a command's age is its stamp `slot.epoch` against the queue's `EpochClock`
//! (`nvme_core`, the PCIe pair's clock too), for the slots the tag set has in use; without
//! the abort policy
//! the first command past its timeout fails the queue, with it the command is marked expired
//! once (its age restarts) and `timeout_work` tells the owner to act (cold path).

use std::time::Instant;

use nvme_core::Error;

use super::{command_name, Queue};
use crate::error::TcpError;

impl Queue {
    /// Expired commands whose Abort has not gone out yet: (command id) for each, at most
    /// `out.len()`. Returns how many were written.
    pub(crate) fn expired_unaborted(&self, out: &mut [u16]) -> usize {
        let mut n = 0;
        for tag in self.tags.iter_in_use() {
            if n == out.len() {
                break;
            }
            let s = self.tags.get(tag);
            if s.expired && !s.abort_sent {
                out[n] = tag.cid();
                n += 1;
            }
        }
        n
    }

    /// Notes that the Abort of `cid` went out (nothing if `cid` is no longer in flight).
    pub(crate) fn mark_abort_sent(&mut self, cid: u16) {
        if let Some((_, s)) = self.tags.lookup_mut(cid) {
            s.abort_sent = true;
        }
    }

    /// Whether an expired command has been outstanding for a whole further timeout (its
    /// Abort was declined, failed or not answered).
    pub(crate) fn expired_overdue(&self) -> bool {
        self.tags.iter_in_use().any(|tag| {
            let s = self.tags.get(tag);
            s.expired && self.clock.is_old(s.epoch)
        })
    }

    /// Fails the queue because commands timed out: those complete with `Error::Timeout`,
    /// the others with the transport error.
    pub(crate) fn fail_timed_out(&mut self) {
        let timeout = self.timeout;
        let live = self.take_live();
        for &tag in &live {
            let s = self.tags.get(tag);
            if s.expired || self.clock.is_old(s.epoch) {
                let e = Error::Timeout {
                    command: command_name(s.opcode),
                    cid: tag.cid(),
                    timeout,
                };
                self.finish(tag, Err(e));
            }
        }
        self.put_live(live);
        self.fail(TcpError::ClosedAfterTimeout {
            addr: self.addr,
            qid: self.qid,
        });
    }

    /// Advances the epoch when its time is up and fails the queue if a command is older
    /// than its timeout.
    pub(crate) fn check_clock(&mut self) {
        if self.in_flight() == 0 || self.failed.is_some() {
            self.clock.restart(Instant::now());
            return;
        }
        if !self.clock.advance(Instant::now()) {
            return;
        }
        let clock = self.clock;
        let epoch = clock.epoch();
        if !self.abort_on_timeout {
            if self
                .tags
                .iter_in_use()
                .any(|tag| clock.is_old(self.tags.get(tag).epoch))
            {
                self.fail_timed_out();
            }
            return;
        }
        // Abort policy: a command past its timeout is marked expired (its age restarts, so
        // that a further timeout later it is overdue); the owner sends the Abort.
        let live = self.take_live();
        for &tag in &live {
            let s = self.tags.get_mut(tag);
            if !clock.is_old(s.epoch) {
                continue;
            }
            self.timeout_work = true;
            if !s.expired {
                s.expired = true;
                s.abort_sent = false;
                s.epoch = epoch;
                log::error!(
                    "{} queue {}: {} (cid {:#x}) timed out after {:?}",
                    self.controller,
                    self.qid,
                    command_name(s.opcode),
                    tag.cid(),
                    self.timeout
                );
            }
        }
        self.put_live(live);
        if self.tags.iter_in_use().any(|tag| {
            let s = self.tags.get(tag);
            s.expired && !s.abort_sent
        }) {
            self.timeout_work = true;
        }
    }
}
