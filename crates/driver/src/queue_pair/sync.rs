//! The synchronous API: [`QueuePair::execute`] (under the shorthands `read`, `write`, `flush`,
//! ... that [`nvme_core::IoQueue`] provides for every transport) and the PCIe-only ones
//! submit one request marked `sync`, ring, and spin in [`QueuePair::wait`] until it completes.
//!
//! INVARIANT: completions of other (asynchronous) requests reaped while waiting are kept, in
//! order, in `deferred` and delivered by the next `poll`; the waited-for request arrives in
//! `sync_done` (from a completion, a timeout, a fatal status or a reset recovery).

use nvme_core::{IoFailure, Namespace, NvmCommand, Result};
use nvme_pool::Tag;
use nvme_spec::queue::SubmissionEntry;
use nvme_vfio::DmaBuffer;

use super::timeout::IDLE_POLLS_PER_CLOCK_CHECK;
use super::{Completion, QueuePair};

impl QueuePair {
    /// Waits for the request marked `sync` (just submitted), delivering other
    /// requests' completions to the next `poll` call.
    fn wait(&mut self) -> Completion {
        let mut deferred = std::mem::take(&mut self.deferred);
        let completion = loop {
            if let Some(c) = self.sync_done.take() {
                break c;
            }
            if self.ctrl.state() != self.ctrl_state {
                // Recovery puts the waited-for request into `sync_done` and others into
                // `self.deferred`, which is swapped out here: move them over.
                self.poll_state_changed();
                deferred.extend(self.deferred.drain(..));
                if self.sync_done.is_some() {
                    continue;
                }
            }
            let mut sink = |c: Completion| deferred.push_back(c);
            let n = self.reap::<false, _>(&mut sink);
            if n == 0 {
                self.stats.idle_polls += 1;
                if self.stats.idle_polls % IDLE_POLLS_PER_CLOCK_CHECK == 0 {
                    self.check_clock(&mut sink);
                }
                std::hint::spin_loop();
            }
        };
        self.deferred = deferred;
        completion
    }

    fn mark_sync(&mut self, head: Tag) {
        // The request was submitted by this thread just now and cannot have completed yet:
        // completions are only reaped inside poll/wait.
        let slot = self.tags.get_mut(head);
        slot.sync = true;
        slot.simple = false;
    }

    fn run_sync(
        &mut self,
        submitted: std::result::Result<Tag, IoFailure>,
    ) -> std::result::Result<Option<DmaBuffer>, IoFailure> {
        let head = submitted?;
        self.mark_sync(head);
        self.ring();
        let c = self.wait();
        match c.result {
            Ok(_) => Ok(c.buffer),
            Err(e) => Err(IoFailure::new(e, c.buffer)),
        }
    }

    /// Runs any typed NVM command to completion ([`QueuePair::submit`] and wait); returns
    /// the buffer of a data command.
    pub fn execute<C: NvmCommand>(
        &mut self,
        ns: &Namespace,
        cmd: C,
        buf: Option<DmaBuffer>,
    ) -> std::result::Result<Option<DmaBuffer>, IoFailure> {
        let submitted = self.submit_cmd(ns, cmd, buf, 0);
        self.run_sync(submitted)
    }

    /// Deallocates (trims) the given `(lba, blocks)` ranges and waits.
    pub fn deallocate(&mut self, ns: &Namespace, ranges: &[(u64, u32)]) -> Result<()> {
        let head = self.submit_deallocate_inner(ns, ranges, 0)?;
        self.run_sync(Ok(head)).map(drop).map_err(|f| f.error)
    }

    /// Runs a raw I/O command to completion; returns completion dword 0 and the buffer.
    ///
    /// # Safety
    /// As [`QueuePair::submit_raw`].
    pub unsafe fn execute_raw(
        &mut self,
        sqe: SubmissionEntry,
        data: Option<(DmaBuffer, usize)>,
    ) -> std::result::Result<(u32, Option<DmaBuffer>), IoFailure> {
        let head = self.submit_raw_inner(sqe, data, 0)?;
        self.mark_sync(head);
        self.ring();
        let c = self.wait();
        match c.result {
            Ok(dw0) => Ok((dw0, c.buffer)),
            Err(e) => Err(IoFailure::new(e, c.buffer)),
        }
    }
}
