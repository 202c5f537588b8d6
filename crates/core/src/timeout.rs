//! The timeout policy every transport follows: the epoch clock's length
//! ([`TIMEOUT_EPOCHS`]), what happens to a command that times out ([`TimeoutAction`]), and
//! the counters of the Aborts sent for them ([`AbortStats`]), and the clock that stamps and
//! ages commands ([`EpochClock`]).

use std::time::{Duration, Instant};

#[cfg(doc)]
use crate::controller::NvmeController;
#[cfg(doc)]
use crate::error::Error;

/// Epochs a command may live before it is declared timed out. A queue pair splits its
/// timeout into `TIMEOUT_EPOCHS - 1` epochs and stamps each command with the current one, so
/// a command fails between 1x and 1.34x its timeout, and the clock is read only every few
/// polls, never per I/O.
pub const TIMEOUT_EPOCHS: u32 = 4;

/// What happens to a command that times out. In every case the request is reported to the
/// caller with [`Error::Timeout`] at once, and its slot and buffer stay retired until the
/// device returns the command (see `docs/reliability.md`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeoutAction {
    /// Nothing more: wait for the late completion.
    None,
    /// Send an Abort for it, without blocking the I/O thread (the admin queue is only tried,
    /// never waited for; a busy one is retried at the next clock tick).
    Abort,
    /// Abort, and if the command is still outstanding one more timeout later (the abort was
    /// declined, failed or itself got no answer), reset the controller
    /// ([`NvmeController::reset`]): every queue pair then fails its in-flight requests with
    /// the retryable [`Error::Reset`] (or resubmits them, with
    /// `QueuePairOptions::resubmit_after_reset`) and goes on. The default, like SPDK's
    /// abort-then-reset.
    AbortThenReset,
}

/// Abort outcomes of a controller (counters since bring-up).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AbortStats {
    /// Aborts submitted.
    pub sent: u64,
    /// The controller aborted the command (it completes with Command Abort Requested).
    pub aborted: u64,
    /// The controller did not abort it (it had completed, or declined).
    pub not_aborted: u64,
    /// The Abort itself completed with an error status.
    pub failed: u64,
    /// Controller resets started because an aborted command stayed outstanding.
    pub resets: u64,
}

/// The epoch clock of one queue pair, the one timeout clock of every transport: a command is
/// stamped with [`EpochClock::epoch`] when it is sent, the owner calls
/// [`EpochClock::advance`] every few polls (never per I/O), and a command is past its timeout
/// once [`EpochClock::is_old`] says so for its stamp: between 1x and 1.34x the timeout after
/// it was sent (see [`TIMEOUT_EPOCHS`]).
///
/// INVARIANT: ages are `epoch - stamp` in wrapping arithmetic, so the clock may wrap.
#[derive(Clone, Copy, Debug)]
pub struct EpochClock {
    epoch: u32,
    /// When the current epoch has run its length (`None`: never, for a length so long that
    /// the end is not representable). Kept as the end rather than the start, so the check
    /// every few polls is one comparison, not an `Instant` subtraction with its checks.
    ends: Option<Instant>,
    length: Duration,
}

impl EpochClock {
    /// Shortest epoch: a zero or tiny timeout still gives a clock that moves.
    const MIN_EPOCH: Duration = Duration::from_micros(100);

    /// A clock for commands that time out after `timeout`.
    pub fn new(timeout: Duration) -> Self {
        let length = (timeout / (TIMEOUT_EPOCHS - 1)).max(Self::MIN_EPOCH);
        Self {
            epoch: 0,
            ends: Instant::now().checked_add(length),
            length,
        }
    }

    /// The current epoch: the stamp of a command sent now.
    #[inline(always)]
    pub fn epoch(&self) -> u32 {
        self.epoch
    }

    /// Starts the current epoch again at `now` (nothing in flight, or a reconnect / reset
    /// that restamps every command): idle time does not age the next command.
    #[inline]
    pub fn restart(&mut self, now: Instant) {
        self.ends = now.checked_add(self.length);
    }

    /// Whether the current epoch has run its length at `now`.
    #[inline]
    pub fn due(&self, now: Instant) -> bool {
        self.ends.is_some_and(|ends| now >= ends)
    }

    /// Moves to the next epoch if the current one has run its length at `now`; returns
    /// whether it did (only then can a command have become old).
    #[inline]
    pub fn advance(&mut self, now: Instant) -> bool {
        if !self.due(now) {
            return false;
        }
        self.epoch = self.epoch.wrapping_add(1);
        self.restart(now);
        true
    }

    /// Whether a command stamped `stamp` is past its timeout.
    #[inline]
    pub fn is_old(&self, stamp: u32) -> bool {
        self.epoch.wrapping_sub(stamp) >= TIMEOUT_EPOCHS
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_is_old_after_timeout_epochs_and_not_before() {
        let t0 = Instant::now();
        let mut c = EpochClock::new(Duration::from_millis(30));
        c.restart(t0);
        let stamp = c.epoch();
        assert!(!c.advance(t0 + Duration::from_millis(5)), "epoch is 10 ms");
        let mut t = t0;
        for i in 1..TIMEOUT_EPOCHS {
            t += Duration::from_millis(10);
            assert!(c.advance(t));
            assert!(!c.is_old(stamp), "old after {i} epochs");
        }
        t += Duration::from_millis(10);
        assert!(c.advance(t));
        assert!(c.is_old(stamp));
        assert!(!c.is_old(c.epoch()));
    }

    #[test]
    fn ages_survive_the_wrap_and_a_zero_timeout_still_ticks() {
        let mut c = EpochClock::new(Duration::ZERO);
        c.epoch = u32::MAX - 1;
        let stamp = c.epoch();
        let t0 = Instant::now();
        c.restart(t0);
        for k in 1..=TIMEOUT_EPOCHS {
            assert!(c.advance(t0 + Duration::from_millis(k as u64)));
        }
        assert_eq!(c.epoch(), (u32::MAX - 1).wrapping_add(TIMEOUT_EPOCHS));
        assert!(c.is_old(stamp));
    }
}
