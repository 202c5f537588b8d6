//! I/O command sets at bring-up (NVMe Base 2.0 §3.5.1 steps 5-7, §5.27.1.21; ZNS CS 1.1 §4):
//! with CAP.CSS bit 6 the controller is enabled with CC.CSS = 110b, the I/O Command Set
//! Profile (Set Features 19h) selects the first combination of Identify CNS 1Ch holding the
//! NVM and the Zoned Namespace Command Sets, and the namespace scan reads each namespace's
//! Command Set Identifier (CNS 03h) and, for a zoned one, its zones (CNS 05h/06h, CSI 02h).
//!
//! INVARIANT: the profile is set before any I/O queue exists (the spec's precondition), at
//! bring-up and again after each controller reset; a controller that refuses it runs with
//! the NVM command set only, and its zoned namespaces are then plain ones (`zoned()` None).

use nvme_core::zns::ZoneGeometry;
use nvme_core::{Error, Namespace, Result};
use nvme_spec::command::{self, Cns};
use nvme_spec::identify::IDENTIFY_DATA_SIZE;
use nvme_spec::protection::{NvmIdentifyNamespace, CTRATT_ELBAS};
use nvme_spec::regs::{Cc, CC_CSS_ALL_IO};
use nvme_spec::zns::{self, IoCommandSetVectors, ZnsIdentifyController, ZnsIdentifyNamespace};
use nvme_spec::{regs, NsIdDescriptor};
use nvme_vfio::DmaBuffer;

use super::Inner;

/// What bring-up enabled beyond the NVM command set.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct CommandSets {
    /// The I/O Command Set Combination Index set with Set Features 19h.
    pub(crate) profile: Option<u16>,
    /// The Zoned Namespace Command Set is enabled: zoned namespaces take zone commands.
    pub(crate) zoned: bool,
    /// The largest Zone Append in bytes (ZASL, or the largest transfer).
    pub(crate) max_append_bytes: usize,
}

/// Set Features I/O Command Set Profile selecting combination `index`.
fn profile_command(index: u16) -> nvme_spec::SubmissionEntry {
    command::set_features(
        zns::FID_IO_COMMAND_SET_PROFILE,
        u32::from(index) & zns::IOCS_INDEX_MASK,
    )
}

impl Inner {
    /// Identify with a raw CNS and CSI through `page`.
    fn identify_csi_page(
        &self,
        cns: u8,
        csi: u8,
        nsid: u32,
        page: &mut DmaBuffer,
    ) -> Result<[u8; IDENTIFY_DATA_SIZE]> {
        self.identify_sqe_page(command::identify_csi(cns, csi, nsid), page)
    }

    /// After the enable: chooses the I/O Command Set Profile when CC.CSS is 110b. A refusal
    /// of CNS 1Ch or of the feature (a status, not a timeout) leaves the NVM set alone.
    pub(super) fn select_command_sets(&self, page: &mut DmaBuffer) -> Result<CommandSets> {
        let cc = Cc(self.mmio.read32(regs::CC));
        if cc.css() != CC_CSS_ALL_IO {
            return Ok(CommandSets::default());
        }
        let refused = |what: &str, e: Error| -> Result<CommandSets> {
            match e {
                Error::Command { .. } => {
                    log::warn!(
                        "{}: {what} refused ({e}); zoned namespaces stay plain NVM ones",
                        self.name
                    );
                    Ok(CommandSets::default())
                }
                e => Err(e),
            }
        };
        let vectors = match self.identify_csi_page(zns::CNS_IO_COMMAND_SET, zns::CSI_NVM, 0, page) {
            Ok(bytes) => IoCommandSetVectors::parse(&bytes),
            Err(e) => return refused("Identify I/O Command Set (CNS 1Ch)", e),
        };
        let zns_bit = IoCommandSetVectors::bit(zns::CSI_ZNS);
        let Some(index) = vectors.choose(zns_bit) else {
            log::warn!(
                "{}: no I/O Command Set combination holds the NVM command set",
                self.name
            );
            return Ok(CommandSets::default());
        };
        if let Err(e) = self.admin(profile_command(index), None) {
            return refused("I/O Command Set Profile (Set Features 19h)", e);
        }
        let zoned = vectors.0[usize::from(index)] & zns_bit != 0;
        let mut sets = CommandSets {
            profile: Some(index),
            zoned,
            max_append_bytes: self.max_transfer,
        };
        if zoned {
            let bytes = self.identify_csi_page(zns::CNS_CSI_CONTROLLER, zns::CSI_ZNS, 0, page)?;
            let mut head = [0u8; ZnsIdentifyController::SIZE];
            head.copy_from_slice(&bytes[..ZnsIdentifyController::SIZE]);
            let zasl = ZnsIdentifyController::from_bytes(&head).zasl;
            sets.max_append_bytes =
                ZoneGeometry::append_limit(zasl, self.cap.min_page_size(), self.max_transfer);
        }
        log::info!(
            "{}: I/O command set combination {index} (zoned: {zoned}, Zone Append up to {} \
             bytes)",
            self.name,
            sets.max_append_bytes
        );
        Ok(sets)
    }

    /// After a controller reset: the profile bring-up chose, set again (CC.CSS = 110b starts
    /// from the controller's default combination).
    pub(super) fn restore_command_set_profile(&self) -> Result<()> {
        let Some(index) = self.command_sets.profile else {
            return Ok(());
        };
        self.admin(profile_command(index), None).map(|_| ())
    }

    /// `ns` with the PI format and storage tag size of its current LBA format, from the
    /// Extended LBA Formats of the NVM command set's Identify Namespace (CNS 05h, CSI 00h;
    /// NVM CS §4.1.5.2), read when the controller sets CTRATT.ELBAS. Without ELBAS every
    /// format has the 16-bit guard. A controller that sets ELBAS but refuses the Identify (a
    /// status) leaves a namespace without PI as it is and makes one with PI unsupported: its
    /// guard size is unknown. `Err(reason)` for an unusable extended format.
    pub(super) fn with_extended_format(
        &self,
        ns: Namespace,
        page: &mut DmaBuffer,
    ) -> Result<std::result::Result<Namespace, String>> {
        if self.identify.ctratt & CTRATT_ELBAS == 0 {
            return Ok(Ok(ns));
        }
        let nsid = ns.nsid();
        let bytes = match self.identify_csi_page(zns::CNS_CSI_NAMESPACE, zns::CSI_NVM, nsid, page) {
            Ok(bytes) => bytes,
            Err(e @ Error::Command { .. }) => {
                if ns.format().pi_type().is_none() {
                    return Ok(Ok(ns));
                }
                return Ok(Err(format!(
                    "it has protection information and the controller sets CTRATT.ELBAS, but \
                     refused the NVM command set's Identify Namespace (CNS 05h, CSI 00h) that \
                     says its guard size: {e}"
                )));
            }
            Err(e) => return Err(e),
        };
        let id = NvmIdentifyNamespace::parse(&bytes);
        let elbaf = id.extended_format(ns.identify().lba_format_index());
        Ok(ns.with_extended_format(elbaf))
    }

    /// The namespace `ns` as a zoned one when its Command Set Identifier (CNS 03h) is 02h and
    /// the zoned set is enabled; `Err(reason)` for a command set this driver does not speak
    /// or a zoned namespace with unusable zone data.
    pub(super) fn with_command_set(
        &self,
        ns: Namespace,
        page: &mut DmaBuffer,
    ) -> Result<std::result::Result<Namespace, String>> {
        if !self.command_sets.zoned {
            return Ok(Ok(ns));
        }
        let nsid = ns.nsid();
        let csi = match self.identify_page(Cns::NamespaceIdDescriptors, nsid, page) {
            Ok(bytes) => NsIdDescriptor::parse_list(&bytes)
                .into_iter()
                .find_map(|d| match d {
                    NsIdDescriptor::Csi(c) => Some(c),
                    _ => None,
                })
                .unwrap_or(zns::CSI_NVM),
            // No descriptor list: an NVM namespace (the list is mandatory from NVMe 1.3).
            Err(Error::Command { .. }) => zns::CSI_NVM,
            Err(e) => return Err(e),
        };
        match csi {
            zns::CSI_NVM => Ok(Ok(ns)),
            zns::CSI_ZNS => {
                let bytes =
                    self.identify_csi_page(zns::CNS_CSI_NAMESPACE, zns::CSI_ZNS, nsid, page)?;
                let id = ZnsIdentifyNamespace::parse(&bytes);
                let format = ns.identify().lba_format_index();
                Ok(
                    ZoneGeometry::from_identify(&id, format, self.command_sets.max_append_bytes)
                        .map(|zones| {
                            log::info!(
                            "{}: namespace {nsid} is zoned: {} zones of {} blocks, {:?} open / \
                             {:?} active at most",
                            self.name,
                            zones.zones(ns.blocks()),
                            zones.zone_blocks,
                            zones.max_open,
                            zones.max_active
                        );
                            ns.with_zones(zones)
                        }),
                )
            }
            other => Ok(Err(format!(
                "its command set (CSI {other:#04x}) is neither NVM nor Zoned Namespace"
            ))),
        }
    }
}
