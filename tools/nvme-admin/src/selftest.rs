//! `device-self-test` and `self-test-log` (nvme-cli's names, options and JSON keys): Device
//! Self-test (NVMe Base 2.0 §5.9) and its log page (06h, §5.16.1.7). A controller whose OACS
//! lacks Device Self-test (QEMU 7.2's) refuses both before anything is sent.

use clap::Args;
use nvme_driver::spec::selftest::{valid, SelfTestCode};
use nvme_driver::{AdminCommands, NvmeController};
use serde_json::{json, Map, Value};

use crate::{parse_u8, AdminError, Device};

/// `device-self-test`.
#[derive(Debug, Args)]
pub struct SelfTestArgs {
    #[command(flatten)]
    pub dev: Device,
    /// Namespace to test (0: the controller only; 0xffffffff: every namespace).
    #[arg(short = 'n', long = "namespace-id", default_value_t = 0, value_parser = crate::parse_u32)]
    pub nsid: u32,
    /// Self-test code: 1 short, 2 extended, 0xf abort the test in progress.
    #[arg(short = 's', long = "self-test-code", value_parser = parse_code)]
    pub code: SelfTestCode,
}

/// `self-test-log`.
#[derive(Debug, Args)]
pub struct SelfTestLogArgs {
    #[command(flatten)]
    pub dev: Device,
    /// Results to show, newest first (at most 20).
    #[arg(short = 'e', long = "dst-entries", default_value_t = 20)]
    pub entries: usize,
}

fn parse_code(s: &str) -> Result<SelfTestCode, String> {
    let raw = parse_u8(s)?;
    SelfTestCode::from_raw(raw).ok_or_else(|| {
        format!("self-test code {raw:#x} is not 1 (short), 2 (extended) or 0xf (abort)")
    })
}

fn code_name(code: SelfTestCode) -> &'static str {
    match code {
        SelfTestCode::Short => "Short",
        SelfTestCode::Extended => "Extended",
        SelfTestCode::Abort => "Abort",
    }
}

/// `device-self-test`.
pub fn start<C: NvmeController>(ctrl: &C, args: &SelfTestArgs) -> Result<Value, AdminError> {
    ctrl.device_self_test(args.nsid, args.code)?;
    Ok(json!({
        "device-self-test": code_name(args.code),
        "nsid": args.nsid,
        "result": "Success",
    }))
}

/// `self-test-log`: nvme-cli's keys; the diagnostic fields only where Valid Diagnostic
/// Information says they are valid.
pub fn log<C: NvmeController>(ctrl: &C, args: &SelfTestLogArgs) -> Result<Value, AdminError> {
    let log = ctrl.self_test_log()?;
    let reports: Vec<Value> = log
        .used()
        .take(args.entries)
        .map(|r| {
            let mut m = Map::new();
            m.insert("Self test result".into(), r.result().into());
            m.insert("Self test code".into(), r.code().into());
            m.insert("Valid Diagnostic Information".into(), r.valid.into());
            m.insert("Power on hours (POH)".into(), r.power_on_hours().into());
            if r.valid & valid::NSID != 0 {
                m.insert("Namespace Identifier".into(), r.nsid.into());
            }
            if r.valid & valid::FLBA != 0 {
                m.insert("Failing LBA".into(), r.failing_lba().into());
            }
            if r.valid & valid::SCT != 0 {
                m.insert("Status Code Type".into(), r.sct.into());
            }
            if r.valid & valid::SC != 0 {
                m.insert("Status Code".into(), r.sc.into());
            }
            Value::Object(m)
        })
        .collect();
    Ok(json!({
        "Current Device Self-Test Operation": log.current_operation().unwrap_or(0),
        "Current Device Self-Test Completion": log.current_completion(),
        "List of Valid Reports": reports,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dev() -> Device {
        Device {
            device: vec!["sim".into()],
            output: crate::Format::Json,
        }
    }

    fn test(nsid: u32, code: SelfTestCode) -> SelfTestArgs {
        SelfTestArgs {
            dev: dev(),
            nsid,
            code,
        }
    }

    /// Tests run on the emulator are logged newest first with their code and namespace; an
    /// abort with nothing running logs nothing; a bad namespace is the controller's status.
    #[test]
    fn self_tests_are_logged_newest_first() {
        let (_sim, ctrl) = crate::emulator::controller(nvme_sim::SimConfig::default());
        let all = SelfTestLogArgs {
            dev: dev(),
            entries: 20,
        };
        let v = log(&ctrl, &all).unwrap();
        assert_eq!(v["List of Valid Reports"], json!([]));
        assert_eq!(v["Current Device Self-Test Operation"], 0);
        let v = start(&ctrl, &test(1, SelfTestCode::Short)).unwrap();
        assert_eq!(v["device-self-test"], "Short");
        start(&ctrl, &test(u32::MAX, SelfTestCode::Extended)).unwrap();
        start(&ctrl, &test(0, SelfTestCode::Abort)).unwrap();
        let e = start(&ctrl, &test(9, SelfTestCode::Short)).unwrap_err();
        assert!(e.to_string().contains("Invalid Namespace or Format"), "{e}");
        let v = log(&ctrl, &all).unwrap();
        let reports = v["List of Valid Reports"].as_array().unwrap();
        assert_eq!(reports.len(), 2, "{v}");
        assert_eq!(reports[0]["Self test code"], 2);
        assert_eq!(reports[0]["Namespace Identifier"], u64::from(u32::MAX));
        assert_eq!(reports[1]["Self test code"], 1);
        assert_eq!(reports[1]["Namespace Identifier"], 1);
        assert_eq!(reports[1]["Self test result"], 0);
        assert_eq!(reports[1]["Valid Diagnostic Information"], 1);
        assert!(reports[1].get("Failing LBA").is_none());
        let one = SelfTestLogArgs {
            dev: dev(),
            entries: 1,
        };
        assert_eq!(
            log(&ctrl, &one).unwrap()["List of Valid Reports"]
                .as_array()
                .unwrap()
                .len(),
            1
        );
    }

    /// Without OACS bit 4 both are refused before anything is sent.
    #[test]
    fn a_controller_without_self_test_refuses_both() {
        let (_sim, ctrl) = crate::emulator::controller(nvme_sim::SimConfig {
            device_self_test: false,
            ..nvme_sim::SimConfig::default()
        });
        let e = start(&ctrl, &test(0, SelfTestCode::Short))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("Device Self-test") && e.contains("OACS bit 4"),
            "{e}"
        );
        let all = SelfTestLogArgs {
            dev: dev(),
            entries: 20,
        };
        let e = log(&ctrl, &all).unwrap_err().to_string();
        assert!(e.contains("OACS bit 4"), "{e}");
    }

    #[test]
    fn codes_parse() {
        assert_eq!(parse_code("1"), Ok(SelfTestCode::Short));
        assert_eq!(parse_code("0xf"), Ok(SelfTestCode::Abort));
        assert!(parse_code("3").unwrap_err().contains("not 1 (short)"));
        assert!(parse_code("0x100").is_err());
    }
}
