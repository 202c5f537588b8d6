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
//! shorthands. Operations only one transport has (PCIe: Deallocate, raw commands, interrupts;
//! TCP: reconnect, digests) stay inherent methods of the concrete types.

use nvme_vfio::DmaBuffer;

use crate::command::NvmCommand;
use crate::completion::Completion;
use crate::error::{IoFailure, Result};
use crate::flags::WriteFlags;
use crate::namespace::Namespace;

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

    /// Queues a read of `blocks` blocks at `lba` into `buf`; the buffer comes back in the
    /// [`Completion`] (or in the error when the submission is refused).
    fn submit_read(
        &mut self,
        ns: &Namespace,
        lba: u64,
        blocks: u32,
        buf: DmaBuffer,
        user_data: u64,
    ) -> std::result::Result<(), IoFailure>;

    /// Queues a write of `blocks` blocks at `lba` from `buf`.
    fn submit_write(
        &mut self,
        ns: &Namespace,
        lba: u64,
        blocks: u32,
        buf: DmaBuffer,
        flags: WriteFlags,
        user_data: u64,
    ) -> std::result::Result<(), IoFailure>;

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

    /// Runs a typed NVM command to completion; returns the buffer of a data command.
    fn execute<C: NvmCommand>(
        &mut self,
        ns: &Namespace,
        cmd: C,
        buf: Option<DmaBuffer>,
    ) -> std::result::Result<Option<DmaBuffer>, IoFailure>;

    /// Queues a Flush of the namespace's volatile write cache.
    fn submit_flush(&mut self, ns: &Namespace, user_data: u64) -> Result<()>;

    /// Makes progress and hands each finished request to `f`; returns how many finished.
    fn poll<F: FnMut(Completion)>(&mut self, f: F) -> usize;

    /// Reads and waits for the data.
    fn read(
        &mut self,
        ns: &Namespace,
        lba: u64,
        blocks: u32,
        buf: DmaBuffer,
    ) -> std::result::Result<DmaBuffer, IoFailure>;

    /// Writes and waits for the completion.
    fn write(
        &mut self,
        ns: &Namespace,
        lba: u64,
        blocks: u32,
        buf: DmaBuffer,
        flags: WriteFlags,
    ) -> std::result::Result<DmaBuffer, IoFailure>;

    /// Flushes and waits.
    fn flush(&mut self, ns: &Namespace) -> Result<()>;
}
