//! The NVMe SQLite VFS as a SQLite loadable extension, `libnvme_sqlite.so`, for programs that
//! were not built against this project: the `sqlite3` shell (`.load`), Python's `sqlite3`
//! module (`enable_load_extension` / `load_extension`), anything that calls
//! `sqlite3_load_extension`.
//!
//! Loading registers a VFS named `nvme` (never the default: every other database of the
//! program keeps its VFS) and keeps it registered after the loading connection closes
//! (`SQLITE_OK_LOAD_PERMANENTLY`). A database names its namespace in its URI:
//! `file:app.db?vfs=nvme&device=0000:01:00.0&nsid=1` (device strings as the tools take them,
//! parsed by `nvme_device::parse_target`: a PCI address, a PCIe or NVMe/TCP transport id, or
//! `sim` in a build with the `emulator` feature), plus `format=ifblank` to write an empty
//! store on a namespace that holds none, and `fua=off` for Write + Flush at every barrier
//! (no FUA writes; `nvme-sqlite --no-fua`), and `irq=on` to open the controller with MSI-X
//! interrupts so the VFS's waits block instead of spinning (`nvme-sqlite --irq`). See [`router`] and [`namespaces`], and
//! `docs/sqlite.md` ("From unmodified programs").
//!
//! No SQLite inside: every SQLite function is called through the `sqlite3_api_routines`
//! table the loader passes to the entry point (`nvme_sqlite_vfs::api`), never a linked
//! symbol, so the shared object carries no copy of SQLite (tests/load.rs checks its symbols)
//! and works with whichever SQLite (3.31 or later) loads it.

#![deny(missing_docs)]

use std::ffi::{c_char, c_int, c_void};
use std::panic::catch_unwind;
use std::sync::OnceLock;

use nvme_sqlite_vfs::api;
use rusqlite::ffi;

pub mod namespaces;
pub mod router;

/// The entry point SQLite derives from the file name `libnvme_sqlite.so` (the letters after
/// `lib` up to the first dot, lower case: `sqlite3_` + `nvmesqlite` + `_init`).
///
/// # Safety
/// Called by SQLite's extension loader only: `routines` is its `sqlite3_api_routines`
/// table and `err_msg` NULL or a place for an error message.
#[no_mangle]
pub unsafe extern "C" fn sqlite3_nvmesqlite_init(
    db: *mut c_void,
    err_msg: *mut *mut c_char,
    routines: *const c_void,
) -> c_int {
    // SAFETY: the same contract.
    unsafe { sqlite3_extension_init(db, err_msg, routines) }
}

/// The generic entry point (`.load libnvme_sqlite.so sqlite3_extension_init`, or a copy of
/// the file under another name): registers the `nvme` VFS once per process.
///
/// # Safety
/// As [`sqlite3_nvmesqlite_init`].
#[no_mangle]
pub unsafe extern "C" fn sqlite3_extension_init(
    _db: *mut c_void,
    err_msg: *mut *mut c_char,
    routines: *const c_void,
) -> c_int {
    let result = catch_unwind(|| {
        // SAFETY: `routines` is the loader's table, per the contract.
        load(unsafe { api::Api::from_routines(routines) })
    })
    .unwrap_or_else(|_| Err("a panic while registering the nvme VFS".to_owned()));
    match result {
        Ok(()) => ffi::SQLITE_OK_LOAD_PERMANENTLY,
        Err(message) => {
            if !err_msg.is_null() {
                // SAFETY: SQLite gives a writable pointer slot and frees what we store there
                // with sqlite3_free (the string comes from its sqlite3_mprintf).
                unsafe { *err_msg = api::sqlite_string(&format!("nvme VFS: {message}")) };
            }
            ffi::SQLITE_ERROR
        }
    }
}

/// Installs the loader's table and registers the router (both once per process: a second
/// load, e.g. from another connection, finds them in place).
fn load(table: nvme_sqlite_vfs::Result<api::Api>) -> Result<(), String> {
    static REGISTERED: OnceLock<Result<(), String>> = OnceLock::new();
    let table = table.map_err(|e| e.to_string())?;
    api::install(table);
    REGISTERED.get_or_init(router::register).clone()
}
