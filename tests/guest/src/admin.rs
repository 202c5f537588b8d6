//! `guest-check admin DIR`: compares `nvme-admin -o json` output (through our driver) with
//! nvme-cli's output for the same controller on the kernel driver, field by field. The guest
//! case (`tests/qemu/cases/admin.sh`) saves into DIR:
//!
//! - `ours-id-ctrl.json`, `ours-id-ns.json`, `ours-smart-log.json`, `ours-list-ns.json`,
//!   `ours-ns-descs.json`, `ours-fw-log.json`, `ours-effects-log.json`, `ours-feature-FID.json`;
//! - with nvme-cli in the guest: `kernel-id-ctrl.json`, `kernel-id-ns.json`,
//!   `kernel-smart-log.json`, `kernel-list-ns.json`, `kernel-ns-descs.json`, `kernel-fw-log.json`,
//!   `kernel-effects-log.json` (`nvme ... -o json`; fw-log compared without the device name,
//!   effects-log by opcode and effects, the names being each tool's own) and `kernel-feature-FID.txt` (nvme-cli 2.3's
//!   get-feature prints text only: `get-feature:0x06 (...), Current value:0x00000001`);
//! - without it, the comparison is against sysfs (`--sysfs`): serial, model, firmware_rev and
//!   the namespace's size.
//!
//! Invariant: one [`Check`] per compared field; a missing key is a mismatch, never skipped.

use std::fs;
use std::path::Path;

use serde_json::Value;

use crate::{Check, CheckError, SYSFS_SECTOR_BYTES};

/// Identify Controller keys compared (strings trimmed: nvme-cli prints the padded field).
pub const ID_CTRL_KEYS: [&str; 7] = ["vid", "sn", "mn", "fr", "mdts", "oacs", "oncs"];
/// Identify Namespace keys compared (and the LBA format list).
pub const ID_NS_KEYS: [&str; 4] = ["nsze", "ncap", "flbas", "nlbaf"];
/// SMART keys that do not change between two reads on an idle controller.
pub const SMART_KEYS: [&str; 6] = [
    "critical_warning",
    "temperature",
    "avail_spare",
    "spare_thresh",
    "percent_used",
    "media_errors",
];
/// Features compared (Arbitration, Power Management, Temperature Threshold, Volatile Write
/// Cache, Interrupt Coalescing): neither driver changes them.
pub const FEATURES: [u8; 5] = [0x01, 0x02, 0x04, 0x06, 0x08];

fn read_json(path: &Path) -> Result<Value, CheckError> {
    let text = fs::read_to_string(path).map_err(|source| CheckError::ReadJson {
        path: path.to_owned(),
        source,
    })?;
    serde_json::from_str(&text).map_err(|source| CheckError::ParseJson {
        path: path.to_owned(),
        source,
    })
}

/// A JSON value as comparable text: strings trimmed, numbers as written.
fn text(v: &Value) -> Option<String> {
    match v {
        Value::Null => None,
        Value::String(s) => Some(s.trim().to_owned()),
        other => Some(other.to_string()),
    }
}

fn compare_keys(prefix: &str, keys: &[&str], ours: &Value, kernel: &Value) -> Vec<Check> {
    keys.iter()
        .map(|k| {
            let (o, n) = (text(&ours[k]), text(&kernel[k]));
            Check::new(
                format!("{prefix} {k}"),
                o.is_some() && o == n,
                format!("ours={o:?} nvme-cli={n:?}"),
            )
        })
        .collect()
}

/// The LBA formats as (ms, ds, rp) triples.
fn lbafs(v: &Value) -> Vec<(Option<u64>, Option<u64>, Option<u64>)> {
    v["lbafs"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|f| (f["ms"].as_u64(), f["ds"].as_u64(), f["rp"].as_u64()))
                .collect()
        })
        .unwrap_or_default()
}

/// The value nvme-cli's get-feature text reports (`... value:0x00000001`).
pub fn feature_value_from_text(text: &str) -> Option<u32> {
    let at = text.find("value:")? + "value:".len();
    let word = text[at..].split_whitespace().next()?;
    let digits = word.trim_start_matches("0x");
    u32::from_str_radix(digits, 16).ok()
}

/// Our get-feature JSON's value (`{"feature: 0xNN": {"Current": "0x..."}}`).
pub fn feature_value_from_json(v: &Value, fid: u8) -> Option<u32> {
    let s = v[format!("feature: {fid:#04x}")]["Current"].as_str()?;
    u32::from_str_radix(s.trim_start_matches("0x"), 16).ok()
}

/// The single device object of a fw-log (`{"<device>": {...}}`; the device names differ).
fn only_object(v: &Value) -> Option<&Value> {
    let m = v.as_object()?;
    (m.len() == 1).then(|| m.values().next()).flatten()
}

fn compare_fw_log(dir: &Path) -> Result<Check, CheckError> {
    let ours = read_json(&dir.join("ours-fw-log.json"))?;
    let kernel = read_json(&dir.join("kernel-fw-log.json"))?;
    let (o, k) = (only_object(&ours), only_object(&kernel));
    Ok(Check::new(
        "fw-log slots",
        o.is_some() && o == k,
        format!("ours={o:?} nvme-cli={k:?}"),
    ))
}

/// `(set, opcode, effects)` of an effects-log page, from the `ACS_<op> (<name>)` keys (the
/// names are each tool's own).
fn effects(v: &Value) -> Vec<(String, u64, Option<u64>)> {
    let mut out = Vec::new();
    for (set, prefix) in [("admin_cmd_set", "ACS_"), ("io_cmd_set", "IOCS_")] {
        if let Some(m) = v[0][set].as_object() {
            for (key, effect) in m {
                let op = key
                    .strip_prefix(prefix)
                    .and_then(|r| r.split(' ').next())
                    .and_then(|n| n.parse().ok());
                if let Some(op) = op {
                    out.push((set.to_owned(), op, effect.as_u64()));
                }
            }
        }
    }
    out.sort();
    out
}

fn compare_effects_log(dir: &Path) -> Result<Check, CheckError> {
    let ours = effects(&read_json(&dir.join("ours-effects-log.json"))?);
    let kernel = effects(&read_json(&dir.join("kernel-effects-log.json"))?);
    Ok(Check::new(
        "effects-log opcodes",
        !ours.is_empty() && ours == kernel,
        format!("ours={ours:?} nvme-cli={kernel:?}"),
    ))
}

/// Compares the saved outputs in `dir` with nvme-cli's.
pub fn compare_with_nvme_cli(dir: &Path) -> Result<Vec<Check>, CheckError> {
    let mut checks = Vec::new();
    for (name, keys) in [
        ("id-ctrl", &ID_CTRL_KEYS[..]),
        ("id-ns", &ID_NS_KEYS[..]),
        ("smart-log", &SMART_KEYS[..]),
    ] {
        let ours = read_json(&dir.join(format!("ours-{name}.json")))?;
        let kernel = read_json(&dir.join(format!("kernel-{name}.json")))?;
        checks.extend(compare_keys(name, keys, &ours, &kernel));
        if name == "id-ns" {
            let (o, k) = (lbafs(&ours), lbafs(&kernel));
            checks.push(Check::new(
                "id-ns lbafs",
                !o.is_empty() && o == k,
                format!("ours={o:?} nvme-cli={k:?}"),
            ));
        }
    }
    // Whole lists: the Active Namespace ID list and namespace 1's descriptors.
    for (name, key) in [("list-ns", "nsid_list"), ("ns-descs", "ns-descs")] {
        let ours = read_json(&dir.join(format!("ours-{name}.json")))?;
        let kernel = read_json(&dir.join(format!("kernel-{name}.json")))?;
        let (o, k) = (&ours[key], &kernel[key]);
        checks.push(Check::new(
            format!("{name} {key}"),
            o.is_array() && o == k,
            format!("ours={o} nvme-cli={k}"),
        ));
    }
    checks.push(compare_fw_log(dir)?);
    checks.push(compare_effects_log(dir)?);
    for fid in FEATURES {
        let ours = read_json(&dir.join(format!("ours-feature-{fid}.json")))?;
        let path = dir.join(format!("kernel-feature-{fid}.txt"));
        let kernel = fs::read_to_string(&path).map_err(|source| CheckError::ReadJson {
            path: path.clone(),
            source,
        })?;
        let (o, k) = (
            feature_value_from_json(&ours, fid),
            feature_value_from_text(&kernel),
        );
        checks.push(Check::new(
            format!("get-feature {fid:#04x}"),
            o.is_some() && o == k,
            format!("ours={o:x?} nvme-cli={k:x?}"),
        ));
    }
    Ok(checks)
}

/// Without nvme-cli: our id-ctrl strings and namespace 1's size against the kernel's sysfs
/// (`class/nvme/nvme0/{serial,model,firmware_rev}`, `block/nvme0n1/size`).
pub fn compare_with_sysfs(dir: &Path, sysfs: &Path) -> Result<Vec<Check>, CheckError> {
    let ctrl = read_json(&dir.join("ours-id-ctrl.json"))?;
    let ns = read_json(&dir.join("ours-id-ns.json"))?;
    let attr = |p: &str| {
        fs::read_to_string(sysfs.join(p))
            .ok()
            .map(|s| s.trim().to_owned())
    };
    let mut checks = Vec::new();
    for (key, file) in [
        ("sn", "class/nvme/nvme0/serial"),
        ("mn", "class/nvme/nvme0/model"),
        ("fr", "class/nvme/nvme0/firmware_rev"),
    ] {
        let (o, k) = (text(&ctrl[key]), attr(file));
        checks.push(Check::new(
            format!("id-ctrl {key}"),
            o.is_some() && o == k,
            format!("ours={o:?} sysfs={k:?}"),
        ));
    }
    let flbas = ns["flbas"].as_u64().unwrap_or(0) & 0xF;
    let ds = ns["lbafs"][flbas as usize]["ds"].as_u64();
    let bytes = ds.zip(ns["nsze"].as_u64()).map(|(ds, n)| n << ds);
    let sectors = attr("block/nvme0n1/size").and_then(|s| s.parse::<u64>().ok());
    checks.push(Check::new(
        "id-ns nsze",
        bytes.is_some() && bytes == sectors.map(|s| s * SYSFS_SECTOR_BYTES),
        format!("ours={bytes:?} bytes sysfs={sectors:?} sectors"),
    ));
    Ok(checks)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn feature_values() {
        let t = "get-feature:0x06 (Volatile Write Cache), Current value:0x00000001\n";
        assert_eq!(feature_value_from_text(t), Some(1));
        assert_eq!(
            feature_value_from_text("get-feature:0x01 (Arbitration), Current value:00000000"),
            Some(0)
        );
        assert_eq!(feature_value_from_text("get-feature: Invalid Field"), None);
        let j = serde_json::json!({"feature: 0x06": {"name": "x", "Current": "0x00000001"}});
        assert_eq!(feature_value_from_json(&j, 6), Some(1));
        assert_eq!(feature_value_from_json(&j, 1), None);
    }

    #[test]
    fn keys_compare_trimmed_and_missing_keys_mismatch() {
        let ours = serde_json::json!({"sn": "deadbeef", "vid": 6966});
        let cli = serde_json::json!({"sn": "deadbeef            ", "vid": 6966});
        let c = compare_keys("id-ctrl", &["sn", "vid", "mn"], &ours, &cli);
        assert!(c[0].ok && c[1].ok);
        assert!(!c[2].ok, "a key neither has is a mismatch");
    }

    #[test]
    fn whole_comparison_from_files() {
        let dir = std::env::temp_dir().join(format!("guest-admin-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let ctrl = r#"{"vid":6966,"sn":"d","mn":"QEMU NVMe Ctrl","fr":"7.2","mdts":7,"oacs":266,"oncs":349}"#;
        let ns = r#"{"nsze":8,"ncap":8,"flbas":0,"nlbaf":0,"lbafs":[{"ms":0,"ds":9,"rp":0}]}"#;
        let smart = r#"{"critical_warning":0,"temperature":323,"avail_spare":0,"spare_thresh":0,"percent_used":0,"media_errors":0}"#;
        for side in ["ours", "kernel"] {
            fs::write(dir.join(format!("{side}-id-ctrl.json")), ctrl).unwrap();
            fs::write(dir.join(format!("{side}-id-ns.json")), ns).unwrap();
            fs::write(dir.join(format!("{side}-smart-log.json")), smart).unwrap();
            fs::write(
                dir.join(format!("{side}-list-ns.json")),
                r#"{"nsid_list":[{"nsid":1}]}"#,
            )
            .unwrap();
            let descs = r#"{"ns-descs":[{"loc":0,"nidt":3,"nidl":16,"type":"uuid","uuid":"u"}]}"#;
            fs::write(dir.join(format!("{side}-ns-descs.json")), descs).unwrap();
            let fw = format!(r#"{{"{side}": {{"Active Firmware Slot (afi)": 1}}}}"#);
            fs::write(dir.join(format!("{side}-fw-log.json")), fw).unwrap();
            let name = if side == "ours" {
                "Identify"
            } else {
                "Identify Controller"
            };
            let fx = format!(
                r#"[{{"admin_cmd_set": {{"ACS_6 ({name})": 1}}, "io_cmd_set": {{"IOCS_1 (Write)": 3}}}}]"#
            );
            fs::write(dir.join(format!("{side}-effects-log.json")), fx).unwrap();
        }
        for fid in FEATURES {
            let j = format!(r#"{{"feature: {fid:#04x}": {{"Current": "0x00000001"}}}}"#);
            fs::write(dir.join(format!("ours-feature-{fid}.json")), j).unwrap();
            let t = format!("get-feature:{fid:#04x} (x), Current value:0x00000001\n");
            fs::write(dir.join(format!("kernel-feature-{fid}.txt")), t).unwrap();
        }
        let checks = compare_with_nvme_cli(&dir).unwrap();
        assert_eq!(
            checks.len(),
            ID_CTRL_KEYS.len() + ID_NS_KEYS.len() + 1 + SMART_KEYS.len() + 4 + FEATURES.len()
        );
        assert!(checks.iter().all(|c| c.ok), "{checks:?}");
        fs::write(dir.join("kernel-feature-6.txt"), "Current value:0x00000000").unwrap();
        let checks = compare_with_nvme_cli(&dir).unwrap();
        assert_eq!(checks.iter().filter(|c| !c.ok).count(), 1);

        let sys = dir.join("sys");
        fs::create_dir_all(sys.join("class/nvme/nvme0")).unwrap();
        fs::create_dir_all(sys.join("block/nvme0n1")).unwrap();
        fs::write(sys.join("class/nvme/nvme0/serial"), "d\n").unwrap();
        fs::write(sys.join("class/nvme/nvme0/model"), "QEMU NVMe Ctrl    \n").unwrap();
        fs::write(sys.join("class/nvme/nvme0/firmware_rev"), "7.2\n").unwrap();
        fs::write(sys.join("block/nvme0n1/size"), "8\n").unwrap();
        let checks = compare_with_sysfs(&dir, &sys).unwrap();
        assert_eq!(checks.len(), 4);
        assert!(checks.iter().all(|c| c.ok), "{checks:?}");
        fs::remove_dir_all(&dir).unwrap();
    }
}
