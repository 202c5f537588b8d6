//! Typed admin commands for management: [`AdminCommand`] (a submission entry whose data
//! transfer is known from how it was built), the one primitive a transport implements
//! ([`crate::NvmeController::admin`]), and what every controller then provides over it
//! ([`AdminCommands`]): Get/Set Features for the standard features (NVMe Base §5.15, §5.27),
//! Identify Namespace, the Active Namespace ID list (CNS 02h) and Namespace Identification
//! Descriptors (CNS 03h, §5.17.2), and the Firmware Slot (03h), Changed Namespace List (04h)
//! and Commands Supported and Effects (05h) log pages (§5.16.1); and namespace management:
//! Format NVM (§5.14), Namespace Attachment (§5.20), the allocated namespace and controller
//! lists (CNS 10h-13h, §5.17.2.10-§5.17.2.13), each refused before anything is sent when
//! Identify Controller OACS says the controller lacks it, and followed by a namespace rescan;
//! Device Self-test (§5.8, refused from OACS bit 4 too) and its log page (06h, §5.16.1.7);
//! Firmware Image Download and Firmware Commit (§5.13, §5.12; refused from OACS bit 2,
//! pieces planned in `firmware.rs`).
//!
//! INVARIANT: an [`AdminCommand`] is built only here, from a typed command whose transfer is
//! at most its [`AdminData`] length in the direction given, so executing one is safe; raw
//! passthrough of commands the driver cannot bound stays the transports' `unsafe fn`
//! ([`AdminCommand::passthru`] builds the others, in `passthru.rs`).

use nvme_spec::admin_log::{CommandsEffectsLog, FirmwareSlotLog, NsIdDescriptor};
use nvme_spec::command::{self, Cns};
use nvme_spec::feature::{Feature, FeatureCapabilities, FeatureId, Select};
use nvme_spec::identify::{IdentifyNamespace, NamespaceList, Oacs, IDENTIFY_DATA_SIZE};
use nvme_spec::log::NSID_BROADCAST;
use nvme_spec::manage::{self, Attach, ControllerList, FormatNvm};
use nvme_spec::opcode::log_page;
use nvme_spec::selftest::{self, SelfTestCode, SelfTestLog, SELF_TEST_LOG_SIZE};
use nvme_spec::SubmissionEntry;

use crate::controller::NvmeController;
use crate::error::{Error, Result};
use crate::namespace::NamespaceChanges;

/// The data of an [`AdminCommand`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AdminData {
    /// No data.
    None,
    /// The controller writes up to this many bytes to the host.
    FromDevice(usize),
    /// The controller reads these bytes from the host.
    ToDevice(Vec<u8>),
}

impl AdminData {
    /// Bytes of the data buffer (0 for none).
    pub fn len(&self) -> usize {
        match self {
            AdminData::None => 0,
            AdminData::FromDevice(n) => *n,
            AdminData::ToDevice(d) => d.len(),
        }
    }

    /// Whether there is no data.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A typed admin command: a submission entry and its data, built by the constructors below.
#[derive(Clone, Debug)]
pub struct AdminCommand {
    sqe: SubmissionEntry,
    data: AdminData,
}

/// The completion of an [`AdminCommand`]: dword 0 and the data the controller returned
/// ([`AdminData::FromDevice`] length; empty otherwise).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdminReply {
    /// Completion dword 0 (command specific).
    pub dw0: u32,
    /// Data from the device.
    pub data: Vec<u8>,
}

impl AdminCommand {
    /// An entry and its data, for the checked constructors of this crate (the INVARIANT above).
    pub(crate) fn from_parts(sqe: SubmissionEntry, data: AdminData) -> Self {
        AdminCommand { sqe, data }
    }

    /// The submission entry (command id and data pointer left to the transport).
    pub fn sqe(&self) -> SubmissionEntry {
        self.sqe
    }

    /// The data the command moves.
    pub fn data(&self) -> &AdminData {
        &self.data
    }

    /// Identify `cns` for `nsid` (§5.17): 4096 bytes from the device.
    pub fn identify(cns: Cns, nsid: u32) -> Self {
        AdminCommand {
            sqe: command::identify(cns, nsid),
            data: AdminData::FromDevice(IDENTIFY_DATA_SIZE),
        }
    }

    /// Identify of an I/O Command Set specific structure (Base 2.0 §5.17: CNS `cns` in CDW10,
    /// the Command Set Identifier in CDW11 bits 31:24), e.g. CNS 05h/06h with CSI 02h for the
    /// ZNS Identify Namespace and Controller.
    pub fn identify_csi(cns: u8, csi: u8, nsid: u32) -> Self {
        AdminCommand {
            sqe: command::identify_csi(cns, csi, nsid),
            data: AdminData::FromDevice(IDENTIFY_DATA_SIZE),
        }
    }

    /// Identify `cns` for `nsid` starting at controller `cntid` (CNS 12h/13h, §5.17.2.12-13):
    /// 4096 bytes from the device.
    pub fn identify_from_controller(cns: Cns, nsid: u32, cntid: u16) -> Self {
        AdminCommand {
            sqe: manage::identify_from_controller(cns, nsid, cntid),
            data: AdminData::FromDevice(IDENTIFY_DATA_SIZE),
        }
    }

    /// Format NVM `nsid` with `format` (§5.14): no data.
    pub fn format_nvm(nsid: u32, format: &FormatNvm) -> Self {
        AdminCommand {
            sqe: manage::format_nvm(nsid, format),
            data: AdminData::None,
        }
    }

    /// Namespace Attachment (§5.20): attach `nsid` to, or detach it from, `controllers`
    /// (a Controller List, 4096 bytes to the device).
    pub fn namespace_attachment(nsid: u32, select: Attach, controllers: &ControllerList) -> Self {
        AdminCommand {
            sqe: manage::namespace_attachment(nsid, select),
            data: AdminData::ToDevice(controllers.to_bytes().to_vec()),
        }
    }

    /// Device Self-test (§5.8) of `nsid` with `code`: no data.
    pub fn device_self_test(nsid: u32, code: SelfTestCode) -> Self {
        AdminCommand {
            sqe: selftest::device_self_test(nsid, code),
            data: AdminData::None,
        }
    }

    /// Get Log Page `lid` for `nsid` (§5.16), `bytes` long (a non-zero multiple of 4).
    pub fn get_log_page(lid: u8, nsid: u32, bytes: usize) -> Result<Self> {
        let len = u32::try_from(bytes)
            .ok()
            .filter(|&b| b != 0 && b % 4 == 0)
            .ok_or_else(|| {
                Error::InvalidRequest(format!(
                    "log page length {bytes} is not a non-zero multiple of 4 bytes"
                ))
            })?;
        Ok(AdminCommand {
            sqe: command::get_log_page(lid, nsid, len),
            data: AdminData::FromDevice(bytes),
        })
    }

    /// Get Features `id` with Select `sel` (§5.15); `cdw11` is the feature-specific selector
    /// (the Temperature Threshold's sensor and type; 0 otherwise).
    pub fn get_features(id: FeatureId, sel: Select, cdw11: u32) -> Self {
        AdminCommand {
            sqe: command::get_features_select(id.fid(), sel, cdw11),
            data: from_device(id.data_len()),
        }
    }

    /// Get Features `id` with Select 11b: its supported capabilities (§5.15.2).
    pub fn get_feature_capabilities(id: FeatureId) -> Self {
        AdminCommand {
            sqe: command::get_feature_capabilities(id.fid()),
            data: AdminData::None,
        }
    }

    /// Set Features to `value` (§5.27), saved across resets with `save`.
    pub fn set_features(value: &Feature, save: bool) -> Self {
        AdminCommand {
            sqe: command::set_features_save(value.id().fid(), value.dword(), save),
            data: value
                .data()
                .map_or(AdminData::None, |d| AdminData::ToDevice(d.to_vec())),
        }
    }
}

fn from_device(len: usize) -> AdminData {
    if len == 0 {
        AdminData::None
    } else {
        AdminData::FromDevice(len)
    }
}

/// Refuses a command before it is sent when Identify Controller OACS lacks `bit`.
fn require_oacs<C: NvmeController + ?Sized>(
    ctrl: &C,
    bit: Oacs,
    command: &'static str,
    why: &'static str,
) -> Result<()> {
    if ctrl.identify().oacs_flags().contains(bit) {
        Ok(())
    } else {
        Err(Error::CommandNotSupported {
            controller: ctrl.name().to_owned(),
            command,
            why,
        })
    }
}

fn identify_bytes(reply: &AdminReply) -> Result<[u8; IDENTIFY_DATA_SIZE]> {
    reply
        .data
        .get(..IDENTIFY_DATA_SIZE)
        .and_then(|d| d.try_into().ok())
        .ok_or_else(|| Error::InvalidRequest("short Identify data".to_owned()))
}

/// The management commands every [`NvmeController`] offers, written once over
/// [`NvmeController::admin`] (a blanket implementation: `use nvme_core::AdminCommands;`).
pub trait AdminCommands: NvmeController {
    /// Get Features (§5.15): the value of feature `id` selected by `sel`.
    fn get_feature(&self, id: FeatureId, sel: Select) -> Result<Feature> {
        let reply = self.admin(AdminCommand::get_features(id, sel, 0))?;
        Ok(Feature::decode(id, reply.dw0, &reply.data))
    }

    /// Get Features with Select 11b (§5.15.2): whether feature `id` is saveable, namespace
    /// specific and changeable.
    fn feature_capabilities(&self, id: FeatureId) -> Result<FeatureCapabilities> {
        let reply = self.admin(AdminCommand::get_feature_capabilities(id))?;
        Ok(FeatureCapabilities::from_bits_retain(reply.dw0))
    }

    /// Set Features (§5.27) to `value`, saved across resets with `save` (a feature that is
    /// not saveable is refused by the controller: Feature Identifier Not Saveable). Returns
    /// completion dword 0 (Number of Queues: the queues allocated).
    fn set_feature(&self, value: Feature, save: bool) -> Result<u32> {
        Ok(self.admin(AdminCommand::set_features(&value, save))?.dw0)
    }

    /// Identify Namespace (NVM CS §4.1.5.1) for `nsid`, whether or not the driver can use it.
    fn identify_namespace(&self, nsid: u32) -> Result<IdentifyNamespace> {
        let reply = self.admin(AdminCommand::identify(Cns::Namespace, nsid))?;
        Ok(IdentifyNamespace::from_bytes(&identify_bytes(&reply)?))
    }

    /// ZNS Identify Namespace (CNS 05h, CSI 02h; ZNS CS 1.1 §4.1.5.1) of `nsid`: zone size
    /// (ZSZE of the LBA format in use), MAR/MOR, ZRWA. A namespace that is not zoned
    /// completes with an error status (Invalid Field).
    fn zns_identify_namespace(&self, nsid: u32) -> Result<nvme_spec::zns::ZnsIdentifyNamespace> {
        use nvme_spec::zns;
        let reply = self.admin(AdminCommand::identify_csi(
            zns::CNS_CSI_NAMESPACE,
            zns::CSI_ZNS,
            nsid,
        ))?;
        Ok(zns::ZnsIdentifyNamespace::parse(&identify_bytes(&reply)?))
    }

    /// ZNS Identify Controller (CNS 06h, CSI 02h; ZNS CS 1.1 §4.1.5.2): ZASL.
    fn zns_identify_controller(&self) -> Result<nvme_spec::zns::ZnsIdentifyController> {
        use nvme_spec::zns;
        let reply = self.admin(AdminCommand::identify_csi(
            zns::CNS_CSI_CONTROLLER,
            zns::CSI_ZNS,
            0,
        ))?;
        let bytes = identify_bytes(&reply)?;
        let mut head = [0u8; zns::ZnsIdentifyController::SIZE];
        head.copy_from_slice(&bytes[..zns::ZnsIdentifyController::SIZE]);
        Ok(zns::ZnsIdentifyController::from_bytes(&head))
    }

    /// Active Namespace ID list (CNS 02h, §5.17.2.2): up to 1024 active NSIDs above `after`.
    fn active_namespace_ids(&self, after: u32) -> Result<Vec<u32>> {
        let reply = self.admin(AdminCommand::identify(Cns::ActiveNamespaceList, after))?;
        let list = NamespaceList::from_bytes(&identify_bytes(&reply)?);
        Ok(list.active().collect())
    }

    /// Namespace Identification Descriptor list (CNS 03h, §5.17.2.3) of `nsid`.
    fn namespace_descriptors(&self, nsid: u32) -> Result<Vec<NsIdDescriptor>> {
        let reply = self.admin(AdminCommand::identify(Cns::NamespaceIdDescriptors, nsid))?;
        Ok(NsIdDescriptor::parse_list(&identify_bytes(&reply)?))
    }

    /// Firmware Slot Information log page (03h, §5.16.1.4).
    fn firmware_slot_log(&self) -> Result<FirmwareSlotLog> {
        let page = self.log_page(log_page::FIRMWARE_SLOT, FirmwareSlotLog::SIZE)?;
        Ok(FirmwareSlotLog::from_bytes(
            page.as_slice().try_into().expect("the page's size"),
        ))
    }

    /// Changed Namespace List log page (04h, §5.16.1.5): the namespaces changed since it was
    /// last read (reading clears it); `[0xFFFF_FFFF]` when more than 1024 changed.
    fn changed_namespace_log(&self) -> Result<Vec<u32>> {
        let page = self.log_page(log_page::CHANGED_NAMESPACE_LIST, NamespaceList::SIZE)?;
        let list = NamespaceList::from_bytes(page.as_slice().try_into().expect("the page's size"));
        Ok(list.active().collect())
    }

    /// Commands Supported and Effects log page (05h, §5.16.1.6).
    fn commands_effects_log(&self) -> Result<CommandsEffectsLog> {
        let page = self.log_page(
            log_page::COMMANDS_SUPPORTED_AND_EFFECTS,
            CommandsEffectsLog::SIZE,
        )?;
        Ok(CommandsEffectsLog::from_bytes(
            page.as_slice().try_into().expect("the page's size"),
        ))
    }

    /// Device Self-test (§5.8): starts a short or extended self-test of `nsid` (0: no
    /// namespace, 0xFFFF_FFFF: all), or aborts the one in progress. Refused with
    /// [`Error::CommandNotSupported`] when OACS bit 4 is clear; the controller refuses a second
    /// test while one runs (Device Self-test In Progress).
    fn device_self_test(&self, nsid: u32, code: SelfTestCode) -> Result<()> {
        require_oacs(
            self,
            Oacs::DEVICE_SELF_TEST,
            "Device Self-test",
            "Identify Controller OACS bit 4 clear",
        )?;
        self.admin(AdminCommand::device_self_test(nsid, code))?;
        Ok(())
    }

    /// Device Self-test log page (06h, §5.16.1.7): the test in progress and the last 20
    /// results, newest first. Refused like [`AdminCommands::device_self_test`].
    fn self_test_log(&self) -> Result<SelfTestLog> {
        require_oacs(
            self,
            Oacs::DEVICE_SELF_TEST,
            "Device Self-test log",
            "Identify Controller OACS bit 4 clear",
        )?;
        let page = self.log_page(log_page::DEVICE_SELF_TEST, SELF_TEST_LOG_SIZE)?;
        Ok(SelfTestLog::from_bytes(
            page.as_slice().try_into().expect("the page's size"),
        ))
    }

    /// Firmware Image Download (§5.13): sends `image` as the part of a firmware image that
    /// starts at byte `offset`, in pieces no larger than the controller's largest transfer
    /// (MDTS) and aligned to its update granularity (FWUG); returns the pieces sent. A bad
    /// layout (not whole dwords, an offset off FWUG) is [`Error::FirmwareImage`], a firmware
    /// status from the controller (Overlapping Range) [`Error::Firmware`]. Refused with
    /// [`Error::CommandNotSupported`] when OACS bit 2 is clear (QEMU 7.2's controller).
    fn firmware_download(&self, offset: u64, image: &[u8]) -> Result<usize> {
        self.firmware_download_chunked(offset, image, None)
    }

    /// [`AdminCommands::firmware_download`] with at most `chunk` bytes per piece (a multiple
    /// of 4; of FWUG too where the controller states one).
    fn firmware_download_chunked(
        &self,
        offset: u64,
        image: &[u8],
        chunk: Option<usize>,
    ) -> Result<usize> {
        require_oacs(
            self,
            Oacs::FIRMWARE_DOWNLOAD_COMMIT,
            "Firmware Image Download",
            "Identify Controller OACS bit 2 clear",
        )?;
        let pieces = crate::firmware::plan_pieces(
            offset,
            image.len(),
            self.max_transfer_bytes(),
            self.identify().firmware_update_granularity(),
            chunk,
        )?;
        for piece in &pieces {
            let start = (piece.offset - offset) as usize;
            let data = &image[start..start + piece.len];
            self.admin(AdminCommand::firmware_image_download(piece.offset, data)?)
                .map_err(|e| crate::firmware::typed_error("Firmware Image Download", e))?;
        }
        Ok(pieces.len())
    }

    /// Firmware Commit (§5.12): `commit.action` on `commit.slot` (0: the controller
    /// chooses). The outcome says whether the image is stored, runs now, runs after the next
    /// reset, or needs a particular reset (statuses 0Bh, 10h, 11h: committed, not running);
    /// the other firmware statuses (Invalid Firmware Slot or Image, ...) are
    /// [`Error::Firmware`]. Refused like [`AdminCommands::firmware_download`].
    fn firmware_commit(
        &self,
        commit: nvme_spec::firmware::FirmwareCommit,
    ) -> Result<nvme_spec::firmware::CommitOutcome> {
        require_oacs(
            self,
            Oacs::FIRMWARE_DOWNLOAD_COMMIT,
            "Firmware Commit",
            "Identify Controller OACS bit 2 clear",
        )?;
        let command = AdminCommand::firmware_commit(&commit)?;
        crate::firmware::commit_outcome(&commit, self.admin(command))
    }

    /// Log page `lid` (controller-wide), `bytes` long, as read from offset 0.
    fn log_page(&self, lid: u8, bytes: usize) -> Result<Vec<u8>> {
        self.namespace_log_page(lid, NSID_BROADCAST, bytes)
    }

    /// Log page `lid` for namespace `nsid` (0xFFFF_FFFF: the controller), `bytes` long.
    fn namespace_log_page(&self, lid: u8, nsid: u32, bytes: usize) -> Result<Vec<u8>> {
        let mut data = self
            .admin(AdminCommand::get_log_page(lid, nsid, bytes)?)?
            .data;
        data.resize(bytes, 0);
        Ok(data)
    }

    /// Format NVM (§5.14) of `nsid` with `format`, then a namespace rescan (the block size
    /// may have changed: handles of the namespace go stale, take fresh ones). Refused with
    /// [`Error::CommandNotSupported`] when OACS bit 1 is clear. User data is lost.
    fn format_nvm(&self, nsid: u32, format: FormatNvm) -> Result<NamespaceChanges> {
        require_oacs(
            self,
            Oacs::FORMAT_NVM,
            "Format NVM",
            "Identify Controller OACS bit 1 clear",
        )?;
        self.admin(AdminCommand::format_nvm(nsid, &format))?;
        self.rescan_namespaces()
    }

    /// Namespace Attachment (§5.20): attaches `nsid` to `controllers`, then a rescan.
    /// Refused with [`Error::CommandNotSupported`] when OACS bit 3 is clear.
    fn attach_namespace(&self, nsid: u32, controllers: &[u16]) -> Result<NamespaceChanges> {
        self.namespace_attachment(nsid, Attach::Attach, controllers)
    }

    /// Namespace Attachment (§5.20): detaches `nsid` from `controllers`, then a rescan
    /// (handles of the namespace go stale on a controller it left).
    fn detach_namespace(&self, nsid: u32, controllers: &[u16]) -> Result<NamespaceChanges> {
        self.namespace_attachment(nsid, Attach::Detach, controllers)
    }

    /// Namespace Attachment with `select` (see [`AdminCommands::attach_namespace`]).
    fn namespace_attachment(
        &self,
        nsid: u32,
        select: Attach,
        controllers: &[u16],
    ) -> Result<NamespaceChanges> {
        require_oacs(
            self,
            Oacs::NAMESPACE_MANAGEMENT,
            "Namespace Attachment",
            "Identify Controller OACS bit 3 clear",
        )?;
        let list = ControllerList(controllers.to_vec());
        self.admin(AdminCommand::namespace_attachment(nsid, select, &list))?;
        self.rescan_namespaces()
    }

    /// Allocated Namespace ID list (CNS 10h, §5.17.2.10): up to 1024 NSIDs above `after`,
    /// attached to this controller or not.
    fn allocated_namespace_ids(&self, after: u32) -> Result<Vec<u32>> {
        require_oacs(
            self,
            Oacs::NAMESPACE_MANAGEMENT,
            "Identify CNS 10h",
            "Identify Controller OACS bit 3 clear",
        )?;
        let reply = self.admin(AdminCommand::identify(Cns::AllocatedNamespaceList, after))?;
        Ok(NamespaceList::from_bytes(&identify_bytes(&reply)?)
            .active()
            .collect())
    }

    /// Identify Namespace of an allocated `nsid`, attached or not (CNS 11h, §5.17.2.11).
    fn identify_allocated_namespace(&self, nsid: u32) -> Result<IdentifyNamespace> {
        require_oacs(
            self,
            Oacs::NAMESPACE_MANAGEMENT,
            "Identify CNS 11h",
            "Identify Controller OACS bit 3 clear",
        )?;
        let reply = self.admin(AdminCommand::identify(Cns::AllocatedNamespace, nsid))?;
        Ok(IdentifyNamespace::from_bytes(&identify_bytes(&reply)?))
    }

    /// Controller List (§5.17.2.12 with `nsid` Some: the controllers `nsid` is attached to;
    /// §5.17.2.13 with None: every controller of the subsystem), identifiers from `from` up.
    fn controller_list(&self, nsid: Option<u32>, from: u16) -> Result<Vec<u16>> {
        let command = match nsid {
            Some(nsid) => {
                AdminCommand::identify_from_controller(Cns::NamespaceControllerList, nsid, from)
            }
            None => AdminCommand::identify_from_controller(Cns::ControllerList, 0, from),
        };
        let reply = self.admin(command)?;
        Ok(ControllerList::from_bytes(&identify_bytes(&reply)?).0)
    }
}

impl<C: NvmeController + ?Sized> AdminCommands for C {}

#[cfg(test)]
mod tests {
    use super::*;
    use nvme_spec::opcode::{admin, feature};

    #[test]
    fn built_commands_carry_their_transfer() {
        let g = AdminCommand::get_features(FeatureId::Timestamp, Select::Saved, 0);
        assert_eq!(g.sqe().opcode(), admin::GET_FEATURES);
        assert_eq!(g.sqe().cdw10, u32::from(feature::TIMESTAMP) | 0b010 << 8);
        assert_eq!(g.data(), &AdminData::FromDevice(8));
        let g = AdminCommand::get_features(FeatureId::VolatileWriteCache, Select::Current, 0);
        assert!(g.data().is_empty());
        let c = AdminCommand::get_feature_capabilities(FeatureId::Arbitration);
        assert_eq!(c.sqe().cdw10, 0x301);
        let s = AdminCommand::set_features(&Feature::VolatileWriteCache(true), true);
        assert_eq!((s.sqe().cdw10, s.sqe().cdw11), (1 << 31 | 0x06, 1));
        assert!(s.data().is_empty());
        let t = AdminCommand::set_features(
            &Feature::from_raw(FeatureId::Timestamp, 1000).unwrap(),
            false,
        );
        assert_eq!(t.data().len(), 8);
        assert!(matches!(t.data(), AdminData::ToDevice(_)));
        assert!(AdminCommand::get_log_page(log_page::FIRMWARE_SLOT, 0, 6).is_err());
        assert!(AdminCommand::get_log_page(log_page::FIRMWARE_SLOT, 0, 0).is_err());
        let l = AdminCommand::identify(Cns::NamespaceIdDescriptors, 3);
        assert_eq!((l.sqe().nsid, l.sqe().cdw10), (3, 3));
        assert_eq!(l.data().len(), IDENTIFY_DATA_SIZE);
    }
}
