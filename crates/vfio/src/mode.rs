//! Which VFIO interface a device is opened through.
//!
//! - [`VfioMode::Type1`]: the legacy group/container interface with the type1v2 IOMMU backend
//!   (`/dev/vfio/vfio` + `/dev/vfio/<group>`), every kernel since 3.x.
//! - [`VfioMode::Iommufd`]: the VFIO device cdev (`/dev/vfio/devices/vfioN`, Linux 6.6+) bound
//!   to `/dev/iommu`, with an IOAS as the DMA address space ([`crate::iommufd`]).
//! - [`VfioMode::NoIommu`]: VFIO's unsafe no-IOMMU mode (`/dev/vfio/noiommu-<group>`): no
//!   translation, the device is given physical addresses and can reach all memory
//!   ([`crate::noiommu`]). Only ever chosen when asked for.
//!
//! The choice: `NVME_VFIO_MODE=type1|iommufd|noiommu` (or `auto`, the default) forces one;
//! `auto` takes iommufd when the device has a cdev and `/dev/iommu` exists and opens, else type1, and
//! refuses a device in a no-IOMMU group (opting into unprotected DMA must be explicit).

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use crate::error::VfioError;
use crate::pci::{PciAddress, Sysfs};

/// The environment variable that forces a mode.
pub const MODE_ENV: &str = "NVME_VFIO_MODE";

/// A VFIO interface.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum VfioMode {
    /// Group + container, type1v2 IOMMU.
    Type1,
    /// Device cdev + iommufd IOAS.
    Iommufd,
    /// No-IOMMU group: physical addresses, no isolation.
    NoIommu,
}

impl VfioMode {
    /// The name used by [`MODE_ENV`] and in log lines.
    pub fn name(self) -> &'static str {
        match self {
            VfioMode::Type1 => "type1",
            VfioMode::Iommufd => "iommufd",
            VfioMode::NoIommu => "noiommu",
        }
    }
}

impl fmt::Display for VfioMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What [`MODE_ENV`] asks for: a mode, or `None` for automatic choice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModeRequest(pub Option<VfioMode>);

impl FromStr for ModeRequest {
    type Err = VfioError;

    fn from_str(s: &str) -> Result<Self, VfioError> {
        match s.trim().to_ascii_lowercase().as_str() {
            "" | "auto" => Ok(ModeRequest(None)),
            "type1" | "container" => Ok(ModeRequest(Some(VfioMode::Type1))),
            "iommufd" | "cdev" => Ok(ModeRequest(Some(VfioMode::Iommufd))),
            "noiommu" | "no-iommu" => Ok(ModeRequest(Some(VfioMode::NoIommu))),
            _ => Err(VfioError::BadMode { value: s.into() }),
        }
    }
}

impl ModeRequest {
    /// Reads [`MODE_ENV`] (unset: automatic).
    pub fn from_env() -> Result<Self, VfioError> {
        match std::env::var(MODE_ENV) {
            Ok(v) => v.parse(),
            Err(std::env::VarError::NotPresent) => Ok(ModeRequest(None)),
            Err(std::env::VarError::NotUnicode(v)) => Err(VfioError::BadMode {
                value: v.to_string_lossy().into_owned(),
            }),
        }
    }
}

/// The interfaces present for one device, found by [`Availability::probe`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Availability {
    /// `/dev/vfio/<group>` (a group with an IOMMU).
    pub group_node: Option<PathBuf>,
    /// `/dev/vfio/noiommu-<group>` (the group is a no-IOMMU group).
    pub noiommu_node: Option<PathBuf>,
    /// `/dev/vfio/devices/vfioN`, from `/sys/bus/pci/devices/<addr>/vfio-dev/vfioN`.
    pub cdev: Option<PathBuf>,
    /// `/dev/iommu`.
    pub iommufd: Option<PathBuf>,
    /// `/dev/iommu` exists but this process may not open it for reading and writing (it is a
    /// shared node: `hugepage-setup.sh` hands it to a user only with `IOMMUFD_USER=1`). `auto`
    /// then takes type1, whose group node the script does hand over.
    pub iommufd_denied: bool,
}

/// `/dev/iommu` next to `dev_vfio` (`/dev/vfio` -> `/dev/iommu`).
pub(crate) fn iommufd_node(dev_vfio: &Path) -> PathBuf {
    dev_vfio
        .parent()
        .unwrap_or_else(|| Path::new("/dev"))
        .join("iommu")
}

impl Availability {
    /// Looks at sysfs and the device nodes under `dev_vfio` for `addr` in IOMMU group `group`.
    pub fn probe(addr: &PciAddress, group: u32, sysfs: &Sysfs, dev_vfio: &Path) -> Self {
        let exists = |p: PathBuf| p.exists().then_some(p);
        // The cdev's name: the single entry of .../vfio-dev/ (e.g. vfio0).
        let cdev = std::fs::read_dir(sysfs.device_dir(addr).join("vfio-dev"))
            .ok()
            .and_then(|mut d| d.find_map(|e| e.ok()))
            .and_then(|e| exists(dev_vfio.join("devices").join(e.file_name())));
        let iommufd = exists(iommufd_node(dev_vfio));
        // Opening /dev/iommu only creates an empty iommufd context, closed again at once; it is
        // the one test that also sees ACLs, capabilities and the effective ids.
        let iommufd_denied = iommufd.as_ref().is_some_and(|p| {
            matches!(
                std::fs::OpenOptions::new().read(true).write(true).open(p),
                Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied
            )
        });
        Availability {
            group_node: exists(dev_vfio.join(group.to_string())),
            noiommu_node: exists(dev_vfio.join(format!("noiommu-{group}"))),
            cdev,
            iommufd,
            iommufd_denied,
        }
    }

    /// Picks the mode for `request` from what is present; each refusal says what is missing and
    /// how to get it.
    pub fn choose(&self, addr: &PciAddress, request: ModeRequest) -> Result<VfioMode, VfioError> {
        let unavailable = |mode: VfioMode, missing: String| VfioError::ModeUnavailable {
            addr: *addr,
            mode,
            missing,
        };
        match request.0 {
            Some(VfioMode::NoIommu) => match self.noiommu_node {
                Some(_) => Ok(VfioMode::NoIommu),
                None => Err(unavailable(
                    VfioMode::NoIommu,
                    "no /dev/vfio/noiommu-<group> node: the device has an IOMMU, or it was bound \
                     to vfio-pci without no-IOMMU mode; bind it with `sudo NVME_VFIO_MODE=noiommu \
                     PCI_ALLOWED=<addr> ./hugepage-setup.sh config` (it sets vfio's \
                     enable_unsafe_noiommu_mode; the kernel needs CONFIG_VFIO_NOIOMMU)"
                        .into(),
                )),
            },
            _ if self.noiommu_node.is_some() => Err(VfioError::NoIommuNotRequested { addr: *addr }),
            Some(VfioMode::Iommufd) => match (&self.cdev, &self.iommufd) {
                (Some(_), Some(_)) if self.iommufd_denied => Err(unavailable(
                    VfioMode::Iommufd,
                    "no permission to open /dev/iommu (a node shared by every iommufd user): run \
                     as root, grant it with `sudo IOMMUFD_USER=1 TARGET_USER=<user> \
                     ./hugepage-setup.sh config`, or use NVME_VFIO_MODE=type1"
                        .into(),
                )),
                (Some(_), Some(_)) => Ok(VfioMode::Iommufd),
                (None, _) => Err(unavailable(
                    VfioMode::Iommufd,
                    "no VFIO device cdev (/sys/bus/pci/devices/<addr>/vfio-dev/vfioN and \
                     /dev/vfio/devices/vfioN): it needs Linux 6.6+ with CONFIG_VFIO_DEVICE_CDEV"
                        .into(),
                )),
                (_, None) => Err(unavailable(
                    VfioMode::Iommufd,
                    "no /dev/iommu: load it with `modprobe iommufd` (CONFIG_IOMMUFD)".into(),
                )),
            },
            Some(VfioMode::Type1) => match self.group_node {
                Some(_) => Ok(VfioMode::Type1),
                None => Err(unavailable(
                    VfioMode::Type1,
                    "no /dev/vfio/<group> node: the kernel has no VFIO group interface \
                     (CONFIG_VFIO_GROUP) or vfio-pci is not loaded"
                        .into(),
                )),
            },
            None if self.cdev.is_some() && self.iommufd.is_some() && !self.iommufd_denied => {
                Ok(VfioMode::Iommufd)
            }
            None => Ok(VfioMode::Type1),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pci::tests::FakeSysfs;
    use crate::pci::NVME_CLASS_CODE;

    fn addr() -> PciAddress {
        "0000:00:04.0".parse().unwrap()
    }

    fn some(p: &str) -> Option<PathBuf> {
        Some(PathBuf::from(p))
    }

    #[test]
    fn requests_parse_and_bad_ones_are_named() {
        assert_eq!("".parse::<ModeRequest>().unwrap(), ModeRequest(None));
        assert_eq!("Auto".parse::<ModeRequest>().unwrap(), ModeRequest(None));
        assert_eq!(
            "iommufd".parse::<ModeRequest>().unwrap(),
            ModeRequest(Some(VfioMode::Iommufd))
        );
        assert_eq!(
            " type1\n".parse::<ModeRequest>().unwrap(),
            ModeRequest(Some(VfioMode::Type1))
        );
        assert_eq!(
            "noiommu".parse::<ModeRequest>().unwrap(),
            ModeRequest(Some(VfioMode::NoIommu))
        );
        let err = "vfio2".parse::<ModeRequest>().unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("vfio2") && msg.contains("type1|iommufd|noiommu"),
            "{msg}"
        );
    }

    #[test]
    fn auto_prefers_iommufd_only_when_cdev_and_dev_iommu_exist() {
        let mut a = Availability {
            group_node: some("/dev/vfio/4"),
            ..Default::default()
        };
        let auto = ModeRequest(None);
        assert_eq!(a.choose(&addr(), auto).unwrap(), VfioMode::Type1);
        a.cdev = some("/dev/vfio/devices/vfio0");
        assert_eq!(a.choose(&addr(), auto).unwrap(), VfioMode::Type1);
        a.iommufd = some("/dev/iommu");
        assert_eq!(a.choose(&addr(), auto).unwrap(), VfioMode::Iommufd);
        // Forcing type1 still works when both exist.
        let type1 = ModeRequest(Some(VfioMode::Type1));
        assert_eq!(a.choose(&addr(), type1).unwrap(), VfioMode::Type1);
    }

    #[test]
    fn auto_takes_type1_when_dev_iommu_may_not_be_opened() {
        // hugepage-setup.sh hands a user the group node and the cdev, not the shared /dev/iommu.
        let a = Availability {
            group_node: some("/dev/vfio/4"),
            cdev: some("/dev/vfio/devices/vfio0"),
            iommufd: some("/dev/iommu"),
            iommufd_denied: true,
            ..Default::default()
        };
        assert_eq!(
            a.choose(&addr(), ModeRequest(None)).unwrap(),
            VfioMode::Type1
        );
        let err = a
            .choose(&addr(), ModeRequest(Some(VfioMode::Iommufd)))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("permission") && err.contains("IOMMUFD_USER=1") && err.contains("type1"),
            "{err}"
        );
    }

    #[test]
    fn forced_modes_fail_with_what_is_missing() {
        let a = Availability {
            group_node: some("/dev/vfio/4"),
            iommufd: some("/dev/iommu"),
            ..Default::default()
        };
        let err = a
            .choose(&addr(), ModeRequest(Some(VfioMode::Iommufd)))
            .unwrap_err();
        assert!(err.to_string().contains("CONFIG_VFIO_DEVICE_CDEV"), "{err}");
        let err = a
            .choose(&addr(), ModeRequest(Some(VfioMode::NoIommu)))
            .unwrap_err();
        assert!(
            err.to_string().contains("enable_unsafe_noiommu_mode"),
            "{err}"
        );
        let none = Availability::default();
        let err = none
            .choose(&addr(), ModeRequest(Some(VfioMode::Type1)))
            .unwrap_err();
        assert!(matches!(
            err,
            VfioError::ModeUnavailable {
                mode: VfioMode::Type1,
                ..
            }
        ));
    }

    #[test]
    fn noiommu_is_never_chosen_without_being_asked() {
        let a = Availability {
            noiommu_node: some("/dev/vfio/noiommu-0"),
            cdev: some("/dev/vfio/devices/vfio0"),
            iommufd: some("/dev/iommu"),
            ..Default::default()
        };
        for request in [None, Some(VfioMode::Type1), Some(VfioMode::Iommufd)] {
            let err = a.choose(&addr(), ModeRequest(request)).unwrap_err();
            assert!(
                matches!(err, VfioError::NoIommuNotRequested { .. }),
                "{request:?}: {err:?}"
            );
            assert!(err.to_string().contains("NVME_VFIO_MODE=noiommu"), "{err}");
        }
        let forced = ModeRequest(Some(VfioMode::NoIommu));
        assert_eq!(a.choose(&addr(), forced).unwrap(), VfioMode::NoIommu);
    }

    #[test]
    fn probe_finds_nodes_from_sysfs_and_dev() {
        let fake = FakeSysfs::new();
        fake.add("0000:00:04.0", NVME_CLASS_CODE, Some("vfio-pci"), Some(3));
        let dev = fake.root.join("dev/vfio");
        std::fs::create_dir_all(dev.join("devices")).unwrap();
        std::fs::write(dev.join("3"), b"").unwrap();
        let a = Availability::probe(&addr(), 3, &fake.sysfs(), &dev);
        assert_eq!(a.group_node, Some(dev.join("3")));
        assert_eq!((a.cdev.is_some(), a.iommufd.is_some()), (false, false));

        let vfio_dev = fake
            .root
            .join("bus/pci/devices/0000:00:04.0/vfio-dev/vfio7");
        std::fs::create_dir_all(vfio_dev).unwrap();
        std::fs::write(dev.join("devices/vfio7"), b"").unwrap();
        std::fs::write(fake.root.join("dev/iommu"), b"").unwrap();
        std::fs::write(dev.join("noiommu-3"), b"").unwrap();
        let a = Availability::probe(&addr(), 3, &fake.sysfs(), &dev);
        assert_eq!(a.cdev, Some(dev.join("devices/vfio7")));
        assert_eq!(a.iommufd, Some(fake.root.join("dev/iommu")));
        assert_eq!(a.noiommu_node, Some(dev.join("noiommu-3")));
    }
}
