//! Copy (NVM CS §3.3.2, opcode 19h) as a typed command: the controller copies the blocks of
//! up to 256 source ranges, in list order, to consecutive blocks of the same namespace from
//! a destination LBA; no block data crosses to the host.
//!
//! The command's data buffer is the source range list (host to controller, 32 bytes per
//! range in descriptor format 0h, [`CopySourceRange`]; 40 bytes in format 1h,
//! [`CopySourceRangeFormat1`], for namespaces with a 32-bit or 64-bit guard: [`CopyFormat`]),
//! not `blocks * block_size`: [`Copy`]
//! says so through [`NvmCommand::data_bytes`] and refuses to be split at MDTS
//! ([`NvmCommand::splittable`]). [`CopyRanges`] writes the list into a buffer so callers
//! never pack bytes, and gives the command that matches it:
//!
//! ```
//! use nvme_core::command::{CopyRanges, LbaRange, NvmCommand};
//!
//! let mut list = vec![0u8; 4096]; // a DmaBuffer in real use (`&mut buf` coerces)
//! let mut ranges = CopyRanges::new(&mut list);
//! ranges.push(0, 8)?.push(100, 8)?;
//! let copy = ranges.copy_to(1000); // 16 blocks to LBAs 1000..1016
//! assert_eq!(copy.range(), Some(LbaRange::new(1000, 16)));
//! assert_eq!(copy.ranges, 2);
//! # Ok::<(), nvme_core::Error>(())
//! ```
//!
//! [`NvmCommand::check`] refuses, before anything reaches the device: a controller whose
//! Identify Controller ONCS lacks Copy or whose OCFS lacks the command's descriptor format
//! ([`Error::CommandNotSupported`]); more ranges than Identify Namespace MSRC + 1, a range
//! longer than MSSRL, more blocks in all than MCL ([`Error::CopyLimitExceeded`], where the
//! controller would answer Command Size Limit Exceeded); a source range outside the
//! namespace ([`Error::LbaOutOfRange`]); a list whose blocks do not add up to the command's
//! destination range. The destination range is [`NvmCommand::range`], so the transports'
//! range check covers it.

use std::fmt;

use nvme_spec::command::{self, CopyControl, COPY_FORMAT_0, COPY_FORMAT_1, MAX_NLB};
use nvme_spec::opcode::NvmOpcode;
use nvme_spec::queue::{CopySourceRange, CopySourceRangeFormat1, SubmissionEntry, COPY_MAX_RANGES};
use nvme_spec::{CopyFormats, Oncs};

use crate::command::{CommandContext, LbaRange, NvmCommand};
use crate::error::{Error, Result};
use crate::namespace::Namespace;

/// The Copy Descriptor Format of a Copy's source range list (NVM CS §3.3.2.1; CDW12 bits
/// 11:8), offered by the controller in Identify Controller OCFS.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum CopyFormat {
    /// Format 0h: 32-byte entries ([`CopySourceRange`]), 16-bit guard namespaces.
    #[default]
    Format0,
    /// Format 1h: 40-byte entries ([`CopySourceRangeFormat1`]), 32/64-bit guard namespaces.
    Format1,
}

impl CopyFormat {
    /// Bytes of one source range entry.
    #[inline]
    pub const fn entry_bytes(self) -> usize {
        match self {
            Self::Format0 => CopySourceRange::SIZE,
            Self::Format1 => CopySourceRangeFormat1::SIZE,
        }
    }

    /// The Descriptor Format field's value.
    #[inline]
    pub const fn code(self) -> u8 {
        match self {
            Self::Format0 => COPY_FORMAT_0,
            Self::Format1 => COPY_FORMAT_1,
        }
    }

    /// The format of a field value this crate wrote (anything but 1h reads as 0h).
    #[inline]
    const fn from_code(code: u8) -> Self {
        match code {
            COPY_FORMAT_1 => Self::Format1,
            _ => Self::Format0,
        }
    }

    /// Its OCFS bit, and the refusal's words when that bit is clear.
    const fn ocfs(self) -> (CopyFormats, &'static str) {
        match self {
            Self::Format0 => (
                CopyFormats::FORMAT_0,
                "Identify Controller OCFS bit 0 (Copy Descriptor Format 0h) is clear",
            ),
            Self::Format1 => (
                CopyFormats::FORMAT_1,
                "Identify Controller OCFS bit 1 (Copy Descriptor Format 1h) is clear",
            ),
        }
    }

    /// The entry `raw` (one entry's bytes) as (first LBA, blocks).
    fn decode(self, raw: &[u8]) -> (u64, u32) {
        match self {
            Self::Format0 => {
                let e = CopySourceRange::from_bytes(raw.try_into().expect("one format 0h entry"));
                (e.slba, e.blocks())
            }
            Self::Format1 => {
                let raw = raw.try_into().expect("one format 1h entry");
                let e = CopySourceRangeFormat1::from_bytes(raw);
                (e.slba, e.blocks())
            }
        }
    }

    /// Encodes a range of `blocks` blocks from `lba` (tags zero) into `out` (one entry).
    fn encode(self, lba: u64, blocks: u32, out: &mut [u8]) {
        match self {
            Self::Format0 => out.copy_from_slice(&CopySourceRange::new(lba, blocks).to_bytes()),
            Self::Format1 => {
                out.copy_from_slice(&CopySourceRangeFormat1::new(lba, blocks).to_bytes())
            }
        }
    }
}

/// Copy (NVM CS §3.3.2): the blocks of the `ranges` source ranges at the start of the data
/// buffer are copied to `range.blocks` consecutive blocks from `range.lba`.
///
/// Build it with [`CopyRanges::copy_to`] (the list and the command then agree), or with
/// [`Copy::new`] over a list written otherwise; the submission checks the list against the
/// command, the controller and the namespace (limits: MSRC, MSSRL, MCL).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use = "a built command does nothing until it is submitted"]
pub struct Copy {
    /// The destination: its first block, and the blocks of all source ranges together.
    pub range: LbaRange,
    /// Source ranges in the data buffer (1..=256; the namespace may allow fewer).
    pub ranges: u16,
    /// Force Unit Access for the destination writes.
    pub fua: bool,
    /// Limited Retry: the controller applies limited retry efforts.
    pub limited_retry: bool,
    /// The descriptor format of the source range list.
    pub format: CopyFormat,
}

impl Copy {
    /// A copy of the first `ranges` source ranges of the data buffer, `blocks` blocks in all,
    /// to consecutive blocks from `destination`.
    #[inline]
    pub const fn new(destination: u64, ranges: u16, blocks: u32) -> Self {
        Self {
            range: LbaRange::new(destination, blocks),
            ranges,
            fua: false,
            limited_retry: false,
            format: CopyFormat::Format0,
        }
    }

    /// With source ranges of descriptor format `format`.
    #[inline]
    pub const fn format(self, format: CopyFormat) -> Self {
        Self { format, ..self }
    }

    /// With Force Unit Access.
    #[inline]
    pub const fn fua(self) -> Self {
        Self { fua: true, ..self }
    }

    /// With Limited Retry.
    #[inline]
    pub const fn limited_retry(self) -> Self {
        Self {
            limited_retry: true,
            ..self
        }
    }

    /// Bytes of the source range list the command sends (32 per range in format 0h, 40 in
    /// format 1h).
    #[inline]
    pub const fn list_bytes(&self) -> usize {
        self.ranges as usize * self.format.entry_bytes()
    }

    /// The command of a built entry whose destination covers `blocks` blocks.
    pub(crate) fn from_sqe(sqe: &SubmissionEntry, blocks: u32) -> Self {
        let control = command::copy_control(sqe);
        Self {
            range: LbaRange::new(command::slba(sqe), blocks),
            ranges: control.ranges as u16,
            fua: control.fua,
            limited_retry: control.limited_retry,
            format: CopyFormat::from_code(control.format),
        }
    }

    /// Whether the controller offers Copy with source ranges of the command's format.
    fn check_support(&self, ctx: &CommandContext<'_>) -> Result<()> {
        let (bit, clear) = self.format.ocfs();
        let why = if !ctx.identify.oncs_flags().contains(Oncs::COPY) {
            "Identify Controller ONCS bit 8 (Copy) is clear"
        } else if !ctx.identify.copy_formats().contains(bit) {
            clear
        } else {
            return Ok(());
        };
        Err(Error::CommandNotSupported {
            controller: ctx.controller.to_owned(),
            command: NvmOpcode::Copy.name(),
            why,
        })
    }

    /// The source ranges against the namespace and its limits, in list order; returns the
    /// blocks they hold together.
    fn check_list(&self, ns: &Namespace, list: &[u8]) -> Result<u64> {
        let id = ns.identify();
        let limit = |limit, requested: u64, max: u64| Error::CopyLimitExceeded {
            nsid: ns.nsid(),
            limit,
            requested,
            max,
        };
        let max_ranges = id.copy_max_ranges();
        if self.ranges > max_ranges {
            return Err(limit(
                CopyLimit::SourceRanges,
                u64::from(self.ranges),
                u64::from(max_ranges),
            ));
        }
        let mut total = 0u64;
        for (index, raw) in list
            .chunks_exact(self.format.entry_bytes())
            .take(usize::from(self.ranges))
            .enumerate()
        {
            let (slba, blocks) = self.format.decode(raw);
            let blocks = u64::from(blocks);
            if blocks > u64::from(id.mssrl) {
                let range = index as u16;
                return Err(limit(
                    CopyLimit::RangeBlocks { range },
                    blocks,
                    u64::from(id.mssrl),
                ));
            }
            ns.check_blocks(slba, blocks)?;
            total += blocks;
        }
        if total > u64::from(id.mcl) {
            return Err(limit(CopyLimit::TotalBlocks, total, u64::from(id.mcl)));
        }
        Ok(total)
    }
}

impl NvmCommand for Copy {
    #[inline(always)]
    fn opcode(&self) -> NvmOpcode {
        NvmOpcode::Copy
    }

    /// The destination range (range-checked by the transport like any command's).
    #[inline(always)]
    fn range(&self) -> Option<LbaRange> {
        Some(self.range)
    }

    /// No block data crosses to the host, so the destination may lie anywhere in the
    /// namespace whatever its metadata format (the sources are checked with the list).
    #[inline]
    fn check_range(&self, ns: &Namespace) -> Result<()> {
        ns.check_blocks(self.range.lba, u64::from(self.range.blocks))
    }

    /// A Copy cannot be cut ([`NvmCommand::splittable`] is false): this moves the destination
    /// to `range.lba` and keeps the block count of the source ranges.
    #[inline(always)]
    fn with_range(self, range: LbaRange) -> Self {
        Self {
            range: LbaRange::new(range.lba, self.range.blocks),
            ..self
        }
    }

    #[inline(always)]
    fn sqe(&self, nsid: u32) -> SubmissionEntry {
        let control = CopyControl {
            fua: self.fua,
            limited_retry: self.limited_retry,
            format: self.format.code(),
            ..CopyControl::new(u32::from(self.ranges))
        };
        command::copy(nsid, self.range.lba, control)
    }

    /// The source range list: 32 or 40 bytes per range.
    #[inline(always)]
    fn data_bytes(&self, _ns: &Namespace) -> usize {
        self.list_bytes()
    }

    /// Never: the ranges must reach the controller in one command.
    #[inline(always)]
    fn splittable(&self) -> bool {
        false
    }

    fn check(&self, ns: &Namespace, ctx: &CommandContext<'_>, data: Option<&[u8]>) -> Result<()> {
        self.check_support(ctx)?;
        if self.ranges == 0 {
            return Err(Error::InvalidRequest(
                "a Copy needs at least one source range".into(),
            ));
        }
        let Some(list) = data.filter(|d| d.len() >= self.list_bytes()) else {
            return Err(Error::BufferTooSmall {
                needed: self.list_bytes(),
                len: data.map_or(0, <[u8]>::len),
            });
        };
        let total = self.check_list(ns, list)?;
        if total != u64::from(self.range.blocks) {
            return Err(Error::InvalidRequest(format!(
                "the Copy's {} source ranges hold {total} blocks but its destination range is {} \
                 blocks: build the command with CopyRanges::copy_to",
                self.ranges, self.range.blocks
            )));
        }
        Ok(())
    }
}

/// Which Copy limit of a namespace a command exceeded ([`Error::CopyLimitExceeded`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CopyLimit {
    /// Source ranges in one command: Identify Namespace MSRC + 1.
    SourceRanges,
    /// Blocks in one source range: MSSRL.
    RangeBlocks {
        /// The range's position in the list (0-based).
        range: u16,
    },
    /// Blocks of all source ranges together: MCL.
    TotalBlocks,
}

impl CopyLimit {
    /// The Identify Namespace field the limit comes from.
    pub const fn field(&self) -> &'static str {
        match self {
            Self::SourceRanges => "Identify Namespace MSRC + 1, Maximum Source Range Count",
            Self::RangeBlocks { .. } => {
                "Identify Namespace MSSRL, Maximum Single Source Range Length"
            }
            Self::TotalBlocks => "Identify Namespace MCL, Maximum Copy Length",
        }
    }
}

impl fmt::Display for CopyLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::SourceRanges => f.write_str("the number of source ranges"),
            Self::RangeBlocks { range } => {
                write!(f, "the length of source range {range} in blocks")
            }
            Self::TotalBlocks => f.write_str("the number of blocks of all source ranges"),
        }
    }
}

/// A writer of a Copy's source range list (descriptor format 0h, or another with
/// [`CopyRanges::with_format`]) into a buffer, usually the `DmaBuffer` that goes with the
/// command: ranges are encoded in place, one entry each (32 bytes in format 0h), from the
/// start of the buffer.
#[derive(Debug)]
pub struct CopyRanges<'a> {
    list: &'a mut [u8],
    count: u16,
    blocks: u32,
    format: CopyFormat,
}

impl<'a> CopyRanges<'a> {
    /// An empty format 0h list at the start of `buf` (room for `buf.len() / 32` ranges, at
    /// most 256).
    pub fn new(buf: &'a mut [u8]) -> Self {
        Self::with_format(buf, CopyFormat::Format0)
    }

    /// An empty list of descriptor format `format` at the start of `buf`.
    pub fn with_format(buf: &'a mut [u8], format: CopyFormat) -> Self {
        Self {
            list: buf,
            count: 0,
            blocks: 0,
            format,
        }
    }

    /// Appends a source range of `blocks` (1..=65536) blocks from `lba`. Refused: zero blocks
    /// ([`Error::ZeroLength`]), more than one entry's 16-bit count or than 256 ranges
    /// ([`Error::InvalidRequest`]), a buffer without room for another entry
    /// ([`Error::BufferTooSmall`]). The namespace and its limits are checked at submission.
    pub fn push(&mut self, lba: u64, blocks: u32) -> Result<&mut Self> {
        if blocks == 0 {
            return Err(Error::ZeroLength);
        }
        if blocks > MAX_NLB {
            return Err(Error::InvalidRequest(format!(
                "a Copy source range has at most {MAX_NLB} blocks (NLB is 16 bits), not {blocks}: \
                 push several ranges"
            )));
        }
        if usize::from(self.count) == COPY_MAX_RANGES {
            return Err(Error::InvalidRequest(format!(
                "a Copy carries at most {COPY_MAX_RANGES} source ranges (NR is 8 bits): use \
                 another command for the rest"
            )));
        }
        let size = self.format.entry_bytes();
        let at = usize::from(self.count) * size;
        let Some(entry) = self.list.get_mut(at..at + size) else {
            return Err(Error::BufferTooSmall {
                needed: at + size,
                len: self.list.len(),
            });
        };
        self.format.encode(lba, blocks, entry);
        self.count += 1;
        self.blocks += blocks;
        Ok(self)
    }

    /// Ranges written.
    pub fn len(&self) -> u16 {
        self.count
    }

    /// Whether no range was written.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Blocks of all ranges written.
    pub fn blocks(&self) -> u32 {
        self.blocks
    }

    /// The Copy of the ranges written to consecutive blocks from `destination`.
    pub fn copy_to(&self, destination: u64) -> Copy {
        Copy::new(destination, self.count, self.blocks).format(self.format)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvme_spec::{IdentifyController, IdentifyNamespace, LbaFormat};

    fn namespace(mssrl: u16, mcl: u32, msrc: u8) -> Namespace {
        let mut lbaf = [LbaFormat::default(); 64];
        lbaf[0] = LbaFormat::new(9, 0);
        let id = IdentifyNamespace {
            nsze: 1000,
            ncap: 1000,
            lbaf,
            mssrl,
            mcl,
            msrc,
            ..IdentifyNamespace::default()
        };
        Namespace::from_identify(1, id, 1 << 20).unwrap()
    }

    fn controller(oncs: Oncs, ocfs: CopyFormats) -> IdentifyController {
        IdentifyController {
            oncs: oncs.bits(),
            ocfs: ocfs.bits(),
            ..IdentifyController::default()
        }
    }

    fn check(copy: Copy, ns: &Namespace, id: &IdentifyController, list: &[u8]) -> Result<()> {
        let ctx = CommandContext {
            controller: "test",
            identify: id,
        };
        copy.check(ns, &ctx, Some(list))
    }

    #[test]
    fn the_writer_encodes_format_0_entries_and_the_matching_command() {
        let mut buf = vec![0xAAu8; 100];
        let mut r = CopyRanges::new(&mut buf);
        assert!(r.is_empty());
        r.push(0x1_0000_0001, 3).unwrap().push(7, 65536).unwrap();
        r.push(9, 1).unwrap();
        let copy = r.copy_to(500);
        assert_eq!((r.len(), r.blocks()), (3, 65540));
        assert_eq!(copy, Copy::new(500, 3, 65540));
        let first = CopySourceRange::from_bytes(buf[..32].try_into().unwrap());
        assert_eq!((first.slba, first.nlb, first.eilbrt), (0x1_0000_0001, 2, 0));
        let second = CopySourceRange::from_bytes(buf[32..64].try_into().unwrap());
        assert_eq!((second.slba, second.blocks()), (7, 65536));
        // Room for exactly three 32-byte entries in 100 bytes.
        let mut r = CopyRanges::new(&mut buf);
        for lba in 0..3 {
            r.push(lba, 1).unwrap();
        }
        assert!(matches!(
            r.push(3, 1),
            Err(Error::BufferTooSmall {
                needed: 128,
                len: 100
            })
        ));
        assert!(matches!(r.push(3, 0), Err(Error::ZeroLength)));
        assert!(matches!(r.push(3, 65537), Err(Error::InvalidRequest(_))));
        let mut big = vec![0u8; 257 * 32];
        let mut r = CopyRanges::new(&mut big);
        for lba in 0..256 {
            r.push(lba, 1).unwrap();
        }
        assert!(matches!(r.push(256, 1), Err(Error::InvalidRequest(_))));
    }

    #[test]
    fn the_command_is_its_destination_and_list() {
        let copy = Copy::new(0x2_0000_0010, 4, 20).fua();
        let sqe = copy.sqe(7);
        assert_eq!(sqe.opcode(), 0x19);
        assert_eq!((sqe.nsid, command::slba(&sqe)), (7, 0x2_0000_0010));
        let control = command::copy_control(&sqe);
        assert_eq!(
            (control.ranges, control.format, control.fua),
            (4, COPY_FORMAT_0, true)
        );
        assert!(!control.limited_retry);
        assert_eq!(copy.direction(), crate::command::DataDirection::ToDevice);
        let ns = namespace(128, 128, 127);
        assert_eq!(copy.data_bytes(&ns), 128);
        assert!(!copy.splittable());
        assert_eq!(copy.range(), Some(LbaRange::new(0x2_0000_0010, 20)));
        // Moving it keeps its length; the erased form keeps all of it.
        let moved = copy.with_range(LbaRange::new(9, 1));
        assert_eq!(moved.range, LbaRange::new(9, 20));
        let erased = crate::IoCommand::of(copy);
        assert_eq!(erased.opcode(), NvmOpcode::Copy);
        assert_eq!(erased.sqe(7), sqe);
        assert_eq!(erased.data_bytes(&ns), 128);
        assert!(!erased.splittable());
        assert_eq!(erased.with_range(LbaRange::new(9, 1)).sqe(7), moved.sqe(7));
        assert_eq!(Copy::from_sqe(&sqe, 20), copy);
    }

    #[test]
    fn a_copy_may_target_a_namespace_with_metadata() {
        let mut lbaf = [LbaFormat::default(); 64];
        lbaf[0] = LbaFormat::new(9, 16);
        let id = IdentifyNamespace {
            nsze: 1000,
            ncap: 1000,
            lbaf,
            ..IdentifyNamespace::default()
        };
        let ns = Namespace::from_identify(5, id, 1 << 20).unwrap();
        // A plain Read may not (its metadata would have nowhere to go); a Copy moves none.
        assert!(crate::command::Read::new(10, 2).check_range(&ns).is_err());
        let copy = Copy::new(10, 1, 2);
        assert!(copy.check_range(&ns).is_ok());
        assert!(crate::IoCommand::of(copy).check_range(&ns).is_ok());
        assert!(matches!(
            Copy::new(999, 1, 2).check_range(&ns),
            Err(Error::LbaOutOfRange { .. })
        ));
    }

    #[test]
    fn format_1_lists_are_40_byte_entries_checked_like_format_0() {
        let ns = namespace(16, 40, 3);
        let mut buf = vec![0xAAu8; 4 * 40];
        let mut r = CopyRanges::with_format(&mut buf, CopyFormat::Format1);
        r.push(1, 3).unwrap().push(100, 16).unwrap();
        let copy = r.copy_to(500);
        assert_eq!((copy.format, copy.list_bytes()), (CopyFormat::Format1, 80));
        assert_eq!(copy.data_bytes(&ns), 80);
        let second = CopySourceRangeFormat1::from_bytes(buf[40..80].try_into().unwrap());
        assert_eq!((second.slba, second.blocks()), (100, 16));
        let sqe = copy.sqe(1);
        assert_eq!(command::copy_control(&sqe).format, COPY_FORMAT_1);
        assert_eq!(Copy::from_sqe(&sqe, 19), copy);
        // Offered (OCFS bit 1): accepted; a controller with format 0h only refuses by name.
        let both = controller(Oncs::COPY, CopyFormats::FORMAT_0 | CopyFormats::FORMAT_1);
        assert!(check(copy, &ns, &both, &buf).is_ok());
        let e = check(
            copy,
            &ns,
            &controller(Oncs::COPY, CopyFormats::FORMAT_0),
            &buf,
        );
        assert!(
            matches!(&e, Err(Error::CommandNotSupported { why, .. }) if why.contains("OCFS bit 1")),
            "{e:?}"
        );
        // The limits read the 40-byte entries: MSSRL on the second range.
        let mut r = CopyRanges::with_format(&mut buf, CopyFormat::Format1);
        r.push(0, 1).unwrap().push(100, 17).unwrap();
        let e = check(r.copy_to(500), &ns, &both, &buf).unwrap_err();
        assert!(
            matches!(
                e,
                Error::CopyLimitExceeded {
                    limit: CopyLimit::RangeBlocks { range: 1 },
                    ..
                }
            ),
            "{e:?}"
        );
        // Room for exactly four 40-byte entries in 160 bytes.
        let mut r = CopyRanges::with_format(&mut buf, CopyFormat::Format1);
        for lba in 0..4 {
            r.push(lba, 1).unwrap();
        }
        assert!(matches!(
            r.push(4, 1),
            Err(Error::BufferTooSmall {
                needed: 200,
                len: 160
            })
        ));
    }

    #[test]
    fn submission_checks_support_limits_and_ranges() {
        let ns = namespace(16, 40, 3); // 16 blocks a range, 40 in all, 4 ranges
        let id = controller(Oncs::COPY, CopyFormats::FORMAT_0);
        let mut buf = vec![0u8; 8 * 32];
        let mut r = CopyRanges::new(&mut buf);
        r.push(0, 16)
            .unwrap()
            .push(100, 16)
            .unwrap()
            .push(200, 8)
            .unwrap();
        let copy = r.copy_to(500);
        assert!(check(copy, &ns, &id, &buf).is_ok());
        // Not offered: ONCS, then OCFS.
        let e = check(
            copy,
            &ns,
            &controller(Oncs::empty(), CopyFormats::FORMAT_0),
            &buf,
        );
        assert!(
            matches!(&e, Err(Error::CommandNotSupported { command: "Copy", why, .. }) if why.contains("ONCS")),
            "{e:?}"
        );
        let e = check(
            copy,
            &ns,
            &controller(Oncs::COPY, CopyFormats::FORMAT_1),
            &buf,
        );
        assert!(
            matches!(&e, Err(Error::CommandNotSupported { why, .. }) if why.contains("OCFS bit 0")),
            "{e:?}"
        );
        // MCL: 16 + 16 + 16 = 48 > 40.
        let mut r = CopyRanges::new(&mut buf);
        r.push(0, 16)
            .unwrap()
            .push(100, 16)
            .unwrap()
            .push(200, 16)
            .unwrap();
        let e = check(r.copy_to(500), &ns, &id, &buf).unwrap_err();
        assert!(
            matches!(
                e,
                Error::CopyLimitExceeded {
                    nsid: 1,
                    limit: CopyLimit::TotalBlocks,
                    requested: 48,
                    max: 40
                }
            ),
            "{e:?}"
        );
        assert!(e.to_string().contains("MCL"), "{e}");
        // MSSRL: the second range has 17 blocks.
        let mut r = CopyRanges::new(&mut buf);
        r.push(0, 1).unwrap().push(100, 17).unwrap();
        let e = check(r.copy_to(500), &ns, &id, &buf).unwrap_err();
        assert!(
            matches!(
                e,
                Error::CopyLimitExceeded {
                    limit: CopyLimit::RangeBlocks { range: 1 },
                    requested: 17,
                    max: 16,
                    ..
                }
            ),
            "{e:?}"
        );
        assert!(e.to_string().contains("MSSRL"), "{e}");
        // MSRC: 5 ranges > 3 + 1.
        let mut r = CopyRanges::new(&mut buf);
        for lba in 0..5 {
            r.push(lba * 10, 1).unwrap();
        }
        let e = check(r.copy_to(500), &ns, &id, &buf).unwrap_err();
        assert!(
            matches!(
                e,
                Error::CopyLimitExceeded {
                    limit: CopyLimit::SourceRanges,
                    requested: 5,
                    max: 4,
                    ..
                }
            ),
            "{e:?}"
        );
        assert!(e.to_string().contains("MSRC"), "{e}");
        // A source range beyond the namespace's 1000 blocks.
        let mut r = CopyRanges::new(&mut buf);
        r.push(995, 8).unwrap();
        let e = check(r.copy_to(0), &ns, &id, &buf).unwrap_err();
        assert!(
            matches!(
                e,
                Error::LbaOutOfRange {
                    lba: 995,
                    blocks: 8,
                    ..
                }
            ),
            "{e:?}"
        );
        // A command that does not match its list, one without ranges, a short list.
        let mut r = CopyRanges::new(&mut buf);
        r.push(0, 16)
            .unwrap()
            .push(100, 16)
            .unwrap()
            .push(200, 8)
            .unwrap();
        let e = check(Copy::new(500, 1, 3), &ns, &id, &buf).unwrap_err();
        assert!(matches!(e, Error::InvalidRequest(_)), "{e:?}");
        let e = check(Copy::new(500, 0, 3), &ns, &id, &buf).unwrap_err();
        assert!(matches!(e, Error::InvalidRequest(_)), "{e:?}");
        let e = check(copy, &ns, &id, &buf[..64]).unwrap_err();
        assert!(
            matches!(
                e,
                Error::BufferTooSmall {
                    needed: 96,
                    len: 64
                }
            ),
            "{e:?}"
        );
    }
}
