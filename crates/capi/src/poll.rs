//! Polling: reaping completions and running their callbacks on the caller's thread.
//!
//! INVARIANT: no `&mut nvme_qpair` lives while a callback runs (callbacks may submit on the
//! same pair); `polling` is set for the whole delivery, so a callback cannot poll or destroy
//! the pair it runs on.

use std::ffi::c_int;

use nvme_driver::{Completion, Error};

use crate::boundary::{fail, guard};
use crate::buffer::nvme_buf;
use crate::errors::*;
use crate::qpair::{nvme_cpl_status, nvme_qpair, Pending};
use crate::vectored::complete_request;

/// Reaps completions and runs their callbacks on this thread, at most `max_completions` of
/// them (0 = no limit; completions beyond the limit are kept for the next call). Returns the
/// number of callbacks run, or a negative error code (`NVME_ERR_BUSY` when called from one of
/// this queue pair's callbacks, or after one of them did not return: see
/// `nvme_qpair_recover`). Also detects timed-out requests, whose callbacks get
/// `NVME_ERR_TIMEOUT`.
///
/// # Safety
/// `qpair` is NULL or a live handle used only by the calling thread; the buffers of its
/// outstanding requests are live handles.
#[no_mangle]
pub unsafe extern "C" fn nvme_qpair_poll(qpair: *mut nvme_qpair, max_completions: u32) -> c_int {
    guard("nvme_qpair_poll", || {
        check_null!("nvme_qpair_poll", qpair);
        let max = if max_completions == 0 {
            usize::MAX
        } else {
            max_completions as usize
        };
        {
            // SAFETY: `qpair` is a live handle owned by this thread; this reference ends
            // before any callback runs.
            let q = unsafe { &mut *qpair };
            if q.polling {
                return fail(
                    NVME_ERR_BUSY,
                    "nvme_qpair_poll: called from a completion callback of this queue pair \
                     (or one never returned: then call nvme_qpair_recover)",
                );
            }
            if q.pending.len() < max {
                let pending = &mut q.pending;
                let requests = &q.requests;
                q.qp.poll(
                    #[inline(always)]
                    |c: Completion| pending.push_back(Pending::reaped(requests, c)),
                );
            }
            q.polling = true;
            // Submissions from the callbacks below are published together, with one doorbell
            // write after the last callback (SPDK's delayed command submission), not one each.
            q.qp.hold_submissions();
        }
        let mut done = 0usize;
        while done < max {
            let (request, status) = {
                // SAFETY: as above; the reference ends before the callback runs, which may
                // call submit functions on this queue pair.
                let q = unsafe { &mut *qpair };
                let Some(p) = q.pending.pop_front() else {
                    break;
                };
                let Some(request) = q.requests.take(p.request) else {
                    // Cannot happen: a pending entry's request stays in the table until here.
                    continue;
                };
                // SAFETY: the request's buffer handle(s) are live and in flight on this
                // queue pair, which this thread owns.
                unsafe { complete_request(&mut q.vectored, &request, p.buffer, p.pieces) };
                (request, p.status)
            };
            done += 1;
            if let Some(cb) = request.cb {
                // SAFETY: the callback and its argument are the caller's (C contract).
                unsafe { cb(request.arg, &status) };
            }
        }
        // SAFETY: as above.
        let q = unsafe { &mut *qpair };
        // Submissions the caller holds (`nvme_qpair_hold_submissions`) stay held.
        if !q.held {
            q.qp.release_submissions();
        }
        q.polling = false;
        done.min(c_int::MAX as usize) as c_int
    })
}

/// Holds the submissions made on the queue pair from now on: they are queued but the device
/// is not told (PCIe: no Submission Queue Tail Doorbell write, NVMe Base 2.0 §3.1.4.20; TCP:
/// no send) until `nvme_qpair_release_submissions`, which publishes them all at once with one
/// doorbell write. For batching, e.g. fio's `iodepth_batch_submit`. Completions of earlier
/// requests are still reaped by `nvme_qpair_poll`, and callbacks' submissions stay held too.
/// Holding a held pair does nothing; `nvme_qpair_destroy` releases held submissions first.
///
/// # Safety
/// `qpair` is NULL or a live handle used only by the calling thread.
#[no_mangle]
pub unsafe extern "C" fn nvme_qpair_hold_submissions(qpair: *mut nvme_qpair) -> c_int {
    guard("nvme_qpair_hold_submissions", || {
        check_null!("nvme_qpair_hold_submissions", qpair);
        // SAFETY: `qpair` is a live handle owned by this thread (caller contract).
        let q = unsafe { &mut *qpair };
        if !q.held && !q.polling {
            q.qp.hold_submissions();
        }
        q.held = true;
        NVME_OK
    })
}

/// Publishes the submissions held since `nvme_qpair_hold_submissions` (one doorbell write on
/// PCIe) and ends the hold. Releasing a pair that is not held does nothing.
///
/// # Safety
/// `qpair` is NULL or a live handle used only by the calling thread.
#[no_mangle]
pub unsafe extern "C" fn nvme_qpair_release_submissions(qpair: *mut nvme_qpair) -> c_int {
    guard("nvme_qpair_release_submissions", || {
        check_null!("nvme_qpair_release_submissions", qpair);
        // SAFETY: `qpair` is a live handle owned by this thread (caller contract).
        let q = unsafe { &mut *qpair };
        if q.held {
            q.held = false;
            // Inside a poll, its end publishes them (after the last callback).
            if !q.polling {
                q.qp.release_submissions();
            }
        }
        NVME_OK
    })
}

/// Requests submitted on the queue pair whose callbacks have not run yet (0 for NULL).
///
/// # Safety
/// `qpair` is NULL or a live handle used only by the calling thread.
#[no_mangle]
pub unsafe extern "C" fn nvme_qpair_outstanding(qpair: *const nvme_qpair) -> u32 {
    if qpair.is_null() {
        return 0;
    }
    // SAFETY: `qpair` is a live handle owned by this thread (caller contract).
    let q = unsafe { &*qpair };
    q.requests.len() as u32
}

#[inline(always)]
pub(crate) fn completion_status(
    result: &Result<u32, Error>,
    buf: *mut nvme_buf,
) -> nvme_cpl_status {
    match result {
        Ok(dw0) => nvme_cpl_status {
            success: true,
            retryable: false,
            sct: 0,
            sc: 0,
            error: NVME_OK,
            cdw0: *dw0,
            buf,
            lba: 0,
        },
        Err(e) => {
            let status = e.status();
            nvme_cpl_status {
                success: false,
                retryable: e.is_retryable(),
                sct: status.map_or(0, |s| s.sct_raw()),
                sc: status.map_or(0, |s| s.sc()),
                error: error_code(e),
                cdw0: 0,
                buf,
                lba: 0,
            }
        }
    }
}
