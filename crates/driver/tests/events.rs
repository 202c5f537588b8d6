//! Asynchronous events (issue 10): requests stay posted, events reach the user, the log page
//! each names is read, and all of it survives a controller reset.

use std::time::{Duration, Instant};

use nvme_driver::spec::{AsyncEvent, AsyncEventType};
use nvme_driver::{Controller, ControllerOptions, QueuePairOptions, Transport};
use nvme_sim::{SimConfig, SimController};

fn start() -> (SimController, Controller) {
    let _ = env_logger::builder().is_test(true).try_init();
    let sim = SimController::start(SimConfig::default());
    let transport =
        Transport::new(sim.mmio(), sim.dma(), "sim").with_function_control(sim.function_control());
    let ctrl = Controller::new(transport, ControllerOptions::default()).expect("bring-up");
    (sim, ctrl)
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
