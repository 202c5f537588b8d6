//! Errors of DMA allocation and mapping ([`DmaError`]).

use super::{Iova, PAGE_SIZE};
use thiserror::Error;

/// Errors of DMA allocation and mapping. New variants may be added (`#[non_exhaustive]`).
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum DmaError {
    /// mmap of host memory failed.
    #[error("cannot allocate {len} bytes of DMA memory ({kind}): {source}")]
    Allocate {
        /// Length in bytes.
        len: usize,
        /// What kind of memory was asked for.
        kind: &'static str,
        /// The underlying I/O error.
        source: std::io::Error,
    },
    /// Hugepages were required but none could be allocated.
    #[error(
        "no free 2 MiB hugepages for a {len}-byte DMA allocation: reserve some with \
         `sudo HUGEMEM=256 ./hugepage-setup.sh config` (or `echo 128 > /proc/sys/vm/nr_hugepages`)"
    )]
    NoHugepages {
        /// Length in bytes.
        len: usize,
    },
    /// The IOVA space reported by the IOMMU has no free range large enough.
    #[error("IOVA space exhausted: no free range of {len} bytes in the IOMMU's valid ranges")]
    IovaExhausted {
        /// Length in bytes.
        len: usize,
    },
    /// The IOMMU refused the mapping (VFIO_IOMMU_MAP_DMA failed).
    #[error("IOMMU mapping of {len} bytes at IOVA {iova} failed: {source}{hint}")]
    Map {
        /// The I/O virtual address.
        iova: Iova,
        /// Length in bytes.
        len: usize,
        /// The underlying I/O error.
        source: std::io::Error,
        /// A hint on the likely cause.
        hint: &'static str,
    },
    /// Removing a mapping failed (VFIO_IOMMU_UNMAP_DMA).
    #[error("IOMMU unmapping of {len} bytes at IOVA {iova} failed: {source}")]
    Unmap {
        /// The I/O virtual address.
        iova: Iova,
        /// Length in bytes.
        len: usize,
        /// The underlying I/O error.
        source: std::io::Error,
    },
    /// Registered user memory does not meet the mapping rules.
    #[error("memory to register must be page-aligned ({PAGE_SIZE} bytes) and non-empty: {what}")]
    BadRegistration {
        /// What is wrong with the memory.
        what: String,
    },
    /// No-IOMMU mode: the memory cannot be given to the device as physical addresses.
    #[error(
        "VFIO no-IOMMU mode needs pinned (private anonymous), physically contiguous hugepage \
         memory for DMA: {reason}"
    )]
    NoIommuMemory {
        /// Why the memory cannot be used.
        reason: String,
    },
    /// A requested size does not fit the address space.
    #[error("DMA allocation of {count} x {len} bytes overflows the address space; ask for less")]
    TooLarge {
        /// How many buffers were asked for.
        count: usize,
        /// Length in bytes.
        len: usize,
    },
    /// The DMA context has no device yet, so no IOMMU backend to map into.
    #[error(
        "this DMA context has no device yet: open a controller in it (e.g. \
         `Controller::open_pci_in`) before allocating or registering buffers"
    )]
    NoDevice,
}
