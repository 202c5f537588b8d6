//! `--pi MODE`: copies to or from a namespace with metadata / protection information (NVM CS
//! §5.2), one `Protected` command per record at queue depth 1 (a tool for tests and repairs,
//! not a fast path). `bs` counts data bytes per record, a whole number of blocks.
//!
//! | mode       | PRACT | PRCHK          | the file holds                                    |
//! |------------|-------|----------------|---------------------------------------------------|
//! | `insert`   | 1     | all            | data only (metadata must be exactly the PI)       |
//! | `generate` | 0     | all            | data only: nvme-dd computes the PI (writes), checks it host-side too (reads) |
//! | `check`    | 0     | all            | as `generate`                                     |
//! | `pass`     | 0     | none           | the transfer as it is: extended blocks (data + metadata) for an extended LBA format; separate metadata goes to/from `--metadata FILE` |
//!
//! Type 3 has no reference tag to check: its PRCHK leaves that bit clear. The reference tag
//! is seeded with the LBA (type 1's rule: its low 32 bits with the 16-bit guard, 48 with the
//! 64-bit guard), the application tag is `--app-tag` (checked in full). `generate` and
//! `check` compute the 16-bit guard (CRC-16 T10-DIF) and the 64-bit guard (CRC-64 NVMe)
//! formats; on a 32-bit guard or storage tag format they are refused before anything moves
//! (use `insert` or `pass`). A check error from the controller is reported typed (guard, application tag,
//! reference tag) and the copy stops there; what was copied before stays.

use std::fs::File;
use std::io::{self, Read, Write};
use std::path::PathBuf;

use nvme_driver::command::{Read as ReadCmd, Write as WriteCmd};
use nvme_driver::protection::{
    generate_pi, mismatch_error, verify_pi, PiError as CheckError, PiMismatch,
};
use nvme_driver::{
    HostPiUnsupported, IoQueue, IoVec, LbaFormatInfo, MetadataLayout, Namespace, PiType, Prinfo,
    ProtectableCommand, Protected, Protection, QueuePairOptions,
};
use nvme_tool_support::AnyController;

use crate::operands::{Direction, Stream, Transfer};

/// `--pi`: how protection information is handled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum PiMode {
    /// PRACT = 1: the controller inserts the PI on writes, checks and strips it on reads.
    Insert,
    /// PRACT = 0: nvme-dd generates the PI of each block (writes) and checks it (reads); the
    /// controller checks everything too.
    Generate,
    /// Same as `generate` (the name that reads well for reads).
    Check,
    /// PRACT = 0, no checks: data and metadata move as they are (repairs, corruption tests).
    Pass,
}

/// Why a `--pi` copy failed.
#[derive(Debug, thiserror::Error)]
pub enum PiError {
    #[error(transparent)]
    Driver(#[from] nvme_driver::Error),
    #[error("{what}: {source}")]
    Io { what: String, source: io::Error },
    #[error("namespace {nsid} ({format}): {why}")]
    Format {
        nsid: u32,
        format: LbaFormatInfo,
        why: &'static str,
    },
    #[error("namespace {nsid} ({format}): {why}")]
    HostPi {
        nsid: u32,
        format: LbaFormatInfo,
        why: HostPiUnsupported,
    },
    #[error("--pi: {0}")]
    Usage(String),
    #[error("host check of LBA {lba}: {mismatch}: {error}")]
    HostCheck {
        lba: u64,
        mismatch: PiMismatch,
        error: nvme_driver::Error,
    },
}

/// The options of a `--pi` copy.
pub struct PiOptions<'a> {
    pub mode: PiMode,
    pub metadata: Option<&'a PathBuf>,
    pub app_tag: u16,
    pub fua: bool,
}

fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> PiError {
    let what = what.into();
    move |source| PiError::Io { what, source }
}

fn read_all(stream: &Stream, what: &str) -> Result<Vec<u8>, PiError> {
    let mut bytes = Vec::new();
    match stream {
        Stream::Stdio => io::stdin().read_to_end(&mut bytes),
        Stream::Path(p) => File::open(p).and_then(|mut f| f.read_to_end(&mut bytes)),
    }
    .map_err(io_err(format!("cannot read {what}")))?;
    Ok(bytes)
}

fn write_all(stream: &Stream, bytes: &[u8], what: &str) -> Result<(), PiError> {
    match stream {
        Stream::Stdio => io::stdout().lock().write_all(bytes),
        Stream::Path(p) => File::create(p).and_then(|mut f| f.write_all(bytes)),
    }
    .map_err(io_err(format!("cannot write {what}")))
}

/// PRINFO of `mode` on a namespace of PI type `pi`.
fn prinfo(mode: PiMode, pi: Option<PiType>) -> Prinfo {
    let checks = match pi {
        None => Prinfo::NONE,
        Some(PiType::Type3) => Prinfo::CHECK_GUARD.union(Prinfo::CHECK_APP_TAG),
        Some(_) => Prinfo::CHECK_ALL,
    };
    match mode {
        PiMode::Insert => Prinfo::PRACT.union(checks),
        PiMode::Generate | PiMode::Check => checks,
        PiMode::Pass => Prinfo::NONE,
    }
}

/// Runs a `--pi` copy of `transfer` on `ctrl`; prints a dd-style summary to stderr.
pub fn run(ctrl: &AnyController, transfer: &Transfer, opts: &PiOptions<'_>) -> Result<(), PiError> {
    let nsid = match &transfer.direction {
        Direction::FromNvme { nsid, .. } | Direction::ToNvme { nsid, .. } => *nsid,
    };
    let ns = ctrl.namespace(nsid)?;
    let f = ns.format();
    let format_error = |why| PiError::Format {
        nsid,
        format: f,
        why,
    };
    let bs = f.block_size() as usize;
    if transfer.bs % bs != 0 {
        return Err(PiError::Usage(format!(
            "bs={} is not a whole number of namespace {nsid}'s {bs}-byte blocks",
            transfer.bs
        )));
    }
    let per_record = (transfer.bs / bs) as u64;
    let prinfo = prinfo(opts.mode, f.pi_type());
    let pract = prinfo.pract();
    if opts.mode == PiMode::Insert && f.moved_metadata(true) != 0 {
        return Err(format_error(
            "--pi insert moves data only when the metadata is exactly the PI; use --pi generate \
             or --pi pass",
        ));
    }
    if opts.mode != PiMode::Pass && opts.mode != PiMode::Insert && f.pi_type().is_none() {
        return Err(format_error(
            "has no protection information to generate or check: use --pi pass",
        ));
    }
    if matches!(opts.mode, PiMode::Generate | PiMode::Check) {
        f.host_pi_support().map_err(|why| PiError::HostPi {
            nsid,
            format: f,
            why,
        })?;
    }
    let separate = f.metadata_bytes(1, pract) != 0;
    let raw = opts.mode == PiMode::Pass;
    if raw && separate && opts.metadata.is_none() {
        return Err(format_error(
            "--pi pass needs --metadata FILE for the separate metadata",
        ));
    }
    let mut q = ctrl.create_queue_pair(QueuePairOptions::default())?;
    let dlen = f.data_bytes(per_record, pract);
    let mlen = f.metadata_bytes(per_record, pract);
    // The file's bytes per record: the transfer itself for `pass`, the data otherwise.
    let file_record = if raw { dlen } else { transfer.bs };
    let mut data = ctrl.alloc_buffer(dlen)?;
    let mut md = if mlen > 0 {
        let mut v = IoVec::boxed();
        v.push(ctrl.alloc_buffer(mlen)?)
            .expect("an empty vector takes a piece");
        Some(v)
    } else {
        None
    };
    let mut records = 0u64;
    match &transfer.direction {
        Direction::ToNvme { from, .. } => {
            let input = read_all(from, "the input")?;
            let meta_in = match opts.metadata {
                Some(p) => read_all(&Stream::Path(p.clone()), "the metadata file")?,
                None => Vec::new(),
            };
            let skip = transfer.skip as usize * file_record;
            let input = input.get(skip..).unwrap_or_default();
            let count = transfer
                .count
                .unwrap_or(input.len().div_ceil(file_record) as u64);
            for r in 0..count {
                let at = r as usize * file_record;
                let Some(chunk) = input.get(at..) else { break };
                let lba = (transfer.seek + r) * per_record;
                let p = Protection {
                    prinfo,
                    ..Protection::pass(lba, Prinfo::NONE)
                }
                .app_tag(opts.app_tag, 0xFFFF);
                let buf = &mut data[..dlen];
                buf.fill(0);
                let md_buf: &mut [u8] = match md.as_mut() {
                    Some(v) => &mut v.get_mut(0).expect("one piece")[..mlen],
                    None => &mut [],
                };
                md_buf.fill(0);
                if raw {
                    let n = chunk.len().min(dlen);
                    buf[..n].copy_from_slice(&chunk[..n]);
                    let m_at = r as usize * mlen;
                    if let Some(m) = meta_in.get(m_at..) {
                        let n = m.len().min(mlen);
                        md_buf[..n].copy_from_slice(&m[..n]);
                    }
                } else {
                    place_data(&f, pract, chunk, buf);
                    if !pract {
                        generate_pi(&f, &p, buf, md_buf).map_err(|why| PiError::HostPi {
                            nsid,
                            format: f,
                            why,
                        })?;
                    }
                }
                let cmd = Protected::new(WriteCmd::new(lba, per_record as u32), p);
                let cmd = if opts.fua {
                    Protected::new(cmd.cmd.fua(), p)
                } else {
                    cmd
                };
                (data, md) = execute(&mut q, &ns, cmd, data, md)?;
                records += 1;
            }
        }
        Direction::FromNvme { to, .. } => {
            let count = transfer
                .count
                .unwrap_or((ns.blocks().saturating_sub(transfer.skip * per_record)) / per_record);
            let mut out = Vec::new();
            let mut meta_out = Vec::new();
            for r in 0..count {
                let lba = (transfer.skip + r) * per_record;
                let p = Protection {
                    prinfo,
                    ..Protection::pass(lba, Prinfo::NONE)
                }
                .app_tag(opts.app_tag, 0xFFFF);
                let cmd = Protected::new(ReadCmd::new(lba, per_record as u32), p);
                (data, md) = execute(&mut q, &ns, cmd, data, md)?;
                let buf = &data[..dlen];
                let md_buf: &[u8] = match md.as_ref() {
                    Some(v) => &v.get(0).expect("one piece")[..mlen],
                    None => &[],
                };
                if raw {
                    out.extend_from_slice(buf);
                    meta_out.extend_from_slice(md_buf);
                } else {
                    if !pract {
                        verify_pi(&f, &p, prinfo, buf, md_buf).map_err(|e| match e {
                            CheckError::Mismatch(mismatch) => PiError::HostCheck {
                                lba: lba + mismatch.block,
                                mismatch,
                                error: mismatch_error("Read", &mismatch),
                            },
                            CheckError::Unsupported(why) => PiError::HostPi {
                                nsid,
                                format: f,
                                why,
                            },
                        })?;
                    }
                    extract_data(&f, pract, buf, &mut out);
                }
                records += 1;
            }
            write_all(to, &out, "the output")?;
            if let Some(p) = opts.metadata {
                write_all(&Stream::Path(p.clone()), &meta_out, "the metadata file")?;
            }
        }
    }
    eprintln!(
        "{records}+0 records in\n{records}+0 records out\n({} data bytes, namespace {nsid} {f}, --pi {:?})",
        records * transfer.bs as u64,
        opts.mode
    );
    Ok(())
}

/// One command, waited for; gives the buffers back.
fn execute<C: ProtectableCommand>(
    q: &mut nvme_tool_support::AnyQueuePair,
    ns: &Namespace,
    cmd: Protected<C>,
    data: nvme_driver::DmaBuffer,
    md: Option<Box<IoVec>>,
) -> Result<(nvme_driver::DmaBuffer, Option<Box<IoVec>>), PiError> {
    match md {
        Some(v) => {
            let (d, v) = q
                .execute_with_metadata(ns, cmd, data, v, drop)
                .map_err(|f| f.error)?;
            Ok((d, Some(v)))
        }
        None => {
            let d = q.execute(ns, cmd, Some(data)).map_err(|f| f.error)?;
            Ok((d.expect("a data command returns its buffer"), None))
        }
    }
}

/// Spreads plain data into the transfer layout (extended blocks keep room for metadata).
fn place_data(f: &LbaFormatInfo, pract: bool, data: &[u8], buf: &mut [u8]) {
    let bs = f.block_size() as usize;
    let stride = f.data_bytes(1, pract);
    for (i, block) in data.chunks(bs).enumerate() {
        if (i + 1) * stride > buf.len() {
            break;
        }
        buf[i * stride..i * stride + block.len()].copy_from_slice(block);
    }
}

/// The plain data of a transfer-layout buffer.
fn extract_data(f: &LbaFormatInfo, pract: bool, buf: &[u8], out: &mut Vec<u8>) {
    let bs = f.block_size() as usize;
    let stride = f.data_bytes(1, pract);
    if f.layout() != MetadataLayout::Extended || stride == bs {
        out.extend_from_slice(buf);
        return;
    }
    for block in buf.chunks(stride) {
        out.extend_from_slice(&block[..bs]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_set_the_prinfo_bits() {
        let t1 = Some(PiType::Type1);
        assert_eq!(
            prinfo(PiMode::Insert, t1),
            Prinfo::PRACT.union(Prinfo::CHECK_ALL)
        );
        assert_eq!(prinfo(PiMode::Generate, t1), Prinfo::CHECK_ALL);
        assert_eq!(prinfo(PiMode::Check, t1), Prinfo::CHECK_ALL);
        assert_eq!(prinfo(PiMode::Pass, t1), Prinfo::NONE);
        // Type 3 never asks for the reference tag check (Invalid Protection Information).
        let t3 = prinfo(PiMode::Check, Some(PiType::Type3));
        assert!(!t3.contains(Prinfo::CHECK_REF_TAG) && t3.contains(Prinfo::CHECK_GUARD));
    }

    #[test]
    fn data_is_placed_in_and_taken_from_extended_blocks() {
        let f = LbaFormatInfo::new(512, 8, true, Some(PiType::Type1), false);
        let data: Vec<u8> = (0..1024).map(|i| (i % 251) as u8).collect();
        let mut buf = vec![0xEE; 2 * 520];
        place_data(&f, false, &data, &mut buf);
        assert!(buf[..512] == data[..512] && buf[520..1032] == data[512..]);
        assert_eq!(buf[512..520], [0xEE; 8], "metadata room untouched");
        let mut out = Vec::new();
        extract_data(&f, false, &buf, &mut out);
        assert!(out == data);
        // PRACT with metadata = PI: the buffer is plain data.
        let mut buf = vec![0; 1024];
        place_data(&f, true, &data, &mut buf);
        assert!(buf == data);
        let mut out = Vec::new();
        extract_data(&f, true, &buf, &mut out);
        assert!(out == data);
    }
}
