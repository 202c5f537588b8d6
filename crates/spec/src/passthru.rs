//! What an admin command passed through by a user transfers, from its opcode and command
//! dwords (NVMe Base 2.0 §5), so a safe passthrough can size the data buffer and refuse the
//! commands that would make the controller reach host memory or queues the driver owns.
//!
//! Only opcodes whose data length the spec fixes or encodes in the command are classified as
//! [`AdminPassthru::Transfer`]; everything else (vendor specific C0h-FFh, opcodes not listed
//! here) is [`AdminPassthru::Unknown`]: the caller cannot bound what the controller writes.

use crate::command::log_page_bytes;
use crate::opcode::{admin, feature, DataDirection};
use crate::queue::SubmissionEntry;

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
        // §5.8: PRP1/PRP2 are the Shadow Doorbell and EventIdx buffers the controller writes.
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
        // §5.23, §5.24, §5.19, §5.20: they change or erase namespaces the driver has open;
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
        // §5.22: it can take controller resources (queues, interrupts) away.
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
        // §5.10, §5.11: CDW10 NUMD, 0's based dwords.
        admin::DIRECTIVE_SEND | admin::DIRECTIVE_RECEIVE => transfer(dwords(sqe.cdw10)),
        // §5.25, §5.26: CDW11 Transfer Length in bytes.
        admin::SECURITY_SEND | admin::SECURITY_RECEIVE => transfer(u64::from(sqe.cdw11)),
        // §5.14: CDW11 MNDW, 0's based dwords.
        admin::GET_LBA_STATUS => transfer(dwords(sqe.cdw11)),
        // §5.9, §5.18: no data.
        admin::DEVICE_SELF_TEST | admin::KEEP_ALIVE => transfer(0),
        _ => AdminPassthru::Unknown,
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
