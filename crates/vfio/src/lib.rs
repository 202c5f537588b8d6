//! VFIO access for a userspace NVMe driver.
//!
//! - [`pci`]: PCI addresses, configuration-space constants, sysfs inspection.
//! - [`device`]: [`VfioPci`], a PCI function opened through vfio-pci (config space, BAR mmap,
//!   reset) in its own type1v2 [`container`], or in a shared [`DmaContext`].
//! - [`context`]: [`DmaContext`], one IOMMU address space that several functions join, so one
//!   buffer pool serves them all.
//! - [`container`]: the IOMMU address space (one container, one or more IOMMU groups);
//!   implements [`DmaMapper`] with the [`iova`] allocator.
//! - [`mmio`]: volatile register windows and doorbells (the only place device registers are
//!   dereferenced).
//! - [`dma`]: DMA memory ([`dma::DmaRegion`] shared with the device, [`dma::DmaBuffer`] owned by
//!   the CPU) and the [`dma::DmaMapper`] seam that VFIO and the in-process emulator implement.
//! - [`enumerate`]: the NVMe functions of the machine from sysfs (class 0108xxh, driver
//!   binding, allow list), for probe/attach.
//! - [`uevent`]: the kernel's uevents (NETLINK_KOBJECT_UEVENT socket, a defensive parser,
//!   the [`uevent::UeventSource`] seam) for the hot-plug monitor.
//! - [`barrier`]: CPU/device memory barriers for every supported architecture.
//! - [`function`]: [`FunctionControl`], stopping a function's DMA at teardown.
//! - `ioctl` (private): every VFIO system call of the crate, in one small audited module.
//! - [`mode`]: which VFIO interface opens a device (type1 container, iommufd + device cdev,
//!   no-IOMMU), chosen automatically or by `NVME_VFIO_MODE`.
//! - [`iommufd`]: the iommufd backend (its own UAPI structures and ioctls, an IOAS as
//!   [`DmaMapper`]).
//! - [`noiommu`] and [`pagemap`]: no-IOMMU mode (physical addresses from `/proc/self/pagemap`,
//!   pinned and contiguous hugepage memory).
//!
//! # Example
//!
//! PCI addresses parse with or without the domain; opening a function needs it bound to
//! vfio-pci (a real device, so this part is not run here):
//!
//! ```
//! use nvme_vfio::pci::PciAddress;
//!
//! let addr: PciAddress = "01:00.0".parse()?;
//! assert_eq!(addr.to_string(), "0000:01:00.0");
//! assert!("01:00".parse::<PciAddress>().is_err()); // the error says what form is expected
//! # Ok::<(), nvme_vfio::pci::PciAddressError>(())
//! ```
//!
//! ```no_run
//! use nvme_vfio::device::VfioPci;
//!
//! let dev = VfioPci::open(&"0000:01:00.0".parse()?)?; // bound to vfio-pci
//! let _bar0 = dev.map_bar(0)?;                        // the NVMe registers
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![deny(missing_docs)]

pub mod barrier;
pub mod container;
pub mod context;
pub mod device;
pub mod dma;
pub mod enumerate;
pub mod error;
pub mod function;
mod ioctl;
pub mod iommufd;
pub mod iova;
pub mod irq;
pub mod mmio;
pub mod mode;
pub mod noiommu;
pub mod pagemap;
pub mod pci;
pub mod uevent;

pub use container::VfioContainer;
pub use context::DmaContext;
pub use device::VfioPci;
pub use dma::{DmaBuffer, DmaDomain, DmaError, DmaMapper, DmaRegion, Iova};
pub use enumerate::{Binding, FunctionFilter, PciFunction};
pub use error::VfioError;
pub use function::FunctionControl;
pub use iova::IovaAllocator;
pub use irq::{FdWait, InterruptController, InterruptEvent};
pub use mmio::{Doorbell, MappingOwner, Mmio};
pub use mode::{VfioMode, MODE_ENV};
pub use pci::{PciAddress, PciAddressError, Sysfs, NVME_CLASS_CODE};
