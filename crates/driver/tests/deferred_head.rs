//! The lazy CQ head doorbell: `QueuePair::poll_deferred` leaves the head to the next tail
//! doorbell, which writes it only once the CQ's slack (its entries beyond the commands that
//! can be outstanding) is used up. The controller's view of the CQ must never be full while
//! a completion waits (`SimStats::cq_full_waits` counts every completion that had to wait for
//! a head doorbell), with or without shadow doorbells, and a CQ the controller's CAP.MQES
//! does not let grow beyond the SQ gets the head on every tail doorbell, as before.

use nvme_driver::IoQueue;
use std::time::Duration;

use nvme_driver::{Controller, ControllerOptions, DmaBuffer, QueuePair, QueuePairOptions};
use nvme_sim::{SimConfig, SimController};

mod common;

fn start(shadow: bool, mqes: u16) -> (SimController, Controller) {
    let shadow_doorbells = if shadow {
        nvme_driver::ShadowDoorbells::Always
    } else {
        nvme_driver::ShadowDoorbells::Never
    };
    common::start_sim(
        SimConfig {
            shadow_doorbells: true,
            mqes,
            ..SimConfig::default()
        },
        ControllerOptions {
            shadow_doorbells,
            ..ControllerOptions::default()
        },
        false,
    )
}

/// What the rounds of [`reap_then_resubmit`] saw.
struct Rounds {
    written: u64,
    /// Tail doorbells that carried a CQ head.
    heads_with_tail: u64,
}

/// Reap-then-resubmit rounds on a queue of `depth` SQ entries (`depth - 1` in flight, so the
/// SQ is as full as it can be) until `target` writes completed: each reaping poll writes no
/// CQ head; each unplug writes one tail and, at most, one head.
fn reap_then_resubmit(ctrl: &Controller, q: &mut QueuePair, depth: u32, target: u64) -> Rounds {
    let ns = ctrl.namespace(1).unwrap();
    let mut free = DmaBuffer::allocate_many(ctrl.dma(), depth as usize - 1, 512).unwrap();
    let mut next_lba = 0u64;
    let mut rounds = Rounds {
        written: 0,
        heads_with_tail: 0,
    };
    while rounds.written < target {
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
        rounds.written += reaped as u64;
        if free.is_empty() || next_lba >= target {
            continue;
        }
        // Never past `target`: a last round may reap several with fewer writes left.
        let n = free.len().min((target - next_lba) as usize);
        q.plug(n as u16).unwrap();
        for mut b in free.drain(..n) {
            b.fill(next_lba as u8);
            q.submit_write(&ns, next_lba, 1, b, nvme_driver::WriteFlags::NONE, next_lba)
                .unwrap();
            next_lba += 1;
        }
        q.unplug();
        let after = q.stats();
        assert_eq!(after.sq_doorbell_updates, before.sq_doorbell_updates + 1);
        let heads = after.cq_doorbell_updates - before.cq_doorbell_updates;
        assert!(heads <= 1, "one head at most per tail doorbell");
        rounds.heads_with_tail += heads;
    }
    rounds
}

fn queue_pair(ctrl: &Controller, depth: u32) -> QueuePair {
    ctrl.create_queue_pair(QueuePairOptions {
        depth,
        timeout: Duration::from_secs(10),
        ..Default::default()
    })
    .unwrap()
}

/// A CQ of a page of entries (256) behind an SQ of 4: the head goes out about once per 253
/// completions, across several wraps of the CQ, and no completion ever waits for it.
#[test]
fn lazy_head_goes_out_once_the_slack_is_used_and_no_completion_waits() {
    for shadow in [false, true] {
        let (sim, ctrl) = start(shadow, 2047);
        let mut q = queue_pair(&ctrl, 4);
        let target = 1_500;
        let rounds = reap_then_resubmit(&ctrl, &mut q, 4, target);
        assert_eq!(rounds.written, target);
        for lba in 0..target {
            assert_eq!(sim.read_disk(1, lba * 512, 512), vec![lba as u8; 512]);
        }
        let s = q.stats().clone();
        // 256 CQ entries, 3 outstanding at most: slack 252, so a head every 253 completions
        // (a round reaps up to 3, so a publish may come up to 2 completions late).
        let slack_plus_one = 253;
        assert!(
            s.cq_doorbell_updates * slack_plus_one <= target,
            "{} CQ head updates for {target} completions",
            s.cq_doorbell_updates
        );
        assert!(
            s.cq_doorbell_updates >= target / (slack_plus_one + 2) - 1,
            "the head still has to move: {} updates",
            s.cq_doorbell_updates
        );
        assert_eq!(s.cq_doorbell_updates, rounds.heads_with_tail);
        assert_eq!(
            sim.stats().cq_full_waits,
            0,
            "a completion waited for a head"
        );
        // Draining with plain polls writes no head either (nothing new is submitted).
        assert_eq!(q.poll(|_| panic!("nothing is left to complete")), 0);
        assert_eq!(q.stats().cq_doorbell_updates, s.cq_doorbell_updates);
        eprintln!(
            "shadow={shadow}: SQ updates {} (MMIO {}), CQ updates {} (MMIO {}) for {target} I/Os",
            s.sq_doorbell_updates,
            s.sq_doorbell_writes,
            s.cq_doorbell_updates,
            s.cq_doorbell_writes
        );
    }
}

/// CAP.MQES that lets a queue have only 8 entries: an SQ of 8 leaves the CQ no slack, and
/// every tail doorbell after a reaping poll carries the head.
#[test]
fn no_slack_when_mqes_caps_the_cq_at_the_sq() {
    for shadow in [false, true] {
        let (sim, ctrl) = start(shadow, 7);
        let mut q = queue_pair(&ctrl, 8);
        let rounds = reap_then_resubmit(&ctrl, &mut q, 8, 300);
        let s = q.stats();
        // Every round after the first reaped something before it submitted.
        assert!(
            rounds.heads_with_tail + 1 >= s.sq_doorbell_updates,
            "{} heads for {} tails",
            rounds.heads_with_tail,
            s.sq_doorbell_updates
        );
        assert_eq!(sim.stats().cq_full_waits, 0);
        for lba in 0..300 {
            assert_eq!(sim.read_disk(1, lba * 512, 512), vec![lba as u8; 512]);
        }
    }
}

/// Queue depth 1 the way nvme-perf runs it (one command, reap, resubmit), with plain polls:
/// about one CQ head doorbell per 255 I/Os instead of one per I/O, every read correct.
#[test]
fn queue_depth_one_publishes_the_head_once_per_slack() {
    let (sim, ctrl) = start(false, 2047);
    let ns = ctrl.namespace(1).unwrap();
    let mut q = queue_pair(&ctrl, 2);
    let ios = 2_000u64;
    let mut buf = Some(DmaBuffer::allocate(ctrl.dma(), 512).unwrap());
    for i in 0..ios {
        let mut b = buf.take().unwrap();
        b.fill(i as u8);
        q.submit_write(&ns, i % 64, 1, b, nvme_driver::WriteFlags::NONE, i)
            .unwrap();
        while buf.is_none() {
            q.poll(|c| {
                assert!(c.result.is_ok(), "{:?}", c.result);
                buf = c.buffer;
            });
        }
    }
    let s = q.stats();
    // CQ 256 entries, 1 outstanding: slack 254, a head every 255 completions.
    assert_eq!(s.cq_doorbell_updates, ios / 255);
    assert_eq!(s.sq_doorbell_updates, ios);
    assert_eq!(sim.stats().cq_full_waits, 0);
    for lba in 0..64 {
        let last = (ios - 64..ios).find(|i| i % 64 == lba).unwrap();
        assert_eq!(sim.read_disk(1, lba * 512, 512), vec![last as u8; 512]);
    }
}
