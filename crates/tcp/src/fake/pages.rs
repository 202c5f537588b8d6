//! The fake target's admin data: Identify pages and the Discovery, SMART / Health and Error
//! Information log pages.

use std::sync::atomic::Ordering;

use nvme_spec::fabrics;
use nvme_spec::identify::fill_ascii_field;
use nvme_spec::log::ERROR_LOG_ENTRY_SIZE;
use nvme_spec::opcode;
use nvme_spec::status::generic;
use nvme_spec::{
    CopyFormats, ErrorLogEntry, IdentifyController, IdentifyNamespace, NamespaceList, Oncs,
    SmartLog, Status, SubmissionEntry,
};

use super::copy::{COPY_MCL, COPY_MSRC, COPY_MSSRL};
use super::{
    Conn, ERROR_LOG_ENTRIES, NEWEST_ERROR_COUNT, SMART_POWER_ON_HOURS, SMART_TEMPERATURE_K,
};

impl Conn<'_> {
    /// The Identify page that `sqe` asks for (CNS 0, 1 or 2), or `None`.
    pub(super) fn identify(&self, sqe: &SubmissionEntry) -> Option<[u8; 4096]> {
        let cfg = &self.st.config;
        match sqe.cdw10 & 0xFF {
            1 => {
                let mut id = IdentifyController::default();
                id.vid = 0x1b36;
                fill_ascii_field(&mut id.sn, "FAKE0001");
                fill_ascii_field(&mut id.mn, "fake NVMe/TCP target");
                fill_ascii_field(&mut id.fr, "1.0");
                id.ioccsz = cfg.ioccsz;
                id.iorcsz = 1;
                id.maxcmd = cfg.maxcmd;
                id.nn = 8;
                id.elpe = (ERROR_LOG_ENTRIES - 1) as u8;
                id.acl = 3;
                id.cqt = self.st.live.cqt_ms.load(Ordering::SeqCst);
                id.mdts = cfg.mdts;
                id.sqes = 0x66;
                id.cqes = 0x44;
                if cfg.copy {
                    id.oncs = Oncs::COPY.bits();
                    id.ocfs = CopyFormats::FORMAT_0.bits();
                }
                let nqn = fabrics::nqn_field(&cfg.subnqn).unwrap();
                id.subnqn = nqn;
                Some(id.to_bytes())
            }
            2 => {
                let mut list = NamespaceList::default();
                // The active NSIDs above the command's NSID (§5.17.2.2).
                let above = cfg.namespaces.iter().filter(|n| n.0 > sqe.nsid);
                for (slot, &(nsid, ..)) in list.ids.iter_mut().zip(above) {
                    *slot = nsid;
                }
                Some(list.to_bytes())
            }
            0 => {
                let &(_, shift, blocks) = cfg.namespaces.iter().find(|n| n.0 == sqe.nsid)?;
                let mut ns = IdentifyNamespace::default();
                ns.nsze = blocks;
                ns.ncap = blocks;
                ns.nuse = blocks;
                ns.lbaf[0].lbads = shift;
                if cfg.copy {
                    ns.mssrl = COPY_MSSRL;
                    ns.mcl = COPY_MCL;
                    ns.msrc = COPY_MSRC;
                }
                Some(ns.to_bytes())
            }
            _ => None,
        }
    }
}

/// The Discovery log page (one entry: this port and subsystem), at least `len` bytes.
pub(super) fn discovery_log(port: u16, subnqn: &str, len: usize) -> Vec<u8> {
    let entry = fabrics::DiscoveryLogEntry::tcp(
        fabrics::subtype::NVM,
        1,
        fabrics::adrfam::IPV4,
        "127.0.0.1",
        &port.to_string(),
        subnqn,
    )
    .expect("the fake's names fit");
    let mut page = fabrics::discovery_log_page(0, &[entry]);
    page.resize(page.len().max(len), 0);
    page
}

/// The SMART / Health Information log page.
pub(super) fn smart_log() -> [u8; 512] {
    let mut smart = SmartLog::default();
    smart.set_temperature_kelvin(SMART_TEMPERATURE_K);
    smart.available_spare = 100;
    smart.available_spare_threshold = 10;
    smart.percentage_used = 3;
    smart.power_on_hours = SMART_POWER_ON_HOURS;
    smart.power_cycles = 2;
    smart.error_log_entries = u128::from(NEWEST_ERROR_COUNT);
    smart.to_bytes()
}

/// The Error Information log page: two errors logged, newest first; the other entries unused.
pub(super) fn error_log() -> Vec<u8> {
    let mut page = vec![0u8; ERROR_LOG_ENTRIES * ERROR_LOG_ENTRY_SIZE];
    for (i, count) in [NEWEST_ERROR_COUNT, NEWEST_ERROR_COUNT - 1]
        .into_iter()
        .enumerate()
    {
        let mut e = ErrorLogEntry::default();
        e.error_count = count;
        e.sqid = 1;
        e.cmdid = 0x10 + i as u16;
        e.set_status(Status::new(0, generic::LBA_OUT_OF_RANGE, true), false);
        e.parameter_error_location = ErrorLogEntry::NO_PARAMETER_LOCATION;
        e.nsid = 1;
        e.transport_type = fabrics::trtype::TCP;
        e.opcode = opcode::nvm::READ;
        page[i * ERROR_LOG_ENTRY_SIZE..(i + 1) * ERROR_LOG_ENTRY_SIZE]
            .copy_from_slice(&e.to_bytes());
    }
    page
}
