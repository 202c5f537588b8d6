//! The SQLite VFS over a [`Store`], through `rusqlite::ffi` (`sqlite3_vfs` version 1 with
//! `sqlite3_io_methods` version 2, i.e. with the shared-memory methods WAL mode needs).
//!
//! Memory model: SQLite allocates `szOsFile` bytes per open file and hands us the pointer;
//! we place a [`File`] there (`#[repr(C)]`, the `sqlite3_file` header first) whose `state`
//! owns a boxed [`FileState`]. The VFS-wide [`Shared`] state is leaked (`&'static`), as is the
//! `sqlite3_vfs` struct and its name, so a pointer SQLite holds never dangles; dropping
//! [`crate::NvmeVfs`] unregisters the VFS and takes the store away, after which any file still
//! open fails its I/O with `SQLITE_IOERR`.
//!
//! Locking: single process. The five SQLite lock levels and the eight WAL shared-memory locks
//! are tracked in process memory per file name, so several connections of one process
//! exclude each other correctly; another process using the same namespace is NOT excluded.
//! The WAL index (`-shm`) lives in heap memory, never on the namespace: SQLite rebuilds it
//! from the WAL when a database is opened.
//!
//! This file holds the VFS state, registration and the pointer helpers every callback starts
//! with; the callbacks are by concern: `vfs_methods.rs` (the `sqlite3_vfs` methods: open,
//! delete, access, ...), `io_methods.rs` (file I/O), `lock.rs` (file locks), `shm.rs` (WAL
//! shared memory).

use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use rusqlite::ffi;

use crate::dir::MAX_NAME;
use crate::error::{Error, Result};
use crate::store::Store;

mod io_methods;
mod lock;
mod shm;
mod vfs_methods;

pub mod api;

use lock::LockState;
use vfs_methods::{
    x_access, x_current_time, x_delete, x_full_pathname, x_get_last_error, x_open, x_randomness,
    x_sleep,
};

pub(crate) struct Inner {
    pub(crate) store: Option<Store>,
    locks: HashMap<String, LockState>,
    shm: HashMap<String, shm::Shm>,
    last_error: String,
    /// Set when the VFS broke: what panicked and the panic message (see [`crate::guard`]).
    panicked: Option<(&'static str, String)>,
}

impl Inner {
    /// The store, unless the VFS was dropped ([`Error::Closed`]) or broken by a panic
    /// ([`Error::Panicked`]).
    pub(crate) fn store_mut(&mut self) -> Result<&mut Store> {
        if let Some((callback, message)) = &self.panicked {
            return Err(Error::Panicked {
                callback,
                message: message.clone(),
            });
        }
        self.store.as_mut().ok_or(Error::Closed)
    }
}

/// State shared by every file of one VFS (leaked: lives as long as the process).
pub(crate) struct Shared {
    inner: Mutex<Inner>,
    next_id: AtomicU64,
    /// The default VFS (randomness, sleep, time are delegated to it), as an address.
    default_vfs: usize,
    sector_size: c_int,
    /// Without `BATCH_ATOMIC`, which `xDeviceCharacteristics` adds while the store offers
    /// it (`Store::batch_atomic`).
    characteristics: c_int,
    /// A panic broke the VFS (see [`crate::guard`]); the details are in [`Inner`].
    broken: AtomicBool,
}

impl Shared {
    /// The state. A thread that panicked while holding it (inside a callback, or in a
    /// closure given to [`crate::NvmeVfs::with_store`]) may have left it half-updated: the
    /// VFS is then broken.
    pub(crate) fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|poisoned| {
            let mut inner = poisoned.into_inner();
            self.set_broken(
                &mut inner,
                "holding the VFS state (NvmeVfs::with_store or a callback)",
                "a thread panicked while holding the VFS state".to_owned(),
            );
            inner
        })
    }

    /// Whether a panic broke the VFS.
    pub(crate) fn is_broken(&self) -> bool {
        self.broken.load(Ordering::Acquire)
    }

    /// Breaks the VFS: `callback` panicked with `message`.
    pub(crate) fn mark_broken(&self, callback: &'static str, message: String) {
        // Not through `lock`: record this panic, not the poisoning it caused.
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        self.set_broken(&mut inner, callback, message);
    }

    /// Breaks the VFS unless it is already (the first panic is the one reported).
    fn set_broken(&self, inner: &mut Inner, callback: &'static str, message: String) {
        self.broken.store(true, Ordering::Release);
        if inner.panicked.is_none() {
            inner.last_error = format!("{callback} panicked: {message}");
            inner.panicked = Some((callback, message));
        }
    }

    fn fail(&self, inner: &mut Inner, what: &str, e: &Error, code: c_int) -> c_int {
        let msg = format!("{what}: {}", crate::error_chain(e));
        if matches!(e, Error::BatchTooLarge { .. }) {
            // SQLite's planned fallback (it commits through its journal), not a failure.
            log::debug!("nvme-sqlite-vfs: {msg}");
        } else {
            log::error!("nvme-sqlite-vfs: {msg}");
        }
        inner.last_error = msg;
        match e {
            Error::NoSpace { .. } | Error::DirectoryFull(_) => ffi::SQLITE_FULL,
            _ => code,
        }
    }
}

enum Kind {
    /// A file in the store.
    Disk { name: String, delete_on_close: bool },
    /// A nameless temporary file: kept in memory.
    Mem(Vec<u8>),
}

struct FileState {
    shared: &'static Shared,
    id: u64,
    kind: Kind,
    lock: c_int,
    shm_mapped: bool,
    shm_shared: u8,
    shm_exclusive: u8,
}

/// What SQLite allocates per open file (`szOsFile` bytes).
#[repr(C)]
struct File {
    base: ffi::sqlite3_file,
    state: *mut FileState,
}

/// SQLite's device characteristics for a device with `block_size` blocks: `ATOMICnnn` for
/// every power of two from 512 up to the block size (one block is always written atomically:
/// NVMe's AWUPF is 0-based; a smaller aligned write is one read-modify-write of one block),
/// `SAFE_APPEND` (a file's length on the medium only changes in a directory write that
/// follows the flush of its data) and `POWERSAFE_OVERWRITE` (a write changes no byte outside
/// its range: a partial block is rewritten with its old contents, atomically), and
/// `BATCH_ATOMIC` when `batch` (the store's redo area takes batches, `crate::redo`).
pub(crate) fn characteristics(block_size: u32, batch: bool) -> c_int {
    let mut flags = ffi::SQLITE_IOCAP_SAFE_APPEND | ffi::SQLITE_IOCAP_POWERSAFE_OVERWRITE;
    if batch {
        flags |= ffi::SQLITE_IOCAP_BATCH_ATOMIC;
    }
    let atomic = [
        (512, ffi::SQLITE_IOCAP_ATOMIC512),
        (1024, ffi::SQLITE_IOCAP_ATOMIC1K),
        (2048, ffi::SQLITE_IOCAP_ATOMIC2K),
        (4096, ffi::SQLITE_IOCAP_ATOMIC4K),
        (8192, ffi::SQLITE_IOCAP_ATOMIC8K),
        (16384, ffi::SQLITE_IOCAP_ATOMIC16K),
        (32768, ffi::SQLITE_IOCAP_ATOMIC32K),
        (65536, ffi::SQLITE_IOCAP_ATOMIC64K),
    ];
    for (size, flag) in atomic {
        if size <= block_size {
            flags |= flag;
        }
    }
    flags
}

/// Bytes SQLite allocates per open file of this VFS (its `szOsFile`).
pub(crate) const OS_FILE_BYTES: usize = std::mem::size_of::<File>();

/// Registers a VFS named `name` over `store`, through the installed [`api`] table; returns
/// the leaked state and the registered `sqlite3_vfs`.
pub(crate) fn register(
    name: &str,
    store: Store,
) -> Result<(&'static Shared, *mut ffi::sqlite3_vfs)> {
    let c_name = CString::new(name).map_err(|_| Error::BadName(name.to_owned()))?;
    let default_vfs = api::vfs_find(None)?;
    if default_vfs.is_null() {
        return Err(Error::Register {
            name: name.to_owned(),
            code: ffi::SQLITE_ERROR,
        });
    }
    let bs = store.layout().block_size;
    let shared: &'static Shared = Box::leak(Box::new(Shared {
        inner: Mutex::new(Inner {
            store: Some(store),
            locks: HashMap::new(),
            shm: HashMap::new(),
            last_error: String::new(),
            panicked: None,
        }),
        next_id: AtomicU64::new(1),
        default_vfs: default_vfs as usize,
        sector_size: bs as c_int,
        characteristics: characteristics(bs, false),
        broken: AtomicBool::new(false),
    }));
    let c_name: &'static CStr = Box::leak(c_name.into_boxed_c_str());
    let vfs = Box::leak(Box::new(ffi::sqlite3_vfs {
        iVersion: 1,
        szOsFile: OS_FILE_BYTES as c_int,
        mxPathname: MAX_NAME as c_int,
        pNext: ptr::null_mut(),
        zName: c_name.as_ptr(),
        pAppData: shared as *const Shared as *mut c_void,
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
    // SAFETY: `vfs` is a fully initialised sqlite3_vfs with 'static lifetime (leaked), its
    // name and app data are leaked too, so SQLite may keep the pointer forever.
    let rc = unsafe { api::vfs_register(vfs, false)? };
    if rc != ffi::SQLITE_OK {
        return Err(Error::Register {
            name: name.to_owned(),
            code: rc,
        });
    }
    Ok((shared, vfs))
}

/// Unregisters the VFS named `name` (the struct stays allocated: open files keep pointing
/// at it).
pub(crate) fn unregister(name: &str) {
    let Ok(c_name) = CString::new(name) else {
        return;
    };
    let Ok(vfs) = api::vfs_find(Some(&c_name)) else {
        return;
    };
    if !vfs.is_null() {
        // SAFETY: a pointer find returned; the struct is leaked, so no memory is freed.
        unsafe { api::vfs_unregister(vfs) };
    }
}

/// The VFS state behind `vfs`.
///
/// # Safety
/// `vfs` must be a VFS registered by [`register`].
unsafe fn shared_of(vfs: *mut ffi::sqlite3_vfs) -> &'static Shared {
    // SAFETY: per the contract, pAppData is the leaked `Shared` set in `register`.
    unsafe { &*((*vfs).pAppData as *const Shared) }
}

/// The state of an open file.
///
/// # Safety
/// `file` must be a file opened by [`x_open`] and not yet closed, and the caller must not
/// hold another reference to its state (SQLite never calls one file's methods concurrently).
unsafe fn state<'a>(file: *mut ffi::sqlite3_file) -> &'a mut FileState {
    // SAFETY: x_open placed a `File` at `file` with a valid boxed state pointer, which lives
    // until x_close.
    unsafe { &mut *(*(file as *mut File)).state }
}

/// A NUL-terminated name from SQLite, as UTF-8.
///
/// # Safety
/// `name` must be NULL or point to a NUL-terminated string.
unsafe fn name_of<'a>(name: *const c_char) -> Option<&'a str> {
    if name.is_null() {
        return None;
    }
    // SAFETY: non-NULL and NUL-terminated per the contract.
    unsafe { CStr::from_ptr(name) }.to_str().ok()
}
