//! A poll group: one thread that owns its connections (and their backend queue pairs) and
//! makes progress on each in turn: receive, execute, poll the backend, send. Nothing in a
//! pass is shared with another group except the association flags it reads.
//!
//! Idle policy: while commands are at a backend queue pair and the last pass that moved
//! something is less than `device_poll` ago, the group polls only its queue pairs'
//! completion queues (no socket reads, no syscalls). Otherwise, after a pass that moved
//! something it spins `idle_spins` empty passes, and keeps polling while idle for less than
//! twice its average idle gap when that average is at most `adaptive_spin` ([`AdaptiveSpin`]);
//! then it blocks in one poll(2) on everything that can give it work (its connections' sockets,
//! the interrupt eventfds of the backend queue pairs with commands in flight, and its wake-up
//! eventfd, signalled for a new connection and at stop), the way nvmet-tcp sleeps until a
//! socket callback or the controller's interrupt. Where a queue pair with commands in flight
//! cannot signal (a polled-only backend) it sleeps `idle_sleep` between passes instead.
//!
//! INVARIANT: the group blocks only when every connection has armed its descriptors and found
//! nothing to do (`WaitPrep::Added`); an interrupt is armed by consuming its stale signals
//! before the ring is checked, so a completion posted meanwhile still wakes the wait.

use std::net::TcpStream;
use std::os::fd::AsFd;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, TryRecvError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nvme_vfio::{FdWait, InterruptEvent};

use crate::backend::Backend;
use crate::conn::{Conn, WaitPrep};
use crate::server::Shared;
use crate::trace::{self, Ev};

/// Longest block: the Keep Alive and Connect deadlines are checked at least this often.
const WAIT_LIMIT: Duration = Duration::from_millis(50);

/// The group's loop, until the target stops. `wake` is signalled when a connection is sent
/// on `new` and when the target stops.
pub(crate) fn run<B: Backend>(
    s: Arc<Shared<B>>,
    new: Receiver<TcpStream>,
    wake: Arc<InterruptEvent>,
) {
    let mut conns: Vec<Conn<B>> = Vec::new();
    let mut idle = 0u32;
    let mut listener_gone = false;
    let mut fds = FdWait::new();
    // Index in `fds` of each connection's socket in the last wait (kept for its capacity).
    let mut sockets = Vec::new();
    // The last pass that moved something, and whether the next pass polls the backend only.
    let mut last_progress = Instant::now();
    let mut device_polling = false;
    let mut spin = AdaptiveSpin::new(s.config.adaptive_spin);
    trace::start_group();
    while !s.stop.load(Ordering::Acquire) {
        if !listener_gone {
            loop {
                match new.try_recv() {
                    Ok(stream) => conns.push(Conn::new(stream, s.clone())),
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => {
                        listener_gone = true;
                        break;
                    }
                }
            }
        }
        let now = Instant::now();
        let mut progress = false;
        conns.retain_mut(|c| {
            let (alive, moved) = if device_polling {
                c.poll_backend_only()
            } else {
                c.poll(now)
            };
            progress |= moved;
            alive
        });
        device_polling = false;
        if progress {
            if idle > 0 {
                spin.record_gap(now.duration_since(last_progress));
            }
            idle = 0;
            last_progress = now;
        } else {
            idle = idle.saturating_add(1);
            let idle_for = now.duration_since(last_progress);
            if idle_for < s.config.device_poll && conns.iter_mut().any(|c| c.at_backend()) {
                // Commands are at the controller: poll its completion queues (the next pass
                // reads no socket) rather than wait for the interrupt.
                device_polling = true;
            } else if idle > s.config.idle_spins && !spin.keep_spinning(idle_for) {
                match block(&mut conns, &mut fds, &mut sockets, &wake) {
                    WaitPrep::Added => {}
                    WaitPrep::Ready => trace::ev(Ev::Ready, 0, 0),
                    WaitPrep::Polled => {
                        trace::ev(Ev::Sleep, 0, 0);
                        std::thread::sleep(s.config.idle_sleep)
                    }
                }
            }
        }
    }
    for mut c in conns {
        c.close("the target stops");
    }
    trace::finish_group();
}

/// Blocks until a connection has work, a connection arrives, the target stops or
/// [`WAIT_LIMIT`] passes ([`WaitPrep::Added`]; each connection then reads its socket in the
/// next pass only if it was ready); returns at once when a connection has work now
/// ([`WaitPrep::Ready`]) or cannot be waited for ([`WaitPrep::Polled`]).
fn block<B: Backend>(
    conns: &mut [Conn<B>],
    fds: &mut FdWait,
    sockets: &mut Vec<usize>,
    wake: &InterruptEvent,
) -> WaitPrep {
    fds.clear();
    sockets.clear();
    let w = fds.add(wake.as_fd(), true, false);
    for c in conns.iter_mut() {
        match c.add_wait_fds(fds) {
            WaitPrep::Added => sockets.push(fds.len() - 1),
            other => return other,
        }
    }
    trace::ev(Ev::Wait, fds.len() as u32, 0);
    match fds.wait(Some(WAIT_LIMIT)) {
        Ok(n) => {
            trace::ev(Ev::Woke, n as u32, u32::from(fds.ready(w)));
            if fds.ready(w) {
                let _ = wake.clear();
            }
            for (c, &i) in conns.iter_mut().zip(sockets.iter()) {
                c.set_rx_hint(fds.ready(i));
            }
        }
        Err(e) => {
            log::warn!("nvme-target: poll group wait: {e}; sleeping instead");
            return WaitPrep::Polled;
        }
    }
    WaitPrep::Added
}

/// Adaptive spinning (`TargetConfig::adaptive_spin`): an average of the idle gaps that ended
/// in work, and whether an idle group should keep polling instead of blocking.
///
/// INVARIANT: with `max` zero it never spins; it spins only while the average is known, at
/// most `max`, and the current gap is below twice the average.
struct AdaptiveSpin {
    max: Duration,
    /// Average idle gap in nanoseconds (an exponential average, weight 1/8); 0: none yet.
    average_ns: u64,
}

impl AdaptiveSpin {
    fn new(max: Duration) -> Self {
        Self { max, average_ns: 0 }
    }

    /// An idle spell of `gap` ended with work.
    fn record_gap(&mut self, gap: Duration) {
        if self.max.is_zero() {
            return;
        }
        let gap = gap.as_nanos().min(u128::from(u64::MAX)) as u64;
        self.average_ns = if self.average_ns == 0 {
            gap
        } else {
            self.average_ns - self.average_ns / 8 + gap / 8
        };
    }

    /// Whether a group idle for `idle_for` keeps polling.
    fn keep_spinning(&self, idle_for: Duration) -> bool {
        let average = Duration::from_nanos(self.average_ns);
        !self.max.is_zero() && self.average_ns > 0 && average <= self.max && idle_for < 2 * average
    }
}

#[cfg(test)]
mod tests {
    use super::AdaptiveSpin;
    use std::time::Duration;

    const US: Duration = Duration::from_micros(1);

    #[test]
    fn adaptive_spin_follows_short_gaps_and_stops_for_long_ones() {
        let mut off = AdaptiveSpin::new(Duration::ZERO);
        off.record_gap(10 * US);
        assert!(!off.keep_spinning(US), "off never spins");

        let mut s = AdaptiveSpin::new(1000 * US);
        assert!(!s.keep_spinning(US), "no gap seen yet: block");
        s.record_gap(300 * US);
        assert!(s.keep_spinning(US));
        assert!(s.keep_spinning(599 * US));
        assert!(!s.keep_spinning(600 * US), "twice the average: block");
        // The gaps grow beyond the limit (a loaded host): the average follows and spinning
        // stops, and comes back once the gaps are short again.
        for _ in 0..20 {
            s.record_gap(5000 * US);
        }
        assert!(!s.keep_spinning(US));
        for _ in 0..40 {
            s.record_gap(200 * US);
        }
        assert!(s.keep_spinning(US));
    }
}
