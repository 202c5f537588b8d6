//! The `sqlite3_vfs` methods: opening, deleting and probing files by name, full path names,
//! the last error message, and randomness, sleep and time (forwarded to the default VFS).
//!
//! INVARIANT: `x_open` leaves `pMethods` NULL until the file's state is in place, so SQLite
//! never calls `xClose` on a file whose open failed.

use std::ffi::{c_char, c_int, CStr};
use std::ptr;
use std::sync::atomic::Ordering;

use rusqlite::ffi;

use super::io_methods::IO_METHODS;
use super::{name_of, shared_of, File, FileState, Kind, Shared};
use crate::dir::MAX_NAME;
use crate::guard::Callback;

pub(super) unsafe extern "C" fn x_open(
    vfs: *mut ffi::sqlite3_vfs,
    name: ffi::sqlite3_filename,
    file: *mut ffi::sqlite3_file,
    flags: c_int,
    out_flags: *mut c_int,
) -> c_int {
    // SAFETY: SQLite calls xOpen on our registered VFS.
    let shared = unsafe { shared_of(vfs) };
    // SAFETY: SQLite passes NULL or a NUL-terminated name.
    let name = unsafe { name_of(name) };
    // Until a state is placed, pMethods stays NULL so SQLite will not call xClose.
    // SAFETY: `file` points to szOsFile writable bytes.
    unsafe { (*file).pMethods = ptr::null() };
    Callback::refuse("xOpen", ffi::SQLITE_CANTOPEN).run(shared, || {
        let kind = match name {
            // SQLite opens nameless files only for temporary storage (DELETEONCLOSE).
            None => Kind::Mem(Vec::new()),
            Some(name) => {
                let mut inner = shared.lock();
                let inner = &mut *inner;
                let Some(store) = inner.store.as_mut() else {
                    return ffi::SQLITE_CANTOPEN;
                };
                let exists = store.exists(name);
                if exists && flags & ffi::SQLITE_OPEN_EXCLUSIVE != 0 {
                    return ffi::SQLITE_CANTOPEN;
                }
                if !exists {
                    if flags & ffi::SQLITE_OPEN_CREATE == 0 {
                        return ffi::SQLITE_CANTOPEN;
                    }
                    if let Err(e) = store.create(name) {
                        return shared.fail(inner, "creating a file", &e, ffi::SQLITE_CANTOPEN);
                    }
                }
                Kind::Disk {
                    name: name.to_owned(),
                    delete_on_close: flags & ffi::SQLITE_OPEN_DELETEONCLOSE != 0,
                }
            }
        };
        let st = Box::new(FileState {
            shared,
            id: shared.next_id.fetch_add(1, Ordering::Relaxed),
            kind,
            lock: ffi::SQLITE_LOCK_NONE,
            shm_mapped: false,
            shm_shared: 0,
            shm_exclusive: 0,
        });
        // SAFETY: `file` points to at least size_of::<File>() writable bytes (szOsFile), suitably
        // aligned by SQLite's allocator (8 bytes); we initialise it whole.
        unsafe {
            ptr::write(
                file as *mut File,
                File {
                    base: ffi::sqlite3_file {
                        pMethods: &IO_METHODS,
                    },
                    state: Box::into_raw(st),
                },
            );
        }
        if !out_flags.is_null() {
            // SAFETY: non-NULL out pointer from SQLite.
            unsafe { *out_flags = flags };
        }
        ffi::SQLITE_OK
    })
}

pub(super) unsafe extern "C" fn x_delete(
    vfs: *mut ffi::sqlite3_vfs,
    name: *const c_char,
    _sync_dir: c_int,
) -> c_int {
    // SAFETY: our registered VFS; SQLite passes a NUL-terminated name.
    let (shared, name) = unsafe { (shared_of(vfs), name_of(name)) };
    Callback::refuse("xDelete", ffi::SQLITE_IOERR_DELETE).run(shared, || {
        let Some(name) = name else {
            return ffi::SQLITE_IOERR_DELETE;
        };
        let mut inner = shared.lock();
        let inner = &mut *inner;
        let Some(store) = inner.store.as_mut() else {
            return ffi::SQLITE_IOERR_DELETE;
        };
        if !store.exists(name) {
            return ffi::SQLITE_IOERR_DELETE_NOENT;
        }
        // Always durable (directory written and flushed), whatever syncDir says: in DELETE
        // journal mode the journal's deletion is the commit point.
        match store.delete(name) {
            Ok(()) => ffi::SQLITE_OK,
            Err(e) => shared.fail(inner, "deleting", &e, ffi::SQLITE_IOERR_DELETE),
        }
    })
}

pub(super) unsafe extern "C" fn x_access(
    vfs: *mut ffi::sqlite3_vfs,
    name: *const c_char,
    _flags: c_int,
    out: *mut c_int,
) -> c_int {
    // SAFETY: our registered VFS; SQLite passes a NUL-terminated name.
    let (shared, name) = unsafe { (shared_of(vfs), name_of(name)) };
    Callback::refuse("xAccess", ffi::SQLITE_IOERR_ACCESS).run(shared, || {
        let inner = shared.lock();
        let exists = match (name, inner.store.as_ref()) {
            (Some(name), Some(store)) => store.exists(name),
            _ => false,
        };
        // SAFETY: SQLite passes a valid out pointer.
        unsafe { *out = c_int::from(exists) };
        ffi::SQLITE_OK
    })
}

pub(super) unsafe extern "C" fn x_full_pathname(
    vfs: *mut ffi::sqlite3_vfs,
    name: *const c_char,
    n_out: c_int,
    out: *mut c_char,
) -> c_int {
    // SAFETY: SQLite calls the VFS methods on our registered VFS only.
    let shared = unsafe { shared_of(vfs) };
    Callback::run_always("xFullPathname", ffi::SQLITE_CANTOPEN).run(shared, || {
        // SAFETY: SQLite passes a NUL-terminated name.
        let bytes = unsafe { CStr::from_ptr(name) }.to_bytes_with_nul();
        if bytes.len() > n_out.max(0) as usize || bytes.len() > MAX_NAME + 1 {
            return ffi::SQLITE_CANTOPEN;
        }
        // SAFETY: `out` has room for n_out bytes, and bytes.len() <= n_out; the regions are
        // distinct SQLite buffers.
        unsafe { ptr::copy_nonoverlapping(bytes.as_ptr() as *const c_char, out, bytes.len()) };
        ffi::SQLITE_OK
    })
}

/// The default VFS.
fn default_vfs(shared: &Shared) -> *mut ffi::sqlite3_vfs {
    shared.default_vfs as *mut ffi::sqlite3_vfs
}

pub(super) unsafe extern "C" fn x_randomness(
    vfs: *mut ffi::sqlite3_vfs,
    n: c_int,
    out: *mut c_char,
) -> c_int {
    // SAFETY: SQLite calls the VFS methods on our registered VFS only.
    let shared = unsafe { shared_of(vfs) };
    Callback::run_always("xRandomness", 0).run(shared, || {
        let d = default_vfs(shared);
        // SAFETY: `d` is the live default VFS; we forward SQLite's own arguments.
        unsafe {
            match (*d).xRandomness {
                Some(f) => f(d, n, out),
                None => 0,
            }
        }
    })
}

pub(super) unsafe extern "C" fn x_sleep(vfs: *mut ffi::sqlite3_vfs, micros: c_int) -> c_int {
    // SAFETY: SQLite calls the VFS methods on our registered VFS only.
    let shared = unsafe { shared_of(vfs) };
    Callback::run_always("xSleep", 0).run(shared, || {
        std::thread::sleep(std::time::Duration::from_micros(micros.max(0) as u64));
        micros
    })
}

pub(super) unsafe extern "C" fn x_current_time(vfs: *mut ffi::sqlite3_vfs, out: *mut f64) -> c_int {
    // SAFETY: SQLite calls the VFS methods on our registered VFS only.
    let shared = unsafe { shared_of(vfs) };
    Callback::run_always("xCurrentTime", ffi::SQLITE_ERROR).run(shared, || {
        let d = default_vfs(shared);
        // SAFETY: `d` is the live default VFS; we forward SQLite's own arguments.
        unsafe {
            match (*d).xCurrentTime {
                Some(f) => f(d, out),
                None => ffi::SQLITE_ERROR,
            }
        }
    })
}

pub(super) unsafe extern "C" fn x_get_last_error(
    vfs: *mut ffi::sqlite3_vfs,
    n: c_int,
    out: *mut c_char,
) -> c_int {
    // SAFETY: our registered VFS.
    let shared = unsafe { shared_of(vfs) };
    Callback::run_always("xGetLastError", ffi::SQLITE_ERROR).run(shared, || {
        let inner = shared.lock();
        let msg = inner.last_error.as_bytes();
        let len = msg.len().min((n.max(1) - 1) as usize);
        if n > 0 {
            // SAFETY: `out` has room for n bytes; we write len + 1 <= n.
            unsafe {
                ptr::copy_nonoverlapping(msg.as_ptr() as *const c_char, out, len);
                *out.add(len) = 0;
            }
        }
        ffi::SQLITE_OK
    })
}
