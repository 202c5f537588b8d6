//! [`Backend`]: what the target needs of a local controller, and its implementation for our
//! controllers of either transport ([`AnyController`]: PCIe through the driver, which is also
//! how the emulator is reached in tests).

use std::sync::Arc;

use nvme_core::{DmaMapper, Error, IoQueue, Namespace, QueuePairOptions, Result};
use nvme_device::{AnyController, AnyQueuePair};
use nvme_driver::InterruptArm;
use nvme_spec::log::NSID_BROADCAST;
use nvme_spec::{IdentifyController, SmartLog};

/// A controller whose namespaces the target exports. Shared by every poll group (`Sync`);
/// each I/O connection creates its own queue pair ([`Backend::create_queue`]), used by one
/// thread only.
pub trait Backend: Send + Sync + 'static {
    /// The queue pair type: any [`IoQueue`].
    type Queue: IoQueue + Send;

    /// Name for messages (PCI address, `sim`, ...).
    fn name(&self) -> &str;

    /// The controller's Identify data (VID, ONCS, VWC: what the subsystem's controller
    /// inherits).
    fn identify(&self) -> &IdentifyController;

    /// Namespace `nsid` of the controller.
    fn namespace(&self, nsid: u32) -> Result<Namespace>;

    /// Largest transfer of one command the backend's queue pairs take.
    fn max_transfer_bytes(&self) -> usize;

    /// Largest queue the backend creates.
    fn max_queue_entries(&self) -> u32;

    /// The allocator of data buffers the backend's queue pairs can use (DMA memory mapped for
    /// a PCIe controller): the target receives write data into them and sends read data from
    /// them.
    fn dma(&self) -> &Arc<dyn DmaMapper>;

    /// A new queue pair of `entries` entries.
    fn create_queue(&self, entries: u32) -> Result<Self::Queue>;

    /// Whether [`Backend::submit_deallocate`] is offered (Dataset Management announced).
    fn deallocate_supported(&self) -> bool;

    /// Queues a Dataset Management deallocate of `(lba, blocks)` ranges on `queue`.
    fn submit_deallocate(
        queue: &mut Self::Queue,
        ns: &Namespace,
        ranges: &[(u64, u32)],
        user_data: u64,
    ) -> Result<()>;

    /// The controller's SMART / Health Information log page.
    fn smart_log(&self) -> Result<SmartLog>;

    /// Prepares a blocking wait on `queue`'s completions (its interrupt eventfd, see
    /// [`InterruptArm`]); `None` when the queue cannot signal completions (polled only):
    /// the poll group then sleeps between passes instead of blocking.
    fn arm_interrupt(queue: &mut Self::Queue) -> Option<InterruptArm<'_>> {
        let _ = queue;
        None
    }
}

impl Backend for AnyController {
    type Queue = AnyQueuePair;

    fn name(&self) -> &str {
        AnyController::name(self)
    }

    fn identify(&self) -> &IdentifyController {
        AnyController::identify(self)
    }

    fn namespace(&self, nsid: u32) -> Result<Namespace> {
        AnyController::namespace(self, nsid)
    }

    fn max_transfer_bytes(&self) -> usize {
        AnyController::max_transfer_bytes(self)
    }

    fn max_queue_entries(&self) -> u32 {
        AnyController::max_queue_entries(self)
    }

    fn dma(&self) -> &Arc<dyn DmaMapper> {
        AnyController::dma(self)
    }

    fn create_queue(&self, entries: u32) -> Result<AnyQueuePair> {
        let depth = entries.min(self.max_queue_entries());
        let mut options = QueuePairOptions::default().depth(depth);
        if let Some(c) = self.as_pcie() {
            // A host may have more commands outstanding than the backend queue holds: the
            // PCIe pair's software queue keeps the excess in order instead of refusing it.
            options = options.software_queue(entries as usize);
            if c.has_interrupts() {
                // Its MSI-X eventfd lets an idle poll group block (`arm_interrupt`).
                match self.create_queue_pair(options.clone().interrupts(true)) {
                    Err(Error::NoInterrupts { qid }) => log::info!(
                        "nvme-target: {}: no interrupt vector for queue {qid}: polled",
                        self.name()
                    ),
                    r => return r,
                }
            }
        }
        self.create_queue_pair(options)
    }

    fn deallocate_supported(&self) -> bool {
        self.as_pcie().is_some()
            && self
                .identify()
                .oncs_flags()
                .contains(nvme_spec::Oncs::DATASET_MANAGEMENT)
    }

    fn submit_deallocate(
        queue: &mut AnyQueuePair,
        ns: &Namespace,
        ranges: &[(u64, u32)],
        user_data: u64,
    ) -> Result<()> {
        let qid = IoQueue::qid(queue);
        match queue.as_pcie_mut() {
            Some(q) => q.submit_deallocate(ns, ranges, user_data),
            None => Err(Error::Unsupported {
                controller: format!("queue {qid}"),
                what: "Dataset Management over an NVMe/TCP backend".into(),
            }),
        }
    }

    fn smart_log(&self) -> Result<SmartLog> {
        AnyController::smart_log(self, NSID_BROADCAST)
    }

    fn arm_interrupt(queue: &mut AnyQueuePair) -> Option<InterruptArm<'_>> {
        let q = queue.as_pcie_mut()?;
        if !q.has_interrupts() {
            return None;
        }
        let qid = IoQueue::qid(q);
        match q.arm_interrupt() {
            Ok(a) => Some(a),
            Err(e) => {
                // The eventfd could not be read: poll this queue instead of blocking on it.
                log::debug!("nvme-target: queue {qid}: {e}");
                None
            }
        }
    }
}
