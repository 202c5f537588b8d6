//! Namespace management in the emulated controller: Identify Namespace data (shared by CNS 00h
//! and 11h), Format NVM (§5.23), Namespace Attachment (§5.19) and the allocated namespace and
//! controller lists (CNS 10h-13h, §5.17.2.10-§5.17.2.13).
//!
//! The controller is the only one of its subsystem (controller ID [`SIM_CNTLID`], or
//! `SimConfig::cntlid`) as far as the controller lists and Namespace Attachment go, also when
//! a sibling shares its namespaces (`SimController::start_sibling`: attachment state then
//! belongs to the shared medium, so both controllers see it change); every
//! configured namespace is allocated, and attached or not. The LBA formats offered are QEMU
//! 7.2's eight ([`LBA_FORMATS`]); a namespace configured with a format outside them reports
//! that one format alone, and Format NVM can only select it again.

use nvme_spec::command::Cns;
use nvme_spec::identify::{nsfeat, IdentifyNamespace, LbaFormat, Nmic, IDENTIFY_DATA_SIZE};
use nvme_spec::manage::{identify_cntid, Attach, ControllerList, FormatNvm};
use nvme_spec::protection::{DPC_PI_FIRST, DPC_PI_LAST, DPS_PI_FIRST, PI_TUPLE_BYTES};
use nvme_spec::queue::SubmissionEntry;
use nvme_spec::status::{command_specific, generic, Status, StatusCodeType};

use super::{Device, Outcome};
use crate::disk::Disk;
use crate::dma::GuestView;
use crate::prp::{self, generic_status, Fail};

/// The emulated controller's Controller ID (Identify CNTLID; QEMU's first controller's).
pub const SIM_CNTLID: u16 = 0;
/// The LBA formats offered, as (data size, metadata bytes): QEMU 7.2's table.
pub const LBA_FORMATS: [(u32, u16); 8] = [
    (512, 0),
    (512, 8),
    (512, 16),
    (512, 64),
    (4096, 0),
    (4096, 8),
    (4096, 16),
    (4096, 64),
];
/// Identify Controller FNA bit 2: Cryptographic Erase is supported by Format NVM.
pub(crate) const FNA_CRYPTO_ERASE: u8 = 1 << 2;
/// Identify Namespace DLFEAT: deallocated blocks read as zeros (bits 2:0 = 001b) and Write
/// Zeroes supports deallocation (bit 3).
const DLFEAT_READS_ZEROES_WZ_DEALLOC: u8 = 0b1001;
/// Identify Namespace FLBAS bit 4: metadata transferred at the end of the data LBA.
const FLBAS_EXTENDED: u8 = 1 << 4;
/// Identify Namespace MC bit 0: metadata as part of an extended data LBA supported.
const MC_EXTENDED: u8 = 1 << 0;
/// Identify Namespace MC bit 1: metadata in a separate buffer supported.
const MC_SEPARATE: u8 = 1 << 1;
/// Identify Namespace DPC bits 2:0: PI types 1, 2 and 3 supported.
const DPC_ALL_TYPES: u8 = 0b111;
/// Highest PI type.
const MAX_PI_TYPE: u8 = 3;
/// Broadcast namespace ID.
const NSID_BROADCAST: u32 = u32::MAX;

fn command_specific_status(sc: u8) -> Status {
    Status::new(StatusCodeType::CommandSpecific.raw(), sc, true)
}

fn fail(status: Status) -> Fail {
    Fail::Status(status)
}

/// The LBA formats a namespace reports: the table when its format is in it, else its own.
fn formats_of(disk: &Disk) -> Vec<(u32, u16)> {
    let own = (disk.block_size, disk.metadata_size);
    if LBA_FORMATS.contains(&own) {
        LBA_FORMATS.to_vec()
    } else {
        vec![own]
    }
}

impl Device {
    /// Identify Namespace (NVM CS §4.1.5.1) of `disk`.
    pub(super) fn identify_namespace_data(&self, disk: &Disk) -> [u8; IDENTIFY_DATA_SIZE] {
        let mut ns = IdentifyNamespace::from_bytes(&[0; IDENTIFY_DATA_SIZE]);
        ns.nsze = disk.blocks;
        ns.ncap = disk.blocks;
        ns.nuse = disk.blocks;
        ns.dlfeat = DLFEAT_READS_ZEROES_WZ_DEALLOC;
        let nawupf = self.shared.config.write_cache.as_ref().and_then(|c| {
            c.nawupf
                .iter()
                .find(|&&(n, _)| n == disk.nsid)
                .map(|&(_, v)| v)
        });
        if let Some(units) = nawupf {
            // NVM CS §4.1.5.1: NAWUPF is defined when NSFEAT bit 1 is set.
            ns.nsfeat |= nsfeat::ATOMIC_PARAMETERS;
            ns.nawupf = units;
        }
        if let Some(copy) = self.shared.config.copy {
            ns.mssrl = copy.mssrl;
            ns.mcl = copy.mcl;
            ns.msrc = copy.msrc;
        }
        let formats = formats_of(disk);
        for (slot, &(ds, ms)) in ns.lbaf.iter_mut().zip(&formats) {
            *slot = LbaFormat::new(ds.trailing_zeros() as u8, ms);
        }
        ns.nlbaf = (formats.len() - 1) as u8;
        let index = formats
            .iter()
            .position(|&f| f == (disk.block_size, disk.metadata_size))
            .unwrap_or(0) as u8;
        // FLBAS bits 3:0 the format (the table has fewer than 16), bit 4 extended LBA.
        ns.flbas = index | if disk.extended { FLBAS_EXTENDED } else { 0 };
        if formats.iter().any(|&(_, ms)| ms != 0) {
            ns.mc = MC_EXTENDED | MC_SEPARATE;
        }
        if formats
            .iter()
            .any(|&(_, ms)| usize::from(ms) >= PI_TUPLE_BYTES)
        {
            // DPC: PI types 1-3, PI first or last in the metadata; DPS: what is enabled.
            ns.dpc = DPC_ALL_TYPES | DPC_PI_FIRST | DPC_PI_LAST;
        }
        ns.dps = disk.protection;
        if self.shared.config.shared_namespaces {
            ns.nmic = Nmic::SHARED.bits();
        }
        ns.to_bytes()
    }

    /// Identify CNS 10h-13h (allocated namespaces, controller lists).
    pub(super) fn identify_management(
        &self,
        cns: u8,
        sqe: &SubmissionEntry,
    ) -> Result<[u8; IDENTIFY_DATA_SIZE], Fail> {
        let disks = &self.shared.disks;
        let cntid = identify_cntid(sqe.cdw10);
        // The lists start at CNTID: ours (the lowest, 0) is in them only from 0.
        let own = self.shared.config.cntlid;
        let ours = if cntid <= own { vec![own] } else { Vec::new() };
        if cns == Cns::AllocatedNamespaceList as u8 {
            super::admin::namespace_list_after(disks.configured_ids(), sqe.nsid)
        } else if cns == Cns::AllocatedNamespace as u8 {
            // An unallocated NSID reads as zeros (§5.17.2.11).
            Ok(disks
                .configured(sqe.nsid)
                .map_or([0; IDENTIFY_DATA_SIZE], |d| {
                    self.identify_namespace_data(&d)
                }))
        } else if cns == Cns::NamespaceControllerList as u8 {
            let disk = disks
                .configured(sqe.nsid)
                .ok_or(fail(generic_status(generic::INVALID_NAMESPACE_OR_FORMAT)))?;
            let ids = if disks.is_attached(disk.nsid) {
                ours
            } else {
                Vec::new()
            };
            Ok(ControllerList(ids).to_bytes())
        } else {
            Ok(ControllerList(ours).to_bytes())
        }
    }

    /// Namespace Attachment (§5.19): the data is a Controller List, which must name this
    /// controller (and no other: there is none).
    pub(super) fn namespace_attachment(
        &mut self,
        view: &GuestView<'_>,
        sqe: &SubmissionEntry,
    ) -> Result<Outcome, Fail> {
        if !self.shared.config.namespace_management {
            return Err(fail(generic_status(generic::INVALID_OPCODE)));
        }
        let select =
            Attach::from_cdw10(sqe.cdw10).ok_or(fail(generic_status(generic::INVALID_FIELD)))?;
        let disks = &self.shared.disks;
        if sqe.nsid == NSID_BROADCAST || disks.configured(sqe.nsid).is_none() {
            return Err(fail(generic_status(generic::INVALID_FIELD)));
        }
        let mut page = [0u8; IDENTIFY_DATA_SIZE];
        prp::walk(
            view,
            sqe.prp1,
            sqe.prp2,
            IDENTIFY_DATA_SIZE,
            self.page_size,
            |iova, len, at| view.read(iova, &mut page[at..at + len]).map_err(Fail::from),
        )?;
        let list = ControllerList::from_bytes(&page);
        if list.0 != [self.shared.config.cntlid] {
            return Err(fail(command_specific_status(
                command_specific::CONTROLLER_LIST_INVALID,
            )));
        }
        let attached = disks.is_attached(sqe.nsid);
        match (select, attached) {
            (Attach::Attach, true) => Err(fail(command_specific_status(
                command_specific::NAMESPACE_ALREADY_ATTACHED,
            ))),
            (Attach::Detach, false) => Err(fail(command_specific_status(
                command_specific::NAMESPACE_NOT_ATTACHED,
            ))),
            (select, _) => {
                disks.set_attached(sqe.nsid, select == Attach::Attach);
                log::debug!("sim: namespace {} {select:?}", sqe.nsid);
                // The controller the namespace joined or left is told (§5.19): a Namespace
                // Attribute Changed notice.
                self.shared.faults.raise_async_event(
                    nvme_spec::event::event_type::NOTICE,
                    nvme_spec::event::notice::NAMESPACE_ATTRIBUTE_CHANGED,
                    nvme_spec::opcode::log_page::CHANGED_NAMESPACE_LIST,
                );
                Ok(Outcome::SUCCESS)
            }
        }
    }

    /// Format NVM (§5.23): the LBA format, metadata setting and PI of one attached namespace
    /// (or all, NSID FFFFFFFFh) change, capacity in data bytes stays, and the data reads as
    /// zeros afterwards whatever SES says (User Data Erase and Cryptographic Erase both end
    /// there; Cryptographic Erase is offered, FNA bit 2).
    pub(super) fn format_nvm(&mut self, sqe: &SubmissionEntry) -> Result<Outcome, Fail> {
        if !self.shared.config.format_nvm {
            return Err(fail(generic_status(generic::INVALID_OPCODE)));
        }
        let format =
            FormatNvm::from_cdw10(sqe.cdw10).ok_or(fail(generic_status(generic::INVALID_FIELD)))?;
        let disks = &self.shared.disks;
        let targets: Vec<u32> = if sqe.nsid == NSID_BROADCAST {
            disks.attached()
        } else if disks.get(sqe.nsid).is_some() {
            vec![sqe.nsid]
        } else {
            return Err(fail(generic_status(generic::INVALID_NAMESPACE_OR_FORMAT)));
        };
        // Check every target before changing any.
        let mut plans = Vec::with_capacity(targets.len());
        for nsid in targets {
            let disk = disks
                .get(nsid)
                .ok_or(fail(generic_status(generic::INVALID_NAMESPACE_OR_FORMAT)))?;
            let &(block_size, metadata_size) =
                formats_of(&disk).get(usize::from(format.lbaf)).ok_or(fail(
                    command_specific_status(command_specific::INVALID_FORMAT),
                ))?;
            let pi_fits = usize::from(metadata_size) >= PI_TUPLE_BYTES;
            if format.pi > MAX_PI_TYPE || (format.pi != 0 && !pi_fits) {
                return Err(fail(command_specific_status(
                    command_specific::INVALID_FORMAT,
                )));
            }
            plans.push((nsid, block_size, metadata_size));
        }
        for (nsid, block_size, metadata_size) in plans {
            let geometry = disks.reformat(nsid, false, |ns| {
                let bytes = ns.blocks * u64::from(ns.block_size);
                ns.blocks = bytes / u64::from(block_size);
                ns.block_size = block_size;
                ns.metadata_size = metadata_size;
                ns.extended = metadata_size != 0 && format.extended_metadata;
                ns.protection = if format.pi == 0 {
                    0
                } else {
                    format.pi | if format.pi_first { DPS_PI_FIRST } else { 0 }
                };
            });
            log::debug!("sim: Format NVM {nsid} ({format:?}): now {geometry:?}");
        }
        Ok(Outcome::SUCCESS)
    }
}
