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
//!
//! This file holds the state and the poll pass; the steps are by concern: `cc.rs` (CC and
//! CSTS: enable, reset, shutdown), `doorbells.rs` (MMIO and shadow doorbells, EventIdx),
//! `queues.rs` (queue creation, CQ heads, SQ fetch), `completions.rs` (posting, faults on
//! completions, interrupts), `deferred.rs` (commands deferred by a fault), `admin.rs` (admin
//! commands), `features.rs` (Get/Set Features, management log pages), `manage.rs` (Format NVM,
//! Namespace Attachment, Identify Namespace data), `io.rs` (NVM I/O commands).

mod admin;
pub(crate) use admin::capabilities;
pub use admin::{ERROR_LOG_ENTRIES, SIM_TEMPERATURE_K};
mod cc;
mod completions;
mod copy;
mod deferred;
mod doorbells;
mod features;
mod fused;
mod io;
mod manage;
pub use manage::{LBA_FORMATS, SIM_CNTLID};
pub(crate) mod pi;
mod power;
pub(crate) use power::{cut as cut_power, lock as power_lock};
mod firmware;
mod queues;
mod selftest;
mod uncorrectable;
mod zns;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nvme_spec::queue::SubmissionEntry;
use nvme_spec::regs::{Cc, PAGE_SIZE_SHIFT_BASE};
use nvme_spec::status::{generic, Status};

use crate::config::SimConfig;
use crate::disk::Disks;
use crate::dma::SimDma;
use crate::faults::{ExecutionDelay, Faults};
use crate::irq::{MsixTable, RouteCache};
use crate::prp::{generic_status, Fail};
use crate::regs::RegisterBlock;
use crate::stats::{bump, Counters};

/// State shared between the handle and the device thread.
pub(crate) struct Shared {
    pub regs: Arc<RegisterBlock>,
    pub dma: Arc<SimDma>,
    pub faults: Faults,
    pub counters: Counters,
    /// The medium; shared with sibling controllers of the subsystem.
    pub disks: Arc<Disks>,
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
    /// The volatile write cache and power state ([`crate::SimConfig::write_cache`]).
    pub power: Option<std::sync::Mutex<crate::power::WriteCache>>,
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
    /// The zoned namespace's zones (`SimConfig::zoned`).
    zones: Option<zns::Zones>,
}

impl Device {
    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        let config = &shared.config;
        let queues = usize::from(config.io_queue_pairs) + 1;
        let stride =
            nvme_spec::regs::Cap::new(0, false, 0, config.dstrd, false, 0, 0).doorbell_stride();
        let admin = admin::AdminState::new(config);
        let zones = config.zoned.map(|z| {
            let blocks = config
                .namespaces
                .iter()
                .find(|ns| ns.nsid == z.nsid)
                .map_or(0, |ns| ns.blocks);
            zns::Zones::new(z, blocks)
        });
        Self {
            zones,
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
