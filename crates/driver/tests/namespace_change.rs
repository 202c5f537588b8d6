//! Namespace handles after a rescan (issue 19, item 2): a namespace reformatted, resized or
//! detached by another host makes old handles stale, so their submissions fail with
//! `Error::StaleNamespace` before anything reaches the device (an old 512-byte handle on a
//! namespace now formatted with 4 KiB blocks would size PRPs for 512 bytes per block while
//! the device moves 4096). Handles of namespaces a rescan found unchanged keep working.

use nvme_driver::IoQueue;
use std::time::{Duration, Instant};

use nvme_driver::spec::AsyncEvent;
use nvme_driver::QueuePair;
use nvme_driver::{Controller, ControllerOptions, Error, IoFailure, Namespace, NamespaceChange};
use nvme_driver::{QueuePairOptions, WriteFlags};
use nvme_sim::{SimConfig, SimController};

mod common;

/// The default emulator: namespace 1 has 16 MiB of 512-byte blocks, namespace 2 16 MiB of
/// 4096-byte blocks.
fn start() -> (SimController, Controller) {
    common::start_sim(SimConfig::default(), ControllerOptions::default(), true)
}

/// Takes events until a namespace change notice arrived (take_events then rescans).
fn namespace_notice(ctrl: &Controller) -> Vec<AsyncEvent> {
    let mut got = Vec::new();
    let start = Instant::now();
    while !got.iter().any(AsyncEvent::is_namespace_change) {
        assert!(start.elapsed() < Duration::from_secs(5), "only {got:?}");
        got.extend(ctrl.take_events());
        std::thread::sleep(Duration::from_millis(2));
    }
    got
}

fn expect_stale<T: std::fmt::Debug>(
    what: &str,
    result: Result<T, Error>,
    nsid: u32,
    change: NamespaceChange,
) {
    match result {
        Err(Error::StaleNamespace { nsid: n, change: c }) if n == nsid && c == change => {}
        other => panic!("{what} through a stale handle of namespace {nsid}: {other:?}"),
    }
}

/// Read, write, write zeroes, deallocate and flush through `old` all fail as stale, the
/// buffers come back, and the device sees no command and makes no DMA.
fn old_handle_reaches_nothing(
    sim: &SimController,
    ctrl: &Controller,
    q: &mut QueuePair,
    old: &Namespace,
    change: NamespaceChange,
) {
    let before = sim.stats();
    let nsid = old.nsid();
    assert!(!old.is_current());
    // Eight old 512-byte blocks: 4 KiB of buffer, 32 KiB on the reformatted device.
    let bytes = 8 * old.block_size() as usize;
    let buf = ctrl.alloc_buffer(bytes).unwrap();
    let buf = match q.read(old, 0, 8, buf) {
        Err(IoFailure {
            error,
            buffer: Some(buf),
            ..
        }) => {
            expect_stale("read", Err::<(), _>(error), nsid, change);
            buf
        }
        other => panic!("read through a stale handle of namespace {nsid}: {other:?}"),
    };
    let buf = match q.write(old, 0, 8, buf, WriteFlags::NONE) {
        Err(IoFailure {
            error,
            buffer: Some(buf),
            ..
        }) => {
            expect_stale("write", Err::<(), _>(error), nsid, change);
            buf
        }
        other => panic!("write through a stale handle of namespace {nsid}: {other:?}"),
    };
    // The asynchronous path: refused at submission, buffer returned untouched.
    match q.submit_read(old, 0, 8, buf, 7) {
        Err(IoFailure {
            error,
            buffer: Some(_),
            ..
        }) => expect_stale("submit_read", Err::<(), _>(error), nsid, change),
        other => panic!("submit_read through a stale handle of namespace {nsid}: {other:?}"),
    }
    expect_stale(
        "write zeroes",
        q.write_zeroes(old, 0, 8, false),
        nsid,
        change,
    );
    expect_stale("deallocate", q.deallocate(old, &[(0, 8)]), nsid, change);
    expect_stale("flush", q.flush(old), nsid, change);
    let message = q.flush(old).unwrap_err().to_string();
    assert!(
        message.contains(&format!("namespace {nsid} changed"))
            && message.contains(&format!("Controller::namespace({nsid})")),
        "{message}"
    );
    let after = sim.stats();
    assert_eq!(
        after.io_commands(),
        before.io_commands(),
        "the device saw a command of a stale handle"
    );
    assert_eq!(after.dma_errors, before.dma_errors, "out-of-buffer DMA");
    assert_eq!(q.in_flight(), 0);
}

#[test]
fn a_reformat_notice_makes_old_handles_stale_and_leaves_unchanged_ones_valid() {
    let (sim, ctrl) = start();
    let old1 = ctrl.namespace(1).unwrap();
    let old2 = ctrl.namespace(2).unwrap();
    assert_eq!(old1.block_size(), 512);
    let mut q = ctrl.create_queue_pair(QueuePairOptions::default()).unwrap();
    let _ = ctrl.take_events();

    // Another host formats namespace 1 with 4 KiB blocks; the notice arrives, take_events
    // rescans.
    sim.format_namespace(1, 4096, 0);
    namespace_notice(&ctrl);
    old_handle_reaches_nothing(&sim, &ctrl, &mut q, &old1, NamespaceChange::Reformatted);

    // A new handle has the new format and works.
    let new1 = ctrl.namespace(1).unwrap();
    assert!(new1.is_current());
    assert_eq!((new1.block_size(), new1.blocks()), (4096, 4096));
    let mut buf = ctrl.alloc_buffer(4096).unwrap();
    buf.fill(0xA5);
    let buf = q.write(&new1, 3, 1, buf, WriteFlags::NONE).unwrap();
    assert_eq!(sim.read_disk(1, 3 * 4096, 4096), vec![0xA5; 4096]);
    let buf = q.read(&new1, 3, 1, buf).unwrap();
    assert!(buf.iter().all(|&b| b == 0xA5));

    // Namespace 2 did not change: its old handle keeps working.
    assert!(old2.is_current());
    let mut buf = q.write(&old2, 5, 1, buf, WriteFlags::NONE).unwrap();
    buf.fill(0);
    let buf = q.read(&old2, 5, 1, buf).unwrap();
    assert!(buf.iter().all(|&b| b == 0xA5));

    // A rescan that finds nothing new leaves the new handle valid, the old one stale.
    assert!(ctrl.rescan_namespaces().unwrap().is_empty());
    assert!(new1.is_current() && old2.is_current() && !old1.is_current());
    q.read(&new1, 3, 1, buf).unwrap();
}

#[test]
fn a_resize_found_by_an_explicit_rescan_makes_old_handles_stale() {
    let (sim, ctrl) = start();
    let old1 = ctrl.namespace(1).unwrap();
    let old2 = ctrl.namespace(2).unwrap();
    let mut q = ctrl.create_queue_pair(QueuePairOptions::default()).unwrap();
    let mut buf = ctrl.alloc_buffer(512).unwrap();
    buf.fill(0x3C);
    let buf = q.write(&old1, 10, 1, buf, WriteFlags::NONE).unwrap();

    // Shrunk to 1000 blocks: the old handle still says 32768.
    sim.resize_namespace(1, 1000);
    let changes = ctrl.rescan_namespaces().unwrap();
    assert_eq!(changes.changed, [1]);
    assert!(changes.added.is_empty() && changes.removed.is_empty());
    old_handle_reaches_nothing(&sim, &ctrl, &mut q, &old1, NamespaceChange::Resized);

    let new1 = ctrl.namespace(1).unwrap();
    assert_eq!((new1.block_size(), new1.blocks()), (512, 1000));
    // The data of the blocks kept is still there; the new end is enforced by the driver.
    let buf = q.read(&new1, 10, 1, buf).unwrap();
    assert!(buf.iter().all(|&b| b == 0x3C));
    match q.read(&new1, 1000, 1, buf) {
        Err(IoFailure {
            error: Error::LbaOutOfRange { capacity: 1000, .. },
            buffer: Some(_),
            ..
        }) => {}
        other => panic!("read past the new end: {other:?}"),
    }
    assert!(old2.is_current());
    q.flush(&old2).unwrap();
}

#[test]
fn a_detached_namespace_fails_old_handles_before_the_device() {
    let (sim, ctrl) = start();
    let old2 = ctrl.namespace(2).unwrap();
    let old1 = ctrl.namespace(1).unwrap();
    let mut q = ctrl.create_queue_pair(QueuePairOptions::default()).unwrap();
    let _ = ctrl.take_events();
    sim.set_namespace_attached(2, false);
    namespace_notice(&ctrl);
    old_handle_reaches_nothing(&sim, &ctrl, &mut q, &old2, NamespaceChange::Detached);
    assert!(matches!(
        ctrl.namespace(2),
        Err(Error::InactiveNamespace { nsid: 2, .. })
    ));
    assert!(old1.is_current());
    q.flush(&old1).unwrap();
}

#[test]
fn a_reformat_to_a_metadata_format_of_the_same_block_size_makes_old_handles_stale() {
    let (sim, ctrl) = start();
    let old1 = ctrl.namespace(1).unwrap();
    let mut q = ctrl.create_queue_pair(QueuePairOptions::default()).unwrap();
    sim.format_namespace(1, 512, 8);
    let changes = ctrl.rescan_namespaces().unwrap();
    assert_eq!(changes.changed, [1]);
    old_handle_reaches_nothing(&sim, &ctrl, &mut q, &old1, NamespaceChange::Reformatted);
    // The new handle knows the metadata: plain reads are refused by name.
    let new1 = ctrl.namespace(1).unwrap();
    assert_eq!(new1.format().to_string(), "512+8 separate");
    let f = q
        .read(&new1, 0, 1, ctrl.alloc_buffer(512).unwrap())
        .unwrap_err();
    assert!(
        matches!(f.error, Error::MetadataMismatch { nsid: 1, .. }),
        "{}",
        f.error
    );
}

#[test]
fn requests_waiting_in_the_software_queue_fail_as_stale_after_a_reformat() {
    let (sim, ctrl) = start();
    let old1 = ctrl.namespace(1).unwrap();
    let mut q = ctrl
        .create_queue_pair(QueuePairOptions {
            depth: 2,
            software_queue: 4,
            ..QueuePairOptions::default()
        })
        .unwrap();
    // Hold the device so the first read stays in flight and the second waits in software.
    sim.faults().delay_execution(1, Duration::from_millis(200));
    q.submit_read(&old1, 0, 8, ctrl.alloc_buffer(4096).unwrap(), 1)
        .unwrap();
    q.submit_read(&old1, 8, 8, ctrl.alloc_buffer(4096).unwrap(), 2)
        .unwrap();
    assert_eq!(q.queued(), 1);
    sim.format_namespace(1, 4096, 0);
    ctrl.rescan_namespaces().unwrap();
    let mut done = Vec::new();
    let start = Instant::now();
    while done.len() < 2 {
        assert!(start.elapsed() < Duration::from_secs(5), "only {done:?}");
        q.poll(|c| done.push((c.user_data, c.result.is_ok(), c.buffer.is_some(), c.result)));
    }
    done.sort_by_key(|d| d.0);
    // The first was submitted before the driver knew: the device ran it. The queued one
    // never reached the device.
    assert_eq!(done[0].0, 1);
    let (_, _, returned, result) = &done[1];
    assert!(*returned, "the queued request's buffer comes back");
    assert!(
        matches!(
            result,
            Err(Error::StaleNamespace {
                nsid: 1,
                change: NamespaceChange::Reformatted
            })
        ),
        "{result:?}"
    );
    // Only the first read reached the device.
    assert_eq!(sim.stats().io_commands(), 1);
}
