//! Memory barriers between the CPU and a DMA-capable device, in one place.
//!
//! The driver shares rings with the device in ordinary (write-back) memory and signals it
//! through MMIO doorbells. Three orderings are needed (the same as Linux's `dma_wmb`/`wmb`,
//! `dma_rmb` and `mb`):
//! - [`before_doorbell`]: earlier accesses to DMA memory (SQE and PRP-list stores, CQE loads)
//!   are complete before a following doorbell store (MMIO or shadow) reaches the device;
//! - [`dma_rmb`]: the load of a CQE's phase tag completes before the loads of the rest of it;
//! - [`mb`]: a store is globally visible before a later load (shadow doorbell vs. EventIdx).
//!
//! On x86-64, stores are not reordered with other stores (also to uncached MMIO) and loads
//! not with other loads, so the first two only need to stop the compiler; `mb` is `mfence`
//! (what `fence(SeqCst)` emits). On AArch64 the device is an observer outside the inner
//! shareable domain: `dsb sy` completes earlier loads and stores before a doorbell store and
//! is the full barrier, `dmb oshld` orders loads of DMA memory. Other architectures are refused at build time
//! rather than run with barriers nobody has checked.

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
compile_error!(
    "nvme-vfio has device memory barriers for x86_64 and aarch64 only; add this architecture's \
     in crates/vfio/src/barrier.rs (see Linux's arch/*/include/asm/barrier.h) before using it"
);

use std::sync::atomic::{fence, Ordering};

/// Completes earlier loads and stores of DMA memory before a later doorbell store.
#[inline(always)]
pub fn before_doorbell() {
    #[cfg(target_arch = "x86_64")]
    fence(Ordering::Release);
    #[cfg(target_arch = "aarch64")]
    // SAFETY: a barrier instruction; no memory is accessed.
    unsafe {
        std::arch::asm!("dsb sy", options(nostack, preserves_flags))
    };
}

/// Orders an earlier load from DMA memory (a CQE's phase tag) before later loads from it.
#[inline(always)]
pub fn dma_rmb() {
    #[cfg(target_arch = "x86_64")]
    fence(Ordering::Acquire);
    #[cfg(target_arch = "aarch64")]
    // SAFETY: a barrier instruction; no memory is accessed.
    unsafe {
        std::arch::asm!("dmb oshld", options(nostack, preserves_flags))
    };
}

/// Full barrier: earlier stores are visible to the device before later loads are performed.
#[inline(always)]
pub fn mb() {
    #[cfg(target_arch = "x86_64")]
    fence(Ordering::SeqCst);
    #[cfg(target_arch = "aarch64")]
    // SAFETY: a barrier instruction; no memory is accessed.
    unsafe {
        std::arch::asm!("dsb sy", options(nostack, preserves_flags))
    };
}
