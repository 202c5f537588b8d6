//! [`DmaRegion`]: memory shared with the device for its whole life (queue rings, PRP list
//! pages), reached only through a raw pointer.

use std::fmt;
use std::ptr::NonNull;
use std::sync::Arc;

use super::mapping::Mapping;
use super::{DmaDomain, DmaError, DmaMapper, Iova};

/// Memory shared with the device for its whole life: queue rings, PRP list pages.
///
/// Only raw access is offered; the code that reads or writes it does so with volatile
/// operations in an `unsafe` block that argues why the device is not using those bytes.
pub struct DmaRegion {
    mapping: Arc<Mapping>,
}

impl fmt::Debug for DmaRegion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DmaRegion")
            .field("iova", &self.iova())
            .field("len", &self.len())
            .finish()
    }
}

impl DmaRegion {
    /// Allocates and maps at least `len` bytes (rounded up to pages), zero-filled.
    pub fn allocate(mapper: &Arc<dyn DmaMapper>, len: usize) -> Result<Self, DmaError> {
        Ok(Self {
            mapping: Mapping::allocate(mapper, len)?,
        })
    }

    /// Host address of the first byte; valid for [`DmaRegion::len`] bytes while `self` lives.
    #[inline(always)]
    pub fn as_ptr(&self) -> NonNull<u8> {
        self.mapping.ptr
    }

    /// Device address of the first byte.
    #[inline(always)]
    pub fn iova(&self) -> Iova {
        self.mapping.iova
    }

    /// Length in bytes (a multiple of [`PAGE_SIZE`](super::PAGE_SIZE)).
    #[inline(always)]
    pub fn len(&self) -> usize {
        self.mapping.len
    }

    /// True when empty (never, for an allocated region).
    pub fn is_empty(&self) -> bool {
        self.mapping.len == 0
    }

    /// Whether the memory lies in hugepages.
    pub fn is_hugepage(&self) -> bool {
        self.mapping.hugepages
    }

    /// The IOVA space the region is mapped in.
    #[inline(always)]
    pub fn domain(&self) -> DmaDomain {
        self.mapping.domain
    }

    /// Gives up the region for good: the memory stays allocated and mapped and its IOVA range
    /// is never handed out again. For memory a device may still write when that can no longer
    /// be prevented (a controller that could not be disabled).
    pub fn leak(self) {
        std::mem::forget(self);
    }
}
