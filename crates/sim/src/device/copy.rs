//! Copy (NVM Command Set Specification 1.0 §3.3.2, opcode 19h) on the in-memory disks, when
//! `SimConfig::copy` offers it.
//!
//! The data buffer is the source range list: NR + 1 entries of descriptor format 0h
//! (`CopySourceRange`, 32 bytes) or, where `SimConfig::copy_format_1` offers it, 1h
//! (`CopySourceRangeFormat1`, 40 bytes), read through the data pointer like any
//! host-to-controller transfer. Everything is checked before a block moves, in the order the specification lists
//! the errors: descriptor format (Invalid Field in Command), NR + 1 against MSRC + 1, each
//! range against MSSRL and the total against MCL (Command Size Limit Exceeded), the source
//! ranges and the destination against the namespace (LBA Out of Range). The sources are read
//! first, in list order, then written to the destination, so a destination that overlaps a
//! source gets the data as it was before the command. A failed Copy copies nothing, so its
//! completion Dword 0 (the lowest source range not copied) is 0.

use nvme_spec::command::{copy_control, slba, COPY_FORMAT_0, COPY_FORMAT_1};
use nvme_spec::queue::{CopySourceRange, CopySourceRangeFormat1, SubmissionEntry, COPY_MAX_RANGES};
use nvme_spec::status::{command_specific, generic, Status, StatusCodeType};

use super::io::{block_range, metadata_range, status};
use super::uncorrectable::readable;
use super::Device;
use crate::dma::GuestView;
use crate::prp::Fail;

/// The largest source range list: 256 entries of the larger format (1h).
const LIST_MAX: usize = COPY_MAX_RANGES * CopySourceRangeFormat1::SIZE;

/// (first LBA, blocks) of one source range entry of descriptor format `format`.
fn source_range(format: u8, raw: &[u8]) -> (u64, u32) {
    if format == COPY_FORMAT_1 {
        let e = CopySourceRangeFormat1::from_bytes(raw.try_into().expect("a 1h entry"));
        (e.slba, e.blocks())
    } else {
        let e = CopySourceRange::from_bytes(raw.try_into().expect("a 0h entry"));
        (e.slba, e.blocks())
    }
}

/// Command Size Limit Exceeded (Command Specific Status 83h, DNR).
fn size_limit() -> Fail {
    Fail::Status(Status::new(
        StatusCodeType::CommandSpecific.raw(),
        command_specific::COMMAND_SIZE_LIMIT_EXCEEDED,
        true,
    ))
}

impl Device {
    /// Copy: validates the command, its list and every range, then copies.
    pub(super) fn copy(&self, view: &GuestView<'_>, sqe: &SubmissionEntry) -> Result<(), Fail> {
        let limits = self
            .shared
            .config
            .copy
            .expect("Copy is dispatched here only when the controller offers it");
        let disk = self.namespace(sqe.nsid)?;
        let control = copy_control(sqe);
        let entry_bytes = match control.format {
            COPY_FORMAT_0 => CopySourceRange::SIZE,
            COPY_FORMAT_1 if self.shared.config.copy_format_1 => CopySourceRangeFormat1::SIZE,
            _ => return Err(status(generic::INVALID_FIELD)),
        };
        let count = control.ranges as usize;
        if count > usize::from(limits.msrc) + 1 {
            return Err(size_limit());
        }
        let mut list = [0u8; LIST_MAX];
        let list = &mut list[..count * entry_bytes];
        self.read_command_data(view, sqe, list)?;
        let ranges = list
            .chunks_exact(entry_bytes)
            .map(|raw| source_range(control.format, raw));
        let mut total = 0u64;
        for (_, blocks) in ranges.clone() {
            if blocks > u32::from(limits.mssrl) {
                return Err(size_limit());
            }
            total += u64::from(blocks);
        }
        if total > u64::from(limits.mcl) {
            return Err(size_limit());
        }
        for (lba, blocks) in ranges.clone() {
            block_range(&disk, lba, u64::from(blocks))?;
        }
        for (lba, blocks) in ranges.clone() {
            readable(&disk, lba, u64::from(blocks))?;
        }
        let destination = slba(sqe);
        let (dest_start, dest_end) = block_range(&disk, destination, total)?;
        if self.shared.config.null_io {
            return Ok(());
        }
        // Sources first (the copy may overlap them), then the destination; extended blocks
        // carry their metadata, separate metadata follows its blocks.
        let mut blocks = Vec::with_capacity(dest_end - dest_start);
        let mut metadata = Vec::new();
        let data = disk.lock();
        for (lba, n) in ranges {
            let n = u64::from(n);
            let (start, end) = block_range(&disk, lba, n)?;
            blocks.extend_from_slice(&data[start..end]);
            if disk.separate_metadata() != 0 {
                let (start, end) = metadata_range(&disk, lba, n);
                metadata.extend_from_slice(&data[start..end]);
            }
        }
        drop(data);
        self.modify(&disk, (destination, total), control.fua, |dest| {
            dest.copy_from_slice(&blocks);
            Ok(())
        })?;
        if disk.separate_metadata() != 0 {
            let (start, end) = metadata_range(&disk, destination, total);
            disk.lock()[start..end].copy_from_slice(&metadata);
        }
        Ok(())
    }
}
