//! The hot-plug monitor against a fake sysfs tree and injected uevents (a queue behind the
//! `UeventSource` seam), with emulated controllers behind the functions: attach then remove
//! (with I/O before and after), a duplicate add, the remove of an unknown function, removals
//! between probe and attach, a removal during a controller reset, hostile messages mixed into
//! the stream, a queue overrun, a device request, and the monitor's own thread.

mod common;

use std::collections::VecDeque;
use std::os::fd::BorrowedFd;
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use common::{addr, emulated_probe, FakeTree, Sims, NVME_CLASS};
use nvme_device::hotplug::{HotplugEvent, HotplugMonitor};
use nvme_device::probe::{Attached, ProbeDecision};
use nvme_device::{AnyController, IoQueue};
use nvme_driver::{ControllerOptions, Error, PciAddress, QueuePairOptions, WriteFlags};
use nvme_vfio::uevent::{Received, UeventSource, MAX_UEVENT_LEN};

/// One injected datagram.
enum Item {
    Msg(Vec<u8>),
    /// A datagram from another process (port id not 0).
    Foreign,
    Overrun,
}

/// A queue of messages the test fills and the monitor drains.
#[derive(Clone, Default)]
struct FakeSource(Arc<Mutex<VecDeque<Item>>>);

impl FakeSource {
    fn push(&self, m: Vec<u8>) {
        self.0.lock().unwrap().push_back(Item::Msg(m));
    }
    fn push_item(&self, i: Item) {
        self.0.lock().unwrap().push_back(i);
    }
}

impl UeventSource for FakeSource {
    fn recv(&mut self, buf: &mut [u8]) -> std::io::Result<Received> {
        Ok(match self.0.lock().unwrap().pop_front() {
            None => Received::Empty,
            Some(Item::Overrun) => Received::Overrun,
            Some(Item::Foreign) => Received::NotKernel,
            // As the kernel with MSG_TRUNC: a datagram longer than the buffer is reported as such.
            Some(Item::Msg(m)) if m.len() > buf.len() => Received::Truncated(m.len()),
            Some(Item::Msg(m)) => {
                buf[..m.len()].copy_from_slice(&m);
                Received::Message(m.len())
            }
        })
    }
    fn fd(&self) -> Option<BorrowedFd<'_>> {
        None
    }
    fn wait(&self, timeout: Duration) -> std::io::Result<bool> {
        if self.0.lock().unwrap().is_empty() {
            std::thread::sleep(timeout);
        }
        Ok(!self.0.lock().unwrap().is_empty())
    }
}

/// A kernel uevent about the PCI function `bdf` (NVMe class), as `pci_uevent` fills it.
fn uevent(action: &str, bdf: &str, driver: Option<&str>) -> Vec<u8> {
    let devpath = format!("/devices/pci0000:00/0000:00:1c.0/{bdf}");
    let mut recs = vec![
        format!("ACTION={action}"),
        format!("DEVPATH={devpath}"),
        "SUBSYSTEM=pci".to_owned(),
    ];
    if let Some(d) = driver {
        recs.push(format!("DRIVER={d}"));
    }
    recs.extend([
        "PCI_CLASS=10802".to_owned(),
        "PCI_ID=1B36:0010".to_owned(),
        format!("PCI_SLOT_NAME={bdf}"),
        "SEQNUM=100".to_owned(),
    ]);
    let mut m = format!("{action}@{devpath}\0").into_bytes();
    for r in recs {
        m.extend_from_slice(r.as_bytes());
        m.push(0);
    }
    m
}

type Log = Arc<Mutex<Vec<String>>>;

/// A monitor over `tree` reading `source`, whose callbacks log in order.
fn monitor(tree: &FakeTree, sims: &Sims, source: &FakeSource, log: &Log) -> HotplugMonitor {
    let (l1, l2, l3) = (log.clone(), log.clone(), log.clone());
    HotplugMonitor::with_source(
        source.clone(),
        emulated_probe(tree, sims),
        Attached::with_remove_callback(move |f, _| {
            l1.lock().unwrap().push(format!("remove {}", f.address))
        }),
        move |f| {
            l2.lock().unwrap().push(format!("probe {}", f.address));
            ProbeDecision::Attach(ControllerOptions::default())
        },
        move |f, _| l3.lock().unwrap().push(format!("attach {}", f.address)),
    )
}

fn names(events: &[HotplugEvent]) -> Vec<String> {
    events
        .iter()
        .map(|e| match e {
            HotplugEvent::Attached(a) => format!("attached {a}"),
            HotplugEvent::AttachFailed(a, _) => format!("failed {a}"),
            HotplugEvent::Detached(a) => format!("detached {a}"),
            HotplugEvent::Rescanned => "rescanned".to_owned(),
        })
        .collect()
}

/// Writes a pattern to LBA 8 and reads it back through a new queue pair.
fn write_read_back(ctrl: &AnyController, seed: u8) {
    let ns = ctrl.namespace(1).unwrap();
    let len = ns.block_size() as usize;
    let mut qp = ctrl.create_queue_pair(QueuePairOptions::default()).unwrap();
    let mut buf = ctrl.alloc_buffer(len).unwrap();
    for (i, b) in buf.iter_mut().enumerate() {
        *b = seed.wrapping_add(i as u8);
    }
    let want = buf.to_vec();
    qp.write(&ns, 8, 1, buf, WriteFlags::default()).unwrap();
    let back = qp.read(&ns, 8, 1, ctrl.alloc_buffer(len).unwrap()).unwrap();
    assert_eq!(&back[..], &want[..]);
}

fn is_removed(e: &Error) -> bool {
    matches!(e, Error::Removed { .. })
}

#[test]
fn attach_then_remove_with_io_before_and_after() {
    let tree = FakeTree::new();
    tree.add("0000:00:04.0", NVME_CLASS, "vfio-pci");
    let (sims, source, log) = (Sims::default(), FakeSource::default(), Log::default());
    let mut mon = monitor(&tree, &sims, &source, &log);
    assert_eq!(names(&mon.start().unwrap()), ["attached 0000:00:04.0"]);

    // A new function appears, the kernel's nvme driver takes it, then it moves to vfio-pci.
    tree.add("0000:00:05.0", NVME_CLASS, "nvme");
    source.push(uevent("add", "0000:00:05.0", None));
    source.push(uevent("bind", "0000:00:05.0", Some("nvme")));
    assert!(mon.poll().unwrap().is_empty());
    tree.rebind("0000:00:05.0", "vfio-pci");
    source.push(uevent("unbind", "0000:00:05.0", None));
    source.push(uevent("bind", "0000:00:05.0", Some("vfio-pci")));
    assert_eq!(names(&mon.poll().unwrap()), ["attached 0000:00:05.0"]);
    let b = addr("0000:00:05.0");
    let ctrl_b = mon.registry().get(&b).unwrap().clone();
    write_read_back(&ctrl_b, 0x5a);

    // It leaves under a queue pair the program still holds.
    let ns = ctrl_b.namespace(1).unwrap();
    let mut qp = ctrl_b
        .create_queue_pair(QueuePairOptions::default())
        .unwrap();
    tree.remove("0000:00:05.0");
    source.push(uevent("remove", "0000:00:05.0", None));
    assert_eq!(names(&mon.poll().unwrap()), ["detached 0000:00:05.0"]);
    let buf = ctrl_b.alloc_buffer(ns.block_size() as usize).unwrap();
    let err = qp.read(&ns, 0, 1, buf).unwrap_err();
    assert!(is_removed(&err.error), "{:?}", err.error);
    assert!(ctrl_b.as_pcie().unwrap().is_removed());

    // The other controller never noticed.
    let a = addr("0000:00:04.0");
    write_read_back(mon.registry().get(&a).unwrap(), 0xa5);
    assert_eq!(
        *log.lock().unwrap(),
        [
            "probe 0000:00:04.0",
            "attach 0000:00:04.0",
            "probe 0000:00:05.0",
            "attach 0000:00:05.0",
            "remove 0000:00:05.0"
        ]
    );
    // add (not on vfio-pci yet: probed, skipped), bind nvme, unbind of a function not held.
    assert_eq!(mon.stats().messages, 5);
    assert_eq!(mon.stats().ignored, 2);
    drop(mon);
    assert_eq!(log.lock().unwrap().last().unwrap(), "remove 0000:00:04.0");
}

#[test]
fn a_duplicate_add_or_bind_attaches_once() {
    let tree = FakeTree::new();
    let (sims, source, log) = (Sims::default(), FakeSource::default(), Log::default());
    let mut mon = monitor(&tree, &sims, &source, &log);
    assert!(mon.start().unwrap().is_empty());
    tree.add("0000:00:05.0", NVME_CLASS, "vfio-pci");
    source.push(uevent("add", "0000:00:05.0", None));
    source.push(uevent("bind", "0000:00:05.0", Some("vfio-pci")));
    source.push(uevent("bind", "0000:00:05.0", Some("vfio-pci")));
    assert_eq!(names(&mon.poll().unwrap()), ["attached 0000:00:05.0"]);
    source.push(uevent("add", "0000:00:05.0", None));
    assert!(mon.poll().unwrap().is_empty());
    assert_eq!(mon.registry().len(), 1);
    assert_eq!(sims.lock().unwrap().len(), 1);
    assert_eq!(
        *log.lock().unwrap(),
        ["probe 0000:00:05.0", "attach 0000:00:05.0"]
    );
}

#[test]
fn the_remove_of_an_unknown_function_is_ignored() {
    let tree = FakeTree::new();
    tree.add("0000:00:04.0", NVME_CLASS, "vfio-pci");
    let (sims, source, log) = (Sims::default(), FakeSource::default(), Log::default());
    let mut mon = monitor(&tree, &sims, &source, &log);
    mon.start().unwrap();
    source.push(uevent("unbind", "0000:00:07.0", None));
    source.push(uevent("remove", "0000:00:07.0", None));
    assert!(mon.poll().unwrap().is_empty());
    assert_eq!(mon.stats().ignored, 2);
    assert_eq!(mon.registry().len(), 1);
    assert!(!log.lock().unwrap().iter().any(|l| l.starts_with("remove")));
}

#[test]
fn a_function_removed_between_probe_and_attach_is_not_attached() {
    // (a) It vanishes while the probe callback decides: the open fails, it is reported, and
    // its remove uevent finds nothing to detach.
    let tree = Arc::new(FakeTree::new());
    let sims = Sims::default();
    let source = FakeSource::default();
    let removes = Arc::new(Mutex::new(0));
    let r = removes.clone();
    let t = tree.clone();
    let mut mon = HotplugMonitor::with_source(
        source.clone(),
        emulated_probe(&tree, &sims),
        Attached::with_remove_callback(move |_, _| *r.lock().unwrap() += 1),
        move |f| {
            t.remove(&f.address.to_string());
            ProbeDecision::Attach(ControllerOptions::default())
        },
        |_, _| panic!("nothing may be attached"),
    );
    tree.add("0000:00:05.0", NVME_CLASS, "vfio-pci");
    source.push(uevent("bind", "0000:00:05.0", Some("vfio-pci")));
    source.push(uevent("remove", "0000:00:05.0", None));
    let events = mon.poll().unwrap();
    assert_eq!(names(&events), ["failed 0000:00:05.0"]);
    assert!(matches!(
        &events[0],
        HotplugEvent::AttachFailed(_, Error::Vfio(nvme_vfio::VfioError::NoSuchDevice { .. }))
    ));
    assert!(mon.registry().is_empty());
    assert_eq!(*removes.lock().unwrap(), 0);

    // (b) Its add and remove are both queued and sysfs no longer has it when the add is read.
    let tree = FakeTree::new();
    let (sims, source, log) = (Sims::default(), FakeSource::default(), Log::default());
    let mut mon = monitor(&tree, &sims, &source, &log);
    tree.add("0000:00:06.0", NVME_CLASS, "vfio-pci");
    source.push(uevent("bind", "0000:00:06.0", Some("vfio-pci")));
    tree.remove("0000:00:06.0");
    source.push(uevent("remove", "0000:00:06.0", None));
    assert!(mon.poll().unwrap().is_empty());
    assert!(log.lock().unwrap().is_empty());
    assert!(sims.lock().unwrap().is_empty());
}

#[test]
fn a_removal_during_a_controller_reset() {
    let tree = FakeTree::new();
    tree.add("0000:00:04.0", NVME_CLASS, "vfio-pci");
    tree.add("0000:00:05.0", NVME_CLASS, "vfio-pci");
    let (sims, source, log) = (Sims::default(), FakeSource::default(), Log::default());
    let mut mon = monitor(&tree, &sims, &source, &log);
    assert_eq!(mon.start().unwrap().len(), 2);
    let a = addr("0000:00:04.0");
    let ctrl_a = mon.registry().get(&a).unwrap().clone();
    for round in 0..4 {
        // The reset is running (or about to) when the removal is handled.
        let resetter = {
            let ctrl = ctrl_a.clone();
            std::thread::spawn(move || ctrl.reset())
        };
        if round == 0 {
            source.push(uevent("remove", "0000:00:04.0", None));
            assert_eq!(names(&mon.poll().unwrap()), ["detached 0000:00:04.0"]);
        }
        if let Err(e) = resetter.join().unwrap() {
            assert!(is_removed(&e), "{e:?}");
        }
    }
    assert!(is_removed(&ctrl_a.reset().unwrap_err()));
    let b = mon.registry().get(&addr("0000:00:05.0")).unwrap().clone();
    b.reset().unwrap();
    write_read_back(&b, 3);
    assert_eq!(mon.registry().len(), 1);
}

#[test]
fn hostile_messages_are_skipped_and_the_monitor_goes_on() {
    let tree = FakeTree::new();
    let (sims, source, log) = (Sims::default(), FakeSource::default(), Log::default());
    let mut mon = monitor(&tree, &sims, &source, &log);
    tree.add("0000:00:05.0", NVME_CLASS, "vfio-pci");
    let mut oversized = uevent("bind", "0000:00:05.0", Some("vfio-pci"));
    oversized.resize(MAX_UEVENT_LEN + 100, b'x');
    source.push(oversized);
    source.push(b"bind@/devices/x\0ACTION=bind\0garbage\0".to_vec());
    source.push(vec![0xff; 64]);
    source.push(Vec::new());
    source.push(b"libudev\0\x01\x02".to_vec());
    // A forged bind from another process (not the kernel).
    source.push_item(Item::Foreign);
    // A bind whose PCI_SLOT_NAME is not an address.
    source.push(uevent("bind", "0000:00:05", Some("vfio-pci")));
    assert!(mon.poll().unwrap().is_empty());
    let st = mon.stats();
    assert_eq!(st.dropped, 2, "{st:?}");
    assert_eq!(st.malformed, 5, "{st:?}");
    assert!(mon.registry().is_empty());
    source.push(uevent("bind", "0000:00:05.0", Some("vfio-pci")));
    assert_eq!(names(&mon.poll().unwrap()), ["attached 0000:00:05.0"]);
}

#[test]
fn an_overrun_rescans_both_ways() {
    let tree = FakeTree::new();
    tree.add("0000:00:04.0", NVME_CLASS, "vfio-pci");
    let (sims, source, log) = (Sims::default(), FakeSource::default(), Log::default());
    let mut mon = monitor(&tree, &sims, &source, &log);
    mon.start().unwrap();
    // Lost messages: 04.0 left, 05.0 arrived.
    tree.remove("0000:00:04.0");
    tree.add("0000:00:05.0", NVME_CLASS, "vfio-pci");
    source.push_item(Item::Overrun);
    assert_eq!(
        names(&mon.poll().unwrap()),
        [
            "detached 0000:00:04.0",
            "attached 0000:00:05.0",
            "rescanned"
        ]
    );
    assert_eq!(mon.stats().overruns, 1);
}

#[test]
fn a_device_request_is_acted_on_by_poll() {
    let tree = FakeTree::new();
    tree.add("0000:00:04.0", NVME_CLASS, "vfio-pci");
    let (sims, source, log) = (Sims::default(), FakeSource::default(), Log::default());
    let mut mon = monitor(&tree, &sims, &source, &log);
    mon.start().unwrap();
    assert!(mon.poll().unwrap().is_empty());
    sims.lock().unwrap()[0].1.request_device_release();
    assert_eq!(names(&mon.poll().unwrap()), ["detached 0000:00:04.0"]);
    // The unbind and remove uevents that follow once we let go find nothing to do.
    source.push(uevent("unbind", "0000:00:04.0", None));
    source.push(uevent("remove", "0000:00:04.0", None));
    assert!(mon.poll().unwrap().is_empty());
}

#[test]
fn the_monitor_thread_attaches_and_gives_the_monitor_back() {
    let tree = FakeTree::new();
    let (sims, source, log) = (Sims::default(), FakeSource::default(), Log::default());
    let mon = monitor(&tree, &sims, &source, &log);
    let (tx, rx) = mpsc::channel::<String>();
    let tx = Mutex::new(tx);
    let thread = mon
        .spawn(Duration::from_millis(10), move |e| {
            let _ = tx
                .lock()
                .unwrap()
                .send(names(std::slice::from_ref(e))[0].clone());
        })
        .unwrap();
    tree.add("0000:00:05.0", NVME_CLASS, "vfio-pci");
    source.push(uevent("bind", "0000:00:05.0", Some("vfio-pci")));
    assert_eq!(
        rx.recv_timeout(Duration::from_secs(10)).unwrap(),
        "attached 0000:00:05.0"
    );
    let mon = thread.stop().unwrap();
    let b: PciAddress = addr("0000:00:05.0");
    assert!(mon.registry().contains(&b));
}
