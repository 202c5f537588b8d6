//! `nvme-perf`: an NVMe benchmark in the manner of SPDK's perf and fio's t/io_uring.
//!
//! ```text
//! main thread: clock (warmup -> measure -> stop), progress line   [runner]
//!   worker thread i (pinned with --pin): one queue pair / ring      [spdk, uring]
//!     loop { phase check; plug(n); submit <= batch; unplug (1 doorbell); poll(<= batch) }
//!   (an NVMe/TCP DEVICE runs the same loop shape on a TcpQueuePair)               [tcp]
//!   -> per-thread Tally (HDR histogram, counters) -> Report        [report]
//! ```
//!
//! The hot loops allocate nothing per I/O: buffers and contexts are preallocated per thread,
//! per-I/O contexts are recycled through an `nvme_pool::ObjectCache` (unless the A/B switch
//! turns that off), and the histogram is sized up front.

pub mod args;
pub mod control;
pub mod control_socket;
pub mod emulator;
pub mod error;
pub mod hotplug;
pub mod report;
pub mod rng;
pub mod runner;
pub mod spdk;
pub mod target;
pub mod tcp;
pub mod uring;
pub mod verify;

pub use args::{Args, Config, Engine};
pub use error::PerfError;
pub use report::Report;

/// Runs the benchmark `config` describes and summarises it.
pub fn run(config: &Config) -> Result<Report, PerfError> {
    let outcome = match config.engine {
        Engine::SpdkLike if matches!(config.target, target::Target::Tcp(_)) => tcp::run(config)?,
        Engine::SpdkLike => spdk::run(config)?,
        Engine::IoUring => uring::run(config)?,
    };
    Ok(Report::build(config, &outcome))
}
