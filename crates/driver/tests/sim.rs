//! The driver against the in-process emulated controller (`nvme-sim`): data integrity for
//! every PRP shape, the request APIs, every bad-input error, and an untrusted device.
//! QEMU's controller (tests/qemu) remains the authority for "it works on a device".

use nvme_driver::IoQueue;
use nvme_driver::WriteFlags;
use std::time::Duration;

use common::pattern;
use nvme_driver::spec::status::{generic, media};
use nvme_driver::spec::StatusCodeType;
use nvme_driver::{
    Controller, ControllerOptions, DmaBuffer, Error, QueuePair, QueuePairOptions, Transport,
};
use nvme_sim::{SimConfig, SimController, SimNamespace};

mod common;

fn start(config: SimConfig) -> (SimController, Controller) {
    // Timeouts abort without escalating to a reset: these tests watch single requests
    // (tests/recovery.rs covers the escalation).
    let options = ControllerOptions {
        timeout_action: nvme_driver::TimeoutAction::Abort,
        ..ControllerOptions::default()
    };
    common::start_sim(config, options, false)
}

fn default_sim() -> (SimController, Controller) {
    start(SimConfig::default())
}

fn qp(ctrl: &Controller, depth: u32) -> QueuePair {
    ctrl.create_queue_pair(QueuePairOptions {
        depth,
        timeout: Duration::from_secs(10),
        ..Default::default()
    })
    .expect("queue pair")
}

#[test]
fn bring_up_identifies_controller_and_namespaces() {
    let (_sim, ctrl) = default_sim();
    let id = ctrl.identify();
    assert!(!id.model().is_empty());
    let ns: Vec<_> = ctrl
        .namespaces()
        .iter()
        .map(|n| (n.nsid(), n.block_size()))
        .collect();
    assert_eq!(ns, vec![(1, 512), (2, 4096)]);
    assert!(ctrl.io_queue_pairs() >= 1);
    assert!(ctrl.max_transfer_bytes() >= 4096);
    assert!(matches!(
        ctrl.namespace(7),
        Err(Error::InactiveNamespace { nsid: 7, .. })
    ));
}

/// Writes then reads back `len` bytes at `lba`, through a buffer starting `offset` bytes into
/// a page, and checks the medium holds exactly what was written.
fn roundtrip(
    sim: &SimController,
    ctrl: &Controller,
    qp: &mut QueuePair,
    nsid: u32,
    lba: u64,
    len: usize,
    offset: usize,
) {
    let ns = ctrl.namespace(nsid).unwrap();
    let blocks = (len / ns.block_size() as usize) as u32;
    let data = pattern(len, lba ^ len as u64);
    let whole = ctrl.alloc_buffer(offset + len).unwrap();
    let (head, mut buf) = whole.split_at(offset).unwrap();
    buf[..len].copy_from_slice(&data);
    let buf = qp
        .write(&ns, lba, blocks, buf, WriteFlags::NONE)
        .expect("write");
    let byte_offset = lba * ns.block_size() as u64;
    assert_eq!(
        sim.read_disk(nsid, byte_offset, len),
        data,
        "medium after write of {len} bytes (+{offset})"
    );
    let mut back = buf;
    back.fill(0);
    let back = qp.read(&ns, lba, blocks, back).expect("read");
    assert_eq!(&back[..len], &data[..], "read back {len} bytes (+{offset})");
    drop(head);
}

#[test]
fn every_prp_shape_round_trips_on_both_lba_sizes() {
    let (sim, ctrl) = default_sim();
    let mut q = qp(&ctrl, 64);
    let mdts = ctrl.max_transfer_bytes();
    for &(nsid, bs) in &[(1u32, 512usize), (2, 4096)] {
        // PRP1 only; PRP1+PRP2; PRP list; exactly MDTS; MDTS split; 2 MiB split.
        for &len in &[bs, 4096, 8192, 12288, 65536, mdts, mdts + 4096, 2 << 20] {
            roundtrip(&sim, &ctrl, &mut q, nsid, 8, len, 0);
        }
        // A buffer that starts mid-page: one block crossing a page, and a list with an
        // unaligned first entry.
        roundtrip(&sim, &ctrl, &mut q, nsid, 100, bs * 2, 4096 - 512);
        roundtrip(&sim, &ctrl, &mut q, nsid, 200, 16384, 512);
    }
    assert_eq!(q.in_flight(), 0);
    assert_eq!(q.stats().bad_completions, 0);
}

#[test]
fn callback_api_many_in_flight_and_plugged_batches() {
    let (sim, ctrl) = default_sim();
    let ns = ctrl.namespace(2).unwrap();
    let mut q = qp(&ctrl, 32);
    let mut bufs = DmaBuffer::allocate_many(ctrl.dma(), 16, 4096).unwrap();
    for (i, b) in bufs.iter_mut().enumerate() {
        b.fill(i as u8 + 1);
    }
    let before = q.stats().sq_doorbell_writes;
    q.plug(16).unwrap();
    for (i, b) in bufs.drain(..).enumerate() {
        q.submit_write(&ns, i as u64 * 3, 1, b, WriteFlags::NONE, i as u64)
            .unwrap();
    }
    assert_eq!(
        q.stats().sq_doorbell_writes,
        before,
        "no doorbell inside a plug"
    );
    q.unplug();
    assert_eq!(
        q.stats().sq_doorbell_writes,
        before + 1,
        "one doorbell for the batch"
    );
    let mut seen = [false; 16];
    let mut returned = Vec::new();
    while returned.len() < 16 {
        q.poll(|c| {
            assert!(c.result.is_ok(), "{:?}", c.result);
            seen[c.user_data as usize] = true;
            returned.push(c.buffer.expect("buffer returned"));
        });
    }
    assert!(seen.iter().all(|&s| s));
    for i in 0..16u64 {
        assert_eq!(
            sim.read_disk(2, i * 3 * 4096, 4096),
            vec![i as u8 + 1; 4096]
        );
    }
    // Reads through the callback API with the same buffers.
    for (i, b) in returned.drain(..).enumerate() {
        q.submit_read(&ns, i as u64 * 3, 1, b, 100 + i as u64)
            .unwrap();
    }
    let mut got = 0;
    while got < 16 {
        got += q.poll(|c| {
            let i = (c.user_data - 100) as u8;
            assert!(c.buffer.unwrap().iter().all(|&x| x == i + 1));
        });
    }
    assert_eq!(q.in_flight(), 0);
}

#[test]
fn phase_tag_wraps_on_a_shallow_queue() {
    let (sim, ctrl) = default_sim();
    let ns = ctrl.namespace(1).unwrap();
    let mut q = qp(&ctrl, 2);
    let mut buf = ctrl.alloc_buffer(512).unwrap();
    for i in 0..50u64 {
        buf.fill(i as u8);
        buf = q.write(&ns, i, 1, buf, WriteFlags::NONE).unwrap();
    }
    for i in 0..50u64 {
        assert_eq!(sim.read_disk(1, i * 512, 512), vec![i as u8; 512]);
    }
}

#[test]
fn flush_write_zeroes_deallocate_and_compare() {
    let (sim, ctrl) = default_sim();
    let ns = ctrl.namespace(1).unwrap();
    let mut q = qp(&ctrl, 16);
    let mut buf = ctrl.alloc_buffer(4096).unwrap();
    buf.fill(0x5a);
    let buf = q.write(&ns, 0, 8, buf, WriteFlags::FUA).unwrap();
    q.flush(&ns).unwrap();

    // Compare: equal succeeds, different fails with Compare Failure and gives the buffer back.
    let buf = q.compare(&ns, 0, 8, buf).expect("equal data compares");
    let mut other = buf;
    other[7] ^= 1;
    let failure = q.compare(&ns, 0, 8, other).unwrap_err();
    let status = failure.error.status().expect("status error");
    assert_eq!(status.sct(), StatusCodeType::MediaDataIntegrity);
    assert_eq!(status.sc(), media::COMPARE_FAILURE);
    assert!(failure.buffer.is_some());

    q.write_zeroes(&ns, 2, 2, false).unwrap();
    assert_eq!(sim.read_disk(1, 2 * 512, 1024), vec![0; 1024]);
    assert_eq!(sim.read_disk(1, 4 * 512, 512), vec![0x5a; 512]);

    q.deallocate(&ns, &[(0, 1), (5, 2)]).unwrap();
    assert_eq!(sim.read_disk(1, 0, 512), vec![0; 512]);
    assert_eq!(sim.read_disk(1, 5 * 512, 1024), vec![0; 1024]);
    assert_eq!(sim.read_disk(1, 4 * 512, 512), vec![0x5a; 512]);
    assert!(matches!(
        q.deallocate(&ns, &[]),
        Err(Error::BadRangeCount { .. })
    ));
}

#[test]
fn bad_input_is_rejected_before_submission_and_nothing_is_lost() {
    let (_sim, ctrl) = default_sim();
    let ns = ctrl.namespace(1).unwrap();
    let mut q = qp(&ctrl, 8);
    let submitted = q.stats().commands_submitted;

    let buf = ctrl.alloc_buffer(4096).unwrap();
    // LBA out of range (also overflowing LBAs).
    let f = q.read(&ns, ns.blocks() - 1, 2, buf).unwrap_err();
    assert!(
        matches!(f.error, Error::LbaOutOfRange { .. }),
        "{}",
        f.error
    );
    let f = q.read(&ns, u64::MAX, 1, f.buffer.unwrap()).unwrap_err();
    assert!(matches!(f.error, Error::LbaOutOfRange { .. }));
    // Zero-length.
    let f = q.read(&ns, 0, 0, f.buffer.unwrap()).unwrap_err();
    assert!(matches!(f.error, Error::ZeroLength));
    // Buffer smaller than the transfer.
    let f = q
        .write(&ns, 0, 9, f.buffer.unwrap(), WriteFlags::NONE)
        .unwrap_err();
    assert!(
        matches!(
            f.error,
            Error::BufferTooSmall {
                needed: 4608,
                len: 4096
            }
        ),
        "{}",
        f.error
    );
    // Not dword aligned.
    let (_a, odd) = f.buffer.unwrap().split_at(2).unwrap();
    let f = q.read(&ns, 0, 1, odd).unwrap_err();
    assert!(matches!(f.error, Error::BufferMisaligned { .. }));
    assert!(f.buffer.is_some());
    // Length not a multiple of the block size.
    assert!(matches!(
        ns.bytes_to_blocks(1000),
        Err(Error::NotBlockMultiple { .. })
    ));
    // Inactive namespace.
    assert!(matches!(
        ctrl.namespace(0),
        Err(Error::InactiveNamespace { .. })
    ));
    // Queue depth beyond CAP.MQES.
    let too_deep = ctrl.max_queue_entries() + 1;
    assert!(matches!(
        ctrl.create_queue_pair(QueuePairOptions {
            depth: too_deep,
            ..Default::default()
        }),
        Err(Error::QueueDepth { .. })
    ));
    assert_eq!(
        q.stats().commands_submitted,
        submitted,
        "nothing reached the controller"
    );
    assert_eq!(q.in_flight(), 0);
}

#[test]
fn queue_full_and_transfer_too_large() {
    let (_sim, ctrl) = default_sim();
    let ns = ctrl.namespace(2).unwrap();
    let mut q = qp(&ctrl, 4); // 3 slots
    let bufs = DmaBuffer::allocate_many(ctrl.dma(), 4, 4096).unwrap();
    let mut it = bufs.into_iter();
    q.plug(3).unwrap();
    for i in 0..3 {
        q.submit_read(&ns, i, 1, it.next().unwrap(), i).unwrap();
    }
    let f = q.submit_read(&ns, 3, 1, it.next().unwrap(), 3).unwrap_err();
    assert!(matches!(f.error, Error::QueueFull { .. }), "{}", f.error);
    assert!(f.buffer.is_some(), "rejected buffer comes back");
    q.unplug();
    let mut n = 0;
    while n < 3 {
        n += q.poll(|c| assert!(c.result.is_ok()));
    }
    // A transfer needing more commands than the queue has slots: refused whole.
    let big = ctrl.alloc_buffer(4 * ctrl.max_transfer_bytes()).unwrap();
    let blocks = (big.len() / 4096) as u32;
    let f = q.read(&ns, 0, blocks, big).unwrap_err();
    assert!(
        matches!(f.error, Error::TransferTooLarge { .. }),
        "{}",
        f.error
    );
    assert!(f.error.to_string().contains("queue too small"));
    assert!(f.buffer.is_some());
    assert_eq!(q.in_flight(), 0);
}

#[test]
fn error_status_is_decoded_and_buffer_returned() {
    let (sim, ctrl) = default_sim();
    let ns = ctrl.namespace(1).unwrap();
    let mut q = qp(&ctrl, 8);
    sim.faults().fail_next_io(
        nvme_driver::spec::Status::new(0, generic::INTERNAL_ERROR, true),
        1,
    );
    let f = q
        .read(&ns, 0, 1, ctrl.alloc_buffer(512).unwrap())
        .unwrap_err();
    let st = f.error.status().unwrap();
    assert_eq!(st.sc(), generic::INTERNAL_ERROR);
    assert!(st.dnr());
    assert!(f.buffer.is_some());
    // The queue pair keeps working.
    q.read(&ns, 0, 1, f.buffer.unwrap()).unwrap();
}

#[test]
fn corrupt_and_duplicate_completions_are_rejected_and_counted() {
    let (_sim, ctrl) = default_sim();
    let ns = ctrl.namespace(1).unwrap();
    let mut q = ctrl
        .create_queue_pair(QueuePairOptions {
            depth: 8,
            timeout: Duration::from_millis(300),
            ..Default::default()
        })
        .unwrap();
    // Duplicate: the first copy completes the command, the second is rejected.
    _sim.faults().duplicate_next_completion();
    let buf = q.read(&ns, 0, 1, ctrl.alloc_buffer(512).unwrap()).unwrap();
    let mut n = 0;
    for _ in 0..1000 {
        n += q.poll(|_| panic!("a duplicate must not complete anything"));
    }
    assert_eq!(n, 0);
    assert_eq!(q.stats().bad_completions, 1);

    // A corrupted command id: rejected; the real command then times out, its buffer is held.
    _sim.faults().corrupt_next_cid(1);
    let f = q.read(&ns, 0, 1, buf).unwrap_err();
    assert!(matches!(f.error, Error::Timeout { .. }), "{}", f.error);
    assert!(f.buffer.is_none(), "a timed-out buffer is not handed back");
    assert_eq!(q.retired(), 1);
    assert_eq!(q.stats().bad_completions, 2);
    assert_eq!(
        q.in_flight(),
        1,
        "the slot stays retired: its command id was never completed"
    );

    // The Abort sent for it (without waiting) must be answered before the next fault is
    // armed, or that fault would hit the Abort's completion instead.
    let start = std::time::Instant::now();
    loop {
        let a = ctrl.abort_stats();
        if a.sent == a.aborted + a.not_aborted + a.failed {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "abort unanswered: {a:?}"
        );
        std::thread::sleep(Duration::from_millis(1));
    }

    // Wrong SQ id: rejected, then timeout.
    _sim.faults().wrong_sqid_next();
    let f = q
        .read(&ns, 0, 1, ctrl.alloc_buffer(512).unwrap())
        .unwrap_err();
    assert!(matches!(f.error, Error::Timeout { .. }));
    assert_eq!(q.stats().bad_completions, 3);

    // Still usable afterwards.
    q.read(&ns, 0, 1, ctrl.alloc_buffer(512).unwrap()).unwrap();
}

#[test]
fn lost_completion_times_out_in_callback_api() {
    let (sim, ctrl) = default_sim();
    let ns = ctrl.namespace(1).unwrap();
    let mut q = ctrl
        .create_queue_pair(QueuePairOptions {
            depth: 8,
            timeout: Duration::from_millis(200),
            ..Default::default()
        })
        .unwrap();
    sim.faults().drop_next_completions(1);
    q.submit_read(&ns, 0, 1, ctrl.alloc_buffer(512).unwrap(), 42)
        .unwrap();
    let start = std::time::Instant::now();
    let mut result = None;
    while result.is_none() && start.elapsed() < Duration::from_secs(5) {
        q.poll(|c| result = Some((c.user_data, c.result.is_err(), c.buffer.is_none())));
    }
    assert_eq!(result, Some((42, true, true)));
    assert!(start.elapsed() >= Duration::from_millis(200));
    assert_eq!(q.stats().timeouts, 1);
}

#[test]
fn fatal_controller_status_fails_in_flight_io() {
    let (sim, ctrl) = default_sim();
    let ns = ctrl.namespace(1).unwrap();
    let mut q = ctrl
        .create_queue_pair(QueuePairOptions {
            depth: 8,
            timeout: Duration::from_millis(400),
            ..Default::default()
        })
        .unwrap();
    sim.faults().drop_next_completions(1);
    q.submit_read(&ns, 0, 1, ctrl.alloc_buffer(512).unwrap(), 1)
        .unwrap();
    sim.faults().set_fatal();
    let mut err = None;
    let start = std::time::Instant::now();
    while err.is_none() && start.elapsed() < Duration::from_secs(5) {
        q.poll(|c| err = c.result.err());
    }
    assert!(
        matches!(err, Some(Error::ControllerFatal { .. })),
        "{err:?}"
    );
    // The driver stopped the controller (CC.EN=0, which also clears CFS) before anything
    // the device could reach is freed.
    assert!(ctrl.is_failed());
    let cc = nvme_driver::spec::regs::Cc(sim.mmio().read32(nvme_driver::spec::regs::CC));
    assert!(!cc.en(), "the failed controller was disabled");
}

#[test]
fn controller_that_never_becomes_ready_times_out_from_cap_to() {
    let _ = env_logger::builder().is_test(true).try_init();
    let sim = SimController::start(SimConfig {
        timeout_500ms: 1,
        ..SimConfig::default()
    });
    sim.faults().never_ready();
    let start = std::time::Instant::now();
    let err = Controller::new(
        Transport::new(sim.mmio(), sim.dma(), "sim"),
        ControllerOptions::default(),
    )
    .unwrap_err();
    assert!(matches!(err, Error::NotReady { .. }), "{err}");
    assert!(err.to_string().contains("CAP.TO"));
    assert!(start.elapsed() < Duration::from_secs(3));
}

#[test]
fn queue_pairs_on_several_threads() {
    let (sim, ctrl) = start(SimConfig {
        namespaces: vec![SimNamespace {
            nsid: 1,
            block_size: 4096,
            blocks: 4096,
            ..SimNamespace::default()
        }],
        ..SimConfig::default()
    });
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let ctrl = ctrl.clone();
            std::thread::spawn(move || {
                let ns = ctrl.namespace(1).unwrap();
                let mut q = qp(&ctrl, 16);
                let mut buf = ctrl.alloc_buffer(4096).unwrap();
                for i in 0..64u64 {
                    buf.fill((t * 64 + i) as u8);
                    buf = q
                        .write(&ns, t * 1000 + i, 1, buf, WriteFlags::NONE)
                        .unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    for t in 0..4u64 {
        for i in 0..64u64 {
            assert_eq!(
                sim.read_disk(1, (t * 1000 + i) * 4096, 4096),
                vec![(t * 64 + i) as u8; 4096]
            );
        }
    }
}

#[test]
fn queue_ids_are_recycled_when_pairs_drop() {
    let (_sim, ctrl) = default_sim();
    let n = ctrl.io_queue_pairs() as usize;
    let pairs: Vec<_> = (0..n).map(|_| qp(&ctrl, 4)).collect();
    assert!(matches!(
        ctrl.create_queue_pair(QueuePairOptions {
            depth: 4,
            ..Default::default()
        }),
        Err(Error::NoQueuesLeft { .. })
    ));
    drop(pairs);
    let mut q = qp(&ctrl, 4);
    let ns = ctrl.namespace(1).unwrap();
    q.read(&ns, 0, 1, ctrl.alloc_buffer(512).unwrap()).unwrap();
}

#[test]
fn raw_io_command_path() {
    let (sim, ctrl) = default_sim();
    let ns = ctrl.namespace(1).unwrap();
    let mut q = qp(&ctrl, 8);
    let mut buf = ctrl.alloc_buffer(1024).unwrap();
    buf.fill(0xc3);
    let sqe = nvme_driver::spec::command::write(1, 10, 2, false);
    // SAFETY: a 2-block write of 512-byte blocks moves exactly the 1024 bytes given.
    let (_, buf) = unsafe { q.execute_raw(sqe, Some((buf, 1024))) }.unwrap();
    assert_eq!(sim.read_disk(1, 10 * 512, 1024), vec![0xc3; 1024]);
    let sqe = nvme_driver::spec::command::read(1, 10, 2);
    // SAFETY: as above.
    let (_, back) = unsafe { q.execute_raw(sqe, Some((buf.unwrap(), 1024))) }.unwrap();
    assert!(back.unwrap().iter().all(|&b| b == 0xc3));
    let _ = ns;
}

#[test]
fn shadow_doorbells_are_used_when_offered_and_can_be_turned_off() {
    for shadow in [true, false] {
        let sim = SimController::start(SimConfig::default());
        let ctrl = Controller::new(
            Transport::new(sim.mmio(), sim.dma(), "sim"),
            ControllerOptions {
                shadow_doorbells: if shadow {
                    nvme_driver::ShadowDoorbells::Always
                } else {
                    nvme_driver::ShadowDoorbells::Never
                },
                ..ControllerOptions::default()
            },
        )
        .unwrap();
        assert_eq!(
            ctrl.shadow_doorbells(),
            shadow,
            "the emulator offers Doorbell Buffer Config"
        );
        let ns = ctrl.namespace(2).unwrap();
        // Two pairs in turn on the same queue id: the second must not see the first's entries.
        for pass in 0..2u64 {
            let mut q = qp(&ctrl, 64);
            let mut free = DmaBuffer::allocate_many(ctrl.dma(), 32, 4096).unwrap();
            for round in 0..20u64 {
                q.plug(free.len() as u16).unwrap();
                for (i, mut b) in free.drain(..).enumerate() {
                    b.fill((pass + round + i as u64) as u8);
                    q.submit_write(&ns, i as u64, 1, b, WriteFlags::NONE, i as u64)
                        .unwrap();
                }
                q.unplug();
                while free.len() < 32 {
                    q.poll(|c| free.push(c.buffer.unwrap()));
                }
            }
            let s = q.stats();
            assert!(s.sq_doorbell_writes <= s.sq_doorbell_updates);
            assert!(s.cq_doorbell_writes <= s.cq_doorbell_updates);
            if !shadow {
                assert_eq!(s.sq_doorbell_writes, s.sq_doorbell_updates);
                assert_eq!(s.cq_doorbell_writes, s.cq_doorbell_updates);
            }
            eprintln!(
                "shadow={shadow}: SQ updates {} MMIO {}, CQ updates {} MMIO {}",
                s.sq_doorbell_updates,
                s.sq_doorbell_writes,
                s.cq_doorbell_updates,
                s.cq_doorbell_writes
            );
            for i in 0..32u64 {
                assert_eq!(
                    sim.read_disk(2, i * 4096, 4096),
                    vec![(pass + 19 + i) as u8; 4096]
                );
            }
        }
    }
}

#[test]
fn interrupt_mode_blocks_until_the_vector_fires() {
    let _ = env_logger::builder().is_test(true).try_init();
    let sim = SimController::start(SimConfig::default());
    let ctrl = Controller::new(
        Transport::new(sim.mmio(), sim.dma(), "sim").with_interrupts(sim.interrupts()),
        ControllerOptions {
            interrupts: true,
            ..ControllerOptions::default()
        },
    )
    .unwrap();
    let ns = ctrl.namespace(1).unwrap();
    let mut q = ctrl
        .create_queue_pair(QueuePairOptions {
            depth: 16,
            interrupts: true,
            ..Default::default()
        })
        .unwrap();
    assert!(q.has_interrupts());

    // Nothing in flight: the wait times out.
    let t = std::time::Instant::now();
    assert!(!q.wait_for_completion(Duration::from_millis(50)).unwrap());
    assert!(t.elapsed() >= Duration::from_millis(40));

    // A delayed completion: the thread sleeps in the eventfd until the vector fires.
    sim.faults().delay_completions(Duration::from_millis(100));
    q.submit_read(&ns, 0, 1, ctrl.alloc_buffer(512).unwrap(), 7)
        .unwrap();
    let t = std::time::Instant::now();
    assert!(q.wait_for_completion(Duration::from_secs(5)).unwrap());
    assert!(
        t.elapsed() >= Duration::from_millis(80),
        "woke before the completion"
    );
    assert!(
        t.elapsed() < Duration::from_secs(4),
        "woke by the interrupt, not the timeout"
    );
    let mut got = None;
    q.poll(|c| got = Some(c.user_data));
    assert_eq!(got, Some(7));
    sim.faults().delay_completions(Duration::ZERO);

    // Hybrid polling moves data correctly.
    let mut free = DmaBuffer::allocate_many(ctrl.dma(), 8, 512).unwrap();
    for round in 0..10u64 {
        for (i, mut b) in free.drain(..).enumerate() {
            b.fill((round * 8 + i as u64) as u8);
            q.submit_write(&ns, i as u64, 1, b, WriteFlags::NONE, i as u64)
                .unwrap();
        }
        while free.len() < 8 {
            q.poll_or_wait(16, Duration::from_secs(5), |c| {
                assert!(c.result.is_ok());
                free.push(c.buffer.unwrap());
            })
            .unwrap();
        }
    }
    for i in 0..8u64 {
        assert_eq!(sim.read_disk(1, i * 512, 512), vec![(72 + i) as u8; 512]);
    }

    // A pair without a vector cannot wait; a controller without interrupts cannot give one.
    let mut polled = qp(&ctrl, 4);
    assert!(matches!(
        polled.wait_for_completion(Duration::from_millis(1)),
        Err(Error::NoInterrupts { .. })
    ));
    let (_sim2, plain) = default_sim();
    assert!(matches!(
        plain.create_queue_pair(QueuePairOptions {
            depth: 4,
            interrupts: true,
            ..Default::default()
        }),
        Err(Error::NoInterrupts { .. })
    ));
}

#[test]
fn armed_interrupt_fd_wakes_a_multi_fd_wait() {
    use nvme_driver::InterruptArm;
    use nvme_vfio::FdWait;
    let sim = SimController::start(SimConfig::default());
    let ctrl = Controller::new(
        Transport::new(sim.mmio(), sim.dma(), "sim").with_interrupts(sim.interrupts()),
        ControllerOptions::default().interrupts(true),
    )
    .unwrap();
    assert!(ctrl.has_interrupts());
    let ns = ctrl.namespace(1).unwrap();
    let mut q = ctrl
        .create_queue_pair(QueuePairOptions::default().depth(16).interrupts(true))
        .unwrap();
    let mut w = FdWait::new();
    for round in 0..3u64 {
        sim.faults().delay_completions(Duration::from_millis(50));
        let mut b = ctrl.alloc_buffer(512).unwrap();
        b.fill(round as u8 + 1);
        q.submit_write(&ns, round, 1, b, WriteFlags::NONE, round)
            .unwrap();
        w.clear();
        match q.arm_interrupt().unwrap() {
            InterruptArm::Wait(fd) => {
                w.add(fd, true, false);
            }
            InterruptArm::Ready => panic!("ready before the delayed completion"),
        }
        let t = std::time::Instant::now();
        assert_eq!(w.wait(Some(Duration::from_secs(5))).unwrap(), 1);
        assert!(w.ready(0));
        assert!(t.elapsed() < Duration::from_secs(4), "woken by the vector");
        let mut got = None;
        q.poll(|c| got = Some((c.user_data, c.result.is_ok())));
        assert_eq!(got, Some((round, true)));
        assert_eq!(
            sim.read_disk(1, round * 512, 512),
            vec![round as u8 + 1; 512]
        );
    }
    // An entry posted but not yet reaped: arming says poll, not wait.
    sim.faults().delay_completions(Duration::ZERO);
    q.submit_read(&ns, 0, 1, ctrl.alloc_buffer(512).unwrap(), 9)
        .unwrap();
    let t = std::time::Instant::now();
    while !matches!(q.arm_interrupt().unwrap(), InterruptArm::Ready) {
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "the completion never came"
        );
    }
    let mut got = None;
    q.poll(|c| got = Some(c.user_data));
    assert_eq!(got, Some(9));
    // A polled pair has nothing to arm.
    let mut polled = qp(&ctrl, 4);
    assert!(matches!(
        polled.arm_interrupt(),
        Err(Error::NoInterrupts { .. })
    ));
}

#[test]
fn verify_is_a_typed_command_without_data() {
    use nvme_driver::command::Verify;
    use nvme_driver::IoQueue;
    let (sim, ctrl) = default_sim();
    let ns = ctrl.namespace(1).unwrap();
    let mut q = qp(&ctrl, 16);
    let before = sim.stats().other_io;
    assert!(q.execute(&ns, Verify::new(0, 8), None).unwrap().is_none());
    // Through the trait (what generic code and the dispatch enum use), asynchronously.
    IoQueue::submit(
        &mut q,
        &ns,
        Verify::new(8, 65536.min(ns.blocks() as u32 - 8)),
        None,
        7,
    )
    .unwrap();
    let mut done = Vec::new();
    while done.is_empty() {
        q.poll(|c| done.push((c.user_data, c.result.is_ok())));
    }
    assert_eq!(done, vec![(7, true)]);
    assert_eq!(sim.stats().other_io - before, 2);
    // Checked before the ring: the range, and that a command without data has no buffer.
    let f = q
        .execute(&ns, Verify::new(ns.blocks() - 1, 2), None)
        .unwrap_err();
    assert!(
        matches!(f.error, Error::LbaOutOfRange { .. }),
        "{:?}",
        f.error
    );
    let buf = ctrl.alloc_buffer(4096).unwrap();
    let f = q.execute(&ns, Verify::new(0, 8), Some(buf)).unwrap_err();
    assert!(matches!(f.error, Error::InvalidRequest(_)), "{:?}", f.error);
    assert!(f.buffer.is_some(), "the refused buffer comes back");
}
