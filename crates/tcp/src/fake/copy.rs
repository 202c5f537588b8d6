//! The fake target's Copy (NVM CS §3.3.2, opcode 19h): source ranges of descriptor format 0h
//! read from the command's data (in-capsule or by R2T, like a write's), checked against the
//! limits it reports ([`COPY_MSSRL`], [`COPY_MCL`], [`COPY_MSRC`]: Command Size Limit
//! Exceeded) and the namespace (LBA Out of Range) before anything moves; then the blocks are
//! copied, sources read before the destination is written.

use std::sync::atomic::Ordering;

use nvme_spec::command::{copy_control, slba, COPY_FORMAT_0};
use nvme_spec::queue::CopySourceRange;
use nvme_spec::status::{command_specific, generic};
use nvme_spec::{Status, StatusCodeType, SubmissionEntry};

use super::{Conn, Res};

/// Maximum Single Source Range Length the fake reports (blocks).
pub const COPY_MSSRL: u16 = 32;
/// Maximum Copy Length the fake reports (blocks).
pub const COPY_MCL: u32 = 64;
/// Maximum Source Range Count the fake reports (0-based: 8 ranges).
pub const COPY_MSRC: u8 = 7;

/// Bytes of one source range entry.
const RANGE_BYTES: usize = CopySourceRange::SIZE;

impl Conn<'_> {
    /// Serves a Copy on namespace `sqe.nsid` (`shift`: log2 of its block size, `blocks` its
    /// size) whose data, `len` bytes, came in the capsule (`data`) or is pulled now.
    pub(super) fn copy(
        &mut self,
        sqe: SubmissionEntry,
        data: Vec<u8>,
        in_capsule: bool,
        shift: u8,
        blocks: u64,
    ) -> Res<()> {
        let cid = sqe.cid();
        let len = sqe.sgl_len() as usize;
        let list = if in_capsule {
            data
        } else {
            self.pull(cid, len)?
        };
        let status = self.copy_blocks(&sqe, &list, shift, blocks);
        self.respond(cid, status, 0, 0)
    }

    fn copy_blocks(&self, sqe: &SubmissionEntry, list: &[u8], shift: u8, blocks: u64) -> Status {
        let generic = |sc| Status::new(StatusCodeType::Generic.raw(), sc, true);
        let size_limit = Status::new(
            StatusCodeType::CommandSpecific.raw(),
            command_specific::COMMAND_SIZE_LIMIT_EXCEEDED,
            true,
        );
        if !self.st.config.copy {
            return generic(generic::INVALID_OPCODE);
        }
        let control = copy_control(sqe);
        if control.format != COPY_FORMAT_0 {
            return generic(generic::INVALID_FIELD);
        }
        let count = control.ranges as usize;
        if count > usize::from(COPY_MSRC) + 1 {
            return size_limit;
        }
        if list.len() < count * RANGE_BYTES {
            return generic(generic::DATA_SGL_LENGTH_INVALID);
        }
        let ranges: Vec<CopySourceRange> = list
            .chunks_exact(RANGE_BYTES)
            .take(count)
            .map(|raw| CopySourceRange::from_bytes(raw.try_into().unwrap()))
            .collect();
        let total: u64 = ranges.iter().map(|r| u64::from(r.blocks())).sum();
        if ranges.iter().any(|r| r.blocks() > u32::from(COPY_MSSRL)) || total > u64::from(COPY_MCL)
        {
            return size_limit;
        }
        let dest = slba(sqe);
        let outside = |lba: u64, n: u64| !lba.checked_add(n).is_some_and(|end| end <= blocks);
        if ranges
            .iter()
            .any(|r| outside(r.slba, u64::from(r.blocks())))
            || outside(dest, total)
        {
            return generic(generic::LBA_OUT_OF_RANGE);
        }
        let mut disks = self.st.disks.lock().unwrap();
        let disk = disks.get_mut(&sqe.nsid).unwrap();
        let mut copied = Vec::with_capacity((total << shift) as usize);
        for r in &ranges {
            let start = (r.slba << shift) as usize;
            copied.extend_from_slice(&disk[start..start + ((r.blocks() as usize) << shift)]);
        }
        let start = (dest << shift) as usize;
        disk[start..start + copied.len()].copy_from_slice(&copied);
        self.st.counters.copies.fetch_add(1, Ordering::Relaxed);
        Status::SUCCESS
    }
}
