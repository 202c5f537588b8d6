//! I/O queue pairs over NVMe/TCP with the submit/poll API and the completion and error
//! types of the PCIe `QueuePair` (`nvme_core::{Completion, Error, IoFailure}`), so code
//! written against one reads the same against the other.

use std::sync::Arc;
use std::time::{Duration, Instant};

use nvme_core::command::{CommandContext, DataDirection};
use nvme_core::{
    split::SplitPlan, Completion, DmaBuffer, Error, IoFailure, Namespace, NvmCommand,
    QueuePairOptions, Result, TimeoutAction,
};
use nvme_spec::command;

use crate::controller::{generation, Inner, STATE_FAILED, STATE_LOST, STATE_RESETTING};
use crate::error::TcpError;
use crate::keep_alive::CHECKS_PER_KATO;
use crate::queue::{Queue, TcpQueueStats, Waiter};

mod vectored;

/// Expired commands handled per clock tick (Aborts sent).
const ABORTS_PER_TICK: usize = 8;
/// Pause of a synchronous caller while a controller reset runs.
const RESET_WAIT_PAUSE: Duration = Duration::from_millis(1);
/// Busy polls of a synchronous caller before it pauses between polls.
const SYNC_SPIN_POLLS: u32 = 64;
/// Pause between polls of a synchronous caller that saw nothing.
const SYNC_IDLE_PAUSE: Duration = Duration::from_micros(50);

/// Polls between keep-alive checks (each check reads the clock; the admin queue is
/// try-locked only when the check is due, every KATO / `CHECKS_PER_KATO`).
const POLLS_PER_KEEP_ALIVE_CHECK: u32 = 32;

/// An NVMe/TCP I/O queue pair: one TCP connection. `Send` but not `Sync`: one thread owns
/// it and drives it with [`TcpQueuePair::poll`].
pub struct TcpQueuePair {
    q: Queue,
    depth: u32,
    max_completions: usize,
    polls_since_keep_alive: u32,
    /// When the next keep-alive check is due.
    keep_alive_due: Instant,
    ctrl: Arc<Inner>,
    /// The controller's state word as this pair last acted on it.
    seen: u64,
    /// Reset generation whose teardown this pair has done.
    torn_down: u64,
    /// Generation of the association the requests kept by the last teardown were sent on.
    sent_on: u64,
    /// A teardown kept requests that wait for the reset's outcome to be settled.
    settle_pending: bool,
    /// Keep requests in flight across a reconnect and send them again.
    resubmit: bool,
    /// Timeout policy of the controller.
    action: TimeoutAction,
}

impl std::fmt::Debug for TcpQueuePair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TcpQueuePair")
            .field("qid", &self.q.qid)
            .field("depth", &self.depth)
            .field("in_flight", &self.q.in_flight())
            .finish_non_exhaustive()
    }
}

impl TcpQueuePair {
    pub(crate) fn new(
        q: Queue,
        ctrl: Arc<Inner>,
        depth: u32,
        options: &QueuePairOptions,
        state: u64,
    ) -> Self {
        Self {
            q,
            depth,
            max_completions: options.max_completions_per_poll.max(1),
            polls_since_keep_alive: 0,
            keep_alive_due: Instant::now(),
            action: ctrl.options.timeout_action,
            ctrl,
            seen: state,
            torn_down: generation(state),
            sent_on: generation(state),
            settle_pending: false,
            resubmit: options.resubmit_after_reset,
        }
    }

    /// Records the state word this pair acted on, for the queue's failure handling.
    fn watch(&mut self, state: u64) {
        if let Some((_, seen)) = &mut self.q.state_watch {
            *seen = state;
        }
    }

    /// Whether the controller's state moved since this pair last looked (one load).
    #[inline]
    fn state_changed(&self) -> bool {
        self.ctrl.state() != self.seen
    }

    /// Acts on a new controller state word: after a reset started, closes this pair's
    /// connection once and keeps its in-flight requests; while the reset runs, refuses with
    /// `Error::Resetting`; once it is done, settles them with what the reset learnt
    /// (`crate::reset`): writes whose commands may still run on the target complete with
    /// `Error::OutcomeUnknown`, the others with the retryable `Error::Reset` or, with
    /// `resubmit_after_reset`, are sent again after the pair reconnects (same queue id, the
    /// new controller id); after a failed reset, refuses with `Error::Failed`. When the
    /// association was declared lost (keep-alive), closes the connection and completes every
    /// request with the reason (`Error::Transport`).
    #[cold]
    fn sync_state(&mut self) -> Result<()> {
        let state = self.ctrl.state();
        if state == self.seen {
            return Ok(());
        }
        if generation(state) != self.torn_down {
            self.sent_on = self.torn_down;
            self.torn_down = generation(state);
            self.close_for_reset();
            self.settle_pending = true;
        }
        if state & STATE_RESETTING != 0 {
            return Err(Error::Resetting {
                controller: self.ctrl.name.to_string(),
            });
        }
        if self.settle_pending {
            self.settle_pending = false;
            self.settle(state & STATE_FAILED == 0);
        }
        if state & STATE_LOST != 0 {
            return Err(self.close_lost(state));
        }
        if state & STATE_FAILED != 0 {
            let name = self.ctrl.name.clone();
            self.q.drop_kept(|| Error::Failed {
                controller: name.to_string(),
            });
            return Err(Error::Failed {
                controller: self.ctrl.name.to_string(),
            });
        }
        self.seen = state;
        self.watch(state);
        self.connect_again(state)
    }

    /// Closes the connection for a controller reset, keeping every request that has not
    /// timed out until the reset's outcome is known ([`TcpQueuePair::settle`]).
    fn close_for_reset(&mut self) {
        let name = self.ctrl.name.clone();
        let reason = TcpError::ClosedForReconnect {
            addr: self.ctrl.addr,
            qid: self.q.qid,
        };
        self.q.abandon(true, reason, || Error::Reset {
            controller: name.to_string(),
        });
    }

    /// Settles the requests kept across a reset that is now over (`resend`: it succeeded,
    /// so kept requests may go out again).
    fn settle(&mut self, resend: bool) {
        let unknown = self
            .ctrl
            .unconfirmed
            .load(std::sync::atomic::Ordering::Acquire)
            > self.sent_on;
        let name = self.ctrl.name.clone();
        // Kept to be sent again, but the reset failed: as before, `Error::Failed`.
        let failed = self.resubmit && !resend;
        self.q.settle_kept(
            self.resubmit && resend,
            unknown,
            || {
                let controller = name.to_string();
                if failed {
                    Error::Failed { controller }
                } else {
                    Error::Reset { controller }
                }
            },
            |command| Error::OutcomeUnknown {
                controller: name.to_string(),
                command,
                why: "the old association neither answered CC.EN = 0 with CSTS.RDY = 0 nor \
                      reported a Command Quiesce Time",
            },
        );
    }

    /// The association was declared lost: closes this pair's connection and completes what
    /// it holds with the reason. Returns the error later submissions get.
    fn close_lost(&mut self, state: u64) -> Error {
        self.seen = state;
        self.watch(state);
        let reason = self.ctrl.lost_reason().unwrap_or_else(|| {
            std::sync::Arc::new(TcpError::ClosedForReconnect {
                addr: self.ctrl.addr,
                qid: self.q.qid,
            })
        });
        self.q.close_lost(reason);
        self.q.closed_error().expect("a closed queue has its error")
    }

    /// Closes the connection for a reconnect (see [`Queue::abandon`]).
    fn abandon(&mut self) {
        let name = self.ctrl.name.clone();
        let reason = TcpError::ClosedForReconnect {
            addr: self.ctrl.addr,
            qid: self.q.qid,
        };
        self.q.abandon(self.resubmit, reason, || Error::Reset {
            controller: name.to_string(),
        });
    }

    /// A new connection for this queue id (to the association of state word `state`), then
    /// kept requests go out again. On failure the kept requests complete with the retryable
    /// `Error::Reset` and the queue stays closed — unless a newer reset has started
    /// meanwhile (its association replaced the one connected to): then the result is the
    /// retryable `Error::Resetting`, kept requests stay kept, and the pair follows the new
    /// reset at its next submission or poll.
    fn connect_again(&mut self, state: u64) -> Result<()> {
        match self.ctrl.connect_io(self.q.qid, self.depth) {
            Ok((stream, neg)) => {
                self.q.attach(stream, neg);
                let again = self.q.resend();
                log::info!(
                    "{}: queue {} reconnected (controller id {}); {again} requests sent again",
                    self.ctrl.name,
                    self.q.qid,
                    self.ctrl.cntlid.load(std::sync::atomic::Ordering::Acquire)
                );
                Ok(())
            }
            Err(e) if self.ctrl.state() != state => {
                log::info!(
                    "{}: queue {} reconnect overtaken by another reset: {e}",
                    self.ctrl.name,
                    self.q.qid
                );
                Err(Error::Resetting {
                    controller: self.ctrl.name.to_string(),
                })
            }
            Err(e) => {
                log::error!(
                    "{}: queue {} could not reconnect: {e}",
                    self.ctrl.name,
                    self.q.qid
                );
                let name = self.ctrl.name.clone();
                self.q.drop_kept(|| Error::Reset {
                    controller: name.to_string(),
                });
                Err(e)
            }
        }
    }

    /// Connects this queue pair again on a new TCP connection (ICReq/ICResp, Fabrics
    /// Connect with the same queue id and the controller's current id), for instance after
    /// the target closed it. Requests in flight on the old connection complete with the
    /// retryable `Error::Reset` (buffers returned), or are sent again on the new one when
    /// the pair was created with `QueuePairOptions::resubmit_after_reset`. After a
    /// controller reset ([`crate::TcpController::reset`]) pairs reconnect by themselves at
    /// their next submission or poll; this is for a pair whose own connection was lost while
    /// the controller stayed up, or to retry after a failed reconnect.
    pub fn reconnect(&mut self) -> Result<()> {
        let state = self.ctrl.state();
        if state & STATE_RESETTING != 0 {
            return Err(Error::Resetting {
                controller: self.ctrl.name.to_string(),
            });
        }
        if state & (STATE_FAILED | STATE_LOST) != 0 {
            return Err(Error::Failed {
                controller: self.ctrl.name.to_string(),
            });
        }
        self.torn_down = generation(state);
        self.abandon();
        self.seen = state;
        self.watch(state);
        self.connect_again(state)
    }

    /// Timed-out commands (abort policy): sends the Aborts not sent yet (the admin queue is
    /// only try-locked), and escalates for a command still outstanding a further timeout
    /// after it expired: with [`TimeoutAction::AbortThenReset`] the controller is reset
    /// (this pair reconnects right after), with [`TimeoutAction::Abort`] only this pair's
    /// connection is closed and connected again. Either way the timed-out command completes
    /// with `Error::Timeout` and its buffer.
    #[cold]
    fn follow_up_timeouts(&mut self) {
        self.q.timeout_work = false;
        self.ctrl.poll_admin();
        let mut cids = [0u16; ABORTS_PER_TICK];
        let n = self.q.expired_unaborted(&mut cids);
        for &cid in &cids[..n] {
            if self.ctrl.abort_async(self.q.qid, cid) {
                self.q.mark_abort_sent(cid);
            } else {
                // Admin queue busy or at its abort limit: again at the next tick.
                self.q.timeout_work = true;
            }
        }
        if !self.q.expired_overdue() {
            return;
        }
        match self.action {
            TimeoutAction::AbortThenReset => {
                log::error!(
                    "{} queue {}: a timed-out command is still outstanding after its abort; \
                     resetting the controller",
                    self.ctrl.name,
                    self.q.qid
                );
                self.ctrl.count_timeout_reset();
                if let Err(e) = self.ctrl.reset() {
                    log::error!("{}: reset after a timeout failed: {e}", self.ctrl.name);
                }
                let _ = self.sync_state();
            }
            _ => {
                log::error!(
                    "{} queue {}: a timed-out command is still outstanding after its abort; \
                     reconnecting the queue",
                    self.ctrl.name,
                    self.q.qid
                );
                let _ = self.reconnect();
            }
        }
    }

    /// Queue id.
    pub fn qid(&self) -> u16 {
        self.q.qid
    }

    /// Entries of the queue (SQSIZE + 1 in Connect).
    pub fn depth(&self) -> u32 {
        self.depth
    }

    /// Most requests in flight at once (`depth - 1`).
    pub fn capacity(&self) -> u16 {
        self.q.capacity()
    }

    /// Requests in flight.
    pub fn in_flight(&self) -> u16 {
        self.q.in_flight()
    }

    /// Counters.
    pub fn stats(&self) -> &TcpQueueStats {
        &self.q.stats
    }

    /// Largest transfer of one request.
    pub fn max_transfer_bytes(&self) -> usize {
        self.ctrl.max_transfer
    }

    /// Whether header / data digests are on for this connection.
    pub fn digests(&self) -> (bool, bool) {
        (self.q.neg.hdgst, self.q.neg.ddgst)
    }

    /// The error that closed this queue pair, if one did.
    pub fn closed_error(&self) -> Option<Error> {
        self.q.closed_error()
    }

    /// Starts a batch of `n` requests, as the PCIe pair does: reserves `n` request slots at
    /// once (all or nothing: `Error::QueueFull` when fewer are free, and nothing is plugged),
    /// so the batch's next `n` submissions cannot run out of slots; submissions are queued in
    /// the send buffer and go out together at [`TcpQueuePair::unplug`] (or the next poll).
    pub fn plug(&mut self, n: u16) -> Result<()> {
        self.q.plug(n)
    }

    /// Ends a batch and sends it; reservations the batch did not use are given back.
    pub fn unplug(&mut self) {
        self.q.unplug();
        self.q.flush_tx();
    }

    /// Sends what is queued.
    pub fn ring(&mut self) {
        self.q.flush_tx();
    }

    /// Any typed NVM command: state, range and buffer checks, then one command, or several
    /// for a transfer above one command's (`nvme_core::split`).
    #[inline]
    fn submit_cmd<C: NvmCommand>(
        &mut self,
        ns: &Namespace,
        cmd: C,
        buf: Option<DmaBuffer>,
        user_data: u64,
        sync: bool,
    ) -> std::result::Result<(), IoFailure> {
        let fail = |error, buffer| {
            Err(IoFailure {
                error,
                buffer,
                pieces: None,
            })
        };
        if self.state_changed() {
            if let Err(e) = self.sync_state() {
                return fail(e, buf);
            }
        }
        // A command without data may address every block, whatever the metadata format; one
        // with data checks what it moves (plain commands are refused on metadata formats).
        let no_data = cmd.direction() == DataDirection::None;
        let checked = match cmd.range() {
            Some(r) if no_data => ns
                .check_blocks(r.lba, u64::from(r.blocks))
                .map(|()| r.blocks),
            Some(r) => cmd.check_range(ns).map(|()| r.blocks),
            None => ns.check_current().map(|()| 0),
        };
        let blocks = match checked {
            Ok(blocks) => blocks,
            Err(e) => return fail(e, buf),
        };
        let op = cmd.opcode();
        let to_device = match cmd.direction() {
            DataDirection::None => {
                if buf.is_some() || blocks > command::MAX_NLB {
                    let error = Error::InvalidRequest(if buf.is_some() {
                        format!("{} moves no data: submit it without a buffer", op.name())
                    } else {
                        format!(
                            "{} of {blocks} blocks exceeds {} per command",
                            op.name(),
                            command::MAX_NLB
                        )
                    });
                    return fail(error, buf);
                }
                if let Err(e) = cmd.check(ns, &self.command_context(), None) {
                    return fail(e, None);
                }
                return self
                    .q
                    .submit(cmd.sqe_on(ns), None, 0, false, user_data, Waiter::of(sync));
            }
            DataDirection::ToDevice => true,
            DataDirection::FromDevice => false,
            DataDirection::Bidirectional => {
                let error = Error::InvalidRequest(format!(
                    "{}: bidirectional transfers are not supported over NVMe/TCP",
                    op.name()
                ));
                return fail(error, buf);
            }
        };
        let Some(buf) = buf else {
            let error =
                Error::InvalidRequest(format!("{} moves data: submit it with a buffer", op.name()));
            return fail(error, None);
        };
        if blocks == 0 {
            return fail(Error::ZeroLength, Some(buf));
        }
        // The range's bytes for most commands; Copy's is its source range list.
        let len = cmd.data_bytes(ns);
        if buf.len() < len {
            return fail(
                Error::BufferTooSmall {
                    needed: len,
                    len: buf.len(),
                },
                Some(buf),
            );
        }
        if let Err(e) = cmd.check(ns, &self.command_context(), Some(&buf)) {
            return fail(e, Some(buf));
        }
        if len > self.ctrl.max_transfer {
            if !cmd.splittable() {
                let error = Error::InvalidRequest(format!(
                    "{}: its {len}-byte data is larger than the {} bytes one NVMe/TCP command \
                     carries here, and it cannot be split",
                    op.name(),
                    self.ctrl.max_transfer
                ));
                return fail(error, Some(buf));
            }
            return self.submit_split(ns, cmd, buf, user_data, sync);
        }
        self.q.submit(
            cmd.sqe_on(ns),
            Some(buf),
            len,
            to_device,
            user_data,
            Waiter::of(sync),
        )
    }

    /// A data transfer above one command: cut into block-aligned pieces, each its own
    /// command, one completion for the request (`nvme_core::split`); all its slots must be
    /// free, or nothing is sent.
    #[cold]
    fn submit_split<C: NvmCommand>(
        &mut self,
        ns: &Namespace,
        cmd: C,
        buf: DmaBuffer,
        user_data: u64,
        sync: bool,
    ) -> std::result::Result<(), IoFailure> {
        let range = cmd.range().expect("a data command has a range");
        let capacity = u32::from(self.q.capacity());
        let plan = match SplitPlan::new(
            range,
            ns.block_size() as usize,
            self.ctrl.max_transfer,
            capacity,
            capacity - u32::from(self.q.in_flight()),
            self.q.qid,
            self.depth(),
        ) {
            Ok(plan) => plan,
            Err(error) => {
                return Err(IoFailure {
                    error,
                    buffer: Some(buf),
                    pieces: None,
                })
            }
        };
        let to_device = cmd.direction() == DataDirection::ToDevice;
        let nsid = ns.nsid();
        let q = &mut self.q;
        // The pieces' capsules are sent together after the last one: until then no send can
        // fail the queue, so no piece completes while the splitter is out of the queue.
        let held = q.hold_tx();
        let mut split = std::mem::take(&mut q.split);
        let r = split.submit(cmd, plan, buf, user_data, sync, |part, piece, id| {
            let len = part.range().map_or(0, |r| r.blocks as usize) * plan.block_size;
            let sqe = part.sqe(nsid);
            q.submit(sqe, Some(piece), len, to_device, id, Waiter::Piece)
        });
        q.split = split;
        q.release_tx(held);
        if r.is_ok() {
            self.q.stats.split_requests += 1;
        }
        r
    }

    /// What a command's own check ([`NvmCommand::check`]) may look at.
    #[inline]
    fn command_context(&self) -> CommandContext<'_> {
        CommandContext {
            controller: &self.ctrl.name,
            identify: &self.ctrl.identify,
        }
    }

    /// Queues any typed NVM command (`nvme_core::command`); `buf` is the data buffer of a
    /// command that moves data (required then, refused otherwise). One command per request:
    /// a transfer above [`TcpQueuePair::max_transfer_bytes`] is refused.
    pub fn submit<C: NvmCommand>(
        &mut self,
        ns: &Namespace,
        cmd: C,
        buf: Option<DmaBuffer>,
        user_data: u64,
    ) -> std::result::Result<(), IoFailure> {
        self.submit_cmd(ns, cmd, buf, user_data, false)
    }

    /// Sends and receives what the connection has, and hands finished requests to `f`
    /// (at most `max_completions_per_poll`). Every few polls: timeouts and Keep Alive.
    pub fn poll<F: FnMut(Completion)>(&mut self, f: F) -> usize {
        if self.state_changed() {
            let _ = self.sync_state();
        }
        let n = self.q.poll(self.max_completions, f);
        if self.q.timeout_work {
            self.follow_up_timeouts();
        }
        self.keep_alive_check();
        n
    }

    /// Blocks until the target sends something or `timeout` passes (the socket is made
    /// blocking for one read), then handles what arrived; returns whether completions are
    /// ready for [`TcpQueuePair::poll`]. The hybrid mode's idle path, as
    /// `QueuePair::wait_for_completion` on PCIe: call it after a run of empty polls instead
    /// of spinning, e.g. where the target shares the CPU. Errors close the queue as in
    /// `poll`, and are delivered there.
    pub fn wait_for_completion(&mut self, timeout: std::time::Duration) -> Result<bool> {
        Ok(self.q.wait_readable(timeout))
    }

    fn run_sync(
        &mut self,
        submitted: std::result::Result<(), IoFailure>,
    ) -> std::result::Result<Option<DmaBuffer>, IoFailure> {
        submitted?;
        let c = self.wait_sync();
        self.ctrl.keep_alive_tick(true);
        match c.result {
            Ok(_) => Ok(c.buffer),
            Err(error) => Err(IoFailure {
                error,
                buffer: c.buffer,
                pieces: None,
            }),
        }
    }

    /// Keep Alive duty of the pair: every few polls the clock is read, and every quarter of
    /// the KATO the controller's admin queue is try-locked and a Keep Alive sent if half
    /// the KATO has passed since the last one.
    #[inline]
    fn keep_alive_check(&mut self) {
        self.polls_since_keep_alive += 1;
        if self.polls_since_keep_alive < POLLS_PER_KEEP_ALIVE_CHECK {
            return;
        }
        self.polls_since_keep_alive = 0;
        let kato = self.ctrl.options.kato;
        if kato.is_zero() {
            return;
        }
        let now = Instant::now();
        if now >= self.keep_alive_due {
            self.keep_alive_due = now + kato / CHECKS_PER_KATO;
            self.ctrl.keep_alive_tick(true);
        }
    }

    /// Runs until the synchronous request completes: the queue's clock applies the
    /// timeout policy as for asynchronous requests, and a controller reset is followed
    /// (the request completes with `Error::Reset`, or is sent again on the new connection
    /// with `resubmit_after_reset`). Other completions wait for the next `poll`.
    fn wait_sync(&mut self) -> Completion {
        let mut idle = 0u32;
        loop {
            if let Some(c) = self.q.take_sync_done() {
                return c;
            }
            if self.state_changed() {
                if let Err(Error::Resetting { .. }) = self.sync_state() {
                    std::thread::sleep(RESET_WAIT_PAUSE);
                }
                continue;
            }
            let before = self.q.stats.pdus_received;
            self.q.progress();
            self.q.polls_since_clock += 1;
            if self.q.timeout_work {
                self.follow_up_timeouts();
            }
            self.keep_alive_check();
            if self.q.stats.pdus_received == before {
                idle += 1;
                if idle > SYNC_SPIN_POLLS {
                    std::thread::sleep(SYNC_IDLE_PAUSE);
                }
            } else {
                idle = 0;
            }
        }
    }

    /// Runs any typed NVM command to completion; returns the buffer of a data command.
    pub fn execute<C: NvmCommand>(
        &mut self,
        ns: &Namespace,
        cmd: C,
        buf: Option<DmaBuffer>,
    ) -> std::result::Result<Option<DmaBuffer>, IoFailure> {
        let s = self.submit_cmd(ns, cmd, buf, 0, true);
        self.run_sync(s)
    }
}

impl Drop for TcpQueuePair {
    fn drop(&mut self) {
        let s = &self.q.stats;
        log::info!(
            "{}: queue {} closed after {} commands: {} success shortcuts, {} R2Ts, {} \
             in-capsule writes, digests header {} data {}",
            self.q.controller,
            self.q.qid,
            s.commands_submitted,
            s.success_shortcuts,
            s.r2ts,
            s.in_capsule_writes,
            self.q.neg.hdgst,
            self.q.neg.ddgst
        );
        self.q.close();
        self.ctrl.release_qid(self.q.qid);
    }
}
