//! The NVMe/TCP controller: admin queue bring-up over Fabrics (Connect, Property Get/Set
//! for CAP, VS, CC.EN and CSTS.RDY), Identify, Keep Alive, and I/O queue pairs each on a
//! TCP connection of its own.

use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicU16, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nvme_core::{
    AbortStats, DmaBuffer, DmaMapper, Error, HostMemory, Namespace, QueuePairOptions, Result,
    TimeoutAction,
};
use nvme_spec::command::{self, Cns};
use nvme_spec::fabrics::{self, ConnectData};
use nvme_spec::identify::IDENTIFY_DATA_SIZE;
use nvme_spec::log::{ERROR_LOG_ENTRY_SIZE, NSID_BROADCAST, SMART_LOG_SIZE};
use nvme_spec::opcode::log_page;
use nvme_spec::queue::{CQES_LOG2, SQES_LOG2, SQE_SIZE};
use nvme_spec::regs::{self, Cap, Cc, Csts, ShutdownNotification, Version};
use nvme_spec::{ErrorLogEntry, SmartLog};
use nvme_spec::{IdentifyController, IdentifyNamespace, NamespaceList, StatusCodeType};

use crate::error::TcpError;
use crate::keep_alive::KeepAlive;
use crate::options::check_queue_pair_options;
use crate::qpair::TcpQueuePair;
use crate::queue::{handshake, Negotiated, Queue};
use crate::trid::TransportId;

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

/// Options of an NVMe/TCP connection.
#[derive(Clone, Debug)]
pub struct TcpOptions {
    /// Host NQN (a transport id's `hostnqn:` wins); default derived from `hostid`.
    pub hostnqn: Option<String>,
    /// Host identifier sent in every Connect.
    pub hostid: [u8; 16],
    /// Keep Alive Timeout asked of the controller (0 turns it off). Keep Alive commands go
    /// out every half of it from the owner threads' polls ([`TcpQueuePair::poll`]) or
    /// [`TcpController::keep_alive`]; one unanswered for half of it, or none answered for a
    /// whole KATO, declares the association lost (every request fails with
    /// `Error::Transport`, [`TcpController::is_failed`], [`TcpController::reset`] recovers).
    pub kato: Duration,
    /// I/O queue pairs to ask for.
    pub io_queues: u16,
    /// Limit for connecting, the handshake and each admin command.
    pub timeout: Duration,
    /// Ask for header digests (also `hdgst:1` in the transport id).
    pub header_digest: bool,
    /// Ask for data digests (also `ddgst:1` in the transport id).
    pub data_digest: bool,
    /// What an I/O queue pair does about a command that outlives its timeout (the same
    /// policy as the PCIe controller's `ControllerOptions::timeout_action`):
    /// [`TimeoutAction::AbortThenReset`] (default) sends an Abort on the admin queue and, if
    /// the command is still outstanding a further timeout later, resets the controller
    /// ([`TcpController::reset`]); [`TimeoutAction::Abort`] instead closes and reconnects only
    /// that queue pair's connection; [`TimeoutAction::None`] closes the connection at once
    /// (the command fails with `Error::Timeout`, the others with `Error::Transport`).
    pub timeout_action: TimeoutAction,
}

impl Default for TcpOptions {
    fn default() -> Self {
        use std::hash::{BuildHasher, Hasher};
        let mut hostid = [0u8; 16];
        for (i, chunk) in hostid.chunks_mut(8).enumerate() {
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_usize(i);
            h.write_u32(std::process::id());
            chunk.copy_from_slice(&h.finish().to_le_bytes());
        }
        Self {
            hostnqn: None,
            hostid,
            kato: Duration::from_secs(10),
            io_queues: 4,
            timeout: Duration::from_secs(10),
            header_digest: false,
            data_digest: false,
            timeout_action: TimeoutAction::AbortThenReset,
        }
    }
}

fn uuid_text(id: &[u8; 16]) -> String {
    let h: String = id.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

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

impl Admin {
    /// Runs one admin command to completion: completion dword 0 (and dword 1) and the buffer.
    pub(crate) fn execute(
        &mut self,
        sqe: nvme_spec::SubmissionEntry,
        buffer: Option<DmaBuffer>,
        len: usize,
        to_device: bool,
    ) -> std::result::Result<(u32, u32, Option<DmaBuffer>), Error> {
        self.q
            .submit(sqe, buffer, len, to_device, 0, true)
            .map_err(|f| f.error)?;
        let deadline = Instant::now() + self.q.timeout;
        let c = self.q.wait_sync(deadline, "waiting for an admin command");
        self.reap();
        if !matches!(c.result, Err(Error::Transport { .. })) {
            self.ka.heard(Instant::now());
        }
        let dw0 = c.result?;
        Ok((dw0, self.q.sync_dw1, c.buffer))
    }

    /// Consumes asynchronous admin completions (Keep Alive, Abort).
    pub(crate) fn reap(&mut self) {
        let name = self.q.controller.clone();
        let aborts = &mut self.aborts;
        let outstanding = &mut self.aborts_outstanding;
        let ka = &mut self.ka;
        self.q.poll(usize::MAX, |c| {
            if c.user_data == KEEP_ALIVE_TAG {
                match c.result {
                    // The queue failed: no answer came.
                    Err(Error::Transport { .. }) => ka.dropped(),
                    Err(e) => {
                        log::warn!("{name}: Keep Alive failed: {e}");
                        ka.answered(Instant::now());
                    }
                    Ok(_) => ka.answered(Instant::now()),
                }
            } else if c.user_data & ABORT_TAG != 0 {
                *outstanding = outstanding.saturating_sub(1);
                let (qid, cid) = ((c.user_data >> 16) as u16, c.user_data as u16);
                match c.result {
                    Ok(dw0) if dw0 & command::ABORT_DW0_NOT_ABORTED != 0 => {
                        log::warn!("{name}: Abort of queue {qid} command {cid:#x} declined");
                        aborts.not_aborted += 1;
                    }
                    Ok(_) => aborts.aborted += 1,
                    Err(e) => {
                        log::warn!("{name}: Abort of queue {qid} command {cid:#x} failed: {e}");
                        aborts.failed += 1;
                    }
                }
            }
        });
    }

    /// Sends a Keep Alive (asynchronously: its answer is picked up by [`Admin::reap`]).
    pub(crate) fn send_keep_alive(&mut self, now: Instant) {
        if self.ka.is_outstanding() || self.q.failed.is_some() {
            return;
        }
        if self
            .q
            .submit(fabrics::keep_alive(), None, 0, false, KEEP_ALIVE_TAG, false)
            .is_ok()
        {
            self.ka.sent(now);
        }
    }
}

/// Explains a refused Connect.
fn connect_refused(q: &Queue, subnqn: &str, hostnqn: &str, error: Error, dw0: u32) -> Error {
    let Error::Command { status, .. } = &error else {
        return error;
    };
    let reason = if status.sct() == StatusCodeType::CommandSpecific {
        match status.sc() {
            fabrics::status::CONNECT_INVALID_PARAMETERS => {
                let (iattr, ipo) = fabrics::connect_invalid_parameter(dw0);
                match (iattr, ipo) {
                    (1, fabrics::CONNECT_DATA_SUBNQN_OFFSET) => format!(
                        "the target has no subsystem `{subnqn}` on this port: check subnqn, and \
                         that the subsystem is linked to the port (nvmet: ln -s \
                         /sys/kernel/config/nvmet/subsystems/{subnqn} \
                         /sys/kernel/config/nvmet/ports/N/subsystems/)"
                    ),
                    (1, fabrics::CONNECT_DATA_HOSTNQN_OFFSET) => format!(
                        "host NQN `{hostnqn}` is not accepted: give hostnqn: in the transport id"
                    ),
                    _ => format!(
                        "Connect Invalid Parameters (parameter at byte {ipo} of the {})",
                        if iattr == 1 { "Connect data" } else { "command" }
                    ),
                }
            }
            fabrics::status::CONNECT_INVALID_HOST => format!(
                "host `{hostnqn}` may not use this subsystem: allow it on the target (nvmet: echo 1 > \
                 /sys/kernel/config/nvmet/subsystems/{subnqn}/attr_allow_any_host, or add the host)"
            ),
            fabrics::status::CONTROLLER_BUSY => "controller busy: try again later".into(),
            _ => status.to_string(),
        }
    } else {
        status.to_string()
    };
    Error::Transport {
        controller: q.controller.to_string(),
        source: Arc::new(TcpError::ConnectRefused {
            addr: q.addr,
            qid: q.qid,
            subnqn: subnqn.to_owned(),
            reason,
        }),
    }
}

/// Fabrics Connect on a fresh queue; returns the controller id.
#[allow(clippy::too_many_arguments)]
pub(crate) fn connect_queue(
    q: &mut Queue,
    mapper: &Arc<dyn DmaMapper>,
    entries: u16,
    kato: Duration,
    cntlid: u16,
    subnqn: &str,
    hostnqn: &str,
    hostid: [u8; 16],
) -> Result<u16> {
    let data = ConnectData::new(
        hostid,
        cntlid,
        fabrics::nqn_field(subnqn).ok_or_else(|| {
            Error::InvalidRequest(format!("subsystem NQN `{subnqn}` is too long"))
        })?,
        fabrics::nqn_field(hostnqn)
            .ok_or_else(|| Error::InvalidRequest(format!("host NQN `{hostnqn}` is too long")))?,
    );
    let bytes = data.to_bytes();
    let mut buf = DmaBuffer::allocate(mapper, bytes.len())?;
    buf[..bytes.len()].copy_from_slice(&bytes);
    let kato_ms = u32::try_from(kato.as_millis()).unwrap_or(u32::MAX);
    // I/O queues run without SQ flow control: this host never waits on SQ head pointers (it
    // keeps at most entries - 1 commands outstanding), and the target may then finish reads
    // with the C2HData SUCCESS flag, saving a response capsule per read (as SPDK does).
    let (cattr, kato_ms) = if q.qid == 0 {
        (0, kato_ms)
    } else {
        (fabrics::CATTR_DISABLE_SQ_FLOW_CONTROL, 0)
    };
    let sqe = fabrics::connect(q.qid, entries, cattr, kato_ms);
    q.submit(sqe, Some(buf), bytes.len(), true, 0, true)
        .map_err(|f| f.error)?;
    let deadline = Instant::now() + q.timeout;
    let c = q.wait_sync(deadline, "waiting for the Connect response");
    // A refused Connect names the bad parameter in dword 0, which `Error::Command` does not
    // carry: the queue keeps it for synchronous commands.
    match c.result {
        Ok(dw0) => Ok(fabrics::connect_cntlid(dw0)),
        Err(e) => Err(connect_refused(q, subnqn, hostnqn, e, q.sync_dw0)),
    }
}

impl Admin {
    pub(crate) fn property_get(&mut self, offset: usize, eight: bool) -> Result<u64> {
        let (dw0, dw1, _) =
            self.execute(fabrics::property_get(offset as u32, eight), None, 0, false)?;
        Ok(if eight {
            u64::from(dw0) | u64::from(dw1) << 32
        } else {
            u64::from(dw0)
        })
    }

    pub(crate) fn property_set(&mut self, offset: usize, value: u32) -> Result<()> {
        self.execute(fabrics::property_set(offset as u32, value), None, 0, false)?;
        Ok(())
    }

    fn identify(
        &mut self,
        mapper: &Arc<dyn DmaMapper>,
        cns: Cns,
        nsid: u32,
    ) -> Result<[u8; IDENTIFY_DATA_SIZE]> {
        let buf = DmaBuffer::allocate(mapper, IDENTIFY_DATA_SIZE)?;
        let (_, _, buf) = self.execute(
            command::identify(cns, nsid),
            Some(buf),
            IDENTIFY_DATA_SIZE,
            false,
        )?;
        let buf = buf.expect("a completed read returns its buffer");
        Ok(buf[..IDENTIFY_DATA_SIZE].try_into().expect("4096 bytes"))
    }
}

/// What bring-up learns about the controller.
struct BroughtUp {
    cap: Cap,
    version: Version,
    identify: IdentifyController,
    namespaces: Vec<Namespace>,
    unsupported: Vec<(u32, String)>,
    io_in_capsule: usize,
    max_transfer: usize,
    max_entries: u32,
    granted: u16,
}

/// The CC value this host enables a controller with (NVM command set, 4 KiB pages, 64-byte
/// SQ and 16-byte CQ entries).
pub(crate) fn enabled_cc() -> Cc {
    Cc(0)
        .with_css(regs::CC_CSS_NVM)
        .with_mps(0)
        .with_iosqes(SQES_LOG2)
        .with_iocqes(CQES_LOG2)
        .with_en(true)
}

/// Waits (Property Get of CSTS every 10 ms) until CSTS.RDY reads `ready`, within CAP.TO
/// (at least 500 ms).
pub(crate) fn wait_ready(admin: &mut Admin, cap: Cap, ready: bool) -> Result<()> {
    let name = admin.q.controller.to_string();
    let limit = cap.timeout().max(Duration::from_millis(500));
    let deadline = Instant::now() + limit;
    loop {
        let csts = Csts(admin.property_get(regs::CSTS, false)? as u32);
        if csts.cfs() {
            return Err(Error::ControllerFatal { controller: name });
        }
        if csts.rdy() == ready {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(Error::NotReady {
                controller: name,
                state: if ready { "ready" } else { "disabled" },
                timeout: limit,
            });
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Controller enable over Fabrics (NVMe Base 2.0 §3.5.2 and §3.7.2): CAP and VS by Property
/// Get; a controller found enabled is first disabled (CC.EN = 0, CSTS.RDY = 0 awaited, a
/// controller reset); then CC.EN = 1 and CSTS.RDY = 1 awaited within CAP.TO.
pub(crate) fn enable(admin: &mut Admin) -> Result<(Cap, Version)> {
    let cap = Cap(admin.property_get(regs::CAP, true)?);
    let version = Version(admin.property_get(regs::VS, false)? as u32);
    let cc = Cc(admin.property_get(regs::CC, false)? as u32);
    if cc.en() {
        admin.property_set(regs::CC, cc.with_en(false).0)?;
        wait_ready(admin, cap, false)?;
    }
    admin.property_set(regs::CC, enabled_cc().0)?;
    wait_ready(admin, cap, true)?;
    Ok((cap, version))
}

/// Enable, then Identify and queues.
fn bring_up(
    admin: &mut Admin,
    mapper: &Arc<dyn DmaMapper>,
    options: &TcpOptions,
    discovery: bool,
) -> Result<BroughtUp> {
    let name = admin.q.controller.to_string();
    let (cap, version) = enable(admin)?;
    let identify = IdentifyController::from_bytes(&admin.identify(mapper, Cns::Controller, 0)?);
    let page = 1usize << (regs::PAGE_SIZE_SHIFT_BASE + u32::from(cap.mpsmin()));
    let max_transfer = identify
        .mdts_bytes(page)
        .unwrap_or(MAX_TRANSFER)
        .min(MAX_TRANSFER);
    let io_in_capsule = (identify.ioccsz as usize * CCSZ_UNIT).saturating_sub(SQE_SIZE);
    // CAP.MQES is 0's based with a minimum of 1, two entries (NVMe Base 2.0 §3.1.4.1):
    // a controller below that leaves no usable slot in any queue.
    if cap.max_queue_entries() < MIN_QUEUE_ENTRIES {
        return Err(Error::Unsupported {
            controller: name,
            what: format!(
                "CAP.MQES={} allows queues of {} entry; NVMe queues need at least \
                 {MIN_QUEUE_ENTRIES}",
                cap.mqes(),
                cap.max_queue_entries()
            ),
        });
    }
    let mut max_entries = cap.max_queue_entries();
    if identify.maxcmd != 0 {
        // MAXCMD counts commands outstanding; a queue of n entries holds n - 1 of them
        // (one entry is kept free, as on PCIe), so MAXCMD allows MAXCMD + 1 entries.
        max_entries = max_entries.min(u32::from(identify.maxcmd) + 1);
    }
    if discovery {
        // A discovery controller has no I/O queues and no namespaces (§3.1.2.3).
        return Ok(BroughtUp {
            cap,
            version,
            identify,
            namespaces: Vec::new(),
            unsupported: Vec::new(),
            io_in_capsule,
            max_transfer,
            max_entries,
            granted: 0,
        });
    }
    let wanted = options.io_queues.max(1);
    let (dw0, _, _) = admin.execute(
        command::set_number_of_queues(wanted, wanted),
        None,
        0,
        false,
    )?;
    let (sq, cq) = command::number_of_queues_allocated(dw0);
    let granted = sq.min(cq).min(wanted);
    let list = NamespaceList::from_bytes(&admin.identify(mapper, Cns::ActiveNamespaceList, 0)?);
    let mut namespaces = Vec::new();
    let mut unsupported = Vec::new();
    for nsid in list.active() {
        let data = IdentifyNamespace::from_bytes(&admin.identify(mapper, Cns::Namespace, nsid)?);
        match Namespace::from_identify(nsid, data, max_transfer) {
            Ok(ns) => namespaces.push(ns),
            Err(why) => {
                log::warn!("{name}: namespace {nsid} skipped: {why}");
                unsupported.push((nsid, why));
            }
        }
    }
    Ok(BroughtUp {
        cap,
        version,
        identify,
        namespaces,
        unsupported,
        io_in_capsule,
        max_transfer,
        max_entries,
        granted,
    })
}

/// A connected admin queue: the queue, its buffer allocator, the controller id, the host NQN
/// presented, and what ICResp agreed.
type OpenedAdmin = (Admin, u16, String, Negotiated);

/// Connects the admin queue: TCP connection, ICReq/ICResp, Fabrics Connect (a new
/// association: dynamic controller id).
pub(crate) fn open_admin(
    trid: &TransportId,
    options: &TcpOptions,
    mapper: &Arc<dyn DmaMapper>,
) -> Result<OpenedAdmin> {
    let addr = trid.socket_addr();
    let name: Arc<str> = format!("{addr}/{}", trid.subnqn).into();
    let transport = |e: TcpError| Error::Transport {
        controller: name.to_string(),
        source: Arc::new(e),
    };
    let hostnqn = trid
        .hostnqn
        .clone()
        .or_else(|| options.hostnqn.clone())
        .unwrap_or_else(|| {
            format!(
                "nqn.2014-08.org.nvmexpress:uuid:{}",
                uuid_text(&options.hostid)
            )
        });
    let want_hdgst = trid.hdgst || options.header_digest;
    let want_ddgst = trid.ddgst || options.data_digest;
    let (stream, neg) =
        handshake(addr, 0, want_hdgst, want_ddgst, options.timeout).map_err(transport)?;
    let mut q = Queue::new(
        stream,
        addr,
        0,
        name.clone(),
        neg,
        ADMIN_QUEUE_ENTRIES - 1,
        ADMIN_IN_CAPSULE,
        options.timeout,
    );
    let cntlid = connect_queue(
        &mut q,
        mapper,
        ADMIN_QUEUE_ENTRIES,
        options.kato,
        fabrics::CNTLID_DYNAMIC,
        &trid.subnqn,
        &hostnqn,
        options.hostid,
    )?;
    Ok((
        Admin {
            q,
            ka: KeepAlive::new(options.kato, Instant::now()),
            aborts: AbortStats::default(),
            aborts_outstanding: 0,
        },
        cntlid,
        hostnqn,
        neg,
    ))
}

/// Normal shutdown notification (CC.SHN through Property Set, best effort within 1 s), then
/// the connection closes.
fn shutdown(admin: &mut Admin, name: &str) {
    if admin.q.failed.is_none() {
        admin.q.timeout = Duration::from_secs(1);
        let cc = Cc(0)
            .with_iosqes(SQES_LOG2)
            .with_iocqes(CQES_LOG2)
            .with_en(true)
            .with_shn(ShutdownNotification::Normal);
        if let Err(e) = admin.property_set(regs::CC, cc.0) {
            log::debug!("{name}: shutdown notification: {e}");
        }
    }
    admin.q.close();
}

/// One record of a discovery log page: a subsystem (or referral) and where to reach it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiscoveryEntry {
    /// Transport type (`nvme_spec::fabrics::trtype`).
    pub trtype: u8,
    /// Address family (`nvme_spec::fabrics::adrfam`).
    pub adrfam: u8,
    /// Subsystem type (`nvme_spec::fabrics::subtype`).
    pub subtype: u8,
    /// Port id.
    pub portid: u16,
    /// Transport service id (the port).
    pub trsvcid: String,
    /// Transport address.
    pub traddr: String,
    /// Subsystem NQN.
    pub subnqn: String,
}

impl DiscoveryEntry {
    /// The entry as an SPDK-style transport id.
    pub fn transport_id(&self) -> String {
        let adrfam = match self.adrfam {
            fabrics::adrfam::IPV4 => "IPv4",
            fabrics::adrfam::IPV6 => "IPv6",
            _ => "unknown",
        };
        format!(
            "trtype:{} adrfam:{adrfam} traddr:{} trsvcid:{} subnqn:{}",
            fabrics::trtype::name(self.trtype),
            self.traddr,
            self.trsvcid,
            self.subnqn
        )
    }
}

/// Most discovery records read (a log page of 1 MiB).
const MAX_DISCOVERY_RECORDS: u64 = 1023;

/// Lists what the discovery controller at `trid` (its subnqn is ignored: the discovery NQN is
/// used) knows: Connect, CC.EN/CSTS.RDY, then the Discovery log page (LID 70h).
pub fn discover(trid: &TransportId, options: TcpOptions) -> Result<Vec<DiscoveryEntry>> {
    let mut trid = trid.clone();
    trid.subnqn = fabrics::DISCOVERY_NQN.to_owned();
    let mapper: Arc<dyn DmaMapper> = Arc::new(HostMemory::new());
    let (mut admin, _, _, _) = open_admin(&trid, &options, &mapper)?;
    let name = admin.q.controller.clone();
    let result = (|| {
        bring_up(&mut admin, &mapper, &options, true)?;
        let read = |admin: &mut Admin, bytes: usize| -> Result<DmaBuffer> {
            let buf = DmaBuffer::allocate(&mapper, bytes)?;
            let sqe = command::get_log_page(fabrics::DISCOVERY_LOG_LID, 0, bytes as u32);
            let (_, _, buf) = admin.execute(sqe, Some(buf), bytes, false)?;
            Ok(buf.expect("a completed read returns its buffer"))
        };
        let size = fabrics::DISCOVERY_RECORD_SIZE;
        let mut page = read(&mut admin, 4 * size)?;
        let header =
            fabrics::DiscoveryLogHeader::from_bytes(page[..size].try_into().expect("1024 bytes"));
        let records = header.numrec.min(MAX_DISCOVERY_RECORDS) as usize;
        if records > 3 {
            page = read(&mut admin, (records + 1) * size)?;
        }
        Ok((1..=records)
            .map(|i| {
                let e = fabrics::DiscoveryLogEntry::from_bytes(
                    page[i * size..(i + 1) * size]
                        .try_into()
                        .expect("1024 bytes"),
                );
                DiscoveryEntry {
                    trtype: e.trtype,
                    adrfam: e.adrfam,
                    subtype: e.subtype,
                    portid: e.portid,
                    trsvcid: fabrics::field_text(&e.trsvcid),
                    traddr: fabrics::field_text(&e.traddr),
                    subnqn: fabrics::field_text(&e.subnqn),
                }
            })
            .collect())
    })();
    shutdown(&mut admin, &name);
    result
}

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
    /// Connects to the subsystem `trid` names: TCP connection, ICReq/ICResp, Fabrics
    /// Connect of the admin queue, CC.EN = 1 and CSTS.RDY = 1 through Property Set/Get,
    /// Identify Controller, Set Features Number of Queues and Identify of every active
    /// namespace.
    pub fn connect(trid: &TransportId, options: TcpOptions) -> Result<Self> {
        if trid.is_discovery() {
            return Err(Error::InvalidRequest(format!(
                "{} is the discovery subsystem, which has no namespaces: list the subsystems \
                 with `nvme-identify trtype:TCP traddr:{} trsvcid:{}` (TcpController::discover) \
                 and give one of them as subnqn:",
                trid.subnqn, trid.traddr, trid.trsvcid
            )));
        }
        let mapper: Arc<dyn DmaMapper> = Arc::new(HostMemory::new());
        let (mut admin, cntlid, hostnqn, neg) = open_admin(trid, &options, &mapper)?;
        let addr = trid.socket_addr();
        let name = admin.q.controller.clone();
        let want_hdgst = trid.hdgst || options.header_digest;
        let want_ddgst = trid.ddgst || options.data_digest;
        let up = bring_up(&mut admin, &mapper, &options, false)?;
        log::info!(
            "{name}: connected, controller id {cntlid}, {} namespace(s), {} I/O queue(s), \
             in-capsule data up to {} bytes, digests header {} data {}",
            up.namespaces.len(),
            up.granted,
            up.io_in_capsule,
            neg.hdgst,
            neg.ddgst
        );
        let inner = Inner {
            trid: trid.clone(),
            addr,
            name,
            hostnqn,
            want_hdgst,
            want_ddgst,
            admin: Mutex::new(admin),
            cntlid: AtomicU16::new(cntlid),
            state: Arc::new(AtomicU64::new(0)),
            reset_lock: Mutex::new(()),
            lost: Mutex::new(None),
            unconfirmed: AtomicU64::new(0),
            cap: up.cap,
            version: up.version,
            identify: up.identify,
            namespaces: up.namespaces,
            unsupported: up.unsupported,
            mapper,
            io_in_capsule: up.io_in_capsule,
            max_transfer: up.max_transfer,
            max_entries: up.max_entries,
            granted: up.granted,
            free_qids: Mutex::new((1..=up.granted).rev().collect()),
            options,
        };
        Ok(TcpController {
            inner: Arc::new(inner),
        })
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

    /// Reads the SMART / Health Information log page (Log Identifier 02h, NVMe Base 2.0
    /// §5.16.1.3) by Get Log Page on the admin queue. `nsid` is
    /// [`NSID_BROADCAST`] (or 0) for the whole controller; a namespace
    /// ID asks for that namespace's data, which controllers without per-namespace SMART
    /// refuse with Invalid Field in Command (`Error::Command`).
    pub fn smart_log(&self, nsid: u32) -> Result<SmartLog> {
        let page = self
            .inner
            .read_log(log_page::SMART_HEALTH, nsid, SMART_LOG_SIZE)?;
        let bytes: &[u8; SMART_LOG_SIZE] = page[..SMART_LOG_SIZE]
            .try_into()
            .expect("a buffer of the page's size");
        Ok(SmartLog::from_bytes(bytes))
    }

    /// Reads the newest `entries` Error Information log entries (Log Identifier 01h, NVMe
    /// Base 2.0 §5.16.1.2), newest first, leaving out unused ones (Error Count 0). `entries`
    /// is capped by what the controller keeps (Identify ELPE + 1) and by what one command can
    /// transfer; 0 reads nothing.
    pub fn error_log(&self, entries: usize) -> Result<Vec<ErrorLogEntry>> {
        let kept = usize::from(self.inner.identify.elpe) + 1;
        let fit = self.inner.max_transfer / ERROR_LOG_ENTRY_SIZE;
        let count = entries.min(kept).min(fit);
        if count == 0 {
            return Ok(Vec::new());
        }
        let page = self.inner.read_log(
            log_page::ERROR_INFORMATION,
            NSID_BROADCAST,
            count * ERROR_LOG_ENTRY_SIZE,
        )?;
        Ok(
            ErrorLogEntry::parse_entries(&page[..count * ERROR_LOG_ENTRY_SIZE])
                .filter(ErrorLogEntry::is_valid)
                .collect(),
        )
    }

    /// Creates an I/O queue pair on a new connection: ICReq/ICResp, then Connect with this
    /// controller's id. `options.depth` 0 means [`DEFAULT_TCP_QUEUE_DEPTH`] (clamped);
    /// `options.timeout` is the per-command timeout. The PCIe-only options
    /// (`QueuePairOptions::interrupts`, `QueuePairOptions::software_queue`) set to anything
    /// but their default are refused with `Error::UnsupportedOption`.
    pub fn create_queue_pair(&self, options: QueuePairOptions) -> Result<TcpQueuePair> {
        let inner = &self.inner;
        check_queue_pair_options(&inner.name, &options)?;
        let max = inner.max_entries.min(4096);
        let depth = match options.depth {
            0 => DEFAULT_TCP_QUEUE_DEPTH.min(max),
            d if (2..=max).contains(&d) => d,
            d => return Err(Error::QueueDepth { requested: d, max }),
        };
        let state = inner.state();
        if state & STATE_RESETTING != 0 {
            return Err(Error::Resetting {
                controller: inner.name.to_string(),
            });
        }
        if state & (STATE_FAILED | STATE_LOST) != 0 {
            return Err(Error::Failed {
                controller: inner.name.to_string(),
            });
        }
        let qid =
            inner
                .free_qids
                .lock()
                .expect("qid list lock")
                .pop()
                .ok_or(Error::NoQueuesLeft {
                    granted: inner.granted,
                })?;
        let (stream, neg) = match inner.connect_io(qid, depth) {
            Ok(v) => v,
            Err(e) => {
                inner.release_qid(qid);
                if inner.state() != state {
                    // A reset replaced the association meanwhile.
                    return Err(Error::Resetting {
                        controller: inner.name.to_string(),
                    });
                }
                return Err(e);
            }
        };
        let mut q = Queue::new(
            stream,
            inner.addr,
            qid,
            inner.name.clone(),
            neg,
            (depth - 1) as u16,
            inner.io_in_capsule,
            options.timeout,
        );
        q.abort_on_timeout = inner.options.timeout_action != TimeoutAction::None;
        q.state_watch = Some((inner.state.clone(), state));
        Ok(TcpQueuePair::new(q, inner.clone(), depth, &options, state))
    }
}

impl Inner {
    /// The state word (see [`STATE_GENERATION`]).
    pub(crate) fn state(&self) -> u64 {
        self.state.load(Ordering::Acquire)
    }

    /// A new connection for I/O queue `qid` of this controller's current association:
    /// ICReq/ICResp, then Fabrics Connect with the queue id and the controller id. Returns
    /// the connected socket and what ICResp agreed.
    pub(crate) fn connect_io(&self, qid: u16, depth: u32) -> Result<(TcpStream, Negotiated)> {
        let (stream, neg) = handshake(
            self.addr,
            qid,
            self.want_hdgst,
            self.want_ddgst,
            self.options.timeout,
        )
        .map_err(|e| Error::Transport {
            controller: self.name.to_string(),
            source: Arc::new(e),
        })?;
        // Connect runs on a one-slot queue of its own (the pair's slots may all hold
        // requests waiting to be sent again); the socket then moves to the pair. The target
        // sends nothing after the Connect response until it gets a command.
        let mut q = Queue::new(
            stream,
            self.addr,
            qid,
            self.name.clone(),
            neg,
            1,
            self.io_in_capsule,
            self.options.timeout,
        );
        connect_queue(
            &mut q,
            &self.mapper,
            depth as u16,
            Duration::ZERO,
            self.cntlid.load(Ordering::Acquire),
            &self.trid.subnqn,
            &self.hostnqn,
            self.options.hostid,
        )?;
        Ok((q.into_stream(), neg))
    }

    /// Sends an Abort for command `cid` of queue `qid` without waiting: the admin queue is
    /// only try-locked (a busy one means a retry at the next clock tick). Returns whether
    /// it went out.
    pub(crate) fn abort_async(&self, qid: u16, cid: u16) -> bool {
        if self.state() & (STATE_FAILED | STATE_RESETTING | STATE_LOST) != 0 {
            return false;
        }
        let Ok(mut admin) = self.admin.try_lock() else {
            return false;
        };
        admin.reap();
        // Abort Command Limit (Identify ACL, 0's based), and room on the admin queue.
        let limit = u32::from(self.identify.acl) + 1;
        if admin.aborts_outstanding >= limit || admin.q.failed.is_some() {
            return false;
        }
        let tag = ABORT_TAG | u64::from(qid) << 16 | u64::from(cid);
        if admin
            .q
            .submit(command::abort(qid, cid), None, 0, false, tag, false)
            .is_err()
        {
            return false;
        }
        admin.aborts_outstanding += 1;
        admin.aborts.sent += 1;
        log::warn!("{}: Abort sent for queue {qid} command {cid:#x}", self.name);
        true
    }

    /// Picks up admin completions (Aborts, Keep Alive) if the admin queue is free.
    pub(crate) fn poll_admin(&self) {
        if let Ok(mut admin) = self.admin.try_lock() {
            admin.reap();
        }
    }

    /// Counts a reset started because an aborted command stayed outstanding.
    pub(crate) fn count_timeout_reset(&self) {
        let mut admin = self.admin.lock().unwrap_or_else(|p| p.into_inner());
        admin.aborts.resets += 1;
    }

    /// Get Log Page `lid` for `nsid` from offset 0, `bytes` long (a non-zero multiple of
    /// 4 bytes).
    fn read_log(&self, lid: u8, nsid: u32, bytes: usize) -> Result<DmaBuffer> {
        let buf = DmaBuffer::allocate(&self.mapper, bytes)?;
        let mut admin = self.admin.lock().unwrap_or_else(|p| p.into_inner());
        let sqe = command::get_log_page(lid, nsid, bytes as u32);
        let (_, _, buf) = admin.execute(sqe, Some(buf), bytes, false)?;
        Ok(buf.expect("a completed read returns its buffer"))
    }

    pub(crate) fn release_qid(&self, qid: u16) {
        if let Ok(mut free) = self.free_qids.lock() {
            free.push(qid);
        }
    }
}

impl Drop for Inner {
    /// Normal shutdown (CC.SHN through Property Set), then the connection closes.
    fn drop(&mut self) {
        if let Ok(admin) = self.admin.get_mut() {
            shutdown(admin, &self.name);
        }
    }
}
