//! The controller's state word changed (failed, resetting, or a new reset generation):
//! submissions learn why they must fail, and after a reset the pair re-creates its queues and
//! fails (or, with `resubmit_after_reset`, resubmits) what was in flight.
//!
//! INVARIANT: recovery runs only once the reset disabled the controller (CSTS.RDY read 0),
//! so no command of the old generation can still touch the rings, slot pages or buffers it
//! frees or reuses.

use std::time::Instant;

use nvme_core::{Error, Result};
use nvme_pool::Tag;
use nvme_spec::command;

use super::{Completion, QueuePair};
use crate::controller::{STATE_FAILED, STATE_RESETTING};

impl QueuePair {
    /// The controller's state word differs from this pair's snapshot: says why submissions
    /// must fail, or re-creates the queues after a reset and carries on.
    #[cold]
    pub(super) fn sync_state(&mut self) -> Result<()> {
        let state = self.ctrl.state();
        if state == self.ctrl_state {
            return Ok(());
        }
        if state & STATE_FAILED != 0 {
            if self.ctrl.is_removed() {
                return Err(Error::Removed {
                    controller: self.ctrl.name.clone(),
                    why: "its registers read all ones",
                });
            }
            return Err(Error::Failed {
                controller: self.ctrl.name.clone(),
            });
        }
        if state & STATE_RESETTING != 0 {
            return Err(Error::Resetting {
                controller: self.ctrl.name.clone(),
            });
        }
        self.recover(state)
    }

    /// After a controller reset (new generation in `state`): fails every request that was in
    /// flight with [`Error::Reset`] (into `deferred`, or `sync_done` for a synchronous
    /// caller), or with `resubmit_after_reset` keeps those not yet reported for resubmission;
    /// releases retired slots, empties the rings, re-creates both queues and submits the kept
    /// commands again.
    ///
    /// The reset disabled the controller before it could get here (CSTS.RDY read 0), so no
    /// command of the old generation can still touch the rings, slot pages or buffers.
    #[cold]
    fn recover(&mut self, state: u64) -> Result<()> {
        let live: Vec<Tag> = self.tags.iter_in_use().collect();
        let resubmit = self.saved.is_some();
        // Commands to submit again: awaiting commands of groups not yet reported.
        let mut again = Vec::new();
        let mut heads = Vec::with_capacity(live.len());
        for &tag in &live {
            let slot = self.tags.get(tag);
            let head = slot.head;
            // A fused pair is never resubmitted (see `fused`): its request fails instead.
            let fused = self
                .saved
                .as_deref()
                .is_some_and(|saved| saved[head.index()].fuse() != 0);
            if resubmit && !fused && !self.tags.get(head).reported {
                if slot.awaiting {
                    again.push(tag);
                }
                continue;
            }
            if head == tag {
                heads.push(tag);
            } else {
                self.tags.free(tag);
            }
        }
        let mut failed = 0;
        for head in heads {
            let slot = self.tags.get_mut(head);
            let buffer = slot.buffer.take();
            let pieces = slot.pieces.take();
            let (reported, sync, user_data) = (slot.reported, slot.sync, slot.user_data);
            self.tags.free(head);
            if reported {
                // Already reported (timed out): only the buffer was still held.
                drop(buffer);
                drop(pieces);
                continue;
            }
            failed += 1;
            let completion = Completion {
                user_data,
                result: Err(Error::Reset {
                    controller: self.ctrl.name.clone(),
                }),
                buffer,
                pieces,
            };
            if sync {
                self.sync_done = Some(completion);
            } else {
                self.deferred.push_back(completion);
            }
        }
        self.stats.requests_completed += failed;
        self.retired = 0;
        self.sq.reset();
        self.cq.reset();
        if let Some(shadow) = &self.ctrl.shadow {
            self.sq
                .set_shadow(Some(shadow.slot(2 * self.qid as usize, 0)));
            self.cq
                .set_shadow(Some(shadow.slot(2 * self.qid as usize + 1, 0)));
        }
        let depth = self.sq.entries();
        let ctrl = self.ctrl.clone();
        ctrl.admin(
            command::create_io_cq(self.qid, self.cq.entries(), self.cq.iova().0, self.vector),
            None,
        )?;
        ctrl.admin(
            command::create_io_sq(self.qid, depth, self.sq.iova().0, self.qid),
            None,
        )?;
        self.ctrl_state = state;
        self.clock.restart(Instant::now());
        let resubmitted = again.len();
        if let Some(saved) = self.saved.take() {
            // At most `depth - 1` commands were in flight, so the empty ring holds them all.
            for &tag in &again {
                let epoch = self.clock.epoch();
                let slot = self.tags.get_mut(tag);
                slot.expired = false;
                slot.abort_sent = false;
                slot.epoch = epoch;
                self.sq.push(&saved[tag.index()]);
                self.stats.commands_submitted += 1;
            }
            self.saved = Some(saved);
            self.ring();
        }
        log::info!(
            "{} queue {}: re-created after a reset; {failed} requests failed with a \
             retryable error, {resubmitted} commands submitted again",
            self.ctrl.name,
            self.qid
        );
        Ok(())
    }

    /// A poll saw the controller's state change: after a reset, recover now (the failed
    /// requests are delivered by this poll); a failed or resetting controller is left to the
    /// timeout clock.
    #[cold]
    pub(super) fn poll_state_changed(&mut self) {
        let state = self.ctrl.state();
        if state & (STATE_FAILED | STATE_RESETTING) != 0 {
            return;
        }
        if let Err(e) = self.recover(state) {
            log::error!(
                "{} queue {}: re-creating the queues after a reset failed: {e}",
                self.ctrl.name,
                self.qid
            );
        }
    }
}

/// The reset generation of a controller state word (flags masked off).
pub(super) fn generation(state: u64) -> u64 {
    state & !(STATE_FAILED | STATE_RESETTING)
}
