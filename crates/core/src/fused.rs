//! Fused Compare and Write (NVMe Base 2.0 §3.4.2 "Fused Operations"; NVM CS §3.3.1 Compare,
//! §3.3.6 Write): a Compare and a Write of the same blocks, submitted as two adjacent entries
//! of one submission queue (FUSE 01b, then 10b) behind one tail doorbell, which the
//! controller executes as one atomic unit: the blocks are written only when they equal the
//! compare data. A lock-free "test and set" of a block on the device.
//!
//! [`CompareAndWrite`] builds the pair, checks it against the controller and the namespace,
//! and turns the request's completion into a [`CompareAndWriteOutcome`]:
//!
//! - both succeed: [`CompareAndWriteOutcome::Written`];
//! - the compare finds different data: the controller completes the Compare with Compare
//!   Failure (Media and Data Integrity Errors, 85h) and the Write with Command Aborted due to
//!   Failed Fused Command (Generic 09h); nothing is written:
//!   [`CompareAndWriteOutcome::Miscompare`];
//! - any other status is an [`Error`], as for any command.
//!
//! The request's one data buffer holds the compare data first, then the write data, each
//! `blocks * block size` bytes. [`CompareAndWrite::check`] refuses, before anything reaches
//! the device ([`Error::CommandNotSupported`]): a controller without Identify Controller
//! FUSES bit 0 (QEMU 7.2's reports FUSES 0) or without Compare (ONCS bit 0); more blocks than
//! the Atomic Compare & Write Unit (ACWU + 1) as [`Error::InvalidRequest`].
//!
//! ```
//! use nvme_core::fused::CompareAndWrite;
//! use nvme_core::spec::Fuse;
//!
//! let [compare, write] = CompareAndWrite::new(10, 1).sqes(1);
//! assert_eq!((compare.fuse(), write.fuse()), (Fuse::First as u8, Fuse::Second as u8));
//! ```

use nvme_spec::command;
use nvme_spec::opcode::NvmOpcode;
use nvme_spec::queue::SubmissionEntry;
use nvme_spec::status::{generic, media, StatusCodeType};
use nvme_spec::{Fuse, Fuses, Oncs, Status};

use crate::command::{CommandContext, LbaRange};
use crate::error::{Error, Result};
use crate::namespace::Namespace;
use crate::uncorrectable::require_oncs;

/// The name of the fused operation in errors.
pub const COMPARE_AND_WRITE: &str = "Compare and Write";

/// A fused Compare and Write of `range`: compare data, then write data, in one buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use = "a built command does nothing until it is submitted"]
pub struct CompareAndWrite {
    /// The blocks compared and, when they match, written.
    pub range: LbaRange,
    /// Force Unit Access for the write.
    pub fua: bool,
}

impl CompareAndWrite {
    /// Compares `blocks` blocks at `lba` and writes them when they match.
    #[inline]
    pub const fn new(lba: u64, blocks: u32) -> Self {
        Self {
            range: LbaRange::new(lba, blocks),
            fua: false,
        }
    }

    /// With Force Unit Access for the write.
    #[inline]
    pub const fn fua(self) -> Self {
        Self { fua: true, ..self }
    }

    /// Bytes of each half of the buffer (compare data, write data) on `ns`.
    #[inline]
    pub fn half_bytes(&self, ns: &Namespace) -> usize {
        ns.blocks_to_bytes(u64::from(self.range.blocks)) as usize
    }

    /// Bytes of the request's buffer on `ns`: compare data then write data.
    #[inline]
    pub fn data_bytes(&self, ns: &Namespace) -> usize {
        2 * self.half_bytes(ns)
    }

    /// The two entries for namespace `nsid`, in submission order: the Compare (FUSE 01b) and
    /// the Write (FUSE 10b). Command ids and data pointers stay zero (the transport's).
    #[inline]
    pub fn sqes(&self, nsid: u32) -> [SubmissionEntry; 2] {
        let r = self.range;
        let mut compare = command::compare(nsid, r.lba, r.blocks);
        compare.set_fuse(Fuse::First);
        let mut write = command::write(nsid, r.lba, r.blocks, self.fua);
        write.set_fuse(Fuse::Second);
        [compare, write]
    }

    /// Everything checked before a transport reserves anything: the controller offers the
    /// fused operation and Compare, the blocks fit its atomic unit, the range lies in `ns`.
    pub fn check(&self, ns: &Namespace, ctx: &CommandContext<'_>) -> Result<()> {
        if !ctx
            .identify
            .fuses_flags()
            .contains(Fuses::COMPARE_AND_WRITE)
        {
            return Err(Error::CommandNotSupported {
                controller: ctx.controller.to_owned(),
                command: COMPARE_AND_WRITE,
                why: "Identify Controller FUSES bit 0 (Compare and Write) is clear",
            });
        }
        require_oncs(
            ctx,
            Oncs::COMPARE,
            COMPARE_AND_WRITE,
            "Identify Controller ONCS bit 0 (Compare) is clear",
        )?;
        let unit = u32::from(ctx.identify.acwu) + 1;
        if self.range.blocks > unit {
            return Err(Error::InvalidRequest(format!(
                "a {COMPARE_AND_WRITE} of {} blocks is more than the controller's atomic \
                 compare and write unit of {unit} blocks (Identify Controller ACWU + 1): use \
                 smaller ones",
                self.range.blocks
            )));
        }
        ns.check_range(self.range.lba, u64::from(self.range.blocks))
    }
}

/// How a fused Compare and Write that the controller executed ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CompareAndWriteOutcome {
    /// The blocks matched the compare data and now hold the write data.
    Written,
    /// The blocks differ from the compare data: nothing was written.
    Miscompare,
}

/// Whether `status` is one the fused pair's second command gets when the first failed
/// (Command Aborted due to Failed Fused Command): the request's status is then the first
/// command's, whatever order the two completions arrive in.
#[inline]
pub fn is_fused_abort(status: Status) -> bool {
    status.sct_raw() == StatusCodeType::Generic.raw() && status.sc() == generic::ABORTED_FUSED_FAIL
}

/// The outcome of a request's result: Compare Failure is [`CompareAndWriteOutcome::Miscompare`],
/// any other error stays an error.
pub fn outcome(result: std::result::Result<u32, Error>) -> Result<CompareAndWriteOutcome> {
    match result {
        Ok(_) => Ok(CompareAndWriteOutcome::Written),
        Err(e) => match e.status() {
            Some(s)
                if s.sct_raw() == StatusCodeType::MediaDataIntegrity.raw()
                    && s.sc() == media::COMPARE_FAILURE =>
            {
                Ok(CompareAndWriteOutcome::Miscompare)
            }
            _ => Err(e),
        },
    }
}

/// The opcode a fused request is reported under (its first command's).
pub const REPORTED_OPCODE: NvmOpcode = NvmOpcode::Compare;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::uncorrectable::tests::namespace;
    use nvme_spec::command::{nlb, slba};
    use nvme_spec::IdentifyController;

    #[test]
    fn the_pair_is_a_fused_compare_then_write() {
        let cmd = CompareAndWrite::new(0x1_0000_0007, 4).fua();
        let [c, w] = cmd.sqes(3);
        assert_eq!((c.opcode(), c.fuse()), (0x05, 0b01));
        assert_eq!((w.opcode(), w.fuse()), (0x01, 0b10));
        for e in [c, w] {
            assert_eq!((e.nsid, slba(&e), nlb(&e)), (3, 0x1_0000_0007, 4));
        }
        assert!(command::fua(&w) && !command::fua(&c));
        assert_eq!(cmd.data_bytes(&namespace()), 2 * 4 * 512);
    }

    #[test]
    fn it_is_refused_unless_offered_and_within_the_atomic_unit() {
        let ns = namespace();
        let cmd = CompareAndWrite::new(0, 2);
        let check = |id: &IdentifyController, cmd: CompareAndWrite| {
            cmd.check(
                &ns,
                &CommandContext {
                    controller: "test",
                    identify: id,
                },
            )
        };
        let mut id = IdentifyController {
            oncs: Oncs::COMPARE.bits(),
            acwu: 1,
            ..IdentifyController::default()
        };
        let e = check(&id, cmd).unwrap_err();
        assert!(
            matches!(&e, Error::CommandNotSupported { command: COMPARE_AND_WRITE, why, .. } if why.contains("FUSES")),
            "{e:?}"
        );
        id.fuses = Fuses::COMPARE_AND_WRITE.bits();
        assert!(check(&id, cmd).is_ok());
        let e = check(&id, CompareAndWrite::new(0, 3)).unwrap_err();
        assert!(
            matches!(&e, Error::InvalidRequest(m) if m.contains("ACWU")),
            "{e:?}"
        );
        let e = check(&id, CompareAndWrite::new(999, 2)).unwrap_err();
        assert!(matches!(e, Error::LbaOutOfRange { .. }), "{e:?}");
        id.oncs = 0;
        let e = check(&id, cmd).unwrap_err();
        assert!(
            matches!(&e, Error::CommandNotSupported { why, .. } if why.contains("ONCS bit 0")),
            "{e:?}"
        );
    }

    #[test]
    fn a_compare_failure_is_a_miscompare_and_other_errors_stay() {
        let miscompare = Status::new(
            StatusCodeType::MediaDataIntegrity.raw(),
            media::COMPARE_FAILURE,
            true,
        );
        let aborted = Status::new(
            StatusCodeType::Generic.raw(),
            generic::ABORTED_FUSED_FAIL,
            false,
        );
        assert!(is_fused_abort(aborted) && !is_fused_abort(miscompare));
        assert_eq!(outcome(Ok(0)).unwrap(), CompareAndWriteOutcome::Written);
        let e = Error::command("Compare", miscompare);
        assert_eq!(outcome(Err(e)).unwrap(), CompareAndWriteOutcome::Miscompare);
        let e = Error::command("Compare", aborted);
        assert!(outcome(Err(e)).is_err());
    }
}
