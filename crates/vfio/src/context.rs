//! [`DmaContext`]: one IOMMU address space shared by several VFIO devices.
//!
//! A context is one VFIO container ([`VfioContainer`]). Every device opened in it
//! ([`DmaContext::open`], [`VfioPci::open_in`]) has its IOMMU group joined to that container,
//! so all of them translate an IOVA the same way: a [`DmaBuffer`](crate::DmaBuffer) allocated
//! from the context's [`DmaContext::mapper`] (or from any member device's mapper, the same
//! one) can be handed to any member device. Buffers carry the context's [`DmaDomain`], and
//! the driver refuses a buffer whose domain is not the controller's, so a buffer of another
//! context cannot reach the wrong device.
//!
//! Two functions of one IOMMU group can be opened in one context (the group joins once).
//! Functions of one group can never be in two contexts: the kernel attaches a group to one
//! container only ([`VfioError::Ioctl`] with `EBUSY` says so).
//!
//! The container lives as long as the context, any of its devices or any of its buffers
//! (each holds an `Arc`), so buffers can unmap themselves after every device is closed.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::container::VfioContainer;
use crate::device::{VfioPci, DEV_VFIO};
use crate::dma::{DmaDomain, DmaMapper};
use crate::error::VfioError;
use crate::pci::{PciAddress, Sysfs};

/// One VFIO container (type1v2 IOMMU) that several PCI functions join. Cheap to clone; all
/// clones are the same context.
#[derive(Clone, Debug)]
pub struct DmaContext {
    container: Arc<VfioContainer>,
    sysfs: Sysfs,
    dev_vfio: PathBuf,
}

impl DmaContext {
    /// Opens a new, empty context (a fresh `/dev/vfio/vfio` container). It can map memory
    /// once its first device is opened in it; before that, allocations fail with
    /// [`DmaError::NoDevice`](crate::DmaError::NoDevice).
    pub fn new() -> Result<Self, VfioError> {
        Self::new_at(&Sysfs::default(), Path::new(DEV_VFIO))
    }

    /// [`DmaContext::new`] with explicit sysfs and `/dev/vfio` roots.
    pub fn new_at(sysfs: &Sysfs, dev_vfio: &Path) -> Result<Self, VfioError> {
        Ok(Self {
            container: Arc::new(VfioContainer::open(dev_vfio)?),
            sysfs: sysfs.clone(),
            dev_vfio: dev_vfio.to_path_buf(),
        })
    }

    /// Opens the NVMe function `addr` in this context (see [`VfioPci::open_in`]).
    pub fn open(&self, addr: &PciAddress) -> Result<Arc<VfioPci>, VfioError> {
        VfioPci::open_in(self, addr)
    }

    /// The IOVA space of every buffer mapped through this context.
    pub fn domain(&self) -> DmaDomain {
        self.container.domain()
    }

    /// The mapper to allocate or register buffers valid on every device of the context.
    pub fn mapper(&self) -> Arc<dyn DmaMapper> {
        self.container.clone()
    }

    /// The IOMMU groups that have joined, in join order.
    pub fn iommu_groups(&self) -> Vec<u32> {
        self.container.group_ids()
    }

    pub(crate) fn container(&self) -> &Arc<VfioContainer> {
        &self.container
    }

    pub(crate) fn sysfs(&self) -> &Sysfs {
        &self.sysfs
    }

    pub(crate) fn dev_vfio(&self) -> &Path {
        &self.dev_vfio
    }
}
