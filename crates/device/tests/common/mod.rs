//! Shared by the probe and hot-plug tests: a fake sysfs tree and a probe whose opener starts
//! an emulated controller behind each function.
#![allow(dead_code)]

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use nvme_device::probe::Probe;
use nvme_device::AnyController;
use nvme_driver::{Controller, Error, PciAddress, Transport};
use nvme_sim::{SimConfig, SimController};
use nvme_vfio::{PciFunction, Sysfs};

/// NVMe I/O controller class code.
pub const NVME_CLASS: u32 = 0x01_0802;

pub struct FakeTree {
    pub root: PathBuf,
}

impl FakeTree {
    pub fn new() -> Self {
        static N: AtomicUsize = AtomicUsize::new(0);
        let root = std::env::temp_dir().join(format!(
            "nvme-device-probe-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(root.join("bus/pci/devices")).unwrap();
        Self { root }
    }

    pub fn add(&self, addr: &str, class: u32, driver: &str) {
        let dir = self.dir(addr);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("class"), format!("{class:#08x}\n")).unwrap();
        std::fs::write(dir.join("vendor"), "0x1b36\n").unwrap();
        std::fs::write(dir.join("device"), "0x0010\n").unwrap();
        symlink(
            format!("../../../bus/pci/drivers/{driver}"),
            dir.join("driver"),
        )
        .unwrap();
    }

    /// Rebinds the function to `driver` (as a bind after an unbind would).
    pub fn rebind(&self, addr: &str, driver: &str) {
        let link = self.dir(addr).join("driver");
        std::fs::remove_file(&link).unwrap();
        symlink(format!("../../../bus/pci/drivers/{driver}"), link).unwrap();
    }

    /// The function leaves the tree (hot removal).
    pub fn remove(&self, addr: &str) {
        std::fs::remove_dir_all(self.dir(addr)).unwrap();
    }

    pub fn dir(&self, addr: &str) -> PathBuf {
        self.root.join("bus/pci/devices").join(addr)
    }

    pub fn sysfs(&self) -> Sysfs {
        Sysfs::new(&self.root)
    }
}

impl Drop for FakeTree {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

pub type Sims = Arc<Mutex<Vec<(PciAddress, Arc<SimController>)>>>;

/// A probe over `tree` whose opener starts an emulated controller for each function (and
/// fails, like VFIO, for a function whose sysfs directory is gone).
pub fn emulated_probe(tree: &FakeTree, sims: &Sims) -> Probe {
    let root: PathBuf = tree.root.clone();
    let sims = sims.clone();
    Probe::new()
        .sysfs(tree.sysfs())
        .with_opener(move |f: &PciFunction, options| {
            let dir = root.join("bus/pci/devices").join(f.address.to_string());
            if !Path::new(&dir).exists() {
                return Err(Error::Vfio(nvme_vfio::VfioError::NoSuchDevice {
                    addr: f.address,
                    path: dir,
                }));
            }
            let sim = Arc::new(SimController::start(SimConfig::default()));
            let mut transport = Transport::new(sim.mmio(), sim.dma(), f.address.to_string())
                .with_function_control(sim.function_control());
            transport.keepalive = Some(sim.clone());
            sims.lock().unwrap().push((f.address, sim));
            Ok(AnyController::Pcie(Controller::new(transport, options)?))
        })
}

pub fn addr(s: &str) -> PciAddress {
    s.parse().unwrap()
}
