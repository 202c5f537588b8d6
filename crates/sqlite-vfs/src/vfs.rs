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

use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use rusqlite::ffi;

use crate::dir::MAX_NAME;
use crate::error::{Error, Result};
use crate::guard::Callback;
use crate::store::Store;

mod shm;

/// Per-name lock state (SQLite's five levels, in process).
#[derive(Debug, Default)]
struct LockState {
    shared: u32,
    reserved: Option<u64>,
    pending: Option<u64>,
    exclusive: Option<u64>,
}

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
        log::error!("nvme-sqlite-vfs: {msg}");
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

static IO_METHODS: ffi::sqlite3_io_methods = ffi::sqlite3_io_methods {
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

/// SQLite's device characteristics for a device with `block_size` blocks: `ATOMICnnn` for
/// every power of two from 512 up to the block size (one block is always written atomically:
/// NVMe's AWUPF is 0-based; a smaller aligned write is one read-modify-write of one block),
/// `SAFE_APPEND` (a file's length on the medium only changes in a directory write that
/// follows the flush of its data) and `POWERSAFE_OVERWRITE` (a write changes no byte outside
/// its range: a partial block is rewritten with its old contents, atomically).
pub(crate) fn characteristics(block_size: u32) -> c_int {
    let mut flags = ffi::SQLITE_IOCAP_SAFE_APPEND | ffi::SQLITE_IOCAP_POWERSAFE_OVERWRITE;
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

/// Registers a VFS named `name` over `store`; returns the leaked state.
pub(crate) fn register(name: &str, store: Store) -> Result<&'static Shared> {
    let c_name = CString::new(name).map_err(|_| Error::BadName(name.to_owned()))?;
    // SAFETY: sqlite3_vfs_find with NULL returns the default VFS (or NULL); it initialises
    // SQLite if needed and has no other preconditions.
    let default_vfs = unsafe { ffi::sqlite3_vfs_find(ptr::null()) };
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
        characteristics: characteristics(bs),
        broken: AtomicBool::new(false),
    }));
    let c_name: &'static CStr = Box::leak(c_name.into_boxed_c_str());
    let vfs = Box::leak(Box::new(ffi::sqlite3_vfs {
        iVersion: 1,
        szOsFile: std::mem::size_of::<File>() as c_int,
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
    let rc = unsafe { ffi::sqlite3_vfs_register(vfs, 0) };
    if rc != ffi::SQLITE_OK {
        return Err(Error::Register {
            name: name.to_owned(),
            code: rc,
        });
    }
    Ok(shared)
}

/// Unregisters the VFS named `name` (the struct stays allocated: open files keep pointing
/// at it).
pub(crate) fn unregister(name: &str) {
    let Ok(c_name) = CString::new(name) else {
        return;
    };
    // SAFETY: find takes a NUL-terminated name; unregister takes a pointer find returned
    // (or NULL, which it ignores). The struct is leaked, so no memory is freed.
    unsafe {
        let vfs = ffi::sqlite3_vfs_find(c_name.as_ptr());
        if !vfs.is_null() {
            ffi::sqlite3_vfs_unregister(vfs);
        }
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

unsafe extern "C" fn x_open(
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

unsafe extern "C" fn x_delete(
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

unsafe extern "C" fn x_access(
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

unsafe extern "C" fn x_full_pathname(
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

unsafe extern "C" fn x_randomness(vfs: *mut ffi::sqlite3_vfs, n: c_int, out: *mut c_char) -> c_int {
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

unsafe extern "C" fn x_sleep(vfs: *mut ffi::sqlite3_vfs, micros: c_int) -> c_int {
    // SAFETY: SQLite calls the VFS methods on our registered VFS only.
    let shared = unsafe { shared_of(vfs) };
    Callback::run_always("xSleep", 0).run(shared, || {
        std::thread::sleep(std::time::Duration::from_micros(micros.max(0) as u64));
        micros
    })
}

unsafe extern "C" fn x_current_time(vfs: *mut ffi::sqlite3_vfs, out: *mut f64) -> c_int {
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

unsafe extern "C" fn x_get_last_error(
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

unsafe extern "C" fn x_lock(file: *mut ffi::sqlite3_file, level: c_int) -> c_int {
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
fn unlock_to(st: &mut FileState, level: c_int) {
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

unsafe extern "C" fn x_unlock(file: *mut ffi::sqlite3_file, level: c_int) -> c_int {
    // SAFETY: an open file of ours.
    let st = unsafe { state(file) };
    Callback::run_always("xUnlock", ffi::SQLITE_IOERR_UNLOCK).run(st.shared, || {
        unlock_to(st, level);
        ffi::SQLITE_OK
    })
}

unsafe extern "C" fn x_check_reserved_lock(file: *mut ffi::sqlite3_file, out: *mut c_int) -> c_int {
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

unsafe extern "C" fn x_file_control(
    file: *mut ffi::sqlite3_file,
    _op: c_int,
    _arg: *mut c_void,
) -> c_int {
    // SAFETY: an open file of ours.
    let shared = unsafe { state(file) }.shared;
    Callback::run_always("xFileControl", ffi::SQLITE_NOTFOUND).run(shared, || ffi::SQLITE_NOTFOUND)
}

unsafe extern "C" fn x_sector_size(file: *mut ffi::sqlite3_file) -> c_int {
    // SAFETY: an open file of ours.
    let shared = unsafe { state(file) }.shared;
    Callback::run_always("xSectorSize", 0).run(shared, || shared.sector_size)
}

unsafe extern "C" fn x_device_characteristics(file: *mut ffi::sqlite3_file) -> c_int {
    // SAFETY: an open file of ours.
    let shared = unsafe { state(file) }.shared;
    Callback::run_always("xDeviceCharacteristics", 0).run(shared, || shared.characteristics)
}
