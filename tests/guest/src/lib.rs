//! Cross-checks between our userspace NVMe tools and the kernel's `nvme` driver, run inside the
//! QEMU test guest.
//!
//! The guest first binds the controller to vfio-pci and saves `nvme-identify --json` output, then
//! hands the controller back to the kernel. This crate reads what the kernel reports for the same
//! controller in sysfs and compares field by field. The kernel is the reference: it parsed the same
//! Identify data independently, so agreement means our Identify parsing is right.
//!
//! Invariant: every comparison produces exactly one [`Check`] line, so a missing namespace or an
//! unreadable attribute is reported as a mismatch rather than silently skipped.

use std::collections::BTreeMap;
use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use serde::Deserialize;

pub mod admin;

/// Size of the unit in which sysfs reports block device sizes (`/sys/block/*/size`), in bytes.
/// This is fixed by the block layer, independent of the namespace's LBA size.
pub const SYSFS_SECTOR_BYTES: u64 = 512;

/// Bytes per KiB, for `max_hw_sectors_kb`.
const KIB: u64 = 1024;

/// Default cap the Linux nvme-pci driver puts on one transfer (`NVME_MAX_KB_SZ`, 4 MiB) on top
/// of the controller's MDTS. Override with `--kernel-max-transfer` for kernels that differ.
pub const DEFAULT_KERNEL_MAX_TRANSFER_BYTES: u64 = 4096 * KIB;

/// Errors that stop the comparison before it can start.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// The JSON file could not be read.
    #[error("cannot read {path}: {source}")]
    ReadJson {
        /// File given on the command line.
        path: PathBuf,
        /// Underlying error.
        source: io::Error,
    },
    /// The JSON does not have the shape `nvme-identify --json` prints.
    #[error("{path} is not nvme-identify --json output: {source}")]
    ParseJson {
        /// File given on the command line.
        path: PathBuf,
        /// Underlying error.
        source: serde_json::Error,
    },
    /// No `/sys/class/nvme/nvmeX` points at the PCI function named in the JSON.
    #[error(
        "no kernel nvme controller for PCI function {bdf} under {class_dir}; is it bound to the \
         nvme driver? (run 'hugepage-setup.sh reset' and wait for /dev/nvme*n* to appear)"
    )]
    ControllerNotFound {
        /// PCI address from the JSON.
        bdf: String,
        /// The directory that was searched.
        class_dir: PathBuf,
    },
    /// A sysfs directory could not be listed.
    #[error("cannot list {path}: {source}")]
    ListDir {
        /// Directory that failed.
        path: PathBuf,
        /// Underlying error.
        source: io::Error,
    },
}

/// The part of `nvme-identify --json` output this checker uses; other fields are ignored.
#[derive(Debug, Clone, Deserialize)]
pub struct IdentifyReport {
    /// PCI address of the controller, e.g. `0000:00:04.0`.
    pub pci_address: String,
    /// Identify Controller fields.
    pub controller: ControllerInfo,
    /// One entry per active namespace.
    pub namespaces: Vec<NamespaceInfo>,
}

/// Identify Controller fields compared against sysfs.
#[derive(Debug, Clone, Deserialize)]
pub struct ControllerInfo {
    /// Model Number (MN).
    pub model: String,
    /// Serial Number (SN).
    pub serial: String,
    /// Firmware Revision (FR).
    pub firmware: String,
    /// Maximum Data Transfer Size in bytes; `None` when the controller reports no limit (MDTS 0).
    pub mdts_bytes: Option<u64>,
    /// Number of namespaces we found active.
    pub namespace_count: u32,
}

/// Identify Namespace fields compared against sysfs.
#[derive(Debug, Clone, Deserialize)]
pub struct NamespaceInfo {
    /// Namespace ID.
    pub nsid: u32,
    /// Namespace Size (NSZE) in logical blocks.
    pub size_blocks: u64,
    /// Data size of the LBA format in use, in bytes.
    pub block_size: u64,
}

/// Outcome of one comparison.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    /// What was compared, e.g. `model` or `ns1 size`.
    pub what: String,
    /// Whether our value agrees with the kernel's.
    pub ok: bool,
    /// Both values and any explanation.
    pub detail: String,
}

impl Check {
    fn new(what: impl Into<String>, ok: bool, detail: impl Into<String>) -> Self {
        Self {
            what: what.into(),
            ok,
            detail: detail.into(),
        }
    }

    /// Compares two displayable values for equality.
    fn equal<T: PartialEq + fmt::Debug>(what: impl Into<String>, ours: T, kernel: T) -> Self {
        let ok = ours == kernel;
        Self::new(what, ok, format!("ours={ours:?} kernel={kernel:?}"))
    }

    /// Compares our number with a sysfs number that may have been unreadable.
    fn equal_num(what: impl Into<String>, ours: u64, kernel: Option<u64>) -> Self {
        let shown = kernel.map_or_else(|| "<unreadable>".to_owned(), |k| k.to_string());
        Self::new(
            what,
            kernel == Some(ours),
            format!("ours={ours} kernel={shown}"),
        )
    }
}

impl fmt::Display for Check {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let tag = if self.ok { "ok" } else { "MISMATCH" };
        write!(f, "{tag} {}: {}", self.what, self.detail)
    }
}

/// Reads and parses `nvme-identify --json` output.
pub fn load_report(path: &Path) -> Result<IdentifyReport, CheckError> {
    let text = fs::read_to_string(path).map_err(|source| CheckError::ReadJson {
        path: path.to_owned(),
        source,
    })?;
    serde_json::from_str(&text).map_err(|source| CheckError::ParseJson {
        path: path.to_owned(),
        source,
    })
}

/// Reads a sysfs attribute with surrounding whitespace removed; `None` when unreadable.
fn read_attr(path: &Path) -> Option<String> {
    fs::read_to_string(path).ok().map(|s| s.trim().to_owned())
}

fn read_u64(path: &Path) -> Option<u64> {
    read_attr(path).and_then(|s| s.parse().ok())
}

fn list_dir(path: &Path) -> Result<Vec<String>, CheckError> {
    let entries = fs::read_dir(path).map_err(|source| CheckError::ListDir {
        path: path.to_owned(),
        source,
    })?;
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    Ok(names)
}

/// Finds the kernel controller (`nvmeX`) whose `device` link ends in `bdf`.
pub fn find_controller(sysfs: &Path, bdf: &str) -> Result<String, CheckError> {
    let class_dir = sysfs.join("class/nvme");
    for name in list_dir(&class_dir)? {
        let Ok(target) = fs::read_link(class_dir.join(&name).join("device")) else {
            continue;
        };
        if target.file_name().is_some_and(|f| f == bdf) {
            return Ok(name);
        }
    }
    Err(CheckError::ControllerNotFound {
        bdf: bdf.to_owned(),
        class_dir,
    })
}

/// If `name` is a namespace entry of a controller directory (`nvme0n1`, or with native
/// multipath the hidden path device `nvme0c0n1`), returns the block device to read (`nvme0n1`).
fn namespace_block_device(name: &str) -> Option<String> {
    let rest = name.strip_prefix("nvme")?;
    let (instance, rest) = split_digits(rest)?;
    // Multipath path devices carry "c<controller>" before "n<nsid>"; the head drops it.
    let rest = match rest.strip_prefix('c') {
        Some(after_c) => split_digits(after_c)?.1,
        None => rest,
    };
    let ns = rest.strip_prefix('n')?;
    let (ns, tail) = split_digits(ns)?;
    tail.is_empty().then(|| format!("nvme{instance}n{ns}"))
}

/// Splits a non-empty leading run of ASCII digits from `s`.
fn split_digits(s: &str) -> Option<(&str, &str)> {
    let end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    (end > 0).then(|| s.split_at(end))
}

/// Block devices of the controller's namespaces, keyed by NSID (from `/sys/block/<dev>/nsid`).
/// Devices whose `nsid` cannot be read are keyed by 0 so they still count.
pub fn kernel_namespaces(sysfs: &Path, ctrl: &str) -> Result<BTreeMap<u32, String>, CheckError> {
    let mut devices: Vec<String> = list_dir(&sysfs.join("class/nvme").join(ctrl))?
        .iter()
        .filter_map(|n| namespace_block_device(n))
        .collect();
    devices.sort();
    devices.dedup();
    let mut by_nsid = BTreeMap::new();
    for dev in devices {
        let nsid = read_u64(&sysfs.join("block").join(&dev).join("nsid"))
            .and_then(|n| u32::try_from(n).ok())
            .unwrap_or(0);
        by_nsid.insert(nsid, dev);
    }
    Ok(by_nsid)
}

/// Compares MDTS. The kernel exposes `min(MDTS, its own cap)` as `max_hw_sectors_kb`: nvme-pci
/// limits one request to `kernel_cap` bytes (NVME_MAX_KB_SZ) whatever the controller allows, so
/// the kernel value can only equal ours when ours is below that cap. We therefore expect
/// `min(ours, kernel_cap)`; a kernel value above our MDTS is always a mismatch, since the kernel
/// never exceeds the controller's limit.
pub fn check_mdts(ours: Option<u64>, kernel_bytes: Option<u64>, kernel_cap: u64) -> Check {
    const WHAT: &str = "mdts";
    let Some(kernel) = kernel_bytes else {
        return Check::new(WHAT, false, "kernel max_hw_sectors_kb unreadable");
    };
    match ours {
        Some(ours) => {
            let expected = ours.min(kernel_cap);
            let ok = kernel == expected;
            let mut detail = format!(
                "ours={ours} bytes, kernel max_hw_sectors_kb*1024={kernel}, \
                 expected min(ours, kernel cap {kernel_cap})={expected}"
            );
            if !ok && kernel < ours {
                detail.push_str(
                    " (the kernel may impose a smaller cap here, e.g. IOMMU DMA limits; \
                     pass --kernel-max-transfer if so)",
                );
            }
            Check::new(WHAT, ok, detail)
        }
        // No controller limit: whatever the kernel shows is its own cap, which cannot contradict us.
        None => Check::new(
            WHAT,
            true,
            format!("ours=unlimited (MDTS 0), kernel uses its own cap of {kernel} bytes"),
        ),
    }
}

/// Runs every comparison between `report` and the kernel's view under `sysfs`.
pub fn compare(
    report: &IdentifyReport,
    sysfs: &Path,
    kernel_cap: u64,
) -> Result<Vec<Check>, CheckError> {
    let ctrl = find_controller(sysfs, &report.pci_address)?;
    let ctrl_dir = sysfs.join("class/nvme").join(&ctrl);
    let c = &report.controller;
    let mut checks = vec![Check::new(
        "controller",
        true,
        format!("{} is kernel {ctrl}", report.pci_address),
    )];
    let attr =
        |name: &str| read_attr(&ctrl_dir.join(name)).unwrap_or_else(|| "<unreadable>".into());
    checks.push(Check::equal(
        "model",
        c.model.trim(),
        attr("model").as_str(),
    ));
    checks.push(Check::equal(
        "serial",
        c.serial.trim(),
        attr("serial").as_str(),
    ));
    checks.push(Check::equal(
        "firmware",
        c.firmware.trim(),
        attr("firmware_rev").as_str(),
    ));

    let namespaces = kernel_namespaces(sysfs, &ctrl)?;
    checks.push(Check::equal(
        "namespace count",
        report.namespaces.len(),
        namespaces.len(),
    ));
    // Internal consistency of our own report: the count we print must match the list we print.
    let listed = report.namespaces.len();
    checks.push(Check::new(
        "namespace_count field",
        usize::try_from(c.namespace_count).is_ok_and(|n| n == listed),
        format!(
            "namespace_count={} namespaces listed={listed}",
            c.namespace_count
        ),
    ));

    // The transfer limit is per controller; any namespace's request queue shows it.
    let mdts = match namespaces.values().next() {
        Some(dev) => {
            let kb = read_u64(
                &sysfs
                    .join("block")
                    .join(dev)
                    .join("queue/max_hw_sectors_kb"),
            );
            check_mdts(c.mdts_bytes, kb.map(|kb| kb * KIB), kernel_cap)
        }
        None => Check::new(
            "mdts",
            false,
            "no namespace block device to read the kernel's limit from",
        ),
    };
    checks.push(mdts);

    for ns in &report.namespaces {
        let Some(dev) = namespaces.get(&ns.nsid) else {
            checks.push(Check::new(
                format!("ns{}", ns.nsid),
                false,
                "no kernel block device with this nsid",
            ));
            continue;
        };
        let block = sysfs.join("block").join(dev);
        let kernel_size = read_u64(&block.join("size")).map(|s| s * SYSFS_SECTOR_BYTES);
        checks.push(Check::equal_num(
            format!("ns{} size bytes ({dev})", ns.nsid),
            ns.size_blocks.saturating_mul(ns.block_size),
            kernel_size,
        ));
        checks.push(Check::equal_num(
            format!("ns{} lba size ({dev})", ns.nsid),
            ns.block_size,
            read_u64(&block.join("queue/logical_block_size")),
        ));
    }
    Ok(checks)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;
    use std::sync::atomic::{AtomicU32, Ordering};

    const BDF: &str = "0000:00:04.0";

    /// A directory under the system temp dir, removed on drop.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new() -> Self {
            static COUNTER: AtomicU32 = AtomicU32::new(0);
            let n = COUNTER.fetch_add(1, Ordering::Relaxed);
            let dir =
                std::env::temp_dir().join(format!("nvme-guest-tests-{}-{n}", std::process::id()));
            let _ = fs::remove_dir_all(&dir);
            fs::create_dir_all(&dir).unwrap();
            Self(dir)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn write(path: &Path, text: &str) {
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, text).unwrap();
    }

    /// Builds a sysfs tree like the 6.1 kernel's with native multipath: controller nvme0 at BDF
    /// with hidden path devices nvme0c0n1/nvme0c0n2 and head block devices nvme0n1/nvme0n2.
    fn fake_sysfs(root: &Path, ns: &[(u32, u64, u64)], max_hw_kb: u64) {
        let pci = root.join("devices/pci0000:00").join(BDF);
        fs::create_dir_all(&pci).unwrap();
        // A decoy controller on another function must not be picked.
        let other = root.join("devices/pci0000:00/0000:00:05.0");
        fs::create_dir_all(&other).unwrap();
        let class = root.join("class/nvme");
        fs::create_dir_all(class.join("nvme1")).unwrap();
        symlink(&other, class.join("nvme1/device")).unwrap();
        let ctrl = class.join("nvme0");
        fs::create_dir_all(&ctrl).unwrap();
        symlink(&pci, ctrl.join("device")).unwrap();
        write(
            &ctrl.join("model"),
            "QEMU NVMe Ctrl                          \n",
        );
        write(&ctrl.join("serial"), "deadbeef            \n");
        write(&ctrl.join("firmware_rev"), "7.2.0   \n");
        for &(nsid, lba, bytes) in ns {
            fs::create_dir_all(ctrl.join(format!("nvme0c0n{nsid}"))).unwrap();
            let blk = root.join("block").join(format!("nvme0n{nsid}"));
            write(&blk.join("nsid"), &format!("{nsid}\n"));
            write(
                &blk.join("size"),
                &format!("{}\n", bytes / SYSFS_SECTOR_BYTES),
            );
            write(&blk.join("queue/logical_block_size"), &format!("{lba}\n"));
            write(
                &blk.join("queue/max_hw_sectors_kb"),
                &format!("{max_hw_kb}\n"),
            );
        }
    }

    fn report() -> IdentifyReport {
        let json = r#"{"pci_address":"0000:00:04.0","controller":{"vid":6966,"ssvid":6900,
            "model":"QEMU NVMe Ctrl","serial":"deadbeef","firmware":"7.2.0","version":"1.4.0",
            "mdts_bytes":524288,"cntlid":0,"max_queue_entries":2048,"io_queue_pairs":8,
            "oacs":["Format NVM"],"oncs":[],"volatile_write_cache":true,"namespace_count":2},
            "namespaces":[
             {"nsid":1,"size_blocks":131072,"capacity_blocks":131072,"utilization_blocks":0,
              "block_size":512,"metadata_size":0,"lba_format_index":0,"lba_formats":[]},
             {"nsid":2,"size_blocks":16384,"capacity_blocks":16384,"utilization_blocks":0,
              "block_size":4096,"metadata_size":0,"lba_format_index":4,"lba_formats":[]}]}"#;
        serde_json::from_str(json).unwrap()
    }

    const MIB64: u64 = 64 << 20;

    #[test]
    fn matching_tree_passes_every_check() {
        let tmp = TempDir::new();
        fake_sysfs(&tmp.0, &[(1, 512, MIB64), (2, 4096, MIB64)], 512);
        let checks = compare(&report(), &tmp.0, DEFAULT_KERNEL_MAX_TRANSFER_BYTES).unwrap();
        assert!(checks.iter().all(|c| c.ok), "{checks:#?}");
        // controller, model, serial, firmware, 2 counts, mdts, 2x(size, lba)
        assert_eq!(checks.len(), 11);
        assert!(checks[0].detail.contains("nvme0"));
    }

    #[test]
    fn mismatching_tree_reports_each_difference() {
        let tmp = TempDir::new();
        // ns2 is half the size and formatted with 512 B blocks; MDTS is smaller in the kernel.
        fake_sysfs(&tmp.0, &[(1, 512, MIB64), (2, 512, MIB64 / 2)], 256);
        fs::write(tmp.0.join("class/nvme/nvme0/serial"), "cafebabe\n").unwrap();
        let checks = compare(&report(), &tmp.0, DEFAULT_KERNEL_MAX_TRANSFER_BYTES).unwrap();
        let bad: Vec<&str> = checks
            .iter()
            .filter(|c| !c.ok)
            .map(|c| c.what.as_str())
            .collect();
        assert_eq!(
            bad,
            [
                "serial",
                "mdts",
                "ns2 size bytes (nvme0n2)",
                "ns2 lba size (nvme0n2)"
            ]
        );
        assert!(checks
            .iter()
            .any(|c| c.to_string().starts_with("MISMATCH serial")));
    }

    #[test]
    fn missing_namespace_is_a_mismatch() {
        let tmp = TempDir::new();
        fake_sysfs(&tmp.0, &[(1, 512, MIB64)], 512);
        let checks = compare(&report(), &tmp.0, DEFAULT_KERNEL_MAX_TRANSFER_BYTES).unwrap();
        let bad: Vec<&str> = checks
            .iter()
            .filter(|c| !c.ok)
            .map(|c| c.what.as_str())
            .collect();
        assert_eq!(bad, ["namespace count", "ns2"]);
    }

    #[test]
    fn unknown_controller_is_an_error() {
        let tmp = TempDir::new();
        fake_sysfs(&tmp.0, &[(1, 512, MIB64)], 512);
        let mut r = report();
        r.pci_address = "0000:00:09.0".into();
        let err = compare(&r, &tmp.0, DEFAULT_KERNEL_MAX_TRANSFER_BYTES).unwrap_err();
        assert!(
            matches!(err, CheckError::ControllerNotFound { ref bdf, .. } if bdf == "0000:00:09.0")
        );
    }

    #[test]
    fn mdts_respects_kernel_cap() {
        let cap = DEFAULT_KERNEL_MAX_TRANSFER_BYTES;
        assert!(check_mdts(Some(512 * KIB), Some(512 * KIB), cap).ok);
        // A controller allowing 8 MiB shows up as the 4 MiB driver cap.
        assert!(check_mdts(Some(8192 * KIB), Some(cap), cap).ok);
        // The kernel never exceeds MDTS.
        assert!(!check_mdts(Some(512 * KIB), Some(1024 * KIB), cap).ok);
        assert!(!check_mdts(Some(512 * KIB), Some(128 * KIB), cap).ok);
        assert!(!check_mdts(Some(512 * KIB), None, cap).ok);
        assert!(check_mdts(None, Some(cap), cap).ok);
    }

    #[test]
    fn namespace_names_map_to_block_devices() {
        assert_eq!(
            namespace_block_device("nvme0n1").as_deref(),
            Some("nvme0n1")
        );
        assert_eq!(
            namespace_block_device("nvme0c0n12").as_deref(),
            Some("nvme0n12")
        );
        assert_eq!(
            namespace_block_device("nvme3c1n2").as_deref(),
            Some("nvme3n2")
        );
        assert_eq!(namespace_block_device("nvme0"), None);
        assert_eq!(namespace_block_device("nvme0n1p1"), None);
        assert_eq!(namespace_block_device("ng0n1"), None);
        assert_eq!(namespace_block_device("power"), None);
    }

    #[test]
    fn bad_json_is_a_parse_error() {
        let tmp = TempDir::new();
        let p = tmp.0.join("id.json");
        fs::write(&p, "{\"pci_address\": 5}").unwrap();
        assert!(matches!(load_report(&p), Err(CheckError::ParseJson { .. })));
        assert!(matches!(
            load_report(&tmp.0.join("absent.json")),
            Err(CheckError::ReadJson { .. })
        ));
    }
}
