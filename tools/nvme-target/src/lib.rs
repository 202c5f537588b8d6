//! nvme-target (the tool's code; `main.rs` runs it): exports namespaces of a local controller as an NVMe/TCP subsystem.
//!
//! ```text
//! nvme-target 0000:00:04.0 --listen 127.0.0.1:4420 --subnqn nqn.2026-01.io.example:disk1
//! nvme-target sim --listen 127.0.0.1:4420 --subnqn nqn.x -n 1 --allow-host nqn.host1
//! ```
//!
//! DEVICE takes the syntax of the other tools (a PCI address or PCIe transport id; `sim` for
//! the emulator in a build with the `emulator` feature). `-n NSID` or `-n NSID=BACKEND_NSID`
//! chooses the namespaces (default: every namespace, same ids). The address to listen on is
//! required. SIGINT or SIGTERM stops the target cleanly: connections closed, backend queue
//! pairs drained and deleted, the controller shut down. docs/target.md has the rest.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use nvme_driver::ControllerOptions;
use nvme_target::{ExportedNamespace, SubsystemConfig, Target, TargetConfig, TargetError};
use nvme_tool_support::{
    parse_target, AnyController, Target as Device, TargetError as DeviceError,
};

/// How often the main thread looks for a stop signal.
const SIGNAL_POLL: Duration = Duration::from_millis(100);
/// Serial number reported when none is given.
const DEFAULT_SERIAL: &str = "NVMETGT0001";

#[derive(Parser, Debug)]
#[command(
    name = "nvme-target",
    version,
    about = "Serve namespaces of a local NVMe controller over NVMe/TCP"
)]
pub struct Cli {
    /// The controller: PCI address (0000:00:04.0), PCIe transport id, or `sim` (emulator builds).
    device: String,
    /// Address and port to listen on (explicit; e.g. 127.0.0.1:4420).
    #[arg(long, value_name = "ADDR:PORT")]
    listen: SocketAddr,
    /// Subsystem NQN.
    #[arg(long)]
    subnqn: String,
    /// Namespace to export: NSID (same id) or NSID=BACKEND_NSID; repeatable. Default: all.
    #[arg(short = 'n', long = "namespace", value_name = "NSID[=BACKEND]")]
    namespaces: Vec<String>,
    /// Host NQN allowed to connect; repeatable. With none given, any host may connect.
    #[arg(long = "allow-host", value_name = "NQN")]
    allow_hosts: Vec<String>,
    /// Poll group threads.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// I/O queues a host may connect per association.
    #[arg(long, default_value_t = 8)]
    max_io_queues: u16,
    /// Entries per queue.
    #[arg(long, default_value_t = 128)]
    queue_entries: u16,
    /// Largest command in bytes (MDTS, MAXH2CDATA; lowered to the controller's).
    #[arg(long, default_value_t = 128 << 10)]
    max_io_bytes: usize,
    /// Serial number in Identify Controller.
    #[arg(long, default_value = DEFAULT_SERIAL)]
    serial: String,
    /// Empty passes a poll group spins before it blocks on its sockets and the controller's
    /// interrupts (0: block at once).
    #[arg(long, value_name = "PASSES", default_value_t = 0)]
    idle_spins: u32,
    /// A poll group's sleep between passes once idle, in microseconds, where it cannot block
    /// (with --no-interrupts, or a queue pair without an interrupt vector).
    #[arg(long, value_name = "US", default_value_t = 200)]
    idle_sleep_us: u64,
    /// While commands are at the controller and nothing moved for less than this many
    /// microseconds, a poll group polls the completion queues instead of blocking on their
    /// interrupts (0, the default: block at once).
    #[arg(long, value_name = "US", default_value_t = 0)]
    device_poll_us: u64,
    /// Adaptive spinning: an idle poll group keeps polling its sockets for up to twice its
    /// recent average idle gap, while that average is at most this many microseconds, and
    /// blocks at once when the gaps are longer (0: off, block at once).
    #[arg(long, value_name = "US", default_value_t = 1000)]
    adaptive_spin_us: u64,
    /// Do not route the controller's MSI-X vectors to eventfds: queue pairs are polled only,
    /// and an idle poll group with commands in flight sleeps --idle-sleep-us between passes.
    #[arg(long)]
    no_interrupts: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    #[error(transparent)]
    Device(#[from] DeviceError),
    #[error(
        "opening the controller: {0} (if its interrupts are the problem, try --no-interrupts)"
    )]
    Open(#[from] nvme_driver::Error),
    #[error(transparent)]
    Target(#[from] TargetError),
    #[error("namespace `{0}`: expected NSID or NSID=BACKEND_NSID")]
    Namespace(String),
    #[error("this build has no emulator: rebuild with --features emulator to serve `sim`")]
    #[cfg_attr(feature = "emulator", allow(dead_code))]
    NoEmulator,
    #[error("installing the signal handlers: {0}")]
    Signal(#[source] std::io::Error),
}

fn parse_namespace(s: &str) -> Result<ExportedNamespace, ToolError> {
    let bad = || ToolError::Namespace(s.to_owned());
    let (a, b) = s.split_once('=').unwrap_or((s, s));
    Ok(ExportedNamespace {
        nsid: a.trim().parse().map_err(|_| bad())?,
        backend_nsid: b.trim().parse().map_err(|_| bad())?,
    })
}

#[cfg(feature = "emulator")]
mod emulator {
    use nvme_driver::{Controller, ControllerOptions, Transport};
    use nvme_sim::{SimConfig, SimController, SimNamespace};

    /// Bytes of each emulated namespace (memory backed).
    const SIM_NAMESPACE_BYTES: u64 = 64 << 20;
    /// Block sizes of the emulated namespaces 1 and 2.
    const SIM_BLOCKS: [u32; 2] = [4096, 512];
    /// I/O queue pairs the emulator grants.
    const SIM_QUEUE_PAIRS: u16 = 32;

    /// The emulator with two memory-backed namespaces, and our driver on it.
    pub fn open(interrupts: bool) -> Result<(SimController, Controller), nvme_driver::Error> {
        let config = SimConfig {
            namespaces: SIM_BLOCKS
                .iter()
                .enumerate()
                .map(|(i, &bs)| SimNamespace {
                    nsid: i as u32 + 1,
                    block_size: bs,
                    blocks: SIM_NAMESPACE_BYTES / u64::from(bs),
                    ..SimNamespace::default()
                })
                .collect(),
            io_queue_pairs: SIM_QUEUE_PAIRS,
            ..SimConfig::default()
        };
        let sim = SimController::start(config);
        let transport =
            Transport::new(sim.mmio(), sim.dma(), "sim").with_interrupts(sim.interrupts());
        let ctrl = Controller::new(
            transport,
            ControllerOptions::default().interrupts(interrupts),
        )?;
        Ok((sim, ctrl))
    }
}

pub fn run(cli: &Cli) -> Result<(), ToolError> {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone()).map_err(ToolError::Signal)?;
    }
    let device = parse_target(&cli.device)?;
    // Interrupts let an idle poll group block instead of sleeping (docs/target.md).
    let options = ControllerOptions::default().interrupts(!cli.no_interrupts);
    // The emulator (if any) must outlive the controller: declared first, dropped last.
    #[cfg(feature = "emulator")]
    let mut _sim = None;
    let backend = match device {
        Device::Emulator => {
            #[cfg(feature = "emulator")]
            {
                let (sim, ctrl) = emulator::open(!cli.no_interrupts)?;
                _sim = Some(sim);
                AnyController::Pcie(ctrl)
            }
            #[cfg(not(feature = "emulator"))]
            return Err(ToolError::NoEmulator);
        }
        d => AnyController::open(&d, options)?,
    };
    let backend = Arc::new(backend);
    let namespaces = if cli.namespaces.is_empty() {
        backend
            .namespaces()
            .iter()
            .map(|ns| ExportedNamespace {
                nsid: ns.nsid(),
                backend_nsid: ns.nsid(),
            })
            .collect()
    } else {
        cli.namespaces
            .iter()
            .map(|s| parse_namespace(s))
            .collect::<Result<_, _>>()?
    };
    let mut config = TargetConfig::new(cli.listen);
    config.threads = cli.threads;
    config.max_io_queues = cli.max_io_queues;
    config.queue_entries = cli.queue_entries;
    config.max_io_bytes = cli.max_io_bytes;
    config.idle_spins = cli.idle_spins;
    config.idle_sleep = Duration::from_micros(cli.idle_sleep_us);
    config.device_poll = Duration::from_micros(cli.device_poll_us);
    config.adaptive_spin = Duration::from_micros(cli.adaptive_spin_us);
    let subsystem = SubsystemConfig {
        nqn: cli.subnqn.clone(),
        backend: backend.clone(),
        namespaces,
        allowed_hosts: (!cli.allow_hosts.is_empty()).then(|| cli.allow_hosts.clone()),
        serial: cli.serial.clone(),
    };
    let exported = subsystem.namespaces.len();
    let mut target = Target::start(config, vec![subsystem])?;
    println!(
        "nvme-target: serving {} ({exported} namespace(s) of {}) on {}",
        cli.subnqn,
        backend.name(),
        target.local_addr()
    );
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(SIGNAL_POLL);
    }
    target.stop();
    let s = target.stats();
    println!(
        "nvme-target: stopped ({} connection(s), {} refused, {} protocol error(s), {} keep-alive expiries)",
        s.connections, s.refused_hosts, s.protocol_errors, s.kato_expiries
    );
    drop(target);
    drop(backend);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespace_arguments() {
        assert_eq!(
            parse_namespace("3").unwrap(),
            ExportedNamespace {
                nsid: 3,
                backend_nsid: 3
            }
        );
        assert_eq!(
            parse_namespace("1=2").unwrap(),
            ExportedNamespace {
                nsid: 1,
                backend_nsid: 2
            }
        );
        assert!(parse_namespace("x").is_err());
        assert!(parse_namespace("1=").is_err());
    }

    #[test]
    fn the_listen_address_is_required() {
        assert!(Cli::try_parse_from(["nvme-target", "sim", "--subnqn", "nqn.x"]).is_err());
        assert!(Cli::try_parse_from([
            "nvme-target",
            "sim",
            "--subnqn",
            "nqn.x",
            "--listen",
            "127.0.0.1:4420"
        ])
        .is_ok());
    }
}
