//! The namespaces the `nvme` VFS serves: each opened on first use (device string and nsid
//! from the database URI) as one [`NvmeVfs`], kept for the rest of the process, and shared by
//! every database file on it. A PCIe controller (or the emulator) is opened once and shared by
//! all its namespaces; an NVMe/TCP namespace gets its own connection (`AnyController` owns a
//! TCP controller, so two namespaces cannot share one handle).
//!
//! Process-wide state (one mutex): an extension has no owner to hang it on, and SQLite may
//! open files from any thread. It is taken only when a file is opened by name, never per I/O.

use std::collections::HashMap;
use std::sync::Mutex;

use nvme_device::{parse_target, AnyController, Target, TargetError};
use nvme_driver::{Controller, ControllerOptions};
use nvme_sqlite_vfs::{Format, NvmeDevice, NvmeVfs};
use rusqlite::ffi;

/// Why a namespace could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The URI names no device.
    #[error(
        "no `device` URI parameter: open `file:NAME?vfs=nvme&device=DEVICE&nsid=N` (with URI \
         file names enabled), DEVICE a PCI address, a transport id or `sim`"
    )]
    NoDevice,
    /// The device string names no controller.
    #[error("bad device `{device}`")]
    BadDevice {
        /// As given.
        device: String,
        /// Why.
        #[source]
        source: TargetError,
    },
    /// A URI parameter other than `device` is malformed.
    #[error("bad URI parameter {key}=`{value}`: {expected}")]
    BadParameter {
        /// The parameter.
        key: &'static str,
        /// As given.
        value: String,
        /// What it takes.
        expected: &'static str,
    },
    /// `device=sim` in a build without the emulator.
    #[error("`sim` (the in-process emulator) needs the extension built with --features emulator")]
    NoEmulator,
    /// The controller did not open.
    #[error("opening the controller `{device}` failed")]
    Controller {
        /// Canonical device string.
        device: String,
        /// Why.
        #[source]
        source: nvme_driver::Error,
    },
    /// The namespace or its store did not open.
    #[error("opening the SQLite store on namespace {nsid} of `{device}` failed")]
    Store {
        /// Canonical device string.
        device: String,
        /// The namespace.
        nsid: u32,
        /// Why.
        #[source]
        source: nvme_sqlite_vfs::Error,
    },
}

impl OpenError {
    /// The SQLite result code for this failure: `SQLITE_PERM` when the system refused access
    /// (an `EACCES`/`EPERM` anywhere in the cause chain: the VFIO group or device node, the
    /// PCI function's sysfs files), else `SQLITE_CANTOPEN`.
    pub fn sqlite_code(&self) -> i32 {
        let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(self);
        while let Some(e) = cause {
            if let Some(io) = e.downcast_ref::<std::io::Error>() {
                if io.kind() == std::io::ErrorKind::PermissionDenied {
                    return ffi::SQLITE_PERM;
                }
            }
            cause = e.source();
        }
        ffi::SQLITE_CANTOPEN
    }
}

/// What the URI of a database names: which namespace, and whether to format it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    /// The controller.
    pub target: Target,
    /// The namespace ID (URI `nsid`, default 1).
    pub nsid: u32,
    /// URI `format`: `never` (default: a namespace without a store is refused) or `ifblank`
    /// (write an empty store when the namespace holds none, dropping whatever else is on it).
    pub format: Format,
    /// URI `fua`: `on` (default) lets a barrier send its lone pending write with FUA instead
    /// of Write + Flush; `off` always sends Write + Flush (`nvme-sqlite --no-fua`: on an
    /// emulated controller that ignores FUA, such as QEMU 7.2's, only `off` is durable like
    /// a file system's fsync; docs/sqlite.md). Set by the first database opened on the
    /// namespace: the VFS is kept for the process.
    pub fua: bool,
    /// URI `irq`: `off` (default) waits for the device by polling; `on` opens the controller
    /// with MSI-X interrupts, and the VFS's waits (a barrier, a read) block on its queue's
    /// vector after a short spin instead of spinning until the completion. Set by the first
    /// database opened on the controller (PCIe and the emulator; NVMe/TCP always polls).
    pub irq: bool,
}

impl Place {
    /// From the URI parameters `device`, `nsid`, `format` and `fua`.
    pub fn parse(
        device: Option<&str>,
        nsid: Option<&str>,
        format: Option<&str>,
        fua: Option<&str>,
    ) -> Result<Self, OpenError> {
        let device = device.ok_or(OpenError::NoDevice)?;
        let target = parse_target(device).map_err(|source| OpenError::BadDevice {
            device: device.to_owned(),
            source,
        })?;
        let nsid = match nsid {
            None => 1,
            Some(v) => v
                .trim()
                .parse::<u32>()
                .ok()
                .filter(|&n| n != 0 && n != u32::MAX)
                .ok_or_else(|| OpenError::BadParameter {
                    key: "nsid",
                    value: v.to_owned(),
                    expected: "a namespace ID, 1 to 4294967294",
                })?,
        };
        let format = match format.map(str::trim) {
            None | Some("never") => Format::Never,
            Some("ifblank") => Format::IfBlank,
            Some(v) => {
                return Err(OpenError::BadParameter {
                    key: "format",
                    value: v.to_owned(),
                    expected: "`never` (the default) or `ifblank`",
                })
            }
        };
        let fua = switch_param(
            "fua",
            fua,
            true,
            "`on` (the default) or `off` (every barrier is Write + Flush)",
        )?;
        Ok(Self {
            target,
            nsid,
            format,
            fua,
            irq: false,
        })
    }

    /// With the URI parameter `irq` (`on` or `off`, the default).
    pub fn with_irq(mut self, irq: Option<&str>) -> Result<Self, OpenError> {
        self.irq = switch_param(
            "irq",
            irq,
            false,
            "`off` (the default: poll) or `on` (block on MSI-X while waiting)",
        )?;
        Ok(self)
    }
}

/// An on/off URI parameter `key`: `on`/`1`/`yes`/`true` or `off`/`0`/`no`/`false`, `default`
/// when absent; anything else is [`OpenError::BadParameter`] naming `expected`.
fn switch_param(
    key: &'static str,
    value: Option<&str>,
    default: bool,
    expected: &'static str,
) -> Result<bool, OpenError> {
    match value.map(str::trim) {
        None => Ok(default),
        Some("on" | "1" | "yes" | "true") => Ok(true),
        Some("off" | "0" | "no" | "false") => Ok(false),
        Some(v) => Err(OpenError::BadParameter {
            key,
            value: v.to_owned(),
            expected,
        }),
    }
}

#[derive(Default)]
struct Registry {
    /// Open PCIe controllers (and the emulator's), by canonical device string.
    controllers: HashMap<String, Controller>,
    /// Registered VFSes by (canonical device string, nsid). Never removed: SQLite may hold
    /// files of them until the process ends.
    vfs: HashMap<(String, u32), NvmeVfs>,
}

static REGISTRY: Mutex<Option<Registry>> = Mutex::new(None);

/// The registered VFS serving `place`, opening controller, namespace and store on first use;
/// returns its `sqlite3_vfs`.
pub fn open(place: &Place) -> Result<*mut ffi::sqlite3_vfs, OpenError> {
    let device = place.target.to_string();
    let key = (device.clone(), place.nsid);
    let mut guard = REGISTRY.lock().unwrap_or_else(|e| e.into_inner());
    let reg = guard.get_or_insert_with(Registry::default);
    if let Some(vfs) = reg.vfs.get(&key) {
        return Ok(vfs.raw_vfs());
    }
    let ctrl = controller(reg, &place.target, &device, place.irq)?;
    let store_error = |source| OpenError::Store {
        device: device.clone(),
        nsid: place.nsid,
        source,
    };
    let mut dev = NvmeDevice::new(ctrl, place.nsid).map_err(store_error)?;
    dev.set_fua(place.fua);
    let name = format!("nvme:{device}:{}", place.nsid);
    let vfs =
        NvmeVfs::register_through_api(&name, Box::new(dev), place.format).map_err(store_error)?;
    let raw = vfs.raw_vfs();
    reg.vfs.insert(key, vfs);
    Ok(raw)
}

/// A controller handle for `target`: the shared one for PCIe and the emulator (opened on
/// first use), a new connection for NVMe/TCP.
fn controller(
    reg: &mut Registry,
    target: &Target,
    device: &str,
    irq: bool,
) -> Result<AnyController, OpenError> {
    let failed = |source| OpenError::Controller {
        device: device.to_owned(),
        source,
    };
    if let Some(c) = reg.controllers.get(device) {
        return Ok(AnyController::Pcie(c.clone()));
    }
    let ctrl = match target {
        Target::Tcp(_) => {
            return AnyController::open(target, ControllerOptions::default()).map_err(failed)
        }
        Target::Pcie(address) => Controller::open_pci(
            &address.to_string(),
            ControllerOptions::default().interrupts(irq),
        )
        .map_err(failed)?,
        #[cfg(feature = "emulator")]
        Target::Emulator => emulator(irq).map_err(failed)?,
        #[cfg(not(feature = "emulator"))]
        Target::Emulator => return Err(OpenError::NoEmulator),
    };
    reg.controllers.insert(device.to_owned(), ctrl.clone());
    Ok(AnyController::Pcie(ctrl))
}

/// Bytes of each emulated namespace (memory backed).
#[cfg(feature = "emulator")]
const SIM_NAMESPACE_BYTES: u64 = 64 << 20;
/// Namespaces of the emulated controller (`nsid=1` and `nsid=2`).
#[cfg(feature = "emulator")]
const SIM_NAMESPACES: u32 = 2;
/// Block size of the emulated namespaces.
#[cfg(feature = "emulator")]
const SIM_BLOCK: u32 = 4096;

/// The in-process emulator (`device=sim`): one controller with [`SIM_NAMESPACES`] blank,
/// memory-backed namespaces, started on first use and kept for the rest of the process.
#[cfg(feature = "emulator")]
fn emulator(irq: bool) -> Result<Controller, nvme_driver::Error> {
    use nvme_sim::{SimConfig, SimController, SimNamespace};
    let sim: &'static SimController = Box::leak(Box::new(SimController::start(SimConfig {
        serial: "NVMESQLITEEXT".to_owned(),
        namespaces: (1..=SIM_NAMESPACES)
            .map(|nsid| SimNamespace {
                nsid,
                block_size: SIM_BLOCK,
                blocks: SIM_NAMESPACE_BYTES / u64::from(SIM_BLOCK),
                ..SimNamespace::default()
            })
            .collect(),
        null_io: false,
        ..SimConfig::default()
    })));
    let transport =
        nvme_driver::Transport::new(sim.mmio(), sim.dma(), "sim").with_interrupts(sim.interrupts());
    Controller::new(transport, ControllerOptions::default().interrupts(irq))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uri_parameters() {
        let p = Place::parse(Some("sim"), None, None, None).unwrap();
        assert_eq!(
            (p.target, p.nsid, p.format, p.fua),
            (Target::Emulator, 1, Format::Never, true)
        );
        let p = Place::parse(
            Some("0000:01:00.0"),
            Some("2"),
            Some("ifblank"),
            Some("off"),
        )
        .unwrap();
        assert!(matches!(p.target, Target::Pcie(_)));
        assert_eq!((p.nsid, p.format, p.fua), (2, Format::IfBlank, false));
        assert!(
            Place::parse(Some("sim"), None, None, Some("on"))
                .unwrap()
                .fua
        );
        assert!(matches!(
            Place::parse(Some("sim"), None, None, Some("sometimes")),
            Err(OpenError::BadParameter { key: "fua", .. })
        ));
        let p = Place::parse(Some("sim"), None, None, None).unwrap();
        assert!(!p.irq, "irq is off by default");
        assert!(p.clone().with_irq(Some("on")).unwrap().irq);
        assert!(!p.clone().with_irq(Some("off")).unwrap().irq);
        assert!(matches!(
            p.with_irq(Some("maybe")),
            Err(OpenError::BadParameter { key: "irq", .. })
        ));
        assert!(matches!(
            Place::parse(None, None, None, None),
            Err(OpenError::NoDevice)
        ));
        assert!(matches!(
            Place::parse(Some("nonsense"), None, None, None),
            Err(OpenError::BadDevice { .. })
        ));
        for nsid in ["0", "x", "4294967295"] {
            assert!(matches!(
                Place::parse(Some("sim"), Some(nsid), None, None),
                Err(OpenError::BadParameter { key: "nsid", .. })
            ));
        }
        assert!(matches!(
            Place::parse(Some("sim"), None, Some("always"), None),
            Err(OpenError::BadParameter { key: "format", .. })
        ));
    }
}
