//! Polling completion for NVMe queue pairs, built on `nvme-driver`.
//!
//! Three layers, each usable alone:
//!
//! ```text
//! PollGroup          one thread polls many QueuePairs (any controllers) round-robin
//! AsyncQueuePair     read/write/flush as futures; a reactor call reaps completions and wakes them
//! block_on /         a tiny single-thread executor for tools and tests that runs the reactor
//! LocalExecutor        instead of sleeping when no task is ready
//! ```
//!
//! Invariants:
//! - Nothing on the poll path allocates: queue pairs live in a `Vec` addressed by
//!   [`QpId`] (index + generation), request slots of an [`AsyncQueuePair`] are preallocated to
//!   the queue's capacity and addressed by the `user_data` of each command (index + generation).
//! - A `DmaBuffer` handed to a submission is owned by the driver until its completion arrives,
//!   whatever happens to the future that submitted it (see [`AsyncQueuePair`]).
//! - Everything here is single-threaded by design (one owner thread per queue pair, as in the
//!   driver); the only thread-safe part is the wakers, as `std::task::Waker` requires.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod async_qp;
mod executor;
mod group;

pub use async_qp::{AsyncQueuePair, AsyncStats, PairBusy};
pub use executor::{block_on, LocalExecutor, TaskId};
pub use group::{PollGroup, PollStats, QpId};
