//! The engine against the in-process emulator: ublk descriptors in, NVMe commands executed,
//! the data and results the kernel would see out (no kernel, no libublk queue).

use std::time::{Duration, Instant};

use libublk::sys;
use nvme_driver::spec::status::media;
use nvme_driver::spec::{Status, StatusCodeType};
use nvme_driver::{Controller, ControllerOptions, QueuePairOptions, Transport};
use nvme_sim::{SimConfig, SimController, SimNamespace};

use super::*;
use crate::mapping::SECTOR_SHIFT;

const BS: u32 = 4096;
const BLOCKS: u64 = 1024;
const DEPTH: u16 = 8;
const MAX_IO: u32 = 64 << 10;

struct Rig {
    // Dropped in field order: the engine (its queue pair) before the controller, the
    // controller before the emulator.
    engine: Engine<AnyQueuePair>,
    _ctrl: Controller,
    sim: SimController,
    /// The kernel's I/O buffer of each tag.
    kbuf: Vec<Vec<u8>>,
}

fn rig() -> Rig {
    let sim = SimController::start(SimConfig {
        namespaces: vec![SimNamespace {
            nsid: 1,
            block_size: BS,
            blocks: BLOCKS,
            ..SimNamespace::default()
        }],
        ..SimConfig::default()
    });
    let ctrl = Controller::new(
        Transport::new(sim.mmio(), sim.dma(), "sim"),
        ControllerOptions::default(),
    )
    .unwrap();
    let ns = ctrl.namespace(1).unwrap();
    let oncs = ctrl.identify().oncs_flags();
    let geo = Geometry {
        block_size: ns.block_size(),
        blocks: ns.blocks(),
        max_io_bytes: MAX_IO,
        discard: oncs.contains(nvme_driver::spec::Oncs::DATASET_MANAGEMENT),
        write_zeroes: oncs.contains(nvme_driver::spec::Oncs::WRITE_ZEROES),
    };
    let qp = ctrl
        .create_queue_pair(QueuePairOptions::default().depth(u32::from(DEPTH) + 1))
        .unwrap();
    let engine = Engine::new(AnyQueuePair::Pcie(qp), ns, geo, DEPTH, ctrl.dma()).unwrap();
    Rig {
        engine,
        _ctrl: ctrl,
        sim,
        kbuf: vec![vec![0; MAX_IO as usize]; usize::from(DEPTH)],
    }
}

fn desc(op: u32, flags: u32, lba: u64, blocks: u32) -> IoDesc {
    let per_block = u64::from(BS >> SECTOR_SHIFT);
    IoDesc {
        op,
        flags,
        start_sector: lba * per_block,
        nr_sectors: (u64::from(blocks) * per_block) as u32,
    }
}

impl Rig {
    /// Runs the requests `(tag, desc)` together, as the kernel would hand them over, and
    /// returns each tag's result, with a read's data copied into the tag's kernel buffer.
    fn run(&mut self, reqs: &[(u16, IoDesc)]) -> Vec<(u16, i32)> {
        let mut results = Vec::new();
        for (tag, d) in reqs {
            if let Started::Done(res) = self.engine.start(*tag, d, &self.kbuf[usize::from(*tag)]) {
                results.push((*tag, res));
            }
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        while self.engine.in_flight() > 0 {
            assert!(Instant::now() < deadline, "requests did not finish");
            let kbuf = &mut self.kbuf;
            self.engine.poll(|tag, res, data| {
                kbuf[usize::from(tag)][..data.len()].copy_from_slice(data);
                results.push((tag, res));
            });
        }
        results.sort();
        results
    }

    fn one(&mut self, tag: u16, d: IoDesc) -> i32 {
        let r = self.run(&[(tag, d)]);
        assert_eq!(r.len(), 1);
        r[0].1
    }
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ seed)
        .collect()
}

#[test]
fn writes_land_on_the_medium_and_read_back() {
    let mut r = rig();
    let data = pattern(7, 4 * BS as usize);
    r.kbuf[3][..data.len()].copy_from_slice(&data);
    let res = r.one(3, desc(sys::UBLK_IO_OP_WRITE, 0, 10, 4));
    assert_eq!(res, 4 * BS as i32, "a write completes with its bytes");
    assert_eq!(r.sim.read_disk(1, 10 * u64::from(BS), data.len()), data);

    // Read it back through another tag: the data arrives in that tag's kernel buffer.
    let res = r.one(5, desc(sys::UBLK_IO_OP_READ, 0, 10, 4));
    assert_eq!(res, 4 * BS as i32);
    assert_eq!(&r.kbuf[5][..data.len()], &data[..]);
}

#[test]
fn every_tag_in_flight_at_once() {
    let mut r = rig();
    let mut reqs = Vec::new();
    for tag in 0..DEPTH {
        let data = pattern(tag as u8, BS as usize * 2);
        r.kbuf[usize::from(tag)][..data.len()].copy_from_slice(&data);
        reqs.push((tag, desc(sys::UBLK_IO_OP_WRITE, 0, u64::from(tag) * 2, 2)));
    }
    let results = r.run(&reqs);
    assert_eq!(results.len(), usize::from(DEPTH));
    assert!(
        results.iter().all(|&(_, res)| res == 2 * BS as i32),
        "{results:?}"
    );
    for tag in 0..DEPTH {
        assert_eq!(
            r.sim
                .read_disk(1, u64::from(tag) * 2 * u64::from(BS), 2 * BS as usize),
            pattern(tag as u8, 2 * BS as usize)
        );
    }
    let reads: Vec<_> = (0..DEPTH)
        .map(|tag| {
            (
                tag,
                desc(sys::UBLK_IO_OP_READ, 0, u64::from(DEPTH - 1 - tag) * 2, 2),
            )
        })
        .collect();
    r.kbuf.iter_mut().for_each(|b| b.fill(0));
    let results = r.run(&reads);
    assert!(results.iter().all(|&(_, res)| res == 2 * BS as i32));
    for tag in 0..DEPTH {
        let want = pattern((DEPTH - 1 - tag) as u8, 2 * BS as usize);
        assert_eq!(&r.kbuf[usize::from(tag)][..want.len()], &want[..]);
    }
    assert_eq!(r.engine.stats().ok, 2 * u64::from(DEPTH));
}

#[test]
fn flush_write_zeroes_and_discard() {
    let mut r = rig();
    let ones = vec![0xa5u8; 8 * BS as usize];
    r.sim.write_disk(1, 0, &ones);
    assert_eq!(r.one(0, desc(sys::UBLK_IO_OP_FLUSH, 0, 0, 0)), 0);
    // Write Zeroes of blocks 1..3: zero on the medium, the neighbours untouched.
    let res = r.one(
        1,
        desc(sys::UBLK_IO_OP_WRITE_ZEROES, sys::UBLK_IO_F_NOUNMAP, 1, 2),
    );
    assert_eq!(res, 2 * BS as i32);
    let disk = r.sim.read_disk(1, 0, 4 * BS as usize);
    let bs = BS as usize;
    assert!(disk[..bs].iter().all(|&b| b == 0xa5));
    assert!(disk[bs..3 * bs].iter().all(|&b| b == 0));
    assert!(disk[3 * bs..].iter().all(|&b| b == 0xa5));
    // Discard (Deallocate) of blocks 4..8 completes with its bytes; the emulator's
    // deallocated blocks read back as zeroes.
    assert_eq!(
        r.one(2, desc(sys::UBLK_IO_OP_DISCARD, 0, 4, 4)),
        4 * BS as i32
    );
    assert_eq!(r.one(2, desc(sys::UBLK_IO_OP_READ, 0, 4, 4)), 4 * BS as i32);
    assert!(r.kbuf[2][..4 * bs].iter().all(|&b| b == 0));
}

#[test]
fn a_device_error_fails_the_request_with_eio_and_the_tag_serves_again() {
    let mut r = rig();
    r.sim.faults().fail_next_io(
        Status::new(
            StatusCodeType::MediaDataIntegrity.raw(),
            media::UNRECOVERED_READ_ERROR,
            true,
        ),
        1,
    );
    assert_eq!(r.one(4, desc(sys::UBLK_IO_OP_READ, 0, 0, 1)), -libc::EIO);
    assert_eq!(r.engine.stats().failed, 1);
    // The same tag works afterwards (its buffer came back or was replaced).
    let data = pattern(9, BS as usize);
    r.kbuf[4][..data.len()].copy_from_slice(&data);
    assert_eq!(r.one(4, desc(sys::UBLK_IO_OP_WRITE, 0, 0, 1)), BS as i32);
    assert_eq!(r.sim.read_disk(1, 0, data.len()), data);
}

#[test]
fn refusals_complete_at_once_and_touch_nothing() {
    let mut r = rig();
    let before = r.sim.read_disk(1, 0, 2 * BS as usize);
    r.kbuf[0].fill(0xff);
    // Past the end, misaligned, an op not served, a tag beyond the queue.
    assert_eq!(
        r.one(0, desc(sys::UBLK_IO_OP_WRITE, 0, BLOCKS - 1, 2)),
        -libc::EINVAL
    );
    let misaligned = IoDesc {
        start_sector: 1,
        ..desc(sys::UBLK_IO_OP_WRITE, 0, 0, 1)
    };
    assert_eq!(r.one(0, misaligned), -libc::EINVAL);
    assert_eq!(
        r.one(0, desc(sys::UBLK_IO_OP_WRITE_SAME, 0, 0, 1)),
        -libc::EOPNOTSUPP
    );
    assert_eq!(
        r.engine
            .start(DEPTH, &desc(sys::UBLK_IO_OP_READ, 0, 0, 1), &[]),
        Started::Done(-libc::EINVAL)
    );
    assert_eq!(r.engine.in_flight(), 0);
    assert_eq!(r.sim.read_disk(1, 0, 2 * BS as usize), before);
}

#[test]
fn drain_waits_for_everything_in_flight() {
    let mut r = rig();
    for tag in 0..DEPTH {
        let started = r
            .engine
            .start(tag, &desc(sys::UBLK_IO_OP_READ, 0, 0, 1), &[]);
        assert_eq!(started, Started::Queued);
    }
    assert_eq!(r.engine.in_flight(), usize::from(DEPTH));
    r.engine.drain();
    assert_eq!(r.engine.in_flight(), 0);
}
