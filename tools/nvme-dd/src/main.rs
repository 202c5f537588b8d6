//! `nvme-dd --device DEVICE [if=..] [of=..] [bs=..] [count=..] [skip=..] [seek=..]`: dd for a
//! namespace driven from userspace. Exactly one of `if=`/`of=` is `nvme:NSID`; the other is a
//! file, or standard input/output (`-` or left out). `skip`/`seek` count records of `bs` bytes,
//! as in dd, and `bs` must be a whole number of the namespace's blocks.
//!
//! Files are opened and the transfer is checked against the namespace before any I/O; the copy
//! itself (see [`copy`]) keeps `--qd` requests in flight. Errors go to stderr as
//! `error: <message>` (with the chain of causes) and exit with status 1; bad input never panics.

mod copy;
mod operands;

use std::fs::File;
use std::io::{self, BufWriter, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Parser;
use nvme_driver::{Controller, ControllerOptions, DmaBuffer, QueuePairOptions};

use crate::copy::{CopyError, CopyOutcome, Geometry, NamespaceQueue, Output, Plan, Progress};
use crate::operands::{parse_operands, Direction, OperandError, Stream, Transfer};
use nvme_driver::{parse_device, DeviceArgError};

/// Buffer size for writes to a stream output (stdout, pipes).
const STREAM_BUFFER_BYTES: usize = 1 << 20;

/// Copy between a file (or stdin/stdout) and an NVMe namespace, dd style.
#[derive(Debug, Parser)]
#[command(
    version,
    about,
    after_help = "Operands: if=PATH|-|nvme:NSID  of=PATH|-|nvme:NSID  bs=BYTES (k/K, M, G suffixes; default 512)  count=N  skip=N  seek=N"
)]
struct Cli {
    /// PCI address (0000:00:04.0) or transport id ("trtype:PCIe traddr:0000:00:04.0").
    #[arg(long)]
    device: String,
    /// Requests kept in flight.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u16).range(1..))]
    qd: u16,
    /// Force Unit Access on writes (data reaches non-volatile media before completion).
    #[arg(long)]
    fua: bool,
    /// Do not print the once-a-second progress line.
    #[arg(long)]
    no_progress: bool,
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
    Device(#[from] DeviceArgError),
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

fn open_output(to: &Stream, seek: u64, bs: usize) -> Result<Output<'static>, DdError> {
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
        file.set_len(seek * bs as u64).map_err(open_err)?;
        Ok(Output::Positional { file, seek })
    } else if kind.is_block_device() {
        Ok(Output::Positional { file, seek })
    } else {
        stream(Box::new(file), &path.display().to_string())
    }
}

fn run(cli: &Cli) -> Result<(), DdError> {
    let transfer: Transfer = parse_operands(&cli.operands)?;
    let address = parse_device(&cli.device)?;
    let Transfer {
        bs,
        count,
        skip,
        seek,
        ..
    } = transfer;
    let skip_bytes = |what| {
        skip.checked_mul(bs as u64).ok_or(CopyError::Overflow {
            operand: what,
            value: skip,
            bs,
        })
    };

    // Files first, so a typo fails before the controller is touched.
    let (nsid, mut input, mut output) = match &transfer.direction {
        Direction::FromNvme { nsid, to } => (*nsid, None, Some(open_output(to, seek, bs)?)),
        Direction::ToNvme { from, nsid } => {
            (*nsid, Some(open_input(from, skip_bytes("skip")?)?), None)
        }
    };

    let ctrl = Controller::open_pci(&address.to_string(), ControllerOptions::default())?;
    let ns = ctrl.namespace(nsid)?;
    let geo = Geometry::of(&ns);
    let plan = match &input {
        None => Plan::read(&geo, bs, count, skip)?,
        Some(input) => Plan::write(&geo, bs, count, seek, input.len)?,
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
    match error {
        Some(e) => Err(e.into()),
        None => Ok(()),
    }
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
    fn seek_on_a_stream_output_is_refused() {
        assert!(matches!(
            open_output(&Stream::Stdio, 3, 512),
            Err(DdError::SeekOnStream { seek: 3, .. })
        ));
    }

    #[test]
    fn output_file_is_truncated_to_the_seek_offset() {
        let path = std::env::temp_dir().join(format!("nvme-dd-main-test-{}", std::process::id()));
        std::fs::write(&path, vec![7u8; 10_000]).unwrap();
        let out = open_output(&Stream::Path(path.clone()), 2, 1024).unwrap();
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
