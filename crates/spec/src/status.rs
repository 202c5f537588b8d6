//! Completion status (NVMe Base 2.0 §4.6.1.2 "Status Field", Figures 92–97).
//!
//! [`Status`] is the 15-bit Status Field of a completion queue entry, i.e. bits 31:17 of
//! CQE Dword 3 (`cqe.status >> 1`; bit 0 of `cqe.status` is the Phase Tag):
//!
//! | bits  | field | meaning                          |
//! |-------|-------|----------------------------------|
//! | 7:0   | SC    | Status Code                      |
//! | 10:8  | SCT   | Status Code Type                 |
//! | 12:11 | CRD   | Command Retry Delay              |
//! | 13    | M     | More (error log page has detail) |
//! | 14    | DNR   | Do Not Retry                     |
//!
//! The submodules name the status codes of each type; [`Status::name`] turns them into text.

use core::fmt;

const SC_MASK: u16 = 0xFF;
const SCT_SHIFT: u16 = 8;
const SCT_MASK: u16 = 0b111;
const CRD_SHIFT: u16 = 11;
const CRD_MASK: u16 = 0b11;
const MORE_BIT: u16 = 1 << 13;
const DNR_BIT: u16 = 1 << 14;
/// The Status Field is 15 bits wide.
const FIELD_MASK: u16 = 0x7FFF;

/// Status Code Type (SCT, §4.6.1.2, Figure 93).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StatusCodeType {
    /// 0h: Generic Command Status.
    Generic,
    /// 1h: Command Specific Status.
    CommandSpecific,
    /// 2h: Media and Data Integrity Errors.
    MediaDataIntegrity,
    /// 3h: Path Related Status.
    Path,
    /// 7h: Vendor Specific.
    VendorSpecific,
    /// 4h–6h: reserved; holds the raw value.
    Reserved(u8),
}

impl StatusCodeType {
    /// Decodes the 3-bit SCT field (higher bits are ignored).
    pub const fn from_raw(raw: u8) -> Self {
        match raw & SCT_MASK as u8 {
            0 => StatusCodeType::Generic,
            1 => StatusCodeType::CommandSpecific,
            2 => StatusCodeType::MediaDataIntegrity,
            3 => StatusCodeType::Path,
            7 => StatusCodeType::VendorSpecific,
            r => StatusCodeType::Reserved(r),
        }
    }

    /// The 3-bit SCT value.
    pub const fn raw(self) -> u8 {
        match self {
            StatusCodeType::Generic => 0,
            StatusCodeType::CommandSpecific => 1,
            StatusCodeType::MediaDataIntegrity => 2,
            StatusCodeType::Path => 3,
            StatusCodeType::VendorSpecific => 7,
            StatusCodeType::Reserved(r) => r & SCT_MASK as u8,
        }
    }

    /// Short human-readable name ("Generic", "Command Specific", …).
    pub const fn name(self) -> &'static str {
        match self {
            StatusCodeType::Generic => "Generic",
            StatusCodeType::CommandSpecific => "Command Specific",
            StatusCodeType::MediaDataIntegrity => "Media and Data Integrity",
            StatusCodeType::Path => "Path Related",
            StatusCodeType::VendorSpecific => "Vendor Specific",
            StatusCodeType::Reserved(_) => "Reserved",
        }
    }
}

impl fmt::Display for StatusCodeType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The 15-bit Status Field of a completion (see the module documentation for the layout).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Status(pub u16);

impl Status {
    /// Successful Completion (SCT 0, SC 0).
    pub const SUCCESS: Status = Status(0);

    /// Extracts the Status Field from CQE Dword 3 bits 31:16 (`CompletionEntry::status`),
    /// dropping the Phase Tag in bit 0.
    pub const fn from_cqe(raw_with_phase: u16) -> Status {
        Status(raw_with_phase >> 1)
    }

    /// Encodes this status with a Phase Tag, as stored in `CompletionEntry::status`.
    pub const fn to_cqe(self, phase: bool) -> u16 {
        (self.0 & FIELD_MASK) << 1 | phase as u16
    }

    /// Builds a status from its type, code and Do Not Retry bit (CRD and More are zero).
    pub const fn new(sct: u8, sc: u8, dnr: bool) -> Status {
        let dnr = if dnr { DNR_BIT } else { 0 };
        Status(((sct as u16) & SCT_MASK) << SCT_SHIFT | sc as u16 | dnr)
    }

    /// Returns this status with the More bit set or cleared.
    #[must_use]
    pub const fn with_more(self, more: bool) -> Status {
        Status(if more {
            self.0 | MORE_BIT
        } else {
            self.0 & !MORE_BIT
        })
    }

    /// Returns this status with the Command Retry Delay index (0..=3) replaced.
    #[must_use]
    pub const fn with_crd(self, crd: u8) -> Status {
        Status(self.0 & !(CRD_MASK << CRD_SHIFT) | ((crd as u16) & CRD_MASK) << CRD_SHIFT)
    }

    /// Status Code.
    pub const fn sc(self) -> u8 {
        (self.0 & SC_MASK) as u8
    }

    /// Raw 3-bit Status Code Type.
    pub const fn sct_raw(self) -> u8 {
        ((self.0 >> SCT_SHIFT) & SCT_MASK) as u8
    }

    /// Status Code Type.
    pub const fn sct(self) -> StatusCodeType {
        StatusCodeType::from_raw(self.sct_raw())
    }

    /// Command Retry Delay: 0 = retry at once, 1..=3 select Identify Controller CRDT1..3.
    pub const fn crd(self) -> u8 {
        ((self.0 >> CRD_SHIFT) & CRD_MASK) as u8
    }

    /// More: the Error Information log page has more detail.
    pub const fn more(self) -> bool {
        self.0 & MORE_BIT != 0
    }

    /// Do Not Retry: the same command is expected to fail again.
    pub const fn dnr(self) -> bool {
        self.0 & DNR_BIT != 0
    }

    /// True for Successful Completion (SCT 0, SC 0), whatever CRD/More/DNR say.
    pub const fn is_success(self) -> bool {
        self.sct_raw() == 0 && self.sc() == generic::SUCCESS
    }

    /// Human-readable status name from the specification, `"Unknown"` when not named.
    pub const fn name(self) -> &'static str {
        let name = match self.sct() {
            StatusCodeType::Generic => generic::name(self.sc()),
            StatusCodeType::CommandSpecific => command_specific::name(self.sc()),
            StatusCodeType::MediaDataIntegrity => media::name(self.sc()),
            StatusCodeType::Path => path::name(self.sc()),
            StatusCodeType::VendorSpecific | StatusCodeType::Reserved(_) => None,
        };
        match name {
            Some(n) => n,
            None => "Unknown",
        }
    }
}

impl fmt::Display for Status {
    /// Formats as e.g. `LBA Out of Range (SCT 0x0 Generic, SC 0x80, DNR)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} (SCT {:#x} {}, SC {:#04x}",
            self.name(),
            self.sct_raw(),
            self.sct(),
            self.sc()
        )?;
        if self.crd() != 0 {
            write!(f, ", CRD {}", self.crd())?;
        }
        if self.more() {
            f.write_str(", MORE")?;
        }
        if self.dnr() {
            f.write_str(", DNR")?;
        }
        f.write_str(")")
    }
}

/// Declares status code constants and a `name(sc) -> Option<&'static str>` lookup from one table.
macro_rules! status_codes {
    ($( $(#[$m:meta])* $id:ident = $val:literal => $text:literal, )*) => {
        $( $(#[$m])* #[doc = $text] pub const $id: u8 = $val; )*

        /// Name of status code `sc` within this status code type, if the specification names it.
        pub const fn name(sc: u8) -> Option<&'static str> {
            match sc {
                $( $id => Some($text), )*
                _ => None,
            }
        }

        /// Every named code in this status code type, in ascending order.
        pub const ALL: &[u8] = &[$($id),*];
    };
}

/// Generic Command Status values, SCT 0h (§4.6.1.2.1, Figure 94; 80h–84h NVM CS Figure 20).
pub mod generic {
    status_codes! {
        SUCCESS = 0x00 => "Successful Completion",
        INVALID_OPCODE = 0x01 => "Invalid Command Opcode",
        INVALID_FIELD = 0x02 => "Invalid Field in Command",
        COMMAND_ID_CONFLICT = 0x03 => "Command ID Conflict",
        DATA_TRANSFER_ERROR = 0x04 => "Data Transfer Error",
        POWER_LOSS_ABORT = 0x05 => "Commands Aborted due to Power Loss Notification",
        INTERNAL_ERROR = 0x06 => "Internal Error",
        ABORT_REQUESTED = 0x07 => "Command Abort Requested",
        ABORTED_SQ_DELETION = 0x08 => "Command Aborted due to SQ Deletion",
        ABORTED_FUSED_FAIL = 0x09 => "Command Aborted due to Failed Fused Command",
        ABORTED_FUSED_MISSING = 0x0A => "Command Aborted due to Missing Fused Command",
        INVALID_NAMESPACE_OR_FORMAT = 0x0B => "Invalid Namespace or Format",
        COMMAND_SEQUENCE_ERROR = 0x0C => "Command Sequence Error",
        INVALID_SGL_SEGMENT_DESCRIPTOR = 0x0D => "Invalid SGL Segment Descriptor",
        INVALID_NUMBER_OF_SGL_DESCRIPTORS = 0x0E => "Invalid Number of SGL Descriptors",
        DATA_SGL_LENGTH_INVALID = 0x0F => "Data SGL Length Invalid",
        METADATA_SGL_LENGTH_INVALID = 0x10 => "Metadata SGL Length Invalid",
        SGL_DESCRIPTOR_TYPE_INVALID = 0x11 => "SGL Descriptor Type Invalid",
        INVALID_USE_OF_CMB = 0x12 => "Invalid Use of Controller Memory Buffer",
        INVALID_PRP_OFFSET = 0x13 => "PRP Offset Invalid",
        ATOMIC_WRITE_UNIT_EXCEEDED = 0x14 => "Atomic Write Unit Exceeded",
        OPERATION_DENIED = 0x15 => "Operation Denied",
        INVALID_SGL_OFFSET = 0x16 => "SGL Offset Invalid",
        HOST_IDENTIFIER_INCONSISTENT_FORMAT = 0x18 => "Host Identifier Inconsistent Format",
        KEEP_ALIVE_TIMER_EXPIRED = 0x19 => "Keep Alive Timer Expired",
        KEEP_ALIVE_TIMEOUT_INVALID = 0x1A => "Keep Alive Timeout Invalid",
        ABORTED_PREEMPT_AND_ABORT = 0x1B => "Command Aborted due to Preempt and Abort",
        SANITIZE_FAILED = 0x1C => "Sanitize Failed",
        SANITIZE_IN_PROGRESS = 0x1D => "Sanitize In Progress",
        SGL_DATA_BLOCK_GRANULARITY_INVALID = 0x1E => "SGL Data Block Granularity Invalid",
        COMMAND_NOT_SUPPORTED_FOR_QUEUE_IN_CMB = 0x1F => "Command Not Supported for Queue in CMB",
        NAMESPACE_WRITE_PROTECTED = 0x20 => "Namespace is Write Protected",
        COMMAND_INTERRUPTED = 0x21 => "Command Interrupted",
        TRANSIENT_TRANSPORT_ERROR = 0x22 => "Transient Transport Error",
        PROHIBITED_BY_LOCKDOWN = 0x23 => "Command Prohibited by Command and Feature Lockdown",
        ADMIN_COMMAND_MEDIA_NOT_READY = 0x24 => "Admin Command Media Not Ready",
        LBA_OUT_OF_RANGE = 0x80 => "LBA Out of Range",
        CAPACITY_EXCEEDED = 0x81 => "Capacity Exceeded",
        NAMESPACE_NOT_READY = 0x82 => "Namespace Not Ready",
        RESERVATION_CONFLICT = 0x83 => "Reservation Conflict",
        FORMAT_IN_PROGRESS = 0x84 => "Format In Progress",
    }
}

/// Command Specific Status values, SCT 1h (§4.6.1.2.2, Figure 95; 80h+ NVM CS Figure 21).
pub mod command_specific {
    status_codes! {
        COMPLETION_QUEUE_INVALID = 0x00 => "Completion Queue Invalid",
        INVALID_QUEUE_IDENTIFIER = 0x01 => "Invalid Queue Identifier",
        INVALID_QUEUE_SIZE = 0x02 => "Invalid Queue Size",
        ABORT_COMMAND_LIMIT_EXCEEDED = 0x03 => "Abort Command Limit Exceeded",
        ASYNC_EVENT_REQUEST_LIMIT_EXCEEDED = 0x05 => "Asynchronous Event Request Limit Exceeded",
        INVALID_FIRMWARE_SLOT = 0x06 => "Invalid Firmware Slot",
        INVALID_FIRMWARE_IMAGE = 0x07 => "Invalid Firmware Image",
        INVALID_INTERRUPT_VECTOR = 0x08 => "Invalid Interrupt Vector",
        INVALID_LOG_PAGE = 0x09 => "Invalid Log Page",
        INVALID_FORMAT = 0x0A => "Invalid Format",
        FIRMWARE_ACTIVATION_REQUIRES_CONVENTIONAL_RESET = 0x0B => "Firmware Activation Requires Conventional Reset",
        INVALID_QUEUE_DELETION = 0x0C => "Invalid Queue Deletion",
        FEATURE_ID_NOT_SAVEABLE = 0x0D => "Feature Identifier Not Saveable",
        FEATURE_NOT_CHANGEABLE = 0x0E => "Feature Not Changeable",
        FEATURE_NOT_NAMESPACE_SPECIFIC = 0x0F => "Feature Not Namespace Specific",
        FIRMWARE_ACTIVATION_REQUIRES_NVM_SUBSYSTEM_RESET = 0x10 => "Firmware Activation Requires NVM Subsystem Reset",
        FIRMWARE_ACTIVATION_REQUIRES_CONTROLLER_RESET = 0x11 => "Firmware Activation Requires Controller Level Reset",
        FIRMWARE_ACTIVATION_REQUIRES_MAX_TIME_VIOLATION = 0x12 => "Firmware Activation Requires Maximum Time Violation",
        FIRMWARE_ACTIVATION_PROHIBITED = 0x13 => "Firmware Activation Prohibited",
        OVERLAPPING_RANGE = 0x14 => "Overlapping Range",
        NAMESPACE_INSUFFICIENT_CAPACITY = 0x15 => "Namespace Insufficient Capacity",
        NAMESPACE_ID_UNAVAILABLE = 0x16 => "Namespace Identifier Unavailable",
        NAMESPACE_ALREADY_ATTACHED = 0x18 => "Namespace Already Attached",
        NAMESPACE_IS_PRIVATE = 0x19 => "Namespace Is Private",
        NAMESPACE_NOT_ATTACHED = 0x1A => "Namespace Not Attached",
        THIN_PROVISIONING_NOT_SUPPORTED = 0x1B => "Thin Provisioning Not Supported",
        CONTROLLER_LIST_INVALID = 0x1C => "Controller List Invalid",
        DEVICE_SELF_TEST_IN_PROGRESS = 0x1D => "Device Self-test In Progress",
        BOOT_PARTITION_WRITE_PROHIBITED = 0x1E => "Boot Partition Write Prohibited",
        INVALID_CONTROLLER_IDENTIFIER = 0x1F => "Invalid Controller Identifier",
        INVALID_SECONDARY_CONTROLLER_STATE = 0x20 => "Invalid Secondary Controller State",
        INVALID_NUMBER_OF_CONTROLLER_RESOURCES = 0x21 => "Invalid Number of Controller Resources",
        INVALID_RESOURCE_IDENTIFIER = 0x22 => "Invalid Resource Identifier",
        SANITIZE_PROHIBITED_WHILE_PMR_ENABLED = 0x23 => "Sanitize Prohibited While Persistent Memory Region is Enabled",
        ANA_GROUP_IDENTIFIER_INVALID = 0x24 => "ANA Group Identifier Invalid",
        ANA_ATTACH_FAILED = 0x25 => "ANA Attach Failed",
        INSUFFICIENT_CAPACITY = 0x26 => "Insufficient Capacity",
        NAMESPACE_ATTACHMENT_LIMIT_EXCEEDED = 0x27 => "Namespace Attachment Limit Exceeded",
        PROHIBITION_NOT_SUPPORTED = 0x28 => "Prohibition of Command Execution Not Supported",
        IO_COMMAND_SET_NOT_SUPPORTED = 0x29 => "I/O Command Set Not Supported",
        IO_COMMAND_SET_NOT_ENABLED = 0x2A => "I/O Command Set Not Enabled",
        IO_COMMAND_SET_COMBINATION_REJECTED = 0x2B => "I/O Command Set Combination Rejected",
        INVALID_IO_COMMAND_SET = 0x2C => "Invalid I/O Command Set",
        IDENTIFIER_UNAVAILABLE = 0x2D => "Identifier Unavailable",
        CONFLICTING_ATTRIBUTES = 0x80 => "Conflicting Attributes",
        INVALID_PROTECTION_INFORMATION = 0x81 => "Invalid Protection Information",
        ATTEMPTED_WRITE_TO_READ_ONLY_RANGE = 0x82 => "Attempted Write to Read Only Range",
        COMMAND_SIZE_LIMIT_EXCEEDED = 0x83 => "Command Size Limit Exceeded",
    }
}

/// Media and Data Integrity Errors, SCT 2h (§4.6.1.2.3, Figure 96; NVM CS Figure 22).
pub mod media {
    status_codes! {
        WRITE_FAULT = 0x80 => "Write Fault",
        UNRECOVERED_READ_ERROR = 0x81 => "Unrecovered Read Error",
        END_TO_END_GUARD_CHECK_ERROR = 0x82 => "End-to-end Guard Check Error",
        END_TO_END_APPLICATION_TAG_CHECK_ERROR = 0x83 => "End-to-end Application Tag Check Error",
        END_TO_END_REFERENCE_TAG_CHECK_ERROR = 0x84 => "End-to-end Reference Tag Check Error",
        COMPARE_FAILURE = 0x85 => "Compare Failure",
        ACCESS_DENIED = 0x86 => "Access Denied",
        DEALLOCATED_OR_UNWRITTEN_LOGICAL_BLOCK = 0x87 => "Deallocated or Unwritten Logical Block",
        END_TO_END_STORAGE_TAG_CHECK_ERROR = 0x88 => "End-to-End Storage Tag Check Error",
    }
}

/// Path Related Status values, SCT 3h (§4.6.1.2.4, Figure 97).
pub mod path {
    status_codes! {
        INTERNAL_PATH_ERROR = 0x00 => "Internal Path Error",
        ASYMMETRIC_ACCESS_PERSISTENT_LOSS = 0x01 => "Asymmetric Access Persistent Loss",
        ASYMMETRIC_ACCESS_INACCESSIBLE = 0x02 => "Asymmetric Access Inaccessible",
        ASYMMETRIC_ACCESS_TRANSITION = 0x03 => "Asymmetric Access Transition",
        CONTROLLER_PATHING_ERROR = 0x60 => "Controller Pathing Error",
        HOST_PATHING_ERROR = 0x70 => "Host Pathing Error",
        COMMAND_ABORTED_BY_HOST = 0x71 => "Command Aborted By Host",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_layout() {
        let s = Status(1 << 14 | 1 << 13 | 2 << 11 | 3 << 8 | 0x85);
        assert_eq!(s.sc(), 0x85);
        assert_eq!(s.sct(), StatusCodeType::Path);
        assert_eq!(s.crd(), 2);
        assert!(s.more());
        assert!(s.dnr());
        assert!(!s.is_success());
        assert_eq!(Status::from_cqe(s.to_cqe(true)), s);
        assert_eq!(s.to_cqe(true) & 1, 1);
        assert_eq!(Status::from_cqe(0x0001), Status::SUCCESS);
        assert_eq!(Status::new(1, 0x02, false).0, 0x0102);
        assert_eq!(Status::new(0, 0x80, true).0, 0x4080);
        assert_eq!(
            Status::new(2, 0x81, false).with_more(true).with_crd(1).0,
            0x2A81
        );
    }

    #[test]
    fn success_ignores_flags_but_not_codes() {
        assert!(Status::SUCCESS.is_success());
        assert!(Status::SUCCESS.with_more(true).is_success());
        assert!(!Status::new(1, 0, false).is_success());
        assert!(!Status::new(0, 1, false).is_success());
    }

    #[test]
    fn sct_round_trips() {
        for raw in 0..8u8 {
            assert_eq!(StatusCodeType::from_raw(raw).raw(), raw);
        }
        assert_eq!(StatusCodeType::from_raw(5), StatusCodeType::Reserved(5));
        assert_eq!(StatusCodeType::from_raw(7), StatusCodeType::VendorSpecific);
        assert_eq!(
            StatusCodeType::from_raw(0xF9),
            StatusCodeType::CommandSpecific
        );
    }

    #[test]
    fn names_per_type() {
        let cases = [
            (0, generic::SUCCESS, "Successful Completion"),
            (0, generic::INVALID_FIELD, "Invalid Field in Command"),
            (0, generic::INVALID_PRP_OFFSET, "PRP Offset Invalid"),
            (0, generic::LBA_OUT_OF_RANGE, "LBA Out of Range"),
            (0, generic::FORMAT_IN_PROGRESS, "Format In Progress"),
            (
                1,
                command_specific::INVALID_QUEUE_IDENTIFIER,
                "Invalid Queue Identifier",
            ),
            (
                1,
                command_specific::INVALID_QUEUE_DELETION,
                "Invalid Queue Deletion",
            ),
            (
                1,
                command_specific::ATTEMPTED_WRITE_TO_READ_ONLY_RANGE,
                "Attempted Write to Read Only Range",
            ),
            (2, media::UNRECOVERED_READ_ERROR, "Unrecovered Read Error"),
            (2, media::COMPARE_FAILURE, "Compare Failure"),
            (3, path::HOST_PATHING_ERROR, "Host Pathing Error"),
        ];
        for (sct, sc, want) in cases {
            assert_eq!(
                Status::new(sct, sc, false).name(),
                want,
                "sct {sct} sc {sc:#x}"
            );
        }
        // Same code, different type, different meaning.
        assert_eq!(
            Status::new(0, 0x02, false).name(),
            "Invalid Field in Command"
        );
        assert_eq!(Status::new(1, 0x02, false).name(), "Invalid Queue Size");
        assert_eq!(Status::new(0, 0x17, false).name(), "Unknown");
        assert_eq!(Status::new(2, 0x00, false).name(), "Unknown");
        assert_eq!(Status::new(7, 0x80, false).name(), "Unknown");
        assert_eq!(Status::new(5, 0x00, false).name(), "Unknown");
    }

    #[test]
    fn tables_are_sorted_unique_and_named() {
        for table in [generic::ALL, command_specific::ALL, media::ALL, path::ALL] {
            assert!(table.windows(2).all(|w| w[0] < w[1]), "{table:x?}");
        }
        assert_eq!(generic::ALL.len(), 41);
        assert!(generic::ALL.iter().all(|&sc| generic::name(sc).is_some()));
        assert!(command_specific::ALL
            .iter()
            .all(|&sc| command_specific::name(sc).is_some()));
    }

    #[test]
    fn display() {
        let s = Status::new(0, generic::LBA_OUT_OF_RANGE, true);
        assert_eq!(
            s.to_string(),
            "LBA Out of Range (SCT 0x0 Generic, SC 0x80, DNR)"
        );
        let s = Status::new(1, command_specific::INVALID_QUEUE_SIZE, false);
        assert_eq!(
            s.to_string(),
            "Invalid Queue Size (SCT 0x1 Command Specific, SC 0x02)"
        );
        let s = Status::new(6, 0x10, false).with_more(true).with_crd(3);
        assert_eq!(
            s.to_string(),
            "Unknown (SCT 0x6 Reserved, SC 0x10, CRD 3, MORE)"
        );
    }
}
