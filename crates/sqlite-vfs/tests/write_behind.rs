//! `NvmeDevice`'s write-behind path on the emulator's power-loss model: several writes in
//! flight, read-your-writes, overlapping rewrites kept in order, `flush` as the barrier, and
//! power cuts while writes are still in flight (the sync then fails, never acknowledges).

mod power;

use std::time::Duration;

use nvme_driver::{Controller, ControllerOptions, Transport};
use nvme_sim::SimController;
use nvme_sqlite_vfs::{BlockDevice, NvmeDevice};
use power::{config, controller, pattern, NSID};

const BS: u32 = 4096;
const BLOCKS: u64 = (8 << 20) / BS as u64;

fn device(sim: &SimController) -> NvmeDevice {
    NvmeDevice::new(controller(sim), NSID).expect("NVMe device")
}

fn read_block(dev: &mut dyn BlockDevice, lba: u64) -> Vec<u8> {
    let mut b = vec![0; BS as usize];
    dev.read(lba, &mut b).expect("read");
    b
}

/// Writes of the test: scattered single blocks (one command each), a rewrite of the first
/// (must land after it), and an append run that merges into one command.
fn writes(round: u64) -> Vec<(u64, Vec<u8>)> {
    let mut w: Vec<(u64, Vec<u8>)> = (0..12)
        .map(|i| (100 + 37 * i, pattern(BS as usize, round * 1000 + i)))
        .collect();
    w.push((100, pattern(BS as usize, round * 1000 + 99)));
    for i in 0..8 {
        w.push((1000 + i, pattern(BS as usize, round * 1000 + 200 + i)));
    }
    w
}

/// The newest contents per block of `writes`.
fn newest(writes: &[(u64, Vec<u8>)]) -> std::collections::BTreeMap<u64, Vec<u8>> {
    writes.iter().cloned().collect()
}

/// The namespace through a controller whose queue pairs have MSI-X vectors: the
/// write-behind queue's waits block on them after a short spin.
fn device_with_interrupts(sim: &SimController) -> NvmeDevice {
    let transport = Transport::new(sim.mmio(), sim.dma(), "sim").with_interrupts(sim.interrupts());
    let ctrl = Controller::new(transport, ControllerOptions::default().interrupts(true))
        .expect("controller bring-up");
    NvmeDevice::new(ctrl, NSID).expect("NVMe device")
}

#[test]
fn writes_in_flight_read_back_and_are_durable_after_the_barrier() {
    barrier_case(false);
}

/// The same writes, reads and barrier with waits that block on the interrupt: the same
/// results and durability, and the waits did block (not spin).
#[test]
fn waits_that_block_on_the_interrupt_keep_the_same_order_and_durability() {
    barrier_case(true);
}

fn barrier_case(irq: bool) {
    let _guard = power::EMULATOR.lock().unwrap_or_else(|e| e.into_inner());
    let cfg = config(BS, BLOCKS, 7, None);
    let sim = SimController::start(cfg.clone());
    // Completions come late, so the writes really are in flight together.
    sim.faults().delay_completions(Duration::from_millis(20));
    let mut dev = if irq {
        device_with_interrupts(&sim)
    } else {
        device(&sim)
    };
    let w = writes(1);
    for (lba, data) in &w {
        dev.write(*lba, data).expect("write");
    }
    let stats = dev.stats();
    assert!(
        stats.max_in_flight >= 4,
        "expected several writes in flight: {stats:?}"
    );
    assert!(stats.merged >= 7, "the append run merged: {stats:?}");
    assert!(
        stats.overlap_waits >= 1,
        "the rewrite of block 100 waited for the first write: {stats:?}"
    );
    // Read-your-writes before any barrier.
    let want = newest(&w);
    for (&lba, data) in &want {
        assert_eq!(
            &read_block(&mut dev, lba),
            data,
            "block {lba} before the flush"
        );
    }
    dev.flush().expect("flush");
    let blocked = dev.stats().blocked_waits;
    if irq {
        // 20 ms per completion is far more than the spin before a wait blocks.
        assert!(
            blocked > 0,
            "no wait blocked on the interrupt: {:?}",
            dev.stats()
        );
    } else {
        assert_eq!(
            blocked,
            0,
            "a pair without a vector blocked: {:?}",
            dev.stats()
        );
    }
    // Everything acknowledged by the barrier survives a cut right after it.
    sim.power_cut();
    let medium = sim.medium();
    drop(dev);
    drop(sim);
    let sim = SimController::start_on(cfg, &medium);
    let mut dev = device(&sim);
    for (&lba, data) in &want {
        assert_eq!(
            &read_block(&mut dev, lba),
            data,
            "block {lba} after the cut"
        );
    }
}

#[test]
fn a_power_cut_with_writes_in_flight_fails_the_barrier_and_tears_nothing_synced() {
    let _guard = power::EMULATOR.lock().unwrap_or_else(|e| e.into_inner());
    let mut kept_synced = 0;
    for seed in [11u64, 12, 13, 14] {
        let cfg = config(BS, BLOCKS, seed, None);
        let sim = SimController::start(cfg.clone());
        let mut dev = device(&sim);
        let old = writes(2);
        for (lba, data) in &old {
            dev.write(*lba, data).expect("write");
        }
        dev.flush().expect("flush");
        let old = newest(&old);
        // The new writes execute late: the cut comes while they are queued or in flight.
        sim.faults().delay_execution(64, Duration::from_millis(30));
        let new = writes(3 + seed);
        for (lba, data) in &new {
            dev.write(*lba, data)
                .expect("a write is accepted before the device has it");
        }
        assert!(dev.stats().max_in_flight >= 4, "{:?}", dev.stats());
        sim.power_cut();
        let err = dev
            .flush()
            .expect_err("the barrier after a cut must fail, not acknowledge");
        assert!(
            matches!(err, nvme_sqlite_vfs::Error::Driver { .. }),
            "seed {seed}: {err}"
        );
        assert!(dev.stats().failed_writes >= 1, "{:?}", dev.stats());
        let medium = sim.medium();
        drop(dev);
        drop(sim);
        let sim = SimController::start_on(cfg, &medium);
        let mut dev = device(&sim);
        for (&lba, old_data) in &old {
            let got = read_block(&mut dev, lba);
            kept_synced += usize::from(got == *old_data);
            // The synced contents, or any version written since (block 100 has two).
            assert!(
                got == *old_data || new.iter().any(|(l, d)| *l == lba && got == *d),
                "seed {seed}: block {lba} holds neither its synced contents nor a later write"
            );
        }
        // A block never written stays zero.
        assert_eq!(read_block(&mut dev, 5), vec![0; BS as usize], "seed {seed}");
    }
    assert!(
        kept_synced > 0,
        "no cut lost a write in flight: the test did not cut while writes were in flight"
    );
}
