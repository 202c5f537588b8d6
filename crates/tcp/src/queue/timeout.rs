//! Timeouts: the epoch clock (read every few polls), expiry of commands older than
//! `TIMEOUT_EPOCHS` epochs, and the bookkeeping of the Abort the owner sends for them.
//!
//! INVARIANT: a command's age is `epoch - slot.epoch` (wrapping); without the abort policy
//! the first command past its timeout fails the queue, with it the command is marked expired
//! once (its age restarts) and `timeout_work` tells the owner to act (cold path).

use std::time::Instant;

use nvme_core::{Error, TIMEOUT_EPOCHS};

use super::{command_name, Queue};
use crate::error::TcpError;

impl Queue {
    /// Expired commands whose Abort has not gone out yet: (command id) for each, at most
    /// `out.len()`. Returns how many were written.
    pub(crate) fn expired_unaborted(&self, out: &mut [u16]) -> usize {
        let mut n = 0;
        for (cid, s) in self.slots.iter().enumerate() {
            if n == out.len() {
                break;
            }
            if s.busy && s.expired && !s.abort_sent {
                out[n] = cid as u16;
                n += 1;
            }
        }
        n
    }

    /// Notes that the Abort of `cid` went out.
    pub(crate) fn mark_abort_sent(&mut self, cid: u16) {
        if let Some(s) = self.slots.get_mut(usize::from(cid)) {
            s.abort_sent = true;
        }
    }

    /// Whether an expired command has been outstanding for a whole further timeout (its
    /// Abort was declined, failed or not answered).
    pub(crate) fn expired_overdue(&self) -> bool {
        let epoch = self.epoch;
        self.slots
            .iter()
            .any(|s| s.busy && s.expired && epoch.wrapping_sub(s.epoch) >= TIMEOUT_EPOCHS)
    }

    /// Fails the queue because commands timed out: those complete with `Error::Timeout`,
    /// the others with the transport error.
    pub(crate) fn fail_timed_out(&mut self) {
        let timeout = self.timeout;
        let epoch = self.epoch;
        for cid in 0..self.slots.len() as u16 {
            let s = &self.slots[usize::from(cid)];
            if s.busy && (s.expired || epoch.wrapping_sub(s.epoch) >= TIMEOUT_EPOCHS) {
                let e = Error::Timeout {
                    command: command_name(s.opcode),
                    cid,
                    timeout,
                };
                self.finish(cid, Err(e));
            }
        }
        self.fail(TcpError::ClosedAfterTimeout {
            addr: self.addr,
            qid: self.qid,
        });
    }

    /// Advances the epoch when its time is up and fails the queue if a command is older
    /// than its timeout.
    pub(crate) fn check_clock(&mut self) {
        if self.in_flight == 0 || self.failed.is_some() {
            self.epoch_started = Instant::now();
            return;
        }
        let now = Instant::now();
        if now.duration_since(self.epoch_started) < self.epoch_length {
            return;
        }
        self.epoch = self.epoch.wrapping_add(1);
        self.epoch_started = now;
        let epoch = self.epoch;
        if !self.abort_on_timeout {
            if self
                .slots
                .iter()
                .any(|s| s.busy && epoch.wrapping_sub(s.epoch) >= TIMEOUT_EPOCHS)
            {
                self.fail_timed_out();
            }
            return;
        }
        // Abort policy: a command past its timeout is marked expired (its age restarts, so
        // that a further timeout later it is overdue); the owner sends the Abort.
        for cid in 0..self.slots.len() {
            let s = &mut self.slots[cid];
            if !s.busy || epoch.wrapping_sub(s.epoch) < TIMEOUT_EPOCHS {
                continue;
            }
            self.timeout_work = true;
            if !s.expired {
                s.expired = true;
                s.abort_sent = false;
                s.epoch = epoch;
                log::error!(
                    "{} queue {}: {} (cid {cid:#x}) timed out after {:?}",
                    self.controller,
                    self.qid,
                    command_name(s.opcode),
                    self.timeout
                );
            }
        }
        if self
            .slots
            .iter()
            .any(|s| s.busy && s.expired && !s.abort_sent)
        {
            self.timeout_work = true;
        }
    }
}
