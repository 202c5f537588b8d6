//! What `nvme-identify` reports, built from Identify data and the controller registers, and its
//! two renderings: human-readable text and JSON.
//!
//! The JSON schema is a contract with the guest test harness (`tests/guest`): field names and
//! types must not change. Values shown only in the text form are marked `#[serde(skip)]`.
//!
//! The `controller` object also carries the raw Identify Controller fields under nvme-cli's
//! `nvme id-ctrl -o json` keys (nvme-cli 2.x, `json_nvme_id_ctrl` in nvme-print-json.c,
//! nvme-cli 2.8), see [`IdCtrlFields`]. Keys we already had with another meaning keep ours:
//! `oacs` and `oncs` are lists of names here (nvme-cli prints the bit masks); `vid`, `ssvid`
//! and `cntlid` mean the same in both. The power state descriptors (`psds`) are not included.

use std::fmt::Write as _;
use std::time::Duration;

use nvme_driver::spec::{Cap, IdentifyController, IdentifyNamespace, Version};
use serde::Serialize;

/// Everything `nvme-identify` prints about one controller.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// PCI address of the controller, e.g. `0000:00:04.0`.
    pub pci_address: String,
    /// Identify Controller and register data.
    pub controller: ControllerReport,
    /// One entry per active namespace, in NSID order.
    pub namespaces: Vec<NamespaceReport>,
    /// Active namespaces the driver cannot do I/O on, with the reason (e.g. a format with
    /// metadata). Not counted in `namespaces`.
    pub unsupported_namespaces: Vec<UnsupportedNamespace>,
}

/// An active namespace the driver refuses, and why.
#[derive(Debug, Clone, Serialize)]
pub struct UnsupportedNamespace {
    /// Namespace ID.
    pub nsid: u32,
    /// Why the driver cannot use it, and how to fix that.
    pub reason: String,
}

/// Controller fields.
#[derive(Debug, Clone, Serialize)]
pub struct ControllerReport {
    /// PCI Vendor ID.
    pub vid: u16,
    /// PCI Subsystem Vendor ID.
    pub ssvid: u16,
    /// Model Number.
    pub model: String,
    /// Serial Number.
    pub serial: String,
    /// Firmware Revision.
    pub firmware: String,
    /// NVMe version from the VS register, `major.minor.tertiary`.
    pub version: String,
    /// Maximum Data Transfer Size in bytes as Identify reports it; `None` = no limit (MDTS 0).
    pub mdts_bytes: Option<u64>,
    /// Controller ID.
    pub cntlid: u16,
    /// Largest I/O queue (CAP.MQES + 1).
    pub max_queue_entries: u32,
    /// I/O queue pairs the controller granted.
    pub io_queue_pairs: u16,
    /// Optional admin commands supported (OACS), by name.
    pub oacs: Vec<&'static str>,
    /// Optional NVM commands supported (ONCS), by name.
    pub oncs: Vec<&'static str>,
    /// A volatile write cache is present (VWC bit 0).
    pub volatile_write_cache: bool,
    /// Number of active namespaces.
    pub namespace_count: u32,
    /// Distance between doorbell registers in bytes (4 << CAP.DSTRD).
    #[serde(skip)]
    pub doorbell_stride: usize,
    /// Worst-case time for CSTS.RDY to change (CAP.TO).
    #[serde(skip)]
    pub ready_timeout: Duration,
    /// Number of Namespaces (NN): the largest valid NSID.
    #[serde(skip)]
    pub max_nsid: u32,
    /// Raw Identify Controller fields under nvme-cli's keys (flattened into this object).
    #[serde(flatten)]
    pub id_ctrl: IdCtrlFields,
}

/// Identify Controller fields as `nvme id-ctrl -o json` (nvme-cli 2.x) names and prints them:
/// numbers as the raw field values, 128-bit capacities as exact integers, strings trimmed.
#[allow(missing_docs)] // Each field is the Identify Controller field of the same name.
#[derive(Debug, Clone, Serialize)]
pub struct IdCtrlFields {
    pub sn: String,
    pub mn: String,
    pub fr: String,
    pub rab: u8,
    pub ieee: u32,
    pub cmic: u8,
    pub mdts: u8,
    pub ver: u32,
    pub rtd3r: u32,
    pub rtd3e: u32,
    pub oaes: u32,
    pub ctratt: u32,
    pub rrls: u16,
    pub cntrltype: u8,
    pub fguid: String,
    pub crdt1: u16,
    pub crdt2: u16,
    pub crdt3: u16,
    pub nvmsr: u8,
    pub vwci: u8,
    pub mec: u8,
    pub acl: u8,
    pub aerl: u8,
    pub frmw: u8,
    pub lpa: u8,
    pub elpe: u8,
    pub npss: u8,
    pub avscc: u8,
    pub apsta: u8,
    pub wctemp: u16,
    pub cctemp: u16,
    pub mtfa: u16,
    pub hmpre: u32,
    pub hmmin: u32,
    pub tnvmcap: u128,
    pub unvmcap: u128,
    pub rpmbs: u32,
    pub edstt: u16,
    pub dsto: u8,
    pub fwug: u8,
    pub kas: u16,
    pub hctma: u16,
    pub mntmt: u16,
    pub mxtmt: u16,
    pub sanicap: u32,
    pub hmminds: u32,
    pub hmmaxd: u16,
    pub nsetidmax: u16,
    pub endgidmax: u16,
    pub anatt: u8,
    pub anacap: u8,
    pub anagrpmax: u32,
    pub nanagrpid: u32,
    pub pels: u32,
    pub domainid: u16,
    pub megcap: u128,
    pub sqes: u8,
    pub cqes: u8,
    pub maxcmd: u16,
    pub nn: u32,
    pub fuses: u16,
    pub fna: u8,
    pub vwc: u8,
    pub awun: u16,
    pub awupf: u16,
    pub icsvscc: u8,
    pub nwpc: u8,
    pub acwu: u16,
    pub ocfs: u16,
    pub sgls: u32,
    pub mnan: u32,
    pub maxdna: u128,
    pub maxcna: u32,
    pub subnqn: String,
    pub ioccsz: u32,
    pub iorcsz: u32,
    pub icdoff: u16,
    pub fcatt: u8,
    pub msdbd: u8,
    pub ofcs: u16,
}

/// Byte boundaries of the 8-4-4-4-12 hex groups of a GUID.
const GUID_GROUPS: [usize; 4] = [4, 6, 8, 10];

/// A 16-byte GUID as nvme-cli prints it: `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`.
fn guid(bytes: &[u8; 16]) -> String {
    let mut s = String::with_capacity(36);
    for (i, b) in bytes.iter().enumerate() {
        if GUID_GROUPS.contains(&i) {
            s.push('-');
        }
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// A NUL-terminated UTF-8 field (SUBNQN), up to the first NUL, invalid bytes replaced.
fn nul_terminated(raw: &[u8]) -> String {
    let end = raw.iter().position(|&b| b == 0).unwrap_or(raw.len());
    String::from_utf8_lossy(&raw[..end]).into_owned()
}

impl IdCtrlFields {
    /// The fields of `id`.
    pub fn new(id: &IdentifyController) -> Self {
        let [ieee0, ieee1, ieee2] = id.ieee;
        IdCtrlFields {
            sn: id.serial(),
            mn: id.model(),
            fr: id.firmware(),
            rab: id.rab,
            ieee: u32::from_le_bytes([ieee0, ieee1, ieee2, 0]),
            cmic: id.cmic,
            mdts: id.mdts,
            ver: id.ver,
            rtd3r: id.rtd3r,
            rtd3e: id.rtd3e,
            oaes: id.oaes,
            ctratt: id.ctratt,
            rrls: id.rrls,
            cntrltype: id.cntrltype,
            fguid: guid(&id.fguid),
            crdt1: id.crdt1,
            crdt2: id.crdt2,
            crdt3: id.crdt3,
            nvmsr: id.nvmsr,
            vwci: id.vwci,
            mec: id.mec,
            acl: id.acl,
            aerl: id.aerl,
            frmw: id.frmw,
            lpa: id.lpa,
            elpe: id.elpe,
            npss: id.npss,
            avscc: id.avscc,
            apsta: id.apsta,
            wctemp: id.wctemp,
            cctemp: id.cctemp,
            mtfa: id.mtfa,
            hmpre: id.hmpre,
            hmmin: id.hmmin,
            tnvmcap: u128::from_le_bytes(id.tnvmcap),
            unvmcap: u128::from_le_bytes(id.unvmcap),
            rpmbs: id.rpmbs,
            edstt: id.edstt,
            dsto: id.dsto,
            fwug: id.fwug,
            kas: id.kas,
            hctma: id.hctma,
            mntmt: id.mntmt,
            mxtmt: id.mxtmt,
            sanicap: id.sanicap,
            hmminds: id.hmminds,
            hmmaxd: id.hmmaxd,
            nsetidmax: id.nsetidmax,
            endgidmax: id.endgidmax,
            anatt: id.anatt,
            anacap: id.anacap,
            anagrpmax: id.anagrpmax,
            nanagrpid: id.nanagrpid,
            pels: id.pels,
            domainid: id.domainid,
            megcap: u128::from_le_bytes(id.megcap),
            sqes: id.sqes,
            cqes: id.cqes,
            maxcmd: id.maxcmd,
            nn: id.nn,
            fuses: id.fuses,
            fna: id.fna,
            vwc: id.vwc,
            awun: id.awun,
            awupf: id.awupf,
            icsvscc: id.icsvscc,
            nwpc: id.nwpc,
            acwu: id.acwu,
            ocfs: id.ocfs,
            sgls: id.sgls,
            mnan: id.mnan,
            maxdna: u128::from_le_bytes(id.maxdna),
            maxcna: id.maxcna,
            subnqn: nul_terminated(&id.subnqn),
            ioccsz: id.ioccsz,
            iorcsz: id.iorcsz,
            icdoff: id.icdoff,
            fcatt: id.fcatt,
            msdbd: id.msdbd,
            ofcs: id.ofcs,
        }
    }
}

/// Namespace fields.
#[derive(Debug, Clone, Serialize)]
pub struct NamespaceReport {
    /// Namespace ID.
    pub nsid: u32,
    /// Namespace Size (NSZE) in blocks.
    pub size_blocks: u64,
    /// Namespace Capacity (NCAP) in blocks.
    pub capacity_blocks: u64,
    /// Namespace Utilization (NUSE) in blocks.
    pub utilization_blocks: u64,
    /// Data bytes per block of the format in use.
    pub block_size: u32,
    /// Metadata bytes per block of the format in use.
    pub metadata_size: u16,
    /// Index of the format in use.
    pub lba_format_index: usize,
    /// Every supported LBA format.
    pub lba_formats: Vec<LbaFormatReport>,
}

/// One LBA format.
#[derive(Debug, Clone, Serialize)]
pub struct LbaFormatReport {
    /// Index in the namespace's format table.
    pub index: usize,
    /// Data bytes per block (0 = format not available).
    pub data_size: u32,
    /// Metadata bytes per block.
    pub metadata_size: u16,
    /// Relative Performance (0 = best .. 3 = degraded).
    pub relative_performance: u8,
    /// The namespace is formatted with this format.
    pub in_use: bool,
}

/// Register values the report needs besides Identify data.
#[derive(Debug, Clone, Copy)]
pub struct Registers {
    /// Controller Capabilities.
    pub cap: Cap,
    /// Version register.
    pub version: Version,
    /// I/O queue pairs granted.
    pub io_queue_pairs: u16,
}

impl Report {
    /// Builds the report from a controller's data; `namespaces` are the active ones.
    pub fn new<'a>(
        pci_address: &str,
        id: &IdentifyController,
        regs: Registers,
        namespaces: impl IntoIterator<Item = (u32, &'a IdentifyNamespace)>,
    ) -> Self {
        let namespaces: Vec<NamespaceReport> = namespaces
            .into_iter()
            .map(|(nsid, ns)| namespace(nsid, ns))
            .collect();
        let controller = ControllerReport {
            vid: id.vid,
            ssvid: id.ssvid,
            model: id.model(),
            serial: id.serial(),
            firmware: id.firmware(),
            version: regs.version.to_string(),
            mdts_bytes: id.mdts_bytes(regs.cap.min_page_size()).map(|b| b as u64),
            cntlid: id.cntlid,
            max_queue_entries: regs.cap.max_queue_entries(),
            io_queue_pairs: regs.io_queue_pairs,
            oacs: id.oacs_flags().names(),
            oncs: id.oncs_flags().names(),
            volatile_write_cache: id.vwc_present(),
            namespace_count: u32::try_from(namespaces.len()).unwrap_or(u32::MAX),
            doorbell_stride: regs.cap.doorbell_stride(),
            ready_timeout: regs.cap.timeout(),
            max_nsid: id.nn,
            id_ctrl: IdCtrlFields::new(id),
        };
        Report {
            pci_address: pci_address.to_owned(),
            controller,
            namespaces,
            unsupported_namespaces: Vec::new(),
        }
    }

    /// Adds the active namespaces the driver refused.
    pub fn with_unsupported(mut self, unsupported: &[(u32, String)]) -> Self {
        self.unsupported_namespaces = unsupported
            .iter()
            .map(|(nsid, reason)| UnsupportedNamespace {
                nsid: *nsid,
                reason: reason.clone(),
            })
            .collect();
        self
    }

    /// The JSON form (pretty-printed, no trailing newline).
    pub fn to_json(&self) -> serde_json::Result<String> {
        serde_json::to_string_pretty(self)
    }

    /// The human-readable form.
    pub fn to_text(&self) -> String {
        let c = &self.controller;
        let mut s = String::new();
        let list = |names: &[&str]| {
            if names.is_empty() {
                "(none)".to_owned()
            } else {
                names.join(", ")
            }
        };
        // Writing to a String cannot fail.
        let _ = writeln!(s, "NVMe controller at {}", self.pci_address);
        let _ = writeln!(s, "  Model:                  {}", c.model);
        let _ = writeln!(s, "  Serial:                 {}", c.serial);
        let _ = writeln!(s, "  Firmware:               {}", c.firmware);
        let _ = writeln!(
            s,
            "  PCI vendor / subsystem: {:#06x} / {:#06x}",
            c.vid, c.ssvid
        );
        let _ = writeln!(s, "  NVMe version:           {}", c.version);
        let _ = writeln!(s, "  Controller ID:          {}", c.cntlid);
        let mdts = c.mdts_bytes.map_or_else(
            || "unlimited".to_owned(),
            |b| format!("{b} bytes ({})", human_bytes(b)),
        );
        let _ = writeln!(s, "  Max data transfer:      {mdts}");
        let _ = writeln!(s, "  Max queue entries:      {}", c.max_queue_entries);
        let _ = writeln!(s, "  I/O queue pairs:        {}", c.io_queue_pairs);
        let _ = writeln!(s, "  Doorbell stride:        {} bytes", c.doorbell_stride);
        let _ = writeln!(
            s,
            "  Ready timeout (CAP.TO): {} ms",
            c.ready_timeout.as_millis()
        );
        let _ = writeln!(s, "  Optional admin (OACS):  {}", list(&c.oacs));
        let _ = writeln!(s, "  Optional NVM (ONCS):    {}", list(&c.oncs));
        let _ = writeln!(
            s,
            "  Volatile write cache:   {}",
            if c.volatile_write_cache {
                "present"
            } else {
                "absent"
            }
        );
        let _ = writeln!(
            s,
            "  Namespaces:             {} active of {} (NN)",
            c.namespace_count, c.max_nsid
        );
        for ns in &self.namespaces {
            let bytes = |blocks: u64| human_bytes(blocks.saturating_mul(u64::from(ns.block_size)));
            let _ = writeln!(s, "Namespace {}", ns.nsid);
            let _ = writeln!(
                s,
                "  Size:                   {} blocks ({})",
                ns.size_blocks,
                bytes(ns.size_blocks)
            );
            let _ = writeln!(
                s,
                "  Capacity:               {} blocks ({})",
                ns.capacity_blocks,
                bytes(ns.capacity_blocks)
            );
            let _ = writeln!(
                s,
                "  Utilization:            {} blocks ({})",
                ns.utilization_blocks,
                bytes(ns.utilization_blocks)
            );
            let _ = writeln!(s, "  Block size:             {} bytes", ns.block_size);
            let _ = writeln!(s, "  Metadata size:          {} bytes", ns.metadata_size);
            let _ = writeln!(s, "  LBA formats:");
            for f in &ns.lba_formats {
                let _ = writeln!(
                    s,
                    "    {} #{:<2} data {:>5} bytes, metadata {:>3} bytes, relative performance {}{}",
                    if f.in_use { '*' } else { ' ' },
                    f.index,
                    f.data_size,
                    f.metadata_size,
                    f.relative_performance,
                    if f.in_use { " (in use)" } else { "" }
                );
            }
        }
        for ns in &self.unsupported_namespaces {
            let _ = writeln!(s, "Namespace {} (not usable by this driver)", ns.nsid);
            let _ = writeln!(s, "  Reason:                 {}", ns.reason);
        }
        s
    }
}

fn namespace(nsid: u32, ns: &IdentifyNamespace) -> NamespaceReport {
    let current = ns.lba_format_index();
    let format = ns.current_lba_format();
    NamespaceReport {
        nsid,
        size_blocks: ns.nsze,
        capacity_blocks: ns.ncap,
        utilization_blocks: ns.nuse,
        block_size: format.data_size(),
        metadata_size: format.metadata_size(),
        lba_format_index: current,
        lba_formats: ns
            .lba_formats()
            .iter()
            .enumerate()
            .map(|(index, f)| LbaFormatReport {
                index,
                data_size: f.data_size(),
                metadata_size: f.metadata_size(),
                relative_performance: f.relative_performance(),
                in_use: index == current,
            })
            .collect(),
    }
}

/// Binary units, largest first, for [`human_bytes`].
const UNITS: [(&str, u64); 4] = [
    ("TiB", 1 << 40),
    ("GiB", 1 << 30),
    ("MiB", 1 << 20),
    ("KiB", 1 << 10),
];

/// `bytes` in the largest binary unit it fills at least once, e.g. `64.00 MiB`.
pub fn human_bytes(bytes: u64) -> String {
    match UNITS.iter().find(|&&(_, size)| bytes >= size) {
        Some(&(unit, size)) => format!("{:.2} {unit}", bytes as f64 / size as f64),
        None => format!("{bytes} B"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvme_driver::spec::identify::fill_ascii_field;
    use nvme_driver::spec::{LbaFormat, Oacs, Oncs};

    const QEMU_VID: u16 = 0x1b36;
    const QEMU_SSVID: u16 = 0x1af4;

    fn controller(mdts: u8) -> IdentifyController {
        let mut id = IdentifyController {
            vid: QEMU_VID,
            ssvid: QEMU_SSVID,
            mdts,
            cntlid: 3,
            nn: 256,
            vwc: 1,
            oacs: (Oacs::FORMAT_NVM | Oacs::NAMESPACE_MANAGEMENT).bits(),
            oncs: Oncs::WRITE_ZEROES.bits(),
            ..IdentifyController::default()
        };
        fill_ascii_field(&mut id.mn, "QEMU NVMe Ctrl");
        fill_ascii_field(&mut id.sn, "deadbeef");
        fill_ascii_field(&mut id.fr, "7.2.0");
        id
    }

    fn namespace_4k() -> IdentifyNamespace {
        let mut ns = IdentifyNamespace {
            nsze: 16384,
            ncap: 16384,
            nuse: 1024,
            nlbaf: 1,
            flbas: 1,
            ..IdentifyNamespace::default()
        };
        ns.lbaf[0] = LbaFormat::new(9, 0);
        ns.lbaf[1] = LbaFormat::new(12, 8);
        ns
    }

    fn regs() -> Registers {
        // MQES 2047 (0-based), TO 15 x 500 ms, DSTRD 0, MPSMIN 0 (4 KiB).
        Registers {
            cap: Cap::new(2047, true, 15, 0, true, 0, 4),
            version: Version::new(1, 4, 0),
            io_queue_pairs: 8,
        }
    }

    #[test]
    fn json_has_the_harness_schema() {
        let ns = namespace_4k();
        let report = Report::new("0000:00:04.0", &controller(7), regs(), [(1, &ns)]);
        let v: serde_json::Value = serde_json::from_str(&report.to_json().unwrap()).unwrap();
        assert_eq!(v["pci_address"], "0000:00:04.0");
        let c = &v["controller"];
        assert_eq!(c["vid"], QEMU_VID);
        assert_eq!(c["ssvid"], QEMU_SSVID);
        assert_eq!(c["model"], "QEMU NVMe Ctrl");
        assert_eq!(c["serial"], "deadbeef");
        assert_eq!(c["firmware"], "7.2.0");
        assert_eq!(c["version"], "1.4.0");
        assert_eq!(c["mdts_bytes"], 128 * 4096);
        assert_eq!(c["cntlid"], 3);
        assert_eq!(c["max_queue_entries"], 2048);
        assert_eq!(c["io_queue_pairs"], 8);
        assert_eq!(c["volatile_write_cache"], true);
        assert_eq!(c["namespace_count"], 1);
        assert!(c["oacs"].as_array().unwrap().len() == 2);
        assert!(
            c.get("doorbell_stride").is_none(),
            "text-only fields stay out of the JSON"
        );
        let n = &v["namespaces"][0];
        assert_eq!(n["nsid"], 1);
        assert_eq!(n["size_blocks"], 16384);
        assert_eq!(n["utilization_blocks"], 1024);
        assert_eq!(n["block_size"], 4096);
        assert_eq!(n["metadata_size"], 8);
        assert_eq!(n["lba_format_index"], 1);
        let formats = n["lba_formats"].as_array().unwrap();
        assert_eq!(formats.len(), 2);
        assert_eq!(formats[0]["data_size"], 512);
        assert_eq!(formats[0]["in_use"], false);
        assert_eq!(formats[1]["in_use"], true);
    }

    #[test]
    fn json_adds_nvme_cli_id_ctrl_keys() {
        let mut id = controller(7);
        id.elpe = 63;
        id.wctemp = 343;
        id.ieee = [0x00, 0x54, 0x52];
        id.tnvmcap[..8].copy_from_slice(&(1u64 << 40).to_le_bytes());
        id.fguid = core::array::from_fn(|i| i as u8);
        id.subnqn[..22].copy_from_slice(b"nqn.2019-08.org.qemu:x");
        id.sqes = 0x66;
        let report = Report::new("0000:00:04.0", &id, regs(), []);
        let v: serde_json::Value = serde_json::from_str(&report.to_json().unwrap()).unwrap();
        let c = &v["controller"];
        assert_eq!(c["nn"], 256);
        assert_eq!(c["mdts"], 7);
        assert_eq!(c["elpe"], 63);
        assert_eq!(c["wctemp"], 343);
        assert_eq!(c["ieee"], 0x525400);
        assert_eq!(c["tnvmcap"], 1u64 << 40);
        assert_eq!(c["fguid"], "00010203-0405-0607-0809-0a0b0c0d0e0f");
        assert_eq!(c["subnqn"], "nqn.2019-08.org.qemu:x");
        assert_eq!(c["sqes"], 0x66);
        assert_eq!(c["sn"], "deadbeef");
        assert_eq!(c["mn"], "QEMU NVMe Ctrl");
        assert_eq!(c["fr"], "7.2.0");
        // Existing keys keep their meaning: names, not the nvme-cli masks.
        assert_eq!(c["oacs"][0], "Format NVM");
        assert_eq!(c["mdts_bytes"], 128 * 4096);
        for key in [
            "ver",
            "lpa",
            "cntrltype",
            "megcap",
            "maxdna",
            "sgls",
            "ofcs",
        ] {
            assert!(c.get(key).is_some(), "missing {key}");
        }
    }

    #[test]
    fn unlimited_mdts_is_null_and_text_says_so() {
        let report = Report::new("0000:00:04.0", &controller(0), regs(), []);
        let v: serde_json::Value = serde_json::from_str(&report.to_json().unwrap()).unwrap();
        assert!(v["controller"]["mdts_bytes"].is_null());
        assert_eq!(v["controller"]["namespace_count"], 0);
        let text = report.to_text();
        assert!(text.contains("unlimited"), "{text}");
        assert!(text.contains("0x1b36"), "{text}");
        assert!(text.contains("7500 ms"), "{text}");
        assert!(text.contains("0 active of 256"), "{text}");
    }

    #[test]
    fn text_marks_the_format_in_use() {
        let ns = namespace_4k();
        let text = Report::new("0000:00:04.0", &controller(5), regs(), [(7, &ns)]).to_text();
        assert!(text.contains("Namespace 7"), "{text}");
        assert!(text.contains("16384 blocks (64.00 MiB)"), "{text}");
        let in_use: Vec<&str> = text.lines().filter(|l| l.contains("(in use)")).collect();
        assert_eq!(in_use.len(), 1);
        assert!(in_use[0].contains("4096 bytes"), "{}", in_use[0]);
    }

    #[test]
    fn human_units() {
        assert_eq!(human_bytes(0), "0 B");
        assert_eq!(human_bytes(1023), "1023 B");
        assert_eq!(human_bytes(1536), "1.50 KiB");
        assert_eq!(human_bytes(64 << 20), "64.00 MiB");
        assert_eq!(human_bytes(3 << 30), "3.00 GiB");
    }
}
