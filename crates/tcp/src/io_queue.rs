//! [`IoQueue`] for [`TcpQueuePair`]: the NVMe/TCP pair under the transport-neutral queue-pair
//! trait of `nvme-core`, so `nvme-poll`'s async layer and poll groups (and any code generic
//! over `Q: IoQueue`) run over TCP. Thin forwards to the inherent methods.

use nvme_core::{Completion, DmaBuffer, IoFailure, IoQueue, IoVec, Namespace, NvmCommand, Result};

use crate::{TcpQueuePair, TcpQueueStats};

impl IoQueue for TcpQueuePair {
    type Stats = TcpQueueStats;

    #[inline]
    fn qid(&self) -> u16 {
        TcpQueuePair::qid(self)
    }

    #[inline]
    fn depth(&self) -> u32 {
        TcpQueuePair::depth(self)
    }

    #[inline]
    fn capacity(&self) -> u16 {
        TcpQueuePair::capacity(self)
    }

    #[inline]
    fn in_flight(&self) -> u16 {
        TcpQueuePair::in_flight(self)
    }

    #[inline]
    fn max_transfer_bytes(&self) -> usize {
        TcpQueuePair::max_transfer_bytes(self)
    }

    fn stats_snapshot(&self) -> TcpQueueStats {
        TcpQueuePair::stats(self).clone()
    }

    #[inline]
    fn plug(&mut self, n: u16) -> Result<()> {
        TcpQueuePair::plug(self, n)
    }

    #[inline]
    fn unplug(&mut self) {
        TcpQueuePair::unplug(self)
    }

    #[inline]
    fn ring(&mut self) {
        TcpQueuePair::ring(self)
    }

    #[inline]
    fn submit<C: NvmCommand>(
        &mut self,
        ns: &Namespace,
        cmd: C,
        buf: Option<DmaBuffer>,
        user_data: u64,
    ) -> std::result::Result<(), IoFailure> {
        TcpQueuePair::submit(self, ns, cmd, buf, user_data)
    }

    #[inline]
    fn submit_vectored<C: NvmCommand>(
        &mut self,
        ns: &Namespace,
        cmd: C,
        pieces: Box<IoVec>,
        user_data: u64,
    ) -> std::result::Result<(), IoFailure> {
        TcpQueuePair::submit_vectored(self, ns, cmd, pieces, user_data)
    }

    #[inline]
    fn execute<C: NvmCommand>(
        &mut self,
        ns: &Namespace,
        cmd: C,
        buf: Option<DmaBuffer>,
    ) -> std::result::Result<Option<DmaBuffer>, IoFailure> {
        TcpQueuePair::execute(self, ns, cmd, buf)
    }

    #[inline]
    fn poll<F: FnMut(Completion)>(&mut self, f: F) -> usize {
        TcpQueuePair::poll(self, f)
    }
}
