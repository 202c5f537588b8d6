//! Fused Compare and Write (NVMe Base 2.0 §3.4.2), when `SimConfig::compare_and_write`
//! offers it (Identify Controller FUSES bit 0, ACWU): a Compare with FUSE 01b and the Write
//! with FUSE 10b in the next entry of the same submission queue run as one unit. The device
//! thread executes commands one at a time, so nothing else touches the blocks between the
//! two.
//!
//! Outcomes, in the specification's terms:
//! - the Compare matches: the Write runs; each completes with its own status;
//! - the Compare fails (Compare Failure, or any other error): the Write is not executed and
//!   completes with Command Aborted due to Failed Fused Command;
//! - the pair is malformed (not Compare then Write, different namespaces or blocks, more
//!   blocks than ACWU + 1): the Compare completes with Invalid Field in Command and the
//!   Write is aborted as above;
//! - a first entry whose second is not the next entry (or is not yet there), or a second
//!   without a first: Command Aborted due to Missing Fused Command.

use nvme_spec::command::{nlb, slba};
use nvme_spec::opcode::nvm;
use nvme_spec::queue::{SubmissionEntry, SQE_SIZE};
use nvme_spec::status::generic;
use nvme_spec::Fuse;

use super::{Device, Outcome};
use crate::config::SIM_ACWU_BLOCKS;
use crate::dma::GuestView;
use crate::prp::generic_status;

/// An outcome with the generic status `sc`.
fn generic(sc: u8) -> Outcome {
    Outcome::status(generic_status(sc))
}

/// The entry as an unfused command (FUSE 00b), for the ordinary execution path.
fn unfused(sqe: &SubmissionEntry) -> SubmissionEntry {
    let mut e = *sqe;
    e.set_fuse(Fuse::Normal);
    e
}

impl Device {
    /// Whether `sqe` opens a fused pair this controller executes.
    pub(super) fn opens_fused_pair(&self, sqe: &SubmissionEntry) -> bool {
        self.shared.config.compare_and_write && sqe.fuse() == Fuse::First as u8
    }

    /// The status of a fused entry met outside a pair: Missing Fused Command where fused
    /// operations are offered, Invalid Field in Command where they are not (FUSES 0).
    pub(super) fn lone_fused_status(&self) -> u8 {
        if self.shared.config.compare_and_write {
            generic::ABORTED_FUSED_MISSING
        } else {
            generic::INVALID_FIELD
        }
    }

    /// Takes the next entry of SQ `qid` when it is the second of a fused pair: the entry and
    /// the SQ head after it. Anything else stays in the ring for the next fetch.
    pub(super) fn fetch_fused_second(
        &mut self,
        view: &GuestView<'_>,
        qid: usize,
    ) -> Option<(SubmissionEntry, u16)> {
        let sq = self.sqs[qid].as_mut()?;
        if sq.head == sq.tail {
            return None;
        }
        let addr = sq.base + u64::from(sq.head) * SQE_SIZE as u64;
        let dwords = view.read_dwords::<{ SQE_SIZE / 4 }>(addr).ok()?;
        let sqe = super::queues::parse_sqe(&dwords);
        if sqe.fuse() != Fuse::Second as u8 {
            return None;
        }
        sq.head = (sq.head + 1) % sq.size;
        Some((sqe, sq.head as u16))
    }

    /// Executes a fused pair: the outcomes of the first entry and, when there is one, of the
    /// second.
    pub(super) fn fused_pair(
        &mut self,
        view: &GuestView<'_>,
        first: &SubmissionEntry,
        second: Option<&SubmissionEntry>,
    ) -> (Outcome, Option<Outcome>) {
        let Some(second) = second else {
            return (generic(generic::ABORTED_FUSED_MISSING), None);
        };
        let same_blocks =
            first.nsid == second.nsid && slba(first) == slba(second) && nlb(first) == nlb(second);
        let well_formed = first.opcode() == nvm::COMPARE
            && second.opcode() == nvm::WRITE
            && same_blocks
            && nlb(first) <= u32::from(SIM_ACWU_BLOCKS);
        if !well_formed {
            log::debug!(
                "sim: malformed fused pair (cid {}, {})",
                first.cid(),
                second.cid()
            );
            return (
                generic(generic::INVALID_FIELD),
                Some(generic(generic::ABORTED_FUSED_FAIL)),
            );
        }
        let compared = self.io_command(view, &unfused(first));
        let succeeded = matches!(compared, Outcome::Complete { status, .. } if status.is_success());
        if !succeeded {
            return (compared, Some(generic(generic::ABORTED_FUSED_FAIL)));
        }
        let written = self.io_command(view, &unfused(second));
        (compared, Some(written))
    }
}
