//! Unit tests of the PDU codec: every PDU type framed and parsed back with and without
//! digests, and each header check refusing the field it guards.

use super::*;
use crate::queue::{CompletionEntry, SubmissionEntry};
use crate::status::Status;

const ALL_DIGESTS: [Digests; 4] = [
    Digests {
        header: false,
        data: false,
    },
    Digests {
        header: true,
        data: false,
    },
    Digests {
        header: false,
        data: true,
    },
    Digests {
        header: true,
        data: true,
    },
];

/// Parses `pdu` as a receiver would: common header, HLEN, layout, header digest, data
/// length and data digest. Returns the common header, header bytes and data.
fn parse(
    pdu: &[u8],
    digests: Digests,
    align: usize,
    datal: impl Fn(&[u8]) -> Option<u32>,
) -> Result<(CommonHeader, Vec<u8>, Vec<u8>), PduError> {
    let ch = CommonHeader::from_bytes(pdu[..8].try_into().unwrap());
    let hlen = check_hlen(&ch)?;
    let layout = check_layout(&ch, hlen, digests, 1 << 24, align)?;
    assert_eq!(layout.plen, pdu.len(), "PLEN is the PDU's length");
    if let Some(r) = layout.header_digest() {
        check_digest("header", &pdu[..hlen], pdu[r].try_into().unwrap())?;
    }
    let header = pdu[..hlen].to_vec();
    let mut data = Vec::new();
    if has_data(&ch) {
        let r = check_data_length(&ch, digests, datal(&header))?;
        if digests.data {
            check_digest("data", &pdu[r.clone()], pdu[r.end..].try_into().unwrap())?;
        }
        data = pdu[r].to_vec();
    }
    Ok((ch, header, data))
}

fn datal_field(header: &[u8]) -> Option<u32> {
    match header[0] {
        pdu_type::CAPSULE_CMD => None,
        _ => Some(u32::from_le_bytes(header[16..20].try_into().unwrap())),
    }
}

/// Frames `header` (its common header filled from the frame) with `data`.
fn framed(
    pdu_type: u8,
    pdu_flags: u8,
    mut header: Vec<u8>,
    data: Option<&[u8]>,
    digests: Digests,
    align: usize,
) -> (PduFrame, Vec<u8>) {
    let frame = PduFrame::new(header.len(), data.map(<[u8]>::len), digests, align);
    header[..8].copy_from_slice(&frame.header(pdu_type, pdu_flags).to_bytes());
    let mut out = vec![0xEE; 3]; // encode appends: what is there stays
    frame.encode(&mut out, &header, data);
    assert_eq!(&out[..3], &[0xEE; 3]);
    (frame, out.split_off(3))
}

/// One PDU to frame: type, type-specific flags, header bytes, data.
type Pdu = (u8, u8, Vec<u8>, Option<Vec<u8>>);

fn every_pdu(data: &[u8]) -> Vec<Pdu> {
    let mut sqe = SubmissionEntry::new(0x01);
    sqe.set_sgl(sgl::IN_CAPSULE_DATA, 0, data.len() as u32);
    let cqe = CompletionEntry::new(1, 0, 1, 9, Status::SUCCESS, false);
    let c2h = C2HData {
        ch: CommonHeader::default(),
        cccid: 9,
        rsvd1: 0,
        datao: 0,
        datal: data.len() as u32,
        rsvd2: 0,
    };
    let h2c = H2CData {
        ch: CommonHeader::default(),
        cccid: 9,
        ttag: 3,
        datao: 0,
        datal: data.len() as u32,
        rsvd: 0,
    };
    let r2t = R2T {
        ch: CommonHeader::default(),
        cccid: 9,
        ttag: 3,
        r2to: 0,
        r2tl: 4096,
        rsvd: 0,
    };
    let mut ic = IcReq::from_bytes(&[0; 128]);
    ic.pfv = PFV_1_0;
    ic.dgst = dgst::HEADER | dgst::DATA;
    let mut icr = IcResp::from_bytes(&[0; 128]);
    icr.maxh2cdata = MIN_MAXH2CDATA;
    let d = Some(data.to_vec());
    vec![
        (pdu_type::IC_REQ, 0, ic.to_bytes().to_vec(), None),
        (pdu_type::IC_RESP, 0, icr.to_bytes().to_vec(), None),
        (
            pdu_type::CAPSULE_CMD,
            0,
            CapsuleCmd {
                ch: CommonHeader::default(),
                sqe,
            }
            .to_bytes()
            .to_vec(),
            d.clone(),
        ),
        (
            pdu_type::CAPSULE_CMD,
            0,
            CapsuleCmd {
                ch: CommonHeader::default(),
                sqe,
            }
            .to_bytes()
            .to_vec(),
            None,
        ),
        (
            pdu_type::CAPSULE_RESP,
            0,
            CapsuleResp {
                ch: CommonHeader::default(),
                cqe,
            }
            .to_bytes()
            .to_vec(),
            None,
        ),
        (
            pdu_type::C2H_DATA,
            flags::LAST_PDU | flags::SUCCESS,
            c2h.to_bytes().to_vec(),
            d.clone(),
        ),
        (
            pdu_type::H2C_DATA,
            flags::LAST_PDU,
            h2c.to_bytes().to_vec(),
            d,
        ),
        (pdu_type::R2T, 0, r2t.to_bytes().to_vec(), None),
    ]
}

#[test]
fn every_pdu_type_round_trips_with_and_without_digests() {
    let data: Vec<u8> = (0..100u8).collect();
    for digests in ALL_DIGESTS {
        // IC PDUs are exchanged before digests are on.
        for align in [pda_align(0), pda_align(7), pda_align(PDA_MAX)] {
            for (t, f, header, d) in every_pdu(&data) {
                let dg = if matches!(t, pdu_type::IC_REQ | pdu_type::IC_RESP) {
                    Digests::default()
                } else {
                    digests
                };
                let (frame, pdu) = framed(t, f, header.clone(), d.as_deref(), dg, align);
                assert_eq!(pdu.len(), frame.plen, "{}", pdu_type::name(t));
                let (ch, h, got) = parse(&pdu, dg, align, datal_field).unwrap();
                assert_eq!(ch.pdu_type, t);
                assert_eq!(ch.flags & !(flags::HDGSTF | flags::DDGSTF), f);
                assert_eq!(ch.flags & flags::HDGSTF != 0, dg.header);
                assert_eq!(ch.flags & flags::DDGSTF != 0, dg.data && d.is_some());
                assert_eq!(&h[8..], &header[8..], "{}: header body", pdu_type::name(t));
                assert_eq!(got, d.clone().unwrap_or_default());
                if d.is_some() {
                    assert_eq!(usize::from(ch.pdo) % align, 0);
                    assert!(usize::from(ch.pdo) >= h.len() + dg.header_size());
                    // Padding is zeros.
                    assert!(pdu[h.len() + dg.header_size()..usize::from(ch.pdo)]
                        .iter()
                        .all(|&b| b == 0));
                } else {
                    assert_eq!(ch.pdo, 0);
                    assert_eq!(ch.plen as usize, h.len() + dg.header_size());
                }
            }
        }
    }
}

#[test]
fn termination_request_frames_without_digests() {
    let mut t = TermReq::from_bytes(&[0; 24]);
    t.fes = fes::INVALID_HEADER_FIELD;
    t.fei = 4u32.to_le_bytes();
    let (frame, pdu) = framed(
        pdu_type::C2H_TERM_REQ,
        0,
        t.to_bytes().to_vec(),
        None,
        Digests::default(),
        1,
    );
    assert_eq!(frame.plen, 24);
    let ch = CommonHeader::from_bytes(pdu[..8].try_into().unwrap());
    assert_eq!(check_hlen(&ch), Ok(24));
    assert_eq!(TermReq::from_bytes(pdu[..24].try_into().unwrap()).fei(), 4);
}

#[test]
fn frame_pdu_fills_a_byte_built_header() {
    let data = [3u8; 10];
    let d = Digests {
        header: true,
        data: true,
    };
    let mut h = vec![0u8; 24];
    h[0] = pdu_type::C2H_DATA;
    h[1] = flags::LAST_PDU;
    h[16..20].copy_from_slice(&10u32.to_le_bytes());
    let mut out = Vec::new();
    let frame = frame_pdu(&mut out, &mut h, Some(&data), d, 8);
    let (_, typed) = framed(
        pdu_type::C2H_DATA,
        flags::LAST_PDU,
        h.clone(),
        Some(&data),
        d,
        8,
    );
    assert_eq!(out, typed);
    assert_eq!(frame.pdo, 32);
    assert_eq!(&h[..8], &out[..8], "the header given is filled in");
    let (ch, _, got) = parse(&out, d, 8, datal_field).unwrap();
    assert_eq!((ch.plen, got.as_slice()), (46, &data[..]));
}

#[test]
fn crc32c_is_castagnoli_and_appends() {
    // RFC 3720 B.4: 32 bytes of zeros.
    assert_eq!(crc32c(&[0u8; 32]), 0x8A91_36AA);
    assert_eq!(crc32c(b"123456789"), 0xE306_9283);
    assert_eq!(
        crc32c_append(crc32c(b"1234"), b"56789"),
        crc32c(b"123456789")
    );
}

#[test]
fn digest_offsets_point_at_the_digests() {
    let data = [7u8; 16];
    let d = Digests {
        header: true,
        data: true,
    };
    let (frame, pdu) = framed(
        pdu_type::C2H_DATA,
        flags::LAST_PDU,
        C2HData::from_bytes(&[0; 24]).to_bytes().to_vec(),
        Some(&data),
        d,
        4,
    );
    let h = frame.header_digest_at().unwrap();
    assert_eq!(&pdu[h..h + 4], &crc32c(&pdu[..24]).to_le_bytes());
    let dd = frame.data_digest_at().unwrap();
    assert_eq!(&pdu[dd..], &crc32c(&data).to_le_bytes());
    let none = PduFrame::new(24, None, Digests::default(), 4);
    assert_eq!(
        (none.header_digest_at(), none.data_digest_at()),
        (None, None)
    );
}

/// A good C2HData PDU (header digest on, data digest on), to break one field at a time.
fn good_c2h() -> (Vec<u8>, Digests) {
    let d = Digests {
        header: true,
        data: true,
    };
    let mut h = C2HData::from_bytes(&[0; 24]);
    h.datal = 8;
    let (_, pdu) = framed(
        pdu_type::C2H_DATA,
        flags::LAST_PDU,
        h.to_bytes().to_vec(),
        Some(&[1; 8]),
        d,
        4,
    );
    (pdu, d)
}

fn with<F: FnOnce(&mut Vec<u8>)>(f: F) -> Result<(CommonHeader, Vec<u8>, Vec<u8>), PduError> {
    let (mut pdu, d) = good_c2h();
    f(&mut pdu);
    parse(&pdu, d, 4, datal_field)
}

#[test]
fn the_checks_refuse_each_malformed_field() {
    assert!(with(|_| {}).is_ok());
    assert_eq!(
        with(|p| p[0] = 0x0F).unwrap_err(),
        PduError::UnknownType { pdu_type: 0x0F }
    );
    assert_eq!(
        with(|p| p[2] = 25).unwrap_err(),
        PduError::Hlen {
            hlen: 25,
            expected: 24
        }
    );
    assert_eq!(
        with(|p| p[1] &= !flags::HDGSTF).unwrap_err(),
        PduError::HeaderDigestFlag {
            flag: false,
            negotiated: true
        }
    );
    assert_eq!(
        with(|p| p[4..8].copy_from_slice(&u32::MAX.to_le_bytes())).unwrap_err(),
        PduError::PlenTooLarge { plen: u32::MAX }
    );
    assert_eq!(
        with(|p| p[3] = 16).unwrap_err(),
        PduError::PdoOverlap {
            pdo: 16,
            header: 28
        }
    );
    assert_eq!(
        with(|p| p[3] = 30).unwrap_err(),
        PduError::PdoAlignment { pdo: 30, align: 4 }
    );
    // The header digest covers the header: a changed DATAO trips it.
    assert!(matches!(
        with(|p| p[12] ^= 1).unwrap_err(),
        PduError::Digest { kind: "header", .. }
    ));
    // DDGSTF and DATAL, with the header digest redone so that only the field is wrong.
    let redigest = |p: &mut Vec<u8>| {
        let c = crc32c(&p[..24]).to_le_bytes();
        p[24..28].copy_from_slice(&c);
    };
    assert_eq!(
        with(|p| {
            p[1] &= !flags::DDGSTF;
            redigest(p);
        })
        .unwrap_err(),
        PduError::DataDigestFlag
    );
    assert_eq!(
        with(|p| {
            p[16..20].copy_from_slice(&9u32.to_le_bytes());
            redigest(p);
        })
        .unwrap_err(),
        PduError::Datal {
            datal: 9,
            plen: 40,
            pdo: 28
        }
    );
    assert_eq!(
        with(|p| {
            p[16..20].copy_from_slice(&0u32.to_le_bytes());
            redigest(p);
        })
        .unwrap_err(),
        PduError::Datal {
            datal: 0,
            plen: 40,
            pdo: 28
        }
    );
    assert!(matches!(
        with(|p| p[30] ^= 1).unwrap_err(),
        PduError::Digest { kind: "data", .. }
    ));
}

#[test]
fn a_pdu_without_data_must_be_exactly_its_header() {
    let ch = CommonHeader {
        pdu_type: pdu_type::CAPSULE_RESP,
        flags: 0,
        hlen: SHORT_HLEN,
        pdo: 0,
        plen: 28,
    };
    assert_eq!(
        check_layout(&ch, 24, Digests::default(), 1 << 24, 1),
        Err(PduError::Plen {
            plen: 28,
            expected: 24
        })
    );
    let ok = CommonHeader { plen: 24, ..ch };
    assert_eq!(
        check_layout(&ok, 24, Digests::default(), 1 << 24, 1).map(|l| l.header_end),
        Ok(24)
    );
    // A CapsuleCmd whose PLEN leaves no in-capsule data after PDO.
    let cmd = CommonHeader {
        pdu_type: pdu_type::CAPSULE_CMD,
        flags: 0,
        hlen: CAPSULE_CMD_HLEN,
        pdo: 72,
        plen: 72,
    };
    assert!(check_layout(&cmd, 72, Digests::default(), 1 << 24, 4).is_ok());
    assert_eq!(
        check_data_length(&cmd, Digests::default(), None),
        Err(PduError::Datal {
            datal: 0,
            plen: 72,
            pdo: 72
        })
    );
}

#[test]
fn error_messages_name_the_rule() {
    let msgs = [
        PduError::UnknownType { pdu_type: 0x0F }.to_string(),
        PduError::Hlen {
            hlen: 25,
            expected: 24,
        }
        .to_string(),
        PduError::HeaderDigestFlag {
            flag: true,
            negotiated: false,
        }
        .to_string(),
    ];
    assert_eq!(msgs[0], "unknown PDU type 0x0f (check: PDU type)");
    assert_eq!(msgs[1], "HLEN 25 (must be 24) (check: HLEN)");
    assert_eq!(
        msgs[2],
        "HDGSTF flag is true but header digests are off (check: HDGSTF)"
    );
}
