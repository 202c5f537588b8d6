//! Command line: the clap definition (the `--help` text is the tool's manual) and its
//! validation into a [`Config`], which the engines trust without re-checking.

use std::time::Duration;

use clap::{Parser, ValueEnum};

use crate::error::PerfError;
use crate::rng::{Mix, Pattern};
use crate::target::Target;

/// Default `--seed`.
pub const DEFAULT_SEED: u64 = 0x5EED;
/// Largest queue depth per thread the tool accepts (the driver's tag space is 4096 slots and
/// one ring entry stays empty).
pub const MAX_QUEUE_DEPTH: u32 = nvme_pool::MAX_DEPTH as u32 - 1;
/// Largest block size the tool accepts (one I/O buffer each of queue depth): 64 MiB.
pub const MAX_BLOCK_SIZE: usize = 64 << 20;
/// Most worker threads.
pub const MAX_THREADS: u32 = 1024;
/// `--rwmix-read` default.
pub const DEFAULT_RWMIX_READ: u8 = 50;

const ABOUT: &str = "NVMe benchmark: our userspace driver (SPDK-like) or the kernel's io_uring";

const LONG_ABOUT: &str = "\
NVMe benchmark in the manner of SPDK's perf and fio's t/io_uring.

Each thread (-j) owns one I/O queue pair (or one io_uring instance), keeps -q I/Os in flight,
submits up to --submit-batch per round with one doorbell write (one io_uring_enter for the
kernel engine), and reaps up to --complete-batch per poll. Latency is measured from the
submission round to the first poll call that sees the completion, recorded in an HDR
histogram with nanosecond units.

DEVICE is one of:
  0000:00:04.0                       an NVMe controller bound to vfio-pci (spdk-like engine)
  'trtype:PCIe traddr:0000:00:04.0'  the same, as an SPDK transport id
  sim                                the in-process emulated controller (nvme-sim, null I/O:
                                     no data is copied) -- measures the driver's own cost;
                                     the summary then shows `driver ns/IO`, the CPU time of
                                     the submitting/polling thread divided by I/Os
  /dev/nvme0n1                       a block device, with --engine io_uring (a regular file
                                     on a filesystem with O_DIRECT support also works)

Output: unless --quiet, one line per second:
  IOPS=..., BW=...MiB/s, IOS/call=submit S/reap R
where S is I/Os per submit call (per doorbell write) and R is I/Os per poll call that found
completions. Then a summary: IOPS, MiB/s, latency avg/min/max and percentiles (1 .. 99.99),
and for the spdk-like engine the MMIO doorbell writes per I/O (SQ tail and CQ head), rejected
completions and the request pool counters. --json prints one JSON object instead.

Exit status: 0 on success; 1 on bad options, device errors, any failed I/O, or a block that
--verify found not to hold what was written.";

const AFTER_LONG_HELP: &str = "\
Examples:
  # driver overhead, in-process emulator, QD 128 then QD 1, pinned
  nvme-perf sim -q 128 -t 5 --pin
  nvme-perf sim -q 1 -t 5 --pin
  # A/B: contexts from a cache or Box::new per I/O / batch tag prefetch / shadow doorbells off
  nvme-perf sim -q 128 -t 5 --contexts cache
  # a real drive bound to vfio-pci: 4 threads, 4 KiB random reads, QD 32 each
  nvme-perf 0000:01:00.0 -j 4 -q 32 --pin -t 30 --warmup 5
  nvme-perf 'trtype:PCIe traddr:0000:01:00.0' -w rw --rwmix-read 70 -b 16384
  # the kernel path on the same drive (bound to nvme instead), polled queues
  nvme-perf --engine io_uring /dev/nvme0n1 -q 128 --iopoll
  # fixed I/O count (for callgrind), JSON output
  nvme-perf sim -q 1 --ios 20000 --json

See docs/nvme-perf.md for more.";

/// I/O engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Engine {
    /// Our userspace driver (vfio-pci or the in-process emulator).
    #[value(name = "spdk-like", alias = "spdk", alias = "native")]
    SpdkLike,
    /// The kernel's block layer through io_uring (O_DIRECT, registered buffers and file).
    #[value(name = "io_uring", alias = "io-uring", alias = "uring")]
    IoUring,
}

impl Engine {
    /// Name as written on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Engine::SpdkLike => "spdk-like",
            Engine::IoUring => "io_uring",
        }
    }
}

/// Access pattern and direction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Workload {
    /// Random reads.
    #[value(name = "randread")]
    RandRead,
    /// Random writes.
    #[value(name = "randwrite")]
    RandWrite,
    /// Sequential reads.
    #[value(name = "read")]
    Read,
    /// Sequential writes.
    #[value(name = "write")]
    Write,
    /// Sequential mix of reads and writes (--rwmix-read percent reads).
    #[value(name = "rw")]
    Rw,
    /// Random mix of reads and writes (--rwmix-read percent reads).
    #[value(name = "randrw")]
    RandRw,
    /// Zone Append on a zoned namespace, across the open zones the zone resources allow,
    /// resetting full zones (spdk-like engine over PCIe only).
    #[value(name = "append")]
    Append,
}

impl Workload {
    /// Name as written on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Workload::RandRead => "randread",
            Workload::RandWrite => "randwrite",
            Workload::Read => "read",
            Workload::Write => "write",
            Workload::Rw => "rw",
            Workload::RandRw => "randrw",
            Workload::Append => "append",
        }
    }
}

/// `--contexts`: where the spdk-like loop keeps each I/O's context (`spdk::contexts`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum ContextMode {
    /// One preallocated context per queue slot, as SPDK perf preallocates its tasks.
    #[default]
    #[value(name = "slots")]
    Slots,
    /// A Box per I/O recycled through an nvme_pool::ObjectCache (the bio-cache idea).
    #[value(name = "cache")]
    Cache,
    /// A Box::new per I/O, dropped at its completion.
    #[value(name = "box")]
    Box,
}

impl ContextMode {
    /// Name as written on the command line and in the JSON report.
    pub fn name(self) -> &'static str {
        match self {
            ContextMode::Slots => "slots",
            ContextMode::Cache => "cache",
            ContextMode::Box => "box",
        }
    }
}

/// A test-only fault on the emulator's medium (`--sim-fault`, hidden), applied by the
/// verifying run of `sim` so that tests can see a mismatch detected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SimFault {
    /// After N completed I/Os, flip a payload byte on the medium in the block the write just
    /// completed wrote (`corrupt-after=N`).
    CorruptAfter(u64),
    /// After N completed I/Os, the next write submitted completes but never reaches the
    /// medium (`lose-write-after=N`).
    LoseWriteAfter(u64),
    /// After N completed I/Os, the device holds the next [`STALLED_COMMANDS`] commands for
    /// [`STALL`] before executing them (`stall-after=N`): longer than a short --io-timeout.
    StallAfter(u64),
}

/// Commands a `stall-after` fault holds.
pub const STALLED_COMMANDS: u32 = 8;
/// How long a `stall-after` fault holds them.
pub const STALL: Duration = Duration::from_secs(2);

/// The `--sim-fault` forms, for messages.
const SIM_FAULTS: &str = "corrupt-after=N, lose-write-after=N or stall-after=N";

fn parse_sim_fault(s: &str) -> Result<SimFault, String> {
    let (kind, n) = s
        .split_once('=')
        .ok_or_else(|| format!("`{s}`: give {SIM_FAULTS}"))?;
    let n: u64 = n.parse().map_err(|e| format!("`{n}`: {e}"))?;
    match kind {
        "corrupt-after" => Ok(SimFault::CorruptAfter(n)),
        "lose-write-after" => Ok(SimFault::LoseWriteAfter(n)),
        "stall-after" => Ok(SimFault::StallAfter(n)),
        _ => Err(format!("`{kind}`: give {SIM_FAULTS}")),
    }
}

/// The command line, as clap parses it.
#[derive(Parser, Debug, Clone)]
#[command(
    name = "nvme-perf",
    version,
    about = ABOUT,
    long_about = LONG_ABOUT,
    after_long_help = AFTER_LONG_HELP
)]
pub struct Args {
    /// PCI address, `trtype:PCIe traddr:ADDR`, `sim`, or (io_uring) a block device path.
    #[arg(value_name = "DEVICE")]
    pub device: String,

    /// I/O engine: our driver, or the kernel's io_uring on a block device.
    #[arg(long, value_enum, default_value_t = Engine::SpdkLike)]
    pub engine: Engine,

    /// Bytes per I/O; a multiple of the namespace's LBA size.
    #[arg(short = 'b', long, default_value_t = 4096, value_name = "BYTES")]
    pub block_size: usize,

    /// I/Os kept in flight per thread (the queue pair gets one entry more).
    #[arg(short = 'q', long, default_value_t = 128, value_name = "N")]
    pub queue_depth: u32,

    /// Most I/Os submitted per round, with one doorbell write (inside plug/unplug) or one
    /// io_uring_enter; capped at the queue depth. Default: the queue depth, i.e. every I/O
    /// reaped in a round is resubmitted with one doorbell write.
    #[arg(long, value_name = "N")]
    pub submit_batch: Option<u32>,

    /// Most completions reaped per poll call (QueuePairOptions::max_completions_per_poll;
    /// CQEs consumed per pass for io_uring). Default: the queue depth, i.e. everything that is
    /// there, with one CQ head doorbell write.
    #[arg(long, value_name = "N")]
    pub complete_batch: Option<u32>,

    /// Worker threads, each with its own queue pair (io_uring instance).
    #[arg(short = 'j', long, default_value_t = 1, value_name = "N")]
    pub threads: u32,

    /// Pin worker thread i to the i-th CPU this process may run on (sched_setaffinity).
    #[arg(long)]
    pub pin: bool,

    /// Run a single job (-j 1) on a thread of its own while the main thread keeps time, instead
    /// of on the main thread itself (the layout before 2026-12-03; for A/B runs of the two).
    #[arg(long)]
    pub worker_thread: bool,

    /// Measured run time in seconds (after the warmup); ignored with --ios.
    #[arg(
        short = 't',
        long = "time",
        default_value_t = 10.0,
        value_name = "SECONDS"
    )]
    pub time: f64,

    /// Seconds of I/O before measuring starts (not counted).
    #[arg(long, default_value_t = 0.0, value_name = "SECONDS")]
    pub warmup: f64,

    /// Stop after this many measured I/Os per thread instead of after --time (for
    /// instruction counting under callgrind).
    #[arg(long, value_name = "N")]
    pub ios: Option<u64>,

    /// Access pattern.
    #[arg(short = 'w', long, value_enum, default_value_t = Workload::RandRead)]
    pub workload: Workload,

    /// Percentage of reads for rw/randrw.
    #[arg(long, default_value_t = DEFAULT_RWMIX_READ, value_name = "PCT",
          value_parser = clap::value_parser!(u8).range(0..=100))]
    pub rwmix_read: u8,

    /// Namespace id (default: the first active namespace). spdk-like engine only.
    #[arg(short = 'n', long, value_name = "NSID")]
    pub nsid: Option<u32>,

    /// Use only the first N blocks of the namespace (device).
    #[arg(long, value_name = "N")]
    pub range_blocks: Option<u64>,

    /// PRNG seed for random offsets and the read/write mix (thread i uses stream i).
    #[arg(long, default_value_t = DEFAULT_SEED)]
    pub seed: u64,

    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,

    /// Also print every recorded latency histogram bucket (with --json: `histogram_ns`,
    /// `[bucket upper bound ns, count]` pairs in buckets about 10 % wide).
    #[arg(long)]
    pub histogram: bool,

    /// No per-second progress lines.
    #[arg(long)]
    pub quiet: bool,

    /// Where each I/O's context lives: one preallocated per queue slot (slots), a Box per I/O
    /// recycled through nvme_pool::ObjectCache (cache), or Box::new and drop per I/O (box).
    /// The last two are A/B switches. spdk-like engine only.
    #[arg(long, value_enum, value_name = "STORE")]
    pub contexts: Option<ContextMode>,

    /// Same as --contexts box (kept for older scripts).
    #[arg(long, hide = true, conflicts_with = "contexts")]
    pub no_request_cache: bool,

    /// A/B: do not reserve the batch's request slots up front (qp.plug(0) instead of
    /// qp.plug(n); still one doorbell per batch). spdk-like engine only.
    #[arg(long)]
    pub no_batch_prefetch: bool,

    /// A/B: write MMIO doorbells for every batch instead of shadow doorbells with EventIdx
    /// (ControllerOptions::shadow_doorbells = Never: controller-wide). spdk-like engine only.
    #[arg(long, conflicts_with = "shadow_doorbells")]
    pub no_shadow_doorbells: bool,

    /// A/B: use shadow doorbells wherever the controller offers them, even where the driver's
    /// rule leaves them off (under a software CPU emulator such as QEMU TCG)
    /// (ControllerOptions::shadow_doorbells = Always). spdk-like engine only.
    #[arg(long)]
    pub shadow_doorbells: bool,

    /// A/B: describe data with PRPs even where the controller offers SGLs
    /// (ControllerOptions::sgl = false: controller-wide). spdk-like engine only.
    #[arg(long)]
    pub no_sgl: bool,

    /// Call sched_yield after a poll that found nothing. For instruction counting under
    /// valgrind, which runs one thread at a time: the emulator's thread then runs at once
    /// instead of after the poller's time slice of empty polls. Over NVMe/TCP (with I/O
    /// outstanding): a target on the same CPU, e.g. the kernel's nvmet-tcp over loopback,
    /// runs at once. spdk-like engine only.
    #[arg(long)]
    pub yield_idle: bool,

    /// Run the emulator's poll passes on the worker thread, after each empty poll, instead of
    /// on the emulator's own thread: a single-threaded, deterministic run for instruction
    /// counts (tests/instr-per-io.sh). `sim` with one thread only.
    #[arg(long)]
    pub inline_device: bool,

    /// Do not time each I/O (like SPDK perf without -L, or t/io_uring without latency
    /// stats): no per-I/O clock arithmetic or histogram. The average latency is then derived
    /// from Little's law (queue depth x threads / IOPS); min, max and percentiles read 0.
    #[arg(long)]
    pub no_latency: bool,

    /// Hybrid completion (spdk-like engine): give each queue pair an MSI-X vector and, after
    /// a run of empty polls, block on its eventfd instead of spinning. Measures the interrupt
    /// path of the request cache. Over NVMe/TCP: after a run of empty polls, block in a read
    /// of the socket (TcpQueuePair::wait_for_completion) instead of spinning.
    #[arg(long)]
    pub interrupts: bool,

    /// Write self-checking blocks (header with LBA, sequence number, write id and CRC-32;
    /// payload from a PRNG seeded by them) and check every block read: in the workload's reads
    /// (randrw) and in a final pass reading back every position written. Each thread gets a
    /// disjoint slice of the span (--range-blocks; at most 64 Mi I/O positions). Mismatches
    /// (wrong LBA, bad checksum, lost write, phantom) make the exit status 1. Both engines
    /// (io_uring: the same checks on the kernel's path); a workload that writes (randwrite, randrw, write, rw). On `sim` the emulator then
    /// keeps real data: 64 MiB namespaces.
    #[arg(long)]
    pub verify: bool,

    /// Reset the controller (`Controller::reset()`, CC.EN 1 -> 0 -> 1) every SECS seconds
    /// while measuring, from the first worker thread between rounds. I/Os that fail with a
    /// retryable error (the reset's `Reset`, `Resetting`) are resubmitted, not counted as
    /// errors; the summary counts resets and retried I/Os. With --verify a write cut off by a
    /// reset may or may not have reached the medium: either content is accepted until the
    /// retry is acknowledged. spdk-like engine only; not with --inline-device.
    #[arg(long, value_name = "SECS")]
    pub reset_interval: Option<f64>,

    /// Command timeout of the queue pairs, in seconds (default 30). What happens next is the
    /// driver's timeout policy: Abort, then a controller reset if the abort does not help.
    #[arg(long, value_name = "SECS")]
    pub io_timeout: Option<f64>,

    /// Ride out a stalled device: an I/O that times out is counted (`recovery` in the
    /// summary), not an error; its buffer is replaced (the old one stays with the driver
    /// until the device gives it back), and with --verify a timed-out write's position is no
    /// longer checked (never acknowledged: either content is legal) while every acknowledged
    /// write still is. I/Os failed by the reset that follows are resubmitted, as with
    /// --reset-interval. spdk-like engine only.
    #[arg(long)]
    pub tolerate_timeouts: bool,

    /// Test only: a fault on the emulated medium during a --verify run on `sim`
    /// (corrupt-after=N, lose-write-after=N).
    #[arg(long, hide = true, value_name = "FAULT", value_parser = parse_sim_fault)]
    pub sim_fault: Option<SimFault>,

    /// io_uring: polled completions (IORING_SETUP_IOPOLL; the nvme driver needs
    /// poll_queues > 0, e.g. `nvme.poll_queues=4` on the kernel command line).
    #[arg(long)]
    pub iopoll: bool,

    /// io_uring: a kernel thread polls the submission queue (IORING_SETUP_SQPOLL).
    #[arg(long)]
    pub sqpoll: bool,

    /// Serve a JSON-RPC control socket at PATH during the run (nvme-control: identify, SMART,
    /// queue statistics, ...; `nvme-admin --socket PATH`). spdk-like engine, PCIe or `sim`.
    #[arg(long, value_name = "PATH")]
    pub control_socket: Option<std::path::PathBuf>,
}

/// Validated settings of one run.
#[derive(Clone, Debug)]
pub struct Config {
    /// The device.
    pub target: Target,
    /// The engine.
    pub engine: Engine,
    /// Bytes per I/O (> 0; checked against the LBA size once the namespace is known).
    pub block_size: usize,
    /// I/Os in flight per thread, 1..=[`MAX_QUEUE_DEPTH`].
    pub queue_depth: u32,
    /// 1..=queue_depth.
    pub submit_batch: u32,
    /// >= 1.
    pub complete_batch: u32,
    /// 1..=[`MAX_THREADS`].
    pub threads: u32,
    /// Pin workers.
    pub pin: bool,
    /// A single job runs on its own thread, not on the main thread.
    pub worker_thread: bool,
    /// Measured duration (ignored with `ios`).
    pub time: Duration,
    /// Warmup duration.
    pub warmup: Duration,
    /// Measured I/Os per thread, if fixed.
    pub ios: Option<u64>,
    /// The workload as named.
    pub workload: Workload,
    /// Random or sequential.
    pub pattern: Pattern,
    /// Read/write choice.
    pub mix: Mix,
    /// Namespace id, if given.
    pub nsid: Option<u32>,
    /// LBA span limit, if given (> 0).
    pub range_blocks: Option<u64>,
    /// PRNG seed.
    pub seed: u64,
    /// JSON output.
    pub json: bool,
    /// Print histogram buckets.
    pub histogram: bool,
    /// No progress lines.
    pub quiet: bool,
    /// Where each I/O's context lives (`slots`; `cache` and `box` are A/B switches).
    pub contexts: ContextMode,
    /// Reserve the batch's slots with plug(n) (A/B switch).
    pub batch_prefetch: bool,
    /// Shadow doorbells (A/B switch: the driver's rule, always, never).
    pub shadow_doorbells: nvme_driver::ShadowDoorbells,
    /// SGL data pointers where offered (A/B switch).
    pub sgl: bool,
    /// sched_yield after an empty poll.
    pub yield_idle: bool,
    /// Step the emulator on the worker thread (sim, one thread).
    pub inline_device: bool,
    /// Time each I/O into the latency histogram.
    pub latency: bool,
    /// Block on the queue's interrupt after a run of empty polls.
    pub interrupts: bool,
    /// io_uring IOPOLL.
    pub iopoll: bool,
    /// io_uring SQPOLL.
    pub sqpoll: bool,
    /// Self-checking writes and reads.
    pub verify: bool,
    /// Test-only medium fault (sim, with `verify`).
    pub sim_fault: Option<SimFault>,
    /// Reset the controller this often while measuring (and retry retryable failures).
    pub reset_interval: Option<Duration>,
    /// Command timeout of the queue pairs.
    pub io_timeout: Duration,
    /// Timed-out I/Os are counted, not errors; retryable failures are resubmitted.
    pub tolerate_timeouts: bool,
    /// Serve a control socket here during the run.
    pub control_socket: Option<std::path::PathBuf>,
}

impl Config {
    /// Retryable failures (a controller reset's) are resubmitted rather than errors.
    pub fn recovering(&self) -> bool {
        self.reset_interval.is_some() || self.tolerate_timeouts
    }
}

/// Default `--io-timeout`.
pub const DEFAULT_IO_TIMEOUT: Duration = Duration::from_secs(30);

fn invalid(option: &'static str, value: impl ToString, reason: impl Into<String>) -> PerfError {
    PerfError::InvalidOption {
        option,
        value: value.to_string(),
        reason: reason.into(),
    }
}

fn seconds(option: &'static str, value: f64, allow_zero: bool) -> Result<Duration, PerfError> {
    if !value.is_finite() || value < 0.0 || (!allow_zero && value == 0.0) {
        let need = if allow_zero { ">= 0" } else { "> 0" };
        return Err(invalid(
            option,
            value,
            format!("give a number of seconds {need}"),
        ));
    }
    Duration::try_from_secs_f64(value)
        .map_err(|_| invalid(option, value, "too large a number of seconds"))
}

impl Args {
    /// Checks every option that does not need the device; the engines check the rest (LBA
    /// size, queue limits, namespace) once the device is open.
    pub fn validate(&self) -> Result<Config, PerfError> {
        let target = Target::parse(&self.device)?;
        match (self.engine, &target) {
            (Engine::SpdkLike, Target::Path(_)) => {
                return Err(PerfError::EngineDevice {
                    engine: Engine::SpdkLike.name(),
                    device: self.device.clone(),
                    hint: "it drives a PCI function through vfio-pci or `sim`; for a block device \
                           add --engine io_uring",
                })
            }
            (Engine::IoUring, Target::Pci(_) | Target::Sim | Target::Tcp(_)) => {
                return Err(PerfError::EngineDevice {
                    engine: Engine::IoUring.name(),
                    device: self.device.clone(),
                    hint: "it needs a block device path such as /dev/nvme0n1 (the controller \
                           bound to the kernel's nvme driver, or connected by the kernel's \
                           NVMe/TCP host)",
                })
            }
            _ => {}
        }
        let spdk_only = [
            (self.contexts.is_some(), "--contexts"),
            (self.no_request_cache, "--no-request-cache"),
            (self.no_batch_prefetch, "--no-batch-prefetch"),
            (self.no_shadow_doorbells, "--no-shadow-doorbells"),
            (self.shadow_doorbells, "--shadow-doorbells"),
            (self.no_sgl, "--no-sgl"),
            (self.nsid.is_some(), "--nsid"),
            (self.yield_idle, "--yield-idle"),
            (self.interrupts, "--interrupts"),
            (self.reset_interval.is_some(), "--reset-interval"),
            (self.io_timeout.is_some(), "--io-timeout"),
            (self.tolerate_timeouts, "--tolerate-timeouts"),
            (self.control_socket.is_some(), "--control-socket"),
        ];
        let uring_only = [(self.iopoll, "--iopoll"), (self.sqpoll, "--sqpoll")];
        if self.engine == Engine::IoUring {
            if let Some((_, option)) = spdk_only.iter().find(|(set, _)| *set) {
                return Err(PerfError::WrongEngineOption {
                    option,
                    engine: Engine::SpdkLike.name(),
                });
            }
        } else if let Some((_, option)) = uring_only.iter().find(|(set, _)| *set) {
            return Err(PerfError::WrongEngineOption {
                option,
                engine: Engine::IoUring.name(),
            });
        }
        if self.block_size == 0 || self.block_size > MAX_BLOCK_SIZE {
            return Err(invalid(
                "block size (-b)",
                self.block_size,
                format!("give 1..={MAX_BLOCK_SIZE} bytes, a multiple of the LBA size"),
            ));
        }
        if self.queue_depth == 0 || self.queue_depth > MAX_QUEUE_DEPTH {
            return Err(invalid(
                "queue depth (-q)",
                self.queue_depth,
                format!("give 1..={MAX_QUEUE_DEPTH}"),
            ));
        }
        if self.submit_batch == Some(0) {
            return Err(invalid("--submit-batch", 0, "give at least 1"));
        }
        if self.complete_batch == Some(0) {
            return Err(invalid("--complete-batch", 0, "give at least 1"));
        }
        if self.threads == 0 || self.threads > MAX_THREADS {
            return Err(invalid(
                "thread count (-j)",
                self.threads,
                format!("give 1..={MAX_THREADS}"),
            ));
        }
        if self.control_socket.is_some() && matches!(target, Target::Tcp(_)) {
            return Err(invalid(
                "--control-socket",
                "set",
                "it serves PCIe or `sim` runs",
            ));
        }
        if self.inline_device && (target != Target::Sim || self.threads != 1) {
            return Err(invalid(
                "--inline-device",
                "set",
                "it needs the `sim` device and one thread (-j 1)",
            ));
        }
        if self.ios == Some(0) {
            return Err(invalid("--ios", 0, "give at least 1 I/O"));
        }
        if self.range_blocks == Some(0) {
            return Err(invalid(
                "--range-blocks",
                0,
                "give at least one I/O's blocks",
            ));
        }
        if self.nsid == Some(0) || self.nsid == Some(u32::MAX) {
            return Err(invalid(
                "namespace id (-n)",
                self.nsid.unwrap_or_default(),
                "0 and 0xffffffff are not namespace ids; give an active namespace's id",
            ));
        }
        if self.verify && matches!(self.workload, Workload::RandRead | Workload::Read) {
            return Err(invalid(
                "--verify",
                "set",
                format!(
                    "workload {} writes nothing to check; use -w randwrite or -w randrw",
                    self.workload.name()
                ),
            ));
        }
        if self.workload == Workload::Append {
            let refuse = |option: &'static str, reason: &str| {
                Err(invalid(option, "set", format!("-w append {reason}")))
            };
            if self.engine != Engine::SpdkLike || matches!(target, Target::Tcp(_)) {
                return refuse(
                    "--engine",
                    "runs on our driver over PCIe (or `sim`) only: drop --engine or use a PCI device",
                );
            }
            if self.verify {
                return refuse("--verify", "checks the returned LBAs itself: drop --verify");
            }
            if self.reset_interval.is_some() || self.tolerate_timeouts {
                return refuse(
                    "--reset-interval/--tolerate-timeouts",
                    "does not resubmit appends: drop the option",
                );
            }
            if self.inline_device {
                return refuse(
                    "--inline-device",
                    "needs the emulator on its own thread: drop it",
                );
            }
        }
        if self.reset_interval.is_some() && self.inline_device {
            return Err(invalid(
                "--reset-interval",
                "set",
                "a reset waits for the controller, which --inline-device only runs between \
                 the worker's polls; drop --inline-device",
            ));
        }
        let reset_interval = self
            .reset_interval
            .map(|s| seconds("--reset-interval", s, false))
            .transpose()?;
        let io_timeout = self
            .io_timeout
            .map(|s| seconds("--io-timeout", s, false))
            .transpose()?
            .unwrap_or(DEFAULT_IO_TIMEOUT);
        if self.sim_fault.is_some() && (!self.verify || target != Target::Sim) {
            return Err(invalid(
                "--sim-fault",
                "set",
                "it needs the `sim` device and --verify",
            ));
        }
        let (pattern, mix) = match self.workload {
            Workload::RandRead => (Pattern::Random, Mix::Read),
            Workload::RandWrite => (Pattern::Random, Mix::Write),
            Workload::Read => (Pattern::Sequential, Mix::Read),
            Workload::Write => (Pattern::Sequential, Mix::Write),
            Workload::Rw => (Pattern::Sequential, Mix::ReadPercent(self.rwmix_read)),
            Workload::RandRw => (Pattern::Random, Mix::ReadPercent(self.rwmix_read)),
            Workload::Append => (Pattern::Sequential, Mix::Write),
        };
        Ok(Config {
            target,
            engine: self.engine,
            block_size: self.block_size,
            queue_depth: self.queue_depth,
            submit_batch: self
                .submit_batch
                .unwrap_or(self.queue_depth)
                .min(self.queue_depth),
            complete_batch: self.complete_batch.unwrap_or(self.queue_depth),
            threads: self.threads,
            pin: self.pin,
            worker_thread: self.worker_thread,
            time: seconds("run time (-t)", self.time, false)?,
            warmup: seconds("--warmup", self.warmup, true)?,
            ios: self.ios,
            workload: self.workload,
            pattern,
            mix,
            nsid: self.nsid,
            range_blocks: self.range_blocks,
            seed: self.seed,
            json: self.json,
            histogram: self.histogram,
            quiet: self.quiet,
            contexts: match (self.contexts, self.no_request_cache) {
                (Some(mode), _) => mode,
                (None, true) => ContextMode::Box,
                (None, false) => ContextMode::Slots,
            },
            batch_prefetch: !self.no_batch_prefetch,
            shadow_doorbells: if self.no_shadow_doorbells {
                nvme_driver::ShadowDoorbells::Never
            } else if self.shadow_doorbells {
                nvme_driver::ShadowDoorbells::Always
            } else {
                nvme_driver::ShadowDoorbells::Auto
            },
            sgl: !self.no_sgl,
            yield_idle: self.yield_idle,
            inline_device: self.inline_device,
            latency: !self.no_latency,
            interrupts: self.interrupts,
            iopoll: self.iopoll,
            sqpoll: self.sqpoll,
            verify: self.verify,
            sim_fault: self.sim_fault,
            reset_interval,
            io_timeout,
            tolerate_timeouts: self.tolerate_timeouts,
            control_socket: self.control_socket.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(line: &[&str]) -> Result<Config, String> {
        let args = Args::try_parse_from(std::iter::once("nvme-perf").chain(line.iter().copied()))
            .map_err(|e| e.to_string())?;
        args.validate().map_err(|e| e.to_string())
    }

    #[test]
    fn defaults_match_the_documented_ones() {
        let c = parse(&["sim"]).unwrap();
        assert_eq!(c.target, Target::Sim);
        assert_eq!(c.engine, Engine::SpdkLike);
        assert_eq!(
            (
                c.block_size,
                c.queue_depth,
                c.submit_batch,
                c.complete_batch
            ),
            (4096, 128, 128, 128)
        );
        assert_eq!(
            (c.threads, c.time, c.warmup),
            (1, Duration::from_secs(10), Duration::ZERO)
        );
        assert_eq!((c.pattern, c.mix), (Pattern::Random, Mix::Read));
        assert_eq!(c.contexts, ContextMode::Slots);
        assert!(c.batch_prefetch && c.sgl);
        assert_eq!(c.shadow_doorbells, nvme_driver::ShadowDoorbells::Auto);
        assert!(!c.json && !c.quiet && !c.histogram && c.ios.is_none());
    }

    #[test]
    fn short_and_long_options() {
        let c = parse(&[
            "-b",
            "8192",
            "-q",
            "4",
            "--submit-batch",
            "16",
            "--complete-batch",
            "8",
            "-j",
            "2",
            "-t",
            "0.5",
            "--warmup",
            "1.5",
            "-w",
            "rw",
            "--rwmix-read",
            "70",
            "-n",
            "2",
            "--range-blocks",
            "1000",
            "--seed",
            "9",
            "--no-request-cache",
            "--no-batch-prefetch",
            "--no-shadow-doorbells",
            "--no-sgl",
            "--json",
            "--quiet",
            "--histogram",
            "--pin",
            "trtype:PCIe traddr:0000:00:04.0",
        ])
        .unwrap();
        assert_eq!(c.target.to_string(), "0000:00:04.0");
        assert_eq!((c.block_size, c.queue_depth, c.threads), (8192, 4, 2));
        assert_eq!(
            c.submit_batch, 4,
            "the submit batch is capped at the queue depth"
        );
        assert_eq!(c.complete_batch, 8);
        assert_eq!(c.time, Duration::from_millis(500));
        assert_eq!(c.warmup, Duration::from_millis(1500));
        assert_eq!(
            (c.pattern, c.mix),
            (Pattern::Sequential, Mix::ReadPercent(70))
        );
        assert_eq!((c.nsid, c.range_blocks, c.seed), (Some(2), Some(1000), 9));
        assert_eq!(
            c.contexts,
            ContextMode::Box,
            "--no-request-cache is --contexts box"
        );
        assert!(!c.batch_prefetch && !c.sgl);
        assert_eq!(c.shadow_doorbells, nvme_driver::ShadowDoorbells::Never);
        assert!(c.json && c.quiet && c.histogram && c.pin);

        let u = parse(&[
            "--engine",
            "io_uring",
            "/dev/nvme0n1",
            "--iopoll",
            "--sqpoll",
            "-w",
            "randwrite",
        ])
        .unwrap();
        assert_eq!(u.engine, Engine::IoUring);
        assert_eq!(u.target, Target::Path("/dev/nvme0n1".into()));
        assert!(u.iopoll && u.sqpoll);
        assert_eq!(u.mix, Mix::Write);
        assert_eq!(parse(&["sim", "--ios", "20000"]).unwrap().ios, Some(20000));
        for (name, mode) in [
            ("slots", ContextMode::Slots),
            ("cache", ContextMode::Cache),
            ("box", ContextMode::Box),
        ] {
            let c = parse(&["sim", "--contexts", name]).unwrap();
            assert_eq!((c.contexts, c.contexts.name()), (mode, name));
        }
        assert!(parse(&["sim", "--contexts", "box", "--no-request-cache"]).is_err());
    }

    #[test]
    fn bad_values_are_errors_with_a_fix() {
        for (line, needle) in [
            (&["sim", "-q", "0"][..], "queue depth"),
            (&["sim", "-q", "5000"][..], "1..=4095"),
            (&["sim", "-b", "0"][..], "block size"),
            (&["sim", "-t", "0"][..], "> 0"),
            (&["sim", "-t", "nan"][..], "seconds"),
            (&["sim", "--warmup=-1"][..], "--warmup"),
            (&["sim", "-j", "0"][..], "thread count"),
            (&["sim", "--submit-batch", "0"][..], "--submit-batch"),
            (&["sim", "--complete-batch", "0"][..], "--complete-batch"),
            (&["sim", "--ios", "0"][..], "--ios"),
            (&["sim", "--range-blocks", "0"][..], "--range-blocks"),
            (&["sim", "-n", "0"][..], "namespace id"),
            (&["sim", "--rwmix-read", "101"][..], "101"),
            (&["sim", "-w", "trim"][..], "trim"),
            (&["/dev/nvme0n1"][..], "--engine io_uring"),
            (&["--engine", "io_uring", "sim"][..], "block device path"),
            (
                &["--engine", "io_uring", "/dev/x", "--no-request-cache"][..],
                "spdk-like engine only",
            ),
            (&["sim", "--iopoll"][..], "io_uring engine only"),
            (&["sim", "--verify"][..], "writes nothing"),
            (
                &["--engine", "io_uring", "/dev/x", "--verify"][..],
                "writes nothing",
            ),
            (&["sim", "--sim-fault", "corrupt-after=3"][..], "--verify"),
            (&["sim", "--verify", "--sim-fault", "melt=3"][..], "melt"),
            (&["sim", "--reset-interval", "0"][..], "> 0"),
            (
                &["--engine", "io_uring", "/dev/x", "--reset-interval", "1"][..],
                "spdk-like engine only",
            ),
            (
                &["sim", "--reset-interval", "1", "--inline-device"][..],
                "--inline-device",
            ),
            (&["zz:zz"][..], "bad DEVICE"),
            (&["trtype:TCP subnqn:nqn.a:b"][..], "has no traddr"),
            (&["trtype:RDMA traddr:1.2.3.4"][..], "not supported"),
        ] {
            let err = parse(line).unwrap_err();
            assert!(err.contains(needle), "{line:?}: {err}");
        }
    }
}
