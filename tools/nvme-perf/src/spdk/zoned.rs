//! `-w append` on a zoned namespace (ZNS CS 1.1): Zone Append at queue depth N across the
//! thread's open zones, resetting each zone once it is full and its appends are back.
//!
//! Each thread owns a contiguous share of the namespace's zones and keeps at most
//! `open` of them in use at once, `open` being the zone resources (MOR and MAR, ZNS §2.1.1.4)
//! divided among the threads, so the run never asks for more open or active zones than the
//! namespace has. Appends go round robin over the thread's zones in use, each only while the
//! zone has room for one more (its capacity from a Report Zones at setup); a zone that is full
//! and has nothing in flight is reset (Zone Management Send, Reset) and its slot moves on to
//! the thread's next zone. Every append's returned LBA must lie inside its zone, below the
//! blocks appended to it so far: else the run fails. Resets are counted, not timed.
//!
//! Setup (not measured): every zone of the thread's share is reset, then reported.

use nvme_driver::spec::zns::{ZoneReport, ZoneReportHeader, ZoneSendAction};
use nvme_driver::zns::{ZoneAppend, ZoneMgmtRecv, ZoneMgmtSend};
use nvme_driver::{Controller, Namespace, NanoClock, QueuePair};

use super::{WorkerEnv, IDLE_POLLS_BEFORE_WAIT, INTERRUPT_WAIT};
use crate::args::Config;
use crate::control::{Pacer, Tally, WorkerResult};
use crate::error::PerfError;

/// Zone resources a thread uses when the namespace reports no limit (MOR/MAR FFFFFFFFh).
const UNLIMITED_OPEN_PER_THREAD: u32 = 8;
/// Bytes of a one-zone Report Zones (header and one descriptor).
const ONE_ZONE_REPORT: usize = 2 * ZoneReportHeader::SIZE;

/// One zone in use by a thread.
#[derive(Clone, Copy, Debug)]
struct Slot {
    /// Index into the thread's zones.
    zone: usize,
    /// Blocks appended to it (submitted).
    issued: u64,
    /// Appends in flight.
    in_flight: u32,
    /// A Reset is in flight.
    resetting: bool,
}

/// The thread's zone plan: its zones (start, capacity) and how many it uses at once.
#[derive(Debug)]
pub(super) struct Plan {
    zones: Vec<(u64, u64)>,
    open: usize,
}

/// The zones thread `thread` of `threads` owns and how many it may keep open, or why the run
/// cannot be planned (not zoned, an I/O larger than the append limit or a zone, too many
/// threads for the zone resources).
pub(super) fn plan(
    config: &Config,
    ns: &Namespace,
    thread: usize,
) -> Result<(u64, u64, usize), PerfError> {
    let bad = |why: String| PerfError::Zoned {
        nsid: ns.nsid(),
        why,
    };
    let z = ns.zoned().ok_or_else(|| {
        bad("it is not a zoned namespace the controller takes zone commands on".into())
    })?;
    if config.block_size > z.max_append_bytes {
        return Err(bad(format!(
            "-b {} exceeds its Zone Append limit of {} bytes (ZASL)",
            config.block_size, z.max_append_bytes
        )));
    }
    let threads = config.threads as usize;
    let limit = match (z.max_open, z.max_active) {
        (None, None) => UNLIMITED_OPEN_PER_THREAD as usize * threads,
        (a, b) => a.unwrap_or(u32::MAX).min(b.unwrap_or(u32::MAX)) as usize,
    };
    let zones = z.zones(ns.blocks()) as usize;
    if limit < threads || zones < threads {
        return Err(bad(format!(
            "{threads} threads need one open zone each; it allows {limit} open (MOR/MAR) of \
             {zones} zones: use fewer threads (-T)"
        )));
    }
    let first = zones * thread / threads;
    let count = zones * (thread + 1) / threads - first;
    let open = (limit / threads).min(count);
    Ok((first as u64 * z.zone_blocks, count as u64, open))
}

/// Resets the thread's zones and reads their capacities (outside the measurement).
pub(super) fn prepare(
    config: &Config,
    ctrl: &Controller,
    ns: &Namespace,
    qp: &mut QueuePair,
    thread: usize,
) -> Result<Plan, PerfError> {
    let (first, count, open) = plan(config, ns, thread)?;
    let zone_blocks = ns.zoned().map_or(1, |z| z.zone_blocks);
    let setup = |what: String, e: nvme_driver::Error| PerfError::driver(what, e);
    let mut zones = Vec::with_capacity(count as usize);
    for i in 0..count {
        let start = first + i * zone_blocks;
        qp.execute(ns, ZoneMgmtSend::new(start, ZoneSendAction::Reset), None)
            .map_err(|f| setup(format!("resetting the zone at LBA {start}"), f.error))?;
        let buf = ctrl
            .alloc_buffer(ONE_ZONE_REPORT)
            .map_err(|e| setup("allocating a zone report".into(), e))?;
        let cmd = ZoneMgmtRecv::report_zones(start, ONE_ZONE_REPORT as u32).partial();
        let buf = qp
            .execute(ns, cmd, Some(buf))
            .map_err(|f| setup(format!("reporting the zone at LBA {start}"), f.error))?
            .ok_or_else(|| PerfError::Zoned {
                nsid: ns.nsid(),
                why: format!("its report of the zone at LBA {start} returned no data"),
            })?;
        let report =
            ZoneReport::parse(&buf[..ONE_ZONE_REPORT], 0).map_err(|e| PerfError::Zoned {
                nsid: ns.nsid(),
                why: format!("its report of the zone at LBA {start} is malformed: {e:?}"),
            })?;
        let cap = report.iter().next().map_or(0, |(d, _)| d.zcap);
        zones.push((start, cap));
    }
    let blocks = (config.block_size / ns.block_size() as usize) as u64;
    if let Some(&(start, cap)) = zones.iter().find(|&&(_, cap)| cap < blocks) {
        return Err(PerfError::Zoned {
            nsid: ns.nsid(),
            why: format!(
                "the zone at LBA {start} holds {cap} blocks, fewer than one {}-byte append",
                config.block_size
            ),
        });
    }
    Ok(Plan { zones, open })
}

/// One thread's append loop (see the module docs).
pub(super) fn run_append_worker(
    env: WorkerEnv<'_>,
    mut qp: QueuePair,
    mut buffers: Vec<Option<nvme_driver::DmaBuffer>>,
    plan: Plan,
) -> Result<WorkerResult, PerfError> {
    let WorkerEnv {
        config,
        ns,
        control,
        live,
        ..
    } = env;
    let qd = config.queue_depth;
    let blocks = (config.block_size / ns.block_size() as usize) as u32;
    let Plan { zones, open } = plan;
    let mut slots: Vec<Slot> = (0..open)
        .map(|zone| Slot {
            zone,
            issued: 0,
            in_flight: 0,
            resetting: false,
        })
        .collect();
    // Zones held by a slot; any other zone is Empty (reset at setup or when its slot let it
    // go), so a slot whose zone was reset moves to the next one not held.
    let mut held: Vec<bool> = (0..zones.len()).map(|z| z < open).collect();
    let mut next_zone = open % zones.len().max(1);
    // Per request index: (slot, zone start, submitted ns). Reset tags follow the qd appends.
    let mut contexts: Vec<(usize, u64, u64)> = vec![(0, 0, 0); qd as usize];
    let mut free: Vec<u32> = (0..qd).rev().collect();
    let mut failed: Vec<String> = Vec::new();
    let mut tally = Tally::new();
    let mut pacer = Pacer::new(control, live, config.ios);
    let (mut in_flight, mut resets_in_flight, mut resets, mut cursor) = (0u32, 0u32, 0u64, 0);
    let mut idle_polls = 0u32;
    let nano_clock = NanoClock::new();
    let timed = config.latency;
    loop {
        pacer.step(&mut tally);
        if pacer.finished(in_flight + resets_in_flight, &tally) {
            break;
        }
        // ----- reap -----
        let now = if timed { nano_clock.now_ns() } else { 0 };
        let reaped = qp.poll(|c| {
            let index = c.user_data as usize;
            if index >= qd as usize {
                let s = &mut slots[index - qd as usize];
                resets_in_flight -= 1;
                s.resetting = false;
                match c.result {
                    Ok(_) => {
                        held[s.zone] = false;
                        while held[next_zone] {
                            next_zone = (next_zone + 1) % zones.len();
                        }
                        held[next_zone] = true;
                        s.zone = next_zone;
                        s.issued = 0;
                        next_zone = (next_zone + 1) % zones.len();
                    }
                    Err(e) => failed.push(format!("resetting zone {}: {e}", s.zone)),
                }
                return;
            }
            let (slot, zslba, submitted) = contexts[index];
            let s = &mut slots[slot];
            s.in_flight -= 1;
            in_flight -= 1;
            buffers[index] = c.buffer;
            if buffers[index].is_some() {
                free.push(index as u32);
            }
            match c.result {
                Ok(dw0) => {
                    let lba = ZoneAppend::new(zslba, blocks).written_lba(dw0);
                    if lba < zslba || lba + u64::from(blocks) > zslba + s.issued {
                        failed.push(format!(
                            "an append to the zone at LBA {zslba} landed at LBA {lba}, outside \
                             the {} blocks appended to it",
                            s.issued
                        ));
                    } else if timed {
                        tally.complete_ns(now.saturating_sub(submitted));
                    } else {
                        tally.complete_untimed();
                    }
                }
                Err(e) => {
                    tally.unsuccessful += 1;
                    failed.push(format!("append to the zone at LBA {zslba}: {e}"));
                }
            }
        });
        for why in failed.drain(..) {
            tally.fail(|| why);
        }
        if reaped > 0 {
            tally.reap_calls += 1;
            idle_polls = 0;
        }
        // ----- resets of full zones with nothing in flight -----
        for (i, s) in slots.iter_mut().enumerate() {
            let (start, cap) = zones[s.zone];
            if !s.resetting && s.in_flight == 0 && s.issued + u64::from(blocks) > cap {
                let reset = ZoneMgmtSend::new(start, ZoneSendAction::Reset);
                if let Err(f) = qp.submit(ns, reset, None, u64::from(qd) + i as u64) {
                    tally.fail(|| format!("resetting the zone at LBA {start}: {}", f.error));
                    break;
                }
                s.resetting = true;
                resets_in_flight += 1;
                resets += 1;
            }
        }
        // ----- submit appends round robin over the zones in use -----
        let room = qd - in_flight;
        let want = pacer.allowance(room.min(config.submit_batch), &tally);
        let mut issued = 0u32;
        let submitted_at = if timed { nano_clock.now_ns() } else { 0 };
        'submit: for _ in 0..want {
            let mut tries = 0;
            let slot = loop {
                let s = &slots[cursor];
                let (_, cap) = zones[s.zone];
                let i = cursor;
                cursor = (cursor + 1) % slots.len();
                if !s.resetting && s.issued + u64::from(blocks) <= cap {
                    break i;
                }
                tries += 1;
                if tries == slots.len() {
                    break 'submit;
                }
            };
            let Some(index) = free.pop() else { break };
            let Some(buf) = buffers[index as usize].take() else {
                break;
            };
            let (zslba, _) = zones[slots[slot].zone];
            match qp.submit(
                ns,
                ZoneAppend::new(zslba, blocks),
                Some(buf),
                u64::from(index),
            ) {
                Ok(()) => {
                    contexts[index as usize] = (slot, zslba, submitted_at);
                    slots[slot].issued += u64::from(blocks);
                    slots[slot].in_flight += 1;
                    in_flight += 1;
                    issued += 1;
                }
                Err(f) => {
                    buffers[index as usize] = f.buffer;
                    free.push(index);
                    tally.fail(|| format!("submitting an append to LBA {zslba}: {}", f.error));
                    break;
                }
            }
        }
        if issued > 0 {
            qp.ring();
            tally.submitted += u64::from(issued);
            tally.submit_calls += 1;
        }
        if reaped > 0 || issued > 0 {
            pacer.publish(&tally);
        } else if config.interrupts {
            idle_polls += 1;
            if idle_polls >= IDLE_POLLS_BEFORE_WAIT {
                idle_polls = 0;
                if let Err(e) = qp.wait_for_completion(INTERRUPT_WAIT) {
                    tally.fail(|| format!("waiting for an interrupt: {e}"));
                    break;
                }
            }
        } else if config.yield_idle {
            std::thread::yield_now();
        }
        if tally.errors > 0 && in_flight + resets_in_flight == 0 {
            break;
        }
    }
    let (elapsed, cpu) = pacer.measured();
    log::info!(
        "append worker: {resets} zone resets, {} zones, {open} in use at once",
        zones.len()
    );
    drop(qp);
    tally.finish();
    Ok(WorkerResult {
        tally,
        elapsed,
        cpu,
        driver: None,
        verify: None,
        recovery: None,
        tcp: None,
    })
}
