//! The zoned namespace calls of the C API against `nvme_ctrlr_open_emulated_zoned` (namespace 2:
//! 16 zones of 256 blocks of 4096 bytes, at most 4 open and 6 active): the geometry, Report
//! Zones parsed into `struct nvme_zone`, Zone Append returning where the data landed (read
//! back equal), the write pointer moving, the zone errors with their own codes (full zone,
//! invalid transition, too many open zones, a write off the write pointer), reset, Select All,
//! and the argument checks.

use std::cell::Cell;
use std::ffi::c_void;
use std::ptr;

use nvme_userspace::*;

mod common;
use common::last_error;

const ZNS: u32 = 2;
const BLOCK: usize = 4096;
const ZONE: u64 = 256;

/// What [`seen`] recorded: callbacks run, the last error code and append LBA.
#[derive(Default)]
struct Seen {
    calls: Cell<u32>,
    error: Cell<i32>,
    lba: Cell<u64>,
    sc: Cell<u8>,
}

unsafe extern "C" fn seen(arg: *mut c_void, status: *const nvme_cpl_status) {
    // SAFETY: `arg` is the test's `Seen`; `status` is valid during the call.
    let (s, status) = unsafe { (&*arg.cast::<Seen>(), &*status) };
    s.calls.set(s.calls.get() + 1);
    s.error.set(status.error);
    s.lba.set(status.lba);
    s.sc.set(status.sc);
}

struct Z {
    ctrlr: *mut nvme_ctrlr,
    qp: *mut nvme_qpair,
}

impl Z {
    fn open() -> Self {
        let mut ctrlr = ptr::null_mut();
        // SAFETY: valid out pointer.
        let rc = unsafe { nvme_ctrlr_open_emulated_zoned(&mut ctrlr) };
        assert_eq!(rc, NVME_OK, "{}", last_error());
        let mut qp = ptr::null_mut();
        // SAFETY: open controller, valid out pointer.
        assert_eq!(unsafe { nvme_qpair_create(ctrlr, 16, 0, &mut qp) }, NVME_OK);
        Z { ctrlr, qp }
    }

    fn alloc(&self, len: usize) -> *mut nvme_buf {
        let mut buf = ptr::null_mut();
        // SAFETY: open controller, valid out pointer.
        let rc = unsafe { nvme_buf_alloc(self.ctrlr, len, &mut buf) };
        assert_eq!(rc, NVME_OK);
        buf
    }

    /// Runs one submission (`submit` gets the callback argument) to its completion.
    fn run(&self, submit: impl FnOnce(*mut c_void) -> i32) -> Seen {
        let s = Seen::default();
        let rc = submit(ptr::from_ref(&s).cast_mut().cast());
        assert_eq!(rc, NVME_OK, "{}", last_error());
        for _ in 0..1_000_000 {
            if s.calls.get() == 1 {
                return s;
            }
            // SAFETY: a live pair of this thread, not polled from a callback.
            assert!(unsafe { nvme_qpair_poll(self.qp, 0) } >= 0);
        }
        panic!("no completion");
    }

    fn append(&self, zslba: u64, buf: *mut nvme_buf, blocks: u32) -> Seen {
        // SAFETY: live handles of this thread; the `Seen` outlives the poll in `run`.
        self.run(|a| unsafe {
            nvme_qpair_submit_zone_append(self.qp, ZNS, zslba, blocks, buf, 0, Some(seen), a)
        })
    }

    fn mgmt(&self, zslba: u64, action: u32, flags: u32) -> Seen {
        // SAFETY: as above.
        self.run(|a| unsafe {
            nvme_qpair_submit_zone_mgmt(self.qp, ZNS, zslba, action, flags, Some(seen), a)
        })
    }

    fn report(&self, slba: u64, filter: u32) -> Vec<nvme_zone> {
        let buf = self.alloc(BLOCK);
        // SAFETY: as above.
        let s = self.run(|a| unsafe {
            nvme_qpair_submit_zone_report(self.qp, ZNS, slba, filter, buf, Some(seen), a)
        });
        assert_eq!(s.error.get(), NVME_OK);
        let mut zones = vec![nvme_zone::default(); 64];
        // SAFETY: idle buffer; `zones` has room for 64.
        let n = unsafe { nvme_zone_report_parse(buf, zones.as_mut_ptr(), 64) };
        assert!(n >= 0, "{}", last_error());
        zones.truncate(n as usize);
        // SAFETY: idle buffer of this test.
        assert_eq!(unsafe { nvme_buf_free(buf) }, NVME_OK);
        zones
    }

    fn zone(&self, zslba: u64) -> nvme_zone {
        self.report(zslba, NVME_ZONE_REPORT_ALL)[0]
    }
}

impl Drop for Z {
    fn drop(&mut self) {
        // SAFETY: live handles of this test, released once.
        unsafe {
            assert_eq!(nvme_qpair_destroy(self.qp), NVME_OK);
            assert_eq!(nvme_ctrlr_close(self.ctrlr), NVME_OK);
        }
    }
}

fn bytes<'a>(buf: *mut nvme_buf) -> &'a mut [u8] {
    // SAFETY: a live, idle buffer handle of this test; `len` bytes at `ptr`.
    unsafe { std::slice::from_raw_parts_mut(nvme_buf_ptr(buf).cast(), nvme_buf_len(buf)) }
}

#[test]
fn geometry_and_report_of_an_empty_namespace() {
    let z = Z::open();
    let mut info = nvme_zone_info::default();
    // SAFETY: open controller, valid out pointer.
    let rc = unsafe { nvme_ctrlr_get_zone_info(z.ctrlr, ZNS, &mut info) };
    assert_eq!(rc, NVME_OK);
    assert_eq!((info.zone_blocks, info.zones), (ZONE, 16));
    assert_eq!((info.max_open, info.max_active), (4, 6));
    assert!(info.max_append_bytes >= BLOCK as u32);
    // Namespace 1 is not zoned.
    // SAFETY: as above.
    let rc = unsafe { nvme_ctrlr_get_zone_info(z.ctrlr, 1, &mut info) };
    assert_eq!(rc, NVME_ERR_NAMESPACE);
    assert!(
        last_error().contains("not a zoned namespace"),
        "{}",
        last_error()
    );
    let zones = z.report(0, NVME_ZONE_REPORT_ALL);
    assert_eq!(zones.len(), 16);
    for (i, zone) in zones.iter().enumerate() {
        let start = i as u64 * ZONE;
        assert_eq!((zone.zslba, zone.wp, zone.capacity), (start, start, ZONE));
        assert_eq!(zone.state, NVME_ZONE_STATE_EMPTY);
        assert_eq!(zone.zone_type, 2, "Sequential Write Required");
    }
    // From the middle of zone 3: zones 3..16.
    assert_eq!(
        z.report(3 * ZONE + 10, NVME_ZONE_REPORT_ALL)[0].zslba,
        3 * ZONE
    );
    assert_eq!(z.report(3 * ZONE, NVME_ZONE_REPORT_ALL).len(), 13);
    assert!(z.report(0, NVME_ZONE_REPORT_FULL).is_empty());
}

#[test]
fn appends_return_their_lba_and_move_the_write_pointer_until_the_zone_is_full() {
    let z = Z::open();
    let zslba = 5 * ZONE;
    let buf = z.alloc(4 * BLOCK);
    let mut expected_lba = zslba;
    let mut written = Vec::new();
    for k in 0..3u8 {
        bytes(buf).fill(0x10 + k);
        let s = z.append(zslba, buf, 4);
        assert_eq!(s.error.get(), NVME_OK, "{}", last_error());
        assert_eq!(
            s.lba.get(),
            expected_lba,
            "append {k} landed at the write pointer"
        );
        written.push((s.lba.get(), 0x10 + k));
        expected_lba += 4;
        let zone = z.zone(zslba);
        assert_eq!(zone.wp, expected_lba);
        assert_eq!(zone.state, NVME_ZONE_STATE_IMPLICITLY_OPENED);
    }
    // Read back through the returned LBAs.
    let back = z.alloc(4 * BLOCK);
    for (lba, fill) in written {
        // SAFETY: live handles of this thread.
        let s =
            z.run(|a| unsafe { nvme_qpair_submit_read(z.qp, ZNS, lba, 4, back, Some(seen), a) });
        assert_eq!(s.error.get(), NVME_OK);
        assert!(bytes(back)[..4 * BLOCK].iter().all(|&b| b == fill));
    }
    // A plain write off the write pointer: Zone Invalid Write.
    // SAFETY: as above.
    let s =
        z.run(|a| unsafe { nvme_qpair_submit_write(z.qp, ZNS, zslba, 1, buf, 0, Some(seen), a) });
    assert_eq!(s.error.get(), NVME_ERR_ZONE_INVALID_WRITE);
    assert_eq!(s.sc.get(), 0xBC);
    // Finish: Full, and an append to it fails with its own code, the status kept.
    assert_eq!(
        z.mgmt(zslba, NVME_ZONE_ACTION_FINISH, 0).error.get(),
        NVME_OK
    );
    assert_eq!(z.zone(zslba).state, NVME_ZONE_STATE_FULL);
    assert_eq!(z.report(0, NVME_ZONE_REPORT_FULL).len(), 1);
    let s = z.append(zslba, buf, 1);
    assert_eq!(s.error.get(), NVME_ERR_ZONE_FULL);
    assert_eq!(s.lba.get(), 0, "a failed append reports no LBA");
    assert_eq!(s.sc.get(), 0xB9);
    // Reset: Empty, write pointer back at the start; the next append lands there.
    assert_eq!(
        z.mgmt(zslba, NVME_ZONE_ACTION_RESET, 0).error.get(),
        NVME_OK
    );
    let zone = z.zone(zslba);
    assert_eq!((zone.state, zone.wp), (NVME_ZONE_STATE_EMPTY, zslba));
    assert_eq!(z.append(zslba, buf, 2).lba.get(), zslba);
    // Filling the zone by appends: the last one that fits makes it Full.
    // 32 blocks (128 KiB) per append: the emulator's append limit (its MDTS).
    let big = z.alloc(32 * BLOCK);
    let mut lba = zslba + 2;
    while lba + 32 <= zslba + ZONE {
        let s = z.append(zslba, big, 32);
        assert_eq!((s.error.get(), s.lba.get()), (NVME_OK, lba));
        lba += 32;
    }
    let rest = (zslba + ZONE - lba) as u32;
    assert_eq!(rest, 30);
    let s = z.append(zslba, big, rest);
    assert_eq!((s.error.get(), s.lba.get()), (NVME_OK, lba));
    assert_eq!(z.zone(zslba).state, NVME_ZONE_STATE_FULL);
    assert_eq!(z.append(zslba, buf, 1).error.get(), NVME_ERR_ZONE_FULL);
    // SAFETY: idle buffers of this test.
    unsafe {
        for b in [buf, back, big] {
            assert_eq!(nvme_buf_free(b), NVME_OK);
        }
    }
}

#[test]
fn zone_actions_limits_and_select_all() {
    let z = Z::open();
    // Open 4 zones explicitly: the limit; a fifth is Too Many Open Zones.
    for i in 0..4 {
        assert_eq!(
            z.mgmt(i * ZONE, NVME_ZONE_ACTION_OPEN, 0).error.get(),
            NVME_OK
        );
        assert_eq!(z.zone(i * ZONE).state, NVME_ZONE_STATE_EXPLICITLY_OPENED);
    }
    let s = z.mgmt(4 * ZONE, NVME_ZONE_ACTION_OPEN, 0);
    assert_eq!(s.error.get(), NVME_ERR_ZONE_TOO_MANY_OPEN);
    // Close one: Closed (still active), then the fifth opens.
    assert_eq!(z.mgmt(0, NVME_ZONE_ACTION_CLOSE, 0).error.get(), NVME_OK);
    assert_eq!(z.zone(0).state, NVME_ZONE_STATE_CLOSED);
    assert_eq!(
        z.mgmt(4 * ZONE, NVME_ZONE_ACTION_OPEN, 0).error.get(),
        NVME_OK
    );
    // Offline is only allowed from Read Only: an invalid transition for an empty zone.
    let s = z.mgmt(9 * ZONE, NVME_ZONE_ACTION_OFFLINE, 0);
    assert_eq!(s.error.get(), NVME_ERR_ZONE_INVALID_TRANSITION);
    assert_eq!(s.sc.get(), 0xBF);
    // Finish all: every active zone becomes Full (5 of them); reset all: all Empty again.
    assert_eq!(
        z.mgmt(0, NVME_ZONE_ACTION_FINISH, NVME_ZONE_ALL)
            .error
            .get(),
        NVME_OK
    );
    assert_eq!(z.report(0, NVME_ZONE_REPORT_FULL).len(), 5);
    assert_eq!(
        z.mgmt(0, NVME_ZONE_ACTION_RESET, NVME_ZONE_ALL).error.get(),
        NVME_OK
    );
    assert_eq!(z.report(0, NVME_ZONE_REPORT_EMPTY).len(), 16);
}

#[test]
fn bad_arguments_are_refused_before_anything_is_sent() {
    let z = Z::open();
    let buf = z.alloc(BLOCK);
    let small = z.alloc(64);
    // SAFETY: live handles of this thread; no callback runs for a refused submission.
    unsafe {
        let n = ptr::null_mut();
        // Not a zone start.
        assert_eq!(
            nvme_qpair_submit_zone_append(z.qp, ZNS, 3, 1, buf, 0, None, n),
            NVME_ERR_INVALID_ARGUMENT
        );
        assert!(!nvme_buf_in_flight(buf));
        assert_eq!(
            nvme_qpair_submit_zone_append(z.qp, ZNS, 0, 1, buf, 0x4, None, n),
            NVME_ERR_INVALID_ARGUMENT
        );
        assert_eq!(
            nvme_qpair_submit_zone_mgmt(z.qp, ZNS, 0, 0x10, 0, None, n),
            NVME_ERR_INVALID_ARGUMENT
        );
        assert_eq!(
            nvme_qpair_submit_zone_mgmt(z.qp, ZNS, 0, NVME_ZONE_ACTION_RESET, 2, None, n),
            NVME_ERR_INVALID_ARGUMENT
        );
        assert_eq!(
            nvme_qpair_submit_zone_report(z.qp, ZNS, 0, 8, buf, None, n),
            NVME_ERR_INVALID_ARGUMENT
        );
        assert_eq!(
            nvme_qpair_submit_zone_report(z.qp, ZNS, 0, 0, small, None, n),
            NVME_ERR_INVALID_ARGUMENT
        );
        assert_eq!(
            nvme_qpair_submit_zone_report(z.qp, ZNS, 0, 0, ptr::null_mut(), None, n),
            NVME_ERR_NULL_POINTER
        );
        assert_eq!(nvme_qpair_outstanding(z.qp), 0);
        // Parsing: NULL arguments; a buffer too short for the header.
        let mut zones = [nvme_zone::default(); 2];
        assert_eq!(
            nvme_zone_report_parse(ptr::null(), zones.as_mut_ptr(), 2),
            NVME_ERR_NULL_POINTER
        );
        assert_eq!(
            nvme_zone_report_parse(buf, ptr::null_mut(), 2),
            NVME_ERR_NULL_POINTER
        );
        let mut tiny = ptr::null_mut();
        assert_eq!(nvme_buf_alloc(z.ctrlr, 32, &mut tiny), NVME_OK);
        assert_eq!(
            nvme_zone_report_parse(tiny, zones.as_mut_ptr(), 2),
            NVME_ERR_INVALID_ARGUMENT
        );
        // A header claiming more zones than the buffer holds: cut to what it holds.
        let b = bytes(buf);
        b.fill(0);
        b[..8].copy_from_slice(&u64::MAX.to_le_bytes());
        assert_eq!(nvme_zone_report_parse(buf, zones.as_mut_ptr(), 2), 2);
        let mut many = vec![nvme_zone::default(); 100];
        assert_eq!(
            nvme_zone_report_parse(buf, many.as_mut_ptr(), 100),
            (BLOCK / 64 - 1) as i32
        );
        for b in [buf, small, tiny] {
            assert_eq!(nvme_buf_free(b), NVME_OK);
        }
    }
}
