//! MSI-X routing: one vector per queue (vector 0 the admin queue, vector q I/O queue q) to an
//! eventfd, for queue pairs that block while idle. Set up once at bring-up; the routing lives in
//! VFIO and survives resets.

use std::sync::Arc;

use nvme_core::{Error, Result};
use nvme_vfio::InterruptEvent;

use super::Inner;

impl Inner {
    /// Routes one MSI-X vector per queue (admin + granted I/O queues, as far as the function
    /// has vectors) to eventfds.
    pub(super) fn enable_interrupts(&mut self) -> Result<()> {
        let Some(ctl) = &self.interrupts else {
            return Err(Error::Unsupported {
                controller: self.name.clone(),
                what: "this transport cannot deliver interrupts (polled mode only)".into(),
            });
        };
        let available = ctl.msix_vectors();
        let count = (self.io_queues as u32 + 1).min(available);
        if count < 2 {
            return Err(Error::Unsupported {
                controller: self.name.clone(),
                what: format!(
                    "it offers {available} MSI-X vectors; interrupt mode needs at least 2"
                ),
            });
        }
        self.irq_events = ctl.enable_msix(count)?;
        log::info!("{}: {count} MSI-X vectors routed to eventfds", self.name);
        Ok(())
    }

    /// The eventfd of vector `vector`, if routed.
    pub(crate) fn irq_event(&self, vector: u16) -> Option<Arc<InterruptEvent>> {
        self.irq_events.get(vector as usize).cloned()
    }
}
