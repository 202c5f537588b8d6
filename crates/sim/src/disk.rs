//! The emulated medium: one zero-filled byte vector per namespace.
//!
//! Each namespace's bytes sit behind their own mutex: the device thread holds it for the data
//! phase of one command, tests hold it to inspect or seed the medium.
//!
//! A namespace's geometry never changes in place: a format or resize
//! ([`Disks::reformat`]) replaces the whole [`Disk`], so a command that looked its namespace
//! up works on one consistent geometry and byte vector to its end.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

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
    /// End-to-end protection settings as DPS: bits 2:0 the PI type (0: none), bit 3 PI in
    /// the first metadata bytes.
    pub protection: u8,
    /// The PI format (16- or 64-bit guard).
    pub pi_format: nvme_spec::protection::PiFormat,
    /// Attached to the controller: listed as active and served. A detached namespace keeps
    /// its bytes (re-attaching brings them back), as a namespace management detach would.
    attached: AtomicBool,
    data: Mutex<Vec<u8>>,
    /// Blocks marked by Write Uncorrectable and not written since (NVM CS §3.3.7).
    uncorrectable: Mutex<BTreeSet<u64>>,
    /// `uncorrectable` is not empty: one load spares every other command the lock.
    any_uncorrectable: AtomicBool,
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

    /// Marks blocks `slba..slba + nlb` (range checked) uncorrectable.
    pub fn mark_uncorrectable(&self, slba: u64, nlb: u64) {
        let mut set = self.uncorrectable.lock().unwrap_or_else(|e| e.into_inner());
        set.extend(slba..slba + nlb);
        self.any_uncorrectable.store(true, Ordering::Release);
    }

    /// Whether any of blocks `slba..slba + nlb` is uncorrectable.
    pub fn is_uncorrectable(&self, slba: u64, nlb: u64) -> bool {
        if !self.any_uncorrectable.load(Ordering::Acquire) {
            return false;
        }
        let set = self.uncorrectable.lock().unwrap_or_else(|e| e.into_inner());
        set.range(slba..slba.saturating_add(nlb)).next().is_some()
    }

    /// Blocks `slba..slba + nlb` were written: they are correctable again.
    pub fn clear_uncorrectable(&self, slba: u64, nlb: u64) {
        if !self.any_uncorrectable.load(Ordering::Acquire) {
            return;
        }
        let mut set = self.uncorrectable.lock().unwrap_or_else(|e| e.into_inner());
        let end = slba.saturating_add(nlb);
        let mut tail = set.split_off(&slba);
        let mut rest = tail.split_off(&end);
        set.append(&mut rest);
        self.any_uncorrectable
            .store(!set.is_empty(), Ordering::Release);
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
pub(crate) struct Disks(RwLock<Vec<Arc<Disk>>>, ChangedList);

/// Namespaces attached or detached since the host last read the Changed Namespace List log
/// page (NVMe Base 2.0 §5.16.1.5).
#[derive(Default)]
struct ChangedList(Mutex<Vec<u32>>);

impl Disk {
    /// A namespace of geometry `ns` over `data` (zero-filled to the geometry's size).
    fn new(ns: &SimNamespace, attached: bool, mut data: Vec<u8>) -> Self {
        let per_block = u64::from(ns.block_size) + u64::from(ns.metadata_size);
        let bytes = ns
            .blocks
            .checked_mul(per_block)
            .and_then(|b| usize::try_from(b).ok())
            .expect("namespace larger than the address space");
        // `vec![0; n]` gets lazily zeroed pages from the allocator, so large namespaces cost
        // nothing until written.
        let fresh = data.is_empty();
        if fresh {
            data = vec![0u8; bytes];
        } else {
            data.resize(bytes, 0);
        }
        let mut disk = Disk {
            nsid: ns.nsid,
            block_size: ns.block_size,
            blocks: ns.blocks,
            metadata_size: ns.metadata_size,
            extended: ns.extended,
            protection: ns.protection,
            pi_format: ns.pi_format,
            attached: AtomicBool::new(attached),
            data: Mutex::new(Vec::new()),
            uncorrectable: Mutex::new(BTreeSet::new()),
            any_uncorrectable: AtomicBool::new(false),
        };
        if fresh {
            // Never-written blocks carry escape PI (not checked), as QEMU's read them.
            crate::device::pi::reset_pi(&disk, &mut data, 0, ns.blocks);
        }
        disk.data = Mutex::new(data);
        disk
    }

    /// This namespace's geometry.
    pub fn geometry(&self) -> SimNamespace {
        SimNamespace {
            nsid: self.nsid,
            block_size: self.block_size,
            blocks: self.blocks,
            metadata_size: self.metadata_size,
            extended: self.extended,
            protection: self.protection,
            pi_format: self.pi_format,
        }
    }
}

impl Disks {
    pub fn new(namespaces: &[SimNamespace]) -> Self {
        Disks(
            RwLock::new(
                namespaces
                    .iter()
                    .map(|ns| Arc::new(Disk::new(ns, true, Vec::new())))
                    .collect(),
            ),
            ChangedList::default(),
        )
    }

    /// Namespaces of these geometries holding `data(nsid)` (a medium after a power cycle).
    pub fn from_medium(namespaces: &[SimNamespace], data: impl Fn(u32) -> Vec<u8>) -> Self {
        Disks(
            RwLock::new(
                namespaces
                    .iter()
                    .map(|ns| Arc::new(Disk::new(ns, true, data(ns.nsid))))
                    .collect(),
            ),
            ChangedList::default(),
        )
    }

    fn slots(&self) -> std::sync::RwLockReadGuard<'_, Vec<Arc<Disk>>> {
        self.0.read().unwrap_or_else(|p| p.into_inner())
    }

    /// The attached namespace with this ID (a linear scan: there are only a handful).
    #[inline]
    pub fn get(&self, nsid: u32) -> Option<Arc<Disk>> {
        self.slots()
            .iter()
            .find(|d| d.nsid == nsid && d.attached.load(Ordering::Relaxed))
            .cloned()
    }

    /// The configured namespace with this ID, attached or not.
    pub fn configured(&self, nsid: u32) -> Option<Arc<Disk>> {
        self.slots().iter().find(|d| d.nsid == nsid).cloned()
    }

    /// IDs of all configured namespaces (allocated, attached or not), in configuration order.
    pub fn configured_ids(&self) -> Vec<u32> {
        self.slots().iter().map(|d| d.nsid).collect()
    }

    /// Whether configured namespace `nsid` is attached.
    pub fn is_attached(&self, nsid: u32) -> bool {
        self.slots()
            .iter()
            .any(|d| d.nsid == nsid && d.attached.load(Ordering::Relaxed))
    }

    /// IDs of the attached namespaces, in configuration order.
    pub fn attached(&self) -> Vec<u32> {
        self.slots()
            .iter()
            .filter(|d| d.attached.load(Ordering::Relaxed))
            .map(|d| d.nsid)
            .collect()
    }

    /// Attaches or detaches configured namespace `nsid`; false when it is not configured.
    pub fn set_attached(&self, nsid: u32, attached: bool) -> bool {
        match self.slots().iter().find(|d| d.nsid == nsid) {
            Some(d) => {
                d.attached.store(attached, Ordering::Relaxed);
                self.record_change(nsid);
                true
            }
            None => false,
        }
    }

    /// Replaces configured namespace `nsid` with the geometry `change` makes of the current
    /// one (same nsid, same attachment); `keep_data`: the first blocks' data (and separate
    /// metadata) carry over, as after a resize, else the medium reads zeros, as after a
    /// format. Returns the new geometry, or None when `nsid` is not configured. Commands
    /// already executing finish on the old namespace.
    pub fn reformat(
        &self,
        nsid: u32,
        keep_data: bool,
        change: impl FnOnce(&mut SimNamespace),
    ) -> Option<SimNamespace> {
        let mut slots = self.0.write().unwrap_or_else(|p| p.into_inner());
        let slot = slots.iter_mut().find(|d| d.nsid == nsid)?;
        let mut geometry = slot.geometry();
        change(&mut geometry);
        let data = if keep_data {
            let old = slot.lock();
            let kept = geometry.blocks.min(slot.blocks);
            let new = Disk::new(&geometry, false, Vec::new());
            {
                let mut bytes = new.lock();
                let area = (kept * slot.lba_stride()) as usize;
                bytes[..area].copy_from_slice(&old[..area]);
                let ms = u64::from(slot.separate_metadata());
                let (from, to) = (slot.metadata_base() as usize, new.metadata_base() as usize);
                let meta = (kept * ms) as usize;
                bytes[to..to + meta].copy_from_slice(&old[from..from + meta]);
            }
            new.data.into_inner().unwrap_or_else(|p| p.into_inner())
        } else {
            Vec::new()
        };
        let attached = slot.attached.load(Ordering::Relaxed);
        *slot = Arc::new(Disk::new(&geometry, attached, data));
        drop(slots);
        self.record_change(nsid);
        Some(geometry)
    }

    /// Adds `nsid` to the Changed Namespace List.
    fn record_change(&self, nsid: u32) {
        let mut changed = self.1 .0.lock().unwrap_or_else(|p| p.into_inner());
        if !changed.contains(&nsid) {
            changed.push(nsid);
        }
    }

    /// Takes the IDs changed since the last call (the Changed Namespace List; reading it
    /// clears it).
    pub fn take_changed(&self) -> Vec<u32> {
        std::mem::take(&mut *self.1 .0.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// The namespace or a panic naming the configured IDs (test helper paths only).
    pub fn expect(&self, nsid: u32) -> Arc<Disk> {
        let slots = self.slots();
        slots
            .iter()
            .find(|d| d.nsid == nsid)
            .cloned()
            .unwrap_or_else(|| {
                let ids: Vec<u32> = slots.iter().map(|d| d.nsid).collect();
                panic!("no namespace {nsid} in the emulated controller (configured: {ids:?})")
            })
    }
}
