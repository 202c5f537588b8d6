//! Counters the device thread keeps (relaxed atomics, one writer) and their snapshot.

use std::sync::atomic::{AtomicU64, Ordering};

/// A snapshot of what the emulated controller has seen and done since it started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SimStats {
    /// Admin commands processed.
    pub admin_commands: u64,
    /// NVM Read commands processed.
    pub reads: u64,
    /// NVM Write commands processed.
    pub writes: u64,
    /// NVM Flush commands processed.
    pub flushes: u64,
    /// Write Zeroes, Dataset Management and Compare commands processed.
    pub other_io: u64,
    /// I/O commands with an unknown opcode.
    pub invalid_io: u64,
    /// I/O commands whose data pointer is an SGL (PSDT 01b), valid or not.
    pub sgl_commands: u64,
    /// SQ tail doorbell register writes observed (changes of the register value).
    pub sq_doorbell_writes: u64,
    /// CQ head doorbell register writes observed (changes of the register value).
    pub cq_doorbell_writes: u64,
    /// Doorbell values taken from the shadow doorbell buffer (changes observed there).
    pub shadow_doorbell_updates: u64,
    /// Doorbell values rejected because they were beyond the queue size.
    pub invalid_doorbell_writes: u64,
    /// Device accesses to unmapped or out-of-range IOVAs.
    pub dma_errors: u64,
    /// Completion queue entries written.
    pub completions_posted: u64,
    /// Completions that found their CQ full (as far as the host's last head doorbell showed)
    /// and had to wait for the host to publish a new head before they could be posted.
    pub cq_full_waits: u64,
    /// MSI-X vectors signalled (once per batch of entries posted to an interrupt-enabled CQ).
    pub interrupts_signalled: u64,
    /// Interrupts due on a CQ created with interrupts enabled whose vector had no event routed
    /// (MSI-X disabled or enabled with fewer vectors), or whose eventfd write failed.
    pub interrupts_lost: u64,
    /// Poll passes in which the device had DMA to do (a command to fetch or execute, a
    /// completion to post) but Bus Master Enable was clear, so it did nothing.
    pub dma_blocked: u64,
    /// I/O commands fetched and deferred by [`crate::Faults::delay_execution`].
    pub commands_deferred: u64,
    /// Deferred commands that have executed (late).
    pub deferred_executed: u64,
    /// Deferred commands cancelled before executing (Abort, Delete I/O SQ, reset).
    pub deferred_cancelled: u64,
}

impl SimStats {
    /// I/O commands processed (all NVM command set opcodes, valid or not).
    pub fn io_commands(&self) -> u64 {
        self.reads + self.writes + self.flushes + self.other_io + self.invalid_io
    }

    /// Doorbell register writes of either kind.
    pub fn doorbell_writes(&self) -> u64 {
        self.sq_doorbell_writes + self.cq_doorbell_writes
    }
}

/// Live counters, written by the device thread only.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub admin_commands: AtomicU64,
    pub reads: AtomicU64,
    pub writes: AtomicU64,
    pub flushes: AtomicU64,
    pub other_io: AtomicU64,
    pub invalid_io: AtomicU64,
    pub sgl_commands: AtomicU64,
    pub sq_doorbell_writes: AtomicU64,
    pub cq_doorbell_writes: AtomicU64,
    pub shadow_doorbell_updates: AtomicU64,
    pub invalid_doorbell_writes: AtomicU64,
    pub dma_errors: AtomicU64,
    pub completions_posted: AtomicU64,
    pub cq_full_waits: AtomicU64,
    pub interrupts_signalled: AtomicU64,
    pub interrupts_lost: AtomicU64,
    pub dma_blocked: AtomicU64,
    pub commands_deferred: AtomicU64,
    pub deferred_executed: AtomicU64,
    pub deferred_cancelled: AtomicU64,
}

/// Adds one to a counter. The device thread is the only writer, so a load and a store suffice
/// (no locked read-modify-write on the hot path).
#[inline(always)]
pub(crate) fn bump(counter: &AtomicU64) {
    counter.store(counter.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
}

impl Counters {
    pub fn snapshot(&self) -> SimStats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        SimStats {
            admin_commands: get(&self.admin_commands),
            reads: get(&self.reads),
            writes: get(&self.writes),
            flushes: get(&self.flushes),
            other_io: get(&self.other_io),
            invalid_io: get(&self.invalid_io),
            sgl_commands: get(&self.sgl_commands),
            sq_doorbell_writes: get(&self.sq_doorbell_writes),
            cq_doorbell_writes: get(&self.cq_doorbell_writes),
            shadow_doorbell_updates: get(&self.shadow_doorbell_updates),
            invalid_doorbell_writes: get(&self.invalid_doorbell_writes),
            dma_errors: get(&self.dma_errors),
            completions_posted: get(&self.completions_posted),
            cq_full_waits: get(&self.cq_full_waits),
            interrupts_signalled: get(&self.interrupts_signalled),
            interrupts_lost: get(&self.interrupts_lost),
            dma_blocked: get(&self.dma_blocked),
            commands_deferred: get(&self.commands_deferred),
            deferred_executed: get(&self.deferred_executed),
            deferred_cancelled: get(&self.deferred_cancelled),
        }
    }
}
