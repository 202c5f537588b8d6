//! Copy (NVM CS §3.3.2) over NVMe/TCP against the fake target: the typed command through the
//! pair's generic submit (no transport code of its own), its range list sent in the capsule
//! or by R2T, the blocks copied equal to the blocks written, the limits the fake reports
//! checked before the wire, and a target without Copy refused by name.

use nvme_core::IoQueue;
use std::sync::atomic::Ordering;

use nvme_core::command::CopyRanges;
use nvme_core::{CopyLimit, Error, QueuePairOptions, WriteFlags};

use super::{connect, pattern};
use crate::fake::{Config, FakeTarget, COPY_MCL, COPY_MSRC, COPY_MSSRL};
use crate::{TcpController, TcpQueuePair};

fn pair(c: &TcpController) -> TcpQueuePair {
    c.create_queue_pair(QueuePairOptions::default()).unwrap()
}

/// Writes `blocks` blocks at `lba` of `nsid` with bytes from `seed`; returns them.
fn write(c: &TcpController, qp: &mut TcpQueuePair, nsid: u32, lba: u64, blocks: u32) -> Vec<u8> {
    let ns = c.namespace(nsid).unwrap();
    let len = (ns.block_size() * blocks) as usize;
    let data = pattern(len, lba as u8);
    let mut buf = c.alloc_buffer(len).unwrap();
    buf[..len].copy_from_slice(&data);
    qp.write(&ns, lba, blocks, buf, WriteFlags::NONE).unwrap();
    data
}

fn copy_case(config: Config, by_r2t: bool) {
    let t = FakeTarget::start(config);
    let c = connect(&t);
    let mut qp = pair(&c);
    for nsid in [1, 2] {
        let ns = c.namespace(nsid).unwrap();
        let ranges = [(10u64, 4u32), (40, 1), (3, 2)];
        let mut expected = Vec::new();
        for &(lba, n) in &ranges {
            expected.extend(write(&c, &mut qp, nsid, lba, n));
        }
        let mut buf = c.alloc_buffer(4096).unwrap();
        let mut list = CopyRanges::new(&mut buf);
        for &(lba, n) in &ranges {
            list.push(lba, n).unwrap();
        }
        let copy = list.copy_to(100);
        let before = t.counters().copies.load(Ordering::Relaxed);
        let r2ts = t.counters().r2ts.load(Ordering::Relaxed);
        assert!(qp.execute(&ns, copy, Some(buf)).unwrap().is_some());
        assert_eq!(t.counters().copies.load(Ordering::Relaxed), before + 1);
        let pulled = t.counters().r2ts.load(Ordering::Relaxed) - r2ts;
        assert_eq!(pulled, u64::from(by_r2t), "R2Ts for the range list");
        let len = expected.len();
        let back = qp.read(&ns, 100, 7, c.alloc_buffer(len).unwrap()).unwrap();
        assert!(
            back[..len] == expected[..],
            "namespace {nsid}: copied blocks differ"
        );
        let shift = ns.block_size().trailing_zeros();
        assert!(t.disk(nsid, 100 << shift, len) == expected);
    }
}

#[test]
fn copy_sends_its_range_list_in_the_capsule() {
    copy_case(Config::default(), false);
}

#[test]
fn copy_sends_its_range_list_by_r2t_without_in_capsule_data() {
    copy_case(
        Config {
            ioccsz: 4,
            ..Config::default()
        },
        true,
    );
}

#[test]
fn copy_limits_and_support_are_checked_before_the_wire() {
    let t = FakeTarget::start(Config::default());
    let c = connect(&t);
    let mut qp = pair(&c);
    let ns = c.namespace(2).unwrap();
    let id = ns.identify();
    assert_eq!(
        (id.mssrl, id.mcl, id.msrc),
        (COPY_MSSRL, COPY_MCL, COPY_MSRC)
    );
    let sent = || t.counters().io_commands.load(Ordering::Relaxed);
    let before = sent();
    let mut buf = c.alloc_buffer(4096).unwrap();
    let mut list = CopyRanges::new(&mut buf);
    for lba in 0..=u64::from(COPY_MSRC) + 1 {
        list.push(lba * 2, 1).unwrap();
    }
    let copy = list.copy_to(500);
    let f = qp.execute(&ns, copy, Some(buf)).unwrap_err();
    assert!(
        matches!(
            f.error,
            Error::CopyLimitExceeded {
                limit: CopyLimit::SourceRanges,
                ..
            }
        ),
        "{:?}",
        f.error
    );
    let mut buf = f.buffer.expect("the buffer comes back");
    let mut list = CopyRanges::new(&mut buf);
    list.push(0, u32::from(COPY_MSSRL) + 1).unwrap();
    let copy = list.copy_to(500);
    let f = qp.execute(&ns, copy, Some(buf)).unwrap_err();
    assert!(
        matches!(
            f.error,
            Error::CopyLimitExceeded {
                limit: CopyLimit::RangeBlocks { range: 0 },
                ..
            }
        ),
        "{:?}",
        f.error
    );
    let mut buf = f.buffer.unwrap();
    let mut list = CopyRanges::new(&mut buf);
    list.push(0, 4).unwrap();
    let copy = list.copy_to(ns.blocks() - 3);
    let f = qp.execute(&ns, copy, Some(buf)).unwrap_err();
    assert!(
        matches!(f.error, Error::LbaOutOfRange { .. }),
        "{:?}",
        f.error
    );
    assert_eq!(sent(), before, "a refused Copy went out");

    // A target that does not offer Copy.
    let t = FakeTarget::start(Config {
        copy: false,
        ..Config::default()
    });
    let c = connect(&t);
    let mut qp = pair(&c);
    let ns = c.namespace(2).unwrap();
    let mut buf = c.alloc_buffer(4096).unwrap();
    let copy = CopyRanges::new(&mut buf).push(0, 1).unwrap().copy_to(9);
    let f = qp.execute(&ns, copy, Some(buf)).unwrap_err();
    assert!(
        matches!(
            f.error,
            Error::CommandNotSupported {
                command: "Copy",
                ..
            }
        ),
        "{:?}",
        f.error
    );
    assert_eq!(t.counters().io_commands.load(Ordering::Relaxed), 0);
}
