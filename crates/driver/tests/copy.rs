//! Copy (NVM CS §3.3.2) through the PCIe queue pair against the emulator: the blocks copied
//! are the blocks written (read back through the driver), several ranges in one command, the
//! asynchronous path and the software queue; every limit (MSRC, MSSRL, MCL), a source or a
//! destination outside the namespace and a short range list refused with its typed error
//! before anything reaches the device; a controller without Copy refused by name.

use std::time::Duration;

use nvme_driver::command::{Copy, CopyFormat, CopyRanges};
use nvme_driver::{
    Controller, ControllerOptions, CopyLimit, DmaBuffer, Error, IoFailure, IoQueue, Namespace,
    QueuePair, QueuePairOptions, WriteFlags,
};
use nvme_sim::{SimConfig, SimController, SimCopy};

mod common;

fn start(copy: Option<SimCopy>) -> (SimController, Controller) {
    let config = SimConfig {
        copy,
        ..SimConfig::default()
    };
    common::start_sim(config, ControllerOptions::default(), false)
}

fn qp(ctrl: &Controller) -> QueuePair {
    ctrl.create_queue_pair(QueuePairOptions {
        timeout: Duration::from_secs(10),
        ..QueuePairOptions::default()
    })
    .expect("queue pair")
}

/// Distinct bytes for every block: block `lba` of namespace `nsid`.
fn block(nsid: u32, lba: u64, size: usize) -> Vec<u8> {
    (0..size)
        .map(|i| (lba as usize * 7 + i * 13 + nsid as usize) as u8)
        .collect()
}

/// Writes the blocks of `ranges` through the driver, each with its own content.
fn write_ranges(ctrl: &Controller, q: &mut QueuePair, ns: &Namespace, ranges: &[(u64, u32)]) {
    let bs = ns.block_size() as usize;
    for &(lba, blocks) in ranges {
        let mut buf = ctrl.alloc_buffer(blocks as usize * bs).unwrap();
        for i in 0..u64::from(blocks) {
            let at = i as usize * bs;
            buf[at..at + bs].copy_from_slice(&block(ns.nsid(), lba + i, bs));
        }
        q.write(ns, lba, blocks, buf, WriteFlags::NONE).unwrap();
    }
}

/// Reads `blocks` blocks at `lba` through the driver.
fn read(ctrl: &Controller, q: &mut QueuePair, ns: &Namespace, lba: u64, blocks: u32) -> Vec<u8> {
    let buf = ctrl
        .alloc_buffer(blocks as usize * ns.block_size() as usize)
        .unwrap();
    q.read(ns, lba, blocks, buf).unwrap().to_vec()
}

/// What the destination must hold after copying `ranges`: their blocks in list order.
fn expected(ns: &Namespace, ranges: &[(u64, u32)]) -> Vec<u8> {
    let bs = ns.block_size() as usize;
    ranges
        .iter()
        .flat_map(|&(lba, n)| (lba..lba + u64::from(n)).flat_map(|l| block(ns.nsid(), l, bs)))
        .collect()
}

/// A range-list buffer holding `ranges`, and the Copy of them to `dest`.
fn copy_of(ctrl: &Controller, ranges: &[(u64, u32)], dest: u64) -> (Copy, DmaBuffer) {
    let mut buf = ctrl.alloc_buffer(4096).unwrap();
    let mut list = CopyRanges::new(&mut buf);
    for &(lba, blocks) in ranges {
        list.push(lba, blocks).unwrap();
    }
    let copy = list.copy_to(dest);
    (copy, buf)
}

#[test]
fn several_ranges_are_copied_in_one_command_on_both_block_sizes() {
    let (sim, ctrl) = start(Some(SimCopy::default()));
    let mut q = qp(&ctrl);
    for nsid in [1, 2] {
        let ns = ctrl.namespace(nsid).unwrap();
        let ranges = [(0, 8), (100, 1), (37, 16), (2000, 3)];
        write_ranges(&ctrl, &mut q, &ns, &ranges);
        let (copy, buf) = copy_of(&ctrl, &ranges, 3000);
        assert_eq!((copy.ranges, copy.range.blocks), (4, 28));
        let before = sim.stats();
        let back = q.execute(&ns, copy, Some(buf)).unwrap();
        let after = sim.stats();
        assert!(back.is_some(), "the range list buffer comes back");
        // One command, no host reads or writes: the controller moved the blocks itself.
        assert_eq!(after.other_io - before.other_io, 1);
        assert_eq!((after.reads, after.writes), (before.reads, before.writes));
        assert!(
            read(&ctrl, &mut q, &ns, 3000, 28) == expected(&ns, &ranges),
            "namespace {nsid}: the destination differs from the blocks written"
        );
    }
}

#[test]
fn asynchronous_copy_through_the_trait_with_fua() {
    let (_sim, ctrl) = start(Some(SimCopy::default()));
    let mut q = qp(&ctrl);
    let ns = ctrl.namespace(1).unwrap();
    let ranges = [(500, 4), (10, 2)];
    write_ranges(&ctrl, &mut q, &ns, &ranges);
    let (copy, buf) = copy_of(&ctrl, &ranges, 20);
    IoQueue::submit(&mut q, &ns, copy.fua(), Some(buf), 42).unwrap();
    let mut done = Vec::new();
    while done.is_empty() {
        q.poll(|c| done.push((c.user_data, c.result.is_ok(), c.buffer.is_some())));
    }
    assert_eq!(done, vec![(42, true, true)]);
    assert!(read(&ctrl, &mut q, &ns, 20, 6) == expected(&ns, &ranges));
}

#[test]
fn a_copy_that_finds_the_ring_full_waits_in_the_software_queue() {
    let (_sim, ctrl) = start(Some(SimCopy::default()));
    let ns = ctrl.namespace(1).unwrap();
    let mut sync = qp(&ctrl);
    let ranges = [(64, 3), (80, 5)];
    write_ranges(&ctrl, &mut sync, &ns, &ranges);
    let mut q = ctrl
        .create_queue_pair(QueuePairOptions {
            depth: 2,
            software_queue: 4,
            ..QueuePairOptions::default()
        })
        .unwrap();
    // The one slot is taken by a read; the Copy waits, erased, and is checked again when sent.
    q.submit_read(&ns, 0, 1, ctrl.alloc_buffer(512).unwrap(), 1)
        .unwrap();
    let (copy, buf) = copy_of(&ctrl, &ranges, 900);
    q.submit(&ns, copy, Some(buf), 2).unwrap();
    assert_eq!(q.queued(), 1);
    let mut done = Vec::new();
    while done.len() < 2 {
        q.poll(|c| done.push((c.user_data, c.result.is_ok())));
    }
    assert_eq!(done, vec![(1, true), (2, true)]);
    assert!(read(&ctrl, &mut sync, &ns, 900, 8) == expected(&ns, &ranges));
}

/// The submission of `copy` with `buf` fails before the device; returns the error.
fn refused(
    sim: &SimController,
    q: &mut QueuePair,
    ns: &Namespace,
    copy: Copy,
    buf: DmaBuffer,
) -> Error {
    let before = sim.stats().io_commands();
    let IoFailure { error, buffer, .. } = q.execute(ns, copy, Some(buf)).unwrap_err();
    assert!(buffer.is_some(), "{error}: the buffer comes back");
    assert_eq!(
        sim.stats().io_commands(),
        before,
        "{error}: reached the device"
    );
    error
}

#[test]
fn every_limit_and_range_is_checked_before_the_device() {
    let limits = SimCopy {
        mssrl: 8,
        mcl: 16,
        msrc: 3,
    };
    let (sim, ctrl) = start(Some(limits));
    let mut q = qp(&ctrl);
    let ns = ctrl.namespace(1).unwrap();
    let id = ns.identify();
    assert_eq!((id.mssrl, id.mcl, id.copy_max_ranges()), (8, 16, 4));
    let blocks = ns.blocks();

    // MSRC + 1 = 4 ranges; 5 is refused.
    let (copy, buf) = copy_of(&ctrl, &[(0, 1), (1, 1), (2, 1), (3, 1), (4, 1)], 100);
    let e = refused(&sim, &mut q, &ns, copy, buf);
    assert!(
        matches!(
            e,
            Error::CopyLimitExceeded {
                nsid: 1,
                limit: CopyLimit::SourceRanges,
                requested: 5,
                max: 4
            }
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains("MSRC"), "{e}");
    // MSSRL 8: the third range has 9 blocks.
    let (copy, buf) = copy_of(&ctrl, &[(0, 1), (10, 2), (20, 9)], 100);
    let e = refused(&sim, &mut q, &ns, copy, buf);
    assert!(
        matches!(
            e,
            Error::CopyLimitExceeded {
                limit: CopyLimit::RangeBlocks { range: 2 },
                requested: 9,
                max: 8,
                ..
            }
        ),
        "{e:?}"
    );
    // MCL 16: 8 + 8 + 1.
    let (copy, buf) = copy_of(&ctrl, &[(0, 8), (10, 8), (20, 1)], 100);
    let e = refused(&sim, &mut q, &ns, copy, buf);
    assert!(
        matches!(
            e,
            Error::CopyLimitExceeded {
                limit: CopyLimit::TotalBlocks,
                requested: 17,
                max: 16,
                ..
            }
        ),
        "{e:?}"
    );
    // A source range beyond the end; the destination beyond the end.
    let (copy, buf) = copy_of(&ctrl, &[(0, 1), (blocks - 1, 2)], 100);
    let e = refused(&sim, &mut q, &ns, copy, buf);
    assert!(
        matches!(e, Error::LbaOutOfRange { lba, blocks: 2, .. } if lba == blocks - 1),
        "{e:?}"
    );
    let (copy, buf) = copy_of(&ctrl, &[(0, 8)], blocks - 4);
    let e = refused(&sim, &mut q, &ns, copy, buf);
    assert!(matches!(e, Error::LbaOutOfRange { blocks: 8, .. }), "{e:?}");
    // A list buffer too small for the ranges the command names; a command that does not
    // match its list.
    let small = ctrl.alloc_buffer(64).unwrap();
    let e = refused(&sim, &mut q, &ns, Copy::new(100, 3, 3), small);
    assert!(
        matches!(
            e,
            Error::BufferTooSmall {
                needed: 96,
                len: 64
            }
        ),
        "{e:?}"
    );
    let (copy, buf) = copy_of(&ctrl, &[(0, 2)], 100);
    let e = refused(&sim, &mut q, &ns, Copy::new(100, 1, 3), buf);
    assert!(matches!(e, Error::InvalidRequest(_)), "{e:?}");
    // Without its list buffer at all.
    let f = q.execute(&ns, copy, None).unwrap_err();
    assert!(matches!(f.error, Error::InvalidRequest(_)), "{:?}", f.error);

    // At the limits exactly it goes through, and copies.
    let ranges = [(0, 8), (200, 4), (300, 2), (400, 2)];
    write_ranges(&ctrl, &mut q, &ns, &ranges);
    let (copy, buf) = copy_of(&ctrl, &ranges, blocks - 16);
    q.execute(&ns, copy, Some(buf)).unwrap();
    assert!(read(&ctrl, &mut q, &ns, blocks - 16, 16) == expected(&ns, &ranges));
}

#[test]
fn a_controller_without_copy_refuses_it_by_name() {
    let (sim, ctrl) = start(None);
    let mut q = qp(&ctrl);
    let ns = ctrl.namespace(1).unwrap();
    let (copy, buf) = copy_of(&ctrl, &[(0, 1)], 10);
    let e = refused(&sim, &mut q, &ns, copy, buf);
    assert!(
        matches!(
            e,
            Error::CommandNotSupported {
                command: "Copy",
                ..
            }
        ),
        "{e:?}"
    );
    let text = e.to_string();
    assert!(text.contains("Copy") && text.contains("ONCS"), "{text}");
    // Other commands are unaffected.
    write_ranges(&ctrl, &mut q, &ns, &[(0, 1)]);
}

/// Copy Descriptor Format 1h (40-byte entries): copied where the controller offers it (OCFS
/// bit 1), refused by name before the device where it does not.
#[test]
fn format_1_lists_copy_where_offered_and_are_refused_otherwise() {
    let (sim, ctrl) = start(Some(SimCopy::default()));
    let mut q = qp(&ctrl);
    let ns = ctrl.namespace(2).unwrap();
    assert!(ctrl
        .identify()
        .copy_formats()
        .contains(nvme_driver::spec::CopyFormats::FORMAT_1));
    let ranges = [(3, 2), (50, 5), (9, 1)];
    write_ranges(&ctrl, &mut q, &ns, &ranges);
    let mut buf = ctrl.alloc_buffer(4096).unwrap();
    let mut list = CopyRanges::with_format(&mut buf, CopyFormat::Format1);
    for &(lba, blocks) in &ranges {
        list.push(lba, blocks).unwrap();
    }
    let copy = list.copy_to(700);
    assert_eq!(copy.list_bytes(), 3 * 40);
    let before = sim.stats().other_io;
    q.execute(&ns, copy, Some(buf)).unwrap();
    assert_eq!(sim.stats().other_io - before, 1);
    assert!(read(&ctrl, &mut q, &ns, 700, 8) == expected(&ns, &ranges));

    let config = SimConfig {
        copy_format_1: false,
        ..SimConfig::default()
    };
    let (sim, ctrl) = common::start_sim(config, ControllerOptions::default(), false);
    let mut q = qp(&ctrl);
    let ns = ctrl.namespace(2).unwrap();
    let mut buf = ctrl.alloc_buffer(4096).unwrap();
    let copy = CopyRanges::with_format(&mut buf, CopyFormat::Format1)
        .push(3, 2)
        .unwrap()
        .copy_to(700);
    let e = refused(&sim, &mut q, &ns, copy, buf);
    assert!(
        matches!(&e, Error::CommandNotSupported { command: "Copy", why, .. } if why.contains("OCFS bit 1")),
        "{e:?}"
    );
}
