//! Creating a queue pair: [`Controller::create_queue_pair`] checks the options and takes a
//! queue id; `QueuePair::create` allocates both rings and the slot pages in DMA memory and
//! issues Create I/O Completion Queue, then Create I/O Submission Queue (NVMe Base 2.0
//! §5.4, §5.5).
//!
//! INVARIANT: on every error path the rings are freed only once the device cannot reach
//! them (a failed create command stops the controller, see `Inner::admin`), and the queue id
//! is released.

use std::collections::VecDeque;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nvme_core::{EpochClock, Error, Result};
use nvme_pool::MAX_DEPTH;
use nvme_pool::{Tag, TagSet};
use nvme_spec::queue::{SubmissionEntry, CQE_SIZE};
use nvme_spec::{command, regs, Status};

use super::{QueuePair, QueuePairOptions, QueuePairStats, Slot, DEFAULT_QUEUE_DEPTH};
use crate::controller::{Controller, Inner};
use crate::ring::{CqRing, SlotPages, SqRing};

impl Controller {
    /// Creates an I/O queue pair (Create I/O Completion Queue, then Create I/O Submission
    /// Queue, physically contiguous rings in DMA memory, polled: no interrupts).
    pub fn create_queue_pair(&self, options: QueuePairOptions) -> Result<QueuePair> {
        let inner = &self.inner;
        // The ring needs `depth` entries (CAP.MQES) and the pair `depth - 1` request slots.
        let max = inner.cap.max_queue_entries().min(u32::from(MAX_DEPTH));
        let mut options = options;
        if options.depth == 0 {
            options.depth = DEFAULT_QUEUE_DEPTH.min(max);
            if options.depth < DEFAULT_QUEUE_DEPTH {
                log::info!(
                    "{}: queue depth {} (the default {DEFAULT_QUEUE_DEPTH} clamped to CAP.MQES+1)",
                    inner.name,
                    options.depth
                );
            }
        }
        if options.depth < 2 || options.depth > max {
            return Err(Error::QueueDepth {
                requested: options.depth,
                max,
            });
        }
        if inner.is_failed() {
            return Err(Error::Failed {
                controller: inner.name.clone(),
            });
        }
        let qid = inner.allocate_qid()?;
        match QueuePair::create(inner.clone(), qid, options) {
            Ok(qp) => Ok(qp),
            Err(e) => {
                inner.release_qid(qid);
                Err(e)
            }
        }
    }
}

impl QueuePair {
    fn create(ctrl: Arc<Inner>, qid: u16, options: QueuePairOptions) -> Result<Self> {
        let stride = ctrl.cap.doorbell_stride();
        let depth = options.depth;
        let mut sq = SqRing::new(
            &ctrl.dma,
            depth,
            ctrl.mmio.doorbell(regs::sq_tail_doorbell(qid, stride)),
        )?;
        // At most `depth - 1` commands are outstanding (one per request slot); the CQ's
        // entries beyond those `depth` are its slack (`CqRing::publish_lazy`).
        let cq_entries =
            completion_queue_entries(depth, ctrl.cap.max_queue_entries(), ctrl.page_size);
        let mut cq = CqRing::new(
            &ctrl.dma,
            cq_entries,
            cq_entries - depth,
            ctrl.mmio.doorbell(regs::cq_head_doorbell(qid, stride)),
        )?;
        // Shadow doorbells are controller-wide once configured: every queue must use them.
        if let Some(shadow) = &ctrl.shadow {
            // Fresh queues start at 0; reset the entries a previous user of this qid left.
            sq.set_shadow(Some(shadow.slot(2 * qid as usize, 0)));
            cq.set_shadow(Some(shadow.slot(2 * qid as usize + 1, 0)));
        }
        let slots = (depth - 1) as u16;
        let pages = SlotPages::new(&ctrl.dma, slots as usize, ctrl.page_size)?;
        // Vector q serves queue q (vector 0 is the admin queue's).
        let irq = if options.interrupts {
            Some(ctrl.irq_event(qid).ok_or(Error::NoInterrupts { qid })?)
        } else {
            None
        };
        let vector = irq.as_ref().map(|_| qid);
        let ctrl_state = ctrl.state();
        // A timeout of either command stops the controller (`Inner::admin`), so the rings are
        // freed on these error paths only once the device cannot reach them.
        ctrl.admin(
            command::create_io_cq(qid, cq.entries(), cq.iova().0, vector),
            None,
        )?;
        if let Err(e) = ctrl.admin(command::create_io_sq(qid, depth, sq.iova().0, qid), None) {
            if let Err(d) = ctrl.admin(command::delete_io_cq(qid), None) {
                log::error!(
                    "{}: deleting I/O completion queue {qid} after a failed creation: {d}",
                    ctrl.name
                );
                // The controller may keep the CQ (and write to its ring): stop it first.
                ctrl.fail_and_stop();
            }
            return Err(e);
        }
        let tags = TagSet::new(slots, |_| Slot {
            head: Tag::default(),
            awaiting: false,
            expired: false,
            abort_sent: false,
            reported: false,
            epoch: 0,
            remaining: 0,
            opcode: 0,
            sync: false,
            simple: false,
            status: Status::SUCCESS,
            dw0: 0,
            user_data: 0,
            buffer: None,
            pieces: None,
        });
        let timeout = options.timeout.max(Duration::from_millis(1));
        log::debug!(
            "{}: created I/O queue pair {qid} with {depth} SQ and {cq_entries} CQ entries",
            ctrl.name
        );
        Ok(Self {
            sq,
            cq,
            tags,
            pages,
            qid,
            page_size: ctrl.page_size,
            sgl_mask: ctrl.sgl.unwrap_or(u64::MAX),
            max_transfer: ctrl.max_transfer,
            max_completions: options.max_completions_per_poll.clamp(1, slots as usize),
            plugged: false,
            clock: EpochClock::new(timeout),
            stats: QueuePairStats::default(),
            deferred: VecDeque::with_capacity(slots as usize),
            sync_done: None,
            health_due: Instant::now() + super::health::HEALTH_INTERVAL,
            timeout,
            retired: 0,
            queued: VecDeque::with_capacity(options.software_queue),
            queue_limit: options.software_queue,
            domain: ctrl.dma.domain(),
            ctrl_state,
            saved: options
                .resubmit_after_reset
                .then(|| vec![SubmissionEntry::default(); slots as usize].into_boxed_slice()),
            vector,
            irq,
            ctrl,
            _not_sync: PhantomData,
        })
    }
}

/// The size of a queue pair's completion queue for an SQ of `depth` entries: twice that, and
/// at least a page of entries (a ring takes whole pages anyway), within the controller's
/// limit (`max`, CAP.MQES + 1, which bounds CQs as it bounds SQs; NVMe Base 2.0 §3.1.4.1).
///
/// The entries beyond `depth` let the CQ head doorbell go out only once per that many
/// completions instead of once per reaping poll (`CqRing::publish_lazy`): at queue depth 1
/// that halves the MMIO writes per I/O, each a trap to the hypervisor in a guest.
fn completion_queue_entries(depth: u32, max: u32, page_size: usize) -> u32 {
    let per_page = (page_size / CQE_SIZE) as u32;
    (2 * depth).max(per_page).min(max).max(depth)
}

#[cfg(test)]
mod tests {
    use super::completion_queue_entries;

    #[test]
    fn completion_queue_size() {
        // A page of entries at least; twice the SQ beyond that.
        assert_eq!(completion_queue_entries(2, 2048, 4096), 256);
        assert_eq!(completion_queue_entries(256, 2048, 4096), 512);
        assert_eq!(completion_queue_entries(1024, 4096, 4096), 2048);
        // Within CAP.MQES + 1: no slack at all when the SQ already takes the limit.
        assert_eq!(completion_queue_entries(1024, 1536, 4096), 1536);
        assert_eq!(completion_queue_entries(64, 64, 4096), 64);
        assert_eq!(completion_queue_entries(2, 16, 65536), 16);
    }
}
