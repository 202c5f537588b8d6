//! Queue entries: the 64-byte Submission Queue Entry (NVMe Base 2.0 §4.2), the 16-byte
//! Completion Queue Entry (§4.6), the Dataset Management range (NVM CS §3.2.3) and the Copy
//! command's Source Range entry (NVM CS §3.3.2.1, descriptor format 0h).
//!
//! These types describe the wire layout only. Whoever reads them out of DMA memory must do so
//! with volatile/atomic access of its own; `from_bytes`/`to_bytes` give a safe byte-level codec.

use crate::status::Status;

/// Size of a Submission Queue Entry in bytes.
pub const SQE_SIZE: usize = 64;
/// Size of a Completion Queue Entry in bytes.
pub const CQE_SIZE: usize = 16;
/// log2 of [`SQE_SIZE`], the value for CC.IOSQES.
pub const SQES_LOG2: u8 = 6;
/// log2 of [`CQE_SIZE`], the value for CC.IOCQES.
pub const CQES_LOG2: u8 = 4;
/// Largest number of ranges in one Dataset Management command (NR is 8 bits, 0-based).
pub const DSM_MAX_RANGES: usize = 256;

/// Largest number of Source Range entries in one Copy command (NR is 8 bits, 0-based; NVM CS
/// §3.3.2). A namespace may allow fewer (Identify Namespace MSRC).
pub const COPY_MAX_RANGES: usize = 256;

const _: () = assert!(1 << SQES_LOG2 == SQE_SIZE);
const _: () = assert!(1 << CQES_LOG2 == CQE_SIZE);

wire_struct! {
    /// Submission Queue Entry (§4.2, Figure 88 "Common Command Format").
    ///
    /// CDW0: opcode bits 7:0, FUSE bits 9:8, PSDT bits 15:14, command identifier bits 31:16.
    #[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
    pub struct SubmissionEntry {
        /// Command Dword 0: opcode, fused operation, PRP/SGL selector, command identifier.
        cdw0 @ 0: u32,
        /// Namespace Identifier (0 when the command does not use one).
        nsid @ 4: u32,
        /// Command Dword 2 (command specific).
        cdw2 @ 8: u32,
        /// Command Dword 3 (command specific).
        cdw3 @ 12: u32,
        /// Metadata Pointer.
        mptr @ 16: u64,
        /// Data Pointer: PRP Entry 1.
        prp1 @ 24: u64,
        /// Data Pointer: PRP Entry 2 or PRP list pointer.
        prp2 @ 32: u64,
        /// Command Dword 10 (command specific).
        cdw10 @ 40: u32,
        /// Command Dword 11 (command specific).
        cdw11 @ 44: u32,
        /// Command Dword 12 (command specific).
        cdw12 @ 48: u32,
        /// Command Dword 13 (command specific).
        cdw13 @ 52: u32,
        /// Command Dword 14 (command specific).
        cdw14 @ 56: u32,
        /// Command Dword 15 (command specific).
        cdw15 @ 60: u32,
    }
    size 64;
}

const _: () = assert!(SubmissionEntry::SIZE == SQE_SIZE);

impl SubmissionEntry {
    const OPCODE_MASK: u32 = 0xFF;
    const FUSE_SHIFT: u32 = 8;
    const FUSE_MASK: u32 = 0b11;
    const PSDT_SHIFT: u32 = 14;
    const PSDT_MASK: u32 = 0b11;
    const CID_SHIFT: u32 = 16;

    /// An all-zero entry with the given opcode (PRPs, not fused, command id 0).
    pub const fn new(opcode: u8) -> Self {
        SubmissionEntry {
            cdw0: opcode as u32,
            nsid: 0,
            cdw2: 0,
            cdw3: 0,
            mptr: 0,
            prp1: 0,
            prp2: 0,
            cdw10: 0,
            cdw11: 0,
            cdw12: 0,
            cdw13: 0,
            cdw14: 0,
            cdw15: 0,
        }
    }

    /// Opcode (CDW0 bits 7:0).
    pub const fn opcode(&self) -> u8 {
        (self.cdw0 & Self::OPCODE_MASK) as u8
    }

    /// Command Identifier (CDW0 bits 31:16).
    pub const fn cid(&self) -> u16 {
        (self.cdw0 >> Self::CID_SHIFT) as u16
    }

    /// Sets the Command Identifier, leaving the rest of CDW0 unchanged.
    pub fn set_cid(&mut self, cid: u16) {
        self.cdw0 = (self.cdw0 & !(u32::from(u16::MAX) << Self::CID_SHIFT))
            | u32::from(cid) << Self::CID_SHIFT;
    }

    /// Fused Operation (CDW0 bits 9:8): 0 normal, 1 first, 2 second of a fused pair.
    pub const fn fuse(&self) -> u8 {
        ((self.cdw0 >> Self::FUSE_SHIFT) & Self::FUSE_MASK) as u8
    }

    /// Sets the Fused Operation field (CDW0 bits 9:8), leaving the rest of CDW0 unchanged.
    #[inline(always)]
    pub fn set_fuse(&mut self, fuse: crate::sgl::Fuse) {
        self.cdw0 = (self.cdw0 & !(Self::FUSE_MASK << Self::FUSE_SHIFT))
            | (fuse as u32) << Self::FUSE_SHIFT;
    }

    /// PRP or SGL for Data Transfer (CDW0 bits 15:14): 0 means PRPs (see [`crate::sgl::Psdt`]).
    pub const fn psdt(&self) -> u8 {
        ((self.cdw0 >> Self::PSDT_SHIFT) & Self::PSDT_MASK) as u8
    }

    /// Sets PSDT (CDW0 bits 15:14), leaving the rest of CDW0 unchanged.
    #[inline(always)]
    pub fn set_psdt(&mut self, psdt: crate::sgl::Psdt) {
        self.cdw0 = (self.cdw0 & !(Self::PSDT_MASK << Self::PSDT_SHIFT))
            | (psdt as u32) << Self::PSDT_SHIFT;
    }
}

wire_struct! {
    /// Completion Queue Entry (§4.6, Figure 89 "Common Completion Queue Entry Layout").
    ///
    /// `status` holds the Phase Tag in bit 0 and the Status Field in bits 15:1.
    #[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
    pub struct CompletionEntry {
        /// Dword 0: command specific result.
        dw0 @ 0: u32,
        /// Dword 1: command specific result.
        dw1 @ 4: u32,
        /// SQ Head Pointer: the controller's current head of the submission queue.
        sq_head @ 8: u16,
        /// SQ Identifier the completed command was submitted to.
        sq_id @ 10: u16,
        /// Command Identifier of the completed command.
        cid @ 12: u16,
        /// Phase Tag (bit 0) and Status Field (bits 15:1).
        status @ 14: u16,
    }
    size 16;
}

const _: () = assert!(CompletionEntry::SIZE == CQE_SIZE);

impl CompletionEntry {
    const PHASE_BIT: u16 = 1;

    /// Builds a completion (for emulated controllers). `dw1` is zero.
    pub const fn new(
        dw0: u32,
        sq_head: u16,
        sq_id: u16,
        cid: u16,
        status: Status,
        phase: bool,
    ) -> Self {
        CompletionEntry {
            dw0,
            dw1: 0,
            sq_head,
            sq_id,
            cid,
            status: status.to_cqe(phase),
        }
    }

    /// Phase Tag: flips each time the controller wraps the completion queue.
    pub const fn phase(&self) -> bool {
        self.status & Self::PHASE_BIT != 0
    }

    /// The decoded Status Field.
    pub const fn status(&self) -> Status {
        Status::from_cqe(self.status)
    }
}

wire_struct! {
    /// Dataset Management range (NVM CS §3.2.3, Figure "Dataset Management – Range Definition").
    #[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
    pub struct DsmRange {
        /// Context Attributes (access hints).
        attributes @ 0: u32,
        /// Length in logical blocks (1-based; 0 is an empty range).
        nlb @ 4: u32,
        /// Starting LBA.
        slba @ 8: u64,
    }
    size 16;
}

impl DsmRange {
    /// A range of `nlb` blocks starting at `slba`, with no context attributes.
    pub const fn new(slba: u64, nlb: u32) -> Self {
        DsmRange {
            attributes: 0,
            nlb,
            slba,
        }
    }
}

wire_struct! {
    /// Copy – Source Range Entry, Copy Descriptor Format 0h (NVM CS §3.3.2.1, Figure 34 in NVM
    /// CS 1.0): one source range of a Copy command. The command's data buffer holds NR + 1 of
    /// them back to back. The tag fields are checked only on a namespace formatted with
    /// protection information (PRINFOR in the command says which).
    #[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
    pub struct CopySourceRange {
        /// Reserved (bytes 0..8).
        rsvd0 @ 0: [u8; 8],
        /// Starting LBA of the source range.
        slba @ 8: u64,
        /// Number of Logical Blocks, 0-based (0 means one block).
        nlb @ 16: u16,
        /// Reserved (bytes 18..24).
        rsvd18 @ 18: [u8; 6],
        /// Expected Initial Logical Block Reference Tag (EILBRT).
        eilbrt @ 24: u32,
        /// Expected Logical Block Application Tag (ELBAT).
        elbat @ 28: u16,
        /// Expected Logical Block Application Tag Mask (ELBATM).
        elbatm @ 30: u16,
    }
    size 32;
}

impl CopySourceRange {
    /// A source range of `blocks` (1-based, 1..=65536) blocks from `slba`, tags zero.
    pub const fn new(slba: u64, blocks: u32) -> Self {
        CopySourceRange {
            rsvd0: [0; 8],
            slba,
            nlb: blocks.wrapping_sub(1) as u16,
            rsvd18: [0; 6],
            eilbrt: 0,
            elbat: 0,
            elbatm: 0,
        }
    }

    /// Number of blocks of the range (NLB + 1).
    pub const fn blocks(&self) -> u32 {
        self.nlb as u32 + 1
    }
}

wire_struct! {
    /// Copy source range entry, Copy Descriptor Format 1h (NVM CS 1.0 §3.3.2.1, Figure
    /// "Source Range Entries Copy Descriptor Format 1h"): the same source range as format 0h
    /// with room for the protection information tags of the 64-bit guard formats (a 48-bit
    /// reference tag and the storage tag in one 80-bit field). 40 bytes.
    #[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
    pub struct CopySourceRangeFormat1 {
        /// Reserved (bytes 0..8).
        rsvd0 @ 0: [u8; 8],
        /// Starting LBA of the source range.
        slba @ 8: u64,
        /// Number of Logical Blocks, 0-based (0 means one block).
        nlb @ 16: u16,
        /// Reserved (bytes 18..26).
        rsvd18 @ 18: [u8; 8],
        /// Expected Logical Block Storage Tag and Expected Initial Logical Block Reference
        /// Tag (ELBST/EILBRT), 80 bits little endian: the reference tag in the low bits.
        elbst_eilbrt @ 26: [u8; 10],
        /// Expected Logical Block Application Tag (ELBAT).
        elbat @ 36: u16,
        /// Expected Logical Block Application Tag Mask (ELBATM).
        elbatm @ 38: u16,
    }
    size 40;
}

impl CopySourceRangeFormat1 {
    /// A source range of `blocks` (1-based, 1..=65536) blocks from `slba`, tags zero.
    pub const fn new(slba: u64, blocks: u32) -> Self {
        CopySourceRangeFormat1 {
            rsvd0: [0; 8],
            slba,
            nlb: blocks.wrapping_sub(1) as u16,
            rsvd18: [0; 8],
            elbst_eilbrt: [0; 10],
            elbat: 0,
            elbatm: 0,
        }
    }

    /// Number of blocks of the range (NLB + 1).
    pub const fn blocks(&self) -> u32 {
        self.nlb as u32 + 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::{generic, StatusCodeType};

    #[test]
    fn sqe_cdw0_fields() {
        let mut sqe = SubmissionEntry::new(0x02);
        assert_eq!(sqe.opcode(), 0x02);
        assert_eq!(sqe.cid(), 0);
        sqe.set_cid(0xBEEF);
        assert_eq!(sqe.cid(), 0xBEEF);
        assert_eq!(sqe.opcode(), 0x02);
        assert_eq!(sqe.cdw0, 0xBEEF_0002);
        sqe.set_cid(1);
        assert_eq!(sqe.cdw0, 0x0001_0002);
        sqe.cdw0 |= 0b10 << 8 | 0b01 << 14;
        assert_eq!(sqe.fuse(), 2);
        assert_eq!(sqe.psdt(), 1);
        assert_eq!(sqe.cid(), 1);
        sqe.set_psdt(crate::sgl::Psdt::SglMptrSgl);
        assert_eq!((sqe.psdt(), sqe.fuse(), sqe.cid()), (2, 2, 1));
        sqe.set_psdt(crate::sgl::Psdt::Prp);
        assert_eq!(sqe.psdt(), 0);
        sqe.set_fuse(crate::sgl::Fuse::First);
        assert_eq!((sqe.fuse(), sqe.cid(), sqe.opcode()), (1, 1, 0x02));
        sqe.set_fuse(crate::sgl::Fuse::Normal);
        assert_eq!(sqe.fuse(), 0);
    }

    #[test]
    fn sqe_bytes_round_trip_and_layout() {
        let sqe = SubmissionEntry {
            cdw0: 0x1122_3344,
            nsid: 7,
            mptr: 0x0102_0304_0506_0708,
            prp1: 0xAABB_CCDD_0000_1000,
            cdw10: 0xDEAD_BEEF,
            cdw15: 0xF00D,
            ..SubmissionEntry::default()
        };
        let b = sqe.to_bytes();
        assert_eq!(&b[0..4], &[0x44, 0x33, 0x22, 0x11]);
        assert_eq!(&b[4..8], &[7, 0, 0, 0]);
        assert_eq!(&b[16..24], &[8, 7, 6, 5, 4, 3, 2, 1]);
        assert_eq!(&b[24..32], &0xAABB_CCDD_0000_1000u64.to_le_bytes());
        assert_eq!(&b[40..44], &[0xEF, 0xBE, 0xAD, 0xDE]);
        assert_eq!(&b[60..64], &[0x0D, 0xF0, 0, 0]);
        assert_eq!(SubmissionEntry::from_bytes(&b), sqe);
    }

    #[test]
    fn cqe_status_and_phase() {
        let st = Status::new(0, generic::LBA_OUT_OF_RANGE, true);
        let cqe = CompletionEntry::new(0x55, 3, 1, 42, st, true);
        assert!(cqe.phase());
        assert_eq!(cqe.status(), st);
        assert_eq!(cqe.status().sct(), StatusCodeType::Generic);
        assert_eq!(cqe.status().sc(), 0x80);
        assert!(cqe.status().dnr());
        assert_eq!(cqe.status, (1 << 15) | (0x80 << 1) | 1);
        let b = cqe.to_bytes();
        assert_eq!(&b[8..16], &[3, 0, 1, 0, 42, 0, 0x01, 0x81]);
        assert_eq!(CompletionEntry::from_bytes(&b), cqe);
        let ok = CompletionEntry::new(0, 0, 0, 0, Status::SUCCESS, false);
        assert!(!ok.phase());
        assert!(ok.status().is_success());
    }

    #[test]
    fn dsm_range_layout() {
        let r = DsmRange::new(0x1_0000_0000, 8);
        let b = r.to_bytes();
        assert_eq!(&b[0..4], &[0; 4]);
        assert_eq!(&b[4..8], &[8, 0, 0, 0]);
        assert_eq!(&b[8..16], &[0, 0, 0, 0, 1, 0, 0, 0]);
        assert_eq!(DsmRange::from_bytes(&b), r);
    }

    #[test]
    fn copy_source_range_layout() {
        let r = CopySourceRange {
            eilbrt: 0x1122_3344,
            elbat: 0x5566,
            elbatm: 0x7788,
            ..CopySourceRange::new(0x0102_0304_0506_0708, 0x1_0000)
        };
        assert_eq!(CopySourceRange::SIZE, 32);
        let b = r.to_bytes();
        assert_eq!(&b[0..8], &[0; 8]);
        assert_eq!(&b[8..16], &[8, 7, 6, 5, 4, 3, 2, 1]);
        // NLB is 0-based: 65536 blocks encode as FFFFh.
        assert_eq!(&b[16..18], &[0xFF, 0xFF]);
        assert_eq!(&b[18..24], &[0; 6]);
        assert_eq!(&b[24..28], &[0x44, 0x33, 0x22, 0x11]);
        assert_eq!(&b[28..32], &[0x66, 0x55, 0x88, 0x77]);
        assert_eq!(CopySourceRange::from_bytes(&b), r);
        let f1 = CopySourceRangeFormat1 {
            elbst_eilbrt: [1, 2, 3, 4, 5, 6, 0, 0, 0, 0],
            elbat: 0x5566,
            ..CopySourceRangeFormat1::new(0x0102_0304_0506_0708, 3)
        };
        assert_eq!(CopySourceRangeFormat1::SIZE, 40);
        let b = f1.to_bytes();
        assert_eq!(&b[8..16], &[8, 7, 6, 5, 4, 3, 2, 1]);
        assert_eq!(&b[16..18], &[2, 0]);
        assert_eq!(&b[18..26], &[0; 8]);
        assert_eq!(&b[26..32], &[1, 2, 3, 4, 5, 6]);
        assert_eq!(&b[36..40], &[0x66, 0x55, 0, 0]);
        assert_eq!(CopySourceRangeFormat1::from_bytes(&b), f1);
        assert_eq!(r.blocks(), 65536);
        assert_eq!(CopySourceRange::new(9, 1).nlb, 0);
    }
}
