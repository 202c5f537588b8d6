//! NVMe over Fabrics commands (NVMe Base 2.0 §6, "Fabrics Command Set"): Connect, Property
//! Get and Property Set, the Connect data, and the Discovery log page entry layout.
//!
//! A Fabrics command is an SQE with opcode [`FABRICS_OPCODE`] whose byte 4 (the NSID field of
//! other commands) holds the Fabrics Command Type (§6.1, Figure 540).

use crate::queue::SubmissionEntry;

/// Opcode of every Fabrics command (§6.1).
pub const FABRICS_OPCODE: u8 = 0x7F;

/// Fabrics Command Types (§6.1, Figure 541).
pub mod fctype {
    /// Property Set.
    pub const PROPERTY_SET: u8 = 0x00;
    /// Connect.
    pub const CONNECT: u8 = 0x01;
    /// Property Get.
    pub const PROPERTY_GET: u8 = 0x04;
    /// Authentication Send.
    pub const AUTH_SEND: u8 = 0x05;
    /// Authentication Receive.
    pub const AUTH_RECEIVE: u8 = 0x06;
    /// Disconnect.
    pub const DISCONNECT: u8 = 0x08;
}

/// Command-specific status codes of Fabrics commands (§6.3.1, Figure 549; SCT 1h).
pub mod status {
    /// Incompatible Format: the Connect record format is not supported.
    pub const INCOMPATIBLE_FORMAT: u8 = 0x80;
    /// Controller Busy.
    pub const CONTROLLER_BUSY: u8 = 0x81;
    /// Connect Invalid Parameters: dword 0 names the parameter (IATTR, IPO).
    pub const CONNECT_INVALID_PARAMETERS: u8 = 0x82;
    /// Connect Restart Discovery.
    pub const CONNECT_RESTART_DISCOVERY: u8 = 0x83;
    /// Connect Invalid Host: the host is not allowed to reach the subsystem.
    pub const CONNECT_INVALID_HOST: u8 = 0x84;
}

/// Connect Attributes bit 2 (§6.3, Figure 546): SQ flow control disabled. The controller then
/// does not report SQ head pointers the host must wait for, and an NVMe/TCP controller may
/// complete reads with the C2HData SUCCESS flag instead of a response capsule (NVMe/TCP
/// §3.6.2.9).
pub const CATTR_DISABLE_SQ_FLOW_CONTROL: u8 = 1 << 2;
/// Connect Record Format 0 (§6.3, Figure 546).
pub const CONNECT_RECFMT: u16 = 0;
/// Controller id in the Connect data for the admin queue: the controller may pick any
/// (dynamic controller model, §6.3).
pub const CNTLID_DYNAMIC: u16 = 0xFFFF;
/// Size of an NVMe Qualified Name field in the Connect data (§6.3, Figure 547; §4.5).
pub const NQN_FIELD_SIZE: usize = 256;
/// Longest NQN (223 bytes of UTF-8, §4.5).
pub const NQN_MAX_LEN: usize = 223;
/// NQN of the well-known Discovery subsystem (§4.5).
pub const DISCOVERY_NQN: &str = "nqn.2014-08.org.nvmexpress.discovery";
/// Property size selector in ATTRIB bits 2:0 (§6.6, Figure 560): 4 bytes.
pub const PROPERTY_SIZE_4: u8 = 0;
/// Property size selector in ATTRIB bits 2:0: 8 bytes.
pub const PROPERTY_SIZE_8: u8 = 1;
/// Byte offset of the SUBNQN field in the Connect data; Connect Invalid Parameters names
/// it in IPO when the subsystem is unknown.
pub const CONNECT_DATA_SUBNQN_OFFSET: u16 = 256;
/// Byte offset of the HOSTNQN field in the Connect data.
pub const CONNECT_DATA_HOSTNQN_OFFSET: u16 = 512;

/// Bit position of the Fabrics Command Type within CDW1 (byte 4 of the SQE).
const FCTYPE_MASK: u32 = 0xFF;

wire_struct! {
    /// Connect command data (§6.3, Figure 547), sent with the Connect command.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct ConnectData {
        /// Host Identifier (a UUID-like 128-bit value the host keeps).
        hostid @ 0: [u8; 16],
        /// Controller id: [`CNTLID_DYNAMIC`] for an admin queue, the admin Connect's answer
        /// for I/O queues.
        cntlid @ 16: u16,
        /// Reserved.
        rsvd1 @ 18: [u8; 238],
        /// NVM Subsystem NQN (NUL-terminated UTF-8).
        subnqn @ 256: [u8; 256],
        /// Host NQN (NUL-terminated UTF-8).
        hostnqn @ 512: [u8; 256],
        /// Reserved.
        rsvd2 @ 768: [u8; 256],
    }
    size 1024;
}

const _: () = {
    assert!(core::mem::offset_of!(ConnectData, subnqn) == CONNECT_DATA_SUBNQN_OFFSET as usize);
    assert!(core::mem::offset_of!(ConnectData, hostnqn) == CONNECT_DATA_HOSTNQN_OFFSET as usize);
};

/// An NQN copied into a NUL-padded Connect data field, or `None` if it does not fit (it
/// must leave room for the terminating NUL).
pub fn nqn_field(nqn: &str) -> Option<[u8; NQN_FIELD_SIZE]> {
    let bytes = nqn.as_bytes();
    if bytes.len() > NQN_MAX_LEN || bytes.contains(&0) {
        return None;
    }
    let mut out = [0u8; NQN_FIELD_SIZE];
    out[..bytes.len()].copy_from_slice(bytes);
    Some(out)
}

impl ConnectData {
    /// Connect data for `subnqn`/`hostnqn` (both checked with [`nqn_field`] by the caller).
    pub fn new(
        hostid: [u8; 16],
        cntlid: u16,
        subnqn: [u8; NQN_FIELD_SIZE],
        hostnqn: [u8; NQN_FIELD_SIZE],
    ) -> Self {
        ConnectData {
            hostid,
            cntlid,
            rsvd1: [0; 238],
            subnqn,
            hostnqn,
            rsvd2: [0; 256],
        }
    }
}

fn fabrics(fctype: u8) -> SubmissionEntry {
    let mut sqe = SubmissionEntry::new(FABRICS_OPCODE);
    sqe.nsid = u32::from(fctype);
    sqe
}

/// The Fabrics Command Type of a Fabrics SQE.
pub fn fctype_of(sqe: &SubmissionEntry) -> u8 {
    (sqe.nsid & FCTYPE_MASK) as u8
}

/// Connect (§6.3, Figure 546): queue `qid` (0 = admin) with `entries` entries
/// (SQSIZE is 0's based), connect attributes `cattr`, keep-alive timeout `kato_ms` (admin
/// queue only; 0 = off). The 1024-byte [`ConnectData`] goes with it as data.
pub fn connect(qid: u16, entries: u16, cattr: u8, kato_ms: u32) -> SubmissionEntry {
    let mut sqe = fabrics(fctype::CONNECT);
    sqe.cdw10 = u32::from(CONNECT_RECFMT) | u32::from(qid) << 16;
    sqe.cdw11 = u32::from(entries.saturating_sub(1)) | u32::from(cattr) << 16;
    sqe.cdw12 = kato_ms;
    sqe
}

/// Controller id from a successful Connect's completion dword 0 (§6.3, Figure 548).
pub fn connect_cntlid(dw0: u32) -> u16 {
    dw0 as u16
}

/// Invalid parameter named by a Connect Invalid Parameters completion's dword 0:
/// (IATTR: 1 = in the Connect data, 0 = in the command; IPO: byte offset).
pub fn connect_invalid_parameter(dw0: u32) -> (u8, u16) {
    ((dw0 >> 16) as u8 & 1, dw0 as u16)
}

/// Property Get (§6.5, Figure 555) of the 4- or 8-byte property at `offset` (the register
/// offsets of [`crate::regs`]).
pub fn property_get(offset: u32, eight_bytes: bool) -> SubmissionEntry {
    let mut sqe = fabrics(fctype::PROPERTY_GET);
    sqe.cdw10 = u32::from(if eight_bytes {
        PROPERTY_SIZE_8
    } else {
        PROPERTY_SIZE_4
    });
    sqe.cdw11 = offset;
    sqe
}

/// Property Set (§6.6, Figure 559) of a 4-byte property.
pub fn property_set(offset: u32, value: u32) -> SubmissionEntry {
    let mut sqe = fabrics(fctype::PROPERTY_SET);
    sqe.cdw10 = u32::from(PROPERTY_SIZE_4);
    sqe.cdw11 = offset;
    sqe.cdw12 = value;
    sqe
}

/// Property offset of a Property Get/Set SQE.
pub fn property_offset(sqe: &SubmissionEntry) -> u32 {
    sqe.cdw11
}

/// Whether a Property Get asks for 8 bytes.
pub fn property_is_8_bytes(sqe: &SubmissionEntry) -> bool {
    sqe.cdw10 as u8 & 0b111 == PROPERTY_SIZE_8
}

/// Queue id of a Connect SQE.
pub fn connect_qid(sqe: &SubmissionEntry) -> u16 {
    (sqe.cdw10 >> 16) as u16
}

/// Queue entries (SQSIZE + 1) of a Connect SQE.
pub fn connect_entries(sqe: &SubmissionEntry) -> u32 {
    (sqe.cdw11 & 0xFFFF) + 1
}

/// Connect attributes (CATTR) of a Connect SQE.
pub fn connect_cattr(sqe: &SubmissionEntry) -> u8 {
    (sqe.cdw11 >> 16) as u8
}

/// Keep-alive timeout in milliseconds of a Connect SQE.
pub fn connect_kato_ms(sqe: &SubmissionEntry) -> u32 {
    sqe.cdw12
}

/// Keep Alive (§5.18): an admin command without data, sent at least once per KATO.
pub fn keep_alive() -> SubmissionEntry {
    SubmissionEntry::new(crate::opcode::admin::KEEP_ALIVE)
}

/// Log Identifier of the Discovery log page (§5.16.1.23).
pub const DISCOVERY_LOG_LID: u8 = 0x70;
/// Size of the Discovery log page header and of each entry (§5.16.1.23, Figures 261-262).
pub const DISCOVERY_RECORD_SIZE: usize = 1024;

/// Transport types in a Discovery log entry (TRTYPE, §5.16.1.23 Figure 262).
pub mod trtype {
    /// RDMA.
    pub const RDMA: u8 = 1;
    /// Fibre Channel.
    pub const FC: u8 = 2;
    /// TCP.
    pub const TCP: u8 = 3;
    /// Intra-host (loop).
    pub const LOOP: u8 = 254;

    /// Name for messages (as SPDK writes trtype).
    pub fn name(t: u8) -> &'static str {
        match t {
            RDMA => "RDMA",
            FC => "FC",
            TCP => "TCP",
            LOOP => "loop",
            _ => "unknown",
        }
    }
}

/// Address families in a Discovery log entry (ADRFAM).
pub mod adrfam {
    /// IPv4.
    pub const IPV4: u8 = 1;
    /// IPv6.
    pub const IPV6: u8 = 2;
}

/// Subsystem types in a Discovery log entry (SUBTYPE).
pub mod subtype {
    /// A referral to another discovery service.
    pub const DISCOVERY_REFERRAL: u8 = 1;
    /// An NVM subsystem.
    pub const NVM: u8 = 2;
    /// The discovery subsystem answering (current discovery subsystem).
    pub const CURRENT_DISCOVERY: u8 = 3;
}

wire_struct! {
    /// Discovery log page header (§5.16.1.23, Figure 261).
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct DiscoveryLogHeader {
        /// Generation counter: changes when the log changes.
        genctr @ 0: u64,
        /// Number of records.
        numrec @ 8: u64,
        /// Record format (0).
        recfmt @ 16: u16,
        /// Reserved.
        rsvd @ 18: [u8; 1006],
    }
    size 1024;
}

wire_struct! {
    /// Discovery log page entry (§5.16.1.23, Figure 262).
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct DiscoveryLogEntry {
        /// Transport type (see [`trtype`]).
        trtype @ 0: u8,
        /// Address family (see [`adrfam`]).
        adrfam @ 1: u8,
        /// Subsystem type (see [`subtype`]).
        subtype @ 2: u8,
        /// Transport requirements.
        treq @ 3: u8,
        /// Port id.
        portid @ 4: u16,
        /// Controller id (0xFFFF: dynamic).
        cntlid @ 6: u16,
        /// Admin max SQ size.
        asqsz @ 8: u16,
        /// Reserved.
        rsvd1 @ 10: [u8; 22],
        /// Transport service id (the TCP port, ASCII, space or NUL padded).
        trsvcid @ 32: [u8; 32],
        /// Reserved.
        rsvd2 @ 64: [u8; 192],
        /// NVM subsystem NQN.
        subnqn @ 256: [u8; 256],
        /// Transport address (ASCII, space or NUL padded).
        traddr @ 512: [u8; 256],
        /// Transport specific address subtype.
        tsas @ 768: [u8; 256],
    }
    size 1024;
}

impl DiscoveryLogEntry {
    /// An entry for an NVMe/TCP port (§5.16.1.23, Figure 262): `subnqn` reached at
    /// `traddr`:`trsvcid` (ASCII, NUL padded) through port `portid`, with a dynamic
    /// controller id. `None` when a text does not fit its field.
    pub fn tcp(
        subtype: u8,
        portid: u16,
        adrfam: u8,
        traddr: &str,
        trsvcid: &str,
        subnqn: &str,
    ) -> Option<Self> {
        let mut e = DiscoveryLogEntry::from_bytes(&[0; DISCOVERY_RECORD_SIZE]);
        e.trtype = trtype::TCP;
        e.adrfam = adrfam;
        e.subtype = subtype;
        e.portid = portid;
        e.cntlid = CNTLID_DYNAMIC;
        e.subnqn = nqn_field(subnqn)?;
        copy_text(&mut e.traddr, traddr)?;
        copy_text(&mut e.trsvcid, trsvcid)?;
        Some(e)
    }
}

/// Copies `text` into a NUL-padded field, `None` if it does not fit.
fn copy_text(field: &mut [u8], text: &str) -> Option<()> {
    let b = text.as_bytes();
    field.get_mut(..b.len())?.copy_from_slice(b);
    Some(())
}

/// The Discovery log page (§5.16.1.23): the header (generation `genctr`, NUMREC, record
/// format 0) and the entries, one 1024-byte record each. The one builder of the page, for
/// the NVMe/TCP target and the initiator's test target.
pub fn discovery_log_page(genctr: u64, entries: &[DiscoveryLogEntry]) -> Vec<u8> {
    let mut page = vec![0u8; DISCOVERY_RECORD_SIZE * (entries.len() + 1)];
    let mut header = DiscoveryLogHeader::from_bytes(&[0; DISCOVERY_RECORD_SIZE]);
    header.genctr = genctr;
    header.numrec = entries.len() as u64;
    header.recfmt = 0;
    page[..DISCOVERY_RECORD_SIZE].copy_from_slice(&header.to_bytes());
    for (i, e) in entries.iter().enumerate() {
        let at = DISCOVERY_RECORD_SIZE * (i + 1);
        page[at..at + DISCOVERY_RECORD_SIZE].copy_from_slice(&e.to_bytes());
    }
    page
}

/// Controller Type in Identify Controller CNTRLTYPE (NVMe Base 2.0 §5.17.2.1, Figure 275).
pub mod cntrltype {
    /// I/O controller.
    pub const IO: u8 = 1;
    /// Discovery controller.
    pub const DISCOVERY: u8 = 2;
}

/// SGL Support bits of Identify Controller SGLS (NVMe Base 2.0 §5.17.2.1, Figure 275) that
/// an NVMe/TCP controller reports (NVMe/TCP §3.3.4: transport data blocks, in-capsule data
/// addressed by offset).
pub mod sgls {
    /// Bits 1:0 = 01b: SGLs supported, no alignment requirement.
    pub const SUPPORTED: u32 = 1;
    /// Bit 20: the Address field of an SGL Data Block descriptor may be an offset
    /// (in-capsule data).
    pub const OFFSET: u32 = 1 << 20;
    /// Bit 21: Transport SGL Data Block descriptors supported.
    pub const TRANSPORT_DATA_BLOCK: u32 = 1 << 21;
}

/// Byte offset of the QID field in a Connect command (§6.3, Figure 546: CDW10 bits 31:16),
/// named by Connect Invalid Parameters (IATTR 0).
pub const CONNECT_QID_OFFSET: u16 = 42;
/// Byte offset of CNTLID in the Connect data (§6.3, Figure 547).
pub const CONNECT_DATA_CNTLID_OFFSET: u16 = 16;
/// Connect Invalid Parameters dword 0 naming a field of the Connect data (IATTR bit 16 set).
pub const fn connect_invalid_data_field(offset: u16) -> u32 {
    1 << 16 | offset as u32
}

/// The text of a NUL- or space-padded ASCII field.
pub fn field_text(field: &[u8]) -> String {
    let end = field.iter().position(|&b| b == 0).unwrap_or(field.len());
    String::from_utf8_lossy(&field[..end]).trim_end().to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_fields_land_where_the_spec_puts_them() {
        let sqe = connect(3, 128, CATTR_DISABLE_SQ_FLOW_CONTROL, 10_000);
        let b = sqe.to_bytes();
        assert_eq!(b[0], 0x7F);
        assert_eq!(b[4], fctype::CONNECT);
        assert_eq!(&b[40..42], &0u16.to_le_bytes()); // RECFMT
        assert_eq!(&b[42..44], &3u16.to_le_bytes()); // QID
        assert_eq!(&b[44..46], &127u16.to_le_bytes()); // SQSIZE, 0's based
        assert_eq!(b[46], 0x04); // CATTR
        assert_eq!(&b[48..52], &10_000u32.to_le_bytes()); // KATO
        assert_eq!(fctype_of(&sqe), fctype::CONNECT);
        assert_eq!(connect_qid(&sqe), 3);
        assert_eq!(connect_entries(&sqe), 128);
        assert_eq!(connect_kato_ms(&sqe), 10_000);
        assert_eq!(connect_cattr(&sqe), CATTR_DISABLE_SQ_FLOW_CONTROL);
    }

    #[test]
    fn property_commands() {
        let b = property_get(0x1C, false).to_bytes();
        assert_eq!(b[4], fctype::PROPERTY_GET);
        assert_eq!(b[40], 0);
        assert_eq!(&b[44..48], &0x1Cu32.to_le_bytes());
        assert!(property_is_8_bytes(&property_get(0, true)));
        let b = property_set(0x14, 0x46_0001).to_bytes();
        assert_eq!(b[4], fctype::PROPERTY_SET);
        assert_eq!(&b[48..52], &0x46_0001u32.to_le_bytes());
    }

    #[test]
    fn connect_data_and_nqns() {
        let sub = nqn_field("nqn.2026-01.test:sub1").unwrap();
        let host = nqn_field("nqn.2014-08.org.nvmexpress:uuid:1").unwrap();
        let data = ConnectData::new([7; 16], CNTLID_DYNAMIC, sub, host);
        let b = data.to_bytes();
        assert_eq!(&b[16..18], &[0xFF, 0xFF]);
        assert_eq!(&b[256..277], b"nqn.2026-01.test:sub1");
        assert_eq!(b[277], 0);
        assert_eq!(&b[512..516], b"nqn.");
        assert_eq!(ConnectData::from_bytes(&b), data);
        assert!(nqn_field(&"x".repeat(NQN_MAX_LEN)).is_some());
        assert!(nqn_field(&"x".repeat(NQN_MAX_LEN + 1)).is_none());
        assert!(nqn_field("a\0b").is_none());
        assert_eq!(connect_invalid_parameter(0x0001_0100), (1, 256));
    }

    #[test]
    fn discovery_page_builder() {
        let e = DiscoveryLogEntry::tcp(subtype::NVM, 1, adrfam::IPV4, "10.0.0.1", "4420", "nqn.y")
            .unwrap();
        let page = discovery_log_page(3, &[e.clone(), e]);
        assert_eq!(page.len(), 3 * DISCOVERY_RECORD_SIZE);
        let h = DiscoveryLogHeader::from_bytes(&page[..1024].try_into().unwrap());
        assert_eq!((h.genctr, h.numrec), (3, 2));
        let e = DiscoveryLogEntry::from_bytes(&page[2048..].try_into().unwrap());
        assert_eq!(field_text(&e.traddr), "10.0.0.1");
        assert_eq!(field_text(&e.subnqn), "nqn.y");
        assert_eq!(e.cntlid, CNTLID_DYNAMIC);
        assert!(DiscoveryLogEntry::tcp(0, 0, 0, &"x".repeat(300), "1", "n").is_none());
    }

    #[test]
    fn discovery_entry_layout() {
        let mut b = [0u8; DISCOVERY_RECORD_SIZE];
        b[0] = trtype::TCP;
        b[2] = subtype::NVM;
        b[32..36].copy_from_slice(b"4420");
        b[256..261].copy_from_slice(b"nqn.x");
        b[512..521].copy_from_slice(b"127.0.0.1");
        let e = DiscoveryLogEntry::from_bytes(&b);
        assert_eq!(trtype::name(e.trtype), "TCP");
        assert_eq!(field_text(&e.trsvcid), "4420");
        assert_eq!(field_text(&e.subnqn), "nqn.x");
        assert_eq!(field_text(&e.traddr), "127.0.0.1");
        assert_eq!(field_text(b"4420    "), "4420");
    }
}
