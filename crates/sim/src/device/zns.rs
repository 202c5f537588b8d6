//! The zoned namespace (ZNS CS 1.1): zone state machine (§2.1.1), write pointer, open and
//! active resources (MOR/MAR, §2.1.1.4), Zone Random Write Area (§2.1.3), Zone Append
//! (§3.4.1), Zone Management Receive (§3.4.2) and Send (§3.4.3), and the zone status codes
//! (§3.3.1.1).

use nvme_spec::command::{nlb, slba};
use nvme_spec::opcode::nvm;
use nvme_spec::queue::SubmissionEntry;
use nvme_spec::status::{generic, Status, StatusCodeType};
use nvme_spec::zns::{
    self, attr, ZoneDescriptor, ZoneRecvAction, ZoneReportFilter, ZoneReportHeader, ZoneSendAction,
    ZoneState,
};

use super::io::status;
use super::{Device, Outcome};
use crate::config::SimZoned;
use crate::dma::GuestView;
use crate::prp::Fail;
use crate::sgl::walk_data_pointer;

/// Bytes per dword (NUMD).
const DWORD: usize = 4;
/// The minimum memory page (CAP.MPSMIN) ZASL counts in.
const MIN_PAGE_BYTES: u64 =
    1 << (nvme_spec::regs::PAGE_SIZE_SHIFT_BASE + super::admin::MPSMIN as u32);

#[derive(Clone, Copy, Debug)]
struct Zone {
    state: ZoneState,
    wp: u64,
    zrwa: bool,
}

/// The zones of the zoned namespace.
#[derive(Debug)]
pub(super) struct Zones {
    cfg: SimZoned,
    zones: Vec<Zone>,
}

fn zone_fail(sc: u8) -> Fail {
    Fail::Status(Status::new(StatusCodeType::CommandSpecific.raw(), sc, true))
}

impl Zones {
    pub(super) fn new(cfg: SimZoned, blocks: u64) -> Self {
        let count = (blocks / cfg.zone_blocks) as usize;
        let zones = (0..count)
            .map(|i| Zone {
                state: ZoneState::Empty,
                wp: i as u64 * cfg.zone_blocks,
                zrwa: false,
            })
            .collect();
        Self { cfg, zones }
    }

    pub(super) fn nsid(&self) -> u32 {
        self.cfg.nsid
    }

    fn open(&self) -> u32 {
        self.zones.iter().filter(|z| z.state.is_open()).count() as u32
    }

    fn active(&self) -> u32 {
        self.zones.iter().filter(|z| z.state.is_active()).count() as u32
    }

    fn index(&self, lba: u64) -> Result<usize, Fail> {
        let i = (lba / self.cfg.zone_blocks) as usize;
        if i >= self.zones.len() {
            return Err(status(generic::LBA_OUT_OF_RANGE));
        }
        Ok(i)
    }

    fn start(&self, i: usize) -> u64 {
        i as u64 * self.cfg.zone_blocks
    }

    fn capacity_end(&self, i: usize) -> u64 {
        self.start(i) + self.cfg.zone_capacity
    }

    /// Resources for zone `i` to become open (from Empty or Closed), ZNS §2.1.1.4.
    fn check_open_resources(&self, i: usize) -> Result<(), Fail> {
        let z = self.zones[i];
        if z.state.is_open() {
            return Ok(());
        }
        if z.state == ZoneState::Empty
            && self.cfg.max_active != 0
            && self.active() >= self.cfg.max_active
        {
            return Err(zone_fail(zns::status::TOO_MANY_ACTIVE_ZONES));
        }
        if self.cfg.max_open != 0 && self.open() >= self.cfg.max_open {
            return Err(zone_fail(zns::status::TOO_MANY_OPEN_ZONES));
        }
        Ok(())
    }

    /// The writable state of zone `i` for a write of `[lba, lba + n)`: the errors of
    /// ZNS §3.3.1.1 (or the ZRWA rules, §2.1.3).
    fn check_write(&self, i: usize, lba: u64, n: u64, append: bool) -> Result<(), Fail> {
        let z = self.zones[i];
        match z.state {
            ZoneState::Full => return Err(zone_fail(zns::status::ZONE_IS_FULL)),
            ZoneState::ReadOnly => return Err(zone_fail(zns::status::ZONE_IS_READ_ONLY)),
            ZoneState::Offline => return Err(zone_fail(zns::status::ZONE_IS_OFFLINE)),
            _ => {}
        }
        let end = lba
            .checked_add(n)
            .ok_or(status(generic::LBA_OUT_OF_RANGE))?;
        if end > self.capacity_end(i) {
            return Err(zone_fail(zns::status::ZONE_BOUNDARY_ERROR));
        }
        if append {
            return Ok(());
        }
        let ok = if z.zrwa {
            lba >= z.wp && end <= z.wp + u64::from(self.cfg.zrwa_blocks)
        } else {
            lba == z.wp
        };
        if !ok {
            return Err(zone_fail(zns::status::ZONE_INVALID_WRITE));
        }
        self.check_open_resources(i)
    }

    /// After a write ending at `end` (checked): the zone is (implicitly) open and, without a
    /// ZRWA, the write pointer moves (within a ZRWA only an explicit flush moves it; the
    /// implicit flush of §2.1.3.2 is not modelled: writes past the area are refused), Full at
    /// its capacity.
    fn wrote(&mut self, i: usize, end: u64) {
        let cap = self.capacity_end(i);
        let z = &mut self.zones[i];
        if !z.state.is_open() {
            z.state = ZoneState::ImplicitlyOpened;
        }
        if !z.zrwa {
            z.wp = end;
        }
        if z.wp >= cap {
            z.state = ZoneState::Full;
            z.zrwa = false;
        }
    }

    fn descriptor(&self, i: usize) -> ZoneDescriptor {
        let z = self.zones[i];
        let za = if z.zrwa { attr::ZRWAV } else { 0 };
        ZoneDescriptor::new(self.start(i), self.cfg.zone_capacity, z.wp, z.state, za)
    }

    /// One Zone Send Action on zone `i` (ZNS §3.4.3.1; the transitions of §2.1.1).
    fn send(
        &mut self,
        i: usize,
        action: ZoneSendAction,
        zsaso: bool,
        lba: u64,
    ) -> Result<(), Fail> {
        let invalid = || zone_fail(zns::status::INVALID_ZONE_STATE_TRANSITION);
        let state = self.zones[i].state;
        let start = self.start(i);
        match action {
            ZoneSendAction::Open => match state {
                ZoneState::ExplicitlyOpened => {}
                ZoneState::Empty | ZoneState::ImplicitlyOpened | ZoneState::Closed => {
                    if zsaso && self.cfg.zrwa_blocks == 0 {
                        return Err(status(generic::INVALID_FIELD));
                    }
                    self.check_open_resources(i)?;
                    let z = &mut self.zones[i];
                    z.state = ZoneState::ExplicitlyOpened;
                    z.zrwa |= zsaso;
                }
                _ => return Err(invalid()),
            },
            ZoneSendAction::Close => match state {
                ZoneState::Closed => {}
                ZoneState::ImplicitlyOpened | ZoneState::ExplicitlyOpened => {
                    self.zones[i].state = ZoneState::Closed;
                }
                _ => return Err(invalid()),
            },
            ZoneSendAction::Finish => match state {
                ZoneState::Full => {}
                ZoneState::Empty
                | ZoneState::ImplicitlyOpened
                | ZoneState::ExplicitlyOpened
                | ZoneState::Closed => {
                    let cap = self.capacity_end(i);
                    let z = &mut self.zones[i];
                    z.state = ZoneState::Full;
                    z.wp = cap;
                    z.zrwa = false;
                }
                _ => return Err(invalid()),
            },
            ZoneSendAction::Reset => match state {
                ZoneState::ReadOnly | ZoneState::Offline => return Err(invalid()),
                _ => {
                    self.zones[i] = Zone {
                        state: ZoneState::Empty,
                        wp: start,
                        zrwa: false,
                    };
                }
            },
            ZoneSendAction::Offline => match state {
                ZoneState::ReadOnly | ZoneState::Offline => {
                    self.zones[i].state = ZoneState::Offline;
                }
                _ => return Err(invalid()),
            },
            ZoneSendAction::FlushZrwa => {
                let zrwa = u64::from(self.cfg.zrwa_blocks);
                let cap = self.capacity_end(i);
                let z = &mut self.zones[i];
                // SLBA is the last block to commit (§3.4.3.1.7).
                if !z.zrwa || lba < z.wp || lba >= z.wp + zrwa {
                    return Err(status(generic::INVALID_FIELD));
                }
                z.wp = lba + 1;
                if z.wp >= cap {
                    z.state = ZoneState::Full;
                    z.zrwa = false;
                }
            }
            // No zone descriptor extensions (ZDES 0).
            ZoneSendAction::SetDescriptorExtension => return Err(status(generic::INVALID_FIELD)),
        }
        Ok(())
    }

    /// Select All: the action on every zone in a state it applies to (§3.4.3.1).
    fn send_all(&mut self, action: ZoneSendAction) -> Result<(), Fail> {
        let applies = |s: ZoneState| match action {
            ZoneSendAction::Open => s == ZoneState::Closed,
            ZoneSendAction::Close => s.is_open(),
            ZoneSendAction::Finish => s.is_active(),
            ZoneSendAction::Reset => s.is_active() || s == ZoneState::Full,
            ZoneSendAction::Offline => s == ZoneState::ReadOnly,
            _ => false,
        };
        if matches!(
            action,
            ZoneSendAction::FlushZrwa | ZoneSendAction::SetDescriptorExtension
        ) {
            return Err(status(generic::INVALID_FIELD));
        }
        for i in 0..self.zones.len() {
            if applies(self.zones[i].state) {
                self.send(i, action, false, 0)?;
            }
        }
        Ok(())
    }

    /// Test hook: the zone holding `lba` goes Read Only (as a device would on media wear).
    pub(super) fn make_read_only(&mut self, lba: u64) -> bool {
        match self.index(lba) {
            Ok(i) => {
                self.zones[i].state = ZoneState::ReadOnly;
                true
            }
            Err(_) => false,
        }
    }

    /// The ZNS Identify Namespace (CNS 05h, CSI 02h).
    pub(super) fn identify(&self) -> [u8; zns::IDENTIFY_BYTES] {
        let limit = |n: u32| if n == 0 { zns::NO_LIMIT } else { n - 1 };
        let mut id = zns::ZnsIdentifyNamespace {
            head: zns::ZnsIdentifyNamespaceHead {
                mar: limit(self.cfg.max_active),
                mor: limit(self.cfg.max_open),
                ..Default::default()
            },
            lbafe: [zns::ZnsLbaFormatExt::default(); zns::ZNS_LBAFE_COUNT],
        };
        if self.cfg.zrwa_blocks != 0 {
            id.head.ozcs = zns::OZCS_ZRWASUP;
            id.head.numzrwa = limit(self.cfg.max_active);
            id.head.zrwasz = self.cfg.zrwa_blocks;
            id.head.zrwafg = 1;
            id.head.zrwacap = zns::ZRWACAP_EXPFLUSHSUP;
        }
        // Every LBA format's extension gives the zone size, as QEMU's does (the namespace's
        // current format may be any of its eight).
        for f in id.lbafe.iter_mut() {
            f.zsze = self.cfg.zone_blocks;
        }
        let mut out = [0u8; zns::IDENTIFY_BYTES];
        id.encode(&mut out);
        out
    }
}

impl Device {
    /// Test hook of [`crate::SimController::set_zone_read_only`].
    pub(crate) fn zone_read_only(&mut self, lba: u64) -> bool {
        self.zones.as_mut().is_some_and(|z| z.make_read_only(lba))
    }

    /// Whether `nsid` is the zoned namespace.
    pub(super) fn is_zoned(&self, nsid: u32) -> bool {
        self.zones.as_ref().is_some_and(|z| z.nsid() == nsid)
    }

    /// Write (checked at the write pointer) and Zone Append on the zoned namespace: the data
    /// moves through the plain Write path, the zone state afterwards.
    pub(super) fn zoned_write(
        &mut self,
        view: &GuestView<'_>,
        sqe: &SubmissionEntry,
    ) -> Result<Outcome, Fail> {
        let append = sqe.opcode() == nvm::ZONE_APPEND;
        let n = u64::from(nlb(sqe));
        let zones = self.zones.as_ref().expect("zoned namespace");
        let i = zones.index(slba(sqe))?;
        if append && slba(sqe) != zones.start(i) {
            // ZSLBA must name a zone's first block (§3.4.1).
            return Err(status(generic::INVALID_FIELD));
        }
        let lba = if append { zones.zones[i].wp } else { slba(sqe) };
        zones.check_write(i, lba, n, append)?;
        if append && zones.zones[i].zrwa {
            // Zone Append is not allowed to a zone with a ZRWA (§2.1.3).
            return Err(zone_fail(zns::status::ZONE_INVALID_WRITE));
        }
        if append {
            let zasl = zones.cfg.zasl;
            let bytes = n * u64::from(self.namespace(sqe.nsid)?.block_size);
            if zasl != 0 && bytes > MIN_PAGE_BYTES << zasl {
                // Larger than the Zone Append Size Limit (ZNS §3.4.1): QEMU's status.
                return Err(status(generic::INVALID_FIELD));
            }
            zones.check_open_resources(i)?;
        }
        let mut moved = *sqe;
        moved.cdw10 = lba as u32;
        moved.cdw11 = (lba >> 32) as u32;
        self.transfer(view, &moved, nvm::WRITE)?;
        let zones = self.zones.as_mut().expect("zoned namespace");
        zones.wrote(i, lba + n);
        Ok(Outcome::Complete {
            status: Status::SUCCESS,
            // ALBA low half (CQE DW0; DW1 holds the high half, zero below 2^32 blocks).
            dw0: lba as u32,
        })
    }

    /// Zone Management Send (§3.4.3).
    pub(super) fn zone_mgmt_send(&mut self, sqe: &SubmissionEntry) -> Result<Outcome, Fail> {
        let zones = self.zones.as_mut().expect("zoned namespace");
        let action = ZoneSendAction::from_raw((sqe.cdw13 & zns::ACTION_MASK) as u8)
            .ok_or(status(generic::INVALID_FIELD))?;
        if sqe.cdw13 & zns::SEND_SELECT_ALL != 0 {
            zones.send_all(action)?;
        } else {
            let lba = slba(sqe);
            let i = zones.index(lba)?;
            if action != ZoneSendAction::FlushZrwa && lba != zones.start(i) {
                return Err(status(generic::INVALID_FIELD));
            }
            zones.send(i, action, sqe.cdw13 & zns::SEND_ZSASO != 0, lba)?;
        }
        Ok(Outcome::SUCCESS)
    }

    /// Zone Management Receive (§3.4.2): Report Zones from the zone holding SLBA.
    pub(super) fn zone_mgmt_recv(
        &mut self,
        view: &GuestView<'_>,
        sqe: &SubmissionEntry,
    ) -> Result<Outcome, Fail> {
        let zones = self.zones.as_ref().expect("zoned namespace");
        let len = (sqe.cdw12 as usize + 1) * DWORD;
        if len > self.max_transfer() || len < ZoneReportHeader::SIZE {
            return Err(status(generic::INVALID_FIELD));
        }
        // Extended reports need descriptor extensions, which this namespace has none of.
        if (sqe.cdw13 & zns::ACTION_MASK) as u8 != ZoneRecvAction::ReportZones as u8 {
            return Err(status(generic::INVALID_FIELD));
        }
        let filter = ZoneReportFilter::from_raw((sqe.cdw13 >> zns::RECV_FILTER_SHIFT) as u8)
            .ok_or(status(generic::INVALID_FIELD))?;
        let partial = sqe.cdw13 & zns::RECV_PARTIAL != 0;
        let first = zones.index(slba(sqe))?;
        let room = (len - ZoneReportHeader::SIZE) / ZoneDescriptor::SIZE;
        let mut data = vec![0u8; len];
        let (mut matching, mut returned) = (0u64, 0usize);
        for i in first..zones.zones.len() {
            if !filter.matches(zones.zones[i].state) {
                continue;
            }
            matching += 1;
            if returned < room {
                let at = ZoneReportHeader::SIZE + returned * ZoneDescriptor::SIZE;
                data[at..at + ZoneDescriptor::SIZE]
                    .copy_from_slice(&zones.descriptor(i).to_bytes());
                returned += 1;
            }
        }
        let header = ZoneReportHeader {
            nr_zones: if partial { returned as u64 } else { matching },
            rsvd8: [0; 7],
        };
        data[..ZoneReportHeader::SIZE].copy_from_slice(&header.to_bytes());
        walk_data_pointer(
            view,
            sqe,
            self.shared.config.sgl,
            len,
            self.page_size,
            |iova, n, off| view.write(iova, &data[off..off + n]).map_err(Fail::from),
        )?;
        Ok(Outcome::SUCCESS)
    }
}
