//! How a controller is opened: [`ControllerOptions`] (with builder-style setters) and the
//! policies it carries, [`ShadowDoorbells`] and [`TimeoutAction`]. Plain data: nothing here
//! touches the device; bring-up reads the options once.

use std::time::Duration;

pub use nvme_core::TimeoutAction;

use crate::platform::CpuPlatform;

#[cfg(doc)]
use super::Controller;
#[cfg(doc)]
use nvme_core::Error;

/// Number of I/O queue pairs asked for by default (the controller may grant fewer).
pub const DEFAULT_IO_QUEUES: u16 = 64;

/// How the controller is opened.
#[derive(Clone, Debug)]
pub struct ControllerOptions {
    /// I/O submission/completion queue pairs to ask for (Set Features Number of Queues).
    pub io_queues: u16,
    /// Admin queue entries (2..=4096, capped by CAP.MQES+1).
    pub admin_entries: u32,
    /// Timeout for each admin command.
    pub admin_timeout: Duration,
    /// Send a normal shutdown notification (CC.SHN) when the controller is dropped.
    pub shutdown_on_drop: bool,
    /// Shadow doorbells (Doorbell Buffer Config, NVMe Base 2.0 §5.8) where the controller
    /// offers them: by the platform rule ([`ShadowDoorbells::Auto`], the default), always, or
    /// never. In effect: [`Controller::shadow_doorbells`].
    pub shadow_doorbells: ShadowDoorbells,
    /// Describe the data of reads, writes and compares with an SGL (one Data Block
    /// descriptor in the command, NVMe Base 2.0 §4.1.2) when the controller offers SGLs for
    /// I/O commands (Identify Controller SGLS bits 1:0); `false` forces PRPs (§4.1.1). Admin
    /// commands always use PRPs. Decided once at bring-up: [`Controller::sgl`].
    pub sgl: bool,
    /// Route MSI-X vectors to eventfds so queue pairs created with
    /// `QueuePairOptions::interrupts` can block while idle (vector = queue id).
    pub interrupts: bool,
    /// What a queue pair does about a command that timed out (see [`TimeoutAction`]).
    pub timeout_action: TimeoutAction,
}

/// Builder-style setters: `ControllerOptions::default().io_queues(..)`. The fields stay public for now;
/// prefer the setters, which keep working if the fields become private.
impl ControllerOptions {
    /// Sets [`ControllerOptions::io_queues`]: I/O queue pairs to ask for.
    #[must_use]
    pub fn io_queues(mut self, io_queues: u16) -> Self {
        self.io_queues = io_queues;
        self
    }

    /// Sets [`ControllerOptions::admin_entries`]: admin queue entries.
    #[must_use]
    pub fn admin_entries(mut self, admin_entries: u32) -> Self {
        self.admin_entries = admin_entries;
        self
    }

    /// Sets [`ControllerOptions::admin_timeout`]: the timeout of each admin command.
    #[must_use]
    pub fn admin_timeout(mut self, admin_timeout: Duration) -> Self {
        self.admin_timeout = admin_timeout;
        self
    }

    /// Sets [`ControllerOptions::shutdown_on_drop`]: normal shutdown when the controller is dropped.
    #[must_use]
    pub fn shutdown_on_drop(mut self, shutdown_on_drop: bool) -> Self {
        self.shutdown_on_drop = shutdown_on_drop;
        self
    }

    /// Sets [`ControllerOptions::shadow_doorbells`]: when to use shadow doorbells.
    #[must_use]
    pub fn shadow_doorbells(mut self, shadow_doorbells: ShadowDoorbells) -> Self {
        self.shadow_doorbells = shadow_doorbells;
        self
    }

    /// Sets [`ControllerOptions::sgl`]: SGLs for I/O data where offered (`false`: PRPs).
    #[must_use]
    pub fn sgl(mut self, sgl: bool) -> Self {
        self.sgl = sgl;
        self
    }

    /// Sets [`ControllerOptions::interrupts`]: route MSI-X vectors to eventfds.
    #[must_use]
    pub fn interrupts(mut self, interrupts: bool) -> Self {
        self.interrupts = interrupts;
        self
    }

    /// Sets [`ControllerOptions::timeout_action`]: what a timed-out command leads to.
    #[must_use]
    pub fn timeout_action(mut self, timeout_action: TimeoutAction) -> Self {
        self.timeout_action = timeout_action;
        self
    }
}

/// Whether to use shadow doorbells where the controller offers them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ShadowDoorbells {
    /// Where they pay: everywhere but under a software CPU emulator (QEMU TCG), where an MMIO
    /// write does not trap and the controller's extra DMA per command is pure cost (the rule
    /// and its measurements: [`crate::platform`], docs/performance.md).
    #[default]
    Auto,
    /// Whenever the controller offers them.
    Always,
    /// Never: MMIO doorbells only.
    Never,
}

impl ShadowDoorbells {
    /// Whether to configure them on a controller that offers them, on `platform`.
    pub fn wanted(self, platform: &CpuPlatform) -> bool {
        match self {
            ShadowDoorbells::Auto => platform.shadow_doorbells_pay(),
            ShadowDoorbells::Always => true,
            ShadowDoorbells::Never => false,
        }
    }
}

impl Default for ControllerOptions {
    fn default() -> Self {
        Self {
            io_queues: DEFAULT_IO_QUEUES,
            admin_entries: 32,
            admin_timeout: Duration::from_secs(5),
            shutdown_on_drop: true,
            shadow_doorbells: ShadowDoorbells::Auto,
            sgl: true,
            interrupts: false,
            timeout_action: TimeoutAction::AbortThenReset,
        }
    }
}
