//! Options of a new queue pair ([`QueuePairOptions`]) and their builder-style setters.
//!
//! Plain data: nothing here touches the controller. The transport's `create_queue_pair`
//! ([`NvmeController::create_queue_pair`]) validates the values (depth against CAP.MQES) when
//! the pair is created, and refuses with [`Error::UnsupportedOption`] a field it cannot
//! honour that is not at its default: never silently ignored.

use std::time::Duration;

#[cfg(doc)]
use crate::controller::NvmeController;
#[cfg(doc)]
use crate::error::Error;
#[cfg(doc)]
use crate::io_queue::IoQueue;

/// Options for a new queue pair, one struct for every transport.
///
/// Every transport honours `depth`, `timeout`, `max_completions_per_poll` and
/// `resubmit_after_reset`. The PCIe-only fields are `interrupts` (an MSI-X vector) and
/// `software_queue`: NVMe/TCP refuses a pair with either set to a non-default value
/// ([`Error::UnsupportedOption`]).
#[derive(Clone, Debug)]
pub struct QueuePairOptions {
    /// Entries in each of the two rings (2..=CAP.MQES+1, at most 4096 on PCIe). At most
    /// `depth - 1` commands are in flight (a full ring keeps one entry empty). 0 (the default)
    /// means the transport's default depth (PCIe: `nvme_driver::DEFAULT_QUEUE_DEPTH`,
    /// NVMe/TCP: `nvme_tcp::DEFAULT_TCP_QUEUE_DEPTH`), clamped to what the controller allows;
    /// the depth in effect is [`IoQueue::depth`]. An explicit depth out of range is an error.
    pub depth: u32,
    /// A command not completed within this time fails with [`Error::Timeout`].
    pub timeout: Duration,
    /// Most completions handled by one [`IoQueue::poll`] call (the completion batch cap;
    /// one CQ head doorbell per call on PCIe). Default: no cap below the ring, i.e.
    /// everything the controller has posted is reaped, which keeps head doorbell writes to one
    /// per poll.
    pub max_completions_per_poll: usize,
    /// PCIe only: give the completion queue an MSI-X vector (needs the PCIe
    /// `ControllerOptions::interrupts`), so an idle owner can block in the PCIe pair's
    /// `wait_for_completion`. NVMe/TCP refuses `true`.
    pub interrupts: bool,
    /// PCIe only: software queue for asynchronous reads, writes and compares that find the
    /// ring (or the request slots) full: up to this many wait in submission order and are
    /// submitted by [`IoQueue::poll`] as completions make room (SPDK's queued requests). 0
    /// (the default) turns it off: such submissions fail with [`Error::QueueFull`] and the
    /// buffer comes back. Costs nothing until the ring is full. NVMe/TCP refuses a non-zero
    /// value.
    pub software_queue: usize,
    /// After a controller reset, submit the requests that were in flight again on the
    /// re-created queues (same command, same buffer, same request context) instead of
    /// completing them with [`Error::Reset`]. Requests already reported to the caller (timed
    /// out) are not resubmitted. Off by default: when on, each submission also keeps a copy
    /// of its 64-byte command (a few stores per I/O).
    pub resubmit_after_reset: bool,
}

impl Default for QueuePairOptions {
    fn default() -> Self {
        Self {
            depth: 0,
            timeout: Duration::from_secs(30),
            max_completions_per_poll: usize::MAX,
            interrupts: false,
            software_queue: 0,
            resubmit_after_reset: false,
        }
    }
}

/// Builder-style setters: `QueuePairOptions::default().depth(..)`. The fields stay public for now;
/// prefer the setters, which keep working if the fields become private.
///
/// ```
/// use std::time::Duration;
/// use nvme_core::QueuePairOptions;
///
/// let opts = QueuePairOptions::default().depth(64).software_queue(16).timeout(Duration::from_secs(5));
/// assert_eq!((opts.depth, opts.software_queue), (64, 16));
/// assert_eq!(opts.timeout, Duration::from_secs(5));
/// ```
impl QueuePairOptions {
    /// Sets [`QueuePairOptions::depth`]: ring entries (0: the default depth, clamped to the controller).
    #[must_use]
    pub fn depth(mut self, depth: u32) -> Self {
        self.depth = depth;
        self
    }

    /// Sets [`QueuePairOptions::timeout`]: the per-command timeout.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Sets [`QueuePairOptions::max_completions_per_poll`]: the completion batch cap of one poll.
    #[must_use]
    pub fn max_completions_per_poll(mut self, max_completions_per_poll: usize) -> Self {
        self.max_completions_per_poll = max_completions_per_poll;
        self
    }

    /// Sets [`QueuePairOptions::interrupts`]: give the completion queue an MSI-X vector.
    #[must_use]
    pub fn interrupts(mut self, interrupts: bool) -> Self {
        self.interrupts = interrupts;
        self
    }

    /// Sets [`QueuePairOptions::software_queue`]: the software queue's capacity (0: off).
    #[must_use]
    pub fn software_queue(mut self, software_queue: usize) -> Self {
        self.software_queue = software_queue;
        self
    }

    /// Sets [`QueuePairOptions::resubmit_after_reset`]: resubmit in-flight requests after a reset.
    #[must_use]
    pub fn resubmit_after_reset(mut self, resubmit_after_reset: bool) -> Self {
        self.resubmit_after_reset = resubmit_after_reset;
        self
    }
}
