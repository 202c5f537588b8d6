//! The cold ends of a queue pair's life: the drain before `nvme_qpair_destroy` deletes the
//! queues, and recovery of a pair whose callback never returned to `nvme_qpair_poll`.

use std::time::{Duration, Instant};

use nvme_driver::Completion;

use crate::{completion_status, nvme_qpair, Pending};

/// Longest `nvme_qpair_destroy` waits for outstanding requests to complete before it deletes
/// the queues (the buffers of those still outstanding then stay with the driver).
pub(crate) const DESTROY_DRAIN_LIMIT: Duration = Duration::from_secs(1);

impl nvme_qpair {
    /// Reaps completions, without running callbacks, until every outstanding request has one
    /// or [`DESTROY_DRAIN_LIMIT`] has passed. Returns the requests still outstanding.
    pub(crate) fn drain(&mut self) -> usize {
        let start = Instant::now();
        loop {
            let outstanding = self.requests.len() - self.free.len() - self.pending.len();
            if outstanding == 0 || start.elapsed() >= DESTROY_DRAIN_LIMIT {
                return outstanding;
            }
            let pending = &mut self.pending;
            let requests = &self.requests;
            let reaped = self.qp.poll(|c: Completion| {
                let request = c.user_data as u32;
                let buf = requests
                    .get(request as usize)
                    .map_or(std::ptr::null_mut(), |r| r.buf);
                pending.push_back(Pending {
                    request,
                    status: completion_status(&c.result, buf),
                    buffer: c.buffer,
                })
            });
            if reaped == 0 {
                std::thread::yield_now();
            }
        }
    }
}
