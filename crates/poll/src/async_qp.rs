//! [`AsyncQueuePair`]: queue-pair I/O as futures, for any single-thread executor.
//!
//! A future submits its command on its first poll and parks its `Waker` in a request slot;
//! [`AsyncQueuePair::poll_completions`] (the reactor step, called by whatever drives the
//! executor) reaps the completion queue, stores each result in its slot and wakes the future.
//!
//! Slots form an [`nvme_pool::Slab`] preallocated to the queue's capacity: a slot is named by
//! the command's `user_data`, `generation << 32 | index` (the slab's index and the entry's
//! generation), so submitting and completing an I/O allocates nothing, and a completion can
//! only reach the request that issued it.
//!
//! Dropping a future whose command is in flight is safe and leaks nothing: the `DmaBuffer`
//! was moved into the driver's request at submission and stays there (the controller may
//! still be transferring to or from it). The slot is marked abandoned; when the completion
//! arrives, `poll_completions` drops the completion and its buffer (the controller is done
//! with the memory by then) and returns the slot to the free list. If the queue pair itself is
//! dropped first, the driver deletes the queues before freeing in-flight buffers.
//!
//! INVARIANT: an occupied slot of the slab belongs to exactly one `Request` (or, once
//! `Abandoned`, to the pending completion); a vacant one to nobody.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use thiserror::Error as ThisError;

use nvme_driver::{
    Completion, DmaBuffer, Error, IoFailure, IoQueue, Namespace, QueuePair, WriteFlags,
};
use nvme_pool::Slab as SlotTable;

/// Bits of `user_data` holding the slot index (the generation takes the upper bits).
const INDEX_BITS: u32 = 32;
const INDEX_MASK: u64 = (1 << INDEX_BITS) - 1;

fn user_data(index: u32, generation: u32) -> u64 {
    (u64::from(generation) << INDEX_BITS) | u64::from(index)
}

fn split_user_data(user_data: u64) -> (u32, u32) {
    (
        (user_data & INDEX_MASK) as u32,
        (user_data >> INDEX_BITS) as u32,
    )
}

/// Counters of an [`AsyncQueuePair`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AsyncStats {
    /// Commands submitted by futures.
    pub submitted: u64,
    /// Completions delivered to a waiting (or not yet re-polled) future.
    pub completed: u64,
    /// Futures dropped while their command was in flight.
    pub abandoned: u64,
    /// Completions of abandoned commands reaped (their buffers freed then).
    pub abandoned_reaped: u64,
    /// Times a future found the queue (or the slot slab) full and waited for space.
    pub queue_full_waits: u64,
    /// Calls to [`AsyncQueuePair::poll_completions`].
    pub reactor_polls: u64,
}

/// An occupied request slot (a vacant one is a vacant entry of the slab).
enum SlotState {
    /// Submitted; the waker of the future that waits for it.
    InFlight(Option<Waker>),
    /// Completed; the future has not collected the result yet.
    Done(Completion),
    /// The future was dropped while the command was in flight.
    Abandoned,
}

struct Reactor<Q> {
    qp: Q,
    slab: Slab,
}

/// The request slots and everything else the completion path updates (apart from the pair,
/// so both can be borrowed at once inside `IoQueue::poll`).
struct Slab {
    /// The request slots; a slot's generation is its slab entry's.
    slots: SlotTable<SlotState>,
    /// Futures that found no free slot or a full queue; woken when space may have appeared.
    space_waiters: VecDeque<Waker>,
    /// Incremented each time `space_waiters` is emptied; a future remembers the round it
    /// queued in so it never queues twice in one round.
    space_round: u64,
    /// Reused buffer for the wakers to call once the `RefCell` borrow is released.
    wake_buf: Vec<Waker>,
    stats: AsyncStats,
}

impl Slab {
    /// Frees slot `index` (its generation advances).
    fn release(&mut self, index: u32) {
        self.slots.take(index);
    }

    /// Frees slot `index`, which is `Done`, and returns its completion with the space waiters
    /// to wake once the borrow ends (the freed slot is space).
    fn collect(&mut self, index: u32) -> (Completion, Vec<Waker>) {
        let Some(SlotState::Done(c)) = self.slots.take(index) else {
            unreachable!("request slot {index} collected while not done")
        };
        let mut wake = std::mem::take(&mut self.wake_buf);
        self.take_space_waiters(&mut wake);
        (c, wake)
    }

    /// Moves the space waiters into `wake` (they are woken after the borrow ends).
    fn take_space_waiters(&mut self, wake: &mut Vec<Waker>) {
        if !self.space_waiters.is_empty() {
            wake.extend(self.space_waiters.drain(..));
            self.space_round += 1;
        }
    }

    fn wait_for_space(&mut self, ticket: Option<u64>, cx: &Context<'_>) -> Option<u64> {
        if ticket == Some(self.space_round) {
            // Already queued in this round (a spurious poll).
            return ticket;
        }
        self.stats.queue_full_waits += 1;
        self.space_waiters.push_back(cx.waker().clone());
        Some(self.space_round)
    }

    /// Routes one completion to its slot (called from inside `IoQueue::poll`).
    fn deliver(&mut self, qid: u16, c: Completion, wake: &mut Vec<Waker>) {
        let (index, generation) = split_user_data(c.user_data);
        let Some(slot_generation) = self.slots.generation(index) else {
            log::error!(
                "queue {}: completion with user data {:#x} names no request slot; dropped",
                qid,
                c.user_data
            );
            return;
        };
        if slot_generation != generation {
            log::error!(
                "queue {}: completion for slot {index} generation {generation}, but the slot is \
                 at generation {}; dropped",
                qid,
                slot_generation
            );
            return;
        }
        match self.slots.get_mut(index) {
            Some(slot @ SlotState::InFlight(_)) => {
                let SlotState::InFlight(waker) = std::mem::replace(slot, SlotState::Done(c)) else {
                    unreachable!("matched above")
                };
                self.stats.completed += 1;
                wake.extend(waker);
            }
            Some(SlotState::Abandoned) => {
                // The controller is done with the buffer: it is freed with `c`, here.
                self.stats.abandoned_reaped += 1;
                self.release(index);
                drop(c);
            }
            Some(SlotState::Done(_)) | None => {
                log::error!(
                    "queue {}: completion for request slot {index}, which is not in flight; dropped",
                    qid
                );
            }
        }
    }
}

/// Wakes `wakers` (with no borrow of the reactor held, so a waker may re-enter it) and gives
/// the emptied vector back for reuse.
fn wake_all<Q>(inner: &RefCell<Reactor<Q>>, mut wakers: Vec<Waker>) {
    for waker in wakers.drain(..) {
        waker.wake();
    }
    // Keep the larger buffer (a waker that re-entered the reactor may have started another).
    if let Ok(mut r) = inner.try_borrow_mut() {
        if r.slab.wake_buf.capacity() < wakers.capacity() {
            r.slab.wake_buf = wakers;
        }
    }
}

/// [`AsyncQueuePair::new`] was given a pair with requests in flight.
#[derive(ThisError)]
#[error(
    "queue {qid} has {in_flight} requests in flight; poll it until `in_flight()` is 0 before \
     wrapping it in an AsyncQueuePair"
)]
pub struct PairBusy<Q = QueuePair> {
    /// Queue id of the pair.
    pub qid: u16,
    /// Requests it had in flight.
    pub in_flight: u16,
    /// The pair, given back.
    pub qp: Box<Q>,
}

impl<Q> std::fmt::Debug for PairBusy<Q> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PairBusy")
            .field("qid", &self.qid)
            .field("in_flight", &self.in_flight)
            .finish_non_exhaustive()
    }
}

/// A queue pair whose I/O is driven by futures. A cheap handle (`Clone` shares the pair):
/// single-threaded and `!Send` by design, like the pair's one owner thread.
///
/// Someone must call [`AsyncQueuePair::poll_completions`] for futures to finish: pass
/// [`AsyncQueuePair::reactor`] to [`crate::block_on`], or [`crate::LocalExecutor::drive`].
/// See the module documentation for what dropping an in-flight future does.
pub struct AsyncQueuePair<Q: IoQueue = QueuePair> {
    inner: Rc<RefCell<Reactor<Q>>>,
}

impl<Q: IoQueue> Clone for AsyncQueuePair<Q> {
    fn clone(&self) -> Self {
        Self {
            inner: Rc::clone(&self.inner),
        }
    }
}

impl<Q: IoQueue> std::fmt::Debug for AsyncQueuePair<Q> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.inner.try_borrow() {
            Ok(r) => f
                .debug_struct("AsyncQueuePair")
                .field("qid", &r.qp.qid())
                .field("in_flight", &r.qp.in_flight())
                .field("stats", &r.slab.stats)
                .finish(),
            Err(_) => f.write_str("AsyncQueuePair { <in use> }"),
        }
    }
}

impl<Q: IoQueue> AsyncQueuePair<Q> {
    /// Wraps `qp`, preallocating one request slot per queue entry that can be in flight.
    /// The pair must have nothing in flight: the completions of requests submitted before
    /// would be taken for ours. Otherwise the pair comes back in the error.
    pub fn new(qp: Q) -> Result<Self, PairBusy<Q>> {
        if qp.in_flight() > 0 {
            return Err(PairBusy {
                qid: qp.qid(),
                in_flight: qp.in_flight(),
                qp: Box::new(qp),
            });
        }
        let capacity = usize::from(qp.capacity());
        Ok(Self {
            inner: Rc::new(RefCell::new(Reactor {
                qp,
                slab: Slab {
                    slots: SlotTable::new(capacity),
                    space_waiters: VecDeque::with_capacity(capacity),
                    space_round: 0,
                    wake_buf: Vec::with_capacity(2 * capacity),
                    stats: AsyncStats::default(),
                },
            })),
        })
    }

    /// The reactor step: reaps completions (up to the pair's batch cap), hands each result to
    /// its future and wakes it. Returns the requests finished (abandoned ones included).
    pub fn poll_completions(&self) -> usize {
        let mut guard = self.inner.borrow_mut();
        let Reactor { qp, slab } = &mut *guard;
        slab.stats.reactor_polls += 1;
        let mut wake = std::mem::take(&mut slab.wake_buf);
        let qid = qp.qid();
        let n = qp.poll(|c| slab.deliver(qid, c, &mut wake));
        if n > 0 {
            // Finished commands freed driver slots and ring entries.
            slab.take_space_waiters(&mut wake);
        }
        drop(guard);
        wake_all(&self.inner, wake);
        n
    }

    /// A closure calling [`AsyncQueuePair::poll_completions`], for executors.
    pub fn reactor(&self) -> impl FnMut() -> usize + 'static
    where
        Q: 'static,
    {
        let this = self.clone();
        move || this.poll_completions()
    }

    /// Reads `blocks` blocks at `lba` into `buf`; resolves to the filled buffer.
    pub async fn read(
        &self,
        ns: &Namespace,
        lba: u64,
        blocks: u32,
        buf: DmaBuffer,
    ) -> Result<DmaBuffer, IoFailure> {
        let (_, buf) = self
            .request(Op::Read {
                ns,
                lba,
                blocks,
                buf,
            })
            .await?;
        Ok(buf.expect("the driver returns the buffer of a successful read"))
    }

    /// Writes `blocks` blocks at `lba` from `buf` ([`WriteFlags::FUA`]: to non-volatile media
    /// before completing); resolves to the buffer.
    pub async fn write(
        &self,
        ns: &Namespace,
        lba: u64,
        blocks: u32,
        buf: DmaBuffer,
        flags: WriteFlags,
    ) -> Result<DmaBuffer, IoFailure> {
        let fua = flags.fua();
        let (_, buf) = self
            .request(Op::Write {
                ns,
                lba,
                blocks,
                buf,
                fua,
            })
            .await?;
        Ok(buf.expect("the driver returns the buffer of a successful write"))
    }

    /// Flushes the namespace's volatile write cache.
    pub async fn flush(&self, ns: &Namespace) -> Result<(), Error> {
        self.request(Op::Flush { ns })
            .await
            .map(drop)
            .map_err(|f| f.error)
    }

    fn request<'a>(&'a self, op: Op<'a>) -> Request<'a, Q> {
        Request {
            aqp: self,
            state: RequestState::Unsubmitted { op, ticket: None },
        }
    }

    /// Most requests in flight at once (the queue pair's capacity, and the slab's size).
    pub fn capacity(&self) -> usize {
        self.inner.borrow().slab.slots.capacity()
    }

    /// Commands the driver has in flight (abandoned ones included).
    pub fn in_flight(&self) -> usize {
        usize::from(self.inner.borrow().qp.in_flight())
    }

    /// Request slots not free: in flight, abandoned, or completed but not yet collected.
    pub fn slots_in_use(&self) -> usize {
        self.inner.borrow().slab.slots.len()
    }

    /// Counters of this layer.
    pub fn stats(&self) -> AsyncStats {
        self.inner.borrow().slab.stats
    }

    /// Counters of the underlying queue pair.
    pub fn queue_stats(&self) -> Q::Stats {
        self.inner.borrow().qp.stats_snapshot()
    }

    /// Queue id of the underlying pair.
    pub fn qid(&self) -> u16 {
        self.inner.borrow().qp.qid()
    }

    /// Gives the queue pair back when this is the last handle and no slot is in use;
    /// otherwise returns `self` unchanged.
    pub fn try_into_inner(self) -> Result<Q, Self> {
        if self.slots_in_use() > 0 {
            return Err(self);
        }
        Rc::try_unwrap(self.inner)
            .map(|cell| cell.into_inner().qp)
            .map_err(|inner| Self { inner })
    }
}

/// One command, with what it needs to be (re)submitted.
enum Op<'a> {
    Read {
        ns: &'a Namespace,
        lba: u64,
        blocks: u32,
        buf: DmaBuffer,
    },
    Write {
        ns: &'a Namespace,
        lba: u64,
        blocks: u32,
        buf: DmaBuffer,
        fua: bool,
    },
    Flush {
        ns: &'a Namespace,
    },
}

/// Why a submission did not happen.
enum Rejected<'a> {
    /// No room now: the op (with its buffer) to retry once something completes.
    Full(Op<'a>, Error),
    /// Refused for good.
    Failed(IoFailure),
}

fn classify<'a>(failure: IoFailure, rebuild: impl FnOnce(DmaBuffer) -> Op<'a>) -> Rejected<'a> {
    match failure {
        IoFailure {
            error: error @ Error::QueueFull { .. },
            buffer: Some(buf),
            ..
        } => Rejected::Full(rebuild(buf), error),
        failure => Rejected::Failed(failure),
    }
}

impl<'a> Op<'a> {
    fn submit<Q: IoQueue>(self, qp: &mut Q, user_data: u64) -> Result<(), Rejected<'a>> {
        match self {
            Op::Read {
                ns,
                lba,
                blocks,
                buf,
            } => qp
                .submit_read(ns, lba, blocks, buf, user_data)
                .map_err(|f| {
                    classify(f, |buf| Op::Read {
                        ns,
                        lba,
                        blocks,
                        buf,
                    })
                }),
            Op::Write {
                ns,
                lba,
                blocks,
                buf,
                fua,
            } => qp
                .submit_write(
                    ns,
                    lba,
                    blocks,
                    buf,
                    WriteFlags::NONE.with_fua(fua),
                    user_data,
                )
                .map_err(|f| {
                    classify(f, |buf| Op::Write {
                        ns,
                        lba,
                        blocks,
                        buf,
                        fua,
                    })
                }),
            Op::Flush { ns } => qp.submit_flush(ns, user_data).map_err(|error| match error {
                error @ Error::QueueFull { .. } => Rejected::Full(Op::Flush { ns }, error),
                error => Rejected::Failed(IoFailure {
                    error,
                    buffer: None,
                    pieces: None,
                }),
            }),
        }
    }

    fn into_buffer(self) -> Option<DmaBuffer> {
        match self {
            Op::Read { buf, .. } | Op::Write { buf, .. } => Some(buf),
            Op::Flush { .. } => None,
        }
    }
}

enum RequestState<'a> {
    /// Not submitted yet; `ticket` is the space round the future queued in, if it waits.
    Unsubmitted { op: Op<'a>, ticket: Option<u64> },
    /// In flight in slot `index` at `generation`.
    Submitted { index: u32, generation: u32 },
    /// The result was returned.
    Finished,
}

/// The future of one command: resolves to completion dword 0 and the buffer.
struct Request<'a, Q: IoQueue> {
    aqp: &'a AsyncQueuePair<Q>,
    state: RequestState<'a>,
}

type RequestOutput = Result<(u32, Option<DmaBuffer>), IoFailure>;

impl<Q: IoQueue> Future for Request<'_, Q> {
    type Output = RequestOutput;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<RequestOutput> {
        let this = self.get_mut();
        match std::mem::replace(&mut this.state, RequestState::Finished) {
            RequestState::Unsubmitted { op, ticket } => this.submit(op, ticket, cx),
            RequestState::Submitted { index, generation } => this.check(index, generation, cx),
            RequestState::Finished => panic!("an I/O future was polled after it completed"),
        }
    }
}

impl<'a, Q: IoQueue> Request<'a, Q> {
    fn submit(&mut self, op: Op<'a>, ticket: Option<u64>, cx: &Context<'_>) -> Poll<RequestOutput> {
        let mut guard = self.aqp.inner.borrow_mut();
        let Reactor { qp, slab: r } = &mut *guard;
        let Ok(index) = r.slots.try_insert(SlotState::InFlight(None)) else {
            let ticket = r.wait_for_space(ticket, cx);
            self.state = RequestState::Unsubmitted { op, ticket };
            return Poll::Pending;
        };
        let generation = r.slots.generation(index).expect("an occupied slot");
        match op.submit(qp, user_data(index, generation)) {
            Ok(()) => {
                if let Some(slot) = r.slots.get_mut(index) {
                    *slot = SlotState::InFlight(Some(cx.waker().clone()));
                }
                r.stats.submitted += 1;
                self.state = RequestState::Submitted { index, generation };
                Poll::Pending
            }
            Err(rejected) => {
                // Nothing was submitted under this generation (the next one is used next).
                r.release(index);
                match rejected {
                    Rejected::Full(op, error) if qp.in_flight() == 0 => {
                        // Nothing in flight will free space: waiting would never end.
                        Poll::Ready(Err(IoFailure {
                            error,
                            buffer: op.into_buffer(),
                            pieces: None,
                        }))
                    }
                    Rejected::Full(op, _) => {
                        let ticket = r.wait_for_space(ticket, cx);
                        self.state = RequestState::Unsubmitted { op, ticket };
                        Poll::Pending
                    }
                    Rejected::Failed(failure) => Poll::Ready(Err(failure)),
                }
            }
        }
    }

    fn check(&mut self, index: u32, generation: u32, cx: &Context<'_>) -> Poll<RequestOutput> {
        let mut guard = self.aqp.inner.borrow_mut();
        let r = &mut guard.slab;
        debug_assert_eq!(
            r.slots.generation(index),
            Some(generation),
            "request slot reused while owned"
        );
        match r.slots.get_mut(index) {
            Some(SlotState::InFlight(waker)) => {
                match waker {
                    Some(w) if w.will_wake(cx.waker()) => {}
                    _ => *waker = Some(cx.waker().clone()),
                }
                self.state = RequestState::Submitted { index, generation };
                Poll::Pending
            }
            Some(SlotState::Done(_)) => {
                let (c, wake) = r.collect(index);
                drop(guard);
                wake_all(&self.aqp.inner, wake);
                Poll::Ready(match c.result {
                    Ok(dw0) => Ok((dw0, c.buffer)),
                    Err(error) => Err(IoFailure {
                        error,
                        buffer: c.buffer,
                        pieces: None,
                    }),
                })
            }
            None | Some(SlotState::Abandoned) => {
                unreachable!("request slot {index} owned by a live future is free or abandoned")
            }
        }
    }
}

impl<Q: IoQueue> Drop for Request<'_, Q> {
    fn drop(&mut self) {
        let RequestState::Submitted { index, .. } = self.state else {
            // Never submitted (its buffer drops with the op) or already finished.
            return;
        };
        let Ok(mut guard) = self.aqp.inner.try_borrow_mut() else {
            // Only possible while unwinding out of a reactor borrow: the slot stays
            // reserved and the buffer is freed when the queue pair is dropped.
            log::error!(
                "I/O future dropped while the reactor is borrowed; request slot {index} is leaked"
            );
            return;
        };
        let r = &mut guard.slab;
        match r.slots.get_mut(index) {
            Some(slot @ SlotState::InFlight(_)) => {
                // INVARIANT: the driver still owns the buffer; `deliver` frees it later.
                *slot = SlotState::Abandoned;
                r.stats.abandoned += 1;
            }
            Some(SlotState::Done(_)) => {
                let (c, wake) = r.collect(index);
                drop(guard);
                drop(c);
                wake_all(&self.aqp.inner, wake);
            }
            None | Some(SlotState::Abandoned) => {
                unreachable!("request slot {index} owned by a live future is free or abandoned")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_data_round_trips_index_and_generation() {
        for &(i, g) in &[(0u32, 0u32), (5, 1), (1023, u32::MAX), (u32::MAX, 7)] {
            assert_eq!(split_user_data(user_data(i, g)), (i, g));
        }
        assert_ne!(user_data(1, 2), user_data(2, 1));
    }
}
