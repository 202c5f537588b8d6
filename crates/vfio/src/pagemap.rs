//! Physical addresses of this process's memory, for VFIO's no-IOMMU mode, where the device is
//! given physical addresses instead of IOVAs.
//!
//! - [`PagemapEntry`]: one 64-bit entry of `/proc/self/pagemap` (see the kernel's
//!   `Documentation/admin-guide/mm/pagemap.rst`): bit 63 present, bit 62 swapped, bits 0-54 the
//!   page frame number. Reading PFNs needs CAP_SYS_ADMIN; without it the kernel reports 0.
//! - [`physical_range`]: the physical address of a virtual range after checking that every 4 KiB
//!   page of it is present and that the frames are consecutive (the device walks PRPs and rings
//!   by adding to the first address, so a buffer must be contiguous in physical memory).
//! - [`hugetlb_covers`]: whether `/proc/self/smaps` shows the range in hugetlb mappings only
//!   (pinned: hugetlb pages are never swapped out or migrated while mapped).
//! - [`check_no_iommu_memory`]: whether the range may be handed to a device as physical
//!   addresses at all: private anonymous hugetlb mappings only. Without an IOMMU nothing pins a
//!   page, so a file-backed mapping (hugetlbfs file, memfd, SysV shared memory) is refused: a
//!   truncate or hole punch of the file would free a page the device still writes.
//! - [`allocate_contiguous_hugepages`]: hugetlb memory whose 2 MiB pages are laid out in
//!   virtual memory in physical order, so that an allocation of several hugepages is one
//!   contiguous physical range when the pages themselves are (typical of a pool reserved early).

use std::fs::File;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::ptr::NonNull;

use crate::dma::{DmaError, HUGEPAGE_SIZE, PAGE_SIZE};

/// Where the kernel exposes this process's page table.
const PAGEMAP: &str = "/proc/self/pagemap";
/// Where the kernel lists this process's mappings with their page sizes.
const SMAPS: &str = "/proc/self/smaps";
/// Bytes per pagemap entry.
const ENTRY_BYTES: usize = 8;
const PRESENT_BIT: u32 = 63;
const SWAPPED_BIT: u32 = 62;
const PFN_MASK: u64 = (1 << 55) - 1;
/// Free 2 MiB hugepages.
const FREE_HUGEPAGES: &str = "/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages";

/// One entry of `/proc/self/pagemap`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PagemapEntry(pub u64);

impl PagemapEntry {
    /// The page is in RAM.
    pub fn present(self) -> bool {
        self.0 >> PRESENT_BIT & 1 == 1
    }

    /// The page is in swap.
    pub fn swapped(self) -> bool {
        self.0 >> SWAPPED_BIT & 1 == 1
    }

    /// The page frame number (0 when not present, or when the reader lacks CAP_SYS_ADMIN).
    pub fn pfn(self) -> u64 {
        if self.present() {
            self.0 & PFN_MASK
        } else {
            0
        }
    }
}

fn refuse(reason: impl Into<String>) -> DmaError {
    DmaError::NoIommuMemory {
        reason: reason.into(),
    }
}

/// Checks `entries` (one per 4 KiB page of a range starting at `vaddr`) for present,
/// consecutive frames; returns the physical address of the first byte.
pub fn contiguous_start(vaddr: usize, entries: &[PagemapEntry]) -> Result<u64, DmaError> {
    let first = *entries.first().ok_or_else(|| refuse("empty range"))?;
    for (i, e) in entries.iter().enumerate() {
        let at = vaddr + i * PAGE_SIZE;
        if !e.present() {
            let state = if e.swapped() {
                "swapped out"
            } else {
                "not populated"
            };
            return Err(refuse(format!("the page at {at:#x} is {state}")));
        }
        if e.pfn() == 0 {
            return Err(refuse(
                "/proc/self/pagemap shows no page frame numbers: reading them needs \
                 CAP_SYS_ADMIN (run as root)",
            ));
        }
        if e.pfn() != first.pfn() + i as u64 {
            return Err(refuse(format!(
                "{} bytes at {vaddr:#x} are not physically contiguous (the page at {at:#x} is \
                 frame {:#x}, not {:#x}); reserve hugepages early (at boot: `hugepages=N` on the \
                 kernel command line) or use smaller buffers (at most {HUGEPAGE_SIZE} bytes)",
                entries.len() * PAGE_SIZE,
                e.pfn(),
                first.pfn() + i as u64
            )));
        }
    }
    Ok(first.pfn() * PAGE_SIZE as u64)
}

/// Reads the pagemap entries of the `len / PAGE_SIZE` pages at `vaddr` (page-aligned).
fn read_entries(vaddr: usize, len: usize) -> Result<Vec<PagemapEntry>, DmaError> {
    let file = File::open(PAGEMAP).map_err(|e| refuse(format!("cannot open {PAGEMAP}: {e}")))?;
    let pages = len / PAGE_SIZE;
    let mut raw = vec![0u8; pages * ENTRY_BYTES];
    file.read_exact_at(&mut raw, (vaddr / PAGE_SIZE * ENTRY_BYTES) as u64)
        .map_err(|e| refuse(format!("cannot read {PAGEMAP}: {e}")))?;
    Ok(raw
        .chunks_exact(ENTRY_BYTES)
        .map(|c| PagemapEntry(u64::from_ne_bytes(c.try_into().expect("8 bytes"))))
        .collect())
}

/// The physical address of `[vaddr, vaddr + len)` (page-aligned, whole pages), which must be
/// present and physically contiguous.
pub fn physical_range(vaddr: usize, len: usize) -> Result<u64, DmaError> {
    if len == 0 || len % PAGE_SIZE != 0 || vaddr % PAGE_SIZE != 0 {
        return Err(refuse(format!(
            "{len} bytes at {vaddr:#x} are not whole pages"
        )));
    }
    contiguous_start(vaddr, &read_entries(vaddr, len)?)
}

/// One mapping (VMA) of `/proc/self/smaps`.
#[derive(Clone, Copy, Debug)]
struct Vma<'a> {
    start: usize,
    end: usize,
    /// The permission field, e.g. `rw-p` (the last letter: `p` private, `s` shared).
    perms: &'a str,
    /// The pathname field: a file, a pseudo-name (`[heap]`, `[anon:..]`), or empty.
    path: &'a str,
    /// `KernelPageSize` in KiB, once its line is seen.
    kernel_page_kib: Option<usize>,
}

impl Vma<'_> {
    fn hugetlb(&self) -> bool {
        self.kernel_page_kib.unwrap_or(0) * 1024 >= HUGEPAGE_SIZE
    }

    fn shared(&self) -> bool {
        self.perms.ends_with('s')
    }

    /// Not backed by a file: no name, a bracketed pseudo-name, or the kernel's internal file
    /// of anonymous hugetlb memory (`MAP_ANONYMOUS | MAP_HUGETLB`).
    fn anonymous(&self) -> bool {
        let path = self.path.strip_suffix(DELETED).unwrap_or(self.path);
        path.is_empty() || path.starts_with('[') || path == ANON_HUGEPAGE
    }
}

/// The name the kernel gives the internal file behind anonymous hugetlb mappings.
const ANON_HUGEPAGE: &str = "/anon_hugepage";
/// What smaps appends to the name of a file that is no longer linked.
const DELETED: &str = " (deleted)";

/// The mappings of `smaps` (in address order).
fn vmas(smaps: &str) -> Vec<Vma<'_>> {
    let mut vmas: Vec<Vma<'_>> = Vec::new();
    for line in smaps.lines() {
        // Header: "start-end perms offset dev inode   pathname" (single spaces up to the
        // inode, then padding).
        let mut fields = line.splitn(6, ' ');
        let range = fields.next().unwrap_or("");
        if let Some((lo, hi)) = range.split_once('-') {
            if let (Ok(start), Ok(end)) =
                (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
            {
                let perms = fields.next().unwrap_or("");
                let path = fields.nth(3).unwrap_or("").trim();
                vmas.push(Vma {
                    start,
                    end,
                    perms,
                    path,
                    kernel_page_kib: None,
                });
                continue;
            }
        }
        if let Some(rest) = line.strip_prefix("KernelPageSize:") {
            if let Some(last) = vmas.last_mut() {
                last.kernel_page_kib = rest.trim().trim_end_matches("kB").trim().parse().ok();
            }
        }
    }
    vmas.sort_unstable_by_key(|v| v.start);
    vmas
}

/// The mappings that cover `range`, in address order; `None` when some byte of it is not
/// mapped (or the range is empty).
fn covering<'a>(smaps: &'a str, range: &Range<usize>) -> Option<Vec<Vma<'a>>> {
    let mut at = range.start;
    let mut out = Vec::new();
    for vma in vmas(smaps) {
        if vma.end <= at || vma.start >= range.end {
            continue;
        }
        if vma.start > at {
            return None;
        }
        out.push(vma);
        at = vma.end;
        if at >= range.end {
            return Some(out);
        }
    }
    None
}

/// Whether `smaps` (the text of `/proc/self/smaps`) shows every byte of `range` in mappings
/// whose kernel page size is at least [`HUGEPAGE_SIZE`] (hugetlb).
pub fn hugetlb_covers(smaps: &str, range: Range<usize>) -> bool {
    covering(smaps, &range).is_some_and(|v| v.iter().all(Vma::hugetlb))
}

/// What to use instead of memory no-IOMMU mode refuses.
const USE_INSTEAD: &str = "allocate DMA memory through the driver (Controller::alloc_buffer, \
                           DmaBuffer::allocate) or register private anonymous hugepage memory \
                           (mmap with MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB)";

/// Whether `smaps` shows `[vaddr, vaddr + len)` as memory a device may be given the physical
/// address of without an IOMMU: private anonymous hugetlb mappings only.
///
/// Nothing pins a page in this mode (VFIO's type1 and iommufd pin every mapped page; here
/// "mapping" is only a lookup), so the page must stay the range's for as long as this process
/// keeps the range mapped, whatever anyone else does:
/// - hugetlb pages are never swapped out;
/// - a file-backed mapping (a hugetlbfs file, a memfd, SysV shared memory), private or shared,
///   loses its pages when the file is truncated or hole-punched, by this process or by any
///   other that has the file, and the freed page is reused while the device still writes it;
/// - a shared anonymous mapping loses them to `MADV_REMOVE`.
pub fn check_no_iommu_memory(smaps: &str, vaddr: usize, len: usize) -> Result<(), DmaError> {
    let range = vaddr..vaddr.saturating_add(len);
    let vmas = covering(smaps, &range).ok_or_else(|| {
        refuse(format!(
            "{len} bytes at {vaddr:#x} are not all mapped in this process"
        ))
    })?;
    if let Some(vma) = vmas.iter().find(|v| !v.anonymous() || v.shared()) {
        let kind = match (vma.anonymous(), vma.shared()) {
            (true, _) => "shared anonymous",
            (false, true) => "file-backed shared",
            (false, false) => "file-backed private",
        };
        let how = if vma.anonymous() {
            "MADV_REMOVE frees them"
        } else {
            "truncating or hole-punching the file (from any process that has it) frees them"
        };
        return Err(refuse(format!(
            "{len} bytes at {vaddr:#x} lie in a {kind} mapping ({} {}, {:#x}-{:#x}): without \
             an IOMMU nothing pins its pages, and {how} while the device still holds their \
             physical addresses; {USE_INSTEAD}",
            vma.perms, vma.path, vma.start, vma.end
        )));
    }
    if !vmas.iter().all(Vma::hugetlb) {
        return Err(refuse(format!(
            "{len} bytes at {vaddr:#x} are not in hugetlb (2 MiB page) mappings, so the kernel \
             may swap or move them; {USE_INSTEAD}"
        )));
    }
    Ok(())
}

/// Checks that `[vaddr, vaddr + len)` is private anonymous hugepage memory
/// ([`check_no_iommu_memory`]) and physically contiguous; returns its physical address.
pub fn pinned_physical_range(vaddr: usize, len: usize) -> Result<u64, DmaError> {
    if len == 0 || len % PAGE_SIZE != 0 || vaddr % PAGE_SIZE != 0 {
        return Err(refuse(format!(
            "{len} bytes at {vaddr:#x} are not whole pages"
        )));
    }
    let smaps =
        std::fs::read_to_string(SMAPS).map_err(|e| refuse(format!("cannot read {SMAPS}: {e}")))?;
    pinned_start(&smaps, vaddr, len, || read_entries(vaddr, len))
}

/// The no-IOMMU decision on `[vaddr, vaddr + len)` (whole pages) given the text of
/// `/proc/self/smaps` and, only once the mappings pass, the range's pagemap entries from
/// `entries`: the physical address of `vaddr`, or why the memory cannot be handed to a device.
pub fn pinned_start(
    smaps: &str,
    vaddr: usize,
    len: usize,
    entries: impl FnOnce() -> Result<Vec<PagemapEntry>, DmaError>,
) -> Result<u64, DmaError> {
    check_no_iommu_memory(smaps, vaddr, len)?;
    contiguous_start(vaddr, &entries()?)
}

/// Orders `frames` (the first frame of each hugepage, in virtual order) by physical address:
/// returns, for each position in the new layout, the index of the page that goes there, if the
/// pages form one contiguous physical range; `None` otherwise.
pub fn contiguous_order(frames: &[u64]) -> Option<Vec<usize>> {
    let mut order: Vec<usize> = (0..frames.len()).collect();
    order.sort_by_key(|&i| frames[i]);
    let pages_per_huge = (HUGEPAGE_SIZE / PAGE_SIZE) as u64;
    order
        .windows(2)
        .all(|w| frames[w[1]] == frames[w[0]] + pages_per_huge)
        .then_some(order)
}

/// Among `frames` (first frame of each hugepage, any order), the indices of `count` pages that
/// form one contiguous physical range, in physical order; `None` if there is no such run.
pub fn contiguous_run(frames: &[u64], count: usize) -> Option<Vec<usize>> {
    if count == 0 || count > frames.len() {
        return None;
    }
    let mut order: Vec<usize> = (0..frames.len()).collect();
    order.sort_by_key(|&i| frames[i]);
    let pages_per_huge = (HUGEPAGE_SIZE / PAGE_SIZE) as u64;
    let mut start = 0;
    for k in 1..=order.len() {
        if k - start == count {
            return Some(order[start..k].to_vec());
        }
        if k < order.len() && frames[order[k]] != frames[order[k - 1]] + pages_per_huge {
            start = k;
        }
    }
    None
}

/// Hugepages of the default size the kernel has free right now (0 when unknown).
fn free_hugepages() -> usize {
    std::fs::read_to_string(FREE_HUGEPAGES)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

/// Most hugepages mapped at once to look for a contiguous run.
const MAX_SCANNED_HUGEPAGES: usize = 4096;

fn mmap_anon(len: usize, extra_flags: libc::c_int, prot: libc::c_int) -> std::io::Result<usize> {
    // SAFETY: an anonymous mapping with no address hint; the kernel picks a fresh range, so no
    // memory of this process is replaced.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            prot,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | extra_flags,
            -1,
            0,
        )
    };
    if ptr == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error());
    }
    Ok(ptr as usize)
}

/// Unmaps a range this module mapped and still owns.
fn unmap(addr: usize, len: usize) {
    if len != 0 {
        // SAFETY: callers pass only ranges they mapped here and that nothing else references.
        unsafe { libc::munmap(addr as *mut libc::c_void, len) };
    }
}

/// `len` bytes (a multiple of [`HUGEPAGE_SIZE`]) of populated hugetlb memory that is one
/// contiguous physical range, or an error saying why not. The caller owns the mapping (munmap).
pub fn allocate_contiguous_hugepages(len: usize) -> Result<NonNull<u8>, DmaError> {
    assert!(len > 0 && len % HUGEPAGE_SIZE == 0, "whole hugepages only");
    let count = len / HUGEPAGE_SIZE;
    let (base, frames) =
        map_hugepages(count).map_err(|e| e.unwrap_or(DmaError::NoHugepages { len }))?;
    if let Some(order) = contiguous_order(&frames) {
        return place(base, &order, count);
    }
    // The kernel handed out pages that are not adjacent (its free list is in no particular
    // order once pages have been used and freed). Map every free page (bounded), keep a
    // contiguous run of `count` of them and give the others back.
    unmap(base, len);
    let scan = free_hugepages().min(MAX_SCANNED_HUGEPAGES);
    if scan > count {
        if let Ok((base, frames)) = map_hugepages(scan) {
            if let Some(run) = contiguous_run(&frames, count) {
                for i in (0..scan).filter(|i| !run.contains(i)) {
                    unmap(base + i * HUGEPAGE_SIZE, HUGEPAGE_SIZE);
                }
                log::debug!("{count} contiguous hugepages found among {scan} free ones");
                return place(base, &run, scan);
            }
            unmap(base, scan * HUGEPAGE_SIZE);
        }
    }
    Err(refuse(format!(
        "no {count} free hugepages form one physical range for a {len}-byte allocation \
         (first try: frames {frames:#x?}; {scan} free pages scanned); reserve hugepages \
         early (at boot: `hugepages=N` on the kernel command line) or use smaller allocations \
         (at most {HUGEPAGE_SIZE} bytes)"
    )))
}

/// Maps `count` populated hugepages; returns the mapping and the first frame of each page.
/// `Err(None)` when the kernel has not that many free.
fn map_hugepages(count: usize) -> Result<(usize, Vec<u64>), Option<DmaError>> {
    let huge_log2 = HUGEPAGE_SIZE.trailing_zeros() as libc::c_int;
    let rw = libc::PROT_READ | libc::PROT_WRITE;
    let len = count * HUGEPAGE_SIZE;
    let base = mmap_anon(
        len,
        libc::MAP_HUGETLB | (huge_log2 << libc::MAP_HUGE_SHIFT) | libc::MAP_POPULATE,
        rw,
    )
    .map_err(|_| None)?;
    let mut frames = Vec::with_capacity(count);
    for i in 0..count {
        match read_entries(base + i * HUGEPAGE_SIZE, PAGE_SIZE).map(|e| e[0]) {
            Ok(e) if e.pfn() != 0 => frames.push(e.pfn()),
            Ok(_) => {
                unmap(base, len);
                return Err(Some(refuse(
                    "/proc/self/pagemap shows no page frame numbers: reading them needs \
                     CAP_SYS_ADMIN (run as root)",
                )));
            }
            Err(e) => {
                unmap(base, len);
                return Err(Some(e));
            }
        }
    }
    Ok((base, frames))
}

/// Lays the pages at `base` + `order[pos]` hugepages out in that order (in place when they
/// already are); `span` is how many hugepages the mapping at `base` covered, for cleanup.
fn place(base: usize, order: &[usize], span: usize) -> Result<NonNull<u8>, DmaError> {
    if order.iter().enumerate().all(|(pos, &i)| pos == i) {
        return Ok(NonNull::new(base as *mut u8).expect("mmap returned null"));
    }
    let target = permute_pages(base, HUGEPAGE_SIZE, order, span)?;
    let ptr = NonNull::new(target as *mut u8).expect("aligned window is not null");
    log::debug!(
        "{} hugepages reordered into physical order at {ptr:p}",
        order.len()
    );
    Ok(ptr)
}

/// Moves the `order.len()` pages of `page` bytes at `base` (our own mapping, `page`-aligned)
/// into a fresh `page`-aligned range where position `pos` holds the page that was at index
/// `order[pos]`; returns the new range's address. `order` must be a permutation. On failure
/// everything (moved or not) is unmapped.
fn permute_pages(
    base: usize,
    page: usize,
    order: &[usize],
    span: usize,
) -> Result<usize, DmaError> {
    let len = order.len() * page;
    // What the pages may still occupy at `base` (holes unmap harmlessly).
    let source = span.max(order.len()) * page;
    // Reserve a `page`-aligned window (hugetlb mremap needs aligned addresses), then mremap
    // each page onto its slot.
    let window = match mmap_anon(len + page, libc::MAP_NORESERVE, libc::PROT_NONE) {
        Ok(w) => w,
        Err(e) => {
            unmap(base, source);
            return Err(refuse(format!("cannot reserve address space: {e}")));
        }
    };
    let target = window.next_multiple_of(page);
    unmap(window, target - window);
    unmap(target + len, window + len + page - (target + len));
    for (pos, &i) in order.iter().enumerate() {
        // SAFETY: moves our own page (base + i * page, mapped by the caller and not yet moved,
        // as `order` is a permutation) onto our own reserved PROT_NONE slot, which it replaces.
        let moved = unsafe {
            libc::mremap(
                (base + i * page) as *mut libc::c_void,
                page,
                page,
                libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED,
                (target + pos * page) as *mut libc::c_void,
            )
        };
        if moved == libc::MAP_FAILED {
            let e = std::io::Error::last_os_error();
            // Pages not moved yet are still at `base`; the window holds the rest. Unmapping both
            // whole ranges releases everything (munmap of a hole is harmless).
            unmap(base, source);
            unmap(target, len);
            return Err(refuse(format!("mremap of a page failed: {e}")));
        }
    }
    Ok(target)
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: u64 = 1 << 63;

    #[test]
    fn a_contiguous_run_is_found_among_scattered_pages() {
        let h = (HUGEPAGE_SIZE / PAGE_SIZE) as u64;
        // Frames of 8 pages in virtual order: 0x100, 0x100+3h, 0x100+h, 0x100+7h, 0x100+2h, ...
        let frames: Vec<u64> = [0, 3, 1, 7, 2, 9, 4, 12]
            .iter()
            .map(|&k| 0x100 + k * h)
            .collect();
        // 0..=4 are adjacent physically: indices 0 (k=0), 2 (k=1), 4 (k=2), 1 (k=3), 6 (k=4).
        assert_eq!(contiguous_run(&frames, 5), Some(vec![0, 2, 4, 1, 6]));
        assert_eq!(contiguous_run(&frames, 3), Some(vec![0, 2, 4]));
        assert_eq!(contiguous_run(&frames, 6), None);
        assert_eq!(contiguous_run(&frames, 1), Some(vec![0]));
        assert_eq!(contiguous_run(&frames, 0), None);
        assert_eq!(contiguous_run(&frames, 9), None);
        // The run the guest boot hit: every second page free, so 8 in a row do not exist
        // among these, but do among a denser set.
        let sparse: Vec<u64> = (0..8).map(|k| 0x12400 + k * 4 * h).collect();
        assert_eq!(contiguous_run(&sparse, 2), None);
        let dense: Vec<u64> = (0..16).rev().map(|k| 0x12400 + k * h).collect();
        assert_eq!(contiguous_run(&dense, 8), Some((8..16).rev().collect()));
    }

    #[test]
    fn entries_decode_present_swapped_and_pfn() {
        let e = PagemapEntry(P | (1 << 56) | 0x12345);
        assert!(e.present() && !e.swapped());
        assert_eq!(e.pfn(), 0x12345);
        let swapped = PagemapEntry((1 << 62) | 0x77);
        assert!(!swapped.present() && swapped.swapped());
        assert_eq!(
            swapped.pfn(),
            0,
            "a swap entry's low bits are no frame number"
        );
        // Bits 55..=62 are flags, never part of the frame number.
        assert_eq!(PagemapEntry(P | (0xff << 55) | 9).pfn(), 9);
    }

    #[test]
    fn contiguity_is_checked_page_by_page() {
        let run = |first: u64, n: u64| {
            (0..n)
                .map(|i| PagemapEntry(P | (first + i)))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            contiguous_start(0x7000_0000, &run(0x500, 512)).unwrap(),
            0x50_0000
        );
        let mut broken = run(0x500, 4);
        broken[2] = PagemapEntry(P | 0x900);
        let msg = contiguous_start(0x7000_0000, &broken)
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("not physically contiguous") && msg.contains("0x70002000"),
            "{msg}"
        );
        let mut absent = run(0x500, 2);
        absent[1] = PagemapEntry(0);
        let msg = contiguous_start(0, &absent).unwrap_err().to_string();
        assert!(msg.contains("not populated"), "{msg}");
        let unprivileged = vec![PagemapEntry(P); 2];
        let msg = contiguous_start(0, &unprivileged).unwrap_err().to_string();
        assert!(msg.contains("CAP_SYS_ADMIN"), "{msg}");
        assert!(contiguous_start(0, &[]).is_err());
    }

    #[test]
    fn hugepage_order_is_found_or_refused() {
        let step = (HUGEPAGE_SIZE / PAGE_SIZE) as u64;
        assert_eq!(contiguous_order(&[10 * step]), Some(vec![0]));
        assert_eq!(contiguous_order(&[3 * step, 4 * step]), Some(vec![0, 1]));
        // A pool handing out pages in descending order: reversed.
        assert_eq!(
            contiguous_order(&[6 * step, 5 * step, 4 * step]),
            Some(vec![2, 1, 0])
        );
        assert_eq!(contiguous_order(&[4 * step, 6 * step]), None);
    }

    #[test]
    fn pages_are_moved_into_the_given_order() {
        // The same mremap dance as for hugepages, on ordinary 4 KiB pages with markers.
        let count = 5;
        let base = mmap_anon(
            count * PAGE_SIZE,
            libc::MAP_POPULATE,
            libc::PROT_READ | libc::PROT_WRITE,
        )
        .unwrap();
        for i in 0..count {
            // SAFETY: page i of our fresh read-write mapping.
            unsafe { ((base + i * PAGE_SIZE) as *mut u8).write(i as u8 + 1) };
        }
        let order = [3, 0, 4, 2, 1];
        let target = permute_pages(base, PAGE_SIZE, &order, order.len()).unwrap();
        assert_eq!(target % PAGE_SIZE, 0);
        for (pos, &i) in order.iter().enumerate() {
            // SAFETY: page `pos` of the permuted mapping, which we own now.
            let marker = unsafe { ((target + pos * PAGE_SIZE) as *const u8).read() };
            assert_eq!(marker, i as u8 + 1, "slot {pos}");
        }
        unmap(target, count * PAGE_SIZE);
    }

    #[test]
    fn smaps_coverage_needs_hugetlb_for_every_byte() {
        let smaps = "\
7f0000000000-7f0000400000 rw-s 00000000 00:10 123 /anon_hugepage (deleted)
Size:               4096 kB
KernelPageSize:     2048 kB
MMUPageSize:        2048 kB
7f0000400000-7f0000600000 rw-p 00000000 00:00 0
Size:               2048 kB
KernelPageSize:        4 kB
MMUPageSize:           4 kB
7f0000800000-7f0000a00000 rw-p 00000000 00:00 0
KernelPageSize:     2048 kB
";
        assert!(hugetlb_covers(smaps, 0x7f00_0000_0000..0x7f00_0040_0000));
        assert!(hugetlb_covers(smaps, 0x7f00_0020_0000..0x7f00_0030_0000));
        // Runs into the 4 KiB mapping.
        assert!(!hugetlb_covers(smaps, 0x7f00_0020_0000..0x7f00_0050_0000));
        // A hole between mappings.
        assert!(!hugetlb_covers(smaps, 0x7f00_0070_0000..0x7f00_0090_0000));
        assert!(hugetlb_covers(smaps, 0x7f00_0080_0000..0x7f00_00a0_0000));
        // Not mapped at all.
        assert!(!hugetlb_covers(smaps, 0x1000..0x2000));
    }

    /// One mapping of `/proc/self/smaps` in the kernel's format (header, then its page size).
    fn smaps_entry(start: usize, len: usize, perms: &str, path: &str, kib: usize) -> String {
        format!(
            "{start:x}-{:x} {perms} 00000000 00:10 4242                       {path}\n\
             Size:            {} kB\nKernelPageSize:     {kib} kB\nMMUPageSize:        {kib} kB\n",
            start + len,
            len / 1024
        )
    }

    /// `n` present pagemap entries with consecutive frames from `first`.
    fn frames(first: u64, n: usize) -> Vec<PagemapEntry> {
        (0..n as u64)
            .map(|i| PagemapEntry(P | (first + i)))
            .collect()
    }

    const BASE: usize = 0x7f00_0000_0000;

    /// Issue 19 item 4: the memory the driver allocates in no-IOMMU mode (private anonymous
    /// hugetlb, as `allocate_contiguous_hugepages` maps it), and an application's own such
    /// memory, is accepted: its physical address is that of its first frame.
    #[test]
    fn no_iommu_accepts_private_anonymous_hugepages() {
        let pages = 2 * HUGEPAGE_SIZE / PAGE_SIZE;
        for path in ["/anon_hugepage (deleted)", "/anon_hugepage"] {
            let smaps = smaps_entry(BASE, 2 * HUGEPAGE_SIZE, "rw-p", path, 2048);
            let phys = pinned_start(&smaps, BASE, 2 * HUGEPAGE_SIZE, || {
                Ok(frames(0x4_0000, pages))
            })
            .unwrap_or_else(|e| panic!("{path}: {e}"));
            assert_eq!(phys, 0x4_0000 * PAGE_SIZE as u64);
        }
    }

    /// Issue 19 item 4: without an IOMMU nothing pins a page the device holds the physical
    /// address of. A file-backed mapping's pages go back to the system when the file is
    /// truncated or hole-punched (by this process or any other that has the file), a shared
    /// anonymous one's on MADV_REMOVE, so they are refused even though they are hugetlb and
    /// contiguous, with an error saying why and what to use instead.
    #[test]
    fn no_iommu_refuses_file_backed_and_shared_hugepages() {
        let pages = HUGEPAGE_SIZE / PAGE_SIZE;
        for (perms, path) in [
            ("rw-s", "/memfd:pool (deleted)"),
            ("rw-s", "/dev/hugepages/db-pool"),
            ("rw-p", "/dev/hugepages/db-pool"),
            ("rw-s", "/SYSV00000000 (deleted)"),
            ("rw-s", "/anon_hugepage (deleted)"),
        ] {
            let smaps = smaps_entry(BASE, HUGEPAGE_SIZE, perms, path, 2048);
            let err = pinned_start(&smaps, BASE, HUGEPAGE_SIZE, || Ok(frames(0x4_0000, pages)))
                .expect_err(&format!("{perms} {path}: accepted in no-IOMMU mode"));
            let msg = err.to_string();
            assert!(matches!(err, DmaError::NoIommuMemory { .. }), "{msg}");
            assert!(msg.contains(path), "names the mapping: {msg}");
            assert!(msg.contains("pin"), "says why: {msg}");
            assert!(
                msg.contains("Controller::alloc_buffer") && msg.contains("MAP_ANONYMOUS"),
                "says what to use instead: {msg}"
            );
        }
        // One bad mapping in a range that is otherwise fine is enough.
        let smaps = smaps_entry(
            BASE,
            HUGEPAGE_SIZE,
            "rw-p",
            "/anon_hugepage (deleted)",
            2048,
        ) + &smaps_entry(
            BASE + HUGEPAGE_SIZE,
            HUGEPAGE_SIZE,
            "rw-s",
            "/memfd:pool (deleted)",
            2048,
        );
        let err = pinned_start(&smaps, BASE, 2 * HUGEPAGE_SIZE, || {
            Ok(frames(0x4_0000, 2 * pages))
        })
        .unwrap_err();
        assert!(err.to_string().contains("/memfd:pool"), "{err}");
    }

    /// The same with real memory: a memfd mapped MAP_SHARED (what a database's shared buffer
    /// pool often is) is refused, saying it is file-backed.
    #[test]
    fn a_shared_memfd_mapping_is_refused_in_no_iommu_mode() {
        let len = 4 * PAGE_SIZE;
        // SAFETY: a fresh memfd with a NUL-terminated name and no flags.
        let fd = unsafe { libc::memfd_create(c"nvme-vfio-pool".as_ptr(), 0) };
        assert!(fd >= 0, "memfd_create: {}", std::io::Error::last_os_error());
        // SAFETY: `fd` is our own memfd.
        assert_eq!(unsafe { libc::ftruncate(fd, len as libc::off_t) }, 0);
        // SAFETY: a new shared mapping of our own memfd, no address hint: no memory of this
        // process is replaced.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd,
                0,
            )
        };
        assert_ne!(ptr, libc::MAP_FAILED, "{}", std::io::Error::last_os_error());
        let result = pinned_physical_range(ptr as usize, len);
        // SAFETY: our own mapping and fd, not used after this.
        unsafe {
            libc::munmap(ptr, len);
            libc::close(fd);
        }
        let err = result.expect_err("a shared memfd mapping was accepted");
        let msg = err.to_string();
        assert!(
            msg.contains("file-backed") && msg.contains("/memfd:nvme-vfio-pool"),
            "{msg}"
        );
        assert!(
            msg.contains("MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB"),
            "{msg}"
        );
    }

    #[test]
    fn ordinary_heap_memory_is_not_hugetlb() {
        let v = vec![0u8; 3 * PAGE_SIZE];
        let start = (v.as_ptr() as usize).next_multiple_of(PAGE_SIZE);
        let smaps = std::fs::read_to_string(SMAPS).unwrap();
        assert!(!hugetlb_covers(&smaps, start..start + PAGE_SIZE));
        let err = pinned_physical_range(start, PAGE_SIZE).unwrap_err();
        assert!(err.to_string().contains("hugetlb"), "{err}");
    }
}
