//! Polling completion for NVMe queue pairs, built on `nvme-driver`.
//!
//! Three layers, each usable alone:
//!
//! ```text
//! PollGroup          one thread polls many queue pairs (any controllers) round-robin
//! AsyncQueuePair     read/write/flush as futures; a reactor call reaps completions and wakes them
//! block_on /         a tiny single-thread executor for tools and tests that runs the reactor
//! LocalExecutor        instead of sleeping when no task is ready
//! ```
//!
//! Every layer is generic over [`nvme_driver::IoQueue`], the queue-pair trait both transports
//! implement, with the PCIe [`nvme_driver::QueuePair`] as the default type parameter:
//! `AsyncQueuePair<nvme_tcp::TcpQueuePair>` and `PollGroup<TcpQueuePair>` work over NVMe/TCP
//! (static dispatch: each instance is compiled for its pair type).
//!
//! Invariants:
//! - Nothing on the poll path allocates: queue pairs live in a `Vec` addressed by
//!   [`QpId`] (index + generation), request slots of an [`AsyncQueuePair`] are preallocated to
//!   the queue's capacity and addressed by the `user_data` of each command (index + generation).
//! - A `DmaBuffer` handed to a submission is owned by the driver until its completion arrives,
//!   whatever happens to the future that submitted it (see [`AsyncQueuePair`]).
//! - Everything here is single-threaded by design (one owner thread per queue pair, as in the
//!   driver); the only thread-safe part is the wakers, as `std::task::Waker` requires.
//!
//! # Example
//!
//! An async write and read on the emulator, driven by [`block_on`] with the queue pair's
//! reactor (any single-threaded executor can call the reactor instead):
//!
//! ```
//! use nvme_driver::{Controller, ControllerOptions, QueuePairOptions, Transport, WriteFlags};
//! use nvme_poll::{block_on, AsyncQueuePair};
//! use nvme_sim::{SimConfig, SimController};
//!
//! let sim = SimController::start(SimConfig::default());
//! let ctrl = Controller::new(Transport::new(sim.mmio(), sim.dma(), "sim"), ControllerOptions::default())?;
//! let ns = ctrl.namespace(1)?;
//! let qp = AsyncQueuePair::new(ctrl.create_queue_pair(QueuePairOptions::default())?)
//!     .expect("a fresh queue pair has nothing outstanding");
//! let mut buf = ctrl.alloc_buffer(512)?;
//! buf.fill(0x5a);
//! let buf = block_on(
//!     async {
//!         let mut buf = qp.write(&ns, 0, 1, buf, WriteFlags::NONE).await.map_err(|f| f.error)?;
//!         buf.fill(0);
//!         qp.read(&ns, 0, 1, buf).await.map_err(|f| f.error)
//!     },
//!     qp.reactor(),
//! )?;
//! assert!(buf.iter().all(|&b| b == 0x5a));
//! # Ok::<(), nvme_driver::Error>(())
//! ```

#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod async_qp;
mod executor;
mod group;

pub use async_qp::{AsyncQueuePair, AsyncStats, PairBusy};
pub use executor::{block_on, LocalExecutor, TaskId};
pub use group::{PollGroup, PollStats, QpId};
