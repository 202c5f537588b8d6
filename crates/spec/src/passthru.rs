//! What an admin command passed through by a user transfers, from its opcode and command
//! dwords (NVMe Base 2.0 §5), so a safe passthrough can size the data buffer and refuse the
//! commands that would make the controller reach host memory or queues the driver owns.
//!
//! Only opcodes whose data length the spec fixes or encodes in the command are classified as
//! [`AdminPassthru::Transfer`]; everything else (vendor specific C0h-FFh, opcodes not listed
//! here) is [`AdminPassthru::Unknown`]: the caller cannot bound what the controller writes.
//!
//! The I/O half, [`classify_io`], does the same for the NVM command set (NVM CS 1.0 §3) and
//! the zoned one (ZNS 1.1 §3.4), from the command dwords and the namespace's format
//! ([`IoFormat`]): reservation, vendor specific and unlisted opcodes are
//! [`IoPassthru::Unknown`], fused commands are refused.

use crate::command::{copy_control, dsm_ranges, log_page_bytes, nlb, COPY_FORMAT_0, COPY_FORMAT_1};
use crate::opcode::{admin, feature, nvm, DataDirection};
use crate::queue::{CopySourceRange, CopySourceRangeFormat1, DsmRange, SubmissionEntry};
use crate::zns::{ZoneSendAction, ACTION_MASK};

/// The largest data structure a Get or Set Features command moves (LBA Range Type, 4 KiB;
/// Base 2.0 §5.27.1.3, Figure 298); the others (Timestamp, APST, Host Behavior...) are smaller.
pub const FEATURE_DATA_MAX: u64 = 4096;

/// Bytes in a dword, the unit of NUMD and MNDW fields.
const DWORD: u64 = 4;

/// How a safe passthrough may send an admin command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AdminPassthru {
    /// The command moves at most `bytes` bytes in `direction` through its data pointer (and
    /// nothing through any other pointer).
    Transfer {
        /// Which way the data moves (opcode bits 1:0).
        direction: DataDirection,
        /// The most bytes the command can move.
        bytes: u64,
    },
    /// The command sets up controller-owned host memory or queues, or changes state the
    /// driver keeps: never through the safe passthrough. The text says why.
    Refused(&'static str),
    /// The driver cannot tell what the command transfers (vendor specific or unlisted).
    Unknown,
}

/// Opcode bits 1:0 give the data direction of admin commands too (Base 2.0 §5, Figure 138).
fn direction(opcode: u8) -> DataDirection {
    match opcode & 0b11 {
        0b00 => DataDirection::None,
        0b01 => DataDirection::ToDevice,
        0b10 => DataDirection::FromDevice,
        _ => DataDirection::Bidirectional,
    }
}

/// `(n + 1)` dwords in bytes, for 0's based dword counts.
fn dwords(n: u32) -> u64 {
    (u64::from(n) + 1) * DWORD
}

/// Classifies the admin command `sqe` for a safe passthrough (see [`AdminPassthru`]).
pub fn classify_admin(sqe: &SubmissionEntry) -> AdminPassthru {
    let op = sqe.opcode();
    let transfer = |bytes| AdminPassthru::Transfer {
        direction: direction(op),
        bytes,
    };
    match op {
        // §5.4-§5.7: PRP1 of Create I/O SQ/CQ is a queue the controller writes; deleting a
        // queue pulls it from under the driver's queue pairs.
        admin::CREATE_IO_SQ | admin::CREATE_IO_CQ | admin::DELETE_IO_SQ | admin::DELETE_IO_CQ => {
            AdminPassthru::Refused("it creates or deletes I/O queues, which the driver owns")
        }
        // §5.11: PRP1/PRP2 are the Shadow Doorbell and EventIdx buffers the controller writes.
        admin::DOORBELL_BUFFER_CONFIG => AdminPassthru::Refused(
            "Doorbell Buffer Config points the controller at shadow doorbell memory, which the driver owns",
        ),
        // §5.1: it could abort a command of the driver (an I/O or an Asynchronous Event
        // Request), whose tag the driver would then wait on.
        admin::ABORT => AdminPassthru::Refused("it may abort a command the driver issued"),
        // §5.2: the driver keeps the Asynchronous Event Requests outstanding and reaps them.
        admin::ASYNC_EVENT_REQUEST => {
            AdminPassthru::Refused("the driver owns the Asynchronous Event Requests")
        }
        // §5.27.1.10 (FID in CDW10 bits 7:0): EHM makes the controller use host memory at the addresses of the
        // Host Memory Descriptor List.
        admin::SET_FEATURES
            if sqe.cdw10 as u8 == feature::HOST_MEMORY_BUFFER =>
        {
            AdminPassthru::Refused(
                "Set Features Host Memory Buffer gives the controller host memory (the driver's typed HostMemory does)",
            )
        }
        // §5.14, §5.24, §5.20, §5.21: they change or erase namespaces the driver has open;
        // the typed commands (format, attach-ns/detach-ns) rescan afterwards.
        admin::FORMAT_NVM
        | admin::SANITIZE
        | admin::NAMESPACE_ATTACHMENT
        | admin::NAMESPACE_MANAGEMENT => AdminPassthru::Refused(
            "it changes namespaces the driver has open (use the typed format / attach-ns / detach-ns, which rescan)",
        ),
        // §5.12: activation may reset the controller under the driver.
        admin::FIRMWARE_COMMIT => {
            AdminPassthru::Refused("Firmware Commit may reset the controller under the driver")
        }
        // §5.28: it can take controller resources (queues, interrupts) away.
        admin::VIRTUALIZATION_MANAGEMENT => {
            AdminPassthru::Refused("Virtualization Management moves controller resources")
        }
        // §5.17: every Identify data structure is 4096 bytes.
        admin::IDENTIFY => transfer(crate::identify::IDENTIFY_DATA_SIZE as u64),
        // §5.16: NUMDU:NUMDL.
        admin::GET_LOG_PAGE => transfer(log_page_bytes(sqe) as u64),
        // §5.15, §5.27: at most the largest feature data structure.
        admin::GET_FEATURES | admin::SET_FEATURES => transfer(FEATURE_DATA_MAX),
        // §5.13: CDW10 NUMD, 0's based dwords.
        admin::FIRMWARE_IMAGE_DOWNLOAD => transfer(dwords(sqe.cdw10)),
        // §5.9, §5.10: CDW10 NUMD, 0's based dwords.
        admin::DIRECTIVE_SEND | admin::DIRECTIVE_RECEIVE => transfer(dwords(sqe.cdw10)),
        // §5.25, §5.26: CDW11 Transfer Length in bytes.
        admin::SECURITY_SEND | admin::SECURITY_RECEIVE => transfer(u64::from(sqe.cdw11)),
        // NVM CS 1.0 §4.2: CDW11 MNDW, 0's based dwords.
        admin::GET_LBA_STATUS => transfer(dwords(sqe.cdw11)),
        // §5.8, §5.18: no data.
        admin::DEVICE_SELF_TEST | admin::KEEP_ALIVE => transfer(0),
        _ => AdminPassthru::Unknown,
    }
}

/// What [`classify_io`] needs of the namespace a command goes to (its current LBA format,
/// NVM CS 1.0 §5.2, and for zoned namespaces the zone descriptor extension, ZNS 1.1 §3.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IoFormat {
    /// LBA data size in bytes.
    pub data_size: u32,
    /// Metadata bytes per logical block (0: none).
    pub metadata_size: u16,
    /// The metadata is transferred inline with each block's data (extended LBA, FLBAS bit 4);
    /// otherwise through the separate metadata pointer (MPTR).
    pub extended: bool,
    /// Bytes of a zone descriptor extension (ZDES x 64; 0: none or not zoned).
    pub zone_descriptor_extension: u32,
}

impl IoFormat {
    /// Bytes the data pointer moves for `blocks` blocks: data, and inline metadata when the
    /// format is extended.
    fn data_bytes(&self, blocks: u32) -> u64 {
        let per_block = u64::from(self.data_size)
            + if self.extended {
                u64::from(self.metadata_size)
            } else {
                0
            };
        u64::from(blocks) * per_block
    }

    /// Bytes the metadata pointer moves for `blocks` blocks (0 unless metadata is separate).
    /// Counted even under PRACT: the bound is never below what the controller may use.
    fn separate_metadata_bytes(&self, blocks: u32) -> u64 {
        if self.extended {
            0
        } else {
            u64::from(blocks) * u64::from(self.metadata_size)
        }
    }
}

/// Why [`classify_io`] refuses an I/O command whatever the buffers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoRefusal {
    /// FUSE (CDW0 bits 9:8) is not 00b: a fused pair must be submitted as one (the typed
    /// Compare and Write does; Base 2.0 §3.4.2).
    Fused,
}

impl IoRefusal {
    /// The reason, for error messages.
    pub const fn reason(self) -> &'static str {
        match self {
            IoRefusal::Fused => {
                "it is one half of a fused operation, which must be submitted as a pair (the typed Compare and Write does)"
            }
        }
    }
}

/// How a safe passthrough may send an I/O command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoPassthru {
    /// The command moves at most `bytes` bytes in `direction` through its data pointer and
    /// `metadata_bytes` through its metadata pointer (only on a namespace whose metadata is
    /// separate; a passthrough that provides no metadata buffer must refuse those).
    Transfer {
        /// Which way the data moves: opcode bits 1:0, except Zone Management Send, which
        /// moves data only to set a zone descriptor extension.
        direction: DataDirection,
        /// The most bytes the data pointer moves.
        bytes: u64,
        /// The most bytes the metadata pointer (MPTR) moves.
        metadata_bytes: u64,
    },
    /// Never through the safe passthrough (see [`IoRefusal`]).
    Refused(IoRefusal),
    /// The driver cannot tell what the command transfers: reservation commands, vendor
    /// specific (80h-FFh), a Copy descriptor format it does not know, unlisted opcodes.
    Unknown,
}

/// Classifies the I/O command `sqe` for a namespace of format `format` (see [`IoPassthru`]).
pub fn classify_io(sqe: &SubmissionEntry, format: &IoFormat) -> IoPassthru {
    if sqe.fuse() != 0 {
        return IoPassthru::Refused(IoRefusal::Fused);
    }
    let op = sqe.opcode();
    let transfer = |bytes, metadata_bytes| IoPassthru::Transfer {
        direction: direction(op),
        bytes,
        metadata_bytes,
    };
    match op {
        // NVM CS §3.3.4, §3.3.6, §3.3.1, ZNS §3.4.1: NLB (CDW12 15:0, 0's based) blocks of
        // data, and their metadata.
        nvm::READ | nvm::WRITE | nvm::COMPARE | nvm::ZONE_APPEND => {
            let blocks = nlb(sqe);
            transfer(
                format.data_bytes(blocks),
                format.separate_metadata_bytes(blocks),
            )
        }
        // Base §7.1, NVM CS §3.3.7, §3.3.8, §3.3.5: no data pointer.
        nvm::FLUSH | nvm::WRITE_UNCORRECTABLE | nvm::WRITE_ZEROES | nvm::VERIFY => transfer(0, 0),
        // NVM CS §3.3.3: NR + 1 ranges of 16 bytes (CDW10 7:0, 0's based).
        nvm::DATASET_MANAGEMENT => transfer(u64::from(dsm_ranges(sqe)) * DsmRange::SIZE as u64, 0),
        // NVM CS §3.3.2: NR + 1 source range entries of the descriptor format's size.
        nvm::COPY => {
            let control = copy_control(sqe);
            let entry = match control.format {
                COPY_FORMAT_0 => CopySourceRange::SIZE,
                COPY_FORMAT_1 => CopySourceRangeFormat1::SIZE,
                _ => return IoPassthru::Unknown,
            };
            transfer(u64::from(control.ranges) * entry as u64, 0)
        }
        // ZNS §3.4.2: CDW12 NUMD, 0's based dwords.
        nvm::ZONE_MGMT_RECV => transfer(dwords(sqe.cdw12), 0),
        // ZNS §3.4.3: only Set Zone Descriptor Extension moves data, one extension.
        nvm::ZONE_MGMT_SEND => {
            if sqe.cdw13 & ACTION_MASK == ZoneSendAction::SetDescriptorExtension as u32 {
                if format.zone_descriptor_extension == 0 {
                    return IoPassthru::Unknown;
                }
                transfer(u64::from(format.zone_descriptor_extension), 0)
            } else {
                IoPassthru::Transfer {
                    direction: DataDirection::None,
                    bytes: 0,
                    metadata_bytes: 0,
                }
            }
        }
        _ => IoPassthru::Unknown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command;
    use crate::command::Cns;

    #[test]
    fn identify_and_log_pages_are_sized_from_the_command() {
        let id = command::identify(Cns::Controller, 0);
        assert_eq!(
            classify_admin(&id),
            AdminPassthru::Transfer {
                direction: DataDirection::FromDevice,
                bytes: 4096
            }
        );
        let log = command::get_log_page(2, 0xFFFF_FFFF, 512);
        assert_eq!(
            classify_admin(&log),
            AdminPassthru::Transfer {
                direction: DataDirection::FromDevice,
                bytes: 512
            }
        );
    }

    #[test]
    fn queue_setup_and_host_memory_are_refused() {
        for op in [
            admin::CREATE_IO_SQ,
            admin::CREATE_IO_CQ,
            admin::DELETE_IO_SQ,
            admin::DELETE_IO_CQ,
            admin::DOORBELL_BUFFER_CONFIG,
            admin::ABORT,
            admin::ASYNC_EVENT_REQUEST,
        ] {
            assert!(matches!(
                classify_admin(&SubmissionEntry::new(op)),
                AdminPassthru::Refused(_)
            ));
        }
        let hmb = command::set_features(feature::HOST_MEMORY_BUFFER, 1);
        assert!(matches!(classify_admin(&hmb), AdminPassthru::Refused(_)));
        let wc = command::set_features(feature::VOLATILE_WRITE_CACHE, 1);
        assert!(matches!(
            classify_admin(&wc),
            AdminPassthru::Transfer { .. }
        ));
        assert_eq!(
            classify_admin(&SubmissionEntry::new(0xC0)),
            AdminPassthru::Unknown
        );
    }
}

#[cfg(test)]
mod io_tests {
    use super::*;
    use crate::command::{self, CopyControl};

    const PLAIN: IoFormat = IoFormat {
        data_size: 512,
        metadata_size: 0,
        extended: false,
        zone_descriptor_extension: 0,
    };

    fn io(op: u8) -> SubmissionEntry {
        SubmissionEntry::new(op)
    }

    fn moves(direction: DataDirection, bytes: u64, metadata_bytes: u64) -> IoPassthru {
        IoPassthru::Transfer {
            direction,
            bytes,
            metadata_bytes,
        }
    }

    #[test]
    fn block_data_commands_move_nlb_plus_one_blocks() {
        let read = command::read(1, 10, 8);
        assert_eq!(
            classify_io(&read, &PLAIN),
            moves(DataDirection::FromDevice, 8 * 512, 0)
        );
        let write = command::write(1, 0, 1, false);
        assert_eq!(
            classify_io(&write, &PLAIN),
            moves(DataDirection::ToDevice, 512, 0)
        );
        let compare = command::compare(1, 0, 4);
        assert_eq!(
            classify_io(&compare, &PLAIN),
            moves(DataDirection::ToDevice, 4 * 512, 0)
        );
        let mut append = io(nvm::ZONE_APPEND);
        append.cdw12 = 0xFFFF;
        let k4 = IoFormat {
            data_size: 4096,
            ..PLAIN
        };
        assert_eq!(
            classify_io(&append, &k4),
            moves(DataDirection::ToDevice, 65536 * 4096, 0)
        );
    }

    #[test]
    fn metadata_is_inline_or_separate_by_format() {
        let read = command::read(1, 0, 2);
        let extended = IoFormat {
            metadata_size: 8,
            extended: true,
            ..PLAIN
        };
        assert_eq!(
            classify_io(&read, &extended),
            moves(DataDirection::FromDevice, 2 * 520, 0)
        );
        let separate = IoFormat {
            metadata_size: 16,
            extended: false,
            ..PLAIN
        };
        assert_eq!(
            classify_io(&read, &separate),
            moves(DataDirection::FromDevice, 2 * 512, 2 * 16)
        );
        // No data pointer, no metadata pointer, whatever the format.
        let wz = command::write_zeroes(1, 0, 100, false, false);
        assert_eq!(
            classify_io(&wz, &separate),
            moves(DataDirection::None, 0, 0)
        );
    }

    #[test]
    fn commands_without_data() {
        for op in [
            nvm::FLUSH,
            nvm::WRITE_UNCORRECTABLE,
            nvm::WRITE_ZEROES,
            nvm::VERIFY,
        ] {
            let mut sqe = io(op);
            sqe.cdw12 = 0xFFFF;
            let IoPassthru::Transfer {
                bytes,
                metadata_bytes,
                ..
            } = classify_io(&sqe, &PLAIN)
            else {
                panic!("opcode {op:#x} is classified");
            };
            assert_eq!((bytes, metadata_bytes), (0, 0), "opcode {op:#x}");
        }
    }

    #[test]
    fn range_lists_are_sized_from_their_counts() {
        let dsm = command::dataset_management(1, 3, true);
        assert_eq!(
            classify_io(&dsm, &PLAIN),
            moves(DataDirection::ToDevice, 3 * 16, 0)
        );
        let mut copy = command::copy(1, 0, CopyControl::new(5));
        assert_eq!(
            classify_io(&copy, &PLAIN),
            moves(DataDirection::ToDevice, 5 * 32, 0)
        );
        copy.cdw12 = CopyControl {
            format: COPY_FORMAT_1,
            ..CopyControl::new(256)
        }
        .to_cdw12();
        assert_eq!(
            classify_io(&copy, &PLAIN),
            moves(DataDirection::ToDevice, 256 * 40, 0)
        );
        // A descriptor format this crate does not know the entry size of.
        copy.cdw12 |= 0xF << 8;
        assert_eq!(classify_io(&copy, &PLAIN), IoPassthru::Unknown);
    }

    #[test]
    fn zone_management() {
        let mut recv = io(nvm::ZONE_MGMT_RECV);
        recv.cdw12 = 1023;
        assert_eq!(
            classify_io(&recv, &PLAIN),
            moves(DataDirection::FromDevice, 4096, 0)
        );
        let mut reset = io(nvm::ZONE_MGMT_SEND);
        reset.cdw13 = ZoneSendAction::Reset as u32;
        assert_eq!(
            classify_io(&reset, &PLAIN),
            moves(DataDirection::None, 0, 0)
        );
        let mut ext = io(nvm::ZONE_MGMT_SEND);
        ext.cdw13 = ZoneSendAction::SetDescriptorExtension as u32;
        assert_eq!(classify_io(&ext, &PLAIN), IoPassthru::Unknown);
        let zoned = IoFormat {
            zone_descriptor_extension: 128,
            ..PLAIN
        };
        assert_eq!(
            classify_io(&ext, &zoned),
            moves(DataDirection::ToDevice, 128, 0)
        );
    }

    #[test]
    fn every_classified_opcode_is_an_nvm_opcode() {
        for op in crate::opcode::NvmOpcode::ALL {
            assert_eq!(crate::opcode::NvmOpcode::from_byte(op.byte()), Some(op));
            assert_ne!(
                classify_io(&io(op.byte()), &PLAIN),
                IoPassthru::Unknown,
                "{op:?}"
            );
        }
        assert_eq!(crate::opcode::NvmOpcode::from_byte(0x0D), None);
    }

    #[test]
    fn fused_reservation_and_vendor_commands_are_not_passed() {
        let mut first = command::read(1, 0, 1);
        first.set_fuse(crate::sgl::Fuse::First);
        assert_eq!(
            classify_io(&first, &PLAIN),
            IoPassthru::Refused(IoRefusal::Fused)
        );
        // Reservation Register/Report/Acquire/Release (NVM CS §3.2 via Base §7), vendor
        // specific, and an unassigned opcode.
        for op in [0x0D, 0x0E, 0x11, 0x15, 0x80, 0x81, 0xFF, 0x03] {
            assert_eq!(classify_io(&io(op), &PLAIN), IoPassthru::Unknown, "{op:#x}");
        }
    }
}
