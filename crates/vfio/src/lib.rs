//! VFIO access for a userspace NVMe driver.
//!
//! - [`mmio`]: volatile register windows and doorbells (the only place device registers are
//!   dereferenced).
//! - [`dma`]: DMA memory ([`dma::DmaRegion`] shared with the device, [`dma::DmaBuffer`] owned by
//!   the CPU) and the [`dma::DmaMapper`] seam that VFIO and the in-process emulator implement.

pub mod dma;
pub mod mmio;

pub use dma::{DmaBuffer, DmaError, DmaMapper, DmaRegion, Iova};
pub use mmio::{Doorbell, MappingOwner, Mmio};
