//! Shadow doorbells (Doorbell Buffer Config, NVMe Base 2.0 §5.8): allocating the shadow and
//! EventIdx pages, configuring them (at bring-up, and again after each reset), and routing the
//! admin queue's doorbells through them. I/O queues use them through [`ShadowBuffers`].
//!
//! INVARIANT: before the controller starts reading the shadow entries they hold what the admin
//! rings will hold (see `configure_shadow`).

use std::sync::Arc;

use nvme_core::{Error, Result};
use nvme_spec::{command, Oacs};

use crate::ring::ShadowBuffers;

use super::{Controller, Inner};

impl Controller {
    /// Whether shadow doorbells (Doorbell Buffer Config) are in use.
    pub fn shadow_doorbells(&self) -> bool {
        self.inner.has_shadow()
    }
}

impl Inner {
    /// Sets up shadow doorbells (NVMe Base 2.0 §5.8) if the controller supports them.
    pub(super) fn enable_shadow_doorbells(&mut self) -> Result<()> {
        if !self
            .identify
            .oacs_flags()
            .contains(Oacs::DOORBELL_BUFFER_CONFIG)
        {
            return Ok(());
        }
        let stride = self.cap.doorbell_stride();
        let Some(buffers) = ShadowBuffers::new(
            &self.dma,
            self.page_size,
            stride,
            self.io_queues as usize + 1,
        )?
        else {
            log::info!(
                "{}: shadow doorbells skipped: {} queues do not fit one page",
                self.name,
                self.io_queues + 1
            );
            return Ok(());
        };
        let buffers = Arc::new(buffers);
        if self.configure_shadow(&buffers)? {
            log::info!("{}: shadow doorbells enabled", self.name);
            self.shadow = Some(buffers);
        }
        Ok(())
    }

    /// Doorbell Buffer Config with `buffers` (all entries zeroed first); routes the admin
    /// doorbells through them. Returns false when the controller refuses the command.
    pub(super) fn configure_shadow(&self, buffers: &Arc<ShadowBuffers>) -> Result<bool> {
        for index in 0..buffers.entries() {
            drop(buffers.slot(index, 0));
        }
        let entries = {
            let admin = self.admin.lock().unwrap_or_else(|p| p.into_inner());
            admin.entries()
        };
        // Before the controller starts reading the shadow entries, they must hold what the
        // admin rings will hold: the SQ tail after this very command, and the CQ head as it is
        // (a head one ahead would make the controller think the CQ is full).
        let (sq_tail, cq_head) = self
            .admin
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .positions();
        drop(buffers.slot(0, (sq_tail + 1) % entries));
        drop(buffers.slot(1, cq_head));
        let sqe =
            command::doorbell_buffer_config(buffers.shadow_iova().0, buffers.event_idx_iova().0);
        match self.admin(sqe, None) {
            Ok(_) => {}
            Err(Error::Command { status, .. }) => {
                log::info!(
                    "{}: Doorbell Buffer Config refused ({status}); using MMIO doorbells",
                    self.name
                );
                return Ok(false);
            }
            Err(e) => return Err(e),
        }
        let mut admin = self.admin.lock().unwrap_or_else(|p| p.into_inner());
        let (sq_tail, cq_head) = admin.positions();
        admin.set_shadow(buffers.slot(0, sq_tail), buffers.slot(1, cq_head));
        Ok(true)
    }

    /// Whether shadow doorbells are in use.
    pub(crate) fn has_shadow(&self) -> bool {
        self.shadow.is_some()
    }
}
