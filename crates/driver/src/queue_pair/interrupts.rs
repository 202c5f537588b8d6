//! Interrupt-driven waiting for a pair created with `QueuePairOptions::interrupts`: block on
//! the completion queue's MSI-X vector (an eventfd) instead of spinning.
//!
//! INVARIANT: the CQ head is published and the ring checked before blocking, so an entry
//! posted before the check is seen and one posted after it signals the eventfd: no wake-up
//! is lost.

use std::os::fd::{AsFd, BorrowedFd};
use std::time::Duration;

use nvme_core::{Error, Result};

use super::{Completion, QueuePair};

/// What [`QueuePair::arm_interrupt`] found.
#[derive(Debug)]
pub enum InterruptArm<'a> {
    /// Completions may be ready now: poll instead of blocking.
    Ready,
    /// Nothing is ready: the completion queue's MSI-X eventfd, readable once the vector fires
    /// (wait on it, with other descriptors, then poll).
    Wait(BorrowedFd<'a>),
}

impl QueuePair {
    /// Blocks until the completion queue holds an entry, its interrupt fires, or `timeout`
    /// passes; returns whether completions may be ready (then call [`QueuePair::poll`]).
    /// Needs a pair created with `QueuePairOptions::interrupts`.
    pub fn wait_for_completion(&mut self, timeout: Duration) -> Result<bool> {
        // Before blocking, the device must see every entry reaped (a poll may have left the
        // head unwritten).
        self.publish_cq_head_now();
        let Some(irq) = &self.irq else {
            return Err(Error::NoInterrupts { qid: self.qid });
        };
        // An entry posted before this check is seen here; one posted after it fires the
        // vector, whose eventfd counts the signal until we read it: no wake-up is lost.
        if !self.deferred.is_empty() || self.cq.has_entry() {
            return Ok(true);
        }
        let signals = irq
            .wait(Some(timeout))
            .map_err(|source| Error::InterruptWait {
                qid: self.qid,
                source,
            })?;
        Ok(signals > 0 || self.cq.has_entry())
    }

    /// Prepares a wait on the completion queue's interrupt together with other descriptors
    /// (sockets, other queues; `nvme_vfio::FdWait`): publishes the CQ head, consumes the
    /// signals already counted (those of entries reaped by polling), then checks the ring.
    /// [`InterruptArm::Ready`] when an entry is there (poll, do not block); otherwise the
    /// eventfd to wait on, which an entry posted from now on signals (the same ordering as
    /// [`QueuePair::wait_for_completion`]: no wake-up is lost). Needs a pair created with
    /// `QueuePairOptions::interrupts`.
    pub fn arm_interrupt(&mut self) -> Result<InterruptArm<'_>> {
        self.publish_cq_head_now();
        let Some(irq) = &self.irq else {
            return Err(Error::NoInterrupts { qid: self.qid });
        };
        // Consume first, check second: a signal for an entry posted after the check stays
        // counted in the eventfd.
        irq.clear().map_err(|source| Error::InterruptWait {
            qid: self.qid,
            source,
        })?;
        if !self.deferred.is_empty() || self.cq.has_entry() {
            return Ok(InterruptArm::Ready);
        }
        Ok(InterruptArm::Wait(irq.as_fd()))
    }

    /// Hybrid completion: polls, and after `idle_polls` consecutive empty polls blocks on the
    /// interrupt (up to `timeout`) instead of spinning. A busy queue never touches the eventfd.
    pub fn poll_or_wait<F: FnMut(Completion)>(
        &mut self,
        idle_polls: u32,
        timeout: Duration,
        mut f: F,
    ) -> Result<usize> {
        for _ in 0..idle_polls.max(1) {
            let n = self.poll(&mut f);
            if n > 0 {
                return Ok(n);
            }
        }
        if self.in_flight() == 0 {
            return Ok(0);
        }
        self.wait_for_completion(timeout)?;
        Ok(self.poll(&mut f))
    }

    /// Whether the pair's completion queue has an interrupt vector.
    pub fn has_interrupts(&self) -> bool {
        self.irq.is_some()
    }
}
