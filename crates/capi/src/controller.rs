//! Controller handles: `struct nvme_ctrlr` opened on a PCI address, an NVMe/TCP transport id
//! or the emulator (with bring-up options: `struct nvme_ctrlr_opts`), closed, and asked for
//! its identification, namespaces and the options in effect.
//!
//! INVARIANT: a handle owns one reference to its [`CtrlShared`]; every queue pair holds
//! another, so the controller (and an emulated device behind it) outlives its queue pairs
//! whatever order C closes them in.

use std::ffi::{c_char, c_int, CStr};
use std::sync::Arc;

#[cfg(feature = "emulator")]
use nvme_driver::Transport;
use nvme_driver::{Controller, ControllerOptions, ShadowDoorbells};
#[cfg(feature = "emulator")]
use nvme_sim::SimConfig;
use nvme_tcp::{TcpController, TcpOptions, TransportId};

use crate::boundary::{fail, fail_with, guard};
use crate::context::{nvme_dma_context, open_emulated_in, open_in};
use crate::emulator;
use crate::emulator::SimController;
use crate::errors::*;
use nvme_device::{parse_target, AnyController, Target};

/// Controller state shared by the controller handle and its queue pairs. Field order is drop
/// order: the controller shuts down while the emulated device still answers.
pub(crate) struct CtrlShared {
    pub(crate) ctrl: AnyController,
    pub(crate) _sim: Option<SimController>,
}

/// An open NVMe controller. Thread-safe: any thread may use it concurrently, except
/// `nvme_ctrlr_close`, which must be the last call on the handle.
pub struct nvme_ctrlr {
    pub(crate) shared: Arc<CtrlShared>,
    /// The remove callback of a handle from `nvme_probe` (run by `nvme_detach`).
    pub(crate) remove: Option<RemoveHook>,
}

/// A C remove callback and its context (`nvme_probe`, `nvme_detach`).
pub(crate) struct RemoveHook {
    pub(crate) cb: crate::probe::nvme_remove_cb,
    pub(crate) ctx: *mut std::ffi::c_void,
}

// SAFETY: the context pointer is never dereferenced by the library: it is only passed back to
// the caller's own callback, on whichever thread calls `nvme_detach`, which the C API's
// contract (the header's THREADING section) leaves to the caller, as for the queue-pair
// callbacks' `cb_arg`.
unsafe impl Send for RemoveHook {}
// SAFETY: as for Send: shared references never touch the pointer's target.
unsafe impl Sync for RemoveHook {}

// The controller handle is shared between threads by C callers: it must be Send + Sync.
const _: () = {
    const fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<nvme_ctrlr>();
};

/// Identification and limits of a controller (`nvme_ctrlr_get_info`).
#[repr(C)]
pub struct nvme_ctrlr_info {
    /// Model number, NUL-terminated.
    pub model: [c_char; 41],
    /// Serial number, NUL-terminated.
    pub serial: [c_char; 21],
    /// Firmware revision, NUL-terminated.
    pub firmware: [c_char; 9],
    /// Active namespaces usable for I/O.
    pub num_namespaces: u32,
    /// I/O queue pairs the controller granted (most queue pairs open at once).
    pub io_queue_pairs: u32,
    /// Largest queue depth `nvme_qpair_create` accepts.
    pub max_queue_entries: u32,
    /// Most bytes one NVMe command moves (larger reads/writes are split by the driver).
    pub max_transfer_bytes: u64,
}

/// Geometry of a namespace (`nvme_ctrlr_get_ns_info`).
#[repr(C)]
pub struct nvme_ns_info {
    /// Namespace id.
    pub nsid: u32,
    /// Bytes per logical block (a power of two, at least 512).
    pub block_size: u32,
    /// Capacity in logical blocks.
    pub blocks: u64,
}

pub(crate) fn copy_c_string(dst: &mut [c_char], src: &str) {
    let n = src.len().min(dst.len() - 1);
    for (d, s) in dst.iter_mut().zip(src.bytes().take(n)) {
        *d = s as c_char;
    }
    dst[n..].fill(0);
}

/// Stores a new controller handle in `*out`.
///
/// # Safety
/// `out` is NULL or valid for a write.
pub(crate) unsafe fn publish_ctrlr(
    ctrl: AnyController,
    sim: Option<SimController>,
    out: *mut *mut nvme_ctrlr,
) {
    let handle = Box::new(nvme_ctrlr {
        shared: Arc::new(CtrlShared { ctrl, _sim: sim }),
        remove: None,
    });
    // SAFETY: the caller checked `out` is non-null and valid for a write.
    unsafe { *out = Box::into_raw(handle) };
}

/// Opens the NVMe controller `device` and brings it up. `device` is a PCI address
/// (`"0000:01:00.0"`) or an SPDK-style transport id: `"trtype:PCIe traddr:0000:01:00.0"`
/// (the function must be bound to `vfio-pci`), or an NVMe/TCP subsystem,
/// `"trtype:TCP adrfam:IPv4 traddr:192.0.2.1 trsvcid:4420 subnqn:NQN [hostnqn:NQN]"`
/// (connects the admin queue; each `nvme_qpair_create` opens one more connection). Every
/// other function works on either kind; an NVMe/TCP queue pair supports read, write (split
/// above `max_transfer_bytes` as on PCIe), flush, verify and write zeroes (deallocate fails
/// with `NVME_ERR_UNSUPPORTED`), and a lost
/// connection completes its outstanding requests with `NVME_ERR_TRANSPORT`.
/// On success stores the handle in `*out` and returns `NVME_OK`.
///
/// # Safety
/// `device` is NULL or a NUL-terminated string; `out` is NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvme_ctrlr_open(
    device: *const c_char,
    out: *mut *mut nvme_ctrlr,
) -> c_int {
    guard("nvme_ctrlr_open", || {
        check_null!("nvme_ctrlr_open", device, out);
        // SAFETY: `device` is non-null and NUL-terminated (caller contract).
        let device = unsafe { CStr::from_ptr(device) };
        let Ok(device) = device.to_str() else {
            return fail(
                NVME_ERR_INVALID_ARGUMENT,
                "nvme_ctrlr_open: device is not valid UTF-8",
            );
        };
        let address = match parse_target(device) {
            Ok(Target::Pcie(address)) => address,
            Ok(Target::Tcp(trid)) => {
                return match connect_tcp("nvme_ctrlr_open", &trid) {
                    Ok(ctrl) => {
                        // SAFETY: `out` is non-null and valid for a write (caller contract).
                        unsafe { publish_ctrlr(AnyController::Tcp(ctrl), None, out) };
                        NVME_OK
                    }
                    Err(code) => code,
                };
            }
            Ok(Target::Emulator) => return fail(NVME_ERR_INVALID_ARGUMENT, EMULATOR_BY_NAME),
            Err(e) => return fail(NVME_ERR_INVALID_ARGUMENT, format!("nvme_ctrlr_open: {e}")),
        };
        match Controller::open_pci(&address.to_string(), ControllerOptions::default()) {
            Ok(ctrl) => {
                // SAFETY: `out` is non-null and valid for a write (caller contract).
                unsafe { publish_ctrlr(AnyController::Pcie(ctrl), None, out) };
                NVME_OK
            }
            Err(e) => fail_with(&e),
        }
    })
}

/// `nvme_device_parse`: a PCI function (a PCI address or `trtype:PCIe` transport id).
pub const NVME_DEVICE_PCIE: c_int = 1;
/// `nvme_device_parse`: an NVMe/TCP subsystem (`trtype:TCP` transport id).
pub const NVME_DEVICE_TCP: c_int = 2;
/// `nvme_device_parse`: `sim`, the in-process emulator (`nvme_ctrlr_open_emulated`).
pub const NVME_DEVICE_EMULATOR: c_int = 3;

/// Parses the device string `device` as `nvme_ctrlr_open` does (the tools' one parser),
/// opening nothing, and writes its canonical form (NUL-terminated) to
/// `canonical[0..capacity]`: the full PCI address (`0000:01:00.0` for `01:00.0` and for
/// `trtype:PCIe traddr:0000:01:00.0`), the transport id in a fixed order, or `sim`; two
/// strings name the same controller exactly when their canonical forms are equal. Returns
/// `NVME_DEVICE_PCIE`, `NVME_DEVICE_TCP` or `NVME_DEVICE_EMULATOR`, or
/// `NVME_ERR_INVALID_ARGUMENT` with the parser's message (`nvme_last_error_message`) for a
/// string that names no controller or a `capacity` too small (`canonical` may be NULL when
/// `capacity` is 0: then only the kind is returned). For front ends that take device strings
/// from their users (fio's filename) and must pick the open function, share one controller
/// between several names of it, or refuse a bad name early.
///
/// # Safety
/// `device` is NULL or a NUL-terminated string; `canonical` is NULL or valid for `capacity`
/// writes.
#[no_mangle]
pub unsafe extern "C" fn nvme_device_parse(
    device: *const c_char,
    canonical: *mut c_char,
    capacity: usize,
) -> c_int {
    guard("nvme_device_parse", || {
        check_null!("nvme_device_parse", device);
        // SAFETY: `device` is non-null and NUL-terminated (caller contract).
        let Ok(device) = unsafe { CStr::from_ptr(device) }.to_str() else {
            return fail(
                NVME_ERR_INVALID_ARGUMENT,
                "nvme_device_parse: device is not valid UTF-8",
            );
        };
        let target = match parse_target(device) {
            Ok(t) => t,
            Err(e) => return fail(NVME_ERR_INVALID_ARGUMENT, format!("`{device}`: {e}")),
        };
        if capacity > 0 {
            if canonical.is_null() {
                return fail(
                    NVME_ERR_NULL_POINTER,
                    "nvme_device_parse: canonical is NULL but capacity is not 0",
                );
            }
            let text = target.to_string();
            if text.len() >= capacity {
                return fail(
                    NVME_ERR_INVALID_ARGUMENT,
                    format!(
                        "nvme_device_parse: the canonical form `{text}` needs {} bytes, \
                         capacity is {capacity}",
                        text.len() + 1
                    ),
                );
            }
            // SAFETY: `canonical` is valid for `capacity` > `text.len()` writes (caller
            // contract and the check above).
            unsafe {
                std::ptr::copy_nonoverlapping(text.as_ptr(), canonical.cast::<u8>(), text.len());
                *canonical.add(text.len()) = 0;
            }
        }
        match target {
            Target::Pcie(_) => NVME_DEVICE_PCIE,
            Target::Tcp(_) => NVME_DEVICE_TCP,
            Target::Emulator => NVME_DEVICE_EMULATOR,
        }
    })
}

/// The message for `nvme_ctrlr_open("sim")`: the C API opens the emulator by function, never
/// by device string.
const EMULATOR_BY_NAME: &str =
    "nvme_ctrlr_open: `sim` names the in-process emulator, which the C API opens with \
     nvme_ctrlr_open_emulated, not by device string";

/// Connects to the NVMe/TCP subsystem `trid` names.
fn connect_tcp(what: &str, trid: &TransportId) -> Result<TcpController, c_int> {
    if trid.is_discovery() {
        return Err(fail(
            NVME_ERR_INVALID_ARGUMENT,
            format!(
                "{what}: `{trid}` names the discovery subsystem, which has no namespaces: add \
                 subnqn:<the subsystem NQN>"
            ),
        ));
    }
    TcpController::connect(trid, TcpOptions::default()).map_err(|e| fail_with(&e))
}

/// FOR TESTS AND EXAMPLES: starts an in-process *emulated* NVMe controller (no device, no
/// VFIO; data lives in memory and is lost on close) and opens it like `nvme_ctrlr_open`.
/// It has namespace 1 (16 MiB of 512-byte blocks) and namespace 2 (16 MiB of 4096-byte
/// blocks). Never use it for real data.
///
/// # Safety
/// `out` is NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvme_ctrlr_open_emulated(out: *mut *mut nvme_ctrlr) -> c_int {
    // SAFETY: forwarded caller contract.
    unsafe { open_emulated("nvme_ctrlr_open_emulated", false, out) }
}

/// FOR TESTS AND EXAMPLES: `nvme_ctrlr_open_emulated` with namespace 2 a *zoned* namespace
/// (ZNS, `nvme_ctrlr_get_zone_info`): 16 zones of 1 MiB (256 blocks of 4096 bytes), at most 4
/// open and 6 active zones. Namespace 1 is the same plain one.
///
/// # Safety
/// `out` is NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvme_ctrlr_open_emulated_zoned(out: *mut *mut nvme_ctrlr) -> c_int {
    // SAFETY: forwarded caller contract.
    unsafe { open_emulated("nvme_ctrlr_open_emulated_zoned", true, out) }
}

/// The emulated controller of `nvme_ctrlr_open_emulated` (`zoned`: its namespace 2 zoned).
///
/// # Safety
/// `out` is NULL or valid for a write.
unsafe fn open_emulated(name: &'static str, zoned: bool, out: *mut *mut nvme_ctrlr) -> c_int {
    guard(name, || {
        check_null!(name = name, out);
        #[cfg(not(feature = "emulator"))]
        {
            let _ = zoned;
            emulator::missing(name)
        }
        #[cfg(feature = "emulator")]
        {
            let config = if zoned {
                emulator::zoned_config()
            } else {
                SimConfig::default()
            };
            let sim = SimController::start(config);
            match Controller::new(
                Transport::new(sim.mmio(), sim.dma(), "emulated"),
                ControllerOptions::default(),
            ) {
                Ok(ctrl) => {
                    // SAFETY: `out` is non-null and valid for a write (caller contract).
                    unsafe { publish_ctrlr(AnyController::Pcie(ctrl), Some(sim), out) };
                    NVME_OK
                }
                Err(e) => fail_with(&e),
            }
        }
    })
}

/// Closes the controller handle. Destroy its queue pairs and free its buffers first; if some
/// remain, they stay usable and the controller is shut down when the last of them is gone.
/// Closing NULL does nothing.
///
/// # Safety
/// `ctrlr` is NULL or a handle from `nvme_ctrlr_open*` not closed yet, and no other thread
/// uses it during or after this call.
#[no_mangle]
pub unsafe extern "C" fn nvme_ctrlr_close(ctrlr: *mut nvme_ctrlr) -> c_int {
    guard("nvme_ctrlr_close", || {
        if !ctrlr.is_null() {
            // SAFETY: `ctrlr` came from Box::into_raw and is released once (caller contract).
            drop(unsafe { Box::from_raw(ctrlr) });
        }
        NVME_OK
    })
}

/// Fills `*info` with the controller's identification and limits.
///
/// # Safety
/// `ctrlr` is NULL or an open controller handle; `info` is NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvme_ctrlr_get_info(
    ctrlr: *const nvme_ctrlr,
    info: *mut nvme_ctrlr_info,
) -> c_int {
    guard("nvme_ctrlr_get_info", || {
        check_null!("nvme_ctrlr_get_info", ctrlr, info);
        // SAFETY: `ctrlr` is a live handle (caller contract); shared access is thread-safe.
        let ctrl = unsafe { &(&*ctrlr).shared.ctrl };
        let id = ctrl.identify();
        let mut out = nvme_ctrlr_info {
            model: [0; 41],
            serial: [0; 21],
            firmware: [0; 9],
            num_namespaces: ctrl.namespaces().len() as u32,
            io_queue_pairs: u32::from(ctrl.io_queue_pairs()),
            max_queue_entries: ctrl.max_queue_entries(),
            max_transfer_bytes: ctrl.max_transfer_bytes() as u64,
        };
        copy_c_string(&mut out.model, &id.model());
        copy_c_string(&mut out.serial, &id.serial());
        copy_c_string(&mut out.firmware, &id.firmware());
        // SAFETY: `info` is non-null and valid for a write (caller contract).
        unsafe { info.write(out) };
        NVME_OK
    })
}

/// Number of active namespaces usable for I/O (0 when `ctrlr` is NULL).
///
/// # Safety
/// `ctrlr` is NULL or an open controller handle.
#[no_mangle]
pub unsafe extern "C" fn nvme_ctrlr_num_namespaces(ctrlr: *const nvme_ctrlr) -> u32 {
    if ctrlr.is_null() {
        return 0;
    }
    // SAFETY: `ctrlr` is a live handle (caller contract).
    let ctrl = unsafe { &(&*ctrlr).shared.ctrl };
    ctrl.namespaces().len() as u32
}

/// Writes the ids of the usable namespaces, ascending, to `ids[0..min(capacity, count)]`
/// and returns their count (call with `capacity` 0 and `ids` NULL to size the array), or a
/// negative error code.
///
/// # Safety
/// `ctrlr` is NULL or an open controller handle; `ids` is valid for `capacity` writes
/// (it may be NULL when `capacity` is 0).
#[no_mangle]
pub unsafe extern "C" fn nvme_ctrlr_namespace_ids(
    ctrlr: *const nvme_ctrlr,
    ids: *mut u32,
    capacity: u32,
) -> c_int {
    guard("nvme_ctrlr_namespace_ids", || {
        check_null!("nvme_ctrlr_namespace_ids", ctrlr);
        if ids.is_null() && capacity > 0 {
            return fail(
                NVME_ERR_NULL_POINTER,
                "nvme_ctrlr_namespace_ids: argument `ids` is NULL with a non-zero capacity",
            );
        }
        // SAFETY: `ctrlr` is a live handle (caller contract).
        let ctrl = unsafe { &(&*ctrlr).shared.ctrl };
        let namespaces = ctrl.namespaces();
        for (i, ns) in namespaces.iter().take(capacity as usize).enumerate() {
            // SAFETY: i < capacity and `ids` is valid for `capacity` writes (caller contract).
            unsafe { ids.add(i).write(ns.nsid()) };
        }
        namespaces.len() as c_int
    })
}

/// Fills `*info` with the geometry of namespace `nsid`. Fails with `NVME_ERR_NAMESPACE` when
/// the namespace is not active or cannot be used for I/O (the message says why).
///
/// # Safety
/// `ctrlr` is NULL or an open controller handle; `info` is NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvme_ctrlr_get_ns_info(
    ctrlr: *const nvme_ctrlr,
    nsid: u32,
    info: *mut nvme_ns_info,
) -> c_int {
    guard("nvme_ctrlr_get_ns_info", || {
        check_null!("nvme_ctrlr_get_ns_info", ctrlr, info);
        // SAFETY: `ctrlr` is a live handle (caller contract).
        let ctrl = unsafe { &(&*ctrlr).shared.ctrl };
        match ctrl.namespace(nsid) {
            Ok(ns) => {
                // SAFETY: `info` is non-null and valid for a write (caller contract).
                unsafe {
                    info.write(nvme_ns_info {
                        nsid,
                        block_size: ns.block_size(),
                        blocks: ns.blocks(),
                    })
                };
                NVME_OK
            }
            Err(e) => fail_with(&e),
        }
    })
}

// ---- Bring-up options (`struct nvme_ctrlr_opts`): the choices of `ControllerOptions` that
// front ends such as the fio engine offer their users (shadow doorbells, SGLs), the open
// calls that take them, and what is in effect.

/// `nvme_ctrlr_opts.shadow_doorbells`: the driver's platform rule (the default): shadow
/// doorbells where the controller offers them and they pay (not under an emulating
/// hypervisor that traps every doorbell write anyway).
pub const NVME_SHADOW_DOORBELLS_AUTO: u32 = 0;
/// `nvme_ctrlr_opts.shadow_doorbells`: wherever the controller offers Doorbell Buffer Config.
pub const NVME_SHADOW_DOORBELLS_ALWAYS: u32 = 1;
/// `nvme_ctrlr_opts.shadow_doorbells`: never; MMIO doorbell writes only.
pub const NVME_SHADOW_DOORBELLS_NEVER: u32 = 2;

/// Bring-up options of a PCIe (or emulated) controller (`nvme_ctrlr_open_in_opts`). Fill it
/// with `nvme_ctrlr_opts_init` first, then change what you need.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct nvme_ctrlr_opts {
    /// Shadow doorbells (Doorbell Buffer Config, NVMe Base 2.0 §5.8):
    /// `NVME_SHADOW_DOORBELLS_AUTO` (default), `_ALWAYS` or `_NEVER`.
    pub shadow_doorbells: u32,
    /// Describe the data of reads and writes with an SGL Data Block descriptor (NVMe Base 2.0
    /// §4.1.2) where the controller offers SGLs for I/O (default `true`); `false` forces
    /// PRPs (§4.1.1).
    pub sgl: bool,
}

// The layout C sees: a u32 and a bool, padded to 8 bytes.
const _: () = assert!(std::mem::size_of::<nvme_ctrlr_opts>() == 8);

impl nvme_ctrlr_opts {
    /// The driver's defaults.
    fn defaults() -> Self {
        let d = ControllerOptions::default();
        Self {
            shadow_doorbells: match d.shadow_doorbells {
                ShadowDoorbells::Auto => NVME_SHADOW_DOORBELLS_AUTO,
                ShadowDoorbells::Always => NVME_SHADOW_DOORBELLS_ALWAYS,
                ShadowDoorbells::Never => NVME_SHADOW_DOORBELLS_NEVER,
            },
            sgl: d.sgl,
        }
    }

    /// The driver's options, or `NVME_ERR_INVALID_ARGUMENT` for a value out of range.
    fn to_driver(self, name: &str) -> Result<ControllerOptions, c_int> {
        let shadow = match self.shadow_doorbells {
            NVME_SHADOW_DOORBELLS_AUTO => ShadowDoorbells::Auto,
            NVME_SHADOW_DOORBELLS_ALWAYS => ShadowDoorbells::Always,
            NVME_SHADOW_DOORBELLS_NEVER => ShadowDoorbells::Never,
            other => {
                return Err(fail(
                    NVME_ERR_INVALID_ARGUMENT,
                    format!(
                        "{name}: shadow_doorbells {other} is none of NVME_SHADOW_DOORBELLS_AUTO, \
                         _ALWAYS, _NEVER"
                    ),
                ))
            }
        };
        Ok(ControllerOptions::default()
            .shadow_doorbells(shadow)
            .sgl(self.sgl))
    }
}

/// Fills `*opts` with the driver's defaults (what `nvme_ctrlr_open_in` uses).
///
/// # Safety
/// `opts` is NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvme_ctrlr_opts_init(opts: *mut nvme_ctrlr_opts) -> c_int {
    guard("nvme_ctrlr_opts_init", || {
        check_null!("nvme_ctrlr_opts_init", opts);
        // SAFETY: `opts` is non-null and valid for a write (caller contract).
        unsafe { opts.write(nvme_ctrlr_opts::defaults()) };
        NVME_OK
    })
}

/// Reads `*opts` (NULL: the defaults) into the driver's options.
///
/// # Safety
/// `opts` is NULL or valid for a read.
unsafe fn read_opts(name: &str, opts: *const nvme_ctrlr_opts) -> Result<ControllerOptions, c_int> {
    let opts = if opts.is_null() {
        nvme_ctrlr_opts::defaults()
    } else {
        // SAFETY: `opts` is non-null and valid for a read (caller contract).
        unsafe { opts.read() }
    };
    opts.to_driver(name)
}

/// `nvme_ctrlr_open_in` with bring-up options (`opts` NULL: the defaults). An option the
/// controller cannot honour (SGLs or shadow doorbells it does not offer) is left off; see
/// `nvme_ctrlr_uses_sgl` and `nvme_ctrlr_uses_shadow_doorbells` for what is in effect.
///
/// # Safety
/// `ctx` is NULL or a live context handle; `device` is NULL or a NUL-terminated string;
/// `opts` is NULL or valid for a read; `out` is NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvme_ctrlr_open_in_opts(
    ctx: *const nvme_dma_context,
    device: *const c_char,
    opts: *const nvme_ctrlr_opts,
    out: *mut *mut nvme_ctrlr,
) -> c_int {
    const NAME: &str = "nvme_ctrlr_open_in_opts";
    // SAFETY: `opts` is NULL or valid for a read (caller contract).
    let options = match unsafe { read_opts(NAME, opts) } {
        Ok(o) => o,
        Err(code) => return code,
    };
    // SAFETY: the pointer contracts are the caller's (this function's).
    unsafe { open_in(NAME, ctx, device, options, out) }
}

/// FOR TESTS AND EXAMPLES: `nvme_ctrlr_open_emulated_in` with bring-up options (`opts` NULL:
/// the defaults).
///
/// # Safety
/// `ctx` is NULL or a live context handle; `opts` is NULL or valid for a read; `out` is NULL
/// or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvme_ctrlr_open_emulated_in_opts(
    ctx: *const nvme_dma_context,
    opts: *const nvme_ctrlr_opts,
    out: *mut *mut nvme_ctrlr,
) -> c_int {
    const NAME: &str = "nvme_ctrlr_open_emulated_in_opts";
    // SAFETY: `opts` is NULL or valid for a read (caller contract).
    let options = match unsafe { read_opts(NAME, opts) } {
        Ok(o) => o,
        Err(code) => return code,
    };
    // SAFETY: the pointer contracts are the caller's (this function's).
    unsafe { open_emulated_in(NAME, ctx, options, out) }
}

/// The PCIe controller behind a handle (None for NVMe/TCP).
fn pcie(handle: &nvme_ctrlr) -> Option<&nvme_driver::Controller> {
    match &handle.shared.ctrl {
        AnyController::Pcie(c) => Some(c),
        AnyController::Tcp(_) => None,
    }
}

/// Whether reads and writes of `ctrlr` describe their data with SGLs (1) or PRPs (0);
/// `NVME_ERR_UNSUPPORTED` for an NVMe/TCP controller, `NVME_ERR_NULL_POINTER` for NULL.
///
/// # Safety
/// `ctrlr` is NULL or an open controller handle.
#[no_mangle]
pub unsafe extern "C" fn nvme_ctrlr_uses_sgl(ctrlr: *const nvme_ctrlr) -> c_int {
    guard("nvme_ctrlr_uses_sgl", || {
        check_null!("nvme_ctrlr_uses_sgl", ctrlr);
        // SAFETY: `ctrlr` is a live handle (caller contract).
        match pcie(unsafe { &*ctrlr }) {
            Some(c) => c_int::from(c.sgl()),
            None => fail(
                NVME_ERR_UNSUPPORTED,
                "nvme_ctrlr_uses_sgl: not a PCIe controller",
            ),
        }
    })
}

/// Whether `ctrlr` uses shadow doorbells (1) or MMIO doorbell writes only (0);
/// `NVME_ERR_UNSUPPORTED` for an NVMe/TCP controller, `NVME_ERR_NULL_POINTER` for NULL.
///
/// # Safety
/// `ctrlr` is NULL or an open controller handle.
#[no_mangle]
pub unsafe extern "C" fn nvme_ctrlr_uses_shadow_doorbells(ctrlr: *const nvme_ctrlr) -> c_int {
    guard("nvme_ctrlr_uses_shadow_doorbells", || {
        check_null!("nvme_ctrlr_uses_shadow_doorbells", ctrlr);
        // SAFETY: `ctrlr` is a live handle (caller contract).
        match pcie(unsafe { &*ctrlr }) {
            Some(c) => c_int::from(c.shadow_doorbells()),
            None => fail(
                NVME_ERR_UNSUPPORTED,
                "nvme_ctrlr_uses_shadow_doorbells: not a PCIe controller",
            ),
        }
    })
}
