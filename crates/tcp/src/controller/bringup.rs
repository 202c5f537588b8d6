//! Bring-up and shutdown over Fabrics: CC.EN and CSTS.RDY by Property Set/Get, Identify
//! Controller and namespaces, Set Features Number of Queues, then `TcpController::connect`
//! that puts it together; the normal shutdown notification when the controller is dropped.
//!
//! INVARIANT: every wait for CSTS.RDY is bounded by CAP.TO (at least 500 ms) and CSTS.CFS
//! ends it with `Error::ControllerFatal`; a controller below the spec's minimum queue size is
//! refused before any queue is created.

use std::sync::atomic::{AtomicU16, AtomicU64};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nvme_core::{DmaMapper, Error, HostMemory, Namespace, Result};
use nvme_spec::command::Cns;
use nvme_spec::queue::{CQES_LOG2, SQES_LOG2, SQE_SIZE};
use nvme_spec::regs::{self, Cap, Cc, Csts, ShutdownNotification, Version};
use nvme_spec::{IdentifyController, IdentifyNamespace, NamespaceList};

use super::{
    open_admin, Admin, Inner, TcpController, TcpOptions, CCSZ_UNIT, MAX_TRANSFER, MIN_QUEUE_ENTRIES,
};
use crate::trid::TransportId;

/// What bring-up learns about the controller.
pub(super) struct BroughtUp {
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
pub(super) fn bring_up(
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
    let granted = admin.set_number_of_queues(wanted)?.min(wanted);
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

/// Normal shutdown notification (CC.SHN through Property Set, best effort within 1 s), then
/// the connection closes.
pub(super) fn shutdown(admin: &mut Admin, name: &str) {
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

impl Drop for Inner {
    /// Normal shutdown (CC.SHN through Property Set), then the connection closes.
    fn drop(&mut self) {
        if let Ok(admin) = self.admin.get_mut() {
            shutdown(admin, &self.name);
        }
    }
}
