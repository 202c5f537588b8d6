//! The C API's batching and buffer-carving calls against the emulated controller, and the
//! device-string check: `nvme_qpair_hold_submissions` / `nvme_qpair_release_submissions`
//! (nothing reaches the device before the release), `nvme_buf_split` (pieces of one
//! allocation are independent buffers whose data lands where it should), `nvme_device_parse`.

use std::cell::Cell;
use std::ffi::{c_void, CStr, CString};
use std::ptr;
use std::time::Duration;

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

fn open() -> Env {
    let mut ctrlr = ptr::null_mut();
    // SAFETY: `ctrlr` is a valid out pointer.
    assert_eq!(unsafe { nvme_ctrlr_open_emulated(&mut ctrlr) }, NVME_OK);
    let mut qp = ptr::null_mut();
    assert_eq!(
        // SAFETY: `ctrlr` is open; `qp` is a valid out pointer.
        unsafe { nvme_qpair_create(ctrlr, 16, 5000, &mut qp) },
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

/// Completed callbacks and the last error they saw.
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

fn arg(seen: &Seen) -> *mut c_void {
    (seen as *const Seen).cast_mut().cast()
}

fn poll_until(qp: *mut nvme_qpair, seen: &Seen, calls: u32) {
    for _ in 0..1_000_000 {
        if seen.calls.get() >= calls {
            assert_eq!(seen.error.get(), NVME_OK);
            return;
        }
        // SAFETY: live queue pair owned by this thread.
        assert!(unsafe { nvme_qpair_poll(qp, 0) } >= 0);
    }
    panic!("no completion");
}

/// Namespace 1 of the emulator has 512-byte blocks.
const BLOCK: usize = 512;
const PAGE: usize = 4096;

#[test]
fn held_submissions_reach_the_device_only_when_released() {
    let env = open();
    let mut buf = ptr::null_mut();
    assert_eq!(
        // SAFETY: open controller, valid out pointer.
        unsafe { nvme_buf_alloc(env.ctrlr, PAGE, &mut buf) },
        NVME_OK
    );
    let seen = Seen::default();
    // SAFETY: live handles of this thread; `seen` outlives the requests.
    unsafe {
        assert_eq!(nvme_qpair_hold_submissions(env.qp), NVME_OK);
        assert_eq!(
            nvme_qpair_hold_submissions(env.qp),
            NVME_OK,
            "holding twice is harmless"
        );
        assert_eq!(
            nvme_qpair_submit_write(env.qp, 1, 0, 8, buf, 0, Some(record), arg(&seen)),
            NVME_OK
        );
        for _ in 0..3 {
            assert_eq!(
                nvme_qpair_submit_flush(env.qp, 1, Some(record), arg(&seen)),
                NVME_OK
            );
        }
        // The device was not told: nothing completes however long we poll.
        for _ in 0..50 {
            assert_eq!(nvme_qpair_poll(env.qp, 0), 0);
            std::thread::sleep(Duration::from_millis(2));
        }
        assert_eq!(seen.calls.get(), 0);
        assert_eq!(nvme_qpair_outstanding(env.qp), 4);
        assert_eq!(nvme_qpair_release_submissions(env.qp), NVME_OK);
        assert_eq!(
            nvme_qpair_release_submissions(env.qp),
            NVME_OK,
            "releasing twice too"
        );
    }
    poll_until(env.qp, &seen, 4);
    // Not held any more: a submission completes without a release.
    // SAFETY: as above.
    unsafe {
        assert_eq!(
            nvme_qpair_submit_flush(env.qp, 1, Some(record), arg(&seen)),
            NVME_OK
        );
    }
    poll_until(env.qp, &seen, 5);
    // SAFETY: idle buffer handle, freed once.
    assert_eq!(unsafe { nvme_buf_free(buf) }, NVME_OK);
}

#[test]
fn destroy_releases_held_submissions_first() {
    let env = open();
    let seen = Seen::default();
    // SAFETY: live handles of this thread.
    unsafe {
        assert_eq!(nvme_qpair_hold_submissions(env.qp), NVME_OK);
        assert_eq!(
            nvme_qpair_submit_flush(env.qp, 1, Some(record), arg(&seen)),
            NVME_OK
        );
    }
    // Env's drop destroys the pair: it must drain the held flush, not wait for it in vain.
    let t0 = std::time::Instant::now();
    drop(env);
    assert!(
        t0.elapsed() < Duration::from_millis(900),
        "{:?}",
        t0.elapsed()
    );
}

#[test]
fn split_pieces_are_independent_buffers_of_one_allocation() {
    let env = open();
    let mut first = ptr::null_mut();
    assert_eq!(
        // SAFETY: open controller, valid out pointer.
        unsafe { nvme_buf_alloc(env.ctrlr, 3 * PAGE, &mut first) },
        NVME_OK
    );
    let mut second = ptr::null_mut();
    let mut third = ptr::null_mut();
    // SAFETY: live idle handles of this thread, valid out pointers.
    unsafe {
        let base = nvme_buf_ptr(first).cast::<u8>();
        assert_eq!(
            nvme_buf_split(first, 0, &mut second),
            NVME_ERR_INVALID_ARGUMENT
        );
        assert!(last_error().contains("not inside"), "{}", last_error());
        assert_eq!(
            nvme_buf_split(first, 3 * PAGE, &mut second),
            NVME_ERR_INVALID_ARGUMENT
        );
        assert_eq!(
            nvme_buf_len(first),
            3 * PAGE,
            "a refused split changes nothing"
        );
        assert_eq!(nvme_buf_split(first, PAGE, &mut second), NVME_OK);
        // A piece that is not page-aligned (fio's io_u buffers of 512-byte blocks).
        assert_eq!(nvme_buf_split(second, BLOCK, &mut third), NVME_OK);
        assert_eq!(nvme_buf_len(first), PAGE);
        assert_eq!(nvme_buf_len(second), BLOCK);
        assert_eq!(nvme_buf_len(third), 2 * PAGE - BLOCK);
        assert_eq!(nvme_buf_ptr(second).cast::<u8>(), base.add(PAGE));
        assert_eq!(nvme_buf_ptr(third).cast::<u8>(), base.add(PAGE + BLOCK));

        // Each piece written to its own LBA with its own pattern, in flight together.
        let pieces = [
            (first, PAGE, 0u64, 0xa1u8),
            (second, BLOCK, 64, 0xb2),
            (third, PAGE, 128, 0xc3),
        ];
        let seen = Seen::default();
        for &(buf, len, lba, byte) in &pieces {
            ptr::write_bytes(nvme_buf_ptr(buf).cast::<u8>(), byte, len);
            let blocks = (len / BLOCK) as u32;
            assert_eq!(
                nvme_qpair_submit_write(env.qp, 1, lba, blocks, buf, 0, Some(record), arg(&seen)),
                NVME_OK
            );
        }
        // A piece in flight cannot be split.
        let mut spare = ptr::null_mut();
        assert_eq!(
            nvme_buf_split(third, BLOCK, &mut spare),
            NVME_ERR_BUFFER_IN_FLIGHT
        );
        poll_until(env.qp, &seen, 3);
        for &(buf, len, _, _) in &pieces {
            ptr::write_bytes(nvme_buf_ptr(buf).cast::<u8>(), 0, len);
        }
        // Read back crosswise (second's LBA into third, ...): the data follows the LBA.
        let reads = [
            (third, 0u64, PAGE, 0xa1u8),
            (first, 64, BLOCK, 0xb2),
            (second, 128, BLOCK, 0xc3),
        ];
        for &(buf, lba, len, _) in &reads {
            let blocks = (len / BLOCK) as u32;
            assert_eq!(
                nvme_qpair_submit_read(env.qp, 1, lba, blocks, buf, Some(record), arg(&seen)),
                NVME_OK
            );
        }
        poll_until(env.qp, &seen, 6);
        for &(buf, _, len, byte) in &reads {
            let data = std::slice::from_raw_parts(nvme_buf_ptr(buf).cast::<u8>(), len);
            assert!(
                data.iter().all(|&b| b == byte),
                "piece read back {:#x}",
                data[0]
            );
        }
        for buf in [first, second, third] {
            assert_eq!(nvme_buf_free(buf), NVME_OK);
        }
    }
}

#[test]
fn device_parse_uses_the_tools_parser_and_gives_the_canonical_form() {
    let parse = |s: &str| {
        let c = CString::new(s).unwrap();
        let mut out = [0 as std::ffi::c_char; 256];
        // SAFETY: a NUL-terminated string; `out` is valid for its length.
        let kind = unsafe { nvme_device_parse(c.as_ptr(), out.as_mut_ptr(), out.len()) };
        // SAFETY: NUL-terminated by the call (or still all zeroes).
        let text = unsafe { CStr::from_ptr(out.as_ptr()) }
            .to_string_lossy()
            .into_owned();
        (kind, text)
    };
    // Three names of one PCI function, one canonical form.
    for s in ["0000:01:00.0", "01:00.0", "trtype:PCIe traddr:0000:01:00.0"] {
        assert_eq!(
            parse(s),
            (NVME_DEVICE_PCIE, "0000:01:00.0".to_string()),
            "{s}"
        );
    }
    let (kind, text) = parse("trtype:TCP adrfam:IPv4 traddr:127.0.0.1 trsvcid:4420 subnqn:nqn.x");
    assert_eq!(kind, NVME_DEVICE_TCP);
    assert!(
        text.contains("traddr:127.0.0.1") && text.contains("subnqn:nqn.x"),
        "{text}"
    );
    assert_eq!(parse(" SIM "), (NVME_DEVICE_EMULATOR, "sim".to_string()));
    assert_eq!(parse("nvme0n1").0, NVME_ERR_INVALID_ARGUMENT);
    assert!(last_error().contains("`nvme0n1`"), "{}", last_error());
    let dev = CString::new("0000:01:00.0").unwrap();
    let mut small = [0 as std::ffi::c_char; 4];
    // SAFETY: valid string; `small` valid for 4 writes; NULL with capacity 0 is allowed.
    unsafe {
        assert_eq!(
            nvme_device_parse(dev.as_ptr(), ptr::null_mut(), 0),
            NVME_DEVICE_PCIE
        );
        assert_eq!(
            nvme_device_parse(dev.as_ptr(), small.as_mut_ptr(), small.len()),
            NVME_ERR_INVALID_ARGUMENT
        );
        assert!(last_error().contains("needs 13 bytes"), "{}", last_error());
        assert_eq!(
            nvme_device_parse(ptr::null(), ptr::null_mut(), 0),
            NVME_ERR_NULL_POINTER
        );
    }
}
