//! Controller registers (NVMe Base 2.0 §3.1.4, "Controller Properties").
//!
//! Offsets are byte offsets from the start of BAR0. Each register has a newtype over its raw
//! value with getters for the fields; the types never touch hardware. Doorbell addresses are
//! computed here and only here ([`sq_tail_doorbell`], [`cq_head_doorbell`]).

use core::fmt;
use core::time::Duration;

/// Controller Capabilities, 64 bits (§3.1.4.1).
pub const CAP: usize = 0x00;
/// Version, 32 bits (§3.1.4.2).
pub const VS: usize = 0x08;
/// Interrupt Mask Set, 32 bits (§3.1.4.3).
pub const INTMS: usize = 0x0C;
/// Interrupt Mask Clear, 32 bits (§3.1.4.4).
pub const INTMC: usize = 0x10;
/// Controller Configuration, 32 bits (§3.1.4.5).
pub const CC: usize = 0x14;
/// Controller Status, 32 bits (§3.1.4.6).
pub const CSTS: usize = 0x1C;
/// NVM Subsystem Reset, 32 bits (§3.1.4.7).
pub const NSSR: usize = 0x20;
/// Admin Queue Attributes, 32 bits (§3.1.4.8).
pub const AQA: usize = 0x24;
/// Admin Submission Queue Base Address, 64 bits (§3.1.4.9).
pub const ASQ: usize = 0x28;
/// Admin Completion Queue Base Address, 64 bits (§3.1.4.10).
pub const ACQ: usize = 0x30;
/// Controller Memory Buffer Location, 32 bits (§3.1.4.11).
pub const CMBLOC: usize = 0x38;
/// Controller Memory Buffer Size, 32 bits (§3.1.4.12).
pub const CMBSZ: usize = 0x3C;
/// Controller Memory Buffer Memory Space Control, 64 bits (§3.1.4.17, NVMe 1.4+).
pub const CMBMSC: usize = 0x50;
/// CMBMSC bit 0, Capabilities Registers Enabled: CMBLOC and CMBSZ report the buffer (when
/// CAP.CMBS is set they read 0 until this is set). Enables no memory space by itself.
pub const CMBMSC_CRE: u64 = 1;

/// Offset of the first doorbell (admin SQ 0 tail), §3.1.4.20.
pub const DOORBELL_BASE: usize = 0x1000;

/// `NSSR` value that triggers an NVM subsystem reset ("NVMe" in ASCII, §3.1.4.7).
pub const NSSR_RESET_VALUE: u32 = 0x4E56_4D65;

/// Base-2 logarithm of the smallest memory page size (4 KiB); CAP.MPSMIN/CC.MPS are relative to it.
pub const PAGE_SIZE_SHIFT_BASE: u32 = 12;

/// Unit of CAP.TO: 500 milliseconds (§3.1.4.1).
pub const CAP_TO_UNIT: Duration = Duration::from_millis(500);

/// Largest admin queue size, in entries, that AQA can encode (12-bit 0-based fields, §3.1.4.8).
pub const ADMIN_QUEUE_MAX_ENTRIES: u32 = 4096;

/// CC.CSS value selecting the NVM command set (§3.1.4.5).
pub const CC_CSS_NVM: u8 = 0;
/// CC.CSS value selecting all supported I/O command sets (110b, §3.1.4.5): which ones are
/// enabled is then the I/O Command Set Profile (Set Features FID 19h) chooses; allowed when
/// CAP.CSS bit 6 is set ([`Cap::css_io_command_sets`]).
pub const CC_CSS_ALL_IO: u8 = 0b110;

/// Extracts `width` bits of `v` starting at bit `lo`.
const fn bits64(v: u64, lo: u32, width: u32) -> u64 {
    (v >> lo) & ((1u64 << width) - 1)
}

/// Extracts `width` bits of `v` starting at bit `lo`.
const fn bits32(v: u32, lo: u32, width: u32) -> u32 {
    (v >> lo) & ((1u32 << width) - 1)
}

/// Returns `v` with `width` bits at `lo` replaced by `field` (excess bits of `field` dropped).
const fn set_bits32(v: u32, lo: u32, width: u32, field: u32) -> u32 {
    let mask = ((1u32 << width) - 1) << lo;
    (v & !mask) | ((field << lo) & mask)
}

/// Controller Capabilities (CAP, §3.1.4.1, Figure 36).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cap(pub u64);

impl Cap {
    const MQES_LO: u32 = 0;
    const MQES_W: u32 = 16;
    const CQR_BIT: u32 = 16;
    const TO_LO: u32 = 24;
    const TO_W: u32 = 8;
    const DSTRD_LO: u32 = 32;
    const DSTRD_W: u32 = 4;
    const NSSRS_BIT: u32 = 36;
    /// CSS bit 0 (bit 37 of CAP): NVM command set supported.
    const CSS_NVM_BIT: u32 = 37;
    /// CSS bit 6 (bit 43 of CAP): one or more I/O command sets, chosen by CC.CSS = 110b.
    const CSS_IOCS_BIT: u32 = 43;
    const BPS_BIT: u32 = 45;
    const MPSMIN_LO: u32 = 48;
    const MPSMAX_LO: u32 = 52;
    const MPS_W: u32 = 4;
    const PMRS_BIT: u32 = 56;
    const CMBS_BIT: u32 = 57;

    /// Builds a CAP value from its commonly used fields (for emulated controllers).
    ///
    /// `mqes` is 0-based (the largest queue has `mqes + 1` entries); `to` is in 500 ms units;
    /// `dstrd`, `mpsmin` and `mpsmax` are 4-bit fields (excess bits are dropped).
    pub const fn new(
        mqes: u16,
        cqr: bool,
        to: u8,
        dstrd: u8,
        css_nvm: bool,
        mpsmin: u8,
        mpsmax: u8,
    ) -> Cap {
        let nibble = (1u64 << Self::DSTRD_W) - 1;
        Cap((mqes as u64) << Self::MQES_LO
            | (cqr as u64) << Self::CQR_BIT
            | (to as u64) << Self::TO_LO
            | ((dstrd as u64) & nibble) << Self::DSTRD_LO
            | (css_nvm as u64) << Self::CSS_NVM_BIT
            | ((mpsmin as u64) & nibble) << Self::MPSMIN_LO
            | ((mpsmax as u64) & nibble) << Self::MPSMAX_LO)
    }

    const fn bit(self, b: u32) -> bool {
        bits64(self.0, b, 1) != 0
    }

    /// Maximum Queue Entries Supported, raw 0-based value.
    pub const fn mqes(self) -> u16 {
        bits64(self.0, Self::MQES_LO, Self::MQES_W) as u16
    }

    /// Largest I/O queue size in entries (MQES + 1).
    pub const fn max_queue_entries(self) -> u32 {
        self.mqes() as u32 + 1
    }

    /// Contiguous Queues Required: queues must be physically contiguous (no PRP list).
    pub const fn cqr(self) -> bool {
        self.bit(Self::CQR_BIT)
    }

    /// Timeout, raw value in 500 ms units: worst-case time for CSTS.RDY to change.
    pub const fn to(self) -> u8 {
        bits64(self.0, Self::TO_LO, Self::TO_W) as u8
    }

    /// Timeout as a duration (TO × 500 ms).
    pub fn timeout(self) -> Duration {
        CAP_TO_UNIT * u32::from(self.to())
    }

    /// Doorbell Stride, raw: doorbells are `4 << DSTRD` bytes apart.
    pub const fn dstrd(self) -> u8 {
        bits64(self.0, Self::DSTRD_LO, Self::DSTRD_W) as u8
    }

    /// Distance in bytes between consecutive doorbell registers (`4 << DSTRD`).
    pub const fn doorbell_stride(self) -> usize {
        4usize << self.dstrd()
    }

    /// NVM Subsystem Reset Supported.
    pub const fn nssrs(self) -> bool {
        self.bit(Self::NSSRS_BIT)
    }

    /// Command Sets Supported, bit 0: the NVM command set.
    pub const fn css_nvm(self) -> bool {
        self.bit(Self::CSS_NVM_BIT)
    }

    /// Command Sets Supported, bit 6: the controller supports one or more I/O command sets
    /// and CC.CSS = [`CC_CSS_ALL_IO`] (the I/O Command Set Profile then chooses them).
    pub const fn css_io_command_sets(self) -> bool {
        self.bit(Self::CSS_IOCS_BIT)
    }

    /// With CSS bit 6 set (for emulated controllers, see [`Cap::css_io_command_sets`]).
    #[must_use]
    pub const fn with_io_command_sets(self) -> Cap {
        Cap(self.0 | 1 << Self::CSS_IOCS_BIT)
    }

    /// Boot Partition Support.
    pub const fn bps(self) -> bool {
        self.bit(Self::BPS_BIT)
    }

    /// Memory Page Size Minimum, raw (page = 2^(12 + MPSMIN)).
    pub const fn mpsmin(self) -> u8 {
        bits64(self.0, Self::MPSMIN_LO, Self::MPS_W) as u8
    }

    /// Memory Page Size Maximum, raw (page = 2^(12 + MPSMAX)).
    pub const fn mpsmax(self) -> u8 {
        bits64(self.0, Self::MPSMAX_LO, Self::MPS_W) as u8
    }

    /// Smallest memory page size the controller supports, in bytes.
    pub const fn min_page_size(self) -> usize {
        1usize << (PAGE_SIZE_SHIFT_BASE + self.mpsmin() as u32)
    }

    /// Largest memory page size the controller supports, in bytes.
    pub const fn max_page_size(self) -> usize {
        1usize << (PAGE_SIZE_SHIFT_BASE + self.mpsmax() as u32)
    }

    /// Controller Memory Buffer Supported.
    pub const fn cmbs(self) -> bool {
        self.bit(Self::CMBS_BIT)
    }

    /// Persistent Memory Region Supported.
    pub const fn pmrs(self) -> bool {
        self.bit(Self::PMRS_BIT)
    }
}

/// Version (VS, §3.1.4.2): MJR bits 31:16, MNR bits 15:8, TER bits 7:0.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version(pub u32);

impl Version {
    /// Encodes a version, e.g. `Version::new(1, 4, 0)` for NVMe 1.4.
    pub const fn new(major: u16, minor: u8, tertiary: u8) -> Version {
        Version((major as u32) << 16 | (minor as u32) << 8 | tertiary as u32)
    }

    /// Major version number.
    pub const fn major(self) -> u16 {
        (self.0 >> 16) as u16
    }

    /// Minor version number.
    pub const fn minor(self) -> u8 {
        (self.0 >> 8) as u8
    }

    /// Tertiary version number.
    pub const fn tertiary(self) -> u8 {
        self.0 as u8
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major(), self.minor(), self.tertiary())
    }
}

/// CC.SHN: Shutdown Notification (§3.1.4.5).
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ShutdownNotification {
    /// No notification; no effect.
    None = 0,
    /// Normal shutdown notification.
    Normal = 1,
    /// Abrupt shutdown notification.
    Abrupt = 2,
}

/// Controller Configuration (CC, §3.1.4.5, Figure 41).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cc(pub u32);

impl Cc {
    const EN_BIT: u32 = 0;
    const CSS_LO: u32 = 4;
    const CSS_W: u32 = 3;
    const MPS_LO: u32 = 7;
    const MPS_W: u32 = 4;
    const AMS_LO: u32 = 11;
    const AMS_W: u32 = 3;
    const SHN_LO: u32 = 14;
    const SHN_W: u32 = 2;
    const IOSQES_LO: u32 = 16;
    const IOCQES_LO: u32 = 20;
    const QES_W: u32 = 4;

    /// Enable.
    pub const fn en(self) -> bool {
        bits32(self.0, Self::EN_BIT, 1) != 0
    }

    /// I/O Command Set Selected (see [`CC_CSS_NVM`]).
    pub const fn css(self) -> u8 {
        bits32(self.0, Self::CSS_LO, Self::CSS_W) as u8
    }

    /// Memory Page Size, raw (page = 2^(12 + MPS)).
    pub const fn mps(self) -> u8 {
        bits32(self.0, Self::MPS_LO, Self::MPS_W) as u8
    }

    /// Arbitration Mechanism Selected (0 = round robin).
    pub const fn ams(self) -> u8 {
        bits32(self.0, Self::AMS_LO, Self::AMS_W) as u8
    }

    /// Raw SHN field (0..=3; 3 is reserved).
    pub const fn shn_raw(self) -> u8 {
        bits32(self.0, Self::SHN_LO, Self::SHN_W) as u8
    }

    /// Shutdown Notification. The reserved encoding 11b decodes as
    /// [`ShutdownNotification::None`] (it requests nothing defined); see [`Cc::shn_raw`].
    pub const fn shn(self) -> ShutdownNotification {
        match self.shn_raw() {
            1 => ShutdownNotification::Normal,
            2 => ShutdownNotification::Abrupt,
            _ => ShutdownNotification::None,
        }
    }

    /// I/O Submission Queue Entry Size, log2 of bytes.
    pub const fn iosqes(self) -> u8 {
        bits32(self.0, Self::IOSQES_LO, Self::QES_W) as u8
    }

    /// I/O Completion Queue Entry Size, log2 of bytes.
    pub const fn iocqes(self) -> u8 {
        bits32(self.0, Self::IOCQES_LO, Self::QES_W) as u8
    }

    /// Sets Enable.
    #[must_use]
    pub const fn with_en(self, en: bool) -> Self {
        Cc(set_bits32(self.0, Self::EN_BIT, 1, en as u32))
    }

    /// Sets the I/O Command Set Selected.
    #[must_use]
    pub const fn with_css(self, css: u8) -> Self {
        Cc(set_bits32(self.0, Self::CSS_LO, Self::CSS_W, css as u32))
    }

    /// Sets the Memory Page Size: the host page size becomes 2^(12 + `mps`) bytes.
    #[must_use]
    pub const fn with_mps(self, mps: u8) -> Self {
        Cc(set_bits32(self.0, Self::MPS_LO, Self::MPS_W, mps as u32))
    }

    /// Sets the Arbitration Mechanism Selected.
    #[must_use]
    pub const fn with_ams(self, ams: u8) -> Self {
        Cc(set_bits32(self.0, Self::AMS_LO, Self::AMS_W, ams as u32))
    }

    /// Sets the Shutdown Notification.
    #[must_use]
    pub const fn with_shn(self, shn: ShutdownNotification) -> Self {
        Cc(set_bits32(self.0, Self::SHN_LO, Self::SHN_W, shn as u32))
    }

    /// Sets the I/O SQ entry size as log2 of bytes (6 for 64-byte entries).
    #[must_use]
    pub const fn with_iosqes(self, log2: u8) -> Self {
        Cc(set_bits32(
            self.0,
            Self::IOSQES_LO,
            Self::QES_W,
            log2 as u32,
        ))
    }

    /// Sets the I/O CQ entry size as log2 of bytes (4 for 16-byte entries).
    #[must_use]
    pub const fn with_iocqes(self, log2: u8) -> Self {
        Cc(set_bits32(
            self.0,
            Self::IOCQES_LO,
            Self::QES_W,
            log2 as u32,
        ))
    }
}

/// CSTS.SHST: Shutdown Status (§3.1.4.6).
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ShutdownStatus {
    /// Normal operation; no shutdown requested.
    Normal = 0,
    /// Shutdown processing occurring.
    Occurring = 1,
    /// Shutdown processing complete.
    Complete = 2,
    /// Reserved encoding.
    Reserved = 3,
}

/// Controller Memory Buffer Size (CMBSZ, §3.1.4.12).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cmbsz(pub u32);

impl Cmbsz {
    /// Bits 11:8, Size Units: 4 KiB << (4 * SZU).
    const SZU_SHIFT: u32 = 8;
    const SZU_MASK: u32 = 0xF;
    /// Bits 31:12, Size, in Size Units.
    const SZ_SHIFT: u32 = 12;
    /// Largest defined SZU (64 GiB units).
    const SZU_MAX: u32 = 6;
    /// The 4 KiB base of the size units.
    const UNIT_BASE_SHIFT: u32 = 12;
    /// Bits 4:0: SQS, CQS, LISTS, RDS, WDS (what the buffer may hold).
    const USES_MASK: u32 = 0x1F;

    /// The buffer's size in bytes (0 when there is none or SZU is reserved).
    pub const fn bytes(self) -> u64 {
        let szu = (self.0 >> Self::SZU_SHIFT) & Self::SZU_MASK;
        if szu > Self::SZU_MAX {
            return 0;
        }
        ((self.0 >> Self::SZ_SHIFT) as u64) << (Self::UNIT_BASE_SHIFT + 4 * szu)
    }

    /// What the buffer supports holding: bit 0 SQs, 1 CQs, 2 PRP/SGL lists, 3 read data, 4
    /// write data.
    pub const fn uses(self) -> u32 {
        self.0 & Self::USES_MASK
    }
}

/// Controller Status (CSTS, §3.1.4.6, Figure 42).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Csts(pub u32);

impl Csts {
    const RDY_BIT: u32 = 0;
    const CFS_BIT: u32 = 1;
    const SHST_LO: u32 = 2;
    const SHST_W: u32 = 2;
    const NSSRO_BIT: u32 = 4;
    const PP_BIT: u32 = 5;

    /// Builds a CSTS value (for emulated controllers).
    pub const fn new(rdy: bool, cfs: bool, shst: ShutdownStatus) -> Csts {
        Csts(
            (rdy as u32) << Self::RDY_BIT
                | (cfs as u32) << Self::CFS_BIT
                | (shst as u32) << Self::SHST_LO,
        )
    }

    /// Ready: the controller accepts commands.
    pub const fn rdy(self) -> bool {
        bits32(self.0, Self::RDY_BIT, 1) != 0
    }

    /// Controller Fatal Status: a reset is required.
    pub const fn cfs(self) -> bool {
        bits32(self.0, Self::CFS_BIT, 1) != 0
    }

    /// Shutdown Status.
    pub const fn shst(self) -> ShutdownStatus {
        match bits32(self.0, Self::SHST_LO, Self::SHST_W) {
            0 => ShutdownStatus::Normal,
            1 => ShutdownStatus::Occurring,
            2 => ShutdownStatus::Complete,
            _ => ShutdownStatus::Reserved,
        }
    }

    /// NVM Subsystem Reset Occurred (RW1C).
    pub const fn nssro(self) -> bool {
        bits32(self.0, Self::NSSRO_BIT, 1) != 0
    }

    /// Processing Paused.
    pub const fn pp(self) -> bool {
        bits32(self.0, Self::PP_BIT, 1) != 0
    }
}

/// Admin Queue Attributes (AQA, §3.1.4.8): ASQS bits 11:0, ACQS bits 27:16, both 0-based.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Aqa(pub u32);

impl Aqa {
    const ASQS_LO: u32 = 0;
    const ACQS_LO: u32 = 16;
    const QS_W: u32 = 12;

    /// Encodes admin queue sizes given as 1-based entry counts (2..=4096 each).
    pub fn new(sq_entries: u32, cq_entries: u32) -> Aqa {
        debug_assert!(
            (2..=ADMIN_QUEUE_MAX_ENTRIES).contains(&sq_entries),
            "admin SQ size {sq_entries} outside 2..={ADMIN_QUEUE_MAX_ENTRIES}"
        );
        debug_assert!(
            (2..=ADMIN_QUEUE_MAX_ENTRIES).contains(&cq_entries),
            "admin CQ size {cq_entries} outside 2..={ADMIN_QUEUE_MAX_ENTRIES}"
        );
        let v = set_bits32(0, Self::ASQS_LO, Self::QS_W, sq_entries.wrapping_sub(1));
        Aqa(set_bits32(
            v,
            Self::ACQS_LO,
            Self::QS_W,
            cq_entries.wrapping_sub(1),
        ))
    }

    /// Admin submission queue size in entries (1-based).
    pub const fn sq_entries(self) -> u32 {
        bits32(self.0, Self::ASQS_LO, Self::QS_W) + 1
    }

    /// Admin completion queue size in entries (1-based).
    pub const fn cq_entries(self) -> u32 {
        bits32(self.0, Self::ACQS_LO, Self::QS_W) + 1
    }
}

/// Offset from BAR0 of the Submission Queue `qid` Tail Doorbell (§3.1.4.20).
///
/// `stride` is [`Cap::doorbell_stride`] in bytes.
pub const fn sq_tail_doorbell(qid: u16, stride: usize) -> usize {
    DOORBELL_BASE + (2 * qid as usize) * stride
}

/// Offset from BAR0 of the Completion Queue `qid` Head Doorbell (§3.1.4.21).
///
/// `stride` is [`Cap::doorbell_stride`] in bytes.
pub const fn cq_head_doorbell(qid: u16, stride: usize) -> usize {
    DOORBELL_BASE + (2 * qid as usize + 1) * stride
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cmbsz_size_and_uses() {
        // 16 MiB in 1 MiB units (SZU 2), all five uses.
        let c = Cmbsz(16 << 12 | 2 << 8 | 0x1F);
        assert_eq!(c.bytes(), 16 << 20);
        assert_eq!(c.uses(), 0x1F);
        // 4 KiB units.
        assert_eq!(Cmbsz(3 << 12).bytes(), 3 * 4096);
        // Reserved SZU: no size rather than a wrapped one.
        assert_eq!(Cmbsz(1 << 12 | 7 << 8).bytes(), 0);
        assert_eq!(Cmbsz(0).bytes(), 0);
    }

    /// CAP as reported by QEMU's emulated NVMe controller (hw/nvme, 2047-entry queues).
    const QEMU_CAP: u64 = 0x0040_1820_0f01_07ff;

    #[test]
    fn decodes_qemu_cap() {
        let cap = Cap(QEMU_CAP);
        assert_eq!(cap.mqes(), 2047);
        assert_eq!(cap.max_queue_entries(), 2048);
        assert!(cap.cqr());
        assert_eq!(cap.to(), 15);
        assert_eq!(cap.timeout(), Duration::from_millis(7500));
        assert_eq!(cap.dstrd(), 0);
        assert_eq!(cap.doorbell_stride(), 4);
        assert!(!cap.nssrs());
        assert!(cap.css_nvm());
        assert!(cap.css_io_command_sets());
        assert!(!cap.bps());
        assert_eq!(cap.mpsmin(), 0);
        assert_eq!(cap.mpsmax(), 4);
        assert_eq!(cap.min_page_size(), 4096);
        assert_eq!(cap.max_page_size(), 65536);
        assert!(!cap.cmbs());
        assert!(!cap.pmrs());
    }

    #[test]
    fn cap_new_round_trips_fields() {
        let cap = Cap::new(1023, true, 20, 2, true, 1, 3);
        assert_eq!(cap.mqes(), 1023);
        assert!(cap.cqr());
        assert_eq!(cap.to(), 20);
        assert_eq!(cap.dstrd(), 2);
        assert_eq!(cap.doorbell_stride(), 16);
        assert!(cap.css_nvm());
        assert_eq!(cap.min_page_size(), 8192);
        assert_eq!(cap.max_page_size(), 32768);
        // The CAP fields that QEMU sets (minus CSS bits 43/44) rebuild its value.
        let qemu = Cap::new(2047, true, 15, 0, true, 0, 4);
        assert_eq!(qemu.0, QEMU_CAP & !(0b11 << 43));
        assert!(!qemu.css_io_command_sets());
        assert_eq!(qemu.with_io_command_sets().0, QEMU_CAP & !(1 << 44));
    }

    #[test]
    fn version_encodes_and_displays() {
        let v = Version::new(1, 4, 0);
        assert_eq!(v.0, 0x0001_0400);
        assert_eq!((v.major(), v.minor(), v.tertiary()), (1, 4, 0));
        assert_eq!(v.to_string(), "1.4.0");
        assert_eq!(Version(0x0002_0001).to_string(), "2.0.1");
        assert!(Version::new(1, 3, 0) < Version::new(1, 4, 0));
    }

    #[test]
    fn cc_builders_place_fields() {
        let cc = Cc::default()
            .with_en(true)
            .with_css(CC_CSS_NVM)
            .with_mps(0)
            .with_ams(0)
            .with_shn(ShutdownNotification::None)
            .with_iosqes(6)
            .with_iocqes(4);
        assert_eq!(cc.0, 0x0046_0001);
        assert!(cc.en());
        assert_eq!((cc.iosqes(), cc.iocqes()), (6, 4));
        let cc = cc
            .with_en(false)
            .with_shn(ShutdownNotification::Normal)
            .with_mps(4);
        assert!(!cc.en());
        assert_eq!(cc.shn(), ShutdownNotification::Normal);
        assert_eq!(cc.mps(), 4);
        assert_eq!(cc.0, 0x0046_4200);
        assert_eq!(
            cc.with_shn(ShutdownNotification::Abrupt).shn(),
            ShutdownNotification::Abrupt
        );
        assert_eq!(Cc(0b11 << 14).shn(), ShutdownNotification::None);
        assert_eq!(Cc(0b11 << 14).shn_raw(), 3);
        assert_eq!(Cc(0b111 << 11).ams(), 7);
        assert_eq!(Cc(0b101 << 4).css(), 5);
    }

    #[test]
    fn csts_decodes() {
        let c = Csts::new(true, false, ShutdownStatus::Complete);
        assert_eq!(c.0, 0b1001);
        assert!(c.rdy());
        assert!(!c.cfs());
        assert_eq!(c.shst(), ShutdownStatus::Complete);
        let c = Csts(0b11_1110);
        assert!(!c.rdy());
        assert!(c.cfs());
        assert_eq!(c.shst(), ShutdownStatus::Reserved);
        assert!(c.nssro());
        assert!(c.pp());
        assert_eq!(Csts(0b0100).shst(), ShutdownStatus::Occurring);
    }

    #[test]
    fn aqa_encodes_zero_based() {
        let a = Aqa::new(32, 64);
        assert_eq!(a.0, 0x003F_001F);
        assert_eq!((a.sq_entries(), a.cq_entries()), (32, 64));
        let max = Aqa::new(ADMIN_QUEUE_MAX_ENTRIES, ADMIN_QUEUE_MAX_ENTRIES);
        assert_eq!(max.0, 0x0FFF_0FFF);
        assert_eq!(max.sq_entries(), 4096);
    }

    #[test]
    fn doorbell_offsets() {
        assert_eq!(sq_tail_doorbell(0, 4), 0x1000);
        assert_eq!(cq_head_doorbell(0, 4), 0x1004);
        assert_eq!(sq_tail_doorbell(1, 4), 0x1008);
        assert_eq!(cq_head_doorbell(1, 4), 0x100C);
        assert_eq!(sq_tail_doorbell(0, 16), 0x1000);
        assert_eq!(cq_head_doorbell(0, 16), 0x1010);
        assert_eq!(sq_tail_doorbell(3, 16), 0x1060);
        assert_eq!(cq_head_doorbell(3, 16), 0x1070);
        assert_eq!(cq_head_doorbell(u16::MAX, 4), 0x1000 + (2 * 65535 + 1) * 4);
        assert_eq!(Cap::new(0, false, 0, 2, true, 0, 0).doorbell_stride(), 16);
    }
}
