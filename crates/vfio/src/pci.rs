//! PCI function addresses, configuration-space constants and sysfs inspection.
//!
//! Everything here is plain file-system reading: which function exists, its class code, the
//! driver it is bound to and its IOMMU group. The sysfs root is a parameter ([`Sysfs::new`]) so
//! the checks run against a fake tree in unit tests; production code uses [`Sysfs::default`]
//! (`/sys`).

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use thiserror::Error;

use crate::error::VfioError;

/// PCI class code (base class, sub-class, programming interface) of an NVMe controller:
/// mass storage (0x01), non-volatile memory (0x08), NVMe I/O controller (0x02).
/// (NVMe over PCIe Transport Specification, "PCI Header": CC register.)
pub const NVME_CLASS_CODE: u32 = 0x01_08_02;

/// Offsets and bits of the PCI type 0 configuration header (PCI Local Bus Specification 3.0,
/// section 6.2; PCIe Base Specification, section 7.5.1).
pub mod config {
    /// Vendor ID register (16 bits).
    pub const VENDOR_ID: u64 = 0x00;
    /// Device ID register (16 bits).
    pub const DEVICE_ID: u64 = 0x02;
    /// Command register (16 bits).
    pub const COMMAND: u64 = 0x04;
    /// Status register (16 bits).
    pub const STATUS: u64 = 0x06;
    /// Class code register (24 bits at 0x09..0x0c; 0x08 is the revision ID).
    pub const CLASS_REVISION: u64 = 0x08;

    /// Command register: respond to I/O space accesses.
    pub const COMMAND_IO_SPACE: u16 = 1 << 0;
    /// Command register: respond to memory space accesses (needed to reach BAR0).
    pub const COMMAND_MEMORY_SPACE: u16 = 1 << 1;
    /// Command register: allow the function to master the bus (needed for any DMA).
    pub const COMMAND_BUS_MASTER: u16 = 1 << 2;
    /// Command register: disable legacy INTx assertion (we use polling or MSI-X).
    pub const COMMAND_INTX_DISABLE: u16 = 1 << 10;
}

/// The address of a PCI function: `domain:bus:device.function`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PciAddress {
    /// PCI segment (domain), 0 on most machines.
    pub domain: u16,
    /// Bus number.
    pub bus: u8,
    /// Device number (0..32).
    pub device: u8,
    /// Function number (0..8).
    pub function: u8,
}

/// Largest device number (5 bits).
const MAX_DEVICE: u8 = 0x1f;
/// Largest function number (3 bits, without ARI).
const MAX_FUNCTION: u8 = 0x7;

/// A string that is not a PCI address.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error(
    "malformed PCI address `{input}`: expected DDDD:BB:DD.F or BB:DD.F in hex \
     (e.g. 0000:00:05.0); `lspci -D` lists the functions"
)]
pub struct PciAddressError {
    /// The rejected text.
    pub input: String,
}

impl FromStr for PciAddress {
    type Err = PciAddressError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || PciAddressError {
            input: s.to_owned(),
        };
        // Exact-width hex field (sysfs always prints fixed widths).
        fn field(text: &str, width: usize) -> Option<u32> {
            if text.len() != width || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
                return None;
            }
            u32::from_str_radix(text, 16).ok()
        }
        let (rest, function) = s.rsplit_once('.').ok_or_else(err)?;
        let parts: Vec<&str> = rest.split(':').collect();
        let (domain, bus, device) = match parts.as_slice() {
            [domain, bus, device] => (field(domain, 4), field(bus, 2), field(device, 2)),
            [bus, device] => (Some(0), field(bus, 2), field(device, 2)),
            _ => return Err(err()),
        };
        let (Some(domain), Some(bus), Some(device), Some(function)) =
            (domain, bus, device, field(function, 1))
        else {
            return Err(err());
        };
        let (device, function) = (device as u8, function as u8);
        if device > MAX_DEVICE || function > MAX_FUNCTION {
            return Err(err());
        }
        Ok(PciAddress {
            domain: domain as u16,
            bus: bus as u8,
            device,
            function,
        })
    }
}

impl fmt::Display for PciAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:04x}:{:02x}:{:02x}.{:x}",
            self.domain, self.bus, self.device, self.function
        )
    }
}

/// Name of the driver that gives userspace access through VFIO.
pub const VFIO_PCI_DRIVER: &str = "vfio-pci";

/// A view of sysfs rooted at a configurable directory.
#[derive(Clone, Debug)]
pub struct Sysfs {
    root: PathBuf,
}

impl Default for Sysfs {
    fn default() -> Self {
        Self::new("/sys")
    }
}

impl Sysfs {
    /// A view rooted at `root` (normally `/sys`).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `<root>/bus/pci/devices/<addr>`.
    pub fn device_dir(&self, addr: &PciAddress) -> PathBuf {
        self.root.join("bus/pci/devices").join(addr.to_string())
    }

    /// Whether the function exists.
    pub fn exists(&self, addr: &PciAddress) -> bool {
        self.device_dir(addr).is_dir()
    }

    /// The 24-bit class code (`class` file, e.g. `0x010802`).
    pub fn class_code(&self, addr: &PciAddress) -> Result<u32, VfioError> {
        let path = self.device_dir(addr).join("class");
        let text = std::fs::read_to_string(&path).map_err(|source| VfioError::Sysfs {
            path: path.clone(),
            source,
        })?;
        let trimmed = text.trim();
        let hex = trimmed.strip_prefix("0x").unwrap_or(trimmed);
        u32::from_str_radix(hex, 16).map_err(|_| VfioError::SysfsFormat {
            path,
            found: trimmed.to_owned(),
            expected: "a hex class code such as 0x010802",
        })
    }

    /// The name of the bound driver (the last component of the `driver` link), or `None`
    /// when the function is bound to no driver.
    pub fn driver(&self, addr: &PciAddress) -> Result<Option<String>, VfioError> {
        link_name(&self.device_dir(addr).join("driver"))
    }

    /// The IOMMU group number (the last component of the `iommu_group` link), or `None` when
    /// the function has no group (no IOMMU, or the IOMMU is disabled).
    pub fn iommu_group(&self, addr: &PciAddress) -> Result<Option<u32>, VfioError> {
        let path = self.device_dir(addr).join("iommu_group");
        let Some(name) = link_name(&path)? else {
            return Ok(None);
        };
        name.parse().map(Some).map_err(|_| VfioError::SysfsFormat {
            path,
            found: name,
            expected: "a link to kernel/iommu_groups/<number>",
        })
    }

    /// The devices in IOMMU group `group` (entries of `kernel/iommu_groups/<group>/devices`),
    /// sorted by name.
    pub fn group_devices(&self, group: u32) -> Result<Vec<String>, VfioError> {
        let dir = self
            .root
            .join("kernel/iommu_groups")
            .join(group.to_string())
            .join("devices");
        let entries = std::fs::read_dir(&dir).map_err(|source| VfioError::Sysfs {
            path: dir.clone(),
            source,
        })?;
        let mut names = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|source| VfioError::Sysfs {
                path: dir.clone(),
                source,
            })?;
            names.push(entry.file_name().to_string_lossy().into_owned());
        }
        names.sort();
        Ok(names)
    }

    /// The other devices of `addr`'s IOMMU group `group`, each described as `name (driver)`,
    /// for error messages about group viability.
    pub fn group_peers(&self, addr: &PciAddress, group: u32) -> Result<Vec<String>, VfioError> {
        let me = addr.to_string();
        let mut peers = Vec::new();
        for name in self.group_devices(group)? {
            if name == me {
                continue;
            }
            let driver = match name.parse::<PciAddress>() {
                Ok(peer) => self.driver(&peer).ok().flatten(),
                Err(_) => None,
            };
            peers.push(match driver {
                Some(d) => format!("{name} (bound to {d})"),
                None => format!("{name} (no driver)"),
            });
        }
        Ok(peers)
    }

    /// Checks, in order, that `addr` exists, is an NVMe controller, is bound to vfio-pci and
    /// has an IOMMU group; returns the group number. Each failure says how to fix it.
    pub fn check_vfio_ready(&self, addr: &PciAddress) -> Result<u32, VfioError> {
        if !self.exists(addr) {
            return Err(VfioError::NoSuchDevice {
                addr: *addr,
                path: self.device_dir(addr),
            });
        }
        let class = self.class_code(addr)?;
        if class != NVME_CLASS_CODE {
            return Err(VfioError::NotNvme { addr: *addr, class });
        }
        match self.driver(addr)? {
            Some(driver) if driver == VFIO_PCI_DRIVER => {}
            Some(driver) => {
                return Err(VfioError::WrongDriver {
                    addr: *addr,
                    driver,
                })
            }
            None => return Err(VfioError::NoDriver { addr: *addr }),
        }
        self.iommu_group(addr)?
            .ok_or(VfioError::NoIommuGroup { addr: *addr })
    }
}

/// The final path component of the symlink at `path`, or `None` if there is no such link.
fn link_name(path: &Path) -> Result<Option<String>, VfioError> {
    match std::fs::read_link(path) {
        Ok(target) => Ok(target.file_name().map(|n| n.to_string_lossy().into_owned())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(VfioError::Sysfs {
            path: path.to_owned(),
            source,
        }),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::os::unix::fs::symlink;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A fake sysfs tree in a fresh temporary directory, removed on drop.
    pub(crate) struct FakeSysfs {
        pub root: PathBuf,
    }

    impl FakeSysfs {
        pub(crate) fn new() -> Self {
            static COUNTER: AtomicUsize = AtomicUsize::new(0);
            let root = std::env::temp_dir().join(format!(
                "nvme-vfio-sysfs-{}-{}",
                std::process::id(),
                COUNTER.fetch_add(1, Ordering::Relaxed)
            ));
            std::fs::create_dir_all(&root).unwrap();
            Self { root }
        }

        /// Adds a function with a class code, an optional driver and an optional group.
        pub(crate) fn add(&self, addr: &str, class: u32, driver: Option<&str>, group: Option<u32>) {
            let dir = self.root.join("bus/pci/devices").join(addr);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("class"), format!("{class:#08x}\n")).unwrap();
            if let Some(d) = driver {
                symlink(format!("../../../bus/pci/drivers/{d}"), dir.join("driver")).unwrap();
            }
            if let Some(g) = group {
                symlink(
                    format!("../../../kernel/iommu_groups/{g}"),
                    dir.join("iommu_group"),
                )
                .unwrap();
                let gdir = self.root.join(format!("kernel/iommu_groups/{g}/devices"));
                std::fs::create_dir_all(&gdir).unwrap();
                symlink(
                    format!("../../../../bus/pci/devices/{addr}"),
                    gdir.join(addr),
                )
                .unwrap();
            }
        }

        pub(crate) fn sysfs(&self) -> Sysfs {
            Sysfs::new(&self.root)
        }
    }

    impl Drop for FakeSysfs {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.root);
        }
    }

    fn addr(s: &str) -> PciAddress {
        s.parse().unwrap()
    }

    #[test]
    fn parses_full_and_short_forms() {
        let a = addr("0000:00:05.0");
        assert_eq!(
            a,
            PciAddress {
                domain: 0,
                bus: 0,
                device: 5,
                function: 0
            }
        );
        assert_eq!(addr("00:05.0"), a);
        let b = addr("001a:Bf:1f.7");
        assert_eq!(
            b,
            PciAddress {
                domain: 0x1a,
                bus: 0xbf,
                device: 0x1f,
                function: 7
            }
        );
        assert_eq!(b.to_string(), "001a:bf:1f.7");
        assert_eq!(a.to_string(), "0000:00:05.0");
        assert_eq!(addr(&b.to_string()), b);
    }

    #[test]
    fn rejects_malformed_addresses() {
        for bad in [
            "",
            "05.0",
            "0000:00:05",
            "0:00:05.0",
            "0000:0:05.0",
            "0000:00:5.0",
            "0000:00:20.0",
            "0000:00:05.8",
            "0000:00:05.00",
            "g000:00:05.0",
            "0000:00:05.0 ",
            "1:0000:00:05.0",
            "+000:00:05.0",
        ] {
            let err = bad.parse::<PciAddress>().unwrap_err();
            assert_eq!(err.input, bad);
            let msg = err.to_string();
            assert!(
                msg.contains("0000:00:05.0") && msg.contains("lspci -D"),
                "{msg}"
            );
        }
    }

    #[test]
    fn reads_class_driver_and_group() {
        let fake = FakeSysfs::new();
        fake.add("0000:00:05.0", NVME_CLASS_CODE, Some("vfio-pci"), Some(7));
        fake.add("0000:00:05.1", 0x040300, Some("snd_hda_intel"), Some(7));
        let sys = fake.sysfs();
        let a = addr("0000:00:05.0");
        assert!(sys.exists(&a));
        assert!(!sys.exists(&addr("0000:00:06.0")));
        assert_eq!(sys.class_code(&a).unwrap(), NVME_CLASS_CODE);
        assert_eq!(sys.driver(&a).unwrap().as_deref(), Some("vfio-pci"));
        assert_eq!(sys.iommu_group(&a).unwrap(), Some(7));
        assert_eq!(
            sys.group_devices(7).unwrap(),
            ["0000:00:05.0", "0000:00:05.1"]
        );
        assert_eq!(
            sys.group_peers(&a, 7).unwrap(),
            ["0000:00:05.1 (bound to snd_hda_intel)"]
        );
        assert_eq!(sys.check_vfio_ready(&a).unwrap(), 7);
    }

    #[test]
    fn unknown_function_points_at_lspci() {
        let fake = FakeSysfs::new();
        let err = fake
            .sysfs()
            .check_vfio_ready(&addr("0000:00:09.0"))
            .unwrap_err();
        assert!(matches!(err, VfioError::NoSuchDevice { .. }));
        assert!(err.to_string().contains("lspci -D"), "{err}");
    }

    #[test]
    fn non_nvme_class_is_rejected() {
        let fake = FakeSysfs::new();
        fake.add("0000:00:03.0", 0x020000, Some("vfio-pci"), Some(3));
        let err = fake
            .sysfs()
            .check_vfio_ready(&addr("0000:00:03.0"))
            .unwrap_err();
        assert!(
            matches!(
                err,
                VfioError::NotNvme {
                    class: 0x020000,
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(err.to_string().contains("0x020000"), "{err}");
    }

    #[test]
    fn kernel_nvme_binding_explains_rebinding() {
        let fake = FakeSysfs::new();
        fake.add("0000:00:05.0", NVME_CLASS_CODE, Some("nvme"), Some(7));
        let err = fake
            .sysfs()
            .check_vfio_ready(&addr("0000:00:05.0"))
            .unwrap_err();
        let msg = err.to_string();
        assert!(matches!(&err, VfioError::WrongDriver { driver, .. } if driver == "nvme"));
        assert!(msg.contains("`nvme`"), "{msg}");
        assert!(
            msg.contains("PCI_ALLOWED=0000:00:05.0 ./hugepage-setup.sh"),
            "{msg}"
        );
        assert!(msg.contains("driver_override"), "{msg}");
    }

    #[test]
    fn unbound_function_is_reported() {
        let fake = FakeSysfs::new();
        fake.add("0000:00:05.0", NVME_CLASS_CODE, None, Some(7));
        let err = fake
            .sysfs()
            .check_vfio_ready(&addr("0000:00:05.0"))
            .unwrap_err();
        assert!(matches!(err, VfioError::NoDriver { .. }), "{err:?}");
        assert!(err.to_string().contains("hugepage-setup.sh"), "{err}");
    }

    #[test]
    fn missing_iommu_group_means_no_iommu() {
        let fake = FakeSysfs::new();
        fake.add("0000:00:05.0", NVME_CLASS_CODE, Some("vfio-pci"), None);
        let err = fake
            .sysfs()
            .check_vfio_ready(&addr("0000:00:05.0"))
            .unwrap_err();
        assert!(matches!(err, VfioError::NoIommuGroup { .. }), "{err:?}");
        let msg = err.to_string();
        assert!(
            msg.contains("intel_iommu=on") && msg.contains("amd_iommu=on"),
            "{msg}"
        );
    }

    #[test]
    fn garbage_class_file_is_a_format_error() {
        let fake = FakeSysfs::new();
        fake.add("0000:00:05.0", NVME_CLASS_CODE, Some("vfio-pci"), Some(1));
        std::fs::write(
            fake.root.join("bus/pci/devices/0000:00:05.0/class"),
            "nvme\n",
        )
        .unwrap();
        let err = fake.sysfs().class_code(&addr("0000:00:05.0")).unwrap_err();
        assert!(matches!(err, VfioError::SysfsFormat { .. }), "{err:?}");
    }
}
