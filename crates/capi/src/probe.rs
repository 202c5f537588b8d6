//! Probe, attach, detach from C (`nvme_probe`), in the spirit of SPDK's `spdk_nvme_probe`:
//! the NVMe functions of the machine (sysfs, class 0108xxh) are passed to a probe callback,
//! each one it accepts is opened and handed to the attach callback as a new controller handle,
//! and `nvme_detach` runs the remove callback before it closes that handle.
//!
//! INVARIANT: a handle from `nvme_probe` is an ordinary `struct nvme_ctrlr` (every
//! `nvme_ctrlr_*` call works on it) that also carries its remove callback; `nvme_detach` is
//! `nvme_ctrlr_close` preceded by that callback.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::path::PathBuf;

use nvme_device::{AnyController, Attached, Probe, ProbeDecision};
use nvme_driver::{ControllerOptions, PciAddress};
use nvme_vfio::{Binding, PciFunction, Sysfs};

use crate::boundary::{fail, guard};
use crate::controller::{copy_c_string, nvme_ctrlr, publish_ctrlr, RemoveHook};
#[cfg(feature = "emulator")]
use crate::emulator::SimController;
use crate::errors::*;

/// A function found by `nvme_probe`, as the probe and attach callbacks see it.
#[repr(C)]
pub struct nvme_probe_info {
    /// PCI address (`0000:01:00.0`), NUL-terminated.
    pub address: [c_char; 16],
    /// Bound driver (`vfio-pci`, `nvme`, or empty for none), NUL-terminated.
    pub driver: [c_char; 32],
    /// PCI Vendor ID.
    pub vendor_id: u16,
    /// PCI Device ID.
    pub device_id: u16,
    /// 24-bit PCI class code (0x010802 for an NVMe I/O controller).
    pub class_code: u32,
    /// IOMMU group, or -1 for none.
    pub iommu_group: i32,
    /// Whether the function is bound to vfio-pci (only those are offered for attach).
    pub vfio: bool,
}

/// Where and what `nvme_probe` looks for. A zeroed struct means: every NVMe function of
/// `/sys`.
#[repr(C)]
pub struct nvme_probe_opts {
    /// sysfs root (NULL: `/sys`), e.g. a fake tree in tests.
    pub sysfs_root: *const c_char,
    /// Only these functions: `num_addresses` PCI addresses or `trtype:PCIe` transport ids
    /// (NULL or 0: every NVMe function).
    pub addresses: *const *const c_char,
    /// Entries of `addresses`.
    pub num_addresses: usize,
}

/// Probe callback: return true to attach the function `info` describes. `info` is valid
/// during the call only.
pub type nvme_probe_cb =
    Option<unsafe extern "C" fn(ctx: *mut c_void, info: *const nvme_probe_info) -> bool>;

/// Attach callback: `ctrlr` is a new controller handle the caller owns (release it with
/// `nvme_detach`, which calls the remove callback, or `nvme_ctrlr_close`, which does not).
pub type nvme_attach_cb = Option<
    unsafe extern "C" fn(ctx: *mut c_void, info: *const nvme_probe_info, ctrlr: *mut nvme_ctrlr),
>;

/// Remove callback, run by `nvme_detach` just before it closes `ctrlr` (still usable inside).
pub type nvme_remove_cb = Option<unsafe extern "C" fn(ctx: *mut c_void, ctrlr: *mut nvme_ctrlr)>;

fn info_of(f: &PciFunction) -> nvme_probe_info {
    let mut info = nvme_probe_info {
        address: [0; 16],
        driver: [0; 32],
        vendor_id: f.vendor,
        device_id: f.device,
        class_code: f.class,
        iommu_group: f
            .iommu_group
            .and_then(|g| i32::try_from(g).ok())
            .unwrap_or(-1),
        vfio: f.binding == Binding::Vfio,
    };
    copy_c_string(&mut info.address, &f.address.to_string());
    let driver = match &f.binding {
        Binding::Vfio => nvme_vfio::pci::VFIO_PCI_DRIVER,
        Binding::Bindable { driver } | Binding::Other { driver } => driver.as_deref().unwrap_or(""),
    };
    copy_c_string(&mut info.driver, driver);
    info
}

/// The probe the options describe.
///
/// # Safety
/// `opts` is NULL or points to a valid `nvme_probe_opts` whose strings are NUL-terminated.
unsafe fn probe_from(opts: *const nvme_probe_opts) -> Result<Probe, c_int> {
    let mut probe = Probe::new();
    if opts.is_null() {
        return Ok(probe);
    }
    // SAFETY: non-null and valid for reads (caller contract).
    let opts = unsafe { &*opts };
    if !opts.sysfs_root.is_null() {
        // SAFETY: NUL-terminated (caller contract).
        let root = unsafe { CStr::from_ptr(opts.sysfs_root) };
        let root = root.to_str().map_err(|_| {
            fail(
                NVME_ERR_INVALID_ARGUMENT,
                "nvme_probe: sysfs_root is not UTF-8",
            )
        })?;
        probe = probe.sysfs(Sysfs::new(PathBuf::from(root)));
    }
    if !opts.addresses.is_null() && opts.num_addresses > 0 {
        // SAFETY: `addresses` has `num_addresses` readable entries (caller contract).
        let list = unsafe { std::slice::from_raw_parts(opts.addresses, opts.num_addresses) };
        let mut targets = Vec::with_capacity(list.len());
        for &p in list {
            if p.is_null() {
                return Err(fail(
                    NVME_ERR_NULL_POINTER,
                    "nvme_probe: an address is NULL",
                ));
            }
            // SAFETY: NUL-terminated (caller contract).
            let s = unsafe { CStr::from_ptr(p) }.to_string_lossy();
            let target = nvme_device::parse_target(&s)
                .map_err(|e| fail(NVME_ERR_INVALID_ARGUMENT, format!("nvme_probe: {e}")))?;
            targets.push(target);
        }
        probe = probe
            .targets(&targets)
            .map_err(|e| fail(NVME_ERR_INVALID_ARGUMENT, format!("nvme_probe: {e}")))?;
    }
    Ok(probe)
}

/// Runs a probe with `open` as the opener and the C callbacks.
///
/// # Safety
/// As `nvme_probe`.
#[allow(clippy::too_many_arguments)]
unsafe fn run_probe(
    what: &str,
    probe: Probe,
    ctx: *mut c_void,
    probe_cb: nvme_probe_cb,
    attach_cb: nvme_attach_cb,
    remove_cb: nvme_remove_cb,
    failed: *mut usize,
    keep_sim: bool,
) -> c_int {
    // Emulated controllers are kept with their handle: each opener call starts one.
    #[cfg(feature = "emulator")]
    let sims = std::sync::Arc::new(std::sync::Mutex::new(
        Vec::<(PciAddress, SimController)>::new(),
    ));
    #[cfg(feature = "emulator")]
    let probe = if keep_sim {
        let sims = sims.clone();
        probe.with_opener(move |f, options| {
            use nvme_driver::{Controller, Transport};
            let sim = SimController::start(nvme_sim::SimConfig::default());
            let ctrl = Controller::new(
                Transport::new(sim.mmio(), sim.dma(), f.address.to_string()),
                options,
            )?;
            sims.lock()
                .unwrap_or_else(|p| p.into_inner())
                .push((f.address, sim));
            Ok(AnyController::Pcie(ctrl))
        })
    } else {
        probe
    };
    #[cfg(not(feature = "emulator"))]
    let _ = keep_sim;
    // The registry only collects this run's controllers; each is then handed to C.
    let mut registry = Attached::new();
    let mut chosen: Vec<(PciAddress, nvme_probe_info)> = Vec::new();
    let outcome = probe.run(
        &mut registry,
        |f| {
            let info = info_of(f);
            // SAFETY: the caller's callback with its own context; `info` lives for the call.
            let yes = match probe_cb {
                // SAFETY: as above.
                Some(cb) => unsafe { cb(ctx, &info) },
                None => true,
            };
            if yes {
                ProbeDecision::Attach(ControllerOptions::default())
            } else {
                ProbeDecision::Skip
            }
        },
        |f, _| chosen.push((f.address, info_of(f))),
    );
    let outcome = match outcome {
        Ok(o) => o,
        Err(e) => return fail(error_code(&e), format!("{what}: {e}")),
    };
    let attached = outcome.attached.len();
    for (address, info) in chosen {
        let Some(attachment) = registry.take(&address) else {
            continue;
        };
        let ctrl = std::sync::Arc::try_unwrap(attachment.controller)
            .expect("a freshly attached controller has one reference");
        #[cfg(feature = "emulator")]
        let sim = {
            let mut sims = sims.lock().unwrap_or_else(|p| p.into_inner());
            sims.iter()
                .position(|(a, _)| *a == address)
                .map(|i| sims.swap_remove(i).1)
        };
        #[cfg(not(feature = "emulator"))]
        let sim = None;
        let mut handle: *mut nvme_ctrlr = std::ptr::null_mut();
        // SAFETY: `handle` is a valid place for the new handle.
        unsafe { publish_ctrlr(ctrl, sim, &mut handle) };
        // SAFETY: `handle` was just published and is live; nothing else holds it yet.
        unsafe { (*handle).remove = Some(RemoveHook { cb: remove_cb, ctx }) };
        match attach_cb {
            // SAFETY: the caller's callback; it now owns `handle`.
            Some(cb) => unsafe { cb(ctx, &info, handle) },
            // Nobody to own it: close it again.
            // SAFETY: `handle` is live and unused elsewhere.
            None => unsafe {
                crate::controller::nvme_ctrlr_close(handle);
            },
        }
    }
    if !failed.is_null() {
        // SAFETY: non-null and valid for a write (caller contract).
        unsafe { *failed = outcome.failed.len() };
    }
    if let Some((address, e)) = outcome.failed.last() {
        fail(
            error_code(e),
            format!("{what}: {address} not attached: {e}"),
        );
    }
    attached as c_int
}

/// Enumerates the NVMe functions (sysfs, class 0108xxh) that `opts` selects (NULL: all of
/// `/sys`), calls `probe_cb` for each one bound to vfio-pci (NULL: attach all), opens each it
/// accepts and passes the new handle to `attach_cb` (NULL: the handle is closed again). A
/// function not on vfio-pci is never offered. A chosen function that fails to come up (gone
/// since, in use, no IOMMU group) gets no attach callback; the others go on; their count is
/// stored in `*failed` (NULL: not stored) and the last one's message is
/// `nvme_last_error_message`. Every handle remembers `remove_cb` and `ctx` for
/// `nvme_detach`. Returns how many controllers were attached, or a negative `NVME_ERR_*`
/// when the enumeration itself failed. The callbacks run on the calling thread, inside this
/// call.
///
/// # Safety
/// `opts` is NULL or valid (its strings NUL-terminated, `addresses` with `num_addresses`
/// entries); `failed` is NULL or valid for a write; the callbacks are NULL or valid functions
/// that accept `ctx`.
#[no_mangle]
pub unsafe extern "C" fn nvme_probe(
    opts: *const nvme_probe_opts,
    ctx: *mut c_void,
    probe_cb: nvme_probe_cb,
    attach_cb: nvme_attach_cb,
    remove_cb: nvme_remove_cb,
    failed: *mut usize,
) -> c_int {
    guard("nvme_probe", || {
        // SAFETY: caller contract on `opts`.
        let probe = match unsafe { probe_from(opts) } {
            Ok(p) => p,
            Err(code) => return code,
        };
        // SAFETY: caller contract on the callbacks and `failed`.
        unsafe {
            run_probe(
                "nvme_probe",
                probe,
                ctx,
                probe_cb,
                attach_cb,
                remove_cb,
                failed,
                false,
            )
        }
    })
}

/// FOR TESTS: `nvme_probe` whose attach opens an in-process *emulated* controller (as
/// `nvme_ctrlr_open_emulated`) for each function the probe callback accepts, instead of the
/// function through VFIO: probe and attach logic against a fake sysfs tree (`sysfs_root`).
/// Fails with `NVME_ERR_UNSUPPORTED` in a build without the emulator.
///
/// # Safety
/// As `nvme_probe`.
#[no_mangle]
pub unsafe extern "C" fn nvme_probe_emulated(
    opts: *const nvme_probe_opts,
    ctx: *mut c_void,
    probe_cb: nvme_probe_cb,
    attach_cb: nvme_attach_cb,
    remove_cb: nvme_remove_cb,
    failed: *mut usize,
) -> c_int {
    guard("nvme_probe_emulated", || {
        #[cfg(not(feature = "emulator"))]
        {
            let _ = (opts, ctx, probe_cb, attach_cb, remove_cb, failed);
            crate::emulator::missing("nvme_probe_emulated")
        }
        #[cfg(feature = "emulator")]
        {
            // SAFETY: caller contract on `opts`.
            let probe = match unsafe { probe_from(opts) } {
                Ok(p) => p,
                Err(code) => return code,
            };
            // SAFETY: caller contract on the callbacks and `failed`.
            unsafe {
                run_probe(
                    "nvme_probe_emulated",
                    probe,
                    ctx,
                    probe_cb,
                    attach_cb,
                    remove_cb,
                    failed,
                    true,
                )
            }
        }
    })
}

/// Whether the device behind `ctrlr` went away (the kernel asked for it back, or its
/// registers read all ones): 1 removed (every I/O fails; call `nvme_detach`), 0 present, or
/// a negative `NVME_ERR_*`. One register read; call it from a management thread, not per I/O.
/// NVMe/TCP controllers report 0 (a lost connection is reported by their queue pairs).
///
/// # Safety
/// `ctrlr` is NULL or an open controller handle.
#[no_mangle]
pub unsafe extern "C" fn nvme_ctrlr_check_removal(ctrlr: *mut nvme_ctrlr) -> c_int {
    guard("nvme_ctrlr_check_removal", || {
        check_null!("nvme_ctrlr_check_removal", ctrlr);
        // SAFETY: non-null and live (caller contract).
        let handle = unsafe { &*ctrlr };
        let ctrl = &handle.shared.ctrl;
        match ctrl {
            AnyController::Pcie(c) => c_int::from(c.check_removal()),
            AnyController::Tcp(_) => 0,
        }
    })
}

/// Opt-in protection against SIGBUS after a surprise removal: installs the process-wide
/// SIGBUS handler (chaining to any previous one) and registers the controller's register
/// window with it, so that an access to a BAR that vfio-pci revoked reads all ones instead of
/// killing the process (the controller is then reported removed). `NVME_ERR_UNSUPPORTED` for
/// a controller without a BAR mapping (NVMe/TCP, the emulator). A removal the library is told
/// about (the kernel's device request) revokes the window without the handler.
///
/// # Safety
/// `ctrlr` is NULL or an open controller handle.
#[no_mangle]
pub unsafe extern "C" fn nvme_ctrlr_guard_register_faults(ctrlr: *mut nvme_ctrlr) -> c_int {
    guard("nvme_ctrlr_guard_register_faults", || {
        check_null!("nvme_ctrlr_guard_register_faults", ctrlr);
        // SAFETY: non-null and live (caller contract).
        let handle = unsafe { &*ctrlr };
        match &handle.shared.ctrl {
            AnyController::Pcie(c) => match c.guard_register_faults() {
                Ok(()) => NVME_OK,
                Err(e) => crate::boundary::fail_with(&e),
            },
            AnyController::Tcp(_) => fail(
                NVME_ERR_UNSUPPORTED,
                "nvme_ctrlr_guard_register_faults: an NVMe/TCP controller has no registers",
            ),
        }
    })
}

/// Detaches a controller from `nvme_probe`: runs its remove callback (with the handle, still
/// usable), then closes it as `nvme_ctrlr_close` does. On a handle from `nvme_ctrlr_open*`
/// (no remove callback) it only closes. NULL does nothing.
///
/// # Safety
/// `ctrlr` is NULL or an open controller handle that no other thread uses during or after
/// this call.
#[no_mangle]
pub unsafe extern "C" fn nvme_detach(ctrlr: *mut nvme_ctrlr) -> c_int {
    guard("nvme_detach", || {
        if ctrlr.is_null() {
            return NVME_OK;
        }
        // SAFETY: live handle (caller contract).
        if let Some(hook) = unsafe { (*ctrlr).remove.take() } {
            if let Some(cb) = hook.cb {
                // SAFETY: the caller's callback and context, with the still-open handle.
                unsafe { cb(hook.ctx, ctrlr) };
            }
        }
        // SAFETY: as `nvme_ctrlr_close`'s contract, which the caller gives.
        unsafe { crate::controller::nvme_ctrlr_close(ctrlr) }
    })
}
