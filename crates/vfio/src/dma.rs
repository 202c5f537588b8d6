//! DMA memory: host memory mapped into the device's I/O address space.
//!
//! Two ownership forms, so that safe code can never touch memory the device may be writing:
//! - [`DmaRegion`]: memory shared with the device for its whole life (queue rings, PRP list
//!   pages). It exposes only a raw pointer and the IOVA; the driver's ring module is the only
//!   code that reads or writes it, with volatile accesses.
//! - [`DmaBuffer`]: a CPU-owned data buffer (`&[u8]`/`&mut [u8]` through `Deref`). Submitting
//!   an I/O moves the buffer into the request; the completion moves it back. While the caller
//!   holds a `DmaBuffer`, no command referencing it is in flight.
//!
//! Memory comes from 2 MiB hugepages when available (large allocations), otherwise from
//! ordinary anonymous pages (VFIO pins them when they are mapped). Every mapping is removed from
//! the IOMMU before its memory is freed, so a late device write faults in the IOMMU instead of
//! corrupting reused memory.

use std::fmt;
use std::num::NonZeroU64;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

use thiserror::Error;

/// Size of an ordinary page, the granularity of every DMA mapping.
pub const PAGE_SIZE: usize = 4096;
/// Size of a hugetlb page used for large DMA allocations.
pub const HUGEPAGE_SIZE: usize = 2 << 20;
/// Allocations of at least this many bytes try hugepages first.
pub const HUGEPAGE_THRESHOLD: usize = 1 << 20;

/// An address in the device's I/O virtual address space. Never mixed with host pointers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(transparent)]
pub struct Iova(pub u64);

impl Iova {
    /// The address `bytes` further on.
    #[inline(always)]
    pub const fn add(self, bytes: u64) -> Iova {
        Iova(self.0 + bytes)
    }
}

impl fmt::Display for Iova {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

/// Errors of DMA allocation and mapping. New variants may be added (`#[non_exhaustive]`).
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum DmaError {
    /// mmap of host memory failed.
    #[error("cannot allocate {len} bytes of DMA memory ({kind}): {source}")]
    Allocate {
        /// Length in bytes.
        len: usize,
        /// What kind of memory was asked for.
        kind: &'static str,
        /// The underlying I/O error.
        source: std::io::Error,
    },
    /// Hugepages were required but none could be allocated.
    #[error(
        "no free 2 MiB hugepages for a {len}-byte DMA allocation: reserve some with \
         `sudo HUGEMEM=256 ./hugepage-setup.sh config` (or `echo 128 > /proc/sys/vm/nr_hugepages`)"
    )]
    NoHugepages {
        /// Length in bytes.
        len: usize,
    },
    /// The IOVA space reported by the IOMMU has no free range large enough.
    #[error("IOVA space exhausted: no free range of {len} bytes in the IOMMU's valid ranges")]
    IovaExhausted {
        /// Length in bytes.
        len: usize,
    },
    /// The IOMMU refused the mapping (VFIO_IOMMU_MAP_DMA failed).
    #[error("IOMMU mapping of {len} bytes at IOVA {iova} failed: {source}{hint}")]
    Map {
        /// The I/O virtual address.
        iova: Iova,
        /// Length in bytes.
        len: usize,
        /// The underlying I/O error.
        source: std::io::Error,
        /// A hint on the likely cause.
        hint: &'static str,
    },
    /// Removing a mapping failed (VFIO_IOMMU_UNMAP_DMA).
    #[error("IOMMU unmapping of {len} bytes at IOVA {iova} failed: {source}")]
    Unmap {
        /// The I/O virtual address.
        iova: Iova,
        /// Length in bytes.
        len: usize,
        /// The underlying I/O error.
        source: std::io::Error,
    },
    /// Registered user memory does not meet the mapping rules.
    #[error("memory to register must be page-aligned ({PAGE_SIZE} bytes) and non-empty: {what}")]
    BadRegistration {
        /// What is wrong with the memory.
        what: String,
    },
    /// No-IOMMU mode: the memory cannot be given to the device as physical addresses.
    #[error(
        "VFIO no-IOMMU mode needs pinned (private anonymous), physically contiguous hugepage \
         memory for DMA: {reason}"
    )]
    NoIommuMemory {
        /// Why the memory cannot be used.
        reason: String,
    },
    /// A requested size does not fit the address space.
    #[error("DMA allocation of {count} x {len} bytes overflows the address space; ask for less")]
    TooLarge {
        /// How many buffers were asked for.
        count: usize,
        /// Length in bytes.
        len: usize,
    },
    /// The DMA context has no device yet, so no IOMMU backend to map into.
    #[error(
        "this DMA context has no device yet: open a controller in it (e.g. \
         `Controller::open_pci_in`) before allocating or registering buffers"
    )]
    NoDevice,
}

/// One IOVA space (an IOMMU domain: a VFIO container, or the emulator's private space). Every
/// DMA mapping records the domain it lives in, so that a buffer mapped for one controller is
/// never handed to another whose IOVA space gives the same address a different meaning.
///
/// Domains are unique for the life of the process (a counter, never reused).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(transparent)]
pub struct DmaDomain(NonZeroU64);

static NEXT_DOMAIN: AtomicU64 = AtomicU64::new(1);

impl DmaDomain {
    /// A domain id no other call in this process has returned.
    pub fn unique() -> Self {
        let id = NEXT_DOMAIN.fetch_add(1, Ordering::Relaxed);
        DmaDomain(NonZeroU64::new(id).expect("2^64 DMA domains"))
    }

    /// The raw id (for messages).
    pub fn id(self) -> u64 {
        self.0.get()
    }
}

impl fmt::Display for DmaDomain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DMA domain {}", self.0)
    }
}

/// Maps host memory into a device's IOVA space: VFIO type1 in production, the in-process
/// emulator in tests.
///
/// # Safety
/// Implementors promise that an IOVA returned by [`DmaMapper::map`] translates, in the domain
/// [`DmaMapper::domain`] names, to exactly the host memory passed in, until
/// [`DmaMapper::unmap`] succeeds for it; that no two live mappings share an IOVA; and that
/// `domain` returns the same value for the life of the mapper and a value no other mapper
/// returns. The driver hands these IOVAs to a device that writes through them, so a lie here
/// is memory corruption.
pub unsafe trait DmaMapper: Send + Sync {
    /// Maps `[vaddr, vaddr + len)` (page-aligned, `len` a multiple of [`PAGE_SIZE`]) and returns
    /// the IOVA of `vaddr`.
    ///
    /// # Safety
    /// The memory must stay allocated (and not be remapped) until [`DmaMapper::unmap`] has been
    /// called for the returned IOVA and length.
    unsafe fn map(&self, vaddr: NonNull<u8>, len: usize) -> Result<Iova, DmaError>;

    /// Removes a mapping created by [`DmaMapper::map`]. On error the range may still be
    /// reachable by the device: the caller must leak the memory, and the implementor must
    /// never hand the IOVA range out again.
    fn unmap(&self, iova: Iova, len: usize) -> Result<(), DmaError>;

    /// The IOVA space this mapper maps into.
    fn domain(&self) -> DmaDomain;

    /// Whether the device sees physical addresses through this mapper (VFIO no-IOMMU mode): then
    /// every allocation is made of pinned hugepages laid out in one physical range, and `map`
    /// refuses memory that is not.
    fn needs_physically_contiguous(&self) -> bool {
        false
    }
}

/// What to do when hugepages cannot be had.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum HugepagePolicy {
    /// Use hugepages for large allocations, fall back to ordinary pages with one logged notice.
    Prefer = 0,
    /// Fail large allocations with [`DmaError::NoHugepages`] when no hugepage is free.
    Require = 1,
    /// Never use hugepages.
    Off = 2,
}

static POLICY: AtomicU8 = AtomicU8::new(HugepagePolicy::Prefer as u8);
static FALLBACK_NOTICED: AtomicBool = AtomicBool::new(false);

/// Sets the process-wide hugepage policy (default [`HugepagePolicy::Prefer`]).
pub fn set_hugepage_policy(policy: HugepagePolicy) {
    POLICY.store(policy as u8, Ordering::Relaxed);
}

fn hugepage_policy() -> HugepagePolicy {
    match POLICY.load(Ordering::Relaxed) {
        1 => HugepagePolicy::Require,
        2 => HugepagePolicy::Off,
        _ => HugepagePolicy::Prefer,
    }
}

enum Backing {
    /// An anonymous mmap (hugetlb or ordinary pages) that we own and munmap on drop.
    Anonymous { len: usize },
    /// Caller-provided memory, released when the mapping drops.
    User(#[allow(dead_code)] memmap2::MmapMut),
    /// Caller-owned memory registered with [`DmaBuffer::register_raw`]: unmapped on drop,
    /// never freed by us.
    Borrowed,
}

/// One IOMMU mapping of one host allocation.
///
/// INVARIANT: `ptr..ptr+len` is valid host memory owned by this value (through `backing`) and
/// mapped at `iova..iova+len` in `mapper` until `drop`, which unmaps before freeing.
struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
    iova: Iova,
    domain: DmaDomain,
    hugepages: bool,
    mapper: Arc<dyn DmaMapper>,
    backing: Backing,
}

// SAFETY: the mapping owns its memory; access to the bytes is governed by `DmaRegion` (raw,
// unsafe) and `DmaBuffer` (disjoint ranges, unique owner), so sharing the descriptor is fine.
unsafe impl Send for Mapping {}
// SAFETY: as above; `Mapping` itself exposes no interior mutability.
unsafe impl Sync for Mapping {}

/// `len` rounded up to a multiple of `to`, or `None` on overflow.
fn round_up(len: usize, to: usize) -> Option<usize> {
    len.div_ceil(to).checked_mul(to)
}

/// Excludes `[ptr, ptr + len)` from `fork()` children (`MADV_DONTFORK`): pinned DMA pages must
/// not become copy-on-write in the parent when the process forks (a database running a backup
/// or `system()`), or the device keeps writing the old pages while the parent reads new ones.
fn dont_fork(ptr: NonNull<u8>, len: usize) -> std::io::Result<()> {
    // SAFETY: advice on a range we own; MADV_DONTFORK changes no contents.
    let rc = unsafe { libc::madvise(ptr.as_ptr().cast(), len, libc::MADV_DONTFORK) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

fn mmap_anonymous(len: usize, huge: bool) -> std::io::Result<NonNull<u8>> {
    let mut flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE;
    if huge {
        // MAP_HUGE_* encodes log2 of the page size: ask for 2 MiB pages explicitly.
        let huge_log2 = HUGEPAGE_SIZE.trailing_zeros() as libc::c_int;
        flags |= libc::MAP_HUGETLB | (huge_log2 << libc::MAP_HUGE_SHIFT);
    }
    // SAFETY: anonymous mapping with no address hint; the kernel picks the range.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            flags,
            -1,
            0,
        )
    };
    if ptr == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error());
    }
    let ptr = NonNull::new(ptr.cast()).expect("mmap returned null without MAP_FAILED");
    if let Err(e) = dont_fork(ptr, len) {
        // SAFETY: our own fresh mapping, not yet shared with anyone.
        unsafe { libc::munmap(ptr.as_ptr().cast(), len) };
        return Err(e);
    }
    Ok(ptr)
}

impl Mapping {
    fn allocate(mapper: &Arc<dyn DmaMapper>, len: usize) -> Result<Arc<Self>, DmaError> {
        let too_large = DmaError::TooLarge { count: 1, len };
        let len = round_up(len.max(1), PAGE_SIZE).ok_or(too_large)?;
        let policy = hugepage_policy();
        let want_huge = policy != HugepagePolicy::Off && len >= HUGEPAGE_THRESHOLD;
        let (ptr, len, hugepages) = if mapper.needs_physically_contiguous() {
            let huge_len =
                round_up(len, HUGEPAGE_SIZE).ok_or(DmaError::TooLarge { count: 1, len })?;
            let ptr = crate::pagemap::allocate_contiguous_hugepages(huge_len)?;
            if let Err(e) = dont_fork(ptr, huge_len) {
                // SAFETY: our own fresh mapping, not yet shared with anyone.
                unsafe { libc::munmap(ptr.as_ptr().cast(), huge_len) };
                return Err(DmaError::Allocate {
                    len: huge_len,
                    kind: "2 MiB hugepages",
                    source: e,
                });
            }
            (ptr, huge_len, true)
        } else if want_huge {
            let huge_len =
                round_up(len, HUGEPAGE_SIZE).ok_or(DmaError::TooLarge { count: 1, len })?;
            match mmap_anonymous(huge_len, true) {
                Ok(ptr) => (ptr, huge_len, true),
                Err(_) if policy == HugepagePolicy::Require => {
                    return Err(DmaError::NoHugepages { len: huge_len })
                }
                Err(e) => {
                    if !FALLBACK_NOTICED.swap(true, Ordering::Relaxed) {
                        log::info!(
                            "no 2 MiB hugepages available ({e}); DMA memory falls back to 4 KiB \
                             pages (reserve hugepages with `HUGEMEM=256 ./hugepage-setup.sh config`)"
                        );
                    }
                    let ptr = mmap_anonymous(len, false).map_err(|source| DmaError::Allocate {
                        len,
                        kind: "4 KiB pages",
                        source,
                    })?;
                    (ptr, len, false)
                }
            }
        } else {
            let ptr = mmap_anonymous(len, false).map_err(|source| DmaError::Allocate {
                len,
                kind: "4 KiB pages",
                source,
            })?;
            (ptr, len, false)
        };
        // SAFETY: the memory was just mmapped by us and is released only in `drop`, after
        // `unmap`.
        let iova = match unsafe { mapper.map(ptr, len) } {
            Ok(iova) => iova,
            Err(e) => {
                // SAFETY: unmapping our own fresh anonymous mapping.
                unsafe { libc::munmap(ptr.as_ptr().cast(), len) };
                return Err(e);
            }
        };
        Ok(Arc::new(Mapping {
            ptr,
            len,
            iova,
            domain: mapper.domain(),
            hugepages,
            mapper: mapper.clone(),
            backing: Backing::Anonymous { len },
        }))
    }

    fn register(
        mapper: &Arc<dyn DmaMapper>,
        mut mem: memmap2::MmapMut,
    ) -> Result<Arc<Self>, DmaError> {
        let len = mem.len();
        let ptr = NonNull::new(mem.as_mut_ptr()).ok_or_else(|| DmaError::BadRegistration {
            what: "null pointer".into(),
        })?;
        if len == 0 || len % PAGE_SIZE != 0 || ptr.as_ptr() as usize % PAGE_SIZE != 0 {
            return Err(DmaError::BadRegistration {
                what: format!("{len} bytes at {:p}", ptr.as_ptr()),
            });
        }
        dont_fork(ptr, len).map_err(|e| DmaError::BadRegistration {
            what: format!("madvise(MADV_DONTFORK) on {len} bytes failed: {e}"),
        })?;
        // SAFETY: the mmap is moved into the mapping below and dropped only after unmap.
        let iova = unsafe { mapper.map(ptr, len) }?;
        Ok(Arc::new(Mapping {
            ptr,
            len,
            iova,
            domain: mapper.domain(),
            hugepages: false,
            mapper: mapper.clone(),
            backing: Backing::User(mem),
        }))
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        if let Err(e) = self.mapper.unmap(self.iova, self.len) {
            // The device may still reach this memory: leaking it is the only safe choice.
            log::error!(
                "{e}; leaking {} bytes of DMA memory rather than freeing it",
                self.len
            );
            if let Backing::User(mem) =
                std::mem::replace(&mut self.backing, Backing::Anonymous { len: 0 })
            {
                std::mem::forget(mem);
            }
            return;
        }
        if let Backing::Anonymous { len } = self.backing {
            if len != 0 {
                // SAFETY: our own anonymous mapping, no longer mapped for the device and no
                // longer referenced (this is the last Arc).
                unsafe { libc::munmap(self.ptr.as_ptr().cast(), len) };
            }
        }
    }
}

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

    /// Length in bytes (a multiple of [`PAGE_SIZE`]).
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

    /// Gives up the buffer for good (see [`DmaRegion::leak`]): for memory a device may still
    /// write.
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::sync::Mutex;

    /// Identity mapper that records live mappings.
    struct Recorder(Mutex<BTreeMap<u64, usize>>, DmaDomain);

    impl Default for Recorder {
        fn default() -> Self {
            Self(Mutex::default(), DmaDomain::unique())
        }
    }

    // SAFETY: identity mapping of memory the test keeps alive; ids come from `unique`.
    unsafe impl DmaMapper for Recorder {
        fn domain(&self) -> DmaDomain {
            self.1
        }
        unsafe fn map(&self, vaddr: NonNull<u8>, len: usize) -> Result<Iova, DmaError> {
            self.0.lock().unwrap().insert(vaddr.as_ptr() as u64, len);
            Ok(Iova(vaddr.as_ptr() as u64))
        }
        fn unmap(&self, iova: Iova, len: usize) -> Result<(), DmaError> {
            assert_eq!(self.0.lock().unwrap().remove(&iova.0), Some(len));
            Ok(())
        }
    }

    #[test]
    fn buffers_share_one_mapping_and_unmap_when_last_drops() {
        let rec = Arc::new(Recorder::default());
        let mapper: Arc<dyn DmaMapper> = rec.clone();
        let mut bufs = DmaBuffer::allocate_many(&mapper, 3, 512).unwrap();
        assert_eq!(rec.0.lock().unwrap().len(), 1);
        assert_eq!(bufs[1].iova().0 - bufs[0].iova().0, PAGE_SIZE as u64);
        bufs[2].fill(0xab);
        assert!(bufs[0].iter().all(|&b| b == 0));
        let last = bufs.pop().unwrap();
        drop(bufs);
        assert_eq!(rec.0.lock().unwrap().len(), 1);
        assert!(last.iter().all(|&b| b == 0xab));
        drop(last);
        assert!(rec.0.lock().unwrap().is_empty());
    }

    #[test]
    fn split_keeps_ranges_disjoint() {
        let mapper: Arc<dyn DmaMapper> = Arc::new(Recorder::default());
        let buf = DmaBuffer::allocate(&mapper, 8192).unwrap();
        let base = buf.iova();
        let (mut a, mut b) = buf.split_at(4096).unwrap();
        a.fill(1);
        b.fill(2);
        assert_eq!(b.iova(), base.add(4096));
        assert!(a.iter().all(|&x| x == 1) && b.iter().all(|&x| x == 2));
        assert!(a.split_at(5000).is_err());
    }
    #[test]
    fn huge_sizes_are_errors_not_wraps() {
        let mapper: Arc<dyn DmaMapper> = Arc::new(Recorder::default());
        for (count, len) in [
            (usize::MAX / PAGE_SIZE + 2, PAGE_SIZE),
            (2, usize::MAX),
            (2, usize::MAX - PAGE_SIZE),
            (1 << 40, 1 << 30),
        ] {
            assert!(
                matches!(
                    DmaBuffer::allocate_many(&mapper, count, len),
                    Err(DmaError::TooLarge { .. })
                ),
                "{count} x {len}"
            );
        }
        assert!(matches!(
            DmaBuffer::allocate(&mapper, usize::MAX),
            Err(DmaError::TooLarge { .. })
        ));
    }

    #[test]
    fn buffers_know_their_domain() {
        let a: Arc<dyn DmaMapper> = Arc::new(Recorder::default());
        let b: Arc<dyn DmaMapper> = Arc::new(Recorder::default());
        assert_ne!(a.domain(), b.domain());
        let x = DmaBuffer::allocate(&a, 100).unwrap();
        let (x1, x2) = x.split_at(10).unwrap();
        assert_eq!(x1.domain(), a.domain());
        assert_eq!(x2.domain(), a.domain());
        assert_eq!(DmaRegion::allocate(&b, 1).unwrap().domain(), b.domain());
    }

    /// The `VmFlags` line of the /proc/self/smaps entry that contains `addr`.
    fn vm_flags(addr: usize) -> String {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let mut inside = false;
        for line in smaps.lines() {
            if let Some((range, _)) = line.split_once(' ') {
                if let Some((lo, hi)) = range.split_once('-') {
                    if let (Ok(lo), Ok(hi)) =
                        (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
                    {
                        inside = lo <= addr && addr < hi;
                        continue;
                    }
                }
            }
            if inside && line.starts_with("VmFlags:") {
                return line.to_string();
            }
        }
        panic!("no smaps entry for {addr:#x}");
    }

    #[test]
    fn dma_memory_is_not_inherited_by_fork() {
        let mapper: Arc<dyn DmaMapper> = Arc::new(Recorder::default());
        let mut buf = DmaBuffer::allocate(&mapper, 3 * PAGE_SIZE).unwrap();
        let flags = vm_flags(buf.as_ptr() as usize);
        assert!(
            flags.split_whitespace().any(|f| f == "dc"),
            "DMA memory lacks MADV_DONTFORK: {flags}"
        );
        // "dc" is VM_DONTCOPY, the flag MADV_DONTFORK sets.
        // A fork must leave the parent's pages where the IOMMU maps them: write before and after
        // and check the parent still sees the same physical memory through the same pointer.
        buf.fill(0x5a);
        // SAFETY: the child only calls async-signal-safe `_exit`.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // SAFETY: terminating the child without running Rust destructors.
            unsafe { libc::_exit(0) };
        }
        assert!(pid > 0);
        let mut status = 0;
        // SAFETY: waiting for our own child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        buf.fill(0xa5);
        assert!(buf.iter().all(|&b| b == 0xa5));
        let mem = memmap2::MmapMut::map_anon(PAGE_SIZE).unwrap();
        let reg = DmaBuffer::register(&mapper, mem).unwrap();
        let flags = vm_flags(reg.as_ptr() as usize);
        assert!(flags.split_whitespace().any(|f| f == "dc"), "{flags}");
    }
}
