//! `nvme-hello DEVICE [--nsid N] [--lba L | --write-lba L]`: the smallest end-to-end check of
//! the data path. Creates an I/O queue pair and then:
//!
//! * by default, reads one block (LBA 0, or `--lba L`) and prints it as a hex dump; nothing is
//!   written, so it is safe on a drive that holds data;
//! * with `--write-lba L`, writes "Hello world!\n" (zero-padded to one block) to LBA L, reads the
//!   block back into a fresh buffer, prints what came back, and fails if it differs.
//!   This overwrites the block at LBA L: choose one that holds nothing of value.
//!
//! With `--verify` it first sends a Verify of that block (no data moves) and reports its status.
//!
//! With `--copy LBA:BLOCKS[,LBA:BLOCKS...] --copy-to DEST` it first sends one Copy (NVM CS
//! §3.3.2): the controller copies those source ranges, in order, to consecutive blocks from
//! DEST (overwriting them) without the data crossing to the host, and the tool reports the
//! namespace's Copy limits (MSRC + 1 ranges, MSSRL blocks a range, MCL blocks in all) and the
//! status. Then it goes on as above (`--lba DEST` prints the first copied block).
//!
//! `--copy-format 1` writes the list in Copy Descriptor Format 1h (40-byte entries, for
//! namespaces with a 32-bit or 64-bit guard) instead of 0h.
//!
//! `--write-uncorrectable L` and `--compare-and-write L` exercise those optional commands on
//! block L (DESTROYING it; see `commands.rs`); a controller without them is refused by name.
//!
//! With `--writev FILE --writev-lba L` it first writes FILE's bytes to LBA L in ONE vectored
//! Write whose data is scattered pieces of `--piece-bytes` (default 4096; at most 32 pieces),
//! then reads them back in one vectored Read into fresh pieces and compares (DESTROYS those
//! blocks). `--no-sgl` makes a PCIe controller use PRP lists even when it offers SGLs.
//!
//! Errors go to stderr as `error: <message>` (with the chain of causes) and exit with status 1;
//! bad input never panics.

use nvme_driver::command::{CopyFormat, CopyRanges, Verify};
use nvme_driver::spec::queue::COPY_MAX_RANGES;
use nvme_driver::WriteFlags;
use std::io::Write;
use std::process::ExitCode;

use clap::Parser;

mod commands;
mod vectored;
use nvme_driver::{ControllerOptions, IoFailure, Namespace, QueuePairOptions};
use nvme_tool_support::{parse_target, AnyController, IoQueue, TargetError};

/// The message written to the device.
const GREETING: &[u8] = b"Hello world!\n";

/// Read one block of an NVMe namespace and print it (read-only); with --write-lba, write
/// "Hello world!" to that block and read it back (overwrites that block).
#[derive(Debug, Parser)]
#[command(version, about)]
struct Cli {
    /// PCI address (0000:00:04.0) or transport id (trtype:PCIe traddr:0000:00:04.0, or
    /// trtype:TCP traddr:127.0.0.1 trsvcid:4420 subnqn:NQN for NVMe/TCP; quoted or not).
    #[arg(required = true, num_args = 1..)]
    device: Vec<String>,
    /// Namespace to use (default: the first active one).
    #[arg(long)]
    nsid: Option<u32>,
    /// Block to read and print in the default, read-only mode.
    #[arg(long, default_value_t = 0, conflicts_with = "write_lba")]
    lba: u64,
    /// Write "Hello world!" to this block (DESTROYS its contents), read it back and compare.
    /// Without it nothing is written.
    #[arg(long, value_name = "LBA")]
    write_lba: Option<u64>,
    /// Reset the controller between the write and the read-back (a recovery smoke test:
    /// through registers on PCIe, a new association over NVMe/TCP; the queue pair re-creates
    /// or reconnects its queue by itself).
    #[arg(long, requires = "write_lba")]
    reset: bool,
    /// Also send a Verify of the block (the controller reads it and checks its integrity; no
    /// data moves) and report its status.
    #[arg(long)]
    verify: bool,
    /// First send one Copy of these source ranges (LBA:BLOCKS, comma-separated, at most 256,
    /// e.g. 0:8,100:8) to the blocks from --copy-to (DESTROYS their contents); the controller
    /// moves the data itself.
    #[arg(long, value_name = "LBA:BLOCKS,...", value_parser = parse_ranges, requires = "copy_to")]
    copy: Option<SourceRanges>,
    /// Destination LBA of --copy.
    #[arg(long, value_name = "LBA", requires = "copy")]
    copy_to: Option<u64>,
    /// Copy Descriptor Format of the --copy list: 0 (32-byte entries) or 1 (40-byte entries,
    /// for namespaces formatted with a 32-bit or 64-bit guard).
    #[arg(long, value_name = "0|1", default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=1), requires = "copy")]
    copy_format: u8,
    /// Mark this block uncorrectable (DESTROYS it), check that a read fails, write it again.
    #[arg(long, value_name = "LBA")]
    write_uncorrectable: Option<u64>,
    /// A fused Compare and Write of this block (DESTROYS it): a match that writes, then a
    /// miscompare.
    #[arg(long, value_name = "LBA")]
    compare_and_write: Option<u64>,
    /// First write this file's bytes (a whole number of blocks) to --writev-lba in one
    /// vectored Write of scattered pieces (DESTROYS those blocks), read them back in one
    /// vectored Read and compare.
    #[arg(long, value_name = "FILE", requires = "writev_lba")]
    writev: Option<std::path::PathBuf>,
    /// Where --writev writes.
    #[arg(long, value_name = "LBA", requires = "writev")]
    writev_lba: Option<u64>,
    /// Bytes of each --writev piece (the last holds the rest).
    #[arg(
        long,
        value_name = "BYTES",
        default_value_t = 4096,
        requires = "writev"
    )]
    piece_bytes: usize,
    /// PCIe: use PRP data pointers even when the controller offers SGLs.
    #[arg(long)]
    no_sgl: bool,
}

/// The source ranges of `--copy`, as (LBA, blocks).
#[derive(Clone, Debug, PartialEq, Eq)]
struct SourceRanges(Vec<(u64, u32)>);

/// `LBA:BLOCKS[,LBA:BLOCKS...]`: 1..=256 ranges of at least one block each.
fn parse_ranges(value: &str) -> Result<SourceRanges, String> {
    let ranges = value
        .split(',')
        .map(|range| {
            let (lba, blocks) = range
                .split_once(':')
                .ok_or_else(|| format!("`{range}` is not LBA:BLOCKS (e.g. 100:8)"))?;
            let lba = lba
                .trim()
                .parse::<u64>()
                .map_err(|e| format!("`{range}`: LBA `{lba}`: {e}"))?;
            let blocks = match blocks.trim().parse::<u32>() {
                Ok(0) => return Err(format!("`{range}`: a range has at least one block")),
                Ok(n) => n,
                Err(e) => return Err(format!("`{range}`: BLOCKS `{blocks}`: {e}")),
            };
            Ok((lba, blocks))
        })
        .collect::<Result<Vec<_>, String>>()?;
    if ranges.len() > COPY_MAX_RANGES {
        return Err(format!(
            "{} ranges: one Copy carries at most {COPY_MAX_RANGES}",
            ranges.len()
        ));
    }
    Ok(SourceRanges(ranges))
}

/// Why `nvme-hello` failed.
#[derive(Debug, thiserror::Error)]
enum HelloError {
    #[error(transparent)]
    Device(#[from] TargetError),
    #[error(transparent)]
    Driver(#[from] nvme_driver::Error),
    #[error("{what} of LBA {lba} on namespace {nsid} failed: {source}")]
    Io {
        what: &'static str,
        nsid: u32,
        lba: u64,
        source: nvme_driver::Error,
    },
    #[error("controller {controller} has no active namespace: create or attach one first")]
    NoNamespace { controller: String },
    #[error(
        "namespace {nsid} has {block_size}-byte blocks, too small for the {len}-byte greeting"
    )]
    BlockTooSmall {
        nsid: u32,
        block_size: u32,
        len: usize,
    },
    #[error("data read back from LBA {lba} differs from what was written: got {got:?}")]
    Mismatch { lba: u64, got: String },
    #[error("--writev: {len} bytes is not a whole, non-zero number of {block_size}-byte blocks")]
    VectoredShape { len: usize, block_size: usize },
    #[error("--writev: {pieces} pieces, more than one vectored command carries ({max})")]
    TooManyPieces { pieces: usize, max: usize },
    #[error("data read back vectored from LBA {lba} differs from what was written vectored")]
    VectoredMismatch { lba: u64 },
    #[error("LBA {lba} still reads after Write Uncorrectable: the controller ignored it")]
    StillReadable { lba: u64 },
    #[error("Compare and Write of LBA {lba}: expected Written then Miscompare, got {got}")]
    FusedOutcome { lba: u64, got: String },
    #[error("cannot read {path}: {source}")]
    Input {
        path: String,
        source: std::io::Error,
    },
    #[error("cannot write to standard output: {0}")]
    Output(#[from] std::io::Error),
}

pub(crate) fn io_error(
    what: &'static str,
    ns: &Namespace,
    lba: u64,
) -> impl FnOnce(IoFailure) -> HelloError {
    let nsid = ns.nsid();
    move |f| HelloError::Io {
        what,
        nsid,
        lba,
        source: f.error,
    }
}

/// A hex dump of `data` in the style of `hexdump -C`: 16 bytes a line with their offset and
/// printable characters; a run of lines equal to the one before is shown as a single `*`.
fn hex_dump(data: &[u8]) -> String {
    let mut out = String::new();
    let mut previous: Option<&[u8]> = None;
    let mut squeezing = false;
    for (i, line) in data.chunks(16).enumerate() {
        if previous == Some(line) {
            if !squeezing {
                out.push_str("*\n");
                squeezing = true;
            }
            continue;
        }
        squeezing = false;
        previous = Some(line);
        out.push_str(&format!("{:08x} ", i * 16));
        for (j, b) in line.iter().enumerate() {
            if j == 8 {
                out.push(' ');
            }
            out.push_str(&format!(" {b:02x}"));
        }
        for j in line.len()..16 {
            out.push_str(if j == 8 { "    " } else { "   " });
        }
        let text: String = line
            .iter()
            .map(|&b| {
                if b.is_ascii_graphic() || b == b' ' {
                    b as char
                } else {
                    '.'
                }
            })
            .collect();
        out.push_str(&format!("  |{text}|\n"));
    }
    out.push_str(&format!("{:08x}\n", data.len()));
    out
}

/// The text of a block: bytes up to the first NUL, non-printable bytes escaped.
fn block_text(block: &[u8]) -> String {
    let end = block.iter().position(|&b| b == 0).unwrap_or(block.len());
    String::from_utf8_lossy(&block[..end]).into_owned()
}

fn run(cli: &Cli) -> Result<(), HelloError> {
    let target = parse_target(&cli.device.join(" "))?;
    let options = ControllerOptions {
        sgl: !cli.no_sgl,
        ..ControllerOptions::default()
    };
    let ctrl = AnyController::open(&target, options)?;
    let id = ctrl.identify();
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "Using controller {} ({}, serial {})",
        ctrl.name(),
        id.model(),
        id.serial()
    )?;

    let ns = match cli.nsid {
        Some(nsid) => ctrl.namespace(nsid)?,
        None => ctrl
            .namespaces()
            .first()
            .cloned()
            .ok_or_else(|| HelloError::NoNamespace {
                controller: ctrl.name().to_owned(),
            })?,
    };
    let block_size = ns.block_size();
    if (block_size as usize) < GREETING.len() {
        return Err(HelloError::BlockTooSmall {
            nsid: ns.nsid(),
            block_size,
            len: GREETING.len(),
        });
    }
    let lba = cli.write_lba.unwrap_or(cli.lba);
    if ns.format().has_metadata() && cli.copy.is_some() {
        // Only the Copy runs there (no plain read follows): any block of the namespace.
        ns.check_blocks(lba, 1)?;
    } else {
        ns.check_range(lba, 1)?;
    }
    let mode = if cli.write_lba.is_some() {
        "writing the greeting to"
    } else if cli.copy.is_some() {
        "after the Copy, printing"
    } else {
        "read-only, printing"
    };
    writeln!(
        out,
        "  Namespace {}: {} blocks of {block_size} bytes; {mode} LBA {lba}",
        ns.nsid(),
        ns.blocks(),
    )?;

    let options = QueuePairOptions {
        depth: QueuePairOptions::default()
            .depth
            .min(ctrl.max_queue_entries()),
        ..QueuePairOptions::default()
    };
    let mut qp = ctrl.create_queue_pair(options)?;
    if cli.verify {
        qp.execute(&ns, Verify::new(lba, 1), None)
            .map_err(io_error("verify", &ns, lba))?;
        writeln!(
            out,
            "  Verify of LBA {lba}: ok (the controller read and checked it)"
        )?;
    }

    if let (Some(SourceRanges(ranges)), Some(dest)) = (&cli.copy, cli.copy_to) {
        let limits = ns.identify();
        writeln!(
            out,
            "  Copy limits of namespace {}: {} ranges (MSRC + 1), {} blocks a range (MSSRL), {} \
             blocks in all (MCL)",
            ns.nsid(),
            limits.copy_max_ranges(),
            limits.mssrl,
            limits.mcl
        )?;
        let format = if cli.copy_format == 1 {
            CopyFormat::Format1
        } else {
            CopyFormat::Format0
        };
        let mut buf = ctrl.alloc_buffer(ranges.len() * format.entry_bytes())?;
        let mut list = CopyRanges::with_format(&mut buf, format);
        for &(lba, blocks) in ranges {
            list.push(lba, blocks)?;
        }
        let copy = list.copy_to(dest);
        qp.execute(&ns, copy, Some(buf))
            .map_err(io_error("copy", &ns, dest))?;
        writeln!(
            out,
            "  Copy of {} source ranges ({} blocks) to LBA {dest}..{}: ok (the controller copied \
             them; descriptor format {}h)",
            copy.ranges,
            copy.range.blocks,
            dest + u64::from(copy.range.blocks),
            format.code()
        )?;
    }
    if let Some(at) = cli.write_uncorrectable {
        commands::write_uncorrectable(&mut out, &ctrl, &mut qp, &ns, at)?;
    }
    if let Some(at) = cli.compare_and_write {
        commands::compare_and_write(&mut out, &ctrl, &mut qp, &ns, at)?;
    }

    if let (Some(path), Some(at)) = (&cli.writev, cli.writev_lba) {
        let data = std::fs::read(path).map_err(|source| HelloError::Input {
            path: path.display().to_string(),
            source,
        })?;
        vectored::write_read(&mut out, &ctrl, &mut qp, &ns, at, &data, cli.piece_bytes)?;
    }

    let Some(write_lba) = cli.write_lba else {
        if ns.format().has_metadata() && cli.copy.is_some() {
            // A plain read cannot carry the metadata: the Copy was the work asked for.
            writeln!(
                out,
                "  Namespace {} has metadata: no plain read of LBA {lba}. Nothing else was \
                 written.",
                ns.nsid()
            )?;
            out.flush()?;
            return Ok(());
        }
        let buf = ctrl.alloc_buffer(block_size as usize)?;
        let read = qp
            .read(&ns, lba, 1, buf)
            .map_err(io_error("read", &ns, lba))?;
        write!(out, "{}", hex_dump(&read))?;
        let nothing = if cli.copy.is_some() {
            "Nothing else was written"
        } else {
            "Nothing was written"
        };
        writeln!(
            out,
            "{nothing}. To write \"Hello world!\" to a block and read it back, \
             pass --write-lba L (this overwrites block L)."
        )?;
        out.flush()?;
        return Ok(());
    };

    let mut buf = ctrl.alloc_buffer(block_size as usize)?;
    buf.fill(0);
    buf[..GREETING.len()].copy_from_slice(GREETING);
    let written = qp
        .write(&ns, write_lba, 1, buf, WriteFlags::NONE)
        .map_err(io_error("write", &ns, write_lba))?;
    if cli.reset {
        ctrl.reset()?;
        writeln!(
            out,
            "  Controller reset; reading the block back through the same queue pair"
        )?;
    }

    let fresh = ctrl.alloc_buffer(block_size as usize)?;
    let read = qp
        .read(&ns, write_lba, 1, fresh)
        .map_err(io_error("read", &ns, write_lba))?;
    let text = block_text(&read);
    write!(out, "{text}")?;
    out.flush()?;
    if read[..] != written[..] {
        return Err(HelloError::Mismatch {
            lba: write_lba,
            got: text,
        });
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
    fn block_text_stops_at_the_padding() {
        let mut block = [0u8; 512];
        block[..GREETING.len()].copy_from_slice(GREETING);
        assert_eq!(block_text(&block), "Hello world!\n");
        assert_eq!(block_text(b"abc"), "abc");
        assert_eq!(block_text(&[0u8; 4]), "");
    }

    #[test]
    fn hex_dump_squeezes_repeated_lines() {
        let mut block = [0u8; 512];
        block[..GREETING.len()].copy_from_slice(GREETING);
        let dump = hex_dump(&block);
        let lines: Vec<&str> = dump.lines().collect();
        assert_eq!(
            lines[0],
            "00000000  48 65 6c 6c 6f 20 77 6f  72 6c 64 21 0a 00 00 00  |Hello world!....|"
        );
        assert_eq!(
            lines[1],
            "00000010  00 00 00 00 00 00 00 00  00 00 00 00 00 00 00 00  |................|"
        );
        assert_eq!(lines[2], "*");
        assert_eq!(lines[3], "00000200");
        assert_eq!(lines.len(), 4);
        assert_eq!(
            hex_dump(b"abc"),
            "00000000  61 62 63                                          |abc|\n00000003\n"
        );
    }

    #[test]
    fn cli_defaults_and_bad_values() {
        let cli = Cli::try_parse_from(["nvme-hello", "0000:00:04.0"]).unwrap();
        assert_eq!((cli.nsid, cli.lba, cli.write_lba), (None, 0, None));
        assert!(!cli.verify);
        assert!(
            Cli::try_parse_from(["nvme-hello", "--verify", "x"])
                .unwrap()
                .verify
        );
        let cli =
            Cli::try_parse_from(["nvme-hello", "--copy", "0:8, 100:1", "--copy-to", "50", "x"])
                .unwrap();
        assert_eq!(
            (cli.copy, cli.copy_to),
            (Some(SourceRanges(vec![(0, 8), (100, 1)])), Some(50))
        );
        for bad in ["", "5", "5:0", "x:1", "1:y", "1:2,"] {
            assert!(
                Cli::try_parse_from(["nvme-hello", "--copy", bad, "--copy-to", "1", "x"]).is_err(),
                "{bad:?}"
            );
        }
        let many = vec!["1:1"; 257].join(",");
        assert!(parse_ranges(&many).unwrap_err().contains("at most 256"));
        // Each needs the other.
        assert!(Cli::try_parse_from(["nvme-hello", "--copy", "0:1", "x"]).is_err());
        assert!(Cli::try_parse_from(["nvme-hello", "--copy-to", "3", "x"]).is_err());
        let cli = Cli::try_parse_from(["nvme-hello", "--write-lba", "9", "0000:00:04.0"]).unwrap();
        assert_eq!(cli.write_lba, Some(9));
        assert!(Cli::try_parse_from([
            "nvme-hello",
            "--lba",
            "1",
            "--write-lba",
            "9",
            "0000:00:04.0"
        ])
        .is_err());
        assert!(Cli::try_parse_from(["nvme-hello", "--write-lba", "0000:00:04.0"]).is_err());
        let cli = Cli::try_parse_from(["nvme-hello", "--nsid", "2", "--lba", "77", "0000:00:04.0"])
            .unwrap();
        assert_eq!((cli.nsid, cli.lba), (Some(2), 77));
        assert!(Cli::try_parse_from(["nvme-hello", "--lba", "-1", "0000:00:04.0"]).is_err());
        assert!(Cli::try_parse_from(["nvme-hello", "--nsid", "x", "0000:00:04.0"]).is_err());
        assert!(Cli::try_parse_from(["nvme-hello"]).is_err());
        let cli = Cli::try_parse_from([
            "nvme-hello",
            "trtype:PCIe",
            "traddr:0000:00:04.0",
            "--lba",
            "5",
        ])
        .unwrap();
        assert_eq!(
            parse_target(&cli.device.join(" ")).unwrap(),
            nvme_tool_support::Target::Pcie("0000:00:04.0".parse().unwrap())
        );
        assert_eq!(cli.lba, 5);
    }
}
