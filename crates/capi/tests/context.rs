//! DMA contexts through the C API (emulated): two controllers in one context share one
//! buffer pool; a buffer of another context is refused and stays the caller's.

use std::ffi::c_void;
use std::ptr;

use nvme_userspace::*;

mod common;
use common::{last_error, record, Seen};

/// Submits through `submit`, polls `qp` until the callback ran, and returns its error code.
fn complete(qp: *mut nvme_qpair, submit: impl FnOnce(*mut c_void) -> i32) -> i32 {
    let seen = Seen::default();
    let arg = (&seen as *const Seen).cast_mut().cast();
    assert_eq!(submit(arg), NVME_OK, "{}", last_error());
    common::poll_until(qp, &seen, 1)
}

fn bytes<'a>(buf: *mut nvme_buf) -> &'a mut [u8] {
    // SAFETY: a live idle buffer handle; the slice is used while no request holds it.
    unsafe { std::slice::from_raw_parts_mut(nvme_buf_ptr(buf).cast::<u8>(), nvme_buf_len(buf)) }
}

#[test]
fn two_controllers_in_one_context_share_a_buffer() {
    // SAFETY: every handle below is created, used on this thread and released once.
    unsafe {
        let mut ctx = ptr::null_mut();
        assert_eq!(nvme_dma_context_create_emulated(&mut ctx), NVME_OK);
        let (mut a, mut b) = (ptr::null_mut(), ptr::null_mut());
        assert_eq!(nvme_ctrlr_open_emulated_in(ctx, &mut a), NVME_OK);
        assert_eq!(nvme_ctrlr_open_emulated_in(ctx, &mut b), NVME_OK);
        let (mut qa, mut qb) = (ptr::null_mut(), ptr::null_mut());
        assert_eq!(nvme_qpair_create(a, 8, 5000, &mut qa), NVME_OK);
        assert_eq!(nvme_qpair_create(b, 8, 5000, &mut qb), NVME_OK);

        let mut buf = ptr::null_mut();
        assert_eq!(nvme_buf_alloc_in(ctx, 4096, &mut buf), NVME_OK);
        for (i, x) in bytes(buf).iter_mut().enumerate() {
            *x = (i % 251) as u8;
        }
        let data = bytes(buf).to_vec();
        // Write on A, read back on A into the same buffer, write it on B, read B back.
        let r = complete(qa, |arg| {
            nvme_qpair_submit_write(qa, 2, 5, 1, buf, 0, Some(record), arg)
        });
        assert_eq!(r, NVME_OK);
        bytes(buf).fill(0);
        let r = complete(qa, |arg| {
            nvme_qpair_submit_read(qa, 2, 5, 1, buf, Some(record), arg)
        });
        assert_eq!(r, NVME_OK);
        assert_eq!(bytes(buf), &data[..]);
        let r = complete(qb, |arg| {
            nvme_qpair_submit_write(qb, 2, 9, 1, buf, 0, Some(record), arg)
        });
        assert_eq!(r, NVME_OK);
        let mut other = ptr::null_mut();
        assert_eq!(nvme_buf_alloc(a, 4096, &mut other), NVME_OK); // A's buffer: same context
        let r = complete(qb, |arg| {
            nvme_qpair_submit_read(qb, 2, 9, 1, other, Some(record), arg)
        });
        assert_eq!(r, NVME_OK);
        assert_eq!(
            bytes(other),
            &data[..],
            "B read back what A's buffer carried"
        );

        // A controller outside the context refuses the context's buffer.
        let mut c = ptr::null_mut();
        assert_eq!(nvme_ctrlr_open_emulated(&mut c), NVME_OK);
        let mut qc = ptr::null_mut();
        assert_eq!(nvme_qpair_create(c, 8, 5000, &mut qc), NVME_OK);
        let seen = Seen::default();
        let arg = (&seen as *const Seen).cast_mut().cast();
        assert_eq!(
            nvme_qpair_submit_write(qc, 2, 0, 1, buf, 0, Some(record), arg),
            NVME_ERR_FOREIGN_BUFFER
        );
        assert!(last_error().contains("DmaContext"), "{}", last_error());
        assert!(!nvme_buf_in_flight(buf));
        assert_eq!(seen.calls.get(), 0);

        // A VFIO context cannot start emulated controllers, and NULLs are reported.
        assert_eq!(
            nvme_ctrlr_open_emulated_in(ptr::null(), &mut c),
            NVME_ERR_NULL_POINTER
        );
        assert_eq!(
            nvme_buf_alloc_in(ctx, 0, &mut other),
            NVME_ERR_INVALID_ARGUMENT
        );

        // The context handle may go first: controllers and buffers keep the space alive.
        assert_eq!(nvme_dma_context_free(ctx), NVME_OK);
        let r = complete(qa, |arg| {
            nvme_qpair_submit_read(qa, 2, 9, 1, buf, Some(record), arg)
        });
        assert_eq!(r, NVME_OK);
        for h in [buf, other] {
            assert_eq!(nvme_buf_free(h), NVME_OK);
        }
        for q in [qa, qb, qc] {
            assert_eq!(nvme_qpair_destroy(q), NVME_OK);
        }
        for c in [a, b, c] {
            assert_eq!(nvme_ctrlr_close(c), NVME_OK);
        }
    }
}
