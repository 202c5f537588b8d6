//! Firmware update: Firmware Image Download (opcode 11h, NVMe Base 2.0 §5.13) and Firmware
//! Commit (opcode 10h, §5.12), their command specific statuses (§5.12.1, §5.13.1), and the
//! Identify Controller fields that describe what a controller offers: FRMW (byte 260) and
//! FWUG (byte 319). The Firmware Slot Information log page (03h) is
//! [`crate::admin_log::FirmwareSlotLog`].
//!
//! A host downloads an image in pieces (each at a dword offset, a whole number of dwords,
//! aligned to FWUG), then commits it to a slot with a Commit Action that says whether and
//! when the controller activates it.

use std::fmt;

use crate::opcode::admin;
use crate::queue::SubmissionEntry;
use crate::status::{command_specific, Status, StatusCodeType};

/// Bytes per dword: NUMD and OFST count dwords.
pub const DWORD_BYTES: usize = 4;
/// Highest firmware slot number (FS is 3 bits; slots 1..=7, 0 lets the controller choose).
pub const MAX_FIRMWARE_SLOT: u8 = 7;
/// Unit of FWUG: 4 KiB.
pub const FWUG_UNIT_BYTES: usize = 4096;

/// Firmware Commit CDW10 bits 2:0: Firmware Slot.
const FS_MASK: u32 = 0b111;
/// Firmware Commit CDW10 bits 5:3: Commit Action.
const CA_SHIFT: u32 = 3;
const CA_MASK: u32 = 0b111;
/// Firmware Commit CDW10 bit 31: Boot Partition ID.
const BPID_SHIFT: u32 = 31;
/// FRMW bit 0: the first firmware slot (slot 1) is read only.
const FRMW_SLOT1_READ_ONLY: u8 = 1 << 0;
/// FRMW bits 3:1: number of firmware slots (1..=7).
const FRMW_SLOTS_SHIFT: u8 = 1;
const FRMW_SLOTS_MASK: u8 = 0b111;
/// FRMW bit 4: Firmware Activation Without Reset (Commit Action 011b is supported).
const FRMW_ACTIVATION_WITHOUT_RESET: u8 = 1 << 4;
/// FWUG FFh: no restriction on granularity or alignment (beyond dwords).
const FWUG_NO_RESTRICTION: u8 = 0xFF;
/// FWUG 0: the controller gives no information.
const FWUG_NO_INFORMATION: u8 = 0;

/// Commit Action of Firmware Commit (CDW10 bits 5:3, §5.12, Figure 180).
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CommitAction {
    /// 000b: the downloaded image replaces the slot's image; not activated.
    Replace = 0b000,
    /// 001b: the downloaded image replaces the slot's image and is activated at the next
    /// Controller Level Reset.
    ReplaceAndActivateAtReset = 0b001,
    /// 010b: the slot's existing image is activated at the next Controller Level Reset.
    ActivateAtReset = 0b010,
    /// 011b: the downloaded image (or, without one, the slot's image) is activated at once,
    /// without a reset (FRMW bit 4 says whether the controller can).
    ReplaceAndActivateNow = 0b011,
    /// 110b: the downloaded image replaces the Boot Partition BPID selects.
    ReplaceBootPartition = 0b110,
    /// 111b: the Boot Partition BPID selects is marked active.
    ActivateBootPartition = 0b111,
}

impl CommitAction {
    /// From the 3-bit field (100b and 101b are reserved).
    pub fn from_raw(ca: u8) -> Option<Self> {
        match ca {
            0b000 => Some(CommitAction::Replace),
            0b001 => Some(CommitAction::ReplaceAndActivateAtReset),
            0b010 => Some(CommitAction::ActivateAtReset),
            0b011 => Some(CommitAction::ReplaceAndActivateNow),
            0b110 => Some(CommitAction::ReplaceBootPartition),
            0b111 => Some(CommitAction::ActivateBootPartition),
            _ => None,
        }
    }

    /// The 3-bit field.
    pub fn raw(self) -> u8 {
        self as u8
    }

    /// Whether the action stores the downloaded image (in a slot or a boot partition).
    pub fn replaces(self) -> bool {
        matches!(
            self,
            CommitAction::Replace
                | CommitAction::ReplaceAndActivateAtReset
                | CommitAction::ReplaceAndActivateNow
                | CommitAction::ReplaceBootPartition
        )
    }

    /// Whether the action works on a boot partition rather than a firmware slot.
    pub fn is_boot_partition(self) -> bool {
        matches!(
            self,
            CommitAction::ReplaceBootPartition | CommitAction::ActivateBootPartition
        )
    }

    /// What a successful completion of this action means.
    pub fn success(self) -> CommitOutcome {
        match self {
            CommitAction::Replace | CommitAction::ReplaceBootPartition => CommitOutcome::Stored,
            CommitAction::ReplaceAndActivateAtReset
            | CommitAction::ActivateAtReset
            | CommitAction::ActivateBootPartition => CommitOutcome::ActivatesAtReset,
            CommitAction::ReplaceAndActivateNow => CommitOutcome::Activated,
        }
    }

    /// A short description.
    pub fn name(self) -> &'static str {
        match self {
            CommitAction::Replace => "replace, do not activate",
            CommitAction::ReplaceAndActivateAtReset => "replace, activate at the next reset",
            CommitAction::ActivateAtReset => "activate the slot at the next reset",
            CommitAction::ReplaceAndActivateNow => "replace and activate now",
            CommitAction::ReplaceBootPartition => "replace the boot partition",
            CommitAction::ActivateBootPartition => "mark the boot partition active",
        }
    }
}

/// The fields of one Firmware Commit command (CDW10, §5.12).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FirmwareCommit {
    /// Firmware Slot (0..=7; 0: the controller chooses).
    pub slot: u8,
    /// Commit Action.
    pub action: CommitAction,
    /// Boot Partition ID (0 or 1), for the boot partition actions.
    pub bpid: bool,
}

impl FirmwareCommit {
    /// Commit `action` on `slot`, boot partition 0.
    pub fn new(slot: u8, action: CommitAction) -> Self {
        FirmwareCommit {
            slot,
            action,
            bpid: false,
        }
    }

    /// CDW10 of the command (the slot's bits above 2:0 are dropped: check
    /// [`MAX_FIRMWARE_SLOT`] first).
    pub fn cdw10(&self) -> u32 {
        (u32::from(self.slot) & FS_MASK)
            | (u32::from(self.action.raw()) & CA_MASK) << CA_SHIFT
            | u32::from(self.bpid) << BPID_SHIFT
    }

    /// Decodes CDW10 (the emulator's side); a reserved Commit Action is None.
    pub fn from_cdw10(cdw10: u32) -> Option<Self> {
        Some(FirmwareCommit {
            slot: (cdw10 & FS_MASK) as u8,
            action: CommitAction::from_raw((cdw10 >> CA_SHIFT & CA_MASK) as u8)?,
            bpid: cdw10 >> BPID_SHIFT & 1 != 0,
        })
    }
}

/// Firmware Commit (§5.12) with `commit`: no data.
#[must_use = "a built command does nothing until it is submitted"]
pub fn firmware_commit(commit: &FirmwareCommit) -> SubmissionEntry {
    SubmissionEntry {
        cdw10: commit.cdw10(),
        ..SubmissionEntry::new(admin::FIRMWARE_COMMIT)
    }
}

/// Firmware Image Download (§5.13) of `dwords` dwords (at least 1) at dword offset
/// `offset_dwords` of the image: CDW10 NUMD (0-based), CDW11 OFST. The data (`dwords` * 4
/// bytes) goes to the device.
#[must_use = "a built command does nothing until it is submitted"]
pub fn firmware_image_download(offset_dwords: u32, dwords: u32) -> SubmissionEntry {
    SubmissionEntry {
        cdw10: dwords.saturating_sub(1),
        cdw11: offset_dwords,
        ..SubmissionEntry::new(admin::FIRMWARE_IMAGE_DOWNLOAD)
    }
}

/// A Firmware Image Download's piece as the controller sees it: (byte offset, byte length).
pub fn image_download_range(sqe: &SubmissionEntry) -> (u64, u64) {
    let bytes = (u64::from(sqe.cdw10) + 1) * DWORD_BYTES as u64;
    (u64::from(sqe.cdw11) * DWORD_BYTES as u64, bytes)
}

/// The reset a committed image needs before it runs (the statuses 0Bh, 10h and 11h of
/// Firmware Commit, §5.12.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ActivationReset {
    /// A Conventional Reset (PCIe: hot reset, link down, or power cycle).
    Conventional,
    /// An NVM Subsystem Reset (NSSR register).
    NvmSubsystem,
    /// A Controller Level Reset (CC.EN 1 -> 0, or a Conventional / NVM Subsystem Reset).
    ControllerLevel,
}

impl ActivationReset {
    /// The reset's name.
    pub fn name(self) -> &'static str {
        match self {
            ActivationReset::Conventional => "a Conventional Reset",
            ActivationReset::NvmSubsystem => "an NVM Subsystem Reset",
            ActivationReset::ControllerLevel => "a Controller Level Reset",
        }
    }
}

/// What a Firmware Commit did, from its action and completion status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CommitOutcome {
    /// The image was stored (in the slot or boot partition), not activated.
    Stored,
    /// The image runs after the next Controller Level Reset.
    ActivatesAtReset,
    /// The image runs now (activated without a reset).
    Activated,
    /// The image was committed; it runs after this reset (the controller could not activate
    /// it at once).
    RequiresReset(ActivationReset),
}

impl fmt::Display for CommitOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CommitOutcome::Stored => f.write_str("stored, not activated"),
            CommitOutcome::ActivatesAtReset => f.write_str("activated at the next reset"),
            CommitOutcome::Activated => f.write_str("activated"),
            CommitOutcome::RequiresReset(r) => {
                write!(f, "committed; activation requires {}", r.name())
            }
        }
    }
}

/// The command specific statuses of Firmware Commit and Firmware Image Download (§5.12.1,
/// Figure 181; §5.13.1), typed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FirmwareStatus {
    /// 06h: the slot is invalid, or read only (slot 1 when FRMW bit 0 is set).
    InvalidSlot,
    /// 07h: the image is invalid (or there is none to commit).
    InvalidImage,
    /// 0Bh: committed; activation requires a Conventional Reset.
    RequiresConventionalReset,
    /// 10h: committed; activation requires an NVM Subsystem Reset.
    RequiresNvmSubsystemReset,
    /// 11h: committed; activation requires a Controller Level Reset.
    RequiresControllerReset,
    /// 12h: activating now would exceed MTFA; commit again with a reset action.
    MaximumTimeViolation,
    /// 13h: the controller refuses to activate the image (e.g. an older revision).
    ActivationProhibited,
    /// 14h: a Firmware Image Download overlaps a range already downloaded.
    OverlappingRange,
    /// 1Eh: the boot partition is write protected.
    BootPartitionWriteProhibited,
}

impl FirmwareStatus {
    /// The typed status for `status`, when it is one of the firmware command specific ones.
    pub fn from_status(status: Status) -> Option<Self> {
        if status.sct() != StatusCodeType::CommandSpecific {
            return None;
        }
        use command_specific as cs;
        Some(match status.sc() {
            cs::INVALID_FIRMWARE_SLOT => FirmwareStatus::InvalidSlot,
            cs::INVALID_FIRMWARE_IMAGE => FirmwareStatus::InvalidImage,
            cs::FIRMWARE_ACTIVATION_REQUIRES_CONVENTIONAL_RESET => {
                FirmwareStatus::RequiresConventionalReset
            }
            cs::FIRMWARE_ACTIVATION_REQUIRES_NVM_SUBSYSTEM_RESET => {
                FirmwareStatus::RequiresNvmSubsystemReset
            }
            cs::FIRMWARE_ACTIVATION_REQUIRES_CONTROLLER_RESET => {
                FirmwareStatus::RequiresControllerReset
            }
            cs::FIRMWARE_ACTIVATION_REQUIRES_MAX_TIME_VIOLATION => {
                FirmwareStatus::MaximumTimeViolation
            }
            cs::FIRMWARE_ACTIVATION_PROHIBITED => FirmwareStatus::ActivationProhibited,
            cs::OVERLAPPING_RANGE => FirmwareStatus::OverlappingRange,
            cs::BOOT_PARTITION_WRITE_PROHIBITED => FirmwareStatus::BootPartitionWriteProhibited,
            _ => return None,
        })
    }

    /// The status code (SCT 1h).
    pub fn sc(self) -> u8 {
        use command_specific as cs;
        match self {
            FirmwareStatus::InvalidSlot => cs::INVALID_FIRMWARE_SLOT,
            FirmwareStatus::InvalidImage => cs::INVALID_FIRMWARE_IMAGE,
            FirmwareStatus::RequiresConventionalReset => {
                cs::FIRMWARE_ACTIVATION_REQUIRES_CONVENTIONAL_RESET
            }
            FirmwareStatus::RequiresNvmSubsystemReset => {
                cs::FIRMWARE_ACTIVATION_REQUIRES_NVM_SUBSYSTEM_RESET
            }
            FirmwareStatus::RequiresControllerReset => {
                cs::FIRMWARE_ACTIVATION_REQUIRES_CONTROLLER_RESET
            }
            FirmwareStatus::MaximumTimeViolation => {
                cs::FIRMWARE_ACTIVATION_REQUIRES_MAX_TIME_VIOLATION
            }
            FirmwareStatus::ActivationProhibited => cs::FIRMWARE_ACTIVATION_PROHIBITED,
            FirmwareStatus::OverlappingRange => cs::OVERLAPPING_RANGE,
            FirmwareStatus::BootPartitionWriteProhibited => cs::BOOT_PARTITION_WRITE_PROHIBITED,
        }
    }

    /// The status with this code (SCT 1h, Do Not Retry), as a controller completes it.
    pub fn status(self) -> Status {
        Status::new(StatusCodeType::CommandSpecific.raw(), self.sc(), true)
    }

    /// The reset the image needs, for the three statuses that mean "committed, not yet
    /// running" (0Bh, 10h, 11h).
    pub fn activation_reset(self) -> Option<ActivationReset> {
        match self {
            FirmwareStatus::RequiresConventionalReset => Some(ActivationReset::Conventional),
            FirmwareStatus::RequiresNvmSubsystemReset => Some(ActivationReset::NvmSubsystem),
            FirmwareStatus::RequiresControllerReset => Some(ActivationReset::ControllerLevel),
            _ => None,
        }
    }

    /// What to do about it.
    pub fn hint(self) -> &'static str {
        match self {
            FirmwareStatus::InvalidSlot => {
                "pick a slot from 1 to the Number of Firmware Slots in Identify Controller FRMW \
                 (slot 1 is read only when FRMW bit 0 is set; `nvme-admin fw-log` lists them)"
            }
            FirmwareStatus::InvalidImage => {
                "download the whole image first (fw-download), in order and without gaps, and \
                 check it is an image for this controller"
            }
            FirmwareStatus::RequiresConventionalReset
            | FirmwareStatus::RequiresNvmSubsystemReset
            | FirmwareStatus::RequiresControllerReset => {
                "the image is committed: reset as named to run it"
            }
            FirmwareStatus::MaximumTimeViolation => {
                "activating now would take longer than MTFA: commit again with action 1 or 2 \
                 and reset the controller"
            }
            FirmwareStatus::ActivationProhibited => {
                "the controller refuses this image (for instance an older revision)"
            }
            FirmwareStatus::OverlappingRange => {
                "a piece overlaps one already downloaded: start again from offset 0 with a \
                 fresh image"
            }
            FirmwareStatus::BootPartitionWriteProhibited => "the boot partition is write protected",
        }
    }
}

impl fmt::Display for FirmwareStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(command_specific::name(self.sc()).unwrap_or("Unknown"))
    }
}

/// Firmware Update Granularity (Identify Controller FWUG, byte 319).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Fwug {
    /// 0: the controller gives no information.
    NoInformation,
    /// FFh: no restriction beyond whole dwords.
    NoRestriction,
    /// Each piece's offset and size must be a multiple of this many bytes (FWUG * 4 KiB).
    Bytes(usize),
}

impl Fwug {
    /// From the byte.
    pub fn from_raw(fwug: u8) -> Self {
        match fwug {
            FWUG_NO_INFORMATION => Fwug::NoInformation,
            FWUG_NO_RESTRICTION => Fwug::NoRestriction,
            n => Fwug::Bytes(usize::from(n) * FWUG_UNIT_BYTES),
        }
    }

    /// The byte for a granularity of `bytes` (a multiple of 4 KiB up to 254 units; the
    /// emulator's side).
    pub fn raw(self) -> u8 {
        match self {
            Fwug::NoInformation => FWUG_NO_INFORMATION,
            Fwug::NoRestriction => FWUG_NO_RESTRICTION,
            Fwug::Bytes(b) => u8::try_from(b / FWUG_UNIT_BYTES)
                .unwrap_or(FWUG_NO_RESTRICTION - 1)
                .min(FWUG_NO_RESTRICTION - 1),
        }
    }

    /// The granularity in bytes, when the controller states one.
    pub fn bytes(self) -> Option<usize> {
        match self {
            Fwug::Bytes(b) => Some(b),
            _ => None,
        }
    }
}

/// Identify Controller FRMW (byte 260), decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Frmw {
    /// Number of firmware slots (1..=7; 0 from a pre-1.0 controller).
    pub slots: u8,
    /// Slot 1 is read only.
    pub slot1_read_only: bool,
    /// Commit Action 011b (activation without reset) is supported.
    pub activation_without_reset: bool,
}

impl Frmw {
    /// From the byte.
    pub fn from_raw(frmw: u8) -> Self {
        Frmw {
            slots: frmw >> FRMW_SLOTS_SHIFT & FRMW_SLOTS_MASK,
            slot1_read_only: frmw & FRMW_SLOT1_READ_ONLY != 0,
            activation_without_reset: frmw & FRMW_ACTIVATION_WITHOUT_RESET != 0,
        }
    }

    /// The byte.
    pub fn raw(self) -> u8 {
        let mut frmw = (self.slots & FRMW_SLOTS_MASK) << FRMW_SLOTS_SHIFT;
        if self.slot1_read_only {
            frmw |= FRMW_SLOT1_READ_ONLY;
        }
        if self.activation_without_reset {
            frmw |= FRMW_ACTIVATION_WITHOUT_RESET;
        }
        frmw
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_encode_their_fields() {
        let c = FirmwareCommit::new(3, CommitAction::ReplaceAndActivateNow);
        let sqe = firmware_commit(&c);
        assert_eq!((sqe.opcode(), sqe.cdw10), (0x10, 3 | 0b011 << 3));
        assert_eq!(FirmwareCommit::from_cdw10(sqe.cdw10), Some(c));
        let bp = FirmwareCommit {
            bpid: true,
            ..FirmwareCommit::new(0, CommitAction::ActivateBootPartition)
        };
        assert_eq!(bp.cdw10(), 1 << 31 | 0b111 << 3);
        assert_eq!(FirmwareCommit::from_cdw10(bp.cdw10()), Some(bp));
        assert_eq!(FirmwareCommit::from_cdw10(0b100 << 3), None);
        assert_eq!(FirmwareCommit::from_cdw10(0b101 << 3), None);

        // 8 KiB at byte offset 16 KiB: NUMD 2047 (0-based dwords), OFST 4096 dwords.
        let d = firmware_image_download(4096, 2048);
        assert_eq!((d.opcode(), d.cdw10, d.cdw11), (0x11, 2047, 4096));
        assert_eq!(image_download_range(&d), (16384, 8192));
    }

    #[test]
    fn actions_say_what_success_means() {
        assert_eq!(CommitAction::Replace.success(), CommitOutcome::Stored);
        assert_eq!(
            CommitAction::ActivateAtReset.success(),
            CommitOutcome::ActivatesAtReset
        );
        assert_eq!(
            CommitAction::ReplaceAndActivateNow.success(),
            CommitOutcome::Activated
        );
        assert!(CommitAction::ReplaceAndActivateAtReset.replaces());
        assert!(!CommitAction::ActivateAtReset.replaces());
        assert!(CommitAction::ReplaceBootPartition.is_boot_partition());
        for raw in 0..8 {
            if let Some(a) = CommitAction::from_raw(raw) {
                assert_eq!(a.raw(), raw);
            } else {
                assert!(raw == 4 || raw == 5);
            }
        }
    }

    #[test]
    fn statuses_are_typed() {
        let all = [
            (0x06, FirmwareStatus::InvalidSlot),
            (0x07, FirmwareStatus::InvalidImage),
            (0x0B, FirmwareStatus::RequiresConventionalReset),
            (0x10, FirmwareStatus::RequiresNvmSubsystemReset),
            (0x11, FirmwareStatus::RequiresControllerReset),
            (0x12, FirmwareStatus::MaximumTimeViolation),
            (0x13, FirmwareStatus::ActivationProhibited),
            (0x14, FirmwareStatus::OverlappingRange),
            (0x1E, FirmwareStatus::BootPartitionWriteProhibited),
        ];
        for (sc, kind) in all {
            let status = Status::new(1, sc, true);
            assert_eq!(FirmwareStatus::from_status(status), Some(kind));
            assert_eq!(kind.status(), status);
            assert!(!kind.to_string().is_empty());
        }
        // The same code as a generic status is not a firmware one; other codes are not either.
        assert_eq!(
            FirmwareStatus::from_status(Status::new(0, 0x06, true)),
            None
        );
        assert_eq!(
            FirmwareStatus::from_status(Status::new(1, 0x1D, true)),
            None
        );
        assert_eq!(
            FirmwareStatus::RequiresNvmSubsystemReset.activation_reset(),
            Some(ActivationReset::NvmSubsystem)
        );
        assert_eq!(FirmwareStatus::OverlappingRange.activation_reset(), None);
        assert_eq!(
            FirmwareStatus::InvalidImage.to_string(),
            "Invalid Firmware Image"
        );
    }

    #[test]
    fn identify_fields_decode() {
        // QEMU 7.2 reports FRMW 3h: one slot, read only.
        let q = Frmw::from_raw(0x03);
        assert_eq!(
            (q.slots, q.slot1_read_only, q.activation_without_reset),
            (1, true, false)
        );
        let f = Frmw {
            slots: 3,
            slot1_read_only: true,
            activation_without_reset: true,
        };
        assert_eq!(f.raw(), 0b1_0111);
        assert_eq!(Frmw::from_raw(f.raw()), f);
        assert_eq!(Fwug::from_raw(0), Fwug::NoInformation);
        assert_eq!(Fwug::from_raw(0xFF), Fwug::NoRestriction);
        assert_eq!(Fwug::from_raw(2), Fwug::Bytes(8192));
        assert_eq!(Fwug::from_raw(2).bytes(), Some(8192));
        assert_eq!(Fwug::NoRestriction.bytes(), None);
        assert_eq!(Fwug::Bytes(8192).raw(), 2);
        let id = crate::IdentifyController {
            frmw: 0x17,
            fwug: 1,
            ..crate::IdentifyController::default()
        };
        let b = id.to_bytes();
        assert_eq!((b[260], b[319]), (0x17, 1));
        let id = crate::IdentifyController::from_bytes(&b);
        assert_eq!(id.firmware_updates(), f);
        assert_eq!(id.firmware_update_granularity(), Fwug::Bytes(4096));
    }
}
