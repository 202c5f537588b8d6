//! Submission queue entry builders for the admin and NVM commands the driver issues, and the
//! matching decoders used by the emulated controller.
//!
//! Builders fill opcode, NSID and the command dwords only. The command identifier and the data
//! pointer (PRP1/PRP2) stay zero and are set by the driver when it posts the entry, except
//! where the "data pointer" is a queue or buffer address that is part of the command itself
//! (Create I/O CQ/SQ, Doorbell Buffer Config).
//!
//! Block counts named `nlb` are 1-based (1..=65536) here and are encoded 0-based in CDW12 15:0.

use crate::opcode::{admin, feature, nvm};
use crate::queue::{SubmissionEntry, COPY_MAX_RANGES, DSM_MAX_RANGES};

/// Largest number of blocks one Read/Write/Compare/Write Zeroes can address (NLB is 16 bits, 0-based).
pub const MAX_NLB: u32 = 1 << 16;
/// Largest I/O queue size the Create I/O CQ/SQ commands can encode (QSIZE is 16 bits, 0-based).
pub const MAX_IO_QUEUE_ENTRIES: u32 = 1 << 16;

/// Identify CDW10 CNS value (Base §5.17.1, Figure 273).
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Cns {
    /// Identify Namespace data structure for NSID (NVM CS §4.1.5.1).
    Namespace = 0x00,
    /// Identify Controller data structure (§5.17.2.1).
    Controller = 0x01,
    /// Active Namespace ID list: up to 1024 active NSIDs greater than NSID (§5.17.2.2).
    ActiveNamespaceList = 0x02,
    /// Namespace Identification Descriptor list for NSID (§5.17.2.3).
    NamespaceIdDescriptors = 0x03,
    /// Allocated Namespace ID list: up to 1024 allocated NSIDs greater than NSID, attached
    /// or not (§5.17.2.10).
    AllocatedNamespaceList = 0x10,
    /// Identify Namespace data structure of an allocated NSID, attached or not (§5.17.2.11).
    AllocatedNamespace = 0x11,
    /// Controller List of the controllers attached to NSID, from CNTID up (§5.17.2.12).
    NamespaceControllerList = 0x12,
    /// Controller List of the subsystem's controllers, from CNTID up (§5.17.2.13).
    ControllerList = 0x13,
}

// Dword bit positions (Base §5 / NVM CS §3 command figures).
/// Create I/O CQ/SQ CDW10: Queue Size (0-based) in bits 31:16, QID in 15:0.
const QSIZE_SHIFT: u32 = 16;
/// Create I/O CQ/SQ CDW11 bit 0: Physically Contiguous.
const CREATE_Q_PC: u32 = 1 << 0;
/// Create I/O CQ CDW11 bit 1: Interrupts Enabled.
const CREATE_CQ_IEN: u32 = 1 << 1;
/// Create I/O CQ CDW11 bits 31:16: Interrupt Vector.
const CREATE_CQ_IV_SHIFT: u32 = 16;
/// Create I/O SQ CDW11 bits 31:16: Completion Queue Identifier.
const CREATE_SQ_CQID_SHIFT: u32 = 16;
/// Abort CDW10 bits 31:16: Command Identifier (SQID in 15:0).
const ABORT_CID_SHIFT: u32 = 16;
/// Get Log Page CDW10 bits 31:16: Number of Dwords Lower (0-based).
const NUMDL_SHIFT: u32 = 16;
/// Number of Queues CDW11/DW0: NCQR/NCQA in bits 31:16, NSQR/NSQA in 15:0 (both 0-based).
const NCQ_SHIFT: u32 = 16;
/// Read/Write/Compare/Write Zeroes CDW12 bits 15:0: Number of Logical Blocks (0-based).
const NLB_MASK: u32 = 0xFFFF;
/// Read/Write/Write Zeroes CDW12 bit 30: Force Unit Access.
const FUA_BIT: u32 = 1 << 30;
/// Write Zeroes CDW12 bit 25: Deallocate.
const WZ_DEAC_BIT: u32 = 1 << 25;
/// Dataset Management CDW11 bit 2: Attribute – Deallocate.
const DSM_AD_BIT: u32 = 1 << 2;
/// Read/Write/Copy CDW12 bit 31: Limited Retry.
const LR_BIT: u32 = 1 << 31;
/// Copy CDW12 bits 7:0: Number of Ranges (0-based).
const COPY_NR_MASK: u32 = 0xFF;
/// Copy CDW12 bits 11:8: Descriptor Format.
const COPY_DESFMT_SHIFT: u32 = 8;
/// Copy CDW12 bits 15:12: Protection Information Field Read (PRINFOR).
const COPY_PRINFOR_SHIFT: u32 = 12;
/// Copy CDW12 bits 29:26: Protection Information Field Write (PRINFOW).
const COPY_PRINFOW_SHIFT: u32 = 26;
/// Width mask of Copy's 4-bit CDW12 fields (Descriptor Format, PRINFOR, PRINFOW).
const NIBBLE: u32 = 0xF;
/// Bytes per dword, for Get Log Page lengths.
const DWORD: u32 = 4;

const fn lo32(v: u64) -> u32 {
    v as u32
}

const fn hi32(v: u64) -> u32 {
    (v >> 32) as u32
}

fn debug_check_nlb(nlb: u32) {
    debug_assert!(
        (1..=MAX_NLB).contains(&nlb),
        "block count {nlb} outside 1..={MAX_NLB}; split the request"
    );
}

fn debug_check_queue_entries(entries: u32) {
    debug_assert!(
        (2..=MAX_IO_QUEUE_ENTRIES).contains(&entries),
        "queue size {entries} outside 2..={MAX_IO_QUEUE_ENTRIES}"
    );
}

// ---------------------------------------------------------------------------------------------
// Admin commands
// ---------------------------------------------------------------------------------------------

/// Identify (§5.17): returns a 4096-byte data structure selected by `cns` into PRP1/PRP2.
#[must_use = "a built command does nothing until it is submitted"]
pub fn identify(cns: Cns, nsid: u32) -> SubmissionEntry {
    SubmissionEntry {
        nsid,
        cdw10: cns as u32,
        ..SubmissionEntry::new(admin::IDENTIFY)
    }
}

/// Identify CDW11 bits 31:24: Command Set Identifier (§5.17.1).
pub const IDENTIFY_CSI_SHIFT: u32 = 24;

/// Identify of an I/O Command Set specific structure (§5.17.1): CNS `cns` (a raw value such as
/// [`crate::zns::CNS_CSI_NAMESPACE`]) for command set `csi` and `nsid`.
#[must_use = "a built command does nothing until it is submitted"]
pub fn identify_csi(cns: u8, csi: u8, nsid: u32) -> SubmissionEntry {
    SubmissionEntry {
        nsid,
        cdw10: u32::from(cns),
        cdw11: u32::from(csi) << IDENTIFY_CSI_SHIFT,
        ..SubmissionEntry::new(admin::IDENTIFY)
    }
}

/// The Command Set Identifier of an Identify command ([`identify_csi`]).
pub const fn identify_csi_of(sqe: &SubmissionEntry) -> u8 {
    (sqe.cdw11 >> IDENTIFY_CSI_SHIFT) as u8
}

/// Create I/O Completion Queue (§5.4), physically contiguous at `iova`.
///
/// `entries` is the 1-based queue size. With `irq_vector = Some(v)` interrupts are enabled on
/// MSI-X vector `v`; with `None` the queue is polled.
#[must_use = "a built command does nothing until it is submitted"]
pub fn create_io_cq(qid: u16, entries: u32, iova: u64, irq_vector: Option<u16>) -> SubmissionEntry {
    debug_check_queue_entries(entries);
    let irq = match irq_vector {
        Some(v) => CREATE_CQ_IEN | u32::from(v) << CREATE_CQ_IV_SHIFT,
        None => 0,
    };
    SubmissionEntry {
        prp1: iova,
        cdw10: (entries.wrapping_sub(1)) << QSIZE_SHIFT | u32::from(qid),
        cdw11: irq | CREATE_Q_PC,
        ..SubmissionEntry::new(admin::CREATE_IO_CQ)
    }
}

/// Create I/O Submission Queue (§5.5), physically contiguous at `iova`, completing to `cqid`.
///
/// `entries` is the 1-based queue size; the queue priority is Urgent (0), which only matters
/// under weighted round robin arbitration.
#[must_use = "a built command does nothing until it is submitted"]
pub fn create_io_sq(qid: u16, entries: u32, iova: u64, cqid: u16) -> SubmissionEntry {
    debug_check_queue_entries(entries);
    SubmissionEntry {
        prp1: iova,
        cdw10: (entries.wrapping_sub(1)) << QSIZE_SHIFT | u32::from(qid),
        cdw11: u32::from(cqid) << CREATE_SQ_CQID_SHIFT | CREATE_Q_PC,
        ..SubmissionEntry::new(admin::CREATE_IO_SQ)
    }
}

/// Delete I/O Submission Queue (§5.7).
#[must_use = "a built command does nothing until it is submitted"]
pub fn delete_io_sq(qid: u16) -> SubmissionEntry {
    SubmissionEntry {
        cdw10: u32::from(qid),
        ..SubmissionEntry::new(admin::DELETE_IO_SQ)
    }
}

/// Delete I/O Completion Queue (§5.6). Its submission queues must be deleted first.
#[must_use = "a built command does nothing until it is submitted"]
pub fn delete_io_cq(qid: u16) -> SubmissionEntry {
    SubmissionEntry {
        cdw10: u32::from(qid),
        ..SubmissionEntry::new(admin::DELETE_IO_CQ)
    }
}

/// Set Features (§5.27) for feature `fid` with value `cdw11` (not saved across resets).
#[must_use = "a built command does nothing until it is submitted"]
pub fn set_features(fid: u8, cdw11: u32) -> SubmissionEntry {
    SubmissionEntry {
        cdw10: u32::from(fid),
        cdw11,
        ..SubmissionEntry::new(admin::SET_FEATURES)
    }
}

/// Get Features (§5.15) for feature `fid`, current value (SEL = 0).
#[must_use = "a built command does nothing until it is submitted"]
pub fn get_features(fid: u8) -> SubmissionEntry {
    SubmissionEntry {
        cdw10: u32::from(fid),
        ..SubmissionEntry::new(admin::GET_FEATURES)
    }
}

/// Get Features (§5.15) for feature `fid` with Select `sel` (CDW10 bits 10:8) and the
/// feature-specific dword 11 (e.g. the Temperature Threshold's sensor and type).
#[must_use = "a built command does nothing until it is submitted"]
pub fn get_features_select(fid: u8, sel: crate::feature::Select, cdw11: u32) -> SubmissionEntry {
    SubmissionEntry {
        cdw10: u32::from(fid) | (sel as u32) << crate::feature::SELECT_SHIFT,
        cdw11,
        ..SubmissionEntry::new(admin::GET_FEATURES)
    }
}

/// Get Features (§5.15.2) Select 11b: the supported capabilities of feature `fid`
/// (completion dword 0 is a [`crate::feature::FeatureCapabilities`]).
#[must_use = "a built command does nothing until it is submitted"]
pub fn get_feature_capabilities(fid: u8) -> SubmissionEntry {
    SubmissionEntry {
        cdw10: u32::from(fid)
            | crate::feature::SELECT_SUPPORTED_CAPABILITIES << crate::feature::SELECT_SHIFT,
        ..SubmissionEntry::new(admin::GET_FEATURES)
    }
}

/// Set Features (§5.27) for feature `fid` with value `cdw11`; with `save`, CDW10 bit 31 (SV)
/// asks the controller to keep the value across resets.
#[must_use = "a built command does nothing until it is submitted"]
pub fn set_features_save(fid: u8, cdw11: u32, save: bool) -> SubmissionEntry {
    let mut sqe = set_features(fid, cdw11);
    if save {
        sqe.cdw10 |= crate::feature::SET_FEATURES_SAVE;
    }
    sqe
}

/// Set Features – Number of Queues (§5.27.1.5): request `sq` submission and `cq` completion
/// I/O queues (1-based counts, 1..=65535). The grant is in completion DW0, see
/// [`number_of_queues_allocated`].
#[must_use = "a built command does nothing until it is submitted"]
pub fn set_number_of_queues(sq: u16, cq: u16) -> SubmissionEntry {
    debug_assert!(
        sq >= 1 && cq >= 1,
        "queue counts are 1-based; got sq={sq} cq={cq}"
    );
    let nsqr = u32::from(sq.wrapping_sub(1));
    let ncqr = u32::from(cq.wrapping_sub(1));
    set_features(feature::NUMBER_OF_QUEUES, ncqr << NCQ_SHIFT | nsqr)
}

/// Decodes completion DW0 of Number of Queues into 1-based (submission, completion) counts.
pub fn number_of_queues_allocated(dw0: u32) -> (u16, u16) {
    let nsqa = dw0 as u16;
    let ncqa = (dw0 >> NCQ_SHIFT) as u16;
    (nsqa.saturating_add(1), ncqa.saturating_add(1))
}

/// Doorbell Buffer Config (§5.11): shadow doorbell page at PRP1, EventIdx page at PRP2.
#[must_use = "a built command does nothing until it is submitted"]
pub fn doorbell_buffer_config(shadow_iova: u64, eventidx_iova: u64) -> SubmissionEntry {
    SubmissionEntry {
        prp1: shadow_iova,
        prp2: eventidx_iova,
        ..SubmissionEntry::new(admin::DOORBELL_BUFFER_CONFIG)
    }
}

/// Abort (§5.1) command `cid` on submission queue `sqid`.
#[must_use = "a built command does nothing until it is submitted"]
pub fn abort(sqid: u16, cid: u16) -> SubmissionEntry {
    SubmissionEntry {
        cdw10: u32::from(cid) << ABORT_CID_SHIFT | u32::from(sqid),
        ..SubmissionEntry::new(admin::ABORT)
    }
}

/// Abort completion dword 0, bit 0 (NVMe Base 2.0 §5.1): set when the command was *not*
/// aborted (it had completed, or the controller declined).
pub const ABORT_DW0_NOT_ABORTED: u32 = 1;

/// Asynchronous Event Request (§5.2); completes when the controller reports an event.
#[must_use = "a built command does nothing until it is submitted"]
pub fn async_event_request() -> SubmissionEntry {
    SubmissionEntry::new(admin::ASYNC_EVENT_REQUEST)
}

/// Get Log Page (§5.16): `bytes` (a non-zero multiple of 4) of log `lid` for `nsid`
/// (0xFFFF_FFFF for controller-wide logs), from offset 0.
#[must_use = "a built command does nothing until it is submitted"]
pub fn get_log_page(lid: u8, nsid: u32, bytes: u32) -> SubmissionEntry {
    debug_assert!(
        bytes >= DWORD && bytes % DWORD == 0,
        "log page length {bytes} must be a non-zero multiple of {DWORD} bytes"
    );
    let numd = (bytes / DWORD).wrapping_sub(1);
    let numdl = numd & 0xFFFF;
    let numdu = numd >> 16;
    SubmissionEntry {
        nsid,
        cdw10: numdl << NUMDL_SHIFT | u32::from(lid),
        cdw11: numdu,
        ..SubmissionEntry::new(admin::GET_LOG_PAGE)
    }
}

/// Log Identifier of a Get Log Page SQE (CDW10 bits 7:0).
pub fn log_page_lid(sqe: &SubmissionEntry) -> u8 {
    sqe.cdw10 as u8
}

/// Bytes a Get Log Page SQE asks for (NUMDU:NUMDL, 0's based dwords; §5.16, Figure 197).
pub fn log_page_bytes(sqe: &SubmissionEntry) -> usize {
    let numd = (sqe.cdw10 >> NUMDL_SHIFT) | (sqe.cdw11 & 0xFFFF) << 16;
    (numd as usize + 1) * DWORD as usize
}

/// Byte offset into the log page of a Get Log Page SQE (LPOU:LPOL, CDW13:CDW12).
pub fn log_page_offset(sqe: &SubmissionEntry) -> u64 {
    u64::from(sqe.cdw12) | u64::from(sqe.cdw13) << 32
}

// ---------------------------------------------------------------------------------------------
// NVM I/O commands
// ---------------------------------------------------------------------------------------------

fn rw(opcode: u8, nsid: u32, slba: u64, nlb: u32, fua: bool) -> SubmissionEntry {
    debug_check_nlb(nlb);
    let fua = if fua { FUA_BIT } else { 0 };
    SubmissionEntry {
        nsid,
        cdw10: lo32(slba),
        cdw11: hi32(slba),
        cdw12: (nlb.wrapping_sub(1) & NLB_MASK) | fua,
        ..SubmissionEntry::new(opcode)
    }
}

/// Read (NVM CS §3.3.4) `nlb` blocks starting at `slba`.
#[must_use = "a built command does nothing until it is submitted"]
pub fn read(nsid: u32, slba: u64, nlb: u32) -> SubmissionEntry {
    rw(nvm::READ, nsid, slba, nlb, false)
}

/// Write (NVM CS §3.3.6) `nlb` blocks starting at `slba`; `fua` forces them to media first.
#[must_use = "a built command does nothing until it is submitted"]
pub fn write(nsid: u32, slba: u64, nlb: u32, fua: bool) -> SubmissionEntry {
    rw(nvm::WRITE, nsid, slba, nlb, fua)
}

/// Compare (NVM CS §3.3.1) `nlb` blocks starting at `slba` with the data buffer.
#[must_use = "a built command does nothing until it is submitted"]
pub fn compare(nsid: u32, slba: u64, nlb: u32) -> SubmissionEntry {
    rw(nvm::COMPARE, nsid, slba, nlb, false)
}

/// Write Uncorrectable (NVM CS §3.3.7) of `nlb` blocks at `slba`: no data moves; the blocks
/// read back as Unrecovered Read Error until they are written again.
#[must_use = "a built command does nothing until it is submitted"]
pub fn write_uncorrectable(nsid: u32, slba: u64, nlb: u32) -> SubmissionEntry {
    rw(nvm::WRITE_UNCORRECTABLE, nsid, slba, nlb, false)
}

/// Flush (Base §7.1) the volatile write cache of `nsid`.
#[must_use = "a built command does nothing until it is submitted"]
pub fn flush(nsid: u32) -> SubmissionEntry {
    SubmissionEntry {
        nsid,
        ..SubmissionEntry::new(nvm::FLUSH)
    }
}

/// Write Zeroes (NVM CS §3.3.8) `nlb` blocks at `slba`, no data buffer. `deallocate` lets the
/// controller deallocate the blocks instead of writing them.
pub fn write_zeroes(
    nsid: u32,
    slba: u64,
    nlb: u32,
    deallocate: bool,
    fua: bool,
) -> SubmissionEntry {
    let mut sqe = rw(nvm::WRITE_ZEROES, nsid, slba, nlb, fua);
    if deallocate {
        sqe.cdw12 |= WZ_DEAC_BIT;
    }
    sqe
}

/// Dataset Management (NVM CS §3.3.3) over `ranges` (1-based, 1..=256) [`DsmRange`]s in the
/// data buffer; `deallocate` sets the Attribute – Deallocate (trim) bit.
///
/// [`DsmRange`]: crate::queue::DsmRange
#[must_use = "a built command does nothing until it is submitted"]
pub fn dataset_management(nsid: u32, ranges: u32, deallocate: bool) -> SubmissionEntry {
    debug_assert!(
        (1..=DSM_MAX_RANGES as u32).contains(&ranges),
        "DSM range count {ranges} outside 1..={DSM_MAX_RANGES}"
    );
    SubmissionEntry {
        nsid,
        cdw10: ranges.wrapping_sub(1) & 0xFF,
        cdw11: if deallocate { DSM_AD_BIT } else { 0 },
        ..SubmissionEntry::new(nvm::DATASET_MANAGEMENT)
    }
}

/// Copy Descriptor Format 0h (NVM CS §3.3.2.1): the source ranges are
/// [`CopySourceRange`](crate::queue::CopySourceRange) entries of 32 bytes.
pub const COPY_FORMAT_0: u8 = 0;
/// Copy Descriptor Format 1h (NVM CS §3.3.2.1): the source ranges are
/// [`CopySourceRangeFormat1`](crate::queue::CopySourceRangeFormat1) entries of 40 bytes, for
/// namespaces formatted with a 32-bit or 64-bit guard.
pub const COPY_FORMAT_1: u8 = 1;

/// The fields of a Copy command's CDW12 (NVM CS §3.3.2, "Copy – Command Dword 12"): Number of
/// Ranges in bits 7:0 (0-based), Descriptor Format in 11:8, PRINFOR in 15:12, PRINFOW in
/// 29:26, FUA in bit 30, Limited Retry in bit 31 (the bits between are directives and storage
/// tags, left clear).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CopyControl {
    /// Number of source ranges, 1-based (1..=256; encoded 0-based).
    pub ranges: u32,
    /// Descriptor Format of the source range entries ([`COPY_FORMAT_0`]).
    pub format: u8,
    /// Protection Information Field Read: action and checks for reading the sources.
    pub prinfor: u8,
    /// Protection Information Field Write: action and checks for writing the destination.
    pub prinfow: u8,
    /// Force Unit Access: the destination is on non-volatile media before the completion.
    pub fua: bool,
    /// Limited Retry: the controller applies limited retry efforts.
    pub limited_retry: bool,
}

impl CopyControl {
    /// `ranges` (1-based) source ranges of format 0h, no protection information actions, no
    /// FUA, no limited retry.
    pub const fn new(ranges: u32) -> Self {
        CopyControl {
            ranges,
            format: COPY_FORMAT_0,
            prinfor: 0,
            prinfow: 0,
            fua: false,
            limited_retry: false,
        }
    }

    /// The CDW12 value.
    pub const fn to_cdw12(self) -> u32 {
        (self.ranges.wrapping_sub(1) & COPY_NR_MASK)
            | (self.format as u32 & NIBBLE) << COPY_DESFMT_SHIFT
            | (self.prinfor as u32 & NIBBLE) << COPY_PRINFOR_SHIFT
            | (self.prinfow as u32 & NIBBLE) << COPY_PRINFOW_SHIFT
            | if self.fua { FUA_BIT } else { 0 }
            | if self.limited_retry { LR_BIT } else { 0 }
    }

    /// The fields of a CDW12 value.
    pub const fn from_cdw12(cdw12: u32) -> Self {
        CopyControl {
            ranges: (cdw12 & COPY_NR_MASK) + 1,
            format: (cdw12 >> COPY_DESFMT_SHIFT & NIBBLE) as u8,
            prinfor: (cdw12 >> COPY_PRINFOR_SHIFT & NIBBLE) as u8,
            prinfow: (cdw12 >> COPY_PRINFOW_SHIFT & NIBBLE) as u8,
            fua: cdw12 & FUA_BIT != 0,
            limited_retry: cdw12 & LR_BIT != 0,
        }
    }
}

/// Copy (NVM CS §3.3.2, opcode 19h): the blocks of `control.ranges` source ranges (listed in
/// the data buffer) are copied, in list order, to consecutive blocks from `sdlba` (Starting
/// Destination LBA, CDW11:CDW10). The data buffer is the source range list, host to
/// controller; no block data moves to or from the host.
#[must_use = "a built command does nothing until it is submitted"]
pub fn copy(nsid: u32, sdlba: u64, control: CopyControl) -> SubmissionEntry {
    debug_assert!(
        (1..=COPY_MAX_RANGES as u32).contains(&control.ranges),
        "Copy range count {} outside 1..={COPY_MAX_RANGES}",
        control.ranges
    );
    SubmissionEntry {
        nsid,
        cdw10: lo32(sdlba),
        cdw11: hi32(sdlba),
        cdw12: control.to_cdw12(),
        ..SubmissionEntry::new(nvm::COPY)
    }
}

// ---------------------------------------------------------------------------------------------
// Decoders
// ---------------------------------------------------------------------------------------------

/// Starting LBA of a Read/Write/Compare/Write Zeroes command (CDW11:CDW10); of a Copy, its
/// Starting Destination LBA (same dwords).
pub fn slba(sqe: &SubmissionEntry) -> u64 {
    u64::from(sqe.cdw11) << 32 | u64::from(sqe.cdw10)
}

/// Block count (1-based) of a Read/Write/Compare/Write Zeroes command (CDW12 15:0 + 1).
pub fn nlb(sqe: &SubmissionEntry) -> u32 {
    (sqe.cdw12 & NLB_MASK) + 1
}

/// Force Unit Access bit of a Read/Write/Write Zeroes command (CDW12 bit 30).
pub fn fua(sqe: &SubmissionEntry) -> bool {
    sqe.cdw12 & FUA_BIT != 0
}

/// Deallocate bit of a Write Zeroes command (CDW12 bit 25).
pub fn write_zeroes_deallocate(sqe: &SubmissionEntry) -> bool {
    sqe.cdw12 & WZ_DEAC_BIT != 0
}

/// Number of ranges (1-based) of a Dataset Management command (CDW10 7:0 + 1).
pub fn dsm_ranges(sqe: &SubmissionEntry) -> u32 {
    (sqe.cdw10 & 0xFF) + 1
}

/// Attribute – Deallocate bit of a Dataset Management command (CDW11 bit 2).
pub fn dsm_deallocate(sqe: &SubmissionEntry) -> bool {
    sqe.cdw11 & DSM_AD_BIT != 0
}

/// The CDW12 fields of a Copy command.
pub fn copy_control(sqe: &SubmissionEntry) -> CopyControl {
    CopyControl::from_cdw12(sqe.cdw12)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::opcode::log_page;

    #[test]
    fn log_page_fields_read_back() {
        let mut sqe = get_log_page(0x70, 0, 4 * 0x1_0001);
        sqe.cdw12 = 4096;
        assert_eq!(log_page_lid(&sqe), 0x70);
        assert_eq!(log_page_bytes(&sqe), 4 * 0x1_0001);
        assert_eq!(log_page_offset(&sqe), 4096);
        assert_eq!(log_page_bytes(&get_log_page(2, 0, 512)), 512);
    }

    #[test]
    fn identify_dwords() {
        let c = identify(Cns::Controller, 0);
        assert_eq!(c.opcode(), 0x06);
        assert_eq!((c.nsid, c.cdw10), (0, 1));
        let n = identify(Cns::Namespace, 3);
        assert_eq!((n.nsid, n.cdw10), (3, 0));
        assert_eq!(identify(Cns::ActiveNamespaceList, 0).cdw10, 2);
        assert_eq!((n.cid(), n.prp1, n.prp2), (0, 0, 0));
    }

    #[test]
    fn create_queues() {
        let cq = create_io_cq(1, 1024, 0x1234_5000, Some(3));
        assert_eq!(cq.opcode(), 0x05);
        assert_eq!(cq.prp1, 0x1234_5000);
        assert_eq!(cq.cdw10, 0x03FF_0001);
        assert_eq!(cq.cdw11, 0x0003_0003);
        let polled = create_io_cq(2, 65536, 0, None);
        assert_eq!(polled.cdw10, 0xFFFF_0002);
        assert_eq!(polled.cdw11, 0x0000_0001);
        let sq = create_io_sq(4, 256, 0xABC000, 2);
        assert_eq!(sq.opcode(), 0x01);
        assert_eq!(sq.prp1, 0xABC000);
        assert_eq!(sq.cdw10, 0x00FF_0004);
        assert_eq!(sq.cdw11, 0x0002_0001);
        assert_eq!(delete_io_sq(4).cdw10, 4);
        assert_eq!(delete_io_sq(4).opcode(), 0x00);
        assert_eq!(delete_io_cq(2).cdw10, 2);
        assert_eq!(delete_io_cq(2).opcode(), 0x04);
    }

    #[test]
    #[should_panic(expected = "queue size")]
    #[cfg(debug_assertions)]
    fn create_queue_rejects_size_one() {
        let _ = create_io_sq(1, 1, 0, 1);
    }

    #[test]
    fn features_and_queue_counts() {
        let s = set_number_of_queues(8, 4);
        assert_eq!(s.opcode(), 0x09);
        assert_eq!(s.cdw10, 0x07);
        assert_eq!(s.cdw11, 0x0003_0007);
        assert_eq!(number_of_queues_allocated(0x0003_0007), (8, 4));
        assert_eq!(number_of_queues_allocated(0xFFFE_0000), (1, 65535));
        assert_eq!(
            number_of_queues_allocated(0xFFFF_FFFF),
            (u16::MAX, u16::MAX)
        );
        let g = get_features(feature::VOLATILE_WRITE_CACHE);
        assert_eq!((g.opcode(), g.cdw10, g.cdw11), (0x0A, 0x06, 0));
        assert_eq!(set_features(feature::ARBITRATION, 0xDEAD).cdw11, 0xDEAD);
    }

    #[test]
    fn misc_admin() {
        let d = doorbell_buffer_config(0x1000, 0x2000);
        assert_eq!((d.opcode(), d.prp1, d.prp2), (0x7C, 0x1000, 0x2000));
        let a = abort(3, 0x1234);
        assert_eq!((a.opcode(), a.cdw10), (0x08, 0x1234_0003));
        let l = get_log_page(log_page::SMART_HEALTH, 0xFFFF_FFFF, 512);
        assert_eq!(l.opcode(), 0x02);
        assert_eq!(l.nsid, 0xFFFF_FFFF);
        assert_eq!(l.cdw10, (127 << 16) | 0x02);
        assert_eq!(l.cdw11, 0);
        let big = get_log_page(log_page::ERROR_INFORMATION, 0, 4 * 0x1_0001);
        assert_eq!(big.cdw10, 0x0000_0001);
        assert_eq!(big.cdw11, 0x0000_0001);
        assert_eq!(async_event_request().opcode(), 0x0C);
    }

    #[test]
    fn read_write_dwords_and_decoders() {
        let r = read(1, 0x1_2345_6789, 8);
        assert_eq!(r.opcode(), 0x02);
        assert_eq!(
            (r.nsid, r.cdw10, r.cdw11, r.cdw12),
            (1, 0x2345_6789, 0x1, 7)
        );
        assert_eq!((slba(&r), nlb(&r), fua(&r)), (0x1_2345_6789, 8, false));
        let w = write(2, 10, 65536, true);
        assert_eq!(w.opcode(), 0x01);
        assert_eq!(w.cdw12, 0x4000_FFFF);
        assert_eq!((slba(&w), nlb(&w), fua(&w)), (10, 65536, true));
        let c = compare(1, 0, 1);
        assert_eq!((c.opcode(), c.cdw12), (0x05, 0));
        let f = flush(5);
        assert_eq!((f.opcode(), f.nsid, f.cdw10, f.cdw12), (0x00, 5, 0, 0));
    }

    #[test]
    fn write_zeroes_and_dsm() {
        let z = write_zeroes(1, 100, 16, true, false);
        assert_eq!(z.opcode(), 0x08);
        assert_eq!(z.cdw12, (1 << 25) | 15);
        assert!(write_zeroes_deallocate(&z));
        assert_eq!(nlb(&z), 16);
        let z = write_zeroes(1, 100, 16, false, true);
        assert_eq!(z.cdw12, (1 << 30) | 15);
        assert!(!write_zeroes_deallocate(&z));
        let d = dataset_management(1, 256, true);
        assert_eq!((d.opcode(), d.cdw10, d.cdw11), (0x09, 0xFF, 0b100));
        assert_eq!((dsm_ranges(&d), dsm_deallocate(&d)), (256, true));
        let d = dataset_management(1, 1, false);
        assert_eq!((d.cdw10, d.cdw11), (0, 0));
    }

    #[test]
    fn copy_dwords() {
        let c = copy(3, 0x1_0000_0200, CopyControl::new(4));
        assert_eq!(c.opcode(), 0x19);
        assert_eq!((c.nsid, c.cdw10, c.cdw11, c.cdw12), (3, 0x200, 1, 3));
        assert_eq!(slba(&c), 0x1_0000_0200);
        assert_eq!(copy_control(&c), CopyControl::new(4));
        let all = CopyControl {
            ranges: 256,
            format: 0xA,
            prinfor: 0b1001,
            prinfow: 0b0110,
            fua: true,
            limited_retry: true,
        };
        // NR FFh, DESFMT Ah in 11:8, PRINFOR 9h in 15:12, PRINFOW 6h in 29:26, FUA, LR.
        assert_eq!(
            all.to_cdw12(),
            0xFF | 0xA << 8 | 0x9 << 12 | 0x6 << 26 | 1 << 30 | 1 << 31
        );
        assert_eq!(CopyControl::from_cdw12(all.to_cdw12()), all);
        assert_eq!(CopyControl::new(1).to_cdw12(), 0);
    }

    #[test]
    #[should_panic(expected = "block count")]
    #[cfg(debug_assertions)]
    fn zero_blocks_rejected() {
        let _ = read(1, 0, 0);
    }
}
