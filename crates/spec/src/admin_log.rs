//! Management log pages and the Namespace Identification Descriptor list: Firmware Slot
//! Information (Log Identifier 03h, §5.16.1.4), Commands Supported and Effects (05h,
//! §5.16.1.6; the Changed Namespace List, 04h §5.16.1.5, is a [`crate::NamespaceList`]), and
//! Identify CNS 03h (§5.17.2.3, Figure 274).
//!
//! The log pages are `#[repr(C)]` wire structures with their offsets asserted at compile
//! time; the descriptor list is a sequence of variable-length entries, parsed without
//! panicking whatever the device wrote.

use bitflags::bitflags;

use crate::identify::IDENTIFY_DATA_SIZE;

/// Size of the Firmware Slot Information log page.
pub const FIRMWARE_SLOT_LOG_SIZE: usize = 512;
/// Firmware slots in the log page (slots 1..=7).
pub const FIRMWARE_SLOTS: usize = 7;
/// Size of the Commands Supported and Effects log page.
pub const COMMANDS_EFFECTS_LOG_SIZE: usize = 4096;
/// Opcodes per command set in the Commands Supported and Effects log page.
pub const COMMAND_OPCODES: usize = 256;
/// AFI bits 2:0: the active slot; bits 6:4: the slot activated at the next reset.
const AFI_SLOT_MASK: u8 = 0b111;
/// AFI bits 6:4 shift.
const AFI_NEXT_SHIFT: u8 = 4;

wire_struct! {
    /// Firmware Slot Information log page (Log Identifier 03h, §5.16.1.4, Figure 209).
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct FirmwareSlotLog {
        /// Active Firmware Info: bits 2:0 the running slot, bits 6:4 the next one (0 = none).
        afi @ 0: u8,
        /// Reserved (bytes 1..8).
        rsvd1 @ 1: [u8; 7],
        /// Firmware Revision for slots 1..=7 (8 ASCII bytes each; zeros = empty).
        frs @ 8: [[u8; 8]; 7],
        /// Reserved (bytes 64..512).
        rsvd64 @ 64: [u8; 448],
    }
    size 512;
}

impl Default for FirmwareSlotLog {
    fn default() -> Self {
        Self::from_bytes(&[0; FIRMWARE_SLOT_LOG_SIZE])
    }
}

impl FirmwareSlotLog {
    /// The slot the controller runs (1..=7).
    pub fn active_slot(&self) -> u8 {
        self.afi & AFI_SLOT_MASK
    }

    /// The slot activated at the next reset, if one is pending.
    pub fn next_slot(&self) -> Option<u8> {
        Some(self.afi >> AFI_NEXT_SHIFT & AFI_SLOT_MASK).filter(|&s| s != 0)
    }

    /// Sets the active slot (1..=7) and no pending activation.
    pub fn set_active_slot(&mut self, slot: u8) {
        self.afi = slot & AFI_SLOT_MASK;
    }

    /// Sets the slot activated at the next reset (1..=7), or none.
    pub fn set_next_slot(&mut self, slot: Option<u8>) {
        self.afi = self.afi & AFI_SLOT_MASK | (slot.unwrap_or(0) & AFI_SLOT_MASK) << AFI_NEXT_SHIFT;
    }

    /// The revision in `slot` (1..=7) as text, trailing spaces and NULs removed; `None` for an
    /// empty slot or one out of range.
    pub fn revision(&self, slot: usize) -> Option<String> {
        let raw = self.frs.get(slot.checked_sub(1)?)?;
        if raw.iter().all(|&b| b == 0) {
            return None;
        }
        let text = String::from_utf8_lossy(raw);
        Some(text.trim_end_matches([' ', '\0']).to_owned())
    }
}

wire_struct! {
    /// Commands Supported and Effects log page (Log Identifier 05h, §5.16.1.6, Figure 211):
    /// one [`CommandEffects`] dword per opcode.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct CommandsEffectsLog {
        /// Admin Command Supported, indexed by opcode.
        acs @ 0: [u32; 256],
        /// I/O Command Supported (the selected command set), indexed by opcode.
        iocs @ 1024: [u32; 256],
        /// Reserved (bytes 2048..4096).
        rsvd2048 @ 2048: [u8; 2048],
    }
    size 4096;
}

impl Default for CommandsEffectsLog {
    fn default() -> Self {
        Self::from_bytes(&[0; COMMANDS_EFFECTS_LOG_SIZE])
    }
}

impl CommandsEffectsLog {
    /// The admin opcodes the controller supports, with their effects.
    pub fn admin(&self) -> impl Iterator<Item = (u8, CommandEffects)> + '_ {
        supported(&self.acs)
    }

    /// The I/O opcodes the controller supports, with their effects.
    pub fn io(&self) -> impl Iterator<Item = (u8, CommandEffects)> + '_ {
        supported(&self.iocs)
    }
}

fn supported(table: &[u32; COMMAND_OPCODES]) -> impl Iterator<Item = (u8, CommandEffects)> + '_ {
    table.iter().enumerate().filter_map(|(op, &raw)| {
        let e = CommandEffects::from_bits_retain(raw);
        e.contains(CommandEffects::CSUPP).then_some((op as u8, e))
    })
}

bitflags! {
    /// One Commands Supported and Effects entry (§5.16.1.6, Figure 212).
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
    pub struct CommandEffects: u32 {
        /// Bit 0: Command Supported.
        const CSUPP = 1 << 0;
        /// Bit 1: Logical Block Content Change.
        const LBCC = 1 << 1;
        /// Bit 2: Namespace Capability Change.
        const NCC = 1 << 2;
        /// Bit 3: Namespace Inventory Change.
        const NIC = 1 << 3;
        /// Bit 4: Controller Capability Change.
        const CCC = 1 << 4;
        /// Bits 18:16: Command Submission and Execution (see [`CommandEffects::cse`]).
        const CSE = 0b111 << 16;
        /// Bit 19: UUID Selection Supported.
        const USS = 1 << 19;
    }
}

impl CommandEffects {
    /// Command Submission and Execution (bits 18:16): 0 = no restriction, 1 = no other
    /// command to the same namespace at once, 2 = no other command at all.
    pub fn cse(&self) -> u8 {
        (self.bits() >> 16 & 0b111) as u8
    }
}

/// Namespace Identifier Type (§5.17.2.3, Figure 275) values.
pub mod nidt {
    /// IEEE Extended Unique Identifier, 8 bytes.
    pub const EUI64: u8 = 0x01;
    /// Namespace Globally Unique Identifier, 16 bytes.
    pub const NGUID: u8 = 0x02;
    /// Namespace UUID, 16 bytes.
    pub const UUID: u8 = 0x03;
    /// Command Set Identifier, 1 byte.
    pub const CSI: u8 = 0x04;
}

/// Bytes of a descriptor's header (NIDT, NIDL, two reserved bytes).
pub const NS_DESCRIPTOR_HEADER: usize = 4;

/// One Namespace Identification Descriptor (§5.17.2.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NsIdDescriptor {
    /// EUI64.
    Eui64([u8; 8]),
    /// NGUID.
    Nguid([u8; 16]),
    /// UUID.
    Uuid([u8; 16]),
    /// Command Set Identifier (0 = NVM, 2 = Zoned).
    Csi(u8),
}

impl NsIdDescriptor {
    /// Namespace Identifier Type.
    pub fn nidt(&self) -> u8 {
        match self {
            NsIdDescriptor::Eui64(_) => nidt::EUI64,
            NsIdDescriptor::Nguid(_) => nidt::NGUID,
            NsIdDescriptor::Uuid(_) => nidt::UUID,
            NsIdDescriptor::Csi(_) => nidt::CSI,
        }
    }

    /// The identifier's bytes.
    pub fn id_bytes(&self) -> &[u8] {
        match self {
            NsIdDescriptor::Eui64(b) => b,
            NsIdDescriptor::Nguid(b) | NsIdDescriptor::Uuid(b) => b,
            NsIdDescriptor::Csi(b) => core::slice::from_ref(b),
        }
    }

    /// Parses a descriptor list (the 4096-byte Identify data): entries up to the first with
    /// NIDT 0 or one that does not fit; entries of unknown type or wrong length are skipped.
    pub fn parse_list(page: &[u8]) -> Vec<NsIdDescriptor> {
        let mut out = Vec::new();
        let mut at = 0;
        while let Some(header) = page.get(at..at + NS_DESCRIPTOR_HEADER) {
            let (kind, len) = (header[0], usize::from(header[1]));
            if kind == 0 {
                break;
            }
            let start = at + NS_DESCRIPTOR_HEADER;
            let Some(id) = page.get(start..start + len) else {
                break;
            };
            let parsed = match (kind, len) {
                (nidt::EUI64, 8) => id.try_into().ok().map(NsIdDescriptor::Eui64),
                (nidt::NGUID, 16) => id.try_into().ok().map(NsIdDescriptor::Nguid),
                (nidt::UUID, 16) => id.try_into().ok().map(NsIdDescriptor::Uuid),
                (nidt::CSI, 1) => Some(NsIdDescriptor::Csi(id[0])),
                _ => None,
            };
            out.extend(parsed);
            at = start + len;
        }
        out
    }

    /// Encodes `list` as the Identify CNS 03h data (what a controller returns).
    pub fn encode_list(list: &[NsIdDescriptor]) -> [u8; IDENTIFY_DATA_SIZE] {
        let mut page = [0u8; IDENTIFY_DATA_SIZE];
        let mut at = 0;
        for d in list {
            let id = d.id_bytes();
            page[at] = d.nidt();
            page[at + 1] = id.len() as u8;
            page[at + NS_DESCRIPTOR_HEADER..at + NS_DESCRIPTOR_HEADER + id.len()]
                .copy_from_slice(id);
            at += NS_DESCRIPTOR_HEADER + id.len();
        }
        page
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn firmware_slots() {
        let mut log = FirmwareSlotLog::default();
        log.set_active_slot(1);
        log.frs[0] = *b"7.2.0   ";
        let b = log.to_bytes();
        assert_eq!(b[0], 1);
        assert_eq!(&b[8..16], b"7.2.0   ");
        let log = FirmwareSlotLog::from_bytes(&b);
        assert_eq!(log.active_slot(), 1);
        assert_eq!(log.next_slot(), None);
        assert_eq!(log.revision(1).as_deref(), Some("7.2.0"));
        assert_eq!(log.revision(2), None);
        assert_eq!(log.revision(0), None);
        assert_eq!(log.revision(8), None);
        let mut b = b;
        b[0] = 0x21;
        assert_eq!(FirmwareSlotLog::from_bytes(&b).next_slot(), Some(2));
        let mut log = FirmwareSlotLog::from_bytes(&b);
        log.set_next_slot(Some(3));
        assert_eq!(
            (log.afi, log.active_slot(), log.next_slot()),
            (0x31, 1, Some(3))
        );
        log.set_next_slot(None);
        assert_eq!((log.afi, log.next_slot()), (0x01, None));
    }

    #[test]
    fn effects() {
        let mut log = CommandsEffectsLog::default();
        log.acs[0x06] = CommandEffects::CSUPP.bits();
        log.iocs[0x01] = (CommandEffects::CSUPP | CommandEffects::LBCC).bits();
        log.iocs[0x02] = CommandEffects::LBCC.bits(); // not supported: left out
        let b = log.to_bytes();
        assert_eq!(&b[0x06 * 4..0x06 * 4 + 4], &[1, 0, 0, 0]);
        assert_eq!(&b[1024 + 4..1024 + 8], &[3, 0, 0, 0]);
        let log = CommandsEffectsLog::from_bytes(&b);
        assert_eq!(
            log.admin().collect::<Vec<_>>(),
            [(0x06, CommandEffects::CSUPP)]
        );
        assert_eq!(log.io().map(|(op, _)| op).collect::<Vec<_>>(), [0x01]);
        assert_eq!(CommandEffects::from_bits_retain(2 << 16 | 1).cse(), 2);
    }

    #[test]
    fn descriptors_round_trip_and_garbage_is_survived() {
        let list = [
            NsIdDescriptor::Eui64([1, 2, 3, 4, 5, 6, 7, 8]),
            NsIdDescriptor::Nguid([9; 16]),
            NsIdDescriptor::Uuid([0xAB; 16]),
            NsIdDescriptor::Csi(0),
        ];
        let page = NsIdDescriptor::encode_list(&list);
        assert_eq!(&page[..4], &[nidt::EUI64, 8, 0, 0]);
        assert_eq!(page[12], nidt::NGUID);
        assert_eq!(NsIdDescriptor::parse_list(&page), list);
        assert!(NsIdDescriptor::parse_list(&[0; IDENTIFY_DATA_SIZE]).is_empty());
        // A length running past the end, and a wrong length for its type.
        let mut bad = [0u8; IDENTIFY_DATA_SIZE];
        bad[..4].copy_from_slice(&[nidt::EUI64, 9, 0, 0]);
        bad[13..17].copy_from_slice(&[nidt::CSI, 1, 0, 0]);
        bad[17] = 2;
        assert_eq!(NsIdDescriptor::parse_list(&bad), [NsIdDescriptor::Csi(2)]);
        let mut overrun = [0u8; IDENTIFY_DATA_SIZE];
        overrun[4092..4096].copy_from_slice(&[nidt::UUID, 16, 0, 0]);
        overrun[..4].copy_from_slice(&[0x7F, 0xFF, 0, 0]); // unknown type: skipped
        assert!(NsIdDescriptor::parse_list(&overrun).is_empty());
    }
}
