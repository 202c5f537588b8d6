//! The emulator's I/O command sets as QEMU 7.2 models them (NVMe Base 2.0 §3.1.4.5,
//! §5.17.2.22, §5.27.1.21; ZNS CS 1.1 §4.1.5): CAP.CSS bit 6, CC.CSS = 110b, Identify CNS 1Ch
//! with the NVM and zoned sets in combination 0, Set Features 19h taking index 0 only, the
//! zoned namespace's Command Set Identifier descriptor, and zone commands refused with Invalid
//! Command Opcode while CC.CSS selects the NVM set alone.

use nvme_sim::{SimConfig, SimNamespace, SimZoned};
use nvme_spec::admin_log::NsIdDescriptor;
use nvme_spec::command::{self, Cns};
use nvme_spec::identify::IDENTIFY_DATA_SIZE;
use nvme_spec::queue::SubmissionEntry;
use nvme_spec::regs::{Cap, CAP, CC, CC_CSS_ALL_IO};
use nvme_spec::status::generic;
use nvme_spec::zns::{self, IoCommandSetVectors, ZoneReport};
use nvme_vfio::DmaBuffer;

mod common;
use common::*;

const ZONE: u64 = 32;

fn zoned_config(zasl: u8) -> SimConfig {
    SimConfig {
        namespaces: vec![SimNamespace {
            blocks: ZONE * 8,
            ..SimNamespace::default()
        }],
        zoned: Some(SimZoned {
            zone_blocks: ZONE,
            zone_capacity: ZONE,
            zasl,
            ..SimZoned::default()
        }),
        ..SimConfig::default()
    }
}

fn report_zones(host: &mut Host) -> (u16, Option<u64>) {
    let mut q = host.create_pair(1, 8, 8);
    let buf = DmaBuffer::allocate(&host.dma, 4096).unwrap();
    let sqe = SubmissionEntry {
        nsid: 1,
        cdw12: 4096 / 4 - 1,
        cdw13: zns::ZoneRecvAction::ReportZones as u32,
        ..SubmissionEntry::new(zns::opcode::ZONE_MGMT_RECV)
    };
    let status = q.run(with_prp(sqe, &buf)).status();
    let zones = status
        .is_success()
        .then(|| ZoneReport::parse(&buf[..], 0).unwrap().nr_zones);
    (status.sc() as u16, zones)
}

fn identify_raw(host: &mut Host, sqe: SubmissionEntry) -> Result<[u8; IDENTIFY_DATA_SIZE], u8> {
    let buf = DmaBuffer::allocate(&host.dma, IDENTIFY_DATA_SIZE).unwrap();
    let status = host.admin.run(with_prp(sqe, &buf)).status();
    if !status.is_success() {
        return Err(status.sc());
    }
    Ok(buf[..IDENTIFY_DATA_SIZE].try_into().unwrap())
}

#[test]
fn nvm_only_enable_hides_the_zone_commands() {
    let mut host = Host::start(zoned_config(0));
    assert!(Cap(host.mmio.read64(CAP)).css_io_command_sets());
    let (sc, zones) = report_zones(&mut host);
    assert_eq!((sc, zones), (u16::from(generic::INVALID_OPCODE), None));
}

#[test]
fn all_io_sets_enable_offers_the_zoned_set() {
    let mut host = Host::configure(zoned_config(3));
    host.mmio
        .write32(CC, cc_enabled().with_css(CC_CSS_ALL_IO).0);
    wait_for("CSTS.RDY", || host.csts().rdy());
    // CNS 1Ch: combination 0 holds NVM and ZNS, as in QEMU 7.2.
    let bytes = identify_raw(
        &mut host,
        command::identify_csi(zns::CNS_IO_COMMAND_SET, zns::CSI_NVM, 0),
    )
    .unwrap();
    assert_eq!(bytes[0], 0x05);
    let v = IoCommandSetVectors::parse(&bytes);
    assert_eq!(v.choose(IoCommandSetVectors::bit(zns::CSI_ZNS)), Some(0));
    // Set Features 19h: index 1 does not exist, index 0 does.
    let set = |index| command::set_features(zns::FID_IO_COMMAND_SET_PROFILE, index);
    let status = host.admin.run(set(1)).status();
    assert_eq!(
        status,
        cs_err(nvme_spec::status::command_specific::IO_COMMAND_SET_COMBINATION_REJECTED)
    );
    assert!(host.admin.run(set(0)).status().is_success());
    // CNS 03h: the zoned namespace says CSI 02h.
    let descs = identify_raw(&mut host, command::identify(Cns::NamespaceIdDescriptors, 1))
        .map(|b| NsIdDescriptor::parse_list(&b))
        .unwrap();
    assert!(
        descs.contains(&NsIdDescriptor::Csi(zns::CSI_ZNS)),
        "{descs:?}"
    );
    // CNS 06h CSI 02h: ZASL as configured; CNS 05h: the zone size.
    let ctrl = identify_raw(
        &mut host,
        command::identify_csi(zns::CNS_CSI_CONTROLLER, zns::CSI_ZNS, 0),
    )
    .unwrap();
    assert_eq!(ctrl[0], 3);
    let ns = identify_raw(
        &mut host,
        command::identify_csi(zns::CNS_CSI_NAMESPACE, zns::CSI_ZNS, 1),
    )
    .unwrap();
    assert_eq!(zns::ZnsIdentifyNamespace::parse(&ns).lbafe[0].zsze, ZONE);
    // And the zone commands are taken.
    assert_eq!(report_zones(&mut host), (0, Some(8)));
}
