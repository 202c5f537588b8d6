//! What the main thread and the workers share, and the per-thread bookkeeping both engines use.
//!
//! The main thread owns the clock: it moves [`Control`] from warmup to measuring to stopping.
//! Each worker reads the phase once per round (one relaxed load) and publishes its running
//! totals (every few rounds) into its own cache-line-aligned [`Live`] block (relaxed stores), which the main
//! thread samples once a second for the progress line. Nothing else is shared while I/O runs.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::runner::Clock;

use hdrhistogram::Histogram;

/// Highest latency the histogram resolves (60 s); longer ones are recorded as 60 s.
pub const MAX_LATENCY_NS: u64 = 60_000_000_000;
/// Significant decimal digits of the histogram (0.1 % resolution).
pub const HISTOGRAM_SIGFIG: u8 = 3;

/// Run phases, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub enum Phase {
    /// I/O runs, nothing is recorded.
    Warmup = 0,
    /// I/O runs and is recorded.
    Measure = 1,
    /// No new submissions; drain what is in flight and finish.
    Stop = 2,
}

/// Run-wide control shared by all threads.
#[derive(Debug)]
pub struct Control {
    phase: AtomicU8,
    /// With one worker on the main thread: the run's clock, for that worker's [`Pacer`] to
    /// take (the lock is taken once, in [`Pacer::new`]).
    clock: Mutex<Option<Box<Clock>>>,
}

impl Control {
    /// Starts in `phase`; the main thread keeps time.
    pub fn new(phase: Phase) -> Self {
        Self {
            phase: AtomicU8::new(phase as u8),
            clock: Mutex::new(None),
        }
    }

    /// Starts in `phase`; the first [`Pacer`] made on it keeps time with `clock` (one worker,
    /// on the main thread).
    pub fn with_clock(phase: Phase, clock: Clock) -> Self {
        Self {
            phase: AtomicU8::new(phase as u8),
            clock: Mutex::new(Some(Box::new(clock))),
        }
    }

    fn take_clock(&self) -> Option<Box<Clock>> {
        // A poisoned lock only means a panicking thread held it; the clock is still whole.
        match self.clock.lock() {
            Ok(mut c) => c.take(),
            Err(poisoned) => poisoned.into_inner().take(),
        }
    }

    /// The current phase (a relaxed load: a worker may see a change one round late).
    #[inline(always)]
    pub fn phase(&self) -> Phase {
        match self.phase.load(Ordering::Relaxed) {
            0 => Phase::Warmup,
            1 => Phase::Measure,
            _ => Phase::Stop,
        }
    }

    /// Moves forward to `phase` (never backwards).
    pub fn advance(&self, phase: Phase) {
        self.phase.fetch_max(phase as u8, Ordering::Relaxed);
    }
}

/// Running totals of one worker since it started (warmup included), for the progress line.
#[derive(Debug, Default)]
#[repr(align(128))]
pub struct Live {
    /// I/Os completed.
    pub ios: AtomicU64,
    /// I/Os submitted.
    pub submitted: AtomicU64,
    /// Submit calls (doorbell rounds).
    pub submit_calls: AtomicU64,
    /// Poll calls that found completions.
    pub reap_calls: AtomicU64,
    /// The worker has finished.
    pub done: AtomicBool,
}

/// A snapshot of [`Live`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LiveSample {
    /// I/Os completed.
    pub ios: u64,
    /// I/Os submitted.
    pub submitted: u64,
    /// Submit calls.
    pub submit_calls: u64,
    /// Poll calls that found completions.
    pub reap_calls: u64,
}

impl LiveSample {
    /// The sum of two samples.
    #[inline(always)]
    pub fn plus(&self, other: &LiveSample) -> LiveSample {
        LiveSample {
            ios: self.ios + other.ios,
            submitted: self.submitted + other.submitted,
            submit_calls: self.submit_calls + other.submit_calls,
            reap_calls: self.reap_calls + other.reap_calls,
        }
    }
}

impl Live {
    /// Reads the totals.
    pub fn sample(&self) -> LiveSample {
        LiveSample {
            ios: self.ios.load(Ordering::Relaxed),
            submitted: self.submitted.load(Ordering::Relaxed),
            submit_calls: self.submit_calls.load(Ordering::Relaxed),
            reap_calls: self.reap_calls.load(Ordering::Relaxed),
        }
    }
}

/// Linear sub-buckets per power of two of [`LatencyBuckets`] (2^7: below 128 ns every value
/// has its own bucket; above, a bucket spans 1/64 of its power of two, about 1.6 %).
const SUB_BITS: u32 = 7;
/// Buckets for every `u64` value (30 KiB): no clamp per record. Values above
/// [`MAX_LATENCY_NS`] saturate when [`Tally::finish`] folds them into the histogram.
const BUCKETS: usize = (u64::BITS as usize - SUB_BITS as usize + 2) << (SUB_BITS - 1);

/// The hot-path latency record: a log-linear bucket array whose `record` is a handful of
/// instructions (leading-zero count, shift, add, increment), unlike a full HDR histogram
/// record. [`Tally::finish`] folds it into the `Histogram` the reports read.
#[derive(Clone, Debug)]
pub struct LatencyBuckets {
    counts: Box<[u64]>,
}

impl LatencyBuckets {
    fn new() -> Self {
        Self {
            counts: vec![0; BUCKETS].into_boxed_slice(),
        }
    }

    /// Bucket of `ns`: values below 2^SUB_BITS map to themselves; above, `shift` low bits are
    /// dropped so the kept mantissa lies in [2^(SUB_BITS-1), 2^SUB_BITS), and the bucket is
    /// `shift * 2^(SUB_BITS-1) + mantissa` (contiguous, increasing with `ns`).
    #[inline(always)]
    fn index(ns: u64) -> usize {
        let bits = u64::BITS - ns.leading_zeros();
        if bits <= SUB_BITS {
            ns as usize
        } else {
            let shift = bits - SUB_BITS;
            ((shift as usize) << (SUB_BITS - 1)) + (ns >> shift) as usize
        }
    }

    /// Lowest and highest value of bucket `index`.
    fn bounds(index: usize) -> (u64, u64) {
        let half = 1usize << (SUB_BITS - 1);
        if index < 2 * half {
            (index as u64, index as u64)
        } else {
            let shift = index / half - 1;
            let mantissa = (index - shift * half) as u64;
            // The top bucket's end is 2^64 - 1 (the shift drops the carry out of bit 63).
            (mantissa << shift, ((mantissa + 1) << shift).wrapping_sub(1))
        }
    }

    #[inline(always)]
    fn record(&mut self, ns: u64) {
        let i = Self::index(ns);
        // `index` never exceeds BUCKETS - 1 (the buckets cover every u64); the check keeps it
        // safe anyway.
        if let Some(c) = self.counts.get_mut(i) {
            *c += 1;
        }
    }

    fn reset(&mut self) {
        self.counts.fill(0);
    }
}

/// Counters and latency histogram of one worker's measured phase.
#[derive(Clone, Debug)]
pub struct Tally {
    /// Latency of each completed I/O, in ns (filled from `buckets` by [`Tally::finish`]).
    pub hist: Histogram<u64>,
    /// Where the hot path records latencies.
    buckets: LatencyBuckets,
    /// I/Os completed successfully.
    pub ios: u64,
    /// I/Os that failed (submission refused or error completion).
    pub errors: u64,
    /// Message of the first failure.
    pub first_error: Option<String>,
    // `submitted` and `submit_calls` (incremented together) are not neighbours: side by side,
    // the compiler turned the two additions into a 128-bit load, add and store (five
    // instructions for two, once per submission round).
    /// I/Os submitted.
    pub submitted: u64,
    /// I/Os reaped without success (an error completion, or a timeout that
    /// `--tolerate-timeouts` accepts): [`Tally::reaped`] is these and `ios`, so a successful
    /// completion increments one counter, not two.
    pub unsuccessful: u64,
    /// Poll calls that found at least one completion.
    pub reap_calls: u64,
    /// Submit calls (one doorbell write or io_uring_enter each).
    pub submit_calls: u64,
}

impl Tally {
    /// An empty tally (allocates the histogram: call before the hot loop).
    pub fn new() -> Self {
        Self {
            hist: Histogram::new_with_bounds(1, MAX_LATENCY_NS, HISTOGRAM_SIGFIG)
                .expect("the histogram bounds are constants that hdrhistogram accepts"),
            buckets: LatencyBuckets::new(),
            ios: 0,
            errors: 0,
            first_error: None,
            submitted: 0,
            submit_calls: 0,
            unsuccessful: 0,
            reap_calls: 0,
        }
    }

    /// The running totals of [`Live`] this tally holds: completions (successful or not),
    /// submissions, submit calls and reaping polls.
    #[inline(always)]
    pub fn sample(&self) -> LiveSample {
        LiveSample {
            ios: self.reaped(),
            submitted: self.submitted,
            submit_calls: self.submit_calls,
            reap_calls: self.reap_calls,
        }
    }

    /// Forgets everything recorded so far (end of warmup). No allocation.
    pub fn reset(&mut self) {
        self.hist.reset();
        self.buckets.reset();
        self.ios = 0;
        self.errors = 0;
        self.first_error = None;
        self.submitted = 0;
        self.submit_calls = 0;
        self.unsuccessful = 0;
        self.reap_calls = 0;
    }

    /// I/Os reaped, successful or not.
    #[inline(always)]
    pub fn reaped(&self) -> u64 {
        self.ios + self.unsuccessful
    }

    /// Counts a completed I/O without timing it (`--no-latency`).
    #[inline(always)]
    pub fn complete_untimed(&mut self) {
        self.ios += 1;
    }

    /// Records a completed I/O's latency.
    #[inline(always)]
    pub fn complete(&mut self, submitted: Instant, now: Instant) {
        let ns = now.saturating_duration_since(submitted).as_nanos();
        self.complete_ns(u64::try_from(ns).unwrap_or(MAX_LATENCY_NS));
    }

    /// Records a completed I/O whose latency is `ns` nanoseconds.
    #[inline(always)]
    pub fn complete_ns(&mut self, ns: u64) {
        self.buckets.record(ns);
        self.ios += 1;
    }

    /// Folds the hot-path buckets into `hist` (each bucket at its midpoint, so percentiles
    /// keep the buckets' ~1.6 % resolution; min and max are bucket bounds). Call once when the
    /// worker is done.
    pub fn finish(&mut self) {
        for (index, &count) in self.buckets.counts.iter().enumerate() {
            if count > 0 {
                let (low, high) = LatencyBuckets::bounds(index);
                self.hist.saturating_record_n(low + (high - low) / 2, count);
            }
        }
        self.buckets.reset();
    }

    /// Records a failed I/O.
    #[cold]
    pub fn fail(&mut self, what: impl FnOnce() -> String) {
        self.errors += 1;
        if self.first_error.is_none() {
            let message = what();
            log::error!("{message}");
            self.first_error = Some(message);
        }
    }
}

impl Default for Tally {
    fn default() -> Self {
        Self::new()
    }
}

/// The driver's own counters for the measured phase (spdk-like engine).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DriverCounters {
    /// MMIO writes to SQ tail doorbells.
    pub sq_mmio_writes: u64,
    /// MMIO writes to CQ head doorbells.
    pub cq_mmio_writes: u64,
    /// SQ tail updates published (MMIO or shadow).
    pub sq_updates: u64,
    /// CQ head updates published (MMIO or shadow).
    pub cq_updates: u64,
    /// Poll calls that found nothing.
    pub idle_polls: u64,
    /// Completions the driver rejected.
    pub bad_completions: u64,
    /// Commands that timed out.
    pub timeouts: u64,
    /// Request-slot pool counters (whole run).
    pub tags: nvme_pool::TagStats,
    /// Context cache counters (whole run), when the cache is on.
    pub cache: Option<nvme_pool::CacheStats>,
}

/// What one worker hands back.
#[derive(Clone, Debug)]
pub struct WorkerResult {
    /// Measured-phase counters and latencies.
    pub tally: Tally,
    /// Wall time of the measured phase (until in-flight I/O drained).
    pub elapsed: Duration,
    /// CPU time the worker thread used in the measured phase.
    pub cpu: Duration,
    /// Driver counters (spdk-like engine only).
    pub driver: Option<DriverCounters>,
    /// What `--verify` found (whole run).
    pub verify: Option<crate::verify::VerifyStats>,
    /// With `--reset-interval`: resets and retries (whole run).
    pub recovery: Option<RecoveryStats>,
    /// NVMe/TCP queue counters (TCP transport only; whole run of the worker).
    pub tcp: Option<TcpCounters>,
}

/// What an NVMe/TCP queue pair did over a worker's run (from `TcpQueuePair::stats`), summed
/// over threads: how many PDUs and polls (each poll with I/O outstanding is one `recv`) an
/// I/O cost.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct TcpCounters {
    /// Command capsules sent.
    pub commands: u64,
    /// PDUs received.
    pub pdus_received: u64,
    /// Reads finished by a C2HData PDU with the SUCCESS flag (no CapsuleResp).
    pub success_shortcuts: u64,
    /// Calls to poll.
    pub polls: u64,
    /// Polls that delivered no completion.
    pub idle_polls: u64,
}

impl TcpCounters {
    /// Adds another thread's counts.
    pub fn merge(&mut self, o: &TcpCounters) {
        self.commands += o.commands;
        self.pdus_received += o.pdus_received;
        self.success_shortcuts += o.success_shortcuts;
        self.polls += o.polls;
        self.idle_polls += o.idle_polls;
    }
}

/// `--reset-interval`: what the resets cost (whole run, summed over threads).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct RecoveryStats {
    /// Controller resets the run made.
    pub resets: u64,
    /// I/Os that completed with a retryable error (the reset's `Reset`) and were resubmitted.
    pub retried_ios: u64,
    /// Submissions refused with a retryable error (`Resetting`) while a reset ran; the
    /// worker drew another I/O later (nothing reached the device).
    pub refused_submissions: u64,
    /// I/Os that timed out (--tolerate-timeouts): not acknowledged, not errors.
    pub timed_out_ios: u64,
    /// Aborts the driver sent for timed-out commands (controller-wide).
    pub aborts_sent: u64,
    /// Of those, commands the controller aborted.
    pub aborts_succeeded: u64,
    /// Of those, aborts declined or failed.
    pub aborts_declined: u64,
    /// Controller resets the driver's timeout policy started (abort did not help).
    pub timeout_resets: u64,
}

impl RecoveryStats {
    /// Adds another thread's counts.
    pub fn merge(&mut self, o: &RecoveryStats) {
        self.resets += o.resets;
        self.retried_ios += o.retried_ios;
        self.refused_submissions += o.refused_submissions;
        self.timed_out_ios += o.timed_out_ios;
        self.aborts_sent += o.aborts_sent;
        self.aborts_succeeded += o.aborts_succeeded;
        self.aborts_declined += o.aborts_declined;
        self.timeout_resets += o.timeout_resets;
    }
}

/// The CPU time this thread has used (CLOCK_THREAD_CPUTIME_ID).
pub fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant the kernel knows.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return Duration::ZERO;
    }
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// The CPUs this process may run on, in ascending order.
pub fn allowed_cpus() -> std::io::Result<Vec<usize>> {
    // SAFETY: an all-zero cpu_set_t is a valid (empty) set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is writable and its size is passed; pid 0 is the calling thread.
    let rc =
        unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let max = libc::CPU_SETSIZE as usize;
    // SAFETY: `set` was filled by the kernel; every index is below CPU_SETSIZE.
    Ok((0..max)
        .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) })
        .collect())
}

/// Pins the calling thread to `cpu`.
pub fn pin_current_thread(cpu: usize) -> std::io::Result<()> {
    // SAFETY: an all-zero cpu_set_t is a valid (empty) set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `cpu` comes from `allowed_cpus`, so it is below CPU_SETSIZE.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: `set` is a valid set and its size is passed; pid 0 is the calling thread.
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Follows the phase on behalf of a worker: detects the start of measuring and the stop, and
/// enforces `--ios`.
#[derive(Debug)]
pub struct Pacer<'a> {
    control: &'a Control,
    live: &'a Live,
    phase: Phase,
    /// `phase` as the control's atomic holds it: one load and compare per round.
    raw_phase: u8,
    /// Submissions allowed in this phase, as a bound on `Tally::submitted`: `u64::MAX` while
    /// warming up (or measuring without `--ios`), the `--ios` budget while measuring, 0 once
    /// stopping. `allowance` and `finished` are one comparison each with it.
    submit_cap: u64,
    measure_start: Instant,
    cpu_start: Duration,
    ios_limit: Option<u64>,
    /// Calls of [`Pacer::publish`] left until it stores again.
    publish_countdown: u32,
    /// With one worker on the main thread: the run's clock, run from [`Pacer::publish`].
    clock: Option<Box<Clock>>,
    /// `clock`'s cheap reads (the time-stamp counter where the kernel trusts it), in ns.
    ns_clock: TimeKeeper,
    /// When `clock` has something to do next, on `ns_clock`.
    clock_due_ns: u64,
    /// When [`Pacer::keep_time`] last read `ns_clock`, and the countdown it set then.
    clock_read_ns: u64,
    clock_every: u32,
    /// What the tally counted before its reset at the start of measuring: the published
    /// totals are this plus the tally (the workers keep no second set of counters).
    carried: LiveSample,
}

/// [`nvme_driver::NanoClock`] with a way to place an `Instant` on it.
#[derive(Clone, Copy, Debug)]
struct TimeKeeper {
    clock: nvme_driver::NanoClock,
}

impl TimeKeeper {
    #[inline(always)]
    fn now_ns(&self) -> u64 {
        self.clock.now_ns()
    }

    /// `at` on this clock (now, if `at` has passed).
    fn ns_at(&self, at: Instant) -> u64 {
        let ahead = at.saturating_duration_since(Instant::now());
        self.now_ns()
            .saturating_add(u64::try_from(ahead.as_nanos()).unwrap_or(u64::MAX))
    }
}

/// [`Pacer::publish`] stores the totals on every this many calls (the progress line reads them
/// once a second; four atomic stores per round were a tenth of a QD1 round's bookkeeping).
const PUBLISH_EVERY: u32 = 16;

/// How often (ns) a worker that keeps time itself reads the clock at most (on a device slow
/// enough that [`PUBLISH_EVERY`] calls take longer, it reads it on fewer calls).
const CLOCK_READ_EVERY_NS: u64 = 20_000_000;

/// [`Pacer::submit_cap`] of a phase.
fn submit_cap(phase: Phase, ios_limit: Option<u64>) -> u64 {
    match (phase, ios_limit) {
        (Phase::Stop, _) => 0,
        (Phase::Measure, Some(limit)) => limit,
        _ => u64::MAX,
    }
}

/// What changed since the last round.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Same phase as before.
    Same,
    /// Measuring starts now: reset the counters.
    BeginMeasure,
}

impl<'a> Pacer<'a> {
    /// A pacer in the control's current phase.
    pub fn new(control: &'a Control, live: &'a Live, ios_limit: Option<u64>) -> Self {
        let phase = control.phase();
        let clock = control.take_clock();
        // The counter's calibration (2 ms once per process) only where this worker keeps time.
        let ns_clock = TimeKeeper {
            clock: if clock.is_some() {
                nvme_driver::NanoClock::new()
            } else {
                nvme_driver::NanoClock::from_instant()
            },
        };
        let clock_due_ns = clock.as_ref().map_or(0, |c| ns_clock.ns_at(c.due()));
        Self {
            control,
            live,
            phase,
            raw_phase: phase as u8,
            submit_cap: submit_cap(phase, ios_limit),
            measure_start: Instant::now(),
            cpu_start: thread_cpu_time(),
            ios_limit,
            publish_countdown: PUBLISH_EVERY,
            clock,
            clock_due_ns,
            clock_read_ns: ns_clock.now_ns(),
            ns_clock,
            clock_every: PUBLISH_EVERY,
            carried: LiveSample::default(),
        }
    }

    /// Whether the run measures from the start (no warmup).
    pub fn measuring(&self) -> bool {
        self.phase == Phase::Measure
    }

    /// Checks the phase (once per round). The first failed I/O stops the whole run, as in fio.
    #[inline(always)]
    pub fn step(&mut self, tally: &mut Tally) -> Step {
        if tally.errors > 0 {
            self.control.advance(Phase::Stop);
        }
        if self.control.phase.load(Ordering::Relaxed) == self.raw_phase {
            return Step::Same;
        }
        self.transition(tally)
    }

    #[cold]
    fn transition(&mut self, tally: &mut Tally) -> Step {
        let now = self.control.phase();
        let was = self.phase;
        self.phase = now;
        self.raw_phase = now as u8;
        self.submit_cap = submit_cap(now, self.ios_limit);
        // Warmup straight to Stop (a failure) keeps what was recorded, errors included.
        if was == Phase::Warmup && now == Phase::Measure {
            self.carried = self.carried.plus(&tally.sample());
            tally.reset();
            self.measure_start = Instant::now();
            self.cpu_start = thread_cpu_time();
            return Step::BeginMeasure;
        }
        Step::Same
    }

    /// How many more I/Os may be submitted now, at most `want`: 0 once stopping, or when the
    /// `--ios` budget of the measured phase is used up.
    #[inline(always)]
    pub fn allowance(&self, want: u32, tally: &Tally) -> u32 {
        let left = self.submit_cap.saturating_sub(tally.submitted);
        if left >= u64::from(want) {
            want
        } else {
            left as u32
        }
    }

    /// Whether the worker is done: stopping (or its `--ios` budget submitted) and nothing in
    /// flight.
    #[inline(always)]
    pub fn finished(&self, in_flight: u32, tally: &Tally) -> bool {
        in_flight == 0 && tally.submitted >= self.submit_cap
    }

    /// Publishes the running totals (the tally's, warmup included) for the progress line, on
    /// every [`PUBLISH_EVERY`]th call (the line lags by at most that many rounds);
    /// [`Pacer::publish_final`] after the loop. A worker that keeps time itself (one worker,
    /// on the main thread) reads the clock on those calls too, and changes the phase or
    /// prints the progress line when due.
    #[inline(always)]
    pub fn publish(&mut self, tally: &Tally) {
        self.publish_countdown -= 1;
        if self.publish_countdown == 0 {
            self.publish_countdown = PUBLISH_EVERY;
            self.publish_final(tally);
            if self.clock.is_some() {
                self.keep_time();
            }
        }
    }

    /// The clock's part of [`Pacer::publish`]: one clock read, and the clock's tick when due
    /// (the phase change is seen by the next [`Pacer::step`]).
    /// On a slow device (rounds far apart) it reads the clock on fewer calls than every
    /// [`PUBLISH_EVERY`]th, so that the clock is read about every [`CLOCK_READ_EVERY_NS`].
    #[cold]
    #[inline(never)]
    fn keep_time(&mut self) {
        let now = self.ns_clock.now_ns();
        let since = now.saturating_sub(self.clock_read_ns);
        self.clock_read_ns = now;
        self.clock_every = if since > CLOCK_READ_EVERY_NS {
            let scaled = u64::from(self.clock_every) * CLOCK_READ_EVERY_NS / since;
            (scaled as u32).clamp(1, PUBLISH_EVERY)
        } else {
            PUBLISH_EVERY
        };
        self.publish_countdown = self.clock_every;
        if now < self.clock_due_ns {
            return;
        }
        if let Some(clock) = &mut self.clock {
            match clock.tick(self.control, std::slice::from_ref(self.live), &[]) {
                Some(due) => self.clock_due_ns = self.ns_clock.ns_at(due),
                None => self.clock = None,
            }
        }
    }

    /// Publishes the running totals now (once the worker's loop is done).
    #[inline(always)]
    pub fn publish_final(&self, tally: &Tally) {
        let totals = self.carried.plus(&tally.sample());
        self.live.ios.store(totals.ios, Ordering::Relaxed);
        self.live
            .submitted
            .store(totals.submitted, Ordering::Relaxed);
        self.live
            .submit_calls
            .store(totals.submit_calls, Ordering::Relaxed);
        self.live
            .reap_calls
            .store(totals.reap_calls, Ordering::Relaxed);
    }

    /// Measured wall time and CPU time so far.
    pub fn measured(&self) -> (Duration, Duration) {
        (
            self.measure_start.elapsed(),
            thread_cpu_time().saturating_sub(self.cpu_start),
        )
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn latency_buckets_are_contiguous_and_precise() {
        let mut last = 0;
        for ns in (0..5000u64).chain((1..60).map(|k| k * 1_000_000_007 % MAX_LATENCY_NS)) {
            let i = LatencyBuckets::index(ns);
            let (low, high) = LatencyBuckets::bounds(i);
            assert!(
                low <= ns && ns <= high,
                "{ns} not in bucket {i} = {low}..={high}"
            );
            assert!(
                (high - low) as f64 <= ns as f64 / 60.0 + 1.0,
                "{ns}: {low}..={high}"
            );
            if ns < 5000 {
                assert!(i >= last, "bucket index decreased at {ns}");
                assert!(i <= last + 1, "bucket index skipped at {ns}");
                last = i;
            }
        }
        assert_eq!(LatencyBuckets::index(u64::MAX), BUCKETS - 1);
        assert_eq!(LatencyBuckets::bounds(BUCKETS - 1).1, u64::MAX);
        for ns in [u64::MAX / 3, u64::MAX - 1, u64::MAX] {
            let (low, high) = LatencyBuckets::bounds(LatencyBuckets::index(ns));
            assert!(low <= ns && ns <= high, "{ns} not in {low}..={high}");
        }
    }

    #[test]
    fn a_latency_beyond_the_histogram_saturates() {
        let mut t = Tally::new();
        t.complete_ns(u64::MAX);
        t.complete_ns(1_000);
        t.finish();
        assert_eq!(t.hist.len(), 2);
        assert!(t.hist.max() >= MAX_LATENCY_NS / 2, "{}", t.hist.max());
    }

    #[test]
    fn finish_moves_buckets_into_the_histogram() {
        let mut t = Tally::new();
        for ns in [100, 10_000, 10_050, 1_000_000] {
            t.complete_ns(ns);
        }
        t.finish();
        assert_eq!(t.hist.len(), 4);
        let p50 = t.hist.value_at_quantile(0.5) as f64;
        assert!((p50 - 10_000.0).abs() / 10_000.0 < 0.02, "{p50}");
        assert!((t.hist.max() as f64 - 1_000_000.0).abs() / 1_000_000.0 < 0.02);
    }

    use super::*;

    #[test]
    fn pacer_publishes_every_few_rounds_and_at_the_end() {
        let control = Control::new(Phase::Measure);
        let live = Live::default();
        let mut pacer = Pacer::new(&control, &live, None);
        let mut tally = Tally::new();
        for round in 1..PUBLISH_EVERY {
            tally.ios = u64::from(round);
            pacer.publish(&tally);
            assert_eq!(live.sample().ios, 0, "published early, at round {round}");
        }
        tally.ios = u64::from(PUBLISH_EVERY);
        tally.submitted = 20;
        pacer.publish(&tally);
        assert_eq!(live.sample().ios, u64::from(PUBLISH_EVERY));
        assert_eq!(live.sample().submitted, 20);
        tally.unsuccessful += 3;
        pacer.publish(&tally);
        assert_eq!(live.sample().ios, u64::from(PUBLISH_EVERY));
        pacer.publish_final(&tally);
        assert_eq!(live.sample().ios, u64::from(PUBLISH_EVERY) + 3);
    }

    #[test]
    fn pacer_follows_phases_and_the_io_budget() {
        let control = Control::new(Phase::Warmup);
        let live = Live::default();
        let mut tally = Tally::new();
        let mut pacer = Pacer::new(&control, &live, Some(10));
        assert!(!pacer.measuring());
        tally.submitted = 100;
        tally.complete(Instant::now(), Instant::now());
        assert_eq!(pacer.allowance(32, &tally), 32, "no budget during warmup");
        assert_eq!(pacer.step(&mut tally), Step::Same);
        control.advance(Phase::Measure);
        assert_eq!(pacer.step(&mut tally), Step::BeginMeasure);
        assert_eq!((tally.ios, tally.submitted, tally.hist.len()), (0, 0, 0));
        // The progress totals keep what warmup counted.
        pacer.publish_final(&tally);
        assert_eq!((live.sample().ios, live.sample().submitted), (1, 100));
        tally.submitted = 8;
        assert_eq!(pacer.allowance(32, &tally), 2);
        assert!(!pacer.finished(0, &tally));
        tally.submitted = 10;
        assert!(!pacer.finished(1, &tally));
        assert!(pacer.finished(0, &tally));
        control.advance(Phase::Stop);
        control.advance(Phase::Measure);
        assert_eq!(control.phase(), Phase::Stop, "phases never go back");
        pacer.step(&mut tally);
        assert_eq!(pacer.allowance(32, &tally), 0);
    }

    #[test]
    fn thread_cpu_time_advances() {
        let a = thread_cpu_time();
        let mut x = 0u64;
        for i in 0..2_000_000u64 {
            x = std::hint::black_box(x.wrapping_add(i));
        }
        assert!(thread_cpu_time() > a, "{x}");
        assert!(!allowed_cpus().unwrap().is_empty());
    }
}
