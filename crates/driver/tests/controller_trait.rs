//! `nvme_core::NvmeController` (re-exported as `nvme_driver::NvmeController`) on the PCIe
//! controller, against the in-process emulator: generic code sees what the inherent methods
//! return and does I/O on the concrete `QueuePair` the trait creates.

use nvme_driver::spec::log::NSID_BROADCAST;
use nvme_driver::{
    ControllerOptions, IoQueue, NvmeController, QueuePair, QueuePairOptions, WriteFlags,
};
use nvme_sim::SimConfig;

mod common;

/// Writes and reads back one block of namespace `nsid` through the traits only.
fn round_trip<C: NvmeController>(ctrl: &C, nsid: u32) -> Vec<u8> {
    let ns = ctrl.namespace(nsid).expect("namespace");
    let mut qp = ctrl
        .create_queue_pair(QueuePairOptions::default().depth(8))
        .expect("queue pair");
    let mut buf = ctrl.alloc_buffer(ns.block_size() as usize).expect("buffer");
    buf[..4].copy_from_slice(b"core");
    let mut buf = qp.write(&ns, 5, 1, buf, WriteFlags::NONE).expect("write");
    buf.fill(0);
    let buf = qp.read(&ns, 5, 1, buf).expect("read");
    buf[..4].to_vec()
}

#[test]
fn the_pcie_controller_through_the_trait() {
    let (_sim, ctrl) = common::start_sim(SimConfig::default(), ControllerOptions::default(), false);
    // The associated queue pair is the concrete PCIe pair (static dispatch).
    let qp: QueuePair =
        NvmeController::create_queue_pair(&ctrl, QueuePairOptions::default()).expect("queue pair");
    drop(qp);
    assert_eq!(NvmeController::name(&ctrl), ctrl.name());
    assert_eq!(
        NvmeController::identify(&ctrl).model(),
        ctrl.identify().model()
    );
    let nsids = |v: Vec<nvme_driver::Namespace>| v.iter().map(|n| n.nsid()).collect::<Vec<_>>();
    assert_eq!(
        nsids(NvmeController::namespaces(&ctrl)),
        nsids(ctrl.namespaces())
    );
    assert_eq!(
        NvmeController::max_transfer_bytes(&ctrl),
        ctrl.max_transfer_bytes()
    );
    assert_eq!(NvmeController::io_queue_pairs(&ctrl), ctrl.io_queue_pairs());
    assert_eq!(
        NvmeController::max_queue_entries(&ctrl),
        ctrl.max_queue_entries()
    );
    assert!(!NvmeController::is_failed(&ctrl));
    NvmeController::smart_log(&ctrl, NSID_BROADCAST).expect("SMART log");
    NvmeController::error_log(&ctrl, 4).expect("error log");
    assert_eq!(round_trip(&ctrl, 1), b"core");
    NvmeController::reset(&ctrl).expect("reset");
    assert_eq!(round_trip(&ctrl, 1), b"core");
    assert_eq!(NvmeController::abort_stats(&ctrl), ctrl.abort_stats());
}
