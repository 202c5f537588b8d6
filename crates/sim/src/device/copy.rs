//! Copy (NVM Command Set Specification 1.0 §3.3.2, opcode 19h) on the in-memory disks, when
//! `SimConfig::copy` offers it.
//!
//! The data buffer is the source range list: NR + 1 entries of descriptor format 0h
//! (`CopySourceRange`, 32 bytes), read through the data pointer like any host-to-controller
//! transfer. Everything is checked before a block moves, in the order the specification lists
//! the errors: descriptor format (Invalid Field in Command), NR + 1 against MSRC + 1, each
//! range against MSSRL and the total against MCL (Command Size Limit Exceeded), the source
//! ranges and the destination against the namespace (LBA Out of Range). The sources are read
//! first, in list order, then written to the destination, so a destination that overlaps a
//! source gets the data as it was before the command. A failed Copy copies nothing, so its
//! completion Dword 0 (the lowest source range not copied) is 0.

use nvme_spec::command::{copy_control, slba, COPY_FORMAT_0};
use nvme_spec::queue::{CopySourceRange, SubmissionEntry, COPY_MAX_RANGES};
use nvme_spec::status::{command_specific, generic, Status, StatusCodeType};

use super::io::{block_range, metadata_range, status};
use super::Device;
use crate::dma::GuestView;
use crate::prp::Fail;

/// Bytes of one source range entry (format 0h).
const RANGE_BYTES: usize = CopySourceRange::SIZE;
/// The largest source range list: 256 entries.
const LIST_MAX: usize = COPY_MAX_RANGES * RANGE_BYTES;

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
        if control.format != COPY_FORMAT_0 {
            return Err(status(generic::INVALID_FIELD));
        }
        let count = control.ranges as usize;
        if count > usize::from(limits.msrc) + 1 {
            return Err(size_limit());
        }
        let mut list = [0u8; LIST_MAX];
        let list = &mut list[..count * RANGE_BYTES];
        self.read_command_data(view, sqe, list)?;
        let ranges = list.chunks_exact(RANGE_BYTES).map(|raw| {
            let raw: &[u8; RANGE_BYTES] = raw.try_into().expect("chunks_exact yields entries");
            CopySourceRange::from_bytes(raw)
        });
        let mut total = 0u64;
        for range in ranges.clone() {
            if range.blocks() > u32::from(limits.mssrl) {
                return Err(size_limit());
            }
            total += u64::from(range.blocks());
        }
        if total > u64::from(limits.mcl) {
            return Err(size_limit());
        }
        for range in ranges.clone() {
            block_range(&disk, range.slba, u64::from(range.blocks()))?;
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
        for range in ranges {
            let n = u64::from(range.blocks());
            let (start, end) = block_range(&disk, range.slba, n)?;
            blocks.extend_from_slice(&data[start..end]);
            if disk.separate_metadata() != 0 {
                let (start, end) = metadata_range(&disk, range.slba, n);
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
