//! [`DmaBuffer`]: a CPU-owned data buffer in DMA memory, a byte range of one mapping; the
//! accessors the I/O path uses per request (`iova`, `len`, `domain`) are `inline(always)`.

use std::fmt;
use std::ptr::NonNull;
use std::sync::Arc;

use super::mapping::{dont_fork, round_up, Backing, Mapping};
use super::{DmaDomain, DmaError, DmaMapper, Iova, PAGE_SIZE};

/// A CPU-owned data buffer in DMA memory.
///
/// INVARIANT: `[offset, offset + len)` of `mapping` is referenced by no other `DmaBuffer`, and no
/// command that references it is in flight while this value is reachable by safe code.
pub struct DmaBuffer {
    mapping: Arc<Mapping>,
    offset: usize,
    len: usize,
}

impl fmt::Debug for DmaBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DmaBuffer")
            .field("iova", &self.iova())
            .field("len", &self.len)
            .finish()
    }
}

impl DmaBuffer {
    /// Allocates one zero-filled buffer of `len` bytes (page-aligned; the mapping is rounded
    /// up to whole pages).
    pub fn allocate(mapper: &Arc<dyn DmaMapper>, len: usize) -> Result<Self, DmaError> {
        let mapping = Mapping::allocate(mapper, len)?;
        Ok(Self {
            mapping,
            offset: 0,
            len,
        })
    }

    /// Allocates `count` page-aligned buffers of `len` bytes each from one mapping (one IOMMU
    /// entry, hugepage-backed when large), e.g. the buffers of a benchmark's queue depth.
    pub fn allocate_many(
        mapper: &Arc<dyn DmaMapper>,
        count: usize,
        len: usize,
    ) -> Result<Vec<Self>, DmaError> {
        let too_large = || DmaError::TooLarge { count, len };
        let stride = round_up(len.max(1), PAGE_SIZE).ok_or_else(too_large)?;
        let total = stride.checked_mul(count.max(1)).ok_or_else(too_large)?;
        if isize::try_from(total).is_err() {
            return Err(too_large());
        }
        let mapping = Mapping::allocate(mapper, total)?;
        Ok((0..count)
            .map(|i| Self {
                mapping: mapping.clone(),
                offset: i * stride,
                len,
            })
            .collect())
    }

    /// Registers memory the caller allocated any way it likes (`posix_memalign`, jemalloc, a
    /// hugetlbfs or shared-memory mapping, an arena): `len` bytes at `ptr`, page-aligned,
    /// whole 4 KiB pages. The result is an ordinary buffer of this mapper's domain: split it
    /// into per-request buffers ([`DmaBuffer::split_at`]) and put pieces back together
    /// ([`DmaBuffer::join`]). The range is unmapped from the IOMMU when the last piece drops
    /// (unregistration); the memory itself is never freed here.
    ///
    /// In VFIO no-IOMMU mode ([`DmaMapper::needs_physically_contiguous`]) nothing pins the
    /// pages, so only private anonymous hugepage memory (`MAP_PRIVATE | MAP_ANONYMOUS |
    /// MAP_HUGETLB`) is accepted; a file-backed or shared mapping (a hugetlbfs file, a memfd,
    /// shared memory) is refused with [`DmaError::NoIommuMemory`] (see
    /// [`check_no_iommu_memory`](crate::pagemap::check_no_iommu_memory)).
    ///
    /// # Safety
    /// Until every piece of the returned buffer has been dropped (or leaked, if the device may
    /// still write it): the memory stays allocated and mapped at `ptr`, is not accessed by
    /// anything but these buffers, and is not registered a second time. A `fork()` child
    /// does not inherit it (it is marked `MADV_DONTFORK`).
    pub unsafe fn register_raw(
        mapper: &Arc<dyn DmaMapper>,
        ptr: NonNull<u8>,
        len: usize,
    ) -> Result<Self, DmaError> {
        if len == 0 || len % PAGE_SIZE != 0 || ptr.as_ptr() as usize % PAGE_SIZE != 0 {
            return Err(DmaError::BadRegistration {
                what: format!("{len} bytes at {:p}", ptr.as_ptr()),
            });
        }
        dont_fork(ptr, len).map_err(|e| DmaError::BadRegistration {
            what: format!("madvise(MADV_DONTFORK) on {len} bytes failed: {e}"),
        })?;
        // SAFETY: the caller keeps the memory allocated until the mapping (held by every
        // piece of the buffer) drops, which unmaps it first.
        let iova = unsafe { mapper.map(ptr, len) }?;
        Ok(Self {
            mapping: Arc::new(Mapping {
                ptr,
                len,
                iova,
                domain: mapper.domain(),
                hugepages: false,
                mapper: mapper.clone(),
                backing: Backing::Borrowed,
            }),
            offset: 0,
            len,
        })
    }

    /// Puts back together two pieces that [`DmaBuffer::split_at`] (or `allocate_many`) made
    /// from one mapping, `self` directly followed by `next`. Gives both back unchanged when
    /// they are not adjacent pieces of the same mapping.
    pub fn join(self, next: DmaBuffer) -> Result<DmaBuffer, (DmaBuffer, DmaBuffer)> {
        if !Arc::ptr_eq(&self.mapping, &next.mapping) || self.offset + self.len != next.offset {
            return Err((self, next));
        }
        Ok(DmaBuffer {
            len: self.len + next.len,
            ..self
        })
    }

    /// Registers caller-owned memory (page-aligned, whole pages) for DMA once; the buffer can
    /// then be reused for any number of I/Os. The memory is unmapped when the buffer drops.
    /// In VFIO no-IOMMU mode only private anonymous hugepage memory is accepted (as for
    /// [`DmaBuffer::register_raw`]): a file mapping is refused with [`DmaError::NoIommuMemory`].
    pub fn register(mapper: &Arc<dyn DmaMapper>, mem: memmap2::MmapMut) -> Result<Self, DmaError> {
        let len = mem.len();
        let mapping = Mapping::register(mapper, mem)?;
        Ok(Self {
            mapping,
            offset: 0,
            len,
        })
    }

    /// Device address of the first byte.
    #[inline(always)]
    pub fn iova(&self) -> Iova {
        self.mapping.iova.add(self.offset as u64)
    }

    /// Length in bytes.
    #[inline(always)]
    pub fn len(&self) -> usize {
        self.len
    }

    /// The IOVA space the buffer is mapped in: a controller accepts only buffers of its own.
    #[inline(always)]
    pub fn domain(&self) -> DmaDomain {
        self.mapping.domain
    }

    /// Gives up the buffer for good (see [`DmaRegion::leak`](super::DmaRegion::leak)): for
    /// memory a device may still write.
    pub fn leak(self) {
        std::mem::forget(self);
    }

    /// True when the buffer has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Splits the buffer at `at` bytes (like `split_at_mut`), e.g. to carve per-request
    /// buffers out of one registered region. Gives the buffer back as `Err` if `at > len`.
    pub fn split_at(self, at: usize) -> Result<(Self, Self), Self> {
        if at > self.len {
            return Err(self);
        }
        let tail = Self {
            mapping: self.mapping.clone(),
            offset: self.offset + at,
            len: self.len - at,
        };
        Ok((Self { len: at, ..self }, tail))
    }
}

impl std::ops::Deref for DmaBuffer {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: in bounds of the mapping; by the type invariant this buffer uniquely owns the
        // range and no device write to it is in flight.
        unsafe { std::slice::from_raw_parts(self.mapping.ptr.as_ptr().add(self.offset), self.len) }
    }
}

impl std::ops::DerefMut for DmaBuffer {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`, and `&mut self` gives exclusive access to the range.
        unsafe {
            std::slice::from_raw_parts_mut(self.mapping.ptr.as_ptr().add(self.offset), self.len)
        }
    }
}
