//! The volatile write cache and its power-loss outcome (the model behind
//! [`crate::SimWriteCache`]).
//!
//! The medium bytes always hold the *newest* data (what a Read returns: a cache is coherent).
//! Next to them the cache keeps, for every block written since it was last made durable, the
//! block's durable contents and each version written since, tagged with the atomic unit it
//! was written in. A unit is one Write command's blocks, or, for a command longer than the
//! atomic write unit, one piece of it cut at the unit boundaries (LBA multiples of the unit).
//!
//! A unit becomes durable ("destaged") on Flush (Base §7.1: all of the namespace's units),
//! with FUA (§3.3.6: its own units before the completion), when the write cache is disabled
//! (Set Features VWC, NVMe Base 2.0 §5.27.1.4: every write is then FUA), when the cache is over
//! capacity (the oldest units), or when the seeded scheduler says so (random units at random
//! commands). Destaging unit `u` makes its version of each block the durable one and forgets
//! the older versions.
//!
//! A power cut decides, per pending unit, whether it reached the medium (a per-cut survival
//! rate drawn first: none, a quarter, half, three quarters or all). Each dirty block ends as the
//! newest version whose unit survived, else its durable contents: never a block nobody wrote,
//! never older than its last durable version, atomic units whole, and writes that were never
//! flushed may land out of order (a later unit without an earlier one).

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use super::{MediumEvent, SimWriteCache};

/// Per-mille scale of the scheduler's and the cut's probabilities.
const PER_MILLE: u64 = 1000;
/// The survival rates (per mille) a power cut draws from.
const SURVIVAL_RATES: [u64; 5] = [0, 250, 500, 750, 1000];
/// Odd constant of the SplitMix64 sequence (Steele, Lea, Flood 2014).
const SPLITMIX_GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;
/// SplitMix64 finaliser multipliers.
const SPLITMIX_M1: u64 = 0xbf58_476d_1ce4_e5b9;
const SPLITMIX_M2: u64 = 0x94d0_49bb_1331_11eb;
/// Keeps the cut's random sequence apart from the scheduler's for the same seed.
const CUT_STREAM: u64 = 0x6375_745f_7365_6564;

/// A small deterministic generator (SplitMix64): the same seed gives the same decisions.
#[derive(Clone, Debug)]
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(SPLITMIX_GAMMA);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(SPLITMIX_M1);
        z = (z ^ (z >> 27)).wrapping_mul(SPLITMIX_M2);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`; the modulo bias is irrelevant here).
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// One written version of a block.
#[derive(Clone, Debug)]
struct Version {
    unit: u64,
    data: Box<[u8]>,
}

/// A block with data not yet durable.
#[derive(Clone, Debug)]
struct DirtyBlock {
    durable: Box<[u8]>,
    /// Oldest first; the last one is what the medium bytes hold.
    versions: Vec<Version>,
}

/// An atomic unit not yet durable.
#[derive(Clone, Copy, Debug)]
struct Unit {
    id: u64,
    nsid: u32,
    lba: u64,
    blocks: u64,
}

/// Blocks whose contents a power cut sets, by (namespace, LBA).
pub(crate) type Overlay = BTreeMap<(u32, u64), Box<[u8]>>;

/// The cache state (see the module documentation).
#[derive(Clone, Debug)]
pub(crate) struct WriteCache {
    config: SimWriteCache,
    rng: Rng,
    dirty: BTreeMap<(u32, u64), DirtyBlock>,
    units: VecDeque<Unit>,
    next_unit: u64,
    events: u64,
    journal: Vec<MediumEvent>,
    powered_off: bool,
}

impl WriteCache {
    pub(crate) fn new(config: SimWriteCache) -> Self {
        WriteCache {
            rng: Rng::new(config.seed),
            config,
            dirty: BTreeMap::new(),
            units: VecDeque::new(),
            next_unit: 0,
            events: 0,
            journal: Vec::new(),
            powered_off: false,
        }
    }

    /// Medium events (writes and flushes) executed so far.
    pub(crate) fn events(&self) -> u64 {
        self.events
    }

    /// Blocks not yet durable.
    pub(crate) fn dirty_blocks(&self) -> usize {
        self.dirty.len()
    }

    pub(crate) fn powered_off(&self) -> bool {
        self.powered_off
    }

    /// Whether the configured cut point ([`SimWriteCache::cut_after`]) has been reached.
    pub(crate) fn cut_due(&self) -> bool {
        self.config.cut_after.is_some_and(|n| self.events >= n)
    }

    pub(crate) fn take_journal(&mut self) -> Vec<MediumEvent> {
        std::mem::take(&mut self.journal)
    }

    /// Blocks per atomic unit of namespace `nsid`: NAWUPF + 1 when given for it, else
    /// AWUPF + 1 (both 0-based, NVMe Base 2.0 §5.17.2.1 and NVM CS §4.1.5.1).
    fn unit_blocks(&self, nsid: u32) -> u64 {
        let units = self
            .config
            .nawupf
            .iter()
            .find(|&&(n, _)| n == nsid)
            .map_or(self.config.awupf, |&(_, v)| v);
        u64::from(units) + 1
    }

    /// Writes blocks `lba..lba + nlb` of namespace `nsid` (`medium` is its whole byte area,
    /// `stride` bytes per block): records the durable contents of blocks not yet dirty, runs
    /// `apply` on the blocks' bytes, then records what it left there as new versions.
    /// `durable_now`: FUA, or the write cache disabled.
    pub(crate) fn write<R>(
        &mut self,
        nsid: u32,
        stride: usize,
        medium: &mut [u8],
        (lba, nlb): (u64, u64),
        durable_now: bool,
        apply: impl FnOnce(&mut [u8]) -> R,
    ) -> R {
        for b in lba..lba + nlb {
            let at = b as usize * stride;
            self.dirty.entry((nsid, b)).or_insert_with(|| DirtyBlock {
                durable: medium[at..at + stride].into(),
                versions: Vec::new(),
            });
        }
        let (start, end) = (lba as usize * stride, (lba + nlb) as usize * stride);
        let result = apply(&mut medium[start..end]);
        let unit = self.unit_blocks(nsid);
        let mut piece = lba;
        let mut written = Vec::new();
        while piece < lba + nlb {
            // One piece when the command fits in a unit; else cut at unit-aligned LBAs.
            let piece_end = if nlb <= unit {
                lba + nlb
            } else {
                ((piece / unit + 1) * unit).min(lba + nlb)
            };
            let id = self.next_unit;
            self.next_unit += 1;
            for b in piece..piece_end {
                let at = b as usize * stride;
                let block = self
                    .dirty
                    .get_mut(&(nsid, b))
                    .expect("every written block was made dirty above");
                block.versions.push(Version {
                    unit: id,
                    data: medium[at..at + stride].into(),
                });
            }
            self.units.push_back(Unit {
                id,
                nsid,
                lba: piece,
                blocks: piece_end - piece,
            });
            written.push(id);
            piece = piece_end;
        }
        if durable_now {
            for id in written {
                self.destage(id);
            }
        }
        if self.config.record {
            self.journal.push(MediumEvent::Write {
                nsid,
                lba,
                data: medium[start..end].to_vec(),
                durable: durable_now,
            });
        }
        self.events += 1;
        self.schedule();
        result
    }

    /// Flush of `nsid` (`None`: every namespace): all its units become durable.
    pub(crate) fn flush(&mut self, nsid: Option<u32>) {
        let hit = |n: u32| nsid.map_or(true, |f| f == n);
        self.dirty.retain(|&(n, _), _| !hit(n));
        self.units.retain(|u| !hit(u.nsid));
        if self.config.record {
            self.journal.push(MediumEvent::Flush { nsid });
        }
        self.events += 1;
    }

    /// The seeded scheduler, after each write: sometimes destages random pending units
    /// (out of order); always destages the oldest while over capacity.
    fn schedule(&mut self) {
        if self.rng.below(PER_MILLE) < u64::from(self.config.destage_per_mille)
            && !self.units.is_empty()
        {
            let count = self.rng.below(self.units.len() as u64) + 1;
            for _ in 0..count {
                if self.units.is_empty() {
                    break;
                }
                let pick = self.rng.below(self.units.len() as u64) as usize;
                let id = self.units[pick].id;
                self.destage(id);
            }
        }
        while self.dirty.len() > self.config.capacity_blocks {
            let Some(oldest) = self.units.front().map(|u| u.id) else {
                break;
            };
            self.destage(oldest);
        }
    }

    /// Makes unit `id` durable: its version of each of its blocks becomes the durable one.
    fn destage(&mut self, id: u64) {
        let Some(pos) = self.units.iter().position(|u| u.id == id) else {
            return;
        };
        let unit = self.units.remove(pos).expect("position is in range");
        for b in unit.lba..unit.lba + unit.blocks {
            let key = (unit.nsid, b);
            let Some(block) = self.dirty.get_mut(&key) else {
                continue;
            };
            if let Some(i) = block.versions.iter().position(|v| v.unit == id) {
                let kept = block
                    .versions
                    .drain(..=i)
                    .next_back()
                    .expect("drained >= 1");
                block.durable = kept.data;
            }
            if block.versions.is_empty() {
                self.dirty.remove(&key);
            }
        }
    }

    /// What a power cut now leaves in every dirty block (a pure function of the seed, the
    /// events so far and the cache state: a cut replays).
    pub(crate) fn cut_overlay(&self) -> Overlay {
        let mut rng =
            Rng::new(self.config.seed ^ CUT_STREAM ^ self.events.wrapping_mul(SPLITMIX_GAMMA));
        let rate = SURVIVAL_RATES[rng.below(SURVIVAL_RATES.len() as u64) as usize];
        let survived: BTreeSet<u64> = self
            .units
            .iter()
            .filter(|_| rng.below(PER_MILLE) < rate)
            .map(|u| u.id)
            .collect();
        self.dirty
            .iter()
            .map(|(&key, block)| {
                let data = block
                    .versions
                    .iter()
                    .rev()
                    .find(|v| survived.contains(&v.unit))
                    .map_or(&block.durable, |v| &v.data);
                (key, data.clone())
            })
            .collect()
    }

    /// Cuts the power: returns what each dirty block becomes and forgets the cache; from now
    /// on the controller is off.
    pub(crate) fn cut(&mut self) -> Overlay {
        let overlay = self.cut_overlay();
        self.dirty.clear();
        self.units.clear();
        self.powered_off = true;
        overlay
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BS: usize = 4;

    fn cache(seed: u64, awupf: u16) -> WriteCache {
        WriteCache::new(SimWriteCache {
            seed,
            awupf,
            destage_per_mille: 0,
            ..SimWriteCache::default()
        })
    }

    fn write(c: &mut WriteCache, medium: &mut [u8], lba: u64, fill: &[u8], fua: bool) {
        let nlb = (fill.len()) as u64;
        c.write(1, BS, medium, (lba, nlb), fua, |bytes| {
            for (block, &v) in bytes.chunks_mut(BS).zip(fill) {
                block.fill(v);
            }
        });
    }

    fn image(medium: &[u8], overlay: &Overlay) -> Vec<u8> {
        let mut m = medium.to_vec();
        for (&(_, lba), data) in overlay {
            m[lba as usize * BS..][..BS].copy_from_slice(data);
        }
        m
    }

    #[test]
    fn flushed_data_survives_every_cut_and_unflushed_blocks_are_old_or_new() {
        for seed in 0..200 {
            let mut medium = vec![0u8; 8 * BS];
            let mut c = cache(seed, 0);
            write(&mut c, &mut medium, 0, &[1, 1, 1, 1], false);
            c.flush(Some(1));
            write(&mut c, &mut medium, 2, &[2, 2, 2, 2], false);
            write(&mut c, &mut medium, 3, &[3], false);
            let img = image(&medium, &c.cut_overlay());
            let blocks: Vec<u8> = img.chunks(BS).map(|b| b[0]).collect();
            assert_eq!(&blocks[..2], &[1, 1], "seed {seed}");
            assert!([1, 2].contains(&blocks[2]), "seed {seed}: {blocks:?}");
            assert!([1, 2, 3].contains(&blocks[3]), "seed {seed}: {blocks:?}");
            assert!([0, 2].contains(&blocks[4]), "seed {seed}: {blocks:?}");
            assert_eq!(&blocks[6..], &[0, 0], "seed {seed}");
        }
    }

    #[test]
    fn a_write_within_the_atomic_unit_is_whole_and_a_longer_one_tears_at_its_boundaries() {
        let mut torn = false;
        for seed in 0..300 {
            let mut medium = vec![0u8; 16 * BS];
            // Unit of 4 blocks (AWUPF 3).
            let mut c = cache(seed, 3);
            write(&mut c, &mut medium, 1, &[5; 4], false); // one unit (fits)
            write(&mut c, &mut medium, 8, &[7; 8], false); // two units: 8..12, 12..16
            let img = image(&medium, &c.cut_overlay());
            let b: Vec<u8> = img.chunks(BS).map(|b| b[0]).collect();
            assert!(b[1..5].iter().all(|&x| x == b[1]), "seed {seed}: {b:?}");
            assert!(b[8..12].iter().all(|&x| x == b[8]), "seed {seed}: {b:?}");
            assert!(b[12..16].iter().all(|&x| x == b[12]), "seed {seed}: {b:?}");
            torn |= b[8] != b[12];
        }
        assert!(
            torn,
            "some cut tears the 8-block write at its unit boundary"
        );
    }

    #[test]
    fn fua_and_a_disabled_cache_are_durable_at_once() {
        for seed in 0..50 {
            let mut medium = vec![0u8; 4 * BS];
            let mut c = cache(seed, 0);
            write(&mut c, &mut medium, 0, &[9], true);
            write(&mut c, &mut medium, 1, &[8], false);
            let img = image(&medium, &c.cut_overlay());
            assert_eq!(img[0], 9, "seed {seed}");
        }
    }

    #[test]
    fn the_same_seed_cuts_the_same_way_and_some_cuts_reorder() {
        let run = |seed| {
            let mut medium = vec![0u8; 8 * BS];
            let mut c = cache(seed, 0);
            for lba in 0..8 {
                write(&mut c, &mut medium, lba, &[lba as u8 + 1], false);
            }
            image(&medium, &c.cut_overlay())
        };
        assert_eq!(run(42), run(42));
        let reordered = (0..100).any(|seed| {
            let b: Vec<u8> = run(seed).chunks(BS).map(|b| b[0]).collect();
            // A later block on the medium without an earlier one.
            b.windows(2).any(|w| w[0] == 0 && w[1] != 0)
        });
        assert!(reordered);
    }

    #[test]
    fn the_scheduler_destages_and_capacity_bounds_the_dirty_set() {
        let mut medium = vec![0u8; 64 * BS];
        let mut c = WriteCache::new(SimWriteCache {
            seed: 7,
            destage_per_mille: 500,
            capacity_blocks: 8,
            ..SimWriteCache::default()
        });
        for lba in 0..64 {
            write(&mut c, &mut medium, lba, &[1], false);
            assert!(c.dirty_blocks() <= 8);
        }
        c.flush(None);
        assert_eq!(c.dirty_blocks(), 0);
        assert_eq!(c.events(), 65);
    }
}
