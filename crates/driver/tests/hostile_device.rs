//! Issue 10, "Fuzzing": the driver's queue pair against a hostile device. A seeded property
//! test drives random sequences of (fault, I/O batch) steps against the in-process emulator,
//! whose fault switches make it post corrupt command ids, duplicate completions, wrong SQ ids,
//! no completion at all, error statuses of every status code type, late completions, late
//! (out of order) execution, bogus SQ heads and a fatal status. Whatever the device does:
//!
//! - nothing panics and nothing hangs (every step has a deadline, and a watchdog aborts the
//!   process if the driver itself never returns);
//! - every submitted request produces exactly one completion or one submission error;
//! - after a final drain no tag leaks: `in_flight() == retired()` (the only slots still held
//!   are those of requests already reported as lost, whose commands the device never returned);
//! - data of every write that completed successfully reads back (through the driver and on
//!   the medium), and blocks no write touched read back as zeros; each write uses LBAs no
//!   other write uses, so the model is a map from block to the write that owns it;
//! - every error status a request reports is one the test injected.
//!
//! `PROPTEST_CASES` sets the number of cases (default [`DEFAULT_CASES`], about 10 s in a
//! debug build); `HOSTILE_DEVICE_SEED` picks another seed. A long run:
//! `PROPTEST_CASES=2000 cargo test -p nvme-driver --release --test hostile_device`.

use nvme_driver::IoQueue;
use nvme_driver::WriteFlags;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use nvme_driver::spec::Status;
use nvme_driver::{
    Completion, Controller, ControllerOptions, Error, QueuePair, QueuePairOptions, Transport,
};
use nvme_sim::{ExecutionDelay, SimConfig, SimController, SimNamespace};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

/// Cases per run unless `PROPTEST_CASES` says otherwise.
const DEFAULT_CASES: u32 = 32;
/// Seed of the default run (`HOSTILE_DEVICE_SEED` overrides it).
const DEFAULT_SEED: u64 = 0x4e56_4d65_4675_7a7a;
const NSID: u32 = 1;
const BLOCK: usize = 512;
/// A small namespace: every write gets fresh LBAs, so a case never runs out.
const NS_BLOCKS: u64 = 4096;
const MAX_STEPS: usize = 10;
const MAX_BATCH: usize = 4;
/// Largest I/O: 24 blocks = 12 KiB, three pages, so PRP lists are exercised. Requests stay
/// below the controller's MDTS (128 KiB) so none is split (a split request holds several tags
/// but counts once in `retired()`).
const MAX_IO_BLOCKS: u32 = 24;
const IO_TIMEOUT: Duration = Duration::from_millis(60);
const ADMIN_TIMEOUT: Duration = Duration::from_millis(300);
/// Longest late execution a fault asks for.
const MAX_EXECUTION_DELAY_MS: u64 = 250;
/// A step whose requests are not all finished by then is a hang.
const STEP_DEADLINE: Duration = Duration::from_secs(5);
/// ... unless the pair was polled fewer times than this since (see `wait_all`): 32 reads of
/// the timeout clock, enough for 4 epochs, an abort and a late completion several times over.
const HANG_IDLE_POLLS: u64 = 32 * 256;
/// The final drain waits at most this long for `in_flight() == retired()`.
const DRAIN_DEADLINE: Duration = Duration::from_secs(5);
/// No progress for this long: the driver is stuck inside a call; abort the process.
const WATCHDOG: Duration = Duration::from_secs(60);

// ----- the generated input ------------------------------------------------------------------

#[derive(Clone, Debug)]
enum Fault {
    None,
    CorruptCid(u32),
    Duplicate,
    WrongSqid,
    DropCompletions(u32),
    FailIo(Status, u32),
    /// Every completion of the step is posted this late (0 .. a few timeouts).
    DelayCompletions(Duration),
    DelayExecution {
        n: u32,
        delay: Duration,
        complete: bool,
        abortable: bool,
    },
    BogusSqHead(u32),
    Fatal,
}

#[derive(Clone, Debug)]
enum Op {
    /// Writes `blocks` blocks at the next fresh LBAs.
    Write { blocks: u32 },
    /// Reads the range of an earlier write (`pick` modulo the writes so far), or a random
    /// range when there is none yet or `pick` is `None`.
    Read {
        pick: Option<usize>,
        lba: u64,
        blocks: u32,
    },
}

#[derive(Clone, Debug)]
struct Step {
    fault: Fault,
    ops: Vec<Op>,
    /// Run the ops one by one through the synchronous API instead of submit + poll.
    sync: bool,
    /// Wait for every request submitted so far before the next step; otherwise they stay
    /// in flight while the next step arms its fault and submits (or waits synchronously).
    wait: bool,
}

/// An error status of any status code type (generic, command specific, media and data
/// integrity, path, reserved, vendor specific), with random DNR/More/CRD bits. Successful
/// Completion is left out: a device that reports success for a command it did not run is
/// undetectable by any driver.
fn error_status() -> impl Strategy<Value = Status> {
    (0u8..8, any::<u8>(), any::<bool>(), any::<bool>(), 0u8..4)
        .prop_filter("an error status", |&(sct, sc, ..)| sct != 0 || sc != 0)
        .prop_map(|(sct, sc, dnr, more, crd)| {
            Status::new(sct, sc, dnr).with_more(more).with_crd(crd)
        })
}

fn fault() -> impl Strategy<Value = Fault> {
    prop_oneof![
        4 => Just(Fault::None),
        2 => (1u32..=3).prop_map(Fault::CorruptCid),
        2 => Just(Fault::Duplicate),
        2 => Just(Fault::WrongSqid),
        2 => (1u32..=2).prop_map(Fault::DropCompletions),
        4 => (error_status(), 1u32..=3).prop_map(|(s, n)| Fault::FailIo(s, n)),
        2 => (0u64..=150).prop_map(|ms| Fault::DelayCompletions(Duration::from_millis(ms))),
        3 => (1u32..=2, 1u64..=MAX_EXECUTION_DELAY_MS, any::<bool>(), any::<bool>()).prop_map(
            |(n, ms, complete, abortable)| Fault::DelayExecution {
                n,
                delay: Duration::from_millis(ms),
                complete,
                abortable,
            }
        ),
        2 => (1u32..=3).prop_map(Fault::BogusSqHead),
        1 => Just(Fault::Fatal),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (1..=MAX_IO_BLOCKS).prop_map(|blocks| Op::Write { blocks }),
        2 => (prop::option::weighted(0.8, any::<usize>()), 0..NS_BLOCKS, 1..=MAX_IO_BLOCKS)
            .prop_map(|(pick, lba, blocks)| Op::Read { pick, lba, blocks }),
    ]
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    let step = (
        fault(),
        prop::collection::vec(op(), 1..=MAX_BATCH),
        prop::bool::weighted(0.25),
        prop::bool::weighted(0.6),
    )
        .prop_map(|(fault, ops, sync, wait)| Step {
            fault,
            ops,
            sync,
            wait,
        });
    prop::collection::vec(step, 1..=MAX_STEPS)
}

// ----- the model ----------------------------------------------------------------------------

/// What a block of the namespace must hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Block {
    /// No write was ever submitted for it: zeros.
    Zero,
    /// The write with this id is in flight, failed, or was lost: anything.
    Unknown,
    /// The write with this id completed successfully: its pattern.
    Written(u64),
}

/// The content write `id` puts in block `lba`: distinct per write and per block.
fn block_pattern(id: u64, lba: u64) -> Vec<u8> {
    let mut x = (id << 32 ^ lba).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..BLOCK)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn write_pattern(id: u64, lba: u64, blocks: u32) -> Vec<u8> {
    (0..u64::from(blocks))
        .flat_map(|i| block_pattern(id, lba + i))
        .collect()
}

#[derive(Clone, Debug)]
enum Kind {
    Write {
        id: u64,
    },
    /// The model state of each block when the read was submitted.
    Read {
        before: Vec<Block>,
    },
}

#[derive(Clone, Debug)]
struct Request {
    kind: Kind,
    lba: u64,
    blocks: u32,
}

struct Model {
    blocks: Vec<Block>,
    /// Next fresh LBA for a write.
    cursor: u64,
    /// (lba, blocks) of every write submitted.
    writes: Vec<(u64, u32)>,
    next_id: u64,
    /// Requests submitted and not finished, by user data.
    pending: HashMap<u64, Request>,
    /// Requests finished (completion or submission error), by user data.
    finished: HashSet<u64>,
    /// Statuses armed with `fail_next_io`: the only error statuses the device reports.
    injected: HashSet<Status>,
    /// Counters for the report.
    stats: Counts,
}

#[derive(Default, Debug, Clone, Copy)]
struct Counts {
    submitted: u64,
    ok: u64,
    errors: u64,
    submission_errors: u64,
    queue_full: u64,
    reads_checked: u64,
    /// Queue pair counters: the faults really reached the driver.
    timeouts: u64,
    late_completions: u64,
    bad_completions: u64,
    bad_sq_heads: u64,
    failed_controllers: u64,
}

impl Counts {
    fn add(&mut self, o: &Counts) {
        self.submitted += o.submitted;
        self.ok += o.ok;
        self.errors += o.errors;
        self.submission_errors += o.submission_errors;
        self.queue_full += o.queue_full;
        self.reads_checked += o.reads_checked;
        self.timeouts += o.timeouts;
        self.late_completions += o.late_completions;
        self.bad_completions += o.bad_completions;
        self.bad_sq_heads += o.bad_sq_heads;
        self.failed_controllers += o.failed_controllers;
    }
}

impl Model {
    fn new() -> Self {
        Self {
            blocks: vec![Block::Zero; NS_BLOCKS as usize],
            cursor: 0,
            writes: Vec::new(),
            next_id: 1,
            pending: HashMap::new(),
            finished: HashSet::new(),
            injected: HashSet::new(),
            stats: Counts::default(),
        }
    }

    fn range(&self, lba: u64, blocks: u32) -> std::ops::Range<usize> {
        lba as usize..(lba + u64::from(blocks)) as usize
    }

    /// A request for `op`, registered as pending under a new id; `None` when the namespace
    /// has no fresh LBAs left for a write.
    fn start(&mut self, op: &Op) -> Option<(u64, Request)> {
        let request = match *op {
            Op::Write { blocks } => {
                let lba = self.cursor;
                if lba + u64::from(blocks) > NS_BLOCKS {
                    return None;
                }
                self.cursor += u64::from(blocks);
                self.writes.push((lba, blocks));
                let id = self.next_id;
                let r = self.range(lba, blocks);
                self.blocks[r].fill(Block::Unknown);
                Request {
                    kind: Kind::Write { id },
                    lba,
                    blocks,
                }
            }
            Op::Read { pick, lba, blocks } => {
                let (lba, blocks) = match pick {
                    Some(i) if !self.writes.is_empty() => self.writes[i % self.writes.len()],
                    _ => (lba.min(NS_BLOCKS - u64::from(blocks)), blocks),
                };
                Request {
                    kind: Kind::Read {
                        before: self.blocks[self.range(lba, blocks)].to_vec(),
                    },
                    lba,
                    blocks,
                }
            }
        };
        let id = self.next_id;
        self.next_id += 1;
        self.stats.submitted += 1;
        self.pending.insert(id, request.clone());
        Some((id, request))
    }

    /// A request refused at submission. `in_flight` is the pair's count at that time.
    fn submission_error(&mut self, id: u64, error: &Error, in_flight: u16) {
        self.pending.remove(&id).expect("a pending request");
        assert!(self.finished.insert(id), "request {id} finished twice");
        self.stats.submission_errors += 1;
        // A well-formed request is refused only by a failed controller, or by a queue whose
        // slots (or SQ entries) are held by requests in flight, e.g. lost ones still retired.
        match error {
            Error::Failed { .. } => {}
            Error::QueueFull { .. } => {
                self.stats.queue_full += 1;
                assert!(
                    in_flight > 0,
                    "request {id}: queue full with nothing in flight"
                );
            }
            _ => panic!("request {id}: unexpected submission error {error}"),
        }
    }

    /// Checks one finished request against the model and updates it.
    fn finish(&mut self, id: u64, result: Result<(), Error>, data: Option<&[u8]>) {
        let request = self
            .pending
            .remove(&id)
            .unwrap_or_else(|| panic!("completion for request {id}, which is not pending"));
        assert!(self.finished.insert(id), "request {id} completed twice");
        let range = self.range(request.lba, request.blocks);
        match &result {
            Ok(()) => self.stats.ok += 1,
            Err(e) => {
                self.stats.errors += 1;
                if let Some(status) = e.status() {
                    assert!(
                        self.injected.contains(&status),
                        "request {id} failed with {status}, which the device was never told \
                         to report"
                    );
                }
            }
        }
        match (&request.kind, result) {
            (Kind::Write { id }, Ok(())) => self.blocks[range].fill(Block::Written(*id)),
            (Kind::Write { .. }, Err(_)) => {} // stays Unknown: it may have run, or run late
            (Kind::Read { before }, Ok(())) => {
                let data = data.expect("a successful read returns its buffer");
                self.stats.reads_checked += 1;
                for (i, (was, now)) in before.iter().zip(&self.blocks[range]).enumerate() {
                    let lba = request.lba + i as u64;
                    let got = &data[i * BLOCK..(i + 1) * BLOCK];
                    match (was, now) {
                        (Block::Written(w), _) => assert!(
                            got == block_pattern(*w, lba),
                            "read {id}: block {lba} does not hold acknowledged write {w}"
                        ),
                        (Block::Zero, Block::Zero) => assert!(
                            got.iter().all(|&b| b == 0),
                            "read {id}: never-written block {lba} is not zero"
                        ),
                        _ => {}
                    }
                }
            }
            (Kind::Read { .. }, Err(_)) => {}
        }
    }
}

// ----- running a case -----------------------------------------------------------------------

/// Milliseconds since the start of the test of the last sign of progress (for the watchdog).
fn heartbeat() -> &'static AtomicU64 {
    static BEAT: OnceLock<AtomicU64> = OnceLock::new();
    BEAT.get_or_init(|| AtomicU64::new(0))
}

fn epoch() -> Instant {
    static START: OnceLock<Instant> = OnceLock::new();
    *START.get_or_init(Instant::now)
}

fn beat() {
    heartbeat().store(epoch().elapsed().as_millis() as u64, Ordering::Relaxed);
}

/// Aborts the process when no step makes progress for [`WATCHDOG`]: a driver call that never
/// returns is a hang, and a hung test would otherwise only be stopped by CI's time limit.
fn start_watchdog() {
    static STARTED: OnceLock<()> = OnceLock::new();
    STARTED.get_or_init(|| {
        beat();
        std::thread::spawn(|| loop {
            std::thread::sleep(Duration::from_secs(1));
            let last = Duration::from_millis(heartbeat().load(Ordering::Relaxed));
            if epoch().elapsed().saturating_sub(last) > WATCHDOG {
                eprintln!("hostile_device: no progress for {WATCHDOG:?}: the driver hangs");
                std::process::abort();
            }
        });
    });
}

fn arm(sim: &SimController, fault: &Fault, model: &mut Model) {
    let f = sim.faults();
    match *fault {
        Fault::None => {}
        Fault::CorruptCid(n) => f.corrupt_next_cid(n),
        Fault::Duplicate => f.duplicate_next_completion(),
        Fault::WrongSqid => f.wrong_sqid_next(),
        Fault::DropCompletions(n) => f.drop_next_completions(n),
        Fault::FailIo(status, n) => {
            model.injected.insert(status);
            f.fail_next_io(status, n);
        }
        Fault::DelayCompletions(d) => f.delay_completions(d),
        Fault::DelayExecution {
            n,
            delay,
            complete,
            abortable,
        } => {
            let mut how = ExecutionDelay::new(delay);
            if !complete {
                how = how.without_completion();
            }
            if !abortable {
                how = how.not_abortable();
            }
            f.delay_execution_with(n, how);
        }
        Fault::BogusSqHead(n) => f.bogus_sq_head(n),
        Fault::Fatal => f.set_fatal(),
    }
}

fn handle(model: &mut Model, c: Completion) {
    match &c.result {
        Ok(_) => assert!(
            c.buffer.is_some(),
            "request {}: success without its buffer",
            c.user_data
        ),
        // A status error: the device is done with the buffer, so it comes back. A lost
        // request (timeout, fatal status): the device may still use it, so it must not.
        Err(e) if e.status().is_some() => assert!(
            c.buffer.is_some(),
            "request {}: {e} without its buffer",
            c.user_data
        ),
        Err(e) => assert!(
            c.buffer.is_none(),
            "request {}: {e} returned a buffer the device may still use",
            c.user_data
        ),
    }
    model.finish(
        c.user_data,
        c.result.map(drop),
        c.buffer.as_ref().map(|b| &b[..]),
    );
}

/// Polls until every request in `submitted` has finished; a request still pending after
/// [`STEP_DEADLINE`] is a hang.
fn wait_all(q: &mut QueuePair, model: &mut Model, submitted: &mut Vec<u64>) {
    let start = Instant::now();
    let idle_at_start = q.stats().idle_polls;
    loop {
        submitted.retain(|id| model.pending.contains_key(id));
        if submitted.is_empty() {
            return;
        }
        // A hang: past the deadline, and the driver was given the chance to run its timeout
        // clock enough times. (It reads the clock every 256 idle polls, so a slowly polled
        // pair, e.g. on a loaded machine, times out later than `IO_TIMEOUT` by up to
        // 4 x 256 poll intervals: slowness, not a hang.)
        let idle_polls = q.stats().idle_polls - idle_at_start;
        assert!(
            start.elapsed() < STEP_DEADLINE || idle_polls < HANG_IDLE_POLLS,
            "requests {submitted:?} still pending after {:?} and {idle_polls} idle polls \
             (in flight {}, retired {}, stats {:?})",
            start.elapsed(),
            q.in_flight(),
            q.retired(),
            q.stats()
        );
        q.poll(|c| handle(model, c));
        std::thread::yield_now();
    }
}

fn run_case(steps: &[Step]) -> Counts {
    let sim = SimController::start(SimConfig {
        namespaces: vec![SimNamespace {
            nsid: NSID,
            block_size: BLOCK as u32,
            blocks: NS_BLOCKS,
            ..SimNamespace::default()
        }],
        io_queue_pairs: 1,
        ..SimConfig::default()
    });
    let transport = Transport::new(sim.mmio(), sim.dma(), "hostile")
        .with_function_control(sim.function_control());
    let ctrl = Controller::new(
        transport,
        ControllerOptions {
            admin_timeout: ADMIN_TIMEOUT,
            // Completion handling under faults, not recovery: timeouts abort but do not
            // escalate to controller resets (tests/recovery.rs covers those).
            timeout_action: nvme_driver::TimeoutAction::Abort,
            ..ControllerOptions::default()
        },
    )
    .expect("bring-up");
    let ns = ctrl.namespace(NSID).expect("namespace 1");
    let mut q: QueuePair = ctrl
        .create_queue_pair(QueuePairOptions {
            depth: 16,
            timeout: IO_TIMEOUT,
            ..QueuePairOptions::default()
        })
        .expect("queue pair");
    let mut model = Model::new();
    // Asynchronous requests submitted and not yet seen finished.
    let mut submitted = Vec::new();

    for step in steps {
        beat();
        arm(&sim, &step.fault, &mut model);
        for op in &step.ops {
            let Some((id, request)) = model.start(op) else {
                continue;
            };
            let len = request.blocks as usize * BLOCK;
            let mut buf = ctrl.alloc_buffer(len).expect("DMA buffer");
            match request.kind {
                Kind::Write { id: w } => {
                    buf.copy_from_slice(&write_pattern(w, request.lba, request.blocks))
                }
                Kind::Read { .. } => buf.fill(0xEE),
            }
            let is_write = matches!(request.kind, Kind::Write { .. });
            if step.sync {
                let r = if is_write {
                    q.write(&ns, request.lba, request.blocks, buf, WriteFlags::NONE)
                } else {
                    q.read(&ns, request.lba, request.blocks, buf)
                };
                match r {
                    Ok(buf) => model.finish(id, Ok(()), Some(&buf[..])),
                    Err(f) if matches!(f.error, Error::Failed { .. } | Error::QueueFull { .. }) => {
                        assert!(f.buffer.is_some(), "a refused request returns the buffer");
                        model.submission_error(id, &f.error, q.in_flight())
                    }
                    Err(f) => {
                        assert_eq!(
                            f.buffer.is_some(),
                            f.error.status().is_some(),
                            "request {id}: {} and buffer {}",
                            f.error,
                            if f.buffer.is_some() {
                                "returned"
                            } else {
                                "kept"
                            }
                        );
                        model.finish(id, Err(f.error), None)
                    }
                }
                // Completions of earlier async requests the synchronous call came across.
                q.poll(|c| handle(&mut model, c));
            } else {
                let r = if is_write {
                    q.submit_write(&ns, request.lba, request.blocks, buf, WriteFlags::NONE, id)
                } else {
                    q.submit_read(&ns, request.lba, request.blocks, buf, id)
                };
                match r {
                    Ok(()) => submitted.push(id),
                    Err(f) => {
                        assert!(
                            f.buffer.is_some(),
                            "a refused submission returns the buffer"
                        );
                        model.submission_error(id, &f.error, q.in_flight());
                    }
                }
            }
        }
        if step.wait {
            wait_all(&mut q, &mut model, &mut submitted);
        }
        sim.faults().delay_completions(Duration::ZERO);
    }
    wait_all(&mut q, &mut model, &mut submitted);

    // Every request finished exactly once.
    assert!(
        model.pending.is_empty(),
        "unfinished: {:?}",
        model.pending.keys()
    );
    assert_eq!(model.finished.len() as u64, model.stats.submitted);

    // Drain: late completions release retired slots; whatever never comes back stays retired.
    beat();
    let start = Instant::now();
    let idle_at_start = q.stats().idle_polls;
    while usize::from(q.in_flight()) != q.retired()
        && (start.elapsed() < DRAIN_DEADLINE
            || q.stats().idle_polls - idle_at_start < HANG_IDLE_POLLS)
    {
        q.poll(|c| {
            panic!(
                "completion for request {} after every request finished",
                c.user_data
            )
        });
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(
        usize::from(q.in_flight()),
        q.retired(),
        "leaked tags: {} in flight, {} retired (stats {:?})",
        q.in_flight(),
        q.retired(),
        q.stats()
    );

    // The medium holds every acknowledged write; blocks no write touched are still zero.
    let disk = sim.read_disk(NSID, 0, NS_BLOCKS as usize * BLOCK);
    for (lba, state) in model.blocks.iter().enumerate() {
        let got = &disk[lba * BLOCK..(lba + 1) * BLOCK];
        match *state {
            Block::Written(w) => assert!(
                got == block_pattern(w, lba as u64),
                "medium: block {lba} does not hold acknowledged write {w}"
            ),
            Block::Zero => assert!(got.iter().all(|&b| b == 0), "medium: block {lba} not zero"),
            Block::Unknown => {}
        }
    }
    let mut counts = model.stats;
    let qs = q.stats();
    counts.timeouts = qs.timeouts;
    counts.late_completions = qs.late_completions;
    counts.bad_completions = qs.bad_completions;
    counts.bad_sq_heads = qs.bad_sq_heads;
    counts.failed_controllers = u64::from(ctrl.is_failed());
    drop(q);
    drop(ctrl);
    counts
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_CASES)
}

fn seed() -> u64 {
    std::env::var("HOSTILE_DEVICE_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_SEED)
}

#[test]
fn queue_pair_survives_a_hostile_device() {
    let _ = env_logger::builder().is_test(true).try_init();
    start_watchdog();
    let seed = seed();
    let mut seed_bytes = [0u8; 32];
    for (i, chunk) in seed_bytes.chunks_mut(8).enumerate() {
        chunk.copy_from_slice(&(seed ^ i as u64).to_le_bytes());
    }
    let config = Config {
        cases: cases(),
        failure_persistence: None,
        // Each case takes a fraction of a second; keep shrinking bounded.
        max_shrink_time: 120_000,
        ..Config::default()
    };
    let mut runner = TestRunner::new_with_rng(
        config,
        TestRng::from_seed(RngAlgorithm::ChaCha, &seed_bytes),
    );
    let totals = Arc::new(std::sync::Mutex::new((0u64, Counts::default())));
    let t = totals.clone();
    let result = runner.run(&steps(), move |steps| {
        let c = run_case(&steps);
        let mut t = t.lock().unwrap();
        t.0 += 1;
        t.1.add(&c);
        if t.0 % 100 == 0 {
            // Progress of a long run (shown with --nocapture).
            eprintln!(
                "hostile_device: {} cases, {} requests so far",
                t.0, t.1.submitted
            );
        }
        Ok(())
    });
    let (runs, c) = *totals.lock().unwrap();
    eprintln!(
        "hostile_device: seed {seed}, {runs} cases, {} requests: {} ok, {} failed, {} refused \
         ({} queue full), {} successful reads checked; driver saw {} timeouts, {} late \
         completions, {} rejected completions, {} bad SQ heads; {} controllers failed",
        c.submitted,
        c.ok,
        c.errors,
        c.submission_errors,
        c.queue_full,
        c.reads_checked,
        c.timeouts,
        c.late_completions,
        c.bad_completions,
        c.bad_sq_heads,
        c.failed_controllers
    );
    if let Err(e) = result {
        panic!("seed {seed}: {e}");
    }
}
