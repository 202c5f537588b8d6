//! Write Uncorrectable (NVM CS §3.3.7, opcode 04h), when `SimConfig::write_uncorrectable`
//! offers it: the blocks are marked invalid on their namespace's [`Disk`]; a Read, Compare or
//! Verify that touches one completes with Unrecovered Read Error (Media and Data Integrity
//! Errors, 81h) and moves no data, as does a Copy whose source range touches one. Any write
//! of a block (Write, Write Zeroes, a deallocation, a Copy destination) clears the mark: the
//! write paths (`modify`, the protection information store) call [`Disk::clear_uncorrectable`].
//! A format replaces the namespace, and the marks with it.

use nvme_spec::command::{nlb, slba};
use nvme_spec::queue::SubmissionEntry;
use nvme_spec::status::{media, Status, StatusCodeType};

use super::io::block_range;
use super::Device;
use crate::disk::Disk;
use crate::prp::Fail;

/// Unrecovered Read Error (SCT 2h, SC 81h), with Do Not Retry: the mark stays until a write.
fn unrecovered() -> Fail {
    Fail::Status(Status::new(
        StatusCodeType::MediaDataIntegrity.raw(),
        media::UNRECOVERED_READ_ERROR,
        true,
    ))
}

/// Fails with Unrecovered Read Error when any of `nlb` blocks from `slba` is marked.
pub(super) fn readable(disk: &Disk, slba: u64, nlb: u64) -> Result<(), Fail> {
    if disk.is_uncorrectable(slba, nlb) {
        return Err(unrecovered());
    }
    Ok(())
}

impl Device {
    /// Write Uncorrectable: range checked, then the blocks are marked.
    pub(super) fn write_uncorrectable(&self, sqe: &SubmissionEntry) -> Result<(), Fail> {
        let disk = self.namespace(sqe.nsid)?;
        let (first, count) = (slba(sqe), u64::from(nlb(sqe)));
        block_range(&disk, first, count)?;
        disk.mark_uncorrectable(first, count);
        Ok(())
    }
}
