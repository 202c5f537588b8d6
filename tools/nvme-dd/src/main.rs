//! `nvme-dd --device DEVICE [if=..] [of=..] [bs=..] [count=..] [skip=..] [seek=..]`: dd for a
//! namespace driven from userspace. Exactly one of `if=`/`of=` is `nvme:NSID`; the other is a
//! file, or standard input/output (`-` or left out). `skip`/`seek` count records of `bs` bytes,
//! as in dd, and `bs` must be a whole number of the namespace's blocks.
//!
//! Order of work, so that a failure leaves nothing behind: operands (including every byte
//! offset), then the controller, the namespace and the plan against it, then the queue pair and
//! DMA buffers, and only then is the output opened (and a regular file truncated). The input is
//! only read. The copy itself (see [`copy`]) keeps `--qd` requests in flight. With
//! `--verify-through DEVICE2` (see [`verify`]) a write is read back through a second
//! controller of the same subsystem and compared with the input. Errors go to stderr as
//! `error: <message>` (with the chain of causes) and exit with status 1; bad input never panics.

mod copy;
mod operands;
mod pi;
mod verify;

use std::fs::File;
use std::io::{self, BufWriter, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Parser;
use nvme_driver::{ControllerOptions, DmaBuffer, QueuePairOptions};
use nvme_tool_support::{parse_target, AnyController, TargetError};

use crate::copy::{CopyError, CopyOutcome, Geometry, NamespaceQueue, Output, Plan, Progress};
use crate::operands::{byte_offset, parse_operands, Direction, OperandError, Stream, Transfer};

/// Buffer size for writes to a stream output (stdout, pipes).
const STREAM_BUFFER_BYTES: usize = 1 << 20;
/// Most requests `--qd` may ask for: the deepest queue the driver's tag sets track (a controller
/// with shallower queues, or the DMA budget, lowers it further).
const MAX_QD: u16 = 4096;

/// `--qd`: 1..=[`MAX_QD`], refused with a message saying what to use instead.
fn parse_qd(value: &str) -> Result<u16, String> {
    let hint = format!("use a queue depth from 1 to {MAX_QD}, e.g. --qd 16");
    match value.parse::<u64>() {
        Ok(0) => Err(format!("--qd 0 keeps no request in flight: {hint}")),
        Ok(n) if n > u64::from(MAX_QD) => Err(format!(
            "--qd {n} is more than the {MAX_QD} requests nvme-dd can keep in flight: \
             use --qd {MAX_QD} or less"
        )),
        Ok(n) => Ok(n as u16),
        Err(_) => Err(format!("--qd {value} is not a number: {hint}")),
    }
}

/// Copy between a file (or stdin/stdout) and an NVMe namespace, dd style.
#[derive(Debug, Parser)]
#[command(
    version,
    about,
    after_help = "Operands: if=PATH|-|nvme:NSID  of=PATH|-|nvme:NSID  bs=BYTES (k/K, M, G suffixes; default 512)  count=N  skip=N  seek=N"
)]
struct Cli {
    /// PCI address (0000:00:04.0) or transport id ("trtype:PCIe traddr:0000:00:04.0", or
    /// "trtype:TCP traddr:127.0.0.1 trsvcid:4420 subnqn:NQN" for NVMe/TCP).
    #[arg(long)]
    device: String,
    /// Requests kept in flight (1 to 4096).
    #[arg(long, default_value_t = 16, value_parser = parse_qd)]
    qd: u16,
    /// Force Unit Access on writes (data reaches non-volatile media before completion).
    #[arg(long)]
    fua: bool,
    /// Do not print the once-a-second progress line.
    #[arg(long)]
    no_progress: bool,
    /// Namespaces with metadata / protection information: insert (the controller adds and
    /// strips the PI), generate / check (nvme-dd computes and checks it), pass (data and
    /// metadata as they are). One command per record, queue depth 1.
    #[arg(long, value_enum)]
    pi: Option<pi::PiMode>,
    /// With --pi: the file of the separate metadata (read for writes, written for reads).
    #[arg(long, requires = "pi")]
    metadata: Option<PathBuf>,
    /// With --pi: the application tag written and expected (checked in full).
    #[arg(long, default_value_t = 0, requires = "pi")]
    app_tag: u16,
    /// After writing of=nvme:NSID from a regular file: read the written range back through
    /// this second controller (another path to the same shared namespace, checked before
    /// anything is written) and compare it with the input.
    #[arg(long, value_name = "DEVICE", conflicts_with = "pi")]
    verify_through: Option<String>,
    /// dd operands: if=, of=, bs=, count=, skip=, seek=.
    #[arg(value_name = "OPERAND")]
    operands: Vec<String>,
}

/// Why `nvme-dd` failed.
#[derive(Debug, thiserror::Error)]
enum DdError {
    #[error(transparent)]
    Operand(#[from] OperandError),
    #[error(transparent)]
    Device(#[from] TargetError),
    #[error(transparent)]
    Driver(#[from] nvme_driver::Error),
    #[error(transparent)]
    Copy(#[from] CopyError),
    #[error("cannot open {path}: {source}")]
    Open { path: PathBuf, source: io::Error },
    #[error("cannot skip {bytes} bytes of the input: {source}")]
    Skip { bytes: u64, source: io::Error },
    #[error("seek={seek} needs a seekable output (a regular file or block device), not {what}")]
    SeekOnStream { seek: u64, what: String },
    #[error("cannot write the summary to standard error: {0}")]
    Summary(io::Error),
    #[error(transparent)]
    Pi(#[from] pi::PiError),
    #[error(transparent)]
    Verify(#[from] verify::VerifyError),
    #[error(
        "namespace {nsid} is formatted with metadata ({format}): copy it with --pi \
         insert|generate|check|pass"
    )]
    MetadataFormat {
        nsid: u32,
        format: nvme_driver::LbaFormatInfo,
    },
}

/// The input of a write to the namespace.
struct Input {
    reader: Box<dyn Read>,
    /// Bytes left after `skip`, when the input is a regular file.
    len: Option<u64>,
}

fn open_input(from: &Stream, skip_bytes: u64) -> Result<Input, DdError> {
    let (mut reader, len): (Box<dyn Read>, Option<u64>) = match from {
        Stream::Stdio => (Box::new(io::stdin().lock()), None),
        Stream::Path(path) => {
            let open_err = |source| DdError::Open {
                path: path.clone(),
                source,
            };
            let mut file = File::open(path).map_err(open_err)?;
            let meta = file.metadata().map_err(open_err)?;
            if meta.is_file() {
                file.seek(SeekFrom::Start(skip_bytes))
                    .map_err(|source| DdError::Skip {
                        bytes: skip_bytes,
                        source,
                    })?;
                return Ok(Input {
                    reader: Box::new(file),
                    len: Some(meta.len().saturating_sub(skip_bytes)),
                });
            }
            (Box::new(file), None)
        }
    };
    if skip_bytes > 0 {
        let skipped =
            io::copy(&mut reader.by_ref().take(skip_bytes), &mut io::sink()).map_err(|source| {
                DdError::Skip {
                    bytes: skip_bytes,
                    source,
                }
            })?;
        if skipped < skip_bytes {
            log::warn!(
                "input ended after {skipped} of the {skip_bytes} bytes to skip; nothing to copy"
            );
        }
    }
    Ok(Input { reader, len })
}

/// Refuses `seek=` on an output that cannot seek, without opening (or creating) anything.
fn check_output(to: &Stream, seek: u64) -> Result<(), DdError> {
    if seek == 0 {
        return Ok(());
    }
    let path = match to {
        Stream::Stdio => {
            return Err(DdError::SeekOnStream {
                seek,
                what: "standard output".to_owned(),
            })
        }
        Stream::Path(path) => path,
    };
    match std::fs::metadata(path) {
        Ok(meta) if !meta.is_file() && !meta.file_type().is_block_device() => {
            Err(DdError::SeekOnStream {
                seek,
                what: path.display().to_string(),
            })
        }
        // Absent (it will be created as a regular file), a file or a block device; anything
        // else is reported when it is opened.
        _ => Ok(()),
    }
}

/// Opens the output for `records` records of `bs` bytes after `seek` records; a regular file
/// is truncated to the seek offset. Call it last: it is the first step that changes anything.
fn open_output(
    to: &Stream,
    seek: u64,
    bs: usize,
    records: u64,
) -> Result<Output<'static>, DdError> {
    let seek_bytes = byte_offset(&format!("seek={seek}"), seek, bs)?;
    // Saturating: u64::MAX records lie past MAX_BYTE_OFFSET whatever bs is.
    let end = seek.saturating_add(records);
    byte_offset(&format!("seek={seek} plus {records} records"), end, bs)?;
    let stream = |writer: Box<dyn Write>, what: &str| {
        if seek > 0 {
            return Err(DdError::SeekOnStream {
                seek,
                what: what.to_owned(),
            });
        }
        Ok(Output::sequential(Box::new(BufWriter::with_capacity(
            STREAM_BUFFER_BYTES,
            writer,
        ))))
    };
    let path: &Path = match to {
        Stream::Stdio => return stream(Box::new(io::stdout().lock()), "standard output"),
        Stream::Path(path) => path,
    };
    let open_err = |source| DdError::Open {
        path: path.to_owned(),
        source,
    };
    let file = File::options()
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(open_err)?;
    let kind = file.metadata().map_err(open_err)?.file_type();
    if kind.is_file() {
        // As dd does without conv=notrunc: keep what lies before the seek offset, drop the rest.
        file.set_len(seek_bytes).map_err(open_err)?;
        Ok(Output::Positional { file, seek })
    } else if kind.is_block_device() {
        Ok(Output::Positional { file, seek })
    } else {
        stream(Box::new(file), &path.display().to_string())
    }
}

fn run(cli: &Cli) -> Result<(), DdError> {
    // Operands first (every byte offset included), so a typo fails before the controller is
    // touched; nothing is opened for writing until the device and the plan are known to work.
    let transfer: Transfer = parse_operands(&cli.operands)?;
    let target = parse_target(&cli.device)?;
    let Transfer {
        bs,
        count,
        skip,
        seek,
        ..
    } = transfer;
    let skip_bytes = byte_offset(&format!("skip={skip}"), skip, bs)?;
    let nsid = match &transfer.direction {
        Direction::FromNvme { nsid, to } => {
            check_output(to, seek)?;
            *nsid
        }
        Direction::ToNvme { nsid, .. } => *nsid,
    };

    // --verify-through: the input must be a regular file (read again to compare).
    let verify_input = match (&cli.verify_through, &transfer.direction) {
        (None, _) => None,
        (
            Some(_),
            Direction::ToNvme {
                from: Stream::Path(path),
                ..
            },
        ) if std::fs::metadata(path).is_ok_and(|m| m.is_file()) => Some(path.clone()),
        (Some(_), d) => {
            let what = match d {
                Direction::FromNvme { nsid, .. } => format!("a read of if=nvme:{nsid}"),
                Direction::ToNvme {
                    from: Stream::Stdio,
                    ..
                } => "standard input".to_string(),
                Direction::ToNvme {
                    from: Stream::Path(p),
                    ..
                } => format!("{} (not a regular file)", p.display()),
            };
            return Err(verify::VerifyError::NotAFile { what }.into());
        }
    };

    let ctrl = AnyController::open(&target, ControllerOptions::default())?;
    // The second path is checked before anything is written.
    let verify_path = match &cli.verify_through {
        Some(device) => {
            let other = AnyController::open(&parse_target(device)?, ControllerOptions::default())?;
            Some(verify::VerifyPath::check(&ctrl, other, device, nsid)?)
        }
        None => None,
    };
    if let Some(mode) = cli.pi {
        let opts = pi::PiOptions {
            mode,
            metadata: cli.metadata.as_ref(),
            app_tag: cli.app_tag,
            fua: cli.fua,
        };
        return Ok(pi::run(&ctrl, &transfer, &opts)?);
    }
    let ns = ctrl.namespace(nsid)?;
    if ns.format().has_metadata() {
        return Err(DdError::MetadataFormat {
            nsid,
            format: ns.format(),
        });
    }
    let geo = Geometry::of(&ns);
    // The input is only read: opening it (and skipping) changes nothing on disk.
    let (mut input, plan) = match &transfer.direction {
        Direction::FromNvme { .. } => (None, Plan::read(&geo, bs, count, skip)?),
        Direction::ToNvme { from, .. } => {
            let input = open_input(from, skip_bytes)?;
            let plan = Plan::write(&geo, bs, count, seek, input.len)?;
            (Some(input), plan)
        }
    };
    let shape = copy::queue_shape(
        bs,
        geo.block_size,
        ctrl.max_transfer_bytes(),
        ctrl.max_queue_entries(),
        cli.qd.into(),
    )?;
    if shape.qd < cli.qd as usize {
        log::info!(
            "queue depth lowered from {} to {} (queue size / DMA memory limits)",
            cli.qd,
            shape.qd
        );
    }
    let qp = ctrl.create_queue_pair(QueuePairOptions {
        depth: shape.depth,
        ..QueuePairOptions::default()
    })?;
    let buffers =
        DmaBuffer::allocate_many(ctrl.dma(), shape.qd, bs).map_err(nvme_driver::Error::from)?;
    // Last: everything that can be checked has been; now the output may be created/truncated.
    let mut output = match &transfer.direction {
        Direction::FromNvme { to, .. } => {
            Some(open_output(to, seek, bs, plan.records.unwrap_or(0))?)
        }
        Direction::ToNvme { .. } => None,
    };
    let mut queue = NamespaceQueue { qp, ns };
    let mut progress = Progress::new(!cli.no_progress);
    log::debug!("{}: namespace {nsid}, {plan:?}, {shape:?}", ctrl.name());

    let CopyOutcome { stats, error } = match (&mut input, &mut output) {
        (Some(input), _) => copy::write_namespace(
            &mut queue,
            &plan,
            buffers,
            &mut input.reader,
            cli.fua,
            &mut progress,
        ),
        (None, Some(output)) => {
            copy::read_namespace(&mut queue, &plan, buffers, output, &mut progress)
        }
        (None, None) => unreachable!("one side of the transfer is always a file"),
    };
    let mut err = io::stderr().lock();
    if stats.padding > 0 {
        writeln!(
            err,
            "note: the last record was padded with {} zero bytes to whole blocks",
            stats.padding
        )
        .map_err(DdError::Summary)?;
    }
    err.write_all(stats.summary().as_bytes())
        .map_err(DdError::Summary)?;
    if let Some(e) = error {
        return Err(e.into());
    }
    if let (Some(path), Some(input)) = (&verify_path, &verify_input) {
        path.read_back(nsid, plan.start_lba, stats.bytes, bs, input, skip_bytes)?;
        writeln!(
            err,
            "verified: {} bytes read back through {} (controller {})",
            stats.bytes, path.device, path.cntlid
        )
        .map_err(DdError::Summary)?;
    }
    Ok(())
}

fn main() -> ExitCode {
    nvme_tool_support::main(|cli: &Cli| run(cli))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cli_takes_dd_operands_after_the_options() {
        let cli = Cli::try_parse_from([
            "nvme-dd",
            "--device",
            "0000:00:04.0",
            "--qd",
            "4",
            "if=nvme:1",
            "of=x",
            "bs=4k",
        ])
        .unwrap();
        assert_eq!(cli.qd, 4);
        assert_eq!(cli.operands, ["if=nvme:1", "of=x", "bs=4k"]);
        let cli = Cli::try_parse_from([
            "nvme-dd",
            "if=-",
            "--fua",
            "of=nvme:1",
            "--device",
            "trtype:PCIe traddr:0000:00:04.0",
        ])
        .unwrap();
        assert!(cli.fua && !cli.no_progress);
        assert_eq!(cli.qd, 16);
        assert!(Cli::try_parse_from(["nvme-dd", "--device", "x", "--qd", "0"]).is_err());
        assert!(
            Cli::try_parse_from(["nvme-dd", "if=nvme:1"]).is_err(),
            "--device is required"
        );
    }

    #[test]
    fn queue_depth_is_bounded() {
        let parse = |qd: &str| Cli::try_parse_from(["nvme-dd", "--device", "x", "--qd", qd]);
        assert_eq!(parse("4096").unwrap().qd, 4096);
        let msg = parse("5000").unwrap_err().to_string();
        assert!(
            msg.contains(
                "--qd 5000 is more than the 4096 requests nvme-dd can keep in flight: \
                 use --qd 4096 or less"
            ),
            "{msg}"
        );
        for bad in ["0", "65536", "99999999999999999999999", "x"] {
            let msg = parse(bad).unwrap_err().to_string();
            assert!(msg.contains("4096"), "{bad}: {msg}");
        }
        let msg = Cli::try_parse_from(["nvme-dd", "--device", "x", "--qd=-1"])
            .unwrap_err()
            .to_string();
        assert!(msg.contains("--qd -1 is not a number"), "{msg}");
    }

    #[test]
    fn an_overflowing_seek_is_refused_before_the_output_is_touched() {
        let path = std::env::temp_dir().join(format!("nvme-dd-main-wrap-{}", std::process::id()));
        std::fs::write(&path, b"precious").unwrap();
        // 2^52 records of 4 KiB wrap to byte offset 0: the file used to be truncated to 0.
        let seek = 1u64 << 52;
        let result = open_output(&Stream::Path(path.clone()), seek, 4096, 1);
        let content = std::fs::read(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        match result {
            Err(DdError::Operand(e @ OperandError::OffsetOverflow { .. })) => {
                assert!(
                    e.to_string().contains("seek=4503599627370496 with bs=4096"),
                    "{e}"
                )
            }
            Err(e) => panic!("expected an offset overflow, got {e}"),
            Ok(_) => panic!("expected an offset overflow, got an output"),
        }
        assert_eq!(content, b"precious");
        // The end of the transfer counts too.
        assert!(matches!(
            open_output(&Stream::Stdio, 0, 1 << 20, 1 << 43),
            Err(DdError::Operand(OperandError::OffsetOverflow { .. }))
        ));
    }

    #[test]
    fn a_seek_on_standard_output_is_refused_before_the_device_is_opened() {
        assert!(matches!(
            check_output(&Stream::Stdio, 1),
            Err(DdError::SeekOnStream { seek: 1, .. })
        ));
        assert!(check_output(&Stream::Stdio, 0).is_ok());
        assert!(check_output(&Stream::Path("/nonexistent/dir/x".into()), 5).is_ok());
        assert!(matches!(
            check_output(&Stream::Path("/dev/null".into()), 5),
            Err(DdError::SeekOnStream { seek: 5, .. })
        ));
    }

    #[test]
    fn seek_on_a_stream_output_is_refused() {
        assert!(matches!(
            open_output(&Stream::Stdio, 3, 512, 1),
            Err(DdError::SeekOnStream { seek: 3, .. })
        ));
    }

    #[test]
    fn output_file_is_truncated_to_the_seek_offset() {
        let path = std::env::temp_dir().join(format!("nvme-dd-main-test-{}", std::process::id()));
        std::fs::write(&path, vec![7u8; 10_000]).unwrap();
        let out = open_output(&Stream::Path(path.clone()), 2, 1024, 1).unwrap();
        assert!(matches!(out, Output::Positional { seek: 2, .. }));
        drop(out);
        let len = std::fs::metadata(&path).unwrap().len();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(len, 2048);
    }

    #[test]
    fn input_file_skip_and_length() {
        let path = std::env::temp_dir().join(format!("nvme-dd-main-input-{}", std::process::id()));
        std::fs::write(&path, (0..100u8).collect::<Vec<_>>()).unwrap();
        let mut input = open_input(&Stream::Path(path.clone()), 40).unwrap();
        let mut rest = Vec::new();
        input.reader.read_to_end(&mut rest).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(input.len, Some(60));
        assert_eq!(rest, (40..100u8).collect::<Vec<_>>());
        assert!(matches!(
            open_input(&Stream::Path("/nonexistent/x".into()), 0),
            Err(DdError::Open { .. })
        ));
    }
}
