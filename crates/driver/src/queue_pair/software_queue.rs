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
        let IoFailure {
            error,
            mut buffer,
            pieces,
        } = failure;
        match self.enqueue_in_place(error, ns, cmd, &mut buffer, user_data) {
            Ok(()) => Ok(()),
            Err(error) => Err(IoFailure {
                error,
                buffer,
                pieces,
            }),
        }
    }

    /// A submission refused with `error`: when that is `QueueFull` and the software queue has
    /// room, the request waits there with the buffer taken from the caller's place `buf`;
    /// otherwise the error comes back and `buf` keeps the buffer.
    #[cold]
    pub(super) fn enqueue_in_place<C: NvmCommand>(
        &mut self,
        error: Error,
        ns: &Namespace,
        cmd: C,
        buf: &mut Option<DmaBuffer>,
        user_data: u64,
    ) -> Result<(), Error> {
        if !matches!(error, Error::QueueFull { .. }) || self.queued.len() >= self.queue_limit {
            return Err(error);
        }
        let Some(buffer) = buf.take() else {
            return Err(error);
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
                Err(Error::QueueFull { .. }) => {
                    let buffer = buffer.expect("a refused submission leaves its buffer in place");
                    self.queued.push_front(Queued { buffer, ..q });
                    break;
                }
                Err(error) => {
                    self.stats.requests_completed += 1;
                    self.deferred.push_back(Completion {
                        user_data: q.user_data,
                        result: Err(error),
                        buffer,
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
