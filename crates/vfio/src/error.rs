//! The error type of VFIO setup and device access.
//!
//! Every variant carries the data needed to act on it (address, path, errno, flags) and its
//! message says how to fix the problem where a fix is known.

use std::io;
use std::path::PathBuf;

use thiserror::Error;

use crate::dma::DmaError;
use crate::pci::{PciAddress, PciAddressError, NVME_CLASS_CODE};

/// Errors of opening and driving a PCI function through VFIO. New variants may be added
/// (`#[non_exhaustive]`).
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum VfioError {
    /// The text given as a PCI address is malformed.
    #[error(transparent)]
    Address(#[from] PciAddressError),

    /// No such PCI function in sysfs.
    #[error("no PCI function {addr} ({} does not exist); `lspci -D` lists the functions", path.display())]
    NoSuchDevice {
        /// The PCI function.
        addr: PciAddress,
        /// The path involved.
        path: PathBuf,
    },

    /// A sysfs file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Sysfs {
        /// The path involved.
        path: PathBuf,
        /// The underlying I/O error.
        source: io::Error,
    },

    /// A sysfs file holds something unexpected.
    #[error("unexpected content `{found}` in {}: expected {expected}", path.display())]
    SysfsFormat {
        /// The path involved.
        path: PathBuf,
        /// What was found.
        found: String,
        /// What was expected.
        expected: &'static str,
    },

    /// The function is not an NVMe controller.
    #[error(
        "{addr} is not an NVMe controller: its PCI class code is {class:#08x}, an NVMe \
         controller has {NVME_CLASS_CODE:#08x}; `lspci -D -d ::0108` lists NVMe functions"
    )]
    NotNvme {
        /// The PCI function.
        addr: PciAddress,
        /// The function's PCI class code.
        class: u32,
    },

    /// The function is bound to a driver other than vfio-pci.
    #[error(
        "{addr} is bound to the `{driver}` driver, not vfio-pci: rebind it with \
         `sudo PCI_ALLOWED={addr} ./hugepage-setup.sh config`, or by hand as root: \
         `echo vfio-pci > /sys/bus/pci/devices/{addr}/driver_override; \
         echo {addr} > /sys/bus/pci/devices/{addr}/driver/unbind; \
         echo {addr} > /sys/bus/pci/drivers_probe` (unmount its file systems first)"
    )]
    WrongDriver {
        /// The PCI function.
        addr: PciAddress,
        /// The driver the function is bound to.
        driver: String,
    },

    /// The function is bound to no driver.
    #[error(
        "{addr} is not bound to any driver: bind it to vfio-pci with \
         `sudo PCI_ALLOWED={addr} ./hugepage-setup.sh config`, or by hand as root: \
         `modprobe vfio-pci; echo vfio-pci > /sys/bus/pci/devices/{addr}/driver_override; \
         echo {addr} > /sys/bus/pci/drivers_probe`"
    )]
    NoDriver {
        /// The PCI function.
        addr: PciAddress,
    },

    /// The function has no IOMMU group: the IOMMU is absent or disabled.
    #[error(
        "{addr} has no IOMMU group, so the IOMMU is off: enable VT-d (Intel) or AMD-Vi (AMD) \
         in the firmware setup and boot with `intel_iommu=on` or `amd_iommu=on` on the kernel \
         command line"
    )]
    NoIommuGroup {
        /// The PCI function.
        addr: PciAddress,
    },

    /// A VFIO device node could not be opened.
    #[error("cannot open {}: {source}{}", path.display(), node_hint(.source))]
    DeviceNode {
        /// The path involved.
        path: PathBuf,
        /// The underlying I/O error.
        source: io::Error,
    },

    /// The device is held by another process (or another open of this one): VFIO gives a
    /// device to one process at a time. Produced when opening the IOMMU group node fails with
    /// `EBUSY` (type1, no-IOMMU), or when binding the device cdev to an iommufd fails with
    /// `EBUSY` or `EINVAL` (the cdev is already open and bound elsewhere).
    #[error(
        "{} is in use ({source}): VFIO makes a device's IOMMU group (or its device cdev) \
         exclusive to one process, so while another process holds it (one of our tools, a \
         program using the SQLite VFS, a VM) a second process cannot open it; `fuser -v {}` \
         names the holder. A second process gets in only through the first (it owns the \
         controller: open the other databases or queue pairs there, or have it serve them), \
         or after the first exits. Within one process, functions of one IOMMU group go in one \
         DMA context (`DmaContext::new`, then `Controller::open_pci_in` for each)",
        path.display(),
        path.display()
    )]
    InUse {
        /// The node that is held: `/dev/vfio/<group>` or the device cdev.
        path: PathBuf,
        /// The error the kernel returned.
        source: io::Error,
    },

    /// Some device of the IOMMU group is bound to a driver that is not VFIO-friendly.
    #[error(
        "IOMMU group {group} is not viable: every device in it must be bound to vfio-pci (or \
         to no driver) before any of them can be used; other devices in the group: {}",
        others.join(", ")
    )]
    GroupNotViable {
        /// The IOMMU group number.
        group: u32,
        /// The other devices of the group and their drivers.
        others: Vec<String>,
    },

    /// The function is already open in this DMA context (two drivers on one controller would
    /// undo each other's work).
    #[error(
        "{addr} is already open in this DMA context: use the controller already opened on it \
         (it can be cloned and shared between threads), or close that one first"
    )]
    AlreadyOpen {
        /// The PCI function.
        addr: PciAddress,
    },

    /// The kernel speaks another VFIO API version.
    #[error("the kernel's VFIO API version is {found}, this driver speaks version {expected}")]
    ApiVersion {
        /// What was found.
        found: i32,
        /// What was expected.
        expected: u32,
    },

    /// The container cannot use the type1v2 IOMMU backend.
    #[error(
        "the VFIO container does not support the type1v2 IOMMU backend: load it with \
         `modprobe vfio_iommu_type1` (and make sure the IOMMU is enabled)"
    )]
    NoType1v2,

    /// A VFIO ioctl failed.
    #[error("{op} failed: {source}")]
    Ioctl {
        /// The operation that failed.
        op: &'static str,
        /// The underlying I/O error.
        source: io::Error,
    },
    /// The kernel uevent socket (hot-plug monitor) could not be opened or read.
    #[error("uevent socket: {op} failed: {source}")]
    Uevent {
        /// The operation that failed.
        op: &'static str,
        /// The underlying I/O error.
        source: io::Error,
    },
    /// MSI-X vectors asked for are not available.
    #[error("{addr}: cannot route {wanted} MSI-X vectors: the function offers {available}")]
    Interrupts {
        /// The PCI function.
        addr: PciAddress,
        /// How many were asked for.
        wanted: u32,
        /// How many the function offers.
        available: u32,
    },

    /// The requested BAR index is not a BAR (0..=5).
    #[error("BAR index {bar} out of range: a PCI function has BARs 0 to 5")]
    BadBar {
        /// The BAR index.
        bar: u32,
    },

    /// The BAR is not implemented by the function.
    #[error("{addr} does not implement BAR{bar} (VFIO reports it empty)")]
    BarAbsent {
        /// The PCI function.
        addr: PciAddress,
        /// The BAR index.
        bar: u32,
    },

    /// VFIO does not allow mmap of the BAR.
    #[error(
        "BAR{bar} of {addr} cannot be memory-mapped (region flags {flags:#x}); it is an I/O \
         port BAR, or the kernel forbids mapping it"
    )]
    BarNotMappable {
        /// The PCI function.
        addr: PciAddress,
        /// The BAR index.
        bar: u32,
        /// The VFIO region flags.
        flags: u32,
    },

    /// mmap of a BAR failed.
    #[error("mmap of BAR{bar} ({len} bytes) of {addr} failed: {source}")]
    Mmap {
        /// The PCI function.
        addr: PciAddress,
        /// The BAR index.
        bar: u32,
        /// Length in bytes.
        len: usize,
        /// The underlying I/O error.
        source: io::Error,
    },

    /// A configuration-space access failed or was short.
    #[error("PCI config access of {len} bytes at {offset:#x} of {addr} failed: {source}")]
    Config {
        /// The PCI function.
        addr: PciAddress,
        /// Offset in bytes.
        offset: u64,
        /// Length in bytes.
        len: usize,
        /// The underlying I/O error.
        source: io::Error,
    },

    /// A DMA allocation or mapping failed.
    #[error(transparent)]
    Dma(#[from] DmaError),

    /// `NVME_VFIO_MODE` holds something else than a mode name.
    #[error(
        "NVME_VFIO_MODE={value:?} is not a VFIO mode: use type1|iommufd|noiommu or auto (unset)"
    )]
    BadMode {
        /// The value given.
        value: String,
    },

    /// The mode asked for is not available for this device.
    #[error("{addr}: VFIO mode {mode} is not available: {missing}")]
    ModeUnavailable {
        /// The PCI function.
        addr: PciAddress,
        /// The mode asked for.
        mode: crate::mode::VfioMode,
        /// What the mode lacks here.
        missing: String,
    },

    /// The device sits in a no-IOMMU group but no-IOMMU mode was not asked for.
    #[error(
        "{addr} is in a VFIO no-IOMMU group (/dev/vfio/noiommu-*): the device could DMA to any \
         memory; set NVME_VFIO_MODE=noiommu to accept that, or bind it with an IOMMU enabled"
    )]
    NoIommuNotRequested {
        /// The PCI function.
        addr: PciAddress,
    },
}

/// A hint for failing to open `/dev/vfio/*`.
fn node_hint(e: &io::Error) -> &'static str {
    match e.kind() {
        io::ErrorKind::PermissionDenied => {
            " (run as root, or give your user the group node: \
             `sudo TARGET_USER=$USER ./hugepage-setup.sh config` or `sudo chown $USER /dev/vfio/<group>`; \
             large DMA maps also need a higher `ulimit -l`)"
        }
        io::ErrorKind::NotFound => {
            " (is vfio-pci loaded? `sudo modprobe vfio-pci`, then bind the device to it)"
        }
        _ => "",
    }
}

/// The error of opening VFIO node `path`: [`VfioError::InUse`] for `EBUSY` (the group is
/// held by another process or another open), else [`VfioError::DeviceNode`].
pub(crate) fn open_error(path: PathBuf, source: io::Error) -> VfioError {
    if source.raw_os_error() == Some(libc::EBUSY) {
        VfioError::InUse { path, source }
    } else {
        VfioError::DeviceNode { path, source }
    }
}
