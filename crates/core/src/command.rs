//! Typed NVM commands (io-uring's `opcode::Read { .. }.build()` style): one value type per
//! command, built with small builders (`Write::new(lba, blocks).fua()`), and the
//! [`NvmCommand`] trait that states all a transport needs to submit one: the opcode (so the
//! data direction), the LBA range (for the range check and MDTS splitting, and a way to cut
//! the command at a block boundary), and how to fill the submission entry for a namespace.
//!
//! A transport's generic `submit(ns, cmd, buf, user_data)` ([`IoQueue::submit`]) uses only
//! the trait, so a new command is one type here and no transport code. Raw passthrough (any
//! entry, the caller vouching for what it transfers) stays an `unsafe fn` of the transports.
//!
//! Most commands move `blocks * block_size` bytes and may be cut at block boundaries; a
//! command whose data is something else (Copy: its source range list) says so through the
//! provided methods [`NvmCommand::data_bytes`] and [`NvmCommand::splittable`], and checks what
//! only it knows (controller support, its namespace's limits, its data) in
//! [`NvmCommand::check`]. Their defaults keep the other commands' code what it was.
//!
//! INVARIANT: every command with an LBA range encodes it as the NVM command set's common
//! layout (SLBA in CDW11:CDW10, NLB 0-based in CDW12 15:0), so [`IoCommand`] can re-range
//! any of them; the exception is [`Copy`](struct@Copy), whose range is its destination and which is never
//! split ([`NvmCommand::splittable`] is false). `sqe` leaves the command id and the data
//! pointer zero (the transport's).
//!
//! [`IoQueue::submit`]: crate::IoQueue::submit

use nvme_spec::command;
use nvme_spec::opcode::NvmOpcode;
use nvme_spec::queue::SubmissionEntry;
use nvme_spec::IdentifyController;

pub use nvme_spec::opcode::DataDirection;

pub use crate::copy::{Copy, CopyFormat, CopyLimit, CopyRanges};
use crate::error::Result;
use crate::flags::WriteFlags;
use crate::namespace::Namespace;
use crate::protection::erased;
pub use crate::protection::{Protected, Protection};
pub use crate::uncorrectable::WriteUncorrectable;

/// CDW12 bits 15:0: Number of Logical Blocks (0-based), the common NVM layout.
const NLB_MASK: u32 = 0xFFFF;

/// A run of `blocks` logical blocks from `lba`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LbaRange {
    /// First logical block.
    pub lba: u64,
    /// Number of blocks (1-based).
    pub blocks: u32,
}

impl LbaRange {
    /// `blocks` blocks from `lba`.
    #[inline(always)]
    pub const fn new(lba: u64, blocks: u32) -> Self {
        Self { lba, blocks }
    }
}

/// What a command may check itself against at submission besides its namespace: the
/// controller it goes to. Built by the transport from what it keeps anyway; a command that
/// does not look at it costs nothing (the default [`NvmCommand::check`] is empty).
#[derive(Clone, Copy, Debug)]
pub struct CommandContext<'a> {
    /// The controller's name (PCI address or transport id), for errors.
    pub controller: &'a str,
    /// Its Identify Controller data (ONCS, OCFS, ...).
    pub identify: &'a IdentifyController,
}

/// Bytes of `range` on `ns` (none without a range): what most commands move.
#[inline(always)]
fn range_bytes(range: Option<LbaRange>, ns: &Namespace) -> usize {
    match range {
        Some(r) => ns.blocks_to_bytes(u64::from(r.blocks)) as usize,
        None => 0,
    }
}

/// What a transport needs to know of an NVM I/O command to submit it.
///
/// Implementations are small `Copy` values; every method is meant to inline to constants
/// and stores, so a generic submission path is the same machine code as a hand-written one.
pub trait NvmCommand: core::marker::Copy {
    /// The command's opcode; its bits 1:0 give the data direction.
    fn opcode(&self) -> NvmOpcode;

    /// The blocks the command addresses (range-checked against the namespace, and the
    /// data length when it moves data), `None` for a command on the whole namespace (Flush).
    fn range(&self) -> Option<LbaRange>;

    /// The same command over `range`, a sub-range of [`NvmCommand::range`] (a split at a
    /// block boundary: MDTS, the 16-bit NLB). Commands without a range return themselves.
    fn with_range(self, range: LbaRange) -> Self;

    /// The submission entry for namespace `nsid`: opcode, NSID, CDW10-15. Command id and
    /// data pointer stay zero.
    fn sqe(&self, nsid: u32) -> SubmissionEntry;

    /// The submission entry for namespace `ns`, what transports send: [`NvmCommand::sqe`]
    /// for every command but the [`Protected`] ones, whose reference tag's upper bits (CDW3)
    /// only a 64-bit guard format has.
    #[inline(always)]
    fn sqe_on(&self, ns: &Namespace) -> SubmissionEntry {
        self.sqe(ns.nsid())
    }

    /// The direction of the command's data.
    #[inline(always)]
    fn direction(&self) -> DataDirection {
        self.opcode().direction()
    }

    /// Bytes of the data buffer a command that moves data transfers on `ns`: by default its
    /// range's blocks times the block size (0 without a range); Copy's is its source range
    /// list. The transport checks the buffer holds that much.
    #[inline(always)]
    fn data_bytes(&self, ns: &Namespace) -> usize {
        range_bytes(self.range(), ns)
    }

    /// Whether a transport may cut the command at block boundaries into several (MDTS, the
    /// 16-bit NLB) with [`NvmCommand::with_range`]. By default yes; a command that must reach
    /// the controller whole (Copy) says no, and a transport then refuses it when it does not
    /// fit one command.
    #[inline(always)]
    fn splittable(&self) -> bool {
        true
    }

    /// The namespace check of the command's range before anything else: by default that the
    /// handle is current and the range lies inside the namespace's blocks that plain
    /// commands may address ([`Namespace::check_range`]: none on a namespace with metadata,
    /// where only [`Protected`] commands, which say what moves, are taken).
    #[inline(always)]
    fn check_range(&self, ns: &Namespace) -> Result<()> {
        match self.range() {
            Some(r) => ns.check_range(r.lba, u64::from(r.blocks)),
            None => ns.check_current(),
        }
    }

    /// The command's protection fields (PRINFO, tags) when it is a [`Protected`] one; `None`
    /// (the default) for the plain commands.
    #[inline(always)]
    fn protection(&self) -> Option<Protection> {
        None
    }

    /// The command's own checks, after the namespace and range checks and the buffer checks
    /// (`data` is the buffer, at least [`NvmCommand::data_bytes`] long, of a command that
    /// moves data) and before anything is reserved or sent: for instance that the controller
    /// offers an optional command and that the command keeps to its namespace's limits. An
    /// error refuses the submission (the buffer comes back). By default none.
    #[inline(always)]
    fn check(&self, ns: &Namespace, ctx: &CommandContext<'_>, data: Option<&[u8]>) -> Result<()> {
        let _ = (ns, ctx, data);
        Ok(())
    }
}

/// A command that is a range and nothing else (Read, Compare, Verify): the type, its `new`,
/// and its [`NvmCommand`] impl, written once; `$sqe` builds the entry from the NSID and the
/// range.
macro_rules! range_command {
    ($(#[$doc:meta])* $name:ident, $what:literal, $sqe:expr) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        #[must_use = "a built command does nothing until it is submitted"]
        pub struct $name {
            /// The blocks the command addresses.
            pub range: LbaRange,
        }

        impl $name {
            #[doc = concat!("A ", $what, " of `blocks` blocks at `lba`.")]
            #[inline(always)]
            pub const fn new(lba: u64, blocks: u32) -> Self {
                Self {
                    range: LbaRange::new(lba, blocks),
                }
            }
        }

        impl NvmCommand for $name {
            #[inline(always)]
            fn opcode(&self) -> NvmOpcode {
                NvmOpcode::$name
            }
            #[inline(always)]
            fn range(&self) -> Option<LbaRange> {
                Some(self.range)
            }
            #[inline(always)]
            fn with_range(self, range: LbaRange) -> Self {
                Self { range }
            }
            #[inline(always)]
            fn sqe(&self, nsid: u32) -> SubmissionEntry {
                ($sqe)(nsid, self.range)
            }
        }
    };
}

range_command! {
    /// Read (NVM CS §3.3.4): the controller writes the blocks into the buffer.
    Read, "read", |nsid, r: LbaRange| command::read(nsid, r.lba, r.blocks)
}

/// Write (NVM CS §3.3.6): the controller reads the blocks from the buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use = "a built command does nothing until it is submitted"]
pub struct Write {
    /// The blocks written.
    pub range: LbaRange,
    /// Force Unit Access: on non-volatile media before the completion.
    pub fua: bool,
}

impl Write {
    /// A write of `blocks` blocks at `lba`.
    #[inline(always)]
    pub const fn new(lba: u64, blocks: u32) -> Self {
        Self {
            range: LbaRange::new(lba, blocks),
            fua: false,
        }
    }

    /// With Force Unit Access.
    #[inline(always)]
    pub const fn fua(self) -> Self {
        Self { fua: true, ..self }
    }

    /// With the given flags.
    #[inline(always)]
    pub const fn flags(self, flags: WriteFlags) -> Self {
        Self {
            fua: flags.fua(),
            ..self
        }
    }
}

impl NvmCommand for Write {
    #[inline(always)]
    fn opcode(&self) -> NvmOpcode {
        NvmOpcode::Write
    }
    #[inline(always)]
    fn range(&self) -> Option<LbaRange> {
        Some(self.range)
    }
    #[inline(always)]
    fn with_range(self, range: LbaRange) -> Self {
        Self { range, ..self }
    }
    #[inline(always)]
    fn sqe(&self, nsid: u32) -> SubmissionEntry {
        command::write(nsid, self.range.lba, self.range.blocks, self.fua)
    }
}

range_command! {
    /// Compare (NVM CS §3.3.1) of the blocks with the buffer; a mismatch completes with the
    /// Compare Failure status.
    Compare, "compare", |nsid, r: LbaRange| command::compare(nsid, r.lba, r.blocks)
}

/// Flush (Base §7.1) of the namespace's volatile write cache; no range, no data.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[must_use = "a built command does nothing until it is submitted"]
pub struct Flush;

impl NvmCommand for Flush {
    #[inline(always)]
    fn opcode(&self) -> NvmOpcode {
        NvmOpcode::Flush
    }
    #[inline(always)]
    fn range(&self) -> Option<LbaRange> {
        None
    }
    #[inline(always)]
    fn with_range(self, _range: LbaRange) -> Self {
        self
    }
    #[inline(always)]
    fn sqe(&self, nsid: u32) -> SubmissionEntry {
        command::flush(nsid)
    }
}

/// Write Zeroes (NVM CS §3.3.8) of the blocks; no data buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use = "a built command does nothing until it is submitted"]
pub struct WriteZeroes {
    /// The blocks zeroed.
    pub range: LbaRange,
    /// The controller may deallocate the blocks instead of writing them.
    pub deallocate: bool,
    /// Force Unit Access.
    pub fua: bool,
}

impl WriteZeroes {
    /// Zeroes `blocks` blocks at `lba`.
    #[inline(always)]
    pub const fn new(lba: u64, blocks: u32) -> Self {
        Self {
            range: LbaRange::new(lba, blocks),
            deallocate: false,
            fua: false,
        }
    }

    /// Lets the controller deallocate the blocks instead of writing zeroes.
    #[inline(always)]
    pub const fn deallocate(self) -> Self {
        Self {
            deallocate: true,
            ..self
        }
    }

    /// Sets the Deallocate bit to `deallocate`.
    #[inline(always)]
    pub const fn with_deallocate(self, deallocate: bool) -> Self {
        Self { deallocate, ..self }
    }

    /// With Force Unit Access.
    #[inline(always)]
    pub const fn fua(self) -> Self {
        Self { fua: true, ..self }
    }
}

impl NvmCommand for WriteZeroes {
    #[inline(always)]
    fn opcode(&self) -> NvmOpcode {
        NvmOpcode::WriteZeroes
    }
    #[inline(always)]
    fn range(&self) -> Option<LbaRange> {
        Some(self.range)
    }
    #[inline(always)]
    fn with_range(self, range: LbaRange) -> Self {
        Self { range, ..self }
    }
    #[inline(always)]
    fn sqe(&self, nsid: u32) -> SubmissionEntry {
        let r = self.range;
        command::write_zeroes(nsid, r.lba, r.blocks, self.deallocate, self.fua)
    }
}

range_command! {
    /// Verify (NVM CS §3.3.5): the controller reads the blocks and checks their integrity
    /// (end-to-end protection where the format has it); no data moves to or from the host.
    Verify, "verify", |nsid, r: LbaRange| SubmissionEntry {
        // CDW12: NLB (0-based) in 15:0; STC, PRINFO, FUA and LR stay clear.
        nsid,
        cdw10: r.lba as u32,
        cdw11: (r.lba >> 32) as u32,
        cdw12: r.blocks.wrapping_sub(1) & NLB_MASK,
        ..SubmissionEntry::new(NvmOpcode::Verify.byte())
    }
}

/// Any command above with its opcode and dwords kept as a built entry: the form a transport
/// stores a command in when it cannot keep the type (a software queue, a resubmission list).
#[derive(Clone, Copy, Debug)]
pub struct IoCommand {
    sqe: SubmissionEntry,
    range: Option<LbaRange>,
    /// The command was a [`Protected`] one: its PRINFO and tags are in the entry, and its
    /// metadata rules apply.
    protected: bool,
}

impl IoCommand {
    /// The erased form of `cmd`.
    #[inline]
    pub fn of<C: NvmCommand>(cmd: C) -> Self {
        Self {
            sqe: cmd.sqe(0),
            range: cmd.range(),
            protected: cmd.protection().is_some(),
        }
    }

    /// The typed Copy this is the erased form of, if it is one (its own rules apply).
    #[inline]
    fn as_copy(&self) -> Option<Copy> {
        if self.sqe.opcode() != NvmOpcode::Copy.byte() {
            return None;
        }
        Some(Copy::from_sqe(&self.sqe, self.range?.blocks))
    }
}

impl NvmCommand for IoCommand {
    #[inline]
    fn opcode(&self) -> NvmOpcode {
        match self.sqe.opcode() {
            b if b == NvmOpcode::Flush.byte() => NvmOpcode::Flush,
            b if b == NvmOpcode::Write.byte() => NvmOpcode::Write,
            b if b == NvmOpcode::Read.byte() => NvmOpcode::Read,
            b if b == NvmOpcode::WriteUncorrectable.byte() => NvmOpcode::WriteUncorrectable,
            b if b == NvmOpcode::Compare.byte() => NvmOpcode::Compare,
            b if b == NvmOpcode::WriteZeroes.byte() => NvmOpcode::WriteZeroes,
            b if b == NvmOpcode::DatasetManagement.byte() => NvmOpcode::DatasetManagement,
            b if b == NvmOpcode::Verify.byte() => NvmOpcode::Verify,
            b if b == NvmOpcode::ZoneMgmtSend.byte() => NvmOpcode::ZoneMgmtSend,
            b if b == NvmOpcode::ZoneMgmtRecv.byte() => NvmOpcode::ZoneMgmtRecv,
            b if b == NvmOpcode::ZoneAppend.byte() => NvmOpcode::ZoneAppend,
            _ => NvmOpcode::Copy,
        }
    }
    #[inline]
    fn range(&self) -> Option<LbaRange> {
        self.range
    }
    #[inline]
    fn with_range(self, range: LbaRange) -> Self {
        if let Some(copy) = self.as_copy() {
            return Self::of(copy.with_range(range));
        }
        let mut sqe = self.sqe;
        if self.range.is_some() {
            sqe.cdw10 = range.lba as u32;
            sqe.cdw11 = (range.lba >> 32) as u32;
            sqe.cdw12 = (sqe.cdw12 & !NLB_MASK) | (range.blocks.wrapping_sub(1) & NLB_MASK);
        }
        if self.protected {
            if let Some(old) = self.range {
                // The reference tag follows the blocks skipped (types 1 and 2).
                erased::advance_ref_tag(&mut sqe, range.lba.wrapping_sub(old.lba));
            }
        }
        Self {
            sqe,
            range: self.range.map(|_| range),
            protected: self.protected,
        }
    }
    #[inline]
    fn sqe(&self, nsid: u32) -> SubmissionEntry {
        SubmissionEntry { nsid, ..self.sqe }
    }
    #[inline]
    fn sqe_on(&self, ns: &Namespace) -> SubmissionEntry {
        let mut sqe = self.sqe(ns.nsid());
        if self.protected {
            erased::place(ns, &mut sqe);
        }
        sqe
    }
    #[inline]
    fn data_bytes(&self, ns: &Namespace) -> usize {
        if self.protected {
            return erased::data_bytes(ns, self.range, &erased::protection(&self.sqe));
        }
        if let Some(bytes) = crate::zns::erased::data_bytes(&self.sqe) {
            return bytes;
        }
        match self.as_copy() {
            Some(copy) => copy.data_bytes(ns),
            None => range_bytes(self.range, ns),
        }
    }
    #[inline]
    fn splittable(&self) -> bool {
        self.sqe.opcode() != NvmOpcode::Copy.byte()
            && !self.protected
            && !crate::zns::erased::is_zone(&self.sqe)
    }
    #[inline]
    fn direction(&self) -> DataDirection {
        if crate::zns::erased::send_without_data(&self.sqe) {
            return DataDirection::None;
        }
        self.opcode().direction()
    }
    #[inline]
    fn check_range(&self, ns: &Namespace) -> Result<()> {
        if self.protected {
            return erased::check_range(ns, self.range);
        }
        if let Some(copy) = self.as_copy() {
            return copy.check_range(ns);
        }
        match self.range {
            Some(r) => ns.check_range(r.lba, u64::from(r.blocks)),
            None => ns.check_current(),
        }
    }
    #[inline]
    fn protection(&self) -> Option<Protection> {
        self.protected.then(|| erased::protection(&self.sqe))
    }
    #[inline]
    fn check(&self, ns: &Namespace, ctx: &CommandContext<'_>, data: Option<&[u8]>) -> Result<()> {
        if self.protected {
            return erased::check(ns, self.range, &erased::protection(&self.sqe));
        }
        match self.as_copy() {
            Some(copy) => copy.check(ns, ctx, data),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builders_encode_the_spec_layout() {
        let w = Write::new(0x1_0000_0002, 8).fua().sqe(3);
        assert_eq!(w, command::write(3, 0x1_0000_0002, 8, true));
        assert_eq!(Read::new(5, 1).sqe(1), command::read(1, 5, 1));
        assert_eq!(
            WriteZeroes::new(9, 4).deallocate().sqe(2),
            command::write_zeroes(2, 9, 4, true, false)
        );
        assert_eq!(Flush.sqe(7), command::flush(7));
        assert_eq!(Flush.range(), None);
        assert_eq!(Compare::new(1, 2).direction(), DataDirection::ToDevice);
        assert_eq!(Read::new(1, 2).direction(), DataDirection::FromDevice);
        assert_eq!(WriteZeroes::new(1, 2).direction(), DataDirection::None);
    }

    #[test]
    fn erased_commands_re_range_like_the_typed_ones() {
        let typed = Write::new(100, 64).fua();
        let erased = IoCommand::of(typed);
        assert_eq!(erased.opcode(), NvmOpcode::Write);
        let part = LbaRange::new(132, 32);
        assert_eq!(
            erased.with_range(part).sqe(4),
            typed.with_range(part).sqe(4)
        );
        let v = Verify::new(0x2_0000_0001, 3).sqe(5);
        assert_eq!(v.opcode(), 0x0C);
        assert_eq!((command::slba(&v), command::nlb(&v)), (0x2_0000_0001, 3));
        assert_eq!(Verify::new(0, 1).direction(), DataDirection::None);
        let flush = IoCommand::of(Flush);
        assert_eq!(flush.range(), None);
        assert_eq!(flush.with_range(part).sqe(4), command::flush(4));
    }
}
