//! The NVMe/TCP [`TcpController`] as an [`NvmeController`] (the trait lives in `nvme-core`):
//! forwards to the inherent methods, no behaviour of its own. The queue pair it creates is the
//! concrete [`TcpQueuePair`], so generic code runs its own code with no indirection.

use nvme_core::{
    AbortStats, AdminCommand, AdminReply, DmaBuffer, Error, Namespace, NamespaceChanges,
    NvmeController, QueuePairOptions, Result,
};
use nvme_spec::{ErrorLogEntry, IdentifyController, SmartLog};

use crate::{TcpController, TcpQueuePair};

impl NvmeController for TcpController {
    type QueuePair = TcpQueuePair;

    #[inline]
    fn name(&self) -> &str {
        TcpController::name(self)
    }

    #[inline]
    fn identify(&self) -> &IdentifyController {
        TcpController::identify(self)
    }

    #[inline]
    fn namespaces(&self) -> Vec<Namespace> {
        TcpController::namespaces(self)
    }

    #[inline]
    fn unsupported_namespaces(&self) -> Vec<(u32, String)> {
        TcpController::unsupported_namespaces(self)
    }

    #[inline]
    fn namespace(&self, nsid: u32) -> Result<Namespace> {
        TcpController::namespace(self, nsid)
    }

    #[inline]
    fn create_queue_pair(&self, options: QueuePairOptions) -> Result<TcpQueuePair> {
        TcpController::create_queue_pair(self, options)
    }

    #[inline]
    fn alloc_buffer(&self, len: usize) -> Result<DmaBuffer> {
        TcpController::alloc_buffer(self, len)
    }

    #[inline]
    fn max_transfer_bytes(&self) -> usize {
        TcpController::max_transfer_bytes(self)
    }

    #[inline]
    fn io_queue_pairs(&self) -> u16 {
        TcpController::io_queue_pairs(self)
    }

    #[inline]
    fn max_queue_entries(&self) -> u32 {
        TcpController::max_queue_entries(self)
    }

    #[inline]
    fn is_failed(&self) -> bool {
        TcpController::is_failed(self)
    }

    #[inline]
    fn reset(&self) -> Result<()> {
        TcpController::reset(self)
    }

    #[inline]
    fn abort_stats(&self) -> AbortStats {
        TcpController::abort_stats(self)
    }

    #[inline]
    fn smart_log(&self, nsid: u32) -> Result<SmartLog> {
        TcpController::smart_log(self, nsid)
    }

    #[inline]
    fn error_log(&self, entries: usize) -> Result<Vec<ErrorLogEntry>> {
        TcpController::error_log(self, entries)
    }

    #[inline]
    fn admin(&self, command: AdminCommand) -> Result<AdminReply> {
        TcpController::admin_command(self, command)
    }

    /// The NVMe/TCP controller keeps the namespaces it found at connect: reconnect to see
    /// a change.
    fn rescan_namespaces(&self) -> Result<NamespaceChanges> {
        Err(Error::Unsupported {
            controller: self.name().to_owned(),
            what: "namespace rescans over NVMe/TCP (reconnect to see a changed namespace)"
                .to_owned(),
        })
    }
}
