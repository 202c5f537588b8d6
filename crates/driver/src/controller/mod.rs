//! Controller bring-up, the admin command path, and orderly shutdown.
//!
//! Bring-up follows NVMe Base 2.0 §3.5.1: disable (CC.EN=0, wait CSTS.RDY=0), program the
//! admin queue (AQA/ASQ/ACQ), enable with our page size and entry sizes, wait CSTS.RDY=1 —
//! every wait bounded by CAP.TO and watching CSTS.CFS — then Identify Controller, Set Features
//! Number of Queues, the active namespace list and Identify Namespace for each.
//!
//! INVARIANT: `Inner` outlives every `QueuePair` (each holds an `Arc<Inner>`), so the register
//! window and the admin queue are there to delete the pair's queues when it drops; the
//! controller is shut down (CC.SHN) when the last reference goes.
//!
//! This module holds the [`Controller`] handle, the state it shares with its queue pairs
//! (`Inner`, whose fields only this module and its children see), the state word (`STATE_*`)
//! and small accessors. The rest is split by concern:
//!
//! - `options`: [`ControllerOptions`] and the policies it carries.
//! - `transport`: [`Transport`], and opening a PCI function through VFIO.
//! - `registers`: CC/CSTS handshakes (enable, wait for ready) and CMBSZ.
//! - `bringup`: [`Controller::new`] and [`Controller::new_in`].
//! - `commands`: admin commands that wait (the admin path, raw commands, Identify, logs).
//! - `namespaces`: the namespace set and rescans.
//! - `shadow`: shadow doorbells.
//! - `async_commands`: Asynchronous Event Requests and Aborts.
//! - `interrupts`: MSI-X routing.
//! - `reset`: controller level reset.
//! - `shutdown`: stopping DMA, normal shutdown, drop.

mod async_commands;
mod bringup;
mod command_sets;
mod commands;
mod interrupts;
mod namespaces;
mod options;
mod registers;
mod reset;
mod shadow;
mod shutdown;
mod transport;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use nvme_core::{Error, NamespaceSet, Result};
use nvme_spec::regs::{self, Cap, Cmbsz, Csts, Version};
use nvme_spec::{AsyncEvent, IdentifyController};
use nvme_vfio::{DmaBuffer, DmaMapper, FunctionControl, InterruptController, InterruptEvent, Mmio};

use crate::admin::AdminQueue;
use crate::context::DmaContext;
use crate::ring::ShadowBuffers;
use crate::teardown::DmaState;

pub use async_commands::AbortStats;
pub use options::{ControllerOptions, ShadowDoorbells, TimeoutAction, DEFAULT_IO_QUEUES};
pub(crate) use registers::ALL_ONES;
pub use registers::HOST_PAGE_SIZE;
pub use transport::Transport;

#[cfg(doc)]
use async_commands::MAX_AERS;

/// `Inner::state` bits (one definition for both transports, `nvme_core::state`).
pub(crate) use nvme_core::state::{STATE_FAILED, STATE_RESETTING};
/// `Inner::state` increment of one reset generation (the bits above the flags: PCIe has no
/// flags of its own).
pub(crate) const STATE_GENERATION: u64 = nvme_core::state::STATE_TRANSPORT_FLAGS;

pub(crate) struct Inner {
    pub(crate) name: String,
    pub(crate) mmio: Mmio,
    /// The guarded mapper of `context` as a trait object: every DMA allocation of this
    /// controller goes through it.
    pub(crate) dma: Arc<dyn DmaMapper>,
    /// The DMA context (address space and its guard) this controller belongs to.
    context: DmaContext,
    /// Whether DMA has been stopped (one attempt, under this lock).
    dma_state: Mutex<DmaState>,
    function: Option<Arc<dyn FunctionControl>>,
    pub(crate) cap: Cap,
    pub(crate) page_size: usize,
    pub(crate) max_transfer: usize,
    /// I/O data pointers are SGLs (options and controller agree), with this alignment mask
    /// for Data Block address and length (3: dword granularity, SGLS 10b; 0: none).
    pub(crate) sgl: Option<u64>,
    version: Version,
    /// The Controller Memory Buffer's size register (0: none). The buffer is not used.
    cmb: Cmbsz,
    admin: Mutex<AdminQueue>,
    admin_timeout: Duration,
    /// `STATE_*` bits and the reset generation (see [`ControllerState`]).
    state: AtomicU64,
    /// Serialises resets.
    reset_lock: Mutex<()>,
    /// The device is gone (registers read all ones, or the kernel asked for it); implies
    /// failed.
    removed: AtomicBool,
    /// Signalled when the kernel asks for the device back (unbind, hot-unplug).
    removal_request: Option<Arc<InterruptEvent>>,
    /// The register window's registration with the SIGBUS handler, when asked for
    /// ([`Controller::guard_register_faults`]).
    fault_guard: Mutex<Option<nvme_vfio::mmio::FaultGuard>>,
    pub(crate) timeout_action: TimeoutAction,
    aborts: Mutex<AbortStats>,
    /// Asynchronous events received and not yet taken ([`Controller::take_events`]).
    events: Mutex<VecDeque<AsyncEvent>>,
    /// Asynchronous Event Requests kept posted (min(AERL + 1, [`MAX_AERS`]); 0 when off).
    aers: usize,
    pub(crate) identify: Box<IdentifyController>,
    /// The I/O command sets enabled at bring-up (the zoned one, ZASL).
    command_sets: command_sets::CommandSets,
    /// Active namespaces as of bring-up or the last rescan, replaced whole (readers clone
    /// the `Arc`, never hold the lock across I/O).
    namespaces: RwLock<Arc<NamespaceSet>>,
    /// Serialises rescans, so that a slower scan never publishes over a newer one.
    rescan_lock: Mutex<()>,
    io_queues: u16,
    /// `qid_in_use[q]` for q in 1..=io_queues.
    qid_in_use: Mutex<Vec<bool>>,
    shutdown_on_drop: bool,
    /// Shadow doorbell and EventIdx pages, when enabled.
    pub(crate) shadow: Option<Arc<ShadowBuffers>>,
    /// MSI-X eventfds, index = vector (vector q serves I/O queue q); empty when polled only.
    pub(crate) irq_events: Vec<Arc<InterruptEvent>>,
    interrupts: Option<Arc<dyn InterruptController>>,
    _keepalive: Option<Arc<dyn std::any::Any + Send + Sync>>,
}

/// An NVMe controller, brought up and identified. Cheap to clone; `Send + Sync`.
#[derive(Clone)]
pub struct Controller {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for Controller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Controller")
            .field("name", &self.inner.name)
            .finish()
    }
}

impl Controller {
    /// Identify Controller data.
    pub fn identify(&self) -> &IdentifyController {
        &self.inner.identify
    }

    /// Controller capabilities (CAP).
    pub fn cap(&self) -> Cap {
        self.inner.cap
    }

    /// The Controller Memory Buffer the controller offers (CMBSZ, NVMe Base 2.0 §3.1.4.12), if
    /// any. This driver keeps queues and data in host memory and leaves the buffer unused
    /// (its BAR is not mapped).
    pub fn controller_memory_buffer(&self) -> Option<Cmbsz> {
        (self.inner.cmb.bytes() != 0).then_some(self.inner.cmb)
    }

    /// NVMe version the controller reports (VS).
    pub fn version(&self) -> Version {
        self.inner.version
    }

    /// Name used in messages (PCI address or "sim").
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Whether MSI-X vectors are routed to eventfds (`ControllerOptions::interrupts`), so
    /// queue pairs can be created with `QueuePairOptions::interrupts`.
    pub fn has_interrupts(&self) -> bool {
        !self.inner.irq_events.is_empty()
    }

    /// I/O queue pairs the controller granted.
    pub fn io_queue_pairs(&self) -> u16 {
        self.inner.io_queues
    }

    /// Most bytes one command moves: MDTS, further capped by one PRP list page.
    pub fn max_transfer_bytes(&self) -> usize {
        self.inner.max_transfer
    }

    /// Largest I/O queue the controller supports (CAP.MQES + 1).
    pub fn max_queue_entries(&self) -> u32 {
        self.inner.cap.max_queue_entries()
    }

    /// The DMA context this controller belongs to (its own, unless opened in a shared one).
    pub fn dma_context(&self) -> &DmaContext {
        &self.inner.context
    }

    /// The DMA mapper of this controller (its context's), to allocate or register I/O
    /// buffers. Buffers from it are accepted by this controller and the other controllers of
    /// its [`DmaContext`] only,
    /// and leak rather than return to the system if the controller fails and cannot be
    /// stopped.
    pub fn dma(&self) -> &Arc<dyn DmaMapper> {
        &self.inner.dma
    }

    /// Allocates a zero-filled DMA buffer of `len` bytes for this controller.
    pub fn alloc_buffer(&self, len: usize) -> Result<DmaBuffer> {
        Ok(DmaBuffer::allocate(&self.inner.dma, len)?)
    }

    /// Whether reads, writes and compares describe their data with an SGL Data Block
    /// descriptor (the controller offers SGLs and `ControllerOptions::sgl` is set) instead of
    /// PRPs.
    pub fn sgl(&self) -> bool {
        self.inner.sgl.is_some()
    }

    /// Whether the device is gone (its registers read all ones): it cannot be reset, only
    /// closed.
    pub fn is_removed(&self) -> bool {
        self.inner.is_removed()
    }

    /// Checks, off the I/O path, whether the device went away: the kernel asked for it back
    /// (VFIO device request: unbind, hot-unplug) or CSTS reads all ones (surprise removal).
    /// Either marks the controller removed (and failed, its DMA stopped where it can be), as
    /// a queue pair's health check does. Returns [`Controller::is_removed`]. For a probe /
    /// attach registry that polls its controllers; one register read.
    pub fn check_removal(&self) -> bool {
        if self.inner.is_removed() {
            return true;
        }
        if self.inner.release_requested() {
            log::error!(
                "{}: the kernel asks for the device back (unbind or hot-unplug)",
                self.inner.name
            );
            self.inner.mark_removed();
        } else if self.inner.mmio.read32(regs::CSTS) == ALL_ONES {
            log::error!(
                "{}: registers read all ones: the device is gone",
                self.inner.name
            );
            self.inner.mark_removed();
        }
        self.inner.is_removed()
    }

    /// Marks the controller removed because its device is known to be gone (a hot-plug
    /// monitor saw the function's `remove` or `unbind` uevent): as [`Controller::check_removal`]
    /// does on a device request, it fails the controller (in-flight and later I/O completes
    /// with [`Error::Removed`]), stops its DMA where it can (otherwise its memory is leaked,
    /// never freed under a device that may still write it) and revokes the register window.
    /// Idempotent; off the I/O path.
    pub fn notify_removed(&self) {
        if !self.inner.is_removed() {
            log::error!("{}: the device was removed", self.inner.name);
            self.inner.mark_removed();
        }
    }

    /// Opt-in protection against SIGBUS from a revoked BAR that nobody announced: installs
    /// the process-wide SIGBUS handler (`nvme_vfio::mmio::install_sigbus_handler`, chaining to
    /// any previous one) and registers this controller's register window with it. A fault in
    /// the window then replaces it with all-ones memory instead of killing the process; the
    /// next health check reads CSTS as all ones and marks the controller removed. Fails with
    /// [`Error::Unsupported`] for a window that is not a BAR mapping (the emulator).
    pub fn guard_register_faults(&self) -> Result<()> {
        let unsupported = |what: String| Error::Unsupported {
            controller: self.inner.name.clone(),
            what,
        };
        nvme_vfio::mmio::install_sigbus_handler()
            .map_err(|e| unsupported(format!("cannot install the SIGBUS handler: {e}")))?;
        let mut guard = self
            .inner
            .fault_guard
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if guard.is_none() {
            *guard = Some(
                self.inner
                    .mmio
                    .guard_faults()
                    .map_err(|e| unsupported(e.to_string()))?,
            );
        }
        Ok(())
    }

    /// Whether the register window was revoked (after a removal, or by the SIGBUS handler).
    pub fn registers_revoked(&self) -> bool {
        self.inner.mmio.is_revoked()
    }

    /// Whether the controller failed (admin timeout, fatal status, a queue it would not
    /// delete) and was stopped: it must be reset or re-opened.
    pub fn is_failed(&self) -> bool {
        self.inner.is_failed()
    }

    /// Reads CSTS and reports whether the controller signals a fatal error.
    pub fn is_fatal(&self) -> bool {
        Csts(self.inner.mmio.read32(regs::CSTS)).cfs()
    }
}

impl Inner {
    /// Refuses a buffer mapped in another DMA domain.
    #[inline(always)]
    pub(crate) fn check_domain(&self, buf: &DmaBuffer) -> Result<()> {
        let own = self.dma.domain();
        if buf.domain() != own {
            return Err(Error::ForeignBuffer {
                buffer: buf.domain(),
                controller: self.name.clone(),
                controller_domain: own,
            });
        }
        Ok(())
    }

    pub(crate) fn is_removed(&self) -> bool {
        self.removed.load(Ordering::Acquire)
    }

    pub(crate) fn is_failed(&self) -> bool {
        self.state() & STATE_FAILED != 0
    }

    /// The state word: `STATE_FAILED`, `STATE_RESETTING` and the reset generation above them.
    /// Queue pairs compare it with their snapshot on every submission and poll (one load).
    #[inline(always)]
    pub(crate) fn state(&self) -> u64 {
        self.state.load(Ordering::Acquire)
    }

    /// Reserves a free I/O queue id.
    pub(crate) fn allocate_qid(&self) -> Result<u16> {
        let mut used = self.qid_in_use.lock().unwrap_or_else(|p| p.into_inner());
        let qid = (1..used.len())
            .find(|&q| !used[q])
            .ok_or(Error::NoQueuesLeft {
                granted: self.io_queues,
            })?;
        used[qid] = true;
        Ok(qid as u16)
    }

    /// Returns an I/O queue id.
    pub(crate) fn release_qid(&self, qid: u16) {
        let mut used = self.qid_in_use.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(slot) = used.get_mut(qid as usize) {
            *slot = false;
        }
    }
}
