//! The emulated BAR0: a page-aligned block of [`BAR_SIZE`] bytes of 32-bit registers.
//!
//! The driver reaches it through an [`Mmio`] window made with [`Mmio::new_atomic`], so both the
//! driver and the device thread use atomic 32-bit loads and stores on the same words: no
//! access mixes volatile and atomic operations (a data race under Rust's memory model).
//!
//! INVARIANT: the block is never moved or freed while an [`Mmio`] made by
//! [`RegisterBlock::mmio`] exists (each window holds an `Arc` to it).

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use nvme_vfio::Mmio;

/// Size of the emulated register BAR (controller registers plus doorbells).
pub const BAR_SIZE: usize = 16 * 1024;
const WORDS: usize = BAR_SIZE / 4;
/// Alignment of the block: one page, like a real BAR mapping.
const BAR_ALIGN: usize = 4096;

/// Register memory shared by the driver (through [`Mmio`]) and the device thread.
#[repr(C, align(4096))]
pub struct RegisterBlock {
    words: [AtomicU32; WORDS],
}

const _: () = assert!(std::mem::align_of::<RegisterBlock>() == BAR_ALIGN);
const _: () = assert!(std::mem::size_of::<RegisterBlock>() == BAR_SIZE);

impl RegisterBlock {
    /// A zeroed register block.
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            words: [const { AtomicU32::new(0) }; WORDS],
        })
    }

    /// Loads the 32-bit register at byte `offset` (must be dword aligned and inside the BAR).
    #[inline(always)]
    pub fn load(&self, offset: usize) -> u32 {
        self.words[offset / 4].load(Ordering::Acquire)
    }

    /// Stores the 32-bit register at byte `offset`.
    #[inline(always)]
    pub fn store(&self, offset: usize, value: u32) {
        self.words[offset / 4].store(value, Ordering::Release)
    }

    /// Sets bits in the 32-bit register at byte `offset`.
    pub fn set_bits(&self, offset: usize, bits: u32) {
        self.words[offset / 4].fetch_or(bits, Ordering::AcqRel);
    }

    /// Loads a 64-bit register as two dwords, low first.
    pub fn load64(&self, offset: usize) -> u64 {
        u64::from(self.load(offset)) | (u64::from(self.load(offset + 4)) << 32)
    }

    /// Stores a 64-bit register as two dwords, low first.
    pub fn store64(&self, offset: usize, value: u64) {
        self.store(offset, value as u32);
        self.store(offset + 4, (value >> 32) as u32);
    }

    /// Zeroes every register from byte `from` to the end of the BAR (doorbells on reset).
    pub fn clear_from(&self, from: usize) {
        for word in &self.words[from / 4..] {
            word.store(0, Ordering::Release);
        }
    }

    /// Sets every register to all ones: what a host reads from a device that is gone.
    pub fn fill_ones(&self) {
        for word in &self.words {
            word.store(u32::MAX, Ordering::Release);
        }
    }

    /// The driver's view of this block.
    pub fn mmio(self: &Arc<Self>) -> Mmio {
        // `AtomicU32` is an `UnsafeCell`, so writing through a pointer derived from `&self` is
        // permitted.
        let ptr = NonNull::from(&self.words).cast::<u8>();
        // SAFETY: `ptr` addresses `BAR_SIZE` bytes of 4096-aligned memory owned by the `Arc`
        // passed as owner, which keeps it alive (and unmoved) as long as any window exists.
        // Every access the device thread makes goes through the `AtomicU32`s of this block.
        unsafe { Mmio::new_atomic(ptr, BAR_SIZE, self.clone()) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mmio_and_atomics_see_the_same_words() {
        let regs = RegisterBlock::new();
        let mmio = regs.mmio();
        // The device thread uses atomics on these words, so the driver's window must too
        // (issue 8, item 13: mixing volatile and atomic accesses is a data race).
        assert!(mmio.is_atomic());
        mmio.write32(0x14, 0xdead_beef);
        assert_eq!(regs.load(0x14), 0xdead_beef);
        regs.store64(0x28, 0x1234_5678_9abc_def0);
        assert_eq!(mmio.read64(0x28), 0x1234_5678_9abc_def0);
        assert_eq!(mmio.len(), BAR_SIZE);
        regs.clear_from(0x20);
        assert_eq!(mmio.read64(0x28), 0);
        assert_eq!(mmio.read32(0x14), 0xdead_beef);
    }
}
