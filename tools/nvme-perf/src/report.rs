//! The run's summary: aggregation of the per-thread results, the percentile table, the text
//! output and the JSON object.

use std::fmt::Write as _;

use hdrhistogram::Histogram;
use serde::ser::{SerializeMap, Serializer};
use serde::Serialize;

use crate::args::{Config, Engine};
use crate::control::{DriverCounters, RecoveryStats, Tally, TcpCounters};
use crate::runner::{per, Outcome, MIB};
use crate::target::Target;
use crate::verify::VerifyStats;

/// Percentiles reported, in ascending order.
pub const PERCENTILES: [f64; 16] = [
    1.0, 5.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0, 95.0, 99.0, 99.5, 99.9, 99.99,
];
/// Percentile entries per line of the text table.
const PERCENTILES_PER_LINE: usize = 4;
/// Nanoseconds per microsecond.
const NS_PER_US: f64 = 1_000.0;
/// Nanoseconds per second.
const NS_PER_SEC: f64 = 1_000_000_000.0;
/// Upper bound of the first bucket of the JSON histogram (ns).
const JSON_HIST_FIRST_NS: u64 = 1_000;
/// Ratio of consecutive bucket bounds of the JSON histogram (buckets about 10 % wide).
const JSON_HIST_LOG_BASE: f64 = 1.1;

/// `(percentile, latency ns)` pairs; serialised as a JSON object keyed `"1"`, `"99.5"`, ... in
/// ascending order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Percentiles(pub Vec<(f64, u64)>);

impl Serialize for Percentiles {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (p, v) in &self.0 {
            map.serialize_entry(&percentile_key(*p), v)?;
        }
        map.end()
    }
}

/// The JSON key of a percentile: the shortest decimal form (`1`, `99.5`, `99.99`).
pub fn percentile_key(p: f64) -> String {
    format!("{p}")
}

/// Latency summary in ns.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Latency {
    /// Mean.
    pub avg: f64,
    /// Smallest.
    pub min: u64,
    /// Largest.
    pub max: u64,
    /// Percentiles.
    pub p: Percentiles,
}

impl Latency {
    /// Untimed runs (`--no-latency`): the mean time in the system of a closed loop with
    /// `queue_depth * threads` I/Os always outstanding is that number divided by the
    /// throughput (Little's law). Min, max and percentiles stay 0.
    pub fn from_littles_law(queue_depth: u32, threads: u32, iops: f64) -> Self {
        let avg = if iops > 0.0 {
            f64::from(queue_depth) * f64::from(threads) / iops * NS_PER_SEC
        } else {
            0.0
        };
        Self {
            avg,
            ..Self::default()
        }
    }

    /// Summarises a histogram (all zero when it is empty).
    pub fn from_histogram(h: &Histogram<u64>) -> Self {
        if h.is_empty() {
            return Self::default();
        }
        Self {
            avg: h.mean(),
            min: h.min(),
            max: h.max(),
            p: Percentiles(
                PERCENTILES
                    .iter()
                    .map(|&p| (p, h.value_at_percentile(p)))
                    .collect(),
            ),
        }
    }
}

/// Request pool counters of the spdk-like engine, summed over threads.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct PoolReport {
    /// Request slots taken.
    pub tag_allocs: u64,
    /// Batches reserved with plug(n).
    pub tag_plugs: u64,
    /// Slots served from a plug reservation.
    pub tag_plug_hits: u64,
    /// Reserved slots returned unused at unplug.
    pub tag_unplugged: u64,
    /// Allocations or plugs refused for lack of slots.
    pub tag_exhausted: u64,
    /// Context cache hits (None: contexts not from the cache).
    pub cache_hits: Option<u64>,
    /// Context cache misses (each one a Box::new).
    pub cache_misses: Option<u64>,
    /// Context cache prune steps.
    pub cache_prunes: Option<u64>,
}

/// Everything a run reports. Field names are the JSON schema.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// `spdk-like` or `io_uring`.
    pub engine: &'static str,
    /// The device.
    pub device: String,
    /// The workload name.
    pub workload: &'static str,
    /// Bytes per I/O.
    pub block_size: usize,
    /// I/Os in flight per thread.
    pub queue_depth: u32,
    /// Worker threads.
    pub threads: u32,
    /// Measured seconds (the longest thread).
    pub runtime_s: f64,
    /// I/Os completed successfully.
    pub ios: u64,
    /// I/Os per second.
    pub iops: f64,
    /// MiB per second.
    pub mib_s: f64,
    /// Latency.
    pub lat_ns: Latency,
    /// Whether each I/O was timed (false with `--no-latency`: `lat_ns.avg` is derived).
    pub latency_tracked: bool,
    /// Submit calls (doorbell rounds / io_uring_enter submissions).
    pub submit_calls: u64,
    /// Poll calls that found completions.
    pub reap_calls: u64,
    /// I/Os per submit call.
    pub ios_per_submit: f64,
    /// I/Os per reaping poll call.
    pub ios_per_reap: f64,
    /// MMIO writes to SQ tail doorbells (spdk-like).
    pub sq_mmio_writes: Option<u64>,
    /// MMIO writes to CQ head doorbells (spdk-like).
    pub cq_mmio_writes: Option<u64>,
    /// (SQ + CQ MMIO writes) / I/Os (spdk-like).
    pub mmio_writes_per_io: Option<f64>,
    /// Worker thread CPU ns per I/O (the driver's cost with `sim`).
    pub thread_cpu_ns_per_io: f64,
    /// Failed I/Os.
    pub errors: u64,
    /// Poll calls that found nothing (spdk-like).
    pub idle_polls: Option<u64>,
    /// Completions the driver rejected (spdk-like).
    pub bad_completions: Option<u64>,
    /// Commands that timed out (spdk-like).
    pub timeouts: Option<u64>,
    /// Pool counters (spdk-like).
    pub pool: Option<PoolReport>,
    /// Shadow doorbells in effect (spdk-like).
    pub shadow_doorbells: Option<bool>,
    /// SGL data pointers in effect (spdk-like).
    pub sgl: Option<bool>,
    /// Where per-I/O contexts live: `slots`, `cache` or `box` (spdk-like).
    pub contexts: Option<&'static str>,
    /// Batch slots reserved with plug(n) (spdk-like).
    pub batch_prefetch: Option<bool>,
    /// Bytes per logical block of the device.
    pub lba_size: u32,
    /// First failure message.
    pub first_error: Option<String>,
    /// What `--verify` found (absent without it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verify: Option<VerifyStats>,
    /// With `--reset-interval`: resets made and I/Os retried (absent without it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recovery: Option<RecoveryStats>,
    /// NVMe/TCP queue counters of the I/O queue pairs (absent on other transports).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tcp: Option<TcpCounters>,
    /// With `--histogram` (and timed I/Os): `[bucket upper bound ns, count]` pairs, buckets
    /// growing by `JSON_HIST_LOG_BASE` from 1 µs up to the largest latency.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub histogram_ns: Option<Vec<(u64, u64)>>,
    /// The merged histogram (text output with --histogram).
    #[serde(skip)]
    pub histogram: Histogram<u64>,
}

fn sum_driver(
    results: impl Iterator<Item = DriverCounters>,
) -> Option<(DriverCounters, PoolReport)> {
    let mut any = false;
    let mut d = DriverCounters::default();
    let mut pool = PoolReport::default();
    for r in results {
        any = true;
        d.sq_mmio_writes += r.sq_mmio_writes;
        d.cq_mmio_writes += r.cq_mmio_writes;
        d.sq_updates += r.sq_updates;
        d.cq_updates += r.cq_updates;
        d.idle_polls += r.idle_polls;
        d.bad_completions += r.bad_completions;
        d.timeouts += r.timeouts;
        pool.tag_allocs += r.tags.allocs;
        pool.tag_plugs += r.tags.plugs;
        pool.tag_plug_hits += r.tags.plug_hits;
        pool.tag_unplugged += r.tags.unplugged;
        pool.tag_exhausted += r.tags.exhausted;
        if let Some(c) = r.cache {
            *pool.cache_hits.get_or_insert(0) += c.hits;
            *pool.cache_misses.get_or_insert(0) += c.misses;
            *pool.cache_prunes.get_or_insert(0) += c.prunes;
        }
    }
    any.then_some((d, pool))
}

impl Report {
    /// Merges the threads' results.
    pub fn build(config: &Config, outcome: &Outcome) -> Self {
        let mut tally = Tally::new();
        let mut cpu_ns: u128 = 0;
        let mut runtime = 0f64;
        for r in &outcome.results {
            // Same bounds on both sides: adding cannot fail.
            let _ = tally.hist.add(&r.tally.hist);
            tally.ios += r.tally.ios;
            tally.errors += r.tally.errors;
            tally.submitted += r.tally.submitted;
            tally.submit_calls += r.tally.submit_calls;
            tally.unsuccessful += r.tally.unsuccessful;
            tally.reap_calls += r.tally.reap_calls;
            if tally.first_error.is_none() {
                tally.first_error.clone_from(&r.tally.first_error);
            }
            cpu_ns += r.cpu.as_nanos();
            runtime = runtime.max(r.elapsed.as_secs_f64());
        }
        let driver = sum_driver(outcome.results.iter().filter_map(|r| r.driver));
        let verify = config.verify.then(|| {
            let mut v = VerifyStats::default();
            for r in outcome.results.iter().filter_map(|r| r.verify.as_ref()) {
                v.merge(r);
            }
            v
        });
        let recovery = config.recovering().then(|| {
            let mut r = RecoveryStats::default();
            for o in outcome.results.iter().filter_map(|r| r.recovery.as_ref()) {
                r.merge(o);
            }
            r
        });
        let mut tcp = None;
        for t in outcome.results.iter().filter_map(|r| r.tcp.as_ref()) {
            tcp.get_or_insert_with(TcpCounters::default).merge(t);
        }
        let iops = if runtime > 0.0 {
            tally.ios as f64 / runtime
        } else {
            0.0
        };
        let spdk = config.engine == Engine::SpdkLike;
        Report {
            engine: config.engine.name(),
            device: outcome.setup.device.clone(),
            workload: config.workload.name(),
            block_size: config.block_size,
            queue_depth: config.queue_depth,
            threads: config.threads,
            runtime_s: runtime,
            ios: tally.ios,
            iops,
            mib_s: iops * config.block_size as f64 / MIB,
            lat_ns: if config.latency {
                Latency::from_histogram(&tally.hist)
            } else {
                Latency::from_littles_law(config.queue_depth, config.threads, iops)
            },
            latency_tracked: config.latency,
            submit_calls: tally.submit_calls,
            reap_calls: tally.reap_calls,
            ios_per_submit: per(tally.submitted, tally.submit_calls),
            ios_per_reap: per(tally.reaped(), tally.reap_calls),
            sq_mmio_writes: driver.as_ref().map(|(d, _)| d.sq_mmio_writes),
            cq_mmio_writes: driver.as_ref().map(|(d, _)| d.cq_mmio_writes),
            mmio_writes_per_io: driver
                .as_ref()
                .map(|(d, _)| per(d.sq_mmio_writes + d.cq_mmio_writes, tally.ios)),
            thread_cpu_ns_per_io: per(u64::try_from(cpu_ns).unwrap_or(u64::MAX), tally.ios),
            errors: tally.errors,
            idle_polls: driver.as_ref().map(|(d, _)| d.idle_polls),
            bad_completions: driver.as_ref().map(|(d, _)| d.bad_completions),
            timeouts: driver.as_ref().map(|(d, _)| d.timeouts),
            pool: driver.map(|(_, p)| p),
            shadow_doorbells: outcome.setup.shadow_doorbells,
            sgl: outcome.setup.sgl,
            contexts: spdk.then_some(config.contexts.name()),
            batch_prefetch: spdk.then_some(config.batch_prefetch),
            lba_size: outcome.setup.lba_size,
            first_error: tally.first_error,
            verify,
            recovery,
            tcp,
            histogram_ns: (config.histogram && config.latency).then(|| json_histogram(&tally.hist)),
            histogram: tally.hist,
        }
    }

    /// The JSON object.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("the report holds only plain numbers and strings")
    }

    /// The text summary. `driver ns/IO` appears for the emulator, where the worker's CPU time
    /// is the driver's cost.
    pub fn to_text(&self, config: &Config, histogram: bool) -> String {
        let mut out = String::new();
        let us = |ns: f64| ns / NS_PER_US;
        let _ = writeln!(
            out,
            "{} on {}: {}, bs {}, qd {} x {} thread(s), {:.2} s",
            self.engine,
            self.device,
            self.workload,
            self.block_size,
            self.queue_depth,
            self.threads,
            self.runtime_s
        );
        let _ = writeln!(
            out,
            "  IOPS={:.0}, BW={:.1}MiB/s, I/Os={}, errors={}",
            self.iops, self.mib_s, self.ios, self.errors
        );
        if self.latency_tracked {
            let _ = writeln!(
                out,
                "  lat (us): avg={:.3}, min={:.3}, max={:.3}",
                us(self.lat_ns.avg),
                us(self.lat_ns.min as f64),
                us(self.lat_ns.max as f64)
            );
            let _ = writeln!(out, "  lat percentiles (us):");
            out.push_str(&format_percentiles(&self.lat_ns.p.0));
        } else {
            let _ = writeln!(
                out,
                "  lat (us): avg={:.3} (from Little's law; --no-latency: I/Os not timed)",
                us(self.lat_ns.avg)
            );
        }
        let _ = writeln!(
            out,
            "  IOS/call: submit {:.2} ({} calls), reap {:.2} ({} calls)",
            self.ios_per_submit, self.submit_calls, self.ios_per_reap, self.reap_calls
        );
        if let (Some(sq), Some(cq), Some(per_io)) = (
            self.sq_mmio_writes,
            self.cq_mmio_writes,
            self.mmio_writes_per_io,
        ) {
            let _ = writeln!(
                out,
                "  MMIO doorbell writes/IO: {per_io:.4} (SQ {sq} = {:.4}/IO, CQ {cq} = {:.4}/IO; shadow doorbells {}; data pointers {})",
                per(sq, self.ios),
                per(cq, self.ios),
                if self.shadow_doorbells == Some(true) { "on" } else { "off" },
                if self.sgl == Some(true) { "SGL" } else { "PRP" }
            );
        }
        if let Some(bad) = self.bad_completions {
            let _ = writeln!(
                out,
                "  bad completions: {bad}, timeouts: {}, idle polls: {}",
                self.timeouts.unwrap_or(0),
                self.idle_polls.unwrap_or(0)
            );
        }
        if let Some(pool) = &self.pool {
            let cache = match (pool.cache_hits, pool.cache_misses, pool.cache_prunes) {
                (Some(h), Some(m), Some(p)) => {
                    format!("contexts from the cache: hits {h}, misses {m}, prunes {p}")
                }
                _ => format!("contexts: {}", self.contexts.unwrap_or("slots")),
            };
            let _ = writeln!(
                out,
                "  pool (whole run): tag allocs {}, plugs {}, plug hits {}, unplugged {}, exhausted {}; {cache}",
                pool.tag_allocs,
                pool.tag_plugs,
                pool.tag_plug_hits,
                pool.tag_unplugged,
                pool.tag_exhausted
            );
        }
        if config.target == Target::Sim {
            let _ = writeln!(out, "  driver ns/IO: {:.1}", self.thread_cpu_ns_per_io);
        } else {
            let _ = writeln!(out, "  thread CPU ns/IO: {:.1}", self.thread_cpu_ns_per_io);
        }
        if let Some(v) = &self.verify {
            let _ = writeln!(
                out,
                "  verify: {} blocks verified ({} in reads, {} in the final pass; {} read unwritten), \
                 mismatches {}: wrong LBA {}, bad checksum {}, lost write {}, phantom {}",
                v.blocks_verified,
                v.blocks_verified_in_reads,
                v.blocks_verified_final,
                v.blocks_unwritten,
                v.mismatches,
                v.wrong_lba,
                v.bad_checksum,
                v.lost_write,
                v.phantom
            );
            if let Some(first) = &v.first_mismatch {
                let _ = writeln!(out, "  verify: first mismatch: {first}");
            }
        }
        if let Some(r) = &self.recovery {
            let _ = writeln!(
                out,
                "  recovery: {} controller resets, {} I/Os retried, {} submissions refused \
                 while resetting, {} I/Os timed out; aborts {} sent, {} succeeded, {} declined; \
                 {} resets after a timeout",
                r.resets,
                r.retried_ios,
                r.refused_submissions,
                r.timed_out_ios,
                r.aborts_sent,
                r.aborts_succeeded,
                r.aborts_declined,
                r.timeout_resets
            );
        }
        if let Some(t) = &self.tcp {
            let _ = writeln!(
                out,
                "  tcp: {} commands, {:.2} PDUs received / I/O, {} SUCCESS shortcuts, {:.2} polls \
                 / I/O ({} idle)",
                t.commands,
                per(t.pdus_received, t.commands),
                t.success_shortcuts,
                per(t.polls, t.commands),
                t.idle_polls
            );
        }
        if histogram {
            out.push_str(&format_histogram(&self.histogram));
        }
        out
    }
}

/// The percentile table, `PERCENTILES_PER_LINE` entries a line, latencies in µs:
/// `    |  1.00th:     10.240 |  5.00th: ...`.
pub fn format_percentiles(p: &[(f64, u64)]) -> String {
    let mut out = String::new();
    for line in p.chunks(PERCENTILES_PER_LINE) {
        out.push_str("    ");
        for (pct, ns) in line {
            let _ = write!(out, "| {pct:>6.2}th: {:>10.3} ", *ns as f64 / NS_PER_US);
        }
        out.push_str("|\n");
    }
    out
}

/// Every recorded bucket: upper value (µs), count, cumulative percentage.
pub fn format_histogram(h: &Histogram<u64>) -> String {
    let mut out =
        String::from("  latency histogram (bucket upper bound us: count, cumulative %):\n");
    for v in h.iter_recorded() {
        let _ = writeln!(
            out,
            "    {:>12.3}: {:>12} {:>8.4}%",
            h.highest_equivalent(v.value_iterated_to()) as f64 / NS_PER_US,
            v.count_at_value(),
            v.percentile()
        );
    }
    out
}

/// Log-spaced buckets for the JSON output: `[upper bound ns, count]`, empty ones included, up to
/// the bucket of the largest latency (none when the histogram is empty).
pub fn json_histogram(h: &Histogram<u64>) -> Vec<(u64, u64)> {
    if h.is_empty() {
        return Vec::new();
    }
    h.iter_log(JSON_HIST_FIRST_NS, JSON_HIST_LOG_BASE)
        .map(|v| (v.value_iterated_to(), v.count_since_last_iteration()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn untimed_latency_follows_littles_law() {
        // 128 outstanding I/Os completing at 128,000 per second spend 1 ms each in the system.
        let l = Latency::from_littles_law(128, 1, 128_000.0);
        assert!((l.avg - 1_000_000.0).abs() < 1e-6, "{}", l.avg);
        assert_eq!((l.min, l.max), (0, 0));
        assert!(l.p.0.is_empty());
        assert_eq!(Latency::from_littles_law(4, 2, 0.0).avg, 0.0);
        // Two threads double the outstanding I/Os.
        assert!((Latency::from_littles_law(64, 2, 128_000.0).avg - 1_000_000.0).abs() < 1e-6);
    }

    #[test]
    fn percentile_keys_are_short_decimals() {
        let keys: Vec<String> = PERCENTILES.iter().map(|&p| percentile_key(p)).collect();
        assert_eq!(keys[0], "1");
        assert_eq!(keys[13], "99.5");
        assert_eq!(keys[15], "99.99");
        assert!(PERCENTILES.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn percentile_table_layout() {
        let text = format_percentiles(&[
            (1.0, 10_240),
            (50.0, 12_000),
            (99.0, 1_500),
            (99.5, 7),
            (99.99, 123_456_789),
        ]);
        assert_eq!(
            text,
            "    |   1.00th:     10.240 |  50.00th:     12.000 |  99.00th:      1.500 |  99.50th:      0.007 |\n    \
             |  99.99th: 123456.789 |\n"
        );
    }

    #[test]
    fn latency_summary_and_json_object_order() {
        let mut h = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).unwrap();
        for v in 1..=1000u64 {
            h.record(v * 1000).unwrap();
        }
        let lat = Latency::from_histogram(&h);
        assert_eq!(lat.min, 1000);
        assert!((lat.max as i64 - 1_000_000).abs() <= 1000);
        assert!((lat.avg - 500_500.0).abs() < 1000.0, "{}", lat.avg);
        assert!(lat.p.0.windows(2).all(|w| w[0].1 <= w[1].1));
        let p50 = lat.p.0.iter().find(|(p, _)| *p == 50.0).unwrap().1;
        assert!((499_000..=501_000).contains(&p50), "{p50}");
        let json = serde_json::to_string(&lat.p).unwrap();
        assert!(json.starts_with("{\"1\":"), "{json}");
        assert!(json.contains("\"99.99\":"), "{json}");
        assert!(
            json.find("\"5\"").unwrap() < json.find("\"10\"").unwrap(),
            "ascending order: {json}"
        );
        assert_eq!(
            Latency::from_histogram(&Histogram::new(3).unwrap()),
            Latency::default()
        );
    }

    #[test]
    fn json_histogram_buckets_cover_every_sample() {
        let mut h = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).unwrap();
        for v in [500, 10_000, 10_500, 2_000_000] {
            h.record(v).unwrap();
        }
        let b = json_histogram(&h);
        assert_eq!(b.iter().map(|&(_, c)| c).sum::<u64>(), 4);
        assert_eq!(b[0].1, 1, "500 ns falls in the first bucket: {b:?}");
        assert!(b.windows(2).all(|w| w[0].0 < w[1].0), "ascending: {b:?}");
        assert!(b.last().unwrap().0 >= 2_000_000);
        assert!(json_histogram(&Histogram::new(3).unwrap()).is_empty());
    }
}
