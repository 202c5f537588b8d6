//! Namespace changes: the controller's rescan (`nvme_ctrlr_rescan_namespaces`) and how a queue
//! pair follows it.
//!
//! A queue pair keeps the namespace handles it was created with, so that the submission path
//! looks a namespace up by nsid without touching the controller. A rescan that finds a
//! namespace resized, reformatted or detached makes its old handle stale (the driver's
//! `Namespace::is_current`); the next submission to that nsid then takes the controller's
//! current set, so it uses the new format, and a namespace now unusable (a format with
//! metadata or protection information, or detached) fails with `NVME_ERR_NAMESPACE` and the
//! driver's reason. A namespace attached after the pair was created is found the same way.

use std::ffi::c_int;

#[cfg(feature = "emulator")]
use nvme_sim::SimController;

use crate::{fail, fail_with, guard, nvme_ctrlr, nvme_qpair, NVME_ERR_NAMESPACE};
use crate::{NVME_ERR_NULL_POINTER, NVME_ERR_UNSUPPORTED, NVME_OK};

/// Re-reads the controller's active namespaces and their formats, for example after another
/// host or an administrator formatted, resized, attached or detached one (the driver cannot
/// know before). Afterwards `nvme_ctrlr_num_namespaces`, `nvme_ctrlr_namespace_ids` and
/// `nvme_ctrlr_get_ns_info` report the new set, and every queue pair uses it on its next
/// submission to a namespace that changed: a request to a namespace reformatted to a format
/// this driver refuses (metadata, protection information) or detached fails with
/// `NVME_ERR_NAMESPACE`. Requests already submitted are not affected. Fails with
/// `NVME_ERR_UNSUPPORTED` on an NVMe/TCP controller, whose namespace list is read once when it
/// is opened.
///
/// # Safety
/// `ctrlr` is NULL or an open controller handle.
#[no_mangle]
pub unsafe extern "C" fn nvme_ctrlr_rescan_namespaces(ctrlr: *const nvme_ctrlr) -> c_int {
    guard("nvme_ctrlr_rescan_namespaces", || {
        if ctrlr.is_null() {
            return fail(
                NVME_ERR_NULL_POINTER,
                "nvme_ctrlr_rescan_namespaces: argument `ctrlr` is NULL",
            );
        }
        // SAFETY: `ctrlr` is a live handle (caller contract).
        let shared = unsafe { &(*ctrlr).shared };
        match shared.ctrl.as_pcie() {
            Some(ctrl) => match ctrl.rescan_namespaces() {
                Ok(_) => NVME_OK,
                Err(e) => fail_with(&e),
            },
            None => fail(
                NVME_ERR_UNSUPPORTED,
                "nvme_ctrlr_rescan_namespaces: not supported on NVMe/TCP controllers",
            ),
        }
    })
}

/// FOR TESTS: the emulated device behind a controller opened with `nvme_ctrlr_open_emulated`
/// (None for any other controller), so a test can change a namespace as another host would
/// ([`SimController::format_namespace`], [`SimController::resize_namespace`]). Not part of the
/// C API.
///
/// # Safety
/// `ctrlr` is an open controller handle that stays open while the reference is used.
#[doc(hidden)]
#[cfg(feature = "emulator")]
pub unsafe fn emulated_device<'a>(ctrlr: *const nvme_ctrlr) -> Option<&'a SimController> {
    // SAFETY: `ctrlr` is a live handle for `'a` (caller contract).
    let shared = unsafe { &(*ctrlr).shared };
    shared._sim.as_ref()
}

impl nvme_qpair {
    /// Replaces this pair's namespace handles with the controller's current set and finds
    /// `nsid` in it, or the error saying why it cannot be used. Cold: runs once after a
    /// rescan changed the namespace, or for an nsid the pair does not have.
    #[cold]
    pub(crate) fn refresh_namespaces(&mut self, nsid: u32) -> Result<usize, c_int> {
        self.namespaces = self.shared.ctrl.namespaces();
        if let Some(i) = self.namespaces.iter().position(|n| n.nsid() == nsid) {
            return Ok(i);
        }
        Err(match self.shared.ctrl.namespace(nsid) {
            Err(e) => fail_with(&e),
            // A rescan on another thread published it between the two looks.
            Ok(_) => fail(
                NVME_ERR_NAMESPACE,
                format!("namespace {nsid} appeared while this request was submitted: retry"),
            ),
        })
    }
}
