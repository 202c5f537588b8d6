//! Proof that the NVMe/TCP I/O path allocates nothing in steady state: a counting global
//! allocator records the allocations made by the test thread while it submits and reaps
//! thousands of reads (C2HData, SUCCESS flag), in-capsule writes and R2T writes (H2CData)
//! against the fake target (whose own threads are not counted), half of the rounds waiting in
//! `wait_for_completion` (a blocking read of the socket) instead of spinning on polls.

use nvme_tcp::IoQueue;

use nvme_core::{Completion, QueuePairOptions};
use nvme_tcp::fake::{Config, FakeTarget};
use nvme_tcp::{TcpController, TcpOptions};

#[path = "../../../tests/support/counting_alloc.rs"]
mod counting_alloc;
use counting_alloc::allocations;

#[test]
fn steady_state_io_allocates_nothing() {
    let t = FakeTarget::start(Config::default());
    let ctrl = TcpController::connect(&t.trid(), TcpOptions::default()).unwrap();
    let ns = ctrl.namespace(2).unwrap();
    let mut qp = ctrl
        .create_queue_pair(QueuePairOptions {
            depth: 32,
            ..QueuePairOptions::default()
        })
        .unwrap();
    // 4 KiB buffers: 8 blocks each; writes of 8 blocks go in-capsule (<= 8 KiB), and the
    // 32 KiB buffer's writes go by R2T.
    let mut bufs: Vec<_> = (0..16)
        .map(|_| Some(ctrl.alloc_buffer(4096).unwrap()))
        .collect();
    let mut big = Some(ctrl.alloc_buffer(32768).unwrap());
    let mut done: Vec<Completion> = Vec::with_capacity(64);
    let mut round = |qp: &mut nvme_tcp::TcpQueuePair, i: u64| {
        qp.plug(17).unwrap();
        for (k, b) in bufs.iter_mut().enumerate() {
            let lba = (i * 16 + k as u64) % 200 * 8;
            let buf = b.take().unwrap();
            if k % 2 == 0 {
                qp.submit_read(&ns, lba, 8, buf, k as u64).unwrap();
            } else {
                qp.submit_write(&ns, lba, 8, buf, nvme_core::WriteFlags::NONE, k as u64)
                    .unwrap();
            }
        }
        qp.submit_write(
            &ns,
            1600,
            64,
            big.take().unwrap(),
            nvme_core::WriteFlags::NONE,
            99,
        )
        .unwrap();
        qp.unplug();
        let mut n = 0;
        while n < 17 {
            // Odd rounds block in the socket between polls (the hybrid mode's idle path).
            if i % 2 == 1 {
                qp.wait_for_completion(std::time::Duration::from_secs(5))
                    .unwrap();
            }
            n += qp.poll(|c| done.push(c));
        }
        for c in done.drain(..) {
            c.result.unwrap();
            let buf = c.buffer.unwrap();
            if c.user_data == 99 {
                big = Some(buf);
            } else {
                bufs[c.user_data as usize] = Some(buf);
            }
        }
    };
    // Warm up: the send buffer grows to its working size once.
    for i in 0..20 {
        round(&mut qp, i);
    }
    let before = allocations();
    for i in 0..200 {
        round(&mut qp, i);
    }
    let after = allocations();
    assert_eq!(
        after - before,
        0,
        "{} allocations in 3400 I/Os",
        after - before
    );
    let s = qp.stats();
    assert!(
        s.success_shortcuts > 0 && s.r2ts > 0 && s.in_capsule_writes > 0,
        "{s:?}"
    );
}
