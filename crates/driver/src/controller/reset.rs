//! Controller level reset (NVMe Base 2.0 §3.7.2, through CC.EN): disable, rebuild the admin
//! queue, enable, restore what bring-up configured, and move the reset generation on so that every
//! queue pair fails or resubmits its requests and re-creates its queues.
//!
//! INVARIANT: resets are serialised (`reset_lock`); memory is reused only once the controller is
//! confirmed disabled, and one that will not disable is stopped for good (its memory leaks).

use std::sync::atomic::Ordering;
use std::sync::MutexGuard;

use nvme_core::{Error, Result};
use nvme_spec::command;
use nvme_spec::regs::{self, Aqa, Cc};

use crate::teardown::DmaState;

use super::registers::{enabled_cc, wait_ready};
use super::{Controller, Inner, STATE_GENERATION, STATE_RESETTING};

impl Controller {
    /// Resets the controller (NVMe Base 2.0 §3.7.2, controller level reset through CC.EN):
    /// disables it, rebuilds the admin queue, restores what bring-up configured (queue count,
    /// shadow doorbells; MSI-X routing survives), and lets every live [`QueuePair`] re-create
    /// its queues in place.
    ///
    /// Queue pairs learn of the reset through a generation word they compare on every
    /// submission and poll (one atomic load, no lock). When a pair sees a new generation it
    /// completes every request that was in flight with the retryable [`Error::Reset`] (buffers
    /// returned: the controller was disabled first, so nothing can still write them), then
    /// re-creates its submission and completion queues; a pair created with
    /// `QueuePairOptions::resubmit_after_reset` submits those requests again instead. While
    /// the reset runs, submissions fail at once with the retryable [`Error::Resetting`] (they
    /// are not queued).
    ///
    /// Also the way back from a failed controller (fatal status, admin timeout), unless it
    /// could not even be disabled (then its memory was leaked and this returns
    /// [`Error::Failed`]).
    ///
    /// [`QueuePair`]: crate::QueuePair
    pub fn reset(&self) -> Result<()> {
        self.inner.reset().map(drop)
    }
}

impl Inner {
    /// Holds off resets while the guard lives (a queue pair deciding how to tear down).
    pub(crate) fn hold_resets(&self) -> MutexGuard<'_, ()> {
        self.reset_lock.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Controller reset (see [`Controller::reset`]). Returns the new state word.
    pub(crate) fn reset(&self) -> Result<u64> {
        let _one_at_a_time = self.reset_lock.lock().unwrap_or_else(|p| p.into_inner());
        if self.is_removed() {
            return Err(Error::Removed {
                controller: self.name.clone(),
                why: "its registers read all ones",
            });
        }
        if *self.dma_state.lock().unwrap_or_else(|p| p.into_inner()) == DmaState::Unstoppable {
            return Err(Error::Failed {
                controller: self.name.clone(),
            });
        }
        self.state.fetch_or(STATE_RESETTING, Ordering::AcqRel);
        log::warn!("{}: resetting the controller", self.name);
        let mut admin = self.admin.lock().unwrap_or_else(|p| p.into_inner());
        // 1. Disable. Every command in flight on every queue dies here; the queue pairs fail
        //    them when they see the new generation. If the controller will not disable, it is
        //    stopped for good (memory leaks, see `stop_dma`).
        let cc = Cc(self.mmio.read32(regs::CC));
        if cc.en() {
            self.mmio.write32(regs::CC, cc.with_en(false).0);
        }
        if let Err(e) = wait_ready(&self.mmio, &self.name, self.cap, false) {
            drop(admin);
            self.fail_and_stop();
            return Err(e);
        }
        // Disabled: the device reaches no memory now, so it is safe to reuse all of it.
        {
            let mut dma = self.dma_state.lock().unwrap_or_else(|p| p.into_inner());
            if *dma == DmaState::Stopped {
                if let Some(f) = &self.function {
                    f.enable_bus_master()?;
                }
                *dma = DmaState::Running;
            }
        }
        // 2. Admin queue from scratch, then enable as at bring-up.
        admin.reset();
        let entries = admin.entries();
        self.mmio.write32(regs::AQA, Aqa::new(entries, entries).0);
        self.mmio.write64(regs::ASQ, admin.sq_iova());
        self.mmio.write64(regs::ACQ, admin.cq_iova());
        self.mmio.write32(regs::CC, enabled_cc(self.cap).0);
        drop(admin);
        if let Err(e) = wait_ready(&self.mmio, &self.name, self.cap, true) {
            self.fail_and_stop();
            return Err(e);
        }
        // The generation moves on now (failed and resetting cleared) so the admin commands
        // below run; queue pairs recreate their queues when they see it.
        let generation = (self.state() & !(STATE_GENERATION - 1)) + STATE_GENERATION;
        self.state
            .store(generation | STATE_RESETTING, Ordering::Release);
        // 3. What bring-up configured: the command set profile, queue count, shadow doorbells
        //    (MSI-X routing lives in VFIO and survives).
        if let Err(e) = self.restore_command_set_profile() {
            self.fail_and_stop();
            return Err(e);
        }
        let cqe = self.admin(
            command::set_number_of_queues(self.io_queues.max(1), self.io_queues.max(1)),
            None,
        )?;
        let (sq, cq) = command::number_of_queues_allocated(cqe.dw0);
        if sq.min(cq) < self.io_queues {
            self.fail_and_stop();
            return Err(Error::Unsupported {
                controller: self.name.clone(),
                what: format!(
                    "after the reset it grants {} I/O queue pairs, fewer than the {} in use",
                    sq.min(cq),
                    self.io_queues
                ),
            });
        }
        if let Some(buffers) = &self.shadow {
            if !self.configure_shadow(buffers)? {
                self.fail_and_stop();
                return Err(Error::Unsupported {
                    controller: self.name.clone(),
                    what: "it refused Doorbell Buffer Config after the reset".into(),
                });
            }
        }
        self.state.store(generation, Ordering::Release);
        // A reset ends outstanding AERs: post them again.
        self.post_aers();
        log::info!("{}: controller reset done", self.name);
        Ok(generation)
    }
}
