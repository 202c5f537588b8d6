//! The DEVICE argument of every tool: a PCI address or PCIe transport id (the controller is
//! driven through vfio-pci), or an NVMe/TCP transport id as SPDK writes it
//! (`trtype:TCP adrfam:IPv4 traddr:127.0.0.1 trsvcid:4420 subnqn:NQN [hostnqn:NQN]`).
//!
//! [`AnyController`] and [`AnyQueuePair`] are two-variant enums over the PCIe and TCP
//! types: one predictable branch per call in the tools, while the driver's PCIe queue pair
//! itself stays one concrete type with no dispatch inside (its instruction count per I/O is
//! unchanged; `tests/instr-per-io.sh` measures the driver directly).

use nvme_driver::spec::regs::{Cap, Version};
use nvme_driver::spec::IdentifyController;
use nvme_driver::{
    Completion, Controller, ControllerOptions, DeviceArgError, DmaBuffer, IoFailure, IoQueue,
    Namespace, PciAddress, QueuePair, QueuePairOptions, QueuePairStats, Result, WriteFlags,
};
use nvme_tcp::{TcpController, TcpOptions, TcpQueuePair, TcpQueueStats, TransportId, TridError};

/// A controller named on the command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// A local PCI function (vfio-pci).
    Pcie(PciAddress),
    /// An NVMe/TCP subsystem.
    Tcp(TransportId),
}

/// A DEVICE argument that names no controller.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TargetError {
    /// Not a PCI address or PCIe transport id.
    #[error(transparent)]
    Pcie(#[from] DeviceArgError),
    /// A malformed NVMe/TCP transport id.
    #[error(transparent)]
    Tcp(#[from] TridError),
}

/// Parses DEVICE (the words of the argument joined by spaces).
pub fn parse_target(arg: &str) -> std::result::Result<Target, TargetError> {
    if nvme_tcp::is_tcp_transport_id(arg) {
        return Ok(Target::Tcp(TransportId::parse(arg)?));
    }
    Ok(Target::Pcie(nvme_driver::parse_device(arg)?))
}

/// A PCIe or NVMe/TCP controller.
#[derive(Debug)]
pub enum AnyController {
    /// Through vfio-pci.
    Pcie(Controller),
    /// Over NVMe/TCP.
    Tcp(TcpController),
}

macro_rules! both {
    ($self:expr, $c:ident => $e:expr) => {
        match $self {
            AnyController::Pcie($c) => $e,
            AnyController::Tcp($c) => $e,
        }
    };
}

impl AnyController {
    /// Opens the controller; `options` apply to PCIe controllers.
    pub fn open(target: &Target, options: ControllerOptions) -> Result<Self> {
        Ok(match target {
            Target::Pcie(address) => {
                AnyController::Pcie(Controller::open_pci(&address.to_string(), options)?)
            }
            Target::Tcp(trid) => {
                AnyController::Tcp(TcpController::connect(trid, TcpOptions::default())?)
            }
        })
    }

    /// The PCIe controller, for what only PCIe offers (events, shadow doorbells, ...).
    pub fn as_pcie(&self) -> Option<&Controller> {
        match self {
            AnyController::Pcie(c) => Some(c),
            AnyController::Tcp(_) => None,
        }
    }

    /// Name for messages.
    pub fn name(&self) -> &str {
        both!(self, c => c.name())
    }

    /// Identify Controller data.
    pub fn identify(&self) -> &IdentifyController {
        both!(self, c => c.identify())
    }

    /// CAP.
    pub fn cap(&self) -> Cap {
        both!(self, c => c.cap())
    }

    /// VS.
    pub fn version(&self) -> Version {
        both!(self, c => c.version())
    }

    /// I/O queue pairs granted.
    pub fn io_queue_pairs(&self) -> u16 {
        both!(self, c => c.io_queue_pairs())
    }

    /// Usable active namespaces.
    pub fn namespaces(&self) -> Vec<Namespace> {
        both!(self, c => c.namespaces())
    }

    /// Active namespaces that cannot be used.
    pub fn unsupported_namespaces(&self) -> Vec<(u32, String)> {
        both!(self, c => c.unsupported_namespaces())
    }

    /// Namespace `nsid`.
    pub fn namespace(&self, nsid: u32) -> Result<Namespace> {
        both!(self, c => c.namespace(nsid))
    }

    /// The SMART / Health Information log page (Log Identifier 02h) for `nsid`
    /// (`NSID_BROADCAST` for the whole controller).
    pub fn smart_log(&self, nsid: u32) -> Result<nvme_driver::spec::SmartLog> {
        both!(self, c => c.smart_log(nsid))
    }

    /// The newest `entries` Error Information log entries (Log Identifier 01h), newest first.
    pub fn error_log(&self, entries: usize) -> Result<Vec<nvme_driver::spec::ErrorLogEntry>> {
        both!(self, c => c.error_log(entries))
    }

    /// Resets the controller (PCIe: through CC.EN; NVMe/TCP: a new association); queue
    /// pairs re-create or reconnect their queues at their next submission or poll.
    pub fn reset(&self) -> Result<()> {
        both!(self, c => c.reset())
    }

    /// Largest I/O queue.
    pub fn max_queue_entries(&self) -> u32 {
        both!(self, c => c.max_queue_entries())
    }

    /// Largest transfer of one command.
    pub fn max_transfer_bytes(&self) -> usize {
        both!(self, c => c.max_transfer_bytes())
    }

    /// The buffer allocator of this controller.
    pub fn dma(&self) -> &std::sync::Arc<dyn nvme_driver::DmaMapper> {
        both!(self, c => c.dma())
    }

    /// A buffer for I/O on this controller.
    pub fn alloc_buffer(&self, len: usize) -> Result<DmaBuffer> {
        both!(self, c => c.alloc_buffer(len))
    }

    /// A new I/O queue pair.
    pub fn create_queue_pair(&self, options: QueuePairOptions) -> Result<AnyQueuePair> {
        Ok(match self {
            AnyController::Pcie(c) => AnyQueuePair::Pcie(c.create_queue_pair(options)?),
            AnyController::Tcp(c) => AnyQueuePair::Tcp(c.create_queue_pair(options)?),
        })
    }
}

/// A PCIe or NVMe/TCP I/O queue pair with the API the two share ([`IoQueue`]).
// Not boxed: a box would put a pointer chase in front of every PCIe submission.
#[allow(clippy::large_enum_variant)]
pub enum AnyQueuePair {
    /// Through vfio-pci.
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

/// The enum is itself an [`IoQueue`] (one branch, then the pair's own method), so code
/// generic over `Q: IoQueue` (`nvme-poll`'s async layer and poll groups) takes it as well as
/// either concrete pair. Bring the trait into scope (`use nvme_tool_support::IoQueue`) to
/// call these methods.
impl IoQueue for AnyQueuePair {
    type Stats = AnyQueueStats;

    fn qid(&self) -> u16 {
        qp!(self, q => IoQueue::qid(q))
    }

    fn depth(&self) -> u32 {
        qp!(self, q => IoQueue::depth(q))
    }

    fn capacity(&self) -> u16 {
        qp!(self, q => IoQueue::capacity(q))
    }

    fn in_flight(&self) -> u16 {
        qp!(self, q => IoQueue::in_flight(q))
    }

    fn max_transfer_bytes(&self) -> usize {
        qp!(self, q => IoQueue::max_transfer_bytes(q))
    }

    fn stats_snapshot(&self) -> AnyQueueStats {
        match self {
            AnyQueuePair::Pcie(q) => AnyQueueStats::Pcie(q.stats().clone()),
            AnyQueuePair::Tcp(q) => AnyQueueStats::Tcp(q.stats().clone()),
        }
    }

    fn plug(&mut self, n: u16) -> Result<()> {
        qp!(self, q => IoQueue::plug(q, n))
    }

    fn unplug(&mut self) {
        qp!(self, q => IoQueue::unplug(q))
    }

    fn ring(&mut self) {
        qp!(self, q => IoQueue::ring(q))
    }

    #[inline]
    fn submit_read(
        &mut self,
        ns: &Namespace,
        lba: u64,
        blocks: u32,
        buf: DmaBuffer,
        user_data: u64,
    ) -> IoResult<()> {
        qp!(self, q => IoQueue::submit_read(q, ns, lba, blocks, buf, user_data))
    }

    #[inline]
    fn submit_write(
        &mut self,
        ns: &Namespace,
        lba: u64,
        blocks: u32,
        buf: DmaBuffer,
        flags: WriteFlags,
        user_data: u64,
    ) -> IoResult<()> {
        qp!(self, q => IoQueue::submit_write(q, ns, lba, blocks, buf, flags, user_data))
    }

    fn submit_flush(&mut self, ns: &Namespace, user_data: u64) -> Result<()> {
        qp!(self, q => IoQueue::submit_flush(q, ns, user_data))
    }

    #[inline]
    fn poll<F: FnMut(Completion)>(&mut self, f: F) -> usize {
        qp!(self, q => IoQueue::poll(q, f))
    }

    fn read(
        &mut self,
        ns: &Namespace,
        lba: u64,
        blocks: u32,
        buf: DmaBuffer,
    ) -> IoResult<DmaBuffer> {
        qp!(self, q => IoQueue::read(q, ns, lba, blocks, buf))
    }

    fn write(
        &mut self,
        ns: &Namespace,
        lba: u64,
        blocks: u32,
        buf: DmaBuffer,
        flags: WriteFlags,
    ) -> IoResult<DmaBuffer> {
        qp!(self, q => IoQueue::write(q, ns, lba, blocks, buf, flags))
    }

    fn flush(&mut self, ns: &Namespace) -> Result<()> {
        qp!(self, q => IoQueue::flush(q, ns))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pci_and_tcp_targets() {
        assert!(matches!(parse_target("0000:00:04.0"), Ok(Target::Pcie(_))));
        assert!(matches!(
            parse_target("trtype:PCIe traddr:0000:00:04.0"),
            Ok(Target::Pcie(_))
        ));
        let Ok(Target::Tcp(t)) = parse_target(
            "trtype:TCP adrfam:IPv4 traddr:127.0.0.1 trsvcid:4420 subnqn:nqn.2026-01.test:sub1",
        ) else {
            panic!("tcp")
        };
        assert_eq!(t.subnqn, "nqn.2026-01.test:sub1");
        assert!(matches!(
            parse_target("trtype:tcp traddr:127.0.0.1"),
            Ok(Target::Tcp(t)) if t.is_discovery()
        ));
        assert!(matches!(
            parse_target("trtype:tcp subnqn:nqn.x"),
            Err(TargetError::Tcp(TridError::MissingTraddr { .. }))
        ));
        assert!(matches!(
            parse_target("trtype:RDMA traddr:1.2.3.4"),
            Err(TargetError::Pcie(_))
        ));
    }
}
