//! `nvme-ublk DEVICE [-n NSID] [--queues N] [--depth N] [--max-io-bytes N] [--id N]`: one
//! namespace of a controller driven by our driver, served to the kernel as the block device
//! `/dev/ublkbN` (the kernel's ublk driver, through the `libublk` crate), so that unmodified
//! programs (mkfs, mount, fio, databases) use it.
//!
//! Each ublk queue has its own thread and its own queue pair ([`engine::Engine`]); queue
//! depth and block size come from the controller and the namespace. Read, write (FUA), flush,
//! discard (Deallocate) and write-zeroes map to NVMe commands ([`mapping`]); a failed command
//! fails the kernel's I/O with EIO. SIGINT or SIGTERM stops cleanly: the ublk device is
//! stopped and deleted, the queue pairs are drained and deleted, the controller released.
//!
//! Order of work, so that a failure leaves nothing behind: the ublk control device is checked
//! first (driver loaded, permission), then the controller, the namespace, the queue pairs and
//! their DMA buffers, and only then is the ublk device added.

mod engine;
mod mapping;
mod server;

use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use clap::Parser;
use nvme_driver::{ControllerOptions, IoQueue, QueuePairOptions};
use nvme_tool_support::{parse_target, AnyController, TargetError};

use crate::engine::Engine;
use crate::mapping::{Geometry, SECTOR_SHIFT};
use crate::server::{DeviceConfig, ServeSummary, UblkServeError};

/// Queues when `--queues` is not given (fewer if the controller grants fewer queue pairs).
const DEFAULT_QUEUES: u16 = 2;
/// Largest queue depth when `--depth` is not given (memory: one I/O buffer per tag, twice).
const DEFAULT_MAX_DEPTH: u16 = 128;
/// Largest ublk queue depth (the kernel's `UBLK_MAX_QUEUE_DEPTH`).
const UBLK_MAX_QUEUE_DEPTH: u16 = 4096;
/// Largest I/O when `--max-io-bytes` is not given (lowered to the controller's MDTS).
const DEFAULT_MAX_IO_BYTES: u32 = 256 << 10;

/// Default `--poll-sleep-us`: poll without sleeping (in the TCG guest of docs/performance.md
/// a 20 µs sleep halved QD1 IOPS and changed QD32 by less than the noise).
const DEFAULT_POLL_SLEEP_US: u64 = 0;

/// Serve an NVMe namespace as a ublk block device (/dev/ublkbN).
#[derive(Debug, Parser)]
#[command(name = "nvme-ublk", version, about)]
struct Cli {
    /// PCI address (0000:00:04.0) or transport id ("trtype:PCIe traddr:0000:00:04.0", or
    /// "trtype:TCP traddr:127.0.0.1 trsvcid:4420 subnqn:NQN" for NVMe/TCP).
    device: String,
    /// Namespace to serve.
    #[arg(short = 'n', long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    nsid: u32,
    /// ublk queues, each on its own thread with its own queue pair (default 2, at most the
    /// controller's I/O queue pairs).
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
    queues: Option<u16>,
    /// Requests in flight per queue (default: the queue pair's capacity, at most 128).
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=UBLK_MAX_QUEUE_DEPTH as i64))]
    depth: Option<u16>,
    /// Largest I/O in bytes (lowered to the controller's maximum transfer; whole blocks).
    #[arg(long, default_value_t = DEFAULT_MAX_IO_BYTES)]
    max_io_bytes: u32,
    /// While requests are in flight and the device is slow to answer, sleep this many
    /// microseconds between polls (0: poll without sleeping, a core busy while I/O is in
    /// flight).
    #[arg(long, default_value_t = DEFAULT_POLL_SLEEP_US)]
    poll_sleep_us: u64,
    /// ublk device id (N of /dev/ublkbN); default: the kernel picks.
    #[arg(long, default_value_t = -1, allow_hyphen_values = true,
          value_parser = clap::value_parser!(i32).range(-1..))]
    id: i32,
}

/// Why `nvme-ublk` failed.
#[derive(Debug, thiserror::Error)]
enum ToolError {
    #[error(transparent)]
    Device(#[from] TargetError),
    #[error(transparent)]
    Driver(#[from] nvme_driver::Error),
    #[error(transparent)]
    Ublk(#[from] UblkServeError),
    #[error(
        "namespace {nsid} is formatted with metadata ({format}): nvme-ublk serves namespaces \
         without metadata only"
    )]
    Metadata {
        nsid: u32,
        format: nvme_driver::LbaFormatInfo,
    },
    #[error("--max-io-bytes {asked} is less than one {block_size}-byte block")]
    MaxIo { asked: u32, block_size: u32 },
    #[error("installing the signal handlers: {0}")]
    Signal(#[source] std::io::Error),
}

fn run(cli: &Cli) -> Result<(), ToolError> {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone()).map_err(ToolError::Signal)?;
    }
    let target = parse_target(&cli.device)?;
    server::check_control()?;
    let ctrl = AnyController::open(&target, ControllerOptions::default())?;
    let ns = ctrl.namespace(cli.nsid)?;
    let format = ns.format();
    if format.has_metadata() {
        return Err(ToolError::Metadata {
            nsid: cli.nsid,
            format,
        });
    }
    let block_size = ns.block_size();
    let max_io = cli
        .max_io_bytes
        .min(u32::try_from(ctrl.max_transfer_bytes()).unwrap_or(u32::MAX));
    let max_io = max_io - max_io % block_size;
    if max_io == 0 {
        return Err(ToolError::MaxIo {
            asked: cli.max_io_bytes,
            block_size,
        });
    }
    let oncs = ctrl.identify().oncs_flags();
    let pcie = ctrl.as_pcie().is_some();
    let geo = Geometry {
        block_size,
        blocks: ns.blocks(),
        max_io_bytes: max_io,
        // Deallocate is a PCIe-only operation of our driver.
        discard: pcie && oncs.contains(nvme_driver::spec::Oncs::DATASET_MANAGEMENT),
        write_zeroes: oncs.contains(nvme_driver::spec::Oncs::WRITE_ZEROES),
    };
    let queues = cli
        .queues
        .unwrap_or(DEFAULT_QUEUES)
        .min(ctrl.io_queue_pairs())
        .max(1);
    let want_depth = cli.depth.unwrap_or(DEFAULT_MAX_DEPTH);
    // One entry more than the tags: a queue of N entries holds N - 1 commands (NVMe Base
    // §3.3.1.5, Full Queue).
    let entries = (u32::from(want_depth) + 1).min(ctrl.max_queue_entries());
    let mut engines = Vec::with_capacity(usize::from(queues));
    let mut depth = want_depth;
    for _ in 0..queues {
        let qp = ctrl.create_queue_pair(QueuePairOptions::default().depth(entries))?;
        depth = depth.min(qp.capacity());
        engines.push(qp);
    }
    let engines = engines
        .into_iter()
        .map(|qp| Engine::new(qp, ns.clone(), geo, depth, ctrl.dma()))
        .collect::<Result<Vec<_>, _>>()?;
    let cfg = DeviceConfig {
        id: cli.id,
        depth,
        geo,
        volatile_cache: ctrl.identify().vwc_present(),
        poll_sleep: std::time::Duration::from_micros(cli.poll_sleep_us),
    };
    let (nsid, name) = (cli.nsid, ctrl.name().to_owned());
    let summary: ServeSummary = server::serve(cfg, engines, stop, move |bdev| {
        println!(
            "nvme-ublk: serving namespace {nsid} of {name} as {bdev} ({queues} queues, depth \
             {depth}, {block_size}-byte blocks, {} MiB, max I/O {} KiB)",
            (geo.sectors() << SECTOR_SHIFT) >> 20,
            max_io >> 10
        );
    })?;
    let ok: u64 = summary.queues.iter().map(|s| s.ok).sum();
    let failed: u64 = summary.queues.iter().map(|s| s.failed).sum();
    println!(
        "nvme-ublk: stopped; {} removed ({ok} requests completed, {failed} failed)",
        summary.bdev
    );
    drop(ctrl);
    Ok(())
}

fn main() -> ExitCode {
    nvme_tool_support::main(run)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("nvme-ublk").chain(args.iter().copied()))
    }

    #[test]
    fn defaults() {
        let cli = parse(&["0000:00:04.0"]).unwrap();
        assert_eq!(cli.device, "0000:00:04.0");
        assert_eq!(cli.nsid, 1);
        assert_eq!(cli.queues, None);
        assert_eq!(cli.depth, None);
        assert_eq!(cli.max_io_bytes, DEFAULT_MAX_IO_BYTES);
        assert_eq!(cli.id, -1);
        assert_eq!(cli.poll_sleep_us, DEFAULT_POLL_SLEEP_US);
    }

    #[test]
    fn options() {
        let cli = parse(&[
            "trtype:PCIe traddr:0000:00:04.0",
            "-n",
            "2",
            "--queues",
            "4",
            "--depth",
            "32",
            "--max-io-bytes",
            "65536",
            "--id",
            "3",
            "--poll-sleep-us",
            "20",
        ])
        .unwrap();
        assert_eq!(cli.nsid, 2);
        assert_eq!(cli.queues, Some(4));
        assert_eq!(cli.depth, Some(32));
        assert_eq!(cli.max_io_bytes, 65536);
        assert_eq!(cli.id, 3);
        assert_eq!(cli.poll_sleep_us, 20);
        assert!(parse_target(&cli.device).is_ok());
    }

    #[test]
    fn refusals() {
        for args in [
            &[][..],
            &["0000:00:04.0", "-n", "0"][..],
            &["0000:00:04.0", "--queues", "0"][..],
            &["0000:00:04.0", "--depth", "0"][..],
            &["0000:00:04.0", "--depth", "4097"][..],
            &["0000:00:04.0", "--id", "-2"][..],
        ] {
            assert!(parse(args).is_err(), "{args:?} accepted");
        }
    }
}
