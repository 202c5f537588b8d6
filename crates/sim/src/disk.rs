//! The emulated medium: one zero-filled byte vector per namespace.
//!
//! Each namespace's bytes sit behind their own mutex: the device thread holds it for the data
//! phase of one command, tests hold it to inspect or seed the medium.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};

use crate::config::SimNamespace;

/// One namespace's storage.
pub(crate) struct Disk {
    pub nsid: u32,
    pub block_size: u32,
    pub blocks: u64,
    /// Metadata bytes per block (0 = none).
    pub metadata_size: u16,
    /// Metadata interleaved after each block's data (extended LBA).
    pub extended: bool,
    /// End-to-end protection type (DPS bits 2:0), reported only.
    pub protection: u8,
    /// Attached to the controller: listed as active and served. A detached namespace keeps
    /// its bytes (re-attaching brings them back), as a namespace management detach would.
    attached: AtomicBool,
    data: Mutex<Vec<u8>>,
}

impl Disk {
    /// Locks the namespace's bytes.
    pub fn lock(&self) -> MutexGuard<'_, Vec<u8>> {
        self.data.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Size in bytes (data and metadata).
    pub fn bytes(&self) -> u64 {
        self.blocks * (u64::from(self.block_size) + u64::from(self.metadata_size))
    }

    /// Bytes one logical block occupies in a data buffer (and in the medium's block area):
    /// data plus interleaved metadata for extended LBAs, data only otherwise.
    pub fn lba_stride(&self) -> u64 {
        u64::from(self.block_size)
            + if self.extended {
                u64::from(self.metadata_size)
            } else {
                0
            }
    }

    /// Metadata bytes kept apart from the data (separate-buffer metadata via MPTR).
    pub fn separate_metadata(&self) -> u16 {
        if self.extended {
            0
        } else {
            self.metadata_size
        }
    }

    /// Medium offset of the separate metadata area (it follows the data blocks).
    pub fn metadata_base(&self) -> u64 {
        self.blocks * self.lba_stride()
    }
}

/// All namespaces, in configuration order.
pub(crate) struct Disks(Vec<Disk>, ChangedList);

/// Namespaces attached or detached since the host last read the Changed Namespace List log
/// page (NVMe Base 2.0 §5.16.1.5).
#[derive(Default)]
struct ChangedList(Mutex<Vec<u32>>);

impl Disks {
    pub fn new(namespaces: &[SimNamespace]) -> Self {
        Disks(
            namespaces
                .iter()
                .map(|ns| {
                    let per_block = u64::from(ns.block_size) + u64::from(ns.metadata_size);
                    let bytes = ns
                        .blocks
                        .checked_mul(per_block)
                        .and_then(|b| usize::try_from(b).ok())
                        .expect("namespace larger than the address space");
                    Disk {
                        nsid: ns.nsid,
                        block_size: ns.block_size,
                        blocks: ns.blocks,
                        metadata_size: ns.metadata_size,
                        extended: ns.extended,
                        protection: ns.protection,
                        attached: AtomicBool::new(true),
                        // `vec![0; n]` gets lazily zeroed pages from the allocator, so large
                        // namespaces cost nothing until written.
                        data: Mutex::new(vec![0u8; bytes]),
                    }
                })
                .collect(),
            ChangedList::default(),
        )
    }

    /// The attached namespace with this ID (a linear scan: there are only a handful).
    #[inline]
    pub fn get(&self, nsid: u32) -> Option<&Disk> {
        self.0
            .iter()
            .find(|d| d.nsid == nsid && d.attached.load(Ordering::Relaxed))
    }

    /// IDs of the attached namespaces, in configuration order.
    pub fn attached(&self) -> impl Iterator<Item = u32> + '_ {
        self.0
            .iter()
            .filter(|d| d.attached.load(Ordering::Relaxed))
            .map(|d| d.nsid)
    }

    /// Attaches or detaches configured namespace `nsid`; false when it is not configured.
    pub fn set_attached(&self, nsid: u32, attached: bool) -> bool {
        match self.0.iter().find(|d| d.nsid == nsid) {
            Some(d) => {
                d.attached.store(attached, Ordering::Relaxed);
                let mut changed = self.1 .0.lock().unwrap_or_else(|p| p.into_inner());
                if !changed.contains(&nsid) {
                    changed.push(nsid);
                }
                true
            }
            None => false,
        }
    }

    /// Takes the IDs changed since the last call (the Changed Namespace List; reading it
    /// clears it).
    pub fn take_changed(&self) -> Vec<u32> {
        std::mem::take(&mut *self.1 .0.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// The namespace or a panic naming the configured IDs (test helper paths only).
    pub fn expect(&self, nsid: u32) -> &Disk {
        self.0.iter().find(|d| d.nsid == nsid).unwrap_or_else(|| {
            let ids: Vec<u32> = self.0.iter().map(|d| d.nsid).collect();
            panic!("no namespace {nsid} in the emulated controller (configured: {ids:?})")
        })
    }
}
