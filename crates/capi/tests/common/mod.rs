//! Helpers the C API's integration tests share: the thread's last error message, and a
//! callback that records how often it ran and the last error code it saw.

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
