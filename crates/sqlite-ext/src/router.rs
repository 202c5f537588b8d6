//! The `nvme` VFS: a thin router in front of the per-namespace [`nvme_sqlite_vfs::NvmeVfs`]
//! VFSes. `xOpen` of a main database, its rollback journal or its WAL reads the URI parameters
//! (`device`, `nsid`, `format`) that SQLite keeps behind those names, opens that namespace's
//! VFS ([`crate::namespaces`]) and hands the open to it: from then on SQLite calls that VFS's
//! file methods directly, so the router costs nothing per I/O. Names that carry no URI
//! (`xDelete`, `xAccess`, a super-journal) go to the namespace of the longest database name
//! opened through the router that they start with (a journal is `<db>-journal`, a WAL
//! `<db>-wal`, a super-journal `<db>-mjXXXXXXXX`). Nameless temporary files go to any open
//! namespace (they live in memory there), else to the default VFS.
//!
//! Limitation: one database name open on two namespaces at once in one process routes its
//! journal deletes and probes to the namespace opened last.
//!
//! INVARIANT: the router and its [`Router`] state are leaked at registration, so SQLite's
//! pointers to them never dangle; every VFS it forwards to is leaked as well.

use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;
use std::sync::Mutex;

use nvme_sqlite_vfs::{api, dir::MAX_NAME, NvmeVfs};
use rusqlite::ffi;

use crate::namespaces::{self, Place};

/// The VFS name programs give SQLite (`vfs=nvme`).
pub const VFS_NAME: &CStr = c"nvme";

/// Bits of xOpen's flags naming files whose name carries the database's URI parameters.
const URI_NAMED: c_int =
    ffi::SQLITE_OPEN_MAIN_DB | ffi::SQLITE_OPEN_MAIN_JOURNAL | ffi::SQLITE_OPEN_WAL;

/// The router's state (leaked).
struct Router {
    /// The default VFS (randomness, sleep and time are forwarded to it), as an address.
    default_vfs: usize,
    /// Database name -> the namespace VFS it was last opened on (address).
    names: Mutex<HashMap<String, usize>>,
    /// The last failure, for xGetLastError.
    last_error: Mutex<String>,
}

impl Router {
    fn route(&self, name: &str) -> Option<*mut ffi::sqlite3_vfs> {
        let names = self.names.lock().unwrap_or_else(|e| e.into_inner());
        names
            .iter()
            .filter(|(db, _)| name.starts_with(db.as_str()))
            .max_by_key(|(db, _)| db.len())
            .map(|(_, &vfs)| vfs as *mut ffi::sqlite3_vfs)
    }

    fn any(&self) -> Option<*mut ffi::sqlite3_vfs> {
        let names = self.names.lock().unwrap_or_else(|e| e.into_inner());
        names.values().next().map(|&v| v as *mut ffi::sqlite3_vfs)
    }

    /// Records and reports a failure: SQLite's error log (`sqlite3_log`), xGetLastError, and
    /// standard error (an unmodified program shows SQLite's generic message only).
    fn fail(&self, code: c_int, message: String) -> c_int {
        let message = format!("nvme VFS: {message}");
        api::log(code, &message);
        eprintln!("{message}");
        *self.last_error.lock().unwrap_or_else(|e| e.into_inner()) = message;
        code
    }
}

/// Registers the `nvme` VFS (not as the default) with the SQLite behind the installed
/// [`api`] table, once per process.
pub fn register() -> Result<(), String> {
    let default_vfs = api::vfs_find(None).map_err(|e| e.to_string())?;
    if default_vfs.is_null() {
        return Err("SQLite has no default VFS".to_owned());
    }
    // SAFETY: a non-NULL VFS from vfs_find stays registered and allocated.
    let default_size = unsafe { (*default_vfs).szOsFile };
    let router: &'static Router = Box::leak(Box::new(Router {
        default_vfs: default_vfs as usize,
        names: Mutex::new(HashMap::new()),
        last_error: Mutex::new(String::new()),
    }));
    let vfs = Box::leak(Box::new(ffi::sqlite3_vfs {
        iVersion: 1,
        // Files are opened by the namespace VFS (or the default VFS for a nameless temporary
        // file when no namespace is open): room for either.
        szOsFile: default_size.max(NvmeVfs::OS_FILE_BYTES as c_int),
        mxPathname: MAX_NAME as c_int,
        pNext: ptr::null_mut(),
        zName: VFS_NAME.as_ptr(),
        pAppData: router as *const Router as *mut c_void,
        xOpen: Some(x_open),
        xDelete: Some(x_delete),
        xAccess: Some(x_access),
        xFullPathname: Some(x_full_pathname),
        xDlOpen: None,
        xDlError: None,
        xDlSym: None,
        xDlClose: None,
        xRandomness: Some(x_randomness),
        xSleep: Some(x_sleep),
        xCurrentTime: Some(x_current_time),
        xGetLastError: Some(x_get_last_error),
        xCurrentTimeInt64: None,
        xSetSystemCall: None,
        xGetSystemCall: None,
        xNextSystemCall: None,
    }));
    // SAFETY: `vfs` is fully initialised and leaked with its name (a static) and app data.
    let rc = unsafe { api::vfs_register(vfs, false) }.map_err(|e| e.to_string())?;
    if rc != ffi::SQLITE_OK {
        return Err(format!("sqlite3_vfs_register(nvme) failed with code {rc}"));
    }
    Ok(())
}

/// Runs a callback body; a panic becomes `code` (it must not unwind into SQLite's frames).
fn guarded(code: c_int, f: impl FnOnce() -> c_int) -> c_int {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(code)
}

/// The router behind `vfs`.
///
/// # Safety
/// `vfs` must be the VFS [`register`] registered.
unsafe fn router_of<'a>(vfs: *mut ffi::sqlite3_vfs) -> &'a Router {
    // SAFETY: per the contract, pAppData is the leaked Router.
    unsafe { &*((*vfs).pAppData as *const Router) }
}

/// A NUL-terminated name from SQLite as UTF-8 (`None` for NULL or non-UTF-8).
///
/// # Safety
/// `name` must be NULL or NUL-terminated.
unsafe fn name_of<'a>(name: *const c_char) -> Option<&'a str> {
    if name.is_null() {
        return None;
    }
    // SAFETY: non-NULL and NUL-terminated per the contract.
    unsafe { CStr::from_ptr(name) }.to_str().ok()
}

unsafe extern "C" fn x_open(
    vfs: *mut ffi::sqlite3_vfs,
    name: ffi::sqlite3_filename,
    file: *mut ffi::sqlite3_file,
    flags: c_int,
    out_flags: *mut c_int,
) -> c_int {
    // SAFETY: `file` points to szOsFile writable bytes; NULL methods until a VFS opened it,
    // so SQLite will not call xClose on a failed open.
    unsafe { (*file).pMethods = ptr::null() };
    guarded(ffi::SQLITE_CANTOPEN, || {
        // SAFETY: SQLite calls the router's methods with the router.
        let router = unsafe { router_of(vfs) };
        // SAFETY: NULL or NUL-terminated.
        let target = match unsafe { name_of(name) } {
            None if name.is_null() => router
                .any()
                .unwrap_or(router.default_vfs as *mut ffi::sqlite3_vfs),
            None => return router.fail(ffi::SQLITE_CANTOPEN, "file name is not UTF-8".into()),
            Some(db) if flags & URI_NAMED != 0 => {
                // SAFETY: SQLite passed `name` to xOpen for a main database, journal or WAL:
                // the names that carry the URI parameters.
                let param = |key: &CStr| unsafe { api::uri_parameter(name, key) };
                let place = match Place::parse(
                    param(c"device"),
                    param(c"nsid"),
                    param(c"format"),
                    param(c"fua"),
                )
                .and_then(|p| p.with_irq(param(c"irq")))
                {
                    Ok(p) => p,
                    Err(e) => {
                        return router.fail(e.sqlite_code(), format!("`{db}`: {}", chain(&e)))
                    }
                };
                let inner = match namespaces::open(&place) {
                    Ok(v) => v,
                    Err(e) => {
                        return router.fail(e.sqlite_code(), format!("`{db}`: {}", chain(&e)))
                    }
                };
                if flags & ffi::SQLITE_OPEN_MAIN_DB != 0 {
                    let mut names = router.names.lock().unwrap_or_else(|e| e.into_inner());
                    names.insert(db.to_owned(), inner as usize);
                }
                inner
            }
            Some(other) => match router.route(other) {
                Some(v) => v,
                None => {
                    return router.fail(
                        ffi::SQLITE_CANTOPEN,
                        format!("`{other}` belongs to no database opened through the nvme VFS"),
                    )
                }
            },
        };
        // SAFETY: `target` is a live registered VFS (leaked); SQLite's own arguments are
        // forwarded, and `file` has room for its szOsFile (ours is the maximum).
        unsafe {
            match (*target).xOpen {
                Some(open) => open(target, name, file, flags, out_flags),
                None => ffi::SQLITE_CANTOPEN,
            }
        }
    })
}

unsafe extern "C" fn x_delete(
    vfs: *mut ffi::sqlite3_vfs,
    name: *const c_char,
    sync: c_int,
) -> c_int {
    guarded(ffi::SQLITE_IOERR_DELETE, || {
        // SAFETY: SQLite calls the router's methods with the router, and a NUL-terminated name.
        let (router, n) = unsafe { (router_of(vfs), name_of(name)) };
        match n.and_then(|n| router.route(n)) {
            // SAFETY: a live registered VFS; SQLite's arguments forwarded.
            Some(t) => unsafe {
                (*t).xDelete
                    .map_or(ffi::SQLITE_IOERR_DELETE, |f| f(t, name, sync))
            },
            None => ffi::SQLITE_IOERR_DELETE_NOENT,
        }
    })
}

unsafe extern "C" fn x_access(
    vfs: *mut ffi::sqlite3_vfs,
    name: *const c_char,
    flags: c_int,
    out: *mut c_int,
) -> c_int {
    guarded(ffi::SQLITE_IOERR_ACCESS, || {
        // SAFETY: SQLite calls the router's methods with the router, and a NUL-terminated name.
        let (router, n) = unsafe { (router_of(vfs), name_of(name)) };
        match n.and_then(|n| router.route(n)) {
            // SAFETY: a live registered VFS; SQLite's arguments forwarded.
            Some(t) => unsafe {
                (*t).xAccess
                    .map_or(ffi::SQLITE_IOERR_ACCESS, |f| f(t, name, flags, out))
            },
            None => {
                // Nothing opened under that name: it does not exist on any namespace we serve.
                // SAFETY: SQLite passes a writable int.
                unsafe { *out = 0 };
                ffi::SQLITE_OK
            }
        }
    })
}

unsafe extern "C" fn x_full_pathname(
    _vfs: *mut ffi::sqlite3_vfs,
    name: *const c_char,
    n_out: c_int,
    out: *mut c_char,
) -> c_int {
    guarded(ffi::SQLITE_CANTOPEN, || {
        // Names in a namespace's directory are flat: the full name is the name.
        // SAFETY: SQLite passes a NUL-terminated name.
        let bytes = unsafe { CStr::from_ptr(name) }.to_bytes_with_nul();
        if bytes.len() > n_out.max(0) as usize || bytes.len() > MAX_NAME + 1 {
            return ffi::SQLITE_CANTOPEN;
        }
        // SAFETY: `out` has room for n_out >= bytes.len() bytes; distinct buffers.
        unsafe { ptr::copy_nonoverlapping(bytes.as_ptr() as *const c_char, out, bytes.len()) };
        ffi::SQLITE_OK
    })
}

/// The default VFS behind the router.
///
/// # Safety
/// `vfs` must be the router.
unsafe fn default_of(vfs: *mut ffi::sqlite3_vfs) -> *mut ffi::sqlite3_vfs {
    // SAFETY: per the contract.
    unsafe { router_of(vfs) }.default_vfs as *mut ffi::sqlite3_vfs
}

unsafe extern "C" fn x_randomness(vfs: *mut ffi::sqlite3_vfs, n: c_int, out: *mut c_char) -> c_int {
    // SAFETY: the router; the default VFS is live; SQLite's arguments forwarded.
    unsafe {
        let d = default_of(vfs);
        (*d).xRandomness.map_or(0, |f| f(d, n, out))
    }
}

unsafe extern "C" fn x_sleep(vfs: *mut ffi::sqlite3_vfs, us: c_int) -> c_int {
    // SAFETY: the router; the default VFS is live; SQLite's arguments forwarded.
    unsafe {
        let d = default_of(vfs);
        (*d).xSleep.map_or(0, |f| f(d, us))
    }
}

unsafe extern "C" fn x_current_time(vfs: *mut ffi::sqlite3_vfs, out: *mut f64) -> c_int {
    // SAFETY: the router; the default VFS is live; SQLite's arguments forwarded.
    unsafe {
        let d = default_of(vfs);
        (*d).xCurrentTime.map_or(ffi::SQLITE_ERROR, |f| f(d, out))
    }
}

unsafe extern "C" fn x_get_last_error(
    vfs: *mut ffi::sqlite3_vfs,
    n: c_int,
    out: *mut c_char,
) -> c_int {
    guarded(0, || {
        // SAFETY: the router.
        let router = unsafe { router_of(vfs) };
        let msg = router
            .last_error
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let Ok(msg) = CString::new(msg) else { return 0 };
        let bytes = msg.as_bytes_with_nul();
        let len = bytes.len().min(n.max(0) as usize);
        if len > 0 {
            // SAFETY: `out` has room for n >= len bytes; the last byte copied is then a NUL.
            unsafe {
                ptr::copy_nonoverlapping(bytes.as_ptr() as *const c_char, out, len);
                *out.add(len - 1) = 0;
            }
        }
        0
    })
}

/// `e` and its causes joined with ": ".
fn chain(e: &dyn std::error::Error) -> String {
    nvme_sqlite_vfs::error_chain(e)
}
