//! VFIO's no-IOMMU mode: the device is opened through a no-IOMMU group
//! (`/dev/vfio/noiommu-<group>`, which the kernel creates only with `CONFIG_VFIO_NOIOMMU` and the
//! vfio module's `enable_unsafe_noiommu_mode=1`) in a container set to `VFIO_NOIOMMU_IOMMU`.
//! There is no translation: the device sees physical addresses and can reach all memory, so
//! the mode is never chosen unless asked for (`NVME_VFIO_MODE=noiommu`), and the first device
//! opened this way logs a warning.
//!
//! DMA "mapping" is a lookup: [`NoIommuMapper::map`] returns the physical address from
//! `/proc/self/pagemap` (root: CAP_SYS_ADMIN) after checking that the memory is hugetlb (pinned:
//! never swapped or migrated while mapped), private and anonymous (no file whose truncation or
//! hole punch could free a page the device holds: registered application memory from a
//! hugetlbfs file, a memfd or shared memory is refused, see
//! [`check_no_iommu_memory`](crate::pagemap::check_no_iommu_memory)) and physically contiguous,
//! and refuses otherwise.
//! Allocations come from [`allocate_contiguous_hugepages`], which lays hugepages out in physical
//! order. Nothing is unmapped (there is no IOMMU), and nothing protects memory freed after a
//! mapping drops: the driver's rule that memory a device may still reach is leaked, never
//! freed, is what keeps that safe.
//!
//! INVARIANTS: `_container` has `_group` attached and `VFIO_NOIOMMU_IOMMU` set; both stay open
//! as long as DMA memory (which holds this mapper) exists, as in the type1 container.
//!
//! [`allocate_contiguous_hugepages`]: crate::pagemap::allocate_contiguous_hugepages

use std::ffi::CString;
use std::fmt;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};

use vfio_bindings::bindings::vfio::{
    VFIO_API_VERSION, VFIO_GROUP_FLAGS_VIABLE, VFIO_NOIOMMU_IOMMU,
};

use crate::dma::{DmaDomain, DmaError, DmaMapper, Iova};
use crate::error::VfioError;
use crate::ioctl;
use crate::pagemap;
use crate::pci::PciAddress;

/// Logged once per process: the first device opened without an IOMMU.
static WARNED: AtomicBool = AtomicBool::new(false);

/// The DMA mapper of a no-IOMMU container: identity to physical addresses.
pub struct NoIommuMapper {
    /// Declared first so it drops (detaching the group) before the container closes.
    _group: OwnedFd,
    _container: OwnedFd,
    domain: DmaDomain,
}

impl fmt::Debug for NoIommuMapper {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NoIommuMapper")
            .field("domain", &self.domain)
            .finish_non_exhaustive()
    }
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

/// Opens `addr` through its no-IOMMU group `group` under `dev_vfio`.
pub(crate) fn open_device(
    addr: &PciAddress,
    group: u32,
    dev_vfio: &Path,
) -> Result<(OwnedFd, NoIommuMapper), VfioError> {
    let container = open_rw(&dev_vfio.join("vfio"))?;
    let group_fd = open_rw(&dev_vfio.join(format!("noiommu-{group}")))?;
    let flags =
        ioctl::group_status(group_fd.as_fd()).map_err(ioctl_err("VFIO_GROUP_GET_STATUS"))?;
    if flags & VFIO_GROUP_FLAGS_VIABLE == 0 {
        return Err(VfioError::GroupNotViable {
            group,
            others: vec!["(no-IOMMU group)".into()],
        });
    }
    let version =
        ioctl::api_version(container.as_fd()).map_err(ioctl_err("VFIO_GET_API_VERSION"))?;
    if u32::try_from(version) != Ok(VFIO_API_VERSION) {
        return Err(VfioError::ApiVersion {
            found: version,
            expected: VFIO_API_VERSION,
        });
    }
    if !ioctl::check_extension(container.as_fd(), VFIO_NOIOMMU_IOMMU)
        .map_err(ioctl_err("VFIO_CHECK_EXTENSION"))?
    {
        return Err(VfioError::ModeUnavailable {
            addr: *addr,
            mode: crate::mode::VfioMode::NoIommu,
            missing: "the VFIO container does not offer VFIO_NOIOMMU_IOMMU: set \
                      /sys/module/vfio/parameters/enable_unsafe_noiommu_mode to 1 (as root)"
                .into(),
        });
    }
    ioctl::group_set_container(group_fd.as_fd(), container.as_fd())
        .map_err(ioctl_err("VFIO_GROUP_SET_CONTAINER"))?;
    ioctl::set_iommu(container.as_fd(), VFIO_NOIOMMU_IOMMU)
        .map_err(ioctl_err("VFIO_SET_IOMMU(VFIO_NOIOMMU_IOMMU)"))?;
    let name = CString::new(addr.to_string()).expect("a PCI address has no NUL byte");
    let device = ioctl::group_device_fd(group_fd.as_fd(), &name).map_err(ioctl_err(
        "VFIO_GROUP_GET_DEVICE_FD (no-IOMMU needs CAP_SYS_RAWIO: root)",
    ))?;
    if !WARNED.swap(true, Ordering::Relaxed) {
        log::warn!(
            "{addr}: VFIO no-IOMMU mode: the device is given physical addresses and can read and \
             write ALL memory of this machine; use it only where no IOMMU is available"
        );
    }
    Ok((
        device,
        NoIommuMapper {
            _group: group_fd,
            _container: container,
            domain: DmaDomain::unique(),
        },
    ))
}

// SAFETY: `map` returns the physical address of memory it checked to be present, pinned
// (hugetlb), private and anonymous (so only this process's own unmapping, which the `map`
// contract forbids until `unmap`, can free its pages) and physically contiguous, so `iova + k` is the byte `vaddr + k` for the whole range
// while the caller keeps it mapped (the `map` contract); the device sees physical addresses in
// this mode. Physical addresses of live mappings never coincide, as their memory is disjoint.
// `domain` is fixed at creation from `unique`.
unsafe impl DmaMapper for NoIommuMapper {
    fn domain(&self) -> DmaDomain {
        self.domain
    }

    unsafe fn map(&self, vaddr: NonNull<u8>, len: usize) -> Result<Iova, DmaError> {
        let phys = pagemap::pinned_physical_range(vaddr.as_ptr() as usize, len)?;
        log::trace!("no-IOMMU: {len} bytes at {vaddr:p} are physical {phys:#x}");
        Ok(Iova(phys))
    }

    fn unmap(&self, _iova: Iova, _len: usize) -> Result<(), DmaError> {
        // Nothing to undo without an IOMMU.
        Ok(())
    }

    fn needs_physically_contiguous(&self) -> bool {
        true
    }
}
