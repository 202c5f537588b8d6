//! The emulated controller's device thread: register polling, queue state, completion posting.
//!
//! One thread owns all controller state ([`Device`]); the driver talks to it only through the
//! register block and guest memory, exactly as with hardware. Each poll pass:
//! 1. looks at CC (enable, reset, shutdown);
//! 2. takes new CQ heads and SQ tails from the doorbell registers, or from the shadow doorbell
//!    buffer when Doorbell Buffer Config is active (a value counts as written when it changes);
//! 3. fetches and executes a bounded batch of commands per submission queue and posts their
//!    completions, holding them back while the completion queue is full (an unreaped entry is
//!    never overwritten) and fetching no more than the completion queue can absorb.
//!
//! INVARIANTS: `sqs[q]`/`cqs[q]` exist only while the controller is enabled; an SQ's CQ exists
//! for as long as the SQ does; `head`/`tail` indices are always `< size`.

mod admin;
pub(crate) use admin::capabilities;
pub use admin::{ERROR_LOG_ENTRIES, SIM_TEMPERATURE_K};
mod io;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nvme_spec::queue::{
    CompletionEntry, SubmissionEntry, CQES_LOG2, CQE_SIZE, SQES_LOG2, SQE_SIZE,
};
use nvme_spec::regs::{
    cq_head_doorbell, sq_tail_doorbell, Aqa, Cc, Csts, ShutdownNotification, ShutdownStatus, ACQ,
    ADMIN_QUEUE_MAX_ENTRIES, AQA, ASQ, CC, CC_CSS_NVM, CSTS, DOORBELL_BASE, PAGE_SIZE_SHIFT_BASE,
};
use nvme_spec::status::{generic, Status, StatusCodeType};

use crate::config::SimConfig;
use crate::disk::Disks;
use crate::dma::{GuestView, SimDma};
use crate::faults::{ExecutionDelay, Faults, CORRUPT_CID_MASK, WRONG_SQID_MASK};
use crate::irq::{MsixTable, RouteCache};
use crate::prp::{generic_status, Fail};
use crate::regs::{RegisterBlock, BAR_SIZE};
use crate::stats::{bump, Counters};

/// State shared between the handle and the device thread.
pub(crate) struct Shared {
    pub regs: Arc<RegisterBlock>,
    pub dma: Arc<SimDma>,
    pub faults: Faults,
    pub counters: Counters,
    pub disks: Disks,
    pub msix: Arc<MsixTable>,
    pub config: SimConfig,
    pub stop: AtomicBool,
    /// PCI Command register Bus Master Enable: while clear the device makes no DMA.
    pub bus_master: AtomicBool,
    /// The device thread stands still; the host runs poll passes itself
    /// (`SimController::step`), e.g. to count instructions deterministically.
    pub inline: AtomicBool,
    /// The device request notifier (VFIO's REQ interrupt, emulated).
    pub request: Arc<nvme_vfio::InterruptEvent>,
}

/// Commands fetched from one submission queue per poll pass (round-robin fairness).
const FETCH_BATCH: u32 = 64;
/// Idle passes spent spinning before the thread starts yielding.
const SPIN_PASSES: u32 = 2_000;
/// Idle passes spent yielding before the thread starts sleeping.
const YIELD_PASSES: u32 = 4_000;
/// Longest sleep between polls of an idle controller.
const MAX_IDLE_SLEEP: Duration = Duration::from_micros(50);
/// First sleep once the thread starts sleeping; doubled up to [`MAX_IDLE_SLEEP`].
const MIN_IDLE_SLEEP: Duration = Duration::from_micros(2);
/// Page-aligned addresses have these bits clear for the 4 KiB minimum page.
const MIN_PAGE_MASK: u64 = (1 << PAGE_SIZE_SHIFT_BASE) - 1;

/// A completion not yet written to its queue.
#[derive(Clone, Copy, Debug)]
struct Completion {
    dw0: u32,
    sq_head: u16,
    sq_id: u16,
    cid: u16,
    status: Status,
}

/// What executing a command produced.
pub(crate) enum Outcome {
    /// Post a completion with this status and Dword 0.
    Complete { status: Status, dw0: u32 },
    /// The command stays outstanding (Asynchronous Event Request).
    Pending,
}

impl Outcome {
    pub(crate) const SUCCESS: Outcome = Outcome::Complete {
        status: Status::SUCCESS,
        dw0: 0,
    };

    pub(crate) fn status(status: Status) -> Outcome {
        Outcome::Complete { status, dw0: 0 }
    }
}

/// Where a queue takes its doorbell values from (MMIO register, optional shadow entry).
#[derive(Clone, Copy, Debug, Default)]
struct DoorbellSource {
    /// Byte offset of the register in the BAR (and of the entry in the shadow page).
    offset: usize,
    /// Last value seen in the register.
    mmio_seen: u32,
    /// Last value seen in the shadow buffer.
    shadow_seen: u32,
    /// Last value written to the EventIdx buffer.
    event_written: Option<u32>,
}

struct Sq {
    base: u64,
    size: u32,
    head: u32,
    tail: u32,
    cqid: u16,
    doorbell: DoorbellSource,
}

/// How a completion queue interrupts the host (Create I/O CQ CDW11 IEN/IV, NVMe Base 2.0 §5.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CqInterrupt {
    /// IEN clear: the host polls.
    Polled,
    /// IEN set: MSI-X vector `IV`; a missing route counts as a lost interrupt.
    Vector(u16),
    /// The admin CQ: vector 0 when routed. Without MSI-X its interrupt would be pin-based,
    /// which is not emulated, so nothing counts as lost.
    Admin,
}

/// MSI-X vector of the admin completion queue (NVMe Base 2.0 §3.5.1: always vector 0).
const ADMIN_VECTOR: u16 = 0;

struct Cq {
    base: u64,
    size: u32,
    head: u32,
    tail: u32,
    phase: bool,
    interrupt: CqInterrupt,
    /// Entries were posted since the last interrupt (raised at the end of the poll pass).
    interrupt_due: bool,
    /// Completions waiting for room in the ring (capacity reserved at creation).
    held: VecDeque<Completion>,
    doorbell: DoorbellSource,
}

impl Cq {
    fn is_full(&self) -> bool {
        (self.tail + 1) % self.size == self.head
    }
}

/// Shadow doorbell and EventIdx buffers set by Doorbell Buffer Config (NVMe Base 2.0 §5.8).
#[derive(Clone, Copy, Debug)]
struct ShadowBuffers {
    doorbells: u64,
    event_idx: u64,
}

/// A completion posted later because of [`Faults::delay_completions`].
struct Delayed {
    due: Instant,
    cqid: u16,
    completion: Completion,
}

/// An I/O command fetched but not yet executed ([`Faults::delay_execution`]).
pub(crate) struct Deferred {
    due: Instant,
    sq_id: u16,
    cqid: u16,
    sqe: SubmissionEntry,
    how: ExecutionDelay,
}

/// Controller state owned by the device thread.
pub(crate) struct Device {
    shared: Arc<Shared>,
    stride: usize,
    /// Memory page size from CC.MPS, valid while enabled.
    page_size: usize,
    /// Last CC value acted upon.
    cc: Cc,
    ready: bool,
    shut_down: bool,
    sqs: Vec<Option<Sq>>,
    cqs: Vec<Option<Cq>>,
    shadow: Option<ShadowBuffers>,
    delayed: VecDeque<Delayed>,
    /// Commands fetched whose execution is deferred (in fetch order).
    deferred: Vec<Deferred>,
    /// A disable (CC.EN 1 -> 0) is being ignored because of [`Faults::stuck_on_disable`].
    stuck: bool,
    /// Admin-queue state (features, granted queues, identify data).
    admin: admin::AdminState,
    /// The MSI-X routing as last seen.
    routes: RouteCache,
}

impl Device {
    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        let config = &shared.config;
        let queues = usize::from(config.io_queue_pairs) + 1;
        let stride =
            nvme_spec::regs::Cap::new(0, false, 0, config.dstrd, false, 0, 0).doorbell_stride();
        let admin = admin::AdminState::new(config);
        Self {
            stride,
            page_size: 1 << PAGE_SIZE_SHIFT_BASE,
            cc: Cc(0),
            ready: false,
            shut_down: false,
            sqs: (0..queues).map(|_| None).collect(),
            cqs: (0..queues).map(|_| None).collect(),
            shadow: None,
            delayed: VecDeque::new(),
            deferred: Vec::new(),
            stuck: false,
            admin,
            routes: RouteCache::new(shared.msix.clone()),
            shared,
        }
    }

    /// Runs the device thread until the handle asks it to stop. While the host drives the
    /// device inline, the thread only waits.
    pub(crate) fn run(device: Arc<std::sync::Mutex<Device>>, shared: Arc<Shared>) {
        let mut idle: u32 = 0;
        let mut sleep = MIN_IDLE_SLEEP;
        while !shared.stop.load(Ordering::Acquire) {
            if shared.inline.load(Ordering::Acquire) {
                std::thread::sleep(MAX_IDLE_SLEEP);
                continue;
            }
            let busy = device.lock().unwrap_or_else(|p| p.into_inner()).poll();
            if busy {
                idle = 0;
                sleep = MIN_IDLE_SLEEP;
                continue;
            }
            idle = idle.saturating_add(1);
            if idle < SPIN_PASSES {
                std::hint::spin_loop();
            } else if idle < YIELD_PASSES {
                std::thread::yield_now();
            } else {
                std::thread::sleep(sleep);
                sleep = (sleep * 2).min(MAX_IDLE_SLEEP);
            }
        }
        log::debug!("sim: device thread stopping");
    }

    /// One poll pass; true when anything happened.
    pub(crate) fn poll(&mut self) -> bool {
        if self.shared.faults.is_removed() {
            // Gone: registers keep reading all ones whatever the host writes; nothing runs.
            self.shared.faults.fill_ones();
            return false;
        }
        let mut busy = self.poll_cc();
        if !self.ready || self.shut_down || self.shared.faults.is_fatal() {
            return busy;
        }
        let dma = self.shared.dma.clone();
        let view = dma.view();
        // Checked under the view's lock: `disable_bus_master` clears the flag and then waits
        // for the lock, so no access starts after it returns.
        if !self.shared.bus_master.load(Ordering::SeqCst) {
            self.refuse_dma();
            return busy;
        }
        busy |= self.release_delayed(&view);
        busy |= self.run_deferred(&view);
        busy |= self.raise_events(&view);
        for qid in 0..self.cqs.len() {
            busy |= self.poll_cq_head(&view, qid);
        }
        for qid in 0..self.sqs.len() {
            busy |= self.poll_sq(&view, qid);
        }
        if busy {
            self.raise_interrupts();
        }
        busy || !self.delayed.is_empty() || !self.deferred.is_empty()
    }

    /// Bus mastering is off: counts a blocked attempt when there is DMA work waiting.
    fn refuse_dma(&self) {
        let regs = self.regs();
        let now = Instant::now();
        let pending =
            self.sqs.iter().flatten().any(|sq| {
                sq.head != sq.tail || regs.load(sq.doorbell.offset) != sq.doorbell.mmio_seen
            }) || self.cqs.iter().flatten().any(|cq| !cq.held.is_empty())
                || self.delayed.front().is_some_and(|d| d.due <= now)
                || self.deferred.iter().any(|d| d.due <= now);
        if pending {
            bump(&self.shared.counters.dma_blocked);
        }
    }

    fn regs(&self) -> &RegisterBlock {
        &self.shared.regs
    }

    fn write_csts(&self, shst: ShutdownStatus) {
        let csts = Csts::new(self.ready, self.shared.faults.is_fatal(), shst);
        self.regs().store(CSTS, csts.0);
    }

    // ----- controller configuration (NVMe Base 2.0 §3.5.1 initialization, §3.6 shutdown) -----

    fn poll_cc(&mut self) -> bool {
        let cc = Cc(self.regs().load(CC));
        if cc == self.cc {
            return false;
        }
        if self.cc.en() && !cc.en() && self.shared.faults.is_stuck_on_disable() {
            // CC is not taken (`self.cc` keeps EN = 1), so the disable is acted on once the
            // fault is cleared; meanwhile everything keeps running with CSTS.RDY = 1.
            if !self.stuck {
                self.stuck = true;
                log::debug!("sim: CC.EN cleared, but the stuck_on_disable fault keeps running");
            }
            return false;
        }
        self.stuck = false;
        let old = std::mem::replace(&mut self.cc, cc);
        if old.en() && !cc.en() {
            self.reset();
        } else if !old.en() && cc.en() {
            self.enable(cc);
        }
        let shutdown_requested = !matches!(cc.shn(), ShutdownNotification::None);
        let was_requested = !matches!(old.shn(), ShutdownNotification::None);
        if shutdown_requested && !was_requested {
            // Everything is already on the medium (no volatile state to flush): complete at once.
            log::debug!("sim: shutdown ({:?}) complete", cc.shn());
            self.shut_down = true;
            self.write_csts(ShutdownStatus::Complete);
        }
        true
    }

    /// CC.EN 0 -> 1: take the admin queue from AQA/ASQ/ACQ and become ready.
    fn enable(&mut self, cc: Cc) {
        let aqa = Aqa(self.regs().load(AQA));
        let asq = self.regs().load64(ASQ);
        let acq = self.regs().load64(ACQ);
        let mqes_entries = u32::from(self.shared.config.mqes) + 1;
        let max_admin = ADMIN_QUEUE_MAX_ENTRIES.min(mqes_entries);
        let problem = if cc.css() != CC_CSS_NVM {
            Some(format!(
                "CC.CSS {} is not the NVM command set ({CC_CSS_NVM})",
                cc.css()
            ))
        } else if cc.mps() > admin::MPSMAX {
            Some(format!(
                "CC.MPS {} exceeds CAP.MPSMAX {}",
                cc.mps(),
                admin::MPSMAX
            ))
        } else if cc.iosqes() != SQES_LOG2 || cc.iocqes() != CQES_LOG2 {
            Some(format!(
                "CC.IOSQES/IOCQES are {}/{}; this controller needs {SQES_LOG2}/{CQES_LOG2} \
                 (64-byte SQEs, 16-byte CQEs)",
                cc.iosqes(),
                cc.iocqes()
            ))
        } else if !(2..=max_admin).contains(&aqa.sq_entries())
            || !(2..=max_admin).contains(&aqa.cq_entries())
        {
            Some(format!(
                "AQA asks for {} SQ / {} CQ entries; each must be 2..={max_admin}",
                aqa.sq_entries(),
                aqa.cq_entries()
            ))
        } else if asq & MIN_PAGE_MASK != 0 || acq & MIN_PAGE_MASK != 0 || asq == 0 || acq == 0 {
            Some(format!(
                "ASQ {asq:#x} / ACQ {acq:#x} must be non-zero and page aligned"
            ))
        } else if !self.doorbells_reachable(0) {
            Some(format!(
                "the admin doorbells (stride {}) lie beyond the {BAR_SIZE:#x}-byte BAR",
                self.stride
            ))
        } else {
            None
        };
        if let Some(problem) = problem {
            log::warn!("sim: controller enable refused, CSTS.RDY stays 0: {problem}");
            return;
        }
        self.page_size = 1 << (PAGE_SIZE_SHIFT_BASE + u32::from(cc.mps()));
        self.create_cq(0, acq, aqa.cq_entries(), CqInterrupt::Admin, None);
        self.create_sq(0, asq, aqa.sq_entries(), 0, None);
        if self.shared.faults.is_never_ready() {
            log::debug!("sim: enable seen, but the never_ready fault keeps CSTS.RDY at 0");
            return;
        }
        self.ready = true;
        self.write_csts(ShutdownStatus::Normal);
        log::debug!(
            "sim: controller enabled (admin SQ {} / CQ {} entries)",
            aqa.sq_entries(),
            aqa.cq_entries()
        );
    }

    /// CC.EN 1 -> 0: controller reset. Drops every queue and pending completion, clears the
    /// doorbells, the shadow buffer configuration and an injected fatal status.
    fn reset(&mut self) {
        self.sqs.iter_mut().for_each(|q| *q = None);
        self.cqs.iter_mut().for_each(|q| *q = None);
        self.delayed.clear();
        let cancelled = self.deferred.len() as u64;
        self.deferred.clear();
        let counter = &self.shared.counters.deferred_cancelled;
        counter.store(
            counter.load(Ordering::Relaxed) + cancelled,
            Ordering::Relaxed,
        );
        self.shadow = None;
        self.admin.reset(&self.shared.config);
        self.ready = false;
        self.shut_down = false;
        self.shared.faults.clear_fatal();
        self.regs().clear_from(DOORBELL_BASE);
        self.write_csts(ShutdownStatus::Normal);
        log::debug!("sim: controller reset");
    }

    // ----- queues -----

    /// Whether both doorbells of queue pair `qid` lie inside the BAR (with a large CAP.DSTRD
    /// the later ones do not: such queues cannot be created).
    pub(crate) fn doorbells_reachable(&self, qid: u16) -> bool {
        cq_head_doorbell(qid, self.stride)
            .checked_add(4)
            .is_some_and(|end| end <= BAR_SIZE)
    }

    /// A doorbell source for a new queue, remembering the current register and shadow values
    /// so that only later changes count as writes.
    fn doorbell_source(&self, offset: usize, view: Option<&GuestView<'_>>) -> DoorbellSource {
        let mut source = DoorbellSource {
            offset,
            mmio_seen: self.regs().load(offset),
            shadow_seen: 0,
            event_written: None,
        };
        if let Some(view) = view {
            self.resync_shadow(view, &mut source);
        }
        source
    }

    /// The shadow buffers and the entry offset of `source` in them, when shadow doorbells are
    /// on and the entry lies inside the one-page buffers (with a large CAP.DSTRD it may not:
    /// such a queue keeps using its MMIO doorbell only).
    fn shadow_entry(&self, source: &DoorbellSource) -> Option<(ShadowBuffers, u64)> {
        let shadow = self.shadow?;
        let offset = source.offset - DOORBELL_BASE;
        (offset + 4 <= self.page_size).then_some((shadow, offset as u64))
    }

    /// Snapshots the shadow entry of `source` (when shadow doorbells are on) and forgets the
    /// last EventIdx written, so the next poll publishes it.
    fn resync_shadow(&self, view: &GuestView<'_>, source: &mut DoorbellSource) {
        source.event_written = None;
        if let Some((shadow, offset)) = self.shadow_entry(source) {
            let entry = shadow.doorbells + offset;
            match view.read_u32(entry) {
                Ok(value) => source.shadow_seen = value,
                Err(fault) => self.dma_error(fault, "shadow doorbell read"),
            }
        }
    }

    /// Re-snapshots every queue's shadow entry (after Doorbell Buffer Config).
    fn resync_all_shadows(&mut self, view: &GuestView<'_>) {
        let mut sqs = std::mem::take(&mut self.sqs);
        let mut cqs = std::mem::take(&mut self.cqs);
        for sq in sqs.iter_mut().flatten() {
            self.resync_shadow(view, &mut sq.doorbell);
        }
        for cq in cqs.iter_mut().flatten() {
            self.resync_shadow(view, &mut cq.doorbell);
        }
        self.sqs = sqs;
        self.cqs = cqs;
    }

    /// Creates a completion queue (admin at enable, I/O from Create I/O Completion Queue).
    fn create_cq(
        &mut self,
        qid: u16,
        base: u64,
        size: u32,
        interrupt: CqInterrupt,
        view: Option<&GuestView<'_>>,
    ) {
        let doorbell = self.doorbell_source(cq_head_doorbell(qid, self.stride), view);
        self.cqs[usize::from(qid)] = Some(Cq {
            base,
            size,
            head: 0,
            tail: 0,
            phase: true,
            interrupt,
            interrupt_due: false,
            held: VecDeque::with_capacity(size as usize),
            doorbell,
        });
    }

    /// Creates a submission queue bound to completion queue `cqid`.
    fn create_sq(
        &mut self,
        qid: u16,
        base: u64,
        size: u32,
        cqid: u16,
        view: Option<&GuestView<'_>>,
    ) {
        let doorbell = self.doorbell_source(sq_tail_doorbell(qid, self.stride), view);
        self.sqs[usize::from(qid)] = Some(Sq {
            base,
            size,
            head: 0,
            tail: 0,
            cqid,
            doorbell,
        });
    }

    /// Reads a doorbell value. Without shadow doorbells: the register, if it changed. With
    /// them, the shadow entry is authoritative (NVMe Base §5.8): an MMIO write only tells the
    /// device to look, because the host stores the shadow entry before the register and a
    /// register value read here may already be older than the shadow entry.
    /// Returns the new value, if any.
    fn read_doorbell(
        &self,
        view: &GuestView<'_>,
        source: &mut DoorbellSource,
        sq: bool,
    ) -> Option<u32> {
        let counters = &self.shared.counters;
        let mmio = self.regs().load(source.offset);
        let mmio_changed = mmio != source.mmio_seen;
        if mmio_changed {
            source.mmio_seen = mmio;
            bump(if sq {
                &counters.sq_doorbell_writes
            } else {
                &counters.cq_doorbell_writes
            });
        }
        let Some((shadow, offset)) = self.shadow_entry(source) else {
            return mmio_changed.then_some(mmio);
        };
        let entry = shadow.doorbells + offset;
        match view.read_u32(entry) {
            Ok(value) if value != source.shadow_seen => {
                source.shadow_seen = value;
                bump(&counters.shadow_doorbell_updates);
                Some(value)
            }
            Ok(_) => None,
            Err(fault) => {
                self.dma_error(fault, "shadow doorbell read");
                None
            }
        }
    }

    /// Publishes `value` as the EventIdx of a queue (when shadow doorbells are on and it moved).
    fn write_event_idx(&self, view: &GuestView<'_>, source: &mut DoorbellSource, value: u32) {
        let Some((shadow, offset)) = self.shadow_entry(source) else {
            return;
        };
        if source.event_written == Some(value) {
            return;
        }
        let entry = shadow.event_idx + offset;
        match view.write_u32(entry, value) {
            Ok(()) => source.event_written = Some(value),
            Err(fault) => self.dma_error(fault, "EventIdx write"),
        }
    }

    fn invalid_doorbell(&self, qid: usize, what: &str, value: u32, size: u32) {
        bump(&self.shared.counters.invalid_doorbell_writes);
        log::warn!(
            "sim: ignoring {what} doorbell value {value} for queue {qid}: the queue has {size} \
             entries (valid values 0..{size})"
        );
    }

    fn poll_cq_head(&mut self, view: &GuestView<'_>, qid: usize) -> bool {
        let Some(mut cq) = self.cqs[qid].take() else {
            return false;
        };
        let mut busy = false;
        if let Some(head) = self.read_doorbell(view, &mut cq.doorbell, false) {
            if head < cq.size {
                cq.head = head;
                busy = true;
            } else {
                self.invalid_doorbell(qid, "CQ head", head, cq.size);
            }
        }
        let head = cq.head;
        self.write_event_idx(view, &mut cq.doorbell, head);
        busy |= self.flush_held(view, &mut cq);
        self.cqs[qid] = Some(cq);
        busy
    }

    /// Takes a new SQ tail, then fetches and executes up to [`FETCH_BATCH`] commands.
    fn poll_sq(&mut self, view: &GuestView<'_>, qid: usize) -> bool {
        let Some(mut sq) = self.sqs[qid].take() else {
            return false;
        };
        if let Some(tail) = self.read_doorbell(view, &mut sq.doorbell, true) {
            if tail < sq.size {
                sq.tail = tail;
            } else {
                self.invalid_doorbell(qid, "SQ tail", tail, sq.size);
            }
        }
        self.sqs[qid] = Some(sq);

        let sq_id = qid as u16;
        let mut fetched = 0;
        while fetched < FETCH_BATCH {
            // Commands may create or delete other queues (never their own), so the SQ is
            // borrowed afresh for each fetch.
            let Some(sq) = self.sqs[qid].as_ref() else {
                break;
            };
            let (cqid, ring_base) = (sq.cqid, sq.base);
            // Fatal status stops fetching at once, even mid-pass.
            if sq.head == sq.tail || !self.cq_can_accept(cqid) || self.shared.faults.is_fatal() {
                break;
            }
            let addr = ring_base + u64::from(sq.head) * SQE_SIZE as u64;
            let sqe = match view.read_dwords::<{ SQE_SIZE / 4 }>(addr) {
                Ok(dwords) => parse_sqe(&dwords),
                Err(fault) => {
                    // The ring itself is unreachable: nothing sensible can be completed.
                    self.dma_error(fault, "submission queue entry fetch");
                    log::error!(
                        "sim: SQ {qid} ring at IOVA {ring_base:#x} is not mapped: controller fatal"
                    );
                    self.shared.faults.set_fatal();
                    break;
                }
            };
            let sq_head = match self.sqs[qid].as_mut() {
                Some(sq) => {
                    sq.head = (sq.head + 1) % sq.size;
                    sq.head as u16
                }
                None => break,
            };
            fetched += 1;
            if qid != 0 {
                if let Some(how) = self.shared.faults.take_execution_delay() {
                    bump(&self.shared.counters.commands_deferred);
                    log::debug!(
                        "sim: deferring cid {} of SQ {qid} by {:?} ({how:?})",
                        sqe.cid(),
                        how.delay
                    );
                    self.deferred.push(Deferred {
                        due: Instant::now() + how.delay,
                        sq_id,
                        cqid,
                        sqe,
                        how,
                    });
                    continue;
                }
            }
            let outcome = if qid == 0 {
                bump(&self.shared.counters.admin_commands);
                self.admin_command(view, &sqe)
            } else {
                self.io_command(view, &sqe)
            };
            if let Outcome::Complete { status, dw0 } = outcome {
                if !status.is_success() {
                    self.admin.record_error(sq_id, &sqe, status);
                }
                let completion = Completion {
                    dw0,
                    sq_head,
                    sq_id,
                    cid: sqe.cid(),
                    status,
                };
                self.complete(view, cqid, completion);
            }
        }
        if let Some(mut sq) = self.sqs[qid].take() {
            let head = sq.head;
            self.write_event_idx(view, &mut sq.doorbell, head);
            self.sqs[qid] = Some(sq);
        }
        fetched > 0
    }

    /// Whether the CQ can take one more completion without holding more than one ring's worth.
    fn cq_can_accept(&self, cqid: u16) -> bool {
        self.cqs[usize::from(cqid)]
            .as_ref()
            .is_some_and(|cq| cq.held.len() < cq.size as usize)
    }

    // ----- completions (NVMe Base 2.0 §4.6) -----

    /// Applies completion faults, then queues the completion (possibly delayed: the delay
    /// counts from execution, which happens right after the fetch).
    fn complete(&mut self, view: &GuestView<'_>, cqid: u16, mut completion: Completion) {
        let faults = &self.shared.faults;
        if faults.take_drop() {
            log::debug!(
                "sim: dropping completion of cid {} on SQ {} (fault)",
                completion.cid,
                completion.sq_id
            );
            return;
        }
        if faults.take_bogus_sq_head() {
            if let Some(sq) = self
                .sqs
                .get(usize::from(completion.sq_id))
                .and_then(Option::as_ref)
            {
                completion.sq_head = ((sq.tail + 1) % sq.size) as u16;
            }
        }
        if faults.take_corrupt_cid() {
            completion.cid ^= CORRUPT_CID_MASK;
        }
        if faults.take_wrong_sqid() {
            completion.sq_id ^= WRONG_SQID_MASK;
        }
        let copies = if faults.take_duplicate() { 2 } else { 1 };
        let delay = faults.delay();
        // Reading the clock only when a delay is armed keeps it off the fast path.
        let due = (!delay.is_zero()).then(|| Instant::now() + delay);
        for _ in 0..copies {
            match due {
                None => self.post(view, cqid, completion),
                Some(due) => self.delayed.push_back(Delayed {
                    due,
                    cqid,
                    completion,
                }),
            }
        }
    }

    /// Executes the deferred commands that are due (in fetch order) and completes them.
    fn run_deferred(&mut self, view: &GuestView<'_>) -> bool {
        if self.deferred.is_empty() {
            return false;
        }
        let now = Instant::now();
        let mut ran = false;
        let mut index = 0;
        while index < self.deferred.len() {
            if self.deferred[index].due > now {
                index += 1;
                continue;
            }
            let d = self.deferred.remove(index);
            let outcome = self.io_command(view, &d.sqe);
            // Counted once its effects are visible, so a test that waits for the count sees
            // the medium and host memory as the command left them.
            bump(&self.shared.counters.deferred_executed);
            ran = true;
            if let (true, Outcome::Complete { status, dw0 }) = (d.how.complete, outcome) {
                self.complete_deferred(view, &d, status, dw0);
            } else {
                log::debug!(
                    "sim: deferred cid {} executed, completion withheld",
                    d.sqe.cid()
                );
            }
        }
        ran
    }

    /// Posts the completion of a deferred command (SQ head as it is now).
    fn complete_deferred(&mut self, view: &GuestView<'_>, d: &Deferred, status: Status, dw0: u32) {
        if !status.is_success() {
            self.admin.record_error(d.sq_id, &d.sqe, status);
        }
        let sq_head = self.sqs[usize::from(d.sq_id)]
            .as_ref()
            .map_or(0, |sq| sq.head as u16);
        let completion = Completion {
            dw0,
            sq_head,
            sq_id: d.sq_id,
            cid: d.sqe.cid(),
            status,
        };
        self.complete(view, d.cqid, completion);
    }

    /// Cancels the deferred command `cid` of SQ `sq_id` if it is waiting and abortable,
    /// completing it with Command Abort Requested. True when it was cancelled.
    pub(crate) fn abort_deferred(&mut self, view: &GuestView<'_>, sq_id: u16, cid: u16) -> bool {
        let Some(index) = self
            .deferred
            .iter()
            .position(|d| d.sq_id == sq_id && d.sqe.cid() == cid && d.how.abortable)
        else {
            return false;
        };
        let d = self.deferred.remove(index);
        bump(&self.shared.counters.deferred_cancelled);
        log::debug!("sim: Abort cancelled deferred cid {cid} of SQ {sq_id}");
        let aborted = Status::new(
            StatusCodeType::Generic.raw(),
            generic::ABORT_REQUESTED,
            false,
        );
        self.complete_deferred(view, &d, aborted, 0);
        true
    }

    /// Cancels every deferred command of SQ `sq_id` (Delete I/O SQ): completions with Command
    /// Aborted due to SQ Deletion, for those whose completion is posted at all.
    pub(crate) fn cancel_deferred_of(&mut self, view: &GuestView<'_>, sq_id: u16) {
        let (cancelled, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut self.deferred)
            .into_iter()
            .partition(|d| d.sq_id == sq_id);
        self.deferred = kept;
        let status = Status::new(
            StatusCodeType::Generic.raw(),
            generic::ABORTED_SQ_DELETION,
            false,
        );
        for d in cancelled {
            bump(&self.shared.counters.deferred_cancelled);
            if d.how.complete {
                self.complete_deferred(view, &d, status, 0);
            }
        }
    }

    /// Moves due delayed completions to their queues.
    fn release_delayed(&mut self, view: &GuestView<'_>) -> bool {
        if self.delayed.is_empty() {
            return false;
        }
        let now = Instant::now();
        let mut moved = false;
        while self.delayed.front().is_some_and(|d| d.due <= now) {
            let Some(d) = self.delayed.pop_front() else {
                break;
            };
            self.post(view, d.cqid, d.completion);
            moved = true;
        }
        moved
    }

    /// Queues a completion on its CQ and writes as many held entries as fit.
    /// Completes outstanding Asynchronous Event Requests with the events tests raised.
    fn raise_events(&mut self, view: &GuestView<'_>) -> bool {
        let mut raised = false;
        while !self.admin.aer_cids.is_empty() {
            let Some(dw0) = self.shared.faults.take_async_event() else {
                break;
            };
            let cid = self.admin.aer_cids.pop_front().expect("checked non-empty");
            self.admin.aers_outstanding -= 1;
            let sq_head = self.sqs[0].as_ref().map_or(0, |sq| sq.head as u16);
            self.post(
                view,
                0,
                Completion {
                    dw0,
                    sq_head,
                    sq_id: 0,
                    cid,
                    status: Status::SUCCESS,
                },
            );
            raised = true;
        }
        raised
    }

    fn post(&mut self, view: &GuestView<'_>, cqid: u16, completion: Completion) {
        let Some(mut cq) = self.cqs[usize::from(cqid)].take() else {
            log::debug!("sim: completion for deleted CQ {cqid} discarded");
            return;
        };
        cq.held.push_back(completion);
        self.flush_held(view, &mut cq);
        self.cqs[usize::from(cqid)] = Some(cq);
    }

    /// Writes held completions while the ring has room; true when any was written.
    fn flush_held(&self, view: &GuestView<'_>, cq: &mut Cq) -> bool {
        let mut wrote = false;
        while !cq.is_full() {
            let Some(c) = cq.held.front().copied() else {
                break;
            };
            let entry = CompletionEntry::new(c.dw0, c.sq_head, c.sq_id, c.cid, c.status, cq.phase);
            let dwords = [
                entry.dw0,
                entry.dw1,
                u32::from(entry.sq_head) | u32::from(entry.sq_id) << 16,
                u32::from(entry.cid) | u32::from(entry.status) << 16,
            ];
            let addr = cq.base + u64::from(cq.tail) * CQE_SIZE as u64;
            if let Err(fault) = view.write_cqe(addr, dwords) {
                self.dma_error(fault, "completion queue entry write");
                log::error!(
                    "sim: CQ ring at IOVA {:#x} is not mapped: controller fatal",
                    cq.base
                );
                self.shared.faults.set_fatal();
                break;
            }
            cq.held.pop_front();
            bump(&self.shared.counters.completions_posted);
            cq.tail += 1;
            if cq.tail == cq.size {
                cq.tail = 0;
                cq.phase = !cq.phase;
            }
            wrote = true;
        }
        cq.interrupt_due |= wrote;
        wrote
    }

    /// Signals the vector of every CQ that had entries posted since its last interrupt: one
    /// interrupt per CQ per poll pass, however many entries the pass posted.
    fn raise_interrupts(&mut self) {
        let counters = &self.shared.counters;
        for (qid, cq) in self.cqs.iter_mut().enumerate() {
            let Some(cq) = cq.as_mut().filter(|cq| cq.interrupt_due) else {
                continue;
            };
            cq.interrupt_due = false;
            let (vector, required) = match cq.interrupt {
                CqInterrupt::Polled => continue,
                CqInterrupt::Vector(v) => (v, true),
                CqInterrupt::Admin => (ADMIN_VECTOR, false),
            };
            // The eventfd write is a system call, which orders the CQE stores before it: a host
            // woken by the event (through the kernel) sees the entries it announces.
            match self.routes.event(vector).map(|event| event.signal()) {
                Some(Ok(())) => bump(&counters.interrupts_signalled),
                Some(Err(err)) => {
                    bump(&counters.interrupts_lost);
                    log::warn!("sim: CQ {qid}: cannot signal MSI-X vector {vector}: {err}");
                }
                None if required => {
                    bump(&counters.interrupts_lost);
                    log::debug!(
                        "sim: CQ {qid}: interrupt lost, MSI-X vector {vector} is not routed \
                         (enable MSI-X with at least {} vectors)",
                        u32::from(vector) + 1
                    );
                }
                None => {}
            }
        }
    }

    // ----- helpers for command execution -----

    fn dma_error(&self, fault: crate::dma::DmaFault, what: &str) {
        bump(&self.shared.counters.dma_errors);
        log::debug!(
            "sim: DMA error during {what}: {} bytes at IOVA {:#x} not mapped",
            fault.len,
            fault.iova
        );
    }

    /// Turns a command failure into its completion status (counting DMA errors).
    fn fail_status(&self, fail: Fail) -> Status {
        match fail {
            Fail::Status(status) => status,
            Fail::Dma(fault) => {
                self.dma_error(fault, "data transfer");
                generic_status(generic::DATA_TRANSFER_ERROR)
            }
        }
    }

    fn outcome(&self, result: Result<Outcome, Fail>) -> Outcome {
        result.unwrap_or_else(|fail| Outcome::status(self.fail_status(fail)))
    }
}

/// Decodes a submission queue entry from its 16 little-endian dwords.
fn parse_sqe(dwords: &[u32; SQE_SIZE / 4]) -> SubmissionEntry {
    let mut bytes = [0u8; SQE_SIZE];
    for (chunk, dword) in bytes.chunks_exact_mut(4).zip(dwords) {
        chunk.copy_from_slice(&dword.to_le_bytes());
    }
    SubmissionEntry::from_bytes(&bytes)
}
