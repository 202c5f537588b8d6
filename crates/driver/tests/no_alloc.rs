//! Proof that the I/O path allocates nothing: a counting global allocator records the
//! allocations made by the test thread while it submits and reaps thousands of I/Os (plugged
//! batches, single submissions, PRP-list transfers, an MDTS split, and vectored requests with
//! recycled `IoVec`s) against the emulator.

use nvme_driver::IoQueue;
use nvme_driver::WriteFlags;

use nvme_driver::{Controller, ControllerOptions, DmaBuffer, QueuePairOptions, Transport};
use nvme_sim::{SimConfig, SimController};

#[path = "../../../tests/support/counting_alloc.rs"]
mod counting_alloc;
use counting_alloc::allocations;

#[test]
fn steady_state_io_allocates_nothing() {
    let sim = SimController::start(SimConfig::default());
    let ctrl = Controller::new(
        Transport::new(sim.mmio(), sim.dma(), "sim"),
        ControllerOptions::default(),
    )
    .unwrap();
    let ns = ctrl.namespace(2).unwrap();
    let mut qp = ctrl
        .create_queue_pair(QueuePairOptions {
            depth: 64,
            ..Default::default()
        })
        .unwrap();
    let big = ctrl.max_transfer_bytes() * 2; // an MDTS split into 2 commands
    let mut small = DmaBuffer::allocate_many(ctrl.dma(), 32, 4096).unwrap();
    let mut list = Some(ctrl.alloc_buffer(16384).unwrap()); // a PRP list
    let mut split = Some(ctrl.alloc_buffer(big).unwrap());
    let mut completed = Vec::with_capacity(64);

    let mut run = |rounds: u64| {
        for round in 0..rounds {
            qp.plug(small.len() as u16).unwrap();
            for (i, buf) in small.drain(..).enumerate() {
                let lba = (round * 32 + i as u64) % 1024;
                if i % 2 == 0 {
                    qp.submit_read(&ns, lba, 1, buf, i as u64).unwrap();
                } else {
                    qp.submit_write(&ns, lba, 1, buf, WriteFlags::NONE, i as u64)
                        .unwrap();
                }
            }
            qp.unplug();
            let l = qp
                .write(&ns, 2048, 4, list.take().unwrap(), WriteFlags::NONE)
                .unwrap();
            list = Some(l);
            let blocks = (big / 4096) as u32;
            let s = qp.read(&ns, 3000, blocks, split.take().unwrap()).unwrap();
            split = Some(s);
            while small.len() < 32 {
                qp.poll(|c| {
                    assert!(c.result.is_ok());
                    completed.push(c.buffer.unwrap());
                });
                small.append(&mut completed);
            }
        }
    };
    run(20); // warm-up: first-touch of every slot and buffer
    let before = allocations();
    run(300); // 9,600 single-page I/Os, 300 PRP-list writes, 300 split reads
    let during = allocations() - before;
    assert_eq!(during, 0, "the I/O path allocated {during} times");
    assert_eq!(qp.stats().bad_completions, 0);
}

/// The typed-context pair (`TypedQueuePair`) adds no allocation: contexts are parked in a slab
/// sized at creation.
#[test]
fn typed_context_io_allocates_nothing() {
    let sim = SimController::start(SimConfig::default());
    let ctrl = Controller::new(
        Transport::new(sim.mmio(), sim.dma(), "sim"),
        ControllerOptions::default(),
    )
    .unwrap();
    let ns = ctrl.namespace(2).unwrap();
    let mut qp = nvme_driver::TypedQueuePair::<(u64, [u8; 24])>::new(
        &ctrl,
        QueuePairOptions {
            depth: 64,
            software_queue: 16,
            ..Default::default()
        },
    )
    .unwrap();
    let mut bufs = DmaBuffer::allocate_many(ctrl.dma(), 48, 4096).unwrap();
    let mut back = Vec::with_capacity(48);
    let mut run = |rounds: u64| {
        for round in 0..rounds {
            // 48 submissions: 63 ring slots, so none queue; then 16 more would.
            for (i, buf) in bufs.drain(..).enumerate() {
                let ctx = (round * 48 + i as u64, [i as u8; 24]);
                qp.submit_read(&ns, ctx.0 % 1024, 1, buf, ctx).unwrap();
            }
            while back.len() < 48 {
                qp.poll(|c| {
                    assert!(c.result.is_ok());
                    assert_eq!(c.context.1[0], (c.context.0 % 48) as u8);
                    back.push(c.buffer.unwrap());
                });
            }
            bufs.append(&mut back);
        }
    };
    run(20);
    let before = allocations();
    run(200);
    let during = allocations() - before;
    assert_eq!(during, 0, "the typed I/O path allocated {during} times");
}

/// Vectored I/O allocates nothing per request when the caller recycles its boxed `IoVec`s:
/// 16 scattered pages per request, SGL segments and PRP lists, completions hand every box back.
#[test]
fn vectored_io_with_recycled_vectors_allocates_nothing() {
    for sgl in [true, false] {
        let sim = SimController::start(SimConfig {
            sgl,
            ..SimConfig::default()
        });
        let ctrl = Controller::new(
            Transport::new(sim.mmio(), sim.dma(), "sim"),
            ControllerOptions::default(),
        )
        .unwrap();
        let ns = ctrl.namespace(2).unwrap();
        let mut qp = ctrl
            .create_queue_pair(QueuePairOptions {
                depth: 64,
                ..Default::default()
            })
            .unwrap();
        // 8 vectors of 16 pages each, taken from one pool of 256 pages (every other page: no
        // piece is adjacent to the next).
        let mut pool = DmaBuffer::allocate_many(ctrl.dma(), 256, 4096).unwrap();
        let mut vectors: Vec<Box<nvme_driver::IoVec>> = Vec::with_capacity(8);
        for _ in 0..8 {
            let mut v = nvme_driver::IoVec::boxed();
            for page in pool.drain(..32).step_by(2) {
                v.push(page).unwrap();
            }
            vectors.push(v);
        }
        let mut back = Vec::with_capacity(8);
        let mut run = |rounds: u64| {
            for round in 0..rounds {
                for (i, v) in vectors.drain(..).enumerate() {
                    let lba = (round * 8 + i as u64) * 16 % 2048;
                    if i % 2 == 0 {
                        qp.submit_writev(&ns, lba, 16, v, WriteFlags::NONE, i as u64)
                            .unwrap();
                    } else {
                        qp.submit_readv(&ns, lba, 16, v, i as u64).unwrap();
                    }
                }
                while back.len() < 8 {
                    qp.poll(|c| {
                        assert!(c.result.is_ok());
                        back.push(c.pieces.unwrap());
                    });
                }
                vectors.append(&mut back);
            }
        };
        run(10);
        let before = allocations();
        run(200); // 1,600 vectored requests of 16 pieces
        let during = allocations() - before;
        assert_eq!(
            during, 0,
            "the vectored I/O path allocated {during} times (sgl {sgl})"
        );
        assert_eq!(qp.stats().vectored_requests, 1680);
    }
}
