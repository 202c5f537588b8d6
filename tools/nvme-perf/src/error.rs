//! Errors of the benchmark. Each variant carries what is needed to act on it, and the message
//! says how to fix the command line or the setup. `main` prints them and exits with status 1.

use std::path::PathBuf;

use nvme_driver::DeviceArgError;

/// Everything that stops a benchmark run.
#[allow(missing_docs)]
#[derive(Debug, thiserror::Error)]
pub enum PerfError {
    /// An option value outside what the tool accepts.
    #[error("invalid {option} `{value}`: {reason}")]
    InvalidOption {
        option: &'static str,
        value: String,
        reason: String,
    },
    /// The DEVICE argument is malformed.
    #[error("bad DEVICE: {0}")]
    Device(#[from] DeviceArgError),
    #[error("bad DEVICE: {0}")]
    TransportId(#[from] nvme_tcp::TridError),
    /// The DEVICE kind does not suit the chosen engine.
    #[error("the {engine} engine cannot use DEVICE `{device}`: {hint}")]
    EngineDevice {
        engine: &'static str,
        device: String,
        hint: &'static str,
    },
    /// An option that belongs to the other engine.
    #[error("{option} applies to the {engine} engine only; drop it or add --engine {engine}")]
    WrongEngineOption {
        option: &'static str,
        engine: &'static str,
    },
    /// The driver refused something (bring-up, namespace lookup, queue creation, buffers).
    #[error("{context}: {source}")]
    Driver {
        context: String,
        #[source]
        source: nvme_driver::Error,
    },
    /// The block size does not fit the namespace's LBA format.
    #[error(
        "block size {block_size} is not a whole number of namespace {nsid}'s {lba_size}-byte \
         blocks: use a multiple of {lba_size} with -b"
    )]
    BlockSize {
        block_size: usize,
        lba_size: u32,
        nsid: u32,
    },
    /// The LBA range cannot hold one I/O.
    #[error(
        "the LBA span of {span} blocks from namespace {nsid} cannot hold one {blocks}-block I/O: \
         raise --range-blocks or lower -b"
    )]
    RangeTooSmall { span: u64, blocks: u64, nsid: u32 },
    /// `-w append` cannot run on the namespace.
    #[error("-w append on namespace {nsid}: {why}")]
    Zoned { nsid: u32, why: String },
    /// The queue depth exceeds what the device (or the tool) allows.
    #[error(
        "queue depth {requested} needs {entries} queue entries, but {device} allows at most \
         {max_entries}: use -q {max_qd} or less"
    )]
    QueueDepth {
        requested: u32,
        entries: u64,
        device: String,
        max_entries: u64,
        max_qd: u64,
    },
    /// The control socket could not be served (`--control-socket`).
    #[error(transparent)]
    ControlSocket(#[from] nvme_control::ServerError),
    /// More threads than the controller has I/O queue pairs.
    #[error(
        "{requested} threads need {requested} I/O queue pairs, but the controller granted only \
         {granted}: use -j {granted} or less"
    )]
    Threads { requested: u32, granted: u16 },
    /// A system call on a file or device failed.
    #[error("{}: {what}: {source}", path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Setting up or driving io_uring failed.
    #[error("io_uring {what}: {source}{hint}")]
    Uring {
        what: &'static str,
        hint: &'static str,
        #[source]
        source: std::io::Error,
    },
    /// Pinning a worker thread to a CPU failed.
    #[error("cannot pin worker thread {thread} to CPU {cpu}: {source}")]
    Pin {
        thread: usize,
        cpu: usize,
        #[source]
        source: std::io::Error,
    },
    /// A worker thread could not be started.
    #[error("cannot start worker thread {thread}: {source}")]
    Spawn {
        thread: usize,
        #[source]
        source: std::io::Error,
    },
    /// A worker thread panicked (a bug in the tool).
    #[error("worker thread {thread} panicked; please report this with the command line")]
    WorkerPanic { thread: usize },
    /// `--verify` over more positions than the per-position state allows.
    #[error(
        "--verify keeps 4 bytes per I/O position, and the span has {positions} positions (more \
         than {max}): use --range-blocks {max_blocks} or less"
    )]
    VerifySpan {
        positions: u64,
        max: u64,
        max_blocks: u64,
    },
    /// `--verify` with a thread slice too small for its queue depth.
    #[error(
        "--verify gives each of {threads} thread(s) its own slice of the span, and the smallest \
         has {share} I/O positions, not more than the queue depth {queue_depth} (one write per \
         position in flight): use --range-blocks {min_blocks} or more, or a lower -q or -j"
    )]
    VerifyShare {
        share: u64,
        queue_depth: u32,
        threads: u32,
        min_blocks: u64,
    },
    /// `--verify` found blocks that do not hold what was written (the summary was printed
    /// first).
    #[error("--verify found {count} mismatching block(s); first: {first}")]
    VerifyMismatch { count: u64, first: String },
    /// I/Os failed during the run (the summary was printed first).
    #[error(
        "{count} I/O(s) failed; first failure: {first}. Check the device (e.g. nvme-identify) \
         and the LBA range"
    )]
    IoErrors { count: u64, first: String },
    /// DEVICE `sim` in a build without the in-process emulator (a plain release build).
    #[error("this build has no emulator: rebuild with --features emulator to use DEVICE `sim`")]
    NoEmulator,
}

impl PerfError {
    /// A driver error with the step that failed.
    pub fn driver(context: impl Into<String>, source: nvme_driver::Error) -> Self {
        PerfError::Driver {
            context: context.into(),
            source,
        }
    }
}
