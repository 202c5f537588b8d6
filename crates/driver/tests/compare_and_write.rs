//! Fused Compare and Write (NVMe Base 2.0 §3.4.2) through the PCIe queue pair against the
//! emulator: both commands go out in adjacent entries behind one doorbell; a match writes the
//! new data (read back), a mismatch writes nothing and reads as `Miscompare`; a controller
//! without FUSES bit 0, more blocks than ACWU, or a short buffer is refused before anything
//! reaches the device. Many threads' compare-and-writes on one counter block never lose an
//! update (the pair is atomic).

use std::sync::Arc;

use nvme_driver::fused::{CompareAndWrite, CompareAndWriteOutcome};
use nvme_driver::{Controller, ControllerOptions, Error, IoQueue, QueuePair};
use nvme_driver::{Namespace, WriteFlags};
use nvme_sim::{SimConfig, SimController, SIM_ACWU_BLOCKS};

mod common;

fn start(compare_and_write: bool) -> (SimController, Controller) {
    let config = SimConfig {
        compare_and_write,
        ..SimConfig::default()
    };
    common::start_sim(config, ControllerOptions::default(), false)
}

fn qp(ctrl: &Controller) -> QueuePair {
    common::queue_pair(ctrl)
}

fn read(ctrl: &Controller, q: &mut QueuePair, ns: &Namespace, lba: u64, n: u32) -> Vec<u8> {
    let buf = ctrl
        .alloc_buffer(n as usize * ns.block_size() as usize)
        .unwrap();
    q.read(ns, lba, n, buf).unwrap().to_vec()
}

/// A compare-and-write buffer: `expected` then `new`.
fn pair_buffer(ctrl: &Controller, expected: &[u8], new: &[u8]) -> nvme_driver::DmaBuffer {
    let mut buf = ctrl.alloc_buffer(expected.len() + new.len()).unwrap();
    buf[..expected.len()].copy_from_slice(expected);
    buf[expected.len()..expected.len() + new.len()].copy_from_slice(new);
    buf
}

#[test]
fn a_match_writes_and_a_mismatch_does_not() {
    let (sim, ctrl) = start(true);
    let ns = ctrl.namespace(1).unwrap();
    let bs = ns.block_size() as usize;
    let mut q = qp(&ctrl);
    let old = common::pattern(4 * bs, 1);
    let mut buf = ctrl.alloc_buffer(old.len()).unwrap();
    buf[..old.len()].copy_from_slice(&old);
    q.write(&ns, 40, 4, buf, WriteFlags::NONE).unwrap();

    // Match: both commands behind one doorbell; the new data is on the medium.
    let new = common::pattern(4 * bs, 2);
    let before = (q.stats().clone(), sim.stats());
    let (_, outcome) = q
        .compare_and_write(
            &ns,
            CompareAndWrite::new(40, 4),
            pair_buffer(&ctrl, &old, &new),
            |_| {},
        )
        .unwrap();
    assert_eq!(outcome, CompareAndWriteOutcome::Written);
    let after = (q.stats().clone(), sim.stats());
    assert_eq!(after.0.commands_submitted - before.0.commands_submitted, 2);
    assert_eq!(
        after.0.sq_doorbell_updates - before.0.sq_doorbell_updates,
        1
    );
    assert_eq!(after.1.writes - before.1.writes, 1);
    assert_eq!(read(&ctrl, &mut q, &ns, 40, 4), new);

    // Mismatch (the old data again): Compare Failure, the write aborted, nothing written.
    let newer = common::pattern(4 * bs, 3);
    let writes = sim.stats().writes;
    let (_, outcome) = q
        .compare_and_write(
            &ns,
            CompareAndWrite::new(40, 4),
            pair_buffer(&ctrl, &old, &newer),
            |_| {},
        )
        .unwrap();
    assert_eq!(outcome, CompareAndWriteOutcome::Miscompare);
    assert_eq!(sim.stats().writes, writes, "the aborted write never ran");
    assert_eq!(read(&ctrl, &mut q, &ns, 40, 4), new);

    // Asynchronously, with FUA, on the other namespace; the completion carries the buffer.
    let ns2 = ctrl.namespace(2).unwrap();
    let bs2 = ns2.block_size() as usize;
    let zeros = vec![0u8; bs2];
    let one = common::pattern(bs2, 4);
    q.submit_compare_and_write(
        &ns2,
        CompareAndWrite::new(7, 1).fua(),
        pair_buffer(&ctrl, &zeros, &one),
        77,
    )
    .unwrap();
    let mut done = None;
    while done.is_none() {
        q.poll(|c| done = Some(c));
    }
    let c = done.unwrap();
    assert_eq!(c.user_data, 77);
    assert!(c.result.is_ok() && c.buffer.is_some(), "{:?}", c.result);
    assert_eq!(read(&ctrl, &mut q, &ns2, 7, 1), one);
}

#[test]
fn refusals_send_nothing() {
    let (sim, ctrl) = start(true);
    let ns = ctrl.namespace(1).unwrap();
    let bs = ns.block_size() as usize;
    let mut q = qp(&ctrl);
    let before = sim.stats().io_commands();
    let too_many = u32::from(SIM_ACWU_BLOCKS) + 1;
    let half = vec![0u8; too_many as usize * bs];
    let f = q
        .submit_compare_and_write(
            &ns,
            CompareAndWrite::new(0, too_many),
            pair_buffer(&ctrl, &half, &half),
            1,
        )
        .unwrap_err();
    assert!(
        matches!(&f.error, Error::InvalidRequest(m) if m.contains("ACWU")),
        "{:?}",
        f.error
    );
    assert!(f.buffer.is_some());
    // The buffer holds only the compare data.
    let short = ctrl.alloc_buffer(bs).unwrap();
    let f = q
        .submit_compare_and_write(&ns, CompareAndWrite::new(0, 1), short, 1)
        .unwrap_err();
    assert!(
        matches!(f.error, Error::BufferTooSmall { .. }),
        "{:?}",
        f.error
    );
    let f = q
        .submit_compare_and_write(
            &ns,
            CompareAndWrite::new(ns.blocks(), 1),
            pair_buffer(&ctrl, &half[..bs], &half[..bs]),
            1,
        )
        .unwrap_err();
    assert!(
        matches!(f.error, Error::LbaOutOfRange { .. }),
        "{:?}",
        f.error
    );
    assert_eq!(
        sim.stats().io_commands(),
        before,
        "nothing reached the device"
    );

    // A controller without the fused operation.
    let (sim, ctrl) = start(false);
    let ns = ctrl.namespace(1).unwrap();
    let mut q = qp(&ctrl);
    let before = sim.stats().io_commands();
    let f = q
        .submit_compare_and_write(
            &ns,
            CompareAndWrite::new(0, 1),
            pair_buffer(&ctrl, &half[..bs], &half[..bs]),
            1,
        )
        .unwrap_err();
    assert!(
        matches!(&f.error, Error::CommandNotSupported { why, .. } if why.contains("FUSES bit 0")),
        "{:?}",
        f.error
    );
    assert_eq!(sim.stats().io_commands(), before);
}

/// Four threads each add 1 to a counter in block 9, 30 times, by read then compare-and-write
/// (retrying on a miscompare): no increment is lost.
#[test]
fn concurrent_increments_are_atomic() {
    const THREADS: u64 = 4;
    const ROUNDS: u64 = 30;
    let (_sim, ctrl) = start(true);
    let ctrl = Arc::new(ctrl);
    let ns = ctrl.namespace(1).unwrap();
    let bs = ns.block_size() as usize;
    let mut q = qp(&ctrl);
    q.write_zeroes(&ns, 9, 1, false).unwrap();
    let workers: Vec<_> = (0..THREADS)
        .map(|_| {
            let (ctrl, ns) = (ctrl.clone(), ns.clone());
            std::thread::spawn(move || {
                let mut q = qp(&ctrl);
                let mut misses = 0u64;
                for _ in 0..ROUNDS {
                    loop {
                        let seen = read(&ctrl, &mut q, &ns, 9, 1);
                        let n = u64::from_le_bytes(seen[..8].try_into().unwrap());
                        let mut next = seen.clone();
                        next[..8].copy_from_slice(&(n + 1).to_le_bytes());
                        let buf = pair_buffer(&ctrl, &seen, &next);
                        let (_, outcome) = q
                            .compare_and_write(&ns, CompareAndWrite::new(9, 1), buf, |_| {})
                            .unwrap();
                        if outcome == CompareAndWriteOutcome::Written {
                            break;
                        }
                        misses += 1;
                    }
                }
                misses
            })
        })
        .collect();
    let misses: u64 = workers.into_iter().map(|w| w.join().unwrap()).sum();
    let block = read(&ctrl, &mut q, &ns, 9, 1);
    assert_eq!(
        u64::from_le_bytes(block[..8].try_into().unwrap()),
        THREADS * ROUNDS
    );
    assert_eq!(block[8..bs], vec![0u8; bs - 8][..]);
    eprintln!("{misses} miscompares retried");
}
