//! Health checks: at most every `HEALTH_INTERVAL` the timeout clock reads CSTS once, to fail
//! fast on a fatal controller (CSTS.CFS) or a removed device (registers read all ones), and
//! notices the kernel asking for the device back.
//!
//! INVARIANT: a dead controller is marked removed or failed (and stopped, when it can be)
//! before its requests are reported; never on the per-I/O path.

use std::time::Duration;

use nvme_spec::regs;
use nvme_spec::regs::Csts;

use super::QueuePair;
use crate::controller::ALL_ONES;

/// Why every command in flight is lost at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Dead {
    /// CSTS.CFS: Controller Fatal Status.
    Fatal,
    /// Registers read all ones: surprise removal or link down.
    Removed,
    /// The kernel asked for the device back (VFIO device request: unbind, hot-unplug).
    Released,
}

/// Most time between two CSTS reads of a polled queue pair (fail-fast on a dead device).
pub(super) const HEALTH_INTERVAL: Duration = Duration::from_millis(50);

impl QueuePair {
    /// Reads CSTS once: all ones (the device is gone) or CFS (fatal) mark the controller
    /// failed and stop it (a removed device cannot be confirmed stopped: its memory leaks).
    /// Returns which, if either.
    #[cold]
    pub(super) fn check_health(&mut self) -> Option<Dead> {
        if self.ctrl.release_requested() {
            log::error!(
                "{}: the kernel asks for the device back (unbind or hot-unplug); failing all \
                 I/O: close the controller to release it",
                self.ctrl.name
            );
            self.ctrl.mark_removed();
            return Some(Dead::Released);
        }
        if self.ctrl.is_removed() {
            return Some(Dead::Removed);
        }
        let raw = self.ctrl.mmio.read32(regs::CSTS);
        let dead = if raw == ALL_ONES {
            Dead::Removed
        } else if Csts(raw).cfs() {
            Dead::Fatal
        } else {
            return None;
        };
        if dead == Dead::Removed && !self.ctrl.is_removed() {
            log::error!(
                "{}: registers read all ones: the device is gone; failing all I/O",
                self.ctrl.name
            );
            self.ctrl.mark_removed();
        } else if !self.ctrl.is_failed() {
            log::error!(
                "{}: {}; failing all I/O and stopping the controller",
                self.ctrl.name,
                match dead {
                    Dead::Fatal => "Controller Fatal Status (CSTS.CFS=1)",
                    _ => "registers read all ones: the device is gone",
                }
            );
            self.ctrl.fail_and_stop();
        }
        Some(dead)
    }
}
