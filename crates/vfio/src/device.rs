//! A PCI function opened through VFIO: the legacy container/group interface (type1v2 IOMMU),
//! or, by [`crate::mode`], the iommufd device cdev or a no-IOMMU group.
//!
//! [`VfioPci::open`] walks the setup in the order the failures are easiest to explain: sysfs
//! (exists, NVMe class, bound to vfio-pci, has an IOMMU group), then the device nodes, group
//! viability, API version and IOMMU backend, and finally the device fd and its regions. It
//! opens the function in a [`DmaContext`] of its own (type1) or in its own iommufd IOAS or
//! no-IOMMU mapper; [`VfioPci::open_in`] opens it in a shared type1 context.
//!
//! INVARIANTS: `device` is the VFIO device fd of `addr`; `config` describes its configuration
//! region. Fields drop in declaration order, so the device fd closes (and vfio-pci quiesces the
//! function) before this value's reference to the container goes. The container owns the fds
//! of every group in the context. BAR mappings ([`Mmio`]) hold an `Arc` of the device and DMA
//! memory one of the container, so each outlives whatever can still reach it.

use std::any::Any;
use std::ffi::CString;
use std::fmt;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::ptr::NonNull;
use std::sync::Arc;

use vfio_bindings::bindings::vfio::{
    vfio_region_info, VFIO_DEVICE_FLAGS_PCI, VFIO_DEVICE_FLAGS_RESET, VFIO_PCI_BAR5_REGION_INDEX,
    VFIO_PCI_CONFIG_REGION_INDEX, VFIO_PCI_MSIX_IRQ_INDEX, VFIO_PCI_REQ_IRQ_INDEX,
    VFIO_REGION_INFO_FLAG_MMAP,
};

use crate::container::{ioctl_err, VfioContainer};
use crate::context::DmaContext;
use crate::dma::DmaMapper;
use crate::error::VfioError;
use crate::ioctl;
use crate::irq::{InterruptController, InterruptEvent};
use crate::mmio::Mmio;
use crate::mode::{Availability, ModeRequest, VfioMode};
use crate::pci::{config, PciAddress, Sysfs};

/// Where the VFIO character devices live.
pub const DEV_VFIO: &str = "/dev/vfio";

/// An NVMe PCI function owned by this process through vfio-pci.
pub struct VfioPci {
    addr: PciAddress,
    group_id: u32,
    config: vfio_region_info,
    device: OwnedFd,
    /// The DMA domain: a type1 container, an iommufd IOAS or a no-IOMMU mapper ([`VfioMode`]).
    dma: Arc<dyn DmaMapper>,
    /// Type1: the context's container, where this function is claimed (released on drop).
    container: Option<Arc<VfioContainer>>,
    mode: VfioMode,
}

impl fmt::Debug for VfioPci {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VfioPci")
            .field("addr", &self.addr)
            .field("iommu_group", &self.group_id)
            .field("mode", &self.mode)
            .finish_non_exhaustive()
    }
}

impl VfioPci {
    /// Opens `addr` through VFIO in a DMA context of its own: checks that it is an NVMe
    /// function bound to vfio-pci with a viable IOMMU group, sets up a type1v2 container and
    /// resets the function if it can. To share one IOMMU address space (and one buffer pool)
    /// between several functions, open them with [`VfioPci::open_in`] instead.
    pub fn open(addr: &PciAddress) -> Result<Arc<VfioPci>, VfioError> {
        Self::open_at(addr, &Sysfs::default(), Path::new(DEV_VFIO))
    }

    /// [`VfioPci::open`] with explicit sysfs and `/dev/vfio` roots.
    pub fn open_at(
        addr: &PciAddress,
        sysfs: &Sysfs,
        dev_vfio: &Path,
    ) -> Result<Arc<VfioPci>, VfioError> {
        // sysfs first: its failures are the easiest to explain and need no device node.
        let group_id = sysfs.check_vfio_ready(addr)?;
        let available = Availability::probe(addr, group_id, sysfs, dev_vfio);
        let mode = available.choose(addr, ModeRequest::from_env()?)?;
        match (mode, &available) {
            (VfioMode::Type1, _) => Self::open_in(&DmaContext::new_at(sysfs, dev_vfio)?, addr),
            (
                VfioMode::Iommufd,
                Availability {
                    cdev: Some(cdev),
                    iommufd: Some(iommu),
                    ..
                },
            ) => {
                let (device, ioas) = crate::iommufd::open_device(cdev, iommu)?;
                Self::finish(addr, group_id, mode, device, Arc::new(ioas), None)
            }
            (VfioMode::NoIommu, _) => {
                let (device, mapper) = crate::noiommu::open_device(addr, group_id, dev_vfio)?;
                Self::finish(addr, group_id, mode, device, Arc::new(mapper), None)
            }
            (VfioMode::Iommufd, _) => unreachable!("choose() checked the nodes"),
        }
    }

    /// Opens `addr` through VFIO in `ctx` (type1): as [`VfioPci::open`], but its IOMMU group
    /// joins the context's container (once; a second function of an attached group reuses it), so
    /// DMA memory of the context is valid for this function too.
    pub fn open_in(ctx: &DmaContext, addr: &PciAddress) -> Result<Arc<VfioPci>, VfioError> {
        let group_id = ctx.sysfs().check_vfio_ready(addr)?;
        let container = ctx.container().clone();
        container.claim(addr)?;
        Self::open_claimed(container, group_id, ctx, addr).inspect_err(|_| {
            ctx.container().release(addr);
        })
    }

    /// The rest of [`VfioPci::open_in`], once `addr` is claimed in `container`.
    fn open_claimed(
        container: Arc<VfioContainer>,
        group_id: u32,
        ctx: &DmaContext,
        addr: &PciAddress,
    ) -> Result<Arc<VfioPci>, VfioError> {
        let name = CString::new(addr.to_string()).expect("a PCI address has no NUL byte");
        let device = container.join(addr, group_id, ctx.sysfs(), ctx.dev_vfio(), |group| {
            ioctl::group_device_fd(group, &name).map_err(ioctl_err("VFIO_GROUP_GET_DEVICE_FD"))
        })?;
        let dma: Arc<dyn DmaMapper> = container.clone();
        Self::finish(
            addr,
            group_id,
            VfioMode::Type1,
            device,
            dma,
            Some(container),
        )
    }

    /// The part of opening common to all modes: device info, config region, reset.
    fn finish(
        addr: &PciAddress,
        group_id: u32,
        mode: VfioMode,
        device: OwnedFd,
        dma: Arc<dyn DmaMapper>,
        container: Option<Arc<VfioContainer>>,
    ) -> Result<Arc<VfioPci>, VfioError> {
        let info = ioctl::device_info(device.as_fd()).map_err(ioctl_err("VFIO_DEVICE_GET_INFO"))?;
        if info.flags & VFIO_DEVICE_FLAGS_PCI == 0
            || info.num_regions <= VFIO_PCI_CONFIG_REGION_INDEX
        {
            return Err(VfioError::Ioctl {
                op: "VFIO_DEVICE_GET_INFO",
                source: std::io::Error::other(format!(
                    "device is not a vfio-pci device (flags {:#x}, {} regions)",
                    info.flags, info.num_regions
                )),
            });
        }
        let config = ioctl::region_info(device.as_fd(), VFIO_PCI_CONFIG_REGION_INDEX)
            .map_err(ioctl_err("VFIO_DEVICE_GET_REGION_INFO(config)"))?;

        if info.flags & VFIO_DEVICE_FLAGS_RESET != 0 {
            match ioctl::device_reset(device.as_fd()) {
                Ok(()) => log::debug!("{addr}: reset through VFIO_DEVICE_RESET"),
                Err(e) => log::debug!("{addr}: VFIO_DEVICE_RESET failed ({e}); continuing without"),
            }
        }

        log::info!(
            "{addr}: opened through VFIO (VFIO mode {mode}, IOMMU group {group_id}, {} regions)",
            info.num_regions
        );
        Ok(Arc::new(VfioPci {
            addr: *addr,
            group_id,
            config,
            device,
            dma,
            container,
            mode,
        }))
    }

    /// The VFIO interface the device was opened through.
    pub fn mode(&self) -> VfioMode {
        self.mode
    }

    /// The function's PCI address.
    pub fn address(&self) -> PciAddress {
        self.addr
    }

    /// The function's IOMMU group number.
    pub fn iommu_group(&self) -> u32 {
        self.group_id
    }

    fn config_read<const N: usize>(&self, offset: u64) -> Result<[u8; N], VfioError> {
        let mut buf = [0u8; N];
        self.config_access(offset, N)?;
        ioctl::pread_exact(self.device.as_fd(), &mut buf, self.config.offset + offset).map_err(
            |source| VfioError::Config {
                addr: self.addr,
                offset,
                len: N,
                source,
            },
        )?;
        Ok(buf)
    }

    fn config_write<const N: usize>(&self, offset: u64, bytes: [u8; N]) -> Result<(), VfioError> {
        self.config_access(offset, N)?;
        ioctl::pwrite_exact(self.device.as_fd(), &bytes, self.config.offset + offset).map_err(
            |source| VfioError::Config {
                addr: self.addr,
                offset,
                len: N,
                source,
            },
        )
    }

    /// Rejects accesses outside the config region or not naturally aligned.
    fn config_access(&self, offset: u64, len: usize) -> Result<(), VfioError> {
        let in_bounds = offset
            .checked_add(len as u64)
            .is_some_and(|end| end <= self.config.size);
        if in_bounds && offset % len as u64 == 0 {
            return Ok(());
        }
        Err(VfioError::Config {
            addr: self.addr,
            offset,
            len,
            source: std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!(
                    "outside the {:#x}-byte config space or misaligned",
                    self.config.size
                ),
            ),
        })
    }

    /// Reads a config-space byte.
    pub fn config_read8(&self, offset: u64) -> Result<u8, VfioError> {
        self.config_read::<1>(offset).map(u8::from_le_bytes)
    }

    /// Reads a config-space word (PCI config space is little-endian).
    pub fn config_read16(&self, offset: u64) -> Result<u16, VfioError> {
        self.config_read::<2>(offset).map(u16::from_le_bytes)
    }

    /// Reads a config-space dword.
    pub fn config_read32(&self, offset: u64) -> Result<u32, VfioError> {
        self.config_read::<4>(offset).map(u32::from_le_bytes)
    }

    /// Writes a config-space word.
    pub fn config_write16(&self, offset: u64, value: u16) -> Result<(), VfioError> {
        self.config_write(offset, value.to_le_bytes())
    }

    /// Writes a config-space dword.
    pub fn config_write32(&self, offset: u64, value: u32) -> Result<(), VfioError> {
        self.config_write(offset, value.to_le_bytes())
    }

    /// Vendor and device ID.
    pub fn vendor_device(&self) -> Result<(u16, u16), VfioError> {
        Ok((
            self.config_read16(config::VENDOR_ID)?,
            self.config_read16(config::DEVICE_ID)?,
        ))
    }

    /// Enables memory-space decoding and bus mastering (needed before BAR access and DMA) and
    /// disables legacy INTx.
    pub fn enable_bus_master(&self) -> Result<(), VfioError> {
        let command = self.config_read16(config::COMMAND)?;
        let wanted = command
            | config::COMMAND_MEMORY_SPACE
            | config::COMMAND_BUS_MASTER
            | config::COMMAND_INTX_DISABLE;
        if wanted != command {
            self.config_write16(config::COMMAND, wanted)?;
            log::debug!(
                "{}: PCI command register {command:#06x} -> {wanted:#06x}",
                self.addr
            );
        }
        Ok(())
    }

    /// Clears Bus Master Enable: the function can no longer DMA (memory decoding stays on, so
    /// its registers can still be read and written).
    pub fn disable_bus_master(&self) -> Result<(), VfioError> {
        let command = self.config_read16(config::COMMAND)?;
        if command & config::COMMAND_BUS_MASTER != 0 {
            self.config_write16(config::COMMAND, command & !config::COMMAND_BUS_MASTER)?;
            log::debug!("{}: bus mastering disabled", self.addr);
        }
        Ok(())
    }

    /// Maps BAR `bar` (0..=5) read-write and shared. The returned window keeps the mapping and
    /// this device alive for as long as it (or a doorbell taken from it) exists.
    pub fn map_bar(self: &Arc<Self>, bar: u32) -> Result<Mmio, VfioError> {
        if bar > VFIO_PCI_BAR5_REGION_INDEX {
            return Err(VfioError::BadBar { bar });
        }
        let region = ioctl::region_info(self.device.as_fd(), bar)
            .map_err(ioctl_err("VFIO_DEVICE_GET_REGION_INFO(BAR)"))?;
        if region.size == 0 {
            return Err(VfioError::BarAbsent {
                addr: self.addr,
                bar,
            });
        }
        if region.flags & VFIO_REGION_INFO_FLAG_MMAP == 0 {
            return Err(VfioError::BarNotMappable {
                addr: self.addr,
                bar,
                flags: region.flags,
            });
        }
        let len = usize::try_from(region.size).map_err(|_| VfioError::Mmap {
            addr: self.addr,
            bar,
            len: usize::MAX,
            source: std::io::Error::from(std::io::ErrorKind::InvalidInput),
        })?;
        let ptr =
            ioctl::mmap_shared(self.device.as_fd(), len, region.offset).map_err(|source| {
                VfioError::Mmap {
                    addr: self.addr,
                    bar,
                    len,
                    source,
                }
            })?;
        log::debug!(
            "{}: BAR{bar} ({len:#x} bytes) mapped at {:p}",
            self.addr,
            ptr.as_ptr()
        );
        let owner: Arc<dyn Any + Send + Sync> = Arc::new(BarMapping {
            ptr,
            len,
            _device: Arc::clone(self),
        });
        // SAFETY: `ptr` is a fresh shared mapping of `len` bytes of the BAR, page-aligned (so
        // 4-byte aligned), used only through this window; `BarMapping` unmaps exactly that
        // range (a replacement made by `Mmio::revoke` too) only when dropped, i.e. after the
        // last clone of `owner` is gone.
        Ok(unsafe { Mmio::new_mapping(ptr, len, owner) })
    }

    /// The container's DMA mapper, for allocating DMA memory this device (and every other
    /// device of its DMA context) can reach.
    pub fn dma_mapper(self: &Arc<Self>) -> Arc<dyn DmaMapper> {
        self.dma.clone()
    }
}

impl Drop for VfioPci {
    fn drop(&mut self) {
        // The device fd closes right after this (fields drop next); the function may then be
        // opened again in this context.
        if let Some(container) = &self.container {
            container.release(&self.addr);
        }
    }
}

/// Keeps one BAR mmap and its device alive; unmaps on drop.
///
/// INVARIANT: `ptr..ptr+len` is a live mapping made by `ioctl::mmap_shared`, owned by this value.
struct BarMapping {
    ptr: NonNull<u8>,
    len: usize,
    _device: Arc<VfioPci>,
}

// SAFETY: the mapping is device memory owned by this value; it is only accessed through `Mmio`
// (volatile accesses), and unmapping in `drop` needs exclusive ownership, which drop has.
unsafe impl Send for BarMapping {}
// SAFETY: `BarMapping` offers no access to the memory itself; see `Send`.
unsafe impl Sync for BarMapping {}

impl Drop for BarMapping {
    fn drop(&mut self) {
        // SAFETY: by the type invariant this is our live mapping; the last `Mmio`/`Doorbell`
        // holding the owner is gone, so nothing points into it any more.
        if let Err(e) = unsafe { ioctl::munmap(self.ptr, self.len) } {
            log::warn!("munmap of a {}-byte BAR mapping failed: {e}", self.len);
        }
    }
}

impl InterruptController for VfioPci {
    fn msix_vectors(&self) -> u32 {
        match ioctl::irq_info(self.device.as_fd(), VFIO_PCI_MSIX_IRQ_INDEX) {
            Ok(info) => info.count,
            Err(e) => {
                log::debug!("{}: MSI-X info unavailable: {e}", self.addr);
                0
            }
        }
    }

    fn enable_msix(&self, count: u32) -> Result<Vec<Arc<InterruptEvent>>, VfioError> {
        let available = self.msix_vectors();
        if count == 0 || count > available {
            return Err(VfioError::Interrupts {
                addr: self.addr,
                wanted: count,
                available,
            });
        }
        let events = (0..count)
            .map(|_| InterruptEvent::new().map(Arc::new))
            .collect::<std::io::Result<Vec<_>>>()
            .map_err(ioctl_err("eventfd"))?;
        let fds: Vec<_> = events.iter().map(|e| e.as_fd()).collect();
        ioctl::set_irq_eventfds(self.device.as_fd(), VFIO_PCI_MSIX_IRQ_INDEX, &fds)
            .map_err(ioctl_err("VFIO_DEVICE_SET_IRQS (MSI-X)"))?;
        Ok(events)
    }

    fn disable_msix(&self) {
        if let Err(e) = ioctl::set_irq_eventfds(self.device.as_fd(), VFIO_PCI_MSIX_IRQ_INDEX, &[]) {
            log::debug!("{}: disabling MSI-X: {e}", self.addr);
        }
    }
}

impl crate::function::FunctionControl for VfioPci {
    fn disable_bus_master(&self) -> Result<(), VfioError> {
        VfioPci::disable_bus_master(self)
    }

    fn enable_bus_master(&self) -> Result<(), VfioError> {
        VfioPci::enable_bus_master(self)
    }

    fn request_notifier(&self) -> Result<Option<Arc<InterruptEvent>>, VfioError> {
        let count = match ioctl::irq_info(self.device.as_fd(), VFIO_PCI_REQ_IRQ_INDEX) {
            Ok(info) => info.count,
            Err(e) => {
                log::debug!("{}: no device request interrupt: {e}", self.addr);
                return Ok(None);
            }
        };
        if count == 0 {
            return Ok(None);
        }
        let event = Arc::new(InterruptEvent::new().map_err(ioctl_err("eventfd"))?);
        ioctl::set_irq_eventfds(
            self.device.as_fd(),
            VFIO_PCI_REQ_IRQ_INDEX,
            &[event.as_fd()],
        )
        .map_err(ioctl_err("VFIO_DEVICE_SET_IRQS (device request)"))?;
        Ok(Some(event))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pci::tests::FakeSysfs;
    use crate::pci::NVME_CLASS_CODE;

    #[test]
    fn sysfs_failures_come_before_device_nodes() {
        let fake = FakeSysfs::new();
        fake.add("0000:00:05.0", NVME_CLASS_CODE, Some("nvme"), Some(4));
        let addr: PciAddress = "00:05.0".parse().unwrap();
        let err = VfioPci::open_at(&addr, &fake.sysfs(), &fake.root.join("dev")).unwrap_err();
        assert!(matches!(err, VfioError::WrongDriver { .. }), "{err:?}");
    }

    #[test]
    fn missing_device_nodes_name_the_path_and_a_fix() {
        let fake = FakeSysfs::new();
        fake.add("0000:00:05.0", NVME_CLASS_CODE, Some("vfio-pci"), Some(4));
        let addr: PciAddress = "0000:00:05.0".parse().unwrap();
        let dev = fake.root.join("dev-vfio");
        let err = VfioPci::open_at(&addr, &fake.sysfs(), &dev).unwrap_err();
        let VfioError::DeviceNode { path, source } = &err else {
            panic!("{err:?}")
        };
        assert_eq!(path, &dev.join("vfio"));
        assert_eq!(source.kind(), std::io::ErrorKind::NotFound);
        assert!(err.to_string().contains("modprobe vfio-pci"), "{err}");

        // With a (non-VFIO) container node present, the group node is the next one checked.
        std::fs::create_dir_all(&dev).unwrap();
        std::fs::write(dev.join("vfio"), b"").unwrap();
        let err = VfioPci::open_at(&addr, &fake.sysfs(), &dev).unwrap_err();
        let VfioError::DeviceNode { path, .. } = &err else {
            panic!("{err:?}")
        };
        assert_eq!(path, &dev.join("4"));
    }

    #[test]
    fn an_empty_context_refuses_to_map_until_a_device_joins() {
        let fake = FakeSysfs::new();
        let dev = fake.root.join("dev-vfio");
        std::fs::create_dir_all(&dev).unwrap();
        // Without the container node the context cannot be made, and the error says why.
        let err = DmaContext::new_at(&fake.sysfs(), &dev).unwrap_err();
        assert!(matches!(&err, VfioError::DeviceNode { path, .. } if path == &dev.join("vfio")));
        std::fs::write(dev.join("vfio"), b"").unwrap();
        let ctx = DmaContext::new_at(&fake.sysfs(), &dev).unwrap();
        assert!(ctx.iommu_groups().is_empty());
        let err = crate::DmaBuffer::allocate(&ctx.mapper(), 4096).unwrap_err();
        assert!(matches!(err, crate::DmaError::NoDevice), "{err:?}");
        assert!(err.to_string().contains("open_pci_in"), "{err}");
        // Two contexts are two address spaces.
        let other = DmaContext::new_at(&fake.sysfs(), &dev).unwrap();
        assert_ne!(ctx.domain(), other.domain());
        assert_eq!(ctx.mapper().domain(), ctx.domain());
    }

    #[test]
    fn permission_denied_hint_mentions_root_and_chown() {
        let err = VfioError::DeviceNode {
            path: "/dev/vfio/4".into(),
            source: std::io::Error::from_raw_os_error(libc::EACCES),
        };
        let msg = err.to_string();
        assert!(
            msg.contains("run as root") && msg.contains("chown"),
            "{msg}"
        );
    }

    #[test]
    fn a_held_group_is_in_use_and_the_message_says_only_one_process_gets_it() {
        let busy = std::io::Error::from_raw_os_error(libc::EBUSY);
        let err = crate::error::open_error("/dev/vfio/4".into(), busy);
        let VfioError::InUse { path, source } = &err else {
            panic!("{err:?}")
        };
        assert_eq!(path, std::path::Path::new("/dev/vfio/4"));
        assert_eq!(source.raw_os_error(), Some(libc::EBUSY));
        let msg = err.to_string();
        for part in [
            "/dev/vfio/4 is in use",
            "exclusive to one process",
            "a second process cannot open it",
            "fuser -v /dev/vfio/4",
            "only through the first",
            "Controller::open_pci_in",
        ] {
            assert!(msg.contains(part), "missing {part:?}: {msg}");
        }
        // Other errors stay what they were.
        let missing = std::io::Error::from_raw_os_error(libc::ENOENT);
        let err = crate::error::open_error("/dev/vfio/4".into(), missing);
        assert!(matches!(err, VfioError::DeviceNode { .. }), "{err:?}");
    }

    #[test]
    fn group_not_viable_lists_the_other_devices() {
        let err = VfioError::GroupNotViable {
            group: 7,
            others: vec!["0000:00:05.1 (bound to snd_hda_intel)".into()],
        };
        let msg = err.to_string();
        assert!(
            msg.contains("0000:00:05.1 (bound to snd_hda_intel)") && msg.contains("vfio-pci"),
            "{msg}"
        );
    }
}
