//! Command opcodes, feature identifiers and log page identifiers.
//!
//! Admin opcodes: NVMe Base 2.0 §5 (Figure 138 "Opcodes for Admin Commands").
//! I/O opcodes: NVM CS 1.0 §3 (Figure 18 "Opcodes for NVM Commands"). Bits 1:0 of every
//! standard opcode give its data transfer direction (00 none, 01 host to controller,
//! 10 controller to host, 11 bidirectional).

/// Admin command opcodes (Base §5).
pub mod admin {
    /// Delete I/O Submission Queue (§5.7).
    pub const DELETE_IO_SQ: u8 = 0x00;
    /// Create I/O Submission Queue (§5.5).
    pub const CREATE_IO_SQ: u8 = 0x01;
    /// Get Log Page (§5.16).
    pub const GET_LOG_PAGE: u8 = 0x02;
    /// Delete I/O Completion Queue (§5.6).
    pub const DELETE_IO_CQ: u8 = 0x04;
    /// Create I/O Completion Queue (§5.4).
    pub const CREATE_IO_CQ: u8 = 0x05;
    /// Identify (§5.17).
    pub const IDENTIFY: u8 = 0x06;
    /// Abort (§5.1).
    pub const ABORT: u8 = 0x08;
    /// Set Features (§5.27).
    pub const SET_FEATURES: u8 = 0x09;
    /// Get Features (§5.15).
    pub const GET_FEATURES: u8 = 0x0A;
    /// Asynchronous Event Request (§5.2).
    pub const ASYNC_EVENT_REQUEST: u8 = 0x0C;
    /// Namespace Management (§5.21).
    pub const NAMESPACE_MANAGEMENT: u8 = 0x0D;
    /// Firmware Commit (§5.12).
    pub const FIRMWARE_COMMIT: u8 = 0x10;
    /// Firmware Image Download (§5.13).
    pub const FIRMWARE_IMAGE_DOWNLOAD: u8 = 0x11;
    /// Device Self-test (§5.8).
    pub const DEVICE_SELF_TEST: u8 = 0x14;
    /// Namespace Attachment (§5.20).
    pub const NAMESPACE_ATTACHMENT: u8 = 0x15;
    /// Keep Alive (§5.18).
    pub const KEEP_ALIVE: u8 = 0x18;
    /// Directive Send (§5.10).
    pub const DIRECTIVE_SEND: u8 = 0x19;
    /// Directive Receive (§5.9).
    pub const DIRECTIVE_RECEIVE: u8 = 0x1A;
    /// Virtualization Management (§5.28).
    pub const VIRTUALIZATION_MANAGEMENT: u8 = 0x1C;
    /// NVMe-MI Send (§5.23).
    pub const NVME_MI_SEND: u8 = 0x1D;
    /// NVMe-MI Receive (§5.22).
    pub const NVME_MI_RECEIVE: u8 = 0x1E;
    /// Capacity Management (§5.3).
    pub const CAPACITY_MANAGEMENT: u8 = 0x20;
    /// Lockdown (§5.19).
    pub const LOCKDOWN: u8 = 0x24;
    /// Doorbell Buffer Config (§5.11): shadow doorbells for emulated controllers.
    pub const DOORBELL_BUFFER_CONFIG: u8 = 0x7C;
    /// Format NVM (§5.14).
    pub const FORMAT_NVM: u8 = 0x80;
    /// Security Send (§5.26).
    pub const SECURITY_SEND: u8 = 0x81;
    /// Security Receive (§5.25).
    pub const SECURITY_RECEIVE: u8 = 0x82;
    /// Sanitize (§5.24).
    pub const SANITIZE: u8 = 0x84;
    /// Get LBA Status (NVM CS §4.2).
    pub const GET_LBA_STATUS: u8 = 0x86;

    /// Human-readable name of an admin opcode, `"Unknown"` when not listed above.
    pub fn name(op: u8) -> &'static str {
        match op {
            DELETE_IO_SQ => "Delete I/O Submission Queue",
            CREATE_IO_SQ => "Create I/O Submission Queue",
            GET_LOG_PAGE => "Get Log Page",
            DELETE_IO_CQ => "Delete I/O Completion Queue",
            CREATE_IO_CQ => "Create I/O Completion Queue",
            IDENTIFY => "Identify",
            ABORT => "Abort",
            SET_FEATURES => "Set Features",
            GET_FEATURES => "Get Features",
            ASYNC_EVENT_REQUEST => "Asynchronous Event Request",
            NAMESPACE_MANAGEMENT => "Namespace Management",
            FIRMWARE_COMMIT => "Firmware Commit",
            FIRMWARE_IMAGE_DOWNLOAD => "Firmware Image Download",
            DEVICE_SELF_TEST => "Device Self-test",
            NAMESPACE_ATTACHMENT => "Namespace Attachment",
            KEEP_ALIVE => "Keep Alive",
            DIRECTIVE_SEND => "Directive Send",
            DIRECTIVE_RECEIVE => "Directive Receive",
            VIRTUALIZATION_MANAGEMENT => "Virtualization Management",
            NVME_MI_SEND => "NVMe-MI Send",
            NVME_MI_RECEIVE => "NVMe-MI Receive",
            CAPACITY_MANAGEMENT => "Capacity Management",
            LOCKDOWN => "Lockdown",
            DOORBELL_BUFFER_CONFIG => "Doorbell Buffer Config",
            FORMAT_NVM => "Format NVM",
            SECURITY_SEND => "Security Send",
            SECURITY_RECEIVE => "Security Receive",
            SANITIZE => "Sanitize",
            GET_LBA_STATUS => "Get LBA Status",
            _ => "Unknown",
        }
    }
}

/// NVM command set I/O opcodes (NVM CS §3).
pub mod nvm {
    /// Flush (Base §7.1).
    pub const FLUSH: u8 = 0x00;
    /// Write (NVM CS §3.3.6).
    pub const WRITE: u8 = 0x01;
    /// Read (NVM CS §3.3.4).
    pub const READ: u8 = 0x02;
    /// Write Uncorrectable (NVM CS §3.3.7).
    pub const WRITE_UNCORRECTABLE: u8 = 0x04;
    /// Compare (NVM CS §3.3.1).
    pub const COMPARE: u8 = 0x05;
    /// Write Zeroes (NVM CS §3.3.8).
    pub const WRITE_ZEROES: u8 = 0x08;
    /// Dataset Management (NVM CS §3.3.3).
    pub const DATASET_MANAGEMENT: u8 = 0x09;
    /// Verify (NVM CS §3.3.5).
    pub const VERIFY: u8 = 0x0C;
    /// Copy (NVM CS §3.3.2).
    pub const COPY: u8 = 0x19;
    /// Zone Management Send (ZNS CS 1.1 §3.4.3; zoned namespaces only).
    pub const ZONE_MGMT_SEND: u8 = crate::zns::opcode::ZONE_MGMT_SEND;
    /// Zone Management Receive (ZNS CS 1.1 §3.4.2).
    pub const ZONE_MGMT_RECV: u8 = crate::zns::opcode::ZONE_MGMT_RECV;
    /// Zone Append (ZNS CS 1.1 §3.4.1).
    pub const ZONE_APPEND: u8 = crate::zns::opcode::ZONE_APPEND;

    /// Opcode bit 0: data moves host to controller.
    const XFER_TO_DEVICE: u8 = 0b01;
    /// Opcode bit 1: data moves controller to host.
    const XFER_FROM_DEVICE: u8 = 0b10;

    /// Human-readable name of an NVM opcode, `"Unknown"` when not listed above.
    pub fn name(op: u8) -> &'static str {
        match op {
            FLUSH => "Flush",
            WRITE => "Write",
            READ => "Read",
            WRITE_UNCORRECTABLE => "Write Uncorrectable",
            COMPARE => "Compare",
            WRITE_ZEROES => "Write Zeroes",
            DATASET_MANAGEMENT => "Dataset Management",
            VERIFY => "Verify",
            COPY => "Copy",
            ZONE_MGMT_SEND => "Zone Management Send",
            ZONE_MGMT_RECV => "Zone Management Receive",
            ZONE_APPEND => "Zone Append",
            _ => "Unknown",
        }
    }

    /// True when the command's data buffer is read by the controller (Write, Compare, DSM…).
    pub fn transfers_to_device(op: u8) -> bool {
        op & XFER_TO_DEVICE != 0
    }

    /// True when the command's data buffer is written by the controller (Read).
    pub fn transfers_from_device(op: u8) -> bool {
        op & XFER_FROM_DEVICE != 0
    }
}

/// The NVM command set I/O opcodes as a type (NVM CS §3, Figure 18): what typed commands carry
/// instead of a raw byte. Each value is the constant of the same name in [`nvm`], the single
/// source of the numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum NvmOpcode {
    /// Flush (Base §7.1).
    Flush = nvm::FLUSH,
    /// Write (NVM CS §3.3.6).
    Write = nvm::WRITE,
    /// Read (NVM CS §3.3.4).
    Read = nvm::READ,
    /// Write Uncorrectable (NVM CS §3.3.7).
    WriteUncorrectable = nvm::WRITE_UNCORRECTABLE,
    /// Compare (NVM CS §3.3.1).
    Compare = nvm::COMPARE,
    /// Write Zeroes (NVM CS §3.3.8).
    WriteZeroes = nvm::WRITE_ZEROES,
    /// Dataset Management (NVM CS §3.3.3).
    DatasetManagement = nvm::DATASET_MANAGEMENT,
    /// Verify (NVM CS §3.3.5).
    Verify = nvm::VERIFY,
    /// Copy (NVM CS §3.3.2).
    Copy = nvm::COPY,
    /// Zone Management Send (ZNS CS 1.1 §3.4.3).
    ZoneMgmtSend = nvm::ZONE_MGMT_SEND,
    /// Zone Management Receive (ZNS CS 1.1 §3.4.2).
    ZoneMgmtRecv = nvm::ZONE_MGMT_RECV,
    /// Zone Append (ZNS CS 1.1 §3.4.1).
    ZoneAppend = nvm::ZONE_APPEND,
}

/// Which way a command's data moves (opcode bits 1:0, NVM CS §3 Figure 18).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DataDirection {
    /// No data transfer (Flush, Write Zeroes, Verify).
    None,
    /// Host to controller: the controller reads the buffer (Write, Compare).
    ToDevice,
    /// Controller to host: the controller writes the buffer (Read).
    FromDevice,
    /// Both ways.
    Bidirectional,
}

impl NvmOpcode {
    /// Every opcode of the enum.
    pub const ALL: [NvmOpcode; 12] = [
        NvmOpcode::Flush,
        NvmOpcode::Write,
        NvmOpcode::Read,
        NvmOpcode::WriteUncorrectable,
        NvmOpcode::Compare,
        NvmOpcode::WriteZeroes,
        NvmOpcode::DatasetManagement,
        NvmOpcode::Verify,
        NvmOpcode::Copy,
        NvmOpcode::ZoneMgmtSend,
        NvmOpcode::ZoneMgmtRecv,
        NvmOpcode::ZoneAppend,
    ];

    /// The opcode of byte `op`, `None` for one not listed (reservations, vendor specific...).
    pub fn from_byte(op: u8) -> Option<Self> {
        Self::ALL.into_iter().find(|o| o.byte() == op)
    }

    /// The opcode byte of the submission entry.
    #[inline(always)]
    pub const fn byte(self) -> u8 {
        self as u8
    }

    /// Human-readable name (as [`nvm::name`]).
    pub fn name(self) -> &'static str {
        nvm::name(self.byte())
    }

    /// The direction of the command's data, from opcode bits 1:0.
    #[inline(always)]
    pub const fn direction(self) -> DataDirection {
        match self.byte() & 0b11 {
            0b00 => DataDirection::None,
            0b01 => DataDirection::ToDevice,
            0b10 => DataDirection::FromDevice,
            _ => DataDirection::Bidirectional,
        }
    }

    /// Whether the command moves data (a buffer goes with it).
    #[inline(always)]
    pub const fn has_data(self) -> bool {
        self.byte() & 0b11 != 0
    }
}

/// Feature identifiers for Get/Set Features (Base §5.27.1, Figure 317).
pub mod feature {
    /// Arbitration.
    pub const ARBITRATION: u8 = 0x01;
    /// Power Management.
    pub const POWER_MANAGEMENT: u8 = 0x02;
    /// LBA Range Type.
    pub const LBA_RANGE_TYPE: u8 = 0x03;
    /// Temperature Threshold.
    pub const TEMPERATURE_THRESHOLD: u8 = 0x04;
    /// Error Recovery.
    pub const ERROR_RECOVERY: u8 = 0x05;
    /// Volatile Write Cache.
    pub const VOLATILE_WRITE_CACHE: u8 = 0x06;
    /// Number of Queues.
    pub const NUMBER_OF_QUEUES: u8 = 0x07;
    /// Interrupt Coalescing.
    pub const INTERRUPT_COALESCING: u8 = 0x08;
    /// Interrupt Vector Configuration.
    pub const INTERRUPT_VECTOR_CONFIGURATION: u8 = 0x09;
    /// Write Atomicity Normal.
    pub const WRITE_ATOMICITY_NORMAL: u8 = 0x0A;
    /// Asynchronous Event Configuration.
    pub const ASYNC_EVENT_CONFIGURATION: u8 = 0x0B;
    /// Autonomous Power State Transition.
    pub const AUTONOMOUS_POWER_STATE_TRANSITION: u8 = 0x0C;
    /// Host Memory Buffer.
    pub const HOST_MEMORY_BUFFER: u8 = 0x0D;
    /// Timestamp.
    pub const TIMESTAMP: u8 = 0x0E;
    /// Keep Alive Timer.
    pub const KEEP_ALIVE_TIMER: u8 = 0x0F;
}

/// Log page identifiers for Get Log Page (Base §5.16.1, Figure 202).
pub mod log_page {
    /// Error Information (§5.16.1.2).
    pub const ERROR_INFORMATION: u8 = 0x01;
    /// SMART / Health Information (§5.16.1.3).
    pub const SMART_HEALTH: u8 = 0x02;
    /// Firmware Slot Information (§5.16.1.4).
    pub const FIRMWARE_SLOT: u8 = 0x03;
    /// Changed Namespace List (§5.16.1.5).
    pub const CHANGED_NAMESPACE_LIST: u8 = 0x04;
    /// Commands Supported and Effects (§5.16.1.6).
    pub const COMMANDS_SUPPORTED_AND_EFFECTS: u8 = 0x05;
    /// Device Self-test (§5.16.1.7).
    pub const DEVICE_SELF_TEST: u8 = 0x06;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(admin::name(admin::IDENTIFY), "Identify");
        assert_eq!(
            admin::name(admin::DOORBELL_BUFFER_CONFIG),
            "Doorbell Buffer Config"
        );
        assert_eq!(admin::name(0x03), "Unknown");
        assert_eq!(nvm::name(nvm::WRITE_ZEROES), "Write Zeroes");
        assert_eq!(nvm::name(0xFF), "Unknown");
    }

    #[test]
    fn typed_opcodes_are_the_constants() {
        assert_eq!(NvmOpcode::Read.byte(), nvm::READ);
        assert_eq!(NvmOpcode::Verify.byte(), 0x0C);
        assert_eq!(NvmOpcode::Verify.direction(), DataDirection::None);
        assert_eq!(NvmOpcode::Write.direction(), DataDirection::ToDevice);
        assert_eq!(NvmOpcode::Compare.direction(), DataDirection::ToDevice);
        assert_eq!(NvmOpcode::Read.direction(), DataDirection::FromDevice);
        assert!(!NvmOpcode::WriteZeroes.has_data());
        assert_eq!(NvmOpcode::WriteZeroes.name(), "Write Zeroes");
    }

    #[test]
    fn nvm_transfer_direction() {
        assert!(nvm::transfers_to_device(nvm::WRITE));
        assert!(!nvm::transfers_from_device(nvm::WRITE));
        assert!(nvm::transfers_from_device(nvm::READ));
        assert!(!nvm::transfers_to_device(nvm::READ));
        assert!(nvm::transfers_to_device(nvm::COMPARE));
        assert!(nvm::transfers_to_device(nvm::DATASET_MANAGEMENT));
        for op in [
            nvm::FLUSH,
            nvm::WRITE_ZEROES,
            nvm::VERIFY,
            nvm::WRITE_UNCORRECTABLE,
        ] {
            assert!(!nvm::transfers_to_device(op), "{}", nvm::name(op));
            assert!(!nvm::transfers_from_device(op), "{}", nvm::name(op));
        }
    }
}
