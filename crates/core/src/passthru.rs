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
//!
//! [`IoPassthruCommand`] is the I/O half: a user's NVM or ZNS entry classified for a
//! namespace ([`nvme_spec::passthru::classify_io`]), submitted like any typed command
//! ([`IoQueue::submit`](crate::IoQueue::submit) / `execute`). The same fields are cleared
//! (`clear_driver_fields`), the NSID is the namespace's, and the transport describes only
//! the classified transfer with the data pointer (it checks the buffer holds it). Commands
//! whose metadata goes through MPTR (a namespace with separate metadata) are refused: this
//! passthrough carries no metadata buffer. The unsafe raw path is `QueuePair::submit_raw`.

use nvme_spec::opcode::{DataDirection, NvmOpcode};
use nvme_spec::passthru::{
    classify_admin, classify_io, AdminPassthru, IoFormat, IoPassthru, IoRefusal,
};
use nvme_spec::sgl::{Fuse, Psdt};
use nvme_spec::SubmissionEntry;

use crate::admin::{AdminCommand, AdminData};
use crate::command::{CommandContext, LbaRange, NvmCommand};
use crate::error::{Error, Result};
use crate::namespace::Namespace;
use crate::protection::MetadataLayout;

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
        "{queue} opcode {opcode:#04x} transfers {needed} bytes but the data length is {given}: \
         give a data length of at least {needed} (or fix the command's length field)"
    )]
    DataTooShort {
        /// Which queue the command is for.
        queue: PassthruQueue,
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
    /// An I/O command the safe passthrough never sends.
    #[error("I/O opcode {opcode:#04x} is refused: {}", reason.reason())]
    IoRefused {
        /// The opcode.
        opcode: u8,
        /// Why.
        reason: IoRefusal,
    },
    /// An I/O command whose transfer the driver cannot bound.
    #[error(
        "I/O opcode {opcode:#04x} is a reservation, vendor specific or other command the safe \
         passthrough does not know the transfer length of (or a Copy descriptor format / zone \
         action it cannot size on this namespace); it can only be sent through the unsafe raw \
         interface (QueuePair::submit_raw)"
    )]
    IoUnknownLength {
        /// The opcode.
        opcode: u8,
    },
    /// The command would move metadata through MPTR (the namespace keeps metadata in a
    /// separate buffer), which this passthrough does not carry.
    #[error(
        "I/O opcode {opcode:#04x} on namespace {nsid} moves {bytes} bytes of separate \
         metadata (MPTR), which the passthrough does not carry: use the typed Protected \
         commands (IoQueue::submit_with_metadata), or a namespace formatted without metadata \
         or with extended LBAs"
    )]
    SeparateMetadata {
        /// The opcode.
        opcode: u8,
        /// The namespace.
        nsid: u32,
        /// Metadata bytes the command would move.
        bytes: u64,
    },
}

/// Which queue a passed-through command is for (in [`PassthruError`]'s messages).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PassthruQueue {
    /// The admin queue ([`AdminCommand::passthru`]).
    Admin,
    /// An I/O queue ([`IoPassthruCommand::new`]).
    Io,
}

impl std::fmt::Display for PassthruQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PassthruQueue::Admin => "admin",
            PassthruQueue::Io => "I/O",
        })
    }
}

/// Clears what the driver fills and the user must not choose in a passed-through entry: the
/// command id, the fused bits, PSDT and both pointers (the transport describes its own
/// buffer). One place for both halves of the passthrough.
fn clear_driver_fields(sqe: &mut SubmissionEntry) {
    sqe.set_cid(0);
    sqe.set_fuse(Fuse::Normal);
    sqe.set_psdt(Psdt::Prp);
    sqe.mptr = 0;
    sqe.prp1 = 0;
    sqe.prp2 = 0;
}

/// The refusal of `given` bytes for a command that moves `needed`, or nothing.
fn check_length(
    queue: PassthruQueue,
    opcode: u8,
    needed: u64,
    given: usize,
) -> std::result::Result<(), PassthruError> {
    if (given as u64) < needed {
        return Err(PassthruError::DataTooShort {
            queue,
            opcode,
            needed,
            given,
        });
    }
    Ok(())
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
        clear_driver_fields(&mut sqe);
        let padded = matches!(
            opcode,
            nvme_spec::opcode::admin::GET_FEATURES | nvme_spec::opcode::admin::SET_FEATURES
        );
        let given = match &data {
            PassthruData::Receive(n) => *n,
            PassthruData::Send(b) => b.len(),
        };
        if !padded {
            check_length(PassthruQueue::Admin, opcode, bytes, given)?;
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

/// The format [`classify_io`] sizes a command by: `ns`'s current LBA format and zones.
fn io_format(ns: &Namespace) -> IoFormat {
    let format = ns.format();
    IoFormat {
        data_size: format.block_size(),
        metadata_size: format.metadata_size(),
        extended: format.layout() == MetadataLayout::Extended,
        zone_descriptor_extension: ns.zoned().map_or(0, |z| {
            u32::try_from(z.descriptor_extension_bytes).unwrap_or(u32::MAX)
        }),
    }
}

/// What the classification of `sqe` on `ns` lets through: direction and data bytes.
fn classify_for(
    sqe: &SubmissionEntry,
    ns: &Namespace,
) -> std::result::Result<(DataDirection, u64), PassthruError> {
    let opcode = sqe.opcode();
    match classify_io(sqe, &io_format(ns)) {
        IoPassthru::Refused(reason) => Err(PassthruError::IoRefused { opcode, reason }),
        IoPassthru::Unknown => Err(PassthruError::IoUnknownLength { opcode }),
        IoPassthru::Transfer {
            metadata_bytes: bytes @ 1..,
            ..
        } => Err(PassthruError::SeparateMetadata {
            opcode,
            nsid: ns.nsid(),
            bytes,
        }),
        IoPassthru::Transfer {
            direction, bytes, ..
        } => Ok((direction, bytes)),
    }
}

/// An NVM or ZNS I/O command built from a user's submission entry, submitted like the typed
/// commands (`IoQueue::submit(ns, cmd, buf, ..)`, a buffer when it moves data, none
/// otherwise). Never split: above one command's transfer it is refused.
///
/// INVARIANT: `bytes` is what [`classify_io`] gives for `sqe` on namespace `nsid` with the
/// format it had at [`IoPassthruCommand::new`]; [`NvmCommand::check`] classifies again on the
/// namespace it is submitted to and refuses any difference, so the data pointer, which the
/// transport sizes from [`NvmCommand::data_bytes`], always covers the whole transfer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use = "a built command does nothing until it is submitted"]
pub struct IoPassthruCommand {
    sqe: SubmissionEntry,
    opcode: NvmOpcode,
    direction: DataDirection,
    bytes: usize,
    nsid: u32,
}

impl IoPassthruCommand {
    /// The I/O command `sqe` for namespace `ns` (opcode, CDW2, CDW3, CDW10-CDW15 are kept;
    /// the NSID becomes `ns`'s; command id, data and metadata pointers, PSDT and fused bits
    /// are cleared), refused unless the driver knows what it transfers on `ns` and
    /// `data_len`, the length of the buffer that will go with it, holds that (see
    /// [`PassthruError`]).
    pub fn new(
        mut sqe: SubmissionEntry,
        ns: &Namespace,
        data_len: usize,
    ) -> std::result::Result<Self, PassthruError> {
        let opcode = sqe.opcode();
        // Fused bits are refused by the classification, so read them before clearing.
        let (direction, bytes) = classify_for(&sqe, ns)?;
        // Every classified opcode is an `NvmOpcode`, none bidirectional (opcode bits 11b).
        let nvm = NvmOpcode::from_byte(opcode)
            .filter(|_| direction != DataDirection::Bidirectional)
            .ok_or(PassthruError::IoUnknownLength { opcode })?;
        check_length(PassthruQueue::Io, opcode, bytes, data_len)?;
        clear_driver_fields(&mut sqe);
        sqe.nsid = ns.nsid();
        Ok(Self {
            sqe,
            opcode: nvm,
            direction,
            // `check_length` bounded it by a `usize`.
            bytes: bytes as usize,
            nsid: ns.nsid(),
        })
    }

    /// The entry as it is sent (command id and data pointer still zero).
    pub fn entry(&self) -> &SubmissionEntry {
        &self.sqe
    }

    /// Bytes the command moves through its data pointer (0: no data, submit no buffer).
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

impl NvmCommand for IoPassthruCommand {
    fn opcode(&self) -> NvmOpcode {
        self.opcode
    }

    /// The blocks of the commands with the common LBA layout, checked against the namespace
    /// whatever its metadata (the classification sized the data by the format).
    fn range(&self) -> Option<LbaRange> {
        match self.opcode {
            NvmOpcode::Read
            | NvmOpcode::Write
            | NvmOpcode::Compare
            | NvmOpcode::WriteUncorrectable
            | NvmOpcode::WriteZeroes
            | NvmOpcode::Verify
            | NvmOpcode::ZoneAppend => Some(LbaRange::new(
                nvme_spec::command::slba(&self.sqe),
                nvme_spec::command::nlb(&self.sqe),
            )),
            _ => None,
        }
    }

    fn with_range(self, _range: LbaRange) -> Self {
        self
    }

    fn sqe(&self, nsid: u32) -> SubmissionEntry {
        SubmissionEntry { nsid, ..self.sqe }
    }

    fn direction(&self) -> DataDirection {
        self.direction
    }

    fn data_bytes(&self, _ns: &Namespace) -> usize {
        self.bytes
    }

    fn splittable(&self) -> bool {
        false
    }

    fn check_range(&self, ns: &Namespace) -> Result<()> {
        match self.range() {
            Some(r) => ns.check_blocks(r.lba, u64::from(r.blocks)),
            None => ns.check_current(),
        }
    }

    fn check(&self, ns: &Namespace, _ctx: &CommandContext<'_>, _data: Option<&[u8]>) -> Result<()> {
        if ns.nsid() != self.nsid {
            return Err(Error::InvalidRequest(format!(
                "the passthrough command was built for namespace {} but submitted on namespace \
                 {}: build it with IoPassthruCommand::new for the namespace it goes to",
                self.nsid,
                ns.nsid()
            )));
        }
        match classify_for(&self.sqe, ns) {
            Ok((direction, bytes)) if direction == self.direction && bytes == self.bytes as u64 => {
                Ok(())
            }
            Ok(_) => Err(Error::InvalidRequest(format!(
                "namespace {} changed format since the passthrough command was built: build it \
                 again with IoPassthruCommand::new",
                ns.nsid()
            ))),
            Err(e) => Err(Error::InvalidRequest(e.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvme_spec::command;
    use nvme_spec::opcode::nvm;
    use nvme_spec::{IdentifyNamespace, LbaFormat};

    /// Namespace `nsid` of 100 blocks of 512 bytes with `ms` bytes of metadata, inline when
    /// `extended`.
    fn namespace(nsid: u32, ms: u16, extended: bool) -> Namespace {
        let mut lbaf = [LbaFormat::default(); 64];
        lbaf[0] = LbaFormat {
            ms,
            lbads: 9,
            rp: 0,
        };
        let data = IdentifyNamespace {
            nsze: 100,
            ncap: 100,
            lbaf,
            flbas: if extended {
                IdentifyNamespace::FLBAS_EXTENDED_BIT
            } else {
                0
            },
            ..IdentifyNamespace::default()
        };
        Namespace::from_identify(nsid, data, 1 << 20).expect("valid namespace")
    }

    #[test]
    fn a_read_is_sized_and_its_driver_fields_cleared() {
        let ns = namespace(3, 0, false);
        let mut sqe = command::read(99, 4, 2);
        sqe.set_cid(9);
        sqe.prp1 = 0xdead_0000;
        sqe.prp2 = 0xbeef_0000;
        sqe.mptr = 0x1234_0000;
        sqe.set_psdt(Psdt::SglMptrSgl);
        let cmd = IoPassthruCommand::new(sqe, &ns, 1024).expect("a read is passed through");
        let out = cmd.sqe(ns.nsid());
        assert_eq!(
            (
                out.cid(),
                out.prp1,
                out.prp2,
                out.mptr,
                out.psdt(),
                out.nsid
            ),
            (0, 0, 0, 0, 0, 3)
        );
        assert_eq!((out.cdw10, out.cdw12), (4, 1));
        assert_eq!(cmd.data_bytes(&ns), 1024);
        assert_eq!(cmd.direction(), DataDirection::FromDevice);
        assert_eq!(cmd.range(), Some(LbaRange::new(4, 2)));
        assert!(!cmd.splittable());
    }

    #[test]
    fn a_buffer_one_byte_short_is_refused() {
        let ns = namespace(1, 0, false);
        let err = IoPassthruCommand::new(command::read(1, 0, 8), &ns, 8 * 512 - 1)
            .expect_err("one byte short");
        assert_eq!(
            err,
            PassthruError::DataTooShort {
                queue: PassthruQueue::Io,
                opcode: nvm::READ,
                needed: 4096,
                given: 4095
            }
        );
        assert!(err.to_string().starts_with("I/O opcode 0x02"), "{err}");
        assert!(err.to_string().contains("at least 4096"), "{err}");
    }

    #[test]
    fn extended_metadata_is_counted_and_separate_metadata_refused() {
        let extended = namespace(1, 8, true);
        let read = command::read(1, 0, 2);
        let cmd = IoPassthruCommand::new(read, &extended, 2 * 520).expect("inline metadata");
        assert_eq!(cmd.bytes(), 2 * 520);
        assert!(matches!(
            IoPassthruCommand::new(read, &extended, 2 * 512),
            Err(PassthruError::DataTooShort { needed: 1040, .. })
        ));
        let separate = namespace(1, 8, false);
        assert_eq!(
            IoPassthruCommand::new(read, &separate, 1 << 20).expect_err("MPTR"),
            PassthruError::SeparateMetadata {
                opcode: nvm::READ,
                nsid: 1,
                bytes: 16
            }
        );
        // No data, no metadata: Write Zeroes goes on either.
        let wz = command::write_zeroes(1, 0, 4, false, false);
        assert_eq!(
            IoPassthruCommand::new(wz, &separate, 0)
                .expect("no data")
                .bytes(),
            0
        );
    }

    #[test]
    fn fused_and_unknown_opcodes_are_refused() {
        let ns = namespace(1, 0, false);
        let mut fused = command::compare(1, 0, 1);
        fused.set_fuse(Fuse::First);
        assert_eq!(
            IoPassthruCommand::new(fused, &ns, 512).expect_err("fused"),
            PassthruError::IoRefused {
                opcode: nvm::COMPARE,
                reason: IoRefusal::Fused
            }
        );
        for op in [0x0D, 0x81] {
            let err = IoPassthruCommand::new(SubmissionEntry::new(op), &ns, 4096)
                .expect_err("reservation / vendor");
            assert_eq!(err, PassthruError::IoUnknownLength { opcode: op });
            assert!(err.to_string().contains("submit_raw"), "{err}");
        }
    }

    #[test]
    fn submission_on_another_or_reformatted_namespace_is_refused() {
        let ns = namespace(1, 0, false);
        let cmd = IoPassthruCommand::new(command::read(1, 0, 1), &ns, 512).expect("read");
        let ident = nvme_spec::IdentifyController::default();
        let ctx = CommandContext {
            controller: "test",
            identify: &ident,
        };
        assert!(cmd.check(&ns, &ctx, None).is_ok());
        assert!(matches!(
            cmd.check(&namespace(2, 0, false), &ctx, None),
            Err(Error::InvalidRequest(_))
        ));
        assert!(matches!(
            cmd.check(&namespace(1, 8, true), &ctx, None),
            Err(Error::InvalidRequest(_))
        ));
    }
}
