//! The iommufd backend: a PCI function opened through its VFIO device cdev
//! (`/dev/vfio/devices/vfioN`, Linux 6.6+) and bound to `/dev/iommu`, with one I/O address
//! space (IOAS) as its DMA domain.
//!
//! Setup: open the cdev and `/dev/iommu`, `VFIO_DEVICE_BIND_IOMMUFD`, `IOMMU_IOAS_ALLOC`,
//! `VFIO_DEVICE_ATTACH_IOMMUFD_PT` (the device now translates through the IOAS), then
//! `IOMMU_IOAS_IOVA_RANGES` for the allowed IOVAs, which seed the same first-fit
//! [`IovaAllocator`] the type1 container uses. Mappings are placed at IOVAs we choose
//! (`IOMMU_IOAS_MAP_FIXED_IOVA`), so the IOVA of every buffer is known before the kernel call.
//! Everything else (regions, BAR mmap, config space, interrupts) works on the cdev fd exactly as
//! on a group-obtained device fd.
//!
//! INVARIANTS: `fd` is an iommufd in which `ioas` is a live IOAS (it lives as long as the fd);
//! `iova` knows exactly the IOVAs mapped by `map` and not yet returned by a successful `unmap`.
//! The IOAS outlives the device's attachment: DMA memory can unmap itself after the device fd
//! closed. Closing the iommufd destroys the IOAS and all its mappings.
//!
//! The UAPI structures are defined here (`vfio-bindings` 0.7 predates them), field for field
//! from `include/uapi/linux/iommufd.h` and `vfio.h` of Linux 6.12, with size assertions.

use std::fmt;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::dma::{DmaDomain, DmaError, DmaMapper, Iova};
use crate::error::VfioError;
use crate::iova::IovaAllocator;

/// The UAPI: structures and request numbers (`_IO(type, nr)`: no direction or size bits).
pub(crate) mod uapi {
    /// `IOMMUFD_TYPE` (`';'`), also `VFIO_TYPE`.
    pub const IOCTL_TYPE: u32 = b';' as u32;
    /// `IOMMUFD_CMD_BASE`.
    const IOMMUFD_CMD_BASE: u32 = 0x80;
    /// `VFIO_BASE`.
    const VFIO_BASE: u32 = 100;

    const fn io(nr: u32) -> libc::Ioctl {
        const TYPE_SHIFT: u32 = 8;
        ((IOCTL_TYPE << TYPE_SHIFT) | nr) as libc::Ioctl
    }

    pub const IOMMU_IOAS_ALLOC: libc::Ioctl = io(IOMMUFD_CMD_BASE + 1);
    pub const IOMMU_IOAS_IOVA_RANGES: libc::Ioctl = io(IOMMUFD_CMD_BASE + 4);
    pub const IOMMU_IOAS_MAP: libc::Ioctl = io(IOMMUFD_CMD_BASE + 5);
    pub const IOMMU_IOAS_UNMAP: libc::Ioctl = io(IOMMUFD_CMD_BASE + 6);
    pub const VFIO_DEVICE_BIND_IOMMUFD: libc::Ioctl = io(VFIO_BASE + 18);
    pub const VFIO_DEVICE_ATTACH_IOMMUFD_PT: libc::Ioctl = io(VFIO_BASE + 19);

    // As the kernel headers print them.
    const _: () = assert!(IOMMU_IOAS_ALLOC == 0x3b81 as libc::Ioctl);
    const _: () = assert!(IOMMU_IOAS_UNMAP == 0x3b86 as libc::Ioctl);
    const _: () = assert!(VFIO_DEVICE_BIND_IOMMUFD == 0x3b76 as libc::Ioctl);
    const _: () = assert!(VFIO_DEVICE_ATTACH_IOMMUFD_PT == 0x3b77 as libc::Ioctl);

    /// `enum iommufd_ioas_map_flags`.
    pub const IOMMU_IOAS_MAP_FIXED_IOVA: u32 = 1 << 0;
    pub const IOMMU_IOAS_MAP_WRITEABLE: u32 = 1 << 1;
    pub const IOMMU_IOAS_MAP_READABLE: u32 = 1 << 2;

    /// `struct vfio_device_bind_iommufd`.
    #[repr(C)]
    #[derive(Debug, Default, Clone, Copy)]
    pub struct VfioDeviceBindIommufd {
        pub argsz: u32,
        pub flags: u32,
        pub iommufd: i32,
        pub out_devid: u32,
    }

    /// `struct vfio_device_attach_iommufd_pt`.
    #[repr(C)]
    #[derive(Debug, Default, Clone, Copy)]
    pub struct VfioDeviceAttachIommufdPt {
        pub argsz: u32,
        pub flags: u32,
        pub pt_id: u32,
    }

    /// `struct iommu_ioas_alloc`.
    #[repr(C)]
    #[derive(Debug, Default, Clone, Copy)]
    pub struct IommuIoasAlloc {
        pub size: u32,
        pub flags: u32,
        pub out_ioas_id: u32,
    }

    /// `struct iommu_iova_range`: `last` is inclusive.
    #[repr(C)]
    #[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
    pub struct IommuIovaRange {
        pub start: u64,
        pub last: u64,
    }

    /// `struct iommu_ioas_iova_ranges`; `allowed_iovas` points at an array of
    /// [`IommuIovaRange`] of `num_iovas` entries.
    #[repr(C)]
    #[derive(Debug, Default, Clone, Copy)]
    pub struct IommuIoasIovaRanges {
        pub size: u32,
        pub ioas_id: u32,
        pub num_iovas: u32,
        pub reserved: u32,
        pub allowed_iovas: u64,
        pub out_iova_alignment: u64,
    }

    /// `struct iommu_ioas_map`.
    #[repr(C)]
    #[derive(Debug, Default, Clone, Copy)]
    pub struct IommuIoasMap {
        pub size: u32,
        pub flags: u32,
        pub ioas_id: u32,
        pub reserved: u32,
        pub user_va: u64,
        pub length: u64,
        pub iova: u64,
    }

    /// `struct iommu_ioas_unmap`; `length` returns the bytes unmapped.
    #[repr(C)]
    #[derive(Debug, Default, Clone, Copy)]
    pub struct IommuIoasUnmap {
        pub size: u32,
        pub ioas_id: u32,
        pub iova: u64,
        pub length: u64,
    }

    // Sizes and the offsets of the 64-bit fields (the kernel's __aligned_u64) as in the headers.
    const _: () = assert!(std::mem::size_of::<VfioDeviceBindIommufd>() == 16);
    const _: () = assert!(std::mem::size_of::<VfioDeviceAttachIommufdPt>() == 12);
    const _: () = assert!(std::mem::size_of::<IommuIoasAlloc>() == 12);
    const _: () = assert!(std::mem::size_of::<IommuIovaRange>() == 16);
    const _: () = assert!(std::mem::size_of::<IommuIoasIovaRanges>() == 32);
    const _: () = assert!(std::mem::offset_of!(IommuIoasIovaRanges, allowed_iovas) == 16);
    const _: () = assert!(std::mem::size_of::<IommuIoasMap>() == 40);
    const _: () = assert!(std::mem::offset_of!(IommuIoasMap, user_va) == 16);
    const _: () = assert!(std::mem::offset_of!(IommuIoasMap, iova) == 32);
    const _: () = assert!(std::mem::size_of::<IommuIoasUnmap>() == 24);
    const _: () = assert!(std::mem::offset_of!(IommuIoasUnmap, iova) == 8);

    /// `size_of::<T>()` as the `u32` the size/argsz fields hold.
    pub fn size32<T>() -> u32 {
        u32::try_from(std::mem::size_of::<T>()).expect("iommufd structures are small")
    }
}

use uapi::*;

fn check(ret: libc::c_int) -> std::io::Result<()> {
    if ret < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// VFIO_DEVICE_BIND_IOMMUFD: binds the cdev to the iommufd; returns the device id.
fn bind(device: BorrowedFd<'_>, iommufd: BorrowedFd<'_>) -> std::io::Result<u32> {
    let mut bind = VfioDeviceBindIommufd {
        argsz: size32::<VfioDeviceBindIommufd>(),
        iommufd: iommufd.as_raw_fd(),
        ..Default::default()
    };
    // SAFETY: `bind` is a live, initialised vfio_device_bind_iommufd with argsz its size; the
    // kernel writes `out_devid` only. The iommufd is borrowed, so open during the call.
    check(unsafe { libc::ioctl(device.as_raw_fd(), VFIO_DEVICE_BIND_IOMMUFD, &mut bind) })?;
    Ok(bind.out_devid)
}

/// IOMMU_IOAS_ALLOC: a fresh, empty IOAS.
fn ioas_alloc(iommufd: BorrowedFd<'_>) -> std::io::Result<u32> {
    let mut alloc = IommuIoasAlloc {
        size: size32::<IommuIoasAlloc>(),
        ..Default::default()
    };
    // SAFETY: `alloc` is live and initialised with size its size; the kernel writes the id.
    check(unsafe { libc::ioctl(iommufd.as_raw_fd(), IOMMU_IOAS_ALLOC, &mut alloc) })?;
    Ok(alloc.out_ioas_id)
}

/// VFIO_DEVICE_ATTACH_IOMMUFD_PT: the device's DMA now translates through `pt_id`.
fn attach(device: BorrowedFd<'_>, pt_id: u32) -> std::io::Result<()> {
    let mut attach = VfioDeviceAttachIommufdPt {
        argsz: size32::<VfioDeviceAttachIommufdPt>(),
        flags: 0,
        pt_id,
    };
    // SAFETY: `attach` is live and initialised with argsz its size; the kernel may write back
    // the id of the page table it attached.
    check(unsafe {
        libc::ioctl(
            device.as_raw_fd(),
            VFIO_DEVICE_ATTACH_IOMMUFD_PT,
            &mut attach,
        )
    })
}

/// IOMMU_IOAS_IOVA_RANGES: the allowed IOVA ranges (start, inclusive last) and the required
/// IOVA alignment. Asks for the count first (EMSGSIZE reports it), then for the array.
fn iova_ranges(iommufd: BorrowedFd<'_>, ioas: u32) -> std::io::Result<(Vec<IommuIovaRange>, u64)> {
    let mut ranges: Vec<IommuIovaRange> = Vec::new();
    loop {
        let mut query = IommuIoasIovaRanges {
            size: size32::<IommuIoasIovaRanges>(),
            ioas_id: ioas,
            num_iovas: u32::try_from(ranges.len()).expect("few ranges"),
            allowed_iovas: ranges.as_mut_ptr() as u64,
            ..Default::default()
        };
        // SAFETY: `query` is live and initialised; `allowed_iovas` points at `num_iovas`
        // writable IommuIovaRange entries (none when empty), which the kernel fills at most.
        let ret = unsafe { libc::ioctl(iommufd.as_raw_fd(), IOMMU_IOAS_IOVA_RANGES, &mut query) };
        if ret == 0 {
            ranges.truncate(query.num_iovas as usize);
            return Ok((ranges, query.out_iova_alignment));
        }
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EMSGSIZE) || query.num_iovas as usize <= ranges.len() {
            return Err(e);
        }
        ranges = vec![IommuIovaRange::default(); query.num_iovas as usize];
    }
}

/// IOMMU_IOAS_MAP at a fixed IOVA, readable and writable by the device.
///
/// # Safety
/// `[user_va, user_va + length)` must be memory of this process that stays allocated, and is
/// not remapped, until it is unmapped with [`ioas_unmap`].
unsafe fn ioas_map(
    iommufd: BorrowedFd<'_>,
    ioas: u32,
    user_va: u64,
    iova: u64,
    length: u64,
) -> std::io::Result<()> {
    let mut map = IommuIoasMap {
        size: size32::<IommuIoasMap>(),
        flags: IOMMU_IOAS_MAP_FIXED_IOVA | IOMMU_IOAS_MAP_READABLE | IOMMU_IOAS_MAP_WRITEABLE,
        ioas_id: ioas,
        reserved: 0,
        user_va,
        length,
        iova,
    };
    // SAFETY: `map` is live and initialised; the kernel reads it (and writes back `iova`, which
    // stays the fixed one). The caller guarantees the lifetime of the memory it describes.
    check(unsafe { libc::ioctl(iommufd.as_raw_fd(), IOMMU_IOAS_MAP, &mut map) })
}

/// IOMMU_IOAS_UNMAP: returns the number of bytes the kernel unmapped.
fn ioas_unmap(iommufd: BorrowedFd<'_>, ioas: u32, iova: u64, length: u64) -> std::io::Result<u64> {
    let mut unmap = IommuIoasUnmap {
        size: size32::<IommuIoasUnmap>(),
        ioas_id: ioas,
        iova,
        length,
    };
    // SAFETY: `unmap` is live and initialised; the kernel writes back `length` only.
    check(unsafe { libc::ioctl(iommufd.as_raw_fd(), IOMMU_IOAS_UNMAP, &mut unmap) })?;
    Ok(unmap.length)
}

/// Converts the kernel's inclusive ranges to half-open ones (a range ending at `u64::MAX` loses
/// its last page, which the allocator could not hand out anyway).
pub(crate) fn to_half_open(ranges: &[IommuIovaRange]) -> Vec<std::ops::Range<u64>> {
    ranges
        .iter()
        .filter(|r| r.start <= r.last)
        .map(|r| r.start..r.last.saturating_add(1))
        .collect()
}

fn open_rw(path: &Path) -> Result<OwnedFd, VfioError> {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map(OwnedFd::from)
        .map_err(|source| crate::error::open_error(path.to_owned(), source))
}

fn ioctl_err(op: &'static str) -> impl FnOnce(std::io::Error) -> VfioError {
    move |source| VfioError::Ioctl { op, source }
}

/// One iommufd IOAS: the DMA domain of devices opened in iommufd mode.
pub struct IommufdIoas {
    fd: OwnedFd,
    ioas: u32,
    iova: Mutex<IovaAllocator>,
    domain: DmaDomain,
}

impl fmt::Debug for IommufdIoas {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IommufdIoas")
            .field("fd", &self.fd)
            .field("ioas", &self.ioas)
            .finish_non_exhaustive()
    }
}

impl IommufdIoas {
    fn allocator(&self) -> MutexGuard<'_, IovaAllocator> {
        // The allocator's methods leave it consistent at every panic point.
        self.iova.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Opens `cdev` (a VFIO device cdev) bound to the iommufd at `iommu`, attached to a new IOAS.
/// Returns the device fd and the IOAS as its DMA mapper.
pub(crate) fn open_device(cdev: &Path, iommu: &Path) -> Result<(OwnedFd, IommufdIoas), VfioError> {
    let device = open_rw(cdev)?;
    let iommufd = open_rw(iommu)?;
    let devid = bind(device.as_fd(), iommufd.as_fd()).map_err(|source| {
        // The cdev opens more than once, but a device binds to one iommufd at a time: EINVAL
        // when it is already open through its cdev, EBUSY when its group is open (type1).
        if matches!(source.raw_os_error(), Some(libc::EBUSY | libc::EINVAL)) {
            VfioError::InUse {
                path: cdev.to_owned(),
                source,
            }
        } else {
            VfioError::Ioctl {
                op: "VFIO_DEVICE_BIND_IOMMUFD",
                source,
            }
        }
    })?;
    let ioas = ioas_alloc(iommufd.as_fd()).map_err(ioctl_err("IOMMU_IOAS_ALLOC"))?;
    attach(device.as_fd(), ioas).map_err(ioctl_err("VFIO_DEVICE_ATTACH_IOMMUFD_PT"))?;
    // After the attach: the device's restrictions (reserved regions) narrow the ranges.
    let (ranges, alignment) =
        iova_ranges(iommufd.as_fd(), ioas).map_err(ioctl_err("IOMMU_IOAS_IOVA_RANGES"))?;
    let ranges = to_half_open(&ranges);
    log::debug!(
        "{}: iommufd device id {devid}, IOAS {ioas}, IOVA alignment {alignment:#x}, ranges {ranges:x?}",
        cdev.display()
    );
    if ranges.is_empty() {
        return Err(VfioError::Ioctl {
            op: "IOMMU_IOAS_IOVA_RANGES",
            source: std::io::Error::other("the IOAS allows no IOVA at all"),
        });
    }
    Ok((
        device,
        IommufdIoas {
            fd: iommufd,
            ioas,
            iova: Mutex::new(IovaAllocator::new(&ranges, alignment.max(1))),
            domain: DmaDomain::unique(),
        },
    ))
}

/// `/dev/vfio/devices/<name>` for the cdev `sysfs_dir/vfio-dev/<name>` of a device.
pub fn cdev_path(dev_vfio: &Path, name: &str) -> PathBuf {
    dev_vfio.join("devices").join(name)
}

// SAFETY: `map` hands out IOVAs from this IOAS's allocator only after IOMMU_IOAS_MAP mapped
// them (at exactly that fixed IOVA) to the caller's memory; `unmap` returns a range to the
// allocator only after the kernel confirmed the whole range unmapped; `domain` is fixed at
// creation from `unique`.
unsafe impl DmaMapper for IommufdIoas {
    fn domain(&self) -> DmaDomain {
        self.domain
    }

    unsafe fn map(&self, vaddr: NonNull<u8>, len: usize) -> Result<Iova, DmaError> {
        let mut space = self.allocator();
        let iova = space.allocate(len)?;
        // SAFETY: the caller of `DmaMapper::map` guarantees the memory stays allocated and is
        // not remapped until `unmap`.
        let mapped = unsafe {
            ioas_map(
                self.fd.as_fd(),
                self.ioas,
                vaddr.as_ptr() as u64,
                iova.0,
                len as u64,
            )
        };
        if let Err(source) = mapped {
            space.free(iova);
            let hint = if source.raw_os_error() == Some(libc::ENOMEM) {
                " (locked-memory limit too low: raise `ulimit -l` (RLIMIT_MEMLOCK) or run as root)"
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
        log::trace!(
            "IOAS {}: mapped {len} bytes at {:p} to IOVA {iova}",
            self.ioas,
            vaddr
        );
        Ok(iova)
    }

    fn unmap(&self, iova: Iova, len: usize) -> Result<(), DmaError> {
        let mut space = self.allocator();
        let unmapped = ioas_unmap(self.fd.as_fd(), self.ioas, iova.0, len as u64)
            .map_err(|source| DmaError::Unmap { iova, len, source })?;
        if unmapped != len as u64 {
            // Part of the range may still be reachable: keep the IOVA reserved.
            return Err(DmaError::Unmap {
                iova,
                len,
                source: std::io::Error::other(format!(
                    "the kernel unmapped {unmapped} bytes, not {len}"
                )),
            });
        }
        if space.free(iova).is_none() {
            log::warn!("unmapped IOVA {iova} that this IOAS's allocator never handed out");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inclusive_ranges_become_half_open() {
        let r = |start, last| IommuIovaRange { start, last };
        assert_eq!(
            to_half_open(&[r(0, 0xfedf_ffff), r(0xfef0_0000, u64::MAX), r(5, 4)]),
            vec![0..0xfee0_0000, 0xfef0_0000..u64::MAX]
        );
    }

    #[test]
    fn allocator_from_ranges_skips_the_msi_window() {
        let ranges = to_half_open(&[
            IommuIovaRange {
                start: 0,
                last: 0xfedf_ffff,
            },
            IommuIovaRange {
                start: 0xfef0_0000,
                last: (1 << 48) - 1,
            },
        ]);
        let mut a = IovaAllocator::new(&ranges, 1);
        // A large allocation cannot straddle the hole at 0xfee00000.
        let mut seen = Vec::new();
        for _ in 0..2100 {
            let iova = a.allocate(2 << 20).unwrap();
            assert!(
                iova.0 + (2 << 20) <= 0xfee0_0000 || iova.0 >= 0xfef0_0000,
                "{iova}"
            );
            seen.push(iova);
        }
        assert_ne!(seen[0], Iova(0));
    }

    #[test]
    fn missing_nodes_name_the_path() {
        let err = open_device(
            Path::new("/nonexistent/dev/vfio/devices/vfio0"),
            Path::new("/nonexistent/dev/iommu"),
        )
        .unwrap_err();
        let VfioError::DeviceNode { path, .. } = &err else {
            panic!("{err:?}")
        };
        assert_eq!(path, Path::new("/nonexistent/dev/vfio/devices/vfio0"));
    }
}
