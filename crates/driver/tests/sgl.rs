//! SGL data pointers (NVMe Base 2.0 §4.1.2) against the in-process emulator: the driver uses
//! them exactly when the controller offers them and `ControllerOptions::sgl` allows, and data
//! arrives intact either way for every transfer shape (single page, multi-page, unaligned
//! start, MDTS splits, 512 B and 4 KiB blocks, compare, raw commands).

use nvme_driver::IoQueue;
use nvme_driver::WriteFlags;
use std::time::Duration;

use common::pattern;
use nvme_driver::spec::status::media;
use nvme_driver::spec::StatusCodeType;
use nvme_driver::{Controller, ControllerOptions, QueuePair, QueuePairOptions};
use nvme_sim::{SimConfig, SimController};

mod common;

fn start(offered: bool, wanted: bool) -> (SimController, Controller) {
    let config = SimConfig {
        sgl: offered,
        ..SimConfig::default()
    };
    let options = ControllerOptions {
        sgl: wanted,
        ..ControllerOptions::default()
    };
    common::start_sim(config, options, false)
}

fn qp(ctrl: &Controller) -> QueuePair {
    ctrl.create_queue_pair(QueuePairOptions {
        depth: 64,
        timeout: Duration::from_secs(10),
        ..Default::default()
    })
    .expect("queue pair")
}

/// Writes `len` bytes at `lba` through a buffer starting `offset` bytes into its first page,
/// checks the medium, reads them back into a zeroed buffer and checks that too.
fn roundtrip(
    sim: &SimController,
    ctrl: &Controller,
    q: &mut QueuePair,
    nsid: u32,
    lba: u64,
    len: usize,
    offset: usize,
) {
    let ns = ctrl.namespace(nsid).unwrap();
    let blocks = (len / ns.block_size() as usize) as u32;
    let data = pattern(len, lba ^ len as u64 ^ offset as u64);
    let whole = ctrl.alloc_buffer(offset + len).unwrap();
    let (_head, mut buf) = whole.split_at(offset).unwrap();
    buf[..len].copy_from_slice(&data);
    let mut buf = q
        .write(&ns, lba, blocks, buf, WriteFlags::NONE)
        .expect("write");
    let at = lba * u64::from(ns.block_size());
    assert_eq!(
        sim.read_disk(nsid, at, len),
        data,
        "medium: {len} bytes (+{offset})"
    );
    buf.fill(0);
    let back = q.read(&ns, lba, blocks, buf).expect("read");
    assert_eq!(&back[..len], &data[..], "read back {len} bytes (+{offset})");
}

/// Every shape on both LBA sizes; returns the emulator's count of SGL commands.
fn all_shapes(sim: &SimController, ctrl: &Controller) -> u64 {
    let mut q = qp(ctrl);
    let mdts = ctrl.max_transfer_bytes();
    let before = sim.stats();
    for (nsid, bs) in [(1u32, 512usize), (2, 4096)] {
        for len in [bs, 4096, 8192, 12288, 65536, mdts, mdts + 4096, 2 << 20] {
            roundtrip(sim, ctrl, &mut q, nsid, 8, len, 0);
        }
        roundtrip(sim, ctrl, &mut q, nsid, 100, bs * 2, 4096 - 512);
        roundtrip(sim, ctrl, &mut q, nsid, 200, 16384, 512);
        roundtrip(sim, ctrl, &mut q, nsid, 300, 3 * 4096, 4);
    }
    assert_eq!(q.in_flight(), 0);
    assert_eq!(q.stats().bad_completions, 0);
    let after = sim.stats();
    assert_eq!(after.dma_errors, before.dma_errors);
    after.sgl_commands - before.sgl_commands
}

#[test]
fn sgl_is_used_when_offered_and_data_round_trips() {
    let (sim, ctrl) = start(true, true);
    assert!(ctrl.sgl(), "the emulator offers SGLs (Identify SGLS)");
    assert_eq!(ctrl.identify().sgls & 0b11, 0b01);
    let sgl_commands = all_shapes(&sim, &ctrl);
    let s = sim.stats();
    // Every read and write was described by an SGL (admin commands never are).
    assert_eq!(sgl_commands, s.reads + s.writes);
    assert!(sgl_commands > 0);
}

#[test]
fn prp_is_forced_by_the_option_and_data_round_trips() {
    let (sim, ctrl) = start(true, false);
    assert!(!ctrl.sgl());
    assert_eq!(all_shapes(&sim, &ctrl), 0);
    assert!(sim.stats().reads > 0);
}

#[test]
fn prp_is_used_when_the_controller_offers_no_sgl() {
    let (sim, ctrl) = start(false, true);
    assert!(!ctrl.sgl());
    assert_eq!(ctrl.identify().sgls, 0);
    assert_eq!(all_shapes(&sim, &ctrl), 0);
}

#[test]
fn compare_and_raw_commands_with_sgl() {
    let (sim, ctrl) = start(true, true);
    let ns = ctrl.namespace(1).unwrap();
    let mut q = qp(&ctrl);
    let mut buf = ctrl.alloc_buffer(4096).unwrap();
    buf.fill(0x3c);
    let buf = q.write(&ns, 0, 8, buf, WriteFlags::NONE).unwrap();
    let buf = q.compare(&ns, 0, 8, buf).expect("equal data compares");
    let mut other = buf;
    other[4095] ^= 1;
    let failure = q.compare(&ns, 0, 8, other).unwrap_err();
    let status = failure.error.status().expect("status error");
    assert_eq!(status.sct(), StatusCodeType::MediaDataIntegrity);
    assert_eq!(status.sc(), media::COMPARE_FAILURE);

    // Raw path: a caller's PSDT bits are replaced by the driver's own data pointer.
    let mut sqe = nvme_driver::spec::command::read(1, 0, 2);
    sqe.cdw0 |= 0b11 << 14;
    let b = ctrl.alloc_buffer(1024).unwrap();
    // SAFETY: a 2-block read of 512-byte blocks moves exactly the 1024 bytes given.
    let (_, back) = unsafe { q.execute_raw(sqe, Some((b, 1024))) }.unwrap();
    assert!(back.unwrap().iter().all(|&b| b == 0x3c));
    // Deallocate's range list stays a PRP (one page), and works next to SGL reads.
    q.deallocate(&ns, &[(0, 1)]).unwrap();
    assert_eq!(sim.read_disk(1, 0, 512), vec![0; 512]);
    assert_eq!(sim.read_disk(1, 512, 512), vec![0x3c; 512]);
}
