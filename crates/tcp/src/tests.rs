//! The host against the in-process fake target (`fake.rs`): bring-up, data paths (in-capsule,
//! R2T/H2CData, C2HData with and without the SUCCESS shortcut, digests, CPDA), Keep Alive,
//! and every fault mode: the right error, a closed queue, every request completed, no hang.

use nvme_core::IoQueue;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use nvme_core::{Completion, Error, QueuePairOptions, TimeoutAction, WriteFlags};

use crate::fake::{Config, FakeTarget, Fault};
use crate::{TcpController, TcpError, TcpOptions, TransportId};

mod admin;
mod copy;
mod liveness;
mod split;
mod vectored;

fn connect(target: &FakeTarget) -> TcpController {
    TcpController::connect(&target.trid(), TcpOptions::default()).expect("connect")
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn tcp_source(e: &Error) -> &TcpError {
    match e {
        Error::Transport { source, .. } => source
            .downcast_ref::<TcpError>()
            .unwrap_or_else(|| panic!("not a TcpError: {source}")),
        other => panic!("expected a transport error, got {other:?}"),
    }
}

#[test]
fn bring_up_identify_and_namespaces() {
    let t = FakeTarget::start(Config::default());
    let c = connect(&t);
    assert_eq!(c.cntlid(), 7);
    assert_eq!(c.identify().model(), "fake NVMe/TCP target");
    assert_eq!(c.cap().max_queue_entries(), 128);
    assert_eq!(c.version().0, 0x0001_0400);
    assert_eq!(c.io_queue_pairs(), 4);
    assert_eq!(c.in_capsule_data_size(), 8192);
    let ns: Vec<(u32, u32, u64)> = c
        .namespaces()
        .iter()
        .map(|n| (n.nsid(), n.block_size(), n.blocks()))
        .collect();
    assert_eq!(ns, vec![(1, 4096, 256), (2, 512, 2048)]);
    assert!(matches!(
        c.namespace(9),
        Err(Error::InactiveNamespace { nsid: 9, .. })
    ));
    assert_eq!(t.counters().connects.load(Ordering::Relaxed), 1);
}

fn round_trip(t: &FakeTarget, c: &TcpController, nsid: u32, blocks: u32, lba: u64) {
    let ns = c.namespace(nsid).unwrap();
    let mut qp = c.create_queue_pair(QueuePairOptions::default()).unwrap();
    let len = (ns.block_size() * blocks) as usize;
    let data = pattern(len, lba as u8 ^ nsid as u8);
    let mut buf = c.alloc_buffer(len).unwrap();
    buf[..len].copy_from_slice(&data);
    qp.write(&ns, lba, blocks, buf, nvme_core::WriteFlags::NONE)
        .unwrap();
    let offset = (lba * u64::from(ns.block_size())) as usize;
    assert_eq!(t.disk(nsid, offset, len), data, "target got the data");
    let back = qp
        .read(&ns, lba, blocks, c.alloc_buffer(len).unwrap())
        .unwrap();
    assert_eq!(&back[..len], &data[..]);
    qp.flush(&ns).unwrap();
}

#[test]
fn writes_in_capsule_and_by_r2t_reads_by_c2hdata() {
    let t = FakeTarget::start(Config::default());
    let c = connect(&t);
    round_trip(&t, &c, 1, 1, 3); // 4 KiB: in-capsule
    round_trip(&t, &c, 2, 16, 100); // 8 KiB: in-capsule, exactly the limit
    round_trip(&t, &c, 1, 16, 20); // 64 KiB: R2T, 8 H2CData PDUs, 16 C2HData PDUs
    assert_eq!(t.counters().in_capsule_writes.load(Ordering::Relaxed), 2);
    assert_eq!(t.counters().r2ts.load(Ordering::Relaxed), 1);
}

#[test]
fn capsule_response_after_data_digests_and_cpda() {
    let t = FakeTarget::start(Config {
        success_shortcut: false,
        cpda: 7,
        c2h_chunk: 3000,
        ..Config::default()
    });
    let trid = TransportId::parse(&format!("{} hdgst:1 ddgst:1", t.trid())).unwrap();
    let c = TcpController::connect(&trid, TcpOptions::default()).unwrap();
    round_trip(&t, &c, 1, 1, 0);
    round_trip(&t, &c, 2, 100, 7);
    let qp = c.create_queue_pair(QueuePairOptions::default()).unwrap();
    assert_eq!(qp.digests(), (true, true));
}

#[test]
fn no_in_capsule_data_means_r2t_even_for_connect() {
    let t = FakeTarget::start(Config {
        ioccsz: 4,
        maxh2cdata: 4096,
        ..Config::default()
    });
    let c = connect(&t);
    assert_eq!(c.in_capsule_data_size(), 0);
    round_trip(&t, &c, 2, 1, 1);
    // Connect of the I/O queue (1 KiB) and the write each went by R2T.
    assert_eq!(t.counters().r2ts.load(Ordering::Relaxed), 2);
    assert_eq!(t.counters().in_capsule_writes.load(Ordering::Relaxed), 0);
}

#[test]
fn many_requests_in_flight_complete_through_poll() {
    let t = FakeTarget::start(Config::default());
    let c = connect(&t);
    let ns = c.namespace(2).unwrap();
    for lba in 0..64u64 {
        t.fill(2, lba as usize * 512, &pattern(512, lba as u8));
    }
    let mut qp = c
        .create_queue_pair(QueuePairOptions {
            depth: 32,
            ..QueuePairOptions::default()
        })
        .unwrap();
    assert_eq!(qp.capacity(), 31);
    let mut next = 0u64;
    let mut done = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    qp.plug(8).unwrap();
    while done.len() < 64 {
        while next < 64 && qp.in_flight() < qp.capacity() {
            let buf = c.alloc_buffer(512).unwrap();
            qp.submit_read(&ns, next, 1, buf, next).unwrap();
            next += 1;
        }
        qp.unplug();
        qp.poll(|comp: Completion| {
            comp.result.as_ref().unwrap();
            let buf = comp.buffer.unwrap();
            assert_eq!(&buf[..512], &pattern(512, comp.user_data as u8)[..]);
            done.push(comp.user_data);
        });
        assert!(Instant::now() < deadline, "hang");
    }
    done.sort_unstable();
    assert_eq!(done, (0..64).collect::<Vec<_>>());
    assert_eq!(qp.stats().success_shortcuts, 64);
    // A full queue refuses and gives the buffer back.
    for i in 0..31 {
        qp.submit_read(&ns, i, 1, c.alloc_buffer(512).unwrap(), i)
            .unwrap();
    }
    let f = qp
        .submit_read(&ns, 0, 1, c.alloc_buffer(512).unwrap(), 99)
        .unwrap_err();
    assert!(matches!(f.error, Error::QueueFull { .. }) && f.buffer.is_some());
}

/// `plug(n)` reserves `n` request slots all or nothing, as on PCIe: more than are free is
/// refused with `Error::QueueFull` and reserves nothing; a plug of every free slot lets that
/// many submissions through; `unplug` sends the batch and gives unused reservations back.
#[test]
fn plug_reserves_request_slots_all_or_nothing() {
    let t = FakeTarget::start(Config::default());
    let c = connect(&t);
    let ns = c.namespace(2).unwrap();
    let mut qp = c
        .create_queue_pair(QueuePairOptions {
            depth: 8,
            ..QueuePairOptions::default()
        })
        .unwrap();
    assert_eq!(qp.capacity(), 7);
    assert!(matches!(qp.plug(8), Err(Error::QueueFull { .. })));
    qp.plug(4).unwrap();
    assert!(
        matches!(qp.plug(4), Err(Error::QueueFull { .. })),
        "only 3 slots are left unreserved"
    );
    qp.plug(3).unwrap();
    for i in 0..7 {
        qp.submit_read(&ns, i, 1, c.alloc_buffer(512).unwrap(), i)
            .unwrap();
    }
    qp.unplug();
    let mut done = 0;
    let deadline = Instant::now() + Duration::from_secs(20);
    while done < 7 {
        qp.poll(|comp: Completion| {
            comp.result.unwrap();
            done += 1;
        });
        assert!(Instant::now() < deadline, "hang");
    }
    // A plug left unused is given back at unplug: the whole queue can be reserved again.
    qp.plug(2).unwrap();
    qp.unplug();
    qp.plug(7).unwrap();
    qp.unplug();
}

#[test]
fn bad_requests_are_refused_before_the_wire() {
    let t = FakeTarget::start(Config::default());
    let c = connect(&t);
    let ns = c.namespace(1).unwrap();
    let mut qp = c.create_queue_pair(QueuePairOptions::default()).unwrap();
    let f = qp
        .read(&ns, 256, 1, c.alloc_buffer(4096).unwrap())
        .unwrap_err();
    assert!(matches!(f.error, Error::LbaOutOfRange { .. }) && f.buffer.is_some());
    let f = qp
        .read(&ns, 0, 2, c.alloc_buffer(4096).unwrap())
        .unwrap_err();
    assert!(matches!(f.error, Error::BufferTooSmall { .. }));
    let f = qp
        .read(&ns, 0, 0, c.alloc_buffer(4096).unwrap())
        .unwrap_err();
    assert!(matches!(f.error, Error::ZeroLength));
    assert_eq!(t.counters().io_commands.load(Ordering::Relaxed), 0);
}

/// Runs a fault: `before` good reads, then reads in flight at once; every one completes,
/// the faulty ones with a transport error, and the queue refuses later submissions.
fn fault_case(fault: Fault, digests: bool) -> Error {
    let t = FakeTarget::start(Config {
        fault,
        fault_after: 2,
        ..Config::default()
    });
    let mut trid = t.trid();
    trid.hdgst = digests;
    trid.ddgst = digests;
    // The connection-closing timeout policy: these cases check a closed queue (the abort
    // policies have their own tests below).
    let options = TcpOptions {
        timeout_action: TimeoutAction::None,
        ..TcpOptions::default()
    };
    let c = TcpController::connect(&trid, options).unwrap();
    let ns = c.namespace(2).unwrap();
    let mut qp = c
        .create_queue_pair(QueuePairOptions {
            timeout: Duration::from_millis(600),
            ..QueuePairOptions::default()
        })
        .unwrap();
    for lba in 0..2 {
        qp.read(&ns, lba, 1, c.alloc_buffer(512).unwrap()).unwrap();
    }
    let mut errors = Vec::new();
    for i in 0..4 {
        // Once the target has broken the connection a submission may already see it.
        if let Err(f) = qp.submit_read(&ns, i, 1, c.alloc_buffer(512).unwrap(), i) {
            assert!(f.buffer.is_some());
            assert!(matches!(f.error, Error::Transport { .. }), "{f}");
            errors.push(f.error);
        }
    }
    let start = Instant::now();
    while errors.len() < 4 {
        qp.poll(|comp| {
            assert!(
                comp.buffer.is_some(),
                "buffers come back: no device holds them"
            );
            errors.push(comp.result.expect_err("faulty target"));
        });
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "hang after {fault:?}"
        );
    }
    assert_eq!(qp.in_flight(), 0);
    let f = qp
        .submit_read(&ns, 0, 1, c.alloc_buffer(512).unwrap(), 9)
        .unwrap_err();
    assert!(matches!(f.error, Error::Transport { .. }), "{f}");
    assert!(qp.closed_error().is_some());
    errors.into_iter().next().unwrap()
}

#[test]
fn bad_data_digest_closes_the_queue() {
    let e = fault_case(Fault::BadDataDigest, true);
    assert!(
        matches!(tcp_source(&e), TcpError::Digest { kind: "data", .. }),
        "{e}"
    );
    assert!(e.to_string().contains("digest mismatch"), "{e}");
}

#[test]
fn bad_header_digest_closes_the_queue() {
    let e = fault_case(Fault::BadHeaderDigest, true);
    assert!(
        matches!(tcp_source(&e), TcpError::Digest { kind: "header", .. }),
        "{e}"
    );
}

#[test]
fn garbage_pdu_closes_the_queue() {
    let e = fault_case(Fault::Garbage, false);
    assert!(matches!(tcp_source(&e), TcpError::Malformed { .. }), "{e}");
}

#[test]
fn connection_reset_closes_the_queue() {
    let e = fault_case(Fault::Reset, false);
    assert!(matches!(tcp_source(&e), TcpError::Closed { .. }), "{e}");
}

#[test]
fn termination_request_is_reported() {
    let e = fault_case(Fault::TermReq, false);
    let TcpError::Terminated { fes, .. } = tcp_source(&e) else {
        panic!("{e}")
    };
    assert_eq!(*fes, nvme_spec::tcp::fes::INVALID_HEADER_FIELD);
}

#[test]
fn silent_target_times_out() {
    let e = fault_case(Fault::Silent, false);
    assert!(
        matches!(e, Error::Timeout { .. })
            || matches!(tcp_source(&e), TcpError::ClosedAfterTimeout { .. }),
        "{e}"
    );
}

#[test]
fn wrong_subnqn_is_a_clear_error() {
    let t = FakeTarget::start(Config::default());
    let mut trid = t.trid();
    trid.subnqn = "nqn.2026-01.test:nope".into();
    let e = TcpController::connect(&trid, TcpOptions::default()).unwrap_err();
    assert!(
        matches!(tcp_source(&e), TcpError::ConnectRefused { .. }),
        "{e}"
    );
    let msg = e.to_string();
    assert!(
        msg.contains("no subsystem `nqn.2026-01.test:nope`"),
        "{msg}"
    );
}

#[test]
fn nothing_listening_is_a_clear_error() {
    // Bind and drop a listener to get a port nobody listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let trid = TransportId::parse(&format!(
        "trtype:TCP traddr:127.0.0.1 trsvcid:{port} subnqn:nqn.x:y"
    ))
    .unwrap();
    let start = Instant::now();
    let e = TcpController::connect(&trid, TcpOptions::default()).unwrap_err();
    assert!(matches!(tcp_source(&e), TcpError::Connect { .. }), "{e}");
    assert!(e.to_string().contains("listens there"), "{e}");
    assert!(start.elapsed() < Duration::from_secs(5));
}

#[test]
fn keep_alive_is_sent_from_poll() {
    let t = FakeTarget::start(Config::default());
    let c = TcpController::connect(
        &t.trid(),
        TcpOptions {
            kato: Duration::from_millis(100),
            ..TcpOptions::default()
        },
    )
    .unwrap();
    let mut qp = c.create_queue_pair(QueuePairOptions::default()).unwrap();
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(5)
        && t.counters().keep_alives.load(Ordering::Relaxed) < 2
    {
        qp.poll(|_| {});
    }
    // At most one per half KATO.
    assert!(start.elapsed() >= Duration::from_millis(50));
    let n = t.counters().keep_alives.load(Ordering::Relaxed);
    assert!(n >= 2, "keep alives sent: {n}");
    c.keep_alive();
    assert!(!c.is_failed());
}

#[test]
fn queue_ids_are_granted_and_returned() {
    let t = FakeTarget::start(Config::default());
    let c = connect(&t);
    let pairs: Vec<_> = (0..4)
        .map(|_| c.create_queue_pair(QueuePairOptions::default()).unwrap())
        .collect();
    let mut qids: Vec<u16> = pairs.iter().map(|p| p.qid()).collect();
    qids.sort_unstable();
    assert_eq!(qids, vec![1, 2, 3, 4]);
    assert!(matches!(
        c.create_queue_pair(QueuePairOptions::default()),
        Err(Error::NoQueuesLeft { granted: 4 })
    ));
    drop(pairs);
    c.create_queue_pair(QueuePairOptions::default()).unwrap();
}

#[test]
fn discovery_lists_the_subsystem() {
    let t = FakeTarget::start(Config::default());
    let trid = TransportId::parse(&format!(
        "trtype:TCP traddr:127.0.0.1 trsvcid:{}",
        t.addr.port()
    ))
    .unwrap();
    assert!(trid.is_discovery());
    let entries = crate::discover(&trid, TcpOptions::default()).unwrap();
    assert_eq!(entries.len(), 1);
    assert_eq!(
        entries[0].transport_id(),
        t.trid().to_string(),
        "the entry reads back as the subsystem's transport id"
    );
    let e = TcpController::connect(&trid, TcpOptions::default()).unwrap_err();
    assert!(e.to_string().contains("discovery subsystem"), "{e}");
}

#[test]
fn thread_safety_matches_the_pcie_types() {
    fn send<T: Send>() {}
    fn send_sync<T: Send + Sync>() {}
    send::<crate::TcpQueuePair>();
    send_sync::<TcpController>();
}

// ----- recovery: reset / reconnect, abort, keep-alive expiry, log pages --------------------

fn write_blocks(c: &TcpController, qp: &mut crate::TcpQueuePair, nsid: u32, lba: u64, seed: u8) {
    let ns = c.namespace(nsid).unwrap();
    let len = ns.block_size() as usize;
    let mut buf = c.alloc_buffer(len).unwrap();
    buf[..len].copy_from_slice(&pattern(len, seed));
    qp.write(&ns, lba, 1, buf, WriteFlags::NONE).unwrap();
}

fn read_matches(c: &TcpController, qp: &mut crate::TcpQueuePair, nsid: u32, lba: u64, seed: u8) {
    let ns = c.namespace(nsid).unwrap();
    let len = ns.block_size() as usize;
    let back = qp
        .read(&ns, lba, 1, c.alloc_buffer(len).unwrap())
        .unwrap_or_else(|f| panic!("read of LBA {lba}: {f}"));
    assert_eq!(&back[..len], &pattern(len, seed)[..], "LBA {lba}");
}

/// Polls until `n` completions arrived (bounded), returning them.
fn poll_n(qp: &mut crate::TcpQueuePair, n: usize, limit: Duration) -> Vec<Completion> {
    let start = Instant::now();
    let mut out = Vec::new();
    while out.len() < n {
        qp.poll(|c| out.push(c));
        assert!(
            start.elapsed() < limit,
            "hang: {} of {n} completions",
            out.len()
        );
        std::thread::sleep(Duration::from_micros(200));
    }
    out
}

#[test]
fn connection_reset_mid_io_then_controller_reset_and_io_goes_on() {
    let t = FakeTarget::start(Config::default());
    let c = connect(&t);
    let mut qp = c.create_queue_pair(QueuePairOptions::default()).unwrap();
    let ns = c.namespace(2).unwrap();
    for lba in 0..4 {
        write_blocks(&c, &mut qp, 2, lba, lba as u8);
    }
    // The target drops the I/O connection on the next command.
    t.set_fault(Fault::Reset);
    for i in 0..4 {
        if let Err(f) = qp.submit_read(&ns, i, 1, c.alloc_buffer(512).unwrap(), i) {
            assert!(f.buffer.is_some());
        }
    }
    let start = Instant::now();
    while qp.in_flight() > 0 {
        qp.poll(|comp| {
            assert!(comp.buffer.is_some(), "buffers come back");
            let e = comp.result.expect_err("connection lost");
            assert!(matches!(tcp_source(&e), TcpError::Closed { .. }), "{e}");
        });
        assert!(start.elapsed() < Duration::from_secs(10), "hang");
    }
    assert!(qp.closed_error().is_some());
    t.set_fault(Fault::None);
    assert_eq!(c.cntlid(), 7);
    c.reset().unwrap();
    assert_eq!(c.cntlid(), 8, "a new association");
    assert_eq!(c.resets(), 1);
    assert!(!c.is_failed());
    // The pair reconnects by itself on its next submission; data written before is there.
    for lba in 0..4 {
        read_matches(&c, &mut qp, 2, lba, lba as u8);
    }
    write_blocks(&c, &mut qp, 2, 9, 99);
    read_matches(&c, &mut qp, 2, 9, 99);
    assert_eq!(t.disk(2, 9 * 512, 512), pattern(512, 99));
    assert!(qp.closed_error().is_none());
    assert_eq!(t.counters().admin_connects.load(Ordering::Relaxed), 2);
}

#[test]
fn reset_on_request_fails_in_flight_requests_retryably_with_their_buffers() {
    let t = FakeTarget::start(Config::default());
    let c = connect(&t);
    let ns = c.namespace(1).unwrap();
    let mut qp = c.create_queue_pair(QueuePairOptions::default()).unwrap();
    t.set_fault(Fault::Hold);
    for i in 0..5u64 {
        qp.submit_read(&ns, i, 1, c.alloc_buffer(4096).unwrap(), i)
            .unwrap();
    }
    let c2 = TcpController::reset;
    c2(&c).unwrap();
    let done = poll_n(&mut qp, 5, Duration::from_secs(10));
    let mut ids: Vec<u64> = done
        .iter()
        .map(|comp| {
            let e = comp.result.as_ref().expect_err("reset");
            assert!(matches!(e, Error::Reset { .. }), "{e}");
            assert!(e.is_retryable());
            assert!(comp.buffer.is_some());
            comp.user_data
        })
        .collect();
    ids.sort_unstable();
    assert_eq!(ids, vec![0, 1, 2, 3, 4], "each completes exactly once");
    assert_eq!(qp.in_flight(), 0);
    t.set_fault(Fault::None);
    let buf = qp.read(&ns, 0, 1, c.alloc_buffer(4096).unwrap()).unwrap();
    drop(buf);
    // Nothing more arrives for the old requests.
    let mut extra = 0;
    for _ in 0..100 {
        qp.poll(|_| extra += 1);
    }
    assert_eq!(extra, 0);
}

#[test]
fn with_resubmit_after_reset_in_flight_writes_complete_on_the_new_connection() {
    let t = FakeTarget::start(Config::default());
    let c = connect(&t);
    let ns = c.namespace(2).unwrap();
    let mut qp = c
        .create_queue_pair(QueuePairOptions::default().resubmit_after_reset(true))
        .unwrap();
    t.set_fault(Fault::Hold);
    for i in 0..3u64 {
        let mut buf = c.alloc_buffer(512).unwrap();
        buf[..512].copy_from_slice(&pattern(512, 40 + i as u8));
        qp.submit_write(&ns, 20 + i, 1, buf, WriteFlags::NONE, i)
            .unwrap();
    }
    // Let the capsules reach the target (where they are held), then reset.
    for _ in 0..50 {
        qp.poll(|_| panic!("held"));
        std::thread::sleep(Duration::from_millis(1));
    }
    t.set_fault(Fault::None);
    c.reset().unwrap();
    let done = poll_n(&mut qp, 3, Duration::from_secs(10));
    for comp in &done {
        comp.result.as_ref().expect("resubmitted write succeeds");
        assert!(comp.buffer.is_some());
    }
    for i in 0..3u64 {
        assert_eq!(
            t.disk(2, (20 + i as usize) * 512, 512),
            pattern(512, 40 + i as u8),
            "write {i} reached the medium"
        );
    }
}

#[test]
fn reset_with_nothing_listening_is_a_clear_error_then_recovers_when_the_target_returns() {
    let t = FakeTarget::start(Config::default());
    let c = connect(&t);
    let mut qp = c.create_queue_pair(QueuePairOptions::default()).unwrap();
    write_blocks(&c, &mut qp, 1, 3, 3);
    t.stop();
    let start = Instant::now();
    let e = c.reset().unwrap_err();
    assert!(start.elapsed() < Duration::from_secs(5), "no hang");
    assert!(matches!(tcp_source(&e), TcpError::Connect { .. }), "{e}");
    assert!(e.to_string().contains("listens there"), "{e}");
    assert!(c.is_failed());
    let ns = c.namespace(1).unwrap();
    let f = qp
        .read(&ns, 3, 1, c.alloc_buffer(4096).unwrap())
        .unwrap_err();
    assert!(matches!(f.error, Error::Failed { .. }), "{f}");
    assert!(f.buffer.is_some());
    assert!(matches!(
        c.create_queue_pair(QueuePairOptions::default()),
        Err(Error::Failed { .. })
    ));
    // Again while still down: still an error, still quick.
    assert!(c.reset().is_err());
    t.restart();
    c.reset().unwrap();
    assert!(!c.is_failed());
    read_matches(&c, &mut qp, 1, 3, 3);
}

#[test]
fn repeated_resets_keep_every_acknowledged_write() {
    let t = FakeTarget::start(Config::default());
    let c = connect(&t);
    let mut a = c.create_queue_pair(QueuePairOptions::default()).unwrap();
    let mut b = c.create_queue_pair(QueuePairOptions::default()).unwrap();
    for round in 0..6u64 {
        write_blocks(&c, &mut a, 2, round, round as u8);
        write_blocks(&c, &mut b, 2, 100 + round, 100 + round as u8);
        c.reset().unwrap();
        for r in 0..=round {
            read_matches(&c, &mut b, 2, r, r as u8);
            read_matches(&c, &mut a, 2, 100 + r, 100 + r as u8);
        }
    }
    assert_eq!(c.resets(), 6);
    assert_eq!(c.cntlid(), 7 + 6);
    let mut qids = vec![a.qid(), b.qid()];
    qids.sort_unstable();
    assert_eq!(qids, vec![1, 2], "pairs keep their queue ids");
}

#[test]
fn reconnect_of_one_pair_leaves_the_controller_alone() {
    let t = FakeTarget::start(Config::default());
    let c = connect(&t);
    let mut qp = c.create_queue_pair(QueuePairOptions::default()).unwrap();
    write_blocks(&c, &mut qp, 2, 5, 5);
    t.set_fault(Fault::Reset);
    let ns = c.namespace(2).unwrap();
    assert!(qp.read(&ns, 5, 1, c.alloc_buffer(512).unwrap()).is_err());
    t.set_fault(Fault::None);
    qp.reconnect().unwrap();
    read_matches(&c, &mut qp, 2, 5, 5);
    assert_eq!(c.resets(), 0);
    assert_eq!(c.cntlid(), 7);
    assert_eq!(t.counters().admin_connects.load(Ordering::Relaxed), 1);
}

fn timeout_target(fault: Fault, action: TimeoutAction) -> (FakeTarget, TcpController) {
    let t = FakeTarget::start(Config::default());
    let c = TcpController::connect(
        &t.trid(),
        TcpOptions {
            timeout_action: action,
            ..TcpOptions::default()
        },
    )
    .unwrap();
    t.set_fault(fault);
    (t, c)
}

const SHORT: Duration = Duration::from_millis(300);

#[test]
fn a_held_command_is_aborted_and_completes_with_abort_requested() {
    let (t, c) = timeout_target(Fault::Hold, TimeoutAction::AbortThenReset);
    let ns = c.namespace(1).unwrap();
    let mut qp = c
        .create_queue_pair(QueuePairOptions::default().timeout(SHORT))
        .unwrap();
    qp.submit_read(&ns, 0, 1, c.alloc_buffer(4096).unwrap(), 77)
        .unwrap();
    let done = poll_n(&mut qp, 1, Duration::from_secs(10));
    let e = done[0].result.as_ref().expect_err("aborted");
    let status = e.status().unwrap_or_else(|| panic!("a status: {e}"));
    assert_eq!(
        (status.sct(), status.sc()),
        (
            nvme_spec::StatusCodeType::Generic,
            nvme_spec::status::generic::ABORT_REQUESTED
        ),
        "{e}"
    );
    assert_eq!(done[0].user_data, 77);
    assert!(done[0].buffer.is_some());
    let stats = c.abort_stats();
    assert_eq!(
        (stats.sent, stats.aborted, stats.resets),
        (1, 1, 0),
        "{stats:?}"
    );
    assert_eq!(t.counters().aborts_honoured.load(Ordering::Relaxed), 1);
    assert_eq!(c.resets(), 0, "a successful abort needs no reset");
    t.set_fault(Fault::None);
    qp.read(&ns, 0, 1, c.alloc_buffer(4096).unwrap()).unwrap();
}

#[test]
fn a_declined_abort_escalates_to_a_reset_and_io_goes_on() {
    let (t, c) = timeout_target(Fault::Silent, TimeoutAction::AbortThenReset);
    let ns = c.namespace(1).unwrap();
    let mut qp = c
        .create_queue_pair(QueuePairOptions::default().timeout(SHORT))
        .unwrap();
    let start = Instant::now();
    qp.submit_read(&ns, 0, 1, c.alloc_buffer(4096).unwrap(), 1)
        .unwrap();
    // Let the silent target swallow it, then let reads go through again: the reset's
    // reconnect must work.
    let done = loop {
        let mut got = Vec::new();
        qp.poll(|comp| got.push(comp));
        if !got.is_empty() {
            break got;
        }
        if start.elapsed() > SHORT / 2 {
            t.set_fault(Fault::None);
        }
        assert!(start.elapsed() < Duration::from_secs(10), "hang");
        std::thread::sleep(Duration::from_micros(200));
    };
    let e = done[0].result.as_ref().expect_err("timed out");
    assert!(matches!(e, Error::Timeout { .. }), "{e}");
    assert!(
        done[0].buffer.is_some(),
        "the connection is closed: the buffer is free"
    );
    assert!(
        start.elapsed() >= 2 * SHORT,
        "timeout, then a further timeout for the abort"
    );
    let stats = c.abort_stats();
    assert_eq!(
        (stats.sent, stats.not_aborted, stats.resets),
        (1, 1, 1),
        "{stats:?}"
    );
    assert_eq!(c.resets(), 1);
    qp.read(&ns, 0, 1, c.alloc_buffer(4096).unwrap()).unwrap();
}

#[test]
fn with_timeout_action_abort_only_the_pair_reconnects() {
    let (t, c) = timeout_target(Fault::Silent, TimeoutAction::Abort);
    let ns = c.namespace(1).unwrap();
    let mut qp = c
        .create_queue_pair(QueuePairOptions::default().timeout(SHORT))
        .unwrap();
    // A synchronous read across the whole policy: timeout, declined abort, reconnect.
    let f = qp
        .read(&ns, 0, 1, c.alloc_buffer(4096).unwrap())
        .unwrap_err();
    assert!(matches!(f.error, Error::Timeout { .. }), "{f}");
    assert!(f.buffer.is_some());
    t.set_fault(Fault::None);
    qp.read(&ns, 0, 1, c.alloc_buffer(4096).unwrap()).unwrap();
    assert_eq!(c.resets(), 0);
    assert_eq!(c.abort_stats().sent, 1);
    assert_eq!(t.counters().admin_connects.load(Ordering::Relaxed), 1);
    // Connects: admin, the pair, the pair again.
    assert_eq!(t.counters().connects.load(Ordering::Relaxed), 3);
}

#[test]
fn keep_alive_expiry_is_reported_and_a_reset_recovers() {
    let t = FakeTarget::start(Config {
        enforce_kato: true,
        ..Config::default()
    });
    let kato = Duration::from_millis(400);
    let c = TcpController::connect(
        &t.trid(),
        TcpOptions {
            kato,
            ..TcpOptions::default()
        },
    )
    .unwrap();
    let mut qp = c.create_queue_pair(QueuePairOptions::default()).unwrap();
    // A polled pair keeps the association alive well past the KATO.
    let start = Instant::now();
    while start.elapsed() < 3 * kato {
        qp.poll(|_| {});
        std::thread::sleep(Duration::from_micros(100));
    }
    assert_eq!(t.counters().kato_expiries.load(Ordering::Relaxed), 0);
    write_blocks(&c, &mut qp, 2, 1, 11);
    // Nothing polled for longer than the KATO: the target drops the association.
    std::thread::sleep(3 * kato);
    assert_eq!(t.counters().kato_expiries.load(Ordering::Relaxed), 1);
    let start = Instant::now();
    while !c.is_failed() {
        c.keep_alive();
        assert!(start.elapsed() < Duration::from_secs(5), "loss not noticed");
        std::thread::sleep(Duration::from_millis(5));
    }
    let ns = c.namespace(2).unwrap();
    let f = qp
        .read(&ns, 1, 1, c.alloc_buffer(512).unwrap())
        .unwrap_err();
    assert!(
        f.to_string().contains("keep-alive timeout expired"),
        "the I/O connection was closed with the association: {f}"
    );
    c.reset().unwrap();
    read_matches(&c, &mut qp, 2, 1, 11);
}

#[test]
fn smart_and_error_logs_over_tcp() {
    use crate::fake::{NEWEST_ERROR_COUNT, SMART_POWER_ON_HOURS, SMART_TEMPERATURE_K};
    let t = FakeTarget::start(Config::default());
    let c = connect(&t);
    let smart = c.smart_log(nvme_spec::log::NSID_BROADCAST).unwrap();
    assert_eq!(smart.temperature_kelvin(), SMART_TEMPERATURE_K);
    assert_eq!(smart.power_on_hours, SMART_POWER_ON_HOURS);
    assert_eq!(smart.percentage_used, 3);
    let errors = c.error_log(usize::MAX).unwrap();
    let counts: Vec<u64> = errors.iter().map(|e| e.error_count).collect();
    assert_eq!(counts, vec![NEWEST_ERROR_COUNT, NEWEST_ERROR_COUNT - 1]);
    assert_eq!(errors[0].transport_type, nvme_spec::fabrics::trtype::TCP);
    assert_eq!(errors[0].status().sc(), 0x80);
    assert_eq!(c.error_log(1).unwrap().len(), 1);
    assert!(c.error_log(0).unwrap().is_empty());
    assert_eq!(t.counters().log_pages.load(Ordering::Relaxed), 3);
    // Log pages work after a reset too.
    c.reset().unwrap();
    assert_eq!(
        c.smart_log(0).unwrap().temperature_kelvin(),
        SMART_TEMPERATURE_K
    );
}

#[test]
fn a_synchronous_read_waiting_across_a_reset_follows_it() {
    let t = FakeTarget::start(Config::default());
    let c = connect(&t);
    let ns = c.namespace(2).unwrap();
    t.fill(2, 30 * 512, &pattern(512, 30));
    let mut resubmitting = c
        .create_queue_pair(QueuePairOptions::default().resubmit_after_reset(true))
        .unwrap();
    let mut plain = c.create_queue_pair(QueuePairOptions::default()).unwrap();
    t.set_fault(Fault::Hold);
    std::thread::scope(|s| {
        let with = s.spawn(|| resubmitting.read(&ns, 30, 1, c.alloc_buffer(512).unwrap()));
        let without = s.spawn(|| plain.read(&ns, 30, 1, c.alloc_buffer(512).unwrap()));
        // Both reads are held by the target; then it serves again and the controller resets.
        std::thread::sleep(Duration::from_millis(200));
        t.set_fault(Fault::None);
        c.reset().unwrap();
        let data = with.join().unwrap().expect("resubmitted after the reset");
        assert_eq!(&data[..512], &pattern(512, 30)[..]);
        let f = without.join().unwrap().expect_err("in flight at the reset");
        assert!(matches!(f.error, Error::Reset { .. }), "{f}");
        assert!(f.buffer.is_some());
    });
    // Both pairs go on.
    read_matches(&c, &mut plain, 2, 30, 30);
    read_matches(&c, &mut resubmitting, 2, 30, 30);
}

#[test]
fn digests_are_negotiated_again_on_reconnect() {
    let t = FakeTarget::start(Config {
        cpda: 3,
        ..Config::default()
    });
    let trid = TransportId::parse(&format!("{} hdgst:1 ddgst:1", t.trid())).unwrap();
    let c = TcpController::connect(&trid, TcpOptions::default()).unwrap();
    let mut qp = c.create_queue_pair(QueuePairOptions::default()).unwrap();
    write_blocks(&c, &mut qp, 1, 2, 21);
    c.reset().unwrap();
    read_matches(&c, &mut qp, 1, 2, 21);
    assert_eq!(qp.digests(), (true, true));
    write_blocks(&c, &mut qp, 1, 3, 22);
    read_matches(&c, &mut qp, 1, 3, 22);
}

#[test]
fn resets_while_another_thread_runs_io_lose_no_acknowledged_write() {
    let t = FakeTarget::start(Config::default());
    let c = connect(&t);
    let ns = c.namespace(2).unwrap();
    let mut qp = c.create_queue_pair(QueuePairOptions::default()).unwrap();
    let stop = std::sync::atomic::AtomicBool::new(false);
    let (mut writes, mut retries) = (0u64, 0u64);
    std::thread::scope(|s| {
        let io = s.spawn(|| {
            let start = Instant::now();
            let mut acknowledged = [None::<u8>; 16];
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) || i < 50 {
                assert!(start.elapsed() < Duration::from_secs(30), "hang");
                let lba = i % 16;
                let seed = i as u8;
                let mut buf = c.alloc_buffer(512).unwrap();
                buf[..512].copy_from_slice(&pattern(512, seed));
                match qp.write(&ns, lba, 1, buf, WriteFlags::NONE) {
                    Ok(_) => {
                        acknowledged[lba as usize] = Some(seed);
                        writes += 1;
                        i += 1;
                    }
                    Err(f) => {
                        assert!(f.error.is_retryable(), "{f}");
                        assert!(f.buffer.is_some(), "buffers come back");
                        retries += 1;
                        std::thread::sleep(Duration::from_millis(1));
                        continue;
                    }
                }
                // Every acknowledged write reads back (retrying reads a reset interrupts).
                let want = acknowledged[lba as usize].unwrap();
                loop {
                    match qp.read(&ns, lba, 1, c.alloc_buffer(512).unwrap()) {
                        Ok(b) => {
                            assert_eq!(&b[..512], &pattern(512, want)[..], "LBA {lba}");
                            break;
                        }
                        Err(f) => {
                            assert!(f.error.is_retryable(), "{f}");
                            retries += 1;
                            std::thread::sleep(Duration::from_millis(1));
                        }
                    }
                }
            }
        });
        for _ in 0..5 {
            std::thread::sleep(Duration::from_millis(30));
            c.reset().unwrap();
        }
        stop.store(true, Ordering::Relaxed);
        io.join().unwrap();
    });
    assert_eq!(c.resets(), 5);
    assert!(writes >= 50, "{writes} writes");
    eprintln!("{writes} writes acknowledged and read back, {retries} retries across 5 resets");
}

#[test]
fn wait_for_completion_blocks_until_data_then_poll_delivers() {
    let t = FakeTarget::start(Config::default());
    let c = connect(&t);
    let ns = c.namespace(2).unwrap();
    let mut qp = c.create_queue_pair(QueuePairOptions::default()).unwrap();
    // Nothing in flight: nothing to wait for.
    let start = Instant::now();
    assert!(!qp.wait_for_completion(Duration::from_secs(5)).unwrap());
    assert!(start.elapsed() < Duration::from_secs(1));
    let data = pattern(512, 3);
    let mut buf = c.alloc_buffer(512).unwrap();
    buf[..512].copy_from_slice(&data);
    qp.write(&ns, 5, 1, buf, nvme_core::WriteFlags::NONE)
        .unwrap();
    qp.submit_read(&ns, 5, 1, c.alloc_buffer(512).unwrap(), 42)
        .unwrap();
    // Only waits, no busy polling, until the read is ready; then poll hands it over.
    let mut got = None;
    let start = Instant::now();
    while got.is_none() {
        if qp.wait_for_completion(Duration::from_secs(5)).unwrap() {
            assert_eq!(qp.poll(|comp| got = Some(comp)), 1);
        }
        assert!(start.elapsed() < Duration::from_secs(10), "no completion");
    }
    let comp = got.unwrap();
    assert_eq!(comp.user_data, 42);
    comp.result.unwrap();
    assert_eq!(&comp.buffer.unwrap()[..512], &data[..]);
}

#[test]
fn wait_for_completion_times_out_and_leaves_the_socket_non_blocking() {
    let t = FakeTarget::start(Config {
        fault: Fault::Silent,
        ..Config::default()
    });
    let c = connect(&t);
    let ns = c.namespace(2).unwrap();
    let mut qp = c.create_queue_pair(QueuePairOptions::default()).unwrap();
    qp.submit_read(&ns, 0, 1, c.alloc_buffer(512).unwrap(), 1)
        .unwrap();
    let start = Instant::now();
    assert!(!qp.wait_for_completion(Duration::from_millis(300)).unwrap());
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_millis(250) && waited < Duration::from_secs(3),
        "waited {waited:?}"
    );
    // The wait's blocking read is over: polls return at once again.
    let start = Instant::now();
    for _ in 0..10 {
        assert_eq!(qp.poll(|_| panic!("the target never answers")), 0);
    }
    assert!(start.elapsed() < Duration::from_millis(250));
    assert!(qp.closed_error().is_none());
    assert_eq!(qp.in_flight(), 1);
}

#[test]
fn verify_is_sent_without_data() {
    use nvme_core::command::Verify;
    let t = FakeTarget::start(Config::default());
    let c = connect(&t);
    let ns = c.namespace(2).unwrap();
    let mut qp = c.create_queue_pair(QueuePairOptions::default()).unwrap();
    assert!(qp.execute(&ns, Verify::new(0, 16), None).unwrap().is_none());
    let f = qp.execute(&ns, Verify::new(2047, 2), None).unwrap_err();
    assert!(
        matches!(f.error, Error::LbaOutOfRange { .. }),
        "{:?}",
        f.error
    );
}
