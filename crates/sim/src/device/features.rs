//! Get Features (NVMe Base 2.0 §5.15) and Set Features (§5.27) of the emulated controller,
//! and the management log pages built from its state (Firmware Slot, §5.16.1.4; Commands
//! Supported and Effects, §5.16.1.6).
//!
//! Features stored per controller: a default, a saved and a current value each. Set Features
//! changes the current value and, with Save (CDW10 bit 31), the saved one (Feature Identifier
//! Not Saveable for Number of Queues and Timestamp); a controller reset makes the saved values
//! current again. Get Features answers the selected value (Select 00b/01b/10b) or the
//! feature's capabilities (11b). Features outside the standard set below are Invalid Field in
//! Command. The Timestamp counts milliseconds from the value the host set (origin 1) or from
//! the controller's reset (origin 0).

use std::time::Instant;

use nvme_spec::admin_log::{CommandEffects, CommandsEffectsLog};
use nvme_spec::feature::{
    FeatureCapabilities, Timestamp, SELECT_SHIFT, SELECT_SUPPORTED_CAPABILITIES, SET_FEATURES_SAVE,
    TIMESTAMP_DATA_SIZE,
};
use nvme_spec::opcode::{admin, feature, nvm};
use nvme_spec::queue::SubmissionEntry;
use nvme_spec::status::{command_specific, generic, Status, StatusCodeType};

use super::{Device, Outcome};
use crate::dma::GuestView;
use crate::prp::{self, generic_status, Fail};

/// Number of feature identifiers (FID is 8 bits).
const FEATURE_IDS: usize = 256;
/// Get Features CDW10 bits 10:8 (Select) mask after the shift.
const SELECT_MASK: u32 = 0b111;
/// FID field of CDW10.
const FID_MASK: u32 = 0xFF;
/// Arbitration default: Arbitration Burst 111b (no limit), weights 0.
const DEFAULT_ARBITRATION: u32 = 0b111;
/// Temperature Threshold default: the over-temperature threshold of the composite
/// temperature at the Warning Composite Temperature Threshold (343 K, as Identify WCTEMP).
const DEFAULT_TEMPERATURE_THRESHOLD: u32 = 343;
/// Asynchronous Event Configuration default: all notices off.
const DEFAULT_ASYNC_EVENT_CONFIG: u32 = 0;
/// Volatile Write Cache default: enabled (Identify VWC reports it present).
const DEFAULT_VOLATILE_WRITE_CACHE: u32 = 1;
/// Timestamp Origin 1: set by the host through Set Features.
const TIMESTAMP_ORIGIN_HOST: u8 = 1;

/// The standard features the emulated controller implements, whether each is saveable.
const SUPPORTED: [(u8, bool); 10] = [
    (feature::ARBITRATION, true),
    (feature::POWER_MANAGEMENT, true),
    (feature::TEMPERATURE_THRESHOLD, true),
    (feature::ERROR_RECOVERY, true),
    (feature::VOLATILE_WRITE_CACHE, true),
    (feature::NUMBER_OF_QUEUES, false),
    (feature::INTERRUPT_COALESCING, true),
    (feature::ASYNC_EVENT_CONFIGURATION, true),
    (feature::TIMESTAMP, false),
    (nvme_spec::zns::FID_IO_COMMAND_SET_PROFILE, false),
];

fn default_value(fid: u8) -> u32 {
    match fid {
        feature::ARBITRATION => DEFAULT_ARBITRATION,
        feature::TEMPERATURE_THRESHOLD => DEFAULT_TEMPERATURE_THRESHOLD,
        feature::VOLATILE_WRITE_CACHE => DEFAULT_VOLATILE_WRITE_CACHE,
        feature::ASYNC_EVENT_CONFIGURATION => DEFAULT_ASYNC_EVENT_CONFIG,
        _ => 0,
    }
}

/// Default, saved and current values of the features (saved ones survive a reset).
pub(crate) struct FeatureStore {
    current: Box<[u32; FEATURE_IDS]>,
    saved: Box<[u32; FEATURE_IDS]>,
    /// The Timestamp's value at `since` and its origin.
    timestamp: (u64, Instant, u8),
}

impl FeatureStore {
    pub(crate) fn new() -> Self {
        let mut saved = Box::new([0; FEATURE_IDS]);
        for (fid, _) in SUPPORTED {
            saved[usize::from(fid)] = default_value(fid);
        }
        FeatureStore {
            current: saved.clone(),
            saved,
            timestamp: (0, Instant::now(), 0),
        }
    }

    /// Controller reset: the saved values become current; the Timestamp restarts at 0.
    pub(crate) fn reset(&mut self) {
        self.current.copy_from_slice(&self.saved[..]);
        self.timestamp = (0, Instant::now(), 0);
    }

    /// The current value of feature `fid`.
    pub(crate) fn current(&self, fid: u8) -> u32 {
        self.current[usize::from(fid)]
    }

    fn timestamp_now(&self) -> Timestamp {
        let (base, since, origin) = self.timestamp;
        Timestamp {
            millis: base.saturating_add(since.elapsed().as_millis() as u64),
            synch: false,
            origin,
        }
    }
}

fn saveable(fid: u8) -> Option<bool> {
    SUPPORTED.iter().find(|&&(f, _)| f == fid).map(|&(_, s)| s)
}

fn status(sct: StatusCodeType, sc: u8) -> Outcome {
    Outcome::status(Status::new(sct.raw(), sc, true))
}

impl Device {
    pub(super) fn set_features(
        &mut self,
        view: &GuestView<'_>,
        sqe: &SubmissionEntry,
    ) -> Result<Outcome, Fail> {
        let fid = (sqe.cdw10 & FID_MASK) as u8;
        let save = sqe.cdw10 & SET_FEATURES_SAVE != 0;
        let Some(can_save) = saveable(fid) else {
            return Ok(Outcome::status(generic_status(generic::INVALID_FIELD)));
        };
        if save && !can_save {
            return Ok(status(
                StatusCodeType::CommandSpecific,
                command_specific::FEATURE_ID_NOT_SAVEABLE,
            ));
        }
        if fid == feature::NUMBER_OF_QUEUES {
            return Ok(self.set_number_of_queues(sqe));
        }
        if fid == feature::TIMESTAMP {
            let mut data = [0u8; TIMESTAMP_DATA_SIZE];
            prp::walk(
                view,
                sqe.prp1,
                sqe.prp2,
                TIMESTAMP_DATA_SIZE,
                self.page_size,
                |iova, len, at| view.read(iova, &mut data[at..at + len]).map_err(Fail::from),
            )?;
            let t = Timestamp::from_bytes(&data);
            self.admin.features.timestamp = (t.millis, Instant::now(), TIMESTAMP_ORIGIN_HOST);
            return Ok(Outcome::SUCCESS);
        }
        if fid == feature::VOLATILE_WRITE_CACHE {
            self.set_write_cache(sqe.cdw11);
        }
        if fid == nvme_spec::zns::FID_IO_COMMAND_SET_PROFILE
            && sqe.cdw11 & nvme_spec::zns::IOCS_INDEX_MASK
                != u32::from(super::admin::IO_COMMAND_SET_COMBINATION)
        {
            // Only combination 0 (NVM and zoned) exists, as in QEMU 7.2 (Base 2.0 §5.27.1.21).
            return Ok(status(
                StatusCodeType::CommandSpecific,
                command_specific::IO_COMMAND_SET_COMBINATION_REJECTED,
            ));
        }
        let store = &mut self.admin.features;
        store.current[usize::from(fid)] = sqe.cdw11;
        if save {
            store.saved[usize::from(fid)] = sqe.cdw11;
        }
        Ok(Outcome::SUCCESS)
    }

    pub(super) fn get_features(
        &mut self,
        view: &GuestView<'_>,
        sqe: &SubmissionEntry,
    ) -> Result<Outcome, Fail> {
        let fid = (sqe.cdw10 & FID_MASK) as u8;
        let sel = sqe.cdw10 >> SELECT_SHIFT & SELECT_MASK;
        let Some(can_save) = saveable(fid) else {
            return Ok(Outcome::status(generic_status(generic::INVALID_FIELD)));
        };
        if sel == SELECT_SUPPORTED_CAPABILITIES {
            let mut caps = FeatureCapabilities::CHANGEABLE;
            caps.set(FeatureCapabilities::SAVEABLE, can_save);
            return Ok(Outcome::Complete {
                status: Status::SUCCESS,
                dw0: caps.bits(),
            });
        }
        if sel > SELECT_SUPPORTED_CAPABILITIES {
            return Ok(Outcome::status(generic_status(generic::INVALID_FIELD)));
        }
        let store = &self.admin.features;
        if fid == feature::TIMESTAMP {
            let data = store.timestamp_now().to_bytes();
            self.write_to_host(view, sqe, &data)?;
            return Ok(Outcome::SUCCESS);
        }
        let dw0 = match (fid, sel) {
            (feature::NUMBER_OF_QUEUES, _) => self.admin.queues_dw0(),
            (_, 0) => store.current[usize::from(fid)],
            (_, 1) => default_value(fid),
            _ => store.saved[usize::from(fid)],
        };
        Ok(Outcome::Complete {
            status: Status::SUCCESS,
            dw0,
        })
    }
}

/// The Commands Supported and Effects log: the commands the emulator executes.
pub(super) fn commands_effects_page(shadow_doorbells: bool, copy: bool, firmware: bool) -> Vec<u8> {
    let mut log = CommandsEffectsLog::default();
    let supported = CommandEffects::CSUPP;
    let mut admin_ops = vec![
        admin::DELETE_IO_SQ,
        admin::CREATE_IO_SQ,
        admin::GET_LOG_PAGE,
        admin::DELETE_IO_CQ,
        admin::CREATE_IO_CQ,
        admin::IDENTIFY,
        admin::ABORT,
        admin::SET_FEATURES,
        admin::GET_FEATURES,
        admin::ASYNC_EVENT_REQUEST,
        admin::KEEP_ALIVE,
    ];
    if shadow_doorbells {
        admin_ops.push(admin::DOORBELL_BUFFER_CONFIG);
    }
    if firmware {
        admin_ops.extend([admin::FIRMWARE_COMMIT, admin::FIRMWARE_IMAGE_DOWNLOAD]);
    }
    for op in admin_ops {
        log.acs[usize::from(op)] = supported.bits();
    }
    let changes = (supported | CommandEffects::LBCC).bits();
    for (op, effects) in [
        (nvm::FLUSH, supported.bits()),
        (nvm::WRITE, changes),
        (nvm::READ, supported.bits()),
        (nvm::COMPARE, supported.bits()),
        (nvm::WRITE_ZEROES, changes),
        (nvm::DATASET_MANAGEMENT, changes),
        (nvm::VERIFY, supported.bits()),
    ] {
        log.iocs[usize::from(op)] = effects;
    }
    if copy {
        log.iocs[usize::from(nvm::COPY)] = changes;
    }
    log.to_bytes().to_vec()
}
