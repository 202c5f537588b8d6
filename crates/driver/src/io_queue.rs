//! The PCIe [`QueuePair`] as an [`IoQueue`] (the trait lives in `nvme-core`): forwards to
//! the inherent methods, each `#[inline(always)]`, so the PCIe path through the trait is the
//! same machine code as calling [`QueuePair`] directly.

use nvme_core::fused::CompareAndWrite;
use nvme_core::protection::ProtectableCommand;
use nvme_core::{Completion, IoFailure, IoQueue, IoVec, Namespace, NvmCommand, Protected, Result};
use nvme_vfio::DmaBuffer;

use crate::queue_pair::{QueuePair, QueuePairStats};

impl IoQueue for QueuePair {
    type Stats = QueuePairStats;

    #[inline(always)]
    fn qid(&self) -> u16 {
        QueuePair::qid(self)
    }

    #[inline(always)]
    fn depth(&self) -> u32 {
        QueuePair::depth(self)
    }

    #[inline(always)]
    fn capacity(&self) -> u16 {
        QueuePair::capacity(self)
    }

    #[inline(always)]
    fn in_flight(&self) -> u16 {
        QueuePair::in_flight(self)
    }

    #[inline(always)]
    fn max_transfer_bytes(&self) -> usize {
        QueuePair::max_transfer_bytes(self)
    }

    fn stats_snapshot(&self) -> QueuePairStats {
        QueuePair::stats(self).clone()
    }

    #[inline(always)]
    fn plug(&mut self, n: u16) -> Result<()> {
        QueuePair::plug(self, n)
    }

    #[inline(always)]
    fn unplug(&mut self) {
        QueuePair::unplug(self)
    }

    #[inline(always)]
    fn ring(&mut self) {
        QueuePair::ring(self)
    }

    #[inline(always)]
    fn submit<C: NvmCommand>(
        &mut self,
        ns: &Namespace,
        cmd: C,
        buf: Option<DmaBuffer>,
        user_data: u64,
    ) -> std::result::Result<(), IoFailure> {
        QueuePair::submit(self, ns, cmd, buf, user_data)
    }

    #[inline(always)]
    fn submit_in_place<C: NvmCommand>(
        &mut self,
        ns: &Namespace,
        cmd: C,
        buf: &mut Option<DmaBuffer>,
        user_data: u64,
    ) -> Result<()> {
        QueuePair::submit_in_place(self, ns, cmd, buf, user_data)
    }

    #[inline(always)]
    fn submit_vectored<C: NvmCommand>(
        &mut self,
        ns: &Namespace,
        cmd: C,
        pieces: Box<IoVec>,
        user_data: u64,
    ) -> std::result::Result<(), IoFailure> {
        QueuePair::submit_vectored(self, ns, cmd, pieces, user_data)
    }

    #[inline]
    fn submit_compare_and_write(
        &mut self,
        ns: &Namespace,
        cmd: CompareAndWrite,
        buf: DmaBuffer,
        user_data: u64,
    ) -> std::result::Result<(), IoFailure> {
        QueuePair::submit_compare_and_write(self, ns, cmd, buf, user_data)
    }

    #[inline]
    fn submit_with_metadata<C: ProtectableCommand>(
        &mut self,
        ns: &Namespace,
        cmd: Protected<C>,
        data: DmaBuffer,
        metadata: Box<IoVec>,
        user_data: u64,
    ) -> std::result::Result<(), IoFailure> {
        QueuePair::submit_with_metadata(self, ns, cmd, data, metadata, user_data)
    }

    #[inline(always)]
    fn execute<C: NvmCommand>(
        &mut self,
        ns: &Namespace,
        cmd: C,
        buf: Option<DmaBuffer>,
    ) -> std::result::Result<Option<DmaBuffer>, IoFailure> {
        QueuePair::execute(self, ns, cmd, buf)
    }

    #[inline(always)]
    fn poll<F: FnMut(Completion)>(&mut self, f: F) -> usize {
        QueuePair::poll(self, f)
    }
}
