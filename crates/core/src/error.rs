//! Errors of every transport (PCIe through `nvme-driver`, NVMe/TCP through `nvme-tcp`). Every
//! variant carries the data needed to act on it, and the messages say how to fix the problem
//! where the caller can.

use std::time::Duration;

use crate::iovec::IoVec;
use nvme_spec::Status;
use nvme_vfio::{DmaBuffer, DmaError};
use thiserror::Error;

/// Errors of the NVMe host, whatever the transport.
///
/// New variants may be added in minor releases (`#[non_exhaustive]`): match the ones you act on
/// and keep a `_` arm (`Error::is_retryable` classifies all of them).
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum Error {
    /// Opening or using the PCI function through VFIO failed.
    #[error(transparent)]
    Vfio(#[from] nvme_vfio::VfioError),
    /// The PCI address could not be parsed.
    #[error(transparent)]
    PciAddress(#[from] nvme_vfio::PciAddressError),
    /// DMA memory could not be allocated or mapped.
    #[error(transparent)]
    Dma(#[from] DmaError),
    /// CSTS.RDY did not reach the expected value within CAP.TO.
    #[error(
        "controller {controller} did not become {state} within {timeout:?} (the CAP.TO limit); \
         the controller may be hung: reset the PCI function (echo 1 > /sys/bus/pci/devices/<addr>/reset) \
         or power-cycle the machine"
    )]
    NotReady {
        /// The controller's name (PCI address or transport name).
        controller: String,
        /// The state CSTS.RDY should have reached.
        state: &'static str,
        /// How long the driver waited.
        timeout: Duration,
    },
    /// CSTS.CFS is set: the controller hit a fatal error.
    #[error(
        "controller {controller} reports Controller Fatal Status (CSTS.CFS=1); all I/O on it fails \
         until it is reset: reset the PCI function or power-cycle the machine"
    )]
    ControllerFatal {
        /// The controller's name (PCI address or transport name).
        controller: String,
    },
    /// The controller lacks something this driver needs.
    #[error("controller {controller} is not supported: {what}")]
    Unsupported {
        /// The controller's name (PCI address or transport name).
        controller: String,
        /// What is missing.
        what: String,
    },
    /// An option the transport cannot honour was set (for instance
    /// [`QueuePairOptions::interrupts`](crate::QueuePairOptions::interrupts) on NVMe/TCP):
    /// refused at creation rather than silently ignored.
    #[error(
        "controller {controller} cannot honour option {option} on this transport: {why}; leave          it at its default"
    )]
    UnsupportedOption {
        /// The controller's name (PCI address or transport name).
        controller: String,
        /// The option, as `Struct::field`.
        option: &'static str,
        /// Why the transport cannot honour it.
        why: &'static str,
    },
    /// A command completed with an error status.
    #[error("{command} failed: {status}")]
    Command {
        /// The command's name.
        command: &'static str,
        /// The NVMe status it completed with.
        status: Status,
    },
    /// A command completed with one of the end-to-end protection check errors (NVM CS §5.2,
    /// Media and Data Integrity Errors SCT 2h, SC 82h-84h): the Guard, Application Tag or
    /// Reference Tag of a block did not match.
    #[error("{command} failed the end-to-end {check} check: {status}")]
    ProtectionCheck {
        /// The command's name.
        command: &'static str,
        /// Which check failed.
        check: crate::protection::PiCheck,
        /// The NVMe status it completed with.
        status: Status,
    },
    /// A command completed with a zone error status (ZNS CS 1.1 §3.3.1.1, SCT 1h SC B8h-BFh):
    /// Zone Boundary Error, Zone Is Full / Read Only / Offline, Zone Invalid Write, Too Many
    /// Active / Open Zones, Invalid Zone State Transition.
    #[error("{command} failed with a zone error ({zone:?}): {status}")]
    Zone {
        /// The command's name.
        command: &'static str,
        /// Which zone error.
        zone: nvme_spec::zns::ZoneError,
        /// The NVMe status it completed with.
        status: Status,
    },
    /// A request does not fit its namespace's metadata format (a plain command on a namespace
    /// with metadata, a missing, superfluous or short metadata buffer): nothing was sent.
    #[error("namespace {nsid} ({format}): {what}")]
    MetadataMismatch {
        /// The namespace id.
        nsid: u32,
        /// The namespace's format, as `512+8 extended, PI type 1`.
        format: String,
        /// What does not fit, and what to do instead.
        what: &'static str,
    },
    /// A command did not complete in time.
    #[error("{command} (command id {cid:#x}) timed out after {timeout:?}")]
    Timeout {
        /// The command's name.
        command: &'static str,
        /// Its command identifier.
        cid: u16,
        /// How long the driver waited.
        timeout: Duration,
    },
    /// An earlier admin timeout or fatal status left the controller unusable.
    #[error(
        "controller {controller} failed earlier: reset it (Controller::reset) or re-open it \
         before use"
    )]
    Failed {
        /// The controller's name (PCI address or transport name).
        controller: String,
    },
    /// The request was in flight when the controller was reset; it may or may not have been
    /// executed. Retryable: submit it again.
    #[error(
        "the request was in flight when controller {controller} was reset; it may or may not \
         have run: submit it again"
    )]
    Reset {
        /// The controller's name (PCI address or transport name).
        controller: String,
    },
    /// The request was in flight when its connection or association was torn down, and
    /// nothing proved that the controller stopped working on it: no CSTS.RDY = 0 after CC.EN
    /// = 0 on the old association, and no Command Quiesce Time to wait out (NVMe Base 2.0
    /// §3.7.2, Identify CQT). A write may still reach the medium later, after any newer write
    /// to the same blocks, so it is **not retryable** and is never resubmitted: check the
    /// blocks' content (or rewrite them once the target is known to have stopped) before
    /// relying on them.
    #[error(
        "the {command} was in flight when the association with controller {controller} ended \
         without proof that its commands stopped ({why}); it may still be carried out later, \
         after newer writes: not retried, check the data"
    )]
    OutcomeUnknown {
        /// The controller's name (PCI address or transport name).
        controller: String,
        /// The command's name.
        command: &'static str,
        /// Why no proof was available.
        why: &'static str,
    },
    /// A reset of the controller is running; the submission was refused. Retryable.
    #[error("controller {controller} is being reset: submit again once the reset is done")]
    Resetting {
        /// The controller's name (PCI address or transport name).
        controller: String,
    },
    /// The device is gone: registers read all ones (surprise removal, link down) or the
    /// kernel asked for it back (unbind, hot-unplug request). Not retryable on this controller.
    #[error("controller {controller} was removed ({why}); close it: its I/O cannot complete")]
    Removed {
        /// The controller's name (PCI address or transport name).
        controller: String,
        /// Why the driver considers the device gone.
        why: &'static str,
    },
    /// The namespace id is not an active namespace of the controller.
    #[error("namespace {nsid} is not active on this controller (active namespaces: {active:?})")]
    InactiveNamespace {
        /// The namespace id.
        nsid: u32,
        /// The active namespace ids.
        active: Vec<u32>,
    },
    /// The [`Namespace`](crate::Namespace) handle describes a namespace that a rescan (the
    /// PCIe controller's `rescan_namespaces`, or a Namespace Attribute Changed notice handled
    /// by its `take_events`) found resized, reformatted or detached: nothing was sent to the
    /// device. Take a new handle.
    #[error(
        "namespace {nsid} changed ({change}; found by a namespace rescan): get a new handle \
         with Controller::namespace({nsid})"
    )]
    StaleNamespace {
        /// The namespace id.
        nsid: u32,
        /// What the rescan found.
        change: crate::namespace::NamespaceChange,
    },
    /// The LBA range falls outside the namespace.
    #[error(
        "LBA range {lba}..{end} is outside namespace {nsid}, which has {capacity} blocks \
         (last LBA {last})",
        end = lba.saturating_add(*blocks),
        last = capacity.saturating_sub(1)
    )]
    LbaOutOfRange {
        /// The namespace id.
        nsid: u32,
        /// First LBA asked for.
        lba: u64,
        /// Number of blocks asked for.
        blocks: u64,
        /// Capacity (blocks of the namespace, or entries of the queue).
        capacity: u64,
    },
    /// A transfer of zero blocks or bytes.
    #[error("zero-length I/O: give at least one block")]
    ZeroLength,
    /// A byte length that is not a whole number of blocks.
    #[error("length {len} is not a multiple of namespace {nsid}'s block size {block_size}")]
    NotBlockMultiple {
        /// The namespace id.
        nsid: u32,
        /// Length in bytes.
        len: usize,
        /// The namespace's block size in bytes.
        block_size: u32,
    },
    /// The buffer cannot hold the transfer.
    #[error("buffer of {len} bytes is smaller than the {needed}-byte transfer")]
    BufferTooSmall {
        /// Bytes the transfer needs.
        needed: usize,
        /// Length in bytes.
        len: usize,
    },
    /// The buffer's device address is not dword aligned (PRP rule, NVMe Base §4.1.1).
    #[error("buffer at IOVA {iova:#x} is not {align}-byte aligned (NVMe PRP entries must be dword aligned)")]
    BufferMisaligned {
        /// The buffer's device address.
        iova: u64,
        /// The alignment required in bytes.
        align: usize,
    },
    /// The pieces of a vectored request do not add up to the bytes its command moves.
    #[error(
        "vectored I/O: the {pieces} pieces hold {total} bytes but the command moves {needed} \
         (blocks x block size)"
    )]
    IoVecLength {
        /// Number of pieces.
        pieces: usize,
        /// Their total length in bytes.
        total: usize,
        /// Bytes the command moves.
        needed: usize,
    },
    /// One piece of a vectored request breaks a data-pointer rule (NVMe Base §4.1.1 PRP,
    /// §4.1.2 SGL); `rule` names which.
    #[error("vectored I/O: piece {index} (IOVA {iova:#x}, {len} bytes) {rule}")]
    IoVecPiece {
        /// Position of the piece in the vector (0-based).
        index: usize,
        /// The piece's device address.
        iova: u64,
        /// The piece's length in bytes.
        len: usize,
        /// The rule it breaks.
        rule: crate::iovec::PieceRule,
    },
    /// A vectored request moves more than one command carries: vectored requests are not
    /// split (each piece list is one command).
    #[error(
        "vectored I/O of {bytes} bytes is more than one command carries here ({max_per_command} \
         bytes, MDTS); vectored requests are not split: submit fewer pieces per request"
    )]
    IoVecTooLarge {
        /// Bytes of the request.
        bytes: usize,
        /// Most bytes one command moves.
        max_per_command: usize,
    },
    /// No free slot (command id) or submission queue entry.
    #[error(
        "queue full: all {depth} slots of queue {qid} are in flight; poll for completions first"
    )]
    QueueFull {
        /// The queue id.
        qid: u16,
        /// The queue's depth.
        depth: u32,
    },
    /// A transfer needs more commands than the queue can ever hold at once (or has free now).
    #[error(
        "queue too small for this transfer: {bytes} bytes need {commands} commands of at most \
         {max_per_command} bytes (MDTS), but only {free} slots are free of the queue's {capacity}; \
         use a deeper queue or a smaller transfer"
    )]
    TransferTooLarge {
        /// Bytes of the transfer.
        bytes: usize,
        /// Commands it needs.
        commands: usize,
        /// Most bytes one command moves (MDTS).
        max_per_command: usize,
        /// Free slots now.
        free: u32,
        /// Capacity (blocks of the namespace, or entries of the queue).
        capacity: u32,
    },
    /// Asked for a queue deeper than CAP.MQES (or the driver's slot limit) allows, or too
    /// shallow.
    #[error(
        "queue depth {requested} is not supported: choose 2..={max} (the lower of the \
         controller's CAP.MQES+1 and the driver's limit of 4096 entries)"
    )]
    QueueDepth {
        /// The depth asked for.
        requested: u32,
        /// The largest allowed.
        max: u32,
    },
    /// The buffer was mapped for another controller's DMA domain (another IOMMU address space):
    /// this controller would write to whatever its own domain has at that address.
    #[error(
        "buffer belongs to {buffer} but controller {controller} uses {controller_domain}: allocate \
         it from this controller or its DMA context (Controller::alloc_buffer / \
         DmaContext::alloc_buffer), or open the controllers in one DmaContext"
    )]
    ForeignBuffer {
        /// The buffer's DMA domain.
        buffer: nvme_vfio::DmaDomain,
        /// The controller's name (PCI address or transport name).
        controller: String,
        /// The controller's DMA domain.
        controller_domain: nvme_vfio::DmaDomain,
    },
    /// A PCIe transport handed to the driver's `Controller::new_in` maps into another address
    /// space than the DMA context it should join.
    #[error(
        "controller {controller} maps into {transport}, not into the context's {context}: build \
         its transport on the mapper the DmaContext was made from"
    )]
    ForeignTransport {
        /// The controller's name (PCI address or transport name).
        controller: String,
        /// The transport's DMA domain.
        transport: nvme_vfio::DmaDomain,
        /// The domain of the platform mapper the context was made from.
        context: nvme_vfio::DmaDomain,
    },
    /// The namespace exists but its format is one this driver cannot do I/O on.
    #[error("namespace {nsid} cannot be used: {reason}")]
    UnsupportedNamespace {
        /// The namespace id.
        nsid: u32,
        /// Why the driver cannot use it.
        reason: String,
    },
    /// All I/O queues the controller granted are in use.
    #[error("all {granted} I/O queue pairs granted by the controller are in use; drop one first")]
    NoQueuesLeft {
        /// I/O queues the controller granted.
        granted: u16,
    },
    /// Too many Dataset Management ranges, or none.
    #[error("dataset management takes 1..={max} ranges, got {count}")]
    BadRangeCount {
        /// The number given.
        count: usize,
        /// The largest allowed.
        max: usize,
    },
    /// The controller does not offer an optional command (Identify Controller ONCS, or the
    /// command's formats, e.g. OCFS for Copy): refused before anything reached the device.
    #[error(
        "controller {controller} does not support the {command} command ({why}); nothing was \
         sent"
    )]
    CommandNotSupported {
        /// The controller's name (PCI address or transport name).
        controller: String,
        /// The command's name.
        command: &'static str,
        /// What the controller reports (the Identify field and bit).
        why: &'static str,
    },
    /// A Copy exceeds a limit its namespace reports in Identify Namespace (MSRC, MSSRL, MCL;
    /// NVM CS §4.1.5.1): refused before anything reached the device, which would answer
    /// Command Size Limit Exceeded. Split the copy into several commands.
    #[error(
        "Copy on namespace {nsid}: {limit} is {requested}, more than the {max} the namespace \
         allows ({field}); nothing was sent: split the copy into smaller commands",
        field = limit.field()
    )]
    CopyLimitExceeded {
        /// The namespace id.
        nsid: u32,
        /// Which limit.
        limit: crate::copy::CopyLimit,
        /// What the command asked for.
        requested: u64,
        /// The namespace's limit.
        max: u64,
    },
    /// The queue pair has no interrupt vector to wait on.
    #[error(
        "queue pair {qid} has no interrupt vector: open the controller with \
         ControllerOptions::interrupts and create the pair with QueuePairOptions::interrupts"
    )]
    NoInterrupts {
        /// The queue id.
        qid: u16,
    },
    /// Waiting on an interrupt eventfd failed.
    #[error("waiting for an interrupt on queue {qid}: {source}")]
    InterruptWait {
        /// The queue id.
        qid: u16,
        /// The underlying I/O error.
        source: std::io::Error,
    },
    /// A firmware image, its offset or the transfer size cannot be sent as Firmware Image
    /// Download pieces (dwords, MDTS, FWUG; NVMe Base 2.0 §5.13): nothing was sent.
    #[error("firmware download refused: {0}; nothing was sent")]
    FirmwareImage(#[from] crate::firmware::FirmwareImageError),
    /// Firmware Image Download or Firmware Commit completed with one of the firmware command
    /// specific statuses (NVMe Base 2.0 §5.12.1, §5.13.1), typed.
    #[error("{command} failed: {kind} ({status}): {hint}", hint = kind.hint())]
    Firmware {
        /// The command's name.
        command: &'static str,
        /// The NVMe status it completed with.
        status: Status,
        /// The status, typed.
        kind: nvme_spec::firmware::FirmwareStatus,
    },
    /// A command that does not fit the request API (e.g. a raw command without a namespace).
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// A fabrics transport failed (connection refused, reset or closed, a malformed PDU, a
    /// digest mismatch, a Connect the target refused). The queue is closed: every request that
    /// was on it completes with this error. The source says what happened and how to fix it.
    #[error("controller {controller}: {source}")]
    Transport {
        /// The controller (its transport id).
        controller: String,
        /// What failed, with the fix.
        #[source]
        source: std::sync::Arc<dyn std::error::Error + Send + Sync>,
    },
}

/// Whether the `count`-th occurrence of a repeated problem is logged: the first few, then
/// only at powers of two, so a device that floods the driver with garbage cannot flood the log
/// (the counters keep the exact number). For transports: every rejected completion or PDU
/// counter goes through it.
#[inline]
pub fn log_occurrence(count: u64) -> bool {
    count <= 8 || count.is_power_of_two()
}

impl Error {
    /// Whether submitting the same request again may succeed: a reset interrupted it or was
    /// running, or the device reported a status without Do Not Retry.
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::Reset { .. } | Error::Resetting { .. } | Error::QueueFull { .. } => true,
            Error::Command { status, .. }
            | Error::ProtectionCheck { status, .. }
            | Error::Zone { status, .. }
            | Error::Firmware { status, .. } => !status.dnr(),
            _ => false,
        }
    }

    /// The NVMe status, if this error is a command completing with an error status.
    pub fn status(&self) -> Option<Status> {
        match self {
            Error::Command { status, .. }
            | Error::ProtectionCheck { status, .. }
            | Error::Zone { status, .. }
            | Error::Firmware { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// The error of command `command` completing with error status `status`: typed
    /// [`Error::ProtectionCheck`] for the three end-to-end check errors, [`Error::Command`]
    /// otherwise. Every transport builds its command errors here.
    #[cold]
    pub fn command(command: &'static str, status: Status) -> Error {
        match crate::protection::PiCheck::from_status(status) {
            Some(check) => Error::ProtectionCheck {
                command,
                check,
                status,
            },
            None => match nvme_spec::zns::ZoneError::from_status(status) {
                Some(zone) => Error::Zone {
                    command,
                    zone,
                    status,
                },
                None => Error::Command { command, status },
            },
        }
    }
}

/// A failed I/O: the error, and the buffer when it can be handed back safely. The buffer is
/// `None` only when the controller may still access it (a timed-out command); the queue pair
/// then keeps it until the queue is deleted.
#[derive(Debug, Error)]
#[error("{error}")]
pub struct IoFailure {
    /// What went wrong.
    #[source]
    pub error: Error,
    /// The caller's buffer, returned untouched when nothing was submitted.
    pub buffer: Option<DmaBuffer>,
    /// The pieces of a refused vectored request, every one, untouched and in order.
    pub pieces: Option<Box<IoVec>>,
}

impl IoFailure {
    /// A failure with `error`, handing back `buffer` (`None` when the device may still
    /// access it).
    #[inline]
    pub fn new(error: Error, buffer: Option<DmaBuffer>) -> Self {
        Self {
            error,
            buffer,
            pieces: None,
        }
    }

    /// A refused vectored request: `error`, handing back its pieces.
    #[cold]
    pub fn vectored(error: Error, pieces: Box<IoVec>) -> Self {
        Self {
            error,
            buffer: None,
            pieces: Some(pieces),
        }
    }
}

/// Result type of the NVMe host crates.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::log_occurrence;

    #[test]
    fn repeated_problems_are_logged_sparsely() {
        let logged = (1..=1_000_000u64).filter(|&n| log_occurrence(n)).count();
        // 1..=8, then 16, 32, ..., 2^19.
        assert_eq!(logged, 8 + 16);
    }
}
