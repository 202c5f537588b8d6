//! `nvme_qpair_submit_pi` through the exported functions on the emulated controller: a write
//! and read back with PRINFO on a namespace without metadata (PRINFO has nothing to act on
//! there, NVM CS §5.2: the data round-trips), and the argument checks (unknown op, unknown
//! PRINFO bits) with the buffer left idle. The PI statuses themselves are covered by the
//! driver's tests on metadata namespaces of the emulator (crates/driver/tests/protection.rs)
//! and the guest case; their error code mapping by the unit test in `errors.rs`.

use std::ffi::c_void;
use std::ptr;

use nvme_userspace::*;

mod common;
use common::{last_error, record, Seen};

fn arg(seen: &Seen) -> *mut c_void {
    ptr::from_ref(seen).cast_mut().cast()
}

#[test]
fn pi_submissions_round_trip_and_refuse_bad_arguments() {
    let mut ctrlr = ptr::null_mut();
    let mut qp = ptr::null_mut();
    // SAFETY: valid out pointers; the handles are used by this thread only and released below.
    unsafe {
        assert_eq!(nvme_ctrlr_open_emulated(&mut ctrlr), NVME_OK);
        assert_eq!(nvme_qpair_create(ctrlr, 16, 5000, &mut qp), NVME_OK);
        let mut buf = ptr::null_mut();
        assert_eq!(nvme_buf_alloc(ctrlr, 4096, &mut buf), NVME_OK);
        let bytes = std::slice::from_raw_parts_mut(nvme_buf_ptr(buf).cast::<u8>(), 4096);
        let data: Vec<u8> = (0..4096).map(|i| (i * 13 + 5) as u8).collect();
        bytes.copy_from_slice(&data);
        let checks = NVME_PI_PRACT | NVME_PI_CHECK_GUARD | NVME_PI_CHECK_REF_TAG;
        for (op, fill) in [(NVME_PI_WRITE, false), (NVME_PI_READ, true)] {
            if fill {
                std::slice::from_raw_parts_mut(nvme_buf_ptr(buf).cast::<u8>(), 4096).fill(0);
            }
            let seen = Seen::default();
            let rc = nvme_qpair_submit_pi(
                qp,
                1,
                op,
                16,
                8,
                buf,
                checks,
                16,
                0,
                0,
                Some(record),
                arg(&seen),
            );
            assert_eq!(rc, NVME_OK, "{}", last_error());
            while seen.calls.get() == 0 {
                assert!(nvme_qpair_poll(qp, 0) >= 0, "{}", last_error());
            }
            assert_eq!(seen.error.get(), NVME_OK);
        }
        let back = std::slice::from_raw_parts(nvme_buf_ptr(buf).cast::<u8>(), 4096);
        assert!(back == data.as_slice(), "read back differs");
        let rc = nvme_qpair_submit_pi(qp, 1, 7, 0, 1, buf, 0, 0, 0, 0, None, ptr::null_mut());
        assert_eq!(rc, NVME_ERR_INVALID_ARGUMENT);
        assert!(last_error().contains("unknown op"), "{}", last_error());
        let rc = nvme_qpair_submit_pi(
            qp,
            1,
            NVME_PI_READ,
            0,
            1,
            buf,
            0x10,
            0,
            0,
            0,
            None,
            ptr::null_mut(),
        );
        assert_eq!(rc, NVME_ERR_INVALID_ARGUMENT);
        assert!(
            !nvme_buf_in_flight(buf),
            "a refused submission leaves the buffer idle"
        );
        assert_eq!(nvme_buf_free(buf), NVME_OK);
        assert_eq!(nvme_qpair_destroy(qp), NVME_OK);
        assert_eq!(nvme_ctrlr_close(ctrlr), NVME_OK);
    }
}
