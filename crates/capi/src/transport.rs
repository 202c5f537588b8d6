//! The two transports behind the C handles: a `struct nvme_ctrlr` holds an
//! [`nvme_device::AnyController`] (a PCIe `Controller` or an NVMe/TCP `TcpController`), a
//! `struct nvme_qpair` a [`Pair`]: the library's [`AnyQueuePair`]. One predictable branch
//! per call: the PCIe arm calls the `QueuePair` as before, the TCP arm goes out of line to
//! the pair's [`IoQueue`] methods (static dispatch). Both pairs split transfers above MDTS
//! themselves.

use nvme_device::AnyQueuePair;
use nvme_driver::{
    Completion, DmaBuffer, Error, IoFailure, IoQueue, IoVec, Namespace, NvmCommand, Result,
};
use nvme_tcp::TcpQueuePair;

/// A queue pair of either transport.
pub(crate) struct Pair {
    qp: AnyQueuePair,
}

impl Pair {
    pub(crate) fn new(qp: AnyQueuePair) -> Self {
        Self { qp }
    }

    pub(crate) fn depth(&self) -> u32 {
        IoQueue::depth(&self.qp)
    }

    /// Queues any typed NVM command (`nvme_driver::command`); `buf` is the data buffer of a
    /// command that moves data.
    #[inline]
    pub(crate) fn submit<C: NvmCommand>(
        &mut self,
        ns: &Namespace,
        cmd: C,
        buf: Option<DmaBuffer>,
        user_data: u64,
    ) -> std::result::Result<(), IoFailure> {
        match &mut self.qp {
            AnyQueuePair::Pcie(q) => q.submit(ns, cmd, buf, user_data),
            AnyQueuePair::Tcp(q) => tcp::submit(q, ns, cmd, buf, user_data),
        }
    }

    /// Queues a vectored Read or Write (both transports; never split).
    pub(crate) fn submit_vectored<C: NvmCommand>(
        &mut self,
        ns: &Namespace,
        cmd: C,
        pieces: Box<IoVec>,
        user_data: u64,
    ) -> std::result::Result<(), IoFailure> {
        IoQueue::submit_vectored(&mut self.qp, ns, cmd, pieces, user_data)
    }

    pub(crate) fn submit_flush(&mut self, ns: &Namespace, user_data: u64) -> Result<()> {
        IoQueue::submit_flush(&mut self.qp, ns, user_data)
    }

    pub(crate) fn submit_write_zeroes(
        &mut self,
        ns: &Namespace,
        lba: u64,
        blocks: u32,
        deallocate: bool,
        user_data: u64,
    ) -> Result<()> {
        IoQueue::submit_write_zeroes(&mut self.qp, ns, lba, blocks, deallocate, user_data)
    }

    /// A fused Compare and Write (PCIe; NVMe/TCP refuses it).
    pub(crate) fn submit_compare_and_write(
        &mut self,
        ns: &Namespace,
        cmd: nvme_driver::fused::CompareAndWrite,
        buf: DmaBuffer,
        user_data: u64,
    ) -> std::result::Result<(), IoFailure> {
        IoQueue::submit_compare_and_write(&mut self.qp, ns, cmd, buf, user_data)
    }

    /// Dataset Management deallocate: PCIe only for now.
    pub(crate) fn submit_deallocate(
        &mut self,
        ns: &Namespace,
        ranges: &[(u64, u32)],
        user_data: u64,
    ) -> Result<()> {
        match &mut self.qp {
            AnyQueuePair::Pcie(q) => q.submit_deallocate(ns, ranges, user_data),
            AnyQueuePair::Tcp(q) => Err(tcp_unsupported(q, "Dataset Management (deallocate)")),
        }
    }

    #[inline]
    pub(crate) fn poll<F: FnMut(Completion)>(&mut self, f: F) -> usize {
        match &mut self.qp {
            AnyQueuePair::Pcie(q) => q.poll(f),
            AnyQueuePair::Tcp(q) => tcp::poll(q, f),
        }
    }

    /// Holds the doorbell (PCIe) or the send (TCP) of later submissions until
    /// [`Pair::release_submissions`]; reserves nothing.
    #[inline]
    pub(crate) fn hold_submissions(&mut self) {
        // A plug of 0 tags cannot fail: it only sets the pair's plugged flag.
        let _ = IoQueue::plug(&mut self.qp, 0);
    }

    /// Publishes what was submitted since [`Pair::hold_submissions`] (one doorbell write).
    #[inline]
    pub(crate) fn release_submissions(&mut self) {
        IoQueue::unplug(&mut self.qp)
    }
}

fn tcp_unsupported(q: &TcpQueuePair, what: &str) -> Error {
    Error::Unsupported {
        controller: format!("NVMe/TCP queue {}", q.qid()),
        what: format!(
            "{what} is not implemented by the NVMe/TCP host (Read, Write, Compare, Flush, \
             Write Zeroes, Verify are)"
        ),
    }
}

/// The TCP arms of the hot calls, kept out of line so that the PCIe arm of each C entry point
/// compiles to what it was before the handles had two transports (the socket work dwarfs a call).
mod tcp {
    use super::*;

    #[inline(never)]
    pub(super) fn submit<C: NvmCommand>(
        q: &mut TcpQueuePair,
        ns: &Namespace,
        cmd: C,
        buf: Option<DmaBuffer>,
        user_data: u64,
    ) -> std::result::Result<(), IoFailure> {
        IoQueue::submit(q, ns, cmd, buf, user_data)
    }

    #[inline(never)]
    pub(super) fn poll<F: FnMut(Completion)>(q: &mut TcpQueuePair, f: F) -> usize {
        IoQueue::poll(q, f)
    }
}
