//! DMA buffer handles: `struct nvme_buf` and its states (idle, in flight, detached).
//!
//! INVARIANT: a handle's `DmaBuffer` is in the handle only while it is idle; submitting moves
//! it into the queue pair and [`restore`] puts it back when the request's completion is
//! delivered (or marks the handle detached when the driver keeps the memory). `ptr` and `len`
//! never change, so C may keep the address for the buffer's life.

use std::ffi::{c_int, c_void};
use std::ptr;

use nvme_driver::DmaBuffer;

use crate::boundary::{fail, fail_with, guard};
use crate::controller::nvme_ctrlr;
use crate::errors::*;

/// Where a buffer handle's memory is.
pub(crate) enum BufState {
    /// Owned by the handle: the application may read and write it and submit it.
    Idle(DmaBuffer),
    /// Moved into a queue pair for a request whose callback has not run yet.
    InFlight,
    /// Kept by a queue pair because the device may still access it (a timed-out request, or
    /// a queue pair destroyed with the request outstanding). The memory is released by the
    /// driver once no command can reach it; the handle can only be freed.
    Detached,
}

/// A DMA-capable I/O buffer allocated for one controller. Not thread-safe: one thread at a
/// time may use it (it may move between threads).
pub struct nvme_buf {
    pub(crate) state: BufState,
    pub(crate) ptr: *mut u8,
    pub(crate) len: usize,
}

/// Allocates a zero-filled DMA buffer of at least `len` bytes (rounded up to whole 4 KiB
/// pages) for I/O on `ctrlr` and its queue pairs, and stores its handle in `*out`.
///
/// # Safety
/// `ctrlr` is NULL or an open controller handle; `out` is NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvme_buf_alloc(
    ctrlr: *const nvme_ctrlr,
    len: usize,
    out: *mut *mut nvme_buf,
) -> c_int {
    guard("nvme_buf_alloc", || {
        check_null!("nvme_buf_alloc", ctrlr, out);
        if len == 0 {
            return fail(
                NVME_ERR_INVALID_ARGUMENT,
                "nvme_buf_alloc: length 0: allocate at least one byte",
            );
        }
        // SAFETY: `ctrlr` is a live handle (caller contract).
        let ctrl = unsafe { &(&*ctrlr).shared.ctrl };
        // SAFETY: `out` is non-null and valid for a write (caller contract).
        unsafe { publish_buf(ctrl.alloc_buffer(len), out) }
    })
}

/// Frees a buffer handle and (unless the driver still holds it, see `nvme_buf_in_flight`)
/// its memory. Fails with `NVME_ERR_BUFFER_IN_FLIGHT`, freeing nothing, while a request
/// using the buffer has not completed. Freeing NULL does nothing.
///
/// # Safety
/// `buf` is NULL or a live handle from `nvme_buf_alloc`; after `NVME_OK` it must not be used.
#[no_mangle]
pub unsafe extern "C" fn nvme_buf_free(buf: *mut nvme_buf) -> c_int {
    guard("nvme_buf_free", || {
        if buf.is_null() {
            return NVME_OK;
        }
        // SAFETY: `buf` is a live handle used by this thread only (caller contract).
        if matches!(unsafe { &(*buf).state }, BufState::InFlight) {
            return fail(
                NVME_ERR_BUFFER_IN_FLIGHT,
                "nvme_buf_free: the buffer is in flight: wait for its request's callback",
            );
        }
        // SAFETY: `buf` came from Box::into_raw; not in flight, so no request refers to it.
        drop(unsafe { Box::from_raw(buf) });
        NVME_OK
    })
}

/// Splits the idle buffer `buf` at byte `at` (0 < `at` < its length): `buf` keeps its first
/// `at` bytes and `*tail` gets a new handle for the rest. The pieces are independent buffers
/// of the same controller or context, each submitted and freed on its own (the memory goes
/// when the last piece is freed), so one allocation (one mapping, one IOMMU entry) can be
/// carved into one buffer per request, e.g. an fio job's `iodepth` buffers. A piece that does
/// not start on a dword boundary is refused at submission on PCIe (PRP data pointers are
/// dword-aligned, NVMe Base 2.0 §4.1.1).
///
/// # Safety
/// `buf` is NULL or a live buffer handle used only by the calling thread; `tail` is NULL or
/// valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvme_buf_split(
    buf: *mut nvme_buf,
    at: usize,
    tail: *mut *mut nvme_buf,
) -> c_int {
    guard("nvme_buf_split", || {
        check_null!("nvme_buf_split", buf, tail);
        // SAFETY: `buf` is a live handle used by this thread only (caller contract).
        let handle = unsafe { &mut *buf };
        let BufState::Idle(whole) = std::mem::replace(&mut handle.state, BufState::InFlight) else {
            return fail(
                NVME_ERR_BUFFER_IN_FLIGHT,
                "nvme_buf_split: the buffer is in flight: wait for its request's callback",
            );
        };
        if at == 0 || at >= whole.len() {
            let len = whole.len();
            handle.state = BufState::Idle(whole);
            return fail(
                NVME_ERR_INVALID_ARGUMENT,
                format!("nvme_buf_split: split point {at} is not inside the {len}-byte buffer"),
            );
        }
        match whole.split_at(at) {
            Ok((head, rest)) => {
                handle.len = head.len();
                handle.state = BufState::Idle(head);
                // SAFETY: `tail` is non-null and valid for a write (caller contract).
                unsafe { publish_buf(Ok(rest), tail) }
            }
            Err(whole) => {
                handle.state = BufState::Idle(whole);
                fail(
                    NVME_ERR_INVALID_ARGUMENT,
                    "nvme_buf_split: split point out of range",
                )
            }
        }
    })
}

/// Address of the buffer's first byte (NULL when `buf` is NULL). The address does not change
/// during the buffer's life. Do not touch the bytes while the buffer is in flight.
///
/// # Safety
/// `buf` is NULL or a live buffer handle.
#[no_mangle]
pub unsafe extern "C" fn nvme_buf_ptr(buf: *const nvme_buf) -> *mut c_void {
    if buf.is_null() {
        return ptr::null_mut();
    }
    // SAFETY: `buf` is a live handle (caller contract).
    unsafe { (*buf).ptr.cast() }
}

/// Usable length of the buffer in bytes (0 when `buf` is NULL).
///
/// # Safety
/// `buf` is NULL or a live buffer handle.
#[no_mangle]
pub unsafe extern "C" fn nvme_buf_len(buf: *const nvme_buf) -> usize {
    if buf.is_null() {
        return 0;
    }
    // SAFETY: `buf` is a live handle (caller contract).
    unsafe { (*buf).len }
}

/// True while the buffer belongs to the driver: between a successful submission and the
/// request's callback, and for good after a request on it timed out (the handle can then
/// only be freed). False for NULL.
///
/// # Safety
/// `buf` is NULL or a live buffer handle.
#[no_mangle]
pub unsafe extern "C" fn nvme_buf_in_flight(buf: *const nvme_buf) -> bool {
    if buf.is_null() {
        return false;
    }
    // SAFETY: `buf` is a live handle used by this thread only (caller contract).
    !matches!(unsafe { &(*buf).state }, BufState::Idle(_))
}

/// Hands a freshly allocated buffer to C as a new `nvme_buf` handle in `*out` (idle), or
/// records the allocation error. Shared by `nvme_buf_alloc` and `nvme_buf_alloc_in`.
///
/// # Safety
/// `out` is non-null and valid for a write.
pub(crate) unsafe fn publish_buf(
    allocated: nvme_driver::Result<DmaBuffer>,
    out: *mut *mut nvme_buf,
) -> c_int {
    match allocated {
        Ok(mut buf) => {
            let handle = Box::new(nvme_buf {
                ptr: buf.as_mut_ptr(),
                len: buf.len(),
                state: BufState::Idle(buf),
            });
            // SAFETY: `out` is non-null and valid for a write (this function's contract).
            unsafe { *out = Box::into_raw(handle) };
            NVME_OK
        }
        Err(e) => fail_with(&e),
    }
}

/// Puts a buffer back into its handle after a request.
///
/// # Safety
/// `buf` is a live buffer handle no one else accesses now.
pub(crate) unsafe fn restore(buf: *mut nvme_buf, buffer: Option<DmaBuffer>) {
    // SAFETY: caller contract.
    unsafe {
        (*buf).state = match buffer {
            Some(b) => BufState::Idle(b),
            None => BufState::Detached,
        }
    };
}
