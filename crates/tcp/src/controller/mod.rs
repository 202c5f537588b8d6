//! The NVMe/TCP controller: admin queue bring-up over Fabrics (Connect, Property Get/Set
//! for CAP, VS, CC.EN and CSTS.RDY), Identify, Keep Alive, and I/O queue pairs each on a
//! TCP connection of its own.
//!
//! This file keeps the shared state (`Inner`, `Admin`, the state word's flags) and the
//! `TcpController` handle with its accessors; one file per concern below it: `options.rs`
//! (`TcpOptions`), `connect.rs` (Fabrics Connect of a queue, the admin connection),
//! `bringup.rs` (enable over Property Get/Set, Identify, number of queues, shutdown),
//! `admin.rs` (admin commands, asynchronous Keep Alive and Abort, log pages),
//! `discovery.rs` (the discovery log page), `queue_pairs.rs` (I/O queue pairs and their ids).
//! The controller reset is in `crate::reset`, keep-alive timing in `crate::keep_alive`.
//!
//! INVARIANT: `Inner::state` is the one word queue pairs read to learn of a reset, a failure
//! or a lost association; the admin queue is used only under its mutex.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU16, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use nvme_core::{AbortStats, DmaBuffer, DmaMapper, Error, Namespace, Result};
use nvme_spec::regs::{Cap, Version};
use nvme_spec::IdentifyController;

use crate::error::TcpError;
use crate::keep_alive::KeepAlive;
use crate::queue::Queue;
use crate::trid::TransportId;

mod admin;
mod bringup;
mod connect;
mod discovery;
mod options;
mod queue_pairs;

pub(crate) use bringup::{enable, enabled_cc, wait_ready};
pub(crate) use connect::open_admin;
pub use discovery::{discover, DiscoveryEntry};
pub use options::TcpOptions;

/// Entries of the admin queue.
const ADMIN_QUEUE_ENTRIES: u16 = 32;
/// In-capsule data every NVMe/TCP controller takes on its admin queue (8 KiB; the I/O queue
/// size comes from Identify Controller IOCCSZ).
const ADMIN_IN_CAPSULE: usize = 8192;
/// Default entries of an I/O queue pair (clamped to CAP.MQES+1 and MAXCMD).
pub const DEFAULT_TCP_QUEUE_DEPTH: u32 = 128;
/// Largest transfer of one command when the controller reports no MDTS limit.
pub const MAX_TRANSFER: usize = 1 << 20;
/// Unit of IOCCSZ (NVMe Base 2.0 Figure 275: 16 bytes).
const CCSZ_UNIT: usize = 16;
/// Smallest queue (entries) CAP.MQES may allow: MQES is 0's based, at least 1.
const MIN_QUEUE_ENTRIES: u32 = 2;

/// State shared by the controller handle and its queue pairs.
pub(crate) struct Inner {
    pub trid: TransportId,
    pub addr: SocketAddr,
    pub name: Arc<str>,
    pub hostnqn: String,
    pub options: TcpOptions,
    pub want_hdgst: bool,
    pub want_ddgst: bool,
    pub admin: Mutex<Admin>,
    /// Controller id of the current association (a reset connects a new one).
    pub cntlid: AtomicU16,
    /// `STATE_FAILED`, `STATE_RESETTING` and the reset generation above them: queue pairs
    /// compare it with their copy on every submission and poll (one load).
    pub state: Arc<AtomicU64>,
    /// One reset at a time.
    pub reset_lock: Mutex<()>,
    /// Why the association of a generation was declared lost ([`STATE_LOST`]).
    pub lost: Mutex<Option<(u64, Arc<TcpError>)>>,
    /// The newest generation whose reset ended the old association without proof that its
    /// commands stopped (no CSTS.RDY = 0 after CC.EN = 0, no CQT to wait out): requests sent
    /// on an association older than it may still run on the target.
    pub unconfirmed: AtomicU64,
    pub cap: Cap,
    pub version: Version,
    pub identify: IdentifyController,
    pub namespaces: Vec<Namespace>,
    pub unsupported: Vec<(u32, String)>,
    pub mapper: Arc<dyn DmaMapper>,
    pub io_in_capsule: usize,
    pub max_transfer: usize,
    pub max_entries: u32,
    pub granted: u16,
    pub free_qids: Mutex<Vec<u16>>,
}

/// State word bits shared with PCIe (`nvme_core::state`): the last reset failed, the
/// controller is unusable until reset again; a reset is running.
pub(crate) use nvme_core::state::{STATE_FAILED, STATE_RESETTING};
/// State word bit: the current association was declared lost (keep-alive expiry, admin
/// connection failed); queue pairs fail their requests with the reason (`Inner::lost`).
pub(crate) const STATE_LOST: u64 = nvme_core::state::STATE_TRANSPORT_FLAGS;
/// State word increment of one reset generation (the bits above the flags).
pub(crate) const STATE_GENERATION: u64 = STATE_LOST << 1;

/// The reset generation of a state word (flags masked off).
pub(crate) fn generation(state: u64) -> u64 {
    state & !(STATE_GENERATION - 1)
}

/// The admin queue and its keep-alive state.
pub(crate) struct Admin {
    pub q: Queue,
    pub ka: KeepAlive,
    /// Abort outcomes (kept across resets).
    pub aborts: AbortStats,
    /// Aborts submitted and not yet completed.
    aborts_outstanding: u32,
}

/// Marks the asynchronous Keep Alive's completion.
const KEEP_ALIVE_TAG: u64 = u64::MAX;
/// Marks an asynchronous Abort's completion (queue id and command id in the low bits).
const ABORT_TAG: u64 = 1 << 62;

/// An NVMe/TCP controller (the admin queue's connection). `Send + Sync`; queue pairs keep
/// it alive.
pub struct TcpController {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for TcpController {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TcpController")
            .field("name", &self.inner.name)
            .field("cntlid", &self.inner.cntlid.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl TcpController {
    /// Name for messages: `ADDRESS:PORT/SUBNQN`.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The transport id this controller was reached by.
    pub fn transport_id(&self) -> &TransportId {
        &self.inner.trid
    }

    /// Host NQN presented in Connect.
    pub fn hostnqn(&self) -> &str {
        &self.inner.hostnqn
    }

    /// Controller id the target assigned (to the current association: a reset connects a
    /// new one, which may get another id).
    pub fn cntlid(&self) -> u16 {
        self.inner.cntlid.load(Ordering::Acquire)
    }

    /// Identify Controller data.
    pub fn identify(&self) -> &IdentifyController {
        &self.inner.identify
    }

    /// CAP property.
    pub fn cap(&self) -> Cap {
        self.inner.cap
    }

    /// VS property.
    pub fn version(&self) -> Version {
        self.inner.version
    }

    /// Usable active namespaces.
    pub fn namespaces(&self) -> Vec<Namespace> {
        self.inner.namespaces.clone()
    }

    /// Active namespaces that cannot be used, with the reason.
    pub fn unsupported_namespaces(&self) -> Vec<(u32, String)> {
        self.inner.unsupported.clone()
    }

    /// The active namespace `nsid`.
    pub fn namespace(&self, nsid: u32) -> Result<Namespace> {
        if let Some(ns) = self.inner.namespaces.iter().find(|n| n.nsid() == nsid) {
            return Ok(ns.clone());
        }
        if let Some((_, reason)) = self.inner.unsupported.iter().find(|(n, _)| *n == nsid) {
            return Err(Error::UnsupportedNamespace {
                nsid,
                reason: reason.clone(),
            });
        }
        Err(Error::InactiveNamespace {
            nsid,
            active: self.inner.namespaces.iter().map(|n| n.nsid()).collect(),
        })
    }

    /// I/O queue pairs the controller granted.
    pub fn io_queue_pairs(&self) -> u16 {
        self.inner.granted
    }

    /// Largest transfer of one command in bytes.
    pub fn max_transfer_bytes(&self) -> usize {
        self.inner.max_transfer
    }

    /// Largest I/O queue (entries): CAP.MQES+1, bounded by MAXCMD.
    pub fn max_queue_entries(&self) -> u32 {
        self.inner.max_entries
    }

    /// Largest write sent as in-capsule data on I/O queues (IOCCSZ * 16 - 64 bytes);
    /// larger writes wait for R2T.
    pub fn in_capsule_data_size(&self) -> usize {
        self.inner.io_in_capsule
    }

    /// The buffer allocator (ordinary memory: the transport copies to the socket).
    pub fn dma(&self) -> &Arc<dyn DmaMapper> {
        &self.inner.mapper
    }

    /// A buffer of at least `len` bytes for I/O on this controller.
    pub fn alloc_buffer(&self, len: usize) -> Result<DmaBuffer> {
        Ok(DmaBuffer::allocate(&self.inner.mapper, len)?)
    }

    /// Sends a Keep Alive if one is due and reaps admin completions; declares the association
    /// lost when a Keep Alive went unanswered for half the KATO or none was answered for a
    /// whole KATO (`crate::keep_alive`). Queue pairs do this from `poll`; call it when no
    /// queue pair is polled for longer than a quarter of the KATO.
    pub fn keep_alive(&self) {
        self.inner.keep_alive_tick(false);
    }

    /// Whether the controller is unusable until [`TcpController::reset`]: the admin
    /// connection has failed (target gone, keep-alive timeout expired, a Keep Alive not
    /// answered in time) or the last reset failed.
    pub fn is_failed(&self) -> bool {
        self.inner.check_liveness();
        self.inner.state.load(Ordering::Acquire) & (STATE_FAILED | STATE_LOST) != 0
            || self
                .inner
                .admin
                .lock()
                .map(|a| a.q.failed.is_some())
                .unwrap_or(true)
    }

    /// Resets the controller over the fabric, the way the PCIe `Controller::reset` does it
    /// through registers (NVMe Base 2.0 §3.7.2 and §3.3.2.1 for fabrics, as SPDK's and
    /// Linux's NVMe/TCP hosts do): works after a lost connection as well as on request.
    ///
    /// 1. A new reset generation is published with the "resetting" flag: from now on queue
    ///    pairs refuse submissions with the retryable `Error::Resetting`, and each one, at its
    ///    next submission or poll, closes its connection and keeps what was in flight until
    ///    the reset is done.
    /// 2. If the old admin connection still answers, CC.EN = 0 by Property Set and CSTS.RDY
    ///    = 0 read back (each bounded to 1 s): the old controller aborted everything it held.
    ///    The connection closes. Without that proof, a Command Quiesce Time (Identify CQT) is
    ///    waited out from the close before step 4; without either, the old commands' outcome
    ///    is unknown (`crate::reset`).
    /// 3. A new admin connection: ICReq/ICResp, Fabrics Connect (a new association with a
    ///    dynamic controller id), CC.EN = 1 and CSTS.RDY = 1 within CAP.TO, Set Features
    ///    Number of Queues (at least the queues granted at bring-up).
    /// 4. The generation is published as ready. Each queue pair, at its next submission or
    ///    poll, settles what it kept: writes whose outcome is unknown complete with the
    ///    non-retryable `Error::OutcomeUnknown` (never resubmitted); the others complete with
    ///    the retryable `Error::Reset` (buffers returned) or, with
    ///    `QueuePairOptions::resubmit_after_reset`, are sent again once the pair has
    ///    reconnected (ICReq, Connect with its queue id and the new controller id).
    ///
    /// On failure (nothing listening, Connect refused, not ready in time) the error says
    /// why, the controller is marked failed ([`TcpController::is_failed`]), queue pairs
    /// refuse submissions with `Error::Failed`, and `reset` may be called again.
    pub fn reset(&self) -> Result<()> {
        self.inner.reset()
    }

    /// Resets started so far, successful or not (the reset generation).
    pub fn resets(&self) -> u64 {
        generation(self.inner.state.load(Ordering::Acquire)) / STATE_GENERATION
    }

    /// Abort outcomes and timeout-driven resets so far (the PCIe controller's counters).
    pub fn abort_stats(&self) -> AbortStats {
        let mut admin = self.inner.admin.lock().unwrap_or_else(|p| p.into_inner());
        admin.reap();
        admin.aborts
    }
}

impl Inner {
    /// The state word (see [`STATE_GENERATION`]).
    pub(crate) fn state(&self) -> u64 {
        self.state.load(Ordering::Acquire)
    }
}
