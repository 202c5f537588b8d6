//! The C API called from Rust through its exported functions, against the emulated
//! controller: argument checks, error reporting, buffer ownership, callback rules.

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

struct Env {
    ctrlr: *mut nvme_ctrlr,
    qp: *mut nvme_qpair,
}

fn open(depth: u32) -> Env {
    let mut ctrlr = ptr::null_mut();
    // SAFETY: `ctrlr` is a valid out pointer.
    assert_eq!(unsafe { nvme_ctrlr_open_emulated(&mut ctrlr) }, NVME_OK);
    let mut qp = ptr::null_mut();
    assert_eq!(
        // SAFETY: `ctrlr` is open; `qp` is a valid out pointer.
        unsafe { nvme_qpair_create(ctrlr, depth, 5000, &mut qp) },
        NVME_OK
    );
    Env { ctrlr, qp }
}

impl Drop for Env {
    fn drop(&mut self) {
        // SAFETY: handles from `open`, released once.
        unsafe {
            assert_eq!(nvme_qpair_destroy(self.qp), NVME_OK);
            assert_eq!(nvme_ctrlr_close(self.ctrlr), NVME_OK);
        }
    }
}

fn alloc(env: &Env, len: usize) -> *mut nvme_buf {
    let mut buf = ptr::null_mut();
    // SAFETY: open controller, valid out pointer.
    assert_eq!(unsafe { nvme_buf_alloc(env.ctrlr, len, &mut buf) }, NVME_OK);
    buf
}

/// What callbacks saw. `Cell`s: callbacks write through a pointer while the test holds
/// shared references.
#[derive(Default)]
struct Seen {
    calls: Cell<u32>,
    error: Cell<i32>,
    buf: Cell<usize>,
    nested: Cell<i32>,
}

impl Seen {
    fn arg(&self) -> *mut c_void {
        (self as *const Seen).cast_mut().cast()
    }
}

unsafe extern "C" fn record(arg: *mut c_void, status: *const nvme_cpl_status) {
    // SAFETY: `arg` is the `Seen` the test passed; `status` is valid during the call.
    let (seen, status) = unsafe { (&*arg.cast::<Seen>(), &*status) };
    seen.calls.set(seen.calls.get() + 1);
    seen.error.set(status.error);
    seen.buf.set(status.buf as usize);
}

fn poll_until(qp: *mut nvme_qpair, seen: &Seen, calls: u32) {
    for _ in 0..1_000_000 {
        if seen.calls.get() >= calls {
            return;
        }
        // SAFETY: live queue pair owned by this thread.
        assert!(unsafe { nvme_qpair_poll(qp, 0) } >= 0);
    }
    panic!("no completion");
}

#[test]
fn null_pointers_and_bad_arguments_are_reported() {
    // SAFETY: every call below is made with NULL or valid pointers.
    unsafe {
        let mut ctrlr = ptr::null_mut();
        assert_eq!(
            nvme_ctrlr_open(ptr::null(), &mut ctrlr),
            NVME_ERR_NULL_POINTER
        );
        assert!(
            last_error().contains("`device` is NULL"),
            "{}",
            last_error()
        );
        assert_eq!(
            nvme_ctrlr_open(c"not-a-device".as_ptr(), &mut ctrlr),
            NVME_ERR_INVALID_ARGUMENT
        );
        assert!(!last_error().is_empty());
        assert_eq!(
            nvme_ctrlr_open_emulated(ptr::null_mut()),
            NVME_ERR_NULL_POINTER
        );
        assert_eq!(nvme_qpair_poll(ptr::null_mut(), 0), NVME_ERR_NULL_POINTER);
        assert_eq!(nvme_ctrlr_num_namespaces(ptr::null()), 0);
        assert!(nvme_buf_ptr(ptr::null()).is_null());
        assert_eq!(nvme_ctrlr_close(ptr::null_mut()), NVME_OK);
        assert_eq!(nvme_buf_free(ptr::null_mut()), NVME_OK);
        assert_eq!(nvme_qpair_destroy(ptr::null_mut()), NVME_OK);
        let text = |c| CStr::from_ptr(nvme_strerror(c)).to_str().unwrap();
        assert_eq!(text(NVME_OK), "success");
        assert_eq!(text(NVME_ERR_BUFFER_IN_FLIGHT), "the buffer is in flight");
        assert_eq!(text(12345), "unknown error code");
    }
}

#[test]
fn namespaces_and_submission_errors() {
    let env = open(8);
    let buf = alloc(&env, 4096);
    // SAFETY: live handles owned by this thread.
    unsafe {
        assert_eq!(nvme_ctrlr_num_namespaces(env.ctrlr), 2);
        let mut ids = [0u32; 4];
        assert_eq!(nvme_ctrlr_namespace_ids(env.ctrlr, ids.as_mut_ptr(), 4), 2);
        assert_eq!(&ids[..2], &[1, 2]);
        assert_eq!(nvme_ctrlr_namespace_ids(env.ctrlr, ptr::null_mut(), 0), 2);
        let mut ns = std::mem::zeroed::<nvme_ns_info>();
        assert_eq!(nvme_ctrlr_get_ns_info(env.ctrlr, 2, &mut ns), NVME_OK);
        assert_eq!((ns.block_size, ns.blocks), (4096, 4096));
        assert_eq!(
            nvme_ctrlr_get_ns_info(env.ctrlr, 9, &mut ns),
            NVME_ERR_NAMESPACE
        );
        assert_eq!(nvme_buf_len(buf), 4096);
        let seen = Seen::default();
        let arg = seen.arg();
        // Bad namespace, too-small buffer, unknown flags: refused, buffer stays idle.
        assert_eq!(
            nvme_qpair_submit_read(env.qp, 9, 0, 1, buf, Some(record), arg),
            NVME_ERR_NAMESPACE
        );
        assert_eq!(
            nvme_qpair_submit_read(env.qp, 1, 0, 16, buf, Some(record), arg),
            NVME_ERR_INVALID_ARGUMENT
        );
        assert!(last_error().contains("smaller"), "{}", last_error());
        assert_eq!(
            nvme_qpair_submit_write(env.qp, 1, 0, 1, buf, 0x80, Some(record), arg),
            NVME_ERR_INVALID_ARGUMENT
        );
        assert!(!nvme_buf_in_flight(buf));
        assert_eq!(nvme_qpair_outstanding(env.qp), 0);
        // In flight: resubmission and free are refused until the callback.
        assert_eq!(
            nvme_qpair_submit_write(env.qp, 1, 0, 8, buf, NVME_IO_FUA, Some(record), arg),
            NVME_OK
        );
        assert!(nvme_buf_in_flight(buf));
        assert_eq!(
            nvme_qpair_submit_read(env.qp, 1, 0, 8, buf, Some(record), arg),
            NVME_ERR_BUFFER_IN_FLIGHT
        );
        assert_eq!(nvme_buf_free(buf), NVME_ERR_BUFFER_IN_FLIGHT);
        assert_eq!(nvme_qpair_outstanding(env.qp), 1);
        poll_until(env.qp, &seen, 1);
        assert_eq!((seen.error.get(), seen.buf.get()), (NVME_OK, buf as usize));
        assert!(!nvme_buf_in_flight(buf));
        // Commands without data, and a NULL callback.
        let ranges = [nvme_lba_range { lba: 0, blocks: 8 }];
        assert_eq!(
            nvme_qpair_submit_deallocate(env.qp, 1, ranges.as_ptr(), 1, Some(record), arg),
            NVME_OK
        );
        assert_eq!(
            nvme_qpair_submit_deallocate(env.qp, 1, ranges.as_ptr(), 0, Some(record), arg),
            NVME_ERR_INVALID_ARGUMENT
        );
        assert_eq!(
            nvme_qpair_submit_write_zeroes(env.qp, 1, 0, 8, NVME_IO_DEALLOCATE, None, arg),
            NVME_OK
        );
        assert_eq!(
            nvme_qpair_submit_flush(env.qp, 1, Some(record), arg),
            NVME_OK
        );
        assert_eq!(
            nvme_qpair_submit_verify(env.qp, 1, 0, 8, Some(record), arg),
            NVME_OK
        );
        poll_until(env.qp, &seen, 4);
        assert_eq!((seen.error.get(), seen.buf.get()), (NVME_OK, 0));
        assert_eq!(nvme_qpair_outstanding(env.qp), 0);
        assert_eq!(nvme_buf_free(buf), NVME_OK);
    }
}

#[test]
fn poll_respects_max_and_keeps_the_rest() {
    let env = open(16);
    let seen = Seen::default();
    let arg = seen.arg();
    // SAFETY: live handles owned by this thread.
    unsafe {
        for _ in 0..6 {
            assert_eq!(
                nvme_qpair_submit_flush(env.qp, 1, Some(record), arg),
                NVME_OK
            );
        }
        let mut total = 0;
        while total < 6 {
            let n = nvme_qpair_poll(env.qp, 2);
            assert!((0..=2).contains(&n), "{n}");
            total += n;
        }
        assert_eq!(seen.calls.get(), 6);
    }
}

unsafe extern "C" fn misbehave(arg: *mut c_void, _status: *const nvme_cpl_status) {
    // SAFETY: `arg` points at the test's (Seen, qpair) pair.
    let (seen, qp) = unsafe { &*arg.cast::<(Seen, *mut nvme_qpair)>() };
    seen.calls.set(seen.calls.get() + 1);
    // SAFETY: polling or destroying from a callback is refused, not undefined.
    unsafe {
        assert_eq!(nvme_qpair_poll(*qp, 0), NVME_ERR_BUSY);
        assert_eq!(nvme_qpair_destroy(*qp), NVME_ERR_BUSY);
        // Submitting from a callback is allowed.
        seen.nested
            .set(nvme_qpair_submit_flush(*qp, 1, None, ptr::null_mut()));
    }
}

#[test]
fn callbacks_may_submit_but_not_poll_or_destroy() {
    let env = open(8);
    let state = (Seen::default(), env.qp);
    let arg = (&state as *const (Seen, *mut nvme_qpair)).cast_mut().cast();
    // SAFETY: live handles owned by this thread.
    unsafe {
        assert_eq!(
            nvme_qpair_submit_flush(env.qp, 1, Some(misbehave), arg),
            NVME_OK
        );
        while state.0.calls.get() == 0 {
            assert!(nvme_qpair_poll(env.qp, 0) >= 0);
        }
        assert_eq!(state.0.nested.get(), NVME_OK);
        assert_eq!(nvme_qpair_outstanding(env.qp), 1);
        while nvme_qpair_outstanding(env.qp) > 0 {
            assert!(nvme_qpair_poll(env.qp, 0) >= 0);
        }
    }
}

#[test]
fn destroying_a_queue_pair_with_requests_outstanding_releases_their_buffers() {
    let env = open(8);
    let mut bufs = [ptr::null_mut(); 3];
    for b in &mut bufs {
        *b = alloc(&env, 4096);
    }
    let mut qp = ptr::null_mut();
    // SAFETY: live handles owned by this thread.
    unsafe {
        assert_eq!(nvme_qpair_create(env.ctrlr, 8, 5000, &mut qp), NVME_OK);
        for (i, &b) in bufs.iter().enumerate() {
            let rc = nvme_qpair_submit_write(qp, 1, 8 * i as u64, 8, b, 0, None, ptr::null_mut());
            assert_eq!(rc, NVME_OK);
        }
        assert_eq!(nvme_qpair_destroy(qp), NVME_OK);
        for b in bufs {
            // Either handed back (completed) or detached (the driver kept it): never stuck.
            assert_eq!(nvme_buf_free(b), NVME_OK);
        }
    }
}

#[test]
fn controller_handle_is_shared_across_threads() {
    let env = open(4);
    let ctrlr = env.ctrlr as usize;
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(move || {
                let ctrlr = ctrlr as *mut nvme_ctrlr;
                let mut qp = ptr::null_mut();
                let mut info = std::mem::MaybeUninit::<nvme_ctrlr_info>::uninit();
                // SAFETY: the controller handle is thread-safe and outlives the scope; each
                // thread owns its queue pair.
                unsafe {
                    assert_eq!(nvme_ctrlr_get_info(ctrlr, info.as_mut_ptr()), NVME_OK);
                    assert_eq!(nvme_qpair_create(ctrlr, 4, 5000, &mut qp), NVME_OK);
                    let seen = Seen::default();
                    let arg = seen.arg();
                    assert_eq!(nvme_qpair_submit_flush(qp, 2, Some(record), arg), NVME_OK);
                    poll_until(qp, &seen, 1);
                    assert_eq!(nvme_qpair_destroy(qp), NVME_OK);
                }
            });
        }
    });
}

/// A single `nvme_lba_range` at the very end of a readable page that is followed by an
/// inaccessible one: any read past the range faults (SIGSEGV) instead of passing unnoticed.
struct GuardedRange {
    base: *mut c_void,
    len: usize,
    range: *mut nvme_lba_range,
}

impl GuardedRange {
    fn new(range: nvme_lba_range) -> Self {
        // SAFETY: sysconf has no memory preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
        let len = 2 * page;
        // SAFETY: a fresh anonymous private mapping; the result is checked.
        let base = unsafe {
            libc::mmap(
                ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(base, libc::MAP_FAILED);
        // SAFETY: the second page lies inside the mapping made above.
        let rc =
            unsafe { libc::mprotect(base.cast::<u8>().add(page).cast(), page, libc::PROT_NONE) };
        assert_eq!(rc, 0);
        // SAFETY: the last range-sized slot of the first (writable) page, suitably aligned
        // (the page size is a multiple of the range's size and alignment).
        let slot = unsafe {
            base.cast::<u8>()
                .add(page - std::mem::size_of::<nvme_lba_range>())
                .cast::<nvme_lba_range>()
        };
        // SAFETY: `slot` is writable and aligned (above).
        unsafe { slot.write(range) };
        Self {
            base,
            len,
            range: slot,
        }
    }
}

impl Drop for GuardedRange {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unmapped once.
        unsafe { libc::munmap(self.base, self.len) };
    }
}

#[test]
fn deallocate_refuses_a_bad_range_count_before_reading_the_ranges() {
    let env = open(8);
    let guarded = GuardedRange::new(nvme_lba_range { lba: 0, blocks: 8 });
    let seen = Seen::default();
    let arg = seen.arg();
    // SAFETY: live handles owned by this thread; `guarded.range` is valid for one read, and
    // the library must not read more than that for these counts (it refuses them first).
    unsafe {
        for count in [0, 257, 100_000, u32::MAX] {
            assert_eq!(
                nvme_qpair_submit_deallocate(env.qp, 1, guarded.range, count, Some(record), arg),
                NVME_ERR_INVALID_ARGUMENT,
                "count {count}"
            );
            let message = last_error();
            assert!(message.contains("1..=256"), "count {count}: {message}");
            assert!(
                message.contains(&count.to_string()),
                "count {count}: {message}"
            );
        }
        assert_eq!(nvme_qpair_outstanding(env.qp), 0);
        // The one range that is there works.
        assert_eq!(
            nvme_qpair_submit_deallocate(env.qp, 1, guarded.range, 1, Some(record), arg),
            NVME_OK
        );
        poll_until(env.qp, &seen, 1);
        assert_eq!(seen.error.get(), NVME_OK);
    }
}

#[test]
fn destroy_hands_back_the_buffers_of_requests_that_complete_during_its_drain() {
    let env = open(8);
    let bufs: Vec<*mut nvme_buf> = (0..3).map(|_| alloc(&env, 4096)).collect();
    let seen = Seen::default();
    let mut qp = ptr::null_mut();
    // SAFETY: live handles owned by this thread; every buffer outlives the queue pair.
    unsafe {
        // Known data on the disk first (a pair of its own, polled to the end).
        for (i, &b) in bufs.iter().enumerate() {
            std::slice::from_raw_parts_mut(nvme_buf_ptr(b).cast::<u8>(), 4096).fill(0x30 + i as u8);
            let rc =
                nvme_qpair_submit_write(env.qp, 1, 8 * i as u64, 8, b, 0, Some(record), seen.arg());
            assert_eq!(rc, NVME_OK, "{}", last_error());
        }
        poll_until(env.qp, &seen, 3);
        // Reads on a new pair, destroyed without a single poll: the emulated device answers
        // them at once, so destroy's drain sees them complete.
        assert_eq!(nvme_qpair_create(env.ctrlr, 8, 5000, &mut qp), NVME_OK);
        for (i, &b) in bufs.iter().enumerate() {
            std::slice::from_raw_parts_mut(nvme_buf_ptr(b).cast::<u8>(), 4096).fill(0);
            let rc = nvme_qpair_submit_read(qp, 1, 8 * i as u64, 8, b, Some(record), seen.arg());
            assert_eq!(rc, NVME_OK, "{}", last_error());
        }
        assert_eq!(nvme_qpair_destroy(qp), NVME_OK);
        assert_eq!(seen.calls.get(), 3, "destroy calls no callback");
        for (i, &b) in bufs.iter().enumerate() {
            assert!(
                !nvme_buf_in_flight(b),
                "buffer {i} is idle again after destroy"
            );
            let data = std::slice::from_raw_parts(nvme_buf_ptr(b).cast::<u8>(), 4096);
            assert!(
                data.iter().all(|&x| x == 0x30 + i as u8),
                "buffer {i} holds the read"
            );
            // Usable: submitted again on the remaining pair.
            let rc = nvme_qpair_submit_read(env.qp, 1, 0, 8, b, Some(record), seen.arg());
            assert_eq!(rc, NVME_OK, "{}", last_error());
        }
        poll_until(env.qp, &seen, 6);
        for b in bufs {
            assert_eq!(nvme_buf_free(b), NVME_OK);
        }
    }
}
