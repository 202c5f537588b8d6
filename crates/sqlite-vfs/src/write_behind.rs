//! Write-behind I/O for [`crate::NvmeDevice`]: several writes in flight on one queue pair,
//! from a small pool of buffers allocated once, with `flush` as the barrier.
//!
//! How a write travels:
//! - It is copied into the *open* buffer when it starts inside, or right at the end of, the
//!   range that buffer collects (appending journal records and WAL frames, and rewriting the
//!   block a record straddles, merge into one command), else the open buffer is submitted and
//!   the write starts a new one. A write returns once copied: nothing waits for the device.
//! - A buffer is submitted only when no write in flight overlaps it (NVMe does not order
//!   commands of one queue: two overlapping writes in flight could land in either order), and
//!   a read first submits an overlapping open buffer and waits for overlapping writes in
//!   flight, so it sees every write before it (read-your-writes).
//! - [`WriteBehind::flush`] is the barrier: it submits the open buffer, waits for every write
//!   in flight, then issues an NVMe Flush (Base §7.1, which covers the writes completed
//!   before it). When the open buffer is the only write since the last barrier, it goes out
//!   with FUA instead (NVM CS §3.3.6: durable at its completion) and no Flush is needed: one
//!   command and one round trip instead of two.
//! - Waiting (a barrier, a read, an overlapping write, a full pool) polls; on a queue pair
//!   with an MSI-X vector (a controller opened with `ControllerOptions::interrupts`, e.g. the
//!   extension's URI parameter `irq=on`) it polls [`SPIN_POLLS`] times and then blocks on the
//!   vector until a completion arrives, so the waiting thread leaves the CPU to others (under
//!   an emulator, to the device itself). What is waited for, and when, is the same either way.
//! - A write that fails in flight is remembered and returned by the next `write` or `flush`
//!   (SQLite's next `xWrite`/`xSync` then fails with `SQLITE_IOERR`); a failed write also
//!   counts as unflushed (its range is indeterminate), so the next barrier still flushes.
//!
//! INVARIANT: every buffer is in exactly one place: `free`, `open`, or owned by a request in
//! flight (recorded in `flight`); a completion without its buffer (the device may still
//! access it: a timeout) leaves it leaked, and the pool is one buffer smaller from then on.

use nvme_device::{AnyQueuePair, IoQueue};
use nvme_driver::{Completion, DmaBuffer, Namespace, WriteFlags};

use crate::error::{Error, Result};

/// Buffers in the pool: the most writes in flight at once (plus the open one).
pub(crate) const SLOTS: usize = 16;
/// Bytes per buffer (the largest command the pool issues; smaller when MDTS is).
pub(crate) const SLOT_BYTES: usize = 128 * 1024;

/// Empty polls before a wait blocks on the completion queue's interrupt (when it has one).
pub(crate) const SPIN_POLLS: u32 = 64;
/// Longest single block on the interrupt; the wait then polls again (the queue pair's
/// command timeouts are checked by its polls).
const BLOCK_SLICE: std::time::Duration = std::time::Duration::from_millis(10);

/// User data of the one Flush or Read waited for at a time (write slots use `0..SLOTS`).
const FLUSH_TAG: u64 = u64::MAX;
const READ_TAG: u64 = u64::MAX - 1;

/// Counters of the write-behind path.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct IoStats {
    /// `BlockDevice::write` calls.
    pub writes: u64,
    /// Of those, how many were copied into an open buffer another write had started.
    pub merged: u64,
    /// NVMe Write commands submitted.
    pub write_commands: u64,
    /// Of those, with FUA (a barrier that needed no Flush).
    pub fua_writes: u64,
    /// NVMe Flush commands.
    pub flush_commands: u64,
    /// NVMe Read commands.
    pub read_commands: u64,
    /// Most write commands in flight at once.
    pub max_in_flight: u64,
    /// Times a submission or read waited for an overlapping write in flight.
    pub overlap_waits: u64,
    /// Times a wait went to block on the completion queue's interrupt (0 without one).
    pub blocked_waits: u64,
    /// Writes that failed in flight (each returned by a later `write` or `flush`).
    pub failed_writes: u64,
}

/// The buffer being filled, not yet submitted.
struct Open {
    buf: DmaBuffer,
    lba: u64,
    blocks: u32,
}

/// A write in flight: its range.
#[derive(Clone, Copy)]
struct Flight {
    lba: u64,
    blocks: u32,
}

impl Flight {
    fn overlaps(&self, lba: u64, blocks: u32) -> bool {
        lba < self.lba + u64::from(self.blocks) && self.lba < lba + u64::from(blocks)
    }
}

/// The write-behind engine of one queue pair and namespace.
pub(crate) struct WriteBehind {
    // Field order is drop order: the queue pair goes before the buffers (after `Drop` has
    // waited for every request).
    qp: AnyQueuePair,
    ns: Namespace,
    free: Vec<DmaBuffer>,
    open: Option<Open>,
    flight: [Option<Flight>; SLOTS],
    in_flight: usize,
    /// The completion of the waited Flush or Read.
    waited: Option<Completion>,
    /// The first write failure not yet returned.
    error: Option<nvme_driver::Error>,
    /// A write completed (or failed) since the last barrier without FUA.
    unflushed: bool,
    /// Blocks per buffer.
    slot_blocks: u32,
    block_size: usize,
    fua: bool,
    stats: IoStats,
}

impl WriteBehind {
    /// The pool for `qp` on `ns`: `SLOTS` buffers of `slot_bytes` (a multiple of the block
    /// size) carved from one allocation.
    pub(crate) fn new(
        qp: AnyQueuePair,
        ns: Namespace,
        mut pool: DmaBuffer,
        slot_bytes: usize,
    ) -> Self {
        let mut free = Vec::with_capacity(SLOTS);
        for _ in 0..SLOTS {
            let Ok((slot, rest)) = pool.split_at(slot_bytes) else {
                break;
            };
            free.push(slot);
            pool = rest;
        }
        let block_size = ns.block_size() as usize;
        Self {
            qp,
            ns,
            free,
            open: None,
            flight: [None; SLOTS],
            in_flight: 0,
            waited: None,
            error: None,
            unflushed: false,
            slot_blocks: (slot_bytes / block_size) as u32,
            block_size,
            fua: true,
            stats: IoStats::default(),
        }
    }

    pub(crate) fn namespace(&self) -> &Namespace {
        &self.ns
    }

    pub(crate) fn stats(&self) -> IoStats {
        self.stats
    }

    /// Whether a barrier may use FUA for a lone write (default on).
    pub(crate) fn set_fua(&mut self, on: bool) {
        self.fua = on;
    }

    /// Hands finished requests back: buffers to the pool, failures to `error`; returns how
    /// many completions it took.
    fn reap(&mut self) -> usize {
        let Self {
            qp,
            free,
            flight,
            in_flight,
            waited,
            error,
            unflushed,
            stats,
            ..
        } = self;
        qp.poll(|c: Completion| {
            let id = c.user_data as usize;
            if id < SLOTS && flight[id].is_some() {
                flight[id] = None;
                *in_flight -= 1;
                if let Some(b) = c.buffer {
                    free.push(b);
                }
                match c.result {
                    Ok(_) => {}
                    Err(e) => {
                        stats.failed_writes += 1;
                        *unflushed = true;
                        if error.is_none() {
                            *error = Some(e);
                        }
                    }
                }
            } else if c.user_data == FLUSH_TAG || c.user_data == READ_TAG {
                *waited = Some(c);
            } else {
                log::warn!(
                    "write-behind: completion with unknown user data {}",
                    c.user_data
                );
            }
        })
    }

    /// One step of a wait: a poll; with an interrupt vector, after [`SPIN_POLLS`] empty polls,
    /// a block on it (up to [`BLOCK_SLICE`]) and another poll. A failed block only falls back
    /// to polling.
    fn wait_step(&mut self) {
        if self.reap() > 0 {
            return;
        }
        let Some(qp) = self.qp.as_pcie_mut() else {
            return;
        };
        if !qp.has_interrupts() {
            return;
        }
        for _ in 1..SPIN_POLLS {
            if self.reap() > 0 {
                return;
            }
        }
        self.stats.blocked_waits += 1;
        if let Some(qp) = self.qp.as_pcie_mut() {
            // An error (the eventfd) leaves polling, which the caller's loop goes on with.
            let _ = qp.wait_for_completion(BLOCK_SLICE);
        }
        self.reap();
    }

    fn overlapping_in_flight(&self, lba: u64, blocks: u32) -> bool {
        self.in_flight > 0
            && self
                .flight
                .iter()
                .flatten()
                .any(|f| f.overlaps(lba, blocks))
    }

    /// Waits until no write in flight overlaps `lba..lba + blocks`.
    fn wait_overlap(&mut self, lba: u64, blocks: u32) {
        if self.overlapping_in_flight(lba, blocks) {
            self.stats.overlap_waits += 1;
            while self.overlapping_in_flight(lba, blocks) {
                self.wait_step();
            }
        }
    }

    /// Waits for every write in flight.
    fn drain(&mut self) {
        while self.in_flight > 0 {
            self.wait_step();
        }
    }

    /// A free buffer, waiting for a write to finish when none is.
    fn take_free(&mut self) -> Result<DmaBuffer> {
        loop {
            if let Some(b) = self.free.pop() {
                return Ok(b);
            }
            if self.in_flight == 0 {
                return Err(Error::BuffersLost);
            }
            self.wait_step();
        }
    }

    /// Submits the open buffer (with FUA when `fua`).
    fn submit_open(&mut self, fua: bool) -> Result<()> {
        let Some(open) = self.open.take() else {
            return Ok(());
        };
        self.wait_overlap(open.lba, open.blocks);
        // At most SLOTS buffers exist and this one is not in flight: an id is free.
        let id = self
            .flight
            .iter()
            .position(Option::is_none)
            .expect("fewer writes in flight than buffers");
        let flags = if fua {
            WriteFlags::FUA
        } else {
            WriteFlags::NONE
        };
        match self
            .qp
            .submit_write(&self.ns, open.lba, open.blocks, open.buf, flags, id as u64)
        {
            Ok(()) => {
                self.flight[id] = Some(Flight {
                    lba: open.lba,
                    blocks: open.blocks,
                });
                self.in_flight += 1;
                self.stats.write_commands += 1;
                self.stats.fua_writes += u64::from(fua);
                self.stats.max_in_flight = self.stats.max_in_flight.max(self.in_flight as u64);
                if !fua {
                    self.unflushed = true;
                }
                Ok(())
            }
            Err(f) => {
                if let Some(b) = f.buffer {
                    self.free.push(b);
                }
                Err(Error::driver("writing", f.error))
            }
        }
    }

    /// The first failure of a write in flight, once.
    fn take_error(&mut self) -> Result<()> {
        match self.error.take() {
            Some(e) => Err(Error::driver(
                "writing (an earlier write, completed late)",
                e,
            )),
            None => Ok(()),
        }
    }

    /// Queues `data` (whole blocks) at `lba`; returns before the device has it.
    pub(crate) fn write(&mut self, lba: u64, data: &[u8]) -> Result<()> {
        self.reap();
        self.take_error()?;
        let bs = self.block_size;
        let mut at = lba;
        for piece in data.chunks(self.slot_blocks as usize * bs) {
            let blocks = (piece.len() / bs) as u32;
            self.stats.writes += 1;
            if let Some(o) = &mut self.open {
                let end = o.lba + u64::from(o.blocks);
                if at >= o.lba
                    && at <= end
                    && at + u64::from(blocks) - o.lba <= u64::from(self.slot_blocks)
                {
                    let off = (at - o.lba) as usize * bs;
                    o.buf[off..off + piece.len()].copy_from_slice(piece);
                    o.blocks = o.blocks.max((at - o.lba) as u32 + blocks);
                    self.stats.merged += 1;
                    at += u64::from(blocks);
                    continue;
                }
            }
            self.submit_open(false)?;
            let mut buf = self.take_free()?;
            buf[..piece.len()].copy_from_slice(piece);
            self.open = Some(Open {
                buf,
                lba: at,
                blocks,
            });
            at += u64::from(blocks);
        }
        Ok(())
    }

    /// Reads whole blocks at `lba` into `buf`, after every earlier write to them.
    pub(crate) fn read(&mut self, lba: u64, buf: &mut [u8]) -> Result<()> {
        let bs = self.block_size;
        let mut at = lba;
        for piece in buf.chunks_mut(self.slot_blocks as usize * bs) {
            let blocks = (piece.len() / bs) as u32;
            if self.open.as_ref().is_some_and(|o| {
                Flight {
                    lba: o.lba,
                    blocks: o.blocks,
                }
                .overlaps(at, blocks)
            }) {
                self.submit_open(false)?;
            }
            self.wait_overlap(at, blocks);
            let b = self.take_free()?;
            if let Err(f) = self.qp.submit_read(&self.ns, at, blocks, b, READ_TAG) {
                if let Some(b) = f.buffer {
                    self.free.push(b);
                }
                return Err(Error::driver("reading", f.error));
            }
            self.stats.read_commands += 1;
            let c = self.wait_tagged();
            if let Some(b) = c.buffer {
                if c.result.is_ok() {
                    piece.copy_from_slice(&b[..piece.len()]);
                }
                self.free.push(b);
            }
            c.result.map_err(|e| Error::driver("reading", e))?;
            at += u64::from(blocks);
        }
        Ok(())
    }

    fn wait_tagged(&mut self) -> Completion {
        loop {
            if let Some(c) = self.waited.take() {
                return c;
            }
            self.wait_step();
        }
    }

    /// The barrier: every write so far is durable when this returns `Ok`. A failure of an
    /// earlier write is returned here (after the Flush, which still makes what landed
    /// durable).
    pub(crate) fn flush(&mut self) -> Result<()> {
        self.reap();
        let lone = self.fua && self.open.is_some() && self.in_flight == 0 && !self.unflushed;
        let submitted = self.submit_open(lone);
        self.drain();
        submitted?;
        if !(lone && self.error.is_none()) {
            if let Err(e) = self.qp.submit_flush(&self.ns, FLUSH_TAG) {
                return Err(Error::driver("flushing", e));
            }
            self.stats.flush_commands += 1;
            let c = self.wait_tagged();
            c.result.map_err(|e| Error::driver("flushing", e))?;
            self.unflushed = false;
        }
        self.take_error()
    }
}

impl Drop for WriteBehind {
    fn drop(&mut self) {
        // Nothing unsynced is promised durable, but what was accepted still goes out, and no
        // buffer may be freed while the device can reach it: wait for every request.
        if self.submit_open(false).is_err() {
            log::warn!("write-behind: the last buffered write could not be submitted");
        }
        self.drain();
        if let Some(e) = self.error.take() {
            log::warn!("write-behind: a write failed after its last sync: {e}");
        }
    }
}
