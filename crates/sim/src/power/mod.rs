//! Power loss: an opt-in volatile write cache ([`SimWriteCache`]), power cuts, and the medium
//! a controller is powered on again with ([`SimMedium`]).
//!
//! With [`crate::SimConfig::write_cache`] set, writes (Write, Write Zeroes, Dataset
//! Management deallocate, Copy destinations) go through a volatile write cache (the model is
//! described in `cache.rs`): they reach the medium on Flush, with FUA, with the cache turned
//! off (Set Features Volatile Write Cache, WCE = 0), on a normal shutdown (CC.SHN), or when a
//! scheduler seeded by [`SimWriteCache::seed`] destages them. A power cut
//! ([`crate::SimController::power_cut`], or [`SimWriteCache::cut_after`] medium events)
//! resolves the cache as a real drive could and stops the controller: from then on every I/O
//! command completes with Commands Aborted due to Power Loss Notification (NVMe Base 2.0
//! §4.6.1.2.1, status 05h) and the medium no longer changes; admin commands still run, so a
//! driver tears down normally. [`crate::SimController::medium`] takes the medium and
//! [`crate::SimController::start_on`] powers a new controller on with it.
//!
//! Replays: with [`SimWriteCache::record`] the controller keeps the stream of medium events
//! ([`MediumEvent`], [`crate::SimController::take_journal`]). [`PowerReplay`] runs that stream
//! through the same cache model with the same seed, from blank namespaces, so the image a cut
//! after `n` events leaves ([`PowerReplay::cut`]) is exactly what the live controller would
//! have left when cut there: one workload run serves many cut points.

mod cache;

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::config::SimNamespace;
pub(crate) use cache::WriteCache;

/// Default [`SimWriteCache::capacity_blocks`].
const DEFAULT_CAPACITY_BLOCKS: usize = 4096;
/// Default [`SimWriteCache::destage_per_mille`].
const DEFAULT_DESTAGE_PER_MILLE: u16 = 40;

/// The volatile write cache of an emulated controller (Identify Controller VWC bit 0 is
/// reported either way; this makes it real) and its power-loss behaviour.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimWriteCache {
    /// Seeds the destage scheduler and every power cut: the same seed and the same commands
    /// give the same medium. Put it in every assertion message.
    pub seed: u64,
    /// Identify Controller AWUPF (0-based blocks): writes of up to `awupf + 1` blocks are
    /// atomic across a power cut; longer ones tear at multiples of it.
    pub awupf: u16,
    /// Identify Namespace NAWUPF per namespace (nsid, 0-based blocks), reported with NSFEAT
    /// bit 1; overrides `awupf` for that namespace.
    pub nawupf: Vec<(u32, u16)>,
    /// Chance per write, in 1/1000, that the scheduler destages a random number of random
    /// pending units.
    pub destage_per_mille: u16,
    /// Dirty blocks the cache holds at most; beyond that the oldest units are destaged.
    pub capacity_blocks: usize,
    /// Keep the journal of medium events for [`PowerReplay`].
    pub record: bool,
    /// Cut the power by itself once this many medium events have executed (at the next I/O
    /// command).
    pub cut_after: Option<u64>,
}

impl Default for SimWriteCache {
    fn default() -> Self {
        Self {
            seed: 0,
            awupf: 0,
            nawupf: Vec::new(),
            destage_per_mille: DEFAULT_DESTAGE_PER_MILLE,
            capacity_blocks: DEFAULT_CAPACITY_BLOCKS,
            record: false,
            cut_after: None,
        }
    }
}

/// One event that changes the medium or its durability, in execution order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MediumEvent {
    /// Blocks written from `lba` (Write, Write Zeroes, deallocate, a Copy destination): the
    /// bytes the command left. `durable`: FUA, or the cache was disabled.
    Write {
        /// Namespace.
        nsid: u32,
        /// First block.
        lba: u64,
        /// Whole blocks.
        data: Vec<u8>,
        /// Durable before completion.
        durable: bool,
    },
    /// Flush of one namespace, or of all (`None`: NSID FFFFFFFFh, a shutdown, or the cache
    /// being disabled).
    Flush {
        /// Namespace, `None` for all.
        nsid: Option<u32>,
    },
}

/// The namespaces' bytes as a powered-off controller leaves them.
#[derive(Clone, Debug)]
pub struct SimMedium {
    pub(crate) disks: Vec<(SimNamespace, Arc<Vec<u8>>)>,
}

impl SimMedium {
    /// Blank (zeroed) namespaces of these geometries.
    pub fn blank(namespaces: &[SimNamespace]) -> Self {
        let disks = namespaces
            .iter()
            .map(|ns| {
                let bytes = ns.blocks * u64::from(ns.block_size);
                (ns.clone(), Arc::new(vec![0; bytes as usize]))
            })
            .collect();
        SimMedium { disks }
    }

    /// Namespace `nsid`'s bytes. Panics if it is not there.
    pub fn bytes(&self, nsid: u32) -> &[u8] {
        &self.disk(nsid).1
    }

    /// Namespace `nsid`'s bytes, shared (cheap to clone). Panics if it is not there.
    pub fn shared_bytes(&self, nsid: u32) -> Arc<Vec<u8>> {
        self.disk(nsid).1.clone()
    }

    /// Namespace `nsid`'s geometry. Panics if it is not there.
    pub fn namespace(&self, nsid: u32) -> &SimNamespace {
        &self.disk(nsid).0
    }

    fn disk(&self, nsid: u32) -> &(SimNamespace, Arc<Vec<u8>>) {
        self.disks
            .iter()
            .find(|(ns, _)| ns.nsid == nsid)
            .unwrap_or_else(|| panic!("no namespace {nsid} in the medium"))
    }

    fn apply(&mut self, overlay: &cache::Overlay) {
        for (&(nsid, lba), data) in overlay {
            let (ns, bytes) = self
                .disks
                .iter_mut()
                .find(|(ns, _)| ns.nsid == nsid)
                .expect("the cache only holds blocks of known namespaces");
            let at = lba as usize * ns.block_size as usize;
            Arc::make_mut(bytes)[at..at + data.len()].copy_from_slice(data);
        }
    }
}

/// The stream of medium events replayed through the power-loss model (see the module
/// documentation): [`PowerReplay::cut`] after any prefix gives the image a power cut there
/// leaves.
#[derive(Clone, Debug)]
pub struct PowerReplay {
    cache: WriteCache,
    medium: SimMedium,
}

impl PowerReplay {
    /// Blank namespaces of `namespaces` and a cache configured as `cache` (give the seed and
    /// atomic units the recorded controller had; `record` and `cut_after` are ignored).
    pub fn new(namespaces: &[SimNamespace], cache: &SimWriteCache) -> Self {
        PowerReplay {
            cache: WriteCache::new(SimWriteCache {
                record: false,
                cut_after: None,
                ..cache.clone()
            }),
            medium: SimMedium::blank(namespaces),
        }
    }

    /// Events applied so far.
    pub fn events(&self) -> u64 {
        self.cache.events()
    }

    /// Blocks not yet durable.
    pub fn dirty_blocks(&self) -> usize {
        self.cache.dirty_blocks()
    }

    /// The newest data (what a Read returns now, before any cut).
    pub fn newest(&self) -> &SimMedium {
        &self.medium
    }

    /// Applies the next event of the stream.
    ///
    /// Panics if it names a namespace or blocks the medium does not have.
    pub fn apply(&mut self, event: &MediumEvent) {
        match event {
            MediumEvent::Write {
                nsid,
                lba,
                data,
                durable,
            } => {
                let (ns, bytes) = self
                    .medium
                    .disks
                    .iter_mut()
                    .find(|(ns, _)| ns.nsid == *nsid)
                    .unwrap_or_else(|| panic!("no namespace {nsid} in the replay"));
                let bs = ns.block_size as usize;
                let nlb = (data.len() / bs) as u64;
                self.cache.write(
                    *nsid,
                    bs,
                    Arc::make_mut(bytes).as_mut_slice(),
                    (*lba, nlb),
                    *durable,
                    |b| b.copy_from_slice(data),
                );
            }
            MediumEvent::Flush { nsid } => self.cache.flush(*nsid),
        }
    }

    /// The medium a power cut right now would leave (the replay itself goes on unchanged).
    pub fn cut(&self) -> SimMedium {
        let mut medium = self.medium.clone();
        medium.apply(&self.cache.cut_overlay());
        medium
    }

    /// The blocks a cut right now sets (namespace, LBA) and their contents: what
    /// [`PowerReplay::cut`] changes relative to the newest data.
    pub fn cut_blocks(&self) -> BTreeMap<(u32, u64), Box<[u8]>> {
        self.cache.cut_overlay()
    }
}
