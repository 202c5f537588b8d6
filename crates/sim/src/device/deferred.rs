//! I/O commands whose execution the delay_execution fault defers
//! ([`Faults::delay_execution`](crate::faults::Faults::delay_execution)): executed when due,
//! in fetch order, or cancelled by Abort or Delete I/O SQ.
//!
//! INVARIANT: a deferred command leaves `Device::deferred` exactly once (executed, aborted or
//! cancelled), so it completes at most once.

use std::time::Instant;

use nvme_spec::status::{generic, Status, StatusCodeType};

use super::{Completion, Deferred, Device, Outcome};
use crate::dma::GuestView;
use crate::stats::bump;

impl Device {
    /// Executes the deferred commands that are due (in fetch order) and completes them.
    pub(super) fn run_deferred(&mut self, view: &GuestView<'_>) -> bool {
        if self.deferred.is_empty() {
            return false;
        }
        let now = Instant::now();
        let mut ran = false;
        let mut index = 0;
        while index < self.deferred.len() {
            if self.deferred[index].due > now {
                index += 1;
                continue;
            }
            let d = self.deferred.remove(index);
            let outcome = self.io_command(view, &d.sqe);
            // Counted once its effects are visible, so a test that waits for the count sees
            // the medium and host memory as the command left them.
            bump(&self.shared.counters.deferred_executed);
            ran = true;
            if let (true, Outcome::Complete { status, dw0 }) = (d.how.complete, outcome) {
                self.complete_deferred(view, &d, status, dw0);
            } else {
                log::debug!(
                    "sim: deferred cid {} executed, completion withheld",
                    d.sqe.cid()
                );
            }
        }
        ran
    }

    /// Posts the completion of a deferred command (SQ head as it is now).
    fn complete_deferred(&mut self, view: &GuestView<'_>, d: &Deferred, status: Status, dw0: u32) {
        if !status.is_success() {
            self.admin.record_error(d.sq_id, &d.sqe, status);
        }
        let sq_head = self.sqs[usize::from(d.sq_id)]
            .as_ref()
            .map_or(0, |sq| sq.head as u16);
        let completion = Completion {
            dw0,
            sq_head,
            sq_id: d.sq_id,
            cid: d.sqe.cid(),
            status,
        };
        self.complete(view, d.cqid, completion);
    }

    /// Cancels the deferred command `cid` of SQ `sq_id` if it is waiting and abortable,
    /// completing it with Command Abort Requested. True when it was cancelled.
    pub(crate) fn abort_deferred(&mut self, view: &GuestView<'_>, sq_id: u16, cid: u16) -> bool {
        let Some(index) = self
            .deferred
            .iter()
            .position(|d| d.sq_id == sq_id && d.sqe.cid() == cid && d.how.abortable)
        else {
            return false;
        };
        let d = self.deferred.remove(index);
        bump(&self.shared.counters.deferred_cancelled);
        log::debug!("sim: Abort cancelled deferred cid {cid} of SQ {sq_id}");
        let aborted = Status::new(
            StatusCodeType::Generic.raw(),
            generic::ABORT_REQUESTED,
            false,
        );
        self.complete_deferred(view, &d, aborted, 0);
        true
    }

    /// Cancels every deferred command of SQ `sq_id` (Delete I/O SQ): completions with Command
    /// Aborted due to SQ Deletion, for those whose completion is posted at all.
    pub(crate) fn cancel_deferred_of(&mut self, view: &GuestView<'_>, sq_id: u16) {
        let (cancelled, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut self.deferred)
            .into_iter()
            .partition(|d| d.sq_id == sq_id);
        self.deferred = kept;
        let status = Status::new(
            StatusCodeType::Generic.raw(),
            generic::ABORTED_SQ_DELETION,
            false,
        );
        for d in cancelled {
            bump(&self.shared.counters.deferred_cancelled);
            if d.how.complete {
                self.complete_deferred(view, &d, status, 0);
            }
        }
    }
}
