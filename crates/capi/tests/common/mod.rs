//! Helpers the C API's integration tests share: the thread's last error message, a
//! callback that records how often it ran and the last error code it saw, and the poll loop
//! that waits for it.

#![allow(dead_code)] // each test file uses its own subset

use std::cell::Cell;
use std::ffi::{c_void, CStr};

use nvme_userspace::*;

/// `nvme_last_error_message()` as a `String`.
pub fn last_error() -> String {
    // SAFETY: the function returns a valid NUL-terminated string.
    unsafe { CStr::from_ptr(nvme_last_error_message()) }
        .to_string_lossy()
        .into_owned()
}

/// What [`record`] saw: callbacks run and the last one's error code.
#[derive(Default)]
pub struct Seen {
    pub calls: Cell<u32>,
    pub error: Cell<i32>,
}

/// A completion callback whose `arg` is a [`Seen`].
///
/// # Safety
/// `arg` must point to a live `Seen`; `status` must be valid for the call (the C API's contract).
pub unsafe extern "C" fn record(arg: *mut c_void, status: *const nvme_cpl_status) {
    // SAFETY: the caller's contract above.
    let (seen, status) = unsafe { (&*arg.cast::<Seen>(), &*status) };
    seen.calls.set(seen.calls.get() + 1);
    seen.error.set(status.error);
}

/// Polls `qp` until [`record`] has run `calls` times for `seen` (panics after a million polls);
/// returns the last callback's error code. `qp` must be a live queue pair of this thread, not
/// polled from inside a callback.
pub fn poll_until(qp: *mut nvme_qpair, seen: &Seen, calls: u32) -> i32 {
    for _ in 0..1_000_000 {
        if seen.calls.get() >= calls {
            return seen.error.get();
        }
        // SAFETY: the contract above.
        assert!(unsafe { nvme_qpair_poll(qp, 0) } >= 0, "{}", last_error());
        std::thread::yield_now();
    }
    panic!("no completion");
}
