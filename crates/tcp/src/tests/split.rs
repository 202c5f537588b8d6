//! Transfers above one command (MDTS) on the NVMe/TCP pair itself: cut into pieces by the
//! shared splitter of `nvme_core::split`, one completion per request with the caller's user
//! data (any 64-bit value), synchronous and polled, and the up-front refusals.

use std::sync::atomic::Ordering;
use std::time::Duration;

use nvme_core::{Error, IoQueue, QueuePairOptions, WriteFlags};

use super::{connect, pattern, poll_n};
use crate::fake::{Config, FakeTarget};

/// MDTS 1: at most 8 KiB (two 4 KiB pages) per command.
fn small_mdts_target() -> FakeTarget {
    FakeTarget::start(Config {
        mdts: 1,
        ..Config::default()
    })
}

#[test]
fn a_transfer_above_mdts_is_split_on_the_pair_and_completes_once() {
    let t = small_mdts_target();
    let c = connect(&t);
    let ns = c.namespace(2).unwrap(); // 512-byte blocks
    let mut qp = c.create_queue_pair(QueuePairOptions::default()).unwrap();
    assert_eq!(qp.max_transfer_bytes(), 8192);

    // Synchronous: 36 KiB (4.5 pieces of 8 KiB), written and read back.
    let len = 36 * 1024;
    let blocks = (len / 512) as u32;
    let data = pattern(len, 5);
    let mut buf = c.alloc_buffer(len).unwrap();
    buf[..len].copy_from_slice(&data);
    let buf = qp.write(&ns, 100, blocks, buf, WriteFlags::NONE).unwrap();
    assert_eq!(buf.len(), len, "the whole buffer comes back");
    assert_eq!(t.disk(2, 100 * 512, len), data, "target got the data");
    let back = qp
        .read(&ns, 100, blocks, c.alloc_buffer(len).unwrap())
        .unwrap();
    assert_eq!(&back[..len], &data[..]);

    // Polled: two split reads with user data using every bit, next to a one-command read.
    let ids = [u64::MAX, 1 << 63 | 7, 3];
    let lens = [len, 20 * 1024, 4096];
    for (&id, &l) in ids.iter().zip(&lens) {
        let b = c.alloc_buffer(l).unwrap();
        qp.submit_read(&ns, 100, (l / 512) as u32, b, id).unwrap();
    }
    let mut done = poll_n(&mut qp, 3, Duration::from_secs(10));
    done.sort_by_key(|c| c.user_data);
    let mut want: Vec<(u64, usize)> = ids.iter().copied().zip(lens).collect();
    want.sort();
    for (c, (id, l)) in done.into_iter().zip(want) {
        assert_eq!(c.user_data, id);
        assert!(c.result.is_ok(), "{:?}", c.result);
        let b = c.buffer.expect("the buffer comes back whole");
        assert_eq!(b.len(), l);
        assert_eq!(&b[..l], &data[..l], "read {id:#x}");
    }
    assert_eq!(qp.in_flight(), 0);
    assert!(poll_n(&mut qp, 0, Duration::from_secs(1)).is_empty());
    assert_eq!(qp.stats().split_requests, 4);
    assert_eq!(t.counters().over_mdts.load(Ordering::Relaxed), 0);
}

#[test]
fn a_split_beyond_the_pairs_slots_is_refused_with_its_buffer_and_nothing_sent() {
    let t = small_mdts_target();
    let c = connect(&t);
    let ns = c.namespace(2).unwrap();
    let mut qp = c.create_queue_pair(QueuePairOptions::default()).unwrap();
    let slots = usize::from(qp.capacity());
    // One piece more than the pair has slots.
    let len = (slots + 1) * 8192;
    let buf = c.alloc_buffer(len).unwrap();
    let sent = qp.stats().commands_submitted;
    let f = qp
        .submit_read(&ns, 0, (len / 512) as u32, buf, 1)
        .expect_err("more pieces than slots");
    assert!(
        matches!(f.error, Error::TransferTooLarge { commands, .. } if commands == slots + 1),
        "{:?}",
        f.error
    );
    assert_eq!(f.buffer.map(|b| b.len()), Some(len));
    assert_eq!(qp.stats().commands_submitted, sent);
    assert_eq!(qp.in_flight(), 0);
}
