//! Our NVMe/TCP initiator against our target, backed by the emulator through our PCIe driver:
//! data written through the target is read back through it and found on the emulated medium.

mod common;

use std::time::{Duration, Instant};

use common::*;
use nvme_core::{IoQueue, QueuePairOptions, WriteFlags};
use nvme_tcp::TcpOptions;

/// Writes `blocks` blocks of a pattern at `lba` of `nsid`, reads them back, and checks the
/// emulator's medium holds them.
fn round_trip(rig: &Rig, options: TcpOptions, nsid: u32, lba: u64, blocks: u32, seed: u64) {
    let c = rig.connect(options).expect("connect");
    let ns = c.namespace(nsid).expect("namespace");
    let bytes = blocks as usize * ns.block_size() as usize;
    let mut qp = c
        .create_queue_pair(QueuePairOptions::default().depth(32))
        .expect("queue pair");
    let data = pattern(bytes, seed);
    let mut buf = c.alloc_buffer(bytes).unwrap();
    buf[..bytes].copy_from_slice(&data);
    let mut buf = qp
        .write(&ns, lba, blocks, buf, WriteFlags::NONE)
        .expect("write");
    buf.fill(0);
    let buf = qp.read(&ns, lba, blocks, buf).expect("read");
    assert!(buf[..bytes] == data[..], "read back differs");
    let offset = lba * u64::from(ns.block_size());
    assert!(
        rig.sim.read_disk(nsid, offset, bytes) == data,
        "medium differs"
    );
}

#[test]
fn connect_and_identify() {
    let rig = start(None, |_| {});
    let c = rig.connect(options()).expect("connect");
    let id = c.identify();
    assert_eq!(nvme_spec::fabrics::field_text(&id.subnqn), SUBNQN);
    assert_eq!(nvme_spec::fabrics::field_text(&id.sn), "TGT0001");
    assert_ne!(id.kas, 0);
    assert_ne!(id.maxcmd, 0);
    let nss = c.namespaces();
    assert_eq!(nss.len(), 2);
    assert_eq!(
        (nss[0].nsid(), nss[0].block_size(), nss[0].blocks()),
        (1, 4096, NS1_BLOCKS)
    );
    assert_eq!(
        (nss[1].nsid(), nss[1].block_size(), nss[1].blocks()),
        (2, 512, NS2_BLOCKS)
    );
    assert_eq!(c.io_queue_pairs(), 2);
    // MDTS matches the target's limit (128 KiB by default).
    assert_eq!(c.max_transfer_bytes(), 128 << 10);
}

#[test]
fn write_read_back_without_digests() {
    let rig = start(None, |_| {});
    round_trip(&rig, options(), 1, 10, 1, 1);
    round_trip(&rig, options(), 2, 77, 3, 2);
}

#[test]
fn write_read_back_with_both_digests() {
    let rig = start(None, |_| {});
    let o = TcpOptions {
        header_digest: true,
        data_digest: true,
        ..options()
    };
    round_trip(&rig, o.clone(), 1, 100, 2, 3);
    // Large: by R2T/H2CData, several PDUs.
    round_trip(&rig, o, 1, 200, 32, 4);
}

#[test]
fn large_writes_go_by_r2t_and_split_above_mdts() {
    let rig = start(None, |c| c.max_io_bytes = 64 << 10);
    // 256 KiB: above the 64 KiB MDTS the initiator splits; each piece above the in-capsule
    // size goes by R2T.
    round_trip(&rig, options(), 1, 512, 64, 5);
}

#[test]
fn small_writes_go_in_capsule() {
    let rig = start(None, |_| {});
    // 512 bytes and 4 KiB: within the 8 KiB in-capsule size.
    round_trip(&rig, options(), 2, 5, 1, 6);
    round_trip(&rig, options(), 1, 7, 1, 7);
}

#[test]
fn flush_and_write_zeroes() {
    let rig = start(None, |_| {});
    let c = rig.connect(options()).unwrap();
    let ns = c.namespace(1).unwrap();
    let mut qp = c.create_queue_pair(QueuePairOptions::default()).unwrap();
    let data = pattern(8 * 4096, 8);
    let mut buf = c.alloc_buffer(data.len()).unwrap();
    buf[..data.len()].copy_from_slice(&data);
    let buf = qp.write(&ns, 40, 8, buf, WriteFlags::FUA).unwrap();
    qp.flush(&ns).expect("flush");
    qp.write_zeroes(&ns, 42, 2, false).expect("write zeroes");
    let buf = qp.read(&ns, 40, 8, buf).unwrap();
    assert!(buf[..2 * 4096] == data[..2 * 4096]);
    assert!(buf[2 * 4096..4 * 4096].iter().all(|&b| b == 0));
    assert!(buf[4 * 4096..8 * 4096] == data[4 * 4096..]);
    assert!(rig
        .sim
        .read_disk(1, 42 * 4096, 2 * 4096)
        .iter()
        .all(|&b| b == 0));
}

#[test]
fn out_of_range_is_lba_out_of_range() {
    let rig = start(None, |_| {});
    let c = rig.connect(options()).unwrap();
    let ns = c.namespace(1).unwrap();
    let mut qp = c.create_queue_pair(QueuePairOptions::default()).unwrap();
    // The initiator checks ranges itself; Write Zeroes of the last block plus one is refused
    // before it is sent, so check the last block works.
    qp.write_zeroes(&ns, NS1_BLOCKS - 1, 1, false)
        .expect("last block");
    assert!(qp.write_zeroes(&ns, NS1_BLOCKS, 1, false).is_err());
}

/// `per` 4 KiB writes submitted at once on each of `queues` queue pairs (so that one receive
/// pass of the target frames many of them), all completed, all on the medium.
fn burst_of_writes(rig: &Rig, queues: usize, per: u64) {
    let c = rig.connect(options()).unwrap();
    let ns = c.namespace(2).unwrap();
    let mut qps: Vec<_> = (0..queues)
        .map(|_| {
            c.create_queue_pair(QueuePairOptions::default().depth(64))
                .unwrap()
        })
        .collect();
    for (q, qp) in qps.iter_mut().enumerate() {
        for i in 0..per {
            let lba = (q as u64 * per + i) * 8;
            let mut buf = c.alloc_buffer(4096).unwrap();
            buf[..4096].copy_from_slice(&pattern(4096, lba));
            qp.submit_write(&ns, lba, 8, buf, WriteFlags::NONE, lba)
                .unwrap();
        }
    }
    let total = queues as u64 * per;
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut done = 0;
    while done < total && Instant::now() < deadline {
        for qp in &mut qps {
            qp.poll(|cpl| {
                cpl.result.expect("write");
                done += 1;
            });
        }
    }
    assert_eq!(done, total);
    for q in 0..queues as u64 {
        for i in 0..per {
            let lba = (q * per + i) * 8;
            assert!(rig.sim.read_disk(2, lba * 512, 4096) == pattern(4096, lba));
        }
    }
}

#[test]
fn many_commands_in_flight_on_two_queues() {
    let rig = start(None, |c| c.threads = 2);
    burst_of_writes(&rig, 2, 48);
}

#[test]
fn a_group_that_sleeps_at_once_when_idle_still_serves_bursts() {
    // A polled-only backend, --idle-spins 0 with a long sleep: every empty pass with commands
    // in flight sleeps, the commands still arrive and complete (a burst's capsules reach the
    // backend plugged, one doorbell per pass).
    let rig = start_with(false, None, |c| {
        c.idle_spins = 0;
        c.idle_sleep = Duration::from_millis(2);
        c.device_poll = Duration::ZERO;
    });
    burst_of_writes(&rig, 1, 48);
}

/// `n` writes and reads of one block at QD1 on namespace 1, each read back; the time taken.
fn qd1_rounds(rig: &Rig, n: u64) -> Duration {
    let c = rig.connect(options()).expect("connect");
    let ns = c.namespace(1).expect("namespace");
    let mut qp = c
        .create_queue_pair(QueuePairOptions::default().depth(4))
        .expect("queue pair");
    let mut buf = c.alloc_buffer(4096).unwrap();
    let t = Instant::now();
    for i in 0..n {
        let data = pattern(4096, i + 500);
        buf[..4096].copy_from_slice(&data);
        buf = qp.write(&ns, i, 1, buf, WriteFlags::NONE).expect("write");
        buf.fill(0);
        buf = qp.read(&ns, i, 1, buf).expect("read");
        assert!(buf[..4096] == data[..], "read back differs at {i}");
    }
    let took = t.elapsed();
    assert!(rig.sim.read_disk(1, (n - 1) * 4096, 4096) == pattern(4096, n + 499));
    took
}

#[test]
fn a_group_polls_the_completion_queue_while_commands_are_at_the_device() {
    // A polled-only backend whose idle sleep is absurdly long: a group that slept while a
    // command is at the device would take 2 s per command (checked: 200 s with a zero `device_poll`); polling the completion queue
    // (device_poll) sees each completion at once.
    let rig = start_with(false, None, |c| {
        c.idle_spins = 0;
        c.idle_sleep = Duration::from_secs(2);
        c.device_poll = Duration::from_secs(10);
    });
    let took = qd1_rounds(&rig, 50);
    assert!(
        took < Duration::from_secs(5),
        "100 commands at QD1 took {took:?}: the group slept instead of polling"
    );
}

#[test]
fn a_group_that_blocks_at_once_when_idle_serves_bursts_and_single_commands() {
    // --idle-spins 0 with interrupts: every empty pass blocks in poll(2) on the sockets and
    // the queue pairs' eventfds. The sleep is set absurdly long so a group that slept
    // instead of blocking would miss the time limits below.
    let rig = start(None, |c| {
        c.idle_spins = 0;
        c.idle_sleep = Duration::from_secs(2);
        c.device_poll = Duration::ZERO;
    });
    burst_of_writes(&rig, 2, 48);
    // Single commands, one at a time (QD1): each wakes the group from its wait on the
    // socket, then on the completion's interrupt. A missed wake-up costs the group's 50 ms
    // wait limit: 200 commands in 5 s means (nearly) none was missed.
    let took = qd1_rounds(&rig, 100);
    assert!(
        took < Duration::from_secs(5),
        "200 commands at QD1 took {took:?}: wake-ups were missed"
    );
}

#[test]
fn a_host_not_on_the_list_is_refused() {
    let rig = start(Some(vec![HOSTNQN.into()]), |_| {});
    let denied = TcpOptions {
        hostnqn: Some("nqn.2026-01.io.example:intruder".into()),
        ..options()
    };
    let e = rig.connect(denied).expect_err("refused");
    assert!(e.to_string().contains("may not use this subsystem"), "{e}");
    assert_eq!(rig.target.stats().refused_hosts, 1);
    // The allowed host still gets in, and its data is served.
    round_trip(&rig, options(), 1, 3, 1, 9);
}

#[test]
fn an_unknown_subsystem_is_refused() {
    let rig = start(None, |_| {});
    let a = rig.target.local_addr();
    let trid = nvme_tcp::TransportId::parse(&format!(
        "trtype:TCP traddr:{} trsvcid:{} subnqn:nqn.2026-01.io.example:nothing",
        a.ip(),
        a.port()
    ))
    .unwrap();
    let e = nvme_tcp::TcpController::connect(&trid, options()).expect_err("refused");
    assert!(e.to_string().contains("no subsystem"), "{e}");
}

#[test]
fn discovery_lists_the_subsystem_for_allowed_hosts() {
    let rig = start(Some(vec![HOSTNQN.into()]), |_| {});
    let a = rig.target.local_addr();
    let trid = nvme_tcp::TransportId::parse(&format!(
        "trtype:TCP traddr:{} trsvcid:{}",
        a.ip(),
        a.port()
    ))
    .unwrap();
    let entries = nvme_tcp::discover(&trid, options()).expect("discovery");
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].subnqn, SUBNQN);
    assert_eq!(entries[0].trsvcid, a.port().to_string());
    let other = TcpOptions {
        hostnqn: Some("nqn.2026-01.io.example:someone-else".into()),
        ..options()
    };
    assert!(nvme_tcp::discover(&trid, other)
        .expect("discovery")
        .is_empty());
}

#[test]
fn keep_alive_expiry_ends_the_association() {
    let rig = start(None, |_| {});
    let o = TcpOptions {
        kato: Duration::from_millis(600),
        ..options()
    };
    let c = rig.connect(o).unwrap();
    let ns = c.namespace(1).unwrap();
    let mut qp = c.create_queue_pair(QueuePairOptions::default()).unwrap();
    qp.write_zeroes(&ns, 0, 1, false).expect("alive");
    // Silent: no poll, no Keep Alive, for well past KATO.
    std::thread::sleep(Duration::from_millis(2000));
    assert_eq!(rig.target.stats().kato_expiries, 1);
    assert_eq!(rig.target.stats().associations, 0);
    assert!(
        qp.write_zeroes(&ns, 0, 1, false).is_err(),
        "the association is gone"
    );
}
