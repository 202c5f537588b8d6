//! Buffers for NVMe/TCP: ordinary process memory behind the `DmaMapper` seam, so the same
//! `DmaBuffer` type moves through TCP and PCIe queue pairs. No device ever reads these
//! addresses: the transport copies data between the buffer and the socket with the CPU.

use std::ptr::NonNull;

use nvme_vfio::{DmaDomain, DmaError, DmaMapper, Iova};

/// Identity "mapping" of host memory: the IOVA of a buffer is its virtual address.
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
