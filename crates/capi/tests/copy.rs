//! `nvme_qpair_submit_copy` through the exported functions: on the emulated controller (PCIe
//! path) and over NVMe/TCP against the fake target, the blocks copied read back equal to the
//! blocks written; the argument checks before the ranges are read, the namespace's limits
//! (`NVME_ERR_COPY_LIMIT`), ranges outside the namespace and a too-small range buffer, each
//! with the buffer left idle and nothing queued.

use std::ffi::{c_void, CString};
use std::ptr;

use nvme_tcp::fake::{Config, FakeTarget, COPY_MCL};
use nvme_userspace::*;

mod common;
use common::{last_error, poll_until, record, Seen};

fn bytes<'a>(buf: *mut nvme_buf) -> &'a mut [u8] {
    // SAFETY: a live, idle buffer handle of this test; `len` bytes at `ptr`.
    unsafe { std::slice::from_raw_parts_mut(nvme_buf_ptr(buf).cast(), nvme_buf_len(buf)) }
}

fn alloc(ctrlr: *mut nvme_ctrlr, len: usize) -> *mut nvme_buf {
    let mut buf = ptr::null_mut();
    // SAFETY: open controller, valid out pointer.
    assert_eq!(unsafe { nvme_buf_alloc(ctrlr, len, &mut buf) }, NVME_OK);
    buf
}

fn arg(seen: &Seen) -> *mut c_void {
    ptr::from_ref(seen).cast_mut().cast()
}

/// Runs a read or write of `blocks` blocks at `lba` with `buf` to completion.
///
/// # Safety
/// Live handles of this thread.
unsafe fn io(
    qp: *mut nvme_qpair,
    nsid: u32,
    write: bool,
    lba: u64,
    blocks: u32,
    buf: *mut nvme_buf,
) {
    let seen = Seen::default();
    // SAFETY: forwarded caller contract; `seen` outlives the poll below.
    let rc = unsafe {
        if write {
            nvme_qpair_submit_write(qp, nsid, lba, blocks, buf, 0, Some(record), arg(&seen))
        } else {
            nvme_qpair_submit_read(qp, nsid, lba, blocks, buf, Some(record), arg(&seen))
        }
    };
    assert_eq!(rc, NVME_OK, "{}", last_error());
    poll_until(qp, &seen, 1);
    assert_eq!(seen.error.get(), NVME_OK);
}

/// Writes two source ranges with distinct bytes, copies them to LBA 40 with one call (FUA),
/// reads the destination back and compares.
///
/// # Safety
/// Live handles of this thread.
unsafe fn copy_round_trip(ctrlr: *mut nvme_ctrlr, qp: *mut nvme_qpair, nsid: u32, block: usize) {
    let ranges = [
        nvme_lba_range { lba: 8, blocks: 4 },
        nvme_lba_range { lba: 1, blocks: 2 },
    ];
    let mut expected = Vec::new();
    for (k, r) in ranges.iter().enumerate() {
        let len = r.blocks as usize * block;
        let buf = alloc(ctrlr, len);
        let data: Vec<u8> = (0..len).map(|i| (i * 7 + k * 101) as u8).collect();
        bytes(buf)[..len].copy_from_slice(&data);
        // SAFETY: forwarded caller contract.
        unsafe { io(qp, nsid, true, r.lba, r.blocks, buf) };
        expected.extend(data);
        // SAFETY: idle buffer of this test.
        assert_eq!(unsafe { nvme_buf_free(buf) }, NVME_OK);
    }
    let list = alloc(ctrlr, 4096);
    let seen = Seen::default();
    // SAFETY: `ranges` holds 2 entries; `seen` outlives the poll.
    let rc = unsafe {
        nvme_qpair_submit_copy(
            qp,
            nsid,
            40,
            ranges.as_ptr(),
            2,
            list,
            NVME_IO_FUA,
            Some(record),
            arg(&seen),
        )
    };
    assert_eq!(rc, NVME_OK, "{}", last_error());
    // SAFETY: live handle.
    assert!(unsafe { nvme_buf_in_flight(list) });
    poll_until(qp, &seen, 1);
    assert_eq!(seen.error.get(), NVME_OK);
    let back = alloc(ctrlr, 6 * block);
    // SAFETY: forwarded caller contract.
    unsafe { io(qp, nsid, false, 40, 6, back) };
    assert!(
        bytes(back)[..6 * block] == expected[..],
        "copied blocks differ"
    );
    // SAFETY: idle buffers of this test.
    unsafe {
        assert_eq!(nvme_buf_free(back), NVME_OK);
        assert_eq!(nvme_buf_free(list), NVME_OK);
    }
}

#[test]
fn copy_on_the_emulated_controller_and_its_refusals() {
    let mut ctrlr = ptr::null_mut();
    let mut qp = ptr::null_mut();
    // SAFETY: valid out pointers; the handles are used by this thread only and released below.
    unsafe {
        assert_eq!(nvme_ctrlr_open_emulated(&mut ctrlr), NVME_OK);
        assert_eq!(nvme_qpair_create(ctrlr, 16, 5000, &mut qp), NVME_OK);
        copy_round_trip(ctrlr, qp, 1, 512);
        copy_round_trip(ctrlr, qp, 2, 4096);

        let list = alloc(ctrlr, 4096);
        let seen = Seen::default();
        let a = arg(&seen);
        let one = [nvme_lba_range { lba: 0, blocks: 1 }];
        // Checked before the ranges are read.
        assert_eq!(
            nvme_qpair_submit_copy(qp, 1, 9, ptr::null(), 1, list, 0, Some(record), a),
            NVME_ERR_NULL_POINTER
        );
        assert_eq!(
            nvme_qpair_submit_copy(qp, 1, 9, one.as_ptr(), 1, ptr::null_mut(), 0, None, a),
            NVME_ERR_NULL_POINTER
        );
        for count in [0, 257] {
            assert_eq!(
                nvme_qpair_submit_copy(qp, 1, 9, one.as_ptr(), count, list, 0, None, a),
                NVME_ERR_INVALID_ARGUMENT
            );
        }
        assert_eq!(
            nvme_qpair_submit_copy(qp, 1, 9, one.as_ptr(), 1, list, 0x40, None, a),
            NVME_ERR_INVALID_ARGUMENT
        );
        // The emulator's default limits are QEMU's: MCL 128, MSSRL 128, MSRC 127.
        let two = [
            nvme_lba_range {
                lba: 0,
                blocks: 100,
            },
            nvme_lba_range {
                lba: 200,
                blocks: 100,
            },
        ];
        assert_eq!(
            nvme_qpair_submit_copy(qp, 1, 1000, two.as_ptr(), 2, list, 0, None, a),
            NVME_ERR_COPY_LIMIT
        );
        assert!(last_error().contains("MCL"), "{}", last_error());
        let long = [nvme_lba_range {
            lba: 0,
            blocks: 129,
        }];
        assert_eq!(
            nvme_qpair_submit_copy(qp, 1, 1000, long.as_ptr(), 1, list, 0, None, a),
            NVME_ERR_COPY_LIMIT
        );
        let many: Vec<nvme_lba_range> = (0..129)
            .map(|i| nvme_lba_range { lba: i, blocks: 1 })
            .collect();
        // 129 entries need more than one page of list.
        let big = alloc(ctrlr, 8192);
        assert_eq!(
            nvme_qpair_submit_copy(qp, 1, 1000, many.as_ptr(), 129, big, 0, None, a),
            NVME_ERR_COPY_LIMIT
        );
        assert!(last_error().contains("MSRC"), "{}", last_error());
        assert_eq!(nvme_buf_free(big), NVME_OK);
        // Out of the namespace (32768 blocks): a source, the destination.
        let tail = [nvme_lba_range {
            lba: 32767,
            blocks: 2,
        }];
        assert_eq!(
            nvme_qpair_submit_copy(qp, 1, 0, tail.as_ptr(), 1, list, 0, None, a),
            NVME_ERR_LBA_RANGE
        );
        assert_eq!(
            nvme_qpair_submit_copy(qp, 1, 32767, two[..1].as_ptr(), 1, list, 0, None, a),
            NVME_ERR_LBA_RANGE
        );
        // 200 ranges need 6400 bytes; the buffer has 4096.
        let lots: Vec<nvme_lba_range> = (0..200)
            .map(|i| nvme_lba_range { lba: i, blocks: 1 })
            .collect();
        assert_eq!(
            nvme_qpair_submit_copy(qp, 1, 1000, lots.as_ptr(), 200, list, 0, None, a),
            NVME_ERR_INVALID_ARGUMENT
        );
        assert!(last_error().contains("smaller"), "{}", last_error());
        assert!(!nvme_buf_in_flight(list));
        assert_eq!(nvme_qpair_outstanding(qp), 0);
        assert_eq!(seen.calls.get(), 0);
        assert_eq!(nvme_buf_free(list), NVME_OK);
        assert_eq!(nvme_qpair_destroy(qp), NVME_OK);
        assert_eq!(nvme_ctrlr_close(ctrlr), NVME_OK);
    }
}

#[test]
fn copy_over_nvme_tcp() {
    let t = FakeTarget::start(Config::default());
    let trid = CString::new(format!(
        "trtype:TCP adrfam:IPv4 traddr:{} trsvcid:{} subnqn:{}",
        t.addr.ip(),
        t.addr.port(),
        t.trid().subnqn
    ))
    .unwrap();
    let mut ctrlr = ptr::null_mut();
    let mut qp = ptr::null_mut();
    // SAFETY: NUL-terminated string, valid out pointers; handles used by this thread only.
    unsafe {
        assert_eq!(
            nvme_ctrlr_open(trid.as_ptr(), &mut ctrlr),
            NVME_OK,
            "{}",
            last_error()
        );
        assert_eq!(nvme_qpair_create(ctrlr, 16, 5000, &mut qp), NVME_OK);
        copy_round_trip(ctrlr, qp, 2, 512);
        copy_round_trip(ctrlr, qp, 1, 4096);
        // The fake's MCL, checked before the wire.
        let list = alloc(ctrlr, 4096);
        let over = [
            nvme_lba_range {
                lba: 0,
                blocks: COPY_MCL / 2,
            },
            nvme_lba_range {
                lba: 100,
                blocks: COPY_MCL / 2 + 1,
            },
        ];
        assert_eq!(
            nvme_qpair_submit_copy(
                qp,
                2,
                1000,
                over.as_ptr(),
                2,
                list,
                0,
                None,
                ptr::null_mut()
            ),
            NVME_ERR_COPY_LIMIT
        );
        assert_eq!(nvme_buf_free(list), NVME_OK);
        assert_eq!(nvme_qpair_destroy(qp), NVME_OK);
        assert_eq!(nvme_ctrlr_close(ctrlr), NVME_OK);
    }
    assert_eq!(
        t.counters()
            .copies
            .load(std::sync::atomic::Ordering::Relaxed),
        2
    );
}
