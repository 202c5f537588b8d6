//! End-to-end data protection of the emulated controller (NVM CS §5.2): Read, Write, Compare
//! and Verify on a namespace formatted with protection information honour PRINFO (PRACT,
//! PRCHK) and the tags of CDW14/CDW15, like QEMU's `hw/nvme/dif.c` does:
//!
//! - Write, PRACT = 1: the controller generates each block's PI (guard CRC of the data and
//!   of the metadata bytes before the PI, application tag from CDW15, reference tag from
//!   CDW14, +1 per block for types 1 and 2); when the metadata is exactly the PI, the host
//!   transfers none. PRACT = 0: the host's PI is checked per PRCHK, then stored as it came.
//! - Read / Compare / Verify: the stored PI is checked per PRCHK; PRACT = 1 with metadata =
//!   PI strips it from what the host receives.
//! - Blocks never written hold all-ones PI (escape tags: not checked), as a deallocated
//!   block reads in QEMU; Write Zeroes and Deallocate restore that.
//! - Type 1 with PRCHK reference tag requires CDW14 = the SLBA's low 32 bits, and type 3 does
//!   not take the reference tag check: Invalid Protection Information (SCT 1h, SC 81h).
//! - The 64-bit guard format (`pif=2` in QEMU, NVM CS §5.2.1.3): a 16-byte tuple with a
//!   CRC-64 NVMe guard and a 48-bit reference tag, CDW14 its bits 31:0 and CDW3 15:0 its bits
//!   47:32 (type 1: the SLBA's low 48 bits).
//!
//! The check errors are Media and Data Integrity statuses 82h (guard), 83h (application
//! tag), 84h (reference tag). The data moves through staging vectors: the emulator is not a
//! performance path, and the host layout (without PI) differs from the medium's.

use nvme_spec::command::{nlb, slba};
use nvme_spec::opcode::nvm;
use nvme_spec::protection::{
    crc16_t10dif, crc64_nvme, Pi64Tuple, PiFormat, PiTuple, PiType, Prinfo, APP_TAG_ESCAPE,
    REF_TAG48_ESCAPE, REF_TAG48_MASK, REF_TAG_ESCAPE,
};
use nvme_spec::queue::SubmissionEntry;
use nvme_spec::status::{command_specific, media, Status, StatusCodeType};

use super::io::{block_range, metadata_range, status};
use super::Device;
use crate::disk::Disk;
use crate::dma::GuestView;
use crate::prp::Fail;
use crate::sgl::walk_data_pointer;

use crate::config::PI_FIRST;
/// DPS bits 2:0: the PI type.
const PI_TYPE_MASK: u8 = 0b111;

/// The PI type of a namespace, if it has protection information.
pub(crate) fn pi_type(disk: &Disk) -> Option<PiType> {
    PiType::from_dps(disk.protection & PI_TYPE_MASK)
}

/// Offset of the PI tuple in a block's metadata.
fn pi_offset(disk: &Disk) -> usize {
    if disk.protection & PI_FIRST != 0 {
        0
    } else {
        usize::from(disk.metadata_size) - pi_bytes(disk)
    }
}

/// Bytes of the namespace's PI tuple.
fn pi_bytes(disk: &Disk) -> usize {
    disk.pi_format.tuple_bytes()
}

fn media_error(sc: u8) -> Fail {
    Fail::Status(Status::new(
        StatusCodeType::MediaDataIntegrity.raw(),
        sc,
        true,
    ))
}

/// Fills the PI bytes of blocks `first..first + count` on the medium with ones (escape: not
/// checked), as unwritten and deallocated blocks read.
pub(crate) fn reset_pi(disk: &Disk, data: &mut [u8], first: u64, count: u64) {
    if pi_type(disk).is_none() {
        return;
    }
    let at = pi_offset(disk);
    for lba in first..first + count {
        let md = medium_metadata_offset(disk, lba);
        data[md + at..md + at + pi_bytes(disk)].fill(0xFF);
    }
}

/// Medium offset of block `lba`'s metadata.
fn medium_metadata_offset(disk: &Disk, lba: u64) -> usize {
    if disk.extended {
        (lba * disk.lba_stride()) as usize + disk.block_size as usize
    } else {
        metadata_range(disk, lba, 1).0
    }
}

/// The PI fields of one command.
struct PiCommand {
    pi: PiType,
    format: PiFormat,
    prinfo: Prinfo,
    /// 32 bits (16-bit guard) or 48 (64-bit guard, CDW3 15:0 above CDW14).
    ref_tag: u64,
    app_tag: u16,
    app_mask: u16,
    /// Offset of the PI in a block's metadata.
    at: usize,
}

impl PiCommand {
    fn of(sqe: &SubmissionEntry, pi: PiType, disk: &Disk) -> Result<Self, Fail> {
        let prinfo = Prinfo::from_cdw12(sqe.cdw12);
        let format = disk.pi_format;
        let ref_tag = match format {
            PiFormat::Guard64 => u64::from(sqe.cdw14) | u64::from(sqe.cdw3 & 0xFFFF) << 32,
            _ => u64::from(sqe.cdw14),
        };
        let cmd = Self {
            pi,
            format,
            prinfo,
            ref_tag,
            app_tag: sqe.cdw15 as u16,
            app_mask: (sqe.cdw15 >> 16) as u16,
            at: pi_offset(disk),
        };
        if prinfo.contains(Prinfo::CHECK_REF_TAG) {
            let bad = match pi {
                PiType::Type1 => cmd.ref_tag != cmd.mask(slba(sqe)),
                PiType::Type2 => false,
                PiType::Type3 => true,
            };
            if bad {
                return Err(Fail::Status(Status::new(
                    StatusCodeType::CommandSpecific.raw(),
                    command_specific::INVALID_PROTECTION_INFORMATION,
                    true,
                )));
            }
        }
        Ok(cmd)
    }

    /// A reference tag in the format's width.
    fn mask(&self, tag: u64) -> u64 {
        match self.format {
            PiFormat::Guard64 => tag & REF_TAG48_MASK,
            _ => tag & u64::from(u32::MAX),
        }
    }

    fn ref_tag_of(&self, index: usize) -> u64 {
        if self.pi.ref_tag_increments() {
            self.mask(self.ref_tag.wrapping_add(index as u64))
        } else {
            self.ref_tag
        }
    }

    fn guard(&self, data: &[u8], md: &[u8]) -> u64 {
        let before = &md[..self.at];
        match self.format {
            PiFormat::Guard64 => crc64_nvme(crc64_nvme(0, data), before),
            _ => u64::from(crc16_t10dif(crc16_t10dif(0, data), before)),
        }
    }

    /// Writes block `index`'s PI into `md`.
    fn generate(&self, index: usize, data: &[u8], md: &mut [u8]) {
        let (guard, app, reft) = (self.guard(data, md), self.app_tag, self.ref_tag_of(index));
        let out = &mut md[self.at..];
        match self.format {
            PiFormat::Guard64 => {
                let t = Pi64Tuple::new(guard, app, reft).to_bytes();
                out[..t.len()].copy_from_slice(&t);
            }
            _ => {
                let t = PiTuple::new(guard as u16, app, reft as u32).to_bytes();
                out[..t.len()].copy_from_slice(&t);
            }
        }
    }

    /// Block `index`'s stored guard, application tag and reference tag.
    fn tuple(&self, md: &[u8]) -> (u64, u16, u64) {
        match self.format {
            PiFormat::Guard64 => {
                let t = Pi64Tuple::from_bytes(&md[self.at..]);
                (t.guard(), t.app_tag(), t.ref_tag())
            }
            _ => {
                let t = PiTuple::from_bytes(&md[self.at..]);
                (t.guard().into(), t.app_tag(), t.ref_tag().into())
            }
        }
    }

    /// Checks block `index` per PRCHK (escaped blocks pass).
    fn check(&self, index: usize, data: &[u8], md: &[u8]) -> Result<(), Fail> {
        let (guard, app, reft) = self.tuple(md);
        let ones = match self.format {
            PiFormat::Guard64 => REF_TAG48_ESCAPE,
            _ => u64::from(REF_TAG_ESCAPE),
        };
        let escaped = match self.pi {
            PiType::Type3 => app == APP_TAG_ESCAPE && reft == ones,
            _ => app == APP_TAG_ESCAPE,
        };
        if escaped {
            return Ok(());
        }
        if self.prinfo.contains(Prinfo::CHECK_GUARD) && self.guard(data, md) != guard {
            return Err(media_error(media::END_TO_END_GUARD_CHECK_ERROR));
        }
        if self.prinfo.contains(Prinfo::CHECK_APP_TAG) && (app ^ self.app_tag) & self.app_mask != 0
        {
            return Err(media_error(media::END_TO_END_APPLICATION_TAG_CHECK_ERROR));
        }
        if self.prinfo.contains(Prinfo::CHECK_REF_TAG) && reft != self.ref_tag_of(index) {
            return Err(media_error(media::END_TO_END_REFERENCE_TAG_CHECK_ERROR));
        }
        Ok(())
    }
}

/// The blocks of a command in host form: data and (per block) metadata, split apart.
struct Blocks {
    bs: usize,
    ms: usize,
    data: Vec<u8>,
    md: Vec<u8>,
}

impl Blocks {
    fn data(&self, i: usize) -> &[u8] {
        &self.data[i * self.bs..(i + 1) * self.bs]
    }
    fn md(&self, i: usize) -> &[u8] {
        &self.md[i * self.ms..(i + 1) * self.ms]
    }
}

impl Device {
    /// Read, Write, Compare or Verify (`opcode`) on a namespace with protection information.
    pub(super) fn pi_command(
        &self,
        view: &GuestView<'_>,
        sqe: &SubmissionEntry,
        disk: &Disk,
        pi: PiType,
        opcode: u8,
    ) -> Result<(), Fail> {
        let (first, count) = (slba(sqe), u64::from(nlb(sqe)));
        block_range(disk, first, count)?;
        let cmd = PiCommand::of(sqe, pi, disk)?;
        let (bs, ms) = (disk.block_size as usize, usize::from(disk.metadata_size));
        let n = count as usize;
        // Metadata bytes per block the host moves: none with PRACT when it is only the PI.
        let host_ms = if cmd.prinfo.pract() && ms == pi_bytes(disk) {
            0
        } else {
            ms
        };
        let host_stride = bs + if disk.extended { host_ms } else { 0 };
        let data_len = n * host_stride;
        if opcode != nvm::VERIFY && data_len > self.max_transfer() {
            return Err(status(nvme_spec::status::generic::INVALID_FIELD));
        }
        let mut blocks = self.medium_blocks(disk, first, n);
        match opcode {
            nvm::WRITE => {
                let host = self.host_blocks(view, sqe, disk, n, host_ms)?;
                for i in 0..n {
                    let (d, m) = (host.data(i), host.md(i));
                    if cmd.prinfo.pract() {
                        let mut md = if host_ms == 0 {
                            vec![0u8; ms]
                        } else {
                            m.to_vec()
                        };
                        cmd.generate(i, d, &mut md);
                        blocks.md[i * ms..(i + 1) * ms].copy_from_slice(&md);
                    } else {
                        cmd.check(i, d, m)?;
                        blocks.md[i * ms..(i + 1) * ms].copy_from_slice(m);
                    }
                    blocks.data[i * bs..(i + 1) * bs].copy_from_slice(d);
                }
                self.store_blocks(disk, first, &blocks);
                Ok(())
            }
            _ => {
                for i in 0..n {
                    cmd.check(i, blocks.data(i), blocks.md(i))?;
                }
                match opcode {
                    nvm::READ => self.send_blocks(view, sqe, disk, &blocks, host_ms),
                    nvm::COMPARE => {
                        let host = self.host_blocks(view, sqe, disk, n, host_ms)?;
                        let same = (0..n).all(|i| {
                            host.data(i) == blocks.data(i)
                                && (!disk.extended || host_ms == 0 || host.md(i) == blocks.md(i))
                        });
                        if same {
                            Ok(())
                        } else {
                            Err(media_error(media::COMPARE_FAILURE))
                        }
                    }
                    _ => Ok(()),
                }
            }
        }
    }

    /// Blocks `first..first + n` as the medium holds them.
    fn medium_blocks(&self, disk: &Disk, first: u64, n: usize) -> Blocks {
        let (bs, ms) = (disk.block_size as usize, usize::from(disk.metadata_size));
        let medium = disk.lock();
        let mut b = Blocks {
            bs,
            ms,
            data: Vec::with_capacity(n * bs),
            md: Vec::with_capacity(n * ms),
        };
        for i in 0..n as u64 {
            let lba = first + i;
            let (start, _) = block_range(disk, lba, 1).expect("range checked");
            b.data.extend_from_slice(&medium[start..start + bs]);
            let md = medium_metadata_offset(disk, lba);
            b.md.extend_from_slice(&medium[md..md + ms]);
        }
        b
    }

    fn store_blocks(&self, disk: &Disk, first: u64, b: &Blocks) {
        disk.clear_uncorrectable(first, (b.data.len() / b.bs) as u64);
        let mut medium = disk.lock();
        for i in 0..b.data.len() / b.bs {
            let lba = first + i as u64;
            let (start, _) = block_range(disk, lba, 1).expect("range checked");
            medium[start..start + b.bs].copy_from_slice(b.data(i));
            let md = medium_metadata_offset(disk, lba);
            medium[md..md + b.ms].copy_from_slice(b.md(i));
        }
    }

    /// The host's blocks (data buffer, and the metadata buffer when separate) of a write or
    /// compare: `host_ms` metadata bytes per block move (the rest read as zero).
    fn host_blocks(
        &self,
        view: &GuestView<'_>,
        sqe: &SubmissionEntry,
        disk: &Disk,
        n: usize,
        host_ms: usize,
    ) -> Result<Blocks, Fail> {
        let (bs, ms) = (disk.block_size as usize, usize::from(disk.metadata_size));
        let stride = bs + if disk.extended { host_ms } else { 0 };
        let mut raw = vec![0u8; n * stride];
        let (page, sgl) = (self.page_size, self.shared.config.sgl);
        walk_data_pointer(view, sqe, sgl, raw.len(), page, |iova, len, off| {
            view.read(iova, &mut raw[off..off + len])
                .map_err(Fail::from)
        })?;
        let mut b = Blocks {
            bs,
            ms,
            data: vec![0u8; n * bs],
            md: vec![0u8; n * ms],
        };
        if disk.extended {
            for i in 0..n {
                b.data[i * bs..(i + 1) * bs].copy_from_slice(&raw[i * stride..i * stride + bs]);
                b.md[i * ms..i * ms + host_ms]
                    .copy_from_slice(&raw[i * stride + bs..(i + 1) * stride]);
            }
        } else {
            b.data = raw;
            if host_ms != 0 {
                self.check_mptr(sqe)?;
                view.read(sqe.mptr, &mut b.md).map_err(Fail::from)?;
            }
        }
        Ok(b)
    }

    /// A read's data (and metadata, `host_ms` bytes per block) to the host.
    fn send_blocks(
        &self,
        view: &GuestView<'_>,
        sqe: &SubmissionEntry,
        disk: &Disk,
        b: &Blocks,
        host_ms: usize,
    ) -> Result<(), Fail> {
        let n = b.data.len() / b.bs;
        let raw = if disk.extended {
            let mut raw = Vec::with_capacity(n * (b.bs + host_ms));
            for i in 0..n {
                raw.extend_from_slice(b.data(i));
                raw.extend_from_slice(&b.md(i)[..host_ms]);
            }
            raw
        } else {
            if host_ms != 0 {
                self.check_mptr(sqe)?;
                view.write(sqe.mptr, &b.md).map_err(Fail::from)?;
            }
            b.data.clone()
        };
        let (page, sgl) = (self.page_size, self.shared.config.sgl);
        walk_data_pointer(view, sqe, sgl, raw.len(), page, |iova, len, off| {
            view.write(iova, &raw[off..off + len]).map_err(Fail::from)
        })
    }
}
