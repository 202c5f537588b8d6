//! The optional software queue (issue 11): submissions that find the ring full wait in order
//! and are submitted by `poll` as room appears; bounded; off by default.

use nvme_driver::IoQueue;
use std::time::{Duration, Instant};

use nvme_driver::{Controller, ControllerOptions, Error, QueuePairOptions, Transport};
use nvme_sim::{SimConfig, SimController};

mod common;

fn start() -> (SimController, Controller) {
    common::start_sim(SimConfig::default(), ControllerOptions::default(), false)
}

#[test]
fn full_ring_submissions_wait_in_the_software_queue_and_complete() {
    let (sim, ctrl) = start();
    let ns = ctrl.namespace(1).unwrap();
    for lba in 0..20u64 {
        sim.write_disk(1, lba * 512, &[lba as u8 + 1; 512]);
    }
    let mut q = ctrl
        .create_queue_pair(QueuePairOptions {
            depth: 4,
            software_queue: 16,
            ..Default::default()
        })
        .unwrap();
    for lba in 0..19u64 {
        q.submit_read(&ns, lba, 1, ctrl.alloc_buffer(512).unwrap(), lba)
            .unwrap();
    }
    assert_eq!(q.in_flight(), 3);
    assert_eq!(q.queued(), 16);
    // Beyond the bound: refused, buffer back.
    let f = q
        .submit_read(&ns, 19, 1, ctrl.alloc_buffer(512).unwrap(), 19)
        .unwrap_err();
    assert!(matches!(f.error, Error::QueueFull { .. }));
    assert!(f.buffer.is_some());
    let mut seen = Vec::new();
    let start = Instant::now();
    while seen.len() < 19 {
        assert!(start.elapsed() < Duration::from_secs(5));
        q.poll(|c| {
            let b = c.buffer.expect("buffer back");
            assert!(c.result.is_ok());
            assert!(
                b.iter().all(|&x| x == c.user_data as u8 + 1),
                "{}",
                c.user_data
            );
            seen.push(c.user_data);
        });
    }
    seen.sort_unstable();
    assert_eq!(seen, (0..19).collect::<Vec<_>>());
    assert_eq!((q.queued(), q.in_flight()), (0, 0));
}

#[test]
fn off_by_default() {
    let (_sim, ctrl) = start();
    let ns = ctrl.namespace(1).unwrap();
    let mut q = ctrl
        .create_queue_pair(QueuePairOptions {
            depth: 4,
            ..Default::default()
        })
        .unwrap();
    for lba in 0..3 {
        q.submit_read(&ns, lba, 1, ctrl.alloc_buffer(512).unwrap(), lba)
            .unwrap();
    }
    let f = q
        .submit_read(&ns, 3, 1, ctrl.alloc_buffer(512).unwrap(), 3)
        .unwrap_err();
    assert!(matches!(f.error, Error::QueueFull { .. }));
    assert_eq!(q.queued(), 0);
}

#[test]
fn the_default_depth_is_clamped_to_the_controller_and_an_explicit_one_is_checked() {
    let _ = env_logger::builder().is_test(true).try_init();
    let sim = SimController::start(SimConfig {
        mqes: 63,
        ..SimConfig::default()
    });
    let ctrl = Controller::new(
        Transport::new(sim.mmio(), sim.dma(), "sim"),
        ControllerOptions::default(),
    )
    .unwrap();
    let q = ctrl.create_queue_pair(QueuePairOptions::default()).unwrap();
    assert_eq!(q.depth(), 64, "256 clamped to CAP.MQES+1");
    assert_eq!(q.capacity(), 63);
    let e = ctrl
        .create_queue_pair(QueuePairOptions {
            depth: 256,
            ..Default::default()
        })
        .err()
        .unwrap();
    assert!(matches!(e, Error::QueueDepth { max: 64, .. }), "{e}");
}
