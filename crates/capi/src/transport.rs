//! The two transports behind the C handles: a `struct nvme_ctrlr` is a PCIe [`Controller`]
//! or an NVMe/TCP [`TcpController`], a `struct nvme_qpair` holds the matching queue pair.
//! One predictable branch per call: the PCIe arm calls the `QueuePair` as before (it splits
//! transfers above MDTS itself), the TCP arm goes out of line to the pair's [`IoQueue`]
//! methods (static dispatch), through [`TcpPair`], which splits what one TCP command cannot
//! carry ([`crate::split`]).

use nvme_driver::spec::IdentifyController;
use nvme_driver::{
    Completion, Controller, DmaBuffer, Error, IoFailure, IoQueue, Namespace, QueuePair,
    QueuePairOptions, Result, WriteFlags,
};
use nvme_tcp::{TcpController, TcpQueuePair};

use crate::split::TcpPair;

/// A controller of either transport.
pub(crate) enum AnyCtrl {
    /// Through vfio-pci (or the emulator).
    Pcie(Controller),
    /// Over NVMe/TCP.
    Tcp(TcpController),
}

macro_rules! ctrl {
    ($self:expr, $c:ident => $e:expr) => {
        match $self {
            AnyCtrl::Pcie($c) => $e,
            AnyCtrl::Tcp($c) => $e,
        }
    };
}

impl AnyCtrl {
    pub(crate) fn identify(&self) -> &IdentifyController {
        ctrl!(self, c => c.identify())
    }

    pub(crate) fn namespaces(&self) -> Vec<Namespace> {
        ctrl!(self, c => c.namespaces())
    }

    pub(crate) fn namespace(&self, nsid: u32) -> Result<Namespace> {
        ctrl!(self, c => c.namespace(nsid))
    }

    pub(crate) fn io_queue_pairs(&self) -> u16 {
        ctrl!(self, c => c.io_queue_pairs())
    }

    pub(crate) fn max_queue_entries(&self) -> u32 {
        ctrl!(self, c => c.max_queue_entries())
    }

    pub(crate) fn max_transfer_bytes(&self) -> usize {
        ctrl!(self, c => c.max_transfer_bytes())
    }

    /// PCIe: DMA memory mapped for the controller; TCP: page-aligned host memory (the data
    /// goes through the socket, `nvme_tcp::HostMemory`).
    pub(crate) fn alloc_buffer(&self, len: usize) -> Result<DmaBuffer> {
        ctrl!(self, c => c.alloc_buffer(len))
    }

    pub(crate) fn create_queue_pair(&self, options: QueuePairOptions) -> Result<AnyQp> {
        Ok(match self {
            AnyCtrl::Pcie(c) => AnyQp::Pcie(c.create_queue_pair(options)?),
            AnyCtrl::Tcp(c) => AnyQp::Tcp(TcpPair::new(c.create_queue_pair(options)?)),
        })
    }
}

/// A queue pair of either transport.
// Not boxed: a box would put a pointer chase in front of every PCIe submission.
#[allow(clippy::large_enum_variant)]
pub(crate) enum AnyQp {
    /// Through vfio-pci (or the emulator).
    Pcie(QueuePair),
    /// Over NVMe/TCP, with the reads and writes split here that exceed one command.
    Tcp(TcpPair),
}

macro_rules! qp {
    ($self:expr, $q:ident => $e:expr) => {
        match $self {
            AnyQp::Pcie($q) => $e,
            AnyQp::Tcp(TcpPair { qp: $q, .. }) => $e,
        }
    };
}

impl AnyQp {
    pub(crate) fn depth(&self) -> u32 {
        qp!(self, q => IoQueue::depth(q))
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
        match self {
            AnyQp::Pcie(q) => q.submit_read(ns, lba, blocks, buf, user_data),
            AnyQp::Tcp(q) => tcp::submit_read(q, ns, lba, blocks, buf, user_data),
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
        match self {
            AnyQp::Pcie(q) => q.submit_write(ns, lba, blocks, buf, flags, user_data),
            AnyQp::Tcp(q) => tcp::submit_write(q, ns, lba, blocks, buf, flags, user_data),
        }
    }

    pub(crate) fn submit_flush(&mut self, ns: &Namespace, user_data: u64) -> Result<()> {
        qp!(self, q => IoQueue::submit_flush(q, ns, user_data))
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
        match self {
            AnyQp::Pcie(q) => q.submit_write_zeroes(ns, lba, blocks, deallocate, user_data),
            AnyQp::Tcp(q) => Err(tcp_unsupported(&q.qp, "Write Zeroes")),
        }
    }

    /// Dataset Management deallocate: PCIe only for now.
    pub(crate) fn submit_deallocate(
        &mut self,
        ns: &Namespace,
        ranges: &[(u64, u32)],
        user_data: u64,
    ) -> Result<()> {
        match self {
            AnyQp::Pcie(q) => q.submit_deallocate(ns, ranges, user_data),
            AnyQp::Tcp(q) => Err(tcp_unsupported(&q.qp, "Dataset Management (deallocate)")),
        }
    }

    #[inline]
    pub(crate) fn poll<F: FnMut(Completion)>(&mut self, f: F) -> usize {
        match self {
            AnyQp::Pcie(q) => q.poll(f),
            AnyQp::Tcp(q) => tcp::poll(q, f),
        }
    }

    /// Holds the doorbell (PCIe) or the send (TCP) of later submissions until
    /// [`AnyQp::unplug`]; reserves nothing.
    #[inline]
    pub(crate) fn hold_submissions(&mut self) {
        // A plug of 0 tags cannot fail: it only sets the pair's plugged flag.
        let _ = qp!(self, q => IoQueue::plug(q, 0));
    }

    /// Publishes what was submitted since [`AnyQp::hold_submissions`] (one doorbell write).
    #[inline]
    pub(crate) fn release_submissions(&mut self) {
        qp!(self, q => IoQueue::unplug(q))
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
        q: &mut TcpPair,
        ns: &Namespace,
        lba: u64,
        blocks: u32,
        buf: DmaBuffer,
        user_data: u64,
    ) -> std::result::Result<(), IoFailure> {
        if q.needs_split(ns, blocks) {
            return q.submit_split(None, ns, lba, blocks, buf, user_data);
        }
        IoQueue::submit_read(&mut q.qp, ns, lba, blocks, buf, user_data)
    }

    #[inline(never)]
    pub(super) fn submit_write(
        q: &mut TcpPair,
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
        IoQueue::submit_write(&mut q.qp, ns, lba, blocks, buf, flags, user_data)
    }

    #[inline(never)]
    pub(super) fn poll<F: FnMut(Completion)>(q: &mut TcpPair, f: F) -> usize {
        q.poll(f)
    }
}
