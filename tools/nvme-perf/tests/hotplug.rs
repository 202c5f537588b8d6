//! `nvme-hotplug`'s loop (`nvme_perf::hotplug::run`) against a fake sysfs tree, injected
//! uevents and emulated controllers: a controller attached at start keeps reading while a
//! second one is attached by its `bind` uevent, read from, and taken away (device request,
//! as on hot-unplug); the run ends with the first still running.

use std::collections::VecDeque;
use std::os::fd::BorrowedFd;
use std::os::unix::fs::symlink;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nvme_device::probe::{Attached, Probe, ProbeDecision};
use nvme_device::{AnyController, HotplugMonitor};
use nvme_driver::{Controller, ControllerOptions, PciAddress, Transport};
use nvme_perf::hotplug::{HotplugArgs, WorkerEnd};
use nvme_sim::{SimConfig, SimController};
use nvme_vfio::uevent::{Received, UeventSource};
use nvme_vfio::{PciFunction, Sysfs};

/// The emulated controllers, by the function they stand behind.
type Sims = Arc<Mutex<Vec<(PciAddress, Arc<SimController>)>>>;

#[derive(Clone, Default)]
struct Queue(Arc<Mutex<VecDeque<Vec<u8>>>>);

impl UeventSource for Queue {
    fn recv(&mut self, buf: &mut [u8]) -> std::io::Result<Received> {
        Ok(match self.0.lock().unwrap().pop_front() {
            None => Received::Empty,
            Some(m) => {
                buf[..m.len()].copy_from_slice(&m);
                Received::Message(m.len())
            }
        })
    }
    fn fd(&self) -> Option<BorrowedFd<'_>> {
        None
    }
}

fn add_function(root: &std::path::Path, bdf: &str) {
    let dir = root.join("bus/pci/devices").join(bdf);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("class"), "0x010802\n").unwrap();
    std::fs::write(dir.join("vendor"), "0x1b36\n").unwrap();
    std::fs::write(dir.join("device"), "0x0010\n").unwrap();
    symlink("../../../bus/pci/drivers/vfio-pci", dir.join("driver")).unwrap();
}

fn bind_uevent(bdf: &str) -> Vec<u8> {
    let devpath = format!("/devices/pci0000:00/0000:00:1c.1/{bdf}");
    format!(
        "bind@{devpath}\0ACTION=bind\0DEVPATH={devpath}\0SUBSYSTEM=pci\0DRIVER=vfio-pci\0\
         PCI_CLASS=10802\0PCI_SLOT_NAME={bdf}\0SEQNUM=9\0"
    )
    .into_bytes()
}

/// Polls `ready` every 10 ms until it yields a value, for at most a minute.
fn wait_for<T>(mut ready: impl FnMut() -> Option<T>) -> T {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(v) = ready() {
            return v;
        }
        assert!(std::time::Instant::now() < deadline, "timed out");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn the_first_controller_keeps_going_while_a_second_comes_and_goes() {
    let root = std::env::temp_dir().join(format!("nvme-hotplug-tool-{}", std::process::id()));
    std::fs::create_dir_all(root.join("bus/pci/devices")).unwrap();
    add_function(&root, "0000:01:00.0");
    let sims: Sims = Arc::default();
    let s = sims.clone();
    let probe =
        Probe::new()
            .sysfs(Sysfs::new(&root))
            .with_opener(move |f: &PciFunction, options| {
                let sim = Arc::new(SimController::start(SimConfig::default()));
                let mut transport = Transport::new(sim.mmio(), sim.dma(), f.address.to_string())
                    .with_function_control(sim.function_control());
                transport.keepalive = Some(sim.clone());
                s.lock().unwrap().push((f.address, sim));
                Ok(AnyController::Pcie(Controller::new(transport, options)?))
            });
    let queue = Queue::default();
    let monitor = HotplugMonitor::with_source(
        queue.clone(),
        probe,
        Attached::new(),
        |_| ProbeDecision::Attach(ControllerOptions::default()),
        |_, _| {},
    );
    let args = HotplugArgs {
        // A cap only: the driver thread below ends the run through the stop file once every
        // step it waits for has happened, so a loaded machine slows the test, not fails it.
        seconds: 120,
        block_bytes: 4096,
        interval_ms: 250,
        sysfs: PathBuf::from("/unused"),
        stop_file: Some(root.join("stop")),
    };
    let driver = {
        let (root, queue, sims) = (root.clone(), queue.clone(), sims.clone());
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(800));
            add_function(&root, "0000:02:00.0");
            queue
                .0
                .lock()
                .unwrap()
                .push_back(bind_uevent("0000:02:00.0"));
            // The second controller is attached and reading before it is taken away.
            let sim = wait_for(|| {
                let sims = sims.lock().unwrap();
                sims.get(1)
                    .filter(|(_, sim)| sim.stats().reads > 0)
                    .map(|(_, sim)| sim.clone())
            });
            std::thread::sleep(Duration::from_millis(700));
            // Hot-unplug: vfio-pci relays the kernel's request for the device.
            sim.request_device_release();
            // Its worker has stopped once its reads stop moving; the first controller then
            // keeps going for a few more report intervals.
            let mut reads = sim.stats().reads;
            wait_for(|| {
                std::thread::sleep(Duration::from_millis(300));
                let now = sim.stats().reads;
                std::mem::replace(&mut reads, now).eq(&now).then_some(())
            });
            std::thread::sleep(Duration::from_millis(1000));
            std::fs::write(root.join("stop"), b"").unwrap();
        })
    };
    let mut out = Vec::new();
    let summary = nvme_perf::hotplug::run(monitor, &args, &mut out).unwrap();
    driver.join().unwrap();
    let text = String::from_utf8(out).unwrap();
    let _ = std::fs::remove_dir_all(&root);
    let a: PciAddress = "0000:01:00.0".parse().unwrap();
    let b: PciAddress = "0000:02:00.0".parse().unwrap();
    assert_eq!(summary[&a].end, WorkerEnd::Running, "{text}");
    assert!(summary[&a].ios > 0, "{text}");
    assert_eq!(summary[&b].end, WorkerEnd::Removed, "{text}");
    assert!(summary[&b].ios > 0, "{text}");
    let pos = |s: &str| {
        text.find(s)
            .unwrap_or_else(|| panic!("no `{s}` in\n{text}"))
    };
    assert!(pos("attach 0000:01:00.0") < pos("attach 0000:02:00.0"));
    assert!(pos("attach 0000:02:00.0") < pos("removed 0000:02:00.0"));
    pos("detach 0000:02:00.0");
    // The first controller is in every `iops` line; from the second one's arrival on (its own
    // first interval may end before its worker's first read on a loaded machine) never at zero.
    let lines: Vec<&str> = text.lines().filter(|l| l.starts_with("iops ")).collect();
    assert!(lines.len() >= 8, "{text}");
    let after_attach = &text[pos("attach 0000:02:00.0")..];
    for l in lines {
        let v = l
            .split_whitespace()
            .find_map(|w| w.strip_prefix("0000:01:00.0="))
            .unwrap_or_else(|| panic!("{l}"));
        v.parse::<f64>().unwrap_or_else(|_| panic!("{l}"));
    }
    for l in after_attach.lines().filter(|l| l.starts_with("iops ")) {
        let v = l
            .split_whitespace()
            .find_map(|w| w.strip_prefix("0000:01:00.0="))
            .unwrap_or_else(|| panic!("{l}"));
        assert!(v.parse::<f64>().unwrap() > 0.0, "{l}");
    }
}
