//! `QueuePair::poll_deferred`: the CQ head doorbell is left to the next tail doorbell (written
//! just before it), or to the next `poll`; never lost, and never needed earlier for the device
//! to make progress, with or without shadow doorbells.

use nvme_driver::IoQueue;
use std::time::Duration;

use nvme_driver::{Controller, ControllerOptions, DmaBuffer, QueuePairOptions};
use nvme_sim::{SimConfig, SimController};

mod common;

fn start(shadow: bool) -> (SimController, Controller) {
    let shadow_doorbells = if shadow {
        nvme_driver::ShadowDoorbells::Always
    } else {
        nvme_driver::ShadowDoorbells::Never
    };
    common::start_sim(
        SimConfig {
            shadow_doorbells: true,
            ..SimConfig::default()
        },
        ControllerOptions {
            shadow_doorbells,
            ..ControllerOptions::default()
        },
        false,
    )
}

/// Reap-then-resubmit rounds on a queue of 4 entries (3 in flight, so the CQ is as full as it
/// can be whenever the head is deferred) for many wraps of the ring: every write lands, every
/// CQ head update goes out with a tail update, never after a reaping poll on its own.
#[test]
fn deferred_head_goes_out_with_the_next_tail_and_the_ring_keeps_wrapping() {
    for shadow in [false, true] {
        let (sim, ctrl) = start(shadow);
        let ns = ctrl.namespace(1).unwrap();
        let mut q = ctrl
            .create_queue_pair(QueuePairOptions {
                depth: 4,
                timeout: Duration::from_secs(10),
                ..Default::default()
            })
            .unwrap();
        let mut free = DmaBuffer::allocate_many(ctrl.dma(), 3, 512).unwrap();
        let mut next_lba = 0u64;
        let mut written = 0u64;
        while written < 300 {
            let before = q.stats().clone();
            let mut reaped_now = 0;
            let reaped = q.poll_deferred(|c| {
                assert!(c.result.is_ok(), "{:?}", c.result);
                free.push(c.buffer.unwrap());
                reaped_now += 1;
            });
            assert_eq!(reaped, reaped_now);
            // The reaping poll wrote no CQ head (MMIO or shadow).
            assert_eq!(q.stats().cq_doorbell_updates, before.cq_doorbell_updates);
            written += reaped as u64;
            if free.is_empty() {
                continue;
            }
            q.plug(free.len() as u16).unwrap();
            for mut b in free.drain(..) {
                b.fill(next_lba as u8);
                q.submit_write(&ns, next_lba, 1, b, nvme_driver::WriteFlags::NONE, next_lba)
                    .unwrap();
                next_lba += 1;
            }
            q.unplug();
            let after = q.stats();
            assert_eq!(after.sq_doorbell_updates, before.sq_doorbell_updates + 1);
            if reaped > 0 {
                assert_eq!(
                    after.cq_doorbell_updates,
                    before.cq_doorbell_updates + 1,
                    "the tail doorbell carries the deferred head"
                );
            }
        }
        for lba in 0..written {
            assert_eq!(sim.read_disk(1, lba * 512, 512), vec![lba as u8; 512]);
        }
        // Deferred heads with nothing submitted after them: none is written until a plain poll,
        // which writes the newest once even though it reaps nothing.
        let mut in_flight = next_lba - written;
        let before = q.stats().cq_doorbell_updates;
        while in_flight > 0 {
            in_flight -= q.poll_deferred(|c| assert!(c.result.is_ok())) as u64;
        }
        assert_eq!(q.stats().cq_doorbell_updates, before);
        assert_eq!(q.poll(|_| panic!("nothing is left to complete")), 0);
        assert_eq!(q.stats().cq_doorbell_updates, before + 1);
        assert_eq!(q.poll(|_| panic!("nothing is left to complete")), 0);
        assert_eq!(q.stats().cq_doorbell_updates, before + 1);
        let s = q.stats();
        eprintln!(
            "shadow={shadow}: SQ updates {} (MMIO {}), CQ updates {} (MMIO {})",
            s.sq_doorbell_updates,
            s.sq_doorbell_writes,
            s.cq_doorbell_updates,
            s.cq_doorbell_writes
        );
    }
}
