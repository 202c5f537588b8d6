//! PDU framing and header checks shared by the host and the controller side (NVMe/TCP §3.6.1,
//! §3.3.2): pure computation on bytes, no I/O and no allocation of its own.
//!
//! Sending: [`PduFrame`] works out HLEN, PDO and PLEN of one PDU from its header length, its
//! data length, the negotiated [`Digests`] and the receiver's data alignment, gives the
//! common header to put in the PDU header ([`PduFrame::header`]), and lays the PDU out into
//! a caller's `Vec<u8>` ([`PduFrame::encode`]): header, header digest, padding up to PDO,
//! data, data digest. Writing into the caller's vector is what lets the host encode straight
//! into its reusable send buffer.
//!
//! Receiving: [`check_hlen`], [`check_layout`] and [`check_data_length`] apply the rules that
//! are the same in both directions (HLEN per type, HDGSTF/DDGSTF against what was negotiated,
//! a PLEN limit, PDO outside the header and aligned, PLEN against PDO and DATAL) and name the
//! rule broken in a [`PduError`]. Which PDU types a side may receive is the caller's rule.

use core::ops::Range;

use super::{expected_hlen, flags, pdu_type, CommonHeader, DIGEST_SIZE, PDA_UNIT};

/// CRC32C as NVMe/TCP digests use it (NVMe/TCP §3.3.2: CRC-32C, Castagnoli polynomial,
/// initial value and final XOR all ones; sent little-endian).
#[inline]
pub fn crc32c(data: &[u8]) -> u32 {
    ::crc32c::crc32c(data)
}

/// CRC32C of `crc`'s data followed by `data` (a digest computed piece by piece).
#[inline]
pub fn crc32c_append(crc: u32, data: &[u8]) -> u32 {
    ::crc32c::crc32c_append(crc, data)
}

/// Data alignment in bytes that a HPDA or CPDA value asks for: `(pda + 1) * 4`
/// (NVMe/TCP §3.6.2.2).
pub const fn pda_align(pda: u8) -> usize {
    (pda as usize + 1) * PDA_UNIT
}

/// Digests negotiated for a connection by ICReq/ICResp (NVMe/TCP §3.6.2.2-3).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Digests {
    /// A header digest follows every PDU header.
    pub header: bool,
    /// A data digest follows the data of every PDU that has data.
    pub data: bool,
}

impl Digests {
    /// The digests a DGST field ([`super::dgst`]) selects.
    pub const fn from_dgst(dgst: u8) -> Self {
        Digests {
            header: dgst & super::dgst::HEADER != 0,
            data: dgst & super::dgst::DATA != 0,
        }
    }

    /// Bytes of header digest after each PDU header.
    #[inline]
    pub const fn header_size(self) -> usize {
        if self.header {
            DIGEST_SIZE
        } else {
            0
        }
    }

    /// Bytes of data digest after the data of a PDU that has data.
    #[inline]
    pub const fn data_size(self) -> usize {
        if self.data {
            DIGEST_SIZE
        } else {
            0
        }
    }
}

/// Rounds `v` up to a multiple of `align` (any positive number).
const fn align_up(v: usize, align: usize) -> usize {
    v.div_ceil(align) * align
}

/// The layout of one PDU to send: where its parts go and the length fields that say so.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PduFrame {
    /// Header length (common header included, header digest excluded).
    pub hlen: usize,
    /// Data offset: the header, its digest and padding up to the receiver's alignment; 0
    /// when the PDU has no data.
    pub pdo: usize,
    /// Data length (0 when the PDU has no data).
    pub data_len: usize,
    /// Total PDU length.
    pub plen: usize,
    /// A header digest follows the header.
    pub hdgst: bool,
    /// A data digest follows the data (only when there is data).
    pub ddgst: bool,
}

impl PduFrame {
    /// A PDU with a header of `hlen` bytes and `data_len` bytes of data (`None`: no data, PDO
    /// 0), under the negotiated `digests`, its data aligned to `align` bytes from the start
    /// of the PDU ([`pda_align`] of the receiver's PDA).
    #[inline]
    pub const fn new(hlen: usize, data_len: Option<usize>, digests: Digests, align: usize) -> Self {
        let hd = digests.header_size();
        match data_len {
            Some(len) => {
                let pdo = align_up(hlen + hd, align);
                PduFrame {
                    hlen,
                    pdo,
                    data_len: len,
                    plen: pdo + len + digests.data_size(),
                    hdgst: digests.header,
                    ddgst: digests.data,
                }
            }
            None => PduFrame {
                hlen,
                pdo: 0,
                data_len: 0,
                plen: hlen + hd,
                hdgst: digests.header,
                ddgst: false,
            },
        }
    }

    /// The common header of this PDU: `pdu_type`, `pdu_flags` with HDGSTF and DDGSTF added as
    /// the frame has digests, HLEN, PDO and PLEN.
    #[inline]
    pub const fn header(&self, pdu_type: u8, pdu_flags: u8) -> CommonHeader {
        let mut f = pdu_flags;
        if self.hdgst {
            f |= flags::HDGSTF;
        }
        if self.ddgst {
            f |= flags::DDGSTF;
        }
        CommonHeader {
            pdu_type,
            flags: f,
            hlen: self.hlen as u8,
            pdo: self.pdo as u8,
            plen: self.plen as u32,
        }
    }

    /// Appends the PDU to `out`: `header` (the PDU header, its common header from
    /// [`PduFrame::header`]), the header digest, zero padding up to PDO, `data` and the data
    /// digest. `header` must be `hlen` bytes and `data` `data_len` bytes (or `None` for a
    /// frame without data).
    #[inline]
    pub fn encode(&self, out: &mut Vec<u8>, header: &[u8], data: Option<&[u8]>) {
        debug_assert_eq!(header.len(), self.hlen, "header length");
        debug_assert_eq!(data.map_or(0, <[u8]>::len), self.data_len, "data length");
        let start = out.len();
        out.extend_from_slice(header);
        if self.hdgst {
            out.extend_from_slice(&crc32c(header).to_le_bytes());
        }
        if let Some(data) = data {
            out.resize(start + self.pdo, 0);
            out.extend_from_slice(data);
            if self.ddgst {
                out.extend_from_slice(&crc32c(data).to_le_bytes());
            }
        }
    }

    /// Offset of the header digest within the PDU, if it has one.
    pub const fn header_digest_at(&self) -> Option<usize> {
        if self.hdgst {
            Some(self.hlen)
        } else {
            None
        }
    }

    /// Offset of the data digest within the PDU, if it has one.
    pub const fn data_digest_at(&self) -> Option<usize> {
        if self.ddgst {
            Some(self.pdo + self.data_len)
        } else {
            None
        }
    }
}

/// Frames a PDU whose header is given as bytes (`header`, HLEN long, its PDU-Type and
/// type-specific flags set): fills in the rest of its common header from the frame (HDGSTF,
/// DDGSTF, HLEN, PDO, PLEN), appends the PDU to `out` and returns the frame (where the
/// digests went, for a test target that corrupts them on purpose).
pub fn frame_pdu(
    out: &mut Vec<u8>,
    header: &mut [u8],
    data: Option<&[u8]>,
    digests: Digests,
    align: usize,
) -> PduFrame {
    let frame = PduFrame::new(header.len(), data.map(<[u8]>::len), digests, align);
    let ch = frame.header(header[0], header[1]);
    header[..CommonHeader::SIZE].copy_from_slice(&ch.to_bytes());
    frame.encode(out, header, data);
    frame
}

/// A rule of NVMe/TCP §3.6.1 that a received PDU header breaks. The messages end in
/// "(check: RULE)", the name the host's diagnostics and tests use for the rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PduError {
    /// The PDU type is none of NVMe/TCP 1.0's.
    #[error("unknown PDU type {pdu_type:#04x} (check: PDU type)")]
    UnknownType {
        /// The PDU-Type byte.
        pdu_type: u8,
    },
    /// HLEN is not the one of the PDU type.
    #[error("HLEN {hlen} (must be {expected}) (check: HLEN)")]
    Hlen {
        /// HLEN received.
        hlen: u8,
        /// HLEN of the type.
        expected: u8,
    },
    /// HDGSTF disagrees with the negotiated header digest.
    #[error(
        "HDGSTF flag is {flag} but header digests are {} (check: HDGSTF)",
        if *negotiated { "on" } else { "off" }
    )]
    HeaderDigestFlag {
        /// HDGSTF is set.
        flag: bool,
        /// Header digests were negotiated.
        negotiated: bool,
    },
    /// DDGSTF disagrees with the negotiated data digest.
    #[error("DDGSTF flag disagrees with the negotiated data digest (check: DDGSTF)")]
    DataDigestFlag,
    /// PLEN is above the receiver's limit.
    #[error("PLEN {plen} is beyond any transfer (check: PLEN)")]
    PlenTooLarge {
        /// PLEN received.
        plen: u32,
    },
    /// PLEN of a PDU without data is not its header (and header digest).
    #[error("PLEN {plen} (must be {expected}) (check: PLEN)")]
    Plen {
        /// PLEN received.
        plen: u32,
        /// Header and header digest length.
        expected: usize,
    },
    /// PDO points into the header or its digest.
    #[error("PDO {pdo} overlaps the header ({header} bytes) (check: PDO)")]
    PdoOverlap {
        /// PDO received.
        pdo: u8,
        /// Header and header digest length.
        header: usize,
    },
    /// PDO is not a multiple of the receiver's data alignment.
    #[error("PDO {pdo} is not aligned to {align} bytes (check: PDO alignment)")]
    PdoAlignment {
        /// PDO received.
        pdo: u8,
        /// Alignment the receiver asked for, bytes.
        align: usize,
    },
    /// DATAL (or the data PLEN leaves after PDO) does not fit PLEN and PDO, or is 0.
    #[error("DATAL {datal} does not fit PLEN {plen} and PDO {pdo} (check: DATAL)")]
    Datal {
        /// DATAL received (0 for a CapsuleCmd, which has no DATAL).
        datal: u32,
        /// PLEN received.
        plen: u32,
        /// PDO received.
        pdo: u8,
    },
    /// A digest does not match the bytes it covers.
    #[error("{kind} digest {received:#010x}, computed {computed:#010x} (check: digest)")]
    Digest {
        /// "header" or "data".
        kind: &'static str,
        /// CRC32C of the covered bytes.
        computed: u32,
        /// Digest received.
        received: u32,
    },
}

/// Checks the PDU type and HLEN of a common header; the header length of the type.
#[inline]
pub fn check_hlen(ch: &CommonHeader) -> Result<usize, PduError> {
    let Some(expected) = expected_hlen(ch.pdu_type) else {
        return Err(PduError::UnknownType {
            pdu_type: ch.pdu_type,
        });
    };
    if ch.hlen != expected {
        return Err(PduError::Hlen {
            hlen: ch.hlen,
            expected,
        });
    }
    Ok(usize::from(expected))
}

/// Whether a PDU of this type carries data at PDO: C2HData and H2CData always, a
/// CapsuleCmd when its PDO is set (in-capsule data).
#[inline]
pub const fn has_data(ch: &CommonHeader) -> bool {
    match ch.pdu_type {
        pdu_type::C2H_DATA | pdu_type::H2C_DATA => true,
        pdu_type::CAPSULE_CMD => ch.pdo != 0,
        _ => false,
    }
}

/// The layout of a received PDU, from its checked common header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PduLayout {
    /// Header length.
    pub hlen: usize,
    /// Header digest size (0 or [`DIGEST_SIZE`]).
    pub hd: usize,
    /// Bytes from the start of the PDU to the data (PDO), or to the end for a PDU without
    /// data: what must be read before the PDU can be handled.
    pub header_end: usize,
    /// PLEN.
    pub plen: usize,
}

impl PduLayout {
    /// Where the header digest is, if there is one.
    #[inline]
    pub fn header_digest(&self) -> Option<Range<usize>> {
        (self.hd != 0).then(|| self.hlen..self.hlen + self.hd)
    }
}

/// Checks HDGSTF, PLEN and PDO of a common header whose type and HLEN passed [`check_hlen`]
/// (`hlen`), under the negotiated `digests`, with PLEN at most `max_plen` and data aligned
/// to `align` bytes (pass 1 to accept any alignment). Termination requests are not for this
/// check: they carry no digests (NVMe/TCP §3.6.2.4) and the receiver reads them as they are.
#[inline]
pub fn check_layout(
    ch: &CommonHeader,
    hlen: usize,
    digests: Digests,
    max_plen: u32,
    align: usize,
) -> Result<PduLayout, PduError> {
    let hd = digests.header_size();
    if (ch.flags & flags::HDGSTF != 0) != digests.header {
        return Err(PduError::HeaderDigestFlag {
            flag: ch.flags & flags::HDGSTF != 0,
            negotiated: digests.header,
        });
    }
    if ch.plen > max_plen {
        return Err(PduError::PlenTooLarge { plen: ch.plen });
    }
    let plen = ch.plen as usize;
    let header_end = if has_data(ch) {
        let pdo = usize::from(ch.pdo);
        if pdo < hlen + hd {
            return Err(PduError::PdoOverlap {
                pdo: ch.pdo,
                header: hlen + hd,
            });
        }
        if pdo % align.max(1) != 0 {
            return Err(PduError::PdoAlignment { pdo: ch.pdo, align });
        }
        pdo
    } else {
        if plen != hlen + hd {
            return Err(PduError::Plen {
                plen: ch.plen,
                expected: hlen + hd,
            });
        }
        plen
    };
    Ok(PduLayout {
        hlen,
        hd,
        header_end,
        plen,
    })
}

/// Checks the data part of a PDU with data: DDGSTF against the negotiated data digest, and
/// `datal` (the DATAL field; `None` for a CapsuleCmd, whose data is what PLEN leaves)
/// non-zero and equal to PLEN - PDO - data digest. The data's place in the PDU.
#[inline]
pub fn check_data_length(
    ch: &CommonHeader,
    digests: Digests,
    datal: Option<u32>,
) -> Result<Range<usize>, PduError> {
    if (ch.flags & flags::DDGSTF != 0) != digests.data {
        return Err(PduError::DataDigestFlag);
    }
    let pdo = usize::from(ch.pdo);
    let plen = ch.plen as usize;
    let dd = digests.data_size();
    let implied = plen.checked_sub(pdo + dd).filter(|&n| n != 0);
    let bad = || PduError::Datal {
        datal: datal.unwrap_or(0),
        plen: ch.plen,
        pdo: ch.pdo,
    };
    match (implied, datal) {
        (Some(n), None) => Ok(pdo..pdo + n),
        (Some(n), Some(d)) if d as usize == n => Ok(pdo..pdo + n),
        _ => Err(bad()),
    }
}

/// Checks a received digest against the bytes it covers.
#[inline]
pub fn check_digest(kind: &'static str, covered: &[u8], received: [u8; 4]) -> Result<(), PduError> {
    let computed = crc32c(covered);
    let received = u32::from_le_bytes(received);
    if computed == received {
        Ok(())
    } else {
        Err(PduError::Digest {
            kind,
            computed,
            received,
        })
    }
}
