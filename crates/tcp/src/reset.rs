//! Controller reset over the fabric (see [`crate::TcpController::reset`]).

use std::sync::atomic::Ordering;
use std::time::Duration;

use nvme_driver::{Error, Result};
use nvme_spec::command;
use nvme_spec::regs;

use crate::controller::{
    enable, enabled_cc, generation, open_admin, Admin, Inner, STATE_FAILED, STATE_GENERATION,
    STATE_RESETTING,
};
use crate::error::TcpError;

/// How long a reset waits for the old association to take CC.EN = 0 before it closes it.
const OLD_ASSOCIATION_LIMIT: Duration = Duration::from_secs(1);

impl Inner {
    /// Controller reset (see [`crate::TcpController::reset`]).
    pub(crate) fn reset(&self) -> Result<()> {
        let _one_at_a_time = self.reset_lock.lock().unwrap_or_else(|p| p.into_inner());
        let generation = generation(self.state()) + STATE_GENERATION;
        self.state
            .store(generation | STATE_RESETTING, Ordering::Release);
        log::warn!("{}: resetting the controller", self.name);
        let mut admin = self.admin.lock().unwrap_or_else(|p| p.into_inner());
        // The old association: a controller reset if it still answers, then close.
        admin.reap();
        if admin.q.failed.is_none() {
            admin.q.timeout = admin.q.timeout.min(OLD_ASSOCIATION_LIMIT);
            let cc = enabled_cc().with_en(false);
            if let Err(e) = admin.property_set(regs::CC, cc.0) {
                log::info!("{}: disabling the old controller: {e}", self.name);
            }
        }
        admin.q.fail(TcpError::ClosedForReconnect {
            addr: self.addr,
            qid: 0,
        });
        admin.reap();
        let aborts = admin.aborts;
        match self.new_association() {
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

    /// Connects, enables and configures a new association for [`Inner::reset`].
    fn new_association(&self) -> Result<(Admin, u16)> {
        let (mut admin, cntlid, _, _) = open_admin(&self.trid, &self.options, &self.mapper)?;
        let configured = (|| {
            enable(&mut admin)?;
            if self.granted > 0 {
                let wanted = self.options.io_queues.max(1);
                let (dw0, _, _) = admin.execute(
                    command::set_number_of_queues(wanted, wanted),
                    None,
                    0,
                    false,
                )?;
                let (sq, cq) = command::number_of_queues_allocated(dw0);
                if sq.min(cq) < self.granted {
                    return Err(Error::Unsupported {
                        controller: self.name.to_string(),
                        what: format!(
                            "after the reset it grants {} I/O queue pairs, fewer than the {} \
                             in use",
                            sq.min(cq),
                            self.granted
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
