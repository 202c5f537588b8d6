//! The host against a hostile target: one fake fault (`fake::Hostile`) per receive-side
//! check. Each test asserts that the queue closes with `TcpError::Malformed` naming the check
//! (its message says "check: ..."), that nothing panics or hangs, and that every request in
//! flight completes exactly once, with its buffer. Also: a target whose CAP.MQES leaves no
//! usable queue slot is refused at connect.

use nvme_core::IoQueue;
use std::time::{Duration, Instant};

use nvme_core::{Error, QueuePairOptions, TimeoutAction, WriteFlags};

use crate::fake::{Config, FakeTarget, Fault, Hostile};
use crate::{TcpController, TcpError, TcpOptions};

/// Requests in flight when the fault strikes.
const IN_FLIGHT: u64 = 4;

/// Runs `h` against reads (or writes) of `blocks` 512-byte blocks: two good reads first,
/// then `IN_FLIGHT` requests at once. Returns the first error and the PDU name.
fn hostile_case(h: Hostile, write: bool, blocks: u32) -> (String, &'static str) {
    let t = FakeTarget::start(Config {
        fault: Fault::Hostile(h),
        fault_after: 2,
        ..Config::default()
    });
    let options = TcpOptions {
        timeout_action: TimeoutAction::None,
        ..TcpOptions::default()
    };
    let c = TcpController::connect(&t.trid(), options).unwrap();
    let ns = c.namespace(2).unwrap();
    let mut qp = c
        .create_queue_pair(QueuePairOptions {
            timeout: Duration::from_secs(5),
            ..QueuePairOptions::default()
        })
        .unwrap();
    for lba in 0..2 {
        qp.read(&ns, lba, 1, c.alloc_buffer(512).unwrap()).unwrap();
    }
    let len = blocks as usize * 512;
    let mut done = [0u32; IN_FLIGHT as usize];
    let mut errors = Vec::new();
    for i in 0..IN_FLIGHT {
        let mut buf = c.alloc_buffer(len).unwrap();
        buf[..].fill(i as u8);
        let lba = i * u64::from(blocks) % 1024;
        let r = if write {
            qp.submit_write(&ns, lba, blocks, buf, WriteFlags::default(), i)
        } else {
            qp.submit_read(&ns, lba, blocks, buf, i)
        };
        if let Err(f) = r {
            assert!(f.buffer.is_some(), "a refused request keeps its buffer");
            done[i as usize] += 1;
            errors.push(f.error);
        }
    }
    let start = Instant::now();
    while done.iter().sum::<u32>() < IN_FLIGHT as u32 {
        qp.poll(|comp| {
            assert!(comp.buffer.is_some(), "every buffer comes back");
            done[comp.user_data as usize] += 1;
            errors.push(comp.result.expect_err("hostile target"));
        });
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "hang after {h:?}"
        );
    }
    // Nothing more arrives: each request completed exactly once.
    for _ in 0..100 {
        qp.poll(|comp| done[comp.user_data as usize] += 1);
    }
    assert_eq!(done, [1; IN_FLIGHT as usize], "one completion per request");
    assert_eq!(qp.in_flight(), 0);
    let f = qp
        .submit_read(&ns, 0, 1, c.alloc_buffer(512).unwrap(), 99)
        .unwrap_err();
    assert!(matches!(f.error, Error::Transport { .. }), "{f}");
    assert!(f.buffer.is_some());
    let e = errors.into_iter().next().unwrap();
    let Error::Transport { source, .. } = &e else {
        panic!("expected a transport error, got {e:?}")
    };
    match source.downcast_ref::<TcpError>() {
        Some(TcpError::Malformed { pdu, what, .. }) => (what.clone(), pdu),
        _ => panic!("expected a malformed-PDU error, got {e}"),
    }
}

/// Asserts that `h` closes the queue with a Malformed error on a `pdu` PDU naming `check`.
fn expect(h: Hostile, write: bool, blocks: u32, pdu: &str, check: &str) {
    let (what, got_pdu) = hostile_case(h, write, blocks);
    assert_eq!(got_pdu, pdu, "{what}");
    assert!(
        what.contains(&format!("check: {check}")),
        "{h:?}: expected check {check:?}, got: {what}"
    );
}

#[test]
fn c2h_data_with_a_wrong_hlen_closes_the_queue() {
    expect(Hostile::C2hHlen, false, 2, "C2HData", "HLEN");
}

#[test]
fn capsule_resp_with_a_wrong_plen_closes_the_queue() {
    expect(Hostile::RespPlen, false, 2, "CapsuleResp", "PLEN");
}

#[test]
fn a_plen_beyond_any_transfer_closes_the_queue() {
    expect(Hostile::HugePlen, false, 2, "C2HData", "PLEN");
}

#[test]
fn a_pdo_inside_the_header_closes_the_queue() {
    expect(Hostile::PdoOverlap, false, 2, "C2HData", "PDO");
}

#[test]
fn a_datal_that_disagrees_with_plen_closes_the_queue() {
    expect(Hostile::DatalMismatch, false, 2, "C2HData", "DATAL");
}

#[test]
fn data_out_of_order_closes_the_queue() {
    expect(Hostile::DataoGap, false, 2, "C2HData", "DATAO");
}

#[test]
fn data_for_an_unknown_command_id_closes_the_queue() {
    expect(Hostile::UnknownCccid, false, 2, "C2HData", "CCCID");
}

#[test]
fn data_past_the_transfer_closes_the_queue() {
    expect(
        Hostile::DataPastEnd,
        false,
        2,
        "C2HData",
        "data past the transfer",
    );
}

#[test]
fn success_without_last_pdu_closes_the_queue() {
    expect(
        Hostile::SuccessWithoutLast,
        false,
        2,
        "C2HData",
        "SUCCESS without LAST_PDU",
    );
}

#[test]
fn success_flag_before_the_end_of_the_data_closes_the_queue() {
    expect(
        Hostile::SuccessEarly,
        false,
        2,
        "C2HData",
        "SUCCESS before the end of the transfer",
    );
}

#[test]
fn a_read_completed_without_data_fails_instead_of_returning_stale_bytes() {
    expect(
        Hostile::RespWithoutData,
        false,
        2,
        "CapsuleResp",
        "short read",
    );
}

#[test]
fn a_read_completed_after_half_its_data_fails() {
    expect(
        Hostile::RespAfterHalf,
        false,
        2,
        "CapsuleResp",
        "short read",
    );
}

#[test]
fn an_r2t_for_a_read_closes_the_queue() {
    expect(Hostile::R2tForRead, false, 2, "R2T", "R2T for a read");
}

#[test]
fn an_unknown_pdu_type_closes_the_queue() {
    expect(
        Hostile::UnknownType,
        false,
        2,
        "unknown PDU type",
        "PDU type",
    );
}

#[test]
fn a_host_pdu_type_from_the_target_closes_the_queue() {
    expect(Hostile::HostPduType, false, 2, "H2CData", "PDU type");
}

/// Blocks of a write that goes by R2T (above the fake's 8 KiB of in-capsule data).
const R2T_BLOCKS: u32 = 32;

#[test]
fn an_r2t_past_the_end_of_the_write_closes_the_queue() {
    expect(
        Hostile::R2tPastEnd,
        true,
        R2T_BLOCKS,
        "R2T",
        "R2T past the end",
    );
}

#[test]
fn an_r2t_flood_for_one_megabyte_write_closes_the_queue_at_the_second_r2t() {
    // 2048 blocks of 512 bytes: a 1 MiB write; each R2T asks for all of it again.
    expect(
        Hostile::R2tFlood,
        true,
        2048,
        "R2T",
        "R2T for data already sent",
    );
}

#[test]
fn an_r2t_overlapping_data_already_asked_for_closes_the_queue() {
    expect(Hostile::R2tOverlap, true, R2T_BLOCKS, "R2T", "R2T overlap");
}

#[test]
fn an_r2t_for_in_capsule_data_closes_the_queue() {
    expect(
        Hostile::R2tForInCapsule,
        true,
        1,
        "R2T",
        "R2T for data already sent",
    );
}

#[test]
fn a_write_completed_without_its_data_fails() {
    expect(
        Hostile::RespWithoutR2t,
        true,
        R2T_BLOCKS,
        "CapsuleResp",
        "short write",
    );
}

#[test]
fn a_target_with_mqes_zero_is_refused_at_connect() {
    // CAP.MQES = 0 (one entry): no queue could hold a command (NVMe Base 2.0 §3.1.4.1:
    // the minimum MQES is 1).
    let t = FakeTarget::start(Config {
        mqes: 0,
        ..Config::default()
    });
    let e = match TcpController::connect(&t.trid(), TcpOptions::default()) {
        Ok(_) => panic!("a controller with MQES 0 was accepted"),
        Err(e) => e,
    };
    assert!(
        matches!(e, Error::Unsupported { .. }) && e.to_string().contains("MQES"),
        "{e}"
    );
}

#[test]
fn a_target_with_mqes_one_gives_a_one_command_queue_that_works() {
    let t = FakeTarget::start(Config {
        mqes: 1,
        ..Config::default()
    });
    let c = TcpController::connect(&t.trid(), TcpOptions::default()).unwrap();
    let ns = c.namespace(2).unwrap();
    let mut qp = c.create_queue_pair(QueuePairOptions::default()).unwrap();
    assert_eq!(qp.capacity(), 1);
    let mut buf = c.alloc_buffer(512).unwrap();
    buf[..].fill(0xC3);
    let buf = qp.write(&ns, 3, 1, buf, WriteFlags::default()).unwrap();
    let back = qp.read(&ns, 3, 1, buf).unwrap();
    assert!(back[..512].iter().all(|&b| b == 0xC3));
}

#[test]
fn a_target_with_maxcmd_one_gives_a_one_command_queue_that_works() {
    // MAXCMD = 1: one command outstanding per queue, which a queue of two entries holds.
    let t = FakeTarget::start(Config {
        maxcmd: 1,
        ..Config::default()
    });
    let c = TcpController::connect(&t.trid(), TcpOptions::default()).unwrap();
    let ns = c.namespace(2).unwrap();
    let mut qp = c.create_queue_pair(QueuePairOptions::default()).unwrap();
    assert_eq!(qp.capacity(), 1);
    let buf = qp.read(&ns, 0, 1, c.alloc_buffer(512).unwrap()).unwrap();
    assert_eq!(buf.len(), 512);
}
