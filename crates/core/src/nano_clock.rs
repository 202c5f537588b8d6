//! A cheap monotonic nanosecond clock for per-I/O timestamps (latency histograms).
//!
//! `Instant::elapsed` costs a `clock_gettime` call, a `Timespec` subtraction with its overflow
//! checks and a `Duration` to nanoseconds conversion: about 90 instructions per read natively,
//! the largest single item of a QD1 round (`tests/instr-per-io.sh`). SPDK and libvfn read the
//! CPU's time-stamp counter instead. [`NanoClock`] does the same where the kernel itself trusts
//! that counter, i.e. where the current clocksource is `tsc` (the kernel then has checked that
//! it is invariant and synchronised across CPUs, so a worker may migrate), and scales it with
//! a factor measured once per process against `Instant`. Anywhere else (another clocksource,
//! another architecture) it is `Instant`, with the same meaning and its usual cost.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Where the kernel names its current clocksource.
const CLOCKSOURCE: &str = "/sys/devices/system/clocksource/clocksource0/current_clocksource";
/// How long the calibration against `Instant` spins (once per process). The error of the
/// factor is about the skew of one pair of reads (tens of ns) over this: ~1e-5.
const CALIBRATION: Duration = Duration::from_millis(2);
/// Fixed-point fraction bits of the nanoseconds-per-tick factor.
const FRACTION_BITS: u32 = 32;

/// Monotonic nanoseconds since the clock was created; `Copy`, one per thread is fine.
///
/// Invariant: with the counter source, `now_ns` is `(tsc - start) * ns_per_tick` and never
/// decreases on a clocksource the kernel accepts as `tsc`.
#[derive(Clone, Copy, Debug)]
pub struct NanoClock {
    base: Instant,
    /// `Some((counter at creation, nanoseconds per tick in 32.32 fixed point))`.
    counter: Option<(u64, u64)>,
}

impl NanoClock {
    /// A clock reading 0 now. The first one in a process may spin for the calibration (2 ms).
    pub fn new() -> NanoClock {
        let counter = counter_factor().map(|factor| (read_counter(), factor));
        NanoClock {
            base: Instant::now(),
            counter,
        }
    }

    /// A clock that always reads `Instant` (for comparisons, and where the counter is unwanted).
    pub fn from_instant() -> NanoClock {
        NanoClock {
            base: Instant::now(),
            counter: None,
        }
    }

    /// Whether reads come from the CPU's time-stamp counter.
    pub fn uses_counter(&self) -> bool {
        self.counter.is_some()
    }

    /// Nanoseconds since creation.
    #[inline(always)]
    pub fn now_ns(&self) -> u64 {
        match self.counter {
            Some((start, factor)) => {
                let ticks = read_counter().wrapping_sub(start);
                ((u128::from(ticks) * u128::from(factor)) >> FRACTION_BITS) as u64
            }
            None => self.base.elapsed().as_nanos() as u64,
        }
    }
}

impl Default for NanoClock {
    fn default() -> Self {
        NanoClock::new()
    }
}

/// The process-wide nanoseconds-per-tick factor, measured on first use; `None` when the
/// counter is not to be trusted here.
fn counter_factor() -> Option<u64> {
    static FACTOR: OnceLock<Option<u64>> = OnceLock::new();
    *FACTOR.get_or_init(|| {
        if !cfg!(target_arch = "x86_64") {
            return None;
        }
        let source = std::fs::read_to_string(CLOCKSOURCE).ok()?;
        if source.trim() != "tsc" {
            log::debug!("clocksource is {:?}: latencies use Instant", source.trim());
            return None;
        }
        let (t0, c0) = (Instant::now(), read_counter());
        let mut t1 = t0;
        while t1.duration_since(t0) < CALIBRATION {
            t1 = Instant::now();
        }
        let c1 = read_counter();
        let ns = t1.duration_since(t0).as_nanos();
        let ticks = u128::from(c1.wrapping_sub(c0));
        if ticks == 0 {
            return None;
        }
        u64::try_from((ns << FRACTION_BITS) / ticks).ok()
    })
}

#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn read_counter() -> u64 {
    // SAFETY: RDTSC reads a CPU register and touches no memory; it is in every x86-64 CPU
    // (the intrinsic is `unsafe` only because it is an intrinsic).
    unsafe { std::arch::x86_64::_rdtsc() }
}

#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
fn read_counter() -> u64 {
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counter_clock_agrees_with_instant() {
        let clock = NanoClock::new();
        let start = Instant::now();
        let a = clock.now_ns();
        std::thread::sleep(Duration::from_millis(30));
        let b = clock.now_ns();
        let real = start.elapsed().as_nanos() as u64;
        assert!(b > a, "clock went backwards or stood still: {a} then {b}");
        // Within 2 % (plus 1 ms for the two reads' scheduling) of Instant over 30 ms.
        let diff = (b - a).abs_diff(real);
        assert!(
            diff < real / 50 + 1_000_000,
            "counter clock {} ns against Instant {real} ns (counter: {})",
            b - a,
            clock.uses_counter()
        );
    }

    #[test]
    fn instant_clock_is_monotonic() {
        let clock = NanoClock::from_instant();
        let mut last = clock.now_ns();
        for _ in 0..1000 {
            let now = clock.now_ns();
            assert!(now >= last);
            last = now;
        }
        assert!(!clock.uses_counter());
    }
}
