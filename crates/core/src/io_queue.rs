//! [`IoQueue`]: the I/O queue-pair operations every transport has, as a trait.
//!
//! The PCIe queue pair (`nvme_driver::QueuePair`) and the NVMe/TCP queue pair
//! (`nvme_tcp::TcpQueuePair`) share their request types ([`Completion`],
//! [`Error`](crate::Error), [`IoFailure`], [`Namespace`], [`DmaBuffer`], [`WriteFlags`]) and
//! the polling model (submit, then `poll` hands finished requests to a callback). Code generic
//! over `Q: IoQueue` (the async layer of `nvme-poll`, poll groups, tools) runs on either
//! transport with static dispatch: each use is compiled for the concrete pair, and the PCIe
//! forwards (in `nvme-driver`) are `#[inline(always)]`, so the PCIe path through the trait is
//! the same machine code as calling the `QueuePair` directly.
//!
//! Any typed NVM command ([`crate::command`]) goes through [`IoQueue::submit`] /
//! [`IoQueue::execute`] on either transport; the `submit_read`/`read`/... methods are
//! shorthands, provided here once for every transport. Operations only one transport has
//! (PCIe: Deallocate, raw commands, interrupts; TCP: reconnect, digests) stay inherent
//! methods of the concrete types.

use nvme_vfio::DmaBuffer;

use crate::command::{Compare, Flush, NvmCommand, Read, Write, WriteZeroes};
use crate::completion::Completion;
use crate::error::{Error, IoFailure, Result};
use crate::flags::WriteFlags;
use crate::fused::{CompareAndWrite, CompareAndWriteOutcome};
use crate::iovec::IoVec;
use crate::namespace::Namespace;
use crate::protection::{ProtectableCommand, Protected};

/// The I/O operations of a queue pair, whatever its transport. One owner thread, as for the
/// concrete pairs; every submitted request completes exactly once through [`IoQueue::poll`]
/// (a lost connection or a reset completes it with an error), with its buffer.
pub trait IoQueue {
    /// The transport's counters (`nvme_driver::QueuePairStats` for PCIe,
    /// `nvme_tcp::TcpQueueStats` for NVMe/TCP).
    type Stats: Clone + std::fmt::Debug;

    /// Queue id.
    fn qid(&self) -> u16;

    /// Entries of the queue.
    fn depth(&self) -> u32;

    /// Most requests in flight at once.
    fn capacity(&self) -> u16;

    /// Requests in flight.
    fn in_flight(&self) -> u16;

    /// Most bytes one request moves.
    fn max_transfer_bytes(&self) -> usize;

    /// A copy of the transport's counters.
    fn stats_snapshot(&self) -> Self::Stats;

    /// Starts a batch of `n` submissions, sent together at [`IoQueue::unplug`].
    fn plug(&mut self, n: u16) -> Result<()>;

    /// Ends a batch and publishes it.
    fn unplug(&mut self);

    /// Publishes the submissions queued so far.
    fn ring(&mut self);

    /// Queues any typed NVM command ([`crate::command`]): `buf` is the data buffer of a
    /// command that moves data (required then, refused otherwise), of at least the range's
    /// bytes. The buffer comes back in the [`Completion`]; on a rejected submission in the
    /// error, untouched. The shorthands (`submit_read`, ...) are this with one command type.
    fn submit<C: NvmCommand>(
        &mut self,
        ns: &Namespace,
        cmd: C,
        buf: Option<DmaBuffer>,
        user_data: u64,
    ) -> std::result::Result<(), IoFailure>;

    /// [`IoQueue::submit`] with the buffer in the caller's place: `buf` is taken only when
    /// the request is accepted; a refused submission leaves it there, untouched (`None` only
    /// where the device may still reach it), and returns the error alone. For a caller that
    /// keeps its buffers in a table: the PCIe pair takes the buffer straight from that place
    /// into its request slot. The default goes through [`IoQueue::submit`].
    #[inline(always)]
    fn submit_in_place<C: NvmCommand>(
        &mut self,
        ns: &Namespace,
        cmd: C,
        buf: &mut Option<DmaBuffer>,
        user_data: u64,
    ) -> Result<()> {
        match self.submit(ns, cmd, buf.take(), user_data) {
            Ok(()) => Ok(()),
            Err(f) => {
                *buf = f.buffer;
                Err(f.error)
            }
        }
    }

    /// Queues a vectored Read, Write or Compare (`cmd`): its data is `pieces`, in order, whose
    /// lengths add up to the command's bytes (checked by [`crate::iovec::check_vectored`],
    /// plus the transport's own rules: over PCIe a PRP list or an SGL segment, NVMe Base
    /// §4.1.1/§4.1.2). One command per request: above [`IoQueue::max_transfer_bytes`] it is
    /// refused ([`Error::IoVecTooLarge`]), not split. Every piece comes back in order in
    /// [`Completion::pieces`]; on a refused submission in [`IoFailure::pieces`], untouched.
    /// The default refuses: a queue without vectored I/O.
    fn submit_vectored<C: NvmCommand>(
        &mut self,
        ns: &Namespace,
        cmd: C,
        pieces: Box<IoVec>,
        user_data: u64,
    ) -> std::result::Result<(), IoFailure> {
        let _ = (ns, cmd, user_data);
        Err(IoFailure::vectored(
            Error::InvalidRequest("this queue does not take vectored I/O".into()),
            pieces,
        ))
    }

    /// Queues a [`Protected`] Read, Write or Compare on a namespace whose metadata goes to a
    /// separate buffer (NVM CS §5.2.2): `data` holds the blocks' data, `metadata` exactly one
    /// piece, the contiguous metadata buffer (MPTR) of at least `blocks * metadata size`
    /// bytes. Both are the request's until it completes: the data comes back in
    /// [`Completion::buffer`], the metadata in [`Completion::pieces`] (on a refused
    /// submission in the [`IoFailure`]). Not split: above one command's transfer it is
    /// refused. The default refuses with [`Error::UnsupportedOption`]: a transport without
    /// separate metadata (NVMe over Fabrics carries metadata only as extended LBAs).
    fn submit_with_metadata<C: ProtectableCommand>(
        &mut self,
        ns: &Namespace,
        cmd: Protected<C>,
        data: DmaBuffer,
        metadata: Box<IoVec>,
        user_data: u64,
    ) -> std::result::Result<(), IoFailure> {
        let _ = (cmd, user_data);
        Err(IoFailure {
            error: Error::UnsupportedOption {
                controller: format!("of namespace {}", ns.nsid()),
                option: "IoQueue::submit_with_metadata",
                why: "this transport carries no separate metadata buffer (extended LBAs only)",
            },
            buffer: Some(data),
            pieces: Some(metadata),
        })
    }

    /// Queues a fused Compare and Write ([`crate::fused`]): `buf` holds the compare data,
    /// then the write data, [`CompareAndWrite::data_bytes`] in all. The two commands go into
    /// adjacent submission queue entries behind one doorbell; the request completes once,
    /// with both: `Ok` when written, the Compare Failure status when the blocks differed
    /// (nothing written; [`crate::fused::outcome`] tells the two apart). Not split. The
    /// default refuses: a transport without fused commands.
    fn submit_compare_and_write(
        &mut self,
        ns: &Namespace,
        cmd: CompareAndWrite,
        buf: DmaBuffer,
        user_data: u64,
    ) -> std::result::Result<(), IoFailure> {
        let _ = (cmd, user_data);
        Err(IoFailure::new(
            Error::UnsupportedOption {
                controller: format!("of namespace {}", ns.nsid()),
                option: "IoQueue::submit_compare_and_write",
                why: "this transport does not submit fused commands",
            },
            Some(buf),
        ))
    }

    /// Runs [`IoQueue::submit_compare_and_write`] to completion through [`IoQueue::poll`]:
    /// returns the buffer and whether the blocks were written. Completions of other requests
    /// are handed to `other`; the waited request is told apart by its user data,
    /// `u64::MAX - 0x6361_7772`, which other requests in flight must not use.
    fn compare_and_write<F: FnMut(Completion)>(
        &mut self,
        ns: &Namespace,
        cmd: CompareAndWrite,
        buf: DmaBuffer,
        mut other: F,
    ) -> std::result::Result<(DmaBuffer, CompareAndWriteOutcome), IoFailure> {
        const TAG: u64 = u64::MAX - 0x6361_7772; // "cawr": the waited request's user data
        self.submit_compare_and_write(ns, cmd, buf, TAG)?;
        let c = wait_for(self, TAG, &mut other);
        match (crate::fused::outcome(c.result), c.buffer) {
            (Ok(outcome), Some(buf)) => Ok((buf, outcome)),
            (Ok(_), None) => Err(IoFailure::new(
                Error::InvalidRequest("a completed Compare and Write lost its buffer".into()),
                None,
            )),
            (Err(error), buffer) => Err(IoFailure::new(error, buffer)),
        }
    }

    /// Runs [`IoQueue::submit_with_metadata`] to completion through [`IoQueue::poll`];
    /// returns the data buffer and the metadata vector. Completions of other requests are
    /// handed to `other`; the waited request is told apart by its user data,
    /// `u64::MAX - 0x6d65_7461`, which other requests in flight must not use.
    fn execute_with_metadata<C: ProtectableCommand, F: FnMut(Completion)>(
        &mut self,
        ns: &Namespace,
        cmd: Protected<C>,
        data: DmaBuffer,
        metadata: Box<IoVec>,
        mut other: F,
    ) -> std::result::Result<(DmaBuffer, Box<IoVec>), IoFailure> {
        const TAG: u64 = u64::MAX - 0x6d65_7461; // "meta": the waited request's user data
        self.submit_with_metadata(ns, cmd, data, metadata, TAG)?;
        let c = wait_for(self, TAG, &mut other);
        match (c.result, c.buffer, c.pieces) {
            (Ok(_), Some(data), Some(metadata)) => Ok((data, metadata)),
            (Ok(_), buffer, pieces) => Err(IoFailure {
                error: Error::InvalidRequest("a completed metadata request lost a buffer".into()),
                buffer,
                pieces,
            }),
            (Err(error), buffer, pieces) => Err(IoFailure {
                error,
                buffer,
                pieces,
            }),
        }
    }

    /// Runs a typed NVM command to completion; returns the buffer of a data command.
    fn execute<C: NvmCommand>(
        &mut self,
        ns: &Namespace,
        cmd: C,
        buf: Option<DmaBuffer>,
    ) -> std::result::Result<Option<DmaBuffer>, IoFailure>;

    /// Makes progress and hands each finished request to `f`; returns how many finished.
    fn poll<F: FnMut(Completion)>(&mut self, f: F) -> usize;

    // Shorthands: one typed command each, written once for every transport (and for
    // `AnyQueuePair`). `#[inline(always)]`, so each is the generic path with the command's
    // constants folded in.

    /// Queues a read of `blocks` blocks at `lba` into `buf` ([`IoQueue::submit`] of a
    /// [`Read`]); the buffer comes back in the [`Completion`] (or in the error when the
    /// submission is refused).
    #[inline(always)]
    fn submit_read(
        &mut self,
        ns: &Namespace,
        lba: u64,
        blocks: u32,
        buf: DmaBuffer,
        user_data: u64,
    ) -> std::result::Result<(), IoFailure> {
        self.submit(ns, Read::new(lba, blocks), Some(buf), user_data)
    }

    /// Queues a write of `blocks` blocks at `lba` from `buf`; [`WriteFlags::FUA`] forces the
    /// data to non-volatile media before the completion.
    #[inline(always)]
    fn submit_write(
        &mut self,
        ns: &Namespace,
        lba: u64,
        blocks: u32,
        buf: DmaBuffer,
        flags: WriteFlags,
        user_data: u64,
    ) -> std::result::Result<(), IoFailure> {
        let cmd = Write::new(lba, blocks).flags(flags);
        self.submit(ns, cmd, Some(buf), user_data)
    }

    /// Queues a Compare of `blocks` blocks at `lba` with `buf`; a mismatch completes with the
    /// Compare Failure status.
    #[inline(always)]
    fn submit_compare(
        &mut self,
        ns: &Namespace,
        lba: u64,
        blocks: u32,
        buf: DmaBuffer,
        user_data: u64,
    ) -> std::result::Result<(), IoFailure> {
        self.submit(ns, Compare::new(lba, blocks), Some(buf), user_data)
    }

    /// Queues a Flush of the namespace's volatile write cache.
    #[inline(always)]
    fn submit_flush(&mut self, ns: &Namespace, user_data: u64) -> Result<()> {
        self.submit(ns, Flush, None, user_data).map_err(|f| f.error)
    }

    /// Queues a Write Zeroes of `blocks` blocks at `lba` (`deallocate`: the controller may
    /// deallocate them instead of writing).
    #[inline(always)]
    fn submit_write_zeroes(
        &mut self,
        ns: &Namespace,
        lba: u64,
        blocks: u32,
        deallocate: bool,
        user_data: u64,
    ) -> Result<()> {
        let cmd = WriteZeroes::new(lba, blocks).with_deallocate(deallocate);
        self.submit(ns, cmd, None, user_data).map_err(|f| f.error)
    }

    /// Queues a read of `blocks` blocks at `lba` into `pieces`, in order
    /// ([`IoQueue::submit_vectored`] of a [`Read`]).
    #[inline(always)]
    fn submit_readv(
        &mut self,
        ns: &Namespace,
        lba: u64,
        blocks: u32,
        pieces: Box<IoVec>,
        user_data: u64,
    ) -> std::result::Result<(), IoFailure> {
        self.submit_vectored(ns, Read::new(lba, blocks), pieces, user_data)
    }

    /// Queues a write of `blocks` blocks at `lba` from `pieces`, in order
    /// ([`IoQueue::submit_vectored`] of a [`Write`]).
    #[inline(always)]
    fn submit_writev(
        &mut self,
        ns: &Namespace,
        lba: u64,
        blocks: u32,
        pieces: Box<IoVec>,
        flags: WriteFlags,
        user_data: u64,
    ) -> std::result::Result<(), IoFailure> {
        let cmd = Write::new(lba, blocks).flags(flags);
        self.submit_vectored(ns, cmd, pieces, user_data)
    }

    /// Runs a vectored command to completion through [`IoQueue::poll`]; returns its pieces.
    /// Completions of other requests that finish meanwhile are handed to `other`; the waited
    /// request is told apart by its user data, `u64::MAX - 0x7665_6374`, which other requests
    /// in flight must not use. The queue's command timeout bounds the wait.
    fn execute_vectored<C: NvmCommand, F: FnMut(Completion)>(
        &mut self,
        ns: &Namespace,
        cmd: C,
        pieces: Box<IoVec>,
        mut other: F,
    ) -> std::result::Result<Box<IoVec>, IoFailure> {
        const TAG: u64 = u64::MAX - 0x7665_6374; // "vect": the waited request's user data
        self.submit_vectored(ns, cmd, pieces, TAG)?;
        let c = wait_for(self, TAG, &mut other);
        match c.result {
            Ok(_) => Ok(c
                .pieces
                .expect("a completed vectored command returns its pieces")),
            Err(error) => Err(IoFailure {
                error,
                buffer: None,
                pieces: c.pieces,
            }),
        }
    }

    /// Reads `blocks` blocks at `lba` into `buf` and waits for the data.
    #[inline]
    fn read(
        &mut self,
        ns: &Namespace,
        lba: u64,
        blocks: u32,
        buf: DmaBuffer,
    ) -> std::result::Result<DmaBuffer, IoFailure> {
        self.execute(ns, Read::new(lba, blocks), Some(buf))
            .map(data_buffer)
    }

    /// Writes `blocks` blocks at `lba` from `buf` and waits for the completion.
    #[inline]
    fn write(
        &mut self,
        ns: &Namespace,
        lba: u64,
        blocks: u32,
        buf: DmaBuffer,
        flags: WriteFlags,
    ) -> std::result::Result<DmaBuffer, IoFailure> {
        self.execute(ns, Write::new(lba, blocks).flags(flags), Some(buf))
            .map(data_buffer)
    }

    /// Compares `blocks` blocks at `lba` with `buf` and waits; a mismatch is an error with
    /// the Compare Failure status (the buffer comes back in the error).
    #[inline]
    fn compare(
        &mut self,
        ns: &Namespace,
        lba: u64,
        blocks: u32,
        buf: DmaBuffer,
    ) -> std::result::Result<DmaBuffer, IoFailure> {
        self.execute(ns, Compare::new(lba, blocks), Some(buf))
            .map(data_buffer)
    }

    /// Flushes the namespace's volatile write cache and waits.
    #[inline]
    fn flush(&mut self, ns: &Namespace) -> Result<()> {
        self.execute(ns, Flush, None).map(drop).map_err(|f| f.error)
    }

    /// Writes zeroes to `blocks` blocks at `lba` and waits.
    #[inline]
    fn write_zeroes(
        &mut self,
        ns: &Namespace,
        lba: u64,
        blocks: u32,
        deallocate: bool,
    ) -> Result<()> {
        let cmd = WriteZeroes::new(lba, blocks).with_deallocate(deallocate);
        self.execute(ns, cmd, None).map(drop).map_err(|f| f.error)
    }
}

/// The buffer of a completed data command: [`IoQueue::execute`] returns it for every command
/// that moves data (the transports' INVARIANT), so its absence is a transport bug.
#[inline(always)]
fn data_buffer(buf: Option<DmaBuffer>) -> DmaBuffer {
    buf.expect("a completed data command returns its buffer")
}

/// Polls `q` until the request with user data `tag` completes and returns its completion;
/// the other completions that arrive meanwhile go to `other`. The `execute_*` methods' wait.
fn wait_for<Q: IoQueue + ?Sized, F: FnMut(Completion)>(
    q: &mut Q,
    tag: u64,
    other: &mut F,
) -> Completion {
    let mut done: Option<Completion> = None;
    while done.is_none() {
        q.poll(|c| {
            if done.is_none() && c.user_data == tag {
                done = Some(c);
            } else {
                other(c);
            }
        });
    }
    done.expect("the loop ends on the waited completion")
}
