//! [`AnyQueuePair`]: a PCIe or NVMe/TCP I/O queue pair, an [`IoQueue`] with one match per
//! call.

use nvme_driver::{
    Completion, DmaBuffer, IoFailure, IoQueue, IoVec, Namespace, NvmCommand, QueuePair,
    QueuePairStats, Result,
};
use nvme_tcp::{TcpQueuePair, TcpQueueStats};

/// A PCIe or NVMe/TCP I/O queue pair with the API the two share ([`IoQueue`]). Operations
/// only one transport has (PCIe: Compare, Write Zeroes, Deallocate, raw commands,
/// interrupts; TCP: reconnect) are reached through [`AnyQueuePair::as_pcie_mut`] /
/// [`AnyQueuePair::as_tcp_mut`].
// Not boxed: a box would put a pointer chase in front of every PCIe submission.
#[allow(clippy::large_enum_variant)]
pub enum AnyQueuePair {
    /// Through vfio-pci (or the emulator).
    Pcie(QueuePair),
    /// Over NVMe/TCP.
    Tcp(TcpQueuePair),
}

macro_rules! qp {
    ($self:expr, $q:ident => $e:expr) => {
        match $self {
            AnyQueuePair::Pcie($q) => $e,
            AnyQueuePair::Tcp($q) => $e,
        }
    };
}

type IoResult<T> = std::result::Result<T, IoFailure>;

/// Counters of an [`AnyQueuePair`]: those of the transport's pair.
#[derive(Clone, Debug)]
pub enum AnyQueueStats {
    /// A PCIe pair's.
    Pcie(QueuePairStats),
    /// An NVMe/TCP pair's.
    Tcp(TcpQueueStats),
}

impl From<QueuePair> for AnyQueuePair {
    fn from(q: QueuePair) -> Self {
        AnyQueuePair::Pcie(q)
    }
}

impl From<TcpQueuePair> for AnyQueuePair {
    fn from(q: TcpQueuePair) -> Self {
        AnyQueuePair::Tcp(q)
    }
}

impl AnyQueuePair {
    /// The PCIe queue pair.
    #[inline]
    pub fn as_pcie(&self) -> Option<&QueuePair> {
        match self {
            AnyQueuePair::Pcie(q) => Some(q),
            AnyQueuePair::Tcp(_) => None,
        }
    }

    /// The PCIe queue pair, for what only PCIe offers (Write Zeroes, Deallocate, ...).
    #[inline]
    pub fn as_pcie_mut(&mut self) -> Option<&mut QueuePair> {
        match self {
            AnyQueuePair::Pcie(q) => Some(q),
            AnyQueuePair::Tcp(_) => None,
        }
    }

    /// The NVMe/TCP queue pair.
    #[inline]
    pub fn as_tcp(&self) -> Option<&TcpQueuePair> {
        match self {
            AnyQueuePair::Pcie(_) => None,
            AnyQueuePair::Tcp(q) => Some(q),
        }
    }

    /// The NVMe/TCP queue pair, for what only NVMe/TCP offers (reconnect, ...).
    #[inline]
    pub fn as_tcp_mut(&mut self) -> Option<&mut TcpQueuePair> {
        match self {
            AnyQueuePair::Pcie(_) => None,
            AnyQueuePair::Tcp(q) => Some(q),
        }
    }
}

/// The enum is itself an [`IoQueue`] (one branch, then the pair's own method), so code
/// generic over `Q: IoQueue` (`nvme-poll`'s async layer and poll groups) takes it as well as
/// either concrete pair. Bring the trait into scope (`use nvme_device::IoQueue`) to call
/// these methods.
impl IoQueue for AnyQueuePair {
    type Stats = AnyQueueStats;

    #[inline]
    fn qid(&self) -> u16 {
        qp!(self, q => IoQueue::qid(q))
    }

    #[inline]
    fn depth(&self) -> u32 {
        qp!(self, q => IoQueue::depth(q))
    }

    #[inline]
    fn capacity(&self) -> u16 {
        qp!(self, q => IoQueue::capacity(q))
    }

    #[inline]
    fn in_flight(&self) -> u16 {
        qp!(self, q => IoQueue::in_flight(q))
    }

    #[inline]
    fn max_transfer_bytes(&self) -> usize {
        qp!(self, q => IoQueue::max_transfer_bytes(q))
    }

    fn stats_snapshot(&self) -> AnyQueueStats {
        match self {
            AnyQueuePair::Pcie(q) => AnyQueueStats::Pcie(q.stats().clone()),
            AnyQueuePair::Tcp(q) => AnyQueueStats::Tcp(q.stats().clone()),
        }
    }

    #[inline]
    fn plug(&mut self, n: u16) -> Result<()> {
        qp!(self, q => IoQueue::plug(q, n))
    }

    #[inline]
    fn unplug(&mut self) {
        qp!(self, q => IoQueue::unplug(q))
    }

    #[inline]
    fn ring(&mut self) {
        qp!(self, q => IoQueue::ring(q))
    }

    #[inline]
    fn submit<C: NvmCommand>(
        &mut self,
        ns: &Namespace,
        cmd: C,
        buf: Option<DmaBuffer>,
        user_data: u64,
    ) -> IoResult<()> {
        qp!(self, q => IoQueue::submit(q, ns, cmd, buf, user_data))
    }

    #[inline]
    fn submit_vectored<C: NvmCommand>(
        &mut self,
        ns: &Namespace,
        cmd: C,
        pieces: Box<IoVec>,
        user_data: u64,
    ) -> IoResult<()> {
        qp!(self, q => IoQueue::submit_vectored(q, ns, cmd, pieces, user_data))
    }

    #[inline]
    fn submit_compare_and_write(
        &mut self,
        ns: &Namespace,
        cmd: nvme_driver::fused::CompareAndWrite,
        buf: DmaBuffer,
        user_data: u64,
    ) -> IoResult<()> {
        qp!(self, q => IoQueue::submit_compare_and_write(q, ns, cmd, buf, user_data))
    }

    #[inline]
    fn submit_with_metadata<C: nvme_driver::ProtectableCommand>(
        &mut self,
        ns: &Namespace,
        cmd: nvme_driver::Protected<C>,
        data: DmaBuffer,
        metadata: Box<IoVec>,
        user_data: u64,
    ) -> IoResult<()> {
        qp!(self, q => IoQueue::submit_with_metadata(q, ns, cmd, data, metadata, user_data))
    }

    #[inline]
    fn execute<C: NvmCommand>(
        &mut self,
        ns: &Namespace,
        cmd: C,
        buf: Option<DmaBuffer>,
    ) -> IoResult<Option<DmaBuffer>> {
        qp!(self, q => IoQueue::execute(q, ns, cmd, buf))
    }

    #[inline]
    fn poll<F: FnMut(Completion)>(&mut self, f: F) -> usize {
        qp!(self, q => IoQueue::poll(q, f))
    }
}
