//! End-to-end data protection (NVM Command Set 1.0 §5.2 "End-to-end Data Protection") and
//! the metadata fields of Identify Namespace it needs.
//!
//! - the 8-byte protection information tuple of the 16-bit guard format ([`PiTuple`], NVM CS
//!   §5.2.1.1, Figure 9): Guard (CRC-16 T10-DIF of the block), Application Tag, Reference
//!   Tag, all big-endian on the medium and in host buffers;
//! - [`crc16_t10dif`], the guard's CRC (polynomial 8BB7h, no reflection, initial value 0);
//! - the PRINFO bits of CDW12 and the tag fields of CDW14/CDW15 of Read, Write, Compare and
//!   Verify ([`Prinfo`], [`cdw15`]; NVM CS §3.3.4, Figures 39-41);
//! - Identify Namespace MC, DPC and DPS (NVM CS §4.1.5.1, Figure 97) as small accessors;
//! - the 64-bit guard format (NVM CS §5.2.1.3): its 16-byte tuple ([`Pi64Tuple`]: 64-bit
//!   Guard, Application Tag, 48-bit Storage and Reference Space), [`crc64_nvme`] (polynomial
//!   AD93D23594C93659h, reflected), the 48-bit reference tag's CDW3 bits ([`cdw3_ref_tag`]);
//! - the NVM Command Set's I/O Command Set specific Identify Namespace (CNS 05h, CSI 00h; NVM
//!   CS §4.1.5.2, [`NvmIdentifyNamespace`]) with the Extended LBA Formats ([`ExtendedLbaFormat`]:
//!   Storage Tag Size and Protection Information Format, [`PiFormat`]), read when the
//!   controller sets CTRATT.ELBAS ([`CTRATT_ELBAS`], Base 2.0 Figure 275 bit 15).
//!
//! The check-error statuses are in [`crate::status::media`] (SCT 2h, SC 82h-84h).

use crate::identify::IdentifyNamespace;

/// Bytes of one protection information tuple in the 16-bit guard format.
pub const PI_TUPLE_BYTES: usize = 8;

/// Application Tag value that, for PI types 1 and 2, disables every check of its block
/// (NVM CS §5.2.1.3): also with Reference Tag FFFF_FFFFh for type 3.
pub const APP_TAG_ESCAPE: u16 = 0xFFFF;
/// Reference Tag value that, with [`APP_TAG_ESCAPE`], disables the checks of a type 3 block.
pub const REF_TAG_ESCAPE: u32 = 0xFFFF_FFFF;

/// CRC-16 T10-DIF generator polynomial (x^16 + x^15 + x^11 + x^9 + x^8 + x^7 + x^5 + x^4 +
/// x^2 + x + 1), NVM CS §5.2.1.1.
pub const CRC16_T10DIF_POLY: u16 = 0x8BB7;

/// Protection information tuple, 16-bit guard format (NVM CS §5.2.1.1, Figure 9). Every field
/// is big-endian: the struct keeps the wire bytes, the accessors convert.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PiTuple {
    guard: [u8; 2],
    app_tag: [u8; 2],
    ref_tag: [u8; 4],
}

const _: () = assert!(core::mem::size_of::<PiTuple>() == PI_TUPLE_BYTES);
const _: () = assert!(core::mem::align_of::<PiTuple>() == 1);

impl PiTuple {
    /// A tuple with these field values.
    pub const fn new(guard: u16, app_tag: u16, ref_tag: u32) -> Self {
        Self {
            guard: guard.to_be_bytes(),
            app_tag: app_tag.to_be_bytes(),
            ref_tag: ref_tag.to_be_bytes(),
        }
    }

    /// Decodes the first 8 bytes of `b` (panics when shorter).
    pub fn from_bytes(b: &[u8]) -> Self {
        Self {
            guard: [b[0], b[1]],
            app_tag: [b[2], b[3]],
            ref_tag: [b[4], b[5], b[6], b[7]],
        }
    }

    /// The wire bytes.
    pub fn to_bytes(&self) -> [u8; PI_TUPLE_BYTES] {
        let [g0, g1] = self.guard;
        let [a0, a1] = self.app_tag;
        let [r0, r1, r2, r3] = self.ref_tag;
        [g0, g1, a0, a1, r0, r1, r2, r3]
    }

    /// Guard: CRC-16 T10-DIF of the block's data (and of the metadata bytes before the PI).
    pub const fn guard(&self) -> u16 {
        u16::from_be_bytes(self.guard)
    }

    /// Application Tag.
    pub const fn app_tag(&self) -> u16 {
        u16::from_be_bytes(self.app_tag)
    }

    /// Reference Tag.
    pub const fn ref_tag(&self) -> u32 {
        u32::from_be_bytes(self.ref_tag)
    }
}

/// The CRC table: entry `i` is the CRC of byte `i` shifted into the high byte.
const CRC16_TABLE: [u16; 256] = {
    let mut table = [0u16; 256];
    let mut i = 0;
    while i < 256 {
        let mut crc = (i as u16) << 8;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ CRC16_T10DIF_POLY
            } else {
                crc << 1
            };
            bit += 1;
        }
        table[i] = crc;
        i += 1;
    }
    table
};

/// CRC-16 T10-DIF of `data`, continuing from `crc` (0 to start): MSB first, no final XOR.
pub fn crc16_t10dif(crc: u16, data: &[u8]) -> u16 {
    data.iter().fold(crc, |crc, &b| {
        (crc << 8) ^ CRC16_TABLE[usize::from((crc >> 8) as u8 ^ b)]
    })
}

/// End-to-end protection type of a namespace (DPS bits 2:0, NVM CS §5.2.1.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PiType {
    /// Type 1: the Reference Tag is the low 32 bits of the LBA (checked).
    Type1 = 1,
    /// Type 2: the Reference Tag starts at the command's initial tag, +1 per block.
    Type2 = 2,
    /// Type 3: the Reference Tag is opaque (not checked).
    Type3 = 3,
}

impl PiType {
    /// From DPS bits 2:0 (0 and reserved values: none).
    pub const fn from_dps(dps: u8) -> Option<Self> {
        match dps & DPS_TYPE_MASK {
            1 => Some(Self::Type1),
            2 => Some(Self::Type2),
            3 => Some(Self::Type3),
            _ => None,
        }
    }

    /// Whether the Reference Tag advances by one per block (types 1 and 2).
    pub const fn ref_tag_increments(self) -> bool {
        !matches!(self, Self::Type3)
    }
}

/// DPS bits 2:0: Protection Information Type.
const DPS_TYPE_MASK: u8 = 0b111;
/// DPS bit 3: protection information in the first 8 bytes of metadata (else the last 8).
pub const DPS_PI_FIRST: u8 = 1 << 3;
/// MC bit 0: metadata as part of an extended data LBA supported.
pub const MC_EXTENDED: u8 = 1 << 0;
/// MC bit 1: metadata in a separate buffer supported.
pub const MC_SEPARATE: u8 = 1 << 1;
/// DPC bit 3: PI in the first 8 bytes of metadata supported.
pub const DPC_PI_FIRST: u8 = 1 << 3;
/// DPC bit 4: PI in the last 8 bytes of metadata supported.
pub const DPC_PI_LAST: u8 = 1 << 4;

impl IdentifyNamespace {
    /// The protection information type enabled (DPS), if any.
    pub fn pi_type(&self) -> Option<PiType> {
        PiType::from_dps(self.dps)
    }

    /// Whether the PI is the first 8 bytes of each block's metadata (DPS bit 3); otherwise
    /// the last 8.
    pub fn pi_first(&self) -> bool {
        self.dps & DPS_PI_FIRST != 0
    }
}

/// Bytes of one protection information tuple in the 64-bit guard format (NVM CS §5.2.1.3).
pub const PI64_TUPLE_BYTES: usize = 16;

/// The Storage and Reference Space of the 64-bit guard format: 48 bits.
pub const REF_TAG48_MASK: u64 = (1 << 48) - 1;
/// Reference Tag value (all 48 bits ones, with STS = 0) that, with [`APP_TAG_ESCAPE`],
/// disables the checks of a type 3 block in the 64-bit guard format.
pub const REF_TAG48_ESCAPE: u64 = REF_TAG48_MASK;

/// CRC-64 NVMe generator polynomial (NVM CS §5.2.1.3.1), in the spec's normal form; the CRC
/// is computed reflected, initial value and final XOR all ones.
pub const CRC64_NVME_POLY: u64 = 0xAD93_D235_94C9_3659;

/// Protection information tuple, 64-bit guard format (NVM CS §5.2.1.3, Figure "64b Guard
/// Protection Information Format"): Guard (CRC-64 NVMe, bytes 0-7), Application Tag
/// (bytes 8-9), Storage and Reference Space (bytes 10-15: with a Storage Tag Size of 0, all
/// 48 bits are the Reference Tag). Big-endian, like the 16-bit format.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pi64Tuple {
    guard: [u8; 8],
    app_tag: [u8; 2],
    ref_tag: [u8; 6],
}

const _: () = assert!(core::mem::size_of::<Pi64Tuple>() == PI64_TUPLE_BYTES);
const _: () = assert!(core::mem::align_of::<Pi64Tuple>() == 1);

impl Pi64Tuple {
    /// A tuple with these field values (`ref_tag` keeps its low 48 bits).
    pub fn new(guard: u64, app_tag: u16, ref_tag: u64) -> Self {
        let mut r = [0u8; 6];
        r.copy_from_slice(&(ref_tag & REF_TAG48_MASK).to_be_bytes()[2..]);
        Self {
            guard: guard.to_be_bytes(),
            app_tag: app_tag.to_be_bytes(),
            ref_tag: r,
        }
    }

    /// Decodes the first 16 bytes of `b` (panics when shorter).
    pub fn from_bytes(b: &[u8]) -> Self {
        let mut t = Self::default();
        t.guard.copy_from_slice(&b[0..8]);
        t.app_tag.copy_from_slice(&b[8..10]);
        t.ref_tag.copy_from_slice(&b[10..16]);
        t
    }

    /// The wire bytes.
    pub fn to_bytes(&self) -> [u8; PI64_TUPLE_BYTES] {
        let mut out = [0u8; PI64_TUPLE_BYTES];
        out[0..8].copy_from_slice(&self.guard);
        out[8..10].copy_from_slice(&self.app_tag);
        out[10..16].copy_from_slice(&self.ref_tag);
        out
    }

    /// Guard: CRC-64 NVMe of the block's data (and of the metadata bytes before the PI).
    pub const fn guard(&self) -> u64 {
        u64::from_be_bytes(self.guard)
    }

    /// Application Tag.
    pub const fn app_tag(&self) -> u16 {
        u16::from_be_bytes(self.app_tag)
    }

    /// The 48-bit Storage and Reference Space (the Reference Tag when STS = 0).
    pub const fn ref_tag(&self) -> u64 {
        let [a, b, c, d, e, f] = self.ref_tag;
        u64::from_be_bytes([0, 0, a, b, c, d, e, f])
    }
}

/// The reflected polynomial's table: entry `i` is the CRC of byte `i`.
const CRC64_TABLE: [u64; 256] = {
    let reflected = CRC64_NVME_POLY.reverse_bits();
    let mut table = [0u64; 256];
    let mut i = 0;
    while i < 256 {
        let mut crc = i as u64;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ reflected
            } else {
                crc >> 1
            };
            bit += 1;
        }
        table[i] = crc;
        i += 1;
    }
    table
};

/// CRC-64 NVMe of `data`, continuing from `crc` (0 to start, else a previous result): the
/// 64-bit guard (NVM CS §5.2.1.3.1; Linux's `crc64_rocksoft`/`crc64_nvme`).
pub fn crc64_nvme(crc: u64, data: &[u8]) -> u64 {
    !data.iter().fold(!crc, |crc, &b| {
        (crc >> 8) ^ CRC64_TABLE[usize::from(crc as u8 ^ b)]
    })
}

/// Protection Information Format of an LBA format (ELBAF bits 8:7, NVM CS §4.1.5.2).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum PiFormat {
    /// 16-bit guard, 8-byte tuple (00b; every format without ELBAF).
    #[default]
    Guard16,
    /// 32-bit guard (CRC-32C), 16-byte tuple (01b).
    Guard32,
    /// 64-bit guard (CRC-64 NVMe), 16-byte tuple (10b).
    Guard64,
}

impl PiFormat {
    /// From the two PIF bits (11b, reserved: none).
    pub const fn from_bits(bits: u8) -> Option<Self> {
        match bits & 0b11 {
            0 => Some(Self::Guard16),
            1 => Some(Self::Guard32),
            2 => Some(Self::Guard64),
            _ => None,
        }
    }

    /// Bytes of the PI tuple.
    pub const fn tuple_bytes(self) -> usize {
        match self {
            Self::Guard16 => PI_TUPLE_BYTES,
            Self::Guard32 | Self::Guard64 => PI64_TUPLE_BYTES,
        }
    }

    /// Bits of the Storage and Reference Space (the reference tag's width with STS = 0).
    pub const fn ref_space_bits(self) -> u32 {
        match self {
            Self::Guard16 => 32,
            Self::Guard32 => 80,
            Self::Guard64 => 48,
        }
    }

    /// Bits of the guard.
    pub const fn guard_bits(self) -> u32 {
        match self {
            Self::Guard16 => 16,
            Self::Guard32 => 32,
            Self::Guard64 => 64,
        }
    }
}

/// ELBAF bits 6:0: Storage Tag Size.
const ELBAF_STS_MASK: u32 = 0x7F;
/// ELBAF bits 8:7: Protection Information Format.
const ELBAF_PIF_SHIFT: u32 = 7;

/// One Extended LBA Format (ELBAF) of [`NvmIdentifyNamespace`], NVM CS §4.1.5.2 Figure
/// "Extended LBA Format Data Structure".
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ExtendedLbaFormat(pub u32);

impl ExtendedLbaFormat {
    /// An entry with these fields.
    pub const fn new(sts: u8, pif: PiFormat) -> Self {
        Self((sts as u32 & ELBAF_STS_MASK) | (pif as u32) << ELBAF_PIF_SHIFT)
    }

    /// Storage Tag Size: bits of the Storage and Reference Space that are the Storage Tag.
    pub const fn sts(self) -> u8 {
        (self.0 & ELBAF_STS_MASK) as u8
    }

    /// The Protection Information Format (`None`: the reserved value 11b).
    pub const fn pif(self) -> Option<PiFormat> {
        PiFormat::from_bits((self.0 >> ELBAF_PIF_SHIFT) as u8)
    }
}

/// CTRATT bit 15 (ELBAS, Base 2.0 Figure 275): the controller supports the Extended LBA
/// Formats (the ELBAF list of the NVM command set's Identify Namespace, CNS 05h CSI 00h).
pub const CTRATT_ELBAS: u32 = 1 << 15;

/// Byte offset of ELBAF 0 in the NVM command set's Identify Namespace.
pub const ELBAF_OFFSET: usize = 12;

wire_struct! {
    /// The NVM Command Set's I/O Command Set specific Identify Namespace (CNS 05h, CSI 00h;
    /// NVM CS 1.0 §4.1.5.2, Figure "I/O Command Set Specific Identify Namespace Data
    /// Structure"): the first 272 bytes, the rest reserved. `elbaf` is indexed like the LBA
    /// formats of Identify Namespace.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct NvmIdentifyNamespace {
        /// Logical Block Storage Tag Mask.
        lbstm @ 0: u64,
        /// Protection Information Capabilities (bit 0 16BPISTM, bit 1 STCRS).
        pic @ 8: u8,
        /// Reserved (bytes 9..12).
        rsvd9 @ 9: [u8; 3],
        /// Extended LBA Formats 0-63 ([`ExtendedLbaFormat`]).
        elbaf @ 12: [u32; 64],
        /// Reserved (the first of bytes 268..4096).
        rsvd268 @ 268: [u8; 4],
    }
    size 272;
}

impl Default for NvmIdentifyNamespace {
    fn default() -> Self {
        Self {
            lbstm: 0,
            pic: 0,
            rsvd9: [0; 3],
            elbaf: [0; 64],
            rsvd268: [0; 4],
        }
    }
}

const _: () = assert!(ELBAF_OFFSET == core::mem::offset_of!(NvmIdentifyNamespace, elbaf));

impl NvmIdentifyNamespace {
    /// Decodes the first bytes of a 4096-byte Identify reply.
    pub fn parse(bytes: &[u8; crate::identify::IDENTIFY_DATA_SIZE]) -> Self {
        let mut head = [0u8; Self::SIZE];
        head.copy_from_slice(&bytes[..Self::SIZE]);
        Self::from_bytes(&head)
    }

    /// Encodes it as a 4096-byte Identify reply (the rest zero).
    pub fn encode(&self) -> [u8; crate::identify::IDENTIFY_DATA_SIZE] {
        let mut out = [0u8; crate::identify::IDENTIFY_DATA_SIZE];
        out[..Self::SIZE].copy_from_slice(&self.to_bytes());
        out
    }

    /// Extended LBA Format `index` (an index beyond the list: the zero entry, 16-bit guard).
    pub fn extended_format(&self, index: usize) -> ExtendedLbaFormat {
        ExtendedLbaFormat(self.elbaf.get(index).copied().unwrap_or(0))
    }
}

/// CDW3 bits 15:0 of Read, Write, Compare and Verify on a 64-bit guard format (NVM CS §3.2.4,
/// Figure "Command Dword 2 and Command Dword 3"): bits 47:32 of the 48-bit (expected) initial
/// logical block reference tag, whose bits 31:0 are CDW14 (with STS = 0).
pub const fn cdw3_ref_tag(ref_tag48: u64) -> u32 {
    ((ref_tag48 & REF_TAG48_MASK) >> 32) as u32
}

/// CDW12 bit of PRACT (Protection Information Action), NVM CS §3.3.4 Figure 39.
const CDW12_PRACT: u32 = 1 << 29;
/// CDW12 bits 28:26: PRCHK, the checks (guard, application tag, reference tag).
const CDW12_PRCHK_SHIFT: u32 = 26;

/// The Protection Information field (PRINFO, CDW12 bits 29:26) of Read, Write, Compare and
/// Verify: PRACT and the three PRCHK bits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Prinfo(u8);

impl Prinfo {
    /// PRACT = 1: the controller inserts PI on writes and strips it on reads (moves no PI
    /// to or from the host when the metadata is exactly the PI).
    pub const PRACT: Prinfo = Prinfo(1 << 3);
    /// PRCHK bit 2: check the Guard.
    pub const CHECK_GUARD: Prinfo = Prinfo(1 << 2);
    /// PRCHK bit 1: check the Application Tag (under its mask).
    pub const CHECK_APP_TAG: Prinfo = Prinfo(1 << 1);
    /// PRCHK bit 0: check the Reference Tag.
    pub const CHECK_REF_TAG: Prinfo = Prinfo(1 << 0);
    /// Every check.
    pub const CHECK_ALL: Prinfo = Prinfo(0b111);
    /// Nothing: PRACT = 0, no checks.
    pub const NONE: Prinfo = Prinfo(0);

    /// Both sets of bits.
    pub const fn union(self, other: Prinfo) -> Prinfo {
        Prinfo(self.0 | other.0)
    }

    /// Whether every bit of `other` is set.
    pub const fn contains(self, other: Prinfo) -> bool {
        self.0 & other.0 == other.0
    }

    /// The four bits (PRACT in bit 3, PRCHK in 2:0).
    pub const fn bits(self) -> u8 {
        self.0
    }

    /// From the four bits (higher bits dropped).
    pub const fn from_bits(bits: u8) -> Prinfo {
        Prinfo(bits & 0xF)
    }

    /// The bits as they sit in CDW12.
    pub const fn cdw12(self) -> u32 {
        (self.0 as u32) << CDW12_PRCHK_SHIFT
    }

    /// PRINFO of a CDW12.
    pub const fn from_cdw12(cdw12: u32) -> Prinfo {
        Prinfo(((cdw12 >> CDW12_PRCHK_SHIFT) & 0xF) as u8)
    }

    /// PRACT is set.
    pub const fn pract(self) -> bool {
        self.0 & Self::PRACT.0 != 0
    }
}

const _: () = assert!(Prinfo::PRACT.cdw12() == CDW12_PRACT);

/// CDW15 of Read, Write, Compare and Verify: the (expected) Logical Block Application Tag in
/// bits 15:0 and its mask in bits 31:16 (NVM CS Figure 41).
pub const fn cdw15(app_tag: u16, app_mask: u16) -> u32 {
    (app_mask as u32) << 16 | app_tag as u32
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::LbaFormat;

    /// The CRC a bit at a time, straight from the polynomial: the reference for the table.
    fn crc_bitwise(data: &[u8]) -> u16 {
        let mut crc: u16 = 0;
        for &byte in data {
            for bit in (0..8).rev() {
                let top = (crc >> 15) & 1 != 0;
                let input = (byte >> bit) & 1 != 0;
                crc <<= 1;
                if top ^ input {
                    crc ^= CRC16_T10DIF_POLY;
                }
            }
        }
        crc
    }

    #[test]
    fn crc_matches_the_bitwise_reference() {
        // The standard check value of CRC-16/T10-DIF ("123456789" -> D0DBh).
        assert_eq!(crc_bitwise(b"123456789"), 0xD0DB);
        assert_eq!(crc16_t10dif(0, b"123456789"), 0xD0DB);
        assert_eq!(crc16_t10dif(0, &[]), 0);
        let block: Vec<u8> = (0..4096u32).map(|i| (i * 7 + i / 13) as u8).collect();
        for len in [1, 2, 8, 512, 520, 4096] {
            assert_eq!(
                crc16_t10dif(0, &block[..len]),
                crc_bitwise(&block[..len]),
                "{len}"
            );
        }
        // A zero block's CRC is zero; continuing equals one pass.
        assert_eq!(crc16_t10dif(0, &[0u8; 512]), 0);
        let split = crc16_t10dif(crc16_t10dif(0, &block[..100]), &block[100..512]);
        assert_eq!(split, crc16_t10dif(0, &block[..512]));
    }

    /// CRC-64 NVMe a bit at a time (reflected), the reference for the table.
    fn crc64_bitwise(data: &[u8]) -> u64 {
        let poly = CRC64_NVME_POLY.reverse_bits();
        let mut crc = u64::MAX;
        for &byte in data {
            crc ^= u64::from(byte);
            for _ in 0..8 {
                crc = if crc & 1 != 0 {
                    (crc >> 1) ^ poly
                } else {
                    crc >> 1
                };
            }
        }
        !crc
    }

    #[test]
    fn crc64_matches_the_spec_test_vectors() {
        // NVM CS §5.2.1.3.4 test vectors over 4 KiB blocks, and the catalogue check value.
        assert_eq!(crc64_nvme(0, &[0u8; 4096]), 0x6482_D367_EB22_B64E);
        assert_eq!(crc64_nvme(0, &[0xFFu8; 4096]), 0xC0DD_BA73_02EC_A3AC);
        let inc: Vec<u8> = (0..4096u32).map(|i| i as u8).collect();
        assert_eq!(crc64_nvme(0, &inc), 0x3E72_9F5F_6750_449C);
        let dec: Vec<u8> = (0..4096u32).map(|i| 0xFF - i as u8).collect();
        assert_eq!(crc64_nvme(0, &dec), 0x9A2D_F64B_8E9E_517E);
        assert_eq!(crc64_nvme(0, b"123456789"), 0xAE8B_1486_0A79_9888);
        assert_eq!(crc64_bitwise(b"123456789"), 0xAE8B_1486_0A79_9888);
        for len in [0, 1, 7, 512, 4096] {
            assert_eq!(
                crc64_nvme(0, &inc[..len]),
                crc64_bitwise(&inc[..len]),
                "{len}"
            );
        }
        let split = crc64_nvme(crc64_nvme(0, &inc[..100]), &inc[100..]);
        assert_eq!(split, crc64_nvme(0, &inc));
    }

    #[test]
    fn pi64_tuple_is_big_endian_with_a_48_bit_reference_tag() {
        let t = Pi64Tuple::new(0x0102_0304_0506_0708, 0xABCD, 0xFFFF_1234_5678_9ABC);
        assert_eq!(
            t.to_bytes(),
            [1, 2, 3, 4, 5, 6, 7, 8, 0xAB, 0xCD, 0x12, 0x34, 0x56, 0x78, 0x9A, 0xBC]
        );
        assert_eq!(Pi64Tuple::from_bytes(&t.to_bytes()), t);
        assert_eq!(
            (t.guard(), t.app_tag(), t.ref_tag()),
            (0x0102_0304_0506_0708, 0xABCD, 0x1234_5678_9ABC)
        );
        assert_eq!(
            Pi64Tuple::from_bytes(&[0xFF; 16]).ref_tag(),
            REF_TAG48_ESCAPE
        );
        assert_eq!(cdw3_ref_tag(0xFFFF_1234_5678_9ABC), 0x1234);
    }

    #[test]
    fn extended_lba_formats_decode_sts_and_pif() {
        let mut raw = [0u8; crate::identify::IDENTIFY_DATA_SIZE];
        // ELBAF 2: PIF 10b (64-bit guard), STS 0; ELBAF 3: PIF 01b, STS 8; ELBAF 4: PIF 11b.
        raw[ELBAF_OFFSET + 8..ELBAF_OFFSET + 12].copy_from_slice(&(2u32 << 7).to_le_bytes());
        raw[ELBAF_OFFSET + 12..ELBAF_OFFSET + 16].copy_from_slice(&(1u32 << 7 | 8).to_le_bytes());
        raw[ELBAF_OFFSET + 16..ELBAF_OFFSET + 20].copy_from_slice(&(3u32 << 7).to_le_bytes());
        raw[8] = 1;
        let id = NvmIdentifyNamespace::parse(&raw);
        assert_eq!(id.pic, 1);
        assert_eq!(id.extended_format(0).pif(), Some(PiFormat::Guard16));
        assert_eq!(id.extended_format(2).pif(), Some(PiFormat::Guard64));
        assert_eq!(id.extended_format(2).sts(), 0);
        assert_eq!(id.extended_format(3).pif(), Some(PiFormat::Guard32));
        assert_eq!(id.extended_format(3).sts(), 8);
        assert_eq!(id.extended_format(4).pif(), None);
        assert_eq!(id.extended_format(99), ExtendedLbaFormat(0));
        assert_eq!(
            ExtendedLbaFormat::new(8, PiFormat::Guard32),
            id.extended_format(3)
        );
        assert_eq!(NvmIdentifyNamespace::parse(&id.encode()), id);
        assert_eq!(PiFormat::Guard64.tuple_bytes(), 16);
        assert_eq!(PiFormat::Guard16.tuple_bytes(), PI_TUPLE_BYTES);
    }

    #[test]
    fn tuple_is_big_endian() {
        let t = PiTuple::new(0x1234, 0xABCD, 0x0102_0304);
        assert_eq!(t.to_bytes(), [0x12, 0x34, 0xAB, 0xCD, 1, 2, 3, 4]);
        assert_eq!(PiTuple::from_bytes(&t.to_bytes()), t);
        assert_eq!(
            (t.guard(), t.app_tag(), t.ref_tag()),
            (0x1234, 0xABCD, 0x0102_0304)
        );
    }

    #[test]
    fn prinfo_and_tags_encode_the_spec_bits() {
        let p = Prinfo::PRACT.union(Prinfo::CHECK_GUARD);
        assert_eq!(p.cdw12(), 1 << 29 | 1 << 28);
        assert_eq!(Prinfo::CHECK_APP_TAG.cdw12(), 1 << 27);
        assert_eq!(Prinfo::CHECK_REF_TAG.cdw12(), 1 << 26);
        assert_eq!(Prinfo::from_cdw12(p.cdw12() | 0xFFFF), p);
        assert!(p.pract() && !Prinfo::CHECK_ALL.pract());
        assert_eq!(cdw15(0x1234, 0xFF00), 0xFF00_1234);
    }

    #[test]
    fn identify_protection_fields() {
        let mut ns = IdentifyNamespace {
            dps: 1 | DPS_PI_FIRST,
            ..IdentifyNamespace::default()
        };
        ns.lbaf[0] = LbaFormat::new(9, 8);
        assert_eq!(ns.pi_type(), Some(PiType::Type1));
        assert!(ns.pi_first());
        ns.dps = 3;
        assert_eq!(ns.pi_type(), Some(PiType::Type3));
        assert!(!ns.pi_first() && !PiType::Type3.ref_tag_increments());
        ns.dps = 0;
        assert_eq!(ns.pi_type(), None);
    }
}
