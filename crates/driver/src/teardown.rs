//! Stopping a controller's DMA before its memory is released, and leaking the memory where
//! that cannot be confirmed.
//!
//! Every DMA allocation a controller makes (rings, PRP-list pages, shadow doorbells, the
//! identify page, and the buffers users allocate through [`crate::Controller::dma`]) goes
//! through one [`GuardedMapper`]. While the controller is healthy it forwards to the platform's
//! mapper. When a failure leaves commands the device may still run (an admin timeout, a fatal
//! status, a queue that could not be deleted), the controller is stopped: CC.EN cleared and
//! CSTS.RDY=0 awaited (bounded by CAP.TO), then PCI bus mastering cleared. If that cannot be
//! confirmed, the mapper is *retired*: from then on it refuses to unmap, so every allocation
//! of this controller leaks its memory when dropped and its IOVA range is never handed out
//! again (see `nvme_vfio::DmaMapper::unmap`). Memory is thus only ever freed once no command
//! can reach it.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use nvme_vfio::{DmaDomain, DmaError, DmaMapper, Iova};

/// A controller's view of the platform mapper that can be retired (see the module docs).
pub(crate) struct GuardedMapper {
    inner: Arc<dyn DmaMapper>,
    retired: AtomicBool,
    /// Controller name, for the messages.
    name: String,
}

impl GuardedMapper {
    pub(crate) fn new(inner: Arc<dyn DmaMapper>, name: String) -> Self {
        Self {
            inner,
            retired: AtomicBool::new(false),
            name,
        }
    }

    /// From now on no mapping of this controller is removed: their memory leaks and their
    /// IOVA ranges stay reserved.
    pub(crate) fn retire(&self) {
        if !self.retired.swap(true, Ordering::AcqRel) {
            log::error!(
                "{}: the controller could not be confirmed stopped; its DMA memory will be \
                 leaked rather than freed (the device may still write it)",
                self.name
            );
        }
    }

    pub(crate) fn is_retired(&self) -> bool {
        self.retired.load(Ordering::Acquire)
    }
}

// SAFETY: a pass-through of `inner`, which upholds the contract; `unmap` may only refuse more
// (keeping mappings alive), never remove a mapping `inner` did not create. `domain` is
// `inner`'s.
unsafe impl DmaMapper for GuardedMapper {
    unsafe fn map(&self, vaddr: NonNull<u8>, len: usize) -> Result<Iova, DmaError> {
        if self.is_retired() {
            return Err(DmaError::Map {
                iova: Iova(0),
                len,
                source: std::io::Error::other(format!(
                    "controller {} could not be stopped after a failure",
                    self.name
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
                    self.name
                )),
            });
        }
        self.inner.unmap(iova, len)
    }

    fn domain(&self) -> DmaDomain {
        self.inner.domain()
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
