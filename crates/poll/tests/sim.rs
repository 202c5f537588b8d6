//! `nvme-poll` against the in-process emulated controller (`nvme-sim`): poll groups over
//! pairs of two controllers, fairness, the async API under `block_on` and `LocalExecutor`,
//! and dropping futures whose I/O is in flight.

use nvme_driver::IoQueue;
use nvme_driver::WriteFlags;
use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use nvme_driver::{
    Controller, ControllerOptions, DmaBuffer, Error, QueuePair, QueuePairOptions, Transport,
};
use nvme_poll::{block_on, AsyncQueuePair, LocalExecutor, PollGroup, PollStats, QpId};
use nvme_sim::{SimConfig, SimController};

/// Namespace with 512-byte blocks in the default emulator configuration.
const NS_512: u32 = 1;
/// Namespace with 4096-byte blocks in the default emulator configuration.
const NS_4K: u32 = 2;
/// Generous bound for anything the emulator does.
const DEADLINE: Duration = Duration::from_secs(20);

fn start() -> (SimController, Controller) {
    let _ = env_logger::builder().is_test(true).try_init();
    let sim = SimController::start(SimConfig::default());
    let ctrl = Controller::new(
        Transport::new(sim.mmio(), sim.dma(), "sim"),
        ControllerOptions::default(),
    )
    .expect("bring-up");
    (sim, ctrl)
}

/// A queue pair on `ctrl` (the emulator offers shadow doorbells, so they are in use).
fn queue_pair(ctrl: &Controller, depth: u32, batch: usize) -> QueuePair {
    ctrl.create_queue_pair(QueuePairOptions {
        depth,
        timeout: Duration::from_secs(10),
        max_completions_per_poll: batch,
        ..QueuePairOptions::default()
    })
    .expect("queue pair")
}

fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < DEADLINE, "timed out waiting for {what}");
        std::thread::yield_now();
    }
}

struct NoopWaker;
impl Wake for NoopWaker {
    fn wake(self: Arc<Self>) {}
}

/// Polls `future` once with a waker that does nothing.
fn poll_once<F: Future + Unpin>(future: &mut F) -> Poll<F::Output> {
    let waker = Waker::from(Arc::new(NoopWaker));
    Pin::new(future).poll(&mut Context::from_waker(&waker))
}

// ----- PollGroup ------------------------------------------------------------------------------

/// I/Os per pair in the group test, and how many each pair keeps in flight.
const IOS_PER_PAIR: u64 = 200;
const QD_PER_PAIR: usize = 12;

struct PairWork {
    id: QpId,
    sim: usize,
    /// First LBA (4 KiB blocks) of this pair's region.
    base: u64,
    next: u64,
    idle_bufs: Vec<DmaBuffer>,
    done: u64,
}

fn user_data(pair: usize, i: u64) -> u64 {
    ((pair as u64) << 32) | i
}

fn seed(pair: usize, i: u64) -> u64 {
    user_data(pair, i) + 1
}

/// Runs `IOS_PER_PAIR` writes (`write`) or reads on every pair through the group, checking
/// each completion in the callback.
fn run_group_phase(
    group: &mut PollGroup,
    work: &mut [PairWork],
    ns: &[nvme_driver::Namespace],
    write: bool,
) {
    for w in work.iter_mut() {
        w.next = 0;
        w.done = 0;
    }
    let start = Instant::now();
    while work.iter().any(|w| w.done < IOS_PER_PAIR) {
        assert!(start.elapsed() < DEADLINE, "group phase did not finish");
        for (p, w) in work.iter_mut().enumerate() {
            let qp = group.get_mut(w.id).expect("pair in group");
            while w.next < IOS_PER_PAIR {
                let Some(mut buf) = w.idle_bufs.pop() else {
                    break;
                };
                let lba = w.base + w.next;
                let ud = user_data(p, w.next);
                let ns = &ns[w.sim];
                if write {
                    buf.copy_from_slice(&pattern(4096, seed(p, w.next)));
                    qp.submit_write(ns, lba, 1, buf, WriteFlags::NONE, ud)
                        .expect("submit write");
                } else {
                    buf.fill(0);
                    qp.submit_read(ns, lba, 1, buf, ud).expect("submit read");
                }
                w.next += 1;
            }
        }
        group.poll(|id, c| {
            let p = (c.user_data >> 32) as usize;
            let i = c.user_data & u64::from(u32::MAX);
            let w = &mut work[p];
            assert_eq!(
                id, w.id,
                "completion delivered with the id of the pair that issued it"
            );
            assert!(c.result.is_ok(), "pair {p} I/O {i}: {:?}", c.result);
            let buf = c.buffer.expect("buffer returned");
            if !write {
                assert!(
                    buf[..] == pattern(4096, seed(p, i))[..],
                    "pair {p} read {i}: wrong data"
                );
            }
            w.idle_bufs.push(buf);
            w.done += 1;
        });
    }
}

#[test]
fn poll_group_over_three_pairs_of_two_controllers_moves_correct_data() {
    let (sim_a, ctrl_a) = start();
    let (sim_b, ctrl_b) = start();
    let ns = [
        ctrl_a.namespace(NS_4K).unwrap(),
        ctrl_b.namespace(NS_4K).unwrap(),
    ];
    let ctrls = [&ctrl_a, &ctrl_b];
    let mut group = PollGroup::new();
    let mut work = Vec::new();
    // Pairs 0 and 1 on controller A (disjoint regions), pair 2 on controller B.
    for (sim, base) in [(0usize, 0u64), (0, 1000), (1, 0)] {
        let ctrl = ctrls[sim];
        let id = group.add(queue_pair(ctrl, 32, 8));
        work.push(PairWork {
            id,
            sim,
            base,
            next: 0,
            idle_bufs: DmaBuffer::allocate_many(ctrl.dma(), QD_PER_PAIR, 4096).unwrap(),
            done: 0,
        });
    }
    assert_eq!(group.len(), 3);
    run_group_phase(&mut group, &mut work, &ns, true);
    assert_eq!(group.in_flight(), 0);
    // The media hold exactly what each pair wrote.
    let sims = [&sim_a, &sim_b];
    for (p, w) in work.iter().enumerate() {
        for i in 0..IOS_PER_PAIR {
            let on_disk = sims[w.sim].read_disk(NS_4K, (w.base + i) * 4096, 4096);
            assert!(
                on_disk == pattern(4096, seed(p, i)),
                "pair {p} block {i} on the medium"
            );
        }
    }
    run_group_phase(&mut group, &mut work, &ns, false);

    let totals = group.totals();
    let stats: Vec<(QpId, PollStats)> = group.stats().collect();
    assert_eq!(stats.len(), 3);
    for (id, s) in &stats {
        assert_eq!(s.completions, 2 * IOS_PER_PAIR, "{id}");
        assert_eq!(
            s.polls, totals.polls,
            "{id}: every group poll polls every pair"
        );
        assert!(s.idle_polls <= s.polls);
        let qp = group.get(*id).unwrap();
        assert_eq!(qp.stats().bad_completions, 0);
        assert_eq!(qp.stats().requests_completed, 2 * IOS_PER_PAIR);
    }
    assert_eq!(totals.completions, 3 * 2 * IOS_PER_PAIR);

    // Removal invalidates the id; the slot is reused with a new generation.
    let removed = group.remove(work[1].id).expect("remove");
    assert!(group.get_mut(work[1].id).is_none());
    assert!(group.remove(work[1].id).is_none());
    assert_eq!(group.len(), 2);
    let again = group.add(removed);
    assert_eq!(again.index(), work[1].id.index());
    assert_ne!(again, work[1].id);
    assert_eq!(group.pair_stats(again), Some(PollStats::default()));
    assert_eq!(group.pair_stats(work[1].id), None);
}

#[test]
fn poll_group_rotates_the_first_pair_and_starves_none() {
    let (sim_a, ctrl_a) = start();
    let (sim_b, ctrl_b) = start();
    const PER_PAIR: u64 = 8;
    // Batch cap 1: each pair yields at most one completion per poll.
    let mut group = PollGroup::new();
    let ids = [
        group.add(queue_pair(&ctrl_a, 16, 1)),
        group.add(queue_pair(&ctrl_a, 16, 1)),
        group.add(queue_pair(&ctrl_b, 16, 1)),
    ];
    let posted = |sim: &SimController| sim.stats().completions_posted;
    let (before_a, before_b) = (posted(&sim_a), posted(&sim_b));
    for (p, &id) in ids.iter().enumerate() {
        let ctrl = if p < 2 { &ctrl_a } else { &ctrl_b };
        let ns = ctrl.namespace(NS_512).unwrap();
        let qp = group.get_mut(id).unwrap();
        for i in 0..PER_PAIR {
            qp.submit_flush(&ns, user_data(p, i)).unwrap();
        }
    }
    // Let the controllers post every completion, so each poll finds work on every pair.
    wait_for("completions on controller A", || {
        posted(&sim_a) >= before_a + 2 * PER_PAIR
    });
    wait_for("completions on controller B", || {
        posted(&sim_b) >= before_b + PER_PAIR
    });

    for call in 0..PER_PAIR as usize {
        let mut order = Vec::new();
        let n = group.poll(|id, c| {
            assert!(c.result.is_ok());
            let p = (c.user_data >> 32) as usize;
            assert_eq!(id, ids[p]);
            order.push(p);
        });
        assert_eq!(n, 3, "call {call}: one completion from each pair");
        let expected: Vec<usize> = (0..3).map(|k| (call + k) % 3).collect();
        assert_eq!(order, expected, "call {call}: the first pair rotates");
    }
    assert_eq!(group.poll(|_, _| panic!("nothing left")), 0);
    for &id in &ids {
        assert_eq!(
            group.pair_stats(id).unwrap(),
            PollStats {
                polls: PER_PAIR + 1,
                idle_polls: 1,
                completions: PER_PAIR
            }
        );
    }
    assert_eq!(group.totals().idle_polls, 1);
}

#[test]
fn poll_group_drain_and_poll_until_idle() {
    let (_sim, ctrl) = start();
    let ns = ctrl.namespace(NS_512).unwrap();
    let mut group = PollGroup::new();
    let a = group.add(queue_pair(&ctrl, 8, 2));
    let b = group.add(queue_pair(&ctrl, 8, 2));
    for id in [a, b] {
        for i in 0..5 {
            group.get_mut(id).unwrap().submit_flush(&ns, i).unwrap();
        }
    }
    assert_eq!(group.in_flight(), 10);
    let mut seen = 0;
    let n = group.drain(|_, c| {
        assert!(c.result.is_ok());
        seen += 1;
    });
    assert_eq!((n, seen), (10, 10));
    assert_eq!(group.in_flight(), 0);
    assert_eq!(group.poll_until_idle(|_, _| panic!("nothing in flight")), 0);
}

// ----- AsyncQueuePair + block_on ---------------------------------------------------------------

#[test]
fn async_write_read_flush_round_trip_with_block_on() {
    let (sim, ctrl) = start();
    let ns = ctrl.namespace(NS_512).unwrap();
    // A pair with requests in flight is refused, and given back.
    let mut qp = queue_pair(&ctrl, 32, 16);
    qp.submit_flush(&ns, 0).unwrap();
    let busy = AsyncQueuePair::new(qp).unwrap_err();
    assert_eq!(busy.in_flight, 1);
    let mut qp = *busy.qp;
    wait_for("the flush", || qp.poll(|c| assert!(c.result.is_ok())) == 1);
    let aqp = AsyncQueuePair::new(qp).expect("idle pair");
    assert_eq!(aqp.capacity(), 31);
    // One page, and a 2 MiB transfer the driver splits into several commands.
    for (lba, len) in [(10u64, 4096usize), (4096, 2 << 20)] {
        let blocks = (len / 512) as u32;
        let data = pattern(len, lba);
        let mut buf = ctrl.alloc_buffer(len).unwrap();
        buf.copy_from_slice(&data);
        let buf = block_on(
            aqp.write(&ns, lba, blocks, buf, WriteFlags::NONE),
            aqp.reactor(),
        )
        .expect("write");
        assert!(
            sim.read_disk(NS_512, lba * 512, len) == data,
            "medium after async write"
        );
        let mut buf = buf;
        buf.fill(0);
        let buf = block_on(aqp.read(&ns, lba, blocks, buf), aqp.reactor()).expect("read");
        assert!(buf[..] == data[..], "async read back");
    }
    block_on(aqp.flush(&ns), aqp.reactor()).expect("flush");

    // A request the driver refuses resolves at once, with the buffer.
    let buf = ctrl.alloc_buffer(512).unwrap();
    let failure = block_on(aqp.read(&ns, ns.blocks(), 1, buf), aqp.reactor()).unwrap_err();
    assert!(
        matches!(failure.error, Error::LbaOutOfRange { .. }),
        "{}",
        failure.error
    );
    assert!(failure.buffer.is_some());

    let stats = aqp.stats();
    assert_eq!(stats.submitted, 5);
    assert_eq!(stats.completed, 5);
    assert_eq!(aqp.slots_in_use(), 0);
    assert_eq!(aqp.in_flight(), 0);
    let qp = aqp.try_into_inner().expect("last handle, nothing in use");
    assert_eq!(qp.stats().bad_completions, 0);
}

// ----- LocalExecutor ---------------------------------------------------------------------------

#[test]
fn local_executor_runs_32_tasks_over_a_smaller_queue() {
    let (sim, ctrl) = start();
    let ns = ctrl.namespace(NS_4K).unwrap();
    // 15 slots for 32 tasks: submissions must wait for space.
    let aqp = AsyncQueuePair::new(queue_pair(&ctrl, 16, 8)).expect("idle pair");
    const TASKS: u64 = 32;
    const READS_PER_TASK: u64 = 4;
    let mut ex = LocalExecutor::new();
    ex.drive(&aqp);
    let finished = Rc::new(RefCell::new(Vec::new()));
    let mut bufs = DmaBuffer::allocate_many(ctrl.dma(), TASKS as usize, 8192).unwrap();
    for i in 0..TASKS {
        let (aqp, ns, finished) = (aqp.clone(), ns.clone(), finished.clone());
        let mut buf = bufs.pop().unwrap();
        ex.spawn(async move {
            let lba = 100 + 3 * i;
            let data = pattern(8192, i);
            buf.copy_from_slice(&data);
            let mut buf = aqp
                .write(&ns, lba, 2, buf, WriteFlags::NONE.with_fua(i % 2 == 0))
                .await
                .expect("write");
            for _ in 0..READS_PER_TASK {
                buf.fill(0);
                buf = aqp.read(&ns, lba, 2, buf).await.expect("read");
                assert!(buf[..] == data[..], "task {i}: read back");
            }
            finished.borrow_mut().push(i);
        });
    }
    assert_eq!(ex.len(), TASKS as usize);
    ex.run();
    assert!(ex.is_empty());
    let mut done = finished.borrow().clone();
    done.sort();
    assert_eq!(done, (0..TASKS).collect::<Vec<_>>());
    for i in 0..TASKS {
        assert!(
            sim.read_disk(NS_4K, (100 + 3 * i) * 4096, 8192) == pattern(8192, i),
            "task {i}: medium"
        );
    }
    let stats = aqp.stats();
    assert_eq!(stats.submitted, TASKS * (1 + READS_PER_TASK));
    assert_eq!(stats.completed, stats.submitted);
    assert!(
        stats.queue_full_waits > 0,
        "32 tasks on 15 slots must have waited"
    );
    assert_eq!(aqp.slots_in_use(), 0);
    assert_eq!(aqp.queue_stats().bad_completions, 0);

    // block_on on the executor: a main future alongside spawned tasks.
    let side = Rc::new(RefCell::new(None));
    {
        let (aqp, ns, side) = (aqp.clone(), ns.clone(), side.clone());
        let buf = ctrl.alloc_buffer(4096).unwrap();
        ex.spawn(async move {
            let buf = aqp.read(&ns, 100, 1, buf).await.expect("side read");
            *side.borrow_mut() = Some(buf[..16].to_vec());
        });
    }
    let buf = ctrl.alloc_buffer(4096).unwrap();
    let main = ex.block_on(aqp.read(&ns, 103, 1, buf)).expect("main read");
    assert!(main[..] == pattern(8192, 1)[..4096]);
    ex.run();
    assert_eq!(side.borrow().as_deref(), Some(&pattern(8192, 0)[..16]));
}

// ----- dropping futures -----------------------------------------------------------------------

#[test]
fn dropped_in_flight_future_keeps_its_buffer_until_completion_then_frees_the_slot() {
    let (sim, ctrl) = start();
    let ns = ctrl.namespace(NS_512).unwrap();
    // One slot, so the next request must reuse the abandoned one.
    let aqp = AsyncQueuePair::new(queue_pair(&ctrl, 2, 1)).expect("idle pair");
    assert_eq!(aqp.capacity(), 1);
    let mappings = || sim.sim_dma().mapping_count();
    let baseline = mappings();

    let data = pattern(4096, 77);
    let mut buf = ctrl.alloc_buffer(4096).unwrap();
    buf.copy_from_slice(&data);
    assert_eq!(mappings(), baseline + 1);
    sim.faults().delay_completions(Duration::from_millis(50));
    let mut write = Box::pin(aqp.write(&ns, 40, 8, buf, WriteFlags::NONE));
    assert!(poll_once(&mut write).is_pending());
    assert_eq!(aqp.in_flight(), 1);
    drop(write);
    let stats = aqp.stats();
    assert_eq!((stats.submitted, stats.abandoned), (1, 1));
    assert_eq!(
        aqp.slots_in_use(),
        1,
        "the slot stays reserved until the completion"
    );
    assert_eq!(
        mappings(),
        baseline + 1,
        "the device may still read the buffer: not freed"
    );

    // The next request waits for the slot, which the abandoned completion frees.
    let back = ctrl.alloc_buffer(4096).unwrap();
    let back = block_on(aqp.read(&ns, 40, 8, back), aqp.reactor()).expect("read after drop");
    sim.faults().delay_completions(Duration::ZERO);
    assert!(back[..] == data[..], "the abandoned write landed intact");
    let stats = aqp.stats();
    assert_eq!(stats.abandoned_reaped, 1);
    assert!(stats.queue_full_waits >= 1);
    assert_eq!(
        stats.completed, 1,
        "only the read was delivered to a future"
    );
    drop(back);
    assert_eq!(
        mappings(),
        baseline,
        "the abandoned buffer was freed at its completion"
    );
    assert_eq!(aqp.slots_in_use(), 0);

    // A future dropped after its completion arrived but before it was polled again.
    let buf = ctrl.alloc_buffer(4096).unwrap();
    let mut read = Box::pin(aqp.read(&ns, 40, 8, buf));
    assert!(poll_once(&mut read).is_pending());
    wait_for("the completion", || {
        aqp.poll_completions();
        aqp.in_flight() == 0
    });
    assert_eq!(aqp.slots_in_use(), 1, "result waits in the slot");
    drop(read);
    assert_eq!(aqp.slots_in_use(), 0);
    assert_eq!(mappings(), baseline);

    // The slot keeps working.
    for i in 0..5u64 {
        let mut buf = ctrl.alloc_buffer(512).unwrap();
        buf.fill(i as u8);
        block_on(
            aqp.write(&ns, 200 + i, 1, buf, WriteFlags::NONE),
            aqp.reactor(),
        )
        .unwrap();
        assert_eq!(
            sim.read_disk(NS_512, (200 + i) * 512, 512),
            vec![i as u8; 512]
        );
    }
    assert_eq!(aqp.queue_stats().bad_completions, 0);
    assert_eq!(aqp.slots_in_use(), 0);
}

#[test]
fn dropping_the_pair_with_abandoned_io_frees_everything() {
    let (sim, ctrl) = start();
    let ns = ctrl.namespace(NS_512).unwrap();
    let baseline = sim.sim_dma().mapping_count();
    let aqp = AsyncQueuePair::new(queue_pair(&ctrl, 8, 4)).expect("idle pair");
    sim.faults().delay_completions(Duration::from_millis(20));
    for i in 0..4u64 {
        let buf = ctrl.alloc_buffer(512).unwrap();
        let mut f = Box::pin(aqp.write(&ns, i, 1, buf, WriteFlags::NONE));
        assert!(poll_once(&mut f).is_pending());
    }
    assert_eq!(aqp.stats().abandoned, 4);
    assert_eq!(aqp.in_flight(), 4);
    // Slots in use: the pair cannot be taken back out.
    let Err(aqp) = aqp.try_into_inner() else {
        panic!("try_into_inner succeeded with I/O in flight");
    };
    let other = aqp.clone();
    drop(aqp);
    drop(other);
    sim.faults().delay_completions(Duration::ZERO);
    assert_eq!(
        sim.sim_dma().mapping_count(),
        baseline,
        "queues deleted, then rings and abandoned buffers unmapped"
    );
}
