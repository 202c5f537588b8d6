//! What each subcommand prints, as a JSON value with nvme-cli's keys (nvme-cli 2.x,
//! `nvme-print.c` / `nvme-print-json.c`; the keys only, written here in our words), and the
//! `key : value` text form of the same value.
//!
//! Where nvme-cli prints a value in a form of its own, so do we: hex strings for EUI64 and
//! NGUID, the 8-4-4-4-12 form for UUIDs, `%#x` for the CSI, `%#010x` (zero as `00000000`)
//! for feature values, `"<u64> (<text>)"` for a firmware revision (its 8 bytes, `.` for a
//! space or other non-graphic byte, as nvme-cli 2.3). Opcode names in the
//! effects log are ours (`nvme_spec::opcode::{admin, nvm}::name`).

use std::fmt::Write as _;

use nvme_driver::spec::admin_log::{CommandsEffectsLog, FirmwareSlotLog, NsIdDescriptor};
use nvme_driver::spec::feature::{Feature, FeatureCapabilities, FeatureId, Select};
use nvme_driver::spec::opcode::{admin, nvm};
use nvme_driver::spec::{ErrorLogEntry, IdentifyController, IdentifyNamespace, SmartLog};
use nvme_driver::NvmeController;
use nvme_identify::health::{ErrorLogReport, ErrorReport, SmartReport};
use nvme_identify::report::IdCtrlFields;
use serde_json::{json, Map, Value};

/// Bytes of a Namespace Identification Descriptor header (NIDT, NIDL, reserved).
const DESCRIPTOR_HEADER: usize = nvme_driver::spec::admin_log::NS_DESCRIPTOR_HEADER;
/// Byte boundaries of the 8-4-4-4-12 groups of a UUID.
const UUID_GROUPS: [usize; 4] = [4, 6, 8, 10];
/// nvme-cli's name of Select 11b.
const SELECT_CAPABILITIES: &str = "Supported capabilities";
/// Interrupt Coalescing's Aggregation Time unit, microseconds.
const COALESCING_TIME_US: u32 = 100;
/// Error Recovery's TLER unit, milliseconds.
const TLER_MS: u32 = 100;

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

pub(crate) fn uuid(bytes: &[u8; 16]) -> String {
    let mut s = String::with_capacity(36);
    for (i, b) in bytes.iter().enumerate() {
        if UUID_GROUPS.contains(&i) {
            s.push('-');
        }
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// C's `%#0*x` as nvme-cli uses it for a dword: width 10, and zero without the prefix.
fn dword_hex(v: u32) -> String {
    if v == 0 {
        "00000000".to_owned()
    } else {
        format!("{v:#010x}")
    }
}

fn fid_hex(fid: u8) -> String {
    format!("{fid:#04x}")
}

/// `list`: nvme-cli's `Devices` array, one entry per usable namespace.
pub fn list<C: NvmeController>(ctrl: &C) -> Value {
    let namespaces = ctrl.namespaces();
    list_of(
        ctrl.name(),
        ctrl.identify(),
        namespaces.iter().map(|ns| (ns.nsid(), ns.identify())),
    )
}

/// `list` of controller `name` from its Identify data and its usable namespaces' (through a
/// control socket too).
pub fn list_of<'a>(
    name: &str,
    id: &IdentifyController,
    namespaces: impl IntoIterator<Item = (u32, &'a IdentifyNamespace)>,
) -> Value {
    let devices: Vec<Value> = namespaces
        .into_iter()
        .map(|(nsid, ns)| {
            let lba = u64::from(ns.block_size());
            json!({
                "NameSpace": nsid,
                "DevicePath": format!("{name}/{nsid}"),
                "Firmware": id.firmware(),
                "ModelNumber": id.model(),
                "SerialNumber": id.serial(),
                "UsedBytes": ns.nuse * lba,
                "MaximumLBA": ns.nsze,
                "PhysicalSize": ns.nsze * lba,
                "SectorSize": lba,
            })
        })
        .collect();
    json!({ "Devices": devices })
}

/// `id-ctrl`: every field under nvme-cli's key (strings trimmed, as nvme-identify prints them).
pub fn id_ctrl(id: &IdentifyController) -> Value {
    let mut v = serde_json::to_value(IdCtrlFields::new(id)).unwrap_or_default();
    if let Value::Object(m) = &mut v {
        m.insert("vid".into(), id.vid.into());
        m.insert("ssvid".into(), id.ssvid.into());
        m.insert("cntlid".into(), id.cntlid.into());
        m.insert("oacs".into(), id.oacs.into());
        m.insert("oncs".into(), id.oncs.into());
    }
    v
}

/// `id-ns`.
pub fn id_ns(ns: &IdentifyNamespace) -> Value {
    let lbafs: Vec<Value> = ns
        .lbaf
        .iter()
        .take(usize::from(ns.nlbaf) + 1)
        .map(|f| json!({ "ms": f.ms, "ds": f.lbads, "rp": f.rp }))
        .collect();
    json!({
        "nsze": ns.nsze, "ncap": ns.ncap, "nuse": ns.nuse, "nsfeat": ns.nsfeat,
        "nlbaf": ns.nlbaf, "flbas": ns.flbas, "mc": ns.mc, "dpc": ns.dpc, "dps": ns.dps,
        "nmic": ns.nmic, "rescap": ns.rescap, "fpi": ns.fpi, "dlfeat": ns.dlfeat,
        "nawun": ns.nawun, "nawupf": ns.nawupf, "nacwu": ns.nacwu, "nabsn": ns.nabsn,
        "nabo": ns.nabo, "nabspf": ns.nabspf, "noiob": ns.noiob,
        "nvmcap": u64::try_from(u128::from_le_bytes(ns.nvmcap)).unwrap_or(u64::MAX),
        "mssrl": ns.mssrl, "mcl": ns.mcl, "msrc": ns.msrc,
        "anagrpid": ns.anagrpid, "nsattr": ns.nsattr, "nvmsetid": ns.nvmsetid,
        "endgid": ns.endgid, "nguid": hex(&ns.nguid), "eui64": hex(&ns.eui64),
        "lbafs": lbafs,
    })
}

/// `list-ns`: `{"nsid_list": [{"nsid": N}, ...]}`.
pub fn list_ns(ids: &[u32]) -> Value {
    let list: Vec<Value> = ids.iter().map(|id| json!({ "nsid": id })).collect();
    json!({ "nsid_list": list })
}

/// `ns-descs`: `{"ns-descs": [{"loc", "nidt", "nidl", "type", "<type>": value}, ...]}`.
pub fn ns_descs(list: &[NsIdDescriptor]) -> Value {
    let mut loc = 0;
    let mut out = Vec::new();
    for d in list {
        let (kind, value) = match d {
            NsIdDescriptor::Eui64(b) => ("eui64", hex(b)),
            NsIdDescriptor::Nguid(b) => ("nguid", hex(b)),
            NsIdDescriptor::Uuid(b) => ("uuid", uuid(b)),
            NsIdDescriptor::Csi(c) if *c == 0 => ("csi", "0".to_owned()),
            NsIdDescriptor::Csi(c) => ("csi", format!("{c:#x}")),
        };
        let len = d.id_bytes().len();
        let mut e = Map::new();
        e.insert("loc".into(), loc.into());
        e.insert("nidt".into(), d.nidt().into());
        e.insert("nidl".into(), len.into());
        e.insert("type".into(), kind.into());
        e.insert(kind.into(), value.into());
        out.push(Value::Object(e));
        loc += DESCRIPTOR_HEADER + len;
    }
    json!({ "ns-descs": out })
}

/// `smart-log`: nvme-identify's SMART report (nvme-cli keys).
pub fn smart_log(s: &SmartLog) -> Value {
    serde_json::to_value(SmartReport::new(s)).unwrap_or_default()
}

/// `error-log`: `{"errors": [...]}` (nvme-cli keys).
pub fn error_log(entries: &[ErrorLogEntry]) -> Value {
    let report = ErrorLogReport {
        errors: entries.iter().map(ErrorReport::new).collect(),
    };
    serde_json::to_value(report).unwrap_or_default()
}

/// `fw-log`: `{"<device>": {"Active Firmware Slot (afi)": N, "Firmware Rev Slot N": "..."}}`.
pub fn fw_log(device: &str, log: &FirmwareSlotLog) -> Value {
    let mut slots = Map::new();
    slots.insert("Active Firmware Slot (afi)".into(), log.afi.into());
    for (i, raw) in log.frs.iter().enumerate() {
        if raw[0] == 0 {
            continue;
        }
        // nvme-cli's form of the 8 bytes: graphic ASCII kept, anything else (spaces too) `.`.
        let text: String = raw
            .iter()
            .map(|&b| {
                if b.is_ascii_graphic() {
                    char::from(b)
                } else {
                    '.'
                }
            })
            .collect();
        slots.insert(
            format!("Firmware Rev Slot {}", i + 1),
            format!("{} ({text})", u64::from_le_bytes(*raw)).into(),
        );
    }
    let mut root = Map::new();
    root.insert(device.into(), Value::Object(slots));
    Value::Object(root)
}

/// `effects-log`: one object per command set, `ACS_<op> (<name>)` / `IOCS_<op> (<name>)`
/// keys with the effects dword.
pub fn effects_log(log: &CommandsEffectsLog) -> Value {
    let acs: Map<String, Value> = log
        .admin()
        .map(|(op, e)| (format!("ACS_{op} ({})", admin::name(op)), e.bits().into()))
        .collect();
    let iocs: Map<String, Value> = log
        .io()
        .map(|(op, e)| (format!("IOCS_{op} ({})", nvm::name(op)), e.bits().into()))
        .collect();
    json!([{ "command_set_identifier": 0, "admin_cmd_set": acs, "io_cmd_set": iocs }])
}

/// The decoded fields of a feature value, under nvme-cli's field names.
fn feature_fields(f: &Feature) -> Map<String, Value> {
    let mut m = Map::new();
    let mut put = |k: &str, v: Value| {
        m.insert(k.to_owned(), v);
    };
    match *f {
        Feature::Arbitration(a) => {
            put(
                "High Priority Weight (HPW)",
                (u32::from(a.high_weight) + 1).into(),
            );
            put(
                "Medium Priority Weight (MPW)",
                (u32::from(a.medium_weight) + 1).into(),
            );
            put(
                "Low Priority Weight (LPW)",
                (u32::from(a.low_weight) + 1).into(),
            );
            let burst = if a.burst == nvme_driver::spec::feature::ARBITRATION_BURST_UNLIMITED {
                "No limit".to_owned()
            } else {
                (1u32 << a.burst).to_string()
            };
            put("Arbitration Burst (AB)", burst.into());
        }
        Feature::PowerManagement(p) => {
            put("Workload Hint (WH)", p.workload_hint.into());
            put("Power State (PS)", p.power_state.into());
        }
        Feature::TemperatureThreshold(t) => {
            put("Threshold Type Select (THSEL)", (t.kind as u8).into());
            put("Threshold Temperature Select (TMPSEL)", t.sensor.into());
            put("TMPTH kelvin", format!("{} K", t.kelvin).into());
        }
        Feature::ErrorRecovery(e) => {
            let dulbe = if e.dulbe { "Enabled" } else { "Disabled" };
            put(
                "Deallocated or Unwritten Logical Block Error Enable (DULBE)",
                dulbe.into(),
            );
            let tler = u32::from(e.tler) * TLER_MS;
            put(
                "Time Limited Error Recovery (TLER)",
                format!("{tler} ms").into(),
            );
        }
        Feature::VolatileWriteCache(on) => {
            let wce = if on { "Enabled" } else { "Disabled" };
            put("Volatile Write Cache Enable (WCE)", wce.into());
        }
        Feature::NumberOfQueues(q) => {
            put(
                "Number of IO Completion Queues Allocated (NCQA)",
                (u32::from(q.completion) + 1).into(),
            );
            put(
                "Number of IO Submission Queues Allocated (NSQA)",
                (u32::from(q.submission) + 1).into(),
            );
        }
        Feature::InterruptCoalescing(c) => {
            let time = u32::from(c.time) * COALESCING_TIME_US;
            put("Aggregation Time (TIME)", format!("{time} usec").into());
            put(
                "Aggregation Threshold (THR)",
                (u32::from(c.threshold) + 1).into(),
            );
        }
        Feature::AsyncEventConfiguration(a) => {
            put("Async Event Configuration", dword_hex(a.bits()).into());
        }
        Feature::Timestamp(t) => {
            put("The timestamp is", t.millis.into());
            put("Synch", u8::from(t.synch).into());
            put("Timestamp Origin", t.origin.into());
        }
    }
    m
}

/// `get-feature -s 0|1|2`: `{"feature: 0xNN": {"name", "<Select>": "0x..."}, "Feature:
/// 0xNN": {decoded fields}}`.
pub fn feature(f: &Feature, sel: Select) -> Value {
    let id = f.id();
    let mut head = Map::new();
    head.insert("name".into(), id.name().into());
    head.insert(sel.name().into(), dword_hex(f.dword()).into());
    let mut root = Map::new();
    root.insert(
        format!("feature: {}", fid_hex(id.fid())),
        Value::Object(head),
    );
    root.insert(
        format!("Feature: {}", fid_hex(id.fid())),
        Value::Object(feature_fields(f)),
    );
    Value::Object(root)
}

/// `get-feature -s 3`: the capabilities as nvme-cli's `select` list.
pub fn feature_capabilities(id: FeatureId, caps: FeatureCapabilities) -> Value {
    let mut head = Map::new();
    head.insert("name".into(), id.name().into());
    head.insert(SELECT_CAPABILITIES.into(), dword_hex(caps.bits()).into());
    let names: Vec<Value> = [
        (FeatureCapabilities::SAVEABLE, "saveable"),
        (FeatureCapabilities::NAMESPACE_SPECIFIC, "per-namespace"),
        (FeatureCapabilities::CHANGEABLE, "changeable"),
    ]
    .into_iter()
    .filter(|(c, _)| caps.contains(*c))
    .map(|(_, n)| n.into())
    .collect();
    let mut root = Map::new();
    root.insert(
        format!("feature: {}", fid_hex(id.fid())),
        Value::Object(head),
    );
    root.insert(
        format!("Feature: {}: select", fid_hex(id.fid())),
        names.into(),
    );
    Value::Object(root)
}

/// `set-feature`: what nvme-cli's message says (feature, name, value, save) and dword 0.
pub fn set_feature(f: &Feature, save: bool, dw0: u32) -> Value {
    json!({
        "set-feature": fid_hex(f.id().fid()),
        "name": f.id().name(),
        "value": format!("{:#x}", f.raw()),
        "save": u8::from(save),
        "result": dword_hex(dw0),
    })
}

/// The `key : value` text form: one line per scalar, nested objects and arrays indented
/// under their key.
pub fn to_text(v: &Value) -> String {
    let mut out = String::new();
    write_text(&mut out, v, 0);
    out
}

fn scalar(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn write_text(out: &mut String, v: &Value, depth: usize) {
    let pad = "  ".repeat(depth);
    match v {
        Value::Object(m) => {
            let width = m.keys().map(String::len).max().unwrap_or(0);
            for (k, v) in m {
                match v {
                    Value::Object(_) | Value::Array(_) => {
                        let _ = writeln!(out, "{pad}{k}");
                        write_text(out, v, depth + 1);
                    }
                    _ => {
                        let _ = writeln!(out, "{pad}{k:<width$} : {}", scalar(v));
                    }
                }
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                match item {
                    Value::Object(_) | Value::Array(_) => {
                        let _ = writeln!(out, "{pad}[{i}]");
                        write_text(out, item, depth + 1);
                    }
                    _ => {
                        let _ = writeln!(out, "{pad}[{i}] : {}", scalar(item));
                    }
                }
            }
        }
        other => {
            let _ = writeln!(out, "{pad}{}", scalar(other));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nvme_cli_number_forms() {
        assert_eq!(dword_hex(0), "00000000");
        assert_eq!(dword_hex(1), "0x00000001");
        assert_eq!(fid_hex(6), "0x06");
        assert_eq!(uuid(&[0xAB; 16]), "abababab-abab-abab-abab-abababababab");
        let t = to_text(&json!({"a": 1, "bb": {"c": "x"}, "l": [{"d": 2}]}));
        assert_eq!(t, "a  : 1\nbb\n  c : x\nl\n  [0]\n    d : 2\n");
    }
}
