//! `nvme-admin zns SUBCOMMAND`: nvme-cli's `nvme zns` plugin through our driver, for zoned
//! namespaces (ZNS CS 1.1): `id-ns`, `id-ctrl`, `report-zones`, the Zone Management Send
//! actions (`reset-zone`, `open-zone`, `close-zone`, `finish-zone`, `offline-zone`, and
//! `zone-mgmt-send -z ACTION`), and `zone-append`. The zone commands are I/O commands: each
//! run takes one queue pair of its own.
//!
//! JSON keys are nvme-cli 2.x's (`nvme zns id-ns`: `zoc`, `ozcs`, `mar`, `mor`, ...,
//! `lbafe` with `zsze`/`zdes`; `report-zones`: `nr_zones` and `zone_list` entries with
//! `slba`, `wp`, `cap`, `state`, `type`, `attrs`, `attrs_info`).

use std::time::Duration;

use clap::{Args, Subcommand};
use nvme_driver::spec::zns::{
    ZnsIdentifyNamespace, ZoneReport, ZoneReportFilter, ZoneReportHeader, ZoneSendAction, ZoneType,
};
use nvme_driver::zns::{ZoneAppend, ZoneMgmtRecv, ZoneMgmtSend};
use nvme_driver::{AdminCommands, IoQueue, Namespace, NvmeController, QueuePairOptions};
use serde_json::{json, Value};

use crate::{parse_u64, AdminError, Device};

/// How long one zone command may take.
const ZONE_COMMAND_TIMEOUT: Duration = Duration::from_secs(30);
/// nvme-cli's name of zone type 2h.
const SEQUENTIAL_WRITE_REQUIRED: &str = "SEQWRITE_REQ";

/// A zone chosen by its start LBA, or every zone (Select All).
#[derive(Debug, Args)]
pub struct ZoneArgs {
    #[command(flatten)]
    pub dev: Device,
    /// Namespace ID.
    #[arg(short = 'n', long = "namespace-id", default_value_t = 1)]
    pub nsid: u32,
    /// Start LBA of the zone (decimal or 0x hex).
    #[arg(short = 's', long = "start-lba", default_value_t = 0, value_parser = parse_u64)]
    pub slba: u64,
    /// Every zone the action applies to (Select All).
    #[arg(short = 'a', long = "select-all")]
    pub all: bool,
}

/// `nvme zns` subcommands.
#[derive(Debug, Subcommand)]
pub enum ZnsCommand {
    /// ZNS Identify Namespace (CNS 05h, CSI 02h).
    IdNs {
        #[command(flatten)]
        dev: Device,
        /// Namespace ID.
        #[arg(short = 'n', long = "namespace-id", default_value_t = 1)]
        nsid: u32,
    },
    /// ZNS Identify Controller (CNS 06h, CSI 02h).
    IdCtrl(Device),
    /// Report Zones (Zone Management Receive).
    ReportZones {
        #[command(flatten)]
        dev: Device,
        /// Namespace ID.
        #[arg(short = 'n', long = "namespace-id", default_value_t = 1)]
        nsid: u32,
        /// Report from the zone holding this LBA.
        #[arg(short = 's', long = "start-lba", default_value_t = 0, value_parser = parse_u64)]
        slba: u64,
        /// Zone descriptors to report (0: every zone from the start LBA).
        #[arg(short = 'd', long = "descs", default_value_t = 0)]
        descs: u32,
        /// Only zones in this state (ZRASF: 0 all, 1 empty, 2 implicitly opened, 3 explicitly
        /// opened, 4 closed, 5 full, 6 read only, 7 offline).
        #[arg(short = 'S', long = "state", default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=7))]
        state: u8,
        /// Partial Report: `nr_zones` counts the descriptors returned only.
        #[arg(short = 'p', long = "partial")]
        partial: bool,
    },
    /// Reset Zone: the write pointer back to the zone start, the zone Empty.
    ResetZone(ZoneArgs),
    /// Open Zone (explicitly).
    OpenZone {
        #[command(flatten)]
        zone: ZoneArgs,
        /// Allocate a Zone Random Write Area (ZRWAA).
        #[arg(short = 'r', long = "zrwa")]
        zrwa: bool,
    },
    /// Close Zone.
    CloseZone(ZoneArgs),
    /// Finish Zone: the zone becomes Full.
    FinishZone(ZoneArgs),
    /// Offline Zone (from Read Only).
    OfflineZone(ZoneArgs),
    /// Zone Management Send with a raw Zone Send Action (1 close, 2 finish, 3 open, 4 reset,
    /// 5 offline, 11h flush explicit ZRWA).
    ZoneMgmtSend {
        #[command(flatten)]
        zone: ZoneArgs,
        /// Zone Send Action (decimal or 0x hex).
        #[arg(short = 'z', long = "zsa", value_parser = crate::parse_u8)]
        action: u8,
    },
    /// Zone Append: the data written at the zone's write pointer; prints the LBA written.
    ZoneAppend {
        #[command(flatten)]
        dev: Device,
        /// Namespace ID.
        #[arg(short = 'n', long = "namespace-id", default_value_t = 1)]
        nsid: u32,
        /// Start LBA of the zone.
        #[arg(short = 's', long = "zslba", default_value_t = 0, value_parser = parse_u64)]
        zslba: u64,
        /// Bytes appended (a multiple of the block size).
        #[arg(short = 'z', long = "data-size", value_parser = parse_u64)]
        size: u64,
        /// File with the data (at least --data-size bytes).
        #[arg(short = 'd', long = "data")]
        data: std::path::PathBuf,
    },
}

impl ZnsCommand {
    /// The device options of the subcommand.
    pub fn device(&self) -> &Device {
        match self {
            ZnsCommand::IdNs { dev, .. }
            | ZnsCommand::IdCtrl(dev)
            | ZnsCommand::ReportZones { dev, .. }
            | ZnsCommand::ZoneAppend { dev, .. } => dev,
            ZnsCommand::ResetZone(z)
            | ZnsCommand::CloseZone(z)
            | ZnsCommand::FinishZone(z)
            | ZnsCommand::OfflineZone(z)
            | ZnsCommand::OpenZone { zone: z, .. }
            | ZnsCommand::ZoneMgmtSend { zone: z, .. } => &z.dev,
        }
    }

    /// Whether the subcommand changes the device (refused through a control socket).
    pub fn changes_device(&self) -> bool {
        !matches!(
            self,
            ZnsCommand::IdNs { .. } | ZnsCommand::IdCtrl(_) | ZnsCommand::ReportZones { .. }
        )
    }
}

/// The zoned namespace `nsid`, or why it cannot take zone commands.
fn zoned_namespace<C: NvmeController>(ctrl: &C, nsid: u32) -> Result<Namespace, AdminError> {
    let ns = ctrl.namespace(nsid)?;
    if ns.zoned().is_none() {
        return Err(AdminError::NotZoned { nsid });
    }
    Ok(ns)
}

fn queue<C: NvmeController>(ctrl: &C) -> Result<C::QueuePair, AdminError> {
    Ok(ctrl.create_queue_pair(QueuePairOptions {
        timeout: ZONE_COMMAND_TIMEOUT,
        ..QueuePairOptions::default()
    })?)
}

/// `zns id-ns`: the ZNS Identify Namespace with one `lbafe` entry per LBA format.
fn id_ns(id: &ZnsIdentifyNamespace, formats: usize) -> Value {
    let h = &id.head;
    let lbafe: Vec<Value> = id
        .lbafe
        .iter()
        .take(formats)
        .map(|f| json!({ "zsze": f.zsze, "zdes": f.zdes }))
        .collect();
    json!({
        "zoc": h.zoc,
        "ozcs": h.ozcs,
        "mar": h.mar,
        "mor": h.mor,
        "rrl": h.rrl,
        "frl": h.frl,
        "rrl1": h.rrl_frl[0],
        "rrl2": h.rrl_frl[1],
        "rrl3": h.rrl_frl[2],
        "frl1": h.rrl_frl[3],
        "frl2": h.rrl_frl[4],
        "frl3": h.rrl_frl[5],
        "numzrwa": h.numzrwa,
        "zrwafg": h.zrwafg,
        "zrwasz": h.zrwasz,
        "zrwacap": h.zrwacap,
        "lbafe": lbafe,
    })
}

/// `zns report-zones`: reads the zones from `slba` in as many reports as the largest transfer
/// needs (each a Partial Report of what fits), at most `descs` of them (0: all).
fn report_zones<C: NvmeController>(
    ctrl: &C,
    nsid: u32,
    slba: u64,
    descs: u32,
    filter: ZoneReportFilter,
    partial: bool,
) -> Result<Value, AdminError> {
    let ns = zoned_namespace(ctrl, nsid)?;
    let zone_blocks = ns.zoned().map_or(1, |z| z.zone_blocks);
    let mut q = queue(ctrl)?;
    let per_report = (ctrl.max_transfer_bytes() - ZoneReportHeader::SIZE) / ZoneReportHeader::SIZE;
    let mut list = Vec::new();
    let mut total = None;
    let mut next = slba;
    loop {
        let want = if descs == 0 {
            per_report
        } else {
            per_report.min(descs as usize - list.len())
        };
        let bytes = ZoneReportHeader::SIZE * (want + 1);
        let cmd = ZoneMgmtRecv::report_zones(next, bytes as u32).filter(filter);
        // The first report gives the matching count (unless asked for a partial one).
        let cmd = if total.is_none() && !partial {
            cmd
        } else {
            cmd.partial()
        };
        let buf = ctrl.alloc_buffer(bytes)?;
        let buf = q
            .execute(&ns, cmd, Some(buf))
            .map_err(|f| f.error)?
            .expect("a report returns its buffer");
        let report = ZoneReport::parse(&buf[..bytes], 0)
            .map_err(|e| AdminError::BadReport(format!("{e:?}")))?;
        total.get_or_insert(report.nr_zones);
        let got: Vec<_> = report.iter().map(|(d, _)| d).collect();
        let last = got.last().map(|d| d.zslba);
        list.extend(got);
        let done = descs != 0 && list.len() >= descs as usize;
        match last {
            Some(l) if !done && l + zone_blocks < ns.blocks() && report.len() == want => {
                next = l + zone_blocks
            }
            _ => break,
        }
    }
    let zones: Vec<Value> = list
        .iter()
        .map(|d| {
            json!({
                "slba": d.zslba,
                "wp": d.wp,
                "cap": d.zcap,
                "state": d.state().map_or("Unknown State", |s| s.name()),
                "type": match d.zone_type() {
                    ZoneType::SequentialWriteRequired => SEQUENTIAL_WRITE_REQUIRED,
                    ZoneType::Reserved(_) => "Unknown",
                },
                "attrs": d.za,
                "attrs_info": d.zai,
            })
        })
        .collect();
    let nr = if partial {
        zones.len() as u64
    } else {
        total.unwrap_or(0)
    };
    Ok(json!({ "nr_zones": nr, "zone_list": zones }))
}

fn send<C: NvmeController>(
    ctrl: &C,
    zone: &ZoneArgs,
    action: ZoneSendAction,
    zrwa: bool,
) -> Result<Value, AdminError> {
    let ns = zoned_namespace(ctrl, zone.nsid)?;
    let mut cmd = if zrwa && action == ZoneSendAction::Open {
        ZoneMgmtSend::open_with_zrwa(zone.slba)
    } else {
        ZoneMgmtSend::new(zone.slba, action)
    };
    if zone.all {
        cmd = cmd.all();
    }
    let mut q = queue(ctrl)?;
    q.execute(&ns, cmd, None).map_err(|f| f.error)?;
    Ok(json!({
        "zone-mgmt-send": format!("{action:?}"),
        "slba": zone.slba,
        "select-all": zone.all,
        "result": "success",
    }))
}

fn append<C: NvmeController>(
    ctrl: &C,
    nsid: u32,
    zslba: u64,
    size: u64,
    path: &std::path::Path,
) -> Result<Value, AdminError> {
    let ns = zoned_namespace(ctrl, nsid)?;
    let block = u64::from(ns.block_size());
    if size == 0 || size % block != 0 {
        return Err(AdminError::BadAppend(format!(
            "--data-size {size} is not a positive multiple of the {block}-byte block size"
        )));
    }
    let data = std::fs::read(path).map_err(|e| AdminError::DataFile {
        path: path.display().to_string(),
        source: e,
    })?;
    if (data.len() as u64) < size {
        return Err(AdminError::BadAppend(format!(
            "{} holds {} bytes, fewer than --data-size {size}",
            path.display(),
            data.len()
        )));
    }
    let blocks = u32::try_from(size / block).map_err(|_| {
        AdminError::BadAppend(format!("--data-size {size} is too large for one command"))
    })?;
    let cmd = ZoneAppend::new(zslba, blocks);
    let mut buf = ctrl.alloc_buffer(size as usize)?;
    buf[..size as usize].copy_from_slice(&data[..size as usize]);
    let mut q = queue(ctrl)?;
    q.submit(&ns, cmd, Some(buf), 0).map_err(|f| f.error)?;
    let mut result = None;
    while result.is_none() {
        q.poll(|c| result = Some(c.result.map(|dw0| cmd.written_lba(dw0))));
    }
    let lba = result.expect("polled until done")?;
    Ok(
        json!({ "zslba": zslba, "lba": lba, "result": format!("Success appended data to LBA {lba:#x}") }),
    )
}

/// Runs a `zns` subcommand on any controller.
pub fn execute<C: NvmeController>(ctrl: &C, command: &ZnsCommand) -> Result<Value, AdminError> {
    match command {
        ZnsCommand::IdNs { nsid, .. } => {
            let formats = ctrl.identify_namespace(*nsid)?.lba_formats().len();
            Ok(id_ns(&ctrl.zns_identify_namespace(*nsid)?, formats))
        }
        ZnsCommand::IdCtrl(_) => Ok(json!({ "zasl": ctrl.zns_identify_controller()?.zasl })),
        ZnsCommand::ReportZones {
            nsid,
            slba,
            descs,
            state,
            partial,
            ..
        } => {
            let filter = ZoneReportFilter::from_raw(*state).unwrap_or(ZoneReportFilter::All);
            report_zones(ctrl, *nsid, *slba, *descs, filter, *partial)
        }
        ZnsCommand::ResetZone(z) => send(ctrl, z, ZoneSendAction::Reset, false),
        ZnsCommand::OpenZone { zone, zrwa } => send(ctrl, zone, ZoneSendAction::Open, *zrwa),
        ZnsCommand::CloseZone(z) => send(ctrl, z, ZoneSendAction::Close, false),
        ZnsCommand::FinishZone(z) => send(ctrl, z, ZoneSendAction::Finish, false),
        ZnsCommand::OfflineZone(z) => send(ctrl, z, ZoneSendAction::Offline, false),
        ZnsCommand::ZoneMgmtSend { zone, action } => {
            let a = ZoneSendAction::from_raw(*action)
                .filter(|a| *a != ZoneSendAction::SetDescriptorExtension)
                .ok_or(AdminError::BadZoneAction(*action))?;
            send(ctrl, zone, a, false)
        }
        ZnsCommand::ZoneAppend {
            nsid,
            zslba,
            size,
            data,
            ..
        } => append(ctrl, *nsid, *zslba, *size, data),
    }
}
