//! The fake target checks what the host sends with the shared PDU codec's rules (HDGSTF /
//! DDGSTF against the negotiated digests, PLEN of a PDU without data): a raw client sends one
//! Keep Alive capsule that breaks one rule, and the fake closes the connection instead of
//! answering it. The PDUs are built by hand here, not with the codec under test.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use nvme_spec::tcp::{self, flags, pdu_type, CapsuleCmd, CommonHeader, IcReq};
use nvme_spec::{opcode, SubmissionEntry};
use nvme_tcp::fake::{Config, FakeTarget};

/// Connects and exchanges ICReq/ICResp with no digests.
fn connect(t: &FakeTarget) -> TcpStream {
    let s = TcpStream::connect(t.addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut req = IcReq::from_bytes(&[0; IcReq::SIZE]);
    req.ch = CommonHeader {
        pdu_type: pdu_type::IC_REQ,
        flags: 0,
        hlen: tcp::IC_HLEN,
        pdo: 0,
        plen: u32::from(tcp::IC_HLEN),
    };
    (&s).write_all(&req.to_bytes()).unwrap();
    let mut resp = [0u8; 128];
    (&s).read_exact(&mut resp).expect("ICResp");
    assert_eq!(resp[0], pdu_type::IC_RESP);
    s
}

/// A Keep Alive CapsuleCmd with `ch_flags`, `in_capsule` bytes of data at PDO 72 (none: PDO
/// 0), and `extra` bytes more than its PLEN should be (PLEN says so, and they are sent).
fn keep_alive(ch_flags: u8, in_capsule: usize, extra: usize) -> Vec<u8> {
    let mut sqe = SubmissionEntry::new(opcode::admin::KEEP_ALIVE);
    sqe.set_cid(1);
    let id = if in_capsule > 0 {
        tcp::sgl::IN_CAPSULE_DATA
    } else {
        tcp::sgl::TRANSPORT_DATA
    };
    sqe.set_sgl(id, 0, in_capsule as u32);
    let hlen = usize::from(tcp::CAPSULE_CMD_HLEN);
    let pdu = CapsuleCmd {
        ch: CommonHeader {
            pdu_type: pdu_type::CAPSULE_CMD,
            flags: ch_flags,
            hlen: tcp::CAPSULE_CMD_HLEN,
            pdo: if in_capsule > 0 { hlen as u8 } else { 0 },
            plen: (hlen + in_capsule + extra) as u32,
        },
        sqe,
    };
    let mut out = pdu.to_bytes().to_vec();
    out.resize(hlen + in_capsule + extra, 0xA5);
    out
}

/// Sends `pdu`; whether a CapsuleResp for it came back (else the connection was closed).
fn answered(t: &FakeTarget, pdu: &[u8]) -> bool {
    let s = connect(t);
    (&s).write_all(pdu).unwrap();
    let mut resp = [0u8; 24];
    match (&s).read_exact(&mut resp) {
        Ok(()) => {
            assert_eq!(resp[0], pdu_type::CAPSULE_RESP, "a CapsuleResp");
            true
        }
        Err(e) => {
            assert!(
                matches!(
                    e.kind(),
                    std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::ConnectionReset
                ),
                "closed, not timed out: {e}"
            );
            false
        }
    }
}

#[test]
fn fake_target_answers_well_formed_capsules() {
    let t = FakeTarget::start(Config::default());
    assert!(answered(&t, &keep_alive(0, 0, 0)));
    assert!(answered(&t, &keep_alive(0, 4, 0)), "with in-capsule data");
}

#[test]
fn fake_target_refuses_hdgstf_without_header_digests() {
    let t = FakeTarget::start(Config::default());
    assert!(!answered(&t, &keep_alive(flags::HDGSTF, 0, 0)));
}

#[test]
fn fake_target_refuses_ddgstf_without_data_digests() {
    let t = FakeTarget::start(Config::default());
    assert!(!answered(&t, &keep_alive(flags::DDGSTF, 4, 0)));
}

#[test]
fn fake_target_refuses_a_plen_beyond_the_header_of_a_pdu_without_data() {
    let t = FakeTarget::start(Config::default());
    assert!(!answered(&t, &keep_alive(0, 0, 4)));
}
