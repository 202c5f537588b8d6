//! What `nvme-identify --health` reports: the SMART / Health Information log page and the
//! Error Information log, as text and as JSON.
//!
//! The JSON keys are nvme-cli's, so scripts written for `nvme smart-log -o json` and
//! `nvme error-log -o json` read ours: they follow nvme-cli 2.x (`json_smart_log` and
//! `json_error_log` in nvme-print-json.c, nvme-cli 2.8). As there, temperatures are in Kelvin,
//! `status_field` is the status without the Phase Tag (which is `phase_tag`), and a
//! `temperature_sensor_N` key appears only for sensors that report a value.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use nvme_driver::spec::log::{kelvin_to_celsius, ErrorLogEntry, SmartLog};
use nvme_driver::spec::opcode::{admin, nvm};
use nvme_driver::spec::Status;
use serde::Serialize;

use crate::report::human_bytes;

/// Submission queue ID of the admin queue (opcodes are named from the admin set there).
const ADMIN_SQID: u16 = 0;

/// Everything `nvme-identify --health` prints about one controller.
#[derive(Debug, Clone, Serialize)]
pub struct HealthReport {
    /// PCI address of the controller, e.g. `0000:00:04.0`.
    pub pci_address: String,
    /// The SMART / Health Information log (controller-wide), nvme-cli `smart-log` keys.
    pub smart_log: SmartReport,
    /// The Error Information log, nvme-cli `error-log` shape.
    pub error_log: ErrorLogReport,
    /// Decoded SMART data for the text form.
    #[serde(skip)]
    smart: SmartLog,
}

/// The SMART / Health Information log with nvme-cli's `smart-log -o json` keys.
#[derive(Debug, Clone, Serialize)]
pub struct SmartReport {
    /// Critical Warning bits.
    pub critical_warning: u8,
    /// Composite Temperature (K).
    pub temperature: u16,
    /// Available Spare (%).
    pub avail_spare: u8,
    /// Available Spare Threshold (%).
    pub spare_thresh: u8,
    /// Percentage Used.
    pub percent_used: u8,
    /// Endurance Group Critical Warning Summary bits.
    pub endurance_grp_critical_warning_summary: u8,
    /// Data Units Read (thousands of 512-byte units).
    pub data_units_read: u128,
    /// Data Units Written (thousands of 512-byte units).
    pub data_units_written: u128,
    /// Host Read Commands.
    pub host_read_commands: u128,
    /// Host Write Commands.
    pub host_write_commands: u128,
    /// Controller Busy Time (minutes).
    pub controller_busy_time: u128,
    /// Power Cycles.
    pub power_cycles: u128,
    /// Power On Hours.
    pub power_on_hours: u128,
    /// Unsafe Shutdowns.
    pub unsafe_shutdowns: u128,
    /// Media and Data Integrity Errors.
    pub media_errors: u128,
    /// Number of Error Information Log Entries.
    pub num_err_log_entries: u128,
    /// Warning Composite Temperature Time (minutes).
    pub warning_temp_time: u32,
    /// Critical Composite Temperature Time (minutes).
    pub critical_comp_time: u32,
    /// `temperature_sensor_N` (K) for each implemented sensor N in 1..=8.
    #[serde(flatten)]
    pub temperature_sensors: BTreeMap<String, u16>,
    /// Thermal Management Temperature 1 Transition Count.
    pub thm_temp1_trans_count: u32,
    /// Thermal Management Temperature 2 Transition Count.
    pub thm_temp2_trans_count: u32,
    /// Total Time For Thermal Management Temperature 1 (s).
    pub thm_temp1_total_time: u32,
    /// Total Time For Thermal Management Temperature 2 (s).
    pub thm_temp2_total_time: u32,
}

/// The Error Information log in nvme-cli's `error-log -o json` shape.
#[derive(Debug, Clone, Serialize)]
pub struct ErrorLogReport {
    /// Valid entries, newest first.
    pub errors: Vec<ErrorReport>,
}

/// One Error Information log entry with nvme-cli's keys.
#[derive(Debug, Clone, Serialize)]
pub struct ErrorReport {
    /// Error Count.
    pub error_count: u64,
    /// Submission Queue ID.
    pub sqid: u16,
    /// Command ID.
    pub cmdid: u16,
    /// Status Field without the Phase Tag (bits 15:1 shifted down).
    pub status_field: u16,
    /// Phase Tag (bit 0 of the Status Field).
    pub phase_tag: u8,
    /// Parameter Error Location.
    pub parm_error_location: u16,
    /// LBA.
    pub lba: u64,
    /// Namespace.
    pub nsid: u32,
    /// Vendor Specific Information Available.
    pub vs: u8,
    /// Transport Type.
    pub trtype: u8,
    /// Command Set Indicator.
    pub csi: u8,
    /// Opcode.
    pub opcode: u8,
    /// Command Specific Information.
    pub cs: u64,
    /// Transport Type Specific Information.
    pub trtype_spec_info: u16,
}

impl SmartReport {
    /// The SMART log's fields under nvme-cli's keys.
    pub fn new(s: &SmartLog) -> Self {
        let temperature_sensors = (1..=s.temperature_sensors.len())
            .filter_map(|n| {
                s.temperature_sensor(n)
                    .map(|k| (format!("temperature_sensor_{n}"), k))
            })
            .collect();
        let [tmt1_count, tmt2_count] = s.thermal_transition_count;
        let [tmt1_time, tmt2_time] = s.thermal_total_time;
        SmartReport {
            critical_warning: s.critical_warning,
            temperature: s.temperature_kelvin(),
            avail_spare: s.available_spare,
            spare_thresh: s.available_spare_threshold,
            percent_used: s.percentage_used,
            endurance_grp_critical_warning_summary: s.endurance_group_critical_warning_summary,
            data_units_read: s.data_units_read,
            data_units_written: s.data_units_written,
            host_read_commands: s.host_read_commands,
            host_write_commands: s.host_write_commands,
            controller_busy_time: s.controller_busy_time,
            power_cycles: s.power_cycles,
            power_on_hours: s.power_on_hours,
            unsafe_shutdowns: s.unsafe_shutdowns,
            media_errors: s.media_errors,
            num_err_log_entries: s.error_log_entries,
            warning_temp_time: s.warning_temperature_time,
            critical_comp_time: s.critical_temperature_time,
            temperature_sensors,
            thm_temp1_trans_count: tmt1_count,
            thm_temp2_trans_count: tmt2_count,
            thm_temp1_total_time: tmt1_time,
            thm_temp2_total_time: tmt2_time,
        }
    }
}

impl ErrorReport {
    /// The entry's fields under nvme-cli's keys.
    pub fn new(e: &ErrorLogEntry) -> Self {
        ErrorReport {
            error_count: e.error_count,
            sqid: e.sqid,
            cmdid: e.cmdid,
            status_field: e.status().0,
            phase_tag: u8::from(e.phase_tag()),
            parm_error_location: e.parameter_error_location,
            lba: e.lba,
            nsid: e.nsid,
            vs: e.vendor_specific,
            trtype: e.transport_type,
            csi: e.command_set_indicator,
            opcode: e.opcode,
            cs: e.command_specific,
            trtype_spec_info: e.transport_specific,
        }
    }
}

/// `kelvin` as `300 K (27 °C)`, or `not reported` for 0.
fn temperature(kelvin: u16) -> String {
    if kelvin == 0 {
        "not reported".to_owned()
    } else {
        format!("{kelvin} K ({} °C)", kelvin_to_celsius(kelvin))
    }
}

/// A Data Units counter with the byte amount it stands for.
fn data_units(units: u128, bytes: u128) -> String {
    format!(
        "{units} ({})",
        human_bytes(u64::try_from(bytes).unwrap_or(u64::MAX))
    )
}

impl HealthReport {
    /// Builds the report from the controller-wide SMART log and the error log entries.
    pub fn new(pci_address: &str, smart: &SmartLog, errors: &[ErrorLogEntry]) -> Self {
        HealthReport {
            pci_address: pci_address.to_owned(),
            smart_log: SmartReport::new(smart),
            error_log: ErrorLogReport {
                errors: errors
                    .iter()
                    .filter(|e| e.is_valid())
                    .map(ErrorReport::new)
                    .collect(),
            },
            smart: *smart,
        }
    }

    /// The JSON form (pretty-printed, no trailing newline).
    pub fn to_json(&self) -> serde_json::Result<String> {
        serde_json::to_string_pretty(self)
    }

    /// The human-readable form.
    pub fn to_text(&self) -> String {
        let s = &self.smart;
        let mut t = String::new();
        let flags = |bits: u8, names: Vec<&str>| {
            if bits == 0 {
                format!("{bits:#04x} (none)")
            } else {
                format!("{bits:#04x} ({})", names.join(", "))
            }
        };
        // Writing to a String cannot fail.
        let _ = writeln!(t, "SMART / Health Information of {}", self.pci_address);
        let _ = writeln!(
            t,
            "  Critical warning:           {}",
            flags(s.critical_warning, s.critical_warning_flags().names())
        );
        let _ = writeln!(
            t,
            "  Temperature:                {}",
            temperature(s.temperature_kelvin())
        );
        let _ = writeln!(t, "  Available spare:            {} %", s.available_spare);
        let _ = writeln!(
            t,
            "  Available spare threshold:  {} %",
            s.available_spare_threshold
        );
        let _ = writeln!(t, "  Percentage used:            {} %", s.percentage_used);
        let _ = writeln!(
            t,
            "  Endurance group warnings:   {}",
            flags(
                s.endurance_group_critical_warning_summary,
                s.endurance_group_warning_flags().names()
            )
        );
        let _ = writeln!(
            t,
            "  Data units read:            {}",
            data_units(s.data_units_read, s.data_read_bytes())
        );
        let _ = writeln!(
            t,
            "  Data units written:         {}",
            data_units(s.data_units_written, s.data_written_bytes())
        );
        let _ = writeln!(t, "  Host read commands:         {}", s.host_read_commands);
        let _ = writeln!(t, "  Host write commands:        {}", s.host_write_commands);
        let _ = writeln!(
            t,
            "  Controller busy time:       {} min",
            s.controller_busy_time
        );
        let _ = writeln!(t, "  Power cycles:               {}", s.power_cycles);
        let _ = writeln!(t, "  Power on hours:             {}", s.power_on_hours);
        let _ = writeln!(t, "  Unsafe shutdowns:           {}", s.unsafe_shutdowns);
        let _ = writeln!(t, "  Media and data errors:      {}", s.media_errors);
        let _ = writeln!(t, "  Error log entries:          {}", s.error_log_entries);
        let _ = writeln!(
            t,
            "  Warning temperature time:   {} min",
            s.warning_temperature_time
        );
        let _ = writeln!(
            t,
            "  Critical temperature time:  {} min",
            s.critical_temperature_time
        );
        for n in 1..=s.temperature_sensors.len() {
            if let Some(k) = s.temperature_sensor(n) {
                let _ = writeln!(t, "  Temperature sensor {n}:       {}", temperature(k));
            }
        }
        for (i, (count, time)) in s
            .thermal_transition_count
            .iter()
            .zip(s.thermal_total_time)
            .enumerate()
        {
            if *count != 0 || time != 0 {
                let _ = writeln!(
                    t,
                    "  Thermal management T{}:     {count} transitions, {time} s",
                    i + 1
                );
            }
        }
        let errors = &self.error_log.errors;
        let _ = writeln!(t, "Error Information Log: {} entries", errors.len());
        for e in errors {
            let op = if e.sqid == ADMIN_SQID {
                admin::name(e.opcode)
            } else {
                nvm::name(e.opcode)
            };
            let _ = writeln!(
                t,
                "  #{:<5} SQ {} CID {:#06x} {} ({:#04x}): {}",
                e.error_count,
                e.sqid,
                e.cmdid,
                op,
                e.opcode,
                Status(e.status_field)
            );
            let _ = writeln!(
                t,
                "         NSID {:#x}, LBA {}, parameter location {:#06x}, command specific {:#x}",
                e.nsid, e.lba, e.parm_error_location, e.cs
            );
        }
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvme_driver::spec::log::CriticalWarning;
    use nvme_driver::spec::status::{generic, media};
    use nvme_driver::spec::StatusCodeType;

    fn smart() -> SmartLog {
        let mut s = SmartLog {
            critical_warning: (CriticalWarning::AVAILABLE_SPARE | CriticalWarning::TEMPERATURE)
                .bits(),
            available_spare: 5,
            available_spare_threshold: 10,
            percentage_used: 101,
            data_units_read: 3,
            data_units_written: 1,
            host_read_commands: u128::from(u64::MAX) + 1,
            host_write_commands: 7,
            power_cycles: 12,
            power_on_hours: 3456,
            unsafe_shutdowns: 2,
            media_errors: 1,
            error_log_entries: 2,
            warning_temperature_time: 9,
            thermal_transition_count: [4, 0],
            thermal_total_time: [60, 0],
            ..SmartLog::default()
        };
        s.set_temperature_kelvin(318);
        s.temperature_sensors[0] = 318;
        s.temperature_sensors[2] = 300;
        s
    }

    fn errors() -> Vec<ErrorLogEntry> {
        let mut read_err = ErrorLogEntry {
            error_count: 2,
            sqid: 1,
            cmdid: 0x12,
            parameter_error_location: ErrorLogEntry::NO_PARAMETER_LOCATION,
            lba: 42,
            nsid: 1,
            opcode: nvm::READ,
            ..ErrorLogEntry::default()
        };
        read_err.set_status(
            Status::new(
                StatusCodeType::MediaDataIntegrity.raw(),
                media::UNRECOVERED_READ_ERROR,
                true,
            ),
            true,
        );
        let mut admin_err = ErrorLogEntry {
            error_count: 1,
            sqid: 0,
            cmdid: 3,
            nsid: 1,
            opcode: admin::GET_LOG_PAGE,
            ..ErrorLogEntry::default()
        };
        admin_err.set_status(
            Status::new(StatusCodeType::Generic.raw(), generic::INVALID_FIELD, true),
            false,
        );
        vec![read_err, admin_err, ErrorLogEntry::default()]
    }

    #[test]
    fn json_uses_nvme_cli_keys() {
        let r = HealthReport::new("0000:00:04.0", &smart(), &errors());
        let v: serde_json::Value = serde_json::from_str(&r.to_json().unwrap()).unwrap();
        assert_eq!(v["pci_address"], "0000:00:04.0");
        let s = &v["smart_log"];
        assert_eq!(s["critical_warning"], 3);
        assert_eq!(s["temperature"], 318);
        assert_eq!(s["avail_spare"], 5);
        assert_eq!(s["spare_thresh"], 10);
        assert_eq!(s["percent_used"], 101);
        assert_eq!(s["endurance_grp_critical_warning_summary"], 0);
        assert_eq!(s["data_units_read"], 3);
        assert_eq!(s["data_units_written"], 1);
        assert_eq!(s["host_write_commands"], 7);
        assert_eq!(s["power_cycles"], 12);
        assert_eq!(s["power_on_hours"], 3456);
        assert_eq!(s["unsafe_shutdowns"], 2);
        assert_eq!(s["media_errors"], 1);
        assert_eq!(s["num_err_log_entries"], 2);
        assert_eq!(s["warning_temp_time"], 9);
        assert_eq!(s["critical_comp_time"], 0);
        assert_eq!(s["controller_busy_time"], 0);
        assert_eq!(s["temperature_sensor_1"], 318);
        assert!(s.get("temperature_sensor_2").is_none(), "unimplemented");
        assert_eq!(s["temperature_sensor_3"], 300);
        assert_eq!(s["thm_temp1_trans_count"], 4);
        assert_eq!(s["thm_temp1_total_time"], 60);
        let errors = v["error_log"]["errors"].as_array().unwrap();
        assert_eq!(errors.len(), 2, "the unused entry is left out");
        let e = &errors[0];
        for key in [
            "error_count",
            "sqid",
            "cmdid",
            "status_field",
            "phase_tag",
            "parm_error_location",
            "lba",
            "nsid",
            "vs",
            "trtype",
            "csi",
            "opcode",
            "cs",
            "trtype_spec_info",
        ] {
            assert!(e.get(key).is_some(), "missing {key}");
        }
        assert_eq!(e["error_count"], 2);
        assert_eq!(
            (e["sqid"].clone(), e["cmdid"].clone()),
            (1.into(), 0x12.into())
        );
        // SCT 2, SC 81h, DNR: 0x4281 without the phase tag.
        assert_eq!(e["status_field"], 0x4281);
        assert_eq!(e["phase_tag"], 1);
        assert_eq!(e["parm_error_location"], 0xFFFF);
        assert_eq!(
            (e["lba"].clone(), e["opcode"].clone()),
            (42.into(), 2.into())
        );
    }

    #[test]
    fn json_keeps_128_bit_counters_exact() {
        let r = HealthReport::new("0000:00:04.0", &smart(), &[]);
        let json = r.to_json().unwrap();
        assert!(
            json.contains("\"host_read_commands\": 18446744073709551616"),
            "{json}"
        );
        assert!(json.contains("\"errors\": []"), "{json}");
    }

    #[test]
    fn text_names_warnings_temperatures_and_errors() {
        let text = HealthReport::new("0000:00:04.0", &smart(), &errors()).to_text();
        assert!(
            text.contains("0x03 (Available spare below threshold, Temperature threshold)"),
            "{text}"
        );
        assert!(text.contains("318 K (45 °C)"), "{text}");
        assert!(text.contains("Temperature sensor 3:"), "{text}");
        assert!(!text.contains("Temperature sensor 2:"), "{text}");
        assert!(text.contains("3 (1.46 MiB)"), "{text}");
        assert!(text.contains("T1:     4 transitions, 60 s"), "{text}");
        assert!(text.contains("Error Information Log: 2 entries"), "{text}");
        assert!(
            text.contains("SQ 1 CID 0x0012 Read (0x02): Unrecovered Read Error"),
            "{text}"
        );
        assert!(
            text.contains("SQ 0 CID 0x0003 Get Log Page (0x02): Invalid Field"),
            "{text}"
        );
        assert!(text.contains("LBA 42"), "{text}");
        let healthy = HealthReport::new("x", &SmartLog::default(), &[]).to_text();
        assert!(healthy.contains("0x00 (none)"), "{healthy}");
        assert!(
            healthy.contains("Temperature:                not reported"),
            "{healthy}"
        );
        assert!(
            healthy.contains("Error Information Log: 0 entries"),
            "{healthy}"
        );
    }
}
