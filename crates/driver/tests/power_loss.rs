//! The emulator's power-loss model through the PCIe driver: a volatile write cache (Identify
//! VWC, Set Features Volatile Write Cache, NVMe Base 2.0 §5.27.1.4), Flush and FUA (Base §7.1,
//! NVM CS §3.3.6), atomic write units (AWUPF, NAWUPF with NSFEAT bit 1), a power cut, and
//! the same medium powered on again under a new driver. Every assertion names its seed.

mod common;

use std::time::Duration;

use nvme_driver::spec::feature::{Feature, FeatureId, Select};
use nvme_driver::spec::status::{generic, StatusCodeType};
use nvme_driver::{AdminCommands, Controller, ControllerOptions, QueuePair, WriteFlags};
use nvme_driver::{IoQueue, QueuePairOptions};
use nvme_sim::{PowerReplay, SimConfig, SimController, SimNamespace, SimWriteCache};

const BS: usize = 512;
const BLOCKS: u64 = 2048;

fn config(cache: SimWriteCache) -> SimConfig {
    SimConfig {
        namespaces: vec![
            SimNamespace {
                nsid: 1,
                block_size: BS as u32,
                blocks: BLOCKS,
                ..SimNamespace::default()
            },
            SimNamespace {
                nsid: 2,
                block_size: BS as u32,
                blocks: BLOCKS,
                ..SimNamespace::default()
            },
        ],
        write_cache: Some(cache),
        ..SimConfig::default()
    }
}

fn qp(ctrl: &Controller) -> QueuePair {
    ctrl.create_queue_pair(QueuePairOptions {
        timeout: Duration::from_secs(10),
        ..QueuePairOptions::default()
    })
    .expect("queue pair")
}

/// Writes `nlb` blocks at `lba` filled with `fill`.
fn write(ctrl: &Controller, q: &mut QueuePair, lba: u64, nlb: u32, fill: u8, flags: WriteFlags) {
    let ns = ctrl.namespace(1).unwrap();
    let mut buf = ctrl.alloc_buffer(nlb as usize * BS).unwrap();
    buf.fill(fill);
    q.write(&ns, lba, nlb, buf, flags).expect("write");
}

/// The first byte of each block `0..n` of namespace 1 on the medium.
fn blocks(sim: &SimController, n: u64) -> Vec<u8> {
    let bytes = sim.read_disk(1, 0, n as usize * BS);
    bytes.chunks(BS).map(|b| b[0]).collect()
}

#[test]
fn identify_reports_the_cache_and_the_atomic_units() {
    let (_sim, ctrl) = common::start_sim(
        config(SimWriteCache {
            awupf: 7,
            nawupf: vec![(2, 15)],
            ..SimWriteCache::default()
        }),
        ControllerOptions::default(),
        false,
    );
    assert_eq!(ctrl.identify().vwc & 1, 1);
    assert_eq!(ctrl.identify().awupf, 7);
    let ns1 = ctrl.identify_namespace(1).unwrap();
    assert_eq!(
        ns1.nsfeat & nvme_driver::spec::identify::nsfeat::ATOMIC_PARAMETERS,
        0
    );
    let ns2 = ctrl.identify_namespace(2).unwrap();
    assert_ne!(
        ns2.nsfeat & nvme_driver::spec::identify::nsfeat::ATOMIC_PARAMETERS,
        0
    );
    assert_eq!(ns2.nawupf, 15);
}

/// Unflushed writes end old or new, block by block, atomic units whole; flushed and FUA
/// writes survive; after the cut, I/O fails with status 05h; the medium powers on again
/// under a new driver with the cut's contents.
#[test]
fn a_power_cut_keeps_what_was_flushed_and_nothing_that_was_not_written() {
    let mut torn = 0;
    let mut lost = 0;
    for seed in 0..12u64 {
        let cache = SimWriteCache {
            seed,
            awupf: 3, // 4-block units
            destage_per_mille: 100,
            ..SimWriteCache::default()
        };
        let (sim, ctrl) =
            common::start_sim(config(cache.clone()), ControllerOptions::default(), false);
        let mut q = qp(&ctrl);
        let ns = ctrl.namespace(1).unwrap();
        write(&ctrl, &mut q, 0, 8, 1, WriteFlags::NONE);
        q.flush(&ns).unwrap();
        write(&ctrl, &mut q, 0, 4, 2, WriteFlags::NONE); // one unit, over flushed data
        write(&ctrl, &mut q, 8, 8, 3, WriteFlags::NONE); // two units: 8..12, 12..16
        write(&ctrl, &mut q, 16, 1, 4, WriteFlags::FUA);
        sim.power_cut();
        assert!(sim.is_powered_off());
        let ns = ctrl.namespace(1).unwrap();
        let buf = ctrl.alloc_buffer(BS).unwrap();
        let failure = q.read(&ns, 0, 1, buf).expect_err("I/O after the cut");
        let status = failure.error.status().expect("a status");
        assert_eq!(
            (status.sct(), status.sc()),
            (StatusCodeType::Generic, generic::POWER_LOSS_ABORT),
            "seed {seed}"
        );
        drop(q);
        drop(ctrl);

        let medium = sim.medium();
        let b = blocks(&sim, 20);
        assert!(
            b[..4].iter().all(|&x| x == b[0]) && [1, 2].contains(&b[0]),
            "seed {seed}: {b:?}"
        );
        assert_eq!(&b[4..8], &[1; 4], "seed {seed}: flushed blocks");
        for unit in [8..12, 12..16] {
            let v = b[unit.start];
            assert!(
                b[unit].iter().all(|&x| x == v) && [0, 3].contains(&v),
                "seed {seed}: {b:?}"
            );
        }
        assert_eq!(b[16], 4, "seed {seed}: the FUA write");
        assert_eq!(&b[17..], &[0; 3], "seed {seed}: never written");
        torn += usize::from(b[8] != b[12]);
        lost += usize::from(b[0] == 1);

        // Power on with that medium: a new driver reads what the cut left.
        let sim2 = SimController::start_on(config(cache), &medium);
        let (sim2, ctrl2) = common::open_on(sim2, ControllerOptions::default(), false);
        let mut q2 = qp(&ctrl2);
        let ns = ctrl2.namespace(1).unwrap();
        let back = q2
            .read(&ns, 0, 20, ctrl2.alloc_buffer(20 * BS).unwrap())
            .unwrap();
        let again: Vec<u8> = back.chunks(BS).map(|c| c[0]).collect();
        assert_eq!(
            again, b,
            "seed {seed}: the powered-on drive reads the cut medium"
        );
        assert_eq!(blocks(&sim2, 20), b, "seed {seed}");
    }
    assert!(
        torn > 0 && lost > 0,
        "the seeds tear and lose something ({torn}, {lost})"
    );
}

#[test]
fn with_the_write_cache_disabled_every_completed_write_survives() {
    for seed in 0..8u64 {
        let cache = SimWriteCache {
            seed,
            ..SimWriteCache::default()
        };
        let (sim, ctrl) = common::start_sim(config(cache), ControllerOptions::default(), false);
        let mut q = qp(&ctrl);
        write(&ctrl, &mut q, 0, 2, 7, WriteFlags::NONE); // cached: written back when disabled
        ctrl.set_feature(Feature::VolatileWriteCache(false), false)
            .unwrap();
        assert_eq!(
            ctrl.get_feature(FeatureId::VolatileWriteCache, Select::Current)
                .unwrap(),
            Feature::VolatileWriteCache(false)
        );
        assert_eq!(sim.dirty_blocks(), 0, "seed {seed}");
        write(&ctrl, &mut q, 2, 6, 8, WriteFlags::NONE);
        sim.power_cut();
        assert_eq!(blocks(&sim, 8), [7, 7, 8, 8, 8, 8, 8, 8], "seed {seed}");
    }
}

/// The recorded stream replayed through `PowerReplay` gives, after `n` events, exactly the
/// medium a live controller configured to cut after `n` events leaves.
#[test]
fn a_recorded_stream_replays_to_the_live_cut() {
    for seed in 0..6u64 {
        let cut_after = 10 + seed * 7;
        let cache = SimWriteCache {
            seed,
            awupf: 1,
            destage_per_mille: 200,
            record: true,
            cut_after: Some(cut_after),
            ..SimWriteCache::default()
        };
        let (sim, ctrl) =
            common::start_sim(config(cache.clone()), ControllerOptions::default(), false);
        let mut q = qp(&ctrl);
        let ns = ctrl.namespace(1).unwrap();
        let mut stopped = None;
        for i in 0..200u64 {
            let mut buf = ctrl.alloc_buffer(3 * BS).unwrap();
            buf.fill(i as u8 + 1);
            let lba = (i * 5) % 64;
            let result = if i % 9 == 8 {
                q.flush(&ns).map_err(|e| e.to_string())
            } else {
                q.write(&ns, lba, 3, buf, WriteFlags::NONE)
                    .map(drop)
                    .map_err(|f| f.error.to_string())
            };
            if let Err(e) = result {
                stopped = Some((i, e));
                break;
            }
        }
        let (at, why) = stopped.unwrap_or_else(|| panic!("seed {seed}: the cut never came"));
        assert!(
            why.contains("Power Loss"),
            "seed {seed}: command {at}: {why}"
        );
        assert_eq!(sim.medium_events(), cut_after, "seed {seed}");
        let journal = sim.take_journal();
        assert_eq!(journal.len() as u64, cut_after, "seed {seed}");
        let live = sim.medium();
        let mut replay = PowerReplay::new(
            &config(cache).namespaces,
            sim.config().write_cache.as_ref().unwrap(),
        );
        for event in &journal {
            replay.apply(event);
        }
        let replayed = replay.cut();
        for nsid in [1, 2] {
            assert!(
                replayed.bytes(nsid) == live.bytes(nsid),
                "seed {seed}: namespace {nsid} differs between the live cut and the replay"
            );
        }
    }
}
