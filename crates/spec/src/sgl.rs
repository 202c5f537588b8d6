//! Scatter Gather Lists (NVMe Base 2.0 §4.1.2 "Scatter Gather List (SGL)").
//!
//! An SGL describes a data buffer as a chain of 16-byte descriptors. The first one, SGL
//! Descriptor 1, lives in the command's Data Pointer (SQE bytes 24-39, where PRP Entry 1 and 2
//! sit otherwise); the command says which of the two it carries in CDW0.PSDT ([`Psdt`]).
//! Descriptor 1 is either a Data Block (the whole buffer, contiguous) or a Segment / Last
//! Segment descriptor pointing to an array of descriptors in memory (an *SGL segment*); every
//! descriptor in a segment is a Data Block except the last, which may point to the next
//! segment (Segment) or to the final one (Last Segment).
//!
//! Over PCIe, SGLs are for I/O commands only: Admin commands use PRPs (§4.1.2; PSDT of an
//! Admin command is 00b).

/// Size of one SGL descriptor in bytes (§4.1.2.1, Figure "Generic SGL Descriptor Format").
pub const SGL_DESCRIPTOR_SIZE: usize = 16;

wire_struct! {
    /// One SGL descriptor (§4.1.2.1, Figure "Generic SGL Descriptor Format"), in the layout of
    /// the Data Block, Segment and Last Segment descriptors (§4.1.2.2): an address, a length
    /// in bytes, three reserved bytes and the SGL Identifier (byte 15: descriptor type in
    /// bits 7:4, sub type in bits 3:0).
    #[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
    pub struct SglDescriptor {
        /// Address of the data (Data Block) or of the next segment (Segment, Last Segment).
        address @ 0: u64,
        /// Length in bytes of the data or of the next segment.
        length @ 8: u32,
        /// Reserved (bytes 12..15).
        rsvd12 @ 12: [u8; 3],
        /// SGL Identifier: type (bits 7:4) and sub type (bits 3:0).
        identifier @ 15: u8,
    }
    size 16;
}

const _: () = assert!(SglDescriptor::SIZE == SGL_DESCRIPTOR_SIZE);

/// SGL Descriptor Type (§4.1.2.1, Figure "SGL Descriptor Type"): bits 7:4 of the identifier.
pub mod descriptor_type {
    /// SGL Data Block descriptor: `length` bytes of data at `address`.
    pub const DATA_BLOCK: u8 = 0x0;
    /// SGL Bit Bucket descriptor: `length` bytes of read data to discard.
    pub const BIT_BUCKET: u8 = 0x1;
    /// SGL Segment descriptor: the next segment, which may chain further.
    pub const SEGMENT: u8 = 0x2;
    /// SGL Last Segment descriptor: the final segment (data descriptors only).
    pub const LAST_SEGMENT: u8 = 0x3;
    /// Keyed SGL Data Block descriptor (fabrics).
    pub const KEYED_DATA_BLOCK: u8 = 0x4;
    /// Transport SGL Data Block descriptor (fabrics).
    pub const TRANSPORT_DATA_BLOCK: u8 = 0x5;
}

/// SGL Descriptor Sub Type (§4.1.2.1, Figure "SGL Descriptor Sub Type"): bits 3:0.
pub mod descriptor_subtype {
    /// The address field is a memory address (the only sub type used over PCIe).
    pub const ADDRESS: u8 = 0x0;
    /// The address field is an offset (fabrics in-capsule data).
    pub const OFFSET: u8 = 0x1;
}

const TYPE_SHIFT: u8 = 4;
const SUBTYPE_MASK: u8 = 0xF;
/// Bit position of the SGL Identifier in the second quadword of the descriptor (byte 15).
const IDENTIFIER_SHIFT_IN_QWORD: u32 = 56;

impl SglDescriptor {
    /// A descriptor of `ty` (see [`descriptor_type`]) with sub type Address.
    pub const fn new(ty: u8, address: u64, length: u32) -> Self {
        SglDescriptor {
            address,
            length,
            rsvd12: [0; 3],
            identifier: ty << TYPE_SHIFT | descriptor_subtype::ADDRESS,
        }
    }

    /// Data Block: `length` bytes at `address` (§4.1.2.2, Figure "SGL Data Block descriptor").
    pub const fn data_block(address: u64, length: u32) -> Self {
        Self::new(descriptor_type::DATA_BLOCK, address, length)
    }

    /// Segment: `length` bytes of descriptors at `address`, possibly chaining further.
    pub const fn segment(address: u64, length: u32) -> Self {
        Self::new(descriptor_type::SEGMENT, address, length)
    }

    /// Last Segment: the final `length` bytes of descriptors at `address`.
    pub const fn last_segment(address: u64, length: u32) -> Self {
        Self::new(descriptor_type::LAST_SEGMENT, address, length)
    }

    /// Descriptor type (identifier bits 7:4).
    pub const fn descriptor_type(&self) -> u8 {
        self.identifier >> TYPE_SHIFT
    }

    /// Descriptor sub type (identifier bits 3:0).
    pub const fn subtype(&self) -> u8 {
        self.identifier & SUBTYPE_MASK
    }

    /// The descriptor as the two quadwords of a Data Pointer (SQE `prp1`, `prp2`), or as two
    /// little-endian quadwords in memory.
    pub const fn to_qwords(&self) -> (u64, u64) {
        (
            self.address,
            self.length as u64
                | (self.rsvd12[0] as u64) << 32
                | (self.rsvd12[1] as u64) << 40
                | (self.rsvd12[2] as u64) << 48
                | (self.identifier as u64) << IDENTIFIER_SHIFT_IN_QWORD,
        )
    }

    /// Decodes a descriptor from its two quadwords (SQE `prp1`, `prp2`, or memory).
    pub const fn from_qwords(address: u64, second: u64) -> Self {
        SglDescriptor {
            address,
            length: second as u32,
            rsvd12: [
                (second >> 32) as u8,
                (second >> 40) as u8,
                (second >> 48) as u8,
            ],
            identifier: (second >> IDENTIFIER_SHIFT_IN_QWORD) as u8,
        }
    }
}

/// Second quadword of a Data Block descriptor of `length` bytes (the first is its address):
/// what a driver stores in SQE `prp2` for a single-descriptor SGL, with no other work.
#[inline(always)]
pub const fn data_block_qword(length: u32) -> u64 {
    length as u64
        | ((descriptor_type::DATA_BLOCK << TYPE_SHIFT | descriptor_subtype::ADDRESS) as u64)
            << IDENTIFIER_SHIFT_IN_QWORD
}

/// PRP or SGL for Data Transfer, CDW0 bits 15:14 (§4.2, Figure "Command Dword 0").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Psdt {
    /// 00b: PRPs.
    Prp = 0b00,
    /// 01b: SGL for data; MPTR holds the address of one contiguous metadata buffer.
    SglMptrContiguous = 0b01,
    /// 10b: SGL for data; MPTR holds the address of an SGL segment for the metadata.
    SglMptrSgl = 0b10,
}

impl Psdt {
    /// Decodes the 2-bit field; `None` for the reserved value 11b.
    pub const fn from_raw(raw: u8) -> Option<Self> {
        match raw {
            0b00 => Some(Psdt::Prp),
            0b01 => Some(Psdt::SglMptrContiguous),
            0b10 => Some(Psdt::SglMptrSgl),
            _ => None,
        }
    }
}

/// Fused Operation, CDW0 bits 9:8 (NVMe Base 2.0 §4.2, Figure "Command Dword 0"; §3.4.2
/// "Fused Operations"): two adjacent entries of one submission queue executed as one atomic
/// unit, the first with [`Fuse::First`], the second with [`Fuse::Second`]. The only fused
/// operation of the NVM command set is Compare and Write (Identify Controller FUSES bit 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Fuse {
    /// 00b: a normal, unfused command.
    Normal = 0b00,
    /// 01b: the first command of a fused operation (Compare).
    First = 0b01,
    /// 10b: the second command of a fused operation (Write).
    Second = 0b10,
}

impl Fuse {
    /// Decodes the 2-bit field; `None` for the reserved value 11b.
    pub const fn from_raw(raw: u8) -> Option<Self> {
        match raw {
            0b00 => Some(Fuse::Normal),
            0b01 => Some(Fuse::First),
            0b10 => Some(Fuse::Second),
            _ => None,
        }
    }
}

/// SGL Support of a controller, Identify Controller SGLS bits 1:0 (§5.17.2.1, Figure
/// "Identify Controller Data Structure", byte 536).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SglSupport {
    /// 00b: SGLs are not supported for the NVM command set.
    None,
    /// 01b: supported, no alignment or granularity requirement for Data Blocks.
    Byte,
    /// 10b: supported, Data Block addresses and lengths must be dword aligned.
    Dword,
}

const SGLS_SUPPORT_MASK: u32 = 0b11;
/// A dword is 4 bytes: addresses and lengths with these bits clear are dword aligned.
const DWORD_MASK: u64 = 0b11;

impl SglSupport {
    /// Decodes SGLS bits 1:0 (the reserved value 11b reads as not supported).
    pub const fn from_sgls(sgls: u32) -> Self {
        match sgls & SGLS_SUPPORT_MASK {
            0b01 => SglSupport::Byte,
            0b10 => SglSupport::Dword,
            _ => SglSupport::None,
        }
    }

    /// The SGLS bits 1:0 value.
    pub const fn to_sgls(self) -> u32 {
        match self {
            SglSupport::None => 0b00,
            SglSupport::Byte => 0b01,
            SglSupport::Dword => 0b10,
        }
    }

    /// Whether I/O commands may use SGLs.
    pub const fn supported(self) -> bool {
        !matches!(self, SglSupport::None)
    }

    /// Low bits that must be clear in a Data Block's address and length (3 for dword
    /// granularity, 0 otherwise).
    pub const fn alignment_mask(self) -> u64 {
        match self {
            SglSupport::Dword => DWORD_MASK,
            SglSupport::None | SglSupport::Byte => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_block_encodes_like_the_spec_figure() {
        let d = SglDescriptor::data_block(0x1234_5678_9000, 0x2000);
        let b = d.to_bytes();
        assert_eq!(&b[0..8], &0x1234_5678_9000u64.to_le_bytes());
        assert_eq!(&b[8..12], &0x2000u32.to_le_bytes());
        assert_eq!(&b[12..15], &[0, 0, 0]);
        assert_eq!(b[15], 0x00, "type 0 (data block), sub type 0 (address)");
        let (q0, q1) = d.to_qwords();
        assert_eq!(q0, u64::from_le_bytes(b[0..8].try_into().unwrap()));
        assert_eq!(q1, u64::from_le_bytes(b[8..16].try_into().unwrap()));
        assert_eq!(q1, data_block_qword(0x2000));
        assert_eq!(SglDescriptor::from_qwords(q0, q1), d);
    }

    #[test]
    fn segment_identifiers() {
        let s = SglDescriptor::segment(0x5000, 48);
        assert_eq!(s.to_bytes()[15], 0x20);
        assert_eq!(s.descriptor_type(), descriptor_type::SEGMENT);
        let l = SglDescriptor::last_segment(0x6000, 16);
        assert_eq!(l.to_bytes()[15], 0x30);
        assert_eq!(l.descriptor_type(), descriptor_type::LAST_SEGMENT);
        assert_eq!(l.subtype(), descriptor_subtype::ADDRESS);
        let raw = SglDescriptor::from_qwords(0, 0x51u64 << 56 | 0xAB << 32 | 7);
        assert_eq!(raw.descriptor_type(), descriptor_type::TRANSPORT_DATA_BLOCK);
        assert_eq!(raw.subtype(), descriptor_subtype::OFFSET);
        assert_eq!(raw.rsvd12, [0xAB, 0, 0]);
        assert_eq!(raw.length, 7);
    }

    #[test]
    fn sgls_and_psdt_decode() {
        assert_eq!(SglSupport::from_sgls(0), SglSupport::None);
        assert_eq!(SglSupport::from_sgls(0x0017_0001), SglSupport::Byte);
        assert_eq!(SglSupport::from_sgls(0b10), SglSupport::Dword);
        assert_eq!(SglSupport::from_sgls(0b11), SglSupport::None);
        for s in [SglSupport::None, SglSupport::Byte, SglSupport::Dword] {
            assert_eq!(SglSupport::from_sgls(s.to_sgls()), s);
        }
        assert_eq!(SglSupport::Dword.alignment_mask(), 3);
        assert_eq!(SglSupport::Byte.alignment_mask(), 0);
        assert_eq!(Psdt::from_raw(1), Some(Psdt::SglMptrContiguous));
        assert_eq!(Psdt::from_raw(3), None);
        assert_eq!(Fuse::from_raw(1), Some(Fuse::First));
        assert_eq!(Fuse::from_raw(2), Some(Fuse::Second));
        assert_eq!(Fuse::from_raw(0), Some(Fuse::Normal));
        assert_eq!(Fuse::from_raw(3), None);
    }
}
