//! One host allocation mapped into one IOVA space ([`Mapping`]), shared by the regions and
//! buffers carved from it: where the memory comes from (hugepages or ordinary pages, by the
//! process-wide [`HugepagePolicy`]; caller memory), `MADV_DONTFORK`, and unmap-before-free.
//!
//! INVARIANT: a `Mapping`'s memory is freed only after its IOMMU mapping is removed; when the
//! unmap fails, the memory is leaked instead (the device may still reach it).

use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::Arc;

use super::{DmaDomain, DmaError, DmaMapper, Iova, HUGEPAGE_SIZE, HUGEPAGE_THRESHOLD, PAGE_SIZE};

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

pub(super) enum Backing {
    /// An anonymous mmap (hugetlb or ordinary pages) that we own and munmap on drop.
    Anonymous { len: usize },
    /// Caller-provided memory, released when the mapping drops.
    User(#[allow(dead_code)] memmap2::MmapMut),
    /// Caller-owned memory registered with
    /// [`DmaBuffer::register_raw`](super::DmaBuffer::register_raw): unmapped on drop, never
    /// freed by us.
    Borrowed,
}

/// One IOMMU mapping of one host allocation.
///
/// INVARIANT: `ptr..ptr+len` is valid host memory owned by this value (through `backing`) and
/// mapped at `iova..iova+len` in `mapper` until `drop`, which unmaps before freeing.
pub(super) struct Mapping {
    pub(super) ptr: NonNull<u8>,
    pub(super) len: usize,
    pub(super) iova: Iova,
    pub(super) domain: DmaDomain,
    pub(super) hugepages: bool,
    pub(super) mapper: Arc<dyn DmaMapper>,
    pub(super) backing: Backing,
}

// SAFETY: the mapping owns its memory; access to the bytes is governed by `DmaRegion` (raw,
// unsafe) and `DmaBuffer` (disjoint ranges, unique owner), so sharing the descriptor is fine.
unsafe impl Send for Mapping {}
// SAFETY: as above; `Mapping` itself exposes no interior mutability.
unsafe impl Sync for Mapping {}

/// `len` rounded up to a multiple of `to`, or `None` on overflow.
pub(super) fn round_up(len: usize, to: usize) -> Option<usize> {
    len.div_ceil(to).checked_mul(to)
}

/// Excludes `[ptr, ptr + len)` from `fork()` children (`MADV_DONTFORK`): pinned DMA pages must
/// not become copy-on-write in the parent when the process forks (a database running a backup
/// or `system()`), or the device keeps writing the old pages while the parent reads new ones.
pub(super) fn dont_fork(ptr: NonNull<u8>, len: usize) -> std::io::Result<()> {
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
    pub(super) fn allocate(mapper: &Arc<dyn DmaMapper>, len: usize) -> Result<Arc<Self>, DmaError> {
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

    pub(super) fn register(
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
