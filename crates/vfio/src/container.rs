//! The VFIO container: one IOMMU address space (type1v2 backend) and the [`DmaMapper`] that
//! maps host memory into it.
//!
//! INVARIANT: `fd` is a container with `group` attached and `VFIO_TYPE1v2_IOMMU` set, so the
//! IOMMU ioctls are valid on it; `iova` knows exactly the IOVAs handed out by `map` and not yet
//! returned by a successful `unmap`. The container owns the group fd because the kernel
//! releases the IOMMU backend when the last group leaves a container: DMA memory, which holds
//! the container, must still be able to unmap itself after the device is closed. Closing the
//! container (drop) removes all its mappings.

use std::fmt;
use std::os::fd::{AsFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::{Mutex, MutexGuard, PoisonError};

use vfio_bindings::bindings::vfio::VFIO_IOMMU_INFO_PGSIZES;

use crate::dma::{DmaDomain, DmaError, DmaMapper, Iova, PAGE_SIZE};
use crate::error::VfioError;
use crate::ioctl;
use crate::iova::{parse_iova_ranges, IovaAllocator, FALLBACK_RANGE};

/// Hint appended to a failed `VFIO_IOMMU_MAP_DMA` with `ENOMEM`: type1 pins the pages and
/// charges them to RLIMIT_MEMLOCK.
const MEMLOCK_HINT: &str =
    " (locked-memory limit too low: raise `ulimit -l` (RLIMIT_MEMLOCK) or run as root)";

/// A VFIO container set up for the type1v2 IOMMU.
pub struct VfioContainer {
    /// Declared first so that it drops (detaching the group) before the container fd closes.
    _group: OwnedFd,
    fd: OwnedFd,
    iova: Mutex<IovaAllocator>,
    domain: DmaDomain,
}

impl fmt::Debug for VfioContainer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VfioContainer")
            .field("fd", &self.fd)
            .finish_non_exhaustive()
    }
}

impl VfioContainer {
    /// Wraps a container fd on which `VFIO_SET_IOMMU(VFIO_TYPE1v2_IOMMU)` succeeded after
    /// `group` was attached, and builds the IOVA allocator from the ranges and page sizes the
    /// IOMMU reports.
    pub(crate) fn new(fd: OwnedFd, group: OwnedFd) -> Result<Self, VfioError> {
        let (info, buf) = ioctl::iommu_info(fd.as_fd()).map_err(|source| VfioError::Ioctl {
            op: "VFIO_IOMMU_GET_INFO",
            source,
        })?;
        let granule = if info.flags & VFIO_IOMMU_INFO_PGSIZES != 0 && info.iova_pgsizes != 0 {
            // The smallest supported IOMMU page size.
            1u64 << info.iova_pgsizes.trailing_zeros()
        } else {
            PAGE_SIZE as u64
        };
        let ranges = match parse_iova_ranges(&buf, info.cap_offset) {
            Some(ranges) if !ranges.is_empty() => ranges,
            _ => {
                log::debug!(
                    "IOMMU reports no valid IOVA ranges (kernel older than 5.4?); using {:#x}..{:#x}",
                    FALLBACK_RANGE.start,
                    FALLBACK_RANGE.end
                );
                vec![FALLBACK_RANGE]
            }
        };
        log::debug!(
            "IOMMU page sizes {:#x}, valid IOVA ranges {ranges:x?}",
            info.iova_pgsizes
        );
        Ok(Self {
            _group: group,
            fd,
            iova: Mutex::new(IovaAllocator::new(&ranges, granule)),
            domain: DmaDomain::unique(),
        })
    }

    fn allocator(&self) -> MutexGuard<'_, IovaAllocator> {
        // The allocator's methods leave it consistent at every panic point, so a poisoned
        // lock still guards valid state.
        self.iova.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

// SAFETY: `map` hands out IOVAs from this container's allocator only after VFIO_IOMMU_MAP_DMA
// mapped them to the caller's memory; `unmap` returns a range to the allocator only after the
// kernel confirmed the whole range unmapped; `domain` is fixed at creation from `unique`.
unsafe impl DmaMapper for VfioContainer {
    fn domain(&self) -> DmaDomain {
        self.domain
    }

    unsafe fn map(&self, vaddr: NonNull<u8>, len: usize) -> Result<Iova, DmaError> {
        let mut space = self.allocator();
        let iova = space.allocate(len)?;
        // SAFETY: the caller of `DmaMapper::map` guarantees the memory stays allocated and is
        // not remapped until `unmap`, which is what `map_dma` requires.
        let mapped =
            unsafe { ioctl::map_dma(self.fd.as_fd(), vaddr.as_ptr() as u64, iova.0, len as u64) };
        if let Err(source) = mapped {
            space.free(iova);
            let hint = if source.raw_os_error() == Some(libc::ENOMEM) {
                MEMLOCK_HINT
            } else {
                ""
            };
            return Err(DmaError::Map {
                iova,
                len,
                source,
                hint,
            });
        }
        log::trace!("mapped {len} bytes at {:p} to IOVA {iova}", vaddr.as_ptr());
        Ok(iova)
    }

    fn unmap(&self, iova: Iova, len: usize) -> Result<(), DmaError> {
        let mut space = self.allocator();
        let unmapped = ioctl::unmap_dma(self.fd.as_fd(), iova.0, len as u64)
            .map_err(|source| DmaError::Unmap { iova, len, source })?;
        if unmapped != len as u64 {
            // Part of the range may still be reachable by the device: keep the IOVA reserved
            // and let the caller leak the memory.
            return Err(DmaError::Unmap {
                iova,
                len,
                source: std::io::Error::other(format!(
                    "the kernel unmapped {unmapped} bytes, not {len}: the range does not match \
                     one mapping"
                )),
            });
        }
        if space.free(iova).is_none() {
            log::warn!("unmapped IOVA {iova} that this container's allocator never handed out");
        }
        Ok(())
    }
}
