//! `nvme-poll` over NVMe/TCP: `AsyncQueuePair<TcpQueuePair>` and `PollGroup<TcpQueuePair>`
//! against the in-process fake target of `nvme-tcp` (data verified on the target's disk and
//! read back), and a connection the target drops mid-run: every future completes (the ones
//! caught by the loss with a transport error and their buffers), none hangs.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::{Duration, Instant};

use nvme_driver::{Error, IoQueue, QueuePairOptions, WriteFlags};
use nvme_poll::{block_on, AsyncQueuePair, LocalExecutor, PollGroup};
use nvme_tcp::fake::{Config, FakeTarget, Fault};
use nvme_tcp::{TcpController, TcpError, TcpOptions, TcpQueuePair};

/// Namespace of the fake target with 512-byte blocks (`Config::default`: nsid 2).
const NS_512: u32 = 2;
/// Namespace with 4096-byte blocks (nsid 1).
const NS_4K: u32 = 1;
/// Generous bound for anything the fake target does on loopback.
const DEADLINE: Duration = Duration::from_secs(20);

fn pattern(len: usize, seed: u64) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u64).wrapping_mul(131).wrapping_add(seed * 7) as u8)
        .collect()
}

fn connect(t: &FakeTarget) -> TcpController {
    let _ = env_logger::builder().is_test(true).try_init();
    TcpController::connect(&t.trid(), TcpOptions::default()).expect("connect to the fake target")
}

fn pair(c: &TcpController, depth: u32) -> TcpQueuePair {
    c.create_queue_pair(QueuePairOptions::default().depth(depth))
        .expect("queue pair")
}

#[test]
fn async_write_then_read_back_over_tcp_with_block_on() {
    let t = FakeTarget::start(Config::default());
    let c = connect(&t);
    let ns = c.namespace(NS_4K).unwrap();
    let aqp: AsyncQueuePair<TcpQueuePair> = AsyncQueuePair::new(pair(&c, 32)).expect("idle");
    let data = pattern(8192, 3);
    let mut buf = c.alloc_buffer(8192).unwrap();
    buf.copy_from_slice(&data);
    let buf = block_on(
        async {
            let mut buf = aqp.write(&ns, 10, 2, buf, WriteFlags::FUA).await?;
            buf.fill(0);
            aqp.flush(&ns)
                .await
                .map_err(|error| nvme_driver::IoFailure {
                    error,
                    buffer: None,
                    pieces: None,
                })?;
            aqp.read(&ns, 10, 2, buf).await
        },
        aqp.reactor(),
    )
    .map_err(|f| f.error)
    .expect("write, flush, read");
    assert!(buf[..] == data[..], "read back over TCP");
    assert!(
        t.disk(NS_4K, 10 * 4096, 8192) == data,
        "on the target's disk"
    );
    let stats = aqp.stats();
    assert_eq!(stats.submitted, 3);
    assert_eq!(stats.completed, 3);
    assert_eq!(aqp.slots_in_use(), 0);
    assert!(aqp.queue_stats().pdus_received > 0);
    // The pair comes back out, usable synchronously.
    let mut qp = aqp
        .try_into_inner()
        .expect("last handle, nothing in flight");
    let buf = qp
        .read(&ns, 10, 2, c.alloc_buffer(8192).unwrap())
        .expect("sync read");
    assert!(buf[..] == data[..]);
}

#[test]
fn many_async_tasks_over_a_small_tcp_queue() {
    let t = FakeTarget::start(Config::default());
    let c = connect(&t);
    let ns = c.namespace(NS_512).unwrap();
    // 7 slots for 24 tasks: submissions wait for space.
    let aqp = AsyncQueuePair::new(pair(&c, 8)).expect("idle");
    assert_eq!(aqp.capacity(), 7);
    const TASKS: u64 = 24;
    let mut ex = LocalExecutor::new();
    ex.drive(&aqp);
    let finished = Rc::new(RefCell::new(Vec::new()));
    for i in 0..TASKS {
        let (aqp, ns, finished) = (aqp.clone(), ns.clone(), finished.clone());
        let mut buf = c.alloc_buffer(1024).unwrap();
        ex.spawn(async move {
            let lba = 4 * i;
            let data = pattern(1024, i);
            buf.copy_from_slice(&data);
            let mut buf = aqp
                .write(&ns, lba, 2, buf, WriteFlags::NONE)
                .await
                .expect("write");
            buf.fill(0);
            let buf = aqp.read(&ns, lba, 2, buf).await.expect("read");
            assert!(buf[..] == data[..], "task {i}: read back");
            finished.borrow_mut().push(i);
        });
    }
    let start = Instant::now();
    ex.run();
    assert!(start.elapsed() < DEADLINE);
    let mut done = finished.borrow().clone();
    done.sort();
    assert_eq!(done, (0..TASKS).collect::<Vec<_>>());
    for i in 0..TASKS {
        assert!(
            t.disk(NS_512, (4 * i * 512) as usize, 1024) == pattern(1024, i),
            "task {i}: on the target's disk"
        );
    }
    let stats = aqp.stats();
    assert_eq!(stats.submitted, 2 * TASKS);
    assert_eq!(stats.completed, stats.submitted);
    assert!(stats.queue_full_waits > 0, "24 tasks on 7 slots must wait");
    assert_eq!(aqp.in_flight(), 0);
}

#[test]
fn connection_reset_mid_run_completes_every_future_with_an_error_and_its_buffer() {
    // The target answers 10 I/O commands on the connection, then closes it.
    let t = FakeTarget::start(Config {
        fault: Fault::Reset,
        fault_after: 10,
        ..Config::default()
    });
    let c = connect(&t);
    let ns = c.namespace(NS_512).unwrap();
    let aqp = AsyncQueuePair::new(pair(&c, 16)).expect("idle");
    const TASKS: u64 = 32;
    let mut ex = LocalExecutor::new();
    ex.drive(&aqp);
    // Per task: Ok(()) when its write and read-back worked, else the error that stopped it.
    let outcomes = Rc::new(RefCell::new(Vec::new()));
    for i in 0..TASKS {
        let (aqp, ns, outcomes) = (aqp.clone(), ns.clone(), outcomes.clone());
        let mut buf = c.alloc_buffer(512).unwrap();
        ex.spawn(async move {
            let data = pattern(512, i);
            buf.copy_from_slice(&data);
            let outcome = async {
                let mut buf = aqp.write(&ns, i, 1, buf, WriteFlags::NONE).await?;
                buf.fill(0);
                let buf = aqp.read(&ns, i, 1, buf).await?;
                assert!(buf[..] == data[..], "task {i}: read back");
                Ok::<(), nvme_driver::IoFailure>(())
            }
            .await
            .map_err(|f| {
                // A submission refused or a request failed: the buffer comes back either way.
                assert!(f.buffer.is_some(), "task {i}: buffer lost: {}", f.error);
                f.error
            });
            outcomes.borrow_mut().push((i, outcome));
        });
    }
    let start = Instant::now();
    ex.run();
    assert!(start.elapsed() < DEADLINE, "hang after the reset");
    let outcomes = outcomes.borrow();
    assert_eq!(outcomes.len(), TASKS as usize, "every task finished");
    let failed: Vec<&Error> = outcomes
        .iter()
        .filter_map(|(_, o)| o.as_ref().err())
        .collect();
    let ok = outcomes.len() - failed.len();
    assert!(
        ok <= 5,
        "at most 10 commands were answered: {ok} tasks did 2 each"
    );
    assert!(!failed.is_empty());
    for e in failed {
        let Error::Transport { source, .. } = e else {
            panic!("expected a transport error, got {e:?}")
        };
        let tcp = source.downcast_ref::<TcpError>().expect("a TcpError");
        assert!(matches!(tcp, TcpError::Closed { .. }), "{tcp}");
    }
    assert_eq!(aqp.in_flight(), 0);
    assert_eq!(aqp.slots_in_use(), 0);
    let stats = aqp.stats();
    assert_eq!(stats.completed, stats.submitted);
}

#[test]
fn poll_group_over_two_tcp_controllers() {
    let t1 = FakeTarget::start(Config::default());
    let t2 = FakeTarget::start(Config::default());
    let (c1, c2) = (connect(&t1), connect(&t2));
    let mut group = PollGroup::<TcpQueuePair>::default();
    let a = group.add(pair(&c1, 8));
    let b = group.add(pair(&c2, 8));
    let (n1, n2) = (c1.namespace(NS_512).unwrap(), c2.namespace(NS_512).unwrap());
    for lba in 0..4u64 {
        let mut buf = c1.alloc_buffer(512).unwrap();
        buf.copy_from_slice(&pattern(512, lba));
        group
            .get_mut(a)
            .unwrap()
            .submit_write(&n1, lba, 1, buf, WriteFlags::NONE, lba)
            .expect("submit on pair a");
        let mut buf = c2.alloc_buffer(512).unwrap();
        buf.copy_from_slice(&pattern(512, 100 + lba));
        group
            .get_mut(b)
            .unwrap()
            .submit_write(&n2, lba, 1, buf, WriteFlags::NONE, 100 + lba)
            .expect("submit on pair b");
    }
    assert_eq!(group.in_flight(), 8);
    let mut seen = Vec::new();
    let start = Instant::now();
    while seen.len() < 8 {
        group.poll(|id, comp| {
            comp.result.as_ref().expect("write");
            assert_eq!(id == a, comp.user_data < 100);
            seen.push(comp.user_data);
        });
        assert!(start.elapsed() < DEADLINE, "hang");
    }
    seen.sort();
    assert_eq!(seen, vec![0, 1, 2, 3, 100, 101, 102, 103]);
    for lba in 0..4u64 {
        assert_eq!(t1.disk(NS_512, lba as usize * 512, 512), pattern(512, lba));
        assert_eq!(
            t2.disk(NS_512, lba as usize * 512, 512),
            pattern(512, 100 + lba)
        );
    }
    assert_eq!(group.totals().completions, 8);
    // The trait's view of a pair matches the pair's own.
    let qp = group.remove(a).unwrap();
    assert_eq!(IoQueue::capacity(&qp), qp.capacity());
    assert_eq!(IoQueue::qid(&qp), qp.qid());
}
