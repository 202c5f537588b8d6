//! Bring your own memory (issue 11): a buffer pool the application allocated itself is
//! registered once, carved into per-request buffers, used for I/O, put back together and
//! unregistered.

use nvme_driver::IoQueue;
use nvme_driver::WriteFlags;
use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::ptr::NonNull;

use nvme_driver::{Controller, ControllerOptions, DmaBuffer, QueuePairOptions, Transport};
use nvme_sim::{SimConfig, SimController};

#[test]
fn an_application_allocated_pool_serves_io_and_is_unregistered() {
    let _ = env_logger::builder().is_test(true).try_init();
    let sim = SimController::start(SimConfig::default());
    let ctrl = Controller::new(
        Transport::new(sim.mmio(), sim.dma(), "sim"),
        ControllerOptions::default(),
    )
    .unwrap();
    let ns = ctrl.namespace(2).unwrap(); // 4 KiB blocks
    let mut q = ctrl.create_queue_pair(QueuePairOptions::default()).unwrap();

    // The application's own allocation (posix_memalign-like), 8 pages.
    let layout = Layout::from_size_align(8 * 4096, 4096).unwrap();
    // SAFETY: non-zero size.
    let raw = NonNull::new(unsafe { alloc_zeroed(layout) }).expect("allocation");
    let mappings_before = sim.sim_dma().mapping_count();
    // SAFETY: `raw` stays allocated until after every piece is dropped (below), and is only
    // accessed through the buffers.
    let pool = unsafe { DmaBuffer::register_raw(ctrl.dma(), raw, layout.size()) }.unwrap();
    assert_eq!(sim.sim_dma().mapping_count(), mappings_before + 1);

    // Carve two request buffers of 4 pages each and do I/O with them.
    let (mut a, mut b) = pool.split_at(4 * 4096).unwrap();
    a.fill(0x61);
    b.fill(0x62);
    let a = q.write(&ns, 10, 4, a, WriteFlags::NONE).unwrap();
    let b = q.write(&ns, 20, 4, b, WriteFlags::NONE).unwrap();
    let mut whole = a.join(b).expect("adjacent pieces of one registration");
    assert_eq!(whole.len(), 8 * 4096);
    whole.fill(0);
    let whole = q.read(&ns, 10, 4, whole).unwrap();
    assert!(whole[..4 * 4096].iter().all(|&x| x == 0x61));
    // Pieces of different registrations do not join.
    let other = ctrl.alloc_buffer(4096).unwrap();
    let (whole, other) = whole.join(other).unwrap_err();
    drop(other);
    // Unregistration: the last piece unmaps; the memory is the application's again.
    drop(whole);
    assert_eq!(sim.sim_dma().mapping_count(), mappings_before);
    // SAFETY: allocated above with `layout`; no buffer refers to it any more.
    unsafe { dealloc(raw.as_ptr(), layout) };
}

#[test]
fn misaligned_or_partial_pages_are_refused() {
    let sim = SimController::start(SimConfig::default());
    let dma = sim.dma();
    let layout = Layout::from_size_align(2 * 4096, 4096).unwrap();
    // SAFETY: non-zero size.
    let raw = NonNull::new(unsafe { alloc_zeroed(layout) }).unwrap();
    // SAFETY: refused registrations map nothing; the memory outlives the calls.
    unsafe {
        let off = NonNull::new(raw.as_ptr().add(512)).unwrap();
        assert!(DmaBuffer::register_raw(&dma, off, 4096).is_err());
        assert!(DmaBuffer::register_raw(&dma, raw, 1000).is_err());
        assert!(DmaBuffer::register_raw(&dma, raw, 0).is_err());
        dealloc(raw.as_ptr(), layout);
    }
}
