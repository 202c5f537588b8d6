//! The SQLite functions the VFS calls, through one table.
//!
//! A Rust program links SQLite (rusqlite's bundled copy): [`NvmeVfs::register`] installs
//! [`Api::linked`]. A loadable extension (crates/sqlite-ext) must not call a linked SQLite:
//! it runs inside whichever SQLite loaded it, and reaches that SQLite only through the
//! `sqlite3_api_routines` table the loader passes to the entry point (SQLite's "Run-Time
//! Loadable Extensions", SQLITE_EXTENSION_INIT2). [`Api::from_routines`] reads the few slots
//! we need from that table; [`install`] makes it the process's table.
//!
//! Only [`Api::linked`] names the linked functions, and only [`NvmeVfs::register`] calls it:
//! an extension that never calls that function keeps no reference to the linked SQLite, so
//! the linker drops SQLite's code from the shared object (the extension's test checks its
//! symbol table).
//!
//! INVARIANT: the table is set once per process ([`OnceLock`]); a VFS is registered and
//! unregistered through the same table.
//!
//! [`NvmeVfs::register`]: crate::NvmeVfs::register

use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::OnceLock;

use rusqlite::ffi;

use crate::error::{Error, Result};

type VfsFind = unsafe extern "C" fn(*const c_char) -> *mut ffi::sqlite3_vfs;
type VfsRegister = unsafe extern "C" fn(*mut ffi::sqlite3_vfs, c_int) -> c_int;
type VfsUnregister = unsafe extern "C" fn(*mut ffi::sqlite3_vfs) -> c_int;
type UriParameter = unsafe extern "C" fn(*const c_char, *const c_char) -> *const c_char;
type Log = unsafe extern "C" fn(c_int, *const c_char, ...);
type Mprintf = unsafe extern "C" fn(*const c_char, ...) -> *mut c_char;
type LibversionNumber = unsafe extern "C" fn() -> c_int;

/// Slot numbers (pointer-sized, from 0) in `struct sqlite3_api_routines` of sqlite3ext.h.
/// The struct only grows at its end, so a slot keeps its number in every later SQLite.
mod slot {
    pub(super) const LIBVERSION_NUMBER: usize = 67;
    pub(super) const MPRINTF: usize = 69;
    pub(super) const VFS_FIND: usize = 141;
    pub(super) const VFS_REGISTER: usize = 142;
    pub(super) const VFS_UNREGISTER: usize = 143;
    pub(super) const LOG: usize = 167;
    pub(super) const URI_PARAMETER: usize = 189;
}

/// Oldest SQLite an extension accepts: 3.31.0, from which `sqlite3_uri_parameter` also works
/// on the journal and WAL names given to xOpen.
pub const MIN_LOADER_VERSION: c_int = 3_031_000;

/// The SQLite functions the VFS (and the extension) call.
#[derive(Clone, Copy, Debug)]
pub struct Api {
    vfs_find: VfsFind,
    vfs_register: VfsRegister,
    vfs_unregister: VfsUnregister,
    uri_parameter: UriParameter,
    log: Log,
    mprintf: Mprintf,
}

impl Api {
    /// The SQLite this program links (rusqlite's bundled copy).
    fn linked() -> Self {
        Self {
            vfs_find: ffi::sqlite3_vfs_find,
            vfs_register: ffi::sqlite3_vfs_register,
            vfs_unregister: ffi::sqlite3_vfs_unregister,
            uri_parameter: ffi::sqlite3_uri_parameter,
            log: ffi::sqlite3_log,
            mprintf: ffi::sqlite3_mprintf,
        }
    }

    /// The functions of the SQLite that loaded an extension, from the routines table it
    /// passed to the entry point. Fails ([`Error::Loader`]) when a slot is empty or that
    /// SQLite is older than [`MIN_LOADER_VERSION`].
    ///
    /// # Safety
    /// `routines` must be the `const sqlite3_api_routines*` SQLite passed to the extension's
    /// entry point (valid for the life of the process).
    pub unsafe fn from_routines(routines: *const c_void) -> Result<Self> {
        if routines.is_null() {
            return Err(Error::Loader("no sqlite3_api_routines table".to_owned()));
        }
        let table = routines as *const *const c_void;
        let get = |index: usize, name: &str| {
            // SAFETY: per the contract `table` is SQLite's routines struct, an array of
            // function pointers at least up to the slots of the version checked below (the
            // version slot is among the oldest).
            let p = unsafe { *table.add(index) };
            if p.is_null() {
                Err(Error::Loader(format!(
                    "the loader's sqlite3_{name} is missing"
                )))
            } else {
                Ok(p)
            }
        };
        let version = get(slot::LIBVERSION_NUMBER, "libversion_number")?;
        // SAFETY: slot LIBVERSION_NUMBER holds `int (*)(void)`.
        let version = unsafe { std::mem::transmute::<*const c_void, LibversionNumber>(version)() };
        if version < MIN_LOADER_VERSION {
            return Err(Error::Loader(format!(
                "SQLite {version} is too old: the nvme VFS needs {MIN_LOADER_VERSION} or later"
            )));
        }
        // SAFETY: each transmute below reads a slot that holds the function of that name, whose C
        // signature the target type spells (sqlite3ext.h).
        unsafe {
            Ok(Self {
                vfs_find: std::mem::transmute::<*const c_void, VfsFind>(get(
                    slot::VFS_FIND,
                    "vfs_find",
                )?),
                vfs_register: std::mem::transmute::<*const c_void, VfsRegister>(get(
                    slot::VFS_REGISTER,
                    "vfs_register",
                )?),
                vfs_unregister: std::mem::transmute::<*const c_void, VfsUnregister>(get(
                    slot::VFS_UNREGISTER,
                    "vfs_unregister",
                )?),
                uri_parameter: std::mem::transmute::<*const c_void, UriParameter>(get(
                    slot::URI_PARAMETER,
                    "uri_parameter",
                )?),
                log: std::mem::transmute::<*const c_void, Log>(get(slot::LOG, "log")?),
                mprintf: std::mem::transmute::<*const c_void, Mprintf>(get(
                    slot::MPRINTF,
                    "mprintf",
                )?),
            })
        }
    }
}

static API: OnceLock<Api> = OnceLock::new();

/// Makes `api` the process's SQLite table unless one is set; returns the one in force.
pub fn install(api: Api) -> &'static Api {
    API.get_or_init(|| api)
}

/// Installs the linked SQLite unless a table is set (for [`crate::NvmeVfs::register`]).
pub(crate) fn install_linked() {
    API.get_or_init(Api::linked);
}

/// The table in force: [`Error::Loader`] before any was installed.
fn get() -> Result<&'static Api> {
    API.get()
        .ok_or_else(|| Error::Loader("no SQLite API table installed".to_owned()))
}

/// `sqlite3_vfs_find`: the VFS named `name` (the default for `None`), or NULL.
pub fn vfs_find(name: Option<&CStr>) -> Result<*mut ffi::sqlite3_vfs> {
    let api = get()?;
    let name = name.map_or(std::ptr::null(), CStr::as_ptr);
    // SAFETY: NULL or a NUL-terminated name; find has no other preconditions (it initialises
    // SQLite if needed).
    Ok(unsafe { (api.vfs_find)(name) })
}

/// `sqlite3_vfs_register`.
///
/// # Safety
/// `vfs` must be a fully initialised `sqlite3_vfs` that, with its name and app data, lives
/// for the rest of the process.
pub unsafe fn vfs_register(vfs: *mut ffi::sqlite3_vfs, make_default: bool) -> Result<c_int> {
    let api = get()?;
    // SAFETY: per the contract.
    Ok(unsafe { (api.vfs_register)(vfs, c_int::from(make_default)) })
}

/// `sqlite3_vfs_unregister` (a NULL `vfs` is ignored by SQLite).
///
/// # Safety
/// `vfs` must be NULL or a pointer [`vfs_find`] returned.
pub(crate) unsafe fn vfs_unregister(vfs: *mut ffi::sqlite3_vfs) {
    if let Ok(api) = get() {
        // SAFETY: per the contract; unregistering frees nothing.
        unsafe { (api.vfs_unregister)(vfs) };
    }
}

/// `sqlite3_uri_parameter(name, key)`, as UTF-8 (`None`: absent or not UTF-8).
///
/// # Safety
/// `name` must be a file name SQLite passed to an xOpen method (main database, journal or
/// WAL: the names SQLite lays out with their URI parameters behind them).
pub unsafe fn uri_parameter<'a>(name: *const c_char, key: &CStr) -> Option<&'a str> {
    let api = get().ok()?;
    // SAFETY: per the contract; `key` is NUL-terminated.
    let value = unsafe { (api.uri_parameter)(name, key.as_ptr()) };
    if value.is_null() {
        return None;
    }
    // SAFETY: SQLite returns a NUL-terminated string inside `name`'s allocation, which
    // lives as long as the open file.
    unsafe { CStr::from_ptr(value) }.to_str().ok()
}

/// `sqlite3_log(code, "%s", message)`: SQLite's error log (the shell's `.log stderr`,
/// `SQLITE_CONFIG_LOG`). Nothing when no table is installed.
pub fn log(code: c_int, message: &str) {
    let Ok(api) = get() else {
        return;
    };
    let Ok(message) = std::ffi::CString::new(message.replace('\0', " ")) else {
        return;
    };
    // SAFETY: the format "%s" takes exactly the one NUL-terminated string passed.
    unsafe { (api.log)(code, c"%s".as_ptr(), message.as_ptr()) };
}

/// A copy of `message` in memory from `sqlite3_mprintf` (what SQLite frees with
/// `sqlite3_free`, e.g. an extension's `*pzErrMsg`); NULL when out of memory or no table is
/// installed.
pub fn sqlite_string(message: &str) -> *mut c_char {
    let Ok(api) = get() else {
        return std::ptr::null_mut();
    };
    let Ok(message) = std::ffi::CString::new(message.replace('\0', " ")) else {
        return std::ptr::null_mut();
    };
    // SAFETY: the format "%s" takes exactly the one NUL-terminated string passed.
    unsafe { (api.mprintf)(c"%s".as_ptr(), message.as_ptr()) }
}
