//! The data the target's controllers return: Identify Controller (a controller built for the
//! subsystem, NVMe Base 2.0 §5.17.2.1 with the Fabrics fields of §5.17.2.1 Figure 275 bytes
//! 1792+), the active namespace list (§5.17.2.2), Identify Namespace (the backend's, §5.17.2.1
//! of the NVM CS), Namespace Identification Descriptors (§5.17.2.3), and the Error Information,
//! SMART / Health and Discovery log pages (§5.16.1.2, §5.16.1.3, §5.16.1.23).

use std::net::SocketAddr;

use nvme_spec::admin_log::NsIdDescriptor;
use nvme_spec::fabrics::{self, adrfam, cntrltype, sgls, DiscoveryLogEntry};
use nvme_spec::identify::{fill_ascii_field, IDENTIFY_DATA_SIZE};
use nvme_spec::log::ERROR_LOG_ENTRY_SIZE;
use nvme_spec::queue::{CQES_LOG2, SQES_LOG2};
use nvme_spec::status::generic;
use nvme_spec::tcp::crc32c;
use nvme_spec::{IdentifyController, NamespaceList, Oncs, SmartLog, Status};

use crate::backend::Backend;
use crate::conn::{err, ADMIN_IN_CAPSULE};
use crate::server::{Shared, Subsystem, PAGE};

/// Asynchronous Event Request Limit (0's based: four outstanding).
pub(crate) const AERL: u8 = 3;
/// Abort Command Limit (0's based).
const ACL: u8 = 3;
/// Keep Alive Support granularity, 100 ms units (NVMe Base 2.0 Figure 275 KAS).
const KAS: u16 = 1;
/// Recommended Arbitration Burst.
const RAB: u8 = 6;
/// Model number of the target's controllers.
const MODEL: &str = "nvme-rs NVMe/TCP target";
/// Unit of IOCCSZ and IORCSZ (16 bytes, Figure 275).
const CCSZ_UNIT: usize = 16;
/// Bytes of the SQE in a command capsule.
const SQE_BYTES: usize = 64;
/// Port id of the one port (Discovery log PORTID).
const PORT_ID: u16 = 1;
/// Version reported in Identify Controller VER (1.4.0).
const VER: u32 = nvme_spec::regs::Version::new(1, 4, 0).0;

/// MDTS for `max_io` bytes (a power of two of 4 KiB pages, CAP.MPSMIN 0).
fn mdts(max_io: usize) -> u8 {
    (max_io / PAGE).trailing_zeros() as u8
}

/// Identify Controller of controller `cntlid` of `sub` (`None`: the discovery controller).
pub(crate) fn identify_controller<B: Backend>(
    shared: &Shared<B>,
    sub: Option<&Subsystem<B>>,
    cntlid: u16,
) -> IdentifyController {
    let mut id = IdentifyController::default();
    fill_ascii_field(&mut id.mn, MODEL);
    fill_ascii_field(&mut id.fr, env!("CARGO_PKG_VERSION"));
    id.rab = RAB;
    id.cntlid = cntlid;
    id.ver = VER;
    id.acl = ACL;
    id.aerl = AERL;
    id.kas = KAS;
    id.sqes = SQES_LOG2 << 4 | SQES_LOG2;
    id.cqes = CQES_LOG2 << 4 | CQES_LOG2;
    id.maxcmd = shared.config.queue_entries;
    id.sgls = sgls::SUPPORTED | sgls::OFFSET | sgls::TRANSPORT_DATA_BLOCK;
    id.iorcsz = 1;
    id.msdbd = 1;
    match sub {
        None => {
            id.cntrltype = cntrltype::DISCOVERY;
            fill_ascii_field(&mut id.sn, "discovery");
            id.subnqn = fabrics::nqn_field(fabrics::DISCOVERY_NQN).expect("fits");
            id.ioccsz = ((ADMIN_IN_CAPSULE + SQE_BYTES) / CCSZ_UNIT) as u32;
        }
        Some(sub) => {
            let b = sub.backend.identify();
            id.cntrltype = cntrltype::IO;
            id.vid = b.vid;
            id.ssvid = b.ssvid;
            id.ieee = b.ieee;
            fill_ascii_field(&mut id.sn, &sub.serial);
            id.mdts = mdts(sub.max_io);
            id.nn = sub.namespaces.last().map_or(0, |(id, _)| *id);
            let mut oncs = Oncs::WRITE_ZEROES;
            if sub.backend.deallocate_supported() {
                oncs |= Oncs::DATASET_MANAGEMENT;
            }
            id.oncs = oncs.bits();
            id.vwc = b.vwc & 1;
            id.subnqn = sub.nqn_field;
            id.ioccsz = ((shared.config.in_capsule_bytes + SQE_BYTES) / CCSZ_UNIT) as u32;
        }
    }
    id
}

/// The active namespace ids above `after` (CNS 02h).
pub(crate) fn active_namespaces<B>(sub: &Subsystem<B>, after: u32) -> [u8; IDENTIFY_DATA_SIZE] {
    let mut list = NamespaceList::default();
    let above = sub.namespaces.iter().filter(|(id, _)| *id > after);
    for (slot, (id, _)) in list.ids.iter_mut().zip(above) {
        *slot = *id;
    }
    list.to_bytes()
}

/// The NGUID the target gives namespace `nsid` of `sub`: stable for a subsystem NQN, serial
/// and namespace id.
fn nguid<B>(sub: &Subsystem<B>, nsid: u32) -> [u8; 16] {
    let mut g = [0u8; 16];
    g[..4].copy_from_slice(&crc32c(sub.nqn.as_bytes()).to_be_bytes());
    g[4..8].copy_from_slice(&crc32c(sub.serial.as_bytes()).to_be_bytes());
    g[8..12].copy_from_slice(&nsid.to_be_bytes());
    let check = crc32c(&g[..12]);
    g[12..].copy_from_slice(&check.to_be_bytes());
    g
}

/// Whether `nsid` names a namespace of `sub` (active or not): 1..=NN.
fn valid_nsid<B>(sub: &Subsystem<B>, nsid: u32) -> bool {
    nsid != 0 && nsid <= sub.namespaces.last().map_or(0, |(id, _)| *id)
}

/// Identify Namespace (CNS 00h): the backend's data with the target's NGUID; zeroes for an
/// inactive id (§5.17.2.1).
pub(crate) fn identify_namespace<B>(
    sub: &Subsystem<B>,
    nsid: u32,
) -> Result<[u8; IDENTIFY_DATA_SIZE], Status> {
    if !valid_nsid(sub, nsid) {
        return Err(err(generic::INVALID_NAMESPACE_OR_FORMAT));
    }
    let Some(ns) = sub.namespace(nsid) else {
        return Ok([0; IDENTIFY_DATA_SIZE]);
    };
    let mut id = *ns.identify();
    id.nmic = 0;
    id.anagrpid = 0;
    id.nguid = nguid(sub, nsid);
    id.eui64 = [0; 8];
    Ok(id.to_bytes())
}

/// Namespace Identification Descriptor list (CNS 03h): the NGUID.
pub(crate) fn namespace_descriptors<B>(
    sub: &Subsystem<B>,
    nsid: u32,
) -> Result<[u8; IDENTIFY_DATA_SIZE], Status> {
    if sub.namespace(nsid).is_none() {
        return Err(err(generic::INVALID_NAMESPACE_OR_FORMAT));
    }
    Ok(NsIdDescriptor::encode_list(&[NsIdDescriptor::Nguid(
        nguid(sub, nsid),
    )]))
}

/// The Error Information log (one entry, unused: no error is logged by the target).
pub(crate) fn error_log() -> Vec<u8> {
    vec![0; ERROR_LOG_ENTRY_SIZE]
}

/// The SMART / Health log: the backend's (a default page if it cannot be read).
pub(crate) fn smart_log<B: Backend>(sub: &Subsystem<B>) -> Vec<u8> {
    sub.backend
        .smart_log()
        .unwrap_or_else(|e| {
            log::debug!("nvme-target: SMART log of {}: {e}", sub.backend.name());
            SmartLog::default()
        })
        .to_bytes()
        .to_vec()
}

/// The Discovery log page for `host`: one entry per subsystem the host may connect to, at
/// the address the host reached (`local`, else the listening address).
pub(crate) fn discovery_log<B: Backend>(
    shared: &Shared<B>,
    host: Option<&[u8; fabrics::NQN_FIELD_SIZE]>,
    local: Option<SocketAddr>,
) -> Vec<u8> {
    let addr = local.unwrap_or(shared.local);
    let family = if addr.is_ipv4() {
        adrfam::IPV4
    } else {
        adrfam::IPV6
    };
    let entries: Vec<DiscoveryLogEntry> = shared
        .subsystems
        .iter()
        .filter(|s| host.is_some_and(|h| s.allows(h)))
        .filter_map(|s| {
            DiscoveryLogEntry::tcp(
                fabrics::subtype::NVM,
                PORT_ID,
                family,
                &addr.ip().to_string(),
                &addr.port().to_string(),
                &s.nqn,
            )
        })
        .collect();
    fabrics::discovery_log_page(0, &entries)
}
