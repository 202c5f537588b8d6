//! NVMe/TCP initiator (host side), NVMe over TCP Transport Specification 1.0 with NVMe over
//! Fabrics (NVMe Base 2.0 §6).
//!
//! ```text
//! TcpController (Send + Sync)                 TcpQueuePair (Send, one owner thread)
//!   admin connection (Mutex): Connect,          its own TCP connection: ICReq/ICResp,
//!   Property Get/Set, Identify, Keep Alive      Connect(qid), submit_* -> CapsuleCmd,
//!                                               poll -> C2HData / R2T / CapsuleResp
//! ```
//!
//! The queue pair keeps the PCIe `QueuePair`'s API and uses the transport-neutral types of
//! `nvme-core` (`Completion`, `Error`, `IoFailure`, `Namespace`, `QueuePairOptions`, and
//! `DmaBuffer` from [`HostMemory`], the core's allocator for CPU-copy transports), so callers
//! change only how they open the controller. This crate does not depend on the PCIe crate
//! `nvme-driver`; the PCIe hot path is untouched (two separate concrete types, no dispatch).
//! [`TcpQueuePair`] implements [`nvme_core::IoQueue`] and [`TcpController`] implements
//! [`nvme_core::NvmeController`], so code generic over them (`nvme-poll`'s async layer and
//! poll groups, the C API) runs on NVMe/TCP too. Options a TCP pair cannot honour (the
//! PCIe-only `QueuePairOptions::interrupts` and `software_queue`) are refused at creation
//! with `Error::UnsupportedOption`.
//! Sockets are non-blocking and driven by `poll`, the same polling model as PCIe. A malformed
//! PDU, digest mismatch or lost connection closes the queue and completes every outstanding
//! request with `Error::Transport`; nothing in the receive path panics on target input.

#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod controller;
mod error;
mod io_queue;
mod keep_alive;
mod nvme_controller;
mod options;
mod qpair;
mod queue;
mod r2t;
mod reset;
pub mod trid;

#[cfg(any(test, feature = "fake-target"))]
pub mod fake;
#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub mod fuzzing;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_fuzz;
#[cfg(test)]
mod tests_hostile;

pub use controller::{
    discover, DiscoveryEntry, TcpController, TcpOptions, DEFAULT_TCP_QUEUE_DEPTH, MAX_TRANSFER,
};
pub use error::TcpError;
pub use nvme_core::{AdminCommands, HostMemory, IoQueue};
pub use qpair::TcpQueuePair;
pub use queue::TcpQueueStats;
pub use trid::{is_tcp_transport_id, AddressFamily, TransportId, TridError};
