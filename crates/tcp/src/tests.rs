//! The host against the in-process fake target (`fake.rs`): bring-up, data paths (in-capsule,
//! R2T/H2CData, C2HData with and without the SUCCESS shortcut, digests, CPDA), Keep Alive,
//! and every fault mode: the right error, a closed queue, every request completed, no hang.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use nvme_driver::{Completion, Error, QueuePairOptions};

use crate::fake::{Config, FakeTarget, Fault};
use crate::{TcpController, TcpError, TcpOptions, TransportId};

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
    qp.write(&ns, lba, blocks, buf, nvme_driver::WriteFlags::NONE)
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
    let c = TcpController::connect(&trid, TcpOptions::default()).unwrap();
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
    qp.write(&ns, 5, 1, buf, nvme_driver::WriteFlags::NONE)
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
