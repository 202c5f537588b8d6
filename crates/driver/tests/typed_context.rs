//! Typed per-request context (issue 11 item 3): each request carries a value of the caller's
//! type to its completion; a refused submission gives it back with the buffer.

use nvme_driver::WriteFlags;
use std::rc::Rc;

use nvme_driver::{Controller, ControllerOptions, Error, QueuePairOptions, TypedQueuePair};
use nvme_sim::{SimConfig, SimController};

mod common;

const NS: u32 = 2; // 4 KiB blocks

/// A context that is neither `Copy` nor a number: the caller's own request record.
#[derive(Debug)]
struct Request {
    lba: u64,
    fill: u8,
    /// Counts live contexts: every context must come back exactly once.
    _alive: Rc<()>,
}

fn start() -> (SimController, Controller) {
    common::start_sim(SimConfig::default(), ControllerOptions::default(), false)
}

#[test]
fn every_completion_carries_its_own_context() {
    let (_sim, ctrl) = start();
    let ns = ctrl.namespace(NS).unwrap();
    let alive = Rc::new(());
    let mut qp: TypedQueuePair<Request> = TypedQueuePair::new(
        &ctrl,
        QueuePairOptions {
            depth: 8,
            software_queue: 32,
            ..Default::default()
        },
    )
    .unwrap();
    // Writes: 39 requests, 7 on the ring (8 entries), 32 in the software queue.
    for i in 0..39u64 {
        let mut buf = ctrl.alloc_buffer(4096).unwrap();
        buf.fill(i as u8 + 1);
        let req = Request {
            lba: 100 + i,
            fill: i as u8 + 1,
            _alive: alive.clone(),
        };
        qp.submit_write(&ns, req.lba, 1, buf, WriteFlags::NONE, req)
            .unwrap();
    }
    assert_eq!(qp.outstanding(), 39);
    // A 40th finds ring and software queue full: refused, its context given back.
    let full = qp
        .submit_write(
            &ns,
            0,
            1,
            ctrl.alloc_buffer(4096).unwrap(),
            WriteFlags::NONE,
            Request {
                lba: 0,
                fill: 0xff,
                _alive: alive.clone(),
            },
        )
        .unwrap_err();
    assert!(
        matches!(full.failure.error, Error::QueueFull { .. }),
        "{full}"
    );
    assert_eq!(full.context.fill, 0xff);
    drop(full);
    let mut written = Vec::new();
    while written.len() < 39 {
        qp.poll(|c| {
            c.result.unwrap();
            written.push((c.context, c.buffer.unwrap()));
        });
    }
    assert_eq!(qp.outstanding(), 0);
    // Reads: each completion's context says which LBA and byte its buffer must hold.
    for (req, mut buf) in written {
        buf.fill(0);
        qp.submit_read(&ns, req.lba, 1, buf, req).unwrap();
    }
    let mut checked = 0;
    while checked < 39 {
        qp.poll(|c| {
            let buf = c.buffer.unwrap();
            assert!(
                buf.iter().all(|&b| b == c.context.fill),
                "LBA {} holds {:#x}, its context expects {:#x}",
                c.context.lba,
                buf[0],
                c.context.fill
            );
            checked += 1;
        });
    }
    // Commands without data carry contexts too.
    let ctx = |lba| Request {
        lba,
        fill: 0,
        _alive: alive.clone(),
    };
    qp.submit_flush(&ns, ctx(1)).unwrap();
    qp.submit_write_zeroes(&ns, 100, 4, false, ctx(2)).unwrap();
    qp.submit_deallocate(&ns, &[(120, 2)], ctx(3)).unwrap();
    let mut seen = Vec::new();
    while seen.len() < 3 {
        qp.poll(|c| {
            assert!(c.result.is_ok() && c.buffer.is_none());
            seen.push(c.context.lba);
        });
    }
    seen.sort();
    assert_eq!(seen, [1, 2, 3]);
    assert_eq!(
        Rc::strong_count(&alive),
        1,
        "every context was given back and dropped"
    );
}

#[test]
fn a_refused_submission_returns_the_context_and_the_buffer() {
    let (_sim, ctrl) = start();
    let ns = ctrl.namespace(NS).unwrap();
    let mut qp = TypedQueuePair::new(&ctrl, QueuePairOptions::default()).unwrap();
    let mut buf = ctrl.alloc_buffer(4096).unwrap();
    buf.fill(0x42);
    let context = String::from("the caller's own request");
    let refused = qp
        .submit_write(&ns, ns.blocks(), 1, buf, WriteFlags::NONE, context)
        .unwrap_err();
    assert!(
        matches!(refused.failure.error, Error::LbaOutOfRange { .. }),
        "{refused}"
    );
    assert_eq!(refused.context, "the caller's own request");
    assert!(refused.failure.buffer.unwrap().iter().all(|&b| b == 0x42));
    assert_eq!(
        qp.outstanding(),
        0,
        "the slot of a refused request is free again"
    );
    let refused = qp
        .submit_flush(&ctrl.namespace(1).unwrap(), String::from("ok"))
        .err();
    assert!(refused.is_none());
    let mut got = None;
    while got.is_none() {
        qp.poll(|c| got = Some(c.context));
    }
    assert_eq!(got.as_deref(), Some("ok"));
}
