//! Hosts that break the protocol: a malformed PDU, a bad digest, random bytes (a property
//! test of the receive path). Each ends its own connection only: another host's association
//! keeps working, and its data is intact.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;

use common::raw::{connect_capsule, raw};
use common::*;
use nvme_core::{IoQueue, QueuePairOptions, WriteFlags};
use nvme_spec::fabrics;
use nvme_spec::tcp::{self, dgst, pdu_type, Digests};
use proptest::prelude::*;

/// Reads until the target closes; the PDU types seen.
fn until_closed(s: &mut TcpStream) -> Vec<u8> {
    let mut all = Vec::new();
    let _ = s.read_to_end(&mut all);
    let mut types = Vec::new();
    let mut at = 0;
    while at + 8 <= all.len() {
        types.push(all[at]);
        let plen = u32::from_le_bytes(all[at + 4..at + 8].try_into().unwrap()) as usize;
        if plen == 0 {
            break;
        }
        at += plen;
    }
    types
}

/// A healthy host's I/O while others misbehave: write, read back, compare.
fn healthy_io(rig: &Rig, lba: u64, seed: u64) {
    let c = rig.connect(options()).expect("the healthy host connects");
    let ns = c.namespace(1).unwrap();
    let mut qp = c.create_queue_pair(QueuePairOptions::default()).unwrap();
    let data = pattern(4096, seed);
    let mut buf = c.alloc_buffer(4096).unwrap();
    buf[..4096].copy_from_slice(&data);
    let mut buf = qp.write(&ns, lba, 1, buf, WriteFlags::NONE).unwrap();
    buf.fill(0);
    let buf = qp.read(&ns, lba, 1, buf).unwrap();
    assert!(buf[..4096] == data[..]);
}

#[test]
fn a_malformed_pdu_ends_that_connection_only() {
    let rig = start(None, |_| {});
    let healthy = rig.connect(options()).unwrap();
    let ns = healthy.namespace(1).unwrap();
    let mut qp = healthy
        .create_queue_pair(QueuePairOptions::default())
        .unwrap();
    let data = pattern(4096, 11);
    let mut buf = healthy.alloc_buffer(4096).unwrap();
    buf[..4096].copy_from_slice(&data);
    let buf = qp.write(&ns, 9, 1, buf, WriteFlags::NONE).unwrap();

    let mut bad = raw(&rig, 0);
    // An unknown PDU type.
    bad.write_all(&[0x7E, 0, 8, 0, 8, 0, 0, 0]).unwrap();
    let seen = until_closed(&mut bad);
    assert_eq!(
        seen,
        vec![pdu_type::C2H_TERM_REQ],
        "a termination request, then EOF"
    );
    assert_eq!(rig.target.stats().protocol_errors, 1);

    let mut buf = buf;
    buf.fill(0);
    let buf = qp
        .read(&ns, 9, 1, buf)
        .expect("the other host's queue still works");
    assert!(buf[..4096] == data[..]);
}

#[test]
fn a_bad_header_digest_ends_that_connection_only() {
    let rig = start(None, |_| {});
    let mut bad = raw(&rig, dgst::HEADER | dgst::DATA);
    let mut pdu = connect_capsule(Digests {
        header: true,
        data: true,
    });
    pdu[tcp::CAPSULE_CMD_HLEN as usize] ^= 1; // the header digest's first byte
    bad.write_all(&pdu).unwrap();
    let seen = until_closed(&mut bad);
    assert_eq!(seen, vec![pdu_type::C2H_TERM_REQ]);
    healthy_io(&rig, 4, 12);
}

#[test]
fn a_bad_data_digest_ends_that_connection_only() {
    let rig = start(None, |_| {});
    let mut bad = raw(&rig, dgst::HEADER | dgst::DATA);
    let mut pdu = connect_capsule(Digests {
        header: true,
        data: true,
    });
    let last = pdu.len() - 1;
    pdu[last] ^= 0x80;
    bad.write_all(&pdu).unwrap();
    let seen = until_closed(&mut bad);
    assert!(
        !seen.contains(&pdu_type::CAPSULE_RESP),
        "not connected: {seen:?}"
    );
    healthy_io(&rig, 5, 13);
}

#[test]
fn a_well_formed_raw_connect_is_answered() {
    let rig = start(None, |_| {});
    let mut s = raw(&rig, 0);
    s.write_all(&connect_capsule(Digests::default())).unwrap();
    let mut resp = [0u8; tcp::CapsuleResp::SIZE];
    s.read_exact(&mut resp).unwrap();
    let r = tcp::CapsuleResp::from_bytes(&resp);
    assert_eq!(r.ch.pdu_type, pdu_type::CAPSULE_RESP);
    assert!(r.cqe.status().is_success(), "{:?}", r.cqe.status());
    assert_ne!(fabrics::connect_cntlid(r.cqe.dw0), 0);
}

#[test]
fn a_connection_that_never_connects_is_closed() {
    let rig = start(None, |c| {
        c.connect_timeout = std::time::Duration::from_millis(300)
    });
    // After ICReq, nothing.
    let mut idle = raw(&rig, 0);
    let t0 = std::time::Instant::now();
    let seen = until_closed(&mut idle);
    assert!(seen.is_empty(), "{seen:?}");
    assert!(
        t0.elapsed() < std::time::Duration::from_secs(4),
        "closed after {:?}",
        t0.elapsed()
    );
    // Not even ICReq.
    let mut silent = std::net::TcpStream::connect(rig.target.local_addr()).unwrap();
    silent
        .set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .unwrap();
    let mut b = Vec::new();
    assert_eq!(
        silent.read_to_end(&mut b).unwrap(),
        0,
        "closed without a byte"
    );
    healthy_io(&rig, 7, 15);
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(48),
        ..ProptestConfig::default()
    })]

    /// Random bytes after ICReq (optionally after a valid admin Connect): the target ends
    /// that connection at worst; every poll group keeps serving.
    #[test]
    fn random_streams_never_take_the_target_down(
        connected in any::<bool>(),
        digests in 0u8..4,
        mut junk in proptest::collection::vec(any::<u8>(), 0..600),
        first in prop_oneof![Just(pdu_type::CAPSULE_CMD), Just(pdu_type::H2C_DATA), any::<u8>()],
    ) {
        let rig = shared_rig();
        let mut s = raw(rig, digests);
        if connected {
            s.write_all(&connect_capsule(Digests::from_dgst(digests))).unwrap();
        }
        if let Some(b) = junk.first_mut() {
            *b = first;
        }
        let _ = s.write_all(&junk);
        let _ = s.shutdown(std::net::Shutdown::Write);
        let _ = until_closed(&mut s);
    }
}

/// One target for every property case (and a check that it still serves afterwards).
fn shared_rig() -> &'static Rig {
    static RIG: std::sync::OnceLock<Rig> = std::sync::OnceLock::new();
    RIG.get_or_init(|| start(None, |c| c.threads = 2))
}

#[test]
fn after_random_streams_the_target_still_serves() {
    let rig = shared_rig();
    for i in 0..8 {
        let mut s = raw(rig, 0);
        let junk = pattern(300, i);
        let _ = s.write_all(&junk);
        let _ = s.shutdown(std::net::Shutdown::Write);
        let _ = until_closed(&mut s);
    }
    healthy_io(rig, 6, 14);
}
