//! The boundary every exported function goes through: [`guard`] catches panics (unwinding
//! into C is undefined behaviour) and `check_null!` refuses NULL pointers, and a failing call
//! records its message for `nvme_last_error_message` on the calling thread ([`fail`]).
//!
//! INVARIANT: every exported function that can panic runs its body inside [`guard`]; the
//! last-error message is per thread, so it needs no lock.

use std::cell::RefCell;
use std::ffi::{c_char, c_int, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

use nvme_driver::Error;

use crate::errors::{self, error_code, NVME_ERR_PANIC};

thread_local! {
    /// Message of the last failing call on this thread (NUL-terminated).
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn set_last_error(message: impl Into<String>) {
    let mut bytes = message.into().into_bytes();
    bytes.retain(|&b| b != 0);
    let message = CString::new(bytes).unwrap_or_default();
    LAST_ERROR.with(|e| *e.borrow_mut() = message);
}

/// Records `code` with `message` as this thread's last error and returns `code`.
pub(crate) fn fail(code: c_int, message: impl Into<String>) -> c_int {
    set_last_error(message);
    code
}

/// Records a driver error and returns its code.
pub(crate) fn fail_with(error: &Error) -> c_int {
    fail(error_code(error), error.to_string())
}

/// Runs `f`, turning a panic into `NVME_ERR_PANIC` (unwinding into C is undefined behaviour).
pub(crate) fn guard(what: &str, f: impl FnOnce() -> c_int) -> c_int {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(code) => code,
        Err(payload) => {
            let detail = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            fail(
                NVME_ERR_PANIC,
                format!("{what}: internal error (panic): {detail}"),
            )
        }
    }
}

/// Returns `NVME_ERR_NULL_POINTER` (with a message naming the argument) from the enclosing
/// closure when `$p` is null.
macro_rules! check_null {
    ($what:literal, $($p:ident),+) => {
        $(
            if $p.is_null() {
                return fail(
                    NVME_ERR_NULL_POINTER,
                    concat!($what, ": argument `", stringify!($p), "` is NULL"),
                );
            }
        )+
    };
    // The function name known only at run time (helpers shared by several functions).
    (name = $what:expr, $($p:ident),+) => {
        $(
            if $p.is_null() {
                return fail(
                    NVME_ERR_NULL_POINTER,
                    format!("{}: argument `{}` is NULL", $what, stringify!($p)),
                );
            }
        )+
    };
}

/// A static description of an error code (`"unknown error code"` for codes this library does
/// not define). Never NULL; the string lives as long as the program.
///
/// # Safety
/// Always safe to call.
#[no_mangle]
pub unsafe extern "C" fn nvme_strerror(code: c_int) -> *const c_char {
    errors::describe(code).as_ptr()
}

/// The message of the last failing call made by this thread (an empty string when none
/// failed yet). Never NULL. The string stays valid until the next failing call on this
/// thread; copy it to keep it.
///
/// # Safety
/// Always safe to call; see above for the lifetime of the returned string.
#[no_mangle]
pub unsafe extern "C" fn nvme_last_error_message() -> *const c_char {
    LAST_ERROR
        .try_with(|e| e.borrow().as_ptr())
        .unwrap_or(c"".as_ptr())
}
