//! The emulator's IOMMU: [`SimDma`] hands out IOVAs from its own address space and the device
//! reaches guest memory only through a [`GuestView`], which translates every access.
//!
//! This is the only module of the crate that dereferences guest (driver) memory.
//!
//! INVARIANT (`SimDma`): every entry `iova -> Region { host, len }` of the map describes host
//! memory that the mapper of [`DmaMapper::map`] promised to keep allocated until
//! [`DmaMapper::unmap`] is called for it. `unmap` removes the entry under the write lock, and
//! every device access happens while a [`GuestView`] holds the read lock, so memory is never
//! touched after `unmap` has returned.
//!
//! IOVAs are deliberately unrelated to host addresses (they start at [`IOVA_BASE`]) and
//! consecutive mappings are separated by an unmapped guard page, so a driver that passes a host
//! pointer as a device address, or overruns a mapping, gets a Data Transfer Error instead of
//! silently working.

use std::collections::BTreeMap;
use std::io;
use std::ptr::NonNull;
use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::sync::{RwLock, RwLockReadGuard};

use nvme_vfio::dma::PAGE_SIZE;
use nvme_vfio::{DmaDomain, DmaError, DmaMapper, Iova};

/// First IOVA handed out. Far above typical user-space heap addresses on purpose.
pub const IOVA_BASE: u64 = 0x1_0000_0000;
/// Unmapped gap left after every mapping (catches overruns).
const GUARD_GAP: u64 = PAGE_SIZE as u64;

/// A device access hit an IOVA range that is not (entirely) mapped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DmaFault {
    /// First byte of the faulting access.
    pub iova: u64,
    /// Length of the access in bytes.
    pub len: usize,
}

#[derive(Clone, Copy, Debug)]
struct Region {
    host: NonNull<u8>,
    len: usize,
}

// SAFETY: `Region` is a plain descriptor of memory whose lifetime is guaranteed by the
// `DmaMapper::map` contract (see the module INVARIANT), not by the thread that created it.
unsafe impl Send for Region {}
// SAFETY: as above; the descriptor itself is immutable.
unsafe impl Sync for Region {}

/// The emulated IOMMU: an [`impl DmaMapper`](DmaMapper) with a private IOVA space.
#[derive(Debug)]
pub struct SimDma {
    domain: DmaDomain,
    next_iova: AtomicU64,
    map: RwLock<BTreeMap<u64, Region>>,
}

impl Default for SimDma {
    fn default() -> Self {
        Self {
            domain: DmaDomain::unique(),
            next_iova: AtomicU64::new(IOVA_BASE),
            map: RwLock::new(BTreeMap::new()),
        }
    }
}

impl SimDma {
    /// Creates an empty IOVA space.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of live mappings (for tests that check the driver unmaps what it maps).
    pub fn mapping_count(&self) -> usize {
        self.map.read().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Waits until no [`GuestView`] is alive (the device thread finished its current poll
    /// pass): every device access started before the call has ended when it returns.
    pub(crate) fn quiesce(&self) {
        drop(self.map.write().unwrap_or_else(|e| e.into_inner()));
    }

    /// Locks the mapping table for reading; device accesses go through the returned view.
    /// Hold it only briefly (one poll pass): `unmap` waits for it.
    pub fn view(&self) -> GuestView<'_> {
        GuestView {
            map: self.map.read().unwrap_or_else(|e| e.into_inner()),
        }
    }
}

// SAFETY: `map` records the caller's memory under a fresh IOVA range (a bump allocator with
// guard gaps: no range is ever handed out twice); the device thread translates IOVAs only
// through that table; `unmap` removes exactly one recorded mapping; `domain` is fixed at
// creation from `DmaDomain::unique`.
unsafe impl DmaMapper for SimDma {
    fn domain(&self) -> DmaDomain {
        self.domain
    }

    unsafe fn map(&self, vaddr: NonNull<u8>, len: usize) -> Result<Iova, DmaError> {
        if len == 0 || len % PAGE_SIZE != 0 || vaddr.as_ptr() as usize % PAGE_SIZE != 0 {
            return Err(DmaError::BadRegistration {
                what: format!("{len} bytes at {:p}", vaddr.as_ptr()),
            });
        }
        let span = len as u64 + GUARD_GAP;
        let iova = self.next_iova.fetch_add(span, Ordering::Relaxed);
        if iova.checked_add(span).is_none() {
            return Err(DmaError::IovaExhausted { len });
        }
        self.map
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(iova, Region { host: vaddr, len });
        log::trace!("sim dma: mapped {len:#x} bytes at IOVA {iova:#x}");
        Ok(Iova(iova))
    }

    fn unmap(&self, iova: Iova, len: usize) -> Result<(), DmaError> {
        let mut map = self.map.write().unwrap_or_else(|e| e.into_inner());
        match map.get(&iova.0) {
            Some(region) if region.len == len => {
                map.remove(&iova.0);
                log::trace!("sim dma: unmapped {len:#x} bytes at IOVA {iova}");
                Ok(())
            }
            found => Err(DmaError::Unmap {
                iova,
                len,
                source: io::Error::new(
                    io::ErrorKind::InvalidInput,
                    match found {
                        Some(r) => format!(
                            "the mapping at this IOVA is {:#x} bytes long; unmap it with the \
                             length it was mapped with",
                            r.len
                        ),
                        None => "no mapping starts at this IOVA; pass the IOVA returned by map()"
                            .to_string(),
                    },
                ),
            }),
        }
    }
}

/// The device's window onto guest memory for one poll pass (holds the mapping table's read
/// lock, so nothing it translates can be unmapped meanwhile).
pub struct GuestView<'a> {
    map: RwLockReadGuard<'a, BTreeMap<u64, Region>>,
}

impl GuestView<'_> {
    /// Host pointer for `[iova, iova + len)`, which must lie inside one mapping.
    #[inline]
    fn translate(&self, iova: u64, len: usize) -> Result<*mut u8, DmaFault> {
        let fault = DmaFault { iova, len };
        let (&start, region) = self.map.range(..=iova).next_back().ok_or(fault)?;
        let offset = (iova - start) as usize;
        let end = offset.checked_add(len).ok_or(fault)?;
        if end > region.len {
            return Err(fault);
        }
        // SAFETY: `offset + len <= region.len`, so the result stays inside the region.
        Ok(unsafe { region.host.as_ptr().add(offset) })
    }

    /// Whether `[iova, iova + len)` is mapped (used to validate queue bases at creation).
    pub fn is_mapped(&self, iova: u64, len: usize) -> bool {
        self.translate(iova, len).is_ok()
    }

    /// Copies guest memory at `iova` into `dst` (a device read / DMA to the device).
    pub fn read(&self, iova: u64, dst: &mut [u8]) -> Result<(), DmaFault> {
        let src = self.translate(iova, dst.len())?;
        // SAFETY: `src` is valid for `dst.len()` bytes while the read lock is held (module
        // INVARIANT); `dst` is a distinct Rust buffer, so they do not overlap. Racing with the
        // driver on these bytes would be a driver bug, exactly as with a real device.
        unsafe { std::ptr::copy_nonoverlapping(src, dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }

    /// Copies `src` into guest memory at `iova` (a device write / DMA from the device).
    pub fn write(&self, iova: u64, src: &[u8]) -> Result<(), DmaFault> {
        let dst = self.translate(iova, src.len())?;
        // SAFETY: as in `read`, with the roles of the buffers swapped.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst, src.len()) };
        Ok(())
    }

    /// Fills `len` bytes of guest memory at `iova` with `byte`.
    pub fn fill(&self, iova: u64, len: usize, byte: u8) -> Result<(), DmaFault> {
        let dst = self.translate(iova, len)?;
        // SAFETY: `dst` is valid for `len` bytes while the read lock is held.
        unsafe { std::ptr::write_bytes(dst, byte, len) };
        Ok(())
    }

    /// Checks that `len` bytes at `iova` are mapped without touching them (null I/O mode).
    pub fn probe(&self, iova: u64, len: usize) -> Result<(), DmaFault> {
        self.translate(iova, len).map(|_| ())
    }

    /// Volatile read of a naturally aligned little-endian dword (ring entries, shadow
    /// doorbells: memory the driver updates concurrently).
    #[inline]
    pub fn read_u32(&self, iova: u64) -> Result<u32, DmaFault> {
        if iova % 4 != 0 {
            return Err(DmaFault { iova, len: 4 });
        }
        let p = self.translate(iova, 4)?;
        // SAFETY: in bounds (translated) and 4-byte aligned: mappings are page aligned and
        // `iova` is a multiple of 4. Volatile because the driver writes it concurrently.
        Ok(u32::from_le(unsafe { p.cast::<u32>().read_volatile() }))
    }

    /// Volatile write of a naturally aligned little-endian dword.
    #[inline]
    pub fn write_u32(&self, iova: u64, value: u32) -> Result<(), DmaFault> {
        if iova % 4 != 0 {
            return Err(DmaFault { iova, len: 4 });
        }
        let p = self.translate(iova, 4)?;
        // SAFETY: in bounds and aligned, as in `read_u32`.
        unsafe { p.cast::<u32>().write_volatile(value.to_le()) };
        Ok(())
    }

    /// Reads `N` consecutive little-endian dwords starting at `iova` (an SQE: 16 dwords).
    #[inline]
    pub fn read_dwords<const N: usize>(&self, iova: u64) -> Result<[u32; N], DmaFault> {
        if iova % 4 != 0 {
            return Err(DmaFault { iova, len: N * 4 });
        }
        let p = self.translate(iova, N * 4)?.cast::<u32>();
        let mut out = [0u32; N];
        for (i, slot) in out.iter_mut().enumerate() {
            // SAFETY: `i < N` and the whole `N * 4`-byte range was translated; aligned as in
            // `read_u32`.
            *slot = u32::from_le(unsafe { p.add(i).read_volatile() });
        }
        Ok(out)
    }

    /// Reads `out.len()` little-endian qwords at `iova` (PRP list entries).
    #[inline]
    pub fn read_qwords(&self, iova: u64, out: &mut [u64]) -> Result<(), DmaFault> {
        if iova % 8 != 0 {
            return Err(DmaFault {
                iova,
                len: out.len() * 8,
            });
        }
        let p = self.translate(iova, out.len() * 8)?.cast::<u64>();
        for (i, slot) in out.iter_mut().enumerate() {
            // SAFETY: `i < out.len()` and the whole range was translated; 8-byte aligned
            // because mappings are page aligned and `iova % 8 == 0`.
            *slot = u64::from_le(unsafe { p.add(i).read_volatile() });
        }
        Ok(())
    }

    /// Writes a completion queue entry so that the driver never sees its phase tag before the
    /// rest of the entry: dwords 0-2 first, a release fence, then dword 3 (CID, status and
    /// phase) in one store (NVMe Base 2.0 §4.6: the host detects a new entry by the phase tag).
    #[inline]
    pub fn write_cqe(&self, iova: u64, dwords: [u32; 4]) -> Result<(), DmaFault> {
        if iova % 16 != 0 {
            return Err(DmaFault { iova, len: 16 });
        }
        let p = self.translate(iova, 16)?.cast::<u32>();
        // SAFETY: the 16-byte range was translated and is 16-byte aligned; all indices < 4.
        unsafe {
            p.write_volatile(dwords[0].to_le());
            p.add(1).write_volatile(dwords[1].to_le());
            p.add(2).write_volatile(dwords[2].to_le());
        }
        // Orders the body before the phase-carrying dword 3 (pairs with the driver's acquire
        // after it sees the new phase).
        fence(Ordering::Release);
        // SAFETY: as above.
        unsafe { p.add(3).write_volatile(dwords[3].to_le()) };
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[repr(C, align(4096))]
    struct Page([u8; PAGE_SIZE]);

    #[test]
    fn iovas_are_not_host_addresses_and_have_guard_gaps() {
        let dma = SimDma::new();
        let mut pages = Box::new([Page([0; PAGE_SIZE]), Page([0; PAGE_SIZE])]);
        let a = NonNull::new(pages[0].0.as_mut_ptr()).unwrap();
        let b = NonNull::new(pages[1].0.as_mut_ptr()).unwrap();
        // SAFETY: the pages outlive both mappings (unmapped below before `pages` drops).
        let (ia, ib) = unsafe {
            (
                dma.map(a, PAGE_SIZE).unwrap(),
                dma.map(b, PAGE_SIZE).unwrap(),
            )
        };
        assert_eq!(ia.0, IOVA_BASE);
        assert_ne!(ia.0, a.as_ptr() as u64);
        assert_eq!(ib.0, IOVA_BASE + 2 * PAGE_SIZE as u64);
        {
            let view = dma.view();
            view.write(ia.0 + 8, &[1, 2, 3]).unwrap();
            assert_eq!(view.read_u32(ia.0 + 8).unwrap(), 0x0003_0201);
            // Overrun into the guard gap and an access at a host address both fault.
            assert!(view.read(ia.0 + 4090, &mut [0; 8]).is_err());
            assert!(view.read_u32(a.as_ptr() as u64).is_err());
        }
        assert_eq!(pages[0].0[8..11], [1, 2, 3]);
        assert!(
            dma.unmap(ia, 2 * PAGE_SIZE).is_err(),
            "wrong length must be refused"
        );
        dma.unmap(ia, PAGE_SIZE).unwrap();
        dma.unmap(ib, PAGE_SIZE).unwrap();
        assert_eq!(dma.mapping_count(), 0);
        assert!(dma.view().read_u32(ia.0).is_err());
    }

    #[test]
    fn map_rejects_unaligned_memory() {
        let dma = SimDma::new();
        let mut page = Box::new(Page([0; PAGE_SIZE]));
        let p = NonNull::new(page.0.as_mut_ptr()).unwrap();
        // SAFETY: the call fails before recording anything; nothing is ever accessed.
        assert!(unsafe { dma.map(p, 100) }.is_err());
        let misaligned = NonNull::new(p.as_ptr().wrapping_add(1)).unwrap();
        // SAFETY: as above (misaligned start).
        let result = unsafe { dma.map(misaligned, PAGE_SIZE) };
        assert!(result.is_err());
    }
}
