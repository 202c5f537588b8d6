//! Discovery: the Discovery log page (LID 70h) read from a discovery controller, as
//! `DiscoveryEntry` records.
//!
//! INVARIANT: at most `MAX_DISCOVERY_RECORDS` records are read whatever NUMREC says, and the
//! discovery controller is shut down whether the read succeeded or not.

use std::sync::Arc;

use nvme_core::{DmaBuffer, DmaMapper, HostMemory, Result};
use nvme_spec::command;
use nvme_spec::fabrics;

use crate::trid::TransportId;

use super::bringup::{bring_up, shutdown};
use super::{open_admin, Admin, TcpOptions};

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
