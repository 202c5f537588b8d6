//! The `sqlite3_io_methods` table and its file I/O methods: close, read, write, truncate,
//! sync, size, file control, sector size and device characteristics (locks: `lock.rs`,
//! shared memory: `shm.rs`). A nameless file (`Kind::Mem`) lives in memory; a named one is
//! a file of the store.
//!
//! INVARIANT: SQLite calls one file's methods one at a time, so `state(file)` is the only
//! reference to its `FileState` during a call; `x_close` takes the state back once and clears
//! the pointer.

use std::ffi::{c_int, c_void};
use std::ptr;

use rusqlite::ffi;

use super::lock::{unlock_to, x_check_reserved_lock, x_lock, x_unlock};
use super::{shm, state, File, Kind};
use crate::guard::Callback;

pub(super) static IO_METHODS: ffi::sqlite3_io_methods = ffi::sqlite3_io_methods {
    iVersion: 2,
    xClose: Some(x_close),
    xRead: Some(x_read),
    xWrite: Some(x_write),
    xTruncate: Some(x_truncate),
    xSync: Some(x_sync),
    xFileSize: Some(x_file_size),
    xLock: Some(x_lock),
    xUnlock: Some(x_unlock),
    xCheckReservedLock: Some(x_check_reserved_lock),
    xFileControl: Some(x_file_control),
    xSectorSize: Some(x_sector_size),
    xDeviceCharacteristics: Some(x_device_characteristics),
    xShmMap: Some(shm::x_shm_map),
    xShmLock: Some(shm::x_shm_lock),
    xShmBarrier: Some(shm::x_shm_barrier),
    xShmUnmap: Some(shm::x_shm_unmap),
    xFetch: None,
    xUnfetch: None,
};

unsafe extern "C" fn x_close(file: *mut ffi::sqlite3_file) -> c_int {
    // SAFETY: an open file of ours.
    let shared = unsafe { state(file) }.shared;
    Callback::run_always("xClose", ffi::SQLITE_IOERR_CLOSE).run(shared, || {
        // SAFETY: SQLite calls xClose once on a file x_open initialised; we take the box back
        // and clear the pointer so nothing can use it again.
        let st = unsafe {
            let f = file as *mut File;
            let st = Box::from_raw((*f).state);
            (*f).state = ptr::null_mut();
            st
        };
        let mut st = *st;
        shm::release(&mut st, true);
        unlock_to(&mut st, ffi::SQLITE_LOCK_NONE);
        let mut rc = ffi::SQLITE_OK;
        if let Kind::Disk {
            name,
            delete_on_close,
        } = &st.kind
        {
            // A broken VFS writes nothing more (its directory may be half-updated); the file
            // stays, as after a crash.
            if *delete_on_close && !st.shared.is_broken() {
                let mut inner = st.shared.lock();
                let inner = &mut *inner;
                if let Some(store) = inner.store.as_mut() {
                    if let Err(e) = store.delete(name) {
                        rc =
                            st.shared
                                .fail(inner, "deleting on close", &e, ffi::SQLITE_IOERR_CLOSE);
                    }
                }
            }
        }
        rc
    })
}

unsafe extern "C" fn x_read(
    file: *mut ffi::sqlite3_file,
    buf: *mut c_void,
    amt: c_int,
    offset: i64,
) -> c_int {
    // SAFETY: an open file of ours.
    let st = unsafe { state(file) };
    Callback::refuse("xRead", ffi::SQLITE_IOERR_READ).run(st.shared, || {
        // SAFETY: SQLite passes a buffer of `amt` writable bytes.
        let out = unsafe { std::slice::from_raw_parts_mut(buf as *mut u8, amt.max(0) as usize) };
        let Ok(offset) = u64::try_from(offset) else {
            return ffi::SQLITE_IOERR_READ;
        };
        let n = match &mut st.kind {
            Kind::Mem(v) => {
                let from = (offset as usize).min(v.len());
                let n = (v.len() - from).min(out.len());
                out[..n].copy_from_slice(&v[from..from + n]);
                n
            }
            Kind::Disk { name, .. } => {
                let mut inner = st.shared.lock();
                let inner = &mut *inner;
                let Some(store) = inner.store.as_mut() else {
                    return ffi::SQLITE_IOERR_READ;
                };
                match store.read(name, offset, out) {
                    Ok(n) => n,
                    Err(e) => return st.shared.fail(inner, "reading", &e, ffi::SQLITE_IOERR_READ),
                }
            }
        };
        if n < out.len() {
            // SQLite requires the unread tail zeroed on a short read.
            out[n..].fill(0);
            return ffi::SQLITE_IOERR_SHORT_READ;
        }
        ffi::SQLITE_OK
    })
}

unsafe extern "C" fn x_write(
    file: *mut ffi::sqlite3_file,
    buf: *const c_void,
    amt: c_int,
    offset: i64,
) -> c_int {
    // SAFETY: an open file of ours.
    let st = unsafe { state(file) };
    Callback::refuse("xWrite", ffi::SQLITE_IOERR_WRITE).run(st.shared, || {
        // SAFETY: SQLite passes `amt` readable bytes.
        let data = unsafe { std::slice::from_raw_parts(buf as *const u8, amt.max(0) as usize) };
        let Ok(offset) = u64::try_from(offset) else {
            return ffi::SQLITE_IOERR_WRITE;
        };
        match &mut st.kind {
            Kind::Mem(v) => {
                let Some(end) = (offset as usize).checked_add(data.len()) else {
                    return ffi::SQLITE_IOERR_WRITE;
                };
                if v.len() < end {
                    v.resize(end, 0);
                }
                v[offset as usize..end].copy_from_slice(data);
                ffi::SQLITE_OK
            }
            Kind::Disk { name, .. } => {
                let mut inner = st.shared.lock();
                let inner = &mut *inner;
                let Some(store) = inner.store.as_mut() else {
                    return ffi::SQLITE_IOERR_WRITE;
                };
                match store.write(name, offset, data) {
                    Ok(()) => ffi::SQLITE_OK,
                    Err(e) => st
                        .shared
                        .fail(inner, "writing", &e, ffi::SQLITE_IOERR_WRITE),
                }
            }
        }
    })
}

unsafe extern "C" fn x_truncate(file: *mut ffi::sqlite3_file, size: i64) -> c_int {
    // SAFETY: an open file of ours.
    let st = unsafe { state(file) };
    Callback::refuse("xTruncate", ffi::SQLITE_IOERR_TRUNCATE).run(st.shared, || {
        let Ok(size) = u64::try_from(size) else {
            return ffi::SQLITE_IOERR_TRUNCATE;
        };
        match &mut st.kind {
            Kind::Mem(v) => {
                v.resize(size as usize, 0);
                ffi::SQLITE_OK
            }
            Kind::Disk { name, .. } => {
                let mut inner = st.shared.lock();
                let inner = &mut *inner;
                let Some(store) = inner.store.as_mut() else {
                    return ffi::SQLITE_IOERR_TRUNCATE;
                };
                match store.truncate(name, size) {
                    Ok(()) => ffi::SQLITE_OK,
                    Err(e) => st
                        .shared
                        .fail(inner, "truncating", &e, ffi::SQLITE_IOERR_TRUNCATE),
                }
            }
        }
    })
}

unsafe extern "C" fn x_sync(file: *mut ffi::sqlite3_file, _flags: c_int) -> c_int {
    // SAFETY: an open file of ours.
    let st = unsafe { state(file) };
    Callback::refuse("xSync", ffi::SQLITE_IOERR_FSYNC).run(st.shared, || {
        if let Kind::Mem(_) = st.kind {
            return ffi::SQLITE_OK;
        }
        let mut inner = st.shared.lock();
        let inner = &mut *inner;
        let Some(store) = inner.store.as_mut() else {
            return ffi::SQLITE_IOERR_FSYNC;
        };
        // NVMe Flush, then (if any length or extent changed) the directory and another Flush.
        match store.sync() {
            Ok(()) => ffi::SQLITE_OK,
            Err(e) => st
                .shared
                .fail(inner, "syncing", &e, ffi::SQLITE_IOERR_FSYNC),
        }
    })
}

unsafe extern "C" fn x_file_size(file: *mut ffi::sqlite3_file, out: *mut i64) -> c_int {
    // SAFETY: an open file of ours.
    let st = unsafe { state(file) };
    Callback::refuse("xFileSize", ffi::SQLITE_IOERR_FSTAT).run(st.shared, || {
        let len = match &st.kind {
            Kind::Mem(v) => v.len() as u64,
            Kind::Disk { name, .. } => {
                let mut inner = st.shared.lock();
                let inner = &mut *inner;
                let Some(store) = inner.store.as_mut() else {
                    return ffi::SQLITE_IOERR_FSTAT;
                };
                match store.len(name) {
                    Ok(n) => n,
                    Err(e) => return st.shared.fail(inner, "sizing", &e, ffi::SQLITE_IOERR_FSTAT),
                }
            }
        };
        // SAFETY: SQLite passes a valid out pointer.
        unsafe { *out = len as i64 };
        ffi::SQLITE_OK
    })
}

/// Batch-atomic writes (`SQLITE_FCNTL_BEGIN_ATOMIC_WRITE`, `_COMMIT_`, `_ROLLBACK_`: SQLite
/// sends them only when `xDeviceCharacteristics` has `SQLITE_IOCAP_BATCH_ATOMIC`) go to the
/// store's redo area (`crate::redo`); every other operation is not ours (`SQLITE_NOTFOUND`).
unsafe extern "C" fn x_file_control(
    file: *mut ffi::sqlite3_file,
    op: c_int,
    _arg: *mut c_void,
) -> c_int {
    // SAFETY: an open file of ours.
    let st = unsafe { state(file) };
    // A panic under a batch operation is an I/O error of that batch, not an unknown operation.
    let on_panic = match op {
        ffi::SQLITE_FCNTL_COMMIT_ATOMIC_WRITE => ffi::SQLITE_IOERR_COMMIT_ATOMIC,
        ffi::SQLITE_FCNTL_BEGIN_ATOMIC_WRITE | ffi::SQLITE_FCNTL_ROLLBACK_ATOMIC_WRITE => {
            ffi::SQLITE_IOERR
        }
        _ => ffi::SQLITE_NOTFOUND,
    };
    Callback::run_always("xFileControl", on_panic).run(st.shared, || {
        let (what, code) = match op {
            ffi::SQLITE_FCNTL_BEGIN_ATOMIC_WRITE => {
                ("beginning a batch-atomic write", ffi::SQLITE_IOERR)
            }
            ffi::SQLITE_FCNTL_COMMIT_ATOMIC_WRITE => (
                "committing a batch-atomic write",
                ffi::SQLITE_IOERR_COMMIT_ATOMIC,
            ),
            ffi::SQLITE_FCNTL_ROLLBACK_ATOMIC_WRITE => {
                ("rolling back a batch-atomic write", ffi::SQLITE_IOERR)
            }
            _ => return ffi::SQLITE_NOTFOUND,
        };
        let Kind::Disk { name, .. } = &st.kind else {
            return ffi::SQLITE_NOTFOUND;
        };
        let mut inner = st.shared.lock();
        let inner = &mut *inner;
        let Some(store) = inner.store.as_mut() else {
            return code;
        };
        let done = match op {
            ffi::SQLITE_FCNTL_BEGIN_ATOMIC_WRITE => store.begin_batch(name),
            ffi::SQLITE_FCNTL_COMMIT_ATOMIC_WRITE => store.commit_batch(name),
            _ => {
                store.rollback_batch(name);
                Ok(())
            }
        };
        match done {
            Ok(()) => ffi::SQLITE_OK,
            Err(e) => st.shared.fail(inner, what, &e, code),
        }
    })
}

unsafe extern "C" fn x_sector_size(file: *mut ffi::sqlite3_file) -> c_int {
    // SAFETY: an open file of ours.
    let shared = unsafe { state(file) }.shared;
    Callback::run_always("xSectorSize", 0).run(shared, || shared.sector_size)
}

unsafe extern "C" fn x_device_characteristics(file: *mut ffi::sqlite3_file) -> c_int {
    // SAFETY: an open file of ours.
    let shared = unsafe { state(file) }.shared;
    Callback::run_always("xDeviceCharacteristics", 0).run(shared, || {
        let batch = shared
            .lock()
            .store
            .as_ref()
            .is_some_and(|s| s.batch_atomic());
        if batch {
            shared.characteristics | ffi::SQLITE_IOCAP_BATCH_ATOMIC
        } else {
            shared.characteristics
        }
    })
}
