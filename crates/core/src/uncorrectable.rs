//! Write Uncorrectable (NVM CS §3.3.7, opcode 04h) as a typed command: the controller marks
//! the blocks invalid, so that a Read, Compare or Verify of them completes with Unrecovered
//! Read Error (Media and Data Integrity Errors, 81h) until they are written again (Write,
//! Write Zeroes, a deallocation, or the destination of a Copy). No data moves; a tester uses
//! it to see how a stack above handles a bad block.
//!
//! [`NvmCommand::check`] refuses, before anything reaches the device, a controller whose
//! Identify Controller ONCS bit 1 is clear ([`Error::CommandNotSupported`]): QEMU 7.2's
//! controller (ONCS 15Dh) is one.
//!
//! ```
//! use nvme_core::command::{LbaRange, NvmCommand, WriteUncorrectable};
//!
//! let cmd = WriteUncorrectable::new(64, 8);
//! assert_eq!(cmd.range(), Some(LbaRange::new(64, 8)));
//! ```

use nvme_spec::command;
use nvme_spec::opcode::NvmOpcode;
use nvme_spec::queue::SubmissionEntry;
use nvme_spec::Oncs;

use crate::command::{CommandContext, LbaRange, NvmCommand};
use crate::error::{Error, Result};
use crate::namespace::Namespace;

/// Write Uncorrectable (NVM CS §3.3.7) of `range`: no data buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use = "a built command does nothing until it is submitted"]
pub struct WriteUncorrectable {
    /// The blocks marked invalid.
    pub range: LbaRange,
}

impl WriteUncorrectable {
    /// Marks `blocks` blocks at `lba` invalid.
    #[inline(always)]
    pub const fn new(lba: u64, blocks: u32) -> Self {
        Self {
            range: LbaRange::new(lba, blocks),
        }
    }
}

/// Refuses `command` unless Identify Controller ONCS has `bit`; `why` names the field and bit.
pub(crate) fn require_oncs(
    ctx: &CommandContext<'_>,
    bit: Oncs,
    command: &'static str,
    why: &'static str,
) -> Result<()> {
    if ctx.identify.oncs_flags().contains(bit) {
        return Ok(());
    }
    Err(Error::CommandNotSupported {
        controller: ctx.controller.to_owned(),
        command,
        why,
    })
}

impl NvmCommand for WriteUncorrectable {
    #[inline(always)]
    fn opcode(&self) -> NvmOpcode {
        NvmOpcode::WriteUncorrectable
    }
    #[inline(always)]
    fn range(&self) -> Option<LbaRange> {
        Some(self.range)
    }
    #[inline(always)]
    fn with_range(self, range: LbaRange) -> Self {
        Self { range }
    }
    #[inline(always)]
    fn sqe(&self, nsid: u32) -> SubmissionEntry {
        command::write_uncorrectable(nsid, self.range.lba, self.range.blocks)
    }
    fn check(&self, _ns: &Namespace, ctx: &CommandContext<'_>, _data: Option<&[u8]>) -> Result<()> {
        require_oncs(
            ctx,
            Oncs::WRITE_UNCORRECTABLE,
            NvmOpcode::WriteUncorrectable.name(),
            "Identify Controller ONCS bit 1 (Write Uncorrectable) is clear",
        )
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use nvme_spec::command::{nlb, slba};
    use nvme_spec::opcode::DataDirection;
    use nvme_spec::{IdentifyController, IdentifyNamespace, LbaFormat};

    /// Namespace 1: 1000 blocks of 512 bytes, no metadata (also for `fused`'s tests).
    pub(crate) fn namespace() -> Namespace {
        let mut lbaf = [LbaFormat::default(); 64];
        lbaf[0] = LbaFormat::new(9, 0);
        let id = IdentifyNamespace {
            nsze: 1000,
            ncap: 1000,
            lbaf,
            ..IdentifyNamespace::default()
        };
        Namespace::from_identify(1, id, 1 << 20).unwrap()
    }

    #[test]
    fn the_command_is_its_range_without_data() {
        let cmd = WriteUncorrectable::new(0x1_0000_0005, 3);
        let sqe = cmd.sqe(2);
        assert_eq!(sqe.opcode(), 0x04);
        assert_eq!((sqe.nsid, slba(&sqe), nlb(&sqe)), (2, 0x1_0000_0005, 3));
        assert_eq!(cmd.direction(), DataDirection::None);
        let erased = crate::IoCommand::of(cmd);
        assert_eq!(erased.opcode(), NvmOpcode::WriteUncorrectable);
        let part = LbaRange::new(0x1_0000_0006, 2);
        assert_eq!(erased.with_range(part).sqe(2), cmd.with_range(part).sqe(2));
    }

    #[test]
    fn it_is_refused_unless_oncs_offers_it() {
        let ns = namespace();
        let mut id = IdentifyController {
            oncs: (Oncs::COMPARE | Oncs::COPY).bits(),
            ..IdentifyController::default()
        };
        let cmd = WriteUncorrectable::new(0, 1);
        let ctx = CommandContext {
            controller: "test",
            identify: &id,
        };
        let e = cmd.check(&ns, &ctx, None).unwrap_err();
        assert!(
            matches!(&e, Error::CommandNotSupported { command: "Write Uncorrectable", why, .. } if why.contains("ONCS bit 1")),
            "{e:?}"
        );
        id.oncs |= Oncs::WRITE_UNCORRECTABLE.bits();
        let ctx = CommandContext {
            controller: "test",
            identify: &id,
        };
        assert!(cmd.check(&ns, &ctx, None).is_ok());
    }
}
