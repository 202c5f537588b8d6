//! The cold ends of a queue pair's life: the drain before `nvme_qpair_destroy` deletes the
//! queues, and recovery of a pair whose callback never returned to `nvme_qpair_poll`.

use std::ffi::c_int;
use std::time::{Duration, Instant};

use nvme_driver::Completion;

use crate::{fail, guard, nvme_qpair, Pending, NVME_ERR_NULL_POINTER};

/// Longest `nvme_qpair_destroy` waits for outstanding requests to complete before it deletes
/// the queues (the buffers of those still outstanding then stay with the driver).
pub(crate) const DESTROY_DRAIN_LIMIT: Duration = Duration::from_secs(1);

impl nvme_qpair {
    /// Reaps completions, without running callbacks, until every outstanding request has one
    /// or [`DESTROY_DRAIN_LIMIT`] has passed. Returns the requests still outstanding.
    pub(crate) fn drain(&mut self) -> usize {
        let start = Instant::now();
        loop {
            let outstanding = self.requests.len() - self.pending.len();
            if outstanding == 0 || start.elapsed() >= DESTROY_DRAIN_LIMIT {
                return outstanding;
            }
            let pending = &mut self.pending;
            let requests = &self.requests;
            let reaped = self
                .qp
                .poll(|c: Completion| pending.push_back(Pending::reaped(requests, c)));
            if reaped == 0 {
                std::thread::yield_now();
            }
        }
    }
}

/// Makes a queue pair usable again after one of its callbacks did not return to
/// `nvme_qpair_poll`, which callbacks must not do (see `nvme_cb_fn`): a `longjmp` out of the
/// callback, a C++ exception, a thread or coroutine that never comes back. The queue pair then
/// cannot tell that poll from one still running its callbacks: `nvme_qpair_poll` and
/// `nvme_qpair_destroy` fail with `NVME_ERR_BUSY`, and submissions made since are held (not
/// sent to the device). This ends that abandoned poll: held submissions are sent, and the
/// completions that poll had reaped but not delivered are delivered by the next
/// `nvme_qpair_poll`. The request whose callback did not return counts as completed (its
/// buffer is idle). Returns 1 when an abandoned poll was ended, 0 when the pair was not busy
/// (nothing done), or a negative error code.
///
/// # Safety
/// `qpair` is NULL or a live handle used only by the calling thread, and NOT called from a
/// callback of this queue pair or while one runs: the poll it ends must really be abandoned
/// (recovering a poll that is still running its callbacks lets them destroy the pair under it).
#[no_mangle]
pub unsafe extern "C" fn nvme_qpair_recover(qpair: *mut nvme_qpair) -> c_int {
    guard("nvme_qpair_recover", || {
        check_null!("nvme_qpair_recover", qpair);
        // SAFETY: `qpair` is a live handle owned by this thread, and no poll of it is running
        // (caller contract), so no other reference to it exists.
        let q = unsafe { &mut *qpair };
        if !q.polling {
            return 0;
        }
        log::warn!(
            "nvme_qpair_recover: a completion callback did not return to nvme_qpair_poll; \
             {} completions still to deliver",
            q.pending.len()
        );
        // What the abandoned poll would have done after its last callback.
        q.qp.release_submissions();
        q.polling = false;
        1
    })
}
