//! I/O queue pairs over NVMe/TCP with the submit/poll API and the completion and error
//! types of the PCIe `QueuePair` (`nvme_driver::{Completion, Error, IoFailure}`), so code
//! written against one reads the same against the other.

use std::sync::Arc;

use nvme_driver::{Completion, DmaBuffer, Error, IoFailure, Namespace, Result, WriteFlags};
use nvme_spec::command;
use nvme_spec::opcode;

use crate::controller::Inner;
use crate::queue::{Queue, TcpQueueStats};

/// Polls between keep-alive checks (each check reads the clock and try-locks the admin
/// queue only when a Keep Alive is due).
const POLLS_PER_KEEP_ALIVE_CHECK: u32 = 1024;

/// An NVMe/TCP I/O queue pair: one TCP connection. `Send` but not `Sync`: one thread owns
/// it and drives it with [`TcpQueuePair::poll`].
pub struct TcpQueuePair {
    q: Queue,
    depth: u32,
    max_completions: usize,
    polls_since_keep_alive: u32,
    ctrl: Arc<Inner>,
}

impl std::fmt::Debug for TcpQueuePair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TcpQueuePair")
            .field("qid", &self.q.qid)
            .field("depth", &self.depth)
            .field("in_flight", &self.q.in_flight)
            .finish_non_exhaustive()
    }
}

impl TcpQueuePair {
    pub(crate) fn new(q: Queue, ctrl: Arc<Inner>, depth: u32, max_completions: usize) -> Self {
        Self {
            q,
            depth,
            max_completions: max_completions.max(1),
            polls_since_keep_alive: 0,
            ctrl,
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
        self.q.in_flight
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

    /// Starts a batch: submissions are queued in the send buffer and go out together at
    /// [`TcpQueuePair::unplug`] (or the next poll). `n` is accepted for API parity.
    pub fn plug(&mut self, _n: u16) -> Result<()> {
        self.q.plugged = true;
        Ok(())
    }

    /// Ends a batch and sends it.
    pub fn unplug(&mut self) {
        self.q.plugged = false;
        self.q.flush_tx();
    }

    /// Sends what is queued.
    pub fn ring(&mut self) {
        self.q.flush_tx();
    }

    #[allow(clippy::too_many_arguments)]
    fn rw(
        &mut self,
        op: u8,
        ns: &Namespace,
        lba: u64,
        blocks: u32,
        buf: DmaBuffer,
        fua: bool,
        user_data: u64,
        sync: bool,
    ) -> std::result::Result<(), IoFailure> {
        let fail = |error, buffer| Err(IoFailure { error, buffer });
        if blocks == 0 {
            return fail(Error::ZeroLength, Some(buf));
        }
        if let Err(e) = ns.check_range(lba, u64::from(blocks)) {
            return fail(e, Some(buf));
        }
        let len = ns.blocks_to_bytes(u64::from(blocks)) as usize;
        if buf.len() < len {
            return fail(
                Error::BufferTooSmall {
                    needed: len,
                    len: buf.len(),
                },
                Some(buf),
            );
        }
        if len > self.ctrl.max_transfer {
            return fail(
                Error::InvalidRequest(format!(
                    "a {len}-byte transfer is larger than the {} bytes one NVMe/TCP command \
                     carries here: split it",
                    self.ctrl.max_transfer
                )),
                Some(buf),
            );
        }
        let sqe = match op {
            opcode::nvm::READ => command::read(ns.nsid(), lba, blocks),
            _ => command::write(ns.nsid(), lba, blocks, fua),
        };
        let to_device = op == opcode::nvm::WRITE;
        self.q
            .submit(sqe, Some(buf), len, to_device, user_data, sync)
    }

    /// Queues a read of `blocks` blocks at `lba` into `buf`; the data arrives in C2HData
    /// PDUs and the buffer comes back in the [`Completion`].
    pub fn submit_read(
        &mut self,
        ns: &Namespace,
        lba: u64,
        blocks: u32,
        buf: DmaBuffer,
        user_data: u64,
    ) -> std::result::Result<(), IoFailure> {
        self.rw(
            opcode::nvm::READ,
            ns,
            lba,
            blocks,
            buf,
            false,
            user_data,
            false,
        )
    }

    /// Queues a write; the data goes in the command capsule when it fits the controller's
    /// in-capsule size, else in H2CData PDUs as R2Ts ask for it.
    pub fn submit_write(
        &mut self,
        ns: &Namespace,
        lba: u64,
        blocks: u32,
        buf: DmaBuffer,
        flags: WriteFlags,
        user_data: u64,
    ) -> std::result::Result<(), IoFailure> {
        self.rw(
            opcode::nvm::WRITE,
            ns,
            lba,
            blocks,
            buf,
            flags.fua(),
            user_data,
            false,
        )
    }

    /// Queues a Flush.
    pub fn submit_flush(&mut self, ns: &Namespace, user_data: u64) -> Result<()> {
        self.q
            .submit(command::flush(ns.nsid()), None, 0, false, user_data, false)
            .map_err(|f| f.error)
    }

    /// Sends and receives what the connection has, and hands finished requests to `f`
    /// (at most `max_completions_per_poll`). Every few polls: timeouts and Keep Alive.
    pub fn poll<F: FnMut(Completion)>(&mut self, f: F) -> usize {
        let n = self.q.poll(self.max_completions, f);
        self.polls_since_keep_alive += 1;
        if self.polls_since_keep_alive >= POLLS_PER_KEEP_ALIVE_CHECK {
            self.polls_since_keep_alive = 0;
            self.ctrl.keep_alive_tick(true);
        }
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
        let deadline = std::time::Instant::now() + self.q.timeout;
        let c = self.q.wait_sync(deadline, "waiting for an I/O command");
        self.ctrl.keep_alive_tick(true);
        match c.result {
            Ok(_) => Ok(c.buffer),
            Err(error) => Err(IoFailure {
                error,
                buffer: c.buffer,
            }),
        }
    }

    /// Reads and waits for the data.
    pub fn read(
        &mut self,
        ns: &Namespace,
        lba: u64,
        blocks: u32,
        buf: DmaBuffer,
    ) -> std::result::Result<DmaBuffer, IoFailure> {
        let s = self.rw(opcode::nvm::READ, ns, lba, blocks, buf, false, 0, true);
        self.run_sync(s)
            .map(|b| b.expect("a completed data command returns its buffer"))
    }

    /// Writes and waits for the completion.
    pub fn write(
        &mut self,
        ns: &Namespace,
        lba: u64,
        blocks: u32,
        buf: DmaBuffer,
        flags: WriteFlags,
    ) -> std::result::Result<DmaBuffer, IoFailure> {
        let s = self.rw(
            opcode::nvm::WRITE,
            ns,
            lba,
            blocks,
            buf,
            flags.fua(),
            0,
            true,
        );
        self.run_sync(s)
            .map(|b| b.expect("a completed data command returns its buffer"))
    }

    /// Flushes and waits.
    pub fn flush(&mut self, ns: &Namespace) -> Result<()> {
        let s = self
            .q
            .submit(command::flush(ns.nsid()), None, 0, false, 0, true);
        self.run_sync(s).map(drop).map_err(|f| f.error)
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
