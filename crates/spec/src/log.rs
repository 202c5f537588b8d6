//! Log pages read with Get Log Page (NVMe Base 2.0 §5.16): Error Information (Log Identifier
//! 01h, §5.16.1.2) and SMART / Health Information (Log Identifier 02h, §5.16.1.3).
//!
//! Both are `#[repr(C)]` with every field's offset asserted at compile time, like the Identify
//! structures. Reserved ranges are named `rsvdNNN` after their first byte offset. A log page
//! comes from the device and may be short or garbage: [`SmartLog::parse`] and
//! [`ErrorLogEntry::parse_entries`] take any byte slice and never panic.

use core::fmt;

use bitflags::bitflags;

use crate::status::Status;

/// The broadcast namespace ID (§3.2.1.2): in Get Log Page, the controller-wide page.
pub const NSID_BROADCAST: u32 = 0xFFFF_FFFF;
/// Size of the SMART / Health Information log page.
pub const SMART_LOG_SIZE: usize = 512;
/// Size of one Error Information log entry.
pub const ERROR_LOG_ENTRY_SIZE: usize = 64;
/// Number of Temperature Sensor fields in the SMART / Health Information log page.
pub const TEMPERATURE_SENSORS: usize = 8;
/// Number of Thermal Management Temperature fields (TMT1, TMT2).
pub const THERMAL_MANAGEMENT_TEMPERATURES: usize = 2;
/// One Data Unit of the SMART log counts this many units of 512 bytes (§5.16.1.3, Figure 207).
pub const DATA_UNIT_512B_UNITS: u128 = 1000;
/// Bytes in one Data Unit: 1000 × 512.
pub const DATA_UNIT_BYTES: u128 = DATA_UNIT_512B_UNITS * 512;
/// 0 °C in Kelvin, rounded as the specification does (temperatures are whole Kelvin).
pub const ZERO_CELSIUS_IN_KELVIN: i32 = 273;

bitflags! {
    /// Critical Warning (SMART / Health Information log byte 0, §5.16.1.3 Figure 207). Also
    /// the Endurance Group Critical Warning Summary uses bits 0, 2 and 3 with these meanings.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct CriticalWarning: u8 {
        /// Bit 0: available spare capacity fell below the threshold.
        const AVAILABLE_SPARE = 1 << 0;
        /// Bit 1: a temperature is at or above an over-temperature threshold or at or below an
        /// under-temperature threshold.
        const TEMPERATURE = 1 << 1;
        /// Bit 2: NVM subsystem reliability degraded by media or internal errors.
        const RELIABILITY_DEGRADED = 1 << 2;
        /// Bit 3: all media placed in read-only mode.
        const READ_ONLY = 1 << 3;
        /// Bit 4: the volatile memory backup device failed.
        const VOLATILE_MEMORY_BACKUP_FAILED = 1 << 4;
        /// Bit 5: the Persistent Memory Region became read-only or unreliable.
        const PMR_READ_ONLY = 1 << 5;
    }
}

impl CriticalWarning {
    /// Human-readable names of the set, known flags, in bit order.
    pub fn names(&self) -> Vec<&'static str> {
        const NAMES: [(CriticalWarning, &str); 6] = [
            (
                CriticalWarning::AVAILABLE_SPARE,
                "Available spare below threshold",
            ),
            (CriticalWarning::TEMPERATURE, "Temperature threshold"),
            (
                CriticalWarning::RELIABILITY_DEGRADED,
                "Reliability degraded",
            ),
            (CriticalWarning::READ_ONLY, "Read-only"),
            (
                CriticalWarning::VOLATILE_MEMORY_BACKUP_FAILED,
                "Volatile memory backup failed",
            ),
            (CriticalWarning::PMR_READ_ONLY, "PMR read-only"),
        ];
        NAMES
            .iter()
            .filter(|(flag, _)| self.contains(*flag))
            .map(|&(_, name)| name)
            .collect()
    }
}

wire_struct! {
    /// SMART / Health Information log page (Log Identifier 02h, §5.16.1.3, Figure 207).
    ///
    /// Temperatures are in Kelvin (0 = not reported); 128-bit counters saturate at their
    /// maximum on the device.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct SmartLog {
        /// Critical Warning, see [`CriticalWarning`] and [`SmartLog::critical_warning_flags`].
        critical_warning @ 0: u8,
        /// Composite Temperature (K, 16-bit LE at an odd offset); see
        /// [`SmartLog::temperature_kelvin`].
        composite_temperature @ 1: [u8; 2],
        /// Available Spare: remaining spare capacity, percent (0..=100).
        available_spare @ 3: u8,
        /// Available Spare Threshold, percent (0..=100).
        available_spare_threshold @ 4: u8,
        /// Percentage Used: vendor estimate of life used; may exceed 100 (255 saturates).
        percentage_used @ 5: u8,
        /// Endurance Group Critical Warning Summary (bits 0, 2, 3 as in [`CriticalWarning`]).
        endurance_group_critical_warning_summary @ 6: u8,
        /// Reserved (bytes 7..32).
        rsvd7 @ 7: [u8; 25],
        /// Data Units Read: 512-byte units read by the host, in thousands, rounded up.
        data_units_read @ 32: u128,
        /// Data Units Written: 512-byte units written by the host, in thousands, rounded up.
        data_units_written @ 48: u128,
        /// Host Read Commands completed.
        host_read_commands @ 64: u128,
        /// Host Write Commands completed.
        host_write_commands @ 80: u128,
        /// Controller Busy Time (minutes).
        controller_busy_time @ 96: u128,
        /// Power Cycles.
        power_cycles @ 112: u128,
        /// Power On Hours.
        power_on_hours @ 128: u128,
        /// Unsafe Shutdowns.
        unsafe_shutdowns @ 144: u128,
        /// Media and Data Integrity Errors (unrecovered).
        media_errors @ 160: u128,
        /// Number of Error Information Log Entries over the life of the controller.
        error_log_entries @ 176: u128,
        /// Warning Composite Temperature Time (minutes at or above WCTEMP, below CCTEMP).
        warning_temperature_time @ 192: u32,
        /// Critical Composite Temperature Time (minutes at or above CCTEMP).
        critical_temperature_time @ 196: u32,
        /// Temperature Sensors 1..=8 (K; 0 = sensor not implemented).
        temperature_sensors @ 200: [u16; 8],
        /// Thermal Management Temperature 1 and 2 Transition Counts.
        thermal_transition_count @ 216: [u32; 2],
        /// Total Time For Thermal Management Temperature 1 and 2 (seconds).
        thermal_total_time @ 224: [u32; 2],
        /// Reserved (bytes 232..512).
        rsvd232 @ 232: [u8; 280],
    }
    size 512;
}

/// A log page shorter than the structure it must hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShortLogPage {
    /// The log page ("SMART / Health Information", ...).
    pub log: &'static str,
    /// Bytes the structure needs.
    pub needed: usize,
    /// Bytes given.
    pub got: usize,
}

impl fmt::Display for ShortLogPage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} log page too short: {} bytes, need {}",
            self.log, self.got, self.needed
        )
    }
}

impl std::error::Error for ShortLogPage {}

/// Kelvin to degrees Celsius, as integers (the specification reports whole Kelvin).
pub const fn kelvin_to_celsius(kelvin: u16) -> i32 {
    kelvin as i32 - ZERO_CELSIUS_IN_KELVIN
}

impl Default for SmartLog {
    fn default() -> Self {
        Self::from_bytes(&[0; SMART_LOG_SIZE])
    }
}

impl SmartLog {
    /// Decodes the log page from the first [`SMART_LOG_SIZE`] bytes of `bytes` (extra bytes
    /// are ignored), or says it is too short.
    pub fn parse(bytes: &[u8]) -> Result<Self, ShortLogPage> {
        bytes
            .get(..SMART_LOG_SIZE)
            .and_then(|b| <&[u8; SMART_LOG_SIZE]>::try_from(b).ok())
            .map(Self::from_bytes)
            .ok_or(ShortLogPage {
                log: "SMART / Health Information",
                needed: SMART_LOG_SIZE,
                got: bytes.len(),
            })
    }

    /// Critical Warning as flags (bits 7:6 reserved are kept).
    pub fn critical_warning_flags(&self) -> CriticalWarning {
        CriticalWarning::from_bits_retain(self.critical_warning)
    }

    /// Endurance Group Critical Warning Summary as flags.
    pub fn endurance_group_warning_flags(&self) -> CriticalWarning {
        CriticalWarning::from_bits_retain(self.endurance_group_critical_warning_summary)
    }

    /// Composite Temperature in Kelvin (0 = not reported).
    pub fn temperature_kelvin(&self) -> u16 {
        u16::from_le_bytes(self.composite_temperature)
    }

    /// Sets the Composite Temperature (Kelvin).
    pub fn set_temperature_kelvin(&mut self, kelvin: u16) {
        self.composite_temperature = kelvin.to_le_bytes();
    }

    /// Temperature Sensor `n` (1..=8) in Kelvin; `None` when `n` is out of range or the
    /// sensor is not implemented (reads 0).
    pub fn temperature_sensor(&self, n: usize) -> Option<u16> {
        let index = n.checked_sub(1)?;
        self.temperature_sensors
            .get(index)
            .copied()
            .filter(|&k| k != 0)
    }

    /// Bytes read by the host as the Data Units Read counter states them (an upper bound:
    /// the counter rounds up to whole thousands of 512-byte units).
    pub fn data_read_bytes(&self) -> u128 {
        self.data_units_read.saturating_mul(DATA_UNIT_BYTES)
    }

    /// Bytes written by the host as the Data Units Written counter states them (an upper
    /// bound, see [`SmartLog::data_read_bytes`]).
    pub fn data_written_bytes(&self) -> u128 {
        self.data_units_written.saturating_mul(DATA_UNIT_BYTES)
    }

    /// The Data Units value for `units_512` units of 512 bytes: thousands, rounded up
    /// (what a controller reports).
    pub const fn data_units(units_512: u128) -> u128 {
        units_512.div_ceil(DATA_UNIT_512B_UNITS)
    }
}

wire_struct! {
    /// Error Information log entry (Log Identifier 01h, §5.16.1.2, Figure 205): one 64-byte
    /// entry per error, newest first; Error Count 0 marks an unused entry.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct ErrorLogEntry {
        /// Error Count: unique, incrementing identifier of this error (0 = invalid entry).
        error_count @ 0: u64,
        /// Submission Queue ID of the command (FFFFh = not specific to a command).
        sqid @ 8: u16,
        /// Command ID of the command (FFFFh = not specific to a command).
        cmdid @ 10: u16,
        /// Status Field of the completion: bit 0 Phase Tag, bits 15:1 the status; see
        /// [`ErrorLogEntry::status`].
        status_field @ 12: u16,
        /// Parameter Error Location: bits 7:0 byte, bits 10:8 bit in the command of the
        /// field in error (FFFFh = not specific to a parameter).
        parameter_error_location @ 14: u16,
        /// First LBA that experienced the error, if applicable.
        lba @ 16: u64,
        /// Namespace of the error (0 or FFFFFFFFh when not namespace specific).
        nsid @ 24: u32,
        /// Vendor Specific Information Available: a vendor log page identifier, 0 = none.
        vendor_specific @ 28: u8,
        /// Transport Type of the error, coded like the Discovery Log Page Entry TRTYPE
        /// (1 RDMA, 2 Fibre Channel, 3 TCP); 0 on PCIe controllers.
        transport_type @ 29: u8,
        /// Command Set Indicator of the command (bits 2:0; zero on controllers predating it).
        command_set_indicator @ 30: u8,
        /// Opcode of the command (zero on controllers predating the field).
        opcode @ 31: u8,
        /// Command Specific Information.
        command_specific @ 32: u64,
        /// Transport Type Specific Information.
        transport_specific @ 40: u16,
        /// Reserved (bytes 42..63).
        rsvd42 @ 42: [u8; 21],
        /// Log Page Version (0 on controllers predating the field).
        log_page_version @ 63: u8,
    }
    size 64;
}

impl Default for ErrorLogEntry {
    fn default() -> Self {
        Self::from_bytes(&[0; ERROR_LOG_ENTRY_SIZE])
    }
}

impl ErrorLogEntry {
    /// SQID / CID value meaning "not specific to a particular command".
    pub const NOT_COMMAND_SPECIFIC: u16 = 0xFFFF;
    /// Parameter Error Location value meaning "not specific to a parameter".
    pub const NO_PARAMETER_LOCATION: u16 = 0xFFFF;
    /// Parameter Error Location bits 7:0: byte of the command.
    const PEL_BYTE_MASK: u16 = 0xFF;
    /// Parameter Error Location bits 10:8: bit within that byte.
    const PEL_BIT_SHIFT: u16 = 8;
    const PEL_BIT_MASK: u16 = 0b111;
    /// Status Field bit 0: Phase Tag.
    const PHASE_TAG_BIT: u16 = 1;
    /// Command Set Indicator bits 2:0.
    const CSI_MASK: u8 = 0b111;

    /// Decodes every complete 64-byte entry in `bytes`, in order, including unused ones
    /// (Error Count 0); a trailing partial entry is ignored. Never panics.
    pub fn parse_entries(bytes: &[u8]) -> impl Iterator<Item = ErrorLogEntry> + '_ {
        bytes
            .chunks_exact(ERROR_LOG_ENTRY_SIZE)
            .filter_map(|chunk| <&[u8; ERROR_LOG_ENTRY_SIZE]>::try_from(chunk).ok())
            .map(Self::from_bytes)
    }

    /// Whether the entry holds an error (Error Count is not 0).
    pub fn is_valid(&self) -> bool {
        self.error_count != 0
    }

    /// The completion status of the failed command (Phase Tag dropped).
    pub fn status(&self) -> Status {
        Status::from_cqe(self.status_field)
    }

    /// The Phase Tag recorded with the status (bit 0 of the Status Field).
    pub fn phase_tag(&self) -> bool {
        self.status_field & Self::PHASE_TAG_BIT != 0
    }

    /// Sets the Status Field from a status and Phase Tag.
    pub fn set_status(&mut self, status: Status, phase: bool) {
        self.status_field = status.to_cqe(phase);
    }

    /// (byte, bit) in the command of the parameter in error; `None` when not specific.
    pub fn parameter_location(&self) -> Option<(u8, u8)> {
        let pel = self.parameter_error_location;
        (pel != Self::NO_PARAMETER_LOCATION).then_some((
            (pel & Self::PEL_BYTE_MASK) as u8,
            ((pel >> Self::PEL_BIT_SHIFT) & Self::PEL_BIT_MASK) as u8,
        ))
    }

    /// Command Set Indicator (bits 2:0 of byte 30).
    pub fn csi(&self) -> u8 {
        self.command_set_indicator & Self::CSI_MASK
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::{generic, StatusCodeType};

    /// Deterministic, position-dependent test pattern so misplaced fields are caught.
    fn pattern<const N: usize>() -> [u8; N] {
        core::array::from_fn(|i| (i as u8).wrapping_mul(31).wrapping_add((i >> 8) as u8))
    }

    fn le128(b: &[u8]) -> u128 {
        u128::from_le_bytes(b[..16].try_into().unwrap())
    }

    #[test]
    fn smart_round_trip_and_offsets() {
        let b = pattern::<SMART_LOG_SIZE>();
        let s = SmartLog::from_bytes(&b);
        assert_eq!(s.to_bytes(), b);
        assert_eq!(s.critical_warning, b[0]);
        assert_eq!(s.temperature_kelvin(), u16::from_le_bytes([b[1], b[2]]));
        assert_eq!(
            (s.available_spare, s.available_spare_threshold),
            (b[3], b[4])
        );
        assert_eq!(s.percentage_used, b[5]);
        assert_eq!(s.endurance_group_critical_warning_summary, b[6]);
        assert_eq!(s.data_units_read, le128(&b[32..]));
        assert_eq!(s.data_units_written, le128(&b[48..]));
        assert_eq!(s.host_read_commands, le128(&b[64..]));
        assert_eq!(s.host_write_commands, le128(&b[80..]));
        assert_eq!(s.controller_busy_time, le128(&b[96..]));
        assert_eq!(s.power_cycles, le128(&b[112..]));
        assert_eq!(s.power_on_hours, le128(&b[128..]));
        assert_eq!(s.unsafe_shutdowns, le128(&b[144..]));
        assert_eq!(s.media_errors, le128(&b[160..]));
        assert_eq!(s.error_log_entries, le128(&b[176..]));
        assert_eq!(
            s.warning_temperature_time,
            u32::from_le_bytes(b[192..196].try_into().unwrap())
        );
        assert_eq!(
            s.critical_temperature_time,
            u32::from_le_bytes(b[196..200].try_into().unwrap())
        );
        assert_eq!(
            s.temperature_sensors[0],
            u16::from_le_bytes([b[200], b[201]])
        );
        assert_eq!(
            s.temperature_sensors[7],
            u16::from_le_bytes([b[214], b[215]])
        );
        assert_eq!(
            s.thermal_transition_count[1],
            u32::from_le_bytes(b[220..224].try_into().unwrap())
        );
        assert_eq!(
            s.thermal_total_time[1],
            u32::from_le_bytes(b[228..232].try_into().unwrap())
        );
        assert_eq!(s.rsvd232[279], b[511]);
    }

    /// A hand-written page as a drive would return it: 35 °C, 100 % spare, 1.5 M reads.
    #[test]
    fn smart_known_page() {
        let mut b = [0u8; SMART_LOG_SIZE];
        b[0] = 0b0000_1010; // temperature + read-only
        b[1..3].copy_from_slice(&308u16.to_le_bytes());
        b[3] = 100;
        b[4] = 10;
        b[5] = 3;
        b[32..48].copy_from_slice(&(u128::from(u64::MAX) + 2).to_le_bytes());
        b[64..72].copy_from_slice(&1_500_000u64.to_le_bytes());
        b[112] = 42;
        b[200..202].copy_from_slice(&310u16.to_le_bytes());
        b[204..206].copy_from_slice(&300u16.to_le_bytes());
        let s = SmartLog::parse(&b).unwrap();
        assert_eq!(
            s.critical_warning_flags(),
            CriticalWarning::TEMPERATURE | CriticalWarning::READ_ONLY
        );
        assert_eq!(
            s.critical_warning_flags().names(),
            ["Temperature threshold", "Read-only"]
        );
        assert_eq!(s.temperature_kelvin(), 308);
        assert_eq!(kelvin_to_celsius(s.temperature_kelvin()), 35);
        assert_eq!(s.available_spare, 100);
        assert_eq!(s.percentage_used, 3);
        assert_eq!(s.data_units_read, u128::from(u64::MAX) + 2);
        assert_eq!(s.host_read_commands, 1_500_000);
        assert_eq!(s.power_cycles, 42);
        assert_eq!(s.temperature_sensor(1), Some(310));
        assert_eq!(s.temperature_sensor(2), None, "0 = not implemented");
        assert_eq!(s.temperature_sensor(3), Some(300));
        assert_eq!(s.temperature_sensor(0), None);
        assert_eq!(s.temperature_sensor(9), None);
        let mut round = SmartLog::default();
        round.set_temperature_kelvin(308);
        assert_eq!(&round.to_bytes()[1..3], &b[1..3]);
    }

    #[test]
    fn smart_short_or_garbage_pages() {
        assert_eq!(
            SmartLog::parse(&[0xFF; 100]),
            Err(ShortLogPage {
                log: "SMART / Health Information",
                needed: 512,
                got: 100
            })
        );
        assert!(SmartLog::parse(&[]).is_err());
        let junk = SmartLog::parse(&[0xFF; 4096]).unwrap();
        assert_eq!(junk.critical_warning_flags().bits(), 0xFF);
        assert_eq!(junk.critical_warning_flags().names().len(), 6);
        assert_eq!(junk.data_read_bytes(), u128::MAX, "saturates");
        assert_eq!(kelvin_to_celsius(0), -273);
        assert!(SmartLog::parse(&[0; 100])
            .unwrap_err()
            .to_string()
            .contains("100 bytes, need 512"));
    }

    #[test]
    fn data_units_round_up() {
        assert_eq!(SmartLog::data_units(0), 0);
        assert_eq!(SmartLog::data_units(1), 1);
        assert_eq!(SmartLog::data_units(1000), 1);
        assert_eq!(SmartLog::data_units(1001), 2);
        let s = SmartLog {
            data_units_written: 3,
            ..SmartLog::default()
        };
        assert_eq!(s.data_written_bytes(), 3 * 512_000);
    }

    #[test]
    fn error_entry_round_trip_and_offsets() {
        let b = pattern::<ERROR_LOG_ENTRY_SIZE>();
        let e = ErrorLogEntry::from_bytes(&b);
        assert_eq!(e.to_bytes(), b);
        assert_eq!(
            e.error_count,
            u64::from_le_bytes(b[0..8].try_into().unwrap())
        );
        assert_eq!(e.sqid, u16::from_le_bytes([b[8], b[9]]));
        assert_eq!(e.cmdid, u16::from_le_bytes([b[10], b[11]]));
        assert_eq!(e.status_field, u16::from_le_bytes([b[12], b[13]]));
        assert_eq!(
            e.parameter_error_location,
            u16::from_le_bytes([b[14], b[15]])
        );
        assert_eq!(e.lba, u64::from_le_bytes(b[16..24].try_into().unwrap()));
        assert_eq!(e.nsid, u32::from_le_bytes(b[24..28].try_into().unwrap()));
        assert_eq!(
            (
                e.vendor_specific,
                e.transport_type,
                e.command_set_indicator,
                e.opcode
            ),
            (b[28], b[29], b[30], b[31])
        );
        assert_eq!(
            e.command_specific,
            u64::from_le_bytes(b[32..40].try_into().unwrap())
        );
        assert_eq!(e.transport_specific, u16::from_le_bytes([b[40], b[41]]));
        assert_eq!(e.log_page_version, b[63]);
    }

    /// An LBA Out of Range on SQ 1, CID 7, LBA 0x1234, NSID 1, as a drive logs it.
    #[test]
    fn error_entry_known_pattern() {
        let mut b = [0u8; 2 * ERROR_LOG_ENTRY_SIZE + 10];
        b[0] = 5;
        b[8] = 1;
        b[10] = 7;
        // Status Field: SC 80h, SCT 0, DNR (bit 14 of the status = bit 15 here), phase 1.
        let status = Status::new(
            StatusCodeType::Generic.raw(),
            generic::LBA_OUT_OF_RANGE,
            true,
        );
        b[12..14].copy_from_slice(&status.to_cqe(true).to_le_bytes());
        b[14..16].copy_from_slice(&0x0328u16.to_le_bytes()); // byte 40 (0x28), bit 3
        b[16..24].copy_from_slice(&0x1234u64.to_le_bytes());
        b[24] = 1;
        b[31] = 0x02;
        let entries: Vec<_> = ErrorLogEntry::parse_entries(&b).collect();
        assert_eq!(entries.len(), 2, "the trailing 10 bytes are not an entry");
        let e = entries[0];
        assert!(e.is_valid());
        assert!(!entries[1].is_valid());
        assert_eq!((e.error_count, e.sqid, e.cmdid), (5, 1, 7));
        assert_eq!(e.status(), status);
        assert_eq!(e.status().sc(), generic::LBA_OUT_OF_RANGE);
        assert!(e.phase_tag());
        assert_eq!(e.parameter_location(), Some((0x28, 3)));
        assert_eq!((e.lba, e.nsid, e.opcode), (0x1234, 1, 2));
        let mut none = ErrorLogEntry {
            parameter_error_location: ErrorLogEntry::NO_PARAMETER_LOCATION,
            command_set_indicator: 0xFA,
            ..Default::default()
        };
        assert_eq!(none.parameter_location(), None);
        assert_eq!(none.csi(), 2);
        none.set_status(status, false);
        assert_eq!((none.status(), none.phase_tag()), (status, false));
        assert_eq!(ErrorLogEntry::parse_entries(&[0xAB; 63]).count(), 0);
    }
}
