//! NVMe/TCP target: exports namespaces of local controllers as NVMe over Fabrics subsystems
//! (NVMe over TCP Transport Specification 1.0, "NVMe/TCP"; NVMe Base 2.0 §3.3 and §6).
//!
//! ```text
//!  listener thread ── accept, round robin ──> poll group 0 .. N-1 (one thread each)
//!                                              each owns its connections and, per I/O
//!                                              connection, one backend queue pair
//!  connection: ICReq/ICResp -> Connect -> admin commands (Identify, Features, Logs, ...)
//!              or I/O: CapsuleCmd -> [R2T <- H2CData] -> backend submit -> poll
//!                      -> C2HData [+ SUCCESS] / CapsuleResp
//! ```
//!
//! A [`Backend`] is a controller of ours ([`nvme_device::AnyController`]: PCIe through the
//! driver, or the emulator behind the same driver in tests). Each I/O queue a host connects
//! gets a queue pair of its own on the backend, owned by the poll group thread that serves the
//! connection; write data is received straight into DMA buffers of the backend's pool and
//! read data is sent from them (no copy in the target), and nothing is locked per I/O (the
//! shared association table is touched at Connect, Keep Alive expiry and disconnect only).
//!
//! INVARIANT: everything a host sends is checked before it is used (the PDU codec of
//! `nvme_spec::tcp`, then the target's own sequence checks); a malformed PDU, a bad digest, a
//! refused host or an expired Keep Alive timer ends that connection (and, for an admin
//! connection, its association) only: nothing in the receive path panics on host input, and a
//! connection reaches only the namespaces of the subsystem it connected to.

#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod backend;
mod config;
mod conn;
mod error;
mod group;
mod pages;
mod registry;
mod server;
mod trace;

pub use backend::Backend;
pub use config::{ExportedNamespace, SubsystemConfig, TargetConfig};
pub use error::TargetError;
pub use server::{Target, TargetStats};
