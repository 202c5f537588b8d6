//! DMA contexts in the C API: one IOMMU address space that several controllers join, so one
//! buffer pool serves them all (see `nvme_driver::DmaContext`).

use std::ffi::{c_char, c_int, CStr};
use std::sync::Arc;

use crate::emulator::SimDma;
use nvme_device::{parse_target, AnyController, Target};
#[cfg(feature = "emulator")]
use nvme_driver::Transport;
use nvme_driver::{Controller, ControllerOptions, DmaContext};
#[cfg(feature = "emulator")]
use nvme_sim::{SimConfig, SimController};

use super::{fail, fail_with, guard, nvme_buf, nvme_ctrlr, publish_ctrlr};
use crate::buffer::publish_buf;
use crate::errors::*;

/// A DMA context: one IOMMU address space (one VFIO container) that several controllers
/// join. A buffer allocated from the context (`nvme_buf_alloc_in`) or from any of its
/// controllers (`nvme_buf_alloc`) may be submitted on a queue pair of any controller of the
/// context; a buffer of another context is refused with `NVME_ERR_FOREIGN_BUFFER`.
/// Thread-safe.
pub struct nvme_dma_context {
    pub(crate) ctx: DmaContext,
    /// The emulated IOMMU of an emulated context.
    pub(crate) sim_dma: Option<Arc<SimDma>>,
}

// Shared between threads by C callers.
const _: () = {
    const fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<nvme_dma_context>();
};

/// Creates an empty DMA context (a new VFIO container) and stores its handle in `*out`.
/// Open controllers in it with `nvme_ctrlr_open_in`; buffers can be allocated from it once
/// the first controller is open.
///
/// # Safety
/// `out` is NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvme_dma_context_create(out: *mut *mut nvme_dma_context) -> c_int {
    guard("nvme_dma_context_create", || {
        check_null!("nvme_dma_context_create", out);
        match DmaContext::new() {
            Ok(ctx) => {
                let handle = Box::new(nvme_dma_context { ctx, sim_dma: None });
                // SAFETY: `out` is non-null and valid for a write (caller contract).
                unsafe { *out = Box::into_raw(handle) };
                NVME_OK
            }
            Err(e) => fail_with(&e),
        }
    })
}

/// FOR TESTS AND EXAMPLES: creates a DMA context for emulated controllers
/// (`nvme_ctrlr_open_emulated_in`), which then share one emulated IOMMU.
///
/// # Safety
/// `out` is NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvme_dma_context_create_emulated(
    out: *mut *mut nvme_dma_context,
) -> c_int {
    guard("nvme_dma_context_create_emulated", || {
        check_null!("nvme_dma_context_create_emulated", out);
        #[cfg(not(feature = "emulator"))]
        {
            crate::emulator::missing("nvme_dma_context_create_emulated")
        }
        #[cfg(feature = "emulator")]
        {
            let dma = Arc::new(SimDma::new());
            let handle = Box::new(nvme_dma_context {
                ctx: DmaContext::with_mapper(dma.clone()),
                sim_dma: Some(dma),
            });
            // SAFETY: `out` is non-null and valid for a write (caller contract).
            unsafe { *out = Box::into_raw(handle) };
            NVME_OK
        }
    })
}

/// Frees the context handle. Controllers and buffers of the context keep the address space
/// alive until the last of them is gone, so this may come before or after closing them.
/// Freeing NULL does nothing.
///
/// # Safety
/// `ctx` is NULL or a handle from `nvme_dma_context_create*` not freed yet, and no other
/// thread uses it during or after this call.
#[no_mangle]
pub unsafe extern "C" fn nvme_dma_context_free(ctx: *mut nvme_dma_context) -> c_int {
    guard("nvme_dma_context_free", || {
        if !ctx.is_null() {
            // SAFETY: `ctx` came from Box::into_raw and is released once (caller contract).
            drop(unsafe { Box::from_raw(ctx) });
        }
        NVME_OK
    })
}

/// Opens the NVMe controller `device` (as for `nvme_ctrlr_open`) in the DMA context `ctx`
/// (from `nvme_dma_context_create`): its IOMMU group joins the context.
///
/// # Safety
/// `ctx` is NULL or a live context handle; `device` is NULL or a NUL-terminated string;
/// `out` is NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvme_ctrlr_open_in(
    ctx: *const nvme_dma_context,
    device: *const c_char,
    out: *mut *mut nvme_ctrlr,
) -> c_int {
    // SAFETY: the caller's contract is that of `open_in`.
    unsafe {
        open_in(
            "nvme_ctrlr_open_in",
            ctx,
            device,
            ControllerOptions::default(),
            out,
        )
    }
}

/// `nvme_ctrlr_open_in` with the controller options `options` (`nvme_ctrlr_open_in_opts`);
/// `name` is the C function reported in errors.
///
/// # Safety
/// As for `nvme_ctrlr_open_in`.
pub(crate) unsafe fn open_in(
    name: &'static str,
    ctx: *const nvme_dma_context,
    device: *const c_char,
    options: ControllerOptions,
    out: *mut *mut nvme_ctrlr,
) -> c_int {
    guard(name, || {
        check_null!(name = name, ctx, device, out);
        // SAFETY: `device` is non-null and NUL-terminated (caller contract).
        let device = unsafe { CStr::from_ptr(device) };
        let Ok(device) = device.to_str() else {
            return fail(
                NVME_ERR_INVALID_ARGUMENT,
                format!("{name}: device is not valid UTF-8"),
            );
        };
        let address = match parse_target(device) {
            Ok(Target::Pcie(address)) => address,
            Ok(Target::Tcp(_)) => {
                return fail(
                    NVME_ERR_INVALID_ARGUMENT,
                    format!(
                        "{name}: an NVMe/TCP controller has no IOMMU address space to share: \
                         open it with nvme_ctrlr_open"
                    ),
                )
            }
            Ok(Target::Emulator) => {
                return fail(
                    NVME_ERR_INVALID_ARGUMENT,
                    format!(
                        "{name}: `sim` names the in-process emulator: open it with \
                         nvme_ctrlr_open_emulated_in"
                    ),
                )
            }
            Err(e) => return fail(NVME_ERR_INVALID_ARGUMENT, format!("{name}: {e}")),
        };
        // SAFETY: `ctx` is a live handle (caller contract).
        let ctx = unsafe { &(*ctx).ctx };
        match Controller::open_pci_in(ctx, &address.to_string(), options) {
            Ok(ctrl) => {
                // SAFETY: `out` is non-null and valid for a write (caller contract).
                unsafe { publish_ctrlr(AnyController::Pcie(ctrl), None, out) };
                NVME_OK
            }
            Err(e) => fail_with(&e),
        }
    })
}

/// FOR TESTS AND EXAMPLES: starts an emulated controller (as `nvme_ctrlr_open_emulated`) in
/// the emulated DMA context `ctx` (from `nvme_dma_context_create_emulated`).
///
/// # Safety
/// `ctx` is NULL or a live context handle; `out` is NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvme_ctrlr_open_emulated_in(
    ctx: *const nvme_dma_context,
    out: *mut *mut nvme_ctrlr,
) -> c_int {
    // SAFETY: the caller's contract is that of `open_emulated_in`.
    unsafe {
        open_emulated_in(
            "nvme_ctrlr_open_emulated_in",
            ctx,
            ControllerOptions::default(),
            out,
        )
    }
}

/// `nvme_ctrlr_open_emulated_in` with the controller options `options`; `name` is the C
/// function reported in errors.
///
/// # Safety
/// As for `nvme_ctrlr_open_emulated_in`.
pub(crate) unsafe fn open_emulated_in(
    name: &'static str,
    ctx: *const nvme_dma_context,
    options: ControllerOptions,
    out: *mut *mut nvme_ctrlr,
) -> c_int {
    guard(name, || {
        check_null!(name = name, ctx, out);
        // SAFETY: `ctx` is a live handle (caller contract).
        let ctx = unsafe { &*ctx };
        let Some(dma) = &ctx.sim_dma else {
            return fail(
                NVME_ERR_INVALID_ARGUMENT,
                format!(
                    "{name}: the context is a VFIO context; make one with \
                     nvme_dma_context_create_emulated"
                ),
            );
        };
        #[cfg(not(feature = "emulator"))]
        {
            // Unreachable: no emulated context exists in this build (`SimDma` has no values).
            let _ = options;
            match **dma {}
        }
        #[cfg(feature = "emulator")]
        {
            let sim = SimController::start_in(SimConfig::default(), dma.clone());
            let transport = Transport::new(sim.mmio(), sim.dma(), "emulated")
                .with_function_control(sim.function_control());
            match Controller::new_in(&ctx.ctx, transport, options) {
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

/// Allocates a zero-filled DMA buffer of at least `len` bytes (whole 4 KiB pages) from the
/// context `ctx`, valid on every controller of the context, and stores its handle in `*out`.
/// Free it with `nvme_buf_free`.
///
/// # Safety
/// `ctx` is NULL or a live context handle; `out` is NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvme_buf_alloc_in(
    ctx: *const nvme_dma_context,
    len: usize,
    out: *mut *mut nvme_buf,
) -> c_int {
    guard("nvme_buf_alloc_in", || {
        check_null!("nvme_buf_alloc_in", ctx, out);
        if len == 0 {
            return fail(
                NVME_ERR_INVALID_ARGUMENT,
                "nvme_buf_alloc_in: length 0: allocate at least one byte",
            );
        }
        // SAFETY: `ctx` is a live handle (caller contract).
        let ctx = unsafe { &(*ctx).ctx };
        // SAFETY: `out` is non-null and valid for a write (caller contract).
        unsafe { publish_buf(ctx.alloc_buffer(len), out) }
    })
}
