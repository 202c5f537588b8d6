//! What the driver needs from the platform, a [`Transport`] (a register window and a DMA mapper,
//! optionally interrupt routing and bus-master control), and opening a PCI function through
//! vfio-pci into one ([`Controller::open_pci`], [`Controller::open_pci_in`]).

use std::sync::Arc;

use nvme_core::{Error, Result};
use nvme_vfio::{DmaMapper, FunctionControl, InterruptController, Mmio};

use crate::context::DmaContext;

use super::{Controller, ControllerOptions};

/// What the driver needs from the platform: a register window and a DMA mapper. VFIO gives
/// both for a PCI function; the in-process emulator gives both for tests.
pub struct Transport {
    /// BAR0 register window.
    pub mmio: Mmio,
    /// The platform mapper the controller's DMA context is made over. The controller maps
    /// through the context's retirement guard, never through this directly, and refuses
    /// buffers allocated from it ([`Error::ForeignBuffer`]): allocate through
    /// [`Controller::alloc_buffer`] or [`Controller::dma`].
    pub dma: Arc<dyn DmaMapper>,
    /// Name used in messages (a PCI address, or "sim").
    pub name: String,
    /// Keeps the underlying device open (the VFIO device, the emulator).
    pub keepalive: Option<Arc<dyn std::any::Any + Send + Sync>>,
    /// Routes MSI-X vectors to eventfds, if the platform can (for interrupt-driven queues).
    pub interrupts: Option<Arc<dyn InterruptController>>,
    /// Clears the function's bus mastering at teardown, if the platform can. Without it a
    /// controller counts as stopped once CSTS.RDY reads 0 after CC.EN is cleared.
    pub function: Option<Arc<dyn FunctionControl>>,
}

impl Transport {
    /// A transport with no interrupt support and nothing extra to keep alive.
    pub fn new(mmio: Mmio, dma: Arc<dyn DmaMapper>, name: impl Into<String>) -> Self {
        Self {
            mmio,
            dma,
            name: name.into(),
            keepalive: None,
            interrupts: None,
            function: None,
        }
    }

    /// Adds control over the function's bus mastering (used at teardown).
    pub fn with_function_control(mut self, function: Arc<dyn FunctionControl>) -> Self {
        self.function = Some(function);
        self
    }

    /// Adds MSI-X interrupt routing.
    pub fn with_interrupts(mut self, interrupts: Arc<dyn InterruptController>) -> Self {
        self.interrupts = Some(interrupts);
        self
    }
}

impl Controller {
    /// Opens the NVMe controller at a PCI address (e.g. `0000:01:00.0`) through vfio-pci, in
    /// a DMA context of its own. To share one buffer pool between controllers, open them in
    /// one [`DmaContext`] with [`Controller::open_pci_in`].
    pub fn open_pci(address: &str, options: ControllerOptions) -> Result<Self> {
        let addr: nvme_vfio::PciAddress = address.parse()?;
        let device = nvme_vfio::VfioPci::open(&addr)?;
        Self::new(Self::pci_transport(device)?, options)
    }

    /// Opens the NVMe controller at a PCI address through vfio-pci in the VFIO DMA context
    /// `ctx` (made with [`DmaContext::new`]): its IOMMU group joins the context's container,
    /// so buffers of the context (and of its other controllers) are valid on it.
    pub fn open_pci_in(
        ctx: &DmaContext,
        address: &str,
        options: ControllerOptions,
    ) -> Result<Self> {
        let addr: nvme_vfio::PciAddress = address.parse()?;
        let Some(vfio) = ctx.vfio() else {
            return Err(Error::InvalidRequest(format!(
                "cannot open {addr} in {}: it is not a VFIO context (it was made with \
                 DmaContext::with_mapper); make one with DmaContext::new",
                ctx.domain()
            )));
        };
        let device = vfio.open(&addr)?;
        Self::new_in(ctx, Self::pci_transport(device)?, options)
    }

    /// The transport of a function opened through VFIO.
    fn pci_transport(device: Arc<nvme_vfio::VfioPci>) -> Result<Transport> {
        device.enable_bus_master()?;
        let mmio = device.map_bar(0)?;
        let dma = device.dma_mapper();
        let name = device.address().to_string();
        let interrupts: Arc<dyn InterruptController> = device.clone();
        let function: Arc<dyn FunctionControl> = device.clone();
        let keepalive: Arc<dyn std::any::Any + Send + Sync> = device;
        let transport = Transport::new(mmio, dma, name)
            .with_interrupts(interrupts)
            .with_function_control(function);
        Ok(Transport {
            keepalive: Some(keepalive),
            ..transport
        })
    }
}
