//! Submissions: read, write and copy (moving the buffer handle's `DmaBuffer` into the queue
//! pair), and the commands without data (flush, write zeroes, verify, deallocate).
//!
//! INVARIANT: a failed submission gives back what it took: the request index goes back to
//! `free` and the buffer into its handle (detached instead when the driver kept it).

use std::ffi::{c_int, c_void};
use std::ptr;

use nvme_driver::command::{Copy, CopyRanges, Read, Verify, Write, WriteUncorrectable};
use nvme_driver::fused::CompareAndWrite;
use nvme_driver::spec::queue::{COPY_MAX_RANGES, DSM_MAX_RANGES};
use nvme_driver::{DmaBuffer, IoFailure, Namespace, NvmCommand, WriteFlags};

use crate::boundary::{fail, guard};
use crate::buffer::{nvme_buf, BufState};
use crate::errors::*;
use crate::qpair::{nvme_cb_fn, nvme_lba_range, nvme_qpair, Request, RequestKind};
use crate::qpair::{NVME_IO_DEALLOCATE, NVME_IO_FUA};

/// Submits a data command (a typed value, `nvme_driver::command`) on `buf`, moving its
/// `DmaBuffer` into the queue pair.
///
/// # Safety
/// `qpair` and `buf` are NULL or live handles owned by the calling thread.
pub(crate) unsafe fn submit_data<C: NvmCommand>(
    what: &'static str,
    qpair: *mut nvme_qpair,
    nsid: u32,
    cmd: C,
    buf: *mut nvme_buf,
    cb: nvme_cb_fn,
    cb_arg: *mut c_void,
) -> c_int {
    // SAFETY: forwarded caller contract.
    unsafe {
        submit_buffer(what, qpair, nsid, buf, cb, cb_arg, |q, ns, dma, ud| {
            q.submit(ns, cmd, Some(dma), ud)
        })
    }
}

/// [`submit_data`] for a request whose completion needs more than its buffer (`kind`).
///
/// # Safety
/// As [`submit_data`].
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn submit_data_kind<C: NvmCommand>(
    what: &'static str,
    qpair: *mut nvme_qpair,
    nsid: u32,
    cmd: C,
    buf: *mut nvme_buf,
    kind: RequestKind,
    cb: nvme_cb_fn,
    cb_arg: *mut c_void,
) -> c_int {
    // SAFETY: forwarded caller contract.
    unsafe {
        submit_buffer_kind(
            what,
            qpair,
            nsid,
            buf,
            kind,
            cb,
            cb_arg,
            |q, ns, dma, ud| q.submit(ns, cmd, Some(dma), ud),
        )
    }
}

/// Moves `buf`'s `DmaBuffer` into the queue pair through `submit` (which gets the pair, the
/// namespace, the buffer and the request index to pass as user data): the shared part of
/// every submission with a data buffer.
///
/// # Safety
/// `qpair` and `buf` are NULL or live handles owned by the calling thread.
unsafe fn submit_buffer(
    what: &'static str,
    qpair: *mut nvme_qpair,
    nsid: u32,
    buf: *mut nvme_buf,
    cb: nvme_cb_fn,
    cb_arg: *mut c_void,
    submit: impl FnOnce(
        &mut crate::transport::Pair,
        &Namespace,
        DmaBuffer,
        u64,
    ) -> Result<(), IoFailure>,
) -> c_int {
    // SAFETY: forwarded caller contract.
    unsafe {
        submit_buffer_kind(
            what,
            qpair,
            nsid,
            buf,
            RequestKind::Plain,
            cb,
            cb_arg,
            submit,
        )
    }
}

/// [`submit_buffer`] with the request's [`RequestKind`].
///
/// # Safety
/// As [`submit_buffer`].
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn submit_buffer_kind(
    what: &'static str,
    qpair: *mut nvme_qpair,
    nsid: u32,
    buf: *mut nvme_buf,
    kind: RequestKind,
    cb: nvme_cb_fn,
    cb_arg: *mut c_void,
    submit: impl FnOnce(
        &mut crate::transport::Pair,
        &Namespace,
        DmaBuffer,
        u64,
    ) -> Result<(), IoFailure>,
) -> c_int {
    guard(what, || {
        if qpair.is_null() || buf.is_null() {
            let arg = if qpair.is_null() { "qpair" } else { "buf" };
            return fail(
                NVME_ERR_NULL_POINTER,
                format!("{what}: argument `{arg}` is NULL"),
            );
        }
        // SAFETY: `qpair` is a live handle owned by this thread (caller contract); no other
        // reference to it exists during this call (callbacks are not running inside it).
        let q = unsafe { &mut *qpair };
        // SAFETY: `buf` is a live handle owned by this thread (caller contract).
        let handle = unsafe { &mut *buf };
        let dma = match std::mem::replace(&mut handle.state, BufState::InFlight) {
            BufState::Idle(b) => b,
            other => {
                let detached = matches!(other, BufState::Detached);
                handle.state = other;
                return fail(
                    NVME_ERR_BUFFER_IN_FLIGHT,
                    if detached {
                        format!(
                            "{what}: the buffer was kept by the driver after a timeout: free it"
                        )
                    } else {
                        format!("{what}: the buffer is already in flight: wait for its callback")
                    },
                );
            }
        };
        // By index, so that the queue pair and the namespace list are borrowed apart (no
        // clone of the namespace's `Arc` per request).
        let ns_index = match q.namespace_index(nsid) {
            Ok(i) => i,
            Err(code) => {
                handle.state = BufState::Idle(dma);
                return code;
            }
        };
        let index = q.alloc_request(Request {
            cb,
            arg: cb_arg,
            buf,
            kind,
        });
        let ns = &q.namespaces[ns_index];
        match submit(&mut q.qp, ns, dma, u64::from(index)) {
            Ok(()) => NVME_OK,
            Err(IoFailure { error, buffer, .. }) => {
                q.requests.take(index);
                handle.state = match buffer {
                    Some(b) => BufState::Idle(b),
                    None => BufState::Detached,
                };
                fail(error_code(&error), format!("{what}: {error}"))
            }
        }
    })
}

/// Queues a read of `blocks` blocks at `lba` of namespace `nsid` into `buf` (which must hold
/// `blocks * block_size` bytes). `buf` is in flight until `cb_fn(cb_arg, status)` runs from
/// `nvme_qpair_poll`; `cb_fn` may be NULL. Transfers larger than `max_transfer_bytes` are
/// split by the driver into several commands, on PCIe and NVMe/TCP alike: one callback when
/// all are done, with the first error of any of them. A split request takes as many of the
/// queue pair's slots as it has commands (`NVME_ERR_QUEUE_FULL` when fewer are free,
/// `NVME_ERR_TOO_LARGE` when the pair has fewer at all). On failure nothing is queued and
/// the buffer stays idle (`NVME_ERR_BUFFER_IN_FLIGHT` when it already is in flight,
/// `NVME_ERR_QUEUE_FULL`: poll first).
///
/// # Safety
/// `qpair` and `buf` are NULL or live handles used only by the calling thread; `buf` stays
/// live until the callback ran.
#[no_mangle]
pub unsafe extern "C" fn nvme_qpair_submit_read(
    qpair: *mut nvme_qpair,
    nsid: u32,
    lba: u64,
    blocks: u32,
    buf: *mut nvme_buf,
    cb_fn: nvme_cb_fn,
    cb_arg: *mut c_void,
) -> c_int {
    // SAFETY: forwarded caller contract.
    unsafe {
        submit_data(
            "nvme_qpair_submit_read",
            qpair,
            nsid,
            Read::new(lba, blocks),
            buf,
            cb_fn,
            cb_arg,
        )
    }
}

/// Queues a write of `blocks` blocks at `lba` of namespace `nsid` from `buf`; `flags` is 0
/// or `NVME_IO_FUA`. Same rules as `nvme_qpair_submit_read`.
///
/// # Safety
/// As `nvme_qpair_submit_read`.
#[no_mangle]
// The C signature is the ABI (include/nvme_userspace.h): its eight arguments stay.
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn nvme_qpair_submit_write(
    qpair: *mut nvme_qpair,
    nsid: u32,
    lba: u64,
    blocks: u32,
    buf: *mut nvme_buf,
    flags: u32,
    cb_fn: nvme_cb_fn,
    cb_arg: *mut c_void,
) -> c_int {
    let fua = match fua_flag("nvme_qpair_submit_write", flags) {
        Ok(fua) => fua,
        Err(code) => return code,
    };
    // SAFETY: forwarded caller contract.
    unsafe {
        submit_data(
            "nvme_qpair_submit_write",
            qpair,
            nsid,
            Write::new(lba, blocks).flags(WriteFlags::NONE.with_fua(fua)),
            buf,
            cb_fn,
            cb_arg,
        )
    }
}

/// The Force Unit Access bit of a write-like call's `flags`, `NVME_IO_FUA` being the only flag
/// they take; any other bit is refused (the code to return, its message set).
pub(crate) fn fua_flag(what: &str, flags: u32) -> Result<bool, c_int> {
    if flags & !NVME_IO_FUA != 0 {
        return Err(fail(
            NVME_ERR_INVALID_ARGUMENT,
            format!("{what}: unknown flags {flags:#x} (only NVME_IO_FUA)"),
        ));
    }
    Ok(flags & NVME_IO_FUA != 0)
}

/// Submits a command without data through `submit`, which gets the queue pair, the namespace
/// and the request index to pass as user data.
///
/// # Safety
/// `qpair` is NULL or a live handle owned by the calling thread.
pub(crate) unsafe fn submit_no_data(
    what: &'static str,
    qpair: *mut nvme_qpair,
    nsid: u32,
    cb: nvme_cb_fn,
    cb_arg: *mut c_void,
    submit: impl FnOnce(&mut nvme_qpair, &Namespace, u64) -> nvme_driver::Result<()>,
) -> c_int {
    guard(what, || {
        if qpair.is_null() {
            return fail(
                NVME_ERR_NULL_POINTER,
                format!("{what}: argument `qpair` is NULL"),
            );
        }
        // SAFETY: `qpair` is a live handle owned by this thread (caller contract); no other
        // reference to it exists during this call.
        let q = unsafe { &mut *qpair };
        let ns = match q.namespace(nsid) {
            Ok(ns) => ns.clone(),
            Err(code) => return code,
        };
        let index = q.alloc_request(Request {
            cb,
            arg: cb_arg,
            buf: ptr::null_mut(),
            kind: RequestKind::Plain,
        });
        match submit(q, &ns, u64::from(index)) {
            Ok(()) => NVME_OK,
            Err(e) => {
                q.requests.take(index);
                fail(error_code(&e), format!("{what}: {e}"))
            }
        }
    })
}

/// Queues a Flush of namespace `nsid` (its volatile write cache to media).
///
/// # Safety
/// `qpair` is NULL or a live handle used only by the calling thread.
#[no_mangle]
pub unsafe extern "C" fn nvme_qpair_submit_flush(
    qpair: *mut nvme_qpair,
    nsid: u32,
    cb_fn: nvme_cb_fn,
    cb_arg: *mut c_void,
) -> c_int {
    // SAFETY: forwarded caller contract.
    unsafe {
        submit_no_data(
            "nvme_qpair_submit_flush",
            qpair,
            nsid,
            cb_fn,
            cb_arg,
            |q, ns, ud| q.qp.submit_flush(ns, ud),
        )
    }
}

/// Queues a Write Zeroes of `blocks` blocks at `lba`; `flags` is 0 or `NVME_IO_DEALLOCATE`.
///
/// # Safety
/// `qpair` is NULL or a live handle used only by the calling thread.
#[no_mangle]
pub unsafe extern "C" fn nvme_qpair_submit_write_zeroes(
    qpair: *mut nvme_qpair,
    nsid: u32,
    lba: u64,
    blocks: u32,
    flags: u32,
    cb_fn: nvme_cb_fn,
    cb_arg: *mut c_void,
) -> c_int {
    if flags & !NVME_IO_DEALLOCATE != 0 {
        return fail(
            NVME_ERR_INVALID_ARGUMENT,
            format!(
                "nvme_qpair_submit_write_zeroes: unknown flags {flags:#x} (only NVME_IO_DEALLOCATE)"
            ),
        );
    }
    let deallocate = flags & NVME_IO_DEALLOCATE != 0;
    // SAFETY: forwarded caller contract.
    unsafe {
        submit_no_data(
            "nvme_qpair_submit_write_zeroes",
            qpair,
            nsid,
            cb_fn,
            cb_arg,
            |q, ns, ud| q.qp.submit_write_zeroes(ns, lba, blocks, deallocate, ud),
        )
    }
}

/// Queues a Verify of `blocks` (1..=65536) blocks at `lba` of namespace `nsid`: the
/// controller reads them and checks their integrity; no data moves, so no buffer. On PCIe and
/// NVMe/TCP alike.
///
/// # Safety
/// `qpair` is NULL or a live handle used only by the calling thread.
#[no_mangle]
pub unsafe extern "C" fn nvme_qpair_submit_verify(
    qpair: *mut nvme_qpair,
    nsid: u32,
    lba: u64,
    blocks: u32,
    cb_fn: nvme_cb_fn,
    cb_arg: *mut c_void,
) -> c_int {
    // SAFETY: forwarded caller contract.
    unsafe {
        submit_no_data(
            "nvme_qpair_submit_verify",
            qpair,
            nsid,
            cb_fn,
            cb_arg,
            |q, ns, ud| {
                q.qp.submit(ns, Verify::new(lba, blocks), None, ud)
                    .map_err(|f| f.error)
            },
        )
    }
}

/// Queues a Write Uncorrectable (NVM CS §3.3.7) of `blocks` (1..=65536) blocks at `lba` of
/// namespace `nsid`: reads of them then fail (`NVME_ERR_COMMAND`, status SCT 2h SC 81h
/// Unrecovered Read Error) until they are written again. No data moves, so no buffer.
/// `NVME_ERR_UNSUPPORTED` before anything is sent when the controller does not offer it
/// (Identify Controller ONCS bit 1; QEMU 7.2's does not).
///
/// # Safety
/// `qpair` is NULL or a live handle used only by the calling thread.
#[no_mangle]
pub unsafe extern "C" fn nvme_qpair_submit_write_uncorrectable(
    qpair: *mut nvme_qpair,
    nsid: u32,
    lba: u64,
    blocks: u32,
    cb_fn: nvme_cb_fn,
    cb_arg: *mut c_void,
) -> c_int {
    // SAFETY: forwarded caller contract.
    unsafe {
        submit_no_data(
            "nvme_qpair_submit_write_uncorrectable",
            qpair,
            nsid,
            cb_fn,
            cb_arg,
            |q, ns, ud| {
                q.qp.submit(ns, WriteUncorrectable::new(lba, blocks), None, ud)
                    .map_err(|f| f.error)
            },
        )
    }
}

/// Queues a fused Compare and Write (NVMe Base 2.0 §3.4.2) of `blocks` blocks at `lba` of
/// namespace `nsid`: `buf` holds the compare data, then the write data (`2 * blocks *
/// block_size` bytes). The blocks are written only when they equal the compare data, as one
/// atomic unit. One callback: `NVME_OK` when written; `NVME_ERR_COMMAND` with status SCT 2h
/// SC 85h (Compare Failure) when they differed, nothing written. `flags` is 0 or
/// `NVME_IO_FUA` (for the write). `NVME_ERR_UNSUPPORTED` before anything is sent when the
/// controller does not offer it (Identify Controller FUSES bit 0; QEMU 7.2's does not) or the
/// transport is NVMe/TCP; `NVME_ERR_INVALID_ARGUMENT` above ACWU + 1 blocks.
///
/// # Safety
/// As `nvme_qpair_submit_read`.
#[no_mangle]
// The C signature is the ABI (include/nvme_userspace.h): its eight arguments stay.
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn nvme_qpair_submit_compare_and_write(
    qpair: *mut nvme_qpair,
    nsid: u32,
    lba: u64,
    blocks: u32,
    buf: *mut nvme_buf,
    flags: u32,
    cb_fn: nvme_cb_fn,
    cb_arg: *mut c_void,
) -> c_int {
    const WHAT: &str = "nvme_qpair_submit_compare_and_write";
    let fua = match fua_flag(WHAT, flags) {
        Ok(fua) => fua,
        Err(code) => return code,
    };
    let mut cmd = CompareAndWrite::new(lba, blocks);
    if fua {
        cmd = cmd.fua();
    }
    // SAFETY: forwarded caller contract.
    unsafe {
        submit_buffer(WHAT, qpair, nsid, buf, cb_fn, cb_arg, |q, ns, dma, ud| {
            q.submit_compare_and_write(ns, cmd, dma, ud)
        })
    }
}

/// Queues a Dataset Management deallocate (trim) of `count` (1..=256) ranges, copied before
/// the call returns. A `count` outside 1..=256 fails with `NVME_ERR_INVALID_ARGUMENT` before
/// anything is read from `ranges`.
///
/// # Safety
/// `qpair` is NULL or a live handle used only by the calling thread; `ranges` is NULL or
/// valid for `count` reads (when `count` is in 1..=256).
#[no_mangle]
pub unsafe extern "C" fn nvme_qpair_submit_deallocate(
    qpair: *mut nvme_qpair,
    nsid: u32,
    ranges: *const nvme_lba_range,
    count: u32,
    cb_fn: nvme_cb_fn,
    cb_arg: *mut c_void,
) -> c_int {
    if ranges.is_null() {
        return fail(
            NVME_ERR_NULL_POINTER,
            "nvme_qpair_submit_deallocate: argument `ranges` is NULL",
        );
    }
    // Before the ranges are read: the caller's array is only known to hold `count` entries
    // when `count` is one the command can carry (NVM CS §3.3.3: at most 256 ranges).
    if count == 0 || count as usize > DSM_MAX_RANGES {
        return fail(
            NVME_ERR_INVALID_ARGUMENT,
            format!(
                "nvme_qpair_submit_deallocate: {count} ranges: a deallocate carries \
                 1..={DSM_MAX_RANGES}"
            ),
        );
    }
    // SAFETY: forwarded caller contract.
    unsafe {
        submit_no_data(
            "nvme_qpair_submit_deallocate",
            qpair,
            nsid,
            cb_fn,
            cb_arg,
            |q, ns, ud| {
                // SAFETY: `ranges` is valid for `count` reads (caller contract).
                let c_ranges = std::slice::from_raw_parts(ranges, count as usize);
                q.ranges.clear();
                q.ranges.extend(c_ranges.iter().map(|r| (r.lba, r.blocks)));
                let list = std::mem::take(&mut q.ranges);
                let result = q.qp.submit_deallocate(ns, &list, ud);
                q.ranges = list;
                result
            },
        )
    }
}

/// Queues a Copy (NVM CS §3.3.2) within namespace `nsid`: the blocks of the `count`
/// (1..=256) source `ranges`, in order, go to consecutive blocks from `dest_lba`; no block
/// data crosses to the host. `buf` carries the source range list: the call writes the
/// ranges into it (32 bytes each, so at least `count * 32` bytes) and it is in flight until
/// the callback, like a write's buffer; its previous contents are overwritten. `flags` is 0
/// or `NVME_IO_FUA`. Before anything is sent the library checks that the controller offers
/// Copy (`NVME_ERR_UNSUPPORTED` otherwise), the namespace's limits (MSRC + 1 ranges, MSSRL
/// blocks per range, MCL blocks in all: `NVME_ERR_COPY_LIMIT`) and every range against the
/// namespace (`NVME_ERR_LBA_RANGE`). Never split; on PCIe and NVMe/TCP alike.
///
/// # Safety
/// `qpair` and `buf` are NULL or live handles used only by the calling thread; `ranges` is
/// NULL or valid for `count` reads (when `count` is in 1..=256); `buf` stays live until the
/// callback ran.
#[no_mangle]
// The C signature is the ABI (include/nvme_userspace.h): its nine arguments stay.
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn nvme_qpair_submit_copy(
    qpair: *mut nvme_qpair,
    nsid: u32,
    dest_lba: u64,
    ranges: *const nvme_lba_range,
    count: u32,
    buf: *mut nvme_buf,
    flags: u32,
    cb_fn: nvme_cb_fn,
    cb_arg: *mut c_void,
) -> c_int {
    const WHAT: &str = "nvme_qpair_submit_copy";
    if ranges.is_null() || buf.is_null() {
        let arg = if ranges.is_null() { "ranges" } else { "buf" };
        return fail(
            NVME_ERR_NULL_POINTER,
            format!("{WHAT}: argument `{arg}` is NULL"),
        );
    }
    // Before the ranges are read: the caller's array is only known to hold `count` entries
    // when `count` is one the command can carry (NR is 8 bits, 0-based).
    if count == 0 || count as usize > COPY_MAX_RANGES {
        return fail(
            NVME_ERR_INVALID_ARGUMENT,
            format!("{WHAT}: {count} ranges: a Copy carries 1..={COPY_MAX_RANGES}"),
        );
    }
    let fua = match fua_flag(WHAT, flags) {
        Ok(fua) => fua,
        Err(code) => return code,
    };
    // A buffer in flight keeps this placeholder: the submission below refuses the buffer.
    let mut cmd = Copy::new(dest_lba, count as u16, 0);
    let written = guard(WHAT, || {
        // SAFETY: `ranges` is valid for `count` reads (caller contract, count checked above).
        let c_ranges = unsafe { std::slice::from_raw_parts(ranges, count as usize) };
        // SAFETY: `buf` is a live handle owned by this thread (caller contract); no other
        // reference to it exists during this call.
        let handle = unsafe { &mut *buf };
        if let BufState::Idle(dma) = &mut handle.state {
            let mut list = CopyRanges::new(dma);
            for r in c_ranges {
                if let Err(e) = list.push(r.lba, r.blocks) {
                    return fail(error_code(&e), format!("{WHAT}: {e}"));
                }
            }
            cmd = list.copy_to(dest_lba);
        }
        NVME_OK
    });
    if written != NVME_OK {
        return written;
    }
    if fua {
        cmd = cmd.fua();
    }
    // SAFETY: forwarded caller contract.
    unsafe { submit_data(WHAT, qpair, nsid, cmd, buf, cb_fn, cb_arg) }
}
