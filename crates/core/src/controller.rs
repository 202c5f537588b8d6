//! [`NvmeController`]: what every transport's controller offers, as a trait.
//!
//! The PCIe controller (`nvme_driver::Controller`) and the NVMe/TCP controller
//! (`nvme_tcp::TcpController`) implement it by forwarding to their inherent methods
//! (`#[inline]`), so code generic over `C: NvmeController` opens namespaces, creates queue
//! pairs, allocates buffers, reads health logs and resets on either transport. Static
//! dispatch only: each use is compiled for the concrete controller, and the queue pair it
//! creates is the transport's concrete type ([`NvmeController::QueuePair`]), so the I/O path
//! through it is the concrete pair's own code.
//!
//! Operations only one transport has (PCIe: DMA contexts, raw admin commands, events,
//! interrupts, rescans; TCP: transport ids, Keep Alive) stay inherent methods.

use nvme_spec::{ErrorLogEntry, IdentifyController, SmartLog};
use nvme_vfio::DmaBuffer;

use crate::admin::{AdminCommand, AdminReply};
use crate::error::Result;
use crate::io_queue::IoQueue;
use crate::namespace::{Namespace, NamespaceChanges};
use crate::options::QueuePairOptions;
use crate::timeout::AbortStats;

#[cfg(doc)]
use crate::error::Error;

/// A brought-up NVMe controller, whatever its transport. `Send + Sync`, like the concrete
/// controllers; its queue pairs are `Send` and owned by one thread each.
pub trait NvmeController: Send + Sync {
    /// The transport's I/O queue pair.
    type QueuePair: IoQueue + Send;

    /// Name used in messages (PCI address, "sim", or the NVMe/TCP transport id).
    fn name(&self) -> &str;

    /// Identify Controller data.
    fn identify(&self) -> &IdentifyController;

    /// The usable active namespaces, in namespace id order.
    fn namespaces(&self) -> Vec<Namespace>;

    /// Active namespaces that cannot be used, and why.
    fn unsupported_namespaces(&self) -> Vec<(u32, String)>;

    /// The handle of active namespace `nsid` ([`Error::InactiveNamespace`] or
    /// [`Error::UnsupportedNamespace`] otherwise).
    fn namespace(&self, nsid: u32) -> Result<Namespace>;

    /// Creates an I/O queue pair. Options the transport cannot honour are refused with
    /// [`Error::UnsupportedOption`] (see [`QueuePairOptions`]).
    fn create_queue_pair(&self, options: QueuePairOptions) -> Result<Self::QueuePair>;

    /// Allocates a zero-filled buffer of `len` bytes that this controller's queue pairs
    /// accept.
    fn alloc_buffer(&self, len: usize) -> Result<DmaBuffer>;

    /// Most bytes one command moves (MDTS, further capped by the transport).
    fn max_transfer_bytes(&self) -> usize;

    /// I/O queue pairs the controller granted.
    fn io_queue_pairs(&self) -> u16;

    /// Largest I/O queue the controller supports (CAP.MQES + 1).
    fn max_queue_entries(&self) -> u32;

    /// Whether the controller failed and must be reset ([`NvmeController::reset`]) or
    /// re-opened.
    fn is_failed(&self) -> bool;

    /// Resets the controller: queue pairs fail what was in flight with the retryable
    /// [`Error::Reset`] (or resubmit it, with [`QueuePairOptions::resubmit_after_reset`]) and
    /// go on with the new queues.
    fn reset(&self) -> Result<()>;

    /// Abort outcomes since bring-up.
    fn abort_stats(&self) -> AbortStats;

    /// The SMART / Health Information log page (`nsid` 0xFFFF_FFFF: the whole controller).
    fn smart_log(&self, nsid: u32) -> Result<SmartLog>;

    /// The newest `entries` entries of the Error Information log page.
    fn error_log(&self, entries: usize) -> Result<Vec<ErrorLogEntry>>;

    /// Runs one typed admin command on the admin queue and waits for it: the one primitive
    /// the management commands of [`crate::AdminCommands`] are written over. A non-success
    /// status is [`Error::Command`]; after a timeout the data buffer is leaked, never freed
    /// (the controller may still write it).
    fn admin(&self, command: AdminCommand) -> Result<AdminReply>;

    /// Re-reads the active namespaces and their Identify data (after Format NVM or a
    /// Namespace Attachment changed them) and says what changed; handles of changed
    /// namespaces go stale. A transport that cannot rescan says so with
    /// [`Error::Unsupported`].
    fn rescan_namespaces(&self) -> Result<NamespaceChanges>;
}
