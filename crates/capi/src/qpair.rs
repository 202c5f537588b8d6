//! Queue pair handles: `struct nvme_qpair` with its request table, the C types a request
//! completes with (`nvme_cpl_status`, `nvme_cb_fn`), creation and destruction.
//!
//! INVARIANT: each occupied entry of the `requests` slab is an outstanding [`Request`] (on the
//! device, or reaped into `pending`); the driver's user data of its command is that entry's
//! index, so a completion finds its request without a search.

use std::collections::VecDeque;
use std::ffi::{c_int, c_void};
use std::sync::Arc;
use std::time::Duration;

use nvme_driver::zns::ZoneAppend;
use nvme_driver::{Completion, DmaBuffer, IoVec, Namespace, QueuePairOptions};
use nvme_pool::Slab;

use crate::boundary::{fail, fail_with, guard};
use crate::buffer::{nvme_buf, BufState};
use crate::controller::{nvme_ctrlr, CtrlShared};
use crate::errors::*;
use crate::lifecycle;
use crate::poll::completion_status;
use crate::transport::Pair;
use crate::vectored::complete_request;

/// Outcome of a request, passed to its callback.
#[repr(C)]
pub struct nvme_cpl_status {
    /// True when the request succeeded (`error == NVME_OK`).
    pub success: bool,
    /// True when submitting the same request again may succeed (a reset interrupted it, or
    /// the device reported an error without Do Not Retry).
    pub retryable: bool,
    /// NVMe Status Code Type (0 unless `error == NVME_ERR_COMMAND`).
    pub sct: u8,
    /// NVMe Status Code (0 unless `error == NVME_ERR_COMMAND`).
    pub sc: u8,
    /// `NVME_OK` or a negative `NVME_ERR_*` code; `nvme_last_error_message` is not set by
    /// completions, use `nvme_strerror`.
    pub error: c_int,
    /// Command-specific result (completion dword 0).
    pub cdw0: u32,
    /// The request's buffer handle (NULL for requests without data, and for vectored
    /// requests: their pieces' handles are idle again too). Idle again when the callback
    /// runs, unless the request timed out (see `nvme_buf_in_flight`).
    pub buf: *mut nvme_buf,
    /// The LBA where a successful Zone Append's data landed (its first block, ZNS 1.1
    /// §3.4.1.1); 0 for every other request and for a failed append.
    pub lba: u64,
}

// The layout C sees on 64-bit targets: 12 bytes of flags and codes, the buffer pointer, the LBA.
#[cfg(target_pointer_width = "64")]
const _: () = assert!(std::mem::size_of::<nvme_cpl_status>() == 32);

/// Completion callback: `cb_arg` as given at submission, `status` valid during the call only.
/// It may submit new requests on the same queue pair, but must not poll or destroy it.
/// It must return: leaving it any other way (`longjmp`, a C++ exception, ending the thread)
/// is not allowed. A queue pair left so stays busy (`NVME_ERR_BUSY` from `nvme_qpair_poll` and
/// `nvme_qpair_destroy`, submissions held) until `nvme_qpair_recover` is called.
pub type nvme_cb_fn =
    Option<unsafe extern "C" fn(cb_arg: *mut c_void, status: *const nvme_cpl_status)>;

/// One LBA range of `nvme_qpair_submit_deallocate` and of `nvme_qpair_submit_copy` (a source
/// range).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct nvme_lba_range {
    /// First logical block.
    pub lba: u64,
    /// Number of blocks (at least 1).
    pub blocks: u32,
}

/// Write flag: Force Unit Access (the data is on non-volatile media when the write completes).
pub const NVME_IO_FUA: u32 = 1;
/// Write Zeroes flag: the controller may deallocate the blocks instead of writing zeroes.
pub const NVME_IO_DEALLOCATE: u32 = 2;

/// A submitted request awaiting its callback.
#[derive(Clone, Copy)]
pub(crate) struct Request {
    pub(crate) cb: nvme_cb_fn,
    pub(crate) arg: *mut c_void,
    pub(crate) buf: *mut nvme_buf,
    pub(crate) kind: RequestKind,
}

/// What a request needs at its completion besides its one buffer handle.
#[derive(Clone, Copy)]
pub(crate) enum RequestKind {
    /// One buffer (`buf`) or none.
    Plain,
    /// A vectored read or write: its pieces' handles are entry `n` of `nvme_qpair::vectored`.
    Vectored(u32),
    /// A Zone Append to the zone starting at `zslba` (the written LBA is rebuilt from it).
    ZoneAppend { zslba: u64 },
}

/// A completion reaped from the device whose callback has not run yet.
pub(crate) struct Pending {
    pub(crate) request: u32,
    /// Built when the completion is reaped: the C status is all a callback sees, so the
    /// driver's `Error` (64 bytes) is not carried through the queue.
    pub(crate) status: nvme_cpl_status,
    pub(crate) buffer: Option<DmaBuffer>,
    /// The pieces of a vectored request.
    pub(crate) pieces: Option<Box<IoVec>>,
}

impl Pending {
    /// The pending entry for completion `c` of one of `requests` (its C status built now; an
    /// out-of-range request index, which the driver's user data never holds, gets no buffer).
    #[inline(always)]
    pub(crate) fn reaped(requests: &Slab<Request>, c: Completion) -> Pending {
        let request = c.user_data as u32;
        let (buf, kind) = requests
            .get(request)
            .map_or((std::ptr::null_mut(), RequestKind::Plain), |r| {
                (r.buf, r.kind)
            });
        let mut status = completion_status(&c.result, buf);
        if let RequestKind::ZoneAppend { zslba } = kind {
            if status.success {
                status.lba = ZoneAppend::new(zslba, 1).written_lba(status.cdw0);
            }
        }
        Pending {
            request,
            status,
            buffer: c.buffer,
            pieces: c.pieces,
        }
    }
}

/// An I/O queue pair with its requests. Belongs to one thread at a time: no two threads may
/// call functions on the same queue pair concurrently (it may move between threads).
pub struct nvme_qpair {
    // Field order is drop order: the queue pair is deleted while the controller lives.
    pub(crate) qp: Pair,
    pub(crate) namespaces: Vec<Namespace>,
    /// Outstanding requests, indexed by their commands' user data. Sized to the ring; it
    /// grows past that (`Slab::insert`) when completions reaped but not yet delivered
    /// (`pending`, kept across polls by `max_completions`) hold entries while callbacks submit.
    pub(crate) requests: Slab<Request>,
    pub(crate) pending: VecDeque<Pending>,
    pub(crate) ranges: Vec<(u64, u32)>,
    /// The pieces' handles of the vectored requests in flight, and spare vectors to reuse.
    pub(crate) vectored: crate::vectored::VectoredTable,
    /// Inside `nvme_qpair_poll` (callbacks may submit, but not poll or destroy).
    pub(crate) polling: bool,
    /// Between `nvme_qpair_hold_submissions` and `nvme_qpair_release_submissions`: the
    /// doorbell (PCIe) or send (TCP) of submissions waits for the release.
    pub(crate) held: bool,
    pub(crate) shared: Arc<CtrlShared>,
}

/// Creates an I/O queue pair on `ctrlr` and stores its handle in `*out`. `depth` is the ring
/// size (2..=`max_queue_entries`; at most `depth - 1` commands in flight; 0 = 256, or less if the controller allows fewer);
/// `timeout_ms` fails requests not completed in time with `NVME_ERR_TIMEOUT` (0 = 30 s).
/// Fails with `NVME_ERR_NO_QUEUES` when all queue pairs the controller granted are in use.
///
/// # Safety
/// `ctrlr` is NULL or an open controller handle; `out` is NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvme_qpair_create(
    ctrlr: *const nvme_ctrlr,
    depth: u32,
    timeout_ms: u32,
    out: *mut *mut nvme_qpair,
) -> c_int {
    guard("nvme_qpair_create", || {
        check_null!("nvme_qpair_create", ctrlr, out);
        // SAFETY: `ctrlr` is a live handle (caller contract).
        let shared = unsafe { &(&*ctrlr).shared };
        let defaults = QueuePairOptions::default();
        let options = QueuePairOptions {
            depth: if depth == 0 { defaults.depth } else { depth },
            timeout: if timeout_ms == 0 {
                defaults.timeout
            } else {
                Duration::from_millis(u64::from(timeout_ms))
            },
            ..defaults
        };
        match shared.ctrl.create_queue_pair(options).map(Pair::new) {
            Ok(qp) => {
                // The depth in effect (the default is clamped to the controller's limit).
                let slots = qp.depth() as usize;
                let handle = Box::new(nvme_qpair {
                    qp,
                    namespaces: shared.ctrl.namespaces().to_vec(),
                    requests: Slab::new(slots),
                    pending: VecDeque::with_capacity(slots),
                    ranges: Vec::new(),
                    vectored: Default::default(),
                    polling: false,
                    held: false,
                    shared: Arc::clone(shared),
                });
                // SAFETY: `out` is non-null and valid for a write (caller contract).
                unsafe { *out = Box::into_raw(handle) };
                NVME_OK
            }
            Err(e) => fail_with(&e),
        }
    })
}

/// Deletes the queue pair. Callbacks of requests still outstanding are NOT called. First it
/// waits, polling, up to 1 s for the outstanding requests to complete: the buffer of every
/// request that completed by then (or before the call) is idle again when this returns, with
/// the data of a completed read. The queues are deleted after that; the buffer of a request
/// still outstanding then, or that timed out, is *detached*: `nvme_buf_in_flight` stays true,
/// its memory belongs to the driver (released once no command can reach it, or never if
/// that cannot be made sure), and the handle can only be freed. Fails with `NVME_ERR_BUSY`
/// when called from one of this queue pair's callbacks (or after one did not return: see
/// `nvme_qpair_recover`). Destroying NULL does nothing.
///
/// # Safety
/// `qpair` is NULL or a live queue pair handle, used by no other thread; after `NVME_OK` it
/// must not be used. Buffers of outstanding requests must still be live handles.
#[no_mangle]
pub unsafe extern "C" fn nvme_qpair_destroy(qpair: *mut nvme_qpair) -> c_int {
    guard("nvme_qpair_destroy", || {
        if qpair.is_null() {
            return NVME_OK;
        }
        // SAFETY: `qpair` is a live handle owned by this thread (caller contract).
        if unsafe { (*qpair).polling } {
            return fail(
                NVME_ERR_BUSY,
                "nvme_qpair_destroy: called from a completion callback of this queue pair \
                 (or one never returned: then call nvme_qpair_recover)",
            );
        }
        // SAFETY: `qpair` came from Box::into_raw and is released once (caller contract).
        let mut handle = unsafe { Box::from_raw(qpair) };
        if handle.held {
            // Held submissions reach the device first, so that the drain can complete them.
            handle.qp.release_submissions();
            handle.held = false;
        }
        let left = handle.drain();
        if left > 0 {
            log::info!(
                "nvme_qpair_destroy: {left} requests still outstanding after {:?}; their buffers \
                 stay with the driver",
                lifecycle::DESTROY_DRAIN_LIMIT
            );
        }
        let nvme_qpair {
            qp,
            mut requests,
            mut pending,
            mut vectored,
            shared,
            ..
        } = *handle;
        // Deletes the queues: afterwards the device reaches no buffer of this pair.
        drop(qp);
        for p in pending.drain(..) {
            let Some(request) = requests.take(p.request) else {
                continue;
            };
            // SAFETY: the request's buffer handles are live (caller contract) and this
            // thread owns them while they are in flight.
            unsafe { complete_request(&mut vectored, &request, p.buffer, p.pieces) };
        }
        // The requests left are those still on the device.
        for (_, r) in requests.iter() {
            if !r.buf.is_null() {
                // SAFETY: as above.
                unsafe { (*r.buf).state = BufState::Detached };
            }
            if let RequestKind::Vectored(n) = r.kind {
                // SAFETY: as above.
                unsafe { vectored.detach(n) };
            }
        }
        drop(shared);
        NVME_OK
    })
}

impl nvme_qpair {
    pub(crate) fn namespace(&mut self, nsid: u32) -> Result<&Namespace, c_int> {
        self.namespace_index(nsid).map(|i| &self.namespaces[i])
    }

    /// Position of namespace `nsid` in this pair's list (an index lets a caller borrow the
    /// namespace and the queue pair apart), or the error for a missing one. A namespace a
    /// rescan found changed, or one not in the list, sends the pair to the controller's
    /// current set first (see [`nvme_qpair::refresh_namespaces`]).
    #[inline]
    pub(crate) fn namespace_index(&mut self, nsid: u32) -> Result<usize, c_int> {
        match self.namespaces.iter().position(|n| n.nsid() == nsid) {
            Some(i) if self.namespaces[i].is_current() => Ok(i),
            _ => self.refresh_namespaces(nsid),
        }
    }

    /// Stores `request` and returns its index, the user data of its command(s); given back
    /// with `self.requests.take(index)` when its submission fails.
    pub(crate) fn alloc_request(&mut self, request: Request) -> u32 {
        self.requests.insert(request)
    }
}
