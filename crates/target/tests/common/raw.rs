//! A raw NVMe/TCP host for the tests: hand-built PDUs, for what our initiator never sends
//! (malformed PDUs, bad digests) or does not offer (Dataset Management).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use nvme_spec::fabrics::{self, ConnectData};
use nvme_spec::tcp::{self, pdu_type, CommonHeader, Digests, IcReq};
use nvme_spec::SubmissionEntry;

use super::{Rig, HOSTNQN, SUBNQN};

pub fn icreq(digests: u8) -> Vec<u8> {
    IcReq {
        ch: CommonHeader {
            pdu_type: pdu_type::IC_REQ,
            flags: 0,
            hlen: tcp::IC_HLEN,
            pdo: 0,
            plen: u32::from(tcp::IC_HLEN),
        },
        pfv: tcp::PFV_1_0,
        hpda: 0,
        dgst: digests,
        maxr2t: 0,
        rsvd: [0; 112],
    }
    .to_bytes()
    .to_vec()
}

/// A raw connection past ICReq/ICResp.
pub fn raw(rig: &Rig, digests: u8) -> TcpStream {
    let mut s = TcpStream::connect(rig.target.local_addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(&icreq(digests)).unwrap();
    let mut resp = [0u8; 128];
    s.read_exact(&mut resp).unwrap();
    assert_eq!(resp[0], pdu_type::IC_RESP);
    s
}

/// An admin Connect capsule with its data in the capsule.
pub fn connect_capsule(digests: Digests) -> Vec<u8> {
    let mut sqe = fabrics::connect(0, 32, 0, 0);
    sqe.set_sgl(tcp::sgl::IN_CAPSULE_DATA, 0, ConnectData::SIZE as u32);
    let data = ConnectData::new(
        [1; 16],
        fabrics::CNTLID_DYNAMIC,
        fabrics::nqn_field(SUBNQN).unwrap(),
        fabrics::nqn_field(HOSTNQN).unwrap(),
    )
    .to_bytes();
    let mut header = tcp::CapsuleCmd {
        ch: CommonHeader {
            pdu_type: pdu_type::CAPSULE_CMD,
            ..Default::default()
        },
        sqe,
    }
    .to_bytes();
    let mut out = Vec::new();
    tcp::frame_pdu(&mut out, &mut header, Some(&data), digests, 4);
    out
}

/// A command capsule for `sqe` (command id `cid`) with `data` in the capsule, or no data.
pub fn capsule(mut sqe: SubmissionEntry, cid: u16, data: Option<&[u8]>) -> Vec<u8> {
    sqe.set_cid(cid);
    match data {
        Some(d) => sqe.set_sgl(tcp::sgl::IN_CAPSULE_DATA, 0, d.len() as u32),
        None => sqe.set_sgl(tcp::sgl::TRANSPORT_DATA, 0, 0),
    }
    let mut header = tcp::CapsuleCmd {
        ch: CommonHeader {
            pdu_type: pdu_type::CAPSULE_CMD,
            ..Default::default()
        },
        sqe,
    }
    .to_bytes();
    let mut out = Vec::new();
    tcp::frame_pdu(&mut out, &mut header, data, Digests::default(), 4);
    out
}

/// Reads one response capsule (no digests).
pub fn response(s: &mut TcpStream) -> tcp::CapsuleResp {
    let mut resp = [0u8; tcp::CapsuleResp::SIZE];
    s.read_exact(&mut resp).expect("a response capsule");
    let r = tcp::CapsuleResp::from_bytes(&resp);
    assert_eq!(r.ch.pdu_type, pdu_type::CAPSULE_RESP);
    r
}

/// Connect data for queue `cntlid` of this test's subsystem and host.
pub fn connect_data(cntlid: u16) -> [u8; ConnectData::SIZE] {
    ConnectData::new(
        [1; 16],
        cntlid,
        fabrics::nqn_field(SUBNQN).unwrap(),
        fabrics::nqn_field(HOSTNQN).unwrap(),
    )
    .to_bytes()
}
