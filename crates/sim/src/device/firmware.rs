//! Firmware update in the emulated controller: Firmware Image Download (NVMe Base 2.0 §5.13)
//! into a download buffer, Firmware Commit (§5.12) of it to a slot with Commit Actions
//! 000b-011b, and the Firmware Slot Information log page (03h, §5.16.1.4) they change.
//!
//! Pieces may arrive in any order; one that overlaps a piece already downloaded completes
//! with Overlapping Range, one whose offset is not a multiple of FWUG or that ends beyond
//! [`SIM_FIRMWARE_MAX_BYTES`] with Invalid Field in Command. A commit that stores an image
//! takes the whole buffer, which must run from offset 0 without gaps and start with
//! [`crate::SIM_FIRMWARE_MAGIC`] (else Invalid Firmware Image); the buffer is emptied by the
//! commit and by a Controller Level Reset. The slot's revision is the image's
//! [`SIM_FIRMWARE_REVISION`] bytes. A Controller Level Reset activates the slot a commit
//! marked for it; activation also changes Identify Controller FR. Boot partition actions
//! (110b, 111b) are refused with Invalid Field (no boot partitions).

use std::collections::BTreeMap;

use nvme_spec::admin_log::{FirmwareSlotLog, FIRMWARE_SLOTS};
use nvme_spec::firmware::{
    image_download_range, CommitAction, FirmwareCommit, FirmwareStatus, Fwug,
};
use nvme_spec::status::generic;
use nvme_spec::SubmissionEntry;

use super::{Device, Outcome};
use crate::config::{
    SimConfig, SimFirmware, SIM_FIRMWARE_MAGIC, SIM_FIRMWARE_MAX_BYTES, SIM_FIRMWARE_REVISION,
};
use crate::dma::GuestView;
use crate::prp::{self, generic_status, Fail};

/// A firmware revision as the log and Identify FR hold it (8 ASCII bytes, space padded).
type Revision = [u8; 8];

/// The slot that runs at power-on.
const POWER_ON_SLOT: u8 = 1;

/// Firmware slots, the running and the pending one, and the download buffer. Survives
/// controller resets (a reset activates the pending slot and drops a partial download).
pub(crate) struct FirmwareState {
    /// Revisions of slots 1..=7 (None: empty).
    slots: [Option<Revision>; FIRMWARE_SLOTS],
    active: u8,
    next: Option<u8>,
    /// Downloaded pieces by byte offset.
    pieces: BTreeMap<u64, Vec<u8>>,
}

fn revision(text: &str) -> Revision {
    let mut rev = [b' '; 8];
    for (d, s) in rev.iter_mut().zip(text.bytes()) {
        *d = s;
    }
    rev
}

impl FirmwareState {
    pub(crate) fn new(config: &SimConfig) -> Self {
        let mut slots = [None; FIRMWARE_SLOTS];
        slots[usize::from(POWER_ON_SLOT) - 1] = Some(revision(&config.firmware));
        FirmwareState {
            slots,
            active: POWER_ON_SLOT,
            next: None,
            pieces: BTreeMap::new(),
        }
    }

    /// A Controller Level Reset: the pending slot becomes the running one. Returns the
    /// revision now running when it changed.
    pub(crate) fn reset(&mut self) -> Option<Revision> {
        self.pieces.clear();
        let next = self.next.take()?;
        self.active = next;
        self.slots[usize::from(next) - 1]
    }

    /// The Firmware Slot Information log page.
    pub(crate) fn log_page(&self) -> Vec<u8> {
        let mut log = FirmwareSlotLog::default();
        log.set_active_slot(self.active);
        log.set_next_slot(self.next);
        for (frs, slot) in log.frs.iter_mut().zip(&self.slots) {
            if let Some(rev) = slot {
                *frs = *rev;
            }
        }
        log.to_bytes().to_vec()
    }

    /// The whole downloaded image: pieces from offset 0 without gaps.
    fn image(&self) -> Option<Vec<u8>> {
        let mut image = Vec::new();
        for (&offset, piece) in &self.pieces {
            if offset != image.len() as u64 {
                return None;
            }
            image.extend_from_slice(piece);
        }
        Some(image)
    }
}

fn firmware_status(kind: FirmwareStatus) -> Fail {
    Fail::Status(kind.status())
}

fn invalid_field() -> Fail {
    Fail::Status(generic_status(generic::INVALID_FIELD))
}

impl Device {
    fn firmware_config(&self) -> Result<SimFirmware, Fail> {
        self.shared
            .config
            .firmware_update
            .ok_or(Fail::Status(generic_status(generic::INVALID_OPCODE)))
    }

    /// Firmware Image Download (§5.13): one piece into the download buffer.
    pub(super) fn firmware_image_download(
        &mut self,
        view: &GuestView<'_>,
        sqe: &SubmissionEntry,
    ) -> Result<Outcome, Fail> {
        let config = self.firmware_config()?;
        let (offset, len) = image_download_range(sqe);
        if let Some(granularity) = Fwug::from_raw(config.fwug).bytes() {
            if offset % granularity as u64 != 0 {
                return Err(invalid_field());
            }
        }
        if offset + len > SIM_FIRMWARE_MAX_BYTES {
            return Err(invalid_field());
        }
        let fw = &self.admin.firmware;
        let before = fw.pieces.range(..offset).next_back();
        let overlaps_before = before.is_some_and(|(&o, p)| o + p.len() as u64 > offset);
        let overlaps_after = fw.pieces.range(offset..offset + len).next().is_some();
        if overlaps_before || overlaps_after {
            return Err(firmware_status(FirmwareStatus::OverlappingRange));
        }
        let mut piece = vec![0u8; len as usize];
        prp::walk(
            view,
            sqe.prp1,
            sqe.prp2,
            piece.len(),
            self.page_size,
            |iova, n, at| view.read(iova, &mut piece[at..at + n]).map_err(Fail::from),
        )?;
        self.admin.firmware.pieces.insert(offset, piece);
        log::debug!("sim: firmware piece of {len} bytes at {offset}");
        Ok(Outcome::SUCCESS)
    }

    /// Firmware Commit (§5.12).
    pub(super) fn firmware_commit(&mut self, sqe: &SubmissionEntry) -> Result<Outcome, Fail> {
        let config = self.firmware_config()?;
        let commit = FirmwareCommit::from_cdw10(sqe.cdw10).ok_or(invalid_field())?;
        if commit.action.is_boot_partition() {
            return Err(invalid_field());
        }
        let fw = &mut self.admin.firmware;
        let has_download = !fw.pieces.is_empty();
        let replaces = commit.action.replaces()
            || (commit.action == CommitAction::ReplaceAndActivateNow && has_download);
        let first_writable = if config.slot1_read_only { 2 } else { 1 };
        let slot = match commit.slot {
            // The controller chooses: the first writable slot to store in, the running one
            // to activate.
            0 if replaces => first_writable,
            0 => fw.active,
            s => s,
        };
        if slot > config.slots || (replaces && slot == 1 && config.slot1_read_only) {
            return Err(firmware_status(FirmwareStatus::InvalidSlot));
        }
        let index = usize::from(slot) - 1;
        if replaces {
            let image = fw.image();
            fw.pieces.clear();
            let image = image
                .filter(|i| {
                    i.len() >= SIM_FIRMWARE_REVISION.end && i.starts_with(&SIM_FIRMWARE_MAGIC)
                })
                .ok_or(firmware_status(FirmwareStatus::InvalidImage))?;
            let mut rev = [0u8; 8];
            rev.copy_from_slice(&image[SIM_FIRMWARE_REVISION]);
            fw.slots[index] = Some(rev);
        } else if fw.slots[index].is_none() {
            return Err(firmware_status(FirmwareStatus::InvalidImage));
        }
        log::debug!("sim: firmware commit {:?} to slot {slot}", commit.action);
        match commit.action {
            CommitAction::Replace => {}
            CommitAction::ReplaceAndActivateAtReset | CommitAction::ActivateAtReset => {
                fw.next = Some(slot);
            }
            _ if !config.activation_without_reset => {
                fw.next = Some(slot);
                return Err(firmware_status(FirmwareStatus::RequiresControllerReset));
            }
            _ => {
                fw.active = slot;
                fw.next = None;
                let rev = fw.slots[index].expect("stored or checked above");
                self.admin.set_running_revision(rev);
            }
        }
        Ok(Outcome::SUCCESS)
    }
}
