//! Proof that the I/O path allocates nothing: a counting global allocator records the
//! allocations made by the test thread while it submits and reaps thousands of I/Os (plugged
//! batches, single submissions, PRP-list transfers and an MDTS split) against the emulator.

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
