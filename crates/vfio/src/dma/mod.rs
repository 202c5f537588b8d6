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
//!
//! Files: this one holds the address and domain types and the [`DmaMapper`] seam; `error.rs`
//! [`DmaError`], `mapping.rs` the shared mapping (allocation, hugepage policy, unmap before
//! free), `region.rs` [`DmaRegion`], `buffer.rs` [`DmaBuffer`].

mod buffer;
mod error;
mod mapping;
mod region;

pub use buffer::DmaBuffer;
pub use error::DmaError;
pub use mapping::{set_hugepage_policy, HugepagePolicy};
pub use region::DmaRegion;

use std::fmt;
use std::num::NonZeroU64;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

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

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::sync::Arc;
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
