//! The emulated medium: one zero-filled byte vector per namespace.
//!
//! Each namespace's bytes sit behind their own mutex: the device thread holds it for the data
//! phase of one command, tests hold it to inspect or seed the medium.

use std::sync::{Mutex, MutexGuard};

use crate::config::SimNamespace;

/// One namespace's storage.
pub(crate) struct Disk {
    pub nsid: u32,
    pub block_size: u32,
    pub blocks: u64,
    data: Mutex<Vec<u8>>,
}

impl Disk {
    /// Locks the namespace's bytes.
    pub fn lock(&self) -> MutexGuard<'_, Vec<u8>> {
        self.data.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Size in bytes.
    pub fn bytes(&self) -> u64 {
        self.blocks * u64::from(self.block_size)
    }
}

/// All namespaces, in configuration order.
pub(crate) struct Disks(Vec<Disk>);

impl Disks {
    pub fn new(namespaces: &[SimNamespace]) -> Self {
        Disks(
            namespaces
                .iter()
                .map(|ns| {
                    let bytes = usize::try_from(ns.blocks * u64::from(ns.block_size))
                        .expect("namespace larger than the address space");
                    Disk {
                        nsid: ns.nsid,
                        block_size: ns.block_size,
                        blocks: ns.blocks,
                        // `vec![0; n]` gets lazily zeroed pages from the allocator, so large
                        // namespaces cost nothing until written.
                        data: Mutex::new(vec![0u8; bytes]),
                    }
                })
                .collect(),
        )
    }

    /// The namespace with this ID (a linear scan: there are only a handful).
    #[inline]
    pub fn get(&self, nsid: u32) -> Option<&Disk> {
        self.0.iter().find(|d| d.nsid == nsid)
    }

    /// The namespace or a panic naming the configured IDs (test helper paths only).
    pub fn expect(&self, nsid: u32) -> &Disk {
        self.get(nsid).unwrap_or_else(|| {
            let ids: Vec<u32> = self.0.iter().map(|d| d.nsid).collect();
            panic!("no namespace {nsid} in the emulated controller (configured: {ids:?})")
        })
    }
}
