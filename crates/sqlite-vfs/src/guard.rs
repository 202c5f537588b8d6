//! The one wrapper every SQLite callback of the VFS runs through.
//!
//! A panic must not unwind out of an `extern "C"` function into SQLite's C frames: that is
//! undefined behaviour at our MSRV (1.80), and since Rust 1.81 it aborts the process.
//! [`Callback::run`] catches it, logs its message, records it in the VFS (where
//! `xGetLastError` and [`crate::NvmeVfs::with_store`] report it) and returns the callback's
//! error code, so SQLite sees an I/O error and the process keeps running.
//!
//! A panic can leave state half-updated: the store's in-memory directory and block cache, the
//! lock tables, a file's lock level. All of it is shared by every file of the VFS (one
//! mutex), so the panic breaks the whole VFS: from then on every callback that does I/O or
//! takes a lock is refused with its error code without running
//! ([`WhenBroken::Refuse`]), and only the callbacks that release things (close, unlock,
//! unmap) or touch no state run ([`WhenBroken::Run`]), so connections can still be closed and
//! their memory freed. Nothing more is written to the medium, which keeps what the last
//! successful sync made durable; drop the VFS and register a new one to go on.
//!
//! With `panic = "abort"` there is nothing to catch: the process aborts at the panic, which
//! is not undefined behaviour either.

use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::vfs::Shared;

/// What a callback does once the VFS is broken by an earlier panic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WhenBroken {
    /// Return the error value without running (I/O, locking, opening).
    Refuse,
    /// Run anyway (releases state, or touches none).
    Run,
}

/// One SQLite callback: its name for messages, the value it returns when it panics (or is
/// refused), and what it does on a broken VFS.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Callback<T> {
    name: &'static str,
    error: T,
    when_broken: WhenBroken,
}

impl<T: Copy> Callback<T> {
    /// A callback that is refused (returns `error`) once the VFS is broken.
    pub(crate) const fn refuse(name: &'static str, error: T) -> Self {
        Self {
            name,
            error,
            when_broken: WhenBroken::Refuse,
        }
    }

    /// A callback that runs even on a broken VFS; `error` is returned if it panics.
    pub(crate) const fn run_always(name: &'static str, error: T) -> Self {
        Self {
            name,
            error,
            when_broken: WhenBroken::Run,
        }
    }

    /// Runs `body` for the VFS `shared`: a panic becomes `error` and breaks the VFS.
    pub(crate) fn run(&self, shared: &Shared, body: impl FnOnce() -> T) -> T {
        if self.when_broken == WhenBroken::Refuse && shared.is_broken() {
            return self.error;
        }
        // AssertUnwindSafe: whatever `body` leaves half-updated when it panics is reached
        // afterwards only by the WhenBroken::Run callbacks, which release it (see the
        // module doc); nothing reads it as valid again.
        match catch_unwind(AssertUnwindSafe(body)) {
            Ok(v) => v,
            Err(payload) => {
                let message = panic_message(payload.as_ref());
                log::error!(
                    "nvme-sqlite-vfs: SQLite callback {} panicked: {message}; the VFS refuses all I/O until it is dropped",
                    self.name
                );
                shared.mark_broken(self.name, message);
                self.error
            }
        }
    }
}

/// The message of a panic payload (`panic!` gives a `&str` or a `String`).
fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic without a message".to_owned()
    }
}
