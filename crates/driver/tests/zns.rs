//! Zoned namespaces (ZNS CS 1.1) through the PCIe queue pair against the emulator's zoned
//! namespace: every zone state transition of Zone Management Send (§2.1.1, §3.4.3), the
//! write pointer rules (Zone Invalid Write, Zone Boundary Error, Zone Is Full), the open and
//! active limits, Report Zones with filters and partial reports, ZRWA open and explicit
//! flush, and an append-only log from several threads on several queue pairs whose records
//! read back through the LBAs the appends returned.

use std::collections::HashSet;
use std::time::Duration;

use nvme_driver::spec::zns::{
    ZoneDescriptor, ZoneError, ZoneReport, ZoneReportFilter, ZoneSendAction, ZoneState,
};
use nvme_driver::zns::{ZoneAppend, ZoneMgmtRecv, ZoneMgmtSend};
use nvme_driver::{
    Controller, ControllerOptions, Error, IoQueue, Namespace, QueuePair, QueuePairOptions,
    WriteFlags,
};
use nvme_sim::{SimConfig, SimController, SimNamespace, SimZoned};

mod common;

/// Zones of 64 blocks (512-byte blocks), 16 zones.
const ZONE: u64 = 64;
const ZONES: u64 = 16;

fn start(max_open: u32, max_active: u32) -> (SimController, Controller) {
    start_with(max_open, max_active, 0)
}

fn start_with(max_open: u32, max_active: u32, zasl: u8) -> (SimController, Controller) {
    let config = SimConfig {
        namespaces: vec![SimNamespace {
            blocks: ZONE * ZONES,
            ..SimNamespace::default()
        }],
        zoned: Some(SimZoned {
            nsid: 1,
            zone_blocks: ZONE,
            zone_capacity: ZONE,
            max_open,
            max_active,
            zrwa_blocks: 8,
            zasl,
        }),
        ..SimConfig::default()
    };
    common::start_sim(config, ControllerOptions::default(), false)
}

fn qp(ctrl: &Controller) -> QueuePair {
    ctrl.create_queue_pair(QueuePairOptions {
        timeout: Duration::from_secs(10),
        ..QueuePairOptions::default()
    })
    .expect("queue pair")
}

fn send(q: &mut QueuePair, ns: &Namespace, cmd: ZoneMgmtSend) -> Result<(), Error> {
    q.execute(ns, cmd, None).map(|_| ()).map_err(|f| f.error)
}

fn zone_err(r: Result<(), Error>) -> ZoneError {
    match r {
        Err(Error::Zone { zone, .. }) => zone,
        other => panic!("expected a zone error, got {other:?}"),
    }
}

fn report(
    ctrl: &Controller,
    q: &mut QueuePair,
    ns: &Namespace,
    cmd: ZoneMgmtRecv,
) -> (u64, Vec<ZoneDescriptor>) {
    let buf = ctrl.alloc_buffer(cmd.bytes as usize).unwrap();
    let buf = q.execute(ns, cmd, Some(buf)).unwrap().unwrap();
    let r = ZoneReport::parse(&buf[..cmd.bytes as usize], 0).unwrap();
    (r.nr_zones, r.iter().map(|(d, _)| d).collect())
}

fn zone(ctrl: &Controller, q: &mut QueuePair, ns: &Namespace, i: u64) -> ZoneDescriptor {
    report(ctrl, q, ns, ZoneMgmtRecv::report_zones(i * ZONE, 128)).1[0]
}

fn write(
    ctrl: &Controller,
    q: &mut QueuePair,
    ns: &Namespace,
    lba: u64,
    n: u32,
) -> Result<(), Error> {
    let buf = ctrl.alloc_buffer(n as usize * 512).unwrap();
    q.write(ns, lba, n, buf, WriteFlags::NONE)
        .map(|_| ())
        .map_err(|f| f.error)
}

/// One Zone Append of `data`, waited for; the LBA it landed at.
fn append(
    q: &mut QueuePair,
    ns: &Namespace,
    ctrl: &Controller,
    zslba: u64,
    data: &[u8],
) -> Result<u64, Error> {
    let mut buf = ctrl.alloc_buffer(data.len()).unwrap();
    buf[..data.len()].copy_from_slice(data);
    let cmd = ZoneAppend::new(zslba, (data.len() / 512) as u32);
    q.submit(ns, cmd, Some(buf), 7).map_err(|f| f.error)?;
    let mut out = None;
    while out.is_none() {
        q.poll(|c| out = Some(c.result.map(|dw0| cmd.written_lba(dw0))));
    }
    out.unwrap()
}

#[test]
fn bring_up_enables_the_zoned_command_set() {
    use nvme_driver::spec::regs::{self, Cap, Cc, CC_CSS_ALL_IO};
    let (sim, ctrl) = start(4, 6);
    // CAP.CSS bit 6 (as QEMU sets it) -> CC.CSS = 110b.
    assert!(Cap(sim.mmio().read64(regs::CAP)).css_io_command_sets());
    assert_eq!(Cc(sim.mmio().read32(regs::CC)).css(), CC_CSS_ALL_IO);
    let ns = ctrl.namespace(1).unwrap();
    let z = *ns.zoned().expect("namespace 1 is zoned");
    assert_eq!(z.zone_blocks, ZONE);
    assert_eq!((z.max_open, z.max_active), (Some(4), Some(6)));
    assert_eq!(z.zones(ns.blocks()), ZONES);
    // ZASL 0: the largest transfer (MDTS 5 with 4 KiB pages).
    assert_eq!(z.max_append_bytes, 128 << 10);
    let zrwa = z.zrwa.expect("ZRWA offered");
    assert_eq!(zrwa.blocks, 8);
    assert!(zrwa.explicit_flush);
    // No limits reported as no limits.
    let (_sim, ctrl) = start(0, 0);
    let z = *ctrl.namespace(1).unwrap().zoned().unwrap();
    assert_eq!((z.max_open, z.max_active), (None, None));
}

#[test]
fn plain_namespaces_are_not_zoned() {
    let config = SimConfig {
        zoned: Some(SimZoned {
            nsid: 2,
            zone_blocks: 16,
            zone_capacity: 16,
            ..SimZoned::default()
        }),
        ..SimConfig::default()
    };
    let (_sim, ctrl) = common::start_sim(config, ControllerOptions::default(), false);
    assert!(ctrl.namespace(1).unwrap().zoned().is_none());
    assert_eq!(ctrl.namespace(2).unwrap().zoned().unwrap().zone_blocks, 16);
    // Without a zoned namespace every namespace is plain, the set still enabled.
    let (_sim, ctrl) = common::start_sim(SimConfig::default(), ControllerOptions::default(), false);
    assert!(ctrl.namespaces().iter().all(|n| n.zoned().is_none()));
}

#[test]
fn zone_append_limit_from_zasl() {
    // ZASL 1: appends of at most 2 pages (8 KiB, 16 blocks of 512 bytes).
    let (_sim, ctrl) = start_with(4, 6, 1);
    let mut q = qp(&ctrl);
    let ns = ctrl.namespace(1).unwrap();
    assert_eq!(ns.zoned().unwrap().max_append_bytes, 8192);
    assert_eq!(append(&mut q, &ns, &ctrl, 0, &[7u8; 8192]).unwrap(), 0);
    // The driver refuses a larger append before the device sees it ...
    match append(&mut q, &ns, &ctrl, 0, &[7u8; 8704]) {
        Err(Error::InvalidRequest(why)) => assert!(why.contains("ZASL"), "{why}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    // ... and one not at a zone start.
    match append(&mut q, &ns, &ctrl, 3, &[7u8; 512]) {
        Err(Error::InvalidRequest(why)) => assert!(why.contains("zone start"), "{why}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    // The emulator refuses it too (sent erased, past the typed checks): Invalid Field.
    let mut buf = ctrl.alloc_buffer(8704).unwrap();
    buf.fill(1);
    let erased = nvme_driver::IoCommand::of(ZoneAppend::new(ZONE, 17));
    match q.execute(&ns, erased, Some(buf)) {
        Err(f) => match f.error {
            Error::Command { status, .. } => {
                assert_eq!(
                    status.sc(),
                    nvme_driver::spec::status::generic::INVALID_FIELD
                )
            }
            e => panic!("expected Invalid Field, got {e:?}"),
        },
        Ok(_) => panic!("an append beyond ZASL was taken"),
    }
    assert_eq!(zone(&ctrl, &mut q, &ns, 1).wp, ZONE, "nothing written");
}

#[test]
fn zoned_set_survives_a_controller_reset() {
    use nvme_driver::spec::regs::{self, Cc, CC_CSS_ALL_IO};
    let (sim, ctrl) = start(4, 6);
    let ns = ctrl.namespace(1).unwrap();
    ctrl.reset().unwrap();
    assert_eq!(Cc(sim.mmio().read32(regs::CC)).css(), CC_CSS_ALL_IO);
    let mut q = qp(&ctrl);
    assert_eq!(
        append(&mut q, &ns, &ctrl, ZONE, &[3u8; 1024]).unwrap(),
        ZONE
    );
    assert_eq!(zone(&ctrl, &mut q, &ns, 1).wp, ZONE + 2);
}

#[test]
fn identify_and_report_show_the_zones() {
    let (_sim, ctrl) = start(4, 6);
    let mut q = qp(&ctrl);
    let ns = ctrl.namespace(1).unwrap();
    let (n, zones) = report(
        &ctrl,
        &mut q,
        &ns,
        ZoneMgmtRecv::report_zones(0, 64 + 64 * 32),
    );
    assert_eq!(n, ZONES);
    assert_eq!(zones.len(), ZONES as usize);
    for (i, z) in zones.iter().enumerate() {
        assert_eq!(z.zslba, i as u64 * ZONE);
        assert_eq!(z.wp, z.zslba);
        assert_eq!(z.zcap, ZONE);
        assert_eq!(z.state(), Some(ZoneState::Empty));
    }
    // A buffer for 3 descriptors: 3 returned, the header counts all 16, or 3 with Partial.
    let small = ZoneMgmtRecv::report_zones(0, 64 * 4);
    let (n, zones) = report(&ctrl, &mut q, &ns, small);
    assert_eq!((n, zones.len()), (ZONES, 3));
    let (n, zones) = report(&ctrl, &mut q, &ns, small.partial());
    assert_eq!((n, zones.len()), (3, 3));
    // From the middle of zone 5: zones 5..16.
    let (n, zones) = report(
        &ctrl,
        &mut q,
        &ns,
        ZoneMgmtRecv::report_zones(5 * ZONE + 3, 4096),
    );
    assert_eq!((n, zones[0].zslba), (ZONES - 5, 5 * ZONE));
}

#[test]
fn zns_identify_reports_the_geometry() {
    use nvme_driver::AdminCommands;
    let (_sim, ctrl) = start(4, 6);
    let id = ctrl.zns_identify_namespace(1).unwrap();
    assert_eq!(id.lbafe[0].zsze, ZONE);
    assert_eq!((id.head.mor, id.head.mar), (3, 5));
    assert_eq!(id.head.zrwasz, 8);
    assert_eq!(ctrl.zns_identify_controller().unwrap().zasl, 0);
}

#[test]
fn every_state_transition() {
    let (sim, ctrl) = start(0, 0);
    let mut q = qp(&ctrl);
    let ns = ctrl.namespace(1).unwrap();
    let z0 = 0;
    let st = |q: &mut QueuePair, i: u64| zone(&ctrl, q, &ns, i).state().unwrap();
    use ZoneSendAction::*;
    // Empty -> Explicitly Opened -> Closed -> Explicitly Opened -> Full (finish) -> Empty.
    send(&mut q, &ns, ZoneMgmtSend::new(z0, Open)).unwrap();
    assert_eq!(st(&mut q, 0), ZoneState::ExplicitlyOpened);
    send(&mut q, &ns, ZoneMgmtSend::new(z0, Close)).unwrap();
    assert_eq!(st(&mut q, 0), ZoneState::Closed);
    send(&mut q, &ns, ZoneMgmtSend::new(z0, Open)).unwrap();
    send(&mut q, &ns, ZoneMgmtSend::new(z0, Finish)).unwrap();
    let d = zone(&ctrl, &mut q, &ns, 0);
    assert_eq!((d.state(), d.wp), (Some(ZoneState::Full), ZONE));
    assert_eq!(
        zone_err(send(&mut q, &ns, ZoneMgmtSend::new(z0, Open))),
        ZoneError::InvalidTransition
    );
    assert_eq!(
        zone_err(send(&mut q, &ns, ZoneMgmtSend::new(z0, Close))),
        ZoneError::InvalidTransition
    );
    send(&mut q, &ns, ZoneMgmtSend::new(z0, Reset)).unwrap();
    let d = zone(&ctrl, &mut q, &ns, 0);
    assert_eq!((d.state(), d.wp), (Some(ZoneState::Empty), 0));
    // Empty -> Implicitly Opened by a write -> Closed -> Implicitly Opened by a write.
    write(&ctrl, &mut q, &ns, ZONE, 4).unwrap();
    assert_eq!(st(&mut q, 1), ZoneState::ImplicitlyOpened);
    send(&mut q, &ns, ZoneMgmtSend::new(ZONE, Close)).unwrap();
    write(&ctrl, &mut q, &ns, ZONE + 4, 4).unwrap();
    let d = zone(&ctrl, &mut q, &ns, 1);
    assert_eq!(
        (d.state(), d.wp),
        (Some(ZoneState::ImplicitlyOpened), ZONE + 8)
    );
    // Implicitly Opened -> Explicitly Opened; Empty -> Full by finish; Closed -> Empty by reset.
    send(&mut q, &ns, ZoneMgmtSend::new(ZONE, Open)).unwrap();
    assert_eq!(st(&mut q, 1), ZoneState::ExplicitlyOpened);
    send(&mut q, &ns, ZoneMgmtSend::new(2 * ZONE, Finish)).unwrap();
    assert_eq!(st(&mut q, 2), ZoneState::Full);
    send(&mut q, &ns, ZoneMgmtSend::new(ZONE, Close)).unwrap();
    send(&mut q, &ns, ZoneMgmtSend::new(ZONE, Reset)).unwrap();
    assert_eq!(st(&mut q, 1), ZoneState::Empty);
    // Writing a zone to its capacity makes it Full.
    write(&ctrl, &mut q, &ns, 3 * ZONE, ZONE as u32).unwrap();
    assert_eq!(st(&mut q, 3), ZoneState::Full);
    // Read Only (by the device) -> Offline; Offline refuses everything else.
    sim.set_zone_read_only(4 * ZONE);
    assert_eq!(st(&mut q, 4), ZoneState::ReadOnly);
    assert_eq!(
        zone_err(write(&ctrl, &mut q, &ns, 4 * ZONE, 1)),
        ZoneError::ReadOnly
    );
    assert_eq!(
        zone_err(send(&mut q, &ns, ZoneMgmtSend::new(4 * ZONE, Reset))),
        ZoneError::InvalidTransition
    );
    assert_eq!(
        zone_err(send(&mut q, &ns, ZoneMgmtSend::new(5 * ZONE, Offline))),
        ZoneError::InvalidTransition
    );
    send(&mut q, &ns, ZoneMgmtSend::new(4 * ZONE, Offline)).unwrap();
    assert_eq!(st(&mut q, 4), ZoneState::Offline);
    assert_eq!(
        zone_err(write(&ctrl, &mut q, &ns, 4 * ZONE, 1)),
        ZoneError::Offline
    );
    assert_eq!(
        zone_err(send(&mut q, &ns, ZoneMgmtSend::new(4 * ZONE, Open))),
        ZoneError::InvalidTransition
    );
    // Filters: one Offline, two Full.
    let (n, zones) = report(
        &ctrl,
        &mut q,
        &ns,
        ZoneMgmtRecv::report_zones(0, 4096).filter(ZoneReportFilter::Full),
    );
    assert_eq!(
        (n, zones.iter().map(|z| z.zslba).collect::<Vec<_>>()),
        (2, vec![2 * ZONE, 3 * ZONE])
    );
    let (n, _) = report(
        &ctrl,
        &mut q,
        &ns,
        ZoneMgmtRecv::report_zones(0, 4096).filter(ZoneReportFilter::Offline),
    );
    assert_eq!(n, 1);
    // Select All reset: every Full zone is Empty again, the Offline one stays.
    send(&mut q, &ns, ZoneMgmtSend::new(0, Reset).all()).unwrap();
    let (n, _) = report(
        &ctrl,
        &mut q,
        &ns,
        ZoneMgmtRecv::report_zones(0, 4096).filter(ZoneReportFilter::Empty),
    );
    assert_eq!(n, ZONES - 1);
}

#[test]
fn write_pointer_rules() {
    let (_sim, ctrl) = start(0, 0);
    let mut q = qp(&ctrl);
    let ns = ctrl.namespace(1).unwrap();
    // Not at the write pointer.
    assert_eq!(
        zone_err(write(&ctrl, &mut q, &ns, 1, 1)),
        ZoneError::InvalidWrite
    );
    write(&ctrl, &mut q, &ns, 0, 8).unwrap();
    assert_eq!(
        zone_err(write(&ctrl, &mut q, &ns, 4, 1)),
        ZoneError::InvalidWrite
    );
    // Across the zone's end.
    write(&ctrl, &mut q, &ns, 8, (ZONE - 12) as u32).unwrap();
    assert_eq!(
        zone_err(write(&ctrl, &mut q, &ns, ZONE - 4, 8)),
        ZoneError::Boundary
    );
    let rec = vec![0xA5u8; 8 * 512];
    assert_eq!(
        append(&mut q, &ns, &ctrl, 0, &rec)
            .unwrap_err()
            .status()
            .unwrap()
            .sc(),
        0xB8
    );
    write(&ctrl, &mut q, &ns, ZONE - 4, 4).unwrap();
    assert_eq!(
        zone_err(write(&ctrl, &mut q, &ns, ZONE - 1, 1)),
        ZoneError::Full
    );
    // Appends land at the write pointer, one after another, and read back.
    let a = append(&mut q, &ns, &ctrl, 2 * ZONE, &[1u8; 512]).unwrap();
    let b = append(&mut q, &ns, &ctrl, 2 * ZONE, &[2u8; 1024]).unwrap();
    assert_eq!((a, b), (2 * ZONE, 2 * ZONE + 1));
    let back = q.read(&ns, b, 2, ctrl.alloc_buffer(1024).unwrap()).unwrap();
    assert!(back[..1024].iter().all(|&x| x == 2));
    // An append must name a zone start.
    assert!(append(&mut q, &ns, &ctrl, 2 * ZONE + 1, &[0u8; 512]).is_err());
}

#[test]
fn open_and_active_limits() {
    let (_sim, ctrl) = start(2, 3);
    let mut q = qp(&ctrl);
    let ns = ctrl.namespace(1).unwrap();
    use ZoneSendAction::*;
    send(&mut q, &ns, ZoneMgmtSend::new(0, Open)).unwrap();
    write(&ctrl, &mut q, &ns, ZONE, 1).unwrap();
    // Two open: a third is refused, explicitly or by a write.
    assert_eq!(
        zone_err(send(&mut q, &ns, ZoneMgmtSend::new(2 * ZONE, Open))),
        ZoneError::TooManyOpen
    );
    assert_eq!(
        zone_err(write(&ctrl, &mut q, &ns, 2 * ZONE, 1)),
        ZoneError::TooManyOpen
    );
    // Closing one frees an open resource, not an active one: 3 active after this open.
    send(&mut q, &ns, ZoneMgmtSend::new(0, Close)).unwrap();
    send(&mut q, &ns, ZoneMgmtSend::new(2 * ZONE, Open)).unwrap();
    send(&mut q, &ns, ZoneMgmtSend::new(2 * ZONE, Close)).unwrap();
    assert_eq!(
        zone_err(send(&mut q, &ns, ZoneMgmtSend::new(3 * ZONE, Open))),
        ZoneError::TooManyActive
    );
    assert_eq!(
        zone_err(write(&ctrl, &mut q, &ns, 3 * ZONE, 1)),
        ZoneError::TooManyActive
    );
    let rec = [9u8; 512];
    assert_eq!(
        ZoneError::from_status(
            append(&mut q, &ns, &ctrl, 3 * ZONE, &rec)
                .unwrap_err()
                .status()
                .unwrap()
        ),
        Some(ZoneError::TooManyActive)
    );
    // Finishing one releases its active resource.
    send(&mut q, &ns, ZoneMgmtSend::new(0, Finish)).unwrap();
    send(&mut q, &ns, ZoneMgmtSend::new(3 * ZONE, Open)).unwrap();
}

#[test]
fn zrwa_open_write_and_explicit_flush() {
    let (_sim, ctrl) = start(0, 0);
    let mut q = qp(&ctrl);
    let ns = ctrl.namespace(1).unwrap();
    send(&mut q, &ns, ZoneMgmtSend::open_with_zrwa(0)).unwrap();
    let d = zone(&ctrl, &mut q, &ns, 0);
    assert_ne!(d.za & nvme_driver::spec::zns::attr::ZRWAV, 0);
    // Random writes inside the 8-block area, not past it; the pointer stays until a flush.
    write(&ctrl, &mut q, &ns, 4, 2).unwrap();
    write(&ctrl, &mut q, &ns, 0, 2).unwrap();
    assert_eq!(
        zone_err(write(&ctrl, &mut q, &ns, 6, 4)),
        ZoneError::InvalidWrite
    );
    assert_eq!(zone(&ctrl, &mut q, &ns, 0).wp, 0);
    send(&mut q, &ns, ZoneMgmtSend::new(5, ZoneSendAction::FlushZrwa)).unwrap();
    assert_eq!(zone(&ctrl, &mut q, &ns, 0).wp, 6);
    write(&ctrl, &mut q, &ns, 6, 8).unwrap();
    // A flush behind the pointer is refused.
    assert!(send(&mut q, &ns, ZoneMgmtSend::new(3, ZoneSendAction::FlushZrwa)).is_err());
}

#[test]
fn append_only_log_from_several_threads() {
    const THREADS: usize = 4;
    const RECORDS: usize = 40;
    let (_sim, ctrl) = start(0, 0);
    let results: Vec<Vec<(u64, Vec<u8>)>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let ctrl = &ctrl;
                s.spawn(move || {
                    let mut q = qp(ctrl);
                    let ns = ctrl.namespace(1).unwrap();
                    let mut mine = Vec::new();
                    for r in 0..RECORDS {
                        let blocks = 1 + (r % 3);
                        let data = common::pattern(blocks * 512, (t * 1000 + r) as u64);
                        // Zones 0..8 in turn, every thread into the same ones.
                        let zslba = (r % 8) as u64 * ZONE;
                        let lba = append(&mut q, &ns, ctrl, zslba, &data).unwrap();
                        assert!(lba >= zslba && lba + blocks as u64 <= zslba + ZONE);
                        mine.push((lba, data));
                    }
                    mine
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut q = qp(&ctrl);
    let ns = ctrl.namespace(1).unwrap();
    let mut seen = HashSet::new();
    for (lba, data) in results.iter().flatten() {
        let blocks = data.len() / 512;
        for b in 0..blocks as u64 {
            assert!(seen.insert(lba + b), "LBA {} written twice", lba + b);
        }
        let back = q
            .read(
                &ns,
                *lba,
                blocks as u32,
                ctrl.alloc_buffer(data.len()).unwrap(),
            )
            .unwrap();
        assert_eq!(&back[..data.len()], &data[..]);
    }
    // The write pointers account for every block appended.
    let (_, zones) = report(&ctrl, &mut q, &ns, ZoneMgmtRecv::report_zones(0, 4096));
    let written: u64 = zones.iter().map(|z| z.wp - z.zslba).sum();
    assert_eq!(written as usize, seen.len());
}
