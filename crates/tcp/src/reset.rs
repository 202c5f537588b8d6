//! Controller reset over the fabric (see [`crate::TcpController::reset`]), and what it knows
//! about the old association's commands when it is done.
//!
//! Closing a connection does not stop the commands the target already took from it: a held
//! write may still reach the medium after the host has given up on it, and then overtake a
//! newer write to the same blocks. The reset therefore looks for evidence that the old
//! association's commands are gone before queue pairs treat their requests as retryable:
//!
//! 1. **CC.EN = 0 answered and CSTS.RDY = 0 read back** on the old admin connection (within
//!    CAP.TO, each Property command bounded to [`OLD_ASSOCIATION_LIMIT`]): a controller
//!    reset aborts every outstanding command (NVMe Base 2.0 §3.7.2), so requests in flight
//!    complete with the retryable `Error::Reset`, or are sent again with
//!    `QueuePairOptions::resubmit_after_reset`.
//! 2. Otherwise, if the controller reported a **Command Quiesce Time** (Identify CQT), the
//!    reset waits until CQT has passed since it closed the old admin connection (which ends
//!    the association on the target) before it publishes the new generation: by then the
//!    target has stopped processing the old commands; requests are treated as in 1.
//! 3. Otherwise nothing proves the old commands stopped: the reset records its generation in
//!    `Inner::unconfirmed`, and queue pairs complete the writes that were in flight with the
//!    non-retryable `Error::OutcomeUnknown` (never resubmitted); reads and flushes, which a
//!    late execution cannot make wrong, are treated as in 1.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use nvme_core::{Error, Result};
use nvme_spec::regs;

use crate::controller::{
    enable, enabled_cc, generation, open_admin, wait_ready, Admin, Inner, STATE_FAILED,
    STATE_GENERATION, STATE_RESETTING,
};
use crate::error::TcpError;

/// Limit of each command on the old association during a reset.
const OLD_ASSOCIATION_LIMIT: Duration = Duration::from_secs(1);

/// What the reset learnt about the old association's commands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum OldCommands {
    /// CSTS.RDY = 0 after CC.EN = 0: aborted.
    Aborted,
    /// Not confirmed; quiesced once the CQT has passed after `closed`.
    QuiescedAfter { closed: Instant, cqt: Duration },
    /// Not confirmed, no CQT: their outcome is unknown.
    Unknown,
}

impl Inner {
    /// Controller reset (see [`crate::TcpController::reset`] and the module doc).
    pub(crate) fn reset(&self) -> Result<()> {
        let _one_at_a_time = self.reset_lock.lock().unwrap_or_else(|p| p.into_inner());
        let generation = generation(self.state()) + STATE_GENERATION;
        self.state
            .store(generation | STATE_RESETTING, Ordering::Release);
        log::warn!("{}: resetting the controller", self.name);
        let mut admin = self.admin.lock().unwrap_or_else(|p| p.into_inner());
        let old = self.end_old_association(&mut admin);
        let aborts = admin.aborts;
        let result = self.new_association();
        match old {
            OldCommands::Aborted => {}
            OldCommands::QuiescedAfter { closed, cqt } => {
                let until = closed + cqt;
                let now = Instant::now();
                if until > now {
                    log::info!(
                        "{}: waiting out the Command Quiesce Time ({cqt:?}) of the old \
                         association",
                        self.name
                    );
                    std::thread::sleep(until - now);
                }
            }
            OldCommands::Unknown => {
                log::warn!(
                    "{}: the old association ended without proof that its commands stopped \
                     (no CSTS.RDY = 0, no CQT): writes in flight complete as outcome unknown",
                    self.name
                );
                self.unconfirmed.store(generation, Ordering::Release);
            }
        }
        match result {
            Ok((mut fresh, cntlid)) => {
                fresh.aborts = aborts;
                *admin = fresh;
                self.cntlid.store(cntlid, Ordering::Release);
                self.state.store(generation, Ordering::Release);
                log::info!(
                    "{}: controller reset done, controller id {cntlid}",
                    self.name
                );
                Ok(())
            }
            Err(e) => {
                self.state
                    .store(generation | STATE_FAILED, Ordering::Release);
                log::error!("{}: controller reset failed: {e}", self.name);
                Err(e)
            }
        }
    }

    /// The old association: a controller reset (CC.EN = 0, CSTS.RDY = 0 awaited) if it
    /// still answers, then its admin connection is closed.
    fn end_old_association(&self, admin: &mut Admin) -> OldCommands {
        admin.reap();
        let mut aborted = false;
        if admin.q.failed.is_none() {
            admin.q.timeout = admin.q.timeout.min(OLD_ASSOCIATION_LIMIT);
            let cc = enabled_cc().with_en(false);
            match admin
                .property_set(regs::CC, cc.0)
                .and_then(|()| wait_ready(admin, self.cap, false))
            {
                Ok(()) => aborted = true,
                Err(e) => log::info!("{}: disabling the old controller: {e}", self.name),
            }
        }
        admin.q.fail(TcpError::ClosedForReconnect {
            addr: self.addr,
            qid: 0,
        });
        let closed = Instant::now();
        admin.reap();
        let cqt = Duration::from_millis(u64::from(self.identify.cqt));
        if aborted {
            OldCommands::Aborted
        } else if !cqt.is_zero() {
            OldCommands::QuiescedAfter { closed, cqt }
        } else {
            OldCommands::Unknown
        }
    }

    /// Connects, enables and configures a new association.
    fn new_association(&self) -> Result<(Admin, u16)> {
        let (mut admin, cntlid, _, _) = open_admin(&self.trid, &self.options, &self.mapper)?;
        let configured = (|| {
            enable(&mut admin)?;
            if self.granted > 0 {
                let allocated = admin.set_number_of_queues(self.options.io_queues)?;
                if allocated < self.granted {
                    return Err(Error::Unsupported {
                        controller: self.name.to_string(),
                        what: format!(
                            "after the reset it grants {} I/O queue pairs, fewer than the {} \
                             in use",
                            allocated, self.granted
                        ),
                    });
                }
            }
            Ok(())
        })();
        match configured {
            Ok(()) => Ok((admin, cntlid)),
            Err(e) => {
                admin.q.close();
                Err(e)
            }
        }
    }
}
