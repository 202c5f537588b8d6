//! [`DmaContext`]: one DMA address space that several controllers join, so one buffer pool
//! serves them all.
//!
//! With VFIO a context is one container ([`nvme_vfio::DmaContext`]): every controller opened
//! in it ([`Controller::open_pci_in`]) has its IOMMU group joined to the container, so an IOVA
//! means the same memory to all of them. A buffer allocated from the context
//! ([`DmaContext::alloc_buffer`], [`DmaContext::dma`]) or from any member controller
//! ([`Controller::alloc_buffer`]) can be submitted on any member; a buffer of another context
//! is refused with [`Error::ForeignBuffer`](crate::Error::ForeignBuffer) (one compare of the
//! buffer's [`DmaDomain`] per submission).
//!
//! The context's domain is its retirement guard's, not the platform mapper's: buffers
//! allocated straight from the platform mapper (a VFIO container's mapper, the emulator's
//! `SimDma`), or from another context made over the same mapper, are refused too, since
//! retiring this context could not keep them mapped.
//!
//! [`Controller::open_pci`] and [`Controller::new`] make a private context per controller, so
//! opening one controller stays one call.
//!
//! Failure rule: when one controller of a context fails and cannot be confirmed stopped, the
//! whole context is retired (its device may reach any IOVA of the address space): from then on
//! every buffer of the context leaks instead of being unmapped and freed, and new mappings are
//! refused. Close the context's controllers and reset the function to recover.

use std::sync::Arc;

use nvme_vfio::{DmaBuffer, DmaDomain, DmaMapper};

use crate::teardown::GuardedMapper;
#[cfg(doc)]
use crate::Controller;
use crate::Result;

/// A DMA address space shared by the controllers opened in it. Cheap to clone (all clones
/// are the same context); `Send + Sync`. It lives as long as any clone, controller or buffer
/// of it.
#[derive(Clone)]
pub struct DmaContext {
    guard: Arc<GuardedMapper>,
    /// `guard` as the trait object buffers hold.
    dma: Arc<dyn DmaMapper>,
    vfio: Option<nvme_vfio::DmaContext>,
}

impl std::fmt::Debug for DmaContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DmaContext")
            .field("domain", &self.domain())
            .field("vfio", &self.vfio)
            .finish()
    }
}

impl DmaContext {
    /// A new, empty VFIO context (one type1v2 container). Open controllers in it with
    /// [`Controller::open_pci_in`]; buffers can be allocated once the first one is open.
    pub fn new() -> Result<Self> {
        Ok(Self::from_vfio(nvme_vfio::DmaContext::new()?))
    }

    /// Wraps a VFIO context (e.g. one made with [`nvme_vfio::DmaContext::new_at`]).
    pub fn from_vfio(ctx: nvme_vfio::DmaContext) -> Self {
        let mut this = Self::with_mapper(ctx.mapper());
        this.vfio = Some(ctx);
        this
    }

    /// A context over any platform mapper: controllers whose [`Transport`](crate::Transport)
    /// maps through this same mapper join it with [`Controller::new_in`] (the in-process
    /// emulator shares one `nvme_sim::SimDma` this way).
    pub fn with_mapper(mapper: Arc<dyn DmaMapper>) -> Self {
        let guard = Arc::new(GuardedMapper::new(mapper));
        Self {
            dma: guard.clone(),
            guard,
            vfio: None,
        }
    }

    /// The DMA domain of every buffer of the context: the context's own, distinct from the
    /// platform mapper's it was made from (buffers of that mapper are refused).
    pub fn domain(&self) -> DmaDomain {
        self.dma.domain()
    }

    /// The domain of the platform mapper the context was made from.
    pub(crate) fn platform_domain(&self) -> DmaDomain {
        self.guard.platform_domain()
    }

    /// The context's mapper, to allocate ([`DmaBuffer::allocate`]) or register
    /// ([`DmaBuffer::register_raw`]) buffers valid on every controller of the context.
    pub fn dma(&self) -> &Arc<dyn DmaMapper> {
        &self.dma
    }

    /// Allocates a zero-filled DMA buffer of `len` bytes valid on every controller of the
    /// context.
    pub fn alloc_buffer(&self, len: usize) -> Result<DmaBuffer> {
        Ok(DmaBuffer::allocate(&self.dma, len)?)
    }

    /// The VFIO context underneath, if this is one.
    pub fn vfio(&self) -> Option<&nvme_vfio::DmaContext> {
        self.vfio.as_ref()
    }

    pub(crate) fn guard(&self) -> &Arc<GuardedMapper> {
        &self.guard
    }

    /// Whether `mapper` (a transport's platform mapper) maps into this context's address
    /// space: it is the mapper the context was made from.
    pub(crate) fn contains(&self, mapper: &dyn DmaMapper) -> bool {
        mapper.domain() == self.platform_domain()
    }
}
