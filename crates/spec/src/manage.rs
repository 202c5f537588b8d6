//! Namespace management commands: Format NVM (§5.23), Namespace Attachment (§5.19), the
//! Identify controller and allocated namespace lists (CNS 10h-13h, §5.17.2.10-§5.17.2.13) and
//! the Controller List data structure they and Namespace Attachment share (§4.7, Figure 137).
//!
//! Builders fill opcode, NSID and command dwords only, like [`crate::command`].

use crate::identify::IDENTIFY_DATA_SIZE;
use crate::opcode::admin;
use crate::queue::SubmissionEntry;

/// Format NVM CDW10 bits 3:0: LBA Format index, lower four bits.
const LBAF_LOW_MASK: u32 = 0xF;
/// Format NVM CDW10 bits 13:12: LBA Format index, upper two bits.
const LBAF_HIGH_SHIFT: u32 = 12;
/// Format NVM CDW10 bit 4: Metadata Settings.
const MSET_SHIFT: u32 = 4;
/// Format NVM CDW10 bits 7:5: Protection Information.
const PI_SHIFT: u32 = 5;
const PI_MASK: u32 = 0b111;
/// Format NVM CDW10 bit 8: Protection Information Location.
const PIL_SHIFT: u32 = 8;
/// Format NVM CDW10 bits 11:9: Secure Erase Settings.
const SES_SHIFT: u32 = 9;
const SES_MASK: u32 = 0b111;
/// LBA format indexes Format NVM can encode (6 bits; Identify NLBAF allows up to 64).
pub const MAX_LBA_FORMATS: u8 = 64;
/// Namespace Attachment CDW10 bits 3:0: Select.
const SEL_MASK: u32 = 0xF;
/// Identify CDW10 bits 31:16: Controller Identifier (CNS 12h, 13h).
const CNTID_SHIFT: u32 = 16;
/// Entries a Controller List holds after its count (2047 of 2 bytes each).
pub const CONTROLLER_LIST_ENTRIES: usize = IDENTIFY_DATA_SIZE / 2 - 1;
/// Byte size of an identifier in the Controller List.
const CONTROLLER_ID_BYTES: usize = 2;

/// Secure Erase Settings of Format NVM (CDW10 bits 11:9).
#[repr(u8)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum SecureErase {
    /// No secure erase requested.
    #[default]
    None = 0,
    /// User Data Erase: user data is erased (reads return what the controller defines).
    UserData = 1,
    /// Cryptographic Erase: the encryption key is deleted (FNA bit 2 says whether offered).
    Cryptographic = 2,
}

impl SecureErase {
    /// From the 3-bit field (3..=7 are reserved).
    pub fn from_raw(ses: u8) -> Option<Self> {
        match ses {
            0 => Some(SecureErase::None),
            1 => Some(SecureErase::UserData),
            2 => Some(SecureErase::Cryptographic),
            _ => None,
        }
    }
}

/// The settings of one Format NVM command (§5.23, Figure 320).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct FormatNvm {
    /// LBA Format index into Identify Namespace LBAF (0..NLBAF).
    pub lbaf: u8,
    /// Metadata Settings: true transfers metadata inline at the end of each LBA (extended
    /// LBA), false in a separate buffer.
    pub extended_metadata: bool,
    /// Protection Information type (0: none, 1..=3: PI type 1..3).
    pub pi: u8,
    /// Protection Information Location: true puts the PI in the first bytes of the metadata,
    /// false in the last.
    pub pi_first: bool,
    /// Secure Erase Settings.
    pub ses: SecureErase,
}

impl FormatNvm {
    /// CDW10 of the command.
    pub fn cdw10(&self) -> u32 {
        let lbaf = u32::from(self.lbaf);
        (lbaf & LBAF_LOW_MASK)
            | (lbaf >> 4) << LBAF_HIGH_SHIFT
            | u32::from(self.extended_metadata) << MSET_SHIFT
            | (u32::from(self.pi) & PI_MASK) << PI_SHIFT
            | u32::from(self.pi_first) << PIL_SHIFT
            | (self.ses as u32 & SES_MASK) << SES_SHIFT
    }

    /// Decodes CDW10 (the emulator's side); a reserved SES is None.
    pub fn from_cdw10(cdw10: u32) -> Option<Self> {
        Some(FormatNvm {
            lbaf: ((cdw10 & LBAF_LOW_MASK) | (cdw10 >> LBAF_HIGH_SHIFT & 0b11) << 4) as u8,
            extended_metadata: cdw10 >> MSET_SHIFT & 1 != 0,
            pi: (cdw10 >> PI_SHIFT & PI_MASK) as u8,
            pi_first: cdw10 >> PIL_SHIFT & 1 != 0,
            ses: SecureErase::from_raw((cdw10 >> SES_SHIFT & SES_MASK) as u8)?,
        })
    }
}

/// Format NVM (§5.23) of namespace `nsid` (0xFFFF_FFFF: all namespaces, where FNA allows).
#[must_use = "a built command does nothing until it is submitted"]
pub fn format_nvm(nsid: u32, format: &FormatNvm) -> SubmissionEntry {
    SubmissionEntry {
        nsid,
        cdw10: format.cdw10(),
        ..SubmissionEntry::new(admin::FORMAT_NVM)
    }
}

/// Namespace Attachment Select (CDW10 bits 3:0, §5.19, Figure 297).
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Attach {
    /// Controller Attach.
    Attach = 0,
    /// Controller Detach.
    Detach = 1,
}

impl Attach {
    /// From the Select field (2h..Fh are reserved).
    pub fn from_cdw10(cdw10: u32) -> Option<Self> {
        match cdw10 & SEL_MASK {
            0 => Some(Attach::Attach),
            1 => Some(Attach::Detach),
            _ => None,
        }
    }
}

/// Namespace Attachment (§5.19) of `nsid`; the data is a [`ControllerList`] (4096 bytes to
/// the controller).
#[must_use = "a built command does nothing until it is submitted"]
pub fn namespace_attachment(nsid: u32, select: Attach) -> SubmissionEntry {
    SubmissionEntry {
        nsid,
        cdw10: select as u32,
        ..SubmissionEntry::new(admin::NAMESPACE_ATTACHMENT)
    }
}

/// Identify with the Controller Identifier field (CNS 12h/13h take CNTID in CDW10 31:16:
/// the list starts at that identifier).
#[must_use = "a built command does nothing until it is submitted"]
pub fn identify_from_controller(
    cns: crate::command::Cns,
    nsid: u32,
    cntid: u16,
) -> SubmissionEntry {
    let mut sqe = crate::command::identify(cns, nsid);
    sqe.cdw10 |= u32::from(cntid) << CNTID_SHIFT;
    sqe
}

/// The controller identifier of an Identify CDW10 (CNS 12h/13h).
pub fn identify_cntid(cdw10: u32) -> u16 {
    (cdw10 >> CNTID_SHIFT) as u16
}

/// A Controller List (§4.7, Figure 137): a count, then that many controller identifiers in
/// ascending order. Parsed without panicking whatever the device wrote (a count above what
/// the page holds is capped).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ControllerList(pub Vec<u16>);

impl ControllerList {
    /// Byte size of the data structure.
    pub const SIZE: usize = IDENTIFY_DATA_SIZE;

    /// Decodes the list.
    pub fn from_bytes(bytes: &[u8; IDENTIFY_DATA_SIZE]) -> Self {
        let count =
            usize::from(u16::from_le_bytes([bytes[0], bytes[1]])).min(CONTROLLER_LIST_ENTRIES);
        ControllerList(
            bytes[CONTROLLER_ID_BYTES..]
                .chunks_exact(CONTROLLER_ID_BYTES)
                .take(count)
                .map(|c| u16::from_le_bytes([c[0], c[1]]))
                .collect(),
        )
    }

    /// Encodes the list (entries beyond [`CONTROLLER_LIST_ENTRIES`] are dropped).
    pub fn to_bytes(&self) -> [u8; IDENTIFY_DATA_SIZE] {
        let mut page = [0u8; IDENTIFY_DATA_SIZE];
        let ids = &self.0[..self.0.len().min(CONTROLLER_LIST_ENTRIES)];
        page[..CONTROLLER_ID_BYTES].copy_from_slice(&(ids.len() as u16).to_le_bytes());
        for (slot, id) in page[CONTROLLER_ID_BYTES..]
            .chunks_exact_mut(CONTROLLER_ID_BYTES)
            .zip(ids)
        {
            slot.copy_from_slice(&id.to_le_bytes());
        }
        page
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::Cns;

    #[test]
    fn format_cdw10_round_trip() {
        let f = FormatNvm {
            lbaf: 0x25,
            extended_metadata: true,
            pi: 1,
            pi_first: true,
            ses: SecureErase::UserData,
        };
        let dw = f.cdw10();
        // LBAF 5 in 3:0, 2 in 13:12; MSET bit 4; PI 1 in 7:5; PIL bit 8; SES 1 in 11:9.
        assert_eq!(dw, 0x5 | 0x2 << 12 | 1 << 4 | 1 << 5 | 1 << 8 | 1 << 9);
        assert_eq!(FormatNvm::from_cdw10(dw), Some(f));
        assert_eq!(FormatNvm::from_cdw10(3 << 9), None);
        let sqe = format_nvm(1, &FormatNvm::default());
        assert_eq!(
            (sqe.opcode(), sqe.nsid, sqe.cdw10),
            (admin::FORMAT_NVM, 1, 0)
        );
    }

    #[test]
    fn attachment_and_controller_lists() {
        let sqe = namespace_attachment(3, Attach::Detach);
        assert_eq!((sqe.opcode(), sqe.nsid, sqe.cdw10), (0x15, 3, 1));
        assert_eq!(Attach::from_cdw10(0), Some(Attach::Attach));
        assert_eq!(Attach::from_cdw10(2), None);
        let id = identify_from_controller(Cns::ControllerList, 0, 7);
        assert_eq!(id.cdw10, 0x13 | 7 << 16);
        assert_eq!(identify_cntid(id.cdw10), 7);
        let list = ControllerList(vec![1, 2, 0x1234]);
        let bytes = list.to_bytes();
        assert_eq!(&bytes[..8], &[3, 0, 1, 0, 2, 0, 0x34, 0x12]);
        assert_eq!(ControllerList::from_bytes(&bytes), list);
        let mut lying = [0xFFu8; IDENTIFY_DATA_SIZE];
        lying[0] = 0xFF;
        assert_eq!(
            ControllerList::from_bytes(&lying).0.len(),
            CONTROLLER_LIST_ENTRIES
        );
    }
}
