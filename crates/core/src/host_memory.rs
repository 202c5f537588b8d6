//! [`HostMemory`]: the buffer source of CPU-copy transports (NVMe/TCP, and any future one
//! that moves data with the CPU rather than by DMA). Ordinary process memory behind the
//! `DmaMapper` seam, so the same `DmaBuffer` type moves through TCP and PCIe queue pairs.
//!
//! INVARIANT: no device is ever given these addresses. The "IOVA" of a buffer is its virtual
//! address, meaningful only to the process itself; the transport copies data between the
//! buffer and its socket with the CPU. Handing such a buffer to a PCIe queue pair is refused
//! by the domain check (`Error::ForeignBuffer`): the domain is unique to each `HostMemory`.

use std::ptr::NonNull;
use std::sync::Arc;

use nvme_vfio::{DmaDomain, DmaError, DmaMapper, Iova};

/// Identity "mapping" of host memory, for buffers no device ever reads: the IOVA of a buffer
/// is its virtual address. A first-class allocator for CPU-copy transports (the NVMe/TCP
/// controller allocates its buffers from one).
///
/// ```
/// use nvme_core::{DmaBuffer, HostMemory};
///
/// let memory = HostMemory::mapper();
/// let mut buf = DmaBuffer::allocate(&memory, 4096)?;
/// buf[..5].copy_from_slice(b"hello");
/// assert_eq!(buf.domain(), memory.domain());
/// # Ok::<(), nvme_core::DmaError>(())
/// ```
#[derive(Debug)]
pub struct HostMemory {
    domain: DmaDomain,
}

impl HostMemory {
    /// A new mapper with a domain of its own.
    pub fn new() -> Self {
        Self {
            domain: DmaDomain::unique(),
        }
    }

    /// A new mapper with a domain of its own, as the shared trait object
    /// `DmaBuffer::allocate` takes.
    pub fn mapper() -> Arc<dyn DmaMapper> {
        Arc::new(Self::new())
    }
}

impl Default for HostMemory {
    fn default() -> Self {
        Self::new()
    }
}

// SAFETY: the IOVA returned is the virtual address itself, so it translates to exactly the
// memory passed in for as long as that memory is allocated (the caller's contract), and two
// live allocations never share an address, so no two live mappings share an IOVA. The domain
// comes from `DmaDomain::unique` and never changes. Nothing hands these IOVAs to a device.
unsafe impl DmaMapper for HostMemory {
    unsafe fn map(&self, vaddr: NonNull<u8>, _len: usize) -> Result<Iova, DmaError> {
        Ok(Iova(vaddr.as_ptr() as u64))
    }

    fn unmap(&self, _iova: Iova, _len: usize) -> Result<(), DmaError> {
        Ok(())
    }

    fn domain(&self) -> DmaDomain {
        self.domain
    }
}
