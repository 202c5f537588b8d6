//! Fault injection: knobs a test flips while the driver runs. All are atomics read by the
//! device thread at the point where the fault applies; counted faults apply to the next `n`
//! events and then disarm themselves.

use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nvme_spec::regs::{Csts, ShutdownStatus, CSTS};
use nvme_spec::status::Status;

use crate::regs::RegisterBlock;

/// XOR mask applied to the command identifier of a corrupted completion: flips the top bit, so
/// the identifier is either beyond any queue depth or carries the wrong generation bit.
pub const CORRUPT_CID_MASK: u16 = 0x8000;
/// XOR mask applied to the SQ identifier of a completion with a wrong SQ ID (no such queue).
pub const WRONG_SQID_MASK: u16 = 0xffff;

/// How [`Faults::delay_execution_with`] defers I/O commands.
///
/// A deferred command is fetched like any other (the SQ head moves past it and later commands
/// of the same queue go on executing), but it touches nothing (no PRP list, DSM range list,
/// data buffer, metadata buffer or medium access) until `delay` after the fetch; then it
/// executes against whatever memory the PRPs in its SQE address *at that time*.
///
/// A Delete I/O Submission Queue of its queue or a controller reset (CC.EN 1 -> 0) cancels
/// it: it never executes. Delete I/O SQ posts its completion with Command Aborted due to SQ
/// Deletion (when `complete` is set); a reset posts nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExecutionDelay {
    /// Time from fetch to execution.
    pub delay: Duration,
    /// Post the completion after the late execution. When false the command still executes
    /// late but its completion is never posted (the driver's command timeout must fire).
    pub complete: bool,
    /// Abort (admin opcode 08h) naming the command while it waits cancels it: it never
    /// executes, its completion is posted with Command Abort Requested (SCT 0, SC 07h, even
    /// when `complete` is false) and Abort's Dword 0 bit 0 is 0. When false, Abort reports
    /// "not aborted" (bit 0 = 1) and the command still executes late.
    pub abortable: bool,
}

impl ExecutionDelay {
    /// Executes `delay` after the fetch, posts the completion, can be aborted.
    pub const fn new(delay: Duration) -> Self {
        Self {
            delay,
            complete: true,
            abortable: true,
        }
    }

    /// The same, but the completion is never posted.
    pub const fn without_completion(self) -> Self {
        Self {
            complete: false,
            ..self
        }
    }

    /// The same, but Abort does not cancel the command.
    pub const fn not_abortable(self) -> Self {
        Self {
            abortable: false,
            ..self
        }
    }
}

/// Fault injection switches of one emulated controller (see [`crate::SimController::faults`]).
pub struct Faults {
    regs: Arc<RegisterBlock>,
    never_ready: AtomicBool,
    fatal: AtomicBool,
    removed: AtomicBool,
    /// Asynchronous events waiting for an outstanding AER (completion dword 0 each).
    events: std::sync::Mutex<std::collections::VecDeque<u32>>,
    corrupt_cid: AtomicU32,
    duplicate: AtomicU32,
    wrong_sqid: AtomicU32,
    drop_completions: AtomicU32,
    fail_io: AtomicU32,
    fail_io_status: AtomicU16,
    delay_ns: AtomicU64,
    delay_execution: AtomicU32,
    execution_delay: Mutex<ExecutionDelay>,
    stuck_on_disable: AtomicBool,
    bogus_sq_head: AtomicU32,
    lose_write: AtomicBool,
    lose_write_at: Mutex<(u32, u64)>,
}

/// Decrements `counter` if it is positive; true when a fault was consumed.
fn take(counter: &AtomicU32) -> bool {
    // Fast path: a relaxed load avoids a read-modify-write per command when nothing is armed.
    counter.load(Ordering::Relaxed) != 0
        && counter
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |n| n.checked_sub(1))
            .is_ok()
}

impl Faults {
    pub(crate) fn new(regs: Arc<RegisterBlock>) -> Self {
        Self {
            regs,
            never_ready: AtomicBool::new(false),
            fatal: AtomicBool::new(false),
            removed: AtomicBool::new(false),
            events: std::sync::Mutex::new(std::collections::VecDeque::new()),
            corrupt_cid: AtomicU32::new(0),
            duplicate: AtomicU32::new(0),
            wrong_sqid: AtomicU32::new(0),
            drop_completions: AtomicU32::new(0),
            fail_io: AtomicU32::new(0),
            fail_io_status: AtomicU16::new(0),
            delay_ns: AtomicU64::new(0),
            delay_execution: AtomicU32::new(0),
            execution_delay: Mutex::new(ExecutionDelay::new(Duration::ZERO)),
            stuck_on_disable: AtomicBool::new(false),
            bogus_sq_head: AtomicU32::new(0),
            lose_write: AtomicBool::new(false),
            lose_write_at: Mutex::new((0, 0)),
        }
    }

    /// From now on the controller never sets CSTS.RDY after CC.EN is set (the driver must time
    /// out after CAP.TO).
    pub fn never_ready(&self) {
        self.never_ready.store(true, Ordering::Release);
    }

    /// Sets CSTS.CFS (Controller Fatal Status) immediately; the controller stops processing
    /// commands until the host resets it (CC.EN 1 -> 0), which clears the fault.
    pub fn set_fatal(&self) {
        self.fatal.store(true, Ordering::Release);
        self.regs
            .set_bits(CSTS, Csts::new(false, true, ShutdownStatus::Normal).0);
    }

    /// The next `n` completions carry a command identifier that is not in flight
    /// (`cid ^` [`CORRUPT_CID_MASK`]).
    pub fn corrupt_next_cid(&self, n: u32) {
        self.corrupt_cid.store(n, Ordering::Release);
    }

    /// The next completion is posted twice (two consecutive CQ entries).
    pub fn duplicate_next_completion(&self) {
        self.duplicate.store(1, Ordering::Release);
    }

    /// The next completion reports an SQ identifier of a queue that does not exist
    /// (`sqid ^` [`WRONG_SQID_MASK`]).
    pub fn wrong_sqid_next(&self) {
        self.wrong_sqid.store(1, Ordering::Release);
    }

    /// The next `n` commands are executed but their completions are never posted, so the
    /// driver's per-command timeout must fire.
    pub fn drop_next_completions(&self, n: u32) {
        self.drop_completions.store(n, Ordering::Release);
    }

    /// The next `n` I/O (non-admin) commands complete with `status` without being executed.
    pub fn fail_next_io(&self, status: Status, n: u32) {
        self.fail_io_status.store(status.0, Ordering::Release);
        self.fail_io.store(n, Ordering::Release);
    }

    /// Every completion is posted no earlier than `delay` after its command was fetched
    /// (`Duration::ZERO` turns the delay off). Order within a completion queue is kept.
    pub fn delay_completions(&self, delay: Duration) {
        self.delay_ns.store(
            u64::try_from(delay.as_nanos()).unwrap_or(u64::MAX),
            Ordering::Release,
        );
    }

    /// The next `n` I/O (non-admin) commands fetched execute `delay` after their fetch, out of
    /// order with later commands, and then post their completion; see [`ExecutionDelay`].
    pub fn delay_execution(&self, n: u32, delay: Duration) {
        self.delay_execution_with(n, ExecutionDelay::new(delay));
    }

    /// The next `n` I/O (non-admin) commands fetched are deferred as `how` says (replacing
    /// any earlier arming; `n = 0` disarms).
    pub fn delay_execution_with(&self, n: u32, how: ExecutionDelay) {
        *self
            .execution_delay
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = how;
        self.delay_execution.store(n, Ordering::Release);
    }

    /// From now on a controller disable (CC.EN 1 -> 0) never finishes: CSTS.RDY stays 1, the
    /// queues stay and the controller keeps fetching and executing commands and posting
    /// completions, ignoring CC, until [`Faults::unstick`]. Applies to disables seen after
    /// the call.
    pub fn stuck_on_disable(&self) {
        self.stuck_on_disable.store(true, Ordering::Release);
    }

    /// Clears [`Faults::stuck_on_disable`]; a pending disable then completes (reset, RDY = 0).
    pub fn unstick(&self) {
        self.stuck_on_disable.store(false, Ordering::Release);
    }

    /// The next `n` completions (any queue) report an SQ Head Pointer that is in range
    /// (`< queue size`) but outside the entries the host submitted: the submitting SQ's
    /// `(tail + 1) % size`, one past the last entry the host made available. (With the SQ
    /// full from the host's point of view every value is plausible; the fault still uses
    /// `tail + 1`.)
    pub fn bogus_sq_head(&self, n: u32) {
        self.bogus_sq_head.store(n, Ordering::Release);
    }

    /// The next Write command to namespace `nsid` whose starting LBA is `slba` completes
    /// successfully but moves no data to the medium (a lost write: the blocks keep their old
    /// content). Replaces any earlier arming.
    pub fn lose_write_at(&self, nsid: u32, slba: u64) {
        *self.lose_write_at.lock().unwrap_or_else(|e| e.into_inner()) = (nsid, slba);
        self.lose_write.store(true, Ordering::Release);
    }

    /// Whether the write at (`nsid`, `slba`) is the one to lose (disarms the fault if so).
    pub(crate) fn take_lost_write(&self, nsid: u32, slba: u64) -> bool {
        if !self.lose_write.load(Ordering::Relaxed) {
            return false;
        }
        let target = self.lose_write_at.lock().unwrap_or_else(|e| e.into_inner());
        *target == (nsid, slba) && self.lose_write.swap(false, Ordering::AcqRel)
    }

    pub(crate) fn take_execution_delay(&self) -> Option<ExecutionDelay> {
        take(&self.delay_execution).then(|| {
            *self
                .execution_delay
                .lock()
                .unwrap_or_else(|e| e.into_inner())
        })
    }

    pub(crate) fn is_stuck_on_disable(&self) -> bool {
        self.stuck_on_disable.load(Ordering::Acquire)
    }

    pub(crate) fn take_bogus_sq_head(&self) -> bool {
        take(&self.bogus_sq_head)
    }

    pub(crate) fn is_never_ready(&self) -> bool {
        self.never_ready.load(Ordering::Acquire)
    }

    /// Raises an asynchronous event: the oldest outstanding Asynchronous Event Request (or
    /// the next one the host posts) completes with dword 0 = `event_type` (bits 2:0) |
    /// `info` << 8 | `log_page` << 16 (NVMe Base 2.0 §5.2).
    pub fn raise_async_event(&self, event_type: u8, info: u8, log_page: u8) {
        let dw0 = u32::from(event_type & 0x7) | u32::from(info) << 8 | u32::from(log_page) << 16;
        self.events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push_back(dw0);
    }

    pub(crate) fn take_async_event(&self) -> Option<u32> {
        self.events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pop_front()
    }

    /// Surprise removal: from now on every register reads all ones and the device does
    /// nothing (no fetch, no DMA, no completion), as when a device is unplugged or its link
    /// goes down.
    pub fn remove_device(&self) {
        self.removed.store(true, Ordering::Release);
        self.regs.fill_ones();
    }

    pub(crate) fn is_removed(&self) -> bool {
        self.removed.load(Ordering::Acquire)
    }

    pub(crate) fn fill_ones(&self) {
        self.regs.fill_ones();
    }

    pub(crate) fn is_fatal(&self) -> bool {
        self.fatal.load(Ordering::Acquire)
    }

    pub(crate) fn clear_fatal(&self) {
        self.fatal.store(false, Ordering::Release);
    }

    pub(crate) fn take_corrupt_cid(&self) -> bool {
        take(&self.corrupt_cid)
    }

    pub(crate) fn take_duplicate(&self) -> bool {
        take(&self.duplicate)
    }

    pub(crate) fn take_wrong_sqid(&self) -> bool {
        take(&self.wrong_sqid)
    }

    pub(crate) fn take_drop(&self) -> bool {
        take(&self.drop_completions)
    }

    pub(crate) fn take_fail_io(&self) -> Option<Status> {
        take(&self.fail_io).then(|| Status(self.fail_io_status.load(Ordering::Acquire)))
    }

    pub(crate) fn delay(&self) -> Duration {
        Duration::from_nanos(self.delay_ns.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counted_faults_disarm_after_n() {
        let faults = Faults::new(RegisterBlock::new());
        assert!(!faults.take_drop());
        faults.drop_next_completions(2);
        assert!(faults.take_drop());
        assert!(faults.take_drop());
        assert!(!faults.take_drop());
        faults.fail_next_io(Status(0x0281), 1);
        assert_eq!(faults.take_fail_io(), Some(Status(0x0281)));
        assert_eq!(faults.take_fail_io(), None);
        faults.lose_write_at(1, 64);
        assert!(!faults.take_lost_write(1, 8));
        assert!(!faults.take_lost_write(2, 64));
        assert!(faults.take_lost_write(1, 64));
        assert!(!faults.take_lost_write(1, 64));
    }

    #[test]
    fn set_fatal_sets_cfs_at_once() {
        let regs = RegisterBlock::new();
        let faults = Faults::new(regs.clone());
        faults.set_fatal();
        assert!(Csts(regs.load(CSTS)).cfs());
        assert!(faults.is_fatal());
    }
}
