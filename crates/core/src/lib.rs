//! Transport-neutral NVMe host types: what the PCIe transport (`nvme-driver`) and the
//! NVMe/TCP transport (`nvme-tcp`) share, so that neither depends on the other.
//!
//! ```text
//!                 nvme-core: Error, IoFailure, Namespace, Completion, WriteFlags,
//!                 QueuePairOptions, TimeoutAction, AbortStats, HostMemory,
//!                 IoQueue (queue pair trait), NvmeController (controller trait)
//!                   /                                       \
//!  nvme-driver (PCIe: Controller, QueuePair)      nvme-tcp (TcpController, TcpQueuePair)
//! ```
//!
//! - Requests: a [`DmaBuffer`] moves into a submission and back out in its [`Completion`]
//!   (or in the [`IoFailure`] of a refused submission); [`Namespace`] handles carry the range
//!   checks and the staleness state every submission checks with one load.
//! - Traits: [`IoQueue`] and [`NvmeController`] are for static dispatch (generic code, one
//!   monomorphic copy per transport); nothing here puts an indirect call on an I/O path.
//! - Shared policy: one definition of the timeout epoch clock ([`TIMEOUT_EPOCHS`],
//!   [`TimeoutAction`]) and of the controller state word's flags ([`state`]).
//! - Multipath basics: [`multipath`] tells whether two controllers reach one namespace
//!   ([`NamespaceIdentity::same_namespace`], typed reasons when not) and groups the namespaces
//!   of several controllers into paths ([`Multipath`]).
//! - Shared request layer: [`split`] cuts a request larger than one command into pieces and
//!   collects their completions into one (the NVMe/TCP pair's MDTS splitting).
//! - Buffers for CPU-copy transports: [`HostMemory`], an identity "mapper" of process memory
//!   whose addresses no device ever sees. Its one `unsafe impl DmaMapper` and the time-stamp
//!   counter read of [`NanoClock`] (the cheap per-I/O latency clock) are the only unsafe code
//!   of the crate.
//!
//! # Example
//!
//! Code generic over the controller trait runs on either transport:
//!
//! ```
//! use nvme_core::{IoQueue, NvmeController, QueuePairOptions, Result};
//!
//! /// Reads block 0 of namespace 1 of any controller.
//! fn first_block<C: NvmeController>(ctrl: &C) -> Result<Vec<u8>> {
//!     let ns = ctrl.namespace(1)?;
//!     let mut qp = ctrl.create_queue_pair(QueuePairOptions::default())?;
//!     let buf = ctrl.alloc_buffer(ns.block_size() as usize)?;
//!     let buf = qp.read(&ns, 0, 1, buf).map_err(|f| f.error)?;
//!     Ok(buf.to_vec())
//! }
//! ```

#![deny(missing_docs)]

pub mod admin;
pub mod command;
mod completion;
mod controller;
mod copy;
mod error;
pub mod firmware;
mod flags;
pub mod fused;
mod host_memory;
mod io_queue;
pub mod iovec;
pub mod multipath;
mod namespace;
mod nano_clock;
mod options;
mod passthru;
pub mod protection;
pub mod split;
pub mod state;
mod timeout;
mod uncorrectable;
pub mod zns;

pub use admin::{AdminCommand, AdminCommands, AdminData, AdminReply};
pub use command::{CommandContext, CopyLimit, IoCommand, LbaRange, NvmCommand};
pub use completion::Completion;
pub use controller::NvmeController;
pub use error::{log_occurrence, Error, IoFailure, Result};
pub use firmware::{FirmwareImageError, FirmwarePiece};
pub use flags::WriteFlags;
pub use host_memory::HostMemory;
pub use io_queue::IoQueue;
pub use iovec::{IoVec, PieceRule, IOVEC_MAX_PIECES};
pub use multipath::{
    KeptApart, Multipath, MultipathNamespace, NamespaceIdentity, NamespaceIds, NamespacePath,
    NotSameNamespace,
};
pub use namespace::{Namespace, NamespaceChange, NamespaceChanges, NamespaceSet};
pub use nano_clock::NanoClock;
pub use options::QueuePairOptions;
pub use passthru::{IoPassthruCommand, PassthruData, PassthruError, PassthruQueue};
pub use protection::{
    HostPiUnsupported, LbaFormatInfo, MetadataLayout, PiCheck, PiError, PiFormat, PiType, Prinfo,
    Protected, Protection,
};
pub use timeout::{AbortStats, EpochClock, TimeoutAction, TIMEOUT_EPOCHS};
pub use zns::{ZoneAppend, ZoneGeometry, ZoneMgmtRecv, ZoneMgmtSend, ZrwaGeometry};

pub use nvme_spec as spec;
pub use nvme_vfio::{DmaBuffer, DmaDomain, DmaError, DmaMapper, Iova};
