//! Userspace NVMe driver, the PCIe transport: controller bring-up through VFIO, the admin
//! queue, I/O queue pairs and the data path (PRP building, MDTS splitting, completion
//! validation).
//!
//! The transport-neutral types (`Error`, `IoFailure`, `Namespace`, `Completion`,
//! `QueuePairOptions`, `WriteFlags`, `TimeoutAction`, `AbortStats`, the `IoQueue` and
//! `NvmeController` traits) live in `nvme-core` and are re-exported here, so every
//! `nvme_driver::X` path keeps working; this crate implements the traits for its
//! [`Controller`] and [`QueuePair`].
//!
//! ```text
//! Controller (Send + Sync, Arc inside)        QueuePair (Send, one owner thread)
//!   registers (Mmio), admin queue (Mutex)       SQ ring + CQ ring + request slots (TagSet)
//!   identify data, namespaces                   submit_* -> ring -> poll(callback)
//! ```
//!
//! Safety contract of the public API: a `DmaBuffer` handed to a submission is owned by the
//! queue pair until its completion gives it back, so safe code can neither free nor touch
//! memory the controller may be accessing.
//!
//! # Example
//!
//! Bring up a controller (here the in-process emulator `nvme-sim`; on hardware
//! `Controller::open_pci("0000:01:00.0", ..)`), write one block and read it back:
//!
//! ```
//! use nvme_driver::{Controller, ControllerOptions, IoQueue, QueuePairOptions, Transport, WriteFlags};
//! use nvme_sim::{SimConfig, SimController};
//!
//! let sim = SimController::start(SimConfig::default());
//! let ctrl = Controller::new(Transport::new(sim.mmio(), sim.dma(), "sim"), ControllerOptions::default())?;
//! let ns = ctrl.namespace(1)?;
//! let mut qp = ctrl.create_queue_pair(QueuePairOptions::default())?; // one per thread
//! let mut buf = ctrl.alloc_buffer(ns.block_size() as usize)?;
//! buf[..5].copy_from_slice(b"hello");
//! let mut buf = qp.write(&ns, 7, 1, buf, WriteFlags::NONE).map_err(|f| f.error)?; // the buffer comes back
//! buf.fill(0);
//! let buf = qp.read(&ns, 7, 1, buf).map_err(|f| f.error)?;
//! assert_eq!(&buf[..5], b"hello");
//! # Ok::<(), nvme_driver::Error>(())
//! ```

#![deny(missing_docs)]

mod admin;
mod context;
mod controller;
pub mod device;
mod io_queue;
mod nvme_controller;
pub mod platform;
mod prp;
mod queue_pair;
mod ring;
mod teardown;
mod typed;

pub use context::DmaContext;
pub use controller::{
    AbortStats, Controller, ControllerOptions, ShadowDoorbells, TimeoutAction, Transport,
    DEFAULT_IO_QUEUES, HOST_PAGE_SIZE,
};
pub use nvme_core::fused;
pub use nvme_core::multipath::{self, Multipath, NamespaceIdentity, NotSameNamespace};
pub use nvme_core::protection::{
    self, HostPiUnsupported, LbaFormatInfo, MetadataLayout, PiCheck, PiFormat, PiType, Prinfo,
    ProtectableCommand, Protected, Protection,
};
pub use nvme_core::zns;
pub use nvme_core::{
    command, AdminCommand, AdminCommands, AdminData, AdminReply, CopyLimit, Error, IoCommand,
    IoFailure, IoPassthruCommand, IoQueue, IoVec, LbaRange, Namespace, NamespaceChange,
    NamespaceChanges, NanoClock, NvmCommand, NvmeController, PassthruData, PassthruError,
    PassthruQueue, PieceRule, Result, WriteFlags, IOVEC_MAX_PIECES,
};
pub use platform::CpuPlatform;
pub use queue_pair::{
    Completion, InterruptArm, QueuePair, QueuePairOptions, QueuePairStats, DEFAULT_QUEUE_DEPTH,
    MAX_BLOCKS_PER_COMMAND, MAX_COMMANDS_PER_REQUEST,
};
pub use typed::{TypedCompletion, TypedFailure, TypedQueuePair};

pub use device::{parse_device, DeviceArgError};
pub use nvme_spec as spec;
pub use nvme_vfio::{
    DmaBuffer, DmaDomain, DmaError, DmaMapper, DmaRegion, Iova, PciAddress, VfioError,
};
