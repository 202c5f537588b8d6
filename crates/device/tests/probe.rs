//! Probe, attach and remove against a fake sysfs tree, with emulated controllers behind the
//! functions (`Probe::with_opener`): the order of the callbacks, a function that goes away
//! between probe and attach, re-attach after detach, and removal noticed by
//! `Attached::poll_removals`, also while a reset runs.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use nvme_device::probe::{Attached, Probe, ProbeDecision};
use nvme_driver::{ControllerOptions, Error};
use nvme_vfio::FunctionFilter;

mod common;
use common::{addr, emulated_probe, FakeTree, Sims, NVME_CLASS};

#[test]
fn probe_attach_remove_in_order() {
    let tree = FakeTree::new();
    tree.add("0000:00:04.0", NVME_CLASS, "vfio-pci");
    tree.add("0000:00:05.0", NVME_CLASS, "vfio-pci");
    tree.add("0000:00:06.0", NVME_CLASS, "nvme");
    tree.add("0000:00:03.0", 0x02_0000, "vfio-pci");
    let sims = Sims::default();
    let probe = emulated_probe(&tree, &sims);

    let functions = probe.enumerate().unwrap();
    assert_eq!(functions.len(), 3, "{functions:?}");

    let events = Arc::new(Mutex::new(Vec::<String>::new()));
    let ev = events.clone();
    let mut registry = Attached::with_remove_callback(move |f, ctrl| {
        // The controller is still usable inside the remove callback.
        assert!(!ctrl.namespaces().is_empty());
        ev.lock().unwrap().push(format!("remove {}", f.address));
    });
    let outcome = probe
        .run(
            &mut registry,
            |f| {
                events.lock().unwrap().push(format!("probe {}", f.address));
                if f.address == addr("0000:00:05.0") {
                    ProbeDecision::Skip
                } else {
                    ProbeDecision::Attach(ControllerOptions::default())
                }
            },
            |f, ctrl| {
                assert_eq!(ctrl.name(), f.address.to_string());
                events.lock().unwrap().push(format!("attach {}", f.address));
            },
        )
        .unwrap();
    assert_eq!(outcome.attached, [addr("0000:00:04.0")]);
    assert_eq!(
        outcome.skipped,
        [addr("0000:00:05.0"), addr("0000:00:06.0")]
    );
    assert!(outcome.failed.is_empty());
    assert_eq!(registry.len(), 1);

    // The attached controller does I/O: data read back equals data written.
    let ctrl = registry.get(&addr("0000:00:04.0")).unwrap().clone();
    {
        use nvme_device::IoQueue;
        let ns = ctrl.namespaces()[0].clone();
        let mut qp = ctrl.create_queue_pair(Default::default()).unwrap();
        let blocks = 4096 / ns.block_size();
        let mut buf = ctrl.alloc_buffer(4096).unwrap();
        buf.fill(0x5a);
        let buf = qp
            .write(&ns, 0, blocks, buf, nvme_driver::WriteFlags::default())
            .unwrap();
        let back = ctrl.alloc_buffer(4096).unwrap();
        let back = qp.read(&ns, 0, blocks, back).unwrap();
        assert_eq!(&back[..], &buf[..]);
        assert!(back.iter().all(|&b| b == 0x5a));
    }

    // A second run attaches nothing new: 04.0 is held, 05.0 is skipped again.
    let again = probe
        .run(
            &mut registry,
            |_| ProbeDecision::Skip,
            |_, _| panic!("nothing to attach"),
        )
        .unwrap();
    assert!(again.attached.is_empty());

    assert!(registry.detach(&addr("0000:00:04.0")).is_some());
    assert!(registry.detach(&addr("0000:00:04.0")).is_none());
    assert_eq!(
        *events.lock().unwrap(),
        [
            "probe 0000:00:04.0",
            "attach 0000:00:04.0",
            "probe 0000:00:05.0",
            "remove 0000:00:04.0"
        ]
    );

    // Re-attach after detach.
    let outcome = probe
        .run(
            &mut registry,
            |_| ProbeDecision::Attach(ControllerOptions::default()),
            |_, _| {},
        )
        .unwrap();
    assert_eq!(
        outcome.attached,
        [addr("0000:00:04.0"), addr("0000:00:05.0")]
    );
    // Dropping the registry detaches the rest, each with its remove callback.
    drop(registry);
    let events = events.lock().unwrap();
    assert_eq!(
        events[events.len() - 2..],
        ["remove 0000:00:04.0", "remove 0000:00:05.0"]
    );
}

#[test]
fn a_function_removed_between_probe_and_attach_is_reported_not_attached() {
    let tree = FakeTree::new();
    tree.add("0000:00:04.0", NVME_CLASS, "vfio-pci");
    tree.add("0000:00:05.0", NVME_CLASS, "vfio-pci");
    let sims = Sims::default();
    let probe = emulated_probe(&tree, &sims);
    let removes = Arc::new(AtomicUsize::new(0));
    let r = removes.clone();
    let mut registry = Attached::with_remove_callback(move |_, _| {
        r.fetch_add(1, Ordering::Relaxed);
    });
    let mut attached = Vec::new();
    let outcome = probe
        .run(
            &mut registry,
            |f| {
                if f.address == addr("0000:00:04.0") {
                    // Hot removal after the probe callback said yes, before the open.
                    std::fs::remove_dir_all(tree.dir("0000:00:04.0")).unwrap();
                }
                ProbeDecision::Attach(ControllerOptions::default())
            },
            |f, _| attached.push(f.address),
        )
        .unwrap();
    assert_eq!(attached, [addr("0000:00:05.0")]);
    assert_eq!(outcome.attached, [addr("0000:00:05.0")]);
    assert_eq!(outcome.failed.len(), 1);
    let (failed, err) = &outcome.failed[0];
    assert_eq!(*failed, addr("0000:00:04.0"));
    assert!(err.to_string().contains("0000:00:04.0"), "{err}");
    assert!(!registry.contains(&addr("0000:00:04.0")));
    drop(registry);
    // Only what was attached is removed.
    assert_eq!(removes.load(Ordering::Relaxed), 1);
}

#[test]
fn a_removed_device_is_detached_by_poll_removals_also_during_a_reset() {
    let tree = FakeTree::new();
    tree.add("0000:00:04.0", NVME_CLASS, "vfio-pci");
    tree.add("0000:00:05.0", NVME_CLASS, "vfio-pci");
    let sims = Sims::default();
    let probe = emulated_probe(&tree, &sims);
    let removed = Arc::new(Mutex::new(Vec::new()));
    let r = removed.clone();
    let mut registry =
        Attached::with_remove_callback(move |f, _| r.lock().unwrap().push(f.address));
    probe
        .run(
            &mut registry,
            |_| ProbeDecision::Attach(ControllerOptions::default()),
            |_, _| {},
        )
        .unwrap();
    assert_eq!(registry.len(), 2);
    assert!(registry.poll_removals().is_empty());

    let (a, sim_a) = sims.lock().unwrap()[0].clone();
    assert_eq!(a, addr("0000:00:04.0"));
    let ctrl_a = registry.get(&a).unwrap().clone();
    // A reset races with the kernel's request for the device.
    let resetter = {
        let ctrl = ctrl_a.clone();
        std::thread::spawn(move || ctrl.reset())
    };
    sim_a.request_device_release();
    let reset = resetter.join().unwrap();
    assert_eq!(registry.poll_removals(), [a]);
    assert_eq!(*removed.lock().unwrap(), [a]);
    // The reset either finished before the request or saw the device removed; after the
    // removal every reset is refused and the other controller is untouched.
    if let Err(e) = reset {
        assert!(matches!(e, Error::Removed { .. }), "{e:?}");
    }
    assert!(matches!(ctrl_a.reset(), Err(Error::Removed { .. })));
    // The emulator's register page is no BAR mapping: nothing to revoke or guard.
    let pcie = ctrl_a.as_pcie().unwrap();
    assert!(!pcie.registers_revoked());
    assert!(matches!(
        pcie.guard_register_faults(),
        Err(Error::Unsupported { .. })
    ));
    let b = registry.get(&addr("0000:00:05.0")).unwrap();
    assert!(b.reset().is_ok());
    assert_eq!(registry.len(), 1);
}

#[test]
fn targets_narrow_the_probe_and_tcp_is_refused() {
    let tree = FakeTree::new();
    tree.add("0000:00:04.0", NVME_CLASS, "vfio-pci");
    tree.add("0000:00:05.0", NVME_CLASS, "vfio-pci");
    let probe = Probe::new()
        .sysfs(tree.sysfs())
        .targets(&[nvme_device::parse_target("trtype:PCIe traddr:0000:00:05.0").unwrap()])
        .unwrap();
    let found = probe.enumerate().unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].address, addr("0000:00:05.0"));
    let tcp = nvme_device::parse_target("trtype:TCP traddr:127.0.0.1 subnqn:nqn.x").unwrap();
    assert!(matches!(
        Probe::new().targets(&[tcp]),
        Err(Error::InvalidRequest(_))
    ));
    let all = Probe::new()
        .sysfs(tree.sysfs())
        .filter(FunctionFilter::all())
        .enumerate()
        .unwrap();
    assert_eq!(all.len(), 2);
}
