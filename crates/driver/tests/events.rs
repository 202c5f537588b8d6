//! Asynchronous events (issue 10): requests stay posted, events reach the user, the log page
//! each names is read, and all of it survives a controller reset.

use nvme_driver::IoQueue;
use nvme_driver::WriteFlags;
use std::time::{Duration, Instant};

use nvme_driver::spec::{AsyncEvent, AsyncEventType};
use nvme_driver::{Controller, ControllerOptions, QueuePairOptions};
use nvme_sim::{SimConfig, SimController};

mod common;

fn start() -> (SimController, Controller) {
    common::start_sim(SimConfig::default(), ControllerOptions::default(), true)
}

/// Takes events until `n` arrived (the emulator answers AERs on its own thread).
fn events(ctrl: &Controller, n: usize) -> Vec<AsyncEvent> {
    let mut got = Vec::new();
    let start = Instant::now();
    while got.len() < n {
        assert!(start.elapsed() < Duration::from_secs(5), "only {got:?}");
        got.extend(ctrl.take_events());
        std::thread::sleep(Duration::from_millis(2));
    }
    got
}

#[test]
fn events_reach_the_user_and_requests_are_reposted() {
    let (sim, ctrl) = start();
    assert!(ctrl.take_events().is_empty());
    // More events than requests outstanding at once (the emulator's AER limit is 4): each
    // completion is followed by a new request.
    for i in 0..6u8 {
        sim.faults().raise_async_event(1, i, 0x02);
    }
    let got = events(&ctrl, 6);
    assert_eq!(got.len(), 6);
    for (i, e) in got.iter().enumerate() {
        assert_eq!(e.event_type, AsyncEventType::SmartHealth);
        assert_eq!((e.info, e.log_page), (i as u8, 0x02));
    }
    // A notice: namespace attribute changed.
    sim.faults().raise_async_event(2, 0, 0x04);
    let got = events(&ctrl, 1);
    assert_eq!(got[0].event_type, AsyncEventType::Notice);
}

#[test]
fn events_keep_coming_after_a_reset_and_a_polled_pair_collects_them() {
    let (sim, ctrl) = start();
    let mut q = ctrl.create_queue_pair(QueuePairOptions::default()).unwrap();
    ctrl.reset().unwrap();
    sim.faults().raise_async_event(0, 1, 0x01);
    // Only the queue pair polls (its health tick collects the event).
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(300) {
        q.poll(|_| {});
    }
    let got = ctrl.take_events();
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].event_type, AsyncEventType::ErrorStatus);
}

#[test]
fn an_event_storm_is_bounded_and_does_not_stall_io() {
    let (sim, ctrl) = start();
    let ns = ctrl.namespace(1).unwrap();
    let mut q = ctrl.create_queue_pair(QueuePairOptions::default()).unwrap();
    for i in 0..200u32 {
        sim.faults().raise_async_event(1, i as u8, 0x02);
    }
    // I/O keeps working while the storm is collected.
    for lba in 0..50 {
        let b = ctrl.alloc_buffer(512).unwrap();
        q.read(&ns, lba, 1, b).unwrap();
    }
    let start = Instant::now();
    let mut total = 0;
    while start.elapsed() < Duration::from_secs(3) && total < 200 {
        let got = ctrl.take_events();
        assert!(got.len() <= 64, "the event queue is bounded");
        total += got.len();
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(total >= 64, "{total}");
}

/// A two-namespace emulator whose namespace 2 starts detached.
fn start_with_detached_ns2() -> (SimController, Controller) {
    let second = nvme_sim::SimNamespace {
        nsid: 2,
        block_size: 4096,
        blocks: 1024,
        ..Default::default()
    };
    let sim = SimController::start(SimConfig {
        namespaces: vec![nvme_sim::SimNamespace::default(), second],
        ..SimConfig::default()
    });
    sim.set_namespace_attached(2, false);
    common::open_on(sim, ControllerOptions::default(), true)
}

fn nsids(ctrl: &Controller) -> Vec<u32> {
    ctrl.namespaces().iter().map(|n| n.nsid()).collect()
}

#[test]
fn namespace_attribute_notice_rescans_the_namespaces() {
    let (sim, ctrl) = start_with_detached_ns2();
    assert_eq!(nsids(&ctrl), [1]);
    assert!(ctrl.namespace(2).is_err());
    // Stale notice from before bring-up: nothing changed since then.
    let _ = ctrl.take_events();

    // Attach: the notice arrives, take_events rescans, namespace 2 is usable.
    sim.set_namespace_attached(2, true);
    let got = events(&ctrl, 1);
    assert!(got[0].is_namespace_change(), "{got:?}");
    assert_eq!(nsids(&ctrl), [1, 2]);
    let ns2 = ctrl.namespace(2).expect("namespace 2 after the rescan");
    assert_eq!((ns2.block_size(), ns2.blocks()), (4096, 1024));
    let mut q = ctrl.create_queue_pair(QueuePairOptions::default()).unwrap();
    let mut buf = ctrl.alloc_buffer(4096).unwrap();
    buf.fill(0x5A);
    let buf = q
        .write(&ns2, 7, 1, buf, WriteFlags::NONE)
        .expect("write to the attached namespace");
    assert_eq!(sim.read_disk(2, 7 * 4096, 4096), vec![0x5A; 4096]);

    // Detach namespace 1: it disappears from the list; an old handle's I/O fails as stale
    // (the rescan marked it) before reaching the device, not with a hang or a panic.
    let ns1 = ctrl.namespace(1).unwrap();
    sim.set_namespace_attached(1, false);
    events(&ctrl, 1);
    assert_eq!(nsids(&ctrl), [2]);
    let reads = sim.stats().reads;
    match q.read(&ns1, 0, 1, buf) {
        Err(nvme_driver::IoFailure {
            error:
                nvme_driver::Error::StaleNamespace {
                    nsid: 1,
                    change: nvme_driver::NamespaceChange::Detached,
                },
            buffer: Some(_),
            ..
        }) => {}
        other => panic!("read of a detached namespace: {other:?}"),
    }
    assert_eq!(sim.stats().reads, reads, "the device saw the read");
    // Namespace 2 did not change: its handle from before still works.
    q.flush(&ns2).unwrap();

    // An explicit rescan with nothing new reports no change.
    assert!(ctrl.rescan_namespaces().unwrap().is_empty());
}

#[test]
fn rescan_reports_what_changed() {
    let (sim, ctrl) = start_with_detached_ns2();
    sim.set_namespace_attached(2, true);
    sim.set_namespace_attached(1, false);
    let changes = ctrl.rescan_namespaces().unwrap();
    assert_eq!(changes.added, [2]);
    assert_eq!(changes.removed, [1]);
    assert!(changes.changed.is_empty());
}
