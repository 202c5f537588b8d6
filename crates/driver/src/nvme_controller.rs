//! The PCIe [`Controller`] as an [`NvmeController`] (the trait lives in `nvme-core`):
//! forwards to the inherent methods, no behaviour of its own. The queue pair it creates is the
//! concrete [`QueuePair`], so generic code reaches the PCIe hot path with no indirection.

use nvme_core::{
    AbortStats, AdminCommand, AdminReply, NamespaceChanges, NvmeController, QueuePairOptions,
    Result,
};
use nvme_spec::{ErrorLogEntry, IdentifyController, SmartLog};
use nvme_vfio::DmaBuffer;

use crate::{Controller, Namespace, QueuePair};

impl NvmeController for Controller {
    type QueuePair = QueuePair;

    #[inline]
    fn name(&self) -> &str {
        Controller::name(self)
    }

    #[inline]
    fn identify(&self) -> &IdentifyController {
        Controller::identify(self)
    }

    #[inline]
    fn namespaces(&self) -> Vec<Namespace> {
        Controller::namespaces(self)
    }

    #[inline]
    fn unsupported_namespaces(&self) -> Vec<(u32, String)> {
        Controller::unsupported_namespaces(self)
    }

    #[inline]
    fn namespace(&self, nsid: u32) -> Result<Namespace> {
        Controller::namespace(self, nsid)
    }

    #[inline]
    fn create_queue_pair(&self, options: QueuePairOptions) -> Result<QueuePair> {
        Controller::create_queue_pair(self, options)
    }

    #[inline]
    fn alloc_buffer(&self, len: usize) -> Result<DmaBuffer> {
        Controller::alloc_buffer(self, len)
    }

    #[inline]
    fn max_transfer_bytes(&self) -> usize {
        Controller::max_transfer_bytes(self)
    }

    #[inline]
    fn io_queue_pairs(&self) -> u16 {
        Controller::io_queue_pairs(self)
    }

    #[inline]
    fn max_queue_entries(&self) -> u32 {
        Controller::max_queue_entries(self)
    }

    #[inline]
    fn is_failed(&self) -> bool {
        Controller::is_failed(self)
    }

    #[inline]
    fn reset(&self) -> Result<()> {
        Controller::reset(self)
    }

    #[inline]
    fn abort_stats(&self) -> AbortStats {
        Controller::abort_stats(self)
    }

    #[inline]
    fn smart_log(&self, nsid: u32) -> Result<SmartLog> {
        Controller::smart_log(self, nsid)
    }

    #[inline]
    fn error_log(&self, entries: usize) -> Result<Vec<ErrorLogEntry>> {
        Controller::error_log(self, entries)
    }

    #[inline]
    fn admin(&self, command: AdminCommand) -> Result<AdminReply> {
        Controller::admin_command(self, command)
    }

    fn rescan_namespaces(&self) -> Result<NamespaceChanges> {
        Controller::rescan_namespaces(self)
    }
}
