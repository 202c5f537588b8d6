//! The I/O address generator: a xorshift64* PRNG (a few instructions per draw, no division)
//! and the per-thread stream of `(lba, is_write)` pairs it drives.
//!
//! INVARIANT: every LBA produced lies in `first..first + positions * blocks_per_io` and is a
//! multiple of `blocks_per_io` away from `first`, so each I/O is block-size aligned and in range.

/// Weyl increment used to spread seeds (2^64 / golden ratio, the splitmix64 constant).
const GOLDEN_GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;
/// splitmix64 finaliser multipliers.
const MIX_1: u64 = 0xBF58_476D_1CE4_E5B9;
const MIX_2: u64 = 0x94D0_49BB_1331_11EB;
/// xorshift64* output multiplier.
const STAR: u64 = 0x2545_F491_4F6C_DD1D;
/// Percent scale of `--rwmix-read`.
pub const PERCENT: u64 = 100;

/// xorshift64* (Vigna): 64-bit state, never zero.
#[derive(Clone, Debug)]
pub struct XorShift64 {
    state: u64,
}

impl XorShift64 {
    /// A generator seeded from `seed` and a stream number (e.g. the thread index). Any seed is
    /// fine, including 0: it is scrambled with splitmix64 first.
    pub fn new(seed: u64, stream: u64) -> Self {
        let mut z = seed.wrapping_add(GOLDEN_GAMMA.wrapping_mul(stream.wrapping_add(1)));
        z = (z ^ (z >> 30)).wrapping_mul(MIX_1);
        z = (z ^ (z >> 27)).wrapping_mul(MIX_2);
        z ^= z >> 31;
        Self {
            state: if z == 0 { GOLDEN_GAMMA } else { z },
        }
    }

    /// The next 64 random bits.
    #[inline(always)]
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.state;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.state = x;
        x.wrapping_mul(STAR)
    }

    /// A value in `0..n` (`n > 0`) by multiply-high (Lemire), no division.
    #[inline(always)]
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }
}

/// Access pattern of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pattern {
    /// Uniformly random aligned offsets.
    Random,
    /// Consecutive offsets, wrapping at the end of the span.
    Sequential,
}

/// Read/write choice of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mix {
    /// Reads only.
    Read,
    /// Writes only.
    Write,
    /// This percentage of reads, the rest writes.
    ReadPercent(u8),
}

impl Mix {
    /// Whether any I/O writes (the io_uring engine then opens the device read-write).
    pub fn writes(self) -> bool {
        !matches!(self, Mix::Read | Mix::ReadPercent(100))
    }
}

/// Produces the `(lba, is_write)` of each I/O of one thread.
#[derive(Clone, Debug)]
pub struct LbaGen {
    rng: XorShift64,
    pattern: Pattern,
    mix: Mix,
    first: u64,
    positions: u64,
    blocks_per_io: u64,
    next_position: u64,
}

impl LbaGen {
    /// A stream over `positions` aligned I/O positions of `blocks_per_io` blocks from LBA
    /// `first`; a sequential stream starts at `start_position`. `positions` must be > 0.
    pub fn new(
        rng: XorShift64,
        pattern: Pattern,
        mix: Mix,
        first: u64,
        positions: u64,
        blocks_per_io: u64,
        start_position: u64,
    ) -> Self {
        debug_assert!(positions > 0);
        Self {
            rng,
            pattern,
            mix,
            first,
            positions,
            blocks_per_io,
            next_position: start_position % positions.max(1),
        }
    }

    /// The next I/O: its starting LBA and whether it writes.
    #[inline(always)]
    pub fn next_io(&mut self) -> (u64, bool) {
        let position = match self.pattern {
            Pattern::Random => self.rng.below(self.positions),
            Pattern::Sequential => {
                let p = self.next_position;
                self.next_position += 1;
                if self.next_position == self.positions {
                    self.next_position = 0;
                }
                p
            }
        };
        let is_write = match self.mix {
            Mix::Read => false,
            Mix::Write => true,
            Mix::ReadPercent(pct) => self.rng.below(PERCENT) >= pct as u64,
        };
        (self.first + position * self.blocks_per_io, is_write)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_differ_and_are_reproducible() {
        let a: Vec<u64> = {
            let mut r = XorShift64::new(7, 0);
            (0..4).map(|_| r.next_u64()).collect()
        };
        let b: Vec<u64> = {
            let mut r = XorShift64::new(7, 0);
            (0..4).map(|_| r.next_u64()).collect()
        };
        let c: Vec<u64> = {
            let mut r = XorShift64::new(7, 1);
            (0..4).map(|_| r.next_u64()).collect()
        };
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert!(XorShift64::new(0, 0).next_u64() != 0);
    }

    #[test]
    fn random_lbas_are_aligned_in_range_and_cover_the_span() {
        let mut g = LbaGen::new(
            XorShift64::new(1, 0),
            Pattern::Random,
            Mix::Read,
            100,
            10,
            8,
            0,
        );
        let mut seen = [false; 10];
        for _ in 0..10_000 {
            let (lba, w) = g.next_io();
            assert!(!w);
            assert!((100..180).contains(&lba), "{lba}");
            assert_eq!((lba - 100) % 8, 0);
            seen[((lba - 100) / 8) as usize] = true;
        }
        assert!(seen.iter().all(|&s| s), "{seen:?}");
    }

    #[test]
    fn sequential_wraps_and_mix_follows_the_percentage() {
        let mut g = LbaGen::new(
            XorShift64::new(3, 0),
            Pattern::Sequential,
            Mix::ReadPercent(70),
            0,
            3,
            2,
            2,
        );
        let lbas: Vec<u64> = (0..5).map(|_| g.next_io().0).collect();
        assert_eq!(lbas, [4, 0, 2, 4, 0]);
        let writes = (0..100_000).filter(|_| g.next_io().1).count();
        assert!((28_000..32_000).contains(&writes), "{writes}");
        let mut all_writes = LbaGen::new(
            XorShift64::new(3, 0),
            Pattern::Random,
            Mix::Write,
            0,
            1,
            1,
            0,
        );
        assert!((0..100).all(|_| all_writes.next_io() == (0, true)));
        assert!(!Mix::Read.writes() && !Mix::ReadPercent(100).writes());
        assert!(Mix::Write.writes() && Mix::ReadPercent(99).writes());
    }
}
