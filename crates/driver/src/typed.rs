//! Typed per-request context (issue 11 item 3): [`TypedQueuePair<C>`] carries a value of any
//! type `C` (a request struct, a `oneshot` sender, a `Box` the caller already owns...) from
//! submission to completion, so callers keep no table of their own keyed by the `u64`.
//!
//! How: the pair owns an [`nvme_pool::Slab`] of contexts sized when it is made (ring capacity +
//! software queue). A submission parks the context in a vacant entry and hands its index to the
//! [`QueuePair`] as the request's `u64`; the completion takes it back out. No allocation per
//! request (the slab grows, by [`Slab::insert`], only if more requests are outstanding than it
//! was sized for, which the ring and software queue bounds rule out), no hashing, and the `u64`
//! path of [`QueuePair`] is untouched (no cost for callers who do not use this).
//!
//! A refused submission gives the context back with the error ([`TypedFailure`]). The raw
//! [`QueuePair`] is not exposed mutably: a request submitted on it directly would carry an
//! index this pair never handed out.

use crate::{Completion, Controller, DmaBuffer, Error, IoFailure, Namespace, QueuePair};
use crate::{QueuePairOptions, QueuePairStats, Result, WriteFlags};
use nvme_core::IoQueue;
use nvme_pool::Slab;

/// A finished request with its typed context.
#[derive(Debug)]
pub struct TypedCompletion<C> {
    /// The context given at submission.
    pub context: C,
    /// Command-specific result (completion dword 0) or the error.
    pub result: std::result::Result<u32, Error>,
    /// The data buffer, given back (`None` for commands without data, or when the controller
    /// may still access it: timeout, fatal status).
    pub buffer: Option<DmaBuffer>,
}

/// A submission that was refused: nothing reached the device; the buffer (in `failure`) and
/// the context come back.
#[derive(Debug, thiserror::Error)]
#[error("{failure}")]
pub struct TypedFailure<C> {
    /// The error and the caller's buffer.
    #[source]
    pub failure: IoFailure,
    /// The caller's context.
    pub context: C,
}

/// A [`QueuePair`] whose requests carry a `C` instead of a bare `u64`. `Send` when `C` is;
/// one thread owns it, like the queue pair.
pub struct TypedQueuePair<C> {
    qp: QueuePair,
    /// Contexts of requests not yet delivered, indexed by the `u64` given to `qp`.
    contexts: Slab<C>,
}

impl<C> std::fmt::Debug for TypedQueuePair<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TypedQueuePair")
            .field("qid", &self.qp.qid())
            .field("outstanding", &self.outstanding())
            .finish_non_exhaustive()
    }
}

impl<C> TypedQueuePair<C> {
    /// Creates an I/O queue pair on `ctrl` (as [`Controller::create_queue_pair`]) whose
    /// requests carry a `C`.
    pub fn new(ctrl: &Controller, options: QueuePairOptions) -> Result<Self> {
        let software_queue = options.software_queue;
        let qp = ctrl.create_queue_pair(options)?;
        let n = qp.capacity() as usize + software_queue;
        Ok(Self {
            qp,
            contexts: Slab::new(n),
        })
    }

    /// The queue pair underneath (ids, depth, counters).
    pub fn queue_pair(&self) -> &QueuePair {
        &self.qp
    }

    /// Counters of the queue pair.
    pub fn stats(&self) -> &QueuePairStats {
        self.qp.stats()
    }

    /// Requests submitted whose completion has not been delivered yet.
    pub fn outstanding(&self) -> usize {
        self.contexts.len()
    }

    /// Batches the next `n` submissions behind one doorbell (see [`QueuePair::plug`]).
    pub fn plug(&mut self, n: u16) -> Result<()> {
        self.qp.plug(n)
    }

    /// Ends a plug and rings the doorbell once (see [`QueuePair::unplug`]).
    pub fn unplug(&mut self) {
        self.qp.unplug()
    }

    #[inline]
    fn park(&mut self, context: C) -> u64 {
        // More outstanding than the ring and software queue allow cannot happen; `insert`
        // stays correct then (one allocation) rather than fail.
        u64::from(self.contexts.insert(context))
    }

    #[inline]
    fn unpark(&mut self, index: u64) -> C {
        take_context(&mut self.contexts, index)
    }

    #[inline]
    fn submitted(
        &mut self,
        index: u64,
        r: std::result::Result<(), IoFailure>,
    ) -> std::result::Result<(), TypedFailure<C>> {
        r.map_err(|failure| TypedFailure {
            failure,
            context: self.unpark(index),
        })
    }

    /// Queues a read of `blocks` blocks at `lba` into `buf` (see [`IoQueue::submit_read`]).
    pub fn submit_read(
        &mut self,
        ns: &Namespace,
        lba: u64,
        blocks: u32,
        buf: DmaBuffer,
        context: C,
    ) -> std::result::Result<(), TypedFailure<C>> {
        let index = self.park(context);
        let r = self.qp.submit_read(ns, lba, blocks, buf, index);
        self.submitted(index, r)
    }

    /// Queues a write of `blocks` blocks at `lba` from `buf` (see [`IoQueue::submit_write`]).
    pub fn submit_write(
        &mut self,
        ns: &Namespace,
        lba: u64,
        blocks: u32,
        buf: DmaBuffer,
        flags: WriteFlags,
        context: C,
    ) -> std::result::Result<(), TypedFailure<C>> {
        let index = self.park(context);
        let r = self.qp.submit_write(ns, lba, blocks, buf, flags, index);
        self.submitted(index, r)
    }

    /// Queues a Flush (see [`IoQueue::submit_flush`]).
    pub fn submit_flush(
        &mut self,
        ns: &Namespace,
        context: C,
    ) -> std::result::Result<(), TypedFailure<C>> {
        let index = self.park(context);
        let r = self.qp.submit_flush(ns, index).map_err(|e| IoFailure {
            error: e,
            buffer: None,
            pieces: None,
        });
        self.submitted(index, r)
    }

    /// Queues a Write Zeroes (see [`IoQueue::submit_write_zeroes`]).
    pub fn submit_write_zeroes(
        &mut self,
        ns: &Namespace,
        lba: u64,
        blocks: u32,
        deallocate: bool,
        context: C,
    ) -> std::result::Result<(), TypedFailure<C>> {
        let index = self.park(context);
        let r = self
            .qp
            .submit_write_zeroes(ns, lba, blocks, deallocate, index)
            .map_err(|e| IoFailure {
                error: e,
                buffer: None,
                pieces: None,
            });
        self.submitted(index, r)
    }

    /// Queues a deallocate of `(lba, blocks)` ranges (see [`QueuePair::submit_deallocate`]).
    pub fn submit_deallocate(
        &mut self,
        ns: &Namespace,
        ranges: &[(u64, u32)],
        context: C,
    ) -> std::result::Result<(), TypedFailure<C>> {
        let index = self.park(context);
        let r = self
            .qp
            .submit_deallocate(ns, ranges, index)
            .map_err(|e| IoFailure {
                error: e,
                buffer: None,
                pieces: None,
            });
        self.submitted(index, r)
    }

    /// Reaps completions (see [`QueuePair::poll`]), calling `f` with each finished request
    /// and its context. Returns the number of requests finished.
    #[inline]
    pub fn poll<F: FnMut(TypedCompletion<C>)>(&mut self, mut f: F) -> usize {
        let Self { qp, contexts } = self;
        qp.poll(|c: Completion| {
            let context = take_context(contexts, c.user_data);
            f(TypedCompletion {
                context,
                result: c.result,
                buffer: c.buffer,
            })
        })
    }

    /// Reads synchronously (see [`IoQueue::read`]); completions of other requests that
    /// arrive meanwhile are delivered by the next [`TypedQueuePair::poll`].
    pub fn read(
        &mut self,
        ns: &Namespace,
        lba: u64,
        blocks: u32,
        buf: DmaBuffer,
    ) -> std::result::Result<DmaBuffer, IoFailure> {
        self.qp.read(ns, lba, blocks, buf)
    }

    /// Writes synchronously (see [`IoQueue::write`]).
    pub fn write(
        &mut self,
        ns: &Namespace,
        lba: u64,
        blocks: u32,
        buf: DmaBuffer,
        flags: WriteFlags,
    ) -> std::result::Result<DmaBuffer, IoFailure> {
        self.qp.write(ns, lba, blocks, buf, flags)
    }
}

/// The context of request `index` (a `u64` this pair handed out), taken out of `contexts`.
#[inline]
fn take_context<C>(contexts: &mut Slab<C>, index: u64) -> C {
    u32::try_from(index)
        .ok()
        .and_then(|i| contexts.take(i))
        .expect("a completion for a request this pair submitted")
}
