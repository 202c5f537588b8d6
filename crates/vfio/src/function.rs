//! Control over a device's ability to reach host memory, for teardown after a failure.

use std::sync::Arc;

use crate::error::VfioError;
use crate::irq::InterruptEvent;

/// What teardown needs from the platform once the controller may still be running commands:
/// a way to stop the function from issuing DMA before its memory is released.
pub trait FunctionControl: Send + Sync {
    /// Clears Bus Master Enable in the PCI Command register (PCIe Base 6.0 §7.5.1.1.3): the
    /// function can no longer issue memory requests. Returns once the write is done.
    fn disable_bus_master(&self) -> Result<(), VfioError>;

    /// Sets Bus Master Enable again (after a controller reset that found the controller
    /// disabled and safe).
    fn enable_bus_master(&self) -> Result<(), VfioError>;

    /// An eventfd signalled when the kernel asks for the device back (VFIO's device request
    /// interrupt, `VFIO_PCI_REQ_IRQ_INDEX`: an unbind or a hot-unplug request). The kernel
    /// waits for the device to be released, so the owner must fail its I/O and close it.
    /// `None` when the platform has no such notification.
    fn request_notifier(&self) -> Result<Option<Arc<InterruptEvent>>, VfioError> {
        Ok(None)
    }
}
