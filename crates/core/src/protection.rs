//! Metadata and end-to-end protection information (NVM CS §5.2 "End-to-end Data Protection";
//! metadata layouts: NVMe Base 2.0 §5.2 figure "Metadata", NVM CS §5.2.2) on the shared
//! request layer.
//!
//! - [`LbaFormatInfo`]: a namespace's format as the request layer needs it (block size,
//!   metadata size, extended or separate, PI type and position), from Identify Namespace.
//! - [`Protected`]: a Read, Write, Compare or Verify with its PRINFO (PRACT, PRCHK) and tags
//!   ([`Protection`]). A plain command on a namespace with metadata is refused (it would move
//!   bytes its buffer does not hold); a `Protected` one moves what the format says: with an
//!   extended LBA format `blocks * (block size + metadata size)` bytes in the data buffer,
//!   with separate metadata `blocks * block size` there and `blocks * metadata size` in a
//!   second buffer (MPTR, the transports' `submit_with_metadata`). With PRACT = 1 and a
//!   metadata size equal to the PI size, no metadata moves at all (NVM CS §5.2.2.1): the
//!   controller inserts and strips the PI.
//! - [`generate_pi`] / [`verify_pi`]: host-side PI (PRACT = 0): guard CRC, application tag,
//!   reference tag seeded by the command's initial tag and advanced per block (types 1, 2).
//!   Both PI formats a host can compute without storage tags: the 16-bit guard (8-byte tuple,
//!   CRC-16 T10-DIF, 32-bit reference tag) and the 64-bit guard (NVM CS §5.2.1.3: 16-byte
//!   tuple, CRC-64 NVMe, 48-bit reference tag in CDW14 and CDW3 15:0) with STS = 0; the
//!   32-bit guard format and storage tags are refused ([`HostPiUnsupported`]), PRACT = 1
//!   commands still work on them.
//!
//! The plain commands do not change: their range check, byte count and entry are the same
//! code as before this module (the wrapper is a separate type, monomorphised on its own).

use std::fmt;

use nvme_spec::opcode::NvmOpcode;
use nvme_spec::protection::{
    cdw15, cdw3_ref_tag, crc16_t10dif, crc64_nvme, ExtendedLbaFormat, Pi64Tuple, PI64_TUPLE_BYTES,
    PI_TUPLE_BYTES, REF_TAG48_ESCAPE, REF_TAG48_MASK,
};
use nvme_spec::queue::SubmissionEntry;
use nvme_spec::status::{media, StatusCodeType};
use nvme_spec::{IdentifyNamespace, Status};

pub use nvme_spec::protection::{
    PiFormat, PiTuple, PiType, Prinfo, APP_TAG_ESCAPE, REF_TAG_ESCAPE,
};

use crate::command::{CommandContext, Compare, LbaRange, NvmCommand, Read, Verify, Write};
use crate::error::{Error, Result};
use crate::namespace::Namespace;

/// The end-to-end check a command failed (Media and Data Integrity status, SCT 2h).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PiCheck {
    /// End-to-end Guard Check Error (SC 82h).
    Guard,
    /// End-to-end Application Tag Check Error (SC 83h).
    AppTag,
    /// End-to-end Reference Tag Check Error (SC 84h).
    RefTag,
}

impl PiCheck {
    /// The check a status reports, if it is one of the three.
    pub fn from_status(status: Status) -> Option<PiCheck> {
        if status.sct() != StatusCodeType::MediaDataIntegrity {
            return None;
        }
        match status.sc() {
            media::END_TO_END_GUARD_CHECK_ERROR => Some(PiCheck::Guard),
            media::END_TO_END_APPLICATION_TAG_CHECK_ERROR => Some(PiCheck::AppTag),
            media::END_TO_END_REFERENCE_TAG_CHECK_ERROR => Some(PiCheck::RefTag),
            _ => None,
        }
    }

    /// The status code (SCT 2h) of this check's error.
    pub fn status_code(self) -> u8 {
        match self {
            PiCheck::Guard => media::END_TO_END_GUARD_CHECK_ERROR,
            PiCheck::AppTag => media::END_TO_END_APPLICATION_TAG_CHECK_ERROR,
            PiCheck::RefTag => media::END_TO_END_REFERENCE_TAG_CHECK_ERROR,
        }
    }
}

impl fmt::Display for PiCheck {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PiCheck::Guard => "guard",
            PiCheck::AppTag => "application tag",
            PiCheck::RefTag => "reference tag",
        })
    }
}

/// Where a namespace's metadata travels (FLBAS bit 4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MetadataLayout {
    /// No metadata.
    None,
    /// Extended LBA: each block's metadata follows its data in the data buffer.
    Extended,
    /// A separate, contiguous metadata buffer (MPTR).
    Separate,
}

/// A namespace's LBA format as the request layer uses it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LbaFormatInfo {
    block_size: u32,
    metadata_size: u16,
    layout: MetadataLayout,
    pi: Option<PiType>,
    pi_first: bool,
    /// The PI format (ELBAF PIF; 16-bit guard without ELBAF).
    pi_format: PiFormat,
    /// Storage Tag Size in bits (ELBAF STS; 0 without ELBAF).
    storage_tag_bits: u8,
}

/// Why host-side PI ([`generate_pi`], [`verify_pi`]) is not computed for a format. PRACT = 1
/// commands, where the controller computes the PI, still work on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HostPiUnsupported {
    /// The 32-bit guard format (CRC-32C guard, 80-bit storage and reference space).
    Guard32,
    /// A format with a storage tag (STS > 0): the reference tag is what the storage tag
    /// leaves of the tuple's storage and reference space.
    StorageTag {
        /// The Storage Tag Size in bits.
        bits: u8,
    },
}

impl fmt::Display for HostPiUnsupported {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Guard32 => f.write_str(
                "host-side protection information is not supported for the 32-bit guard \
                 format: let the controller insert and check it (PRACT = 1, `--pi insert`) or \
                 reformat the namespace with a 16-bit or 64-bit guard LBA format",
            ),
            Self::StorageTag { bits } => write!(
                f,
                "host-side protection information is not supported with a {bits}-bit storage \
                 tag (STS > 0): let the controller insert and check it (PRACT = 1, `--pi \
                 insert`) or reformat the namespace with an LBA format whose STS is 0"
            ),
        }
    }
}

impl std::error::Error for HostPiUnsupported {}

impl LbaFormatInfo {
    /// The current format of `data` (not validated: `Namespace::from_identify` does that).
    pub fn from_identify(data: &IdentifyNamespace) -> Self {
        let format = data.current_lba_format();
        let metadata_size = format.metadata_size();
        let layout = match (metadata_size, data.metadata_extended()) {
            (0, _) => MetadataLayout::None,
            (_, true) => MetadataLayout::Extended,
            (_, false) => MetadataLayout::Separate,
        };
        Self {
            block_size: format.data_size(),
            metadata_size,
            layout,
            pi: data.pi_type(),
            pi_first: data.pi_first(),
            pi_format: PiFormat::Guard16,
            storage_tag_bits: 0,
        }
    }

    /// The same format with the PI format and storage tag size of its Extended LBA Format
    /// (NVM CS §4.1.5.2, read when CTRATT.ELBAS is set); `Err` for the reserved PIF value.
    pub fn with_extended_format(
        self,
        elbaf: ExtendedLbaFormat,
    ) -> std::result::Result<Self, String> {
        let Some(pi_format) = elbaf.pif() else {
            return Err(format!(
                "its extended LBA format ({:#x}) has the reserved protection information \
                 format 11b",
                elbaf.0
            ));
        };
        Ok(self.with_pi_format(pi_format, elbaf.sts()))
    }

    /// The same format with this PI format and Storage Tag Size.
    pub const fn with_pi_format(self, pi_format: PiFormat, storage_tag_bits: u8) -> Self {
        Self {
            pi_format,
            storage_tag_bits,
            ..self
        }
    }

    /// The protection information format (guard size; 16-bit guard without ELBAF).
    pub const fn pi_format(&self) -> PiFormat {
        self.pi_format
    }

    /// The Storage Tag Size in bits (ELBAF STS).
    pub const fn storage_tag_bits(&self) -> u8 {
        self.storage_tag_bits
    }

    /// Bytes of the PI tuple: 8 for the 16-bit guard, 16 for the 32- and 64-bit guards.
    pub const fn pi_bytes(&self) -> usize {
        self.pi_format.tuple_bytes()
    }

    /// Whether [`generate_pi`] and [`verify_pi`] compute this format's PI: a format without
    /// PI or with the 16- or 64-bit guard and no storage tag.
    pub const fn host_pi_support(&self) -> std::result::Result<(), HostPiUnsupported> {
        if self.pi.is_none() {
            return Ok(());
        }
        if matches!(self.pi_format, PiFormat::Guard32) {
            return Err(HostPiUnsupported::Guard32);
        }
        if self.storage_tag_bits != 0 {
            return Err(HostPiUnsupported::StorageTag {
                bits: self.storage_tag_bits,
            });
        }
        Ok(())
    }

    /// The reference tag as the format stores it: the low 32 bits (16-bit guard) or 48 bits
    /// (64-bit guard; the 32-bit guard's 80-bit space keeps the low 48 bits here).
    pub const fn ref_tag_bits(&self, ref_tag: u64) -> u64 {
        match self.pi_format {
            PiFormat::Guard16 => ref_tag & u32::MAX as u64,
            PiFormat::Guard32 | PiFormat::Guard64 => ref_tag & REF_TAG48_MASK,
        }
    }

    /// A format with these properties (tests, tools that describe a format).
    pub const fn new(
        block_size: u32,
        metadata_size: u16,
        extended: bool,
        pi: Option<PiType>,
        pi_first: bool,
    ) -> Self {
        let layout = match (metadata_size, extended) {
            (0, _) => MetadataLayout::None,
            (_, true) => MetadataLayout::Extended,
            (_, false) => MetadataLayout::Separate,
        };
        Self {
            block_size,
            metadata_size,
            layout,
            pi,
            pi_first,
            pi_format: PiFormat::Guard16,
            storage_tag_bits: 0,
        }
    }

    /// Logical block data bytes.
    pub const fn block_size(&self) -> u32 {
        self.block_size
    }

    /// Metadata bytes per block (0: none).
    pub const fn metadata_size(&self) -> u16 {
        self.metadata_size
    }

    /// Where the metadata travels.
    pub const fn layout(&self) -> MetadataLayout {
        self.layout
    }

    /// The protection information type, if the namespace is formatted with PI.
    pub const fn pi_type(&self) -> Option<PiType> {
        self.pi
    }

    /// Whether the PI is the first bytes of the metadata (else the last ones).
    pub const fn pi_first(&self) -> bool {
        self.pi_first
    }

    /// Whether blocks carry metadata.
    pub const fn has_metadata(&self) -> bool {
        self.metadata_size != 0
    }

    /// Offset of the PI tuple in a block's metadata.
    pub const fn pi_offset(&self) -> usize {
        if self.pi_first {
            0
        } else {
            self.metadata_size as usize - self.pi_bytes()
        }
    }

    /// Metadata bytes per block that move between host and controller: none when PRACT is
    /// set and the metadata is exactly the PI (the controller inserts / strips it, NVM CS
    /// §5.2.2.1), all of them otherwise.
    pub const fn moved_metadata(&self, pract: bool) -> usize {
        if pract && self.pi.is_some() && self.metadata_size as usize == self.pi_bytes() {
            0
        } else {
            self.metadata_size as usize
        }
    }

    /// Bytes of `blocks` blocks in the data buffer: with an extended LBA format data and
    /// moved metadata interleaved, otherwise data only.
    pub const fn data_bytes(&self, blocks: u64, pract: bool) -> usize {
        let per_block = match self.layout {
            MetadataLayout::Extended => self.block_size as usize + self.moved_metadata(pract),
            _ => self.block_size as usize,
        };
        blocks as usize * per_block
    }

    /// Bytes of `blocks` blocks' metadata in a separate metadata buffer (0 without one).
    pub const fn metadata_bytes(&self, blocks: u64, pract: bool) -> usize {
        match self.layout {
            MetadataLayout::Separate => blocks as usize * self.moved_metadata(pract),
            _ => 0,
        }
    }
}

impl fmt::Display for LbaFormatInfo {
    /// As `512+8 extended, PI type 1 (last 8 bytes)`, `4096+16 separate, PI type 3 (last 16
    /// bytes, 64-bit guard)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.block_size)?;
        match self.layout {
            MetadataLayout::None => {}
            MetadataLayout::Extended => write!(f, "+{} extended", self.metadata_size)?,
            MetadataLayout::Separate => write!(f, "+{} separate", self.metadata_size)?,
        }
        if let Some(pi) = self.pi {
            let at = if self.pi_first { "first" } else { "last" };
            write!(f, ", PI type {} ({at} {} bytes", pi as u8, self.pi_bytes())?;
            match self.pi_format {
                PiFormat::Guard16 => {}
                PiFormat::Guard32 => f.write_str(", 32-bit guard")?,
                PiFormat::Guard64 => f.write_str(", 64-bit guard")?,
            }
            if self.storage_tag_bits != 0 {
                write!(f, ", {}-bit storage tag", self.storage_tag_bits)?;
            }
            f.write_str(")")?;
        }
        Ok(())
    }
}

/// The protection fields of one command: PRINFO (CDW12 29:26), the initial (expected)
/// reference tag (CDW14, and CDW3 15:0 for its bits 47:32 on a 64-bit guard format) and the
/// (expected) application tag and its mask (CDW15); NVM CS §3.3.4 Figures 39-41.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Protection {
    /// PRACT and the PRCHK checks.
    pub prinfo: Prinfo,
    /// Initial Logical Block Reference Tag (writes) / Expected Initial LBRT (reads): the
    /// first block's reference tag, +1 per block for types 1 and 2 (type 1: the LBA's low
    /// 32 bits with the 16-bit guard, its low 48 bits with the 64-bit guard). The namespace's
    /// format keeps the bits it has ([`LbaFormatInfo::ref_tag_bits`]): bits 31:0 go in CDW14,
    /// bits 47:32 in CDW3 on a 64-bit guard format.
    pub ref_tag: u64,
    /// (Expected) Logical Block Application Tag.
    pub app_tag: u16,
    /// Application Tag Mask: the bits of the application tag that are checked.
    pub app_mask: u16,
}

impl Protection {
    /// PRACT = 1 (the controller inserts / strips PI) with `checks`, reference tag seeded by
    /// `lba` (its low 48 bits; a 16-bit guard format uses the low 32, as type 1 needs).
    pub const fn pract(lba: u64, checks: Prinfo) -> Self {
        Self {
            prinfo: Prinfo::PRACT.union(checks),
            ref_tag: lba & REF_TAG48_MASK,
            app_tag: 0,
            app_mask: 0,
        }
    }

    /// PRACT = 0 (the host's PI moves) with `checks`, reference tag seeded by `lba`.
    pub const fn pass(lba: u64, checks: Prinfo) -> Self {
        Self {
            prinfo: checks,
            ref_tag: lba & REF_TAG48_MASK,
            app_tag: 0,
            app_mask: 0,
        }
    }

    /// With this application tag and mask (checked bits).
    pub const fn app_tag(self, app_tag: u16, app_mask: u16) -> Self {
        Self {
            app_tag,
            app_mask,
            ..self
        }
    }

    /// With this initial reference tag (bits beyond the format's are dropped).
    pub const fn ref_tag(self, ref_tag: u64) -> Self {
        Self { ref_tag, ..self }
    }

    /// PRACT is set.
    pub const fn is_pract(&self) -> bool {
        self.prinfo.pract()
    }

    /// The reference tag of block `index` of the command on `format` (types 1 and 2 advance
    /// by one per block, type 3 keeps it), in the format's width.
    pub const fn ref_tag_of(&self, format: &LbaFormatInfo, pi: PiType, index: u64) -> u64 {
        if pi.ref_tag_increments() {
            format.ref_tag_bits(self.ref_tag.wrapping_add(index))
        } else {
            format.ref_tag_bits(self.ref_tag)
        }
    }

    /// Writes the fields into `sqe` (CDW12 PRINFO, CDW14, CDW3 15:0, CDW15). CDW3 holds the
    /// reference tag's bits 47:32 until [`place_for`] clears them for a 16-bit guard format.
    fn encode(&self, sqe: &mut SubmissionEntry) {
        sqe.cdw12 |= self.prinfo.cdw12();
        sqe.cdw14 = self.ref_tag as u32;
        sqe.cdw3 = cdw3_ref_tag(self.ref_tag);
        sqe.cdw15 = cdw15(self.app_tag, self.app_mask);
    }

    /// The fields of a built entry.
    fn decode(sqe: &SubmissionEntry) -> Self {
        Self {
            prinfo: Prinfo::from_cdw12(sqe.cdw12),
            ref_tag: u64::from(sqe.cdw14) | u64::from(sqe.cdw3 & 0xFFFF) << 32,
            app_tag: sqe.cdw15 as u16,
            app_mask: (sqe.cdw15 >> 16) as u16,
        }
    }
}

/// A protected command's entry made for `ns`: on a 16-bit guard format the reference tag is
/// CDW14 alone and CDW3 is reserved (NVM CS §3.2.4), so the bits [`Protection::encode`] put
/// there are cleared.
#[inline]
fn place_for(ns: &Namespace, sqe: &mut SubmissionEntry) {
    if matches!(ns.format().pi_format(), PiFormat::Guard16) {
        sqe.cdw3 = 0;
    }
}

/// The commands that carry protection fields and metadata (NVM CS §5.2.2): Read, Write,
/// Compare, Verify. Sealed.
pub trait ProtectableCommand: NvmCommand + private::Sealed {}

mod private {
    pub trait Sealed {}
}

macro_rules! protectable {
    ($($t:ty),*) => {$(
        impl private::Sealed for $t {}
        impl ProtectableCommand for $t {}
    )*};
}
protectable!(Read, Write, Compare, Verify);

/// A Read, Write, Compare or Verify with metadata and protection fields: the form every
/// command on a namespace with metadata takes. Submitted like any command
/// ([`IoQueue::submit`](crate::IoQueue::submit)) when the format moves no separate metadata
/// (extended LBA, or PRACT with metadata = PI), with a second buffer through the transport's
/// `submit_with_metadata` otherwise.
///
/// Not split at MDTS (a separate metadata buffer would need cutting too): a request larger
/// than one command is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use = "a built command does nothing until it is submitted"]
pub struct Protected<C> {
    /// The command.
    pub cmd: C,
    /// Its protection fields.
    pub protection: Protection,
}

impl<C: ProtectableCommand> Protected<C> {
    /// `cmd` with `protection`.
    pub const fn new(cmd: C, protection: Protection) -> Self {
        Self { cmd, protection }
    }
}

/// Range checks of a command with metadata: the whole namespace (not the plain commands'
/// limit, which is zero on a namespace with metadata).
fn check_protected_range(ns: &Namespace, range: Option<LbaRange>) -> Result<()> {
    match range {
        Some(r) => ns.check_blocks(r.lba, u64::from(r.blocks)),
        None => ns.check_current(),
    }
}

/// Bytes in the data buffer of a command with metadata.
fn protected_data_bytes(ns: &Namespace, range: Option<LbaRange>, p: &Protection) -> usize {
    match range {
        Some(r) => ns.format().data_bytes(u64::from(r.blocks), p.is_pract()),
        None => 0,
    }
}

/// The check of a command with metadata submitted without a metadata buffer.
fn check_no_metadata_buffer(ns: &Namespace, range: Option<LbaRange>, p: &Protection) -> Result<()> {
    let blocks = range.map_or(0, |r| u64::from(r.blocks));
    if ns.format().metadata_bytes(blocks, p.is_pract()) != 0 {
        return Err(ns.metadata_mismatch(
            "its metadata goes to a separate buffer: submit with a metadata buffer \
             (submit_with_metadata), or with PRACT when the metadata is only the PI",
        ));
    }
    Ok(())
}

impl<C: ProtectableCommand> NvmCommand for Protected<C> {
    #[inline]
    fn opcode(&self) -> NvmOpcode {
        self.cmd.opcode()
    }
    #[inline]
    fn range(&self) -> Option<LbaRange> {
        self.cmd.range()
    }
    /// The sub-range, with the reference tag advanced by the blocks skipped (types 1, 2).
    #[inline]
    fn with_range(self, range: LbaRange) -> Self {
        let skipped = self
            .cmd
            .range()
            .map_or(0, |r| range.lba.wrapping_sub(r.lba));
        let protection = Protection {
            ref_tag: self.protection.ref_tag.wrapping_add(skipped) & REF_TAG48_MASK,
            ..self.protection
        };
        Self {
            cmd: self.cmd.with_range(range),
            protection,
        }
    }
    #[inline]
    fn sqe(&self, nsid: u32) -> SubmissionEntry {
        let mut sqe = self.cmd.sqe(nsid);
        self.protection.encode(&mut sqe);
        sqe
    }
    #[inline]
    fn sqe_on(&self, ns: &Namespace) -> SubmissionEntry {
        let mut sqe = self.sqe(ns.nsid());
        place_for(ns, &mut sqe);
        sqe
    }
    #[inline]
    fn data_bytes(&self, ns: &Namespace) -> usize {
        protected_data_bytes(ns, self.range(), &self.protection)
    }
    #[inline]
    fn splittable(&self) -> bool {
        false
    }
    #[inline]
    fn check_range(&self, ns: &Namespace) -> Result<()> {
        check_protected_range(ns, self.range())
    }
    #[inline]
    fn check(&self, ns: &Namespace, _ctx: &CommandContext<'_>, _data: Option<&[u8]>) -> Result<()> {
        check_no_metadata_buffer(ns, self.range(), &self.protection)
    }
    #[inline]
    fn protection(&self) -> Option<Protection> {
        Some(self.protection)
    }
}

/// The rules of a [`Protected`] command for its erased form ([`crate::IoCommand`]).
pub(crate) mod erased {
    use super::*;

    /// The protection fields of a built entry.
    pub fn protection(sqe: &SubmissionEntry) -> Protection {
        Protection::decode(sqe)
    }

    /// See [`check_protected_range`].
    pub fn check_range(ns: &Namespace, range: Option<LbaRange>) -> Result<()> {
        check_protected_range(ns, range)
    }

    /// See [`protected_data_bytes`].
    pub fn data_bytes(ns: &Namespace, range: Option<LbaRange>, p: &Protection) -> usize {
        protected_data_bytes(ns, range, p)
    }

    /// Advances the reference tag of a built entry by `blocks` (48 bits over CDW14 and
    /// CDW3 15:0; [`place_for`] drops the upper bits on a 16-bit guard format).
    pub fn advance_ref_tag(sqe: &mut SubmissionEntry, blocks: u64) {
        let p = Protection::decode(sqe);
        let tag = p.ref_tag.wrapping_add(blocks) & REF_TAG48_MASK;
        sqe.cdw14 = tag as u32;
        sqe.cdw3 = cdw3_ref_tag(tag);
    }

    /// See [`place_for`].
    pub fn place(ns: &Namespace, sqe: &mut SubmissionEntry) {
        place_for(ns, sqe)
    }

    /// See [`check_no_metadata_buffer`].
    pub fn check(ns: &Namespace, range: Option<LbaRange>, p: &Protection) -> Result<()> {
        check_no_metadata_buffer(ns, range, p)
    }
}

/// A block whose PI does not match ([`verify_pi`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PiMismatch {
    /// The block's index in the buffer (0-based).
    pub block: u64,
    /// Which check failed.
    pub check: PiCheck,
    /// The value expected (guard CRC, application tag, reference tag).
    pub expected: u64,
    /// The value found in the PI.
    pub found: u64,
}

impl fmt::Display for PiMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "block {}: {} {:#x} expected, {:#x} found",
            self.block, self.check, self.expected, self.found
        )
    }
}

/// Why [`verify_pi`] failed: a block's PI does not match, or the format's PI is not computed
/// host-side.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PiError {
    /// A block's PI does not match.
    Mismatch(PiMismatch),
    /// The format's PI is not computed host-side.
    Unsupported(HostPiUnsupported),
}

impl PiError {
    /// The mismatch, if that is the error.
    pub const fn mismatch(&self) -> Option<&PiMismatch> {
        match self {
            Self::Mismatch(m) => Some(m),
            Self::Unsupported(_) => None,
        }
    }
}

impl fmt::Display for PiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Mismatch(m) => m.fmt(f),
            Self::Unsupported(u) => u.fmt(f),
        }
    }
}

impl std::error::Error for PiError {}

impl From<HostPiUnsupported> for PiError {
    fn from(u: HostPiUnsupported) -> Self {
        Self::Unsupported(u)
    }
}

/// Block `i`'s data and metadata in host buffers of `format`: the extended layout puts both
/// in `data`, the separate one the metadata in `metadata`.
fn block_parts<'a>(
    format: &LbaFormatInfo,
    data: &'a [u8],
    metadata: &'a [u8],
    i: usize,
) -> (&'a [u8], &'a [u8]) {
    let (bs, ms) = (format.block_size as usize, format.metadata_size as usize);
    match format.layout {
        MetadataLayout::Extended => {
            let block = &data[i * (bs + ms)..(i + 1) * (bs + ms)];
            block.split_at(bs)
        }
        _ => (&data[i * bs..(i + 1) * bs], &metadata[i * ms..(i + 1) * ms]),
    }
}

/// The guard of a block: the format's CRC (CRC-16 T10-DIF, or CRC-64 NVMe for the 64-bit
/// guard) over its data and, when the PI is the last bytes of the metadata, over the metadata
/// bytes before it (NVM CS §5.2.1.1, §5.2.1.3).
fn guard_of(format: &LbaFormatInfo, data: &[u8], metadata: &[u8]) -> u64 {
    let before = &metadata[..format.pi_offset()];
    match format.pi_format {
        PiFormat::Guard64 => crc64_nvme(crc64_nvme(0, data), before),
        // Guard32 never gets here (refused by host_pi_support).
        PiFormat::Guard16 | PiFormat::Guard32 => {
            u64::from(crc16_t10dif(crc16_t10dif(0, data), before))
        }
    }
}

/// The PI tuple of a host-computed format, whatever its size: guard, application tag,
/// reference tag (both widths widened).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Tuple {
    guard: u64,
    app_tag: u16,
    ref_tag: u64,
}

impl Tuple {
    /// Decodes the tuple at the start of `b` in `format`'s PI format.
    fn read(format: &LbaFormatInfo, b: &[u8]) -> Self {
        match format.pi_format {
            PiFormat::Guard64 => {
                let t = Pi64Tuple::from_bytes(b);
                Self {
                    guard: t.guard(),
                    app_tag: t.app_tag(),
                    ref_tag: t.ref_tag(),
                }
            }
            PiFormat::Guard16 | PiFormat::Guard32 => {
                let t = PiTuple::from_bytes(b);
                Self {
                    guard: t.guard().into(),
                    app_tag: t.app_tag(),
                    ref_tag: t.ref_tag().into(),
                }
            }
        }
    }

    /// Encodes it at the start of `out` in `format`'s PI format.
    fn write(&self, format: &LbaFormatInfo, out: &mut [u8]) {
        match format.pi_format {
            PiFormat::Guard64 => out[..PI64_TUPLE_BYTES].copy_from_slice(
                &Pi64Tuple::new(self.guard, self.app_tag, self.ref_tag).to_bytes(),
            ),
            PiFormat::Guard16 | PiFormat::Guard32 => out[..PI_TUPLE_BYTES].copy_from_slice(
                &PiTuple::new(self.guard as u16, self.app_tag, self.ref_tag as u32).to_bytes(),
            ),
        }
    }

    /// Whether the tags disable the checks of the block (NVM CS §5.2.1.3): application tag
    /// FFFFh, for type 3 also the reference tag all ones.
    fn escaped(&self, format: &LbaFormatInfo, pi: PiType) -> bool {
        let all_ones = match format.pi_format {
            PiFormat::Guard16 => u64::from(REF_TAG_ESCAPE),
            PiFormat::Guard32 | PiFormat::Guard64 => REF_TAG48_ESCAPE,
        };
        self.app_tag == APP_TAG_ESCAPE && (pi != PiType::Type3 || self.ref_tag == all_ones)
    }
}

/// How many whole blocks of `format` the buffers hold (data bytes / per-block stride).
fn blocks_in(format: &LbaFormatInfo, data: &[u8], metadata: &[u8]) -> usize {
    let (bs, ms) = (format.block_size as usize, format.metadata_size as usize);
    match format.layout {
        MetadataLayout::Extended => data.len() / (bs + ms),
        _ => (data.len() / bs).min(metadata.len().checked_div(ms).unwrap_or(0)),
    }
}

/// Host-generated PI (PRACT = 0): fills the PI tuple of every whole block in the buffers —
/// guard CRC, `protection.app_tag`, reference tag from `protection.ref_tag` (+1 per block
/// for types 1 and 2) — in the format's PI format (16- or 64-bit guard). `data` holds the
/// blocks in `format`'s layout; `metadata` is the separate metadata buffer (ignored for an
/// extended format). Returns the blocks filled (0 for a format without PI), or why the
/// format's PI is not computed host-side ([`LbaFormatInfo::host_pi_support`]).
pub fn generate_pi(
    format: &LbaFormatInfo,
    protection: &Protection,
    data: &mut [u8],
    metadata: &mut [u8],
) -> std::result::Result<usize, HostPiUnsupported> {
    let Some(pi) = format.pi else { return Ok(0) };
    format.host_pi_support()?;
    let (bs, ms) = (format.block_size as usize, format.metadata_size as usize);
    let blocks = blocks_in(format, data, metadata);
    let at = format.pi_offset();
    for i in 0..blocks {
        let (d, m) = block_parts(format, data, metadata, i);
        let tuple = Tuple {
            guard: guard_of(format, d, m),
            app_tag: protection.app_tag,
            ref_tag: protection.ref_tag_of(format, pi, i as u64),
        };
        let md = match format.layout {
            MetadataLayout::Extended => &mut data[i * (bs + ms) + bs..(i + 1) * (bs + ms)],
            _ => &mut metadata[i * ms..(i + 1) * ms],
        };
        tuple.write(format, &mut md[at..]);
    }
    Ok(blocks)
}

/// Checks host-side the PI of every whole block in the buffers, as a controller would with
/// PRCHK `checks` (NVM CS §5.2.1): guard, application tag under `protection.app_mask`,
/// reference tag from `protection.ref_tag` (types 1 and 2; type 3 has no reference tag to
/// check). Blocks whose application tag is FFFFh (types 1, 2), or with both tags all ones
/// (type 3), are not checked. The first mismatch is returned; a format whose PI is not
/// computed host-side is [`PiError::Unsupported`].
pub fn verify_pi(
    format: &LbaFormatInfo,
    protection: &Protection,
    checks: Prinfo,
    data: &[u8],
    metadata: &[u8],
) -> std::result::Result<(), PiError> {
    let Some(pi) = format.pi else { return Ok(()) };
    format.host_pi_support()?;
    let at = format.pi_offset();
    for i in 0..blocks_in(format, data, metadata) {
        let (d, m) = block_parts(format, data, metadata, i);
        let tuple = Tuple::read(format, &m[at..]);
        if tuple.escaped(format, pi) {
            continue;
        }
        let mismatch = |check, expected: u64, found: u64| {
            PiError::Mismatch(PiMismatch {
                block: i as u64,
                check,
                expected,
                found,
            })
        };
        let guard = guard_of(format, d, m);
        if checks.contains(Prinfo::CHECK_GUARD) && guard != tuple.guard {
            return Err(mismatch(PiCheck::Guard, guard, tuple.guard));
        }
        let mask = protection.app_mask;
        if checks.contains(Prinfo::CHECK_APP_TAG)
            && (tuple.app_tag ^ protection.app_tag) & mask != 0
        {
            return Err(mismatch(
                PiCheck::AppTag,
                protection.app_tag.into(),
                tuple.app_tag.into(),
            ));
        }
        let expected = protection.ref_tag_of(format, pi, i as u64);
        if checks.contains(Prinfo::CHECK_REF_TAG)
            && pi != PiType::Type3
            && tuple.ref_tag != expected
        {
            return Err(mismatch(PiCheck::RefTag, expected, tuple.ref_tag));
        }
    }
    Ok(())
}

/// The error a controller reports for `mismatch` ([`Error::ProtectionCheck`]), for code that
/// checks host-side and wants the device's form.
pub fn mismatch_error(command: &'static str, mismatch: &PiMismatch) -> Error {
    Error::command(
        command,
        Status::new(
            StatusCodeType::MediaDataIntegrity.raw(),
            mismatch.check.status_code(),
            true,
        ),
    )
}

#[cfg(test)]
mod tests;
