//! Admin command set of the emulated controller (NVMe Base 2.0 §5).
//!
//! Supported: Identify (controller, namespace, active namespace list, namespace identification
//! descriptors; allocated namespaces and controller lists, see `manage.rs`), Format NVM and
//! Namespace Attachment (`manage.rs`), Set/Get Features, Create/Delete I/O Submission/Completion Queue, Doorbell
//! Buffer Config, Firmware Image Download and Firmware Commit (`firmware.rs`), Abort (only commands deferred by the delay_execution fault), Get Log Page
//! (Error Information: the last [`ERROR_LOG_ENTRIES`] failed commands, newest first; SMART /
//! Health Information from the controller's counters; Firmware Slot: see `firmware.rs`; Changed
//! Namespace List; Commands Supported and Effects; see `features.rs`),
//! Asynchronous Event Request (kept outstanding), Keep Alive. Anything else completes with
//! Invalid Command Opcode.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::time::Instant;

use nvme_spec::admin_log::NsIdDescriptor;
use nvme_spec::command::{self as cmd, Cns};
use nvme_spec::firmware::Frmw;
use nvme_spec::identify::{
    fill_ascii_field, Cmic, CopyFormats, Fuses, IdentifyController, NamespaceList, Oacs, Oncs,
    IDENTIFY_DATA_SIZE, MAX_LBA_FORMATS, NAMESPACE_LIST_ENTRIES,
};
use nvme_spec::log::{ErrorLogEntry, SmartLog, ERROR_LOG_ENTRY_SIZE, SMART_LOG_SIZE};
use nvme_spec::opcode::{admin, log_page, nvm};
use nvme_spec::protection::{ExtendedLbaFormat, NvmIdentifyNamespace, CTRATT_ELBAS};
use nvme_spec::queue::{SubmissionEntry, CQES_LOG2, CQE_SIZE, SQES_LOG2, SQE_SIZE};
use nvme_spec::regs::{Cap, Version};
use nvme_spec::sgl::SglSupport;
use nvme_spec::status::{command_specific, generic, Status, StatusCodeType};

use super::features::{commands_effects_page, FeatureStore};
use super::firmware::FirmwareState;
use super::{CqInterrupt, Device, Outcome, ShadowBuffers};
use crate::config::SimConfig;
use crate::dma::GuestView;
use crate::prp::{self, generic_status, Fail};

/// PCI vendor ID reported in Identify Controller (Red Hat, as QEMU's emulated NVMe uses).
pub(crate) const PCI_VENDOR_ID: u16 = 0x1b36;
/// NVMe version reported in VS and Identify Controller.
pub(crate) const VERSION: Version = Version::new(1, 4, 0);
/// CAP.MPSMIN: 4 KiB minimum memory page.
pub(crate) const MPSMIN: u8 = 0;
/// CAP.MPSMAX: 64 KiB maximum memory page.
pub(crate) const MPSMAX: u8 = 4;
/// Asynchronous Event Requests the controller keeps outstanding (Identify AERL is 0-based).
const AER_LIMIT: u32 = 4;
/// Volatile Write Cache present (Identify VWC bit 0).
const VWC_PRESENT: u8 = 1;
/// Identify LPA bit 1: the Commands Supported and Effects log page is supported.
const LPA_COMMANDS_EFFECTS: u8 = 1 << 1;
/// IEEE OUI-like prefix of the EUI64 and NGUID the emulator reports (locally administered).
const SIM_EUI64_PREFIX: u64 = 0x0200_0000_0000_0000;
/// Abort completion Dword 0 bit 0: the command was not aborted (§5.1).
const ABORT_NOT_ABORTED: u32 = 1;
/// Abort completion Dword 0 bit 0 clear: the command was aborted.
const ABORT_ABORTED: u32 = 0;
/// Identify SQES/CQES: required and maximum entry sizes (log2) in the low and high nibbles.
const SQES_BOTH: u8 = SQES_LOG2 << 4 | SQES_LOG2;
const CQES_BOTH: u8 = CQES_LOG2 << 4 | CQES_LOG2;

// Command Dword fields (Create I/O CQ/SQ §5.4/§5.5, Identify §5.17, Features §5.27, Get Log
// Page §5.16).
const LOW16: u32 = 0xffff;
const HIGH16_SHIFT: u32 = 16;
const LOW8: u32 = 0xff;
const PHYSICALLY_CONTIGUOUS: u32 = 1 << 0;
/// Create I/O CQ CDW11 bit 1: Interrupts Enabled (IEN); the vector (IV) is in bits 31:16.
const INTERRUPTS_ENABLED: u32 = 1 << 1;
/// Set Features Number of Queues: 0xFFFF requested queues is invalid (§5.27.1.5).
const NUMBER_OF_QUEUES_INVALID: u16 = 0xffff;
/// Broadcast namespace ID.
const NSID_BROADCAST: u32 = u32::MAX;
/// Dword size used by Get Log Page's NUMD (number of dwords, 0-based).
const DWORD: u64 = 4;
/// Error Information log entries kept (Identify ELPE is 0-based).
pub const ERROR_LOG_ENTRIES: usize = 16;
/// Composite temperature and temperature sensor 1 reported in the SMART log (K, ~27 °C).
pub const SIM_TEMPERATURE_K: u16 = 300;
/// Warning / Critical Composite Temperature Thresholds in Identify (K, 70 / 85 °C).
const WCTEMP_K: u16 = 343;
const CCTEMP_K: u16 = 358;
/// SMART Available Spare and Available Spare Threshold (percent).
const AVAILABLE_SPARE_PERCENT: u8 = 100;
const SPARE_THRESHOLD_PERCENT: u8 = 10;
/// The emulated controller powers up once per `SimController`.
const POWER_CYCLES: u128 = 1;
/// Seconds per hour, for Power On Hours.
const SECS_PER_HOUR: u64 = 3600;
/// Data Units count 512-byte units.
const DATA_UNIT_BASE: u64 = 512;

/// Initial CAP and VS register values for a configuration.
pub(crate) fn capabilities(config: &SimConfig) -> (Cap, Version) {
    let cap = Cap::new(
        config.mqes,
        true,
        config.timeout_500ms,
        config.dstrd,
        true,
        MPSMIN,
        MPSMAX,
    )
    // CSS bit 6, as QEMU sets it: CC.CSS = 110b enables the I/O Command Set Profile's sets.
    .with_io_command_sets();
    (cap, VERSION)
}

/// Admin-side controller state that a reset restores.
pub(crate) struct AdminState {
    id_ctrl: Box<[u8; IDENTIFY_DATA_SIZE]>,
    granted_sq: u16,
    granted_cq: u16,
    pub(super) features: FeatureStore,
    pub(super) aers_outstanding: u32,
    /// Aborts executed in the current pass over the admin SQ: all of them were submitted
    /// before the pass, so outstanding together (checked against the Abort Command Limit).
    pub(super) aborts_this_pass: u8,
    /// Command ids of the outstanding Asynchronous Event Requests, oldest first.
    pub(super) aer_cids: std::collections::VecDeque<u16>,
    /// Health and error history; survives controller resets (like a drive's).
    health: Health,
    /// Device self-test results, newest first (at most 20; survive resets).
    pub(super) self_tests: VecDeque<nvme_spec::selftest::SelfTestResult>,
    /// Firmware slots and the download buffer (survive resets; a reset activates the
    /// pending slot).
    pub(super) firmware: FirmwareState,
}

/// What the SMART / Health Information and Error Information log pages report.
struct Health {
    powered_on: Instant,
    /// 512-byte units moved by successful Reads / Writes.
    units_read: u128,
    units_written: u128,
    /// Errors recorded over the controller's life (the last Error Count issued).
    errors_total: u64,
    /// Completions with a Media and Data Integrity Errors status.
    media_errors: u128,
    /// The last [`ERROR_LOG_ENTRIES`] errors, newest first.
    errors: VecDeque<ErrorLogEntry>,
}

fn identify_controller(config: &SimConfig) -> IdentifyController {
    let mut oacs = Oacs::empty();
    oacs.set(Oacs::DOORBELL_BUFFER_CONFIG, config.shadow_doorbells);
    oacs.set(Oacs::FORMAT_NVM, config.format_nvm);
    oacs.set(Oacs::NAMESPACE_MANAGEMENT, config.namespace_management);
    oacs.set(Oacs::DEVICE_SELF_TEST, config.device_self_test);
    oacs.set(
        Oacs::FIRMWARE_DOWNLOAD_COMMIT,
        config.firmware_update.is_some(),
    );
    let (frmw, fwug) = match config.firmware_update {
        Some(f) => (
            Frmw {
                slots: f.slots,
                slot1_read_only: f.slot1_read_only,
                activation_without_reset: f.activation_without_reset,
            },
            f.fwug,
        ),
        // As QEMU 7.2: one slot, read only; no granularity information.
        None => (
            Frmw {
                slots: 1,
                slot1_read_only: true,
                activation_without_reset: false,
            },
            0,
        ),
    };
    let mut oncs = Oncs::COMPARE
        | Oncs::DATASET_MANAGEMENT
        | Oncs::WRITE_ZEROES
        | Oncs::SAVE_SELECT
        | Oncs::TIMESTAMP;
    oncs.set(Oncs::COPY, config.copy.is_some());
    oncs.set(Oncs::WRITE_UNCORRECTABLE, config.write_uncorrectable);
    let (fuses, acwu) = if config.compare_and_write {
        (Fuses::COMPARE_AND_WRITE, crate::config::SIM_ACWU_BLOCKS - 1)
    } else {
        (Fuses::empty(), 0)
    };
    let mut id = IdentifyController {
        vid: PCI_VENDOR_ID,
        ssvid: PCI_VENDOR_ID,
        mdts: config.mdts,
        ver: VERSION.0,
        oacs: oacs.bits(),
        frmw: frmw.raw(),
        fwug,
        sgls: if config.sgl {
            SglSupport::Byte.to_sgls()
        } else {
            SglSupport::None.to_sgls()
        },
        acl: config.abort_limit.max(1) - 1,
        aerl: (AER_LIMIT - 1) as u8,
        sqes: SQES_BOTH,
        cqes: CQES_BOTH,
        elpe: (ERROR_LOG_ENTRIES - 1) as u8,
        wctemp: WCTEMP_K,
        cctemp: CCTEMP_K,
        nn: config.namespaces.iter().map(|n| n.nsid).max().unwrap_or(0),
        oncs: oncs.bits(),
        // Extended LBA Formats (the PI format of each LBA format) when a namespace has PI,
        // as QEMU reports (it always sets the bit).
        ctratt: if config.namespaces.iter().any(|ns| ns.protection != 0) {
            CTRATT_ELBAS
        } else {
            0
        },
        fuses: fuses.bits(),
        acwu,
        ocfs: if config.copy.is_some() {
            let mut formats = CopyFormats::FORMAT_0;
            formats.set(CopyFormats::FORMAT_1, config.copy_format_1);
            formats.bits()
        } else {
            0
        },
        vwc: VWC_PRESENT,
        awupf: config.write_cache.as_ref().map_or(0, |c| c.awupf),
        lpa: LPA_COMMANDS_EFFECTS,
        fna: if config.format_nvm {
            super::manage::FNA_CRYPTO_ERASE
        } else {
            0
        },
        cntlid: config.cntlid,
        cmic: if config.shared_namespaces {
            Cmic::MULTI_CONTROLLER.bits()
        } else {
            0
        },
        ..IdentifyController::default()
    };
    id.subnqn[..config.subnqn.len()].copy_from_slice(config.subnqn.as_bytes());
    fill_ascii_field(&mut id.sn, &config.serial);
    fill_ascii_field(&mut id.mn, &config.model);
    fill_ascii_field(&mut id.fr, &config.firmware);
    id
}

impl AdminState {
    pub(crate) fn new(config: &SimConfig) -> Self {
        let mut state = Self {
            id_ctrl: Box::new(identify_controller(config).to_bytes()),
            granted_sq: 0,
            granted_cq: 0,
            features: FeatureStore::new(),
            aers_outstanding: 0,
            aborts_this_pass: 0,
            aer_cids: std::collections::VecDeque::new(),
            health: Health {
                powered_on: Instant::now(),
                units_read: 0,
                units_written: 0,
                errors_total: 0,
                media_errors: 0,
                errors: VecDeque::with_capacity(ERROR_LOG_ENTRIES),
            },
            self_tests: VecDeque::new(),
            firmware: FirmwareState::new(config),
        };
        state.reset(config);
        state
    }

    /// Whole hours since the emulated controller was powered on (SMART Power On Hours).
    pub(super) fn power_on_hours(&self) -> u64 {
        self.health.powered_on.elapsed().as_secs() / SECS_PER_HOUR
    }

    /// Back to power-on values (controller reset).
    pub(crate) fn reset(&mut self, config: &SimConfig) {
        self.granted_sq = config.io_queue_pairs;
        self.granted_cq = config.io_queue_pairs;
        self.features.reset();
        self.aers_outstanding = 0;
        self.aer_cids.clear();
        if let Some(rev) = self.firmware.reset() {
            self.set_running_revision(rev);
        }
    }

    /// Identify Controller FR after a firmware activation.
    pub(super) fn set_running_revision(&mut self, rev: [u8; 8]) {
        let mut id = IdentifyController::from_bytes(&self.id_ctrl);
        id.fr = rev;
        *self.id_ctrl = id.to_bytes();
    }

    /// Records a command that completed with an error status in the Error Information log.
    pub(crate) fn record_error(&mut self, sq_id: u16, sqe: &SubmissionEntry, status: Status) {
        let health = &mut self.health;
        health.errors_total += 1;
        if status.sct() == StatusCodeType::MediaDataIntegrity {
            health.media_errors += 1;
        }
        let has_lba = sq_id != 0
            && matches!(
                sqe.opcode(),
                nvm::READ | nvm::WRITE | nvm::COMPARE | nvm::WRITE_ZEROES
            );
        let mut entry = ErrorLogEntry {
            error_count: health.errors_total,
            sqid: sq_id,
            cmdid: sqe.cid(),
            parameter_error_location: ErrorLogEntry::NO_PARAMETER_LOCATION,
            lba: if has_lba { cmd::slba(sqe) } else { 0 },
            nsid: sqe.nsid,
            opcode: sqe.opcode(),
            ..ErrorLogEntry::default()
        };
        entry.set_status(status, false);
        if health.errors.len() == ERROR_LOG_ENTRIES {
            health.errors.pop_back();
        }
        health.errors.push_front(entry);
    }

    /// Counts the data of a successful Read (`write` false) or Write of `bytes` bytes.
    pub(crate) fn record_transfer(&mut self, write: bool, bytes: u64) {
        let units = u128::from(bytes.div_ceil(DATA_UNIT_BASE));
        let counter = if write {
            &mut self.health.units_written
        } else {
            &mut self.health.units_read
        };
        *counter = counter.saturating_add(units);
    }

    pub(super) fn queues_dw0(&self) -> u32 {
        u32::from(self.granted_sq - 1) | u32::from(self.granted_cq - 1) << HIGH16_SHIFT
    }
}

/// The Namespace Identification Descriptors of namespace `nsid`: EUI64, NGUID and UUID made
/// from the NSID (unique per namespace, stable across runs), and CSI 0 (NVM).
/// Where [`namespace_ids`] puts the Command Set Identifier descriptor.
const NS_ID_CSI: usize = 3;

fn namespace_ids(nsid: u32) -> [NsIdDescriptor; 4] {
    let eui = (SIM_EUI64_PREFIX | u64::from(nsid)).to_be_bytes();
    let mut nguid = [0u8; 16];
    nguid[..8].copy_from_slice(&eui);
    nguid[12..].copy_from_slice(&nsid.to_be_bytes());
    let mut uuid = nguid;
    // Version 4 (random) and variant 10b bits, so the UUID is well formed.
    uuid[6] = uuid[6] & 0x0F | 0x40;
    uuid[8] = uuid[8] & 0x3F | 0x80;
    uuid[0] ^= 0x5A;
    [
        NsIdDescriptor::Eui64(eui),
        NsIdDescriptor::Nguid(nguid),
        NsIdDescriptor::Uuid(uuid),
        NsIdDescriptor::Csi(0),
    ]
}

fn command_specific_status(sc: u8) -> Status {
    Status::new(StatusCodeType::CommandSpecific.raw(), sc, true)
}

/// A Namespace List (Identify CNS 02h/10h, Base §5.17.2.2): the ids of `ids` above `after`, in
/// increasing order, at most [`NAMESPACE_LIST_ENTRIES`]; FFFFFFFEh and FFFFFFFFh are invalid.
pub(super) fn namespace_list_after(
    mut ids: Vec<u32>,
    after: u32,
) -> Result<[u8; IDENTIFY_DATA_SIZE], Fail> {
    if after >= NSID_BROADCAST - 1 {
        return Err(fail(generic_status(generic::INVALID_NAMESPACE_OR_FORMAT)));
    }
    ids.retain(|&id| id > after);
    ids.sort_unstable();
    let mut list = NamespaceList::default();
    for (slot, id) in list
        .ids
        .iter_mut()
        .zip(ids.into_iter().take(NAMESPACE_LIST_ENTRIES))
    {
        *slot = id;
    }
    Ok(list.to_bytes())
}

fn fail(status: Status) -> Fail {
    Fail::Status(status)
}

/// The one I/O Command Set combination (index 0 of Identify CNS 1Ch: NVM and zoned), as in
/// QEMU 7.2; Set Features 19h takes no other index.
pub(crate) const IO_COMMAND_SET_COMBINATION: u16 = 0;

/// The I/O Command Set data structure (Identify CNS 1Ch, Base 2.0 §5.17.2.22): vector 0 holds
/// the NVM and the Zoned Namespace Command Sets, whether or not a zoned namespace is configured
/// (QEMU 7.2 answers the same).
fn io_command_set_vectors() -> [u8; IDENTIFY_DATA_SIZE] {
    use nvme_spec::zns::{IoCommandSetVectors, CSI_NVM, CSI_ZNS};
    let mut v = IoCommandSetVectors([0; IoCommandSetVectors::COUNT]);
    v.0[usize::from(IO_COMMAND_SET_COMBINATION)] =
        IoCommandSetVectors::bit(CSI_NVM) | IoCommandSetVectors::bit(CSI_ZNS);
    v.encode()
}

impl Device {
    pub(super) fn admin_command(&mut self, view: &GuestView<'_>, sqe: &SubmissionEntry) -> Outcome {
        let result = match sqe.opcode() {
            admin::IDENTIFY => self.identify(view, sqe),
            admin::SET_FEATURES => self.set_features(view, sqe),
            admin::GET_FEATURES => self.get_features(view, sqe),
            admin::CREATE_IO_CQ => self.create_io_cq(view, sqe),
            admin::CREATE_IO_SQ => self.create_io_sq(view, sqe),
            admin::DELETE_IO_SQ => self.delete_io_sq(view, sqe),
            admin::DELETE_IO_CQ => self.delete_io_cq(sqe),
            admin::DOORBELL_BUFFER_CONFIG => self.doorbell_buffer_config(view, sqe),
            admin::ABORT => Ok(self.abort(view, sqe)),
            admin::GET_LOG_PAGE => self.get_log_page(view, sqe),
            admin::ASYNC_EVENT_REQUEST => Ok(self.async_event_request(sqe)),
            admin::KEEP_ALIVE => Ok(Outcome::SUCCESS),
            admin::FORMAT_NVM => self.format_nvm(sqe),
            admin::NAMESPACE_ATTACHMENT => self.namespace_attachment(view, sqe),
            admin::DEVICE_SELF_TEST => self.device_self_test(sqe),
            admin::FIRMWARE_IMAGE_DOWNLOAD => self.firmware_image_download(view, sqe),
            admin::FIRMWARE_COMMIT => self.firmware_commit(sqe),
            op => {
                log::debug!(
                    "sim: unsupported admin opcode {op:#04x} ({})",
                    admin::name(op)
                );
                Err(fail(generic_status(generic::INVALID_OPCODE)))
            }
        };
        self.outcome(result)
    }

    /// Writes `data` to the host buffer described by the command's PRPs.
    pub(super) fn write_to_host(
        &self,
        view: &GuestView<'_>,
        sqe: &SubmissionEntry,
        data: &[u8],
    ) -> Result<(), Fail> {
        prp::walk(
            view,
            sqe.prp1,
            sqe.prp2,
            data.len(),
            self.page_size,
            |iova, len, offset| {
                view.write(iova, &data[offset..offset + len])
                    .map_err(Fail::from)
            },
        )
    }

    fn identify(&mut self, view: &GuestView<'_>, sqe: &SubmissionEntry) -> Result<Outcome, Fail> {
        let cns = (sqe.cdw10 & LOW8) as u8;
        let data: [u8; IDENTIFY_DATA_SIZE] = if cns == Cns::Controller as u8 {
            *self.admin.id_ctrl
        } else if cns == Cns::Namespace as u8 {
            let disk = self
                .shared
                .disks
                .get(sqe.nsid)
                .ok_or(fail(generic_status(generic::INVALID_NAMESPACE_OR_FORMAT)))?;
            self.identify_namespace_data(&disk)
        } else if cns == Cns::ActiveNamespaceList as u8 {
            namespace_list_after(self.shared.disks.attached(), sqe.nsid)?
        } else if cns == Cns::NamespaceIdDescriptors as u8 {
            if self.shared.disks.get(sqe.nsid).is_none() {
                return Err(fail(generic_status(generic::INVALID_NAMESPACE_OR_FORMAT)));
            }
            // An EUI64, NGUID and UUID derived from the NSID, and its command set.
            let mut ids = namespace_ids(sqe.nsid);
            if self.is_zoned(sqe.nsid) {
                ids[NS_ID_CSI] = NsIdDescriptor::Csi(nvme_spec::zns::CSI_ZNS);
            }
            NsIdDescriptor::encode_list(&ids)
        } else if cns == nvme_spec::zns::CNS_IO_COMMAND_SET {
            io_command_set_vectors()
        } else if cns == nvme_spec::zns::CNS_CSI_NAMESPACE
            && cmd::identify_csi_of(sqe) == nvme_spec::zns::CSI_ZNS
        {
            // ZNS Identify Namespace (ZNS CS 1.1 §4.1.5.1), for the zoned namespace only.
            match self.zones.as_ref().filter(|z| z.nsid() == sqe.nsid) {
                Some(z) => z.identify(),
                None => return Err(fail(generic_status(generic::INVALID_FIELD))),
            }
        } else if cns == nvme_spec::zns::CNS_CSI_NAMESPACE
            && cmd::identify_csi_of(sqe) == nvme_spec::zns::CSI_NVM
        {
            // The NVM command set's Identify Namespace (NVM CS §4.1.5.2): every LBA format's
            // Extended LBA Format carries the namespace's PI format, STS 0.
            let disk = self
                .shared
                .disks
                .get(sqe.nsid)
                .ok_or(fail(generic_status(generic::INVALID_NAMESPACE_OR_FORMAT)))?;
            NvmIdentifyNamespace {
                elbaf: [ExtendedLbaFormat::new(0, disk.pi_format).0; MAX_LBA_FORMATS],
                ..NvmIdentifyNamespace::default()
            }
            .encode()
        } else if cns == nvme_spec::zns::CNS_CSI_CONTROLLER
            && cmd::identify_csi_of(sqe) == nvme_spec::zns::CSI_ZNS
        {
            // ZNS Identify Controller (§4.1.5.2): ZASL as configured (0: MDTS applies).
            let mut data = [0; IDENTIFY_DATA_SIZE];
            data[0] = self.shared.config.zoned.map_or(0, |z| z.zasl);
            data
        } else if (Cns::AllocatedNamespaceList as u8..=Cns::ControllerList as u8).contains(&cns)
            && self.shared.config.namespace_management
        {
            self.identify_management(cns, sqe)?
        } else {
            log::debug!("sim: Identify CNS {cns:#x} not supported");
            return Err(fail(generic_status(generic::INVALID_FIELD)));
        };
        self.write_to_host(view, sqe, &data)?;
        Ok(Outcome::SUCCESS)
    }

    /// Set Features Number of Queues (§5.27.1.5): grants up to the configured pairs.
    pub(super) fn set_number_of_queues(&mut self, sqe: &SubmissionEntry) -> Outcome {
        let asked_sq = (sqe.cdw11 & LOW16) as u16;
        let asked_cq = (sqe.cdw11 >> HIGH16_SHIFT) as u16;
        if asked_sq == NUMBER_OF_QUEUES_INVALID || asked_cq == NUMBER_OF_QUEUES_INVALID {
            return Outcome::status(generic_status(generic::INVALID_FIELD));
        }
        let limit = self.shared.config.io_queue_pairs;
        self.admin.granted_sq = (asked_sq + 1).min(limit);
        self.admin.granted_cq = (asked_cq + 1).min(limit);
        Outcome::Complete {
            status: Status::SUCCESS,
            dw0: self.admin.queues_dw0(),
        }
    }

    /// Decodes QID (CDW10 15:0) and the 1-based size (CDW10 31:16 is 0-based).
    fn queue_id_and_size(sqe: &SubmissionEntry) -> (u16, u32) {
        ((sqe.cdw10 & LOW16) as u16, (sqe.cdw10 >> HIGH16_SHIFT) + 1)
    }

    /// Checks what Create I/O CQ and SQ share: QID, size, contiguity, ring alignment/mapping.
    fn check_new_queue(
        &self,
        view: &GuestView<'_>,
        sqe: &SubmissionEntry,
        granted: u16,
        exists: bool,
        entry_size: usize,
    ) -> Result<(u16, u32), Fail> {
        let (qid, size) = Self::queue_id_and_size(sqe);
        if qid == 0 || qid > granted || exists {
            return Err(fail(command_specific_status(
                command_specific::INVALID_QUEUE_IDENTIFIER,
            )));
        }
        if !self.doorbells_reachable(qid) {
            log::debug!("sim: queue {qid}: its doorbells lie beyond the BAR (CAP.DSTRD too large)");
            return Err(fail(command_specific_status(
                command_specific::INVALID_QUEUE_IDENTIFIER,
            )));
        }
        let max = u32::from(self.shared.config.mqes) + 1;
        if size < 2 || size > max {
            return Err(fail(command_specific_status(
                command_specific::INVALID_QUEUE_SIZE,
            )));
        }
        if sqe.cdw11 & PHYSICALLY_CONTIGUOUS == 0 {
            // CAP.CQR = 1: only physically contiguous queues are supported.
            return Err(fail(generic_status(generic::INVALID_FIELD)));
        }
        if sqe.prp1 % self.page_size as u64 != 0 {
            return Err(fail(generic_status(generic::INVALID_PRP_OFFSET)));
        }
        let bytes = size as usize * entry_size;
        if !view.is_mapped(sqe.prp1, bytes) {
            return Err(Fail::Dma(crate::dma::DmaFault {
                iova: sqe.prp1,
                len: bytes,
            }));
        }
        Ok((qid, size))
    }

    fn create_io_cq(
        &mut self,
        view: &GuestView<'_>,
        sqe: &SubmissionEntry,
    ) -> Result<Outcome, Fail> {
        let (qid, _) = Self::queue_id_and_size(sqe);
        let exists = self.cqs.get(usize::from(qid)).is_some_and(Option::is_some);
        let (qid, size) =
            self.check_new_queue(view, sqe, self.admin.granted_cq, exists, CQE_SIZE)?;
        let interrupt = if sqe.cdw11 & INTERRUPTS_ENABLED != 0 {
            let vector = (sqe.cdw11 >> HIGH16_SHIFT) as u16;
            if u32::from(vector) >= self.shared.config.msix_vectors {
                log::debug!(
                    "sim: Create I/O CQ {qid}: vector {vector} beyond the {} MSI-X vectors",
                    self.shared.config.msix_vectors
                );
                return Err(fail(command_specific_status(
                    command_specific::INVALID_INTERRUPT_VECTOR,
                )));
            }
            CqInterrupt::Vector(vector)
        } else {
            CqInterrupt::Polled
        };
        self.create_cq(qid, sqe.prp1, size, interrupt, Some(view));
        log::debug!("sim: created I/O CQ {qid} ({size} entries, {interrupt:?})");
        Ok(Outcome::SUCCESS)
    }

    fn create_io_sq(
        &mut self,
        view: &GuestView<'_>,
        sqe: &SubmissionEntry,
    ) -> Result<Outcome, Fail> {
        let (qid, _) = Self::queue_id_and_size(sqe);
        let exists = self.sqs.get(usize::from(qid)).is_some_and(Option::is_some);
        let (qid, size) =
            self.check_new_queue(view, sqe, self.admin.granted_sq, exists, SQE_SIZE)?;
        let cqid = (sqe.cdw11 >> HIGH16_SHIFT) as u16;
        if cqid == 0 || !self.cqs.get(usize::from(cqid)).is_some_and(Option::is_some) {
            return Err(fail(command_specific_status(
                command_specific::COMPLETION_QUEUE_INVALID,
            )));
        }
        self.create_sq(qid, sqe.prp1, size, cqid, Some(view));
        log::debug!("sim: created I/O SQ {qid} ({size} entries) -> CQ {cqid}");
        Ok(Outcome::SUCCESS)
    }

    fn delete_io_sq(
        &mut self,
        view: &GuestView<'_>,
        sqe: &SubmissionEntry,
    ) -> Result<Outcome, Fail> {
        let qid16 = (sqe.cdw10 & LOW16) as u16;
        let qid = usize::from(qid16);
        if qid != 0 && self.sqs.get(qid).is_some_and(Option::is_some) {
            // Commands still waiting to execute never will (§5.7).
            self.cancel_deferred_of(view, qid16);
        }
        match self.sqs.get_mut(qid) {
            Some(slot @ Some(_)) if qid != 0 => {
                *slot = None;
                log::debug!("sim: deleted I/O SQ {qid}");
                Ok(Outcome::SUCCESS)
            }
            _ => Err(fail(command_specific_status(
                command_specific::INVALID_QUEUE_IDENTIFIER,
            ))),
        }
    }

    fn delete_io_cq(&mut self, sqe: &SubmissionEntry) -> Result<Outcome, Fail> {
        let qid = (sqe.cdw10 & LOW16) as u16;
        if qid == 0 || !self.cqs.get(usize::from(qid)).is_some_and(Option::is_some) {
            return Err(fail(command_specific_status(
                command_specific::INVALID_QUEUE_IDENTIFIER,
            )));
        }
        if self.sqs.iter().flatten().any(|sq| sq.cqid == qid) {
            return Err(fail(command_specific_status(
                command_specific::INVALID_QUEUE_DELETION,
            )));
        }
        self.cqs[usize::from(qid)] = None;
        self.delayed.retain(|d| d.cqid != qid);
        log::debug!("sim: deleted I/O CQ {qid}");
        Ok(Outcome::SUCCESS)
    }

    /// Doorbell Buffer Config (§5.8): PRP1 = shadow doorbell page, PRP2 = EventIdx page.
    fn doorbell_buffer_config(
        &mut self,
        view: &GuestView<'_>,
        sqe: &SubmissionEntry,
    ) -> Result<Outcome, Fail> {
        if !self.shared.config.shadow_doorbells {
            return Err(fail(generic_status(generic::INVALID_OPCODE)));
        }
        let page = self.page_size as u64;
        let (doorbells, event_idx) = (sqe.prp1, sqe.prp2);
        if doorbells % page != 0 || event_idx % page != 0 {
            return Err(fail(generic_status(generic::INVALID_FIELD)));
        }
        for base in [doorbells, event_idx] {
            if !view.is_mapped(base, self.page_size) {
                return Err(Fail::Dma(crate::dma::DmaFault {
                    iova: base,
                    len: self.page_size,
                }));
            }
        }
        self.shadow = Some(ShadowBuffers {
            doorbells,
            event_idx,
        });
        self.resync_all_shadows(view);
        log::debug!("sim: shadow doorbells at {doorbells:#x}, EventIdx at {event_idx:#x}");
        Ok(Outcome::SUCCESS)
    }

    /// Abort (§5.1): CDW10 bits 15:0 SQID, 31:16 CID. Only a command deferred by
    /// [`crate::Faults::delay_execution`] can still be aborted (every other command executes
    /// when fetched); it then completes with Command Abort Requested before Abort completes
    /// with Dword 0 bit 0 clear. Aborts beyond [`SimConfig::abort_limit`] in one pass over the
    /// admin SQ (submitted together, so outstanding together) complete with Abort Command
    /// Limit Exceeded.
    fn abort(&mut self, view: &GuestView<'_>, sqe: &SubmissionEntry) -> Outcome {
        if self.admin.aborts_this_pass >= self.shared.config.abort_limit.max(1) {
            return Outcome::status(command_specific_status(
                command_specific::ABORT_COMMAND_LIMIT_EXCEEDED,
            ));
        }
        self.admin.aborts_this_pass += 1;
        let sq_id = (sqe.cdw10 & LOW16) as u16;
        let cid = (sqe.cdw10 >> HIGH16_SHIFT) as u16;
        let dw0 = if self.abort_deferred(view, sq_id, cid) {
            ABORT_ABORTED
        } else {
            ABORT_NOT_ABORTED
        };
        Outcome::Complete {
            status: Status::SUCCESS,
            dw0,
        }
    }

    fn async_event_request(&mut self, sqe: &SubmissionEntry) -> Outcome {
        if self.admin.aers_outstanding >= AER_LIMIT {
            return Outcome::status(command_specific_status(
                command_specific::ASYNC_EVENT_REQUEST_LIMIT_EXCEEDED,
            ));
        }
        // Kept outstanding until an event is raised (`Faults::raise_async_event`).
        self.admin.aers_outstanding += 1;
        self.admin.aer_cids.push_back(sqe.cid());
        Outcome::Pending
    }

    fn get_log_page(
        &mut self,
        view: &GuestView<'_>,
        sqe: &SubmissionEntry,
    ) -> Result<Outcome, Fail> {
        let lid = (sqe.cdw10 & LOW8) as u8;
        let numd =
            u64::from(sqe.cdw10 >> HIGH16_SHIFT) | u64::from(sqe.cdw11 & LOW16) << HIGH16_SHIFT;
        let bytes = (numd + 1) * DWORD;
        // Log Page Offset (CDW12 lower, CDW13 upper dword), in bytes.
        let offset = u64::from(sqe.cdw13) << 32 | u64::from(sqe.cdw12);
        let page: Vec<u8> = match lid {
            log_page::ERROR_INFORMATION => self.error_log_page(),
            log_page::SMART_HEALTH => {
                // LPA bit 0 is clear: no per-namespace data, only the controller-wide page.
                if sqe.nsid != 0 && sqe.nsid != NSID_BROADCAST {
                    return Err(fail(generic_status(generic::INVALID_FIELD)));
                }
                self.smart_log_page().to_vec()
            }
            log_page::FIRMWARE_SLOT => self.admin.firmware.log_page(),
            log_page::COMMANDS_SUPPORTED_AND_EFFECTS => commands_effects_page(
                self.shared.config.shadow_doorbells,
                self.shared.config.copy.is_some(),
                self.shared.config.firmware_update.is_some(),
            ),
            log_page::DEVICE_SELF_TEST if self.shared.config.device_self_test => {
                self.self_test_log_page()
            }
            log_page::CHANGED_NAMESPACE_LIST => {
                // Up to 1024 IDs; more changes than that read as one entry FFFFFFFFh.
                let mut changed = self.shared.disks.take_changed();
                if changed.len() > NAMESPACE_LIST_ENTRIES {
                    changed = vec![NSID_BROADCAST];
                }
                let mut list = NamespaceList::default();
                for (slot, id) in list.ids.iter_mut().zip(changed) {
                    *slot = id;
                }
                list.to_bytes().to_vec()
            }
            _ => {
                return Err(fail(command_specific_status(
                    command_specific::INVALID_LOG_PAGE,
                )))
            }
        };
        let bytes =
            usize::try_from(bytes).map_err(|_| fail(generic_status(generic::INVALID_FIELD)))?;
        let offset = usize::try_from(offset)
            .ok()
            .filter(|&o| o % DWORD as usize == 0 && (o == 0 || o < page.len()))
            .ok_or(fail(generic_status(generic::INVALID_FIELD)))?;
        let data = page.get(offset..).unwrap_or_default();
        prp::walk(
            view,
            sqe.prp1,
            sqe.prp2,
            bytes,
            self.page_size,
            |iova, len, at| {
                // The log, then zeros past its end.
                let have = data.len().saturating_sub(at).min(len);
                if have > 0 {
                    view.write(iova, &data[at..at + have])?;
                }
                view.fill(iova + have as u64, len - have, 0)
                    .map_err(Fail::from)
            },
        )?;
        Ok(Outcome::SUCCESS)
    }

    /// The Error Information log: the kept entries, newest first.
    fn error_log_page(&self) -> Vec<u8> {
        let errors = &self.admin.health.errors;
        let mut page = Vec::with_capacity(errors.len() * ERROR_LOG_ENTRY_SIZE);
        for entry in errors {
            page.extend_from_slice(&entry.to_bytes());
        }
        page
    }

    /// The SMART / Health Information log from the controller's counters.
    fn smart_log_page(&self) -> [u8; SMART_LOG_SIZE] {
        let counters = &self.shared.counters;
        let health = &self.admin.health;
        let mut log = SmartLog {
            available_spare: AVAILABLE_SPARE_PERCENT,
            available_spare_threshold: SPARE_THRESHOLD_PERCENT,
            data_units_read: SmartLog::data_units(health.units_read),
            data_units_written: SmartLog::data_units(health.units_written),
            host_read_commands: u128::from(counters.reads.load(Ordering::Relaxed)),
            host_write_commands: u128::from(counters.writes.load(Ordering::Relaxed)),
            power_cycles: POWER_CYCLES,
            power_on_hours: u128::from(self.admin.power_on_hours()),
            media_errors: health.media_errors,
            error_log_entries: u128::from(health.errors_total),
            ..SmartLog::default()
        };
        log.set_temperature_kelvin(SIM_TEMPERATURE_K);
        log.temperature_sensors[0] = SIM_TEMPERATURE_K;
        log.to_bytes()
    }
}
