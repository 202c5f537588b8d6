//! Vectored reads and writes (`nvme_qpair_submit_readv` / `_writev`): one command whose data is
//! a list of pieces, each a byte range of a buffer handle. The driver's vectored path
//! (`IoQueue::submit_vectored`) builds the data pointer: SGL Data Blocks where the controller
//! offers SGLs (NVMe Base 2.0 §4.1.2), else one PRP list over the pieces' pages (§4.1.1).
//! Never split: above one command's transfer (MDTS) it is refused with
//! `NVME_ERR_IOVEC_TOO_LARGE`.
//!
//! INVARIANT: while a vectored request is outstanding, each of its pieces' handles is in
//! flight, its `DmaBuffer` split into the piece (moved into the request's `IoVec`) and the
//! bytes before and after it (kept in the request's [`Part`] here, untouched by the device).
//! The completion, or a refused submission, joins the three back into the handle; when the
//! driver keeps the pieces (timeout, a pair destroyed with the request outstanding) every
//! handle is detached, as for a single buffer.

use std::ffi::{c_int, c_void};
use std::ptr;

use nvme_driver::command::{Read, Write};
use nvme_driver::{DmaBuffer, IoFailure, IoVec, WriteFlags, IOVEC_MAX_PIECES};
use nvme_pool::Slab;

use crate::boundary::{fail, guard};
use crate::buffer::{nvme_buf, restore, BufState};
use crate::errors::*;
use crate::qpair::{nvme_cb_fn, nvme_qpair, Request, RequestKind};
use crate::submit::fua_flag;

/// One piece of a vectored read or write: `len` bytes at byte `offset` of the buffer `buf`.
/// Every piece of a request names a different buffer handle.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct nvme_iov_piece {
    /// The buffer handle (idle; in flight with the request until its callback).
    pub buf: *mut nvme_buf,
    /// First byte of the piece inside the buffer.
    pub offset: usize,
    /// Bytes of the piece (at least 1).
    pub len: usize,
}

/// Most pieces one vectored request carries.
pub const NVME_IOV_MAX_PIECES: u32 = IOVEC_MAX_PIECES as u32;

/// A piece's handle and the bytes of its buffer around the piece, kept while it is in flight.
pub(crate) struct Part {
    handle: *mut nvme_buf,
    head: Option<DmaBuffer>,
    tail: Option<DmaBuffer>,
}

/// The parts of the vectored requests in flight on a queue pair, with spare vectors reused
/// from one request to the next (no allocation per request once warmed up).
pub(crate) struct VectoredTable {
    entries: Slab<Vec<Part>>,
    spare_parts: Vec<Vec<Part>>,
    /// Boxed because a request carries its `IoVec` boxed: the box moves to the driver and
    /// back, so keeping boxes (not values) is what avoids an allocation per request.
    #[allow(clippy::vec_box)]
    spare_iovs: Vec<Box<IoVec>>,
}

impl Default for VectoredTable {
    fn default() -> Self {
        Self {
            entries: Slab::new(0),
            spare_parts: Vec::new(),
            spare_iovs: Vec::new(),
        }
    }
}

/// Joins a piece back with the bytes around it (`None` cannot happen: the three came from one
/// `split_at` pair and are adjacent).
fn rejoin(part: &mut Part, mid: DmaBuffer) -> Option<DmaBuffer> {
    let mut whole = mid;
    if let Some(head) = part.head.take() {
        whole = head.join(whole).ok()?;
    }
    if let Some(tail) = part.tail.take() {
        whole = whole.join(tail).ok()?;
    }
    Some(whole)
}

impl VectoredTable {
    /// Gives every part's handle its memory back: the pieces in order (`Some`), or detached
    /// handles when the driver kept the pieces (`None`).
    ///
    /// # Safety
    /// The parts' handles are live and owned by this thread.
    unsafe fn give_back(&mut self, mut parts: Vec<Part>, pieces: Option<Box<IoVec>>) {
        match pieces {
            Some(mut iov) => {
                {
                    let mut mids = iov.drain();
                    for part in &mut parts {
                        let whole = mids.next().and_then(|mid| rejoin(part, mid));
                        // SAFETY: the caller's contract.
                        unsafe { restore(part.handle, whole) };
                    }
                }
                self.spare_iovs.push(iov);
            }
            None => {
                for part in &parts {
                    // SAFETY: the caller's contract. The bytes around the piece were never
                    // part of the command: dropping them is safe, the mapping lives on with
                    // the piece the driver keeps.
                    unsafe { (*part.handle).state = BufState::Detached };
                }
            }
        }
        parts.clear();
        self.spare_parts.push(parts);
    }

    /// The completion of vectored request entry `n` (see [`RequestKind::Vectored`]).
    ///
    /// # Safety
    /// The entry's handles are live and owned by this thread.
    #[cold]
    pub(crate) unsafe fn complete(&mut self, n: u32, pieces: Option<Box<IoVec>>) {
        if let Some(parts) = self.entries.take(n) {
            // SAFETY: forwarded caller contract.
            unsafe { self.give_back(parts, pieces) };
        }
    }

    /// Vectored request entry `n` stays on the device for good: its handles are detached.
    ///
    /// # Safety
    /// As [`VectoredTable::complete`].
    pub(crate) unsafe fn detach(&mut self, n: u32) {
        // SAFETY: forwarded caller contract.
        unsafe { self.complete(n, None) };
    }
}

/// Completes request `request`: its buffer handle, or its pieces' handles, get their memory
/// back (`buffer` / `pieces` from the completion).
///
/// # Safety
/// The request's handles are live, in flight on this thread's queue pair.
#[inline(always)]
pub(crate) unsafe fn complete_request(
    table: &mut VectoredTable,
    request: &Request,
    buffer: Option<DmaBuffer>,
    pieces: Option<Box<IoVec>>,
) {
    if !request.buf.is_null() {
        // SAFETY: the caller's contract.
        unsafe { restore(request.buf, buffer) };
    }
    if let RequestKind::Vectored(n) = request.kind {
        // SAFETY: the caller's contract.
        unsafe { table.complete(n, pieces) };
    }
}

/// Takes the buffer of piece `index` out of its handle, split around the piece: the piece
/// goes into `iov`, the rest into `parts`. On failure nothing is taken.
///
/// # Safety
/// `piece.buf` is non-null and a live handle owned by this thread.
unsafe fn take_piece(
    what: &str,
    index: usize,
    piece: &nvme_iov_piece,
    iov: &mut IoVec,
    parts: &mut Vec<Part>,
) -> Result<(), c_int> {
    // SAFETY: the caller's contract.
    let handle = unsafe { &mut *piece.buf };
    let whole = match std::mem::replace(&mut handle.state, BufState::InFlight) {
        BufState::Idle(b) => b,
        other => {
            handle.state = other;
            return Err(fail(
                NVME_ERR_BUFFER_IN_FLIGHT,
                format!(
                    "{what}: piece {index}: its buffer is in flight (or kept by the driver, or \
                     named by an earlier piece of this request): give each piece its own idle \
                     buffer"
                ),
            ));
        }
    };
    let in_range = piece.len > 0
        && piece
            .offset
            .checked_add(piece.len)
            .is_some_and(|end| end <= whole.len());
    if !in_range {
        let len = whole.len();
        handle.state = BufState::Idle(whole);
        return Err(fail(
            NVME_ERR_INVALID_ARGUMENT,
            format!(
                "{what}: piece {index}: {} bytes at offset {} do not fit its {len}-byte buffer \
                 (a piece has at least 1 byte, inside its buffer)",
                piece.len, piece.offset
            ),
        ));
    }
    // Both splits are in range (checked above), so `split_at` cannot give the buffer back.
    let (head, rest) = if piece.offset > 0 {
        match whole.split_at(piece.offset) {
            Ok((h, r)) => (Some(h), r),
            Err(b) => (None, b),
        }
    } else {
        (None, whole)
    };
    let (mid, tail) = if piece.len < rest.len() {
        match rest.split_at(piece.len) {
            Ok((m, t)) => (m, Some(t)),
            Err(b) => (b, None),
        }
    } else {
        (rest, None)
    };
    let mut part = Part {
        handle: piece.buf,
        head,
        tail,
    };
    match iov.push(mid) {
        Ok(()) => {
            parts.push(part);
            Ok(())
        }
        // Not reached: the count was checked against the capacity.
        Err(mid) => {
            let whole = rejoin(&mut part, mid);
            // SAFETY: the caller's contract.
            unsafe { restore(piece.buf, whole) };
            Err(fail(
                NVME_ERR_INVALID_ARGUMENT,
                format!("{what}: more than {IOVEC_MAX_PIECES} pieces"),
            ))
        }
    }
}

/// The shared body of `nvme_qpair_submit_readv` and `_writev` (`write`: the write's flags).
///
/// # Safety
/// As `nvme_qpair_submit_readv`.
#[allow(clippy::too_many_arguments)]
unsafe fn submit_vectored(
    what: &'static str,
    qpair: *mut nvme_qpair,
    nsid: u32,
    lba: u64,
    pieces: *const nvme_iov_piece,
    npieces: u32,
    write: Option<WriteFlags>,
    cb: nvme_cb_fn,
    cb_arg: *mut c_void,
) -> c_int {
    guard(what, || {
        check_null!(name = what, qpair, pieces);
        // Before the pieces are read: the caller's array is only known to hold `npieces`
        // entries when it is a count one request can carry.
        if npieces == 0 || npieces as usize > IOVEC_MAX_PIECES {
            return fail(
                NVME_ERR_INVALID_ARGUMENT,
                format!(
                    "{what}: {npieces} pieces: a vectored request carries 1..={IOVEC_MAX_PIECES}"
                ),
            );
        }
        // SAFETY: `pieces` is valid for `npieces` reads (caller contract, count checked).
        let pieces = unsafe { std::slice::from_raw_parts(pieces, npieces as usize) };
        if let Some(i) = pieces.iter().position(|p| p.buf.is_null()) {
            return fail(
                NVME_ERR_NULL_POINTER,
                format!("{what}: piece {i}: its `buf` is NULL"),
            );
        }
        // SAFETY: `qpair` is a live handle owned by this thread (caller contract); no other
        // reference to it exists during this call.
        let q = unsafe { &mut *qpair };
        let ns_index = match q.namespace_index(nsid) {
            Ok(i) => i,
            Err(code) => return code,
        };
        let total = pieces
            .iter()
            .try_fold(0usize, |sum, p| sum.checked_add(p.len));
        let blocks = match total.map(|t| q.namespaces[ns_index].bytes_to_blocks(t)) {
            Some(Ok(b)) => b,
            Some(Err(e)) => return fail(error_code(&e), format!("{what}: {e}")),
            None => {
                return fail(
                    NVME_ERR_INVALID_ARGUMENT,
                    format!("{what}: the pieces' lengths overflow"),
                )
            }
        };
        let Ok(blocks) = u32::try_from(blocks) else {
            return fail(
                NVME_ERR_IOVEC_TOO_LARGE,
                format!("{what}: {blocks} blocks do not fit one command"),
            );
        };
        let table = &mut q.vectored;
        let mut iov = table.spare_iovs.pop().unwrap_or_else(IoVec::boxed);
        let mut parts = table.spare_parts.pop().unwrap_or_default();
        for (index, piece) in pieces.iter().enumerate() {
            // SAFETY: `piece.buf` is non-null (checked above) and a live handle owned by this
            // thread (caller contract).
            if let Err(code) = unsafe { take_piece(what, index, piece, &mut iov, &mut parts) } {
                // SAFETY: the handles taken so far are live and owned by this thread.
                unsafe { table.give_back(parts, Some(iov)) };
                return code;
            }
        }
        let n = table.entries.insert(parts);
        let index = q.alloc_request(Request {
            cb,
            arg: cb_arg,
            buf: ptr::null_mut(),
            kind: RequestKind::Vectored(n),
        });
        let ns = &q.namespaces[ns_index];
        let ud = u64::from(index);
        let submitted = match write {
            None => q.qp.submit_vectored(ns, Read::new(lba, blocks), iov, ud),
            Some(flags) => {
                q.qp.submit_vectored(ns, Write::new(lba, blocks).flags(flags), iov, ud)
            }
        };
        match submitted {
            Ok(()) => NVME_OK,
            Err(IoFailure { error, pieces, .. }) => {
                q.requests.take(index);
                if let Some(parts) = q.vectored.entries.take(n) {
                    // SAFETY: the handles are live and owned by this thread.
                    unsafe { q.vectored.give_back(parts, pieces) };
                }
                fail(error_code(&error), format!("{what}: {error}"))
            }
        }
    })
}

/// Queues one Read of the blocks from `lba` of namespace `nsid` into `npieces` (1..=32)
/// pieces, in order: the pieces' lengths add up to the transfer (a whole number of blocks).
/// Each piece is a byte range of its own buffer handle; every handle is in flight until
/// `cb_fn(cb_arg, status)` runs (`status->buf` is NULL), then idle again with the data in
/// its range. One command, never split: above `max_transfer_bytes` it fails with
/// `NVME_ERR_IOVEC_TOO_LARGE`. The pieces' shape: each is a whole number of dwords at a
/// dword-aligned address; on a controller without SGLs (or with `nvme_ctrlr_opts.sgl`
/// false) also every piece but the first starts on a memory page boundary and every piece
/// but the last ends on one (a PRP list, NVMe Base 2.0 §4.1.1), else `NVME_ERR_IOVEC_PIECE`
/// naming the piece. On failure nothing is queued and every handle stays idle
/// (`NVME_ERR_BUFFER_IN_FLIGHT` for a handle in flight or named twice). On PCIe and NVMe/TCP.
///
/// # Safety
/// `qpair` is NULL or a live handle used only by the calling thread; `pieces` is NULL or valid
/// for `npieces` reads (when `npieces` is in 1..=32), each `buf` NULL or a live buffer handle
/// used only by the calling thread that stays live until the callback ran.
#[no_mangle]
pub unsafe extern "C" fn nvme_qpair_submit_readv(
    qpair: *mut nvme_qpair,
    nsid: u32,
    lba: u64,
    pieces: *const nvme_iov_piece,
    npieces: u32,
    cb_fn: nvme_cb_fn,
    cb_arg: *mut c_void,
) -> c_int {
    // SAFETY: forwarded caller contract.
    unsafe {
        submit_vectored(
            "nvme_qpair_submit_readv",
            qpair,
            nsid,
            lba,
            pieces,
            npieces,
            None,
            cb_fn,
            cb_arg,
        )
    }
}

/// Queues one Write of the blocks from `lba` of namespace `nsid` from `npieces` pieces, in
/// order; `flags` is 0 or `NVME_IO_FUA`. Same rules as `nvme_qpair_submit_readv`.
///
/// # Safety
/// As `nvme_qpair_submit_readv`.
#[no_mangle]
// The C signature is the ABI (include/nvme_userspace.h): its eight arguments stay.
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn nvme_qpair_submit_writev(
    qpair: *mut nvme_qpair,
    nsid: u32,
    lba: u64,
    pieces: *const nvme_iov_piece,
    npieces: u32,
    flags: u32,
    cb_fn: nvme_cb_fn,
    cb_arg: *mut c_void,
) -> c_int {
    const WHAT: &str = "nvme_qpair_submit_writev";
    let fua = match fua_flag(WHAT, flags) {
        Ok(fua) => fua,
        Err(code) => return code,
    };
    let flags = WriteFlags::NONE.with_fua(fua);
    // SAFETY: forwarded caller contract.
    unsafe {
        submit_vectored(
            WHAT,
            qpair,
            nsid,
            lba,
            pieces,
            npieces,
            Some(flags),
            cb_fn,
            cb_arg,
        )
    }
}
