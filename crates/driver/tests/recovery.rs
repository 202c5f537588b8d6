//! Controller reset (issue 10): in-flight requests fail with a retryable error and get their
//! buffers back, queue pairs re-create their queues in place, and I/O goes on.

use nvme_driver::IoQueue;
use nvme_driver::WriteFlags;
use std::time::{Duration, Instant};

use nvme_driver::{Controller, ControllerOptions, Error, QueuePair, QueuePairOptions};
use nvme_sim::{SimConfig, SimController};

mod common;

const NS: u32 = 1;
const BLOCK: usize = 512;

fn start(config: SimConfig) -> (SimController, Controller) {
    let options = ControllerOptions {
        admin_timeout: Duration::from_millis(500),
        ..ControllerOptions::default()
    };
    common::start_sim(config, options, true)
}

fn qp(ctrl: &Controller, depth: u32) -> QueuePair {
    ctrl.create_queue_pair(QueuePairOptions {
        depth,
        timeout: Duration::from_millis(600),
        ..Default::default()
    })
    .expect("queue pair")
}

/// Writes `byte` to `lba` and reads it back.
fn round_trip(q: &mut QueuePair, ctrl: &Controller, lba: u64, byte: u8) {
    let ns = ctrl.namespace(NS).unwrap();
    let mut b = ctrl.alloc_buffer(BLOCK).unwrap();
    b.fill(byte);
    let b = q.write(&ns, lba, 1, b, WriteFlags::NONE).unwrap();
    let mut back = q.read(&ns, lba, 1, b).unwrap();
    assert!(back.iter().all(|&x| x == byte));
    back.fill(0);
}

#[test]
fn reset_under_load_fails_in_flight_requests_retryably_and_io_goes_on() {
    let (sim, ctrl) = start(SimConfig::default());
    let ns = ctrl.namespace(NS).unwrap();
    let mut q = qp(&ctrl, 128);
    let mut other = qp(&ctrl, 8);
    round_trip(&mut q, &ctrl, 1, 0x11);
    // Keep 100 reads in flight: the device holds their completions back.
    sim.faults().delay_completions(Duration::from_secs(3600));
    for i in 0..100u64 {
        q.submit_read(&ns, i, 1, ctrl.alloc_buffer(BLOCK).unwrap(), i)
            .unwrap();
    }
    std::thread::sleep(Duration::from_millis(20));
    sim.faults().delay_completions(Duration::ZERO);
    ctrl.reset().expect("reset");
    assert!(!ctrl.is_failed());

    let mut failed = 0;
    let start = Instant::now();
    while failed < 100 && start.elapsed() < Duration::from_secs(5) {
        q.poll(|c| {
            let e = c
                .result
                .expect_err("an in-flight request cannot succeed across a reset");
            assert!(matches!(e, Error::Reset { .. }), "{e}");
            assert!(e.is_retryable());
            assert!(
                c.buffer.is_some(),
                "the buffer comes back: the controller was disabled"
            );
            failed += 1;
        });
    }
    assert_eq!(failed, 100);
    assert_eq!(q.in_flight(), 0);
    // Both pairs work again, with their old queue ids.
    round_trip(&mut q, &ctrl, 2, 0x22);
    round_trip(&mut other, &ctrl, 3, 0x33);
    assert_eq!((q.qid(), other.qid()), (1, 2));
    // The data written before the reset is still there.
    let mut b = q
        .read(&ns, 1, 1, ctrl.alloc_buffer(BLOCK).unwrap())
        .unwrap();
    assert!(b.iter().all(|&x| x == 0x11));
    b.fill(0);
    drop((q, other));
    assert!(
        !ctrl.is_failed(),
        "dropping re-created pairs deletes their queues cleanly"
    );
}

#[test]
fn reset_brings_a_failed_controller_back() {
    let (sim, ctrl) = start(SimConfig::default());
    let ns = ctrl.namespace(NS).unwrap();
    let mut q = qp(&ctrl, 8);
    sim.faults().delay_completions(Duration::from_secs(3600));
    q.submit_read(&ns, 0, 1, ctrl.alloc_buffer(BLOCK).unwrap(), 7)
        .unwrap();
    std::thread::sleep(Duration::from_millis(20));
    sim.faults().set_fatal();
    sim.faults().delay_completions(Duration::ZERO);
    let mut err = None;
    let start = Instant::now();
    while err.is_none() && start.elapsed() < Duration::from_secs(5) {
        q.poll(|c| err = c.result.err());
    }
    assert!(
        matches!(err, Some(Error::ControllerFatal { .. })),
        "{err:?}"
    );
    assert!(ctrl.is_failed());
    assert!(matches!(
        q.read(&ns, 0, 1, ctrl.alloc_buffer(BLOCK).unwrap())
            .unwrap_err()
            .error,
        Error::Failed { .. }
    ));
    ctrl.reset().expect("the fatal status clears on reset");
    assert!(!ctrl.is_failed());
    assert!(sim.bus_master_enabled(), "bus mastering back on");
    round_trip(&mut q, &ctrl, 5, 0x55);
}

#[test]
fn a_pair_dropped_after_a_reset_without_polling_leaves_the_controller_healthy() {
    let (_sim, ctrl) = start(SimConfig::default());
    let q = qp(&ctrl, 8);
    ctrl.reset().unwrap();
    drop(q);
    assert!(!ctrl.is_failed());
    let mut q = qp(&ctrl, 8);
    assert_eq!(q.qid(), 1, "the queue id was given back");
    round_trip(&mut q, &ctrl, 9, 0x99);
}

#[test]
fn repeated_resets_during_a_write_loop_lose_no_acknowledged_write() {
    let (sim, ctrl) = start(SimConfig::default());
    let ns = ctrl.namespace(NS).unwrap();
    let mut q = qp(&ctrl, 16);
    let mut acknowledged = Vec::new();
    for round in 0..5u8 {
        for i in 0..8u64 {
            let lba = u64::from(round) * 8 + i;
            let mut b = ctrl.alloc_buffer(BLOCK).unwrap();
            b.fill(round.wrapping_mul(8).wrapping_add(i as u8) | 1);
            q.submit_write(&ns, lba, 1, b, WriteFlags::NONE, lba)
                .unwrap();
        }
        if round % 2 == 1 {
            ctrl.reset().unwrap();
        }
        let mut done = 0;
        let start = Instant::now();
        while done < 8 && start.elapsed() < Duration::from_secs(5) {
            done += q.poll(|c| match &c.result {
                Ok(_) => acknowledged.push(c.user_data),
                Err(e) => assert!(e.is_retryable(), "{e}"),
            });
        }
        assert_eq!(done, 8);
    }
    assert!(!acknowledged.is_empty());
    for lba in acknowledged {
        let expect = ((lba / 8) as u8)
            .wrapping_mul(8)
            .wrapping_add((lba % 8) as u8)
            | 1;
        let got = sim.read_disk(NS, lba * BLOCK as u64, BLOCK);
        assert!(
            got.iter().all(|&x| x == expect),
            "acknowledged write to LBA {lba} lost"
        );
    }
}

#[test]
fn a_controller_that_cannot_be_disabled_is_not_reset() {
    let (sim, ctrl) = start(SimConfig {
        timeout_500ms: 1,
        ..SimConfig::default()
    });
    let mut q = qp(&ctrl, 8);
    round_trip(&mut q, &ctrl, 0, 1);
    sim.faults().stuck_on_disable();
    let e = ctrl.reset().expect_err("it never reports RDY=0");
    assert!(matches!(e, Error::NotReady { .. }), "{e}");
    assert!(ctrl.is_failed());
    assert!(matches!(ctrl.reset(), Err(Error::Failed { .. })));
}

// ----- fail fast on a dead or removed device ----------------------------------------------

/// Polls until `cond` or `limit`; returns how long it took.
fn poll_until(
    q: &mut QueuePair,
    limit: Duration,
    mut cond: impl FnMut(&mut QueuePair) -> bool,
) -> Duration {
    let start = Instant::now();
    while !cond(q) {
        assert!(start.elapsed() < limit, "not within {limit:?}");
    }
    start.elapsed()
}

#[test]
fn surprise_removal_with_io_in_flight_fails_it_within_100ms() {
    let (sim, ctrl) = start(SimConfig::default());
    let ns = ctrl.namespace(NS).unwrap();
    // A long timeout: only the health check can notice.
    let mut q = ctrl
        .create_queue_pair(QueuePairOptions {
            depth: 32,
            timeout: Duration::from_secs(30),
            ..Default::default()
        })
        .unwrap();
    sim.faults().delay_completions(Duration::from_secs(3600));
    for i in 0..16u64 {
        q.submit_read(&ns, i, 1, ctrl.alloc_buffer(BLOCK).unwrap(), i)
            .unwrap();
    }
    let spare = ctrl.alloc_buffer(BLOCK).unwrap();
    std::thread::sleep(Duration::from_millis(60));
    sim.faults().remove_device();
    let mut removed = 0;
    let took = poll_until(&mut q, Duration::from_secs(2), |q| {
        q.poll(|c| {
            assert!(
                matches!(c.result, Err(Error::Removed { .. })),
                "{:?}",
                c.result
            );
            assert!(
                c.buffer.is_none(),
                "a removed device's memory is not handed back"
            );
            removed += 1;
        });
        removed == 16
    });
    assert!(took <= Duration::from_millis(150), "noticed after {took:?}");
    assert!(ctrl.is_removed() && ctrl.is_failed());
    let f = q.submit_read(&ns, 0, 1, spare, 99).unwrap_err();
    // A removed controller cannot be confirmed stopped, so its mapper refuses new memory too.
    assert!(ctrl.alloc_buffer(BLOCK).is_err());
    assert!(matches!(f.error, Error::Removed { .. }), "{}", f.error);
    assert!(f.buffer.is_some());
    assert!(matches!(ctrl.reset(), Err(Error::Removed { .. })));
    // Teardown does not hang on a device that answers nothing.
    let start = Instant::now();
    drop(q);
    drop(ctrl);
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn an_idle_pair_notices_a_fatal_controller_within_100ms() {
    let (sim, ctrl) = start(SimConfig::default());
    let mut q = qp(&ctrl, 8);
    sim.faults().set_fatal();
    let took = poll_until(&mut q, Duration::from_secs(2), |q| {
        q.poll(|_| {});
        ctrl.is_failed()
    });
    assert!(took <= Duration::from_millis(150), "noticed after {took:?}");
}

// ----- timeout -> abort -> reset --------------------------------------------------------------

/// The I/O thread never blocks on an Abort: the command that timed out is reported at once
/// and every poll returns quickly; a declined abort escalates to a reset one timeout later,
/// after which I/O goes on.
#[test]
fn a_declined_abort_escalates_to_a_reset_without_blocking_the_io_thread() {
    let (sim, ctrl) = start(SimConfig::default());
    let ns = ctrl.namespace(NS).unwrap();
    let mut q = qp(&ctrl, 8);
    sim.faults().delay_execution_with(
        1,
        nvme_sim::ExecutionDelay::new(Duration::from_secs(3600))
            .without_completion()
            .not_abortable(),
    );
    q.submit_read(&ns, 0, 1, ctrl.alloc_buffer(BLOCK).unwrap(), 1)
        .unwrap();
    let mut timed_out = false;
    let mut slowest = Duration::ZERO;
    let start = Instant::now();
    while ctrl.abort_stats().resets == 0 {
        assert!(start.elapsed() < Duration::from_secs(10), "no escalation");
        let t = Instant::now();
        q.poll(|c| {
            assert!(
                matches!(c.result, Err(Error::Timeout { .. })),
                "{:?}",
                c.result
            );
            timed_out = true;
        });
        slowest = slowest.max(t.elapsed());
    }
    assert!(timed_out);
    let aborts = ctrl.abort_stats();
    assert_eq!((aborts.sent, aborts.not_aborted), (1, 1), "{aborts:?}");
    // The reset itself runs on this thread (a controller-level action); the polls before it
    // never waited for the admin queue.
    assert!(slowest < Duration::from_secs(2), "a poll took {slowest:?}");
    round_trip(&mut q, &ctrl, 4, 0x44);
    assert_eq!(q.retired(), 0, "the reset released the retired slot");
}

/// The kernel asks for the device back (VFIO's device request interrupt): all I/O fails
/// with `Removed` within 100 ms and teardown is prompt, so an unbind never waits on us.
#[test]
fn a_device_release_request_fails_io_and_lets_go_promptly() {
    let (sim, ctrl) = start(SimConfig::default());
    let ns = ctrl.namespace(NS).unwrap();
    let mut q = ctrl
        .create_queue_pair(QueuePairOptions {
            depth: 16,
            timeout: Duration::from_secs(30),
            ..Default::default()
        })
        .unwrap();
    sim.faults().delay_completions(Duration::from_secs(3600));
    for i in 0..8u64 {
        q.submit_read(&ns, i, 1, ctrl.alloc_buffer(BLOCK).unwrap(), i)
            .unwrap();
    }
    std::thread::sleep(Duration::from_millis(60));
    let asked = Instant::now();
    sim.request_device_release();
    let mut removed = 0;
    poll_until(&mut q, Duration::from_secs(2), |q| {
        q.poll(|c| {
            let e = c
                .result
                .expect_err("nothing completes after a release request");
            assert!(e.to_string().contains("asked for the device back"), "{e}");
            removed += 1;
        });
        removed == 8
    });
    assert!(ctrl.is_removed());
    drop(q);
    drop(ctrl);
    assert!(
        asked.elapsed() < Duration::from_secs(1),
        "{:?}",
        asked.elapsed()
    );
}

#[test]
fn with_resubmit_after_reset_in_flight_writes_complete_once_the_queues_are_back() {
    let (sim, ctrl) = start(SimConfig::default());
    let ns = ctrl.namespace(NS).unwrap();
    let mut q = ctrl
        .create_queue_pair(QueuePairOptions {
            depth: 128,
            timeout: Duration::from_secs(10),
            resubmit_after_reset: true,
            ..Default::default()
        })
        .unwrap();
    round_trip(&mut q, &ctrl, 1000, 0x11);
    // 100 writes fetched but held by the device; the reset cancels them (they never execute),
    // so only a resubmission can put their data on the medium.
    sim.faults().delay_execution(100, Duration::from_secs(3600));
    for i in 0..100u64 {
        let mut b = ctrl.alloc_buffer(BLOCK).unwrap();
        b.fill(i as u8 + 1);
        q.submit_write(&ns, i, 1, b, WriteFlags::NONE, i).unwrap();
    }
    let submitted = q.stats().commands_submitted;
    std::thread::sleep(Duration::from_millis(50));
    ctrl.reset().expect("reset");

    let mut done = [false; 100];
    let start = Instant::now();
    while done.iter().any(|d| !d) {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "still waiting for {} writes",
            done.iter().filter(|d| !**d).count()
        );
        q.poll(|c| {
            c.result.expect("a resubmitted write succeeds");
            let buf = c.buffer.expect("the buffer comes back");
            assert!(
                buf.iter().all(|&x| x == c.user_data as u8 + 1),
                "context kept"
            );
            assert!(!done[c.user_data as usize], "completed twice");
            done[c.user_data as usize] = true;
        });
    }
    assert_eq!(q.stats().commands_submitted, submitted + 100);
    for i in 0..100u64 {
        assert_eq!(
            sim.read_disk(NS, i * BLOCK as u64, BLOCK),
            vec![i as u8 + 1; BLOCK],
            "LBA {i}"
        );
    }
    assert_eq!(q.in_flight(), 0);
    round_trip(&mut q, &ctrl, 1001, 0x22);
}

#[test]
fn with_resubmit_after_reset_a_synchronous_read_waiting_across_a_reset_gets_its_data() {
    let (sim, ctrl) = start(SimConfig::default());
    let ns = ctrl.namespace(NS).unwrap();
    let mut q = ctrl
        .create_queue_pair(QueuePairOptions {
            depth: 16,
            timeout: Duration::from_secs(10),
            resubmit_after_reset: true,
            ..Default::default()
        })
        .unwrap();
    sim.write_disk(NS, 7 * BLOCK as u64, &[0xC3; BLOCK]);
    sim.faults().delay_execution(1, Duration::from_secs(3600));
    let resetter = {
        let ctrl = ctrl.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            ctrl.reset()
        })
    };
    let back = q
        .read(&ns, 7, 1, ctrl.alloc_buffer(BLOCK).unwrap())
        .expect("the read is resubmitted after the reset");
    assert!(back.iter().all(|&x| x == 0xC3));
    resetter.join().unwrap().expect("reset");
}

/// Timed-out commands beyond the controller's Abort Command Limit (Identify ACL + 1) get
/// their Aborts one by one as earlier Aborts complete, never more at once than the limit:
/// each is aborted and no reset is needed. The emulator runs inline, so every Abort the
/// driver has submitted at a step is outstanding at once (and the excess would complete with
/// Abort Command Limit Exceeded).
#[test]
fn timed_out_commands_beyond_the_abort_limit_are_aborted_as_earlier_aborts_complete() {
    let (sim, ctrl) = start(SimConfig {
        abort_limit: 1,
        ..SimConfig::default()
    });
    assert_eq!(ctrl.identify().acl, 0);
    let ns = ctrl.namespace(NS).unwrap();
    let mut q = ctrl
        .create_queue_pair(QueuePairOptions {
            depth: 8,
            timeout: Duration::from_millis(300),
            ..Default::default()
        })
        .expect("queue pair");
    sim.set_inline(true);
    // Held far longer than the test runs: only an Abort brings each back.
    sim.faults().delay_execution(3, Duration::from_secs(3600));
    for i in 0..3 {
        q.submit_read(&ns, i, 1, ctrl.alloc_buffer(BLOCK).unwrap(), i)
            .unwrap();
    }
    q.ring();
    let mut timed_out = 0;
    let start = Instant::now();
    while timed_out < 3 || q.retired() > 0 {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{timed_out} timed out, {} retired, {:?}",
            q.retired(),
            ctrl.abort_stats()
        );
        let n = q.poll(|c| {
            assert!(
                matches!(c.result, Err(Error::Timeout { .. })),
                "{:?}",
                c.result
            );
            timed_out += 1;
        });
        if n == 0 {
            sim.step();
        }
    }
    sim.set_inline(false);
    let aborts = ctrl.abort_stats();
    assert_eq!(
        (aborts.sent, aborts.aborted, aborts.failed, aborts.resets),
        (3, 3, 0, 0),
        "{aborts:?}"
    );
    round_trip(&mut q, &ctrl, 4, 0x55);
}
