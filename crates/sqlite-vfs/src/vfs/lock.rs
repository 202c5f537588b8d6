//! File locks: SQLite's five lock levels (NONE, SHARED, RESERVED, PENDING, EXCLUSIVE),
//! tracked per file name in process memory, so connections of one process exclude each other
//! (another process on the same namespace is not excluded).
//!
//! INVARIANT: `shared` counts the files of a name holding SHARED or more; `reserved`, `pending`
//! and `exclusive` name the one file holding that level, so a file's unlock releases only its
//! own.

use std::ffi::c_int;

use rusqlite::ffi;

use super::{state, FileState, Kind};
use crate::guard::Callback;

/// Per-name lock state (SQLite's five levels, in process).
#[derive(Debug, Default)]
pub(super) struct LockState {
    shared: u32,
    reserved: Option<u64>,
    pending: Option<u64>,
    exclusive: Option<u64>,
}

pub(super) unsafe extern "C" fn x_lock(file: *mut ffi::sqlite3_file, level: c_int) -> c_int {
    // SAFETY: an open file of ours.
    let st = unsafe { state(file) };
    Callback::refuse("xLock", ffi::SQLITE_IOERR_LOCK).run(st.shared, || {
        let Kind::Disk { name, .. } = &st.kind else {
            st.lock = level;
            return ffi::SQLITE_OK;
        };
        if st.lock >= level {
            return ffi::SQLITE_OK;
        }
        let id = st.id;
        let mut inner = st.shared.lock();
        let l = inner.locks.entry(name.clone()).or_default();
        let other = |o: Option<u64>| o.is_some_and(|o| o != id);
        match level {
            ffi::SQLITE_LOCK_SHARED => {
                if other(l.pending) || other(l.exclusive) {
                    return ffi::SQLITE_BUSY;
                }
                l.shared += 1;
                st.lock = level;
            }
            ffi::SQLITE_LOCK_RESERVED => {
                if l.reserved.is_some() {
                    return ffi::SQLITE_BUSY;
                }
                l.reserved = Some(id);
                st.lock = level;
            }
            ffi::SQLITE_LOCK_EXCLUSIVE | ffi::SQLITE_LOCK_PENDING => {
                if other(l.pending) || other(l.exclusive) {
                    return ffi::SQLITE_BUSY;
                }
                l.pending = Some(id);
                st.lock = ffi::SQLITE_LOCK_PENDING;
                if level == ffi::SQLITE_LOCK_EXCLUSIVE {
                    if l.shared > 1 {
                        return ffi::SQLITE_BUSY;
                    }
                    l.exclusive = Some(id);
                    st.lock = level;
                }
            }
            _ => return ffi::SQLITE_IOERR_LOCK,
        }
        ffi::SQLITE_OK
    })
}

/// Drops the lock of `st` to `level` (SHARED or NONE).
pub(super) fn unlock_to(st: &mut FileState, level: c_int) {
    let Kind::Disk { name, .. } = &st.kind else {
        st.lock = level;
        return;
    };
    if st.lock <= level {
        return;
    }
    let id = st.id;
    let mut inner = st.shared.lock();
    let l = inner.locks.entry(name.clone()).or_default();
    for slot in [&mut l.reserved, &mut l.pending, &mut l.exclusive] {
        if *slot == Some(id) {
            *slot = None;
        }
    }
    if level == ffi::SQLITE_LOCK_NONE && st.lock >= ffi::SQLITE_LOCK_SHARED {
        l.shared = l.shared.saturating_sub(1);
    }
    st.lock = level;
}

pub(super) unsafe extern "C" fn x_unlock(file: *mut ffi::sqlite3_file, level: c_int) -> c_int {
    // SAFETY: an open file of ours.
    let st = unsafe { state(file) };
    Callback::run_always("xUnlock", ffi::SQLITE_IOERR_UNLOCK).run(st.shared, || {
        unlock_to(st, level);
        ffi::SQLITE_OK
    })
}

pub(super) unsafe extern "C" fn x_check_reserved_lock(
    file: *mut ffi::sqlite3_file,
    out: *mut c_int,
) -> c_int {
    // SAFETY: an open file of ours.
    let st = unsafe { state(file) };
    Callback::refuse("xCheckReservedLock", ffi::SQLITE_IOERR_CHECKRESERVEDLOCK).run(
        st.shared,
        || {
            let held = match &st.kind {
                Kind::Mem(_) => false,
                Kind::Disk { name, .. } => {
                    let inner = st.shared.lock();
                    inner.locks.get(name).is_some_and(|l| {
                        l.reserved.is_some() || l.pending.is_some() || l.exclusive.is_some()
                    })
                }
            };
            // SAFETY: SQLite passes a valid out pointer.
            unsafe { *out = c_int::from(held) };
            ffi::SQLITE_OK
        },
    )
}
