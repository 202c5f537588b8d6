//! Stopping the controller: marking it failed and stopping its DMA (disable and bus mastering
//! off, or else retiring the mapper so that its memory leaks), device removal, the normal shutdown
//! notification (CC.SHN, NVMe Base 2.0 §3.6), and the drop of `Inner`.
//!
//! INVARIANT: when `Inner` drops, the controller can no longer reach the admin rings, shadow pages
//! or identify data by the time they are freed: it is stopped, or that memory leaks.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use nvme_spec::regs::{self, Cc, Csts, ShutdownNotification, ShutdownStatus};

use crate::teardown::DmaState;

use super::registers::{wait_ready, REGISTER_POLL};
use super::{Inner, STATE_FAILED};

/// Shutdown wait when the controller does not report RTD3E.
const DEFAULT_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);

impl Inner {
    /// Marks the controller failed and stops its DMA (see [`Inner::stop_dma`]).
    pub(crate) fn fail_and_stop(&self) -> bool {
        self.state.fetch_or(STATE_FAILED, Ordering::AcqRel);
        self.stop_dma()
    }

    /// Stops the controller from reaching host memory: clears CC.EN and waits for CSTS.RDY=0
    /// (bounded by CAP.TO), then clears bus mastering where the transport can. Returns true
    /// when that is confirmed; otherwise retires the mapper so that every DMA allocation of
    /// this controller leaks instead of being freed. Done once; later calls return the
    /// outcome. The controller is unusable afterwards.
    pub(crate) fn stop_dma(&self) -> bool {
        let mut state = self.dma_state.lock().unwrap_or_else(|p| p.into_inner());
        match *state {
            DmaState::Stopped => return true,
            DmaState::Unstoppable => return false,
            DmaState::Running => {}
        }
        self.state.fetch_or(STATE_FAILED, Ordering::AcqRel);
        let cc = Cc(self.mmio.read32(regs::CC));
        if cc.en() {
            self.mmio.write32(regs::CC, cc.with_en(false).0);
        }
        let disabled = match wait_ready(&self.mmio, &self.name, self.cap, false) {
            Ok(()) => true,
            Err(e) => {
                log::error!("{}: disabling the controller failed: {e}", self.name);
                false
            }
        };
        let bus_master_off = match &self.function {
            Some(f) => match f.disable_bus_master() {
                Ok(()) => true,
                Err(e) => {
                    log::error!("{}: clearing bus mastering failed: {e}", self.name);
                    false
                }
            },
            None => true,
        };
        *state = if disabled && bus_master_off {
            log::debug!("{}: controller disabled, DMA stopped", self.name);
            DmaState::Stopped
        } else {
            self.context.guard().retire(&self.name);
            DmaState::Unstoppable
        };
        *state == DmaState::Stopped
    }

    /// Whether the kernel has asked for the device back since the last call (non-blocking).
    pub(crate) fn release_requested(&self) -> bool {
        self.removal_request
            .as_ref()
            .is_some_and(|e| e.clear().is_ok_and(|n| n > 0))
    }

    /// Marks the device removed (and failed), stops what can be stopped, then revokes the
    /// register window (`Mmio::revoke`: all-ones memory replaces the BAR mapping), so that no
    /// later register read or doorbell write can raise SIGBUS once vfio-pci revokes the BAR.
    pub(crate) fn mark_removed(&self) {
        self.removed.store(true, Ordering::Release);
        self.fail_and_stop();
        match self.mmio.revoke() {
            Ok(true) => log::debug!("{}: register window revoked", self.name),
            Ok(false) => {}
            Err(e) => log::error!("{}: revoking the register window failed: {e}", self.name),
        }
    }

    fn shutdown(&self) {
        let cc = Cc(self.mmio.read32(regs::CC));
        if !cc.en() {
            return;
        }
        self.mmio
            .write32(regs::CC, cc.with_shn(ShutdownNotification::Normal).0);
        let rtd3e = Duration::from_micros(self.identify.rtd3e as u64);
        let timeout = if rtd3e.is_zero() {
            DEFAULT_SHUTDOWN_TIMEOUT
        } else {
            rtd3e.max(REGISTER_POLL * 10)
        };
        let start = Instant::now();
        while start.elapsed() < timeout {
            let csts = Csts(self.mmio.read32(regs::CSTS));
            if csts.shst() == ShutdownStatus::Complete {
                log::debug!("{}: shutdown complete", self.name);
                return;
            }
            if csts.cfs() {
                break;
            }
            std::thread::sleep(REGISTER_POLL);
        }
        log::warn!(
            "{}: shutdown did not complete within {timeout:?}",
            self.name
        );
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        if !self.irq_events.is_empty() {
            if let Some(ctl) = &self.interrupts {
                ctl.disable_msix();
            }
        }
        if self.shutdown_on_drop && !self.is_failed() {
            self.shutdown();
        }
        // Before the admin rings, shadow doorbell pages and identify data are freed (when the
        // fields drop after this), the controller must be unable to reach them: disabled and
        // bus mastering off, or the memory leaks (`stop_dma` retires the mapper).
        self.stop_dma();
    }
}
