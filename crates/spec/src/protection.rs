//! End-to-end data protection (NVM Command Set 1.0 §5.2 "End-to-end Data Protection") and
//! the metadata fields of Identify Namespace it needs.
//!
//! - the 8-byte protection information tuple of the 16-bit guard format ([`PiTuple`], NVM CS
//!   §5.2.1.1, Figure 9): Guard (CRC-16 T10-DIF of the block), Application Tag, Reference
//!   Tag, all big-endian on the medium and in host buffers;
//! - [`crc16_t10dif`], the guard's CRC (polynomial 8BB7h, no reflection, initial value 0);
//! - the PRINFO bits of CDW12 and the tag fields of CDW14/CDW15 of Read, Write, Compare and
//!   Verify ([`Prinfo`], [`cdw15`]; NVM CS §3.3.4, Figures 39-41);
//! - Identify Namespace MC, DPC and DPS (NVM CS §4.1.5.1, Figure 97) as small accessors.
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
