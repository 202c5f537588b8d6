//! A safe admin passthrough: [`AdminCommand::passthru`] takes a user's submission entry and
//! data length, and builds an [`AdminCommand`] only when the driver knows what the command
//! transfers ([`nvme_spec::passthru::classify_admin`]).
//!
//! INVARIANT: the command id, the data pointer (PRPs/SGL, PSDT), the metadata pointer and the
//! fused bits of the user's entry are cleared here; the transport fills the data pointer to
//! describe the whole data buffer, which is at least the command's transfer. Commands that
//! set up controller-owned host memory or queues are refused, as are those whose transfer the
//! driver cannot bound (vendor specific C0h-FFh and unlisted opcodes): they stay behind the
//! transports' `unsafe fn` (e.g. `Controller::admin_raw`).

use nvme_spec::opcode::DataDirection;
use nvme_spec::passthru::{classify_admin, AdminPassthru};
use nvme_spec::sgl::{Fuse, Psdt};
use nvme_spec::SubmissionEntry;

use crate::admin::{AdminCommand, AdminData};

/// Why [`AdminCommand::passthru`] refused a command (nothing was sent).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PassthruError {
    /// The command would make the controller reach memory or queues the driver owns.
    #[error("admin opcode {opcode:#04x} is refused: {why}")]
    Refused {
        /// The opcode.
        opcode: u8,
        /// Why (the spec's reason).
        why: &'static str,
    },
    /// The driver cannot tell how much the command transfers.
    #[error(
        "admin opcode {opcode:#04x} is vendor specific or not one the safe passthrough knows \
         the transfer length of; it can only be sent through the unsafe raw interface \
         (Controller::admin_raw)"
    )]
    UnknownLength {
        /// The opcode.
        opcode: u8,
    },
    /// The data length is smaller than what the command, as encoded, transfers.
    #[error(
        "admin opcode {opcode:#04x} transfers {needed} bytes but the data length is {given}: \
         give a data length of at least {needed} (or fix the command's length field)"
    )]
    DataTooShort {
        /// The opcode.
        opcode: u8,
        /// Bytes the command transfers.
        needed: u64,
        /// Bytes given.
        given: usize,
    },
    /// Data to send was given for a command that reads from the device, or the reverse.
    #[error("admin opcode {opcode:#04x} moves data {direction:?}; {why}")]
    Direction {
        /// The opcode.
        opcode: u8,
        /// The opcode's direction (bits 1:0).
        direction: DataDirection,
        /// What did not match.
        why: &'static str,
    },
}

/// What goes with a passed-through command's data pointer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PassthruData {
    /// A buffer of this many bytes the controller may write (or nothing, 0).
    Receive(usize),
    /// These bytes, which the controller reads.
    Send(Vec<u8>),
}

impl AdminCommand {
    /// An admin command built from a user's submission entry (`sqe`: opcode, NSID, CDW2,
    /// CDW3, CDW10-CDW15 are kept; command id, data and metadata pointers, PSDT and fused
    /// bits are cleared) with `data`, refused unless the driver knows the command's transfer
    /// and the data is large enough for it (see [`PassthruError`]).
    ///
    /// For Get and Set Features the buffer is made [`nvme_spec::passthru::FEATURE_DATA_MAX`]
    /// bytes (the transfer depends on the feature); the reply's data is then that long.
    pub fn passthru(mut sqe: SubmissionEntry, data: PassthruData) -> Result<Self, PassthruError> {
        let opcode = sqe.opcode();
        let (direction, bytes) = match classify_admin(&sqe) {
            AdminPassthru::Refused(why) => return Err(PassthruError::Refused { opcode, why }),
            AdminPassthru::Unknown => return Err(PassthruError::UnknownLength { opcode }),
            AdminPassthru::Transfer { direction, bytes } => (direction, bytes),
        };
        sqe.set_cid(0);
        sqe.set_fuse(Fuse::Normal);
        sqe.set_psdt(Psdt::Prp);
        sqe.mptr = 0;
        sqe.prp1 = 0;
        sqe.prp2 = 0;
        let padded = matches!(
            opcode,
            nvme_spec::opcode::admin::GET_FEATURES | nvme_spec::opcode::admin::SET_FEATURES
        );
        let given = match &data {
            PassthruData::Receive(n) => *n,
            PassthruData::Send(b) => b.len(),
        };
        if !padded && (given as u64) < bytes {
            return Err(PassthruError::DataTooShort {
                opcode,
                needed: bytes,
                given,
            });
        }
        let len = if padded {
            usize::try_from(bytes).unwrap_or(usize::MAX).max(given)
        } else {
            given
        };
        let data = match (direction, data) {
            (DataDirection::None, PassthruData::Send(b)) if !b.is_empty() => {
                return Err(PassthruError::Direction {
                    opcode,
                    direction,
                    why: "it moves no data: give no input",
                })
            }
            (DataDirection::None, _) => AdminData::None,
            (DataDirection::FromDevice, PassthruData::Send(b)) if !b.is_empty() => {
                return Err(PassthruError::Direction {
                    opcode,
                    direction,
                    why: "it reads from the controller: give no input data",
                })
            }
            (DataDirection::FromDevice, _) => AdminData::FromDevice(len),
            (DataDirection::ToDevice, PassthruData::Send(mut b)) => {
                b.resize(len, 0);
                AdminData::ToDevice(b)
            }
            (DataDirection::ToDevice, PassthruData::Receive(_)) => {
                AdminData::ToDevice(vec![0; len])
            }
            (DataDirection::Bidirectional, _) => {
                return Err(PassthruError::Direction {
                    opcode,
                    direction,
                    why: "bidirectional admin commands are not supported",
                })
            }
        };
        Ok(AdminCommand::from_parts(sqe, data))
    }
}
