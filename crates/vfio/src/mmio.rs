//! Volatile access to a memory-mapped register window (a PCI BAR, or the in-process
//! emulator's register page).
//!
//! This is the only place where device registers are dereferenced. Every access is volatile,
//! naturally aligned and bounds-checked against the window, so callers never hold a `&T` to
//! device memory.
//!
//! INVARIANT (`Mmio`): `ptr` is valid for volatile reads and writes of `len` bytes for as long
//! as `owner` is alive; `owner` keeps the mapping (mmap of a BAR, or emulator memory) alive.
//!
//! Atomic windows (the in-process emulator's register page, [`Mmio::new_atomic`]) exist only
//! with the `emulator` feature, which `nvme-sim` turns on. Without it (a build for real
//! hardware: no emulator in the dependency graph) the access mode is a one-variant, zero-sized
//! type, so a register access or a doorbell ring is the volatile store alone: no mode field is
//! loaded or compared per access.

use std::any::Any;
use std::fmt;
use std::ptr::NonNull;
#[cfg(feature = "emulator")]
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

/// Anything that keeps a register window mapped (a VFIO device with its BAR mmap, an emulator).
pub type MappingOwner = Arc<dyn Any + Send + Sync>;

/// How the window's words are accessed. Chosen when the window is made; without the
/// `emulator` feature there is only one choice and the type is zero-sized.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Access {
    /// Device memory (a BAR): volatile loads and stores.
    Volatile,
    /// Ordinary memory that another thread of this process serves with atomics (the
    /// in-process emulator): atomic loads and stores, so both sides agree under Rust's memory
    /// model (mixing volatile and atomic accesses to one word would be a data race).
    #[cfg(feature = "emulator")]
    Atomic,
}

// A build for real hardware carries no access mode: nothing to load or branch on per access.
#[cfg(not(feature = "emulator"))]
const _: () = assert!(std::mem::size_of::<Access>() == 0);

/// A mapped register window.
#[derive(Clone)]
pub struct Mmio {
    ptr: NonNull<u8>,
    len: usize,
    access: Access,
    owner: MappingOwner,
}

// SAFETY: the window is plain device (or emulator) memory accessed only with volatile
// operations; by the type invariant it stays mapped while `owner` lives, and `owner` is
// `Send + Sync`.
unsafe impl Send for Mmio {}
// SAFETY: as above; concurrent volatile accesses to device registers are what hardware sees
// from several CPUs anyway, and the driver serialises the registers that need it.
unsafe impl Sync for Mmio {}

impl fmt::Debug for Mmio {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mmio")
            .field("ptr", &self.ptr)
            .field("len", &self.len)
            .finish()
    }
}

impl Mmio {
    /// Wraps a register window.
    ///
    /// # Safety
    /// `ptr` must be valid for volatile reads and writes of `len` bytes, aligned to 4 bytes, for
    /// as long as `owner` (or any clone of it) is alive.
    pub unsafe fn new(ptr: NonNull<u8>, len: usize, owner: MappingOwner) -> Self {
        Self {
            ptr,
            len,
            access: Access::Volatile,
            owner,
        }
    }

    /// Wraps ordinary memory that another thread serves as registers with atomic 32-bit
    /// accesses (an in-process emulated device); this window then uses atomics too.
    ///
    /// # Safety
    /// As [`Mmio::new`]; in addition every other access to these words must be atomic.
    #[cfg(feature = "emulator")]
    pub unsafe fn new_atomic(ptr: NonNull<u8>, len: usize, owner: MappingOwner) -> Self {
        Self {
            ptr,
            len,
            access: Access::Atomic,
            owner,
        }
    }

    /// Length of the window in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when the window is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    #[inline]
    fn check(&self, offset: usize, size: usize) {
        assert!(
            offset % size == 0 && offset.checked_add(size).is_some_and(|end| end <= self.len),
            "register access at {offset:#x} (size {size}) outside the {:#x}-byte window",
            self.len
        );
    }

    /// Volatile 32-bit read at `offset`. Panics if the offset is misaligned or out of the
    /// window (register offsets are spec constants, so that is a driver bug).
    #[inline]
    pub fn read32(&self, offset: usize) -> u32 {
        self.check(offset, 4);
        // SAFETY: in bounds and aligned (checked above); valid by the type invariant.
        let ptr = unsafe { self.ptr.as_ptr().add(offset).cast::<u32>() };
        match self.access {
            // SAFETY: valid, aligned register (above).
            Access::Volatile => unsafe { ptr.read_volatile() },
            // SAFETY: valid and aligned; every access to these words is atomic (`new_atomic`).
            #[cfg(feature = "emulator")]
            Access::Atomic => unsafe { AtomicU32::from_ptr(ptr) }.load(Ordering::Acquire),
        }
    }

    /// Volatile 32-bit write at `offset`.
    #[inline]
    pub fn write32(&self, offset: usize, value: u32) {
        self.check(offset, 4);
        // SAFETY: in bounds and aligned (checked above); valid by the type invariant.
        let ptr = unsafe { self.ptr.as_ptr().add(offset).cast::<u32>() };
        match self.access {
            // SAFETY: valid, aligned register (above).
            Access::Volatile => unsafe { ptr.write_volatile(value) },
            // SAFETY: valid and aligned; every access to these words is atomic (`new_atomic`).
            #[cfg(feature = "emulator")]
            Access::Atomic => unsafe { AtomicU32::from_ptr(ptr) }.store(value, Ordering::Release),
        }
    }

    /// Whether this window uses atomic accesses (memory another thread of this process serves
    /// as registers, see [`Mmio::new_atomic`]) rather than volatile ones (a device BAR).
    pub fn is_atomic(&self) -> bool {
        #[cfg(feature = "emulator")]
        {
            self.access == Access::Atomic
        }
        #[cfg(not(feature = "emulator"))]
        {
            false
        }
    }

    /// Whether `offset..offset + 4` is a dword inside the window (for offsets computed from
    /// device-reported values, which must be checked before [`Mmio::doorbell`]).
    pub fn contains_dword(&self, offset: usize) -> bool {
        offset % 4 == 0 && offset.checked_add(4).is_some_and(|end| end <= self.len)
    }

    /// 64-bit register read as two 32-bit reads, low dword first (NVMe PCIe transport allows
    /// 64-bit registers to be accessed as a pair of 32-bit accesses).
    pub fn read64(&self, offset: usize) -> u64 {
        self.check(offset, 8);
        let lo = self.read32(offset) as u64;
        let hi = self.read32(offset + 4) as u64;
        lo | (hi << 32)
    }

    /// 64-bit register write as two 32-bit writes, low dword first.
    pub fn write64(&self, offset: usize, value: u64) {
        self.check(offset, 8);
        self.write32(offset, value as u32);
        self.write32(offset + 4, (value >> 32) as u32);
    }

    /// A doorbell at `offset`, checked once here so that ringing it costs one store.
    pub fn doorbell(&self, offset: usize) -> Doorbell {
        self.check(offset, 4);
        // SAFETY: checked in bounds and aligned above; the pointer is derived from a valid
        // non-null base.
        let ptr = unsafe { NonNull::new_unchecked(self.ptr.as_ptr().add(offset).cast::<u32>()) };
        Doorbell {
            ptr,
            access: self.access,
            _owner: self.owner.clone(),
        }
    }
}

/// One 32-bit doorbell register (SQ tail or CQ head).
///
/// INVARIANT: `ptr` is a valid, aligned 32-bit register inside a window kept alive by `_owner`.
pub struct Doorbell {
    ptr: NonNull<u32>,
    access: Access,
    _owner: MappingOwner,
}

// SAFETY: see `Mmio`; the doorbell is a register inside a window kept alive by `_owner`.
unsafe impl Send for Doorbell {}

impl fmt::Debug for Doorbell {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Doorbell").field("ptr", &self.ptr).finish()
    }
}

impl Doorbell {
    /// Writes `value` to the doorbell (one store: volatile to a device, atomic to an
    /// in-process emulator). The caller orders its ring writes before it with
    /// [`crate::barrier::before_doorbell`]. Without the `emulator` feature this is the volatile
    /// store and nothing else (`Access` is zero-sized there).
    #[inline(always)]
    pub fn ring(&self, value: u32) {
        match self.access {
            // SAFETY: valid and aligned by the type invariant.
            Access::Volatile => unsafe { self.ptr.as_ptr().write_volatile(value) },
            #[cfg(feature = "emulator")]
            Access::Atomic => {
                // SAFETY: valid and aligned; all accesses to the word are atomic (`new_atomic`).
                unsafe { AtomicU32::from_ptr(self.ptr.as_ptr()) }.store(value, Ordering::Release)
            }
        }
    }
}
