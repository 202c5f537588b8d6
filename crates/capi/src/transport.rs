//! The two transports behind the C handles: a `struct nvme_ctrlr` holds an
//! [`nvme_device::AnyController`] (a PCIe `Controller` or an NVMe/TCP `TcpController`), a
//! `struct nvme_qpair` a [`Pair`]: the library's [`AnyQueuePair`] plus what the C API adds
//! on TCP. One predictable branch per call: the PCIe arm calls the `QueuePair` as before (it
//! splits transfers above MDTS itself), the TCP arm goes out of line to the pair's
//! [`IoQueue`] methods (static dispatch), through [`TcpPair`], which splits what one TCP
//! command cannot carry ([`crate::split`]).

use nvme_device::AnyQueuePair;
use nvme_driver::{
    Completion, DmaBuffer, Error, IoFailure, IoQueue, Namespace, Result, WriteFlags,
};
use nvme_tcp::TcpQueuePair;

use crate::split::{Splitter, TcpPair};

/// A queue pair of either transport, with the split requests in flight on a TCP pair.
pub(crate) struct Pair {
    // Field order is drop order: the connection closes before pieces kept in `split` are freed.
    qp: AnyQueuePair,
    split: Splitter,
}

impl Pair {
    pub(crate) fn new(qp: AnyQueuePair) -> Self {
        Self {
            qp,
            split: Splitter::default(),
        }
    }

    pub(crate) fn depth(&self) -> u32 {
        IoQueue::depth(&self.qp)
    }

    #[inline]
    pub(crate) fn submit_read(
        &mut self,
        ns: &Namespace,
        lba: u64,
        blocks: u32,
        buf: DmaBuffer,
        user_data: u64,
    ) -> std::result::Result<(), IoFailure> {
        match &mut self.qp {
            AnyQueuePair::Pcie(q) => q.submit_read(ns, lba, blocks, buf, user_data),
            AnyQueuePair::Tcp(qp) => {
                let mut q = TcpPair {
                    qp,
                    split: &mut self.split,
                };
                tcp::submit_read(&mut q, ns, lba, blocks, buf, user_data)
            }
        }
    }

    #[inline]
    pub(crate) fn submit_write(
        &mut self,
        ns: &Namespace,
        lba: u64,
        blocks: u32,
        buf: DmaBuffer,
        flags: WriteFlags,
        user_data: u64,
    ) -> std::result::Result<(), IoFailure> {
        match &mut self.qp {
            AnyQueuePair::Pcie(q) => q.submit_write(ns, lba, blocks, buf, flags, user_data),
            AnyQueuePair::Tcp(qp) => {
                let mut q = TcpPair {
                    qp,
                    split: &mut self.split,
                };
                tcp::submit_write(&mut q, ns, lba, blocks, buf, flags, user_data)
            }
        }
    }

    pub(crate) fn submit_flush(&mut self, ns: &Namespace, user_data: u64) -> Result<()> {
        IoQueue::submit_flush(&mut self.qp, ns, user_data)
    }

    /// Write Zeroes: PCIe only for now (the NVMe/TCP host sends Read, Write and Flush).
    pub(crate) fn submit_write_zeroes(
        &mut self,
        ns: &Namespace,
        lba: u64,
        blocks: u32,
        deallocate: bool,
        user_data: u64,
    ) -> Result<()> {
        match &mut self.qp {
            AnyQueuePair::Pcie(q) => q.submit_write_zeroes(ns, lba, blocks, deallocate, user_data),
            AnyQueuePair::Tcp(q) => Err(tcp_unsupported(q, "Write Zeroes")),
        }
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
            AnyQueuePair::Tcp(qp) => {
                let mut q = TcpPair {
                    qp,
                    split: &mut self.split,
                };
                tcp::poll(&mut q, f)
            }
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
        what: format!("{what} is not implemented by the NVMe/TCP host (Read, Write, Flush are)"),
    }
}

/// The TCP arms of the hot calls, kept out of line so that the PCIe arm of each C entry point
/// compiles to what it was before the handles had two transports (the socket work dwarfs a call).
/// A read or write that fits one command goes straight to the TCP queue pair; a larger one is
/// split ([`crate::split`]).
mod tcp {
    use super::*;

    #[inline(never)]
    pub(super) fn submit_read(
        q: &mut TcpPair<'_>,
        ns: &Namespace,
        lba: u64,
        blocks: u32,
        buf: DmaBuffer,
        user_data: u64,
    ) -> std::result::Result<(), IoFailure> {
        if q.needs_split(ns, blocks) {
            return q.submit_split(None, ns, lba, blocks, buf, user_data);
        }
        IoQueue::submit_read(q.qp, ns, lba, blocks, buf, user_data)
    }

    #[inline(never)]
    pub(super) fn submit_write(
        q: &mut TcpPair<'_>,
        ns: &Namespace,
        lba: u64,
        blocks: u32,
        buf: DmaBuffer,
        flags: WriteFlags,
        user_data: u64,
    ) -> std::result::Result<(), IoFailure> {
        if q.needs_split(ns, blocks) {
            return q.submit_split(Some(flags), ns, lba, blocks, buf, user_data);
        }
        IoQueue::submit_write(q.qp, ns, lba, blocks, buf, flags, user_data)
    }

    #[inline(never)]
    pub(super) fn poll<F: FnMut(Completion)>(q: &mut TcpPair<'_>, f: F) -> usize {
        q.poll(f)
    }
}
