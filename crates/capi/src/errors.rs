//! Error codes of the C API (`NVME_OK` and the negative `NVME_ERR_*`) and their mapping from
//! [`nvme_driver::Error`].

use std::ffi::{c_int, CStr};

use nvme_driver::spec::zns::ZoneError;
use nvme_driver::Error;

/// Success.
pub const NVME_OK: c_int = 0;
/// A required pointer argument is NULL.
pub const NVME_ERR_NULL_POINTER: c_int = -1;
/// An argument is invalid: bad device string, zero length, a length that is not a whole
/// number of blocks, a buffer too small, a bad queue depth, unknown flags, a bad range count.
pub const NVME_ERR_INVALID_ARGUMENT: c_int = -2;
/// The device could not be opened through VFIO (not bound to vfio-pci, no permission, no
/// IOMMU group access).
pub const NVME_ERR_NO_DEVICE: c_int = -3;
/// DMA memory could not be allocated or mapped.
pub const NVME_ERR_NO_MEMORY: c_int = -4;
/// The controller did not become ready in time (CAP.TO).
pub const NVME_ERR_NOT_READY: c_int = -5;
/// The controller reported a fatal status or failed earlier; close and re-open it.
pub const NVME_ERR_FATAL: c_int = -6;
/// The controller lacks something the driver needs.
pub const NVME_ERR_UNSUPPORTED: c_int = -7;
/// The command completed with an NVMe error status (see `sct`/`sc` in the status).
pub const NVME_ERR_COMMAND: c_int = -8;
/// The command did not complete within the queue pair's timeout.
pub const NVME_ERR_TIMEOUT: c_int = -9;
/// A controller reset interrupted the request or is running. Retryable.
pub const NVME_ERR_RESET: c_int = -10;
/// The device was removed (surprise removal or unbind); close the controller.
pub const NVME_ERR_REMOVED: c_int = -11;
/// The namespace is not active, or cannot be used for I/O (metadata/protection formats).
pub const NVME_ERR_NAMESPACE: c_int = -12;
/// The LBA range is outside the namespace.
pub const NVME_ERR_LBA_RANGE: c_int = -13;
/// All slots of the queue pair are in flight: poll, then submit again.
pub const NVME_ERR_QUEUE_FULL: c_int = -14;
/// The transfer needs more commands than the queue pair has slots (free now or at all).
pub const NVME_ERR_TOO_LARGE: c_int = -15;
/// All I/O queue pairs the controller granted are in use.
pub const NVME_ERR_NO_QUEUES: c_int = -16;
/// The buffer was allocated for another controller (another DMA domain).
pub const NVME_ERR_FOREIGN_BUFFER: c_int = -17;
/// The buffer is in flight (or was kept by the driver after a timeout).
pub const NVME_ERR_BUFFER_IN_FLIGHT: c_int = -18;
/// The call is not allowed now (polling or destroying a queue pair from its own callback).
pub const NVME_ERR_BUSY: c_int = -19;
/// An internal error (a bug in the library); the message has the details.
pub const NVME_ERR_PANIC: c_int = -20;
/// Interrupt setup or waiting failed.
pub const NVME_ERR_INTERRUPT: c_int = -21;
/// The NVMe/TCP connection failed or was closed (refused, reset, a malformed PDU, a digest
/// mismatch); the message says what happened.
pub const NVME_ERR_TRANSPORT: c_int = -22;

/// A write was in flight when the NVMe/TCP association ended without proof that its commands
/// stopped: it may still reach the medium later. Not retried; check the data.
pub const NVME_ERR_OUTCOME_UNKNOWN: c_int = -23;

/// A Copy exceeds a limit its namespace reports (source ranges above MSRC + 1, a range
/// longer than MSSRL blocks, more than MCL blocks in all): split it into several.
pub const NVME_ERR_COPY_LIMIT: c_int = -24;

/// A command completed with an end-to-end protection check error (guard, application tag or
/// reference tag; NVM CS §5.2, status SCT 2h SC 82h-84h): the last error message names which.
pub const NVME_ERR_PROTECTION: c_int = -25;

/// A request does not fit its namespace's metadata format (a plain read or write on a
/// namespace with metadata, or one whose metadata would need a separate buffer):
/// `nvme_qpair_submit_pi` for extended LBA formats and PRACT.
pub const NVME_ERR_METADATA: c_int = -26;

/// A vectored request moves more bytes than one command can (MDTS, `max_transfer_bytes`): a
/// vectored request is never split; submit it as several.
pub const NVME_ERR_IOVEC_TOO_LARGE: c_int = -27;

/// A piece of a vectored request breaks a data-pointer rule (dword length and address; without
/// SGLs, pieces but the first starting and pieces but the last ending on a memory page, NVMe
/// Base 2.0 §4.1.1): the last error message names the piece and the rule.
pub const NVME_ERR_IOVEC_PIECE: c_int = -28;

/// Zone Boundary Error (ZNS 1.1 §3.3.1.1, SC B8h): the command crosses the end of its zone.
pub const NVME_ERR_ZONE_BOUNDARY: c_int = -29;
/// Zone Is Full (SC B9h): reset the zone (`NVME_ZONE_ACTION_RESET`) or write another.
pub const NVME_ERR_ZONE_FULL: c_int = -30;
/// Zone Is Read Only (SC BAh).
pub const NVME_ERR_ZONE_READ_ONLY: c_int = -31;
/// Zone Is Offline (SC BBh).
pub const NVME_ERR_ZONE_OFFLINE: c_int = -32;
/// Zone Invalid Write (SC BCh): a write not at the zone's write pointer (use Zone Append).
pub const NVME_ERR_ZONE_INVALID_WRITE: c_int = -33;
/// Too Many Active Zones (SC BDh): finish or reset an active (open or closed) zone first.
pub const NVME_ERR_ZONE_TOO_MANY_ACTIVE: c_int = -34;
/// Too Many Open Zones (SC BEh): close or finish an open zone first.
pub const NVME_ERR_ZONE_TOO_MANY_OPEN: c_int = -35;
/// Invalid Zone State Transition (SC BFh): the action is not allowed in the zone's state.
pub const NVME_ERR_ZONE_INVALID_TRANSITION: c_int = -36;

/// The code of a zone error.
fn zone_code(zone: ZoneError) -> c_int {
    match zone {
        ZoneError::Boundary => NVME_ERR_ZONE_BOUNDARY,
        ZoneError::Full => NVME_ERR_ZONE_FULL,
        ZoneError::ReadOnly => NVME_ERR_ZONE_READ_ONLY,
        ZoneError::Offline => NVME_ERR_ZONE_OFFLINE,
        ZoneError::InvalidWrite => NVME_ERR_ZONE_INVALID_WRITE,
        ZoneError::TooManyActive => NVME_ERR_ZONE_TOO_MANY_ACTIVE,
        ZoneError::TooManyOpen => NVME_ERR_ZONE_TOO_MANY_OPEN,
        ZoneError::InvalidTransition => NVME_ERR_ZONE_INVALID_TRANSITION,
    }
}

/// The code of a driver error.
pub(crate) fn error_code(error: &Error) -> c_int {
    match error {
        Error::Vfio(_) => NVME_ERR_NO_DEVICE,
        Error::PciAddress(_) => NVME_ERR_INVALID_ARGUMENT,
        Error::Dma(_) => NVME_ERR_NO_MEMORY,
        Error::NotReady { .. } => NVME_ERR_NOT_READY,
        Error::ControllerFatal { .. } | Error::Failed { .. } => NVME_ERR_FATAL,
        Error::Unsupported { .. }
        | Error::UnsupportedOption { .. }
        | Error::CommandNotSupported { .. } => NVME_ERR_UNSUPPORTED,
        Error::CopyLimitExceeded { .. } => NVME_ERR_COPY_LIMIT,
        Error::Command { .. } | Error::Firmware { .. } => NVME_ERR_COMMAND,
        Error::ProtectionCheck { .. } => NVME_ERR_PROTECTION,
        Error::MetadataMismatch { .. } => NVME_ERR_METADATA,
        Error::Zone { zone, .. } => zone_code(*zone),
        Error::IoVecTooLarge { .. } => NVME_ERR_IOVEC_TOO_LARGE,
        Error::IoVecPiece { .. } => NVME_ERR_IOVEC_PIECE,
        Error::Timeout { .. } => NVME_ERR_TIMEOUT,
        Error::Reset { .. } | Error::Resetting { .. } => NVME_ERR_RESET,
        Error::Removed { .. } => NVME_ERR_REMOVED,
        Error::InactiveNamespace { .. }
        | Error::UnsupportedNamespace { .. }
        | Error::StaleNamespace { .. } => NVME_ERR_NAMESPACE,
        Error::LbaOutOfRange { .. } => NVME_ERR_LBA_RANGE,
        Error::ZeroLength
        | Error::NotBlockMultiple { .. }
        | Error::BufferTooSmall { .. }
        | Error::BufferMisaligned { .. }
        | Error::QueueDepth { .. }
        | Error::BadRangeCount { .. }
        | Error::ForeignTransport { .. }
        | Error::IoVecLength { .. }
        | Error::FirmwareImage(_)
        | Error::InvalidRequest(_) => NVME_ERR_INVALID_ARGUMENT,
        Error::QueueFull { .. } => NVME_ERR_QUEUE_FULL,
        Error::TransferTooLarge { .. } => NVME_ERR_TOO_LARGE,
        Error::NoQueuesLeft { .. } => NVME_ERR_NO_QUEUES,
        Error::ForeignBuffer { .. } => NVME_ERR_FOREIGN_BUFFER,
        Error::NoInterrupts { .. } | Error::InterruptWait { .. } => NVME_ERR_INTERRUPT,
        Error::Transport { .. } => NVME_ERR_TRANSPORT,
        Error::OutcomeUnknown { .. } => NVME_ERR_OUTCOME_UNKNOWN,
        // `Error` is #[non_exhaustive]: a variant added later without a code of its own here
        // reads as an unsupported request; nvme_last_error_message() has its message. Give
        // new variants their own arm above.
        _ => NVME_ERR_UNSUPPORTED,
    }
}

/// Static description of `code`.
pub(crate) fn describe(code: c_int) -> &'static CStr {
    match code {
        NVME_OK => c"success",
        NVME_ERR_NULL_POINTER => c"a required pointer argument is NULL",
        NVME_ERR_INVALID_ARGUMENT => c"invalid argument",
        NVME_ERR_NO_DEVICE => c"the device could not be opened through VFIO",
        NVME_ERR_NO_MEMORY => c"DMA memory could not be allocated or mapped",
        NVME_ERR_NOT_READY => c"the controller did not become ready in time",
        NVME_ERR_FATAL => c"the controller failed (fatal status): close and re-open it",
        NVME_ERR_UNSUPPORTED => c"the controller is not supported",
        NVME_ERR_COMMAND => c"the command completed with an NVMe error status",
        NVME_ERR_TIMEOUT => c"the command timed out",
        NVME_ERR_RESET => c"interrupted by a controller reset: submit again",
        NVME_ERR_REMOVED => c"the device was removed",
        NVME_ERR_NAMESPACE => c"the namespace is not active or not usable",
        NVME_ERR_LBA_RANGE => c"the LBA range is outside the namespace",
        NVME_ERR_QUEUE_FULL => c"the queue pair is full: poll, then submit again",
        NVME_ERR_TOO_LARGE => c"the transfer needs more commands than the queue pair has slots",
        NVME_ERR_NO_QUEUES => c"all I/O queue pairs of the controller are in use",
        NVME_ERR_FOREIGN_BUFFER => {
            c"the buffer belongs to another DMA context (another controller)"
        }
        NVME_ERR_BUFFER_IN_FLIGHT => c"the buffer is in flight",
        NVME_ERR_BUSY => c"not allowed from a completion callback of this queue pair",
        NVME_ERR_PANIC => c"internal error in the NVMe library",
        NVME_ERR_INTERRUPT => c"interrupt setup or wait failed",
        NVME_ERR_TRANSPORT => c"the NVMe/TCP connection failed or was closed",
        NVME_ERR_COPY_LIMIT => c"the Copy exceeds a limit of its namespace (MSRC, MSSRL, MCL)",
        NVME_ERR_PROTECTION => {
            c"an end-to-end protection check failed (guard, application tag or reference tag)"
        }
        NVME_ERR_METADATA => c"the request does not fit the namespace's metadata format",
        NVME_ERR_OUTCOME_UNKNOWN => {
            c"the write may still be carried out later (association ended unconfirmed): check the data"
        }
        NVME_ERR_IOVEC_TOO_LARGE => {
            c"the vectored request is larger than one command (MDTS): submit it as several"
        }
        NVME_ERR_IOVEC_PIECE => c"a piece of the vectored request breaks a data-pointer rule",
        NVME_ERR_ZONE_BOUNDARY => c"zone boundary error: the command crosses the end of its zone",
        NVME_ERR_ZONE_FULL => c"the zone is full: reset it or write another zone",
        NVME_ERR_ZONE_READ_ONLY => c"the zone is read only",
        NVME_ERR_ZONE_OFFLINE => c"the zone is offline",
        NVME_ERR_ZONE_INVALID_WRITE => {
            c"zone invalid write: not at the zone's write pointer (use zone append)"
        }
        NVME_ERR_ZONE_TOO_MANY_ACTIVE => {
            c"too many active zones: finish or reset an active zone first"
        }
        NVME_ERR_ZONE_TOO_MANY_OPEN => c"too many open zones: close or finish an open zone first",
        NVME_ERR_ZONE_INVALID_TRANSITION => {
            c"invalid zone state transition for the zone's current state"
        }
        _ => c"unknown error code",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvme_driver::spec::Status;

    #[test]
    fn protection_errors_have_their_codes() {
        for sc in [0x82, 0x83, 0x84] {
            let e = Error::command("Read", Status::new(2, sc, true));
            assert_eq!(error_code(&e), NVME_ERR_PROTECTION, "{e}");
        }
        assert_eq!(
            error_code(&Error::command("Read", Status::new(2, 0x85, true))),
            NVME_ERR_COMMAND
        );
        assert_ne!(
            describe(NVME_ERR_PROTECTION).to_bytes(),
            b"unknown error code"
        );
        assert_ne!(
            describe(NVME_ERR_METADATA).to_bytes(),
            b"unknown error code"
        );
    }

    #[test]
    fn zone_and_vectored_errors_have_their_own_codes() {
        let mut codes = Vec::new();
        for sc in 0xB8..=0xBF {
            let e = Error::command("Zone Append", Status::new(1, sc, true));
            let code = error_code(&e);
            assert!((NVME_ERR_ZONE_INVALID_TRANSITION..=NVME_ERR_ZONE_BOUNDARY).contains(&code));
            assert_ne!(describe(code).to_bytes(), b"unknown error code");
            codes.push(code);
        }
        codes.dedup();
        assert_eq!(codes.len(), 8, "one code per zone status: {codes:?}");
        assert_eq!(
            error_code(&Error::command("Write", Status::new(1, 0xB9, true))),
            NVME_ERR_ZONE_FULL
        );
        // The same status code under another type is no zone error.
        assert_eq!(
            error_code(&Error::command("Write", Status::new(0, 0xB9, true))),
            NVME_ERR_COMMAND
        );
        let big = Error::IoVecTooLarge {
            bytes: 1 << 20,
            max_per_command: 1 << 19,
        };
        assert_eq!(error_code(&big), NVME_ERR_IOVEC_TOO_LARGE);
        for code in [NVME_ERR_IOVEC_TOO_LARGE, NVME_ERR_IOVEC_PIECE] {
            assert_ne!(describe(code).to_bytes(), b"unknown error code");
        }
    }
}
