//! Zoned Namespace Command Set commands (ZNS CS 1.1 §3.4) as typed [`NvmCommand`]s: Zone
//! Append ([`ZoneAppend`], returning the LBA written), Zone Management Send
//! ([`ZoneMgmtSend`]: open, close, finish, reset, offline, set descriptor extension, flush
//! explicit ZRWA) and Zone Management Receive ([`ZoneMgmtRecv`]: Report Zones into the data
//! buffer, parsed by [`nvme_spec::zns::ZoneReport`], which cannot panic on device bytes).
//! A zone error status completes as [`Error::Zone`](crate::Error::Zone).
//!
//! None of them is cut at MDTS: an append must reach the controller whole (a split append
//! could land its halves apart), and a report is one buffer.
//!
//! The written LBA of a Zone Append is in completion dwords 0 (low) and 1 (high) (§3.4.1.1).
//! A [`Completion`](crate::Completion) carries dword 0 only, to keep the read/write path as
//! it is; [`ZoneAppend::written_lba`] rebuilds the high half from the zone start given at
//! submission, which is exact whenever a zone spans at most 2^32 blocks (every zone size the
//! ZNS Identify Namespace ZSZE of real and QEMU devices reports; [`ZoneAppend::written_lba`]
//! returns the wrapped value otherwise).

use nvme_spec::opcode::NvmOpcode;
use nvme_spec::queue::SubmissionEntry;
use nvme_spec::zns::{
    self, ZnsIdentifyNamespace, ZoneRecvAction, ZoneReportFilter, ZoneSendAction,
};

use crate::command::{DataDirection, LbaRange, NvmCommand};
use crate::error::Result;
use crate::namespace::Namespace;

/// Bytes per dword (NUMD counts dwords).
const DWORD: usize = 4;
/// The low half of a 64-bit LBA.
const LOW_HALF: u64 = u32::MAX as u64;
/// One past the low half.
const HIGH_STEP: u64 = 1 << 32;

/// A zoned namespace's zones as its ZNS Identify Namespace (CNS 05h, CSI 02h; ZNS CS 1.1
/// §4.1.5.1) and the controller's ZASL (CNS 06h, §4.1.5.2) describe them: the
/// [`Namespace::zoned`] of a namespace whose Command Set Identifier is 02h, read at bring-up
/// once the controller runs with the Zoned Namespace Command Set enabled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ZoneGeometry {
    /// Zone size in blocks (ZSZE of the current LBA format); zone `i` starts at
    /// `i * zone_blocks`.
    pub zone_blocks: u64,
    /// Most zones open at once (MOR + 1), `None`: no limit.
    pub max_open: Option<u32>,
    /// Most zones active (open or closed) at once (MAR + 1), `None`: no limit.
    pub max_active: Option<u32>,
    /// Largest Zone Append in bytes (ZASL, or the largest transfer where ZASL is 0).
    pub max_append_bytes: usize,
    /// Bytes of each zone's descriptor extension (ZDES * 64; 0: none).
    pub descriptor_extension_bytes: usize,
    /// Zone capacities may change on reset (ZOC bit 0, Variable Zone Capacity).
    pub variable_capacity: bool,
    /// The Zone Random Write Area, where the namespace offers one (OZCS bit 1).
    pub zrwa: Option<ZrwaGeometry>,
}

/// A namespace's Zone Random Write Area (ZNS CS 1.1 §2.1.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ZrwaGeometry {
    /// Size of the area in blocks (ZRWASZ).
    pub blocks: u16,
    /// Flush granularity in blocks (ZRWAFG).
    pub flush_granularity: u16,
    /// Zones that may have an area at once (NUMZRWA + 1).
    pub resources: u32,
    /// Explicit ZRWA Flush is supported (ZRWACAP bit 0).
    pub explicit_flush: bool,
}

/// ZOC bit 0: Variable Zone Capacity.
const ZOC_VARIABLE_CAPACITY: u16 = 1 << 0;

impl ZoneGeometry {
    /// The zones of a namespace formatted with LBA format `lba_format`, from its ZNS
    /// Identify Namespace, with appends limited to `max_append_bytes` (see
    /// [`ZoneGeometry::append_limit`]); or why the namespace cannot be used (a zone size of
    /// 0 blocks).
    pub fn from_identify(
        id: &ZnsIdentifyNamespace,
        lba_format: usize,
        max_append_bytes: usize,
    ) -> std::result::Result<Self, String> {
        let ext = id
            .lbafe
            .get(lba_format)
            .ok_or_else(|| format!("its LBA format {lba_format} has no zone format extension"))?;
        if ext.zsze == 0 {
            return Err(format!(
                "its ZNS Identify Namespace gives LBA format {lba_format} a zone size of 0 blocks"
            ));
        }
        let h = &id.head;
        Ok(Self {
            zone_blocks: ext.zsze,
            max_open: ZnsIdentifyNamespace::limit(h.mor),
            max_active: ZnsIdentifyNamespace::limit(h.mar),
            max_append_bytes,
            descriptor_extension_bytes: usize::from(ext.zdes) * zns::ZDES_UNIT,
            variable_capacity: h.zoc & ZOC_VARIABLE_CAPACITY != 0,
            zrwa: (h.ozcs & zns::OZCS_ZRWASUP != 0).then(|| ZrwaGeometry {
                blocks: h.zrwasz,
                flush_granularity: h.zrwafg,
                resources: h.numzrwa.saturating_add(1),
                explicit_flush: h.zrwacap & zns::ZRWACAP_EXPFLUSHSUP != 0,
            }),
        })
    }

    /// The largest Zone Append in bytes: 2^ZASL pages of `min_page_size` bytes (CAP.MPSMIN),
    /// at most `max_transfer`; ZASL 0 means the largest transfer (ZNS CS 1.1 §4.1.5.2).
    pub fn append_limit(zasl: u8, min_page_size: usize, max_transfer: usize) -> usize {
        if zasl == 0 {
            return max_transfer;
        }
        min_page_size
            .checked_shl(u32::from(zasl))
            .map_or(max_transfer, |b| b.min(max_transfer))
    }

    /// The first block of the zone holding `lba`.
    #[inline]
    pub const fn zone_start(&self, lba: u64) -> u64 {
        lba - lba % self.zone_blocks
    }

    /// Zones of a namespace of `blocks` blocks (a last partial zone not counted).
    #[inline]
    pub const fn zones(&self, blocks: u64) -> u64 {
        blocks / self.zone_blocks
    }
}

fn lba_dwords(sqe: &mut SubmissionEntry, lba: u64) {
    sqe.cdw10 = lba as u32;
    sqe.cdw11 = (lba >> 32) as u32;
}

/// The [`NvmCommand`] of a zone management command (`$name` is also its [`NvmOpcode`]):
/// the zone named by `slba` (one block range-checked, never split), CDW10-11 the SLBA, and
/// CDW12, CDW13, direction, data size and size check from the type's own `cdw12`, `cdw13`,
/// `data_direction`, `transfer_bytes` and `check_size`.
macro_rules! zone_management_command {
    ($name:ident) => {
        impl NvmCommand for $name {
            #[inline]
            fn opcode(&self) -> NvmOpcode {
                NvmOpcode::$name
            }
            #[inline]
            fn range(&self) -> Option<LbaRange> {
                Some(LbaRange::new(self.slba, 1))
            }
            #[inline]
            fn with_range(self, range: LbaRange) -> Self {
                Self {
                    slba: range.lba,
                    ..self
                }
            }
            #[inline]
            fn sqe(&self, nsid: u32) -> SubmissionEntry {
                let mut sqe = SubmissionEntry {
                    nsid,
                    cdw12: self.cdw12(),
                    cdw13: self.cdw13(),
                    ..SubmissionEntry::new(NvmOpcode::$name.byte())
                };
                lba_dwords(&mut sqe, self.slba);
                sqe
            }
            #[inline]
            fn direction(&self) -> DataDirection {
                self.data_direction()
            }
            #[inline]
            fn data_bytes(&self, _ns: &Namespace) -> usize {
                self.transfer_bytes()
            }
            #[inline]
            fn splittable(&self) -> bool {
                false
            }
            #[inline]
            fn check_range(&self, ns: &Namespace) -> Result<()> {
                self.check_size()?;
                ns.check_blocks(self.slba, 1)
            }
        }
    };
}

/// Zone Append (ZNS CS 1.1 §3.4.1): `blocks` blocks of the buffer written at the zone's write
/// pointer; the zone is named by its start LBA `zslba`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use = "a built command does nothing until it is submitted"]
pub struct ZoneAppend {
    /// Zone start and blocks appended.
    pub range: LbaRange,
    /// Force Unit Access.
    pub fua: bool,
}

impl ZoneAppend {
    /// An append of `blocks` blocks to the zone starting at `zslba`.
    #[inline]
    pub const fn new(zslba: u64, blocks: u32) -> Self {
        Self {
            range: LbaRange::new(zslba, blocks),
            fua: false,
        }
    }

    /// With Force Unit Access.
    #[inline]
    pub const fn fua(self) -> Self {
        Self { fua: true, ..self }
    }

    /// The LBA the data was written at, from the completion's dword 0 (the module docs say
    /// how the high half is found): the first LBA at or after the zone start with that low
    /// half.
    #[inline]
    pub const fn written_lba(&self, dw0: u32) -> u64 {
        let zslba = self.range.lba;
        let lba = (zslba & !LOW_HALF) | dw0 as u64;
        if lba < zslba {
            lba.wrapping_add(HIGH_STEP)
        } else {
            lba
        }
    }
}

impl NvmCommand for ZoneAppend {
    #[inline]
    fn opcode(&self) -> NvmOpcode {
        NvmOpcode::ZoneAppend
    }
    #[inline]
    fn range(&self) -> Option<LbaRange> {
        Some(self.range)
    }
    #[inline]
    fn with_range(self, range: LbaRange) -> Self {
        Self { range, ..self }
    }
    #[inline]
    fn check_range(&self, ns: &Namespace) -> Result<()> {
        ns.check_range(self.range.lba, u64::from(self.range.blocks))?;
        if let Some(z) = ns.zoned() {
            let bytes = ns.blocks_to_bytes(u64::from(self.range.blocks));
            if bytes > z.max_append_bytes as u64 {
                return Err(crate::Error::InvalidRequest(format!(
                    "a Zone Append of {bytes} bytes exceeds the controller's limit of {} \
                     bytes (ZASL): append less at a time",
                    z.max_append_bytes
                )));
            }
            if z.zone_start(self.range.lba) != self.range.lba {
                return Err(crate::Error::InvalidRequest(format!(
                    "Zone Append names LBA {}, which is not a zone start (zones are {} \
                     blocks): give the zone's first LBA",
                    self.range.lba, z.zone_blocks
                )));
            }
        }
        Ok(())
    }
    #[inline]
    fn sqe(&self, nsid: u32) -> SubmissionEntry {
        let mut sqe = SubmissionEntry {
            nsid,
            cdw12: self.range.blocks.wrapping_sub(1) & zns::APPEND_NLB_MASK,
            ..SubmissionEntry::new(NvmOpcode::ZoneAppend.byte())
        };
        if self.fua {
            sqe.cdw12 |= zns::APPEND_FUA;
        }
        lba_dwords(&mut sqe, self.range.lba);
        sqe
    }
    #[inline]
    fn splittable(&self) -> bool {
        false
    }
}

/// Zone Management Send (ZNS CS 1.1 §3.4.3): `action` on the zone starting at `slba`, or on
/// every eligible zone with [`ZoneMgmtSend::all`]. Only Set Zone Descriptor Extension moves
/// data (the extension, ZDES * 64 bytes, from the buffer); the others go without a buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use = "a built command does nothing until it is submitted"]
pub struct ZoneMgmtSend {
    /// Start LBA of the zone.
    pub slba: u64,
    /// The action.
    pub action: ZoneSendAction,
    /// Select All.
    pub select_all: bool,
    /// Zone Send Action Specific: with Open, allocate a Zone Random Write Area (ZRWAA).
    pub zsaso: bool,
    /// Bytes of the descriptor extension (Set Zone Descriptor Extension only).
    pub ext_bytes: u32,
}

impl ZoneMgmtSend {
    /// `action` on the zone starting at `slba`.
    #[inline]
    pub const fn new(slba: u64, action: ZoneSendAction) -> Self {
        Self {
            slba,
            action,
            select_all: false,
            zsaso: false,
            ext_bytes: 0,
        }
    }

    /// Explicit open of the zone with a Zone Random Write Area (ZNS §2.1.3, ZRWAA).
    #[inline]
    pub const fn open_with_zrwa(slba: u64) -> Self {
        Self {
            zsaso: true,
            ..Self::new(slba, ZoneSendAction::Open)
        }
    }

    /// Set Zone Descriptor Extension of `bytes` bytes (ZDES * 64) from the buffer.
    #[inline]
    pub const fn set_descriptor_extension(slba: u64, bytes: u32) -> Self {
        Self {
            ext_bytes: bytes,
            ..Self::new(slba, ZoneSendAction::SetDescriptorExtension)
        }
    }

    /// The action on every eligible zone (Select All; SLBA is ignored by the controller).
    #[inline]
    pub const fn all(self) -> Self {
        Self {
            select_all: true,
            ..self
        }
    }

    fn moves_data(&self) -> bool {
        matches!(self.action, ZoneSendAction::SetDescriptorExtension)
    }
}

impl ZoneMgmtSend {
    fn cdw12(&self) -> u32 {
        0
    }

    fn cdw13(&self) -> u32 {
        let mut dw = u32::from(self.action as u8);
        if self.select_all {
            dw |= zns::SEND_SELECT_ALL;
        }
        if self.zsaso {
            dw |= zns::SEND_ZSASO;
        }
        dw
    }

    fn data_direction(&self) -> DataDirection {
        if self.moves_data() {
            DataDirection::ToDevice
        } else {
            DataDirection::None
        }
    }

    fn transfer_bytes(&self) -> usize {
        self.ext_bytes as usize
    }

    fn check_size(&self) -> Result<()> {
        Ok(())
    }
}

zone_management_command!(ZoneMgmtSend);

/// Zone Management Receive (ZNS CS 1.1 §3.4.2): a (extended) Report Zones of the zones from
/// the one holding `slba`, filtered, into a buffer of `bytes` bytes (a multiple of 4, at least
/// the 64-byte header).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use = "a built command does nothing until it is submitted"]
pub struct ZoneMgmtRecv {
    /// First LBA of the report.
    pub slba: u64,
    /// Report Zones or Extended Report Zones.
    pub action: ZoneRecvAction,
    /// Which zones are reported.
    pub filter: ZoneReportFilter,
    /// Partial Report: Number of Zones counts the descriptors returned only.
    pub partial: bool,
    /// Bytes of the data buffer the report goes to.
    pub bytes: u32,
}

impl ZoneMgmtRecv {
    /// A Report Zones of every zone from `slba` into `bytes` bytes.
    #[inline]
    pub const fn report_zones(slba: u64, bytes: u32) -> Self {
        Self {
            slba,
            action: ZoneRecvAction::ReportZones,
            filter: ZoneReportFilter::All,
            partial: false,
            bytes,
        }
    }

    /// Extended Report Zones (descriptors with their extensions).
    #[inline]
    pub const fn extended(self) -> Self {
        Self {
            action: ZoneRecvAction::ExtendedReportZones,
            ..self
        }
    }

    /// Only zones passing `filter`.
    #[inline]
    pub const fn filter(self, filter: ZoneReportFilter) -> Self {
        Self { filter, ..self }
    }

    /// With Partial Report.
    #[inline]
    pub const fn partial(self) -> Self {
        Self {
            partial: true,
            ..self
        }
    }
}

impl ZoneMgmtRecv {
    fn cdw12(&self) -> u32 {
        // NUMD: dwords to transfer, 0-based.
        (self.bytes as usize / DWORD).saturating_sub(1) as u32
    }

    fn cdw13(&self) -> u32 {
        let mut dw =
            u32::from(self.action as u8) | u32::from(self.filter as u8) << zns::RECV_FILTER_SHIFT;
        if self.partial {
            dw |= zns::RECV_PARTIAL;
        }
        dw
    }

    fn data_direction(&self) -> DataDirection {
        NvmOpcode::ZoneMgmtRecv.direction()
    }

    fn transfer_bytes(&self) -> usize {
        self.bytes as usize
    }

    fn check_size(&self) -> Result<()> {
        if (self.bytes as usize) < nvme_spec::zns::ZoneReportHeader::SIZE
            || self.bytes as usize % DWORD != 0
        {
            return Err(crate::Error::InvalidRequest(format!(
                "Zone Management Receive of {} bytes: a multiple of 4, at least the 64-byte header",
                self.bytes
            )));
        }
        Ok(())
    }
}

zone_management_command!(ZoneMgmtRecv);

/// The erased forms' rules (an [`IoCommand`](crate::IoCommand) holding a zone command).
pub(crate) mod erased {
    use super::*;

    /// Whether the opcode is one of the zone commands.
    pub(crate) fn is_zone(sqe: &SubmissionEntry) -> bool {
        matches!(
            sqe.opcode(),
            nvme_spec::opcode::nvm::ZONE_APPEND
                | nvme_spec::opcode::nvm::ZONE_MGMT_SEND
                | nvme_spec::opcode::nvm::ZONE_MGMT_RECV
        )
    }

    /// A Zone Management Send without data (every action but Set Zone Descriptor Extension).
    pub(crate) fn send_without_data(sqe: &SubmissionEntry) -> bool {
        sqe.opcode() == nvme_spec::opcode::nvm::ZONE_MGMT_SEND
            && ZoneSendAction::from_raw((sqe.cdw13 & zns::ACTION_MASK) as u8)
                != Some(ZoneSendAction::SetDescriptorExtension)
    }

    /// Data bytes of an erased zone command other than Zone Append (whose are its blocks):
    /// NUMD of a receive, none of a send (the extension size is not in the entry: an erased
    /// Set Zone Descriptor Extension takes the whole buffer).
    pub(crate) fn data_bytes(sqe: &SubmissionEntry) -> Option<usize> {
        match sqe.opcode() {
            nvme_spec::opcode::nvm::ZONE_MGMT_RECV => Some((sqe.cdw12 as usize + 1) * DWORD),
            nvme_spec::opcode::nvm::ZONE_MGMT_SEND => Some(0),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::IoCommand;

    #[test]
    fn zone_commands_encode_the_spec_layout() {
        let a = ZoneAppend::new(0x1_0000_0000, 8).fua().sqe(2);
        assert_eq!(a.opcode(), 0x7D);
        assert_eq!((a.cdw10, a.cdw11, a.cdw12), (0, 1, 7 | 1 << 30));
        let s = ZoneMgmtSend::open_with_zrwa(64).sqe(1);
        assert_eq!((s.opcode(), s.cdw10, s.cdw13), (0x79, 64, 0x03 | 1 << 9));
        let r = ZoneMgmtSend::new(0, ZoneSendAction::Reset).all().sqe(1);
        assert_eq!(r.cdw13, 0x04 | 1 << 8);
        assert_eq!(
            ZoneMgmtSend::new(0, ZoneSendAction::Close).direction(),
            DataDirection::None
        );
        assert_eq!(
            ZoneMgmtSend::set_descriptor_extension(0, 64).direction(),
            DataDirection::ToDevice
        );
        let q = ZoneMgmtRecv::report_zones(128, 4096)
            .filter(ZoneReportFilter::Full)
            .partial()
            .sqe(1);
        assert_eq!((q.opcode(), q.cdw10, q.cdw12), (0x7A, 128, 1023));
        assert_eq!(q.cdw13, 0x05 << 8 | 1 << 16);
        assert_eq!(ZoneMgmtRecv::report_zones(0, 64).extended().sqe(1).cdw13, 1);
    }

    #[test]
    fn zone_geometry_from_identify() {
        use nvme_spec::zns::{ZnsIdentifyNamespaceHead, ZnsLbaFormatExt};
        let mut id = ZnsIdentifyNamespace {
            head: ZnsIdentifyNamespaceHead {
                mar: 5,
                mor: zns::NO_LIMIT,
                ozcs: zns::OZCS_ZRWASUP,
                numzrwa: 3,
                zrwasz: 16,
                zrwafg: 2,
                ..Default::default()
            },
            lbafe: [ZnsLbaFormatExt::default(); zns::ZNS_LBAFE_COUNT],
        };
        assert!(ZoneGeometry::from_identify(&id, 1, 4096)
            .unwrap_err()
            .contains("zone size of 0"));
        id.lbafe[1].zsze = 2048;
        let g = ZoneGeometry::from_identify(&id, 1, 65536).unwrap();
        assert_eq!(
            (g.zone_blocks, g.max_active, g.max_open),
            (2048, Some(6), None)
        );
        assert_eq!(g.zone_start(4097), 4096);
        assert_eq!(g.zones(2048 * 3 + 7), 3);
        let zrwa = g.zrwa.unwrap();
        assert_eq!(
            (zrwa.blocks, zrwa.flush_granularity, zrwa.resources),
            (16, 2, 4)
        );
        assert!(!zrwa.explicit_flush);
        assert_eq!(ZoneGeometry::append_limit(0, 4096, 131072), 131072);
        assert_eq!(ZoneGeometry::append_limit(4, 4096, 131072), 65536);
        assert_eq!(ZoneGeometry::append_limit(7, 4096, 131072), 131072);
        assert_eq!(ZoneGeometry::append_limit(200, 4096, 131072), 131072);
    }

    #[test]
    fn appended_lba_is_rebuilt_from_the_zone_start() {
        let a = ZoneAppend::new(0x2_FFFF_F000, 1);
        assert_eq!(a.written_lba(0xFFFF_F010), 0x2_FFFF_F010);
        // Past the 4 Gi boundary inside the zone: the high half steps.
        assert_eq!(a.written_lba(0x0000_0010), 0x3_0000_0010);
        assert_eq!(ZoneAppend::new(4096, 1).written_lba(4100), 4100);
    }

    #[test]
    fn erased_zone_commands_keep_their_rules() {
        let send = IoCommand::of(ZoneMgmtSend::new(64, ZoneSendAction::Finish));
        assert_eq!(send.opcode(), NvmOpcode::ZoneMgmtSend);
        assert_eq!(send.direction(), DataDirection::None);
        assert!(!send.splittable());
        let recv = IoCommand::of(ZoneMgmtRecv::report_zones(0, 512));
        assert_eq!(recv.opcode(), NvmOpcode::ZoneMgmtRecv);
        assert_eq!(erased::data_bytes(&recv.sqe(1)), Some(512));
        let app = IoCommand::of(ZoneAppend::new(0, 4));
        assert_eq!(app.opcode(), NvmOpcode::ZoneAppend);
        assert!(!app.splittable());
    }
}
