//! Engine-neutral parts of a run: the LBA geometry, the worker threads, the clock and the
//! per-second progress line.

use std::io::Write;
use std::time::{Duration, Instant};

use crate::args::Config;
use crate::control::{
    allowed_cpus, pin_current_thread, Control, Live, LiveSample, Phase, WorkerResult,
};
use crate::error::PerfError;
use crate::rng::{LbaGen, Pattern, XorShift64};

/// Interval of the progress line.
const TICK: Duration = Duration::from_secs(1);
/// Bytes per MiB.
pub const MIB: f64 = (1u64 << 20) as f64;

/// Where the I/Os go: LBA size and the aligned positions of the span.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// Bytes per logical block.
    pub lba_size: u32,
    /// Logical blocks per I/O.
    pub blocks_per_io: u64,
    /// I/O-sized aligned positions in the span.
    pub positions: u64,
}

impl Geometry {
    /// Checks the block size and the LBA span against a namespace (or block device) of
    /// `blocks` blocks of `lba_size` bytes.
    pub fn new(config: &Config, nsid: u32, lba_size: u32, blocks: u64) -> Result<Self, PerfError> {
        let blocks_per_io = (config.block_size / lba_size as usize) as u64;
        // Whole blocks only (this also rejects a block size below the LBA size).
        if blocks_per_io * u64::from(lba_size) != config.block_size as u64 {
            return Err(PerfError::BlockSize {
                block_size: config.block_size,
                lba_size,
                nsid,
            });
        }
        let span = config.range_blocks.map_or(blocks, |r| r.min(blocks));
        let positions = span / blocks_per_io;
        if positions == 0 {
            return Err(PerfError::RangeTooSmall {
                span,
                blocks: blocks_per_io,
                nsid,
            });
        }
        Ok(Self {
            lba_size,
            blocks_per_io,
            positions,
        })
    }

    /// Thread `thread`'s slice of the positions: `(first position, positions)`, the
    /// `thread`-th of `config.threads` near-equal parts.
    pub fn share(&self, config: &Config, thread: usize) -> (u64, u64) {
        let at =
            |t: usize| (u128::from(self.positions) * t as u128 / u128::from(config.threads)) as u64;
        (at(thread), at(thread + 1) - at(thread))
    }

    /// Thread `thread`'s address stream: its own PRNG stream; a sequential stream starts at
    /// the thread's share of the span. With `--verify` the stream stays within the thread's
    /// own slice ([`Geometry::share`]).
    pub fn generator(&self, config: &Config, thread: usize) -> LbaGen {
        if config.verify {
            let (first, positions) = self.share(config, thread);
            return LbaGen::new(
                XorShift64::new(config.seed, thread as u64),
                config.pattern,
                config.mix,
                first * self.blocks_per_io,
                positions,
                self.blocks_per_io,
                0,
            );
        }
        let start = match config.pattern {
            Pattern::Random => 0,
            Pattern::Sequential => {
                (u128::from(self.positions) * thread as u128 / u128::from(config.threads)) as u64
            }
        };
        LbaGen::new(
            XorShift64::new(config.seed, thread as u64),
            config.pattern,
            config.mix,
            0,
            self.positions,
            self.blocks_per_io,
            start,
        )
    }
}

/// What the engine found out while setting up, for the report.
#[derive(Clone, Debug)]
pub struct Setup {
    /// The device as the report names it.
    pub device: String,
    /// Bytes per logical block.
    pub lba_size: u32,
    /// Namespace id (spdk-like).
    pub nsid: Option<u32>,
    /// Whether shadow doorbells are in effect (spdk-like).
    pub shadow_doorbells: Option<bool>,
    /// Whether reads and writes use SGL data pointers (spdk-like).
    pub sgl: Option<bool>,
}

/// What an engine hands back.
#[derive(Debug)]
pub struct Outcome {
    /// Setup facts.
    pub setup: Setup,
    /// One result per thread.
    pub results: Vec<WorkerResult>,
}

/// Runs `work(worker, ..)` on one thread per element of `workers` (pinned with `--pin`), drives
/// the phases from this thread, prints the progress line, and collects the results. One worker
/// (`-j 1`) runs on this thread instead and keeps time itself ([`drive_observed`]).
pub fn drive<W, F>(
    config: &Config,
    workers: Vec<W>,
    work: F,
) -> Result<Vec<WorkerResult>, PerfError>
where
    W: Send,
    F: Fn(W, &Control, &Live) -> Result<WorkerResult, PerfError> + Sync,
{
    drive_observed(config, workers, &[], work)
}

/// [`drive`], and once a second the main thread publishes each worker's progress counters
/// into `cells[worker]` (a control socket's queue statistics; the workers' loops are
/// unchanged: they publish to their `Live` as always).
///
/// With one worker and no cells the worker runs on the calling thread (unless
/// `--worker-thread`), as SPDK's perf runs
/// its one core's work on its main thread: its [`Pacer`](crate::control::Pacer) runs the
/// [`Clock`] every few rounds, so no second thread shares the CPU with the polling loop (in
/// a one-vCPU guest every wake-up of a timekeeping thread preempts the worker).
pub fn drive_observed<W, F>(
    config: &Config,
    mut workers: Vec<W>,
    cells: &[std::sync::Arc<nvme_control::QueueStatsCell>],
    work: F,
) -> Result<Vec<WorkerResult>, PerfError>
where
    W: Send,
    F: Fn(W, &Control, &Live) -> Result<WorkerResult, PerfError> + Sync,
{
    let cpus = if config.pin {
        Some(allowed_cpus().map_err(|source| PerfError::Pin {
            thread: 0,
            cpu: 0,
            source,
        })?)
    } else {
        None
    };
    let first_phase = if config.warmup.is_zero() {
        Phase::Measure
    } else {
        Phase::Warmup
    };
    if workers.len() == 1 && cells.is_empty() && !config.worker_thread {
        if let Some(worker) = workers.pop() {
            if let Some(cpu) = cpus.as_ref().and_then(|c| c.first().copied()) {
                pin_current_thread(cpu).map_err(|source| PerfError::Pin {
                    thread: 0,
                    cpu,
                    source,
                })?;
            }
            let control = Control::with_clock(first_phase, Clock::new(config, first_phase));
            let live = Live::default();
            let result = work(worker, &control, &live);
            control.advance(Phase::Stop);
            return result.map(|r| vec![r]);
        }
    }
    let control = Control::new(first_phase);
    let lives: Vec<Live> = workers.iter().map(|_| Live::default()).collect();
    // Workers wake the main thread when they finish; otherwise it sleeps until its next phase
    // change or progress tick (not on a short period: in a one-vCPU guest every wake-up
    // preempts a polling worker).
    let main_thread = std::thread::current();
    std::thread::scope(|scope| {
        let mut handles = Vec::with_capacity(workers.len());
        let mut spawn_error = None;
        for (i, worker) in workers.into_iter().enumerate() {
            let (control, live, work) = (&control, &lives[i], &work);
            let main_thread = main_thread.clone();
            let cpu = cpus.as_ref().map(|c| c[i % c.len()]);
            let spawned = std::thread::Builder::new()
                .name(format!("nvme-perf-{i}"))
                .spawn_scoped(scope, move || {
                    let result = (|| {
                        if let Some(cpu) = cpu {
                            pin_current_thread(cpu).map_err(|source| PerfError::Pin {
                                thread: i,
                                cpu,
                                source,
                            })?;
                        }
                        work(worker, control, live)
                    })();
                    if result.is_err() {
                        control.advance(Phase::Stop);
                    }
                    live.done.store(true, std::sync::atomic::Ordering::Release);
                    main_thread.unpark();
                    result
                });
            match spawned {
                Ok(h) => handles.push(h),
                Err(source) => {
                    control.advance(Phase::Stop);
                    spawn_error = Some(PerfError::Spawn { thread: i, source });
                    break;
                }
            }
        }
        if spawn_error.is_none() {
            let mut clock = Clock::new(config, first_phase);
            while !lives
                .iter()
                .all(|l| l.done.load(std::sync::atomic::Ordering::Acquire))
            {
                match clock.tick(&control, &lives, cells) {
                    // Until the next phase change or tick; a finishing worker unparks earlier.
                    Some(due) => {
                        std::thread::park_timeout(due.saturating_duration_since(Instant::now()))
                    }
                    None => break,
                }
            }
        }
        control.advance(Phase::Stop);
        let mut results = Vec::with_capacity(handles.len());
        let mut first_error = spawn_error;
        for (i, handle) in handles.into_iter().enumerate() {
            match handle.join() {
                Ok(Ok(r)) => results.push(r),
                Ok(Err(e)) => {
                    first_error.get_or_insert(e);
                }
                Err(_) => {
                    first_error.get_or_insert(PerfError::WorkerPanic { thread: i });
                }
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(results),
        }
    })
}

fn total(lives: &[Live]) -> LiveSample {
    lives.iter().fold(LiveSample::default(), |mut acc, l| {
        let s = l.sample();
        acc.ios += s.ios;
        acc.submitted += s.submitted;
        acc.submit_calls += s.submit_calls;
        acc.reap_calls += s.reap_calls;
        acc
    })
}

/// Ratio that prints 0 for an empty denominator.
pub fn per(numerator: u64, denominator: u64) -> f64 {
    if denominator == 0 {
        0.0
    } else {
        numerator as f64 / denominator as f64
    }
}

/// The progress line for one interval.
pub fn progress_line(
    elapsed: Duration,
    delta: &LiveSample,
    interval: Duration,
    block_size: usize,
    warmup: bool,
) -> String {
    let secs = interval.as_secs_f64().max(f64::MIN_POSITIVE);
    let iops = delta.ios as f64 / secs;
    format!(
        "[{:>4}s{}] IOPS={:.0}, BW={:.1}MiB/s, IOS/call=submit {:.1}/reap {:.1}",
        elapsed.as_secs(),
        if warmup { " warmup" } else { "" },
        iops,
        iops * block_size as f64 / MIB,
        per(delta.submitted, delta.submit_calls),
        per(delta.ios, delta.reap_calls),
    )
}

/// The run's timekeeping: advances the phases on time and prints the progress line once a
/// second. The main thread runs it between parks while the workers run on their own threads;
/// a single worker on the main thread runs it from its [`Pacer`](crate::control::Pacer).
#[derive(Debug)]
pub struct Clock {
    start: Instant,
    warmup_end: Instant,
    measure_end: Option<Instant>,
    /// Length of the measured phase (`-t`).
    time: Duration,
    /// The measured phase ends on time (no `--ios` budget).
    timed: bool,
    quiet: bool,
    json: bool,
    block_size: usize,
    last: LiveSample,
    last_tick: Instant,
}

impl Clock {
    /// A clock starting now, in `first_phase` (warmup or measure).
    pub fn new(config: &Config, first_phase: Phase) -> Self {
        let start = Instant::now();
        Self {
            start,
            warmup_end: start + config.warmup,
            measure_end: (first_phase == Phase::Measure).then(|| start + config.time),
            time: config.time,
            timed: config.ios.is_none(),
            quiet: config.quiet,
            json: config.json,
            block_size: config.block_size,
            last: LiveSample::default(),
            last_tick: start,
        }
    }

    /// When [`Clock::tick`] has something to do next: a phase change or the progress tick.
    pub fn due(&self) -> Instant {
        let mut due = self.last_tick + TICK;
        match self.measure_end {
            None => due = due.min(self.warmup_end),
            Some(end) if self.timed => due = due.min(end),
            Some(_) => {}
        }
        due
    }

    /// Does what is due now (a phase change, the progress line, publishing `lives` into
    /// `cells`); returns when to call again, or `None` once it has stopped the run.
    pub fn tick(
        &mut self,
        control: &Control,
        lives: &[Live],
        cells: &[std::sync::Arc<nvme_control::QueueStatsCell>],
    ) -> Option<Instant> {
        let now = Instant::now();
        if self.measure_end.is_none() && now >= self.warmup_end {
            control.advance(Phase::Measure);
            self.measure_end = Some(now + self.time);
        }
        if now >= self.last_tick + TICK {
            crate::control_socket::publish(lives, cells);
            let sample = total(lives);
            let delta = LiveSample {
                ios: sample.ios - self.last.ios,
                submitted: sample.submitted - self.last.submitted,
                submit_calls: sample.submit_calls - self.last.submit_calls,
                reap_calls: sample.reap_calls - self.last.reap_calls,
            };
            if !self.quiet {
                let line = progress_line(
                    now - self.start,
                    &delta,
                    now - self.last_tick,
                    self.block_size,
                    control.phase() == Phase::Warmup,
                );
                // Progress goes to stderr when stdout carries JSON; a closed pipe is not an error.
                let _ = if self.json {
                    writeln!(std::io::stderr().lock(), "{line}")
                } else {
                    writeln!(std::io::stdout().lock(), "{line}")
                };
            }
            self.last = sample;
            self.last_tick = now;
        }
        // After the progress line: a worker that keeps time itself reads the clock only when
        // I/O completes, so on a slow device the line and the end can fall due together.
        if self.timed && self.measure_end.is_some_and(|end| now >= end) {
            control.advance(Phase::Stop);
            return None;
        }
        Some(self.due())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::Args;
    use clap::Parser;

    fn config(line: &[&str]) -> Config {
        Args::try_parse_from(std::iter::once("nvme-perf").chain(line.iter().copied()))
            .unwrap()
            .validate()
            .unwrap()
    }

    #[test]
    fn geometry_checks_block_size_and_span() {
        let c = config(&["sim", "-b", "8192", "--range-blocks", "100"]);
        let g = Geometry::new(&c, 1, 512, 1000).unwrap();
        assert_eq!((g.blocks_per_io, g.positions), (16, 6));
        let err = Geometry::new(&c, 1, 4096 * 4, 1000)
            .unwrap_err()
            .to_string();
        assert!(err.contains("multiple of 16384"), "{err}");
        let tiny = config(&["sim", "-b", "4096", "--range-blocks", "4"]);
        let err = Geometry::new(&tiny, 2, 512, 1000).unwrap_err().to_string();
        assert!(err.contains("--range-blocks"), "{err}");
        // The span is capped by the namespace.
        let big = config(&["sim", "--range-blocks", "1000000"]);
        assert_eq!(Geometry::new(&big, 1, 4096, 10).unwrap().positions, 10);
    }

    #[test]
    fn sequential_threads_start_at_their_share() {
        let c = config(&["sim", "-w", "read", "-j", "4"]);
        let g = Geometry::new(&c, 1, 4096, 400).unwrap();
        let starts: Vec<u64> = (0..4).map(|t| g.generator(&c, t).next_io().0).collect();
        assert_eq!(starts, [0, 100, 200, 300]);
    }

    #[test]
    fn verifying_threads_get_disjoint_slices() {
        let c = config(&[
            "sim",
            "-w",
            "randwrite",
            "--verify",
            "-j",
            "3",
            "-b",
            "8192",
        ]);
        let g = Geometry::new(&c, 1, 4096, 1000).unwrap();
        let shares: Vec<(u64, u64)> = (0..3).map(|t| g.share(&c, t)).collect();
        assert_eq!(shares, [(0, 166), (166, 167), (333, 167)]);
        for (t, (first, n)) in shares.into_iter().enumerate() {
            let mut gen = g.generator(&c, t);
            for _ in 0..1000 {
                let (lba, w) = gen.next_io();
                assert!(w && lba % 2 == 0, "{lba}");
                assert!((first * 2..(first + n) * 2).contains(&lba), "{t}: {lba}");
            }
        }
    }

    /// One job runs on the calling thread by default and on a thread of its own with
    /// `--worker-thread` (the A/B switch between the two layouts).
    #[test]
    fn a_single_job_runs_on_the_main_thread_unless_worker_thread() {
        for (line, on_main) in [
            (&["sim", "-t", "0.05", "--quiet"][..], true),
            (
                &["sim", "-t", "0.05", "--quiet", "--worker-thread"][..],
                false,
            ),
        ] {
            let c = config(line);
            let main = std::thread::current().id();
            let ran_on = std::sync::Mutex::new(None);
            let results = drive_observed(&c, vec![()], &[], |(), _control, _live| {
                *ran_on.lock().unwrap() = Some(std::thread::current().id());
                Ok(WorkerResult {
                    tally: crate::control::Tally::new(),
                    elapsed: Duration::ZERO,
                    cpu: Duration::ZERO,
                    driver: None,
                    verify: None,
                    recovery: None,
                    tcp: None,
                })
            })
            .unwrap();
            assert_eq!(results.len(), 1);
            let ran_on = ran_on.into_inner().unwrap().expect("the job ran");
            assert_eq!(ran_on == main, on_main, "{line:?}");
        }
    }

    /// One worker on the main thread keeps time through its `Pacer`: it stops the run on time
    /// whether its rounds are fast or far apart (a slow device), and runs the warmup first.
    #[test]
    fn a_single_worker_keeps_time_itself() {
        use crate::control::{Pacer, Step, Tally};
        for (line, round_gap) in [
            (&["sim", "-t", "0.2", "--quiet"][..], Duration::ZERO),
            // Rounds 20 ms apart: reading the clock only every 16th would stop 320 ms late.
            (
                &["sim", "-t", "0.2", "--quiet"][..],
                Duration::from_millis(20),
            ),
            (
                &["sim", "-t", "0.2", "--warmup", "0.1", "--quiet"][..],
                Duration::ZERO,
            ),
        ] {
            let c = config(line);
            let first = if c.warmup.is_zero() {
                Phase::Measure
            } else {
                Phase::Warmup
            };
            let start = Instant::now();
            let control = Control::with_clock(first, Clock::new(&c, first));
            let live = Live::default();
            let mut tally = Tally::new();
            let mut pacer = Pacer::new(&control, &live, None);
            let mut measure_began = None;
            while control.phase() != Phase::Stop {
                assert!(
                    start.elapsed() < Duration::from_secs(5),
                    "{line:?}: never stopped"
                );
                if pacer.step(&mut tally) == Step::BeginMeasure {
                    measure_began = Some(start.elapsed());
                }
                tally.complete_untimed();
                pacer.publish(&tally);
                std::thread::sleep(round_gap);
            }
            let took = start.elapsed();
            let want = c.warmup + c.time;
            assert!(
                // The margin is for a loaded host's scheduling delays.
                took >= want && took < want + Duration::from_millis(250),
                "{line:?}: stopped after {took:?}, not {want:?}"
            );
            if !c.warmup.is_zero() {
                let began = measure_began.expect("the warmup ended");
                assert!(began >= c.warmup && began < c.warmup + Duration::from_millis(250));
            }
            assert!(live.sample().ios > 0, "the totals were published");
        }
    }

    #[test]
    fn progress_line_format() {
        let delta = LiveSample {
            ios: 2000,
            submitted: 2000,
            submit_calls: 100,
            reap_calls: 400,
        };
        let line = progress_line(
            Duration::from_secs(3),
            &delta,
            Duration::from_secs(2),
            4096,
            false,
        );
        assert_eq!(
            line,
            "[   3s] IOPS=1000, BW=3.9MiB/s, IOS/call=submit 20.0/reap 5.0"
        );
        let idle = progress_line(Duration::ZERO, &LiveSample::default(), TICK, 4096, true);
        assert_eq!(
            idle,
            "[   0s warmup] IOPS=0, BW=0.0MiB/s, IOS/call=submit 0.0/reap 0.0"
        );
    }
}
