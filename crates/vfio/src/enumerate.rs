//! Enumerating the NVMe functions of the machine from sysfs: the first step of probe/attach.
//!
//! Every PCI function under `<root>/bus/pci/devices` whose class code is mass storage /
//! non-volatile memory (base class 01h, sub-class 08h: NVM Express over PCIe Transport
//! Specification, "PCI Header", CC register; programming interface 02h is NVMe I/O, 03h
//! NVMe administrative) is an NVMe function. For each one [`Sysfs::nvme_functions`] reports
//! its vendor and device ids, its driver binding and its IOMMU group, and whether this process
//! may attach it: bound to vfio-pci with a group ([`Binding::Vfio`]), or bound elsewhere but
//! named by the caller's allow list ([`Binding::Bindable`], which `hugepage-setup.sh` with
//! `PCI_ALLOWED` binds; enumeration itself never rebinds anything).
//!
//! Plain file reading, no device access: the root is [`Sysfs::new`]'s parameter, so the unit
//! tests run against a fake tree.

use std::path::Path;

use crate::error::VfioError;
use crate::pci::{PciAddress, Sysfs, VFIO_PCI_DRIVER};

/// Mask of the base class and sub-class in a 24-bit class code.
const CLASS_SUBCLASS_MASK: u32 = 0xff_ff00;
/// Base class 01h (mass storage), sub-class 08h (non-volatile memory controller): every NVMe
/// function, whatever its programming interface.
pub const NVM_CLASS_SUBCLASS: u32 = 0x01_0800;

/// How a function is bound, as far as attaching it goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Binding {
    /// Bound to vfio-pci, with an IOMMU group (or none: no-IOMMU mode decides at open).
    Vfio,
    /// Bound to another driver (or none) and named by the allow list: binding it to vfio-pci
    /// (`PCI_ALLOWED=<addr> ./hugepage-setup.sh config`) makes it attachable.
    Bindable {
        /// The current driver, if any.
        driver: Option<String>,
    },
    /// Bound to another driver (or none) and not allow-listed: left alone.
    Other {
        /// The current driver, if any.
        driver: Option<String>,
    },
}

impl Binding {
    /// The driver name to print (`vfio-pci`, `nvme`, or `-` for none).
    pub fn driver_name(&self) -> &str {
        match self {
            Binding::Vfio => VFIO_PCI_DRIVER,
            Binding::Bindable { driver } | Binding::Other { driver } => {
                driver.as_deref().unwrap_or("-")
            }
        }
    }

    /// Whether the function can be opened through VFIO now.
    pub fn is_vfio(&self) -> bool {
        matches!(self, Binding::Vfio)
    }
}

/// One NVMe function found in sysfs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PciFunction {
    /// Its address.
    pub address: PciAddress,
    /// The 24-bit class code (`0x010802` for an NVMe I/O controller).
    pub class: u32,
    /// PCI Vendor ID.
    pub vendor: u16,
    /// PCI Device ID.
    pub device: u16,
    /// PCI Subsystem Vendor ID (0 when sysfs does not say).
    pub subsystem_vendor: u16,
    /// PCI Subsystem ID (0 when sysfs does not say).
    pub subsystem_device: u16,
    /// Its driver binding.
    pub binding: Binding,
    /// Its IOMMU group, if any.
    pub iommu_group: Option<u32>,
}

/// Which functions an enumeration reports.
#[derive(Clone, Debug, Default)]
pub struct FunctionFilter {
    /// Only these addresses (empty: every NVMe function).
    pub addresses: Vec<PciAddress>,
    /// Functions not on vfio-pci that may be bound to it (reported as
    /// [`Binding::Bindable`]); the rest are [`Binding::Other`].
    pub allowed: Vec<PciAddress>,
}

impl FunctionFilter {
    /// Every NVMe function.
    pub fn all() -> Self {
        Self::default()
    }

    /// Only the functions in `addresses`.
    pub fn addresses(addresses: impl IntoIterator<Item = PciAddress>) -> Self {
        Self {
            addresses: addresses.into_iter().collect(),
            allowed: Vec::new(),
        }
    }

    /// Also mark the functions in `allowed` bindable.
    pub fn allow(mut self, allowed: impl IntoIterator<Item = PciAddress>) -> Self {
        self.allowed.extend(allowed);
        self
    }

    /// Whether `address` passes the address list.
    pub fn matches(&self, address: &PciAddress) -> bool {
        self.addresses.is_empty() || self.addresses.contains(address)
    }
}

fn read_hex(path: &Path) -> Result<u32, VfioError> {
    let text = std::fs::read_to_string(path).map_err(|source| VfioError::Sysfs {
        path: path.to_owned(),
        source,
    })?;
    let trimmed = text.trim();
    let hex = trimmed.strip_prefix("0x").unwrap_or(trimmed);
    u32::from_str_radix(hex, 16).map_err(|_| VfioError::SysfsFormat {
        path: path.to_owned(),
        found: trimmed.to_owned(),
        expected: "a hex number such as 0x1b36",
    })
}

/// A 16-bit id file; absent (older kernels, fake trees) reads as 0.
fn read_id(dir: &Path, name: &str) -> Result<u16, VfioError> {
    let path = dir.join(name);
    if !path.exists() {
        return Ok(0);
    }
    let v = read_hex(&path)?;
    u16::try_from(v).map_err(|_| VfioError::SysfsFormat {
        path,
        found: format!("{v:#x}"),
        expected: "a 16-bit PCI id",
    })
}

impl Sysfs {
    /// The NVMe functions (class 0108xxh) that pass `filter`, sorted by address. Entries of
    /// `bus/pci/devices` that are not PCI addresses, and functions removed while the scan
    /// runs, are skipped; a function whose files cannot be read is an error.
    pub fn nvme_functions(&self, filter: &FunctionFilter) -> Result<Vec<PciFunction>, VfioError> {
        let dir = self.root().join("bus/pci/devices");
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            // No PCI bus at all (a container, a fake tree without devices): nothing to find.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => return Err(VfioError::Sysfs { path: dir, source }),
        };
        let mut found = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|source| VfioError::Sysfs {
                path: dir.clone(),
                source,
            })?;
            let Ok(address) = entry.file_name().to_string_lossy().parse::<PciAddress>() else {
                continue;
            };
            if !filter.matches(&address) {
                continue;
            }
            match self.nvme_function(&address, filter) {
                Ok(Some(f)) => found.push(f),
                Ok(None) => {}
                // Gone between the directory listing and the read (hot removal): skip it.
                Err(VfioError::Sysfs { source, .. })
                    if source.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        found.sort_by_key(|f| f.address);
        Ok(found)
    }

    /// The function at `address` if it is an NVMe function, with its binding per `filter`'s
    /// allow list.
    pub fn nvme_function(
        &self,
        address: &PciAddress,
        filter: &FunctionFilter,
    ) -> Result<Option<PciFunction>, VfioError> {
        let class = self.class_code(address)?;
        if class & CLASS_SUBCLASS_MASK != NVM_CLASS_SUBCLASS {
            return Ok(None);
        }
        let dir = self.device_dir(address);
        let driver = self.driver(address)?;
        let binding = match driver {
            Some(d) if d == VFIO_PCI_DRIVER => Binding::Vfio,
            driver if filter.allowed.contains(address) => Binding::Bindable { driver },
            driver => Binding::Other { driver },
        };
        Ok(Some(PciFunction {
            address: *address,
            class,
            vendor: read_id(&dir, "vendor")?,
            device: read_id(&dir, "device")?,
            subsystem_vendor: read_id(&dir, "subsystem_vendor")?,
            subsystem_device: read_id(&dir, "subsystem_device")?,
            binding,
            iommu_group: self.iommu_group(address)?,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pci::tests::FakeSysfs;
    use crate::pci::NVME_CLASS_CODE;

    fn addr(s: &str) -> PciAddress {
        s.parse().unwrap()
    }

    /// Two QEMU controllers on vfio-pci and on nvme, an admin-only NVMe function, a NIC, an
    /// entry that is no PCI address.
    fn machine() -> FakeSysfs {
        let fake = FakeSysfs::new();
        fake.add("0000:00:05.0", NVME_CLASS_CODE, Some("nvme"), Some(5));
        fake.add("0000:00:04.0", NVME_CLASS_CODE, Some("vfio-pci"), Some(4));
        fake.add("0000:00:06.0", 0x01_0803, None, Some(6));
        fake.add("0000:00:03.0", 0x02_0000, Some("e1000e"), Some(3));
        let devices = fake.root.join("bus/pci/devices");
        for a in ["0000:00:04.0", "0000:00:05.0"] {
            std::fs::write(devices.join(a).join("vendor"), "0x1b36\n").unwrap();
            std::fs::write(devices.join(a).join("device"), "0x0010\n").unwrap();
            std::fs::write(devices.join(a).join("subsystem_vendor"), "0x1af4\n").unwrap();
            std::fs::write(devices.join(a).join("subsystem_device"), "0x1100\n").unwrap();
        }
        std::fs::create_dir_all(devices.join("not-a-bdf")).unwrap();
        fake
    }

    #[test]
    fn lists_nvme_functions_sorted_with_ids_and_bindings() {
        let fake = machine();
        let found = fake.sysfs().nvme_functions(&FunctionFilter::all()).unwrap();
        let addrs: Vec<String> = found.iter().map(|f| f.address.to_string()).collect();
        assert_eq!(addrs, ["0000:00:04.0", "0000:00:05.0", "0000:00:06.0"]);
        assert_eq!(
            found[0],
            PciFunction {
                address: addr("0000:00:04.0"),
                class: NVME_CLASS_CODE,
                vendor: 0x1b36,
                device: 0x0010,
                subsystem_vendor: 0x1af4,
                subsystem_device: 0x1100,
                binding: Binding::Vfio,
                iommu_group: Some(4),
            }
        );
        assert_eq!(
            found[1].binding,
            Binding::Other {
                driver: Some("nvme".into())
            }
        );
        assert_eq!(found[1].binding.driver_name(), "nvme");
        // Ids absent from the tree read as 0; the programming interface does not matter.
        assert_eq!((found[2].vendor, found[2].class), (0, 0x01_0803));
        assert_eq!(found[2].binding.driver_name(), "-");
        assert!(found[0].binding.is_vfio() && !found[1].binding.is_vfio());
    }

    #[test]
    fn address_filter_and_allow_list() {
        let fake = machine();
        let filter = FunctionFilter::addresses([addr("0000:00:05.0"), addr("0000:00:03.0")])
            .allow([addr("0000:00:05.0")]);
        let found = fake.sysfs().nvme_functions(&filter).unwrap();
        // The NIC passes the address list but is no NVMe function.
        assert_eq!(found.len(), 1);
        assert_eq!(
            found[0].binding,
            Binding::Bindable {
                driver: Some("nvme".into())
            }
        );
        assert!(!filter.matches(&addr("0000:00:04.0")));
        assert!(FunctionFilter::all().matches(&addr("0000:00:04.0")));
    }

    #[test]
    fn an_empty_or_missing_tree_has_no_functions() {
        let fake = FakeSysfs::new();
        assert!(fake
            .sysfs()
            .nvme_functions(&FunctionFilter::all())
            .unwrap()
            .is_empty());
        std::fs::create_dir_all(fake.root.join("bus/pci/devices")).unwrap();
        assert!(fake
            .sysfs()
            .nvme_functions(&FunctionFilter::all())
            .unwrap()
            .is_empty());
    }

    #[test]
    fn a_function_removed_during_the_scan_is_skipped() {
        let fake = machine();
        // A directory whose class file is gone: the function went away mid-scan.
        std::fs::remove_file(fake.root.join("bus/pci/devices/0000:00:06.0/class")).unwrap();
        let found = fake.sysfs().nvme_functions(&FunctionFilter::all()).unwrap();
        assert_eq!(found.len(), 2);
    }

    #[test]
    fn a_garbage_id_file_is_a_format_error() {
        let fake = machine();
        std::fs::write(
            fake.root.join("bus/pci/devices/0000:00:04.0/vendor"),
            "qemu\n",
        )
        .unwrap();
        let err = fake
            .sysfs()
            .nvme_functions(&FunctionFilter::all())
            .unwrap_err();
        assert!(matches!(err, VfioError::SysfsFormat { .. }), "{err:?}");
    }
}
