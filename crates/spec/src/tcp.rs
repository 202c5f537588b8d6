//! NVMe/TCP transport PDUs (NVMe over TCP Transport Specification 1.0, "NVMe/TCP" below).
//!
//! Every PDU starts with the 8-byte common header ([`CommonHeader`], NVMe/TCP §3.6.1); the PDU
//! specific header follows, then an optional header digest (CRC32C of the header, 4 bytes),
//! optional padding up to the data offset (PDO), the data, and an optional data digest
//! (CRC32C of the data, 4 bytes). All fields are little-endian. The structs below describe
//! the wire layout; `codec` (re-exported here) frames PDUs and checks received headers, the
//! one PDU codec of both the host and the test target.

use crate::queue::{CompletionEntry, SubmissionEntry};

mod codec;
#[cfg(test)]
mod codec_tests;
pub use codec::{
    check_data_length, check_digest, check_hlen, check_layout, crc32c, crc32c_append, frame_pdu,
    has_data, pda_align, Digests, PduError, PduFrame, PduLayout,
};

/// PDU types (NVMe/TCP §3.6.1, Figure 12 "Common Header": PDU-Type).
pub mod pdu_type {
    /// Initialize Connection Request (host to controller).
    pub const IC_REQ: u8 = 0x00;
    /// Initialize Connection Response (controller to host).
    pub const IC_RESP: u8 = 0x01;
    /// Host to Controller Terminate Connection Request.
    pub const H2C_TERM_REQ: u8 = 0x02;
    /// Controller to Host Terminate Connection Request.
    pub const C2H_TERM_REQ: u8 = 0x03;
    /// Command Capsule.
    pub const CAPSULE_CMD: u8 = 0x04;
    /// Response Capsule.
    pub const CAPSULE_RESP: u8 = 0x05;
    /// Host to Controller Data.
    pub const H2C_DATA: u8 = 0x06;
    /// Controller to Host Data.
    pub const C2H_DATA: u8 = 0x07;
    /// Ready to Transfer.
    pub const R2T: u8 = 0x09;

    /// Name of a PDU type, for messages.
    pub fn name(t: u8) -> &'static str {
        match t {
            IC_REQ => "ICReq",
            IC_RESP => "ICResp",
            H2C_TERM_REQ => "H2CTermReq",
            C2H_TERM_REQ => "C2HTermReq",
            CAPSULE_CMD => "CapsuleCmd",
            CAPSULE_RESP => "CapsuleResp",
            H2C_DATA => "H2CData",
            C2H_DATA => "C2HData",
            R2T => "R2T",
            _ => "unknown PDU type",
        }
    }
}

/// Common header FLAGS bits (NVMe/TCP §3.6.1, and the PDU sections for the type-specific bits).
pub mod flags {
    /// HDGSTF: a header digest follows the PDU header.
    pub const HDGSTF: u8 = 1 << 0;
    /// DDGSTF: a data digest follows the PDU data.
    pub const DDGSTF: u8 = 1 << 1;
    /// LAST_PDU (H2CData §3.6.2.8, C2HData §3.6.2.9): the last data PDU of the transfer.
    pub const LAST_PDU: u8 = 1 << 2;
    /// SUCCESS (C2HData §3.6.2.9): the command completed successfully; no CapsuleResp follows.
    /// Valid only with LAST_PDU.
    pub const SUCCESS: u8 = 1 << 3;
}

/// Digest selection bits of ICReq/ICResp DGST (NVMe/TCP §3.6.2.2).
pub mod dgst {
    /// HDGST_ENABLE: header digests on every PDU after ICResp.
    pub const HEADER: u8 = 1 << 0;
    /// DDGST_ENABLE: data digests on every PDU with data after ICResp.
    pub const DATA: u8 = 1 << 1;
}

/// Fatal Error Status of a termination request (NVMe/TCP §3.6.2.4, Figure 18).
pub mod fes {
    /// Invalid PDU Header Field (FEI: byte offset of the field).
    pub const INVALID_HEADER_FIELD: u16 = 0x01;
    /// PDU Sequence Error.
    pub const PDU_SEQUENCE_ERROR: u16 = 0x02;
    /// Header Digest Error.
    pub const HEADER_DIGEST_ERROR: u16 = 0x03;
    /// Data Transfer Out of Range.
    pub const DATA_OUT_OF_RANGE: u16 = 0x04;
    /// Data Transfer Limit Exceeded.
    pub const DATA_LIMIT_EXCEEDED: u16 = 0x05;
    /// Unsupported parameter (FEI: byte offset of the parameter).
    pub const UNSUPPORTED_PARAMETER: u16 = 0x06;

    /// Name of a fatal error status, for messages.
    pub fn name(v: u16) -> &'static str {
        match v {
            INVALID_HEADER_FIELD => "invalid PDU header field",
            PDU_SEQUENCE_ERROR => "PDU sequence error",
            HEADER_DIGEST_ERROR => "header digest error",
            DATA_OUT_OF_RANGE => "data transfer out of range",
            DATA_LIMIT_EXCEEDED => "data transfer limit exceeded",
            UNSUPPORTED_PARAMETER => "unsupported parameter",
            _ => "unknown fatal error status",
        }
    }
}

/// PDU Format Version of ICReq/ICResp (NVMe/TCP §3.6.2.2): version 1.0 is 0.
pub const PFV_1_0: u16 = 0;
/// Size of a header or data digest (CRC32C) in bytes (NVMe/TCP §3.3.2).
pub const DIGEST_SIZE: usize = 4;
/// Unit of HPDA/CPDA: data alignment is `(xPDA + 1) * 4` bytes (NVMe/TCP §3.6.2.2).
pub const PDA_UNIT: usize = 4;
/// Largest HPDA/CPDA value (31: 128-byte alignment).
pub const PDA_MAX: u8 = 31;
/// Smallest MAXH2CDATA a controller may report (NVMe/TCP §3.6.2.3).
pub const MIN_MAXH2CDATA: u32 = 4096;
/// Largest HLEN of a termination request plus its error data (NVMe/TCP §3.6.2.4: the
/// offending header, at most 152 bytes, follows the 24-byte header).
pub const TERM_REQ_MAX_PLEN: u32 = 152;
/// Well-known TCP port of NVMe/TCP I/O controllers (IANA "nvme-tcp"; NVMe/TCP §3.1).
pub const DEFAULT_PORT: u16 = 4420;

wire_struct! {
    /// Common header of every PDU (NVMe/TCP §3.6.1, Figure 12).
    #[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
    pub struct CommonHeader {
        /// PDU type (see [`pdu_type`]).
        pdu_type @ 0: u8,
        /// Flags (see [`flags`]).
        flags @ 1: u8,
        /// Header length: size of the PDU header including this common header, excluding the
        /// header digest.
        hlen @ 2: u8,
        /// PDU data offset from the start of the PDU (0 when the PDU carries no data).
        pdo @ 3: u8,
        /// Total PDU length in bytes: header, digests, padding and data.
        plen @ 4: u32,
    }
    size 8;
}

wire_struct! {
    /// ICReq, Initialize Connection Request (NVMe/TCP §3.6.2.2, Figure 14).
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct IcReq {
        /// Common header (pdu_type IC_REQ, hlen 128, plen 128).
        ch @ 0: CommonHeader,
        /// PDU Format Version ([`PFV_1_0`]).
        pfv @ 8: u16,
        /// Host PDU Data Alignment: the controller must align C2HData data to
        /// `(hpda + 1) * 4` bytes.
        hpda @ 10: u8,
        /// Digests the host asks for (see [`dgst`]).
        dgst @ 11: u8,
        /// Maximum outstanding R2Ts per command, 0's based.
        maxr2t @ 12: u32,
        /// Reserved.
        rsvd @ 16: [u8; 112],
    }
    size 128;
}

wire_struct! {
    /// ICResp, Initialize Connection Response (NVMe/TCP §3.6.2.3, Figure 15).
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct IcResp {
        /// Common header (pdu_type IC_RESP, hlen 128, plen 128).
        ch @ 0: CommonHeader,
        /// PDU Format Version.
        pfv @ 8: u16,
        /// Controller PDU Data Alignment: the host must align H2CData and in-capsule data to
        /// `(cpda + 1) * 4` bytes.
        cpda @ 10: u8,
        /// Digests enabled for the connection (see [`dgst`]).
        dgst @ 11: u8,
        /// Largest data length of one H2CData PDU, in bytes (at least [`MIN_MAXH2CDATA`]).
        maxh2cdata @ 12: u32,
        /// Reserved.
        rsvd @ 16: [u8; 112],
    }
    size 128;
}

wire_struct! {
    /// H2CTermReq and C2HTermReq header (NVMe/TCP §3.6.2.4-5, Figure 17). The header of the
    /// PDU in error follows as data.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct TermReq {
        /// Common header (pdu_type H2C_TERM_REQ or C2H_TERM_REQ, hlen 24).
        ch @ 0: CommonHeader,
        /// Fatal Error Status (see [`fes`]).
        fes @ 8: u16,
        /// Fatal Error Information (a byte offset for FES 1 and 6), little-endian, unaligned.
        fei @ 10: [u8; 4],
        /// Reserved.
        rsvd @ 14: [u8; 10],
    }
    size 24;
}

impl TermReq {
    /// Fatal Error Information as a number.
    pub fn fei(&self) -> u32 {
        u32::from_le_bytes(self.fei)
    }
}

wire_struct! {
    /// CapsuleCmd header: common header and the 64-byte SQE (NVMe/TCP §3.6.2.6, Figure 20).
    /// In-capsule data may follow at PDO.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct CapsuleCmd {
        /// Common header (pdu_type CAPSULE_CMD, hlen 72).
        ch @ 0: CommonHeader,
        /// The submission queue entry (an SGL data block descriptor in the data pointer).
        sqe @ 8: SubmissionEntry,
    }
    size 72;
}

wire_struct! {
    /// CapsuleResp: common header and the 16-byte CQE (NVMe/TCP §3.6.2.7, Figure 21).
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct CapsuleResp {
        /// Common header (pdu_type CAPSULE_RESP, hlen 24).
        ch @ 0: CommonHeader,
        /// The completion queue entry (the phase tag has no meaning on fabrics).
        cqe @ 8: CompletionEntry,
    }
    size 24;
}

wire_struct! {
    /// H2CData header (NVMe/TCP §3.6.2.8, Figure 22): data the host sends in answer to an R2T.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct H2CData {
        /// Common header (pdu_type H2C_DATA, hlen 24; LAST_PDU on the last PDU of the R2T).
        ch @ 0: CommonHeader,
        /// Command Capsule CID of the command the data belongs to.
        cccid @ 8: u16,
        /// Transfer Tag from the R2T.
        ttag @ 10: u16,
        /// Offset of this PDU's data within the command's data.
        datao @ 12: u32,
        /// Length of this PDU's data.
        datal @ 16: u32,
        /// Reserved.
        rsvd @ 20: u32,
    }
    size 24;
}

wire_struct! {
    /// C2HData header (NVMe/TCP §3.6.2.9, Figure 23): read data for a command.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct C2HData {
        /// Common header (pdu_type C2H_DATA, hlen 24; LAST_PDU, SUCCESS).
        ch @ 0: CommonHeader,
        /// Command Capsule CID of the command the data belongs to.
        cccid @ 8: u16,
        /// Reserved.
        rsvd1 @ 10: u16,
        /// Offset of this PDU's data within the command's data.
        datao @ 12: u32,
        /// Length of this PDU's data.
        datal @ 16: u32,
        /// Reserved.
        rsvd2 @ 20: u32,
    }
    size 24;
}

wire_struct! {
    /// R2T, Ready to Transfer (NVMe/TCP §3.6.2.10, Figure 24): the controller asks for
    /// `r2tl` bytes of a command's data starting at `r2to`.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct R2T {
        /// Common header (pdu_type R2T, hlen 24).
        ch @ 0: CommonHeader,
        /// Command Capsule CID.
        cccid @ 8: u16,
        /// Transfer Tag, echoed in the H2CData PDUs.
        ttag @ 10: u16,
        /// R2T Offset: where in the command's data the requested range starts.
        r2to @ 12: u32,
        /// R2T Length: bytes requested.
        r2tl @ 16: u32,
        /// Reserved.
        rsvd @ 20: u32,
    }
    size 24;
}

/// HLEN of ICReq/ICResp.
pub const IC_HLEN: u8 = IcReq::SIZE as u8;
/// HLEN of CapsuleCmd.
pub const CAPSULE_CMD_HLEN: u8 = CapsuleCmd::SIZE as u8;
/// HLEN of CapsuleResp, H2CData, C2HData, R2T and the termination requests.
pub const SHORT_HLEN: u8 = 24;

const _: () = {
    assert!(IcResp::SIZE == IcReq::SIZE);
    assert!(CapsuleResp::SIZE == SHORT_HLEN as usize);
    assert!(H2CData::SIZE == SHORT_HLEN as usize);
    assert!(C2HData::SIZE == SHORT_HLEN as usize);
    assert!(R2T::SIZE == SHORT_HLEN as usize);
    assert!(TermReq::SIZE == SHORT_HLEN as usize);
};

/// The header length a PDU of this type must have, or `None` for an unknown type.
pub fn expected_hlen(pdu_type: u8) -> Option<u8> {
    match pdu_type {
        pdu_type::IC_REQ | pdu_type::IC_RESP => Some(IC_HLEN),
        pdu_type::CAPSULE_CMD => Some(CAPSULE_CMD_HLEN),
        pdu_type::H2C_TERM_REQ
        | pdu_type::C2H_TERM_REQ
        | pdu_type::CAPSULE_RESP
        | pdu_type::H2C_DATA
        | pdu_type::C2H_DATA
        | pdu_type::R2T => Some(SHORT_HLEN),
        _ => None,
    }
}

/// SGL descriptor identifiers for the data pointer of a command capsule (NVMe Base 2.0
/// §4.1.2.2, Figure 119/120; NVMe/TCP §3.3.4).
pub mod sgl {
    /// SGL Data Block descriptor, sub type Offset: in-capsule data at `address` bytes into
    /// the capsule's data (type 0h, sub type 1h).
    pub const IN_CAPSULE_DATA: u8 = 0x01;
    /// Transport SGL Data Block descriptor, sub type Transport Specific: data moved by
    /// R2T/H2CData or C2HData (type 5h, sub type Ah).
    pub const TRANSPORT_DATA: u8 = 0x5A;
    /// Bit position of the identifier byte within the second quadword of the descriptor.
    pub const ID_SHIFT: u32 = 56;
    /// PSDT value 01b in CDW0 bits 15:14: SGLs for data (NVMe Base 2.0 Figure 88).
    pub const PSDT_SGL: u32 = 1 << 14;
}

impl SubmissionEntry {
    /// Sets the data pointer to a single SGL data block descriptor (`id` from [`sgl`]) of
    /// `len` bytes at `address`, and PSDT to SGL.
    pub fn set_sgl(&mut self, id: u8, address: u64, len: u32) {
        self.cdw0 |= sgl::PSDT_SGL;
        self.prp1 = address;
        self.prp2 = u64::from(len) | (u64::from(id) << sgl::ID_SHIFT);
    }

    /// Length of the SGL data block descriptor in the data pointer.
    pub const fn sgl_len(&self) -> u32 {
        self.prp2 as u32
    }

    /// Identifier byte of the SGL descriptor in the data pointer.
    pub const fn sgl_id(&self) -> u8 {
        (self.prp2 >> sgl::ID_SHIFT) as u8
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_field_positions() {
        let r2t = R2T {
            ch: CommonHeader {
                pdu_type: pdu_type::R2T,
                flags: 0,
                hlen: SHORT_HLEN,
                pdo: 0,
                plen: 24,
            },
            cccid: 0x1234,
            ttag: 7,
            r2to: 4096,
            r2tl: 8192,
            rsvd: 0,
        };
        let b = r2t.to_bytes();
        assert_eq!(b[0], 0x09);
        assert_eq!(b[2], 24);
        assert_eq!(&b[4..8], &24u32.to_le_bytes());
        assert_eq!(&b[8..10], &0x1234u16.to_le_bytes());
        assert_eq!(&b[12..16], &4096u32.to_le_bytes());
        assert_eq!(R2T::from_bytes(&b), r2t);

        let mut t = TermReq::from_bytes(&[0; 24]);
        t.fei = 256u32.to_le_bytes();
        let b = t.to_bytes();
        assert_eq!(&b[10..14], &256u32.to_le_bytes());
        assert_eq!(TermReq::from_bytes(&b).fei(), 256);
    }

    #[test]
    fn sgl_descriptor_layout() {
        let mut sqe = SubmissionEntry::new(0x01);
        sqe.set_sgl(sgl::TRANSPORT_DATA, 0, 4096);
        let b = sqe.to_bytes();
        assert_eq!(b[1] & 0xC0, 0x40, "PSDT 01b");
        assert_eq!(&b[32..36], &4096u32.to_le_bytes());
        assert_eq!(b[39], 0x5A);
        assert_eq!(sqe.sgl_len(), 4096);
        assert_eq!(sqe.sgl_id(), sgl::TRANSPORT_DATA);
    }

    #[test]
    fn header_lengths() {
        assert_eq!(expected_hlen(pdu_type::CAPSULE_CMD), Some(72));
        assert_eq!(expected_hlen(pdu_type::IC_RESP), Some(128));
        assert_eq!(expected_hlen(pdu_type::C2H_DATA), Some(24));
        assert_eq!(expected_hlen(0x08), None);
        assert_eq!(expected_hlen(0xFF), None);
    }
}
