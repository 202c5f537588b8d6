//! NVMe Zoned Namespace Command Set (ZNS CS 1.1, command set identifier 02h): the zone
//! commands' dwords, zone states and types, the Report Zones data, the ZNS Identify
//! structures (Identify CNS 05h / 06h with CSI 02h) and the zone status codes.
//!
//! Every structure decoded from device bytes goes through the `wire_struct!` codec (size and
//! offsets asserted at compile time); [`ZoneReport::parse`] never indexes past the bytes it
//! is given, whatever the header claims.

/// Command Set Identifier of the Zoned Namespace Command Set (Base 2.0 §5.15.2.1, Figure 286).
pub const CSI_ZNS: u8 = 0x02;
/// Identify CNS 05h: I/O Command Set specific Identify Namespace (Base 2.0 §5.17.2.6).
pub const CNS_CSI_NAMESPACE: u8 = 0x05;
/// Identify CNS 06h: I/O Command Set specific Identify Controller (Base 2.0 §5.17.2.7).
pub const CNS_CSI_CONTROLLER: u8 = 0x06;
/// Identify CNS 1Ch: I/O Command Set data structure (Base 2.0 §5.17.2.22).
pub const CNS_IO_COMMAND_SET: u8 = 0x1C;
/// Set Features FID 19h: I/O Command Set Profile (Base 2.0 §5.27.1.21).
pub const FID_IO_COMMAND_SET_PROFILE: u8 = 0x19;
/// Command Set Identifier of the NVM Command Set (Base 2.0 §5.15.2.1, Figure 286).
pub const CSI_NVM: u8 = 0x00;
/// I/O Command Set Profile CDW11 bits 8:0: the I/O Command Set Combination Index.
pub const IOCS_INDEX_MASK: u32 = 0x1FF;

/// The I/O Command Set data structure (Identify CNS 1Ch, Base 2.0 §5.17.2.22, Figure 290):
/// 512 I/O Command Set Vectors of 8 bytes, bit `n` of a vector meaning command set
/// identifier `n`. The index of a vector is what Set Features 19h selects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IoCommandSetVectors(pub [u64; Self::COUNT]);

impl IoCommandSetVectors {
    /// Vectors in the structure.
    pub const COUNT: usize = 512;
    /// Bytes of one vector.
    pub const VECTOR_BYTES: usize = 8;

    /// Decodes the 4096-byte structure.
    pub fn parse(bytes: &[u8; IDENTIFY_BYTES]) -> Self {
        Self(core::array::from_fn(|i| {
            let at = i * Self::VECTOR_BYTES;
            let mut v = [0u8; Self::VECTOR_BYTES];
            v.copy_from_slice(&bytes[at..at + Self::VECTOR_BYTES]);
            u64::from_le_bytes(v)
        }))
    }

    /// Encodes it (for emulated controllers).
    pub fn encode(&self) -> [u8; IDENTIFY_BYTES] {
        let mut out = [0u8; IDENTIFY_BYTES];
        for (chunk, v) in out.chunks_exact_mut(Self::VECTOR_BYTES).zip(self.0.iter()) {
            chunk.copy_from_slice(&v.to_le_bytes());
        }
        out
    }

    /// The bit of command set `csi` in a vector.
    pub const fn bit(csi: u8) -> u64 {
        1u64 << (csi & 63)
    }

    /// The index of the first vector holding every command set of `wanted` (a vector of
    /// bits), or else of the first vector holding the NVM command set; `None` when no vector
    /// holds even that.
    pub fn choose(&self, wanted: u64) -> Option<u16> {
        let nvm = Self::bit(CSI_NVM);
        let find = |mask: u64| self.0.iter().position(|v| v & mask == mask);
        find(wanted | nvm).or_else(|| find(nvm)).map(|i| i as u16)
    }
}

/// Zone command opcodes (ZNS CS 1.1 §3.4, Figure 28).
pub mod opcode {
    /// Zone Management Send (§3.4.3).
    pub const ZONE_MGMT_SEND: u8 = 0x79;
    /// Zone Management Receive (§3.4.2).
    pub const ZONE_MGMT_RECV: u8 = 0x7A;
    /// Zone Append (§3.4.1).
    pub const ZONE_APPEND: u8 = 0x7D;
}

/// Zone Append CDW12 bit 30: Force Unit Access (ZNS §3.4.1, Figure 29).
pub const APPEND_FUA: u32 = 1 << 30;
/// CDW12 bits 15:0 of Zone Append: NLB, 0-based.
pub const APPEND_NLB_MASK: u32 = 0xFFFF;

/// Zone Send Action, Zone Management Send CDW13 bits 7:0 (ZNS §3.4.3, Figure 39).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ZoneSendAction {
    /// 01h: Close Zone.
    Close = 0x01,
    /// 02h: Finish Zone.
    Finish = 0x02,
    /// 03h: Open Zone (with ZSASO: allocate a Zone Random Write Area).
    Open = 0x03,
    /// 04h: Reset Zone.
    Reset = 0x04,
    /// 05h: Offline Zone.
    Offline = 0x05,
    /// 10h: Set Zone Descriptor Extension (host-to-controller data).
    SetDescriptorExtension = 0x10,
    /// 11h: Flush Explicit Zone Random Write Area Resource.
    FlushZrwa = 0x11,
}

impl ZoneSendAction {
    /// Decodes ZSA; `None` for reserved values.
    pub const fn from_raw(raw: u8) -> Option<Self> {
        Some(match raw {
            0x01 => Self::Close,
            0x02 => Self::Finish,
            0x03 => Self::Open,
            0x04 => Self::Reset,
            0x05 => Self::Offline,
            0x10 => Self::SetDescriptorExtension,
            0x11 => Self::FlushZrwa,
            _ => return None,
        })
    }
}

/// Zone Management Send CDW13 bit 8: Select All (the action applies to every eligible zone).
pub const SEND_SELECT_ALL: u32 = 1 << 8;
/// Zone Management Send CDW13 bit 9: Zone Send Action Specific (Open: ZRWAA, allocate a ZRWA).
pub const SEND_ZSASO: u32 = 1 << 9;
/// Zone Management Send / Receive CDW13 bits 7:0: the action.
pub const ACTION_MASK: u32 = 0xFF;

/// Zone Receive Action, Zone Management Receive CDW13 bits 7:0 (ZNS §3.4.2, Figure 35).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ZoneRecvAction {
    /// 00h: Report Zones (64-byte descriptors).
    ReportZones = 0x00,
    /// 01h: Extended Report Zones (each descriptor followed by its extension).
    ExtendedReportZones = 0x01,
}

/// Zone Receive Action Specific Field: the Report Zones filter, CDW13 bits 15:8 (ZNS §3.4.2,
/// Figure 36).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ZoneReportFilter {
    /// 0h: every zone.
    All = 0x00,
    /// 1h: Empty zones.
    Empty = 0x01,
    /// 2h: Implicitly Opened zones.
    ImplicitlyOpened = 0x02,
    /// 3h: Explicitly Opened zones.
    ExplicitlyOpened = 0x03,
    /// 4h: Closed zones.
    Closed = 0x04,
    /// 5h: Full zones.
    Full = 0x05,
    /// 6h: Read Only zones.
    ReadOnly = 0x06,
    /// 7h: Offline zones.
    Offline = 0x07,
}

impl ZoneReportFilter {
    /// Decodes ZRASF; `None` for reserved values.
    pub const fn from_raw(raw: u8) -> Option<Self> {
        Some(match raw {
            0x00 => Self::All,
            0x01 => Self::Empty,
            0x02 => Self::ImplicitlyOpened,
            0x03 => Self::ExplicitlyOpened,
            0x04 => Self::Closed,
            0x05 => Self::Full,
            0x06 => Self::ReadOnly,
            0x07 => Self::Offline,
            _ => return None,
        })
    }

    /// Whether a zone in `state` passes the filter.
    pub const fn matches(self, state: ZoneState) -> bool {
        matches!(
            (self, state),
            (Self::All, _)
                | (Self::Empty, ZoneState::Empty)
                | (Self::ImplicitlyOpened, ZoneState::ImplicitlyOpened)
                | (Self::ExplicitlyOpened, ZoneState::ExplicitlyOpened)
                | (Self::Closed, ZoneState::Closed)
                | (Self::Full, ZoneState::Full)
                | (Self::ReadOnly, ZoneState::ReadOnly)
                | (Self::Offline, ZoneState::Offline)
        )
    }
}

/// Shift of ZRASF in Zone Management Receive CDW13.
pub const RECV_FILTER_SHIFT: u32 = 8;
/// Zone Management Receive CDW13 bit 16: Partial Report (Number of Zones counts only the
/// descriptors returned, not every matching zone).
pub const RECV_PARTIAL: u32 = 1 << 16;

/// Zone State, Zone Descriptor byte 1 bits 7:4 (ZNS §3.4.2.2.3, Figure 38; state machine §2.1.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ZoneState {
    /// 1h: ZSE Empty.
    Empty = 0x1,
    /// 2h: ZSIO Implicitly Opened.
    ImplicitlyOpened = 0x2,
    /// 3h: ZSEO Explicitly Opened.
    ExplicitlyOpened = 0x3,
    /// 4h: ZSC Closed.
    Closed = 0x4,
    /// Dh: ZSRO Read Only.
    ReadOnly = 0xD,
    /// Eh: ZSF Full.
    Full = 0xE,
    /// Fh: ZSO Offline.
    Offline = 0xF,
}

/// Shift of the zone state in Zone Descriptor byte 1.
pub const ZONE_STATE_SHIFT: u8 = 4;

impl ZoneState {
    /// Decodes a 4-bit zone state; `None` for reserved values.
    pub const fn from_raw(raw: u8) -> Option<Self> {
        Some(match raw {
            0x1 => Self::Empty,
            0x2 => Self::ImplicitlyOpened,
            0x3 => Self::ExplicitlyOpened,
            0x4 => Self::Closed,
            0xD => Self::ReadOnly,
            0xE => Self::Full,
            0xF => Self::Offline,
            _ => return None,
        })
    }

    /// Open (implicitly or explicitly): counts against MOR and MAR.
    pub const fn is_open(self) -> bool {
        matches!(self, Self::ImplicitlyOpened | Self::ExplicitlyOpened)
    }

    /// Active (open or closed): counts against MAR.
    pub const fn is_active(self) -> bool {
        matches!(
            self,
            Self::ImplicitlyOpened | Self::ExplicitlyOpened | Self::Closed
        )
    }

    /// nvme-cli's name of the state (`nvme zns report-zones`).
    pub const fn name(self) -> &'static str {
        match self {
            Self::Empty => "EMPTY",
            Self::ImplicitlyOpened => "IMP_OPENED",
            Self::ExplicitlyOpened => "EXP_OPENED",
            Self::Closed => "CLOSED",
            Self::ReadOnly => "READONLY",
            Self::Full => "FULL",
            Self::Offline => "OFFLINE",
        }
    }
}

/// Zone Type, Zone Descriptor byte 0 bits 3:0 (ZNS §3.4.2.2.3, Figure 37).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ZoneType {
    /// 2h: Sequential Write Required.
    SequentialWriteRequired,
    /// Any other (reserved) value, kept raw.
    Reserved(u8),
}

/// Zone Type 2h.
const ZONE_TYPE_SWR: u8 = 0x2;
/// Low nibble mask of Zone Descriptor bytes 0 and 1.
const NIBBLE: u8 = 0xF;

impl ZoneType {
    /// Decodes the zone type nibble.
    pub const fn from_raw(raw: u8) -> Self {
        match raw & NIBBLE {
            ZONE_TYPE_SWR => Self::SequentialWriteRequired,
            r => Self::Reserved(r),
        }
    }

    /// The raw nibble.
    pub const fn raw(self) -> u8 {
        match self {
            Self::SequentialWriteRequired => ZONE_TYPE_SWR,
            Self::Reserved(r) => r,
        }
    }
}

/// Zone Attributes, Zone Descriptor byte 2 (ZNS §3.4.2.2.3, Figure 38).
pub mod attr {
    /// Zone Finished by Controller.
    pub const ZFC: u8 = 1 << 0;
    /// Finish Zone Recommended.
    pub const FZR: u8 = 1 << 1;
    /// Reset Zone Recommended.
    pub const RZR: u8 = 1 << 2;
    /// Zone Random Write Area Valid: a ZRWA is allocated to the zone.
    pub const ZRWAV: u8 = 1 << 3;
    /// Zone Descriptor Extension Valid.
    pub const ZDEV: u8 = 1 << 7;
}

wire_struct! {
    /// Zone Descriptor (ZNS CS 1.1 §3.4.2.2.3, Figure 38): one per zone in a report.
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct ZoneDescriptor {
        /// Zone Type in bits 3:0 ([`ZoneType`]).
        zt @ 0: u8,
        /// Zone State in bits 7:4 ([`ZoneState`]).
        zs @ 1: u8,
        /// Zone Attributes ([`attr`]).
        za @ 2: u8,
        /// Zone Attributes Information.
        zai @ 3: u8,
        /// Reserved.
        rsvd4 @ 4: u32,
        /// Zone Capacity in logical blocks.
        zcap @ 8: u64,
        /// Zone Start Logical Block Address.
        zslba @ 16: u64,
        /// Write Pointer.
        wp @ 24: u64,
        /// Reserved (bytes 63:32).
        rsvd32 @ 32: [u64; 4],
    }
    size 64;
}

impl ZoneDescriptor {
    /// The zone state, `None` for a reserved value.
    pub const fn state(&self) -> Option<ZoneState> {
        ZoneState::from_raw(self.zs >> ZONE_STATE_SHIFT)
    }

    /// The zone type.
    pub const fn zone_type(&self) -> ZoneType {
        ZoneType::from_raw(self.zt)
    }

    /// A descriptor of a sequential-write-required zone.
    pub const fn new(zslba: u64, zcap: u64, wp: u64, state: ZoneState, za: u8) -> Self {
        Self {
            zt: ZONE_TYPE_SWR,
            zs: (state as u8) << ZONE_STATE_SHIFT,
            za,
            zai: 0,
            rsvd4: 0,
            zcap,
            zslba,
            wp,
            rsvd32: [0; 4],
        }
    }
}

wire_struct! {
    /// Report Zones data structure header (ZNS CS 1.1 §3.4.2.2.1, Figure 37).
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct ZoneReportHeader {
        /// Number of Zones: matching zones (or, with Partial Report, descriptors returned).
        nr_zones @ 0: u64,
        /// Reserved (bytes 63:8).
        rsvd8 @ 8: [u64; 7],
    }
    size 64;
}

/// Errors of [`ZoneReport::parse`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ZoneReportError {
    /// Fewer bytes than a header.
    Short {
        /// Bytes given.
        len: usize,
    },
}

/// A parsed Report Zones buffer: the header's count and the descriptors that are both in the
/// buffer and within that count. Iterating yields each descriptor (and its extension bytes
/// for an Extended Report Zones with a descriptor extension size).
#[derive(Clone, Copy, Debug)]
pub struct ZoneReport<'a> {
    /// Number of Zones from the header (may exceed the descriptors in the buffer).
    pub nr_zones: u64,
    body: &'a [u8],
    ext: usize,
}

impl<'a> ZoneReport<'a> {
    /// Parses `bytes` of a Report Zones (`ext` = 0) or Extended Report Zones (`ext` = the
    /// descriptor extension size in bytes, ZDES * 64) reply. Never panics: the descriptor
    /// count is the smaller of the header's and what fits the buffer.
    pub fn parse(bytes: &'a [u8], ext: usize) -> Result<Self, ZoneReportError> {
        let Some((head, body)) = bytes.split_first_chunk::<{ ZoneReportHeader::SIZE }>() else {
            return Err(ZoneReportError::Short { len: bytes.len() });
        };
        let header = ZoneReportHeader::from_bytes(head);
        Ok(Self {
            nr_zones: header.nr_zones,
            body,
            ext,
        })
    }

    /// Descriptors present in the buffer and counted by the header.
    pub fn len(&self) -> usize {
        let fit = self.body.len() / (ZoneDescriptor::SIZE + self.ext);
        fit.min(usize::try_from(self.nr_zones).unwrap_or(usize::MAX))
    }

    /// No descriptors.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The descriptors with their extension bytes (empty for a plain report).
    pub fn iter(&self) -> impl Iterator<Item = (ZoneDescriptor, &'a [u8])> + 'a {
        let step = ZoneDescriptor::SIZE + self.ext;
        let body = self.body;
        body.chunks_exact(step).take(self.len()).map(|chunk| {
            let (desc, ext) = chunk.split_at(ZoneDescriptor::SIZE);
            let mut raw = [0u8; ZoneDescriptor::SIZE];
            raw.copy_from_slice(desc);
            (ZoneDescriptor::from_bytes(&raw), ext)
        })
    }
}

wire_struct! {
    /// LBA Format Extension Data Structure of the ZNS Identify Namespace (ZNS §4.1.5.1,
    /// Figure 51), one per LBA format from byte [`ZNS_LBAFE_OFFSET`].
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct ZnsLbaFormatExt {
        /// Zone Size in logical blocks.
        zsze @ 0: u64,
        /// Zone Descriptor Extension Size in 64-byte units.
        zdes @ 8: u8,
        /// Reserved.
        rsvd9 @ 9: [u8; 7],
    }
    size 16;
}

/// Byte offset of the first LBA Format Extension in the ZNS Identify Namespace data.
pub const ZNS_LBAFE_OFFSET: usize = 2816;
/// LBA Format Extensions in the ZNS Identify Namespace data (one per LBA format).
pub const ZNS_LBAFE_COUNT: usize = 64;
/// Bytes of every Identify data structure.
pub const IDENTIFY_BYTES: usize = 4096;
/// One Zone Descriptor Extension unit (ZDES counts these).
pub const ZDES_UNIT: usize = 64;

wire_struct! {
    /// The first bytes of the I/O Command Set specific Identify Namespace for the Zoned
    /// Namespace Command Set (CNS 05h, CSI 02h; ZNS CS 1.1 §4.1.5.1, Figure 50). The LBA
    /// Format Extensions follow at [`ZNS_LBAFE_OFFSET`] ([`ZnsIdentifyNamespace::parse`]).
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct ZnsIdentifyNamespaceHead {
        /// Zone Operation Characteristics (bit 0 Variable Zone Capacity, bit 1 Zone Active
        /// Excursions).
        zoc @ 0: u16,
        /// Optional Zoned Command Support (bit 0 Read Across Zone Boundaries, bit 1 ZRWA
        /// Support).
        ozcs @ 2: u16,
        /// Maximum Active Resources, 0-based (FFFFFFFFh: no limit).
        mar @ 4: u32,
        /// Maximum Open Resources, 0-based (FFFFFFFFh: no limit).
        mor @ 8: u32,
        /// Reset Recommended Limit (seconds).
        rrl @ 12: u32,
        /// Finish Recommended Limit (seconds).
        frl @ 16: u32,
        /// RRL1..3 and FRL1..3 (not used here).
        rrl_frl @ 20: [u32; 6],
        /// Number of ZRWA Resources.
        numzrwa @ 44: u32,
        /// ZRWA Flush Granularity in logical blocks.
        zrwafg @ 48: u16,
        /// ZRWA Size in logical blocks.
        zrwasz @ 50: u16,
        /// ZRWA Capability (bit 0: explicit ZRWA flush supported).
        zrwacap @ 52: u8,
        /// Reserved (up to a 64-byte head).
        rsvd53 @ 53: [u8; 11],
    }
    size 64;
}

/// OZCS bit 1: the namespace supports Zone Random Write Areas.
pub const OZCS_ZRWASUP: u16 = 1 << 1;
/// ZRWACAP bit 0: Explicit ZRWA Flush is supported.
pub const ZRWACAP_EXPFLUSHSUP: u8 = 1 << 0;
/// MAR/MOR value meaning "no limit".
pub const NO_LIMIT: u32 = u32::MAX;

/// The ZNS Identify Namespace: the head and the LBA Format Extensions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ZnsIdentifyNamespace {
    /// Bytes 63:0.
    pub head: ZnsIdentifyNamespaceHead,
    /// LBA Format Extensions, indexed like the LBA formats of Identify Namespace.
    pub lbafe: [ZnsLbaFormatExt; ZNS_LBAFE_COUNT],
}

impl ZnsIdentifyNamespace {
    /// Decodes a 4096-byte Identify reply.
    pub fn parse(bytes: &[u8; IDENTIFY_BYTES]) -> Self {
        let mut head = [0u8; ZnsIdentifyNamespaceHead::SIZE];
        head.copy_from_slice(&bytes[..ZnsIdentifyNamespaceHead::SIZE]);
        let lbafe = core::array::from_fn(|i| {
            let at = ZNS_LBAFE_OFFSET + i * ZnsLbaFormatExt::SIZE;
            let mut raw = [0u8; ZnsLbaFormatExt::SIZE];
            raw.copy_from_slice(&bytes[at..at + ZnsLbaFormatExt::SIZE]);
            ZnsLbaFormatExt::from_bytes(&raw)
        });
        Self {
            head: ZnsIdentifyNamespaceHead::from_bytes(&head),
            lbafe,
        }
    }

    /// Encodes it as a 4096-byte Identify reply.
    pub fn encode(&self, out: &mut [u8; IDENTIFY_BYTES]) {
        out[..ZnsIdentifyNamespaceHead::SIZE].copy_from_slice(&self.head.to_bytes());
        for (i, f) in self.lbafe.iter().enumerate() {
            let at = ZNS_LBAFE_OFFSET + i * ZnsLbaFormatExt::SIZE;
            out[at..at + ZnsLbaFormatExt::SIZE].copy_from_slice(&f.to_bytes());
        }
    }

    /// A 0-based MAR/MOR as a count (`None`: no limit).
    pub const fn limit(raw: u32) -> Option<u32> {
        match raw {
            NO_LIMIT => None,
            n => Some(n + 1),
        }
    }
}

wire_struct! {
    /// The head of the ZNS Identify Controller (CNS 06h, CSI 02h; ZNS CS 1.1 §4.1.5.2,
    /// Figure 52); the rest of the 4096 bytes is reserved.
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct ZnsIdentifyController {
        /// Zone Append Size Limit: 2^ZASL minimum memory pages (0: MDTS applies).
        zasl @ 0: u8,
        /// Reserved (bytes 7:1).
        rsvd1 @ 1: [u8; 7],
        /// Reserved (bytes 63:8).
        rsvd8 @ 8: [u64; 7],
    }
    size 64;
}

/// Zone status codes, SCT 1h Command Specific (ZNS CS 1.1 §3.3.1.1, Figure 26).
pub mod status {
    /// Zone Boundary Error: the command crosses a zone boundary.
    pub const ZONE_BOUNDARY_ERROR: u8 = 0xB8;
    /// Zone Is Full.
    pub const ZONE_IS_FULL: u8 = 0xB9;
    /// Zone Is Read Only.
    pub const ZONE_IS_READ_ONLY: u8 = 0xBA;
    /// Zone Is Offline.
    pub const ZONE_IS_OFFLINE: u8 = 0xBB;
    /// Zone Invalid Write: a write not at the write pointer.
    pub const ZONE_INVALID_WRITE: u8 = 0xBC;
    /// Too Many Active Zones.
    pub const TOO_MANY_ACTIVE_ZONES: u8 = 0xBD;
    /// Too Many Open Zones.
    pub const TOO_MANY_OPEN_ZONES: u8 = 0xBE;
    /// Invalid Zone State Transition.
    pub const INVALID_ZONE_STATE_TRANSITION: u8 = 0xBF;
}

/// A zone error status as a type (ZNS CS 1.1 §3.3.1.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ZoneError {
    /// B8h.
    Boundary,
    /// B9h.
    Full,
    /// BAh.
    ReadOnly,
    /// BBh.
    Offline,
    /// BCh.
    InvalidWrite,
    /// BDh.
    TooManyActive,
    /// BEh.
    TooManyOpen,
    /// BFh.
    InvalidTransition,
}

impl ZoneError {
    /// The zone error of a status, `None` for any other status.
    pub fn from_status(status: crate::status::Status) -> Option<Self> {
        if status.sct() != crate::status::StatusCodeType::CommandSpecific {
            return None;
        }
        Some(match status.sc() {
            status::ZONE_BOUNDARY_ERROR => Self::Boundary,
            status::ZONE_IS_FULL => Self::Full,
            status::ZONE_IS_READ_ONLY => Self::ReadOnly,
            status::ZONE_IS_OFFLINE => Self::Offline,
            status::ZONE_INVALID_WRITE => Self::InvalidWrite,
            status::TOO_MANY_ACTIVE_ZONES => Self::TooManyActive,
            status::TOO_MANY_OPEN_ZONES => Self::TooManyOpen,
            status::INVALID_ZONE_STATE_TRANSITION => Self::InvalidTransition,
            _ => return None,
        })
    }

    /// The status code (SCT 1h).
    pub const fn sc(self) -> u8 {
        match self {
            Self::Boundary => status::ZONE_BOUNDARY_ERROR,
            Self::Full => status::ZONE_IS_FULL,
            Self::ReadOnly => status::ZONE_IS_READ_ONLY,
            Self::Offline => status::ZONE_IS_OFFLINE,
            Self::InvalidWrite => status::ZONE_INVALID_WRITE,
            Self::TooManyActive => status::TOO_MANY_ACTIVE_ZONES,
            Self::TooManyOpen => status::TOO_MANY_OPEN_ZONES,
            Self::InvalidTransition => status::INVALID_ZONE_STATE_TRANSITION,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptors_round_trip_and_states_decode() {
        let d = ZoneDescriptor::new(0x1000, 0x800, 0x1010, ZoneState::ImplicitlyOpened, 0);
        let b = d.to_bytes();
        assert_eq!(b[0], 0x2);
        assert_eq!(b[1], 0x20);
        assert_eq!(u64::from_le_bytes(b[16..24].try_into().unwrap()), 0x1000);
        assert_eq!(u64::from_le_bytes(b[24..32].try_into().unwrap()), 0x1010);
        let back = ZoneDescriptor::from_bytes(&b);
        assert_eq!(back.state(), Some(ZoneState::ImplicitlyOpened));
        assert_eq!(back.zone_type(), ZoneType::SequentialWriteRequired);
        for raw in 0..16u8 {
            if let Some(s) = ZoneState::from_raw(raw) {
                assert_eq!(s as u8, raw);
            }
        }
        assert_eq!(ZoneState::from_raw(0x5), None);
    }

    #[test]
    fn report_parser_never_trusts_the_count() {
        let mut buf = vec![0u8; 64 + 2 * 64 + 10];
        buf[..8].copy_from_slice(&u64::MAX.to_le_bytes());
        let d = ZoneDescriptor::new(64, 64, 70, ZoneState::Closed, 0);
        buf[128..192].copy_from_slice(&d.to_bytes());
        let r = ZoneReport::parse(&buf, 0).unwrap();
        assert_eq!(r.len(), 2);
        let zones: Vec<_> = r.iter().collect();
        assert_eq!(zones[1].0, d);
        assert!(ZoneReport::parse(&buf[..63], 0).is_err());
        // Extended: 64-byte extension per descriptor, only one fits.
        let r = ZoneReport::parse(&buf, 64).unwrap();
        assert_eq!(r.len(), 1);
        assert_eq!(r.iter().next().unwrap().1.len(), 64);
        // Every prefix and every garbage buffer parses without a panic.
        for n in 0..buf.len() {
            if let Ok(r) = ZoneReport::parse(&buf[..n], 0) {
                assert!(r.iter().count() <= r.len());
            }
        }
    }

    #[test]
    fn filters_and_zone_errors() {
        assert!(ZoneReportFilter::All.matches(ZoneState::Offline));
        assert!(ZoneReportFilter::Full.matches(ZoneState::Full));
        assert!(!ZoneReportFilter::Full.matches(ZoneState::Empty));
        let s = crate::status::Status::new(
            crate::status::StatusCodeType::CommandSpecific.raw(),
            status::ZONE_INVALID_WRITE,
            true,
        );
        assert_eq!(ZoneError::from_status(s), Some(ZoneError::InvalidWrite));
        assert_eq!(ZoneError::InvalidWrite.sc(), status::ZONE_INVALID_WRITE);
    }

    #[test]
    fn command_set_vectors_pick_the_zoned_combination() {
        let mut v = IoCommandSetVectors([0; IoCommandSetVectors::COUNT]);
        v.0[0] = IoCommandSetVectors::bit(CSI_NVM);
        v.0[3] = IoCommandSetVectors::bit(CSI_NVM) | IoCommandSetVectors::bit(CSI_ZNS);
        let back = IoCommandSetVectors::parse(&v.encode());
        assert_eq!(back, v);
        assert_eq!(back.choose(IoCommandSetVectors::bit(CSI_ZNS)), Some(3));
        v.0[3] = IoCommandSetVectors::bit(CSI_ZNS);
        assert_eq!(v.choose(IoCommandSetVectors::bit(CSI_ZNS)), Some(0));
        // QEMU 7.2's structure: NVM and ZNS in vector 0 (byte 0 = 05h).
        let mut qemu = [0u8; IDENTIFY_BYTES];
        qemu[0] = 0x05;
        let q = IoCommandSetVectors::parse(&qemu);
        assert_eq!(q.choose(IoCommandSetVectors::bit(CSI_ZNS)), Some(0));
        assert_eq!(
            IoCommandSetVectors::parse(&[0; IDENTIFY_BYTES]).choose(0),
            None
        );
    }

    #[test]
    fn identify_namespace_round_trips() {
        let mut ns = ZnsIdentifyNamespace {
            head: ZnsIdentifyNamespaceHead {
                mar: 13,
                mor: 13,
                ozcs: OZCS_ZRWASUP,
                zrwasz: 32,
                ..Default::default()
            },
            lbafe: [ZnsLbaFormatExt::default(); ZNS_LBAFE_COUNT],
        };
        ns.lbafe[0].zsze = 4096;
        let mut out = [0u8; IDENTIFY_BYTES];
        ns.encode(&mut out);
        assert_eq!(out[4..8], 13u32.to_le_bytes());
        assert_eq!(
            out[ZNS_LBAFE_OFFSET..ZNS_LBAFE_OFFSET + 8],
            4096u64.to_le_bytes()
        );
        assert_eq!(ZnsIdentifyNamespace::parse(&out), ns);
        assert_eq!(ZnsIdentifyNamespace::limit(13), Some(14));
        assert_eq!(ZnsIdentifyNamespace::limit(NO_LIMIT), None);
    }
}
