//! Namespace management: Format NVM (`nvme_format`, NVMe Base §5.23) and Namespace
//! Attachment (`nvme_ns_attach` / `nvme_ns_detach`, §5.19), on PCIe and NVMe/TCP controllers.
//!
//! Each is refused with `NVME_ERR_UNSUPPORTED` before anything is sent when the controller's
//! Identify Controller OACS lacks it, and is followed by a namespace rescan (as
//! `nvme_ctrlr_rescan_namespaces`): queue pairs then use the new set on their next
//! submission to a namespace that changed.

use std::ffi::c_int;

use nvme_driver::spec::manage::{FormatNvm, SecureErase, MAX_LBA_FORMATS};

use crate::{fail, fail_with, guard, nvme_ctrlr};
use crate::{NVME_ERR_INVALID_ARGUMENT, NVME_ERR_NULL_POINTER, NVME_OK};

/// `nvme_format` flag: metadata inline after each block (extended LBA, Format NVM MSET 1);
/// without it, metadata goes to a separate buffer.
pub const NVME_FORMAT_EXTENDED_METADATA: u32 = 1 << 0;
/// `nvme_format` flag: protection information in the first bytes of the metadata (PIL 1);
/// without it, in the last.
pub const NVME_FORMAT_PI_FIRST: u32 = 1 << 1;
/// Every `nvme_format` flag.
const FORMAT_FLAGS: u32 = NVME_FORMAT_EXTENDED_METADATA | NVME_FORMAT_PI_FIRST;
/// Highest protection information type (PI types 1..3).
const MAX_PI_TYPE: u8 = 3;

/// Formats namespace `nsid` with LBA format `lbaf` (an index into Identify Namespace's LBA
/// formats, as `nvme-admin id-ns` lists them; QEMU's and the emulator's 4 is 4096-byte blocks
/// without metadata, 0 512-byte ones), Secure Erase Setting `ses` (0
/// none, 1 user data erase, 2 cryptographic erase), protection information type `pi` (0
/// none, 1..3) and `flags` (`NVME_FORMAT_EXTENDED_METADATA`, `NVME_FORMAT_PI_FIRST`). The
/// namespace's data is lost. Then the namespaces are rescanned: the namespace's block size
/// may have changed (a namespace now in a format this driver cannot use for I/O is refused
/// by later submissions with `NVME_ERR_NAMESPACE`).
///
/// `NVME_ERR_INVALID_ARGUMENT` for a field out of range (nothing sent),
/// `NVME_ERR_UNSUPPORTED` when the controller lacks Format NVM (OACS bit 1),
/// `NVME_ERR_COMMAND` when the controller refuses it (e.g. Invalid Format).
///
/// # Safety
/// `ctrlr` is NULL or an open controller handle.
#[no_mangle]
pub unsafe extern "C" fn nvme_format(
    ctrlr: *const nvme_ctrlr,
    nsid: u32,
    lbaf: u8,
    ses: u8,
    pi: u8,
    flags: u32,
) -> c_int {
    guard("nvme_format", || {
        if ctrlr.is_null() {
            return fail(
                NVME_ERR_NULL_POINTER,
                "nvme_format: argument `ctrlr` is NULL",
            );
        }
        let Some(ses) = SecureErase::from_raw(ses) else {
            return fail(
                NVME_ERR_INVALID_ARGUMENT,
                format!("nvme_format: ses {ses} is not 0 (none), 1 (user data) or 2 (crypto)"),
            );
        };
        if lbaf >= MAX_LBA_FORMATS || pi > MAX_PI_TYPE || flags & !FORMAT_FLAGS != 0 {
            return fail(
                NVME_ERR_INVALID_ARGUMENT,
                format!(
                    "nvme_format: lbaf {lbaf} (below {MAX_LBA_FORMATS}), pi {pi} (0..=3) or \
                     flags {flags:#x} (NVME_FORMAT_*) out of range"
                ),
            );
        }
        let format = FormatNvm {
            lbaf,
            extended_metadata: flags & NVME_FORMAT_EXTENDED_METADATA != 0,
            pi,
            pi_first: flags & NVME_FORMAT_PI_FIRST != 0,
            ses,
        };
        // SAFETY: `ctrlr` is a live handle (caller contract).
        let shared = unsafe { &(*ctrlr).shared };
        match shared.ctrl.format_nvm(nsid, format) {
            Ok(_) => NVME_OK,
            Err(e) => fail_with(&e),
        }
    })
}

/// The controller list of an attach or detach: `count` identifiers at `controllers`, or this
/// controller's own CNTLID when `count` is 0.
///
/// # Safety
/// `controllers` is valid for `count` reads when `count` > 0.
unsafe fn controller_ids(
    what: &str,
    ctrlr: &nvme_ctrlr,
    controllers: *const u16,
    count: usize,
) -> Result<Vec<u16>, c_int> {
    if count == 0 {
        return Ok(vec![ctrlr.shared.ctrl.identify().cntlid]);
    }
    if controllers.is_null() {
        return Err(fail(
            NVME_ERR_NULL_POINTER,
            format!("{what}: argument `controllers` is NULL with count {count}"),
        ));
    }
    // SAFETY: valid for `count` reads (caller contract, checked non-NULL above).
    Ok(unsafe { std::slice::from_raw_parts(controllers, count) }.to_vec())
}

/// Attaches (`attach` true) or detaches `nsid`.
///
/// # Safety
/// As [`nvme_ns_attach`].
unsafe fn attachment(
    what: &str,
    ctrlr: *const nvme_ctrlr,
    nsid: u32,
    controllers: *const u16,
    count: usize,
    attach: bool,
) -> c_int {
    guard(what, || {
        if ctrlr.is_null() {
            return fail(
                NVME_ERR_NULL_POINTER,
                format!("{what}: argument `ctrlr` is NULL"),
            );
        }
        // SAFETY: `ctrlr` is a live handle (caller contract).
        let handle = unsafe { &*ctrlr };
        // SAFETY: caller contract on `controllers` and `count`.
        let ids = match unsafe { controller_ids(what, handle, controllers, count) } {
            Ok(ids) => ids,
            Err(code) => return code,
        };
        let ctrl = &handle.shared.ctrl;
        let done = if attach {
            ctrl.attach_namespace(nsid, &ids)
        } else {
            ctrl.detach_namespace(nsid, &ids)
        };
        match done {
            Ok(_) => NVME_OK,
            Err(e) => fail_with(&e),
        }
    })
}

/// Attaches namespace `nsid` of the subsystem to the `count` controllers whose identifiers
/// (CNTLID) are at `controllers` (`count` 0: to this controller), then rescans. A namespace
/// attached here appears in `nvme_ctrlr_namespace_ids`. `NVME_ERR_UNSUPPORTED` when the
/// controller lacks Namespace Attachment (OACS bit 3); `NVME_ERR_COMMAND` with the
/// controller's status otherwise (Namespace Already Attached, Controller List Invalid, ...).
///
/// # Safety
/// `ctrlr` is NULL or an open controller handle; `controllers` is valid for `count` reads
/// when `count` > 0.
#[no_mangle]
pub unsafe extern "C" fn nvme_ns_attach(
    ctrlr: *const nvme_ctrlr,
    nsid: u32,
    controllers: *const u16,
    count: usize,
) -> c_int {
    // SAFETY: the caller's contract is this function's.
    unsafe { attachment("nvme_ns_attach", ctrlr, nsid, controllers, count, true) }
}

/// Detaches namespace `nsid` from the `count` controllers at `controllers` (`count` 0: from
/// this controller), then rescans: submissions to it through this controller fail with
/// `NVME_ERR_NAMESPACE` afterwards. Errors as `nvme_ns_attach` (Namespace Not Attached).
///
/// # Safety
/// As `nvme_ns_attach`.
#[no_mangle]
pub unsafe extern "C" fn nvme_ns_detach(
    ctrlr: *const nvme_ctrlr,
    nsid: u32,
    controllers: *const u16,
    count: usize,
) -> c_int {
    // SAFETY: the caller's contract is this function's.
    unsafe { attachment("nvme_ns_detach", ctrlr, nsid, controllers, count, false) }
}
