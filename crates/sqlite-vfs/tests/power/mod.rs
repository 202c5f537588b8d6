//! Shared pieces of the power-cut suites (`power_cut_sqlite.rs`, `power_cut_store.rs`): an
//! emulated controller with the seeded write cache, the journal of one workload run replayed
//! through `nvme_sim::PowerReplay` to the cut points, a block device over a cut image, and
//! the knobs.
//!
//! Knobs (environment): `POWER_CUTS` total cut points of a test (default: the test's own),
//! `POWER_SEEDS` seeds per test, `POWER_SEED` one seed only (replay a failure), `POWER_CUT`
//! one cut point only (with `POWER_SEED`).

#![allow(dead_code)] // each test binary uses part of it

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use nvme_driver::{Controller, ControllerOptions, Transport};
use nvme_sim::{MediumEvent, PowerReplay, SimConfig, SimController, SimNamespace, SimWriteCache};
use nvme_sqlite_vfs::{BlockDevice, NvmeDevice};

/// Held while an emulated controller runs (see the suites).
pub static EMULATOR: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Namespace the suites use.
pub const NSID: u32 = 1;

/// The run's knobs.
#[derive(Clone, Copy, Debug)]
pub struct Knobs {
    pub seeds: u64,
    pub cuts_per_seed: usize,
    pub only_seed: Option<u64>,
    pub only_cut: Option<u64>,
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().map(|v| {
        v.trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not a number"))
    })
}

impl Knobs {
    /// The knobs for a test whose default is `seeds` seeds and `cuts` cut points in all.
    pub fn from_env(seeds: u64, cuts: usize) -> Self {
        let seeds = env_u64("POWER_SEEDS").unwrap_or(seeds).max(1);
        let cuts = env_u64("POWER_CUTS").map_or(cuts, |c| c as usize);
        Knobs {
            seeds,
            cuts_per_seed: cuts.div_ceil(seeds as usize).max(1),
            only_seed: env_u64("POWER_SEED"),
            only_cut: env_u64("POWER_CUT"),
        }
    }

    /// The seeds to run: `base + 0..seeds`, or the one given.
    pub fn seeds(&self, base: u64) -> Vec<u64> {
        match self.only_seed {
            Some(s) => vec![s],
            None => (0..self.seeds).map(|i| base + i).collect(),
        }
    }
}

/// A controller with one namespace of `blocks` blocks of `bs` bytes and the seeded write
/// cache (recording its journal; cutting by itself after `cut_after` events when given).
pub fn config(bs: u32, blocks: u64, seed: u64, cut_after: Option<u64>) -> SimConfig {
    static SERIAL: AtomicU32 = AtomicU32::new(0);
    SimConfig {
        // A serial per controller: the tests of a binary run in parallel, one VFS per
        // subsystem's namespace.
        serial: format!("PWR{}", SERIAL.fetch_add(1, Ordering::Relaxed)),
        namespaces: vec![SimNamespace {
            nsid: NSID,
            block_size: bs,
            blocks,
            ..SimNamespace::default()
        }],
        write_cache: Some(SimWriteCache {
            seed,
            // Two blocks per atomic unit at 512 B (1 KiB), one at 4 KiB: multi-block writes
            // of the store (directory copies, extent copies, WAL frames) tear.
            awupf: if bs == 512 { 1 } else { 0 },
            destage_per_mille: 30,
            capacity_blocks: 512,
            record: true,
            cut_after,
            ..SimWriteCache::default()
        }),
        ..SimConfig::default()
    }
}

/// A driver controller on `sim`.
pub fn controller(sim: &SimController) -> Controller {
    Controller::new(
        Transport::new(sim.mmio(), sim.dma(), "sim"),
        ControllerOptions::default(),
    )
    .expect("controller bring-up")
}

/// The namespace through the real driver.
pub fn nvme_device(sim: &SimController) -> Box<dyn BlockDevice> {
    Box::new(NvmeDevice::new(controller(sim), NSID).expect("NVMe device"))
}

/// A unique VFS name.
pub fn vfs_name(prefix: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    format!("{prefix}-{}", N.fetch_add(1, Ordering::Relaxed))
}

/// Cut points of one run of `events` medium events: `count` of them (at most every one),
/// half spread at random, half right before and after flushes (where the ordering rules
/// bite), always including the end. Deterministic from `seed`.
pub fn cut_points(journal: &[MediumEvent], count: usize, seed: u64) -> Vec<u64> {
    let events = journal.len() as u64;
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let flushes: Vec<u64> = journal
        .iter()
        .enumerate()
        .filter(|(_, e)| matches!(e, MediumEvent::Flush { .. }))
        .map(|(i, _)| i as u64)
        .collect();
    let mut points = BTreeSet::new();
    points.insert(events);
    let target = count.min(events as usize + 1);
    let mut tries = 0;
    while points.len() < target && tries < target * 20 {
        tries += 1;
        let p = if next() % 2 == 0 || flushes.is_empty() {
            next() % (events + 1)
        } else {
            // Just before a flush executes, or just after.
            let f = flushes[(next() % flushes.len() as u64) as usize];
            (f + next() % 2).min(events)
        };
        points.insert(p);
    }
    points.into_iter().collect()
}

/// Replays `journal` and calls `check(cut, device)` at each cut point with a block device
/// over the image a power cut there leaves. Returns how many of those cuts left some block
/// older than its newest write (lost or torn writes; the rest kept everything).
pub fn replay_cuts(
    config: &SimConfig,
    journal: &[MediumEvent],
    cuts: &[u64],
    mut check: impl FnMut(u64, Box<dyn BlockDevice>),
) -> u64 {
    let mut losing = 0;
    let cache = config.write_cache.as_ref().expect("write cache");
    let mut replay = PowerReplay::new(&config.namespaces, cache);
    let ns = &config.namespaces[0];
    let mut at = 0usize;
    for &cut in cuts {
        while (replay.events()) < cut {
            replay.apply(&journal[at]);
            at += 1;
        }
        let base = replay.newest().shared_bytes(ns.nsid);
        let bs = ns.block_size as usize;
        let overlay: BTreeMap<u64, Box<[u8]>> = replay
            .cut_blocks()
            .into_iter()
            .map(|((_, lba), data)| (lba, data))
            .collect();
        losing += u64::from(
            overlay
                .iter()
                .any(|(&lba, data)| data[..] != base[lba as usize * bs..][..bs]),
        );
        let image = ImageDevice {
            bs: ns.block_size,
            blocks: ns.blocks,
            base,
            overlay,
        };
        check(cut, Box::new(image));
    }
    losing
}

/// A block device over a cut image: the newest medium bytes (shared with the replay, not
/// copied) under the blocks the cut set, and under what the reopening writes.
pub struct ImageDevice {
    bs: u32,
    blocks: u64,
    base: Arc<Vec<u8>>,
    overlay: BTreeMap<u64, Box<[u8]>>,
}

impl BlockDevice for ImageDevice {
    fn block_size(&self) -> u32 {
        self.bs
    }
    fn blocks(&self) -> u64 {
        self.blocks
    }
    fn read(&mut self, lba: u64, buf: &mut [u8]) -> nvme_sqlite_vfs::Result<()> {
        let bs = self.bs as usize;
        let n = (buf.len() / bs) as u64;
        buf.copy_from_slice(&self.base[lba as usize * bs..][..buf.len()]);
        for (&b, data) in self.overlay.range(lba..lba + n) {
            buf[(b - lba) as usize * bs..][..bs].copy_from_slice(data);
        }
        Ok(())
    }
    fn write(&mut self, lba: u64, buf: &[u8]) -> nvme_sqlite_vfs::Result<()> {
        for (i, block) in buf.chunks(self.bs as usize).enumerate() {
            self.overlay.insert(lba + i as u64, block.into());
        }
        Ok(())
    }
    fn flush(&mut self) -> nvme_sqlite_vfs::Result<()> {
        Ok(())
    }
}

/// `len` bytes of a seeded xorshift sequence.
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Totals a suite prints (and `docs/sqlite.md` records).
#[derive(Debug, Default, Clone, Copy)]
pub struct Figures {
    pub seeds: u64,
    pub cuts: u64,
    pub events: u64,
    pub commits_checked: u64,
    pub live_reattaches: u64,
    /// Cuts after which the database had lost an acknowledged commit (NORMAL only).
    pub lost_acked: u64,
    /// Cuts that left some block older than its newest write.
    pub cuts_losing_writes: u64,
}
