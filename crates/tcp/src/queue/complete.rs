//! Completion: a finished slot is freed and its completion handed to a synchronous waiter or
//! to the preallocated ready list that `poll` delivers; failing the queue completes every
//! outstanding request with the transport error.
//!
//! INVARIANT: a slot is completed once (`finish` takes a live tag and frees it: a second
//! completion of the same command id fails the tag set's generation check in `rx.rs`); the
//! ready list is allocated for every slot at creation, so completing never allocates.

use std::net::Shutdown;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nvme_core::{Completion, Error};

use super::{Queue, Rx, Tag, Waiter, IDLE_POLLS_PER_CLOCK_CHECK};
use crate::error::TcpError;

impl Queue {
    /// Takes the completion of the synchronous request, if it has finished.
    pub(crate) fn take_sync_done(&mut self) -> Option<Completion> {
        self.sync_done.take()
    }

    /// Closes the queue: later submissions fail, and every outstanding request is completed
    /// with the error (delivered by the next poll, or to a synchronous waiter).
    pub(crate) fn fail(&mut self, error: TcpError) {
        if self.failed.is_some() {
            return;
        }
        log::error!("{}: {error}", self.controller);
        let error = Arc::new(error);
        self.failed = Some(error.clone());
        let _ = self.stream.shutdown(Shutdown::Both);
        self.tx.clear();
        self.tx_head = 0;
        self.rx_state = Rx::Header;
        self.rx_paused = false;
        self.rx_head = 0;
        self.rx_tail = 0;
        if let Some((word, seen)) = &self.state_watch {
            if word.load(std::sync::atomic::Ordering::Acquire) != *seen {
                log::info!(
                    "{} queue {}: failed during a controller reset; its requests follow the reset",
                    self.controller,
                    self.qid
                );
                return;
            }
        }
        let live = self.take_live();
        for &tag in &live {
            let e = self.transport_error(error.clone());
            self.finish(tag, Err(e));
        }
        self.put_live(live);
    }

    /// Completes the live slot of `tag`: frees it (its generation moves on, so its command id
    /// no longer matches) and hands the completion to a synchronous waiter or to the ready list
    /// that `poll` delivers (preallocated: no allocation).
    pub(super) fn finish(&mut self, tag: Tag, result: Result<u32, Error>) {
        let slot = self.tags.get_mut(tag);
        let c = Completion {
            user_data: slot.user_data,
            result,
            buffer: slot.buffer.take(),
            pieces: slot.pieces.take(),
        };
        let waiter = slot.waiter;
        self.tags.free(tag);
        self.stats.requests_completed += 1;
        match waiter {
            Waiter::Poll => self.deferred.push_back(c),
            Waiter::Sync => self.sync_done = Some(c),
            Waiter::Piece => match self.split.complete(c) {
                Some((done, true)) => self.sync_done = Some(done),
                Some((done, false)) => self.deferred.push_back(done),
                None => {}
            },
        }
    }

    /// Sends what is queued, receives and handles every complete PDU, checks timeouts every
    /// few polls, and hands up to `max` completions to `f`. Returns how many it handed.
    pub(crate) fn poll<F: FnMut(Completion)>(&mut self, max: usize, mut f: F) -> usize {
        self.stats.polls += 1;
        self.progress();
        let mut n = 0;
        while n < max {
            let Some(c) = self.deferred.pop_front() else {
                break;
            };
            f(c);
            n += 1;
        }
        if n == 0 {
            self.stats.idle_polls += 1;
        }
        self.polls_since_clock += 1;
        n
    }

    /// Network progress without delivering completions: send, receive, parse, timeouts.
    pub(crate) fn progress(&mut self) {
        if self.failed.is_some() {
            return;
        }
        if self.tx_head < self.tx.len() {
            self.flush_tx();
        }
        if self.in_flight() > 0 {
            self.receive();
        }
        if self.polls_since_clock >= IDLE_POLLS_PER_CLOCK_CHECK {
            self.polls_since_clock = 0;
            self.check_clock();
        }
    }

    /// Runs until the synchronous request completes (or `deadline` passes: then the queue
    /// is failed and the request completes with the error). Other completions wait in the
    /// ready list for the next `poll`.
    pub(crate) fn wait_sync(&mut self, deadline: Instant, what: &'static str) -> Completion {
        let mut idle = 0u32;
        loop {
            if let Some(c) = self.sync_done.take() {
                return c;
            }
            let before = self.stats.pdus_received;
            self.progress();
            if self.sync_done.is_some() {
                continue;
            }
            if self.stats.pdus_received == before {
                idle += 1;
                if idle > 64 {
                    std::thread::sleep(Duration::from_micros(50));
                }
                if idle % 64 == 0 && Instant::now() >= deadline {
                    let timeout = self.timeout;
                    self.fail(TcpError::Timeout {
                        addr: self.addr,
                        qid: self.qid,
                        what,
                        timeout,
                    });
                }
            } else {
                idle = 0;
            }
        }
    }
}
