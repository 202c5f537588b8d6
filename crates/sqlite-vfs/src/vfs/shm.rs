//! SQLite's shared memory (the WAL index, `-shm`) for the VFS: heap regions per database
//! name, never on the namespace (SQLite rebuilds the index from the WAL when a database is
//! opened), and the eight WAL locks, tracked in process memory like the file locks.

use std::ffi::{c_int, c_void};
use std::ptr::{self, NonNull};
use std::sync::atomic::Ordering;

use rusqlite::ffi;

use super::{state, FileState, Kind};
use crate::guard::Callback;

/// One region of heap shared memory.
struct ShmRegion {
    ptr: NonNull<u8>,
    layout: std::alloc::Layout,
}

// SAFETY: the region is plain heap memory owned by this value; SQLite synchronises access to
// its contents with xShmLock/xShmBarrier, and we only allocate and free it under the mutex.
unsafe impl Send for ShmRegion {}

impl Drop for ShmRegion {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from `alloc_zeroed(self.layout)` and is freed exactly once, here.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

/// The WAL index of one database.
#[derive(Default)]
pub(super) struct Shm {
    regions: Vec<ShmRegion>,
    refs: u32,
    shared: [u32; ffi::SQLITE_SHM_NLOCK as usize],
    exclusive: [Option<u64>; ffi::SQLITE_SHM_NLOCK as usize],
}

pub(super) unsafe extern "C" fn x_shm_map(
    file: *mut ffi::sqlite3_file,
    region: c_int,
    size: c_int,
    extend: c_int,
    out: *mut *mut c_void,
) -> c_int {
    // SAFETY: an open file of ours; SQLite passes a valid out pointer.
    let st = unsafe { state(file) };
    // SAFETY: as above.
    unsafe { *out = ptr::null_mut() };
    Callback::refuse("xShmMap", ffi::SQLITE_IOERR_SHMMAP).run(st.shared, || {
        let Kind::Disk { name, .. } = &st.kind else {
            return ffi::SQLITE_IOERR_SHMMAP;
        };
        let (Ok(region), Ok(size)) = (usize::try_from(region), usize::try_from(size)) else {
            return ffi::SQLITE_IOERR_SHMMAP;
        };
        let Ok(layout) = std::alloc::Layout::from_size_align(size.max(1), 8) else {
            return ffi::SQLITE_IOERR_SHMMAP;
        };
        let mut inner = st.shared.lock();
        let shm = inner.shm.entry(name.clone()).or_default();
        if !st.shm_mapped {
            shm.refs += 1;
            st.shm_mapped = true;
        }
        while shm.regions.len() <= region {
            if extend == 0 {
                return ffi::SQLITE_OK;
            }
            // SAFETY: `layout` has a non-zero size.
            let p = unsafe { std::alloc::alloc_zeroed(layout) };
            let Some(ptr) = NonNull::new(p) else {
                return ffi::SQLITE_NOMEM;
            };
            shm.regions.push(ShmRegion { ptr, layout });
        }
        if shm.regions[region].layout.size() < size {
            return ffi::SQLITE_IOERR_SHMMAP;
        }
        // SAFETY: valid out pointer; the region lives until the last handle unmaps.
        unsafe { *out = shm.regions[region].ptr.as_ptr() as *mut c_void };
        ffi::SQLITE_OK
    })
}

pub(super) unsafe extern "C" fn x_shm_lock(
    file: *mut ffi::sqlite3_file,
    offset: c_int,
    n: c_int,
    flags: c_int,
) -> c_int {
    // SAFETY: an open file of ours.
    let st = unsafe { state(file) };
    Callback::refuse("xShmLock", ffi::SQLITE_IOERR_SHMLOCK).run(st.shared, || {
        let Kind::Disk { name, .. } = &st.kind else {
            return ffi::SQLITE_IOERR_SHMLOCK;
        };
        let nlock = ffi::SQLITE_SHM_NLOCK;
        if offset < 0 || n < 1 || offset + n > nlock {
            return ffi::SQLITE_IOERR_SHMLOCK;
        }
        let range = offset as usize..(offset + n) as usize;
        let id = st.id;
        let mut inner = st.shared.lock();
        let shm = inner.shm.entry(name.clone()).or_default();
        if flags & ffi::SQLITE_SHM_UNLOCK != 0 {
            for s in range {
                let bit = 1u8 << s;
                if st.shm_shared & bit != 0 {
                    shm.shared[s] = shm.shared[s].saturating_sub(1);
                    st.shm_shared &= !bit;
                }
                if st.shm_exclusive & bit != 0 {
                    shm.exclusive[s] = None;
                    st.shm_exclusive &= !bit;
                }
            }
            return ffi::SQLITE_OK;
        }
        let exclusive = flags & ffi::SQLITE_SHM_EXCLUSIVE != 0;
        for s in range.clone() {
            if shm.exclusive[s].is_some_and(|o| o != id) {
                return ffi::SQLITE_BUSY;
            }
            let mine = u32::from(st.shm_shared & (1 << s) != 0);
            if exclusive && shm.shared[s] > mine {
                return ffi::SQLITE_BUSY;
            }
        }
        for s in range {
            let bit = 1u8 << s;
            if exclusive {
                shm.exclusive[s] = Some(id);
                st.shm_exclusive |= bit;
            } else if st.shm_shared & bit == 0 {
                shm.shared[s] += 1;
                st.shm_shared |= bit;
            }
        }
        ffi::SQLITE_OK
    })
}

pub(super) unsafe extern "C" fn x_shm_barrier(file: *mut ffi::sqlite3_file) {
    // SAFETY: an open file of ours.
    let shared = unsafe { state(file) }.shared;
    Callback::run_always("xShmBarrier", ()).run(shared, || {
        std::sync::atomic::fence(Ordering::SeqCst);
    })
}

/// Releases the shared-memory locks and mapping of `st`.
pub(super) fn release(st: &mut FileState, unmap: bool) {
    let Kind::Disk { name, .. } = &st.kind else {
        return;
    };
    if !st.shm_mapped {
        return;
    }
    let mut inner = st.shared.lock();
    if let Some(shm) = inner.shm.get_mut(name) {
        for s in 0..ffi::SQLITE_SHM_NLOCK as usize {
            let bit = 1u8 << s;
            if st.shm_shared & bit != 0 {
                shm.shared[s] = shm.shared[s].saturating_sub(1);
            }
            if st.shm_exclusive & bit != 0 {
                shm.exclusive[s] = None;
            }
        }
        st.shm_shared = 0;
        st.shm_exclusive = 0;
        if unmap {
            shm.refs = shm.refs.saturating_sub(1);
            st.shm_mapped = false;
            if shm.refs == 0 {
                inner.shm.remove(name);
            }
        }
    }
}

pub(super) unsafe extern "C" fn x_shm_unmap(file: *mut ffi::sqlite3_file, _delete: c_int) -> c_int {
    // SAFETY: an open file of ours.
    let st = unsafe { state(file) };
    Callback::run_always("xShmUnmap", ffi::SQLITE_IOERR).run(st.shared, || {
        release(st, true);
        ffi::SQLITE_OK
    })
}
