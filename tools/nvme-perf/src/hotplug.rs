//! `nvme-hotplug`: random reads on every attached controller while the hot-plug monitor
//! attaches new ones and detaches those that leave ([`nvme_device::HotplugMonitor`]).
//!
//! One worker thread per controller reads `--bs` bytes at random LBAs of its first namespace
//! (synchronously, queue depth 1) and counts completions. Output, one line each:
//!
//! - `attach ADDR model=... namespaces=N` / `attach-failed ADDR: ERROR` / `detach ADDR`
//! - `iops t=SECONDS ADDR=N ...` every `--interval-ms` for every controller with a running
//!   worker
//! - `removed ADDR after N I/Os` when a worker's I/O fails with `Removed` (it then stops)
//! - `summary ADDR ios=N errors=N end=running|removed|error: ...` at the end.
//!
//! The run ends after `--time` seconds or once `--stop-file` exists. It fails only when some
//! controller's I/O fails with anything but `Removed`: a controller that goes away is
//! expected, the others keep going.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nvme_device::{AnyController, HotplugEvent, HotplugMonitor, IoQueue};
use nvme_driver::{Error, PciAddress, QueuePairOptions};

use crate::error::PerfError;
use crate::rng::XorShift64;

/// How long one wait for a uevent lasts (also the period of the device-request check).
const MONITOR_PERIOD: Duration = Duration::from_millis(100);
/// Milliseconds per second (IOPS from a count over an interval).
const MS_PER_S: f64 = 1000.0;

/// The command line of `nvme-hotplug`.
#[derive(clap::Parser, Debug, Clone)]
#[command(
    name = "nvme-hotplug",
    version,
    about = "Random reads on every NVMe function on vfio-pci, attaching new ones as they appear \
             (kernel uevents) and detaching those that leave"
)]
pub struct HotplugArgs {
    /// Seconds to run.
    #[arg(short = 't', long = "time", default_value_t = 30)]
    pub seconds: u64,
    /// Bytes per read (a multiple of the namespace's block size).
    #[arg(long = "bs", default_value_t = 4096)]
    pub block_bytes: u32,
    /// Milliseconds between two `iops` lines.
    #[arg(long = "interval-ms", default_value_t = 1000)]
    pub interval_ms: u64,
    /// The sysfs root to enumerate.
    #[arg(long, default_value = "/sys")]
    pub sysfs: PathBuf,
    /// End the run early once this file exists (checked every 100 ms).
    #[arg(long = "stop-file", value_name = "PATH")]
    pub stop_file: Option<PathBuf>,
}

/// How one controller's worker ended (or that it still runs).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum WorkerEnd {
    /// Still reading at the end of the run.
    #[default]
    Running,
    /// Its I/O failed with `Removed`.
    Removed,
    /// Anything else went wrong.
    Failed(String),
}

impl std::fmt::Display for WorkerEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WorkerEnd::Running => f.write_str("running"),
            WorkerEnd::Removed => f.write_str("removed"),
            WorkerEnd::Failed(e) => write!(f, "error: {e}"),
        }
    }
}

/// The shared state of one controller's worker.
#[derive(Debug, Default)]
struct WorkerState {
    ios: AtomicU64,
    end: Mutex<WorkerEnd>,
}

struct Worker {
    state: Arc<WorkerState>,
    handle: Option<JoinHandle<()>>,
    /// Completions at the previous `iops` line.
    last_ios: u64,
}

/// Per controller: completed reads and how its worker ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ControllerSummary {
    /// Reads completed.
    pub ios: u64,
    /// How the worker ended.
    pub end: WorkerEnd,
}

/// Runs the workload under `monitor` (started here) for `args.seconds`, writing the lines
/// described in the module documentation to `out`.
pub fn run(
    mut monitor: HotplugMonitor,
    args: &HotplugArgs,
    out: &mut dyn Write,
) -> Result<BTreeMap<PciAddress, ControllerSummary>, PerfError> {
    let stop = Arc::new(AtomicBool::new(false));
    let mut workers: BTreeMap<PciAddress, Worker> = BTreeMap::new();
    let start = Instant::now();
    let run_for = Duration::from_secs(args.seconds);
    let interval = Duration::from_millis(args.interval_ms.max(1));
    let mut next_report = start + interval;
    let mut last_report = start;
    let driver = |context: &str| {
        let context = context.to_owned();
        move |source| PerfError::Driver { context, source }
    };
    let mut events = monitor.start().map_err(driver("initial probe"))?;
    loop {
        for event in events.drain(..) {
            match event {
                HotplugEvent::Attached(address) => {
                    let Some(ctrl) = monitor.registry().get(&address).cloned() else {
                        continue;
                    };
                    let _ = writeln!(
                        out,
                        "attach {address} model={} namespaces={}",
                        ctrl.identify().model().trim(),
                        ctrl.namespaces().len()
                    );
                    let state = Arc::new(WorkerState::default());
                    let handle = spawn_worker(ctrl, state.clone(), stop.clone(), args.block_bytes)
                        .map_err(|source| PerfError::Spawn { thread: 0, source })?;
                    workers.insert(
                        address,
                        Worker {
                            state,
                            handle: Some(handle),
                            last_ios: 0,
                        },
                    );
                }
                HotplugEvent::AttachFailed(address, e) => {
                    let _ = writeln!(out, "attach-failed {address}: {e}");
                }
                HotplugEvent::Detached(address) => {
                    let _ = writeln!(out, "detach {address}");
                }
                HotplugEvent::Rescanned => {
                    let _ = writeln!(out, "rescan (uevents were lost)");
                }
            }
        }
        for (address, w) in workers.iter_mut() {
            if w.handle.as_ref().is_some_and(|h| h.is_finished()) {
                let _ = w.handle.take().map(JoinHandle::join);
                let end = w.state.end.lock().map(|e| e.clone()).unwrap_or_default();
                let ios = w.state.ios.load(Ordering::Relaxed);
                match end {
                    WorkerEnd::Removed => {
                        let _ = writeln!(out, "removed {address} after {ios} I/Os");
                    }
                    other => {
                        let _ = writeln!(out, "stopped {address} after {ios} I/Os: {other}");
                    }
                }
            }
        }
        let now = Instant::now();
        if now >= next_report {
            let ms = now.duration_since(last_report).as_secs_f64() * MS_PER_S;
            let mut line = format!("iops t={}", now.duration_since(start).as_secs());
            for (address, w) in workers.iter_mut().filter(|(_, w)| w.handle.is_some()) {
                let ios = w.state.ios.load(Ordering::Relaxed);
                let iops = (ios - w.last_ios) as f64 * MS_PER_S / ms;
                w.last_ios = ios;
                line += &format!(" {address}={iops:.0}");
            }
            let _ = writeln!(out, "{line}");
            last_report = now;
            next_report = now + interval;
        }
        let stop_asked = args.stop_file.as_ref().is_some_and(|p| p.exists());
        if now.duration_since(start) >= run_for || stop_asked {
            break;
        }
        if let Err(e) = monitor.wait(MONITOR_PERIOD) {
            log::warn!("{e}");
            std::thread::sleep(MONITOR_PERIOD);
        }
        match monitor.poll() {
            Ok(new) => events = new,
            Err(e) => log::warn!("{e}"),
        }
    }
    stop.store(true, Ordering::Release);
    let mut summary = BTreeMap::new();
    for (address, mut w) in workers {
        if let Some(h) = w.handle.take() {
            let _ = h.join();
        }
        let ios = w.state.ios.load(Ordering::Relaxed);
        let end = w.state.end.lock().map(|e| e.clone()).unwrap_or_default();
        let _ = writeln!(out, "summary {address} ios={ios} end={end}");
        summary.insert(address, ControllerSummary { ios, end });
    }
    Ok(summary)
}

fn spawn_worker(
    ctrl: Arc<AnyController>,
    state: Arc<WorkerState>,
    stop: Arc<AtomicBool>,
    block_bytes: u32,
) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name(format!("io-{}", ctrl.name()))
        .spawn(move || {
            let end = match read_loop(&ctrl, &state, &stop, block_bytes) {
                Ok(()) => WorkerEnd::Running,
                Err(Error::Removed { .. }) => WorkerEnd::Removed,
                Err(e) => WorkerEnd::Failed(e.to_string()),
            };
            if let Ok(mut slot) = state.end.lock() {
                *slot = end;
            }
        })
}

/// Random reads of `block_bytes` on the first namespace until `stop` or an error.
fn read_loop(
    ctrl: &AnyController,
    state: &WorkerState,
    stop: &AtomicBool,
    block_bytes: u32,
) -> Result<(), Error> {
    let ns = ctrl
        .namespaces()
        .into_iter()
        .next()
        .ok_or_else(|| Error::InvalidRequest(format!("{}: no namespace", ctrl.name())))?;
    let blocks = (block_bytes / ns.block_size()).max(1);
    let span = ns.blocks() / u64::from(blocks);
    if span == 0 {
        return Err(Error::InvalidRequest(format!(
            "{}: namespace too small for {block_bytes}-byte reads",
            ctrl.name()
        )));
    }
    let mut qp = ctrl.create_queue_pair(QueuePairOptions::default())?;
    let mut buf = ctrl.alloc_buffer((blocks * ns.block_size()) as usize)?;
    let mut rng = XorShift64::new(u64::from(ns.nsid()), 0);
    while !stop.load(Ordering::Relaxed) {
        let lba = rng.below(span) * u64::from(blocks);
        buf = qp.read(&ns, lba, blocks, buf).map_err(|f| f.error)?;
        state.ios.fetch_add(1, Ordering::Relaxed);
    }
    Ok(())
}
