//! `nvme_qpair_submit_readv` / `_writev` through the exported functions on the emulated
//! controller (MDTS 5: 128 KiB per command): every piece shape reads back what was written
//! (unaligned pieces inside their buffers with SGLs, page-aligned pieces as one PRP list with
//! SGLs off), the pieces' buffers are idle again with the bytes around each piece untouched,
//! and what the driver refuses (a piece breaking the PRP rules, a request above MDTS, bad
//! counts, a buffer named twice) fails with its code and leaves every buffer idle.

use std::ffi::c_void;
use std::ptr;

use nvme_userspace::*;

mod common;
use common::{last_error, poll_until, record, Seen};

const NS: u32 = 2; // 4096-byte blocks
const BLOCK: usize = 4096;

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

fn piece(buf: *mut nvme_buf, offset: usize, len: usize) -> nvme_iov_piece {
    nvme_iov_piece { buf, offset, len }
}

fn in_flight(buf: *mut nvme_buf) -> bool {
    // SAFETY: a live handle of this test.
    unsafe { nvme_buf_in_flight(buf) }
}

/// Writes `pieces` (filled with a pattern first) at `lba`, reads the same blocks back into
/// `back` (same shape, other buffers) and checks the bytes, and that the bytes of `back`'s
/// buffers outside the pieces kept their fill.
///
/// # Safety
/// Live handles of this thread.
unsafe fn round_trip(
    ctrlr: *mut nvme_ctrlr,
    qp: *mut nvme_qpair,
    lba: u64,
    pieces: &[nvme_iov_piece],
    back: &[nvme_iov_piece],
) {
    let mut expected = Vec::new();
    for (k, p) in pieces.iter().enumerate() {
        let data: Vec<u8> = (0..p.len).map(|i| (i * 13 + k * 41 + 7) as u8).collect();
        bytes(p.buf)[p.offset..p.offset + p.len].copy_from_slice(&data);
        expected.extend(data);
    }
    for p in back {
        bytes(p.buf).fill(0xA5);
    }
    let seen = Seen::default();
    // SAFETY: forwarded caller contract; `seen` outlives the poll.
    let rc = unsafe {
        nvme_qpair_submit_writev(
            qp,
            NS,
            lba,
            pieces.as_ptr(),
            pieces.len() as u32,
            NVME_IO_FUA,
            Some(record),
            arg(&seen),
        )
    };
    assert_eq!(rc, NVME_OK, "{}", last_error());
    assert!(pieces.iter().all(|p| in_flight(p.buf)));
    assert_eq!(poll_until(qp, &seen, 1), NVME_OK);
    assert!(pieces.iter().all(|p| !in_flight(p.buf)));
    let seen = Seen::default();
    // SAFETY: as above.
    let rc = unsafe {
        nvme_qpair_submit_readv(
            qp,
            NS,
            lba,
            back.as_ptr(),
            back.len() as u32,
            Some(record),
            arg(&seen),
        )
    };
    assert_eq!(rc, NVME_OK, "{}", last_error());
    assert_eq!(poll_until(qp, &seen, 1), NVME_OK);
    let mut got = Vec::new();
    for p in back {
        assert!(!in_flight(p.buf));
        let all = bytes(p.buf);
        got.extend_from_slice(&all[p.offset..p.offset + p.len]);
        assert!(
            all[..p.offset].iter().all(|&b| b == 0xA5),
            "bytes before the piece"
        );
        assert!(
            all[p.offset + p.len..].iter().all(|&b| b == 0xA5),
            "bytes after the piece"
        );
    }
    assert_eq!(got, expected, "data read back equals data written");
    // The same blocks read plainly (one buffer) hold the concatenation too.
    let total = expected.len();
    let one = alloc(ctrlr, total);
    let seen = Seen::default();
    // SAFETY: as above.
    let rc = unsafe {
        nvme_qpair_submit_read(
            qp,
            NS,
            lba,
            (total / BLOCK) as u32,
            one,
            Some(record),
            arg(&seen),
        )
    };
    assert_eq!(rc, NVME_OK, "{}", last_error());
    assert_eq!(poll_until(qp, &seen, 1), NVME_OK);
    assert_eq!(&bytes(one)[..total], &expected[..]);
    // SAFETY: idle buffer of this test.
    assert_eq!(unsafe { nvme_buf_free(one) }, NVME_OK);
}

fn open(sgl: bool) -> (*mut nvme_dma_context, *mut nvme_ctrlr, *mut nvme_qpair) {
    let mut ctx = ptr::null_mut();
    // SAFETY: valid out pointer.
    let rc = unsafe { nvme_dma_context_create_emulated(&mut ctx) };
    assert_eq!(rc, NVME_OK);
    let mut opts = nvme_ctrlr_opts {
        shadow_doorbells: 0,
        sgl: true,
    };
    // SAFETY: valid place for the defaults.
    assert_eq!(unsafe { nvme_ctrlr_opts_init(&mut opts) }, NVME_OK);
    opts.sgl = sgl;
    let mut ctrlr = ptr::null_mut();
    // SAFETY: live context, valid options and out pointer.
    let rc = unsafe { nvme_ctrlr_open_emulated_in_opts(ctx, &opts, &mut ctrlr) };
    assert_eq!(rc, NVME_OK, "{}", last_error());
    // SAFETY: open controller.
    assert_eq!(unsafe { nvme_ctrlr_uses_sgl(ctrlr) }, i32::from(sgl));
    let mut qp = ptr::null_mut();
    // SAFETY: open controller, valid out pointer.
    assert_eq!(unsafe { nvme_qpair_create(ctrlr, 16, 0, &mut qp) }, NVME_OK);
    (ctx, ctrlr, qp)
}

fn close(
    ctx: *mut nvme_dma_context,
    ctrlr: *mut nvme_ctrlr,
    qp: *mut nvme_qpair,
    bufs: &[*mut nvme_buf],
) {
    // SAFETY: live handles of this test, each released once, buffers idle.
    unsafe {
        assert_eq!(nvme_qpair_destroy(qp), NVME_OK);
        for &b in bufs {
            assert_eq!(nvme_buf_free(b), NVME_OK);
        }
        assert_eq!(nvme_ctrlr_close(ctrlr), NVME_OK);
        assert_eq!(nvme_dma_context_free(ctx), NVME_OK);
    }
}

#[test]
fn unaligned_pieces_go_as_sgl_data_blocks_and_read_back() {
    let (ctx, ctrlr, qp) = open(true);
    let bufs: Vec<_> = (0..8).map(|_| alloc(ctrlr, 3 * BLOCK)).collect();
    // Three blocks in pieces that start and end inside pages: 1000 + 6000 + 5288 bytes.
    let w = [
        piece(bufs[0], 100, 1000),
        piece(bufs[1], 4, 6000),
        piece(bufs[2], 2048, 3 * BLOCK - 1000 - 6000),
    ];
    // Read back in another shape: 12 + 8192 + 4084 bytes.
    let r = [
        piece(bufs[3], 8, 12),
        piece(bufs[4], 1996, 2 * BLOCK),
        piece(bufs[5], 0, BLOCK - 12),
    ];
    // SAFETY: live handles of this thread.
    unsafe { round_trip(ctrlr, qp, 7, &w, &r) };
    // One piece, the whole buffer.
    // SAFETY: as above.
    unsafe {
        round_trip(
            ctrlr,
            qp,
            20,
            &[piece(bufs[6], 0, 3 * BLOCK)],
            &[piece(bufs[7], 0, 3 * BLOCK)],
        )
    };
    close(ctx, ctrlr, qp, &bufs);
}

#[test]
fn page_aligned_pieces_go_as_one_prp_list_and_read_back() {
    let (ctx, ctrlr, qp) = open(false);
    let bufs: Vec<_> = (0..8).map(|_| alloc(ctrlr, 4 * BLOCK)).collect();
    // The first piece may start inside a page, the last end inside one; the rest are whole
    // pages: 5 blocks over 4 buffers.
    let w = [
        piece(bufs[0], 3 * BLOCK + 2048, 2048),
        piece(bufs[1], BLOCK, 2 * BLOCK),
        piece(bufs[2], 0, BLOCK),
        piece(bufs[3], 0, BLOCK + 2048),
    ];
    let r = [piece(bufs[4], 0, 4 * BLOCK), piece(bufs[5], 0, BLOCK)];
    // SAFETY: live handles of this thread.
    unsafe { round_trip(ctrlr, qp, 100, &w, &r) };
    // 32 pieces of one page each: the most a request carries.
    let many: Vec<_> = (0..32).map(|_| alloc(ctrlr, BLOCK)).collect();
    let back: Vec<_> = (0..32).map(|_| alloc(ctrlr, BLOCK)).collect();
    let wp: Vec<_> = many.iter().map(|&b| piece(b, 0, BLOCK)).collect();
    let rp: Vec<_> = back.iter().map(|&b| piece(b, 0, BLOCK)).collect();
    // SAFETY: as above.
    unsafe { round_trip(ctrlr, qp, 200, &wp, &rp) };

    // Without SGLs a middle piece starting inside a page breaks the PRP rules: refused with
    // its own code, naming the piece, every buffer idle and nothing queued.
    let bad = [piece(bufs[6], 0, BLOCK), piece(bufs[7], 512, BLOCK)];
    let seen = Seen::default();
    // SAFETY: as above.
    let rc = unsafe {
        nvme_qpair_submit_writev(qp, NS, 0, bad.as_ptr(), 2, 0, Some(record), arg(&seen))
    };
    assert_eq!(rc, NVME_ERR_IOVEC_PIECE, "{}", last_error());
    assert!(
        last_error().contains("piece 1") || last_error().contains("index 1"),
        "{}",
        last_error()
    );
    assert!(!in_flight(bufs[6]) && !in_flight(bufs[7]));
    // SAFETY: as above.
    assert_eq!(unsafe { nvme_qpair_outstanding(qp) }, 0);
    let mut all = bufs.clone();
    all.extend(many);
    all.extend(back);
    close(ctx, ctrlr, qp, &all);
}

#[test]
fn refusals_leave_every_buffer_idle() {
    let (ctx, ctrlr, qp) = open(true);
    let big: Vec<_> = (0..2).map(|_| alloc(ctrlr, 128 << 10)).collect();
    let seen = Seen::default();
    let check_idle = |bufs: &[*mut nvme_buf]| {
        assert!(bufs.iter().all(|&b| !in_flight(b)));
        // SAFETY: live pair of this thread.
        assert_eq!(unsafe { nvme_qpair_outstanding(qp) }, 0);
    };
    // 256 KiB in two pieces: above MDTS (128 KiB) and never split.
    let p = [piece(big[0], 0, 128 << 10), piece(big[1], 0, 128 << 10)];
    // SAFETY: live handles of this thread; `seen` outlives any callback (none runs).
    let rc = unsafe { nvme_qpair_submit_readv(qp, NS, 0, p.as_ptr(), 2, Some(record), arg(&seen)) };
    assert_eq!(rc, NVME_ERR_IOVEC_TOO_LARGE, "{}", last_error());
    check_idle(&big);
    // Exactly MDTS goes.
    let p = [piece(big[0], 0, 64 << 10), piece(big[1], 4096, 64 << 10)];
    // SAFETY: as above.
    let rc = unsafe { nvme_qpair_submit_readv(qp, NS, 0, p.as_ptr(), 2, Some(record), arg(&seen)) };
    assert_eq!(rc, NVME_OK, "{}", last_error());
    assert_eq!(poll_until(qp, &seen, 1), NVME_OK);
    check_idle(&big);
    // The same buffer twice.
    let p = [piece(big[0], 0, BLOCK), piece(big[0], BLOCK, BLOCK)];
    // SAFETY: as above.
    let rc = unsafe { nvme_qpair_submit_readv(qp, NS, 0, p.as_ptr(), 2, Some(record), arg(&seen)) };
    assert_eq!(rc, NVME_ERR_BUFFER_IN_FLIGHT, "{}", last_error());
    check_idle(&big);
    // Not a whole number of blocks; a piece past its buffer's end; an empty piece.
    for (p, code) in [
        (
            [piece(big[0], 0, BLOCK), piece(big[1], 0, 512)],
            NVME_ERR_INVALID_ARGUMENT,
        ),
        (
            [
                piece(big[0], 0, BLOCK),
                piece(big[1], (128 << 10) - 512, BLOCK),
            ],
            NVME_ERR_INVALID_ARGUMENT,
        ),
        (
            [piece(big[0], 0, BLOCK), piece(big[1], 0, 0)],
            NVME_ERR_INVALID_ARGUMENT,
        ),
    ] {
        // SAFETY: as above.
        let rc = unsafe {
            nvme_qpair_submit_writev(qp, NS, 0, p.as_ptr(), 2, 0, Some(record), arg(&seen))
        };
        assert_eq!(rc, code, "{}", last_error());
        check_idle(&big);
    }
    // Counts: 0 and 33 are refused before the array is read; NULL pointers; unknown flags.
    // SAFETY: the array is not read for these counts.
    unsafe {
        let p = [piece(big[0], 0, BLOCK)];
        assert_eq!(
            nvme_qpair_submit_readv(qp, NS, 0, p.as_ptr(), 0, None, ptr::null_mut()),
            NVME_ERR_INVALID_ARGUMENT
        );
        assert_eq!(
            nvme_qpair_submit_readv(
                qp,
                NS,
                0,
                p.as_ptr(),
                NVME_IOV_MAX_PIECES + 1,
                None,
                ptr::null_mut()
            ),
            NVME_ERR_INVALID_ARGUMENT
        );
        assert_eq!(
            nvme_qpair_submit_readv(qp, NS, 0, ptr::null(), 1, None, ptr::null_mut()),
            NVME_ERR_NULL_POINTER
        );
        let null_buf = [piece(ptr::null_mut(), 0, BLOCK)];
        assert_eq!(
            nvme_qpair_submit_readv(qp, NS, 0, null_buf.as_ptr(), 1, None, ptr::null_mut()),
            NVME_ERR_NULL_POINTER
        );
        assert_eq!(
            nvme_qpair_submit_writev(qp, NS, 0, p.as_ptr(), 1, 0x80, None, ptr::null_mut()),
            NVME_ERR_INVALID_ARGUMENT
        );
        // Outside the namespace (4096 blocks).
        assert_eq!(
            nvme_qpair_submit_readv(qp, NS, 4096, p.as_ptr(), 1, None, ptr::null_mut()),
            NVME_ERR_LBA_RANGE
        );
    }
    check_idle(&big);
    close(ctx, ctrlr, qp, &big);
}

#[test]
fn a_pair_destroyed_with_a_vectored_read_outstanding_gives_the_buffers_back() {
    let (ctx, ctrlr, qp) = open(true);
    let bufs: Vec<_> = (0..2).map(|_| alloc(ctrlr, 2 * BLOCK)).collect();
    let p = [piece(bufs[0], 4, BLOCK), piece(bufs[1], 8, BLOCK)];
    let seen = Seen::default();
    // SAFETY: live handles of this thread.
    let rc = unsafe { nvme_qpair_submit_readv(qp, NS, 3, p.as_ptr(), 2, Some(record), arg(&seen)) };
    assert_eq!(rc, NVME_OK, "{}", last_error());
    // The destroy drains it (the emulator completes it): the buffers are idle and whole.
    close(ctx, ctrlr, qp, &[]);
    for &b in &bufs {
        assert!(!in_flight(b));
        assert_eq!(bytes(b).len(), 2 * BLOCK);
        // SAFETY: idle handle of this test, freed once.
        assert_eq!(unsafe { nvme_buf_free(b) }, NVME_OK);
    }
    assert_eq!(seen.calls.get(), 0, "destroy runs no callbacks");
}
