//! NVM command set I/O commands (NVM Command Set Specification 1.0 §3) on the in-memory disks
//! (Copy in `copy.rs`).
//!
//! Every command that addresses blocks is checked against the namespace size (LBA Out of
//! Range) and, when it moves data, against MDTS (Invalid Field). Data moves one PRP segment at
//! a time between guest memory and the namespace bytes, with no allocation.

use nvme_spec::command::{dsm_deallocate, dsm_ranges, fua, nlb, slba};
use nvme_spec::opcode::nvm;
use nvme_spec::queue::{DsmRange, SubmissionEntry};
use nvme_spec::regs::CC_CSS_ALL_IO;
use nvme_spec::sgl::Psdt;
use nvme_spec::status::{generic, media, Status, StatusCodeType};

use std::sync::Arc;

use super::{pi, uncorrectable, Device, Outcome};
use crate::disk::Disk;
use crate::dma::GuestView;
use crate::prp::{generic_status, Fail};
use crate::sgl::walk_data_pointer;
use crate::stats::bump;

/// Flush to every namespace (Base §7.1: NSID FFFFFFFFh).
const NSID_BROADCAST: u32 = u32::MAX;
/// Size of one Dataset Management range descriptor.
const DSM_RANGE_SIZE: usize = DsmRange::SIZE;
/// Largest DSM range list: 256 descriptors of 16 bytes.
const DSM_LIST_MAX: usize = nvme_spec::queue::DSM_MAX_RANGES * DSM_RANGE_SIZE;
/// Compare reads guest data through a stack buffer of this many bytes.
const COMPARE_CHUNK: usize = 4096;
/// MPTR must be dword aligned (NVMe Base 2.0 §4.1: the two low bits are reserved).
const MPTR_ALIGN: u64 = 4;

pub(super) fn status(sc: u8) -> Fail {
    Fail::Status(generic_status(sc))
}

/// Byte range `[start, end)` of `nlb` blocks from `slba` in `disk` (extended blocks include
/// their metadata), or LBA Out of Range.
pub(super) fn block_range(disk: &Disk, slba: u64, nlb: u64) -> Result<(usize, usize), Fail> {
    match slba.checked_add(nlb) {
        Some(end) if end <= disk.blocks => {
            let bs = disk.lba_stride();
            // Fits in usize: the namespace was allocated with at least `blocks * stride` bytes.
            Ok(((slba * bs) as usize, (end * bs) as usize))
        }
        _ => Err(status(generic::LBA_OUT_OF_RANGE)),
    }
}

/// Byte range of the separate metadata of `nlb` blocks from `slba` (already range checked).
pub(super) fn metadata_range(disk: &Disk, slba: u64, nlb: u64) -> (usize, usize) {
    let ms = u64::from(disk.separate_metadata());
    let base = disk.metadata_base();
    (
        (base + slba * ms) as usize,
        (base + (slba + nlb) * ms) as usize,
    )
}

impl Device {
    pub(super) fn io_command(&mut self, view: &GuestView<'_>, sqe: &SubmissionEntry) -> Outcome {
        let counters = &self.shared.counters;
        let opcode = sqe.opcode();
        bump(match opcode {
            nvm::READ => &counters.reads,
            nvm::WRITE => &counters.writes,
            nvm::FLUSH => &counters.flushes,
            nvm::WRITE_ZEROES
            | nvm::WRITE_UNCORRECTABLE
            | nvm::DATASET_MANAGEMENT
            | nvm::COMPARE
            | nvm::VERIFY
            | nvm::COPY
            | nvm::ZONE_APPEND
            | nvm::ZONE_MGMT_SEND
            | nvm::ZONE_MGMT_RECV => &counters.other_io,
            _ => &counters.invalid_io,
        });
        if let Err(off) = self.power_gate() {
            return self.outcome(Err(off));
        }
        if let Some(injected) = self.shared.faults.take_fail_io() {
            return Outcome::status(injected);
        }
        if sqe.psdt() != 0 {
            bump(&counters.sgl_commands);
        }
        // The data pointer (PRPs or an SGL, by PSDT) is checked where data moves.
        let psdt_ok = match Psdt::from_raw(sqe.psdt()) {
            Some(Psdt::Prp) => true,
            Some(Psdt::SglMptrContiguous) => self.shared.config.sgl,
            // Metadata SGLs are not offered; 11b is reserved.
            Some(Psdt::SglMptrSgl) | None => false,
        };
        let result = if sqe.fuse() != 0 {
            // A fused entry outside a pair the fetch took together (`fused`).
            Err(status(self.lone_fused_status()))
        } else if !psdt_ok {
            // SGLs are refused when `SimConfig::sgl` is off (Identify SGLS = 0).
            Err(status(generic::INVALID_FIELD))
        } else {
            match opcode {
                // The zoned namespace (ZNS CS 1.1): writes at the write pointer, the zone
                // commands; Write Zeroes and Copy are not offered there.
                // With CC.CSS = NVM the zoned namespace takes the NVM commands only (QEMU
                // 7.2 does the same): the zone commands are not in its command set.
                nvm::ZONE_APPEND | nvm::ZONE_MGMT_SEND | nvm::ZONE_MGMT_RECV
                    if self.is_zoned(sqe.nsid) && self.cc.css() != CC_CSS_ALL_IO =>
                {
                    Err(status(generic::INVALID_OPCODE))
                }
                nvm::WRITE | nvm::ZONE_APPEND if self.is_zoned(sqe.nsid) => {
                    return self.zoned_outcome(view, sqe);
                }
                nvm::ZONE_MGMT_SEND | nvm::ZONE_MGMT_RECV if self.is_zoned(sqe.nsid) => {
                    return self.zoned_outcome(view, sqe);
                }
                nvm::WRITE_ZEROES | nvm::COPY if self.is_zoned(sqe.nsid) => {
                    Err(status(generic::INVALID_OPCODE))
                }
                nvm::READ | nvm::WRITE | nvm::COMPARE => self.transfer(view, sqe, opcode),
                nvm::FLUSH => self.flush(sqe),
                nvm::WRITE_ZEROES => self.write_zeroes(sqe),
                nvm::VERIFY => self.verify(view, sqe),
                nvm::DATASET_MANAGEMENT => self.dataset_management(view, sqe),
                nvm::COPY if self.shared.config.copy.is_some() => self.copy(view, sqe),
                nvm::WRITE_UNCORRECTABLE if self.shared.config.write_uncorrectable => {
                    self.write_uncorrectable(sqe)
                }
                op => {
                    log::debug!("sim: unsupported I/O opcode {op:#04x} ({})", nvm::name(op));
                    Err(status(generic::INVALID_OPCODE))
                }
            }
        };
        if result.is_ok() && matches!(opcode, nvm::READ | nvm::WRITE) {
            // Data moved, for the SMART log's Data Units Read / Written.
            if let Ok(disk) = self.namespace(sqe.nsid) {
                let bytes = u64::from(nlb(sqe)) * u64::from(disk.block_size);
                self.admin.record_transfer(opcode == nvm::WRITE, bytes);
            }
        }
        self.outcome(result.map(|()| Outcome::SUCCESS))
    }

    /// A command on the zoned namespace, with its own completion dword 0 (Zone Append).
    fn zoned_outcome(&mut self, view: &GuestView<'_>, sqe: &SubmissionEntry) -> Outcome {
        let result = match sqe.opcode() {
            nvm::ZONE_MGMT_SEND => self.zone_mgmt_send(sqe),
            nvm::ZONE_MGMT_RECV => self.zone_mgmt_recv(view, sqe),
            _ => self.zoned_write(view, sqe),
        };
        if result.is_ok() && sqe.opcode() != nvm::ZONE_MGMT_RECV {
            if let Ok(disk) = self.namespace(sqe.nsid) {
                if sqe.opcode() != nvm::ZONE_MGMT_SEND {
                    let bytes = u64::from(nlb(sqe)) * u64::from(disk.block_size);
                    self.admin.record_transfer(true, bytes);
                }
            }
        }
        self.outcome(result)
    }

    /// The attached namespace `nsid` (the command keeps this geometry even if a format or
    /// resize replaces the namespace meanwhile).
    pub(super) fn namespace(&self, nsid: u32) -> Result<Arc<Disk>, Fail> {
        self.shared
            .disks
            .get(nsid)
            .ok_or(status(generic::INVALID_NAMESPACE_OR_FORMAT))
    }

    /// Largest data transfer in bytes (MDTS in units of the minimum page size; 0 = no limit).
    pub(super) fn max_transfer(&self) -> usize {
        match self.shared.config.mdts {
            0 => usize::MAX,
            mdts => (1usize << nvme_spec::regs::PAGE_SIZE_SHIFT_BASE).saturating_mul(1 << mdts),
        }
    }

    /// Read, Write and Compare: move `nlb` blocks between guest memory and the disk.
    pub(super) fn transfer(
        &self,
        view: &GuestView<'_>,
        sqe: &SubmissionEntry,
        opcode: u8,
    ) -> Result<(), Fail> {
        let disk = self.namespace(sqe.nsid)?;
        if opcode != nvm::WRITE {
            uncorrectable::readable(&disk, slba(sqe), u64::from(nlb(sqe)))?;
        }
        if let Some(pi) = pi::pi_type(&disk) {
            if !self.shared.config.null_io {
                return self.pi_command(view, sqe, &disk, pi, opcode);
            }
        }
        let (first, count) = (slba(sqe), u64::from(nlb(sqe)));
        let (start, end) = block_range(&disk, first, count)?;
        let len = end - start;
        if len > self.max_transfer() {
            return Err(status(generic::INVALID_FIELD));
        }
        if disk.separate_metadata() != 0 && opcode != nvm::COMPARE {
            self.transfer_metadata(view, sqe, &disk, first, count, opcode)?;
        }
        let (page, sgl) = (self.page_size, self.shared.config.sgl);
        let lost = opcode == nvm::WRITE && self.shared.faults.take_lost_write(sqe.nsid, first);
        if (self.shared.config.null_io || lost) && opcode != nvm::COMPARE {
            // Validate the data pointer like a real transfer would, but move nothing.
            return walk_data_pointer(view, sqe, sgl, len, page, |iova, n, _| {
                view.probe(iova, n).map_err(Fail::from)
            });
        }
        if opcode == nvm::WRITE {
            return self.modify(&disk, (first, count), fua(sqe), |bytes| {
                walk_data_pointer(view, sqe, sgl, len, page, |iova, n, off| {
                    view.read(iova, &mut bytes[off..off + n])
                        .map_err(Fail::from)
                })
            });
        }
        let mut data = disk.lock();
        let bytes = &mut data[start..end];
        match opcode {
            nvm::READ => walk_data_pointer(view, sqe, sgl, len, page, |iova, n, off| {
                view.write(iova, &bytes[off..off + n]).map_err(Fail::from)
            }),
            _ => {
                let mut chunk = [0u8; COMPARE_CHUNK];
                walk_data_pointer(view, sqe, sgl, len, page, |iova, n, off| {
                    let mut done = 0;
                    while done < n {
                        let step = (n - done).min(COMPARE_CHUNK);
                        view.read(iova + done as u64, &mut chunk[..step])?;
                        if chunk[..step] != bytes[off + done..off + done + step] {
                            return Err(Fail::Status(Status::new(
                                StatusCodeType::MediaDataIntegrity.raw(),
                                media::COMPARE_FAILURE,
                                true,
                            )));
                        }
                        done += step;
                    }
                    Ok(())
                })
            }
        }
    }

    /// Moves the separate metadata of a Read or Write through the contiguous buffer at MPTR.
    fn transfer_metadata(
        &self,
        view: &GuestView<'_>,
        sqe: &SubmissionEntry,
        disk: &Disk,
        slba: u64,
        nlb: u64,
        opcode: u8,
    ) -> Result<(), Fail> {
        let (start, end) = metadata_range(disk, slba, nlb);
        self.check_mptr(sqe)?;
        if self.shared.config.null_io {
            return view.probe(sqe.mptr, end - start).map_err(Fail::from);
        }
        let mut data = disk.lock();
        let bytes = &mut data[start..end];
        if opcode == nvm::READ {
            view.write(sqe.mptr, bytes).map_err(Fail::from)
        } else {
            view.read(sqe.mptr, bytes).map_err(Fail::from)
        }
    }

    /// MPTR of a contiguous metadata buffer is dword aligned.
    pub(super) fn check_mptr(&self, sqe: &SubmissionEntry) -> Result<(), Fail> {
        if sqe.mptr % MPTR_ALIGN != 0 {
            return Err(status(generic::INVALID_FIELD));
        }
        Ok(())
    }

    fn flush(&self, sqe: &SubmissionEntry) -> Result<(), Fail> {
        // Without a write cache the medium is memory and nothing is volatile: a flush only
        // validates the NSID.
        if sqe.nsid == NSID_BROADCAST {
            self.flush_cache(None);
        } else {
            self.namespace(sqe.nsid)?;
            self.flush_cache(Some(sqe.nsid));
        }
        Ok(())
    }

    fn write_zeroes(&self, sqe: &SubmissionEntry) -> Result<(), Fail> {
        let disk = self.namespace(sqe.nsid)?;
        self.zero_blocks(&disk, (slba(sqe), u64::from(nlb(sqe))), fua(sqe))
    }

    /// Zeroes blocks `slba..slba + nlb` (Write Zeroes, Deallocate), through the write cache
    /// when there is one; on a namespace with protection information (never one with a write
    /// cache: `SimConfig` refuses metadata there) their PI is reset to the escape value, as
    /// unwritten blocks read.
    fn zero_blocks(&self, disk: &Disk, (slba, nlb): (u64, u64), fua: bool) -> Result<(), Fail> {
        self.modify(disk, (slba, nlb), fua, |bytes| {
            bytes.fill(0);
            Ok(())
        })?;
        if pi::pi_type(disk).is_some() {
            pi::reset_pi(disk, &mut disk.lock(), slba, nlb);
        }
        Ok(())
    }

    /// Verify: the blocks must exist; on a namespace with protection information their PI
    /// is checked per PRCHK (NVM CS §3.3.5), otherwise the medium has nothing to check.
    fn verify(&self, view: &GuestView<'_>, sqe: &SubmissionEntry) -> Result<(), Fail> {
        let disk = self.namespace(sqe.nsid)?;
        uncorrectable::readable(&disk, slba(sqe), u64::from(nlb(sqe)))?;
        if let Some(pi) = pi::pi_type(&disk) {
            return self.pi_command(view, sqe, &disk, pi, nvm::VERIFY);
        }
        block_range(&disk, slba(sqe), u64::from(nlb(sqe)))?;
        Ok(())
    }

    /// Reads `buf.len()` bytes of a command's host-to-controller data (a range list: Dataset
    /// Management, Copy) through its PRPs or SGL into `buf`.
    pub(super) fn read_command_data(
        &self,
        view: &GuestView<'_>,
        sqe: &SubmissionEntry,
        buf: &mut [u8],
    ) -> Result<(), Fail> {
        walk_data_pointer(
            view,
            sqe,
            self.shared.config.sgl,
            buf.len(),
            self.page_size,
            |iova, n, off| view.read(iova, &mut buf[off..off + n]).map_err(Fail::from),
        )
    }

    /// Dataset Management: with the Deallocate attribute, the ranges read back as zeros
    /// (Identify Namespace DLFEAT says so); other attributes are hints and are ignored.
    fn dataset_management(&self, view: &GuestView<'_>, sqe: &SubmissionEntry) -> Result<(), Fail> {
        let disk = self.namespace(sqe.nsid)?;
        let count = dsm_ranges(sqe) as usize;
        let mut list = [0u8; DSM_LIST_MAX];
        let list = &mut list[..count * DSM_RANGE_SIZE];
        self.read_command_data(view, sqe, list)?;
        if !dsm_deallocate(sqe) {
            return Ok(());
        }
        let ranges = list.chunks_exact(DSM_RANGE_SIZE).map(|raw| {
            let raw: &[u8; DSM_RANGE_SIZE] =
                raw.try_into().expect("chunks_exact yields full ranges");
            DsmRange::from_bytes(raw)
        });
        // Check every range first so that a bad one leaves the medium untouched.
        for range in ranges.clone() {
            block_range(&disk, range.slba, u64::from(range.nlb))?;
        }
        for range in ranges {
            self.zero_blocks(&disk, (range.slba, u64::from(range.nlb)), false)?;
        }
        Ok(())
    }
}
