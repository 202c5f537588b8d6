//! The spdk-like loop over NVMe/TCP: one `TcpQueuePair` (one TCP connection) per worker
//! thread, preallocated buffers indexed by the request's user data, submissions batched with
//! plug/unplug (one socket write per batch), completions reaped by `poll`.
//!
//! Options that only mean something on a PCI function (shadow doorbells, resets, the
//! emulator's verify mode) are refused with a message. `--interrupts` is the hybrid mode:
//! after a run of empty polls the worker blocks in a read of its socket. `--yield-idle` calls sched_yield
//! after a poll that found nothing while I/O is outstanding: with the target on the same CPU
//! (the kernel's nvmet-tcp over loopback), its threads then run at once.

use nvme_driver::IoQueue;
use nvme_driver::NanoClock;

use nvme_driver::{DmaBuffer, Namespace, QueuePairOptions};
use nvme_tcp::{TcpController, TcpOptions, TcpQueuePair};

use crate::args::Config;
use crate::control::{Control, Live, Pacer, Tally, TcpCounters, WorkerResult};
use crate::error::PerfError;
use crate::rng::LbaGen;
use crate::runner::{self, Geometry, Setup};
use crate::spdk::{IDLE_POLLS_BEFORE_WAIT, INTERRUPT_WAIT};
use crate::target::Target;

/// One thread's connection, buffers and address stream.
struct Worker {
    qp: TcpQueuePair,
    ns: Namespace,
    buffers: Vec<Option<DmaBuffer>>,
    gen: LbaGen,
}

/// Runs the benchmark against an NVMe/TCP subsystem.
pub fn run(config: &Config) -> Result<runner::Outcome, PerfError> {
    let Target::Tcp(trid) = &config.target else {
        unreachable!("lib::run sends only TCP transport ids here");
    };
    let refused = [
        (config.verify, "--verify"),
        (config.reset_interval.is_some(), "--reset-interval"),
        (
            config.shadow_doorbells != nvme_driver::ShadowDoorbells::default(),
            "--shadow-doorbells / --no-shadow-doorbells",
        ),
        (!config.sgl, "--no-sgl"),
        (config.tolerate_timeouts, "--tolerate-timeouts"),
        (
            config.io_timeout != crate::args::DEFAULT_IO_TIMEOUT,
            "--io-timeout",
        ),
    ];
    if let Some((_, option)) = refused.iter().find(|(set, _)| *set) {
        return Err(PerfError::InvalidOption {
            option,
            value: "set".into(),
            reason: "it applies to PCI functions only, not to NVMe/TCP".into(),
        });
    }
    let ctrl = TcpController::connect(
        trid,
        TcpOptions {
            io_queues: config.threads as u16,
            ..TcpOptions::default()
        },
    )
    .map_err(|e| PerfError::driver(format!("connecting to {trid}"), e))?;
    let ns = match config.nsid {
        Some(nsid) => ctrl.namespace(nsid),
        None => ctrl.namespaces().first().cloned().ok_or_else(|| {
            nvme_driver::Error::InvalidRequest(format!(
                "subsystem {} has no usable namespace",
                trid.subnqn
            ))
        }),
    }
    .map_err(|e| PerfError::driver("choosing the namespace", e))?;
    let geometry = Geometry::new(config, ns.nsid(), ns.block_size(), ns.blocks())?;
    let mut workers = Vec::with_capacity(config.threads as usize);
    for t in 0..config.threads as usize {
        let qp = ctrl
            .create_queue_pair(QueuePairOptions {
                depth: (config.queue_depth + 1).min(ctrl.max_queue_entries()),
                max_completions_per_poll: config.complete_batch as usize,
                ..QueuePairOptions::default()
            })
            .map_err(|e| PerfError::driver(format!("creating queue pair {t}"), e))?;
        let qd = config.queue_depth.min(u32::from(qp.capacity())) as usize;
        let buffers = (0..qd)
            .map(|_| ctrl.alloc_buffer(config.block_size).map(Some))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| PerfError::driver("allocating buffers", e))?;
        workers.push(Worker {
            qp,
            ns: ns.clone(),
            buffers,
            gen: geometry.generator(config, t),
        });
    }
    let setup = Setup {
        device: trid.to_string(),
        lba_size: ns.block_size(),
        nsid: Some(ns.nsid()),
        shadow_doorbells: None,
        sgl: None,
    };
    let blocks = geometry.blocks_per_io as u32;
    let results = runner::drive(config, workers, |w, control, live| {
        run_worker(config, blocks, w, control, live)
    })?;
    drop(ctrl);
    Ok(runner::Outcome { setup, results })
}

fn run_worker(
    config: &Config,
    blocks: u32,
    worker: Worker,
    control: &Control,
    live: &Live,
) -> Result<WorkerResult, PerfError> {
    let Worker {
        mut qp,
        ns,
        mut buffers,
        mut gen,
    } = worker;
    let qd = buffers.len() as u32;
    let clock = NanoClock::new();
    // Submission times, ns on `clock`.
    let mut submitted_at = vec![0u64; buffers.len()];
    let mut lbas = vec![0u64; buffers.len()];
    let mut free: Vec<u32> = (0..qd).rev().collect();
    let mut tally = Tally::new();
    let mut pacer = Pacer::new(control, live, config.ios);
    let timed = config.latency;
    let mut idle_polls = 0u32;
    loop {
        let in_flight = qd - free.len() as u32;
        let _ = pacer.step(&mut tally);
        if pacer.finished(in_flight, &tally) {
            break;
        }
        let want = pacer.allowance((qd - in_flight).min(config.submit_batch), &tally);
        if want > 0 {
            let now = clock.now_ns();
            let _ = qp.plug(want as u16);
            let mut queued = 0u64;
            for _ in 0..want {
                let Some(index) = free.pop() else { break };
                let i = index as usize;
                let buf = buffers[i].take().expect("a free index has its buffer");
                let (lba, is_write) = gen.next_io();
                submitted_at[i] = now;
                lbas[i] = lba;
                let r = if is_write {
                    qp.submit_write(
                        &ns,
                        lba,
                        blocks,
                        buf,
                        nvme_driver::WriteFlags::NONE,
                        u64::from(index),
                    )
                } else {
                    qp.submit_read(&ns, lba, blocks, buf, u64::from(index))
                };
                match r {
                    Ok(()) => queued += 1,
                    Err(f) => {
                        buffers[i] = f.buffer;
                        if buffers[i].is_none() {
                            return Err(PerfError::driver("a refused submission", f.error));
                        }
                        free.push(index);
                        tally.fail(|| format!("submitting I/O at LBA {lba}: {}", f.error));
                        if qp.closed_error().is_some() {
                            qp.unplug();
                            return Err(PerfError::driver("the NVMe/TCP queue closed", f.error));
                        }
                        break;
                    }
                }
            }
            qp.unplug();
            tally.submitted += queued;
            tally.submit_calls += 1;
        }
        let mut now = None;
        let reaped = qp.poll(|c| {
            let i = c.user_data as usize;
            let t = *now.get_or_insert_with(|| clock.now_ns());
            match c.result {
                Ok(_) if timed => tally.complete_ns(t.saturating_sub(submitted_at[i])),
                Ok(_) => tally.complete_untimed(),
                Err(e) => {
                    tally.unsuccessful += 1;
                    tally.fail(|| format!("I/O at LBA {} failed: {e}", lbas[i]));
                }
            }
            buffers[i] = c.buffer;
            free.push(i as u32);
        });
        if reaped > 0 {
            tally.reap_calls += 1;
        }
        if reaped > 0 || qp.in_flight() == 0 {
            idle_polls = 0;
        } else if config.interrupts {
            idle_polls += 1;
            if idle_polls >= IDLE_POLLS_BEFORE_WAIT {
                idle_polls = 0;
                // Errors close the queue; the next poll delivers them.
                let _ = qp.wait_for_completion(INTERRUPT_WAIT);
            }
        } else if config.yield_idle {
            // A target on the same CPU (loopback) gets it at once instead of after the
            // poller's time slice.
            std::thread::yield_now();
        }
        if let Some(e) = qp.closed_error() {
            if qp.in_flight() == 0 && free.len() as u32 == qd {
                return Err(PerfError::driver("the NVMe/TCP queue closed", e));
            }
        }
        pacer.publish(&tally);
    }
    pacer.publish_final(&tally);
    let (elapsed, cpu) = pacer.measured();
    tally.finish();
    let s = qp.stats();
    let tcp = TcpCounters {
        commands: s.commands_submitted,
        pdus_received: s.pdus_received,
        success_shortcuts: s.success_shortcuts,
        polls: s.polls,
        idle_polls: s.idle_polls,
    };
    Ok(WorkerResult {
        tally,
        elapsed,
        cpu,
        driver: None,
        verify: None,
        recovery: None,
        tcp: Some(tcp),
    })
}
