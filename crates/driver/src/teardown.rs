//! Stopping a controller's DMA before its memory is released, and leaking the memory where
//! that cannot be confirmed.
//!
//! Every DMA allocation a controller makes (rings, PRP-list pages, shadow doorbells, the
//! identify page, and the buffers users allocate through [`crate::Controller::dma`]) goes
//! through one [`GuardedMapper`], the one of its [`crate::DmaContext`]: controllers that share
//! a context share the guard, since a device that cannot be stopped may reach every IOVA of
//! its IOMMU address space, whichever controller's buffer it was. While the controller is healthy it forwards to the platform's
//! mapper. When a failure leaves commands the device may still run (an admin timeout, a fatal
//! status, a queue that could not be deleted), the controller is stopped: CC.EN cleared and
//! CSTS.RDY=0 awaited (bounded by CAP.TO), then PCI bus mastering cleared. If that cannot be
//! confirmed, the mapper is *retired*: from then on it refuses to unmap, so every allocation
//! of this controller leaks its memory when dropped and its IOVA range is never handed out
//! again (see `nvme_vfio::DmaMapper::unmap`); with a shared context that holds for the
//! allocations of every controller in it. Memory is thus only ever freed once no command can
//! reach it.
//!
//! The guard is a DMA domain of its own ([`DmaDomain::unique`]), not the platform mapper's: a
//! controller accepts only buffers mapped through its context's guard. A buffer allocated
//! straight from the platform mapper (reachable from safe code: `Transport::dma`,
//! `nvme_vfio::DmaContext::mapper`, the emulator's `SimDma`), or through the guard of another
//! context made over the same mapper, would be unmapped and freed by a mapper this guard cannot
//! retire, so it is refused with [`Error::ForeignBuffer`](crate::Error::ForeignBuffer) (the same
//! one compare of domains per submission as before). The IOVAs stay the platform mapper's, so
//! guards over one mapper never hand out overlapping ranges.

use std::ptr::NonNull;
use std::sync::{Arc, OnceLock};

use nvme_vfio::{DmaDomain, DmaError, DmaMapper, Iova};

/// A DMA context's view of the platform mapper that can be retired (see the module docs).
pub(crate) struct GuardedMapper {
    inner: Arc<dyn DmaMapper>,
    /// This guard's own domain, never `inner`'s (see the module docs).
    domain: DmaDomain,
    /// The controller whose failure retired the mapper, once retired.
    retired_by: OnceLock<String>,
}

impl GuardedMapper {
    pub(crate) fn new(inner: Arc<dyn DmaMapper>) -> Self {
        Self {
            inner,
            domain: DmaDomain::unique(),
            retired_by: OnceLock::new(),
        }
    }

    /// The domain of the platform mapper under the guard (which transports must map into).
    pub(crate) fn platform_domain(&self) -> DmaDomain {
        self.inner.domain()
    }

    /// From now on no mapping of this context is removed: their memory leaks and their
    /// IOVA ranges stay reserved. `controller` is the one that could not be stopped.
    pub(crate) fn retire(&self, controller: &str) {
        if self.retired_by.set(controller.to_string()).is_ok() {
            log::error!(
                "{controller}: the controller could not be confirmed stopped; the DMA memory of \
                 its {} (every controller sharing it) will be leaked rather than freed (the \
                 device may still write it)",
                self.domain
            );
        }
    }

    pub(crate) fn is_retired(&self) -> bool {
        self.retired_by.get().is_some()
    }

    fn retired_name(&self) -> &str {
        self.retired_by.get().map_or("?", String::as_str)
    }
}

// SAFETY: a pass-through of `inner`, which upholds the contract; `unmap` may only refuse more
// (keeping mappings alive), never remove a mapping `inner` did not create. `domain` is fixed at
// creation from `DmaDomain::unique`, so no other mapper returns it; the IOVAs are `inner`'s,
// so no two live mappings made through this guard share one.
unsafe impl DmaMapper for GuardedMapper {
    unsafe fn map(&self, vaddr: NonNull<u8>, len: usize) -> Result<Iova, DmaError> {
        if self.is_retired() {
            return Err(DmaError::Map {
                iova: Iova(0),
                len,
                source: std::io::Error::other(format!(
                    "controller {} of this DMA context could not be stopped after a failure",
                    self.retired_name()
                )),
                hint: "; close it and reset the PCI function before using it again",
            });
        }
        // SAFETY: forwarded with the caller's guarantee unchanged.
        unsafe { self.inner.map(vaddr, len) }
    }

    fn unmap(&self, iova: Iova, len: usize) -> Result<(), DmaError> {
        if self.is_retired() {
            return Err(DmaError::Unmap {
                iova,
                len,
                source: std::io::Error::other(format!(
                    "controller {} may still access this memory (it could not be stopped)",
                    self.retired_name()
                )),
            });
        }
        self.inner.unmap(iova, len)
    }

    fn domain(&self) -> DmaDomain {
        self.domain
    }

    fn needs_physically_contiguous(&self) -> bool {
        self.inner.needs_physically_contiguous()
    }
}

/// Whether the controller's DMA has been stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DmaState {
    /// Normal operation.
    Running,
    /// Disabled (CSTS.RDY=0 seen) and bus mastering cleared: memory may be freed.
    Stopped,
    /// Could not be confirmed stopped: the mapper is retired, memory leaks.
    Unstoppable,
}
