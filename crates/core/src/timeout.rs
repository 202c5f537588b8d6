//! The timeout policy every transport follows: the epoch clock's length
//! ([`TIMEOUT_EPOCHS`]), what happens to a command that times out ([`TimeoutAction`]), and
//! the counters of the Aborts sent for them ([`AbortStats`]).

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
