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

mod options;
mod registers;
mod transport;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::{Duration, Instant};

use nvme_spec::command::Cns;
use nvme_spec::identify::IDENTIFY_DATA_SIZE;
use nvme_spec::log::{
    ErrorLogEntry, SmartLog, ERROR_LOG_ENTRY_SIZE, NSID_BROADCAST, SMART_LOG_SIZE,
};
use nvme_spec::opcode::log_page;
use nvme_spec::queue::{CompletionEntry, SubmissionEntry, CQES_LOG2, SQES_LOG2};
use nvme_spec::regs::{
    self, Aqa, Cap, Cc, Cmbsz, Csts, ShutdownNotification, ShutdownStatus, Version,
};
use nvme_spec::{
    command, event, opcode, AsyncEvent, IdentifyController, IdentifyNamespace, NamespaceList, Oacs,
};
use nvme_vfio::{DmaBuffer, DmaMapper, FunctionControl, InterruptController, InterruptEvent, Mmio};

use crate::admin::AdminQueue;
use crate::context::DmaContext;
use crate::error::{Error, IoFailure, Result};
use crate::namespace::{Namespace, NamespaceChanges, NamespaceSet};
use crate::platform::CpuPlatform;
use crate::prp;
use crate::ring::ShadowBuffers;
use crate::teardown::DmaState;

use registers::{controller_memory_buffer, enabled_cc, wait_ready, REGISTER_POLL};

pub use options::{ControllerOptions, ShadowDoorbells, TimeoutAction, DEFAULT_IO_QUEUES};
pub(crate) use registers::ALL_ONES;
pub use registers::HOST_PAGE_SIZE;
pub use transport::Transport;

/// Shutdown wait when the controller does not report RTD3E.
const DEFAULT_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);
/// `Inner::state` bit: the controller failed; unusable until a reset succeeds.
pub(crate) const STATE_FAILED: u64 = 1;
/// `Inner::state` bit: a reset is running; submissions are refused (retryable).
pub(crate) const STATE_RESETTING: u64 = 2;
/// `Inner::state` increment of one reset generation (the bits above the flags).
pub(crate) const STATE_GENERATION: u64 = 4;

/// Most Asynchronous Event Requests kept posted.
const MAX_AERS: usize = 4;
/// Most events kept for [`Controller::take_events`]; older ones are dropped.
const MAX_QUEUED_EVENTS: usize = 64;

/// Fewest entries an NVMe queue can have (one is always kept empty).
const MIN_QUEUE_ENTRIES: u32 = 2;
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
    pub(crate) timeout_action: TimeoutAction,
    aborts: Mutex<AbortStats>,
    /// Asynchronous events received and not yet taken ([`Controller::take_events`]).
    events: Mutex<VecDeque<AsyncEvent>>,
    /// Asynchronous Event Requests kept posted (min(AERL + 1, [`MAX_AERS`]); 0 when off).
    aers: usize,
    identify: Box<IdentifyController>,
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

/// Namespaces probed one by one (1..=NN, at most this many) on controllers without the
/// Active Namespace ID list (CNS 02h, NVMe 1.1).
const MAX_PROBED_NAMESPACES: u32 = 1024;

impl Controller {
    /// Brings up the controller behind `transport`, in a DMA context of its own.
    pub fn new(transport: Transport, options: ControllerOptions) -> Result<Self> {
        let ctx = DmaContext::with_mapper(transport.dma.clone());
        Self::new_in(&ctx, transport, options)
    }

    /// Brings up the controller behind `transport` as a member of `ctx`. The transport must
    /// map through the context's address space (its mapper is the one `ctx` was made from,
    /// e.g. one `nvme_sim::SimDma` shared by several emulated controllers); otherwise fails
    /// with [`Error::ForeignTransport`].
    pub fn new_in(
        ctx: &DmaContext,
        transport: Transport,
        options: ControllerOptions,
    ) -> Result<Self> {
        if !ctx.contains(&*transport.dma) {
            return Err(Error::ForeignTransport {
                controller: transport.name,
                transport: transport.dma.domain(),
                context: ctx.platform_domain(),
            });
        }
        let context = ctx;
        // `transport.dma` maps into the context's space (checked above); allocations go through
        // the context's guard over the same mapper.
        let Transport {
            mmio,
            dma: _,
            name,
            keepalive,
            interrupts,
            function,
        } = transport;
        let cap = Cap(mmio.read64(regs::CAP));
        let version = Version(mmio.read32(regs::VS));
        log::debug!("{name}: CAP {:#018x}, version {version}", cap.0);
        let unsupported = |what: String| Error::Unsupported {
            controller: name.clone(),
            what,
        };
        if !cap.css_nvm() {
            return Err(unsupported(
                "it does not support the NVM command set (CAP.CSS bit 0)".into(),
            ));
        }
        if cap.max_queue_entries() < MIN_QUEUE_ENTRIES {
            return Err(unsupported(format!(
                "CAP.MQES={} allows queues of {} entry; NVMe queues need at least \
                 {MIN_QUEUE_ENTRIES}",
                cap.mqes(),
                cap.max_queue_entries()
            )));
        }
        if cap.min_page_size() > HOST_PAGE_SIZE || cap.max_page_size() < HOST_PAGE_SIZE {
            return Err(unsupported(format!(
                "its memory page sizes {}..={} exclude the host's {HOST_PAGE_SIZE}",
                cap.min_page_size(),
                cap.max_page_size()
            )));
        }
        if !mmio.contains_dword(regs::cq_head_doorbell(0, cap.doorbell_stride())) {
            return Err(unsupported(format!(
                "BAR0 is only {} bytes, too small for the doorbells",
                mmio.len()
            )));
        }
        let stride = cap.doorbell_stride();

        // Disable (also clears a previous user's state) and wait for RDY=0.
        let cc = Cc(mmio.read32(regs::CC));
        if cc.en() {
            mmio.write32(regs::CC, cc.with_en(false).0);
        }
        wait_ready(&mmio, &name, cap, false)?;
        let cmb = controller_memory_buffer(&mmio, &name, cap);

        let admin_entries = options.admin_entries.clamp(
            2,
            regs::ADMIN_QUEUE_MAX_ENTRIES.min(cap.max_queue_entries()),
        );
        let removal_request = match &function {
            Some(f) => f.request_notifier()?,
            None => None,
        };
        let dma: Arc<dyn DmaMapper> = context.dma().clone();
        let admin = AdminQueue::new(&mmio, &dma, admin_entries, stride, HOST_PAGE_SIZE)?;
        mmio.write32(regs::AQA, Aqa::new(admin_entries, admin_entries).0);
        mmio.write64(regs::ASQ, admin.sq_iova());
        mmio.write64(regs::ACQ, admin.cq_iova());
        // From here on the controller may DMA into the admin rings: every failure path goes
        // through `Inner`'s drop, which stops the controller before the rings are freed.
        let mut partial = Inner {
            name,
            mmio,
            dma,
            context: context.clone(),
            dma_state: Mutex::new(DmaState::Running),
            function,
            cap,
            page_size: HOST_PAGE_SIZE,
            max_transfer: prp::max_bytes_with_one_list(HOST_PAGE_SIZE),
            sgl: None,
            version,
            cmb,
            admin: Mutex::new(admin),
            admin_timeout: options.admin_timeout,
            state: AtomicU64::new(0),
            reset_lock: Mutex::new(()),
            removed: AtomicBool::new(false),
            removal_request,
            timeout_action: options.timeout_action,
            aborts: Mutex::new(AbortStats::default()),
            events: Mutex::new(VecDeque::new()),
            aers: 0,
            identify: Box::new(IdentifyController::default()),
            namespaces: RwLock::new(Arc::new(NamespaceSet::default())),
            rescan_lock: Mutex::new(()),
            io_queues: 0,
            qid_in_use: Mutex::new(Vec::new()),
            shutdown_on_drop: options.shutdown_on_drop,
            shadow: None,
            irq_events: Vec::new(),
            interrupts,
            _keepalive: keepalive,
        };
        let (mmio, name) = (&partial.mmio, &partial.name);
        mmio.write32(regs::CC, enabled_cc().0);
        if let Err(e) = wait_ready(mmio, name, cap, true) {
            partial.state.fetch_or(STATE_FAILED, Ordering::AcqRel);
            return Err(e);
        }
        log::info!(
            "{name}: controller enabled (NVMe {version}, {admin_entries}-entry admin queue)"
        );
        partial.identify_all(options.io_queues)?;
        let support = partial.identify.sgl_support();
        partial.sgl = (options.sgl && support.supported()).then(|| support.alignment_mask());
        log::info!(
            "{}: I/O data pointers: {} (controller SGLS {:#x}, ControllerOptions::sgl {})",
            partial.name,
            if partial.sgl.is_some() { "SGL" } else { "PRP" },
            partial.identify.sgls,
            options.sgl
        );
        let platform = CpuPlatform::detect();
        if options.shadow_doorbells.wanted(&platform) {
            partial.enable_shadow_doorbells()?;
        } else if partial
            .identify
            .oacs_flags()
            .contains(Oacs::DOORBELL_BUFFER_CONFIG)
        {
            log::info!(
                "{}: shadow doorbells offered but not used ({:?} on {platform:?})",
                partial.name,
                options.shadow_doorbells
            );
        }
        if options.interrupts {
            partial.enable_interrupts()?;
        }
        partial.enable_async_events();
        Ok(Controller {
            inner: Arc::new(partial),
        })
    }

    /// Identify Controller data.
    pub fn identify(&self) -> &IdentifyController {
        &self.inner.identify
    }

    /// Reads the SMART / Health Information log page (Log Identifier 02h, NVMe Base 2.0
    /// §5.16.1.3). `nsid` is [`NSID_BROADCAST`](nvme_spec::log::NSID_BROADCAST) (or 0) for the
    /// whole controller; a namespace ID asks for that namespace's data, which controllers
    /// without per-namespace SMART (Identify LPA bit 0 clear) refuse with Invalid Field in
    /// Command ([`Error::Command`]).
    pub fn smart_log(&self, nsid: u32) -> Result<SmartLog> {
        let mut page = [0u8; SMART_LOG_SIZE];
        self.read_log_page(log_page::SMART_HEALTH, nsid, &mut page)?;
        Ok(SmartLog::from_bytes(&page))
    }

    /// Reads the newest `entries` Error Information log entries (Log Identifier 01h, NVMe
    /// Base 2.0 §5.16.1.2), newest first, leaving out unused ones (Error Count 0). `entries`
    /// is capped by what the controller keeps (Identify ELPE + 1) and by what one command can
    /// transfer (MDTS); 0 reads nothing.
    pub fn error_log(&self, entries: usize) -> Result<Vec<ErrorLogEntry>> {
        let kept = usize::from(self.inner.identify.elpe) + 1;
        let fit = self.inner.max_transfer / ERROR_LOG_ENTRY_SIZE;
        let count = entries.min(kept).min(fit);
        if count == 0 {
            return Ok(Vec::new());
        }
        let mut page = vec![0u8; count * ERROR_LOG_ENTRY_SIZE];
        self.read_log_page(log_page::ERROR_INFORMATION, NSID_BROADCAST, &mut page)?;
        Ok(ErrorLogEntry::parse_entries(&page)
            .filter(ErrorLogEntry::is_valid)
            .collect())
    }

    /// Get Log Page `lid` for `nsid` from offset 0 into `out` (a non-empty multiple of 4
    /// bytes, at most one admin transfer).
    fn read_log_page(&self, lid: u8, nsid: u32, out: &mut [u8]) -> Result<()> {
        let buf = self.inner.read_log(lid, nsid, out.len())?;
        out.copy_from_slice(&buf[..out.len()]);
        Ok(())
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

    /// Active namespaces, in namespace id order (a snapshot: see
    /// [`Controller::rescan_namespaces`]).
    pub fn namespaces(&self) -> Vec<Namespace> {
        self.inner.namespace_set().active.clone()
    }

    /// The active namespace `nsid`, or [`Error::InactiveNamespace`], or
    /// [`Error::UnsupportedNamespace`] when it is active but unusable (e.g. a metadata format).
    pub fn namespace(&self, nsid: u32) -> Result<Namespace> {
        let set = self.inner.namespace_set();
        if let Some((_, reason)) = set.unsupported.iter().find(|(n, _)| *n == nsid) {
            return Err(Error::UnsupportedNamespace {
                nsid,
                reason: reason.clone(),
            });
        }
        set.active
            .iter()
            .find(|n| n.nsid() == nsid)
            .cloned()
            .ok_or_else(|| Error::InactiveNamespace {
                nsid,
                active: set.active.iter().map(|n| n.nsid()).collect(),
            })
    }

    /// Active namespaces this driver cannot do I/O on (not in [`Controller::namespaces`]),
    /// with the reason: formats with metadata or protection information, blocks larger than
    /// the largest transfer, bogus sizes.
    pub fn unsupported_namespaces(&self) -> Vec<(u32, String)> {
        self.inner.namespace_set().unsupported.clone()
    }

    /// Re-reads the active namespace list and each namespace's Identify data, replaces what
    /// [`Controller::namespaces`] returns, and says what changed. [`Controller::take_events`]
    /// calls it on its own when the controller reports a Namespace Attribute Changed notice.
    ///
    /// [`Namespace`] handles of a namespace found resized, reformatted or detached go stale:
    /// from the moment the rescan has marked them (before it returns, and before the new set
    /// is visible to [`Controller::namespace`]), their submissions fail with
    /// [`Error::StaleNamespace`] without reaching the device; take fresh handles. Handles of
    /// namespaces found unchanged stay valid. The driver cannot know of a change before the
    /// controller's notice is taken or a rescan runs: until then I/O goes out with the old
    /// geometry, as it does for a submission racing with the rescan on another thread.
    pub fn rescan_namespaces(&self) -> Result<NamespaceChanges> {
        self.inner.rescan_namespaces()
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

    /// Whether shadow doorbells (Doorbell Buffer Config) are in use.
    pub fn shadow_doorbells(&self) -> bool {
        self.inner.has_shadow()
    }

    /// Resets the controller (NVMe Base 2.0 §3.7.2, controller level reset through CC.EN):
    /// disables it, rebuilds the admin queue, restores what bring-up configured (queue count,
    /// shadow doorbells; MSI-X routing survives), and lets every live [`QueuePair`] re-create
    /// its queues in place.
    ///
    /// Queue pairs learn of the reset through a generation word they compare on every
    /// submission and poll (one atomic load, no lock). When a pair sees a new generation it
    /// completes every request that was in flight with the retryable [`Error::Reset`] (buffers
    /// returned: the controller was disabled first, so nothing can still write them), then
    /// re-creates its submission and completion queues; a pair created with
    /// `QueuePairOptions::resubmit_after_reset` submits those requests again instead. While
    /// the reset runs, submissions fail at once with the retryable [`Error::Resetting`] (they
    /// are not queued).
    ///
    /// Also the way back from a failed controller (fatal status, admin timeout), unless it
    /// could not even be disabled (then its memory was leaked and this returns
    /// [`Error::Failed`]).
    ///
    /// [`QueuePair`]: crate::QueuePair
    pub fn reset(&self) -> Result<()> {
        self.inner.reset().map(drop)
    }

    /// Asynchronous events (SMART/health critical warnings, namespace attribute changes,
    /// firmware activation, error log entries) received since the last call, oldest first.
    /// Reads the log page each names, which the controller requires before it reports
    /// another event of that type. Requests stay posted on their own (re-posted as each
    /// completes, and after a reset); events are collected whenever the admin queue is used
    /// and on every queue pair's health tick (about every 50 ms while polled). At most 64 are
    /// kept. A namespace attribute change also rescans the namespaces
    /// ([`Controller::rescan_namespaces`]; a failed rescan is logged and keeps the old list).
    pub fn take_events(&self) -> Vec<AsyncEvent> {
        self.inner.take_events()
    }

    /// Abort outcomes and timeout-driven resets so far.
    pub fn abort_stats(&self) -> AbortStats {
        self.inner.poll_admin();
        *self.inner.abort_stats_mut()
    }

    /// Whether the device is gone (its registers read all ones): it cannot be reset, only
    /// closed.
    pub fn is_removed(&self) -> bool {
        self.inner.is_removed()
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

    /// Runs a raw admin command. `data` is the command's data buffer (`len` bytes of it are
    /// described by the PRPs); the driver fills the command id and the data pointer (zero
    /// when there is no buffer). The buffer comes back with the completion, or in the error
    /// unless the command timed out (then the controller is marked failed and keeps it).
    ///
    /// # Safety
    /// The driver cannot tell how many bytes an arbitrary command transfers. The caller
    /// guarantees that the command, as the controller will interpret it, transfers at most
    /// `len` bytes (to or from the buffer) and no data at all when `data` is `None`; and that
    /// it does not make the controller write host memory through any other pointer in it
    /// (e.g. a command that sets up controller-owned host memory). Otherwise the controller
    /// writes memory the program owns.
    pub unsafe fn admin_raw(
        &self,
        sqe: SubmissionEntry,
        data: Option<(DmaBuffer, usize)>,
    ) -> std::result::Result<(CompletionEntry, Option<DmaBuffer>), IoFailure> {
        let (buf, len) = match data {
            Some((b, l)) => (Some(b), l),
            None => (None, 0),
        };
        match self.inner.admin(sqe, buf.as_ref().map(|b| (b, len))) {
            Ok(cqe) => Ok((cqe, buf)),
            Err(e @ (Error::Timeout { .. } | Error::ControllerFatal { .. })) => {
                // The controller may still write the buffer: never give it back.
                std::mem::forget(buf);
                Err(IoFailure::new(e, None))
            }
            Err(e) => Err(IoFailure::new(e, buf)),
        }
    }
}

impl Inner {
    /// Runs one admin command under the admin lock.
    pub(crate) fn admin(
        &self,
        sqe: SubmissionEntry,
        data: Option<(&DmaBuffer, usize)>,
    ) -> Result<CompletionEntry> {
        if self.is_failed() {
            return Err(Error::Failed {
                controller: self.name.clone(),
            });
        }
        if let Some((buf, _)) = data {
            self.check_domain(buf)?;
        }
        let mut admin: MutexGuard<'_, AdminQueue> =
            self.admin.lock().unwrap_or_else(|p| p.into_inner());
        let result = admin.execute(&self.mmio, self.page_size, sqe, data, self.admin_timeout);
        self.account_async(&mut admin);
        match result {
            Err(Error::Timeout { .. }) | Err(Error::ControllerFatal { .. }) => {
                drop(admin);
                log::error!(
                    "{}: admin command failed fatally; controller marked failed",
                    self.name
                );
                // The command may still run and write its data buffer or the admin rings:
                // stop the controller before any of that memory can be freed.
                self.fail_and_stop();
                result.map_err(|e| match e {
                    Error::ControllerFatal { .. } => Error::ControllerFatal {
                        controller: self.name.clone(),
                    },
                    e => e,
                })
            }
            r => r,
        }
    }

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

    /// Marks the controller failed and stops its DMA (see [`Inner::stop_dma`]).
    pub(crate) fn fail_and_stop(&self) -> bool {
        self.state.fetch_or(STATE_FAILED, Ordering::AcqRel);
        self.stop_dma()
    }

    /// Stops the controller from reaching host memory: clears CC.EN and waits for CSTS.RDY=0
    /// (bounded by CAP.TO), then clears bus mastering where the transport can. Returns true
    /// when that is confirmed; otherwise retires the mapper so that every DMA allocation of
    /// this controller leaks instead of being freed. Done once; later calls return the
    /// outcome. The controller is unusable afterwards.
    pub(crate) fn stop_dma(&self) -> bool {
        let mut state = self.dma_state.lock().unwrap_or_else(|p| p.into_inner());
        match *state {
            DmaState::Stopped => return true,
            DmaState::Unstoppable => return false,
            DmaState::Running => {}
        }
        self.state.fetch_or(STATE_FAILED, Ordering::AcqRel);
        let cc = Cc(self.mmio.read32(regs::CC));
        if cc.en() {
            self.mmio.write32(regs::CC, cc.with_en(false).0);
        }
        let disabled = match wait_ready(&self.mmio, &self.name, self.cap, false) {
            Ok(()) => true,
            Err(e) => {
                log::error!("{}: disabling the controller failed: {e}", self.name);
                false
            }
        };
        let bus_master_off = match &self.function {
            Some(f) => match f.disable_bus_master() {
                Ok(()) => true,
                Err(e) => {
                    log::error!("{}: clearing bus mastering failed: {e}", self.name);
                    false
                }
            },
            None => true,
        };
        *state = if disabled && bus_master_off {
            log::debug!("{}: controller disabled, DMA stopped", self.name);
            DmaState::Stopped
        } else {
            self.context.guard().retire(&self.name);
            DmaState::Unstoppable
        };
        *state == DmaState::Stopped
    }

    fn identify_all(&mut self, io_queues: u16) -> Result<()> {
        let mut page = DmaBuffer::allocate(&self.dma, IDENTIFY_DATA_SIZE)?;
        let id =
            IdentifyController::from_bytes(&self.identify_page(Cns::Controller, 0, &mut page)?);
        let (sqes_min, _) = id.sqes_min_max();
        let (cqes_min, _) = id.cqes_min_max();
        if sqes_min > SQES_LOG2 || cqes_min > CQES_LOG2 {
            return Err(Error::Unsupported {
                controller: self.name.clone(),
                what: format!(
                    "it requires queue entry sizes 2^{sqes_min}/2^{cqes_min} bytes (we use 64/16)"
                ),
            });
        }
        if let Some(mdts) = id.mdts_bytes(self.cap.min_page_size()) {
            self.max_transfer = self.max_transfer.min(mdts);
        }
        log::info!(
            "{}: {} (serial {}, firmware {}), max transfer {} bytes",
            self.name,
            id.model(),
            id.serial(),
            id.firmware(),
            self.max_transfer
        );

        let asked = io_queues.max(1);
        let cqe = self.admin(command::set_number_of_queues(asked, asked), None)?;
        let (sq, cq) = command::number_of_queues_allocated(cqe.dw0);
        let granted = sq.min(cq).min(asked);
        // Only queues whose doorbells lie inside BAR0 can be used (a large CAP.DSTRD or a
        // small BAR leaves the higher ones unreachable).
        let stride = self.cap.doorbell_stride();
        let reachable = (0..=granted)
            .take_while(|&q| self.mmio.contains_dword(regs::cq_head_doorbell(q, stride)))
            .count() as u16;
        self.io_queues = granted.min(reachable.saturating_sub(1));
        if self.io_queues < granted {
            log::warn!(
                "{}: only {} of {granted} granted I/O queue pairs have doorbells inside the \
                 {}-byte BAR0 (doorbell stride {stride}); using those",
                self.name,
                self.io_queues,
                self.mmio.len()
            );
        }
        self.qid_in_use = Mutex::new(vec![false; self.io_queues as usize + 1]);
        log::debug!(
            "{}: {} I/O queue pairs granted ({sq} SQ / {cq} CQ)",
            self.name,
            self.io_queues
        );

        *self.identify = id;
        let set = self.scan_namespaces(&mut page)?;
        *self.namespaces.get_mut().unwrap_or_else(|p| p.into_inner()) = Arc::new(set);
        Ok(())
    }

    /// Identify `cns` for `nsid` through `page` (an [`IDENTIFY_DATA_SIZE`]-byte buffer).
    fn identify_page(
        &self,
        cns: Cns,
        nsid: u32,
        page: &mut DmaBuffer,
    ) -> Result<[u8; IDENTIFY_DATA_SIZE]> {
        page.fill(0);
        self.admin(
            command::identify(cns, nsid),
            Some((page, IDENTIFY_DATA_SIZE)),
        )?;
        let mut bytes = [0u8; IDENTIFY_DATA_SIZE];
        bytes.copy_from_slice(&page[..IDENTIFY_DATA_SIZE]);
        Ok(bytes)
    }

    /// Reads the active namespace list and each namespace's Identify data.
    fn scan_namespaces(&self, page: &mut DmaBuffer) -> Result<NamespaceSet> {
        // Active namespace list (CNS 02h, NVMe 1.1+); older controllers: probe 1..=NN.
        let nsids: Vec<u32> = match self.identify_page(Cns::ActiveNamespaceList, 0, page) {
            Ok(bytes) => NamespaceList::from_bytes(&bytes).active().collect(),
            Err(Error::Command { .. }) => {
                (1..=self.identify.nn.min(MAX_PROBED_NAMESPACES)).collect()
            }
            Err(e) => return Err(e),
        };
        let mut set = NamespaceSet::default();
        for nsid in nsids {
            let data =
                IdentifyNamespace::from_bytes(&self.identify_page(Cns::Namespace, nsid, page)?);
            match Namespace::from_identify(nsid, data, self.max_transfer) {
                Ok(ns) => set.active.push(ns),
                Err(reason) => {
                    log::warn!("{}: namespace {nsid} skipped: {reason}", self.name);
                    set.unsupported.push((nsid, reason));
                }
            }
        }
        Ok(set)
    }

    /// The current namespace set.
    fn namespace_set(&self) -> Arc<NamespaceSet> {
        self.namespaces
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// See [`Controller::rescan_namespaces`].
    fn rescan_namespaces(&self) -> Result<NamespaceChanges> {
        let _one_at_a_time = self.rescan_lock.lock().unwrap_or_else(|p| p.into_inner());
        let mut page = DmaBuffer::allocate(&self.dma, IDENTIFY_DATA_SIZE)?;
        let mut set = match self.scan_namespaces(&mut page) {
            Ok(set) => set,
            Err(e @ (Error::Timeout { .. } | Error::ControllerFatal { .. })) => {
                // The device may still write the page.
                page.leak();
                return Err(e);
            }
            Err(e) => return Err(e),
        };
        // Compared, marked and published under the write lock: two rescans cannot interleave
        // their marks, and a thread that reads the new set also sees the marks.
        let mut current = self.namespaces.write().unwrap_or_else(|p| p.into_inner());
        let changes = NamespaceChanges::between(&current, &set);
        set.supersede(&current);
        *current = Arc::new(set);
        drop(current);
        if !changes.is_empty() {
            log::info!("{}: namespaces changed: {changes:?}", self.name);
        }
        Ok(changes)
    }

    /// Sets up shadow doorbells (NVMe Base 2.0 §5.8) if the controller supports them.
    fn enable_shadow_doorbells(&mut self) -> Result<()> {
        if !self
            .identify
            .oacs_flags()
            .contains(Oacs::DOORBELL_BUFFER_CONFIG)
        {
            return Ok(());
        }
        let stride = self.cap.doorbell_stride();
        let Some(buffers) = ShadowBuffers::new(
            &self.dma,
            self.page_size,
            stride,
            self.io_queues as usize + 1,
        )?
        else {
            log::info!(
                "{}: shadow doorbells skipped: {} queues do not fit one page",
                self.name,
                self.io_queues + 1
            );
            return Ok(());
        };
        let buffers = Arc::new(buffers);
        if self.configure_shadow(&buffers)? {
            log::info!("{}: shadow doorbells enabled", self.name);
            self.shadow = Some(buffers);
        }
        Ok(())
    }

    /// Doorbell Buffer Config with `buffers` (all entries zeroed first); routes the admin
    /// doorbells through them. Returns false when the controller refuses the command.
    fn configure_shadow(&self, buffers: &Arc<ShadowBuffers>) -> Result<bool> {
        for index in 0..buffers.entries() {
            drop(buffers.slot(index, 0));
        }
        let entries = {
            let admin = self.admin.lock().unwrap_or_else(|p| p.into_inner());
            admin.entries()
        };
        // Before the controller starts reading the shadow entries, they must hold what the
        // admin rings will hold: the SQ tail after this very command, and the CQ head as it is
        // (a head one ahead would make the controller think the CQ is full).
        let (sq_tail, cq_head) = self
            .admin
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .positions();
        drop(buffers.slot(0, (sq_tail + 1) % entries));
        drop(buffers.slot(1, cq_head));
        let sqe =
            command::doorbell_buffer_config(buffers.shadow_iova().0, buffers.event_idx_iova().0);
        match self.admin(sqe, None) {
            Ok(_) => {}
            Err(Error::Command { status, .. }) => {
                log::info!(
                    "{}: Doorbell Buffer Config refused ({status}); using MMIO doorbells",
                    self.name
                );
                return Ok(false);
            }
            Err(e) => return Err(e),
        }
        let mut admin = self.admin.lock().unwrap_or_else(|p| p.into_inner());
        let (sq_tail, cq_head) = admin.positions();
        admin.set_shadow(buffers.slot(0, sq_tail), buffers.slot(1, cq_head));
        Ok(true)
    }

    /// Sends an Abort for command `cid` of queue `qid` without waiting: only if the admin queue
    /// is free right now (never blocks the I/O thread). Returns whether it was sent.
    pub(crate) fn abort_async(&self, qid: u16, cid: u16) -> bool {
        if self.is_failed() {
            return false;
        }
        let Ok(mut admin) = self.admin.try_lock() else {
            return false;
        };
        admin.reap_async();
        self.account_async(&mut admin);
        let sent = admin.submit_async(command::abort(qid, cid)).is_some();
        if sent {
            self.abort_stats_mut().sent += 1;
        }
        sent
    }

    /// Picks up completions of Aborts if the admin queue is free (from a clock tick).
    pub(crate) fn poll_admin(&self) {
        if let Ok(mut admin) = self.admin.try_lock() {
            if admin.has_async() {
                admin.reap_async();
            }
            self.account_async(&mut admin);
        }
    }

    fn account_async(&self, admin: &mut AdminQueue) {
        let finished: Vec<(u8, CompletionEntry)> = admin.take_async().collect();
        if finished.is_empty() {
            return;
        }
        let mut repost = 0;
        for (op, cqe) in finished {
            if op == opcode::admin::ASYNC_EVENT_REQUEST {
                if cqe.status().is_success() {
                    let event = AsyncEvent::from_dw0(cqe.dw0);
                    log::info!("{}: asynchronous event {event:?}", self.name);
                    let mut events = self.events.lock().unwrap_or_else(|p| p.into_inner());
                    if events.len() == MAX_QUEUED_EVENTS {
                        events.pop_front();
                    }
                    events.push_back(event);
                    repost += 1;
                }
                continue;
            }
            let mut stats = self.aborts.lock().unwrap_or_else(|p| p.into_inner());
            if !cqe.status().is_success() {
                stats.failed += 1;
            } else if cqe.dw0 & command::ABORT_DW0_NOT_ABORTED != 0 {
                stats.not_aborted += 1;
            } else {
                stats.aborted += 1;
            }
        }
        for _ in 0..repost {
            let _ = admin.submit_async(command::async_event_request());
        }
    }

    /// Enables the events this driver reports (SMART critical warnings, namespace attribute
    /// and firmware activation notices) and posts the Asynchronous Event Requests. Best
    /// effort: a controller that refuses gets no AERs, which only costs the events.
    fn enable_async_events(&mut self) {
        let wanted = (usize::from(self.identify.aerl) + 1).min(MAX_AERS);
        let config = event::AEC_SMART_CRITICAL_WARNINGS
            | event::AEC_NAMESPACE_ATTRIBUTE_NOTICES
            | event::AEC_FIRMWARE_ACTIVATION_NOTICES;
        if let Err(e) = self.admin(
            command::set_features(opcode::feature::ASYNC_EVENT_CONFIGURATION, config),
            None,
        ) {
            log::info!(
                "{}: asynchronous event configuration refused ({e})",
                self.name
            );
        }
        self.aers = wanted;
        self.post_aers();
    }

    /// Tops the outstanding Asynchronous Event Requests up to `aers`.
    fn post_aers(&self) {
        let mut admin = self.admin.lock().unwrap_or_else(|p| p.into_inner());
        let missing = self
            .aers
            .saturating_sub(admin.async_count(opcode::admin::ASYNC_EVENT_REQUEST));
        for _ in 0..missing {
            if admin.submit_async(command::async_event_request()).is_none() {
                break;
            }
        }
    }

    /// Events received so far; reads the log page each one names (which re-arms events of
    /// that type).
    pub(crate) fn take_events(&self) -> Vec<AsyncEvent> {
        self.poll_admin();
        let events: Vec<AsyncEvent> = self
            .events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain(..)
            .collect();
        for e in &events {
            let bytes = match e.log_page {
                log_page::ERROR_INFORMATION => ERROR_LOG_ENTRY_SIZE,
                log_page::SMART_HEALTH => SMART_LOG_SIZE,
                _ => IDENTIFY_DATA_SIZE,
            };
            if let Err(err) = self.read_log(e.log_page, NSID_BROADCAST, bytes) {
                log::warn!(
                    "{}: reading log page {:#04x} for an event: {err}",
                    self.name,
                    e.log_page
                );
            }
        }
        if events.iter().any(AsyncEvent::is_namespace_change) {
            if let Err(err) = self.rescan_namespaces() {
                log::warn!(
                    "{}: rescanning namespaces after a change notice: {err}",
                    self.name
                );
            }
        }
        events
    }

    /// Reads `len` bytes of log page `lid` for `nsid` into a fresh DMA buffer. After a
    /// timeout or fatal status the buffer is leaked, never freed (the controller may still
    /// write it).
    pub(crate) fn read_log(&self, lid: u8, nsid: u32, len: usize) -> Result<DmaBuffer> {
        let bytes = u32::try_from(len)
            .ok()
            .filter(|&b| b != 0 && b % 4 == 0)
            .ok_or_else(|| {
                Error::InvalidRequest(format!(
                    "log page length {len} is not a non-zero multiple of 4 bytes"
                ))
            })?;
        let buf = DmaBuffer::allocate(&self.dma, len)?;
        match self.admin(command::get_log_page(lid, nsid, bytes), Some((&buf, len))) {
            Ok(_) => Ok(buf),
            Err(e @ (Error::Timeout { .. } | Error::ControllerFatal { .. })) => {
                buf.leak();
                Err(e)
            }
            Err(e) => Err(e),
        }
    }

    pub(crate) fn abort_stats_mut(&self) -> MutexGuard<'_, AbortStats> {
        self.aborts.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether the kernel has asked for the device back since the last call (non-blocking).
    pub(crate) fn release_requested(&self) -> bool {
        self.removal_request
            .as_ref()
            .is_some_and(|e| e.clear().is_ok_and(|n| n > 0))
    }

    /// Marks the device removed (and failed) and stops what can be stopped.
    pub(crate) fn mark_removed(&self) {
        self.removed.store(true, Ordering::Release);
        self.fail_and_stop();
    }

    pub(crate) fn is_removed(&self) -> bool {
        self.removed.load(Ordering::Acquire)
    }

    /// Holds off resets while the guard lives (a queue pair deciding how to tear down).
    pub(crate) fn hold_resets(&self) -> MutexGuard<'_, ()> {
        self.reset_lock.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Controller reset (see [`Controller::reset`]). Returns the new state word.
    pub(crate) fn reset(&self) -> Result<u64> {
        let _one_at_a_time = self.reset_lock.lock().unwrap_or_else(|p| p.into_inner());
        if self.is_removed() {
            return Err(Error::Removed {
                controller: self.name.clone(),
                why: "its registers read all ones",
            });
        }
        if *self.dma_state.lock().unwrap_or_else(|p| p.into_inner()) == DmaState::Unstoppable {
            return Err(Error::Failed {
                controller: self.name.clone(),
            });
        }
        self.state.fetch_or(STATE_RESETTING, Ordering::AcqRel);
        log::warn!("{}: resetting the controller", self.name);
        let mut admin = self.admin.lock().unwrap_or_else(|p| p.into_inner());
        // 1. Disable. Every command in flight on every queue dies here; the queue pairs fail
        //    them when they see the new generation. If the controller will not disable, it is
        //    stopped for good (memory leaks, see `stop_dma`).
        let cc = Cc(self.mmio.read32(regs::CC));
        if cc.en() {
            self.mmio.write32(regs::CC, cc.with_en(false).0);
        }
        if let Err(e) = wait_ready(&self.mmio, &self.name, self.cap, false) {
            drop(admin);
            self.fail_and_stop();
            return Err(e);
        }
        // Disabled: the device reaches no memory now, so it is safe to reuse all of it.
        {
            let mut dma = self.dma_state.lock().unwrap_or_else(|p| p.into_inner());
            if *dma == DmaState::Stopped {
                if let Some(f) = &self.function {
                    f.enable_bus_master()?;
                }
                *dma = DmaState::Running;
            }
        }
        // 2. Admin queue from scratch, then enable as at bring-up.
        admin.reset();
        let entries = admin.entries();
        self.mmio.write32(regs::AQA, Aqa::new(entries, entries).0);
        self.mmio.write64(regs::ASQ, admin.sq_iova());
        self.mmio.write64(regs::ACQ, admin.cq_iova());
        self.mmio.write32(regs::CC, enabled_cc().0);
        drop(admin);
        if let Err(e) = wait_ready(&self.mmio, &self.name, self.cap, true) {
            self.fail_and_stop();
            return Err(e);
        }
        // The generation moves on now (failed and resetting cleared) so the admin commands
        // below run; queue pairs recreate their queues when they see it.
        let generation = (self.state() & !(STATE_GENERATION - 1)) + STATE_GENERATION;
        self.state
            .store(generation | STATE_RESETTING, Ordering::Release);
        // 3. What bring-up configured: queue count, shadow doorbells (MSI-X routing lives in
        //    VFIO and survives).
        let cqe = self.admin(
            command::set_number_of_queues(self.io_queues.max(1), self.io_queues.max(1)),
            None,
        )?;
        let (sq, cq) = command::number_of_queues_allocated(cqe.dw0);
        if sq.min(cq) < self.io_queues {
            self.fail_and_stop();
            return Err(Error::Unsupported {
                controller: self.name.clone(),
                what: format!(
                    "after the reset it grants {} I/O queue pairs, fewer than the {} in use",
                    sq.min(cq),
                    self.io_queues
                ),
            });
        }
        if let Some(buffers) = &self.shadow {
            if !self.configure_shadow(buffers)? {
                self.fail_and_stop();
                return Err(Error::Unsupported {
                    controller: self.name.clone(),
                    what: "it refused Doorbell Buffer Config after the reset".into(),
                });
            }
        }
        self.state.store(generation, Ordering::Release);
        // A reset ends outstanding AERs: post them again.
        self.post_aers();
        log::info!("{}: controller reset done", self.name);
        Ok(generation)
    }

    /// Routes one MSI-X vector per queue (admin + granted I/O queues, as far as the function
    /// has vectors) to eventfds.
    fn enable_interrupts(&mut self) -> Result<()> {
        let Some(ctl) = &self.interrupts else {
            return Err(Error::Unsupported {
                controller: self.name.clone(),
                what: "this transport cannot deliver interrupts (polled mode only)".into(),
            });
        };
        let available = ctl.msix_vectors();
        let count = (self.io_queues as u32 + 1).min(available);
        if count < 2 {
            return Err(Error::Unsupported {
                controller: self.name.clone(),
                what: format!(
                    "it offers {available} MSI-X vectors; interrupt mode needs at least 2"
                ),
            });
        }
        self.irq_events = ctl.enable_msix(count)?;
        log::info!("{}: {count} MSI-X vectors routed to eventfds", self.name);
        Ok(())
    }

    /// The eventfd of vector `vector`, if routed.
    pub(crate) fn irq_event(&self, vector: u16) -> Option<Arc<InterruptEvent>> {
        self.irq_events.get(vector as usize).cloned()
    }

    /// Whether shadow doorbells are in use.
    pub(crate) fn has_shadow(&self) -> bool {
        self.shadow.is_some()
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

    pub(crate) fn is_failed(&self) -> bool {
        self.state() & STATE_FAILED != 0
    }

    /// The state word: `STATE_FAILED`, `STATE_RESETTING` and the reset generation above them.
    /// Queue pairs compare it with their snapshot on every submission and poll (one load).
    #[inline(always)]
    pub(crate) fn state(&self) -> u64 {
        self.state.load(Ordering::Acquire)
    }

    fn shutdown(&self) {
        let cc = Cc(self.mmio.read32(regs::CC));
        if !cc.en() {
            return;
        }
        self.mmio
            .write32(regs::CC, cc.with_shn(ShutdownNotification::Normal).0);
        let rtd3e = Duration::from_micros(self.identify.rtd3e as u64);
        let timeout = if rtd3e.is_zero() {
            DEFAULT_SHUTDOWN_TIMEOUT
        } else {
            rtd3e.max(REGISTER_POLL * 10)
        };
        let start = Instant::now();
        while start.elapsed() < timeout {
            let csts = Csts(self.mmio.read32(regs::CSTS));
            if csts.shst() == ShutdownStatus::Complete {
                log::debug!("{}: shutdown complete", self.name);
                return;
            }
            if csts.cfs() {
                break;
            }
            std::thread::sleep(REGISTER_POLL);
        }
        log::warn!(
            "{}: shutdown did not complete within {timeout:?}",
            self.name
        );
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        if !self.irq_events.is_empty() {
            if let Some(ctl) = &self.interrupts {
                ctl.disable_msix();
            }
        }
        if self.shutdown_on_drop && !self.is_failed() {
            self.shutdown();
        }
        // Before the admin rings, shadow doorbell pages and identify data are freed (when the
        // fields drop after this), the controller must be unable to reach them: disabled and
        // bus mastering off, or the memory leaks (`stop_dma` retires the mapper).
        self.stop_dma();
    }
}
