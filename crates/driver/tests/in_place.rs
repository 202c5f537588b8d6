//! `submit_in_place` over PCIe (the emulator): refusals leave the buffer in the caller's
//! place, an accepted request takes it; with the software queue, a request that finds the ring
//! full takes it too (it waits there), and one beyond the queue's bound leaves it in place.

use std::time::{Duration, Instant};

use nvme_driver::command::Read;
use nvme_driver::{ControllerOptions, Error, QueuePairOptions};
use nvme_sim::SimConfig;

mod common;
#[path = "../../../tests/support/in_place.rs"]
mod in_place;

#[test]
fn refusals_leave_the_buffer_in_place_and_accepted_requests_take_it() {
    let (_sim, ctrl) = common::start_sim(SimConfig::default(), ControllerOptions::default(), false);
    let ns = ctrl.namespace(1).unwrap();
    let mut q = ctrl.create_queue_pair(QueuePairOptions::default()).unwrap();
    let bs = ns.block_size() as usize;
    in_place::check_submit_in_place(
        &mut q,
        &ns,
        ctrl.alloc_buffer(8 * bs).unwrap(),
        ctrl.alloc_buffer(4 * bs).unwrap(),
    );
}

#[test]
fn a_full_ring_takes_the_buffer_into_the_software_queue_or_leaves_it_in_place() {
    let (_sim, ctrl) = common::start_sim(SimConfig::default(), ControllerOptions::default(), false);
    let ns = ctrl.namespace(1).unwrap();
    let bs = ns.block_size() as usize;
    for software_queue in [0, 2] {
        let mut q = ctrl
            .create_queue_pair(QueuePairOptions {
                depth: 4,
                software_queue,
                ..Default::default()
            })
            .unwrap();
        let mut places: Vec<_> = (0..6)
            .map(|_| Some(ctrl.alloc_buffer(bs).unwrap()))
            .collect();
        let mut accepted = 0;
        for (i, place) in places.iter_mut().enumerate() {
            match q.submit_in_place(&ns, Read::new(i as u64, 1), place, i as u64) {
                Ok(()) => {
                    assert!(place.is_none(), "an accepted request takes its buffer");
                    accepted += 1;
                }
                Err(e) => {
                    assert!(matches!(e, Error::QueueFull { .. }), "{e}");
                    assert!(place.is_some(), "a refused request leaves its buffer");
                }
            }
        }
        // Three slots on the ring (depth 4), then the software queue's bound.
        assert_eq!(accepted, 3 + software_queue);
        assert_eq!(q.queued(), software_queue);
        let start = Instant::now();
        let mut back = 0;
        while back < accepted {
            assert!(start.elapsed() < Duration::from_secs(10));
            q.poll(|c| {
                assert!(c.result.is_ok());
                assert!(c.buffer.is_some());
                back += 1;
            });
        }
        assert_eq!((q.in_flight(), q.queued()), (0, 0));
    }
}
