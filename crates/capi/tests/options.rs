//! Bring-up options of the C API (`struct nvme_ctrlr_opts`, `nvme_ctrlr_open_in_opts` and
//! its emulator twin) against the emulated controller, which offers both SGLs and Doorbell
//! Buffer Config: the options in effect are what was asked for, data written with PRPs or
//! SGLs reads back the same, and bad values are refused.

use std::cell::Cell;
use std::ffi::{c_void, CStr};
use std::ptr;

use nvme_userspace::*;

fn last_error() -> String {
    // SAFETY: the function returns a valid NUL-terminated string.
    unsafe { CStr::from_ptr(nvme_last_error_message()) }
        .to_string_lossy()
        .into_owned()
}

fn defaults() -> nvme_ctrlr_opts {
    let mut opts = nvme_ctrlr_opts {
        shadow_doorbells: u32::MAX,
        sgl: false,
    };
    // SAFETY: `opts` is a valid place for the result.
    assert_eq!(unsafe { nvme_ctrlr_opts_init(&mut opts) }, NVME_OK);
    opts
}

struct Ctx(*mut nvme_dma_context);

impl Drop for Ctx {
    fn drop(&mut self) {
        // SAFETY: a context from nvme_dma_context_create_emulated, freed once.
        assert_eq!(unsafe { nvme_dma_context_free(self.0) }, NVME_OK);
    }
}

fn context() -> Ctx {
    let mut ctx = ptr::null_mut();
    assert_eq!(
        // SAFETY: `ctx` is a valid out pointer.
        unsafe { nvme_dma_context_create_emulated(&mut ctx) },
        NVME_OK
    );
    Ctx(ctx)
}

fn open(ctx: &Ctx, opts: Option<&nvme_ctrlr_opts>) -> *mut nvme_ctrlr {
    let mut ctrlr = ptr::null_mut();
    let p = opts.map_or(ptr::null(), |o| o as *const nvme_ctrlr_opts);
    // SAFETY: live context, `p` NULL or a valid struct, `ctrlr` a valid out pointer.
    let rc = unsafe { nvme_ctrlr_open_emulated_in_opts(ctx.0, p, &mut ctrlr) };
    assert_eq!(rc, NVME_OK, "{}", last_error());
    ctrlr
}

fn close(ctrlr: *mut nvme_ctrlr) {
    // SAFETY: an open handle, closed once.
    assert_eq!(unsafe { nvme_ctrlr_close(ctrlr) }, NVME_OK);
}

#[derive(Default)]
struct Seen {
    calls: Cell<u32>,
    error: Cell<i32>,
}

unsafe extern "C" fn record(arg: *mut c_void, status: *const nvme_cpl_status) {
    // SAFETY: `arg` is the `Seen` the test passed; `status` is valid during the call.
    let (seen, status) = unsafe { (&*arg.cast::<Seen>(), &*status) };
    seen.calls.set(seen.calls.get() + 1);
    if status.error != NVME_OK {
        seen.error.set(status.error);
    }
}

fn wait(qp: *mut nvme_qpair, seen: &Seen) {
    for _ in 0..1_000_000 {
        if seen.calls.get() == 1 {
            assert_eq!(seen.error.get(), NVME_OK);
            return;
        }
        // SAFETY: a live queue pair of this thread.
        assert!(unsafe { nvme_qpair_poll(qp, 0) } >= 0);
    }
    panic!("no completion");
}

/// Writes three pages of a pattern at LBA 64 of namespace 1 (512-byte blocks) and reads them
/// back into another buffer: more than two pages, so PRPs need a PRP list (NVMe Base 2.0
/// §4.1.1) and SGLs one Data Block descriptor (§4.1.2).
fn round_trip(ctx: &Ctx, ctrlr: *mut nvme_ctrlr) {
    const LEN: usize = 3 * 4096;
    const BLOCK: usize = 512;
    let mut qp = ptr::null_mut();
    assert_eq!(
        // SAFETY: open controller, valid out pointer.
        unsafe { nvme_qpair_create(ctrlr, 8, 5000, &mut qp) },
        NVME_OK
    );
    let (mut wbuf, mut rbuf) = (ptr::null_mut(), ptr::null_mut());
    // SAFETY: live context, valid out pointers.
    unsafe {
        assert_eq!(nvme_buf_alloc_in(ctx.0, LEN, &mut wbuf), NVME_OK);
        assert_eq!(nvme_buf_alloc_in(ctx.0, LEN, &mut rbuf), NVME_OK);
    }
    // SAFETY: an idle buffer of at least LEN bytes, used by this thread only.
    let w = unsafe { std::slice::from_raw_parts_mut(nvme_buf_ptr(wbuf).cast::<u8>(), LEN) };
    for (i, b) in w.iter_mut().enumerate() {
        *b = (i * 7 + i / 4096) as u8;
    }
    let expected = w.to_vec();
    let blocks = (LEN / BLOCK) as u32;
    let seen = Seen::default();
    let arg = (&seen as *const Seen).cast_mut().cast();
    // SAFETY: live queue pair and idle buffer; `seen` outlives the request.
    let rc = unsafe { nvme_qpair_submit_write(qp, 1, 64, blocks, wbuf, 0, Some(record), arg) };
    assert_eq!(rc, NVME_OK, "{}", last_error());
    wait(qp, &seen);
    let seen = Seen::default();
    let arg = (&seen as *const Seen).cast_mut().cast();
    // SAFETY: as above.
    let rc = unsafe { nvme_qpair_submit_read(qp, 1, 64, blocks, rbuf, Some(record), arg) };
    assert_eq!(rc, NVME_OK, "{}", last_error());
    wait(qp, &seen);
    // SAFETY: the read completed: the buffer is idle again.
    let r = unsafe { std::slice::from_raw_parts(nvme_buf_ptr(rbuf).cast::<u8>(), LEN) };
    assert!(
        r == expected.as_slice(),
        "the data read back differs from what was written"
    );
    // SAFETY: idle handles, released once.
    unsafe {
        assert_eq!(nvme_qpair_destroy(qp), NVME_OK);
        assert_eq!(nvme_buf_free(wbuf), NVME_OK);
        assert_eq!(nvme_buf_free(rbuf), NVME_OK);
    }
}

#[test]
fn defaults_are_the_drivers() {
    let opts = defaults();
    assert_eq!(opts.shadow_doorbells, NVME_SHADOW_DOORBELLS_AUTO);
    assert!(opts.sgl);
    let ctx = context();
    // NULL options are the defaults: the emulator offers SGLs, so they are used.
    let ctrlr = open(&ctx, None);
    // SAFETY: an open handle.
    assert_eq!(unsafe { nvme_ctrlr_uses_sgl(ctrlr) }, 1);
    round_trip(&ctx, ctrlr);
    close(ctrlr);
}

#[test]
fn prps_forced_and_data_reads_back() {
    let ctx = context();
    let opts = nvme_ctrlr_opts {
        sgl: false,
        ..defaults()
    };
    let ctrlr = open(&ctx, Some(&opts));
    // SAFETY: an open handle.
    assert_eq!(unsafe { nvme_ctrlr_uses_sgl(ctrlr) }, 0);
    round_trip(&ctx, ctrlr);
    close(ctrlr);
}

#[test]
fn shadow_doorbells_always_and_never() {
    let ctx = context();
    for (mode, want) in [
        (NVME_SHADOW_DOORBELLS_ALWAYS, 1),
        (NVME_SHADOW_DOORBELLS_NEVER, 0),
    ] {
        let opts = nvme_ctrlr_opts {
            shadow_doorbells: mode,
            ..defaults()
        };
        let ctrlr = open(&ctx, Some(&opts));
        assert_eq!(
            // SAFETY: an open handle.
            unsafe { nvme_ctrlr_uses_shadow_doorbells(ctrlr) },
            want,
            "mode {mode}"
        );
        // The doorbell path in use moves real data (shadow buffers with EventIdx, or MMIO).
        round_trip(&ctx, ctrlr);
        close(ctrlr);
    }
}

#[test]
fn bad_values_and_null_are_refused() {
    let ctx = context();
    let opts = nvme_ctrlr_opts {
        shadow_doorbells: 7,
        ..defaults()
    };
    let mut ctrlr = ptr::null_mut();
    // SAFETY: live context and valid pointers.
    let rc = unsafe { nvme_ctrlr_open_emulated_in_opts(ctx.0, &opts, &mut ctrlr) };
    assert_eq!(rc, NVME_ERR_INVALID_ARGUMENT);
    assert!(ctrlr.is_null());
    assert!(
        last_error().contains("shadow_doorbells 7"),
        "{}",
        last_error()
    );
    // SAFETY: NULL is allowed and refused.
    unsafe {
        assert_eq!(nvme_ctrlr_opts_init(ptr::null_mut()), NVME_ERR_NULL_POINTER);
        assert_eq!(nvme_ctrlr_uses_sgl(ptr::null()), NVME_ERR_NULL_POINTER);
        assert_eq!(
            nvme_ctrlr_uses_shadow_doorbells(ptr::null()),
            NVME_ERR_NULL_POINTER
        );
        let dev = c"0000:01:00.0";
        assert_eq!(
            nvme_ctrlr_open_in_opts(ptr::null(), dev.as_ptr(), ptr::null(), &mut ctrlr),
            NVME_ERR_NULL_POINTER
        );
    }
}
