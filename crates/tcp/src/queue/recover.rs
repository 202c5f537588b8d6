//! Recovery: dropping a connection for a reset or reconnect, settling or keeping the requests
//! in flight, taking a new connection and sending the kept requests again.
//!
//! INVARIANT: every busy slot is settled exactly once: completed here (its buffer given back:
//! the socket that could have written it is gone) or kept busy to be resent; a command that
//! is neither a read nor a flush is never resubmitted when the old association's commands were
//! not confirmed stopped.

use std::net::{Shutdown, TcpStream};
use std::sync::Arc;
use std::time::Instant;

use nvme_core::Error;

use super::{command_name, in_capsule_len, Negotiated, Queue, Rx};
use crate::error::TcpError;
use crate::r2t::R2tState;

impl Queue {
    /// Drops the connection for a reset or reconnect: the socket is shut down and every
    /// request in flight is settled: an expired one (its timeout already passed) completes
    /// with `Error::Timeout`; with `keep` the others stay in their slots to be sent again on
    /// the next connection ([`Queue::resend`]), else they complete with `error()`. Buffers
    /// come back with every completion: no device holds them, and the socket that could
    /// have written them is gone. Later submissions fail with `reason` until
    /// [`Queue::attach`].
    pub(crate) fn abandon(
        &mut self,
        keep: bool,
        reason: TcpError,
        mut error: impl FnMut() -> Error,
    ) {
        let _ = self.stream.shutdown(Shutdown::Both);
        self.failed = Some(Arc::new(reason));
        self.tx.clear();
        self.tx_head = 0;
        self.rx_state = Rx::Header;
        self.rx_paused = false;
        self.rx_head = 0;
        self.rx_tail = 0;
        self.timeout_work = false;
        let live = self.take_live();
        for &tag in &live {
            let s = self.tags.get(tag);
            if s.expired {
                let e = Error::Timeout {
                    command: command_name(s.opcode),
                    cid: tag.cid(),
                    timeout: self.timeout,
                };
                self.finish(tag, Err(e));
            } else if !keep {
                self.finish(tag, Err(error()));
            }
        }
        self.put_live(live);
    }

    /// Completes every request kept by [`Queue::abandon`] with `error()` (the new
    /// connection could not be made).
    pub(crate) fn drop_kept(&mut self, mut error: impl FnMut() -> Error) {
        let live = self.take_live();
        for &tag in &live {
            self.finish(tag, Err(error()));
        }
        self.put_live(live);
    }

    /// Settles the requests [`Queue::abandon`] kept for a controller reset, once the reset
    /// is done: with `unknown` (the old association's commands were not confirmed stopped)
    /// every command other than a read or a flush completes with `unknown_error(command)`
    /// (a write may still run on the target: never resubmitted); the rest stay kept when
    /// `resubmit`, else complete with `error()`.
    pub(crate) fn settle_kept(
        &mut self,
        resubmit: bool,
        unknown: bool,
        mut error: impl FnMut() -> Error,
        mut unknown_error: impl FnMut(&'static str) -> Error,
    ) {
        let live = self.take_live();
        for &tag in &live {
            let s = self.tags.get(tag);
            let harmless = matches!(
                s.opcode,
                nvme_spec::opcode::nvm::READ | nvme_spec::opcode::nvm::FLUSH
            );
            if unknown && !harmless {
                let e = unknown_error(command_name(s.opcode));
                self.finish(tag, Err(e));
            } else if !resubmit {
                self.finish(tag, Err(error()));
            }
        }
        self.put_live(live);
    }

    /// Closes the queue because its association was declared lost: every request still
    /// here completes once with the transport error `reason`, later submissions fail with it.
    pub(crate) fn close_lost(&mut self, reason: Arc<TcpError>) {
        let _ = self.stream.shutdown(Shutdown::Both);
        self.failed = Some(reason.clone());
        self.tx.clear();
        self.tx_head = 0;
        self.rx_state = Rx::Header;
        self.rx_head = 0;
        self.rx_tail = 0;
        self.timeout_work = false;
        let live = self.take_live();
        for &tag in &live {
            let e = self.transport_error(reason.clone());
            self.finish(tag, Err(e));
        }
        self.put_live(live);
    }

    /// Takes a new connection (same queue id, already connected by Fabrics Connect).
    pub(crate) fn attach(&mut self, stream: TcpStream, neg: Negotiated) {
        let _ = self.stream.shutdown(Shutdown::Both);
        self.stream = stream;
        self.neg = neg;
        self.failed = None;
        self.tx.clear();
        self.tx_head = 0;
        self.rx_state = Rx::Header;
        self.rx_paused = false;
        self.rx_head = 0;
        self.rx_tail = 0;
        self.unplug();
        self.timeout_work = false;
        self.clock.restart(Instant::now());
    }

    /// Sends the requests [`Queue::abandon`] kept again, with fresh timeouts. Returns how
    /// many.
    pub(crate) fn resend(&mut self) -> usize {
        let epoch = self.clock.epoch();
        let live = self.take_live();
        for &tag in &live {
            let s = self.tags.get_mut(tag);
            s.received = 0;
            s.r2t = R2tState::new(in_capsule_len(&s.sqe));
            s.epoch = epoch;
            s.expired = false;
            s.abort_sent = false;
            self.encode(tag);
        }
        let n = live.len();
        self.put_live(live);
        self.flush_tx();
        n
    }
}
