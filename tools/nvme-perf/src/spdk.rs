//! The spdk-like engine: our driver, one queue pair per thread, callback completions.
//!
//! Hot loop per round: check the phase; `poll_deferred()` reaps up to `--complete-batch`
//! completions without writing the CQ head doorbell (a round with every I/O in flight polls
//! again until something comes back, with only the idle step between polls); `plug(n)`
//! (reserves the batch's request slots at once, or `plug(0)` with `--no-batch-prefetch`: no
//! reservation, doorbell still deferred; a batch of one single-command I/O is submitted
//! unplugged, since its submission writes the same two doorbells); submit up to
//! `--submit-batch` I/Os, each with its context in its slot's preallocated place (or, with
//! `--contexts cache|box`, a `Box` from the `ObjectCache` or from `Box::new`: [`contexts`]);
//! `unplug()` writes the CQ head and the SQ tail doorbells back
//! to back, as SPDK's and libvfn's perf tools do from their completion callbacks. One clock
//! read per round (the first completion's; the submissions of the round are stamped with
//! it), and the progress counters are published only in rounds that changed them (and then
//! on every 16th such round, `Pacer::publish`).
//!
//! INVARIANT: `free` holds exactly the context/buffer indices with no I/O in flight, and for
//! each such index `buffers[i]` is `Some` (or the buffer was lost to a timed-out command and
//! the index is retired for the rest of the run); the context store holds a context for `i`
//! exactly while I/O `i` is in flight. Nothing on this path allocates (with `--contexts
//! cache`: once the cache is warm; `--contexts box` allocates per I/O by design).

use nvme_driver::command::{Read, Write};
use nvme_driver::IoQueue;
use nvme_driver::NanoClock;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::args::{Config, ContextMode};
use crate::control::{
    Control, DriverCounters, Live, Pacer, RecoveryStats, Step, Tally, WorkerResult,
};
use crate::emulator::{self, SimController};
use crate::error::PerfError;
use crate::rng::LbaGen;
use crate::runner::{self, Geometry, Setup};
use crate::target::Target;
use crate::verify::{self, Check, FaultPlan, NoCheck, Verifier};
use nvme_driver::{
    Completion, Controller, ControllerOptions, DmaBuffer, Namespace, QueuePair, QueuePairOptions,
};

mod contexts;
mod zoned;

use contexts::{Boxed, Cached, ContextStore, IoContext, Slots};

/// `--reset-interval`: resubmissions of one I/O after retryable completion errors before it
/// counts as failed (a refusal while the controller resets does not count).
const MAX_RETRIES: u8 = 16;

/// Opens the controller (keeping the emulator alive alongside it when `sim`).
fn open(config: &Config) -> Result<(Option<SimController>, Controller), PerfError> {
    let options = ControllerOptions {
        shadow_doorbells: config.shadow_doorbells,
        sgl: config.sgl,
        interrupts: config.interrupts,
        ..ControllerOptions::default()
    };
    match &config.target {
        Target::Sim => {
            let (sim, transport) = emulator::start(config.verify)?;
            let ctrl = Controller::new(transport, options)
                .map_err(|e| PerfError::driver("bringing up the emulated controller", e))?;
            Ok((Some(sim), ctrl))
        }
        Target::Pci(addr) => {
            let ctrl = Controller::open_pci(&addr.to_string(), options).map_err(|e| {
                PerfError::driver(
                    format!(
                        "opening {addr} (is it bound to vfio-pci, and is /dev/vfio accessible?)"
                    ),
                    e,
                )
            })?;
            Ok((None, ctrl))
        }
        Target::Path(_) | Target::Tcp(_) => {
            unreachable!("Args::validate sends paths to io_uring, lib::run TCP to crate::tcp")
        }
    }
}

/// One thread's resources, built before any thread starts so setup errors come first.
struct Worker {
    qp: QueuePair,
    buffers: Vec<Option<DmaBuffer>>,
    gen: LbaGen,
    /// With `--inline-device`: the emulator this thread steps after an empty poll.
    inline: Option<Arc<SimController>>,
    /// With `--verify`: this thread's verification state.
    verifier: Option<Verifier>,
    /// With `-w append`: the thread's zones.
    zones: Option<zoned::Plan>,
}

/// With `--interrupts`: empty polls before the thread blocks on its queue's eventfd (or, over
/// NVMe/TCP, in a read of its socket).
pub(crate) const IDLE_POLLS_BEFORE_WAIT: u32 = 64;
/// With `--interrupts`: longest single wait (the loop re-checks its deadline after it).
pub(crate) const INTERRUPT_WAIT: Duration = Duration::from_millis(100);

/// Runs the benchmark on our driver.
pub fn run(config: &Config) -> Result<runner::Outcome, PerfError> {
    let (sim, ctrl) = open(config)?;
    let sim = sim.map(Arc::new);
    let inline = sim.as_ref().filter(|_| config.inline_device).cloned();
    // Bound after the emulator's handles: locals drop in reverse order, so an early return
    // (a bad -n, -b or -q) shuts the controller down while its emulator still runs, instead of
    // waiting out the shutdown and disable timeouts (7 s) and leaking its DMA memory.
    let ctrl = ctrl;
    let ns = match config.nsid {
        Some(nsid) => ctrl
            .namespace(nsid)
            .map_err(|e| PerfError::driver(format!("namespace {nsid} (-n)"), e))?,
        None => ctrl.namespaces().first().cloned().ok_or_else(|| {
            PerfError::driver(
                format!("controller {}", ctrl.name()),
                nvme_driver::Error::InactiveNamespace {
                    nsid: 1,
                    active: Vec::new(),
                },
            )
        })?,
    };
    let geometry = Geometry::new(config, ns.nsid(), ns.block_size(), ns.blocks())?;
    if config.verify {
        verify::check_span(config, &geometry)?;
    }
    let run_id = verify::run_id(config.seed);
    let fault = match (config.sim_fault, &sim) {
        (Some(fault), Some(sim)) => Some(FaultPlan {
            fault,
            sim: sim.clone(),
            nsid: ns.nsid(),
        }),
        _ => None,
    };
    if config.threads > u32::from(ctrl.io_queue_pairs()) {
        return Err(PerfError::Threads {
            requested: config.threads,
            granted: ctrl.io_queue_pairs(),
        });
    }
    // A transfer above MDTS is split into several commands, each needing a slot and an entry.
    let commands_per_io = config.block_size.div_ceil(ctrl.max_transfer_bytes()) as u64;
    let entries = u64::from(config.queue_depth) * commands_per_io + 1;
    let max_entries = u64::from(ctrl.max_queue_entries()).min(u64::from(nvme_pool::MAX_DEPTH));
    if entries > max_entries {
        return Err(PerfError::QueueDepth {
            requested: config.queue_depth,
            entries,
            device: format!("controller {} (CAP.MQES)", ctrl.name()),
            max_entries,
            max_qd: (max_entries - 1) / commands_per_io,
        });
    }
    let append = config.workload == crate::args::Workload::Append;
    let mut workers = Vec::with_capacity(config.threads as usize);
    for t in 0..config.threads as usize {
        // -w append: one more entry per zone in use, for its Reset.
        let resets = if append {
            zoned::plan(config, &ns, t)?.2 as u64
        } else {
            0
        };
        let mut qp = ctrl
            .create_queue_pair(QueuePairOptions {
                depth: (entries + resets) as u32,
                timeout: config.io_timeout,
                max_completions_per_poll: config.complete_batch as usize,
                // Polled like SPDK perf, unless --interrupts asks for the hybrid mode.
                interrupts: config.interrupts,
                ..QueuePairOptions::default()
            })
            .map_err(|e| PerfError::driver(format!("creating I/O queue pair {t}"), e))?;
        let buffers =
            DmaBuffer::allocate_many(ctrl.dma(), config.queue_depth as usize, config.block_size)
                .map_err(|e| {
                    PerfError::driver(
                        format!(
                            "allocating {} DMA buffers of {} bytes",
                            config.queue_depth, config.block_size
                        ),
                        e.into(),
                    )
                })?
                .into_iter()
                .map(Some)
                .collect();
        let zones = if append {
            Some(zoned::prepare(config, &ctrl, &ns, &mut qp, t)?)
        } else {
            None
        };
        workers.push(Worker {
            qp,
            zones,
            buffers,
            gen: geometry.generator(config, t),
            inline: inline.clone(),
            verifier: config
                .verify
                .then(|| Verifier::new(config, &geometry, t, run_id, fault.clone())),
        });
    }
    let shadow = ctrl.shadow_doorbells();
    let setup = Setup {
        device: format!("{}", config.target),
        lba_size: ns.block_size(),
        nsid: Some(ns.nsid()),
        shadow_doorbells: Some(shadow),
        sgl: Some(ctrl.sgl()),
    };
    let ns = Arc::new(ns);
    if let Some(sim) = &inline {
        sim.set_inline(true);
    }
    let first = std::sync::atomic::AtomicBool::new(true);
    let served = crate::control_socket::start(config, &ctrl)?;
    let cells = served.as_ref().map_or(&[][..], |s| &s.cells[..]);
    let results = runner::drive_observed(config, workers, cells, |mut worker, control, live| {
        let cpi = commands_per_io as u16;
        // With --reset-interval the first thread to start resets the controller.
        let resetter = config
            .reset_interval
            .filter(|_| first.swap(false, std::sync::atomic::Ordering::Relaxed))
            .map(|interval| Resetter {
                ctrl: &ctrl,
                interval,
                next: None,
            });
        let env = WorkerEnv {
            config,
            ctrl: &ctrl,
            ns: &ns,
            control,
            live,
            commands_per_io: cpi,
        };
        if let Some(plan) = worker.zones.take() {
            return zoned::run_append_worker(env, worker.qp, worker.buffers, plan);
        }
        match worker.verifier.take() {
            Some(v) => run_with_store(env, worker, resetter, v),
            None => run_with_store(env, worker, resetter, NoCheck),
        }
    })?;
    let mut results = results;
    // The controller's abort outcomes and timeout-driven resets, counted once (first thread).
    if let Some(r) = results.first_mut().and_then(|r| r.recovery.as_mut()) {
        let a = ctrl.abort_stats();
        r.aborts_sent = a.sent;
        r.aborts_succeeded = a.aborted;
        r.aborts_declined = a.not_aborted + a.failed;
        r.timeout_resets = a.resets;
    }
    drop(fault);
    drop(served);
    drop(ctrl);
    drop(sim);
    Ok(runner::Outcome { setup, results })
}

fn counters(qp: &QueuePair) -> DriverCounters {
    let s = qp.stats();
    DriverCounters {
        sq_mmio_writes: s.sq_doorbell_writes,
        cq_mmio_writes: s.cq_doorbell_writes,
        sq_updates: s.sq_doorbell_updates,
        cq_updates: s.cq_doorbell_updates,
        idle_polls: s.idle_polls,
        bad_completions: s.bad_completions,
        timeouts: s.timeouts,
        tags: *qp.pool_stats(),
        cache: None,
    }
}

fn delta(end: DriverCounters, start: DriverCounters) -> DriverCounters {
    DriverCounters {
        sq_mmio_writes: end.sq_mmio_writes - start.sq_mmio_writes,
        cq_mmio_writes: end.cq_mmio_writes - start.cq_mmio_writes,
        sq_updates: end.sq_updates - start.sq_updates,
        cq_updates: end.cq_updates - start.cq_updates,
        idle_polls: end.idle_polls - start.idle_polls,
        bad_completions: end.bad_completions - start.bad_completions,
        timeouts: end.timeouts - start.timeouts,
        ..end
    }
}

/// Whether `e` means the controller will never complete anything again (removed, or failed
/// and not being reset).
fn controller_gone(e: &nvme_driver::Error) -> bool {
    matches!(
        e,
        nvme_driver::Error::Removed { .. } | nvme_driver::Error::Failed { .. }
    )
}

/// `--reset-interval`: the thread that resets the controller, between its rounds.
struct Resetter<'a> {
    ctrl: &'a Controller,
    interval: Duration,
    /// When the next reset is due (set when measuring starts).
    next: Option<Instant>,
}

impl Resetter<'_> {
    /// Resets the controller if measuring and the interval has passed. `Ok(true)`: reset.
    #[cold]
    fn tick(&mut self, measuring: bool) -> Result<bool, nvme_driver::Error> {
        if !measuring {
            return Ok(false);
        }
        let now = Instant::now();
        match self.next {
            None => {
                self.next = Some(now + self.interval);
                Ok(false)
            }
            Some(due) if now >= due => {
                self.ctrl.reset()?;
                self.next = Some(Instant::now() + self.interval);
                Ok(true)
            }
            Some(_) => Ok(false),
        }
    }
}

/// Stores `value` into a place the loop emptied earlier (a buffer taken for submission): the
/// old value is `None`, so it is not dropped (no check, no call on the per-I/O path). Were it
/// ever `Some`, it would be leaked, never freed.
#[inline(always)]
fn put_back<T>(place: &mut Option<T>, value: Option<T>) {
    let old = std::mem::replace(place, value);
    debug_assert!(old.is_none(), "put_back over a live value");
    std::mem::forget(old);
}

/// The end of an I/O whose buffer (if it came back) is in `buffers[slot]`: tells the verifier,
/// then the slot is free for the next I/O, or retired when the driver kept its buffer.
#[inline(always)]
fn settle<C: Check>(
    check: &mut C,
    buffers: &[Option<DmaBuffer>],
    free: &mut Vec<u32>,
    retired: &mut u32,
    slot: u32,
    ok: bool,
) {
    check.completed(slot, ok, buffers[slot as usize].as_deref());
    if buffers[slot as usize].is_some() {
        free.push(slot);
    } else {
        *retired += 1;
    }
}

/// What every worker thread shares: the run's configuration, controller, namespace and the
/// runner's control and live counters.
struct WorkerEnv<'a> {
    config: &'a Config,
    ctrl: &'a Controller,
    ns: &'a Namespace,
    control: &'a Control,
    live: &'a Live,
    /// Commands one I/O takes (more than one when it is split above MDTS).
    commands_per_io: u16,
}

/// [`run_worker`] with the context store `--contexts` names (each store its own copy of the
/// loop, so the choice costs nothing per I/O).
fn run_with_store<C: Check>(
    env: WorkerEnv<'_>,
    worker: Worker,
    resetter: Option<Resetter<'_>>,
    check: C,
) -> Result<WorkerResult, PerfError> {
    let qd = env.config.queue_depth;
    match env.config.contexts {
        ContextMode::Slots => run_worker(env, worker, resetter, check, Slots::new(qd)),
        ContextMode::Cache => run_worker(env, worker, resetter, check, Cached::new(qd)),
        ContextMode::Box => run_worker(env, worker, resetter, check, Boxed::new(qd)),
    }
}

/// One thread's loop. `check` is [`NoCheck`] (compiled away) or the `--verify` state;
/// `store` keeps the contexts of the I/Os in flight (`--contexts`).
fn run_worker<C: Check, S: ContextStore>(
    env: WorkerEnv<'_>,
    worker: Worker,
    mut resetter: Option<Resetter<'_>>,
    mut check: C,
    mut store: S,
) -> Result<WorkerResult, PerfError> {
    let WorkerEnv {
        config,
        ctrl,
        ns,
        control,
        live,
        commands_per_io,
    } = env;
    let Worker {
        mut qp,
        mut buffers,
        mut gen,
        inline,
        verifier: _,
        zones: _,
    } = worker;
    let qd = config.queue_depth;
    let blocks = (config.block_size / ns.block_size() as usize) as u32;
    let prefetch = config.batch_prefetch;
    let mut free: Vec<u32> = (0..qd).rev().collect();
    let mut tally = Tally::new();
    let mut pacer = Pacer::new(control, live, config.ios);
    let mut baseline = counters(&qp);
    let mut in_flight: u32 = 0;
    let mut idle_polls: u32 = 0;
    let mut retired: u32 = 0;
    let mut gone = false;
    // --reset-interval: retryable failures are resubmitted. `retry` holds the indices whose
    // I/O failed retryably and waits for resubmission (still counted in `in_flight`, its
    // context kept in `store`); capacity qd, so pushing never allocates.
    let recovering = config.recovering();
    let mut retry: Vec<u32> = Vec::with_capacity(if recovering { qd as usize } else { 0 });
    // Failed completions of one poll, handled after it (see the reap below).
    let mut failed: Vec<Completion> = Vec::with_capacity(qd as usize);
    let mut recovery = RecoveryStats::default();
    // Latencies are differences of u64 ns since this base: one clock read per batch, one
    // subtraction per I/O.
    let nano_clock = NanoClock::new();
    let clock = || nano_clock.now_ns();
    let timed = config.latency;
    // Whether a round whose I/Os are all in flight may wait in its poll (see the reap below):
    // not with --reset-interval (the resetter runs between rounds) or --interrupts (the round
    // counts idle polls before it blocks).
    let wait_in_poll = !recovering && !config.interrupts;

    loop {
        if pacer.step(&mut tally) == Step::BeginMeasure {
            baseline = counters(&qp);
        }
        if pacer.finished(in_flight, &tally) {
            break;
        }
        if recovering {
            // ----- --reset-interval: reset when due, resubmit what a reset failed -----
            if let Some(r) = &mut resetter {
                match r.tick(pacer.measuring()) {
                    Ok(true) => recovery.resets += 1,
                    Ok(false) => {}
                    Err(e) => {
                        gone |= controller_gone(&e);
                        tally.fail(|| format!("resetting the controller: {e}"));
                        resetter = None;
                    }
                }
            }
            while let Some(index) = retry.pop() {
                let i = index as usize;
                let (Some(ctx), true) = (store.get(i), buffers[i].is_some()) else {
                    // Unreachable: a queued retry keeps its context and buffer.
                    in_flight -= 1;
                    retired += 1;
                    continue;
                };
                let (lba, is_write) = (ctx.lba, ctx.is_write);
                let place = &mut buffers[i];
                let submitted = if is_write {
                    qp.submit_in_place(ns, Write::new(lba, blocks), place, u64::from(index))
                } else {
                    qp.submit_in_place(ns, Read::new(lba, blocks), place, u64::from(index))
                };
                let Err(error) = submitted else { continue };
                if error.is_retryable() && buffers[i].is_some() {
                    // Still resetting: try again next round.
                    retry.push(index);
                    break;
                }
                // Gives up on this I/O: it counts as a failed completion.
                in_flight -= 1;
                tally.unsuccessful += 1;
                gone |= controller_gone(&error);
                tally.fail(|| {
                    format!(
                        "resubmitting {} at LBA {lba}: {error}",
                        if is_write { "write" } else { "read" },
                    )
                });
                check.completed(index, false, None);
                if buffers[i].is_some() {
                    free.push(index);
                } else {
                    retired += 1;
                }
                store.end(i);
            }
        }
        // ----- reap -----
        // Reaps first and leaves the CQ head doorbell to the submission below (`unplug` writes
        // it just before the SQ tail), so both doorbells go out back to back, as in SPDK's
        // and libvfn's completion callbacks.
        // The round's clock reading, 0 while none was taken (a reading of 0, the clock's first
        // nanosecond, only costs a second read): a plain u64, whose test is one compare where
        // an `Option`'s selection below took nine instructions.
        let mut now: u64 = 0;
        // Every I/O in flight (nothing to submit until one comes back) and nothing else to
        // watch between polls: the round polls until something comes back, with only the
        // idle step between polls, instead of going through the whole round (phase, budget,
        // submission, publication and end checks) after every empty poll. Nothing those
        // checks look at changes in a poll that finds nothing: errors, `gone` and `retired`
        // change only with a completion or a submission, and a phase change cannot end the
        // run while I/Os are in flight. Every in-flight command has a timeout, so the wait
        // ends (the driver's clock check reports an expired command as a completion). At least
        // one I/O is in flight then: every round starts with `retired < qd` (a round that
        // ends with `retired == qd` ends the run) and a waiting round ran no retry block
        // above (`wait_in_poll` excludes recovery), so `in_flight + retired == qd` needs
        // `in_flight > 0`.
        debug_assert!(!wait_in_poll || retired < qd);
        // Polls this round may make: one, or as many as it takes when waiting. A countdown
        // (one decrement and test per empty poll) rather than a `waiting` flag, which the
        // compiler recomputed from its operands on every empty poll.
        let mut polls_left: u32 = if wait_in_poll && in_flight + retired == qd {
            u32::MAX
        } else {
            1
        };
        let reaped = loop {
            // The closure handles a successful completion of a known I/O and nothing else:
            // small enough to be inlined into the driver's reaping loop (no 96-byte
            // `Completion` built on the stack, no call). Failures go to `failed` (capacity qd,
            // so pushing never allocates) and are handled after the poll, below. One call site
            // (inside the wait loop), so the closure is inlined once.
            let reaped = qp.poll_deferred(
                #[inline(always)]
                |c| {
                    // Taken apart at once: only the failure path below puts it together
                    // again, so the fast path's completion (result known `Ok`, no pieces)
                    // never reaches memory.
                    let Completion {
                        user_data,
                        result,
                        buffer,
                        pieces,
                    } = c;
                    let index = user_data as usize;
                    // `result` is moved on every path (no drop check of it left for the end).
                    let ctx = match result {
                        Ok(dw0) => match store.end(index) {
                            Some(ctx) => ctx,
                            None => {
                                failed.push(Completion {
                                    user_data,
                                    result: Ok(dw0),
                                    buffer,
                                    pieces,
                                });
                                return;
                            }
                        },
                        Err(e) => {
                            failed.push(Completion {
                                user_data,
                                result: Err(e),
                                buffer,
                                pieces,
                            });
                            return;
                        }
                    };
                    // A successful completion of one buffer has no pieces; were there any, they
                    // are dropped here (returned to nobody: nvme-perf submits no vectored I/O).
                    drop(pieces);
                    // The buffer goes to its table place first: held across the timing code
                    // below, it was spilled to the stack and copied twice.
                    let slot = index as u32;
                    put_back(&mut buffers[slot as usize], buffer);
                    if timed {
                        if now == 0 {
                            now = clock();
                        }
                        tally.complete_ns(now.saturating_sub(ctx.submitted));
                    } else {
                        tally.complete_untimed();
                    }
                    settle(&mut check, &buffers, &mut free, &mut retired, slot, true);
                },
            );
            if reaped > 0 {
                break reaped;
            }
            polls_left -= 1;
            if polls_left == 0 {
                // Not waiting (or, after 2^32 - 1 empty polls, round again: harmless).
                break 0;
            }
            // The idle step of a waiting round (as below for a round that found nothing).
            if let Some(sim) = &inline {
                sim.step();
            } else if config.yield_idle {
                std::thread::yield_now();
            }
        };
        if reaped > 0 {
            idle_polls = 0;
            in_flight -= reaped as u32;
            tally.reap_calls += 1;
        }
        // Only when something failed: an empty `drain` still runs `Drain::drop` (out of line
        // for `Completion`'s drop glue), a cost on every poll of the hot loop.
        if !failed.is_empty() {
            for c in failed.drain(..) {
                let index = c.user_data as usize;
                let Some(ctx) = store.end(index) else {
                    tally.fail(|| format!("completion for unknown I/O {index}"));
                    continue;
                };
                let ok = c.result.is_ok();
                match c.result {
                    // A success whose context was missing above cannot reach here.
                    Ok(_) => tally.complete_untimed(),
                    Err(e)
                        if recovering
                            && e.is_retryable()
                            && c.buffer.is_some()
                            && ctx.retries < MAX_RETRIES =>
                    {
                        // Cut off by a reset: resubmit the same I/O (same buffer, so a write
                        // carries the same content and sequence number; the verifier keeps the
                        // position in flight, accepting old or new content until it is acked).
                        let slot = index as u32;
                        buffers[slot as usize] = c.buffer;
                        store.begin(
                            slot,
                            IoContext {
                                retries: ctx.retries + 1,
                                ..ctx
                            },
                        );
                        retry.push(slot);
                        recovery.retried_ios += 1;
                        // Still in flight, not done: undo what `reaped` added above.
                        in_flight += 1;
                        continue;
                    }
                    Err(nvme_driver::Error::Timeout { .. }) if config.tolerate_timeouts => {
                        // Not acknowledged, not an error: the driver keeps the old buffer until
                        // the device gives it back; this slot gets a new one.
                        tally.unsuccessful += 1;
                        recovery.timed_out_ios += 1;
                        let slot = index as u32;
                        check.completed(slot, false, None);
                        match ctrl.alloc_buffer(config.block_size) {
                            Ok(b) => {
                                buffers[slot as usize] = Some(b);
                                free.push(slot);
                            }
                            Err(e) => {
                                retired += 1;
                                log::warn!("replacing the buffer of a timed-out I/O: {e}");
                            }
                        }
                        continue;
                    }
                    Err(e) => {
                        tally.unsuccessful += 1;
                        gone |= controller_gone(&e);
                        tally.fail(|| {
                            format!(
                                "{} at LBA {}: {e}",
                                if ctx.is_write { "write" } else { "read" },
                                ctx.lba
                            )
                        })
                    }
                }
                let slot = index as u32;
                buffers[slot as usize] = c.buffer;
                settle(&mut check, &buffers, &mut free, &mut retired, slot, ok);
            }
        }
        let mut changed = reaped > 0;
        // ----- submit one batch -----
        // A full queue (every round of a QD1 loop that waits for its I/O) is decided by one
        // compare: no batch cap or `--ios` allowance to work out.
        let free_slots = qd - in_flight - retired;
        let want = if free_slots == 0 {
            0
        } else {
            pacer.allowance(free_slots.min(config.submit_batch), &tally)
        };
        if want > 0 {
            // A batch of one I/O of one command needs neither a reservation nor a deferred
            // doorbell: submitted unplugged, its submission writes the CQ head and the SQ tail
            // doorbells itself, back to back, as `unplug` would (the QD1 loop then skips the
            // plug's room checks and the unplug).
            let single = want == 1 && commands_per_io == 1;
            let reserve = if prefetch {
                want as u16 * commands_per_io
            } else {
                0
            };
            if single || qp.plug(reserve).is_ok() {
                // One clock read per round: the submission time is the completion time read
                // while reaping this round (so a latency includes the resubmission work), or
                // a fresh read when nothing was reaped. None without latency timing.
                let now = if now != 0 || !timed { now } else { clock() };
                let mut issued = 0;
                for _ in 0..want {
                    let Some(index) = free.pop() else { break };
                    let (lba, is_write) = check.next_io(&mut gen);
                    // The buffer stays in its table place until the driver takes it into
                    // the request slot (a refusal leaves it there): no move out and back.
                    let place = &mut buffers[index as usize];
                    let Some(buf) = place.as_mut() else {
                        // Unreachable by the invariant; keep the index out of circulation.
                        retired += 1;
                        continue;
                    };
                    check.prepare(index, lba, is_write, buf);
                    let submitted = if is_write {
                        qp.submit_in_place(ns, Write::new(lba, blocks), place, u64::from(index))
                    } else {
                        qp.submit_in_place(ns, Read::new(lba, blocks), place, u64::from(index))
                    };
                    match submitted {
                        Ok(()) => {
                            store.begin(
                                index,
                                IoContext {
                                    submitted: now,
                                    lba,
                                    is_write,
                                    retries: 0,
                                },
                            );
                            issued += 1;
                        }
                        Err(error) => {
                            check.refused(index);
                            gone |= controller_gone(&error);
                            if recovering && error.is_retryable() {
                                // Resetting: nothing reached the device; draw again later.
                                recovery.refused_submissions += 1;
                            } else {
                                tally.fail(|| {
                                    format!(
                                        "submitting {} of {blocks} blocks at LBA {lba}: {error}",
                                        if is_write { "write" } else { "read" },
                                    )
                                });
                            }
                            // The buffer is back in its place (or gone, if the device may
                            // still reach it).
                            if buffers[index as usize].is_some() {
                                free.push(index);
                            } else {
                                retired += 1;
                            }
                            break;
                        }
                    }
                }
                if !single {
                    qp.unplug();
                }
                in_flight += issued;
                tally.submitted += u64::from(issued);
                tally.submit_calls += 1;
                changed = true;
            }
        }
        if reaped > 0 {
            // Not idle.
        } else if config.interrupts && in_flight > 0 {
            idle_polls += 1;
            if idle_polls >= IDLE_POLLS_BEFORE_WAIT {
                idle_polls = 0;
                if let Err(e) = qp.wait_for_completion(INTERRUPT_WAIT) {
                    tally.fail(|| format!("waiting for an interrupt: {e}"));
                    break;
                }
            }
        } else if let Some(sim) = &inline {
            sim.step();
        } else if config.yield_idle {
            std::thread::yield_now();
        }
        if changed {
            // Only what changed is published (idle rounds leave the totals as they were).
            pacer.publish(&tally);
        }
        if retired == qd {
            tally.fail(|| "every I/O buffer was lost to timed-out commands".into());
            break;
        }
        if gone {
            // Nothing more can complete on this controller: stop now so the tool exits and
            // releases the device (an unbind or hot-unplug waits for that).
            break;
        }
    }
    pacer.publish_final(&tally);
    let (elapsed, cpu) = pacer.measured();
    let mut driver = delta(counters(&qp), baseline);
    let verify = check.verifier().map(|v| {
        // After a failed I/O the device may not answer: no read-back then (the run fails).
        if tally.errors == 0 && in_flight == 0 {
            let blocks = (config.block_size / ns.block_size() as usize) as u32;
            final_pass(
                &mut qp,
                ns,
                &mut buffers,
                v,
                blocks,
                inline.as_deref(),
                &mut tally,
            );
        }
        v.stats.clone()
    });
    driver.cache = store.cache_stats();
    if config.tolerate_timeouts && tally.errors == 0 {
        settle_timed_out(&mut qp, config.io_timeout, inline.as_deref());
    }
    // Deleting the queues needs a device that answers on its own again.
    if let Some(sim) = &inline {
        sim.set_inline(false);
    }
    drop(qp);
    tally.finish();
    Ok(WorkerResult {
        tally,
        elapsed,
        cpu,
        driver: Some(driver),
        verify,
        recovery: recovering.then_some(recovery),
        tcp: None,
    })
}

/// Timeouts after which [`settle_timed_out`] stops waiting.
const SETTLE_TIMEOUTS: u32 = 3;

/// --tolerate-timeouts: polls (nothing else in flight) until the device has returned every
/// command of a timed-out I/O, at most [`SETTLE_TIMEOUTS`] I/O timeouts, so that the abort
/// counters read after the run are final. The driver sends at once only the Aborts it has
/// room for (free slots for commands without a waiter on the admin queue) and the rest on
/// later clock ticks, a third of a timeout apart, once earlier Aborts have completed; with
/// `AbortThenReset` it resets a timeout after the expiry if a command is still out. A run
/// that ended right after the expiry would otherwise count only the first Aborts.
#[cold]
fn settle_timed_out(qp: &mut QueuePair, io_timeout: Duration, inline: Option<&SimController>) {
    let deadline = Instant::now() + io_timeout * SETTLE_TIMEOUTS;
    while qp.retired() > 0 && Instant::now() < deadline {
        // Every request was reported already: late completions only release their slots.
        if qp.poll(|_| {}) == 0 {
            match inline {
                Some(sim) => {
                    sim.step();
                }
                None => std::thread::yield_now(),
            }
        }
    }
    if qp.retired() > 0 {
        log::warn!(
            "{} timed-out commands still outstanding {:?} after the run",
            qp.retired(),
            io_timeout * SETTLE_TIMEOUTS
        );
    }
}

/// `--verify`'s read-back: reads every position of the thread's slice that holds an
/// acknowledged write (nothing else in flight) and checks it. Outside the measured phase.
fn final_pass(
    qp: &mut QueuePair,
    ns: &Namespace,
    buffers: &mut [Option<DmaBuffer>],
    v: &mut Verifier,
    blocks: u32,
    inline: Option<&SimController>,
    tally: &mut Tally,
) {
    v.begin_final_pass();
    let mut free: Vec<u32> = (0..buffers.len() as u32)
        .filter(|&i| buffers[i as usize].is_some())
        .collect();
    let (mut next, total) = (0, v.positions());
    let mut in_flight = 0u32;
    // Reads a reset cut off (retryable error, buffer back): (index, LBA) to read again.
    let mut again: Vec<(u32, u64)> = Vec::new();
    let mut lbas = vec![0u64; buffers.len()];
    loop {
        while let Some((index, lba)) = again.pop() {
            let Some(buf) = buffers[index as usize].take() else {
                continue;
            };
            v.prepare_final_read(index, lba);
            if let Err(failure) = qp.submit_read(ns, lba, blocks, buf, u64::from(index)) {
                buffers[index as usize] = failure.buffer;
                if failure.error.is_retryable() && buffers[index as usize].is_some() {
                    again.push((index, lba));
                    break;
                }
                tally.fail(|| format!("verify: submitting read at LBA {lba}: {}", failure.error));
                next = total;
                continue;
            }
            in_flight += 1;
        }
        while next < total && !free.is_empty() {
            let Some(lba) = v.written(next) else {
                next += 1;
                continue;
            };
            let Some(index) = free.pop() else { break };
            let Some(buf) = buffers[index as usize].take() else {
                continue;
            };
            v.prepare_final_read(index, lba);
            lbas[index as usize] = lba;
            if let Err(failure) = qp.submit_read(ns, lba, blocks, buf, u64::from(index)) {
                buffers[index as usize] = failure.buffer;
                if failure.error.is_retryable() && buffers[index as usize].is_some() {
                    again.push((index, lba));
                    next += 1;
                    break;
                }
                tally.fail(|| format!("verify: submitting read at LBA {lba}: {}", failure.error));
                next = total;
                break;
            }
            in_flight += 1;
            next += 1;
        }
        if in_flight == 0 && again.is_empty() {
            return;
        }
        let reaped = qp.poll(|c| {
            let index = c.user_data as u32;
            let ok = c.result.is_ok();
            if let Err(e) = &c.result {
                if e.is_retryable() && c.buffer.is_some() && (index as usize) < buffers.len() {
                    buffers[index as usize] = c.buffer;
                    again.push((index, lbas[index as usize]));
                    return;
                }
                tally.fail(|| format!("verify: read back failed: {e}"));
            }
            if let Some(slot) = buffers.get_mut(index as usize) {
                *slot = c.buffer;
                v.completed(index, ok, slot.as_deref());
                if slot.is_some() {
                    free.push(index);
                }
            }
        });
        in_flight -= reaped as u32;
        if tally.errors > 0 {
            // Stop submitting; drain what is in flight.
            next = total;
        }
        if reaped == 0 {
            if let Some(sim) = inline {
                sim.step();
            }
        }
    }
}
