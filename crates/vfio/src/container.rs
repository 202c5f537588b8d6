//! The VFIO container: one IOMMU address space (type1v2 backend) that one or more IOMMU groups
//! join, and the [`DmaMapper`] that maps host memory into it.
//!
//! A container starts empty (opening it opens `/dev/vfio/vfio` only; see
//! [`crate::DmaContext::new`]). The first group to join (through [`crate::VfioPci::open_in`])
//! checks the API version and the type1v2 extension, attaches, sets the IOMMU backend and
//! builds the IOVA allocator from the ranges the IOMMU reports. Later groups attach to the same container: the type1 backend puts them in the
//! existing IOMMU domain when compatible, or in a new one into which it replays every existing
//! mapping, so an IOVA handed out before a group joined is valid for its devices too. After each
//! join the allocator is narrowed to the ranges the IOMMU now reports (a new group can bring
//! reserved regions; the kernel refuses the join if a live mapping overlaps them).
//!
//! INVARIANTS: `fd` is a container; once `iova` is set, every group in `groups` is attached to
//! it and `VFIO_TYPE1v2_IOMMU` is set, so the IOMMU ioctls are valid on it; `iova` knows
//! exactly the IOVAs handed out by `map` and not yet returned by a successful `unmap`; a group
//! is in `groups` at most once. The container owns every group fd because the kernel releases
//! the IOMMU backend when the last group leaves a container: DMA memory, which holds the
//! container, must still be able to unmap itself after every device is closed. Closing the
//! container (drop) removes all its mappings.

use std::fmt;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::ptr::NonNull;
use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError};

use vfio_bindings::bindings::vfio::{
    VFIO_TYPE1v2_IOMMU, VFIO_API_VERSION, VFIO_GROUP_FLAGS_VIABLE, VFIO_IOMMU_INFO_PGSIZES,
};

use crate::dma::{DmaDomain, DmaError, DmaMapper, Iova, PAGE_SIZE};
use crate::error::VfioError;
use crate::ioctl;
use crate::iova::{parse_iova_ranges, IovaAllocator, FALLBACK_RANGE};
use crate::pci::{PciAddress, Sysfs};

/// Hint appended to a failed `VFIO_IOMMU_MAP_DMA` with `ENOMEM`: type1 pins the pages and
/// charges them to RLIMIT_MEMLOCK.
const MEMLOCK_HINT: &str =
    " (locked-memory limit too low: raise `ulimit -l` (RLIMIT_MEMLOCK) or run as root)";

/// The container node inside the VFIO device directory.
pub(crate) const CONTAINER_NODE: &str = "vfio";

/// One IOMMU group attached to the container.
struct Group {
    id: u32,
    fd: OwnedFd,
}

/// A VFIO container set up (once its first group joins) for the type1v2 IOMMU.
pub struct VfioContainer {
    /// Declared first so that the groups drop (detach) before the container fd closes.
    groups: Mutex<Vec<Group>>,
    /// Functions with a live [`crate::VfioPci`] in this container: each may be open once
    /// (the kernel would hand out a second device fd of an attached group).
    open: Mutex<Vec<PciAddress>>,
    fd: OwnedFd,
    /// Set when the first group joins and the IOMMU backend is chosen.
    iova: OnceLock<Mutex<IovaAllocator>>,
    domain: DmaDomain,
}

impl fmt::Debug for VfioContainer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VfioContainer")
            .field("fd", &self.fd)
            .field("groups", &self.group_ids())
            .finish_non_exhaustive()
    }
}

pub(crate) fn open_node(path: std::path::PathBuf) -> Result<OwnedFd, VfioError> {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .map(OwnedFd::from)
        .map_err(|source| crate::error::open_error(path, source))
}

pub(crate) fn ioctl_err(op: &'static str) -> impl FnOnce(std::io::Error) -> VfioError {
    move |source| VfioError::Ioctl { op, source }
}

/// The IOVA ranges and smallest page size the IOMMU reports for the container.
fn iommu_ranges(fd: BorrowedFd<'_>) -> Result<(Vec<std::ops::Range<u64>>, u64), VfioError> {
    let (info, buf) = ioctl::iommu_info(fd).map_err(ioctl_err("VFIO_IOMMU_GET_INFO"))?;
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
    Ok((ranges, granule))
}

impl VfioContainer {
    /// Opens a new, empty container (`<dev_vfio>/vfio`) with its own [`DmaDomain`].
    pub(crate) fn open(dev_vfio: &Path) -> Result<Self, VfioError> {
        Ok(Self {
            groups: Mutex::new(Vec::new()),
            open: Mutex::new(Vec::new()),
            fd: open_node(dev_vfio.join(CONTAINER_NODE))?,
            iova: OnceLock::new(),
            domain: DmaDomain::unique(),
        })
    }

    /// The IOMMU groups attached so far, in join order.
    pub fn group_ids(&self) -> Vec<u32> {
        self.lock_groups().iter().map(|g| g.id).collect()
    }

    /// Records `addr` as open in this container; fails if it already is.
    pub(crate) fn claim(&self, addr: &PciAddress) -> Result<(), VfioError> {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        if open.contains(addr) {
            return Err(VfioError::AlreadyOpen { addr: *addr });
        }
        open.push(*addr);
        Ok(())
    }

    /// Forgets `addr` (its device closed, or opening it failed after [`Self::claim`]).
    pub(crate) fn release(&self, addr: &PciAddress) {
        self.open
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|a| a != addr);
    }

    fn lock_groups(&self) -> MutexGuard<'_, Vec<Group>> {
        // Pushing a group is the only mutation; a poisoned lock still guards a valid list.
        self.groups.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Makes sure IOMMU group `group_id` (of the function `addr`) is attached to this
    /// container, attaching it if not, then runs `f` with the group fd. Joining an attached
    /// group again (two functions of one group) only runs `f`.
    pub(crate) fn join<T>(
        &self,
        addr: &PciAddress,
        group_id: u32,
        sysfs: &Sysfs,
        dev_vfio: &Path,
        f: impl FnOnce(BorrowedFd<'_>) -> Result<T, VfioError>,
    ) -> Result<T, VfioError> {
        let mut groups = self.lock_groups();
        if let Some(g) = groups.iter().find(|g| g.id == group_id) {
            log::debug!("{addr}: IOMMU group {group_id} already in the container");
            return f(g.fd.as_fd());
        }
        let group = open_node(dev_vfio.join(group_id.to_string()))?;
        let flags =
            ioctl::group_status(group.as_fd()).map_err(ioctl_err("VFIO_GROUP_GET_STATUS"))?;
        if flags & VFIO_GROUP_FLAGS_VIABLE == 0 {
            let others = sysfs
                .group_peers(addr, group_id)
                .unwrap_or_else(|e| vec![format!("({e})")]);
            return Err(VfioError::GroupNotViable {
                group: group_id,
                others,
            });
        }
        let first = self.iova.get().is_none();
        if first {
            let version =
                ioctl::api_version(self.fd.as_fd()).map_err(ioctl_err("VFIO_GET_API_VERSION"))?;
            if u32::try_from(version) != Ok(VFIO_API_VERSION) {
                return Err(VfioError::ApiVersion {
                    found: version,
                    expected: VFIO_API_VERSION,
                });
            }
            if !ioctl::check_extension(self.fd.as_fd(), VFIO_TYPE1v2_IOMMU)
                .map_err(ioctl_err("VFIO_CHECK_EXTENSION"))?
            {
                return Err(VfioError::NoType1v2);
            }
        }
        ioctl::group_set_container(group.as_fd(), self.fd.as_fd())
            .map_err(ioctl_err("VFIO_GROUP_SET_CONTAINER"))?;
        // From here on the group is attached: keep its fd (the INVARIANT) even if a later
        // step fails, so the container's state stays the kernel's.
        groups.push(Group {
            id: group_id,
            fd: group,
        });
        if first {
            ioctl::set_iommu(self.fd.as_fd(), VFIO_TYPE1v2_IOMMU)
                .map_err(ioctl_err("VFIO_SET_IOMMU(VFIO_TYPE1v2_IOMMU)"))?;
            let (ranges, granule) = iommu_ranges(self.fd.as_fd())?;
            // Only this thread (holding `groups`) sets it.
            let _ = self
                .iova
                .set(Mutex::new(IovaAllocator::new(&ranges, granule)));
        } else {
            let (ranges, _) = iommu_ranges(self.fd.as_fd())?;
            if let Some(space) = self.iova.get() {
                space
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .restrict(&ranges);
            }
            log::info!(
                "{addr}: IOMMU group {group_id} joined the DMA context of groups {:?}",
                groups.iter().map(|g| g.id).collect::<Vec<_>>()
            );
        }
        let g = groups.last().expect("pushed above");
        f(g.fd.as_fd())
    }

    fn allocator(&self) -> Result<MutexGuard<'_, IovaAllocator>, DmaError> {
        let space = self.iova.get().ok_or(DmaError::NoDevice)?;
        // The allocator's methods leave it consistent at every panic point, so a poisoned
        // lock still guards valid state.
        Ok(space.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

// SAFETY: `map` hands out IOVAs from this container's allocator only after VFIO_IOMMU_MAP_DMA
// mapped them to the caller's memory (in every IOMMU domain of the container: type1 maps into
// all of them, and replays existing mappings into a domain created for a joining group);
// `unmap` returns a range to the allocator only after the kernel confirmed the whole range
// unmapped; `domain` is fixed at creation from `unique`.
unsafe impl DmaMapper for VfioContainer {
    fn domain(&self) -> DmaDomain {
        self.domain
    }

    unsafe fn map(&self, vaddr: NonNull<u8>, len: usize) -> Result<Iova, DmaError> {
        let mut space = self.allocator()?;
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
        let mut space = self.allocator()?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_function_is_claimed_once_per_container() {
        let dir = std::env::temp_dir().join(format!("nvme-vfio-claim-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(CONTAINER_NODE), b"").unwrap();
        let (a, b): (PciAddress, PciAddress) = (
            "0000:01:00.0".parse().unwrap(),
            "0000:02:00.0".parse().unwrap(),
        );
        let c = VfioContainer::open(&dir).unwrap();
        c.claim(&a).unwrap();
        c.claim(&b).unwrap();
        let err = c.claim(&a).unwrap_err();
        assert!(
            matches!(err, VfioError::AlreadyOpen { addr } if addr == a),
            "{err:?}"
        );
        assert!(err.to_string().contains("already open"), "{err}");
        // Another container (context) is another matter: the kernel refuses there instead.
        let other = VfioContainer::open(&dir).unwrap();
        other.claim(&a).unwrap();
        c.release(&a);
        c.claim(&a).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
