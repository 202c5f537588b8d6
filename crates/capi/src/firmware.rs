//! Firmware update: `nvme_fw_download` (Firmware Image Download, NVMe Base 2.0 §5.13) and
//! `nvme_fw_commit` (Firmware Commit, §5.12), on PCIe and NVMe/TCP controllers. Both are
//! refused with `NVME_ERR_UNSUPPORTED` before anything is sent when the controller's
//! Identify Controller OACS bit 2 is clear (QEMU 7.2's controller).

use std::ffi::c_int;

use nvme_driver::spec::firmware::{ActivationReset, CommitAction, CommitOutcome, FirmwareCommit};

use crate::{fail, fail_with, guard, nvme_ctrlr};
use crate::{NVME_ERR_INVALID_ARGUMENT, NVME_ERR_NULL_POINTER, NVME_OK};

/// `nvme_fw_commit` outcome: the image is stored in the slot, not activated (action 0 or 6).
pub const NVME_FW_STORED: c_int = 0;
/// `nvme_fw_commit` outcome: the slot runs after the next Controller Level Reset.
pub const NVME_FW_ACTIVATES_AT_RESET: c_int = 1;
/// `nvme_fw_commit` outcome: the image runs now (action 3).
pub const NVME_FW_ACTIVATED: c_int = 2;
/// `nvme_fw_commit` outcome: committed; it runs after a Conventional Reset (status 0Bh).
pub const NVME_FW_REQUIRES_CONVENTIONAL_RESET: c_int = 3;
/// `nvme_fw_commit` outcome: committed; it runs after an NVM Subsystem Reset (status 10h).
pub const NVME_FW_REQUIRES_NVM_SUBSYSTEM_RESET: c_int = 4;
/// `nvme_fw_commit` outcome: committed; it runs after a Controller Level Reset (status 11h).
pub const NVME_FW_REQUIRES_CONTROLLER_RESET: c_int = 5;

fn outcome_code(outcome: CommitOutcome) -> c_int {
    match outcome {
        CommitOutcome::Stored => NVME_FW_STORED,
        CommitOutcome::ActivatesAtReset => NVME_FW_ACTIVATES_AT_RESET,
        CommitOutcome::Activated => NVME_FW_ACTIVATED,
        CommitOutcome::RequiresReset(ActivationReset::Conventional) => {
            NVME_FW_REQUIRES_CONVENTIONAL_RESET
        }
        CommitOutcome::RequiresReset(ActivationReset::NvmSubsystem) => {
            NVME_FW_REQUIRES_NVM_SUBSYSTEM_RESET
        }
        CommitOutcome::RequiresReset(ActivationReset::ControllerLevel) => {
            NVME_FW_REQUIRES_CONTROLLER_RESET
        }
    }
}

/// Downloads `len` bytes at `image` as the part of a firmware image that starts at byte
/// `offset`, in pieces of at most `xfer` bytes (0: the controller's largest transfer, MDTS),
/// each within MDTS and the controller's update granularity (FWUG). `len`, `offset` and a
/// non-zero `xfer` must be multiples of 4 (and `offset`, `xfer` of FWUG where the controller
/// states one): else `NVME_ERR_INVALID_ARGUMENT`, nothing sent. `NVME_ERR_UNSUPPORTED` when
/// the controller lacks the command (OACS bit 2), `NVME_ERR_COMMAND` with the controller's
/// status otherwise (Overlapping Range). Commit the image with `nvme_fw_commit`.
///
/// # Safety
/// `ctrlr` is NULL or an open controller handle; `image` is NULL or valid for `len` reads.
#[no_mangle]
pub unsafe extern "C" fn nvme_fw_download(
    ctrlr: *const nvme_ctrlr,
    image: *const u8,
    len: usize,
    offset: u64,
    xfer: u32,
) -> c_int {
    guard("nvme_fw_download", || {
        if ctrlr.is_null() || image.is_null() {
            let arg = if ctrlr.is_null() { "ctrlr" } else { "image" };
            return fail(
                NVME_ERR_NULL_POINTER,
                format!("nvme_fw_download: argument `{arg}` is NULL"),
            );
        }
        // SAFETY: `image` is valid for `len` reads (caller contract, checked non-NULL).
        let image = unsafe { std::slice::from_raw_parts(image, len) };
        // SAFETY: `ctrlr` is a live handle (caller contract).
        let shared = unsafe { &(*ctrlr).shared };
        let chunk = Some(xfer as usize).filter(|&x| x != 0);
        match shared.ctrl.firmware_download_chunked(offset, image, chunk) {
            Ok(_) => NVME_OK,
            Err(e) => fail_with(&e),
        }
    })
}

/// Firmware Commit: commit action `action` (0 replace, 1 replace and activate at the next
/// reset, 2 activate the slot at the next reset, 3 replace and activate now, 6 replace boot
/// partition `bpid`, 7 mark it active) on firmware slot `slot` (1..=7; 0: the controller
/// chooses). On `NVME_OK`, `*outcome` (when not NULL) is one of `NVME_FW_*`: the statuses
/// that mean "committed, activation requires a reset" are outcomes, not errors.
/// `NVME_ERR_INVALID_ARGUMENT` for a reserved action, a slot above 7 or `bpid` above 1
/// (nothing sent), `NVME_ERR_UNSUPPORTED` as `nvme_fw_download`, `NVME_ERR_COMMAND` with
/// the controller's status otherwise (Invalid Firmware Slot, Invalid Firmware Image, ...).
///
/// # Safety
/// `ctrlr` is NULL or an open controller handle; `outcome` is NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn nvme_fw_commit(
    ctrlr: *const nvme_ctrlr,
    slot: u8,
    action: u8,
    bpid: u8,
    outcome: *mut c_int,
) -> c_int {
    guard("nvme_fw_commit", || {
        if ctrlr.is_null() {
            return fail(
                NVME_ERR_NULL_POINTER,
                "nvme_fw_commit: argument `ctrlr` is NULL",
            );
        }
        let Some(action) = CommitAction::from_raw(action).filter(|_| bpid <= 1) else {
            return fail(
                NVME_ERR_INVALID_ARGUMENT,
                format!(
                    "nvme_fw_commit: action {action} (0..=3, 6, 7) or bpid {bpid} (0 or 1) out \
                     of range"
                ),
            );
        };
        let commit = FirmwareCommit {
            bpid: bpid == 1,
            ..FirmwareCommit::new(slot, action)
        };
        // SAFETY: `ctrlr` is a live handle (caller contract).
        let shared = unsafe { &(*ctrlr).shared };
        match shared.ctrl.firmware_commit(commit) {
            Ok(done) => {
                if !outcome.is_null() {
                    // SAFETY: valid for one write (caller contract, checked non-NULL).
                    unsafe { outcome.write(outcome_code(done)) };
                }
                NVME_OK
            }
            Err(e) => fail_with(&e),
        }
    })
}
