//! The software queue (`QueuePairOptions::software_queue`): data commands (reads, writes,
//! compares) that
//! find the ring or the request slots full wait here, in submission order, and `poll`
//! submits them as completions make room (SPDK's queued requests).
//!
//! INVARIANT: a queued request owns its buffer until it is submitted or completes with an
//! error; the queue never grows past its capacity (a submission beyond it fails with
//! `QueueFull` and gets its buffer back). Costs nothing until the ring is full.

use nvme_core::{Error, IoCommand, IoFailure, Namespace, NvmCommand};
use nvme_pool::Tag;
use nvme_vfio::DmaBuffer;

use super::{Completion, QueuePair};

/// A data command (read, write, compare, ...) waiting in the software queue.
pub(super) struct Queued {
    cmd: IoCommand,
    ns: Namespace,
    user_data: u64,
    buffer: DmaBuffer,
}

impl QueuePair {
    /// A submission refused with `QueueFull` goes to the software queue when it has room
    /// (commands with a data buffer only).
    #[inline(always)]
    pub(super) fn queue_if_full<C: NvmCommand>(
        &mut self,
        submitted: std::result::Result<Tag, IoFailure>,
        ns: &Namespace,
        cmd: C,
        user_data: u64,
    ) -> std::result::Result<(), IoFailure> {
        match submitted {
            Ok(_) => Ok(()),
            Err(f) => self.enqueue(f, ns, cmd, user_data),
        }
    }

    #[cold]
    fn enqueue<C: NvmCommand>(
        &mut self,
        failure: IoFailure,
        ns: &Namespace,
        cmd: C,
        user_data: u64,
    ) -> std::result::Result<(), IoFailure> {
        if !matches!(failure.error, Error::QueueFull { .. })
            || self.queued.len() >= self.queue_limit
        {
            return Err(failure);
        }
        let Some(buffer) = failure.buffer else {
            return Err(failure);
        };
        self.queued.push_back(Queued {
            cmd: IoCommand::of(cmd),
            ns: ns.clone(),
            user_data,
            buffer,
        });
        Ok(())
    }

    /// Submits queued requests while there is room; one that fails for another reason
    /// completes with that error (into `deferred`).
    #[cold]
    pub(super) fn drain_queued(&mut self) {
        let mut submitted = false;
        while let Some(q) = self.queued.pop_front() {
            let plugged = self.plugged;
            self.plugged = true;
            let mut buffer = Some(q.buffer);
            let r = self.submit_data_cmd(&q.ns, q.cmd, &mut buffer, q.user_data);
            self.plugged = plugged;
            match r {
                Ok(_) => submitted = true,
                Err(f) if matches!(f.error, Error::QueueFull { .. }) => {
                    let buffer = f.buffer.expect("a refused submission returns its buffer");
                    self.queued.push_front(Queued { buffer, ..q });
                    break;
                }
                Err(f) => {
                    self.stats.requests_completed += 1;
                    self.deferred.push_back(Completion {
                        user_data: q.user_data,
                        result: Err(f.error),
                        buffer: f.buffer,
                        pieces: None,
                    });
                }
            }
        }
        if submitted && !self.plugged {
            self.ring();
        }
    }

    /// Requests waiting in the software queue.
    pub fn queued(&self) -> usize {
        self.queued.len()
    }
}
