//! Keep Alive liveness of an NVMe/TCP association (NVMe Base 2.0 §3.9, the Keep Alive command
//! §5.25, the Keep Alive Timer feature §5.27.1.12).
//!
//! There is no background thread (the transport has none anywhere: every socket is driven by
//! its owner's calls, as in SPDK). The work is done whenever the program touches the
//! controller: a queue pair's poll or synchronous wait (admin queue try-locked every
//! KATO / [`CHECKS_PER_KATO`]), [`crate::TcpController::keep_alive`] and
//! [`crate::TcpController::is_failed`]. Each such call:
//!
//! - sends a Keep Alive once half the KATO has passed since the last one (one at a time);
//! - declares the association **lost** when the Keep Alive in flight has had no answer for
//!   [`answer_limit`] (half the KATO) — the target keeps the connection but does not answer
//!   (it reads and drops, or stops reading) — or when no Keep Alive has been answered for a
//!   whole KATO without one in flight (nothing called the controller for that long: per §3.9
//!   the controller has ended the association when its timer ran out).
//!
//! Other traffic does not count as an answer to an outstanding Keep Alive: the host does not
//! enable Traffic Based Keep Alive (§5.27.1.12, TBKAS), so only a processed Keep Alive
//! restarts the controller's timer, and I/O completions on other connections do not show that
//! the admin queue, which carries the association, still works. (Completions of other admin
//! commands do count as "heard from" for the idle rule, so a slow bring-up is not mistaken
//! for a lapse.)
//!
//! With a Keep Alive sent at most KATO/2 + KATO/[`CHECKS_PER_KATO`] after the last answer and
//! given up KATO/2 later (noticed within one more check), a target that goes silent is
//! noticed within 1.25 x KATO of its last answer while anything polls; a program that calls
//! nothing is told at its next call (the detection time is then measured from the last answer
//! and is however long it slept).
//!
//! Declaring the association lost closes the admin connection (the target then ends the
//! association), and publishes [`crate::controller::STATE_LOST`] in the state word: every
//! queue pair, at its next poll or submission, closes its connection and completes each
//! request in flight once with `Error::Transport` carrying the reason, buffers returned.
//! `is_failed()` is true until [`crate::TcpController::reset`].

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::controller::{generation, Admin, Inner, STATE_FAILED, STATE_LOST, STATE_RESETTING};
use crate::error::TcpError;

/// Keep-alive checks per KATO made by a polled queue pair (each try-locks the admin queue).
pub(crate) const CHECKS_PER_KATO: u32 = 8;
/// Parts of the KATO after which a Keep Alive is due (2: half the KATO, as §5.27.1.12
/// recommends to leave room for the round trip).
const SEND_DIVISOR: u32 = 2;
/// Parts of the KATO a Keep Alive may take to be answered.
const ANSWER_DIVISOR: u32 = 2;

/// How long an outstanding Keep Alive may go unanswered.
pub(crate) fn answer_limit(kato: Duration) -> Duration {
    kato / ANSWER_DIVISOR
}

/// Keep Alive bookkeeping of one association.
#[derive(Debug)]
pub(crate) struct KeepAlive {
    kato: Duration,
    /// When the last Keep Alive went out (the Connect, at first).
    last_sent: Instant,
    /// When the target last answered (a Keep Alive or another admin command; the Connect at
    /// first).
    last_heard: Instant,
    /// When the Keep Alive in flight went out.
    outstanding: Option<Instant>,
}

/// What the bookkeeping asks for at a given time.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Due {
    Nothing,
    Send,
    /// The association is lost: why.
    Lost(Lost),
}

/// Why the association is considered lost.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Lost {
    Unanswered {
        waited: Duration,
        since_answer: Duration,
    },
    Lapsed {
        idle: Duration,
    },
}

impl KeepAlive {
    pub(crate) fn new(kato: Duration, now: Instant) -> Self {
        Self {
            kato,
            last_sent: now,
            last_heard: now,
            outstanding: None,
        }
    }

    pub(crate) fn is_outstanding(&self) -> bool {
        self.outstanding.is_some()
    }

    pub(crate) fn sent(&mut self, now: Instant) {
        self.last_sent = now;
        self.outstanding = Some(now);
    }

    /// The Keep Alive in flight was answered (with any status: the target is there).
    pub(crate) fn answered(&mut self, now: Instant) {
        self.outstanding = None;
        self.last_heard = now;
    }

    /// Another admin command was answered.
    pub(crate) fn heard(&mut self, now: Instant) {
        self.last_heard = now;
    }

    /// The Keep Alive in flight ended without an answer (its queue failed).
    pub(crate) fn dropped(&mut self) {
        self.outstanding = None;
    }

    /// What is due at `now`.
    pub(crate) fn due(&self, now: Instant) -> Due {
        if self.kato.is_zero() {
            return Due::Nothing;
        }
        let since_answer = now.saturating_duration_since(self.last_heard);
        if let Some(sent) = self.outstanding {
            let waited = now.saturating_duration_since(sent);
            if waited >= answer_limit(self.kato) {
                return Due::Lost(Lost::Unanswered {
                    waited,
                    since_answer,
                });
            }
            return Due::Nothing;
        }
        if since_answer >= self.kato {
            return Due::Lost(Lost::Lapsed { idle: since_answer });
        }
        if now.saturating_duration_since(self.last_sent) >= self.kato / SEND_DIVISOR {
            return Due::Send;
        }
        Due::Nothing
    }
}

impl Inner {
    /// Keep Alive duty, from queue pairs' polls (`try_only`: never waits for an admin
    /// command another thread runs) or from [`crate::TcpController::keep_alive`]: reaps
    /// admin completions, declares the association lost if it is (see the module doc), else
    /// sends a Keep Alive if one is due.
    pub(crate) fn keep_alive_tick(&self, try_only: bool) {
        let guard = if try_only {
            self.admin.try_lock().ok()
        } else {
            Some(self.admin.lock().unwrap_or_else(|p| p.into_inner()))
        };
        if let Some(mut admin) = guard {
            self.tend(&mut admin, true);
        }
    }

    /// The liveness check alone (no Keep Alive sent), for `is_failed`.
    pub(crate) fn check_liveness(&self) {
        let mut admin = self.admin.lock().unwrap_or_else(|p| p.into_inner());
        self.tend(&mut admin, false);
    }

    /// One round of keep-alive work on the locked admin queue.
    fn tend(&self, admin: &mut Admin, may_send: bool) {
        admin.reap();
        if self.state() & (STATE_RESETTING | STATE_FAILED | STATE_LOST) != 0 {
            return;
        }
        if let Some(reason) = admin.q.failed.clone() {
            // The admin connection failed (closed by the target, a timed-out admin
            // command): the association is gone with it.
            self.declare_lost(reason);
            return;
        }
        let now = Instant::now();
        match admin.ka.due(now) {
            Due::Nothing => {}
            Due::Send if may_send => admin.send_keep_alive(now),
            Due::Send => {}
            Due::Lost(why) => {
                let kato = self.options.kato;
                let error = match why {
                    Lost::Unanswered {
                        waited,
                        since_answer,
                    } => TcpError::KeepAliveUnanswered {
                        addr: self.addr,
                        waited,
                        since_answer,
                        kato,
                    },
                    Lost::Lapsed { idle } => TcpError::KeepAliveLapsed {
                        addr: self.addr,
                        idle,
                        kato,
                    },
                };
                // Closing the admin connection ends the association on the target too.
                admin.q.fail(error);
                admin.reap();
                if let Some(reason) = admin.q.failed.clone() {
                    self.declare_lost(reason);
                }
            }
        }
    }

    /// Publishes the loss of the current association (unless a reset already replaces it).
    fn declare_lost(&self, reason: Arc<TcpError>) {
        let state = self.state();
        if state & (STATE_RESETTING | STATE_FAILED | STATE_LOST) != 0 {
            return;
        }
        *self.lost.lock().unwrap_or_else(|p| p.into_inner()) =
            Some((generation(state), reason.clone()));
        if self
            .state
            .compare_exchange(
                state,
                state | STATE_LOST,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_ok()
        {
            log::error!(
                "{}: association lost, its queue pairs fail their requests: {reason}",
                self.name
            );
        }
    }

    /// Why the association of the current generation was declared lost.
    pub(crate) fn lost_reason(&self) -> Option<Arc<TcpError>> {
        let gen = generation(self.state());
        self.lost
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .filter(|(g, _)| *g == gen)
            .map(|(_, r)| r.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KATO: Duration = Duration::from_millis(400);

    #[test]
    fn due_follows_the_rules() {
        let t0 = Instant::now();
        let mut ka = KeepAlive::new(KATO, t0);
        assert_eq!(ka.due(t0 + KATO / 4), Due::Nothing);
        assert_eq!(ka.due(t0 + KATO / 2), Due::Send);
        ka.sent(t0 + KATO / 2);
        // Outstanding: nothing until the answer limit, then lost.
        assert_eq!(ka.due(t0 + KATO * 3 / 4), Due::Nothing);
        assert!(matches!(
            ka.due(t0 + KATO),
            Due::Lost(Lost::Unanswered { .. })
        ));
        ka.answered(t0 + KATO / 2 + KATO / 8);
        assert_eq!(ka.due(t0 + KATO * 3 / 4), Due::Nothing);
        // Idle past the KATO with nothing in flight: lapsed.
        assert!(matches!(
            ka.due(t0 + KATO * 3),
            Due::Lost(Lost::Lapsed { .. })
        ));
        assert_eq!(
            KeepAlive::new(Duration::ZERO, t0).due(t0 + KATO * 9),
            Due::Nothing
        );
    }
}
