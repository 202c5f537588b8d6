//! One DMA context for many controllers (issue 11 item 1): two emulated controllers share one
//! IOMMU address space (one `SimDma`, as two IOMMU groups in one VFIO container), so one
//! buffer pool serves both; a buffer of another context is refused; a controller that cannot
//! be stopped retires the whole context.

use nvme_driver::IoQueue;
use nvme_driver::WriteFlags;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nvme_driver::{Controller, ControllerOptions, DmaContext, Error, QueuePairOptions, Transport};
use nvme_sim::{SimConfig, SimController, SimDma};

const NS: u32 = 2; // 4 KiB blocks
const BLOCK: usize = 4096;

fn in_context(
    ctx: &DmaContext,
    dma: &Arc<SimDma>,
    config: SimConfig,
) -> (SimController, Controller) {
    let sim = SimController::start_in(config, dma.clone());
    let ctrl = Controller::new_in(
        ctx,
        Transport::new(sim.mmio(), sim.dma(), "sim").with_function_control(sim.function_control()),
        ControllerOptions::default(),
    )
    .expect("bring-up");
    (sim, ctrl)
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ seed)
        .collect()
}

#[test]
fn one_pool_serves_two_controllers() {
    let _ = env_logger::builder().is_test(true).try_init();
    let dma = Arc::new(SimDma::new());
    let ctx = DmaContext::with_mapper(dma.clone());
    let (sim_a, a) = in_context(&ctx, &dma, SimConfig::default());
    let (sim_b, b) = in_context(&ctx, &dma, SimConfig::default());
    assert_eq!(a.dma_context().domain(), ctx.domain());
    assert_eq!(b.dma().domain(), ctx.domain());
    let (ns_a, ns_b) = (a.namespace(NS).unwrap(), b.namespace(NS).unwrap());
    let mut qa = a.create_queue_pair(QueuePairOptions::default()).unwrap();
    let mut qb = b.create_queue_pair(QueuePairOptions::default()).unwrap();

    // One buffer from the context's pool: written by A's DMA, then filled by A, then read
    // by B's DMA.
    let data = pattern(4 * BLOCK, 0x5a);
    let mut buf = ctx.alloc_buffer(4 * BLOCK).unwrap();
    buf.copy_from_slice(&data);
    let mut buf = qa.write(&ns_a, 100, 4, buf, WriteFlags::NONE).unwrap();
    buf.fill(0);
    let buf = qa.read(&ns_a, 100, 4, buf).unwrap();
    assert_eq!(&buf[..], &data[..], "read back on A");
    let buf = qb.write(&ns_b, 300, 4, buf, WriteFlags::NONE).unwrap();
    // A buffer A allocated is valid on B too (same domain).
    let from_a = a.alloc_buffer(4 * BLOCK).unwrap();
    let from_a = qb.read(&ns_b, 300, 4, from_a).unwrap();
    assert_eq!(&from_a[..], &data[..], "read back on B");
    assert_eq!(sim_a.read_disk(NS, 100 * BLOCK as u64, 4 * BLOCK), data);
    assert_eq!(sim_b.read_disk(NS, 300 * BLOCK as u64, 4 * BLOCK), data);
    assert!(sim_a
        .read_disk(NS, 300 * BLOCK as u64, BLOCK)
        .iter()
        .all(|&x| x == 0));

    // Closing A leaves B and the pool working; everything unmaps once all are gone.
    drop(qa);
    drop(a);
    let buf = qb.read(&ns_b, 300, 4, buf).unwrap();
    assert_eq!(&buf[..], &data[..]);
    drop((qb, b, buf, from_a));
    assert_eq!(
        dma.mapping_count(),
        0,
        "every mapping of the context removed"
    );
}

#[test]
fn a_buffer_of_another_context_is_refused_and_given_back() {
    let _ = env_logger::builder().is_test(true).try_init();
    let (dma1, dma2) = (Arc::new(SimDma::new()), Arc::new(SimDma::new()));
    let (ctx1, ctx2) = (
        DmaContext::with_mapper(dma1.clone()),
        DmaContext::with_mapper(dma2.clone()),
    );
    assert_ne!(ctx1.domain(), ctx2.domain());
    let (_sim_a, a) = in_context(&ctx1, &dma1, SimConfig::default());
    let (sim_b, b) = in_context(&ctx2, &dma2, SimConfig::default());
    let ns_b = b.namespace(NS).unwrap();
    let mut qb = b.create_queue_pair(QueuePairOptions::default()).unwrap();

    for foreign in [
        ctx1.alloc_buffer(BLOCK).unwrap(),
        a.alloc_buffer(BLOCK).unwrap(),
    ] {
        let mut foreign = foreign;
        foreign.fill(0xee);
        let failure = qb
            .write(&ns_b, 7, 1, foreign, WriteFlags::NONE)
            .unwrap_err();
        match &failure.error {
            Error::ForeignBuffer {
                buffer,
                controller_domain,
                ..
            } => {
                assert_eq!(*buffer, ctx1.domain());
                assert_eq!(*controller_domain, ctx2.domain());
            }
            e => panic!("expected ForeignBuffer, got {e:?}"),
        }
        assert!(
            failure.error.to_string().contains("DmaContext"),
            "{}",
            failure.error
        );
        let back = failure.buffer.expect("the refused buffer is given back");
        assert!(back.iter().all(|&x| x == 0xee));
    }
    assert_eq!(
        sim_b.stats().io_commands(),
        0,
        "nothing reached controller B"
    );
    // The buffer of B's own context works.
    let own = ctx2.alloc_buffer(BLOCK).unwrap();
    qb.write(&ns_b, 7, 1, own, WriteFlags::NONE).unwrap();
}

#[test]
fn a_transport_of_another_address_space_cannot_join() {
    let ctx = DmaContext::with_mapper(Arc::new(SimDma::new()));
    let sim = SimController::start(SimConfig::default());
    let err = Controller::new_in(
        &ctx,
        Transport::new(sim.mmio(), sim.dma(), "sim"),
        ControllerOptions::default(),
    )
    .unwrap_err();
    assert!(matches!(err, Error::ForeignTransport { .. }), "{err:?}");
    assert!(!sim.cc_enabled(), "the controller was not touched");
}

#[test]
fn a_pci_open_needs_a_vfio_context() {
    let ctx = DmaContext::with_mapper(Arc::new(SimDma::new()));
    let err =
        Controller::open_pci_in(&ctx, "0000:00:04.0", ControllerOptions::default()).unwrap_err();
    assert!(
        matches!(&err, Error::InvalidRequest(m) if m.contains("DmaContext::new")),
        "{err:?}"
    );
}

/// Controller A cannot be stopped (it ignores CC.EN=0 and the driver has no bus-master
/// switch): it may reach any IOVA of the shared address space, so no buffer of the context is
/// unmapped any more, B's included, and no new mapping is made.
#[test]
fn an_unstoppable_member_retires_the_whole_context() {
    let _ = env_logger::builder().is_test(true).try_init();
    let dma = Arc::new(SimDma::new());
    let ctx = DmaContext::with_mapper(dma.clone());
    let sim_a = SimController::start_in(
        SimConfig {
            timeout_500ms: 1,
            ..SimConfig::default()
        },
        dma.clone(),
    );
    let a = Controller::new_in(
        &ctx,
        Transport::new(sim_a.mmio(), sim_a.dma(), "sim-a"),
        ControllerOptions::default(),
    )
    .unwrap();
    let (_sim_b, b) = in_context(&ctx, &dma, SimConfig::default());
    let pooled = ctx.alloc_buffer(BLOCK).unwrap();
    let from_b = b.alloc_buffer(BLOCK).unwrap();
    let mapped = dma.mapping_count();

    sim_a.faults().stuck_on_disable();
    let start = Instant::now();
    drop(a);
    assert!(start.elapsed() < Duration::from_secs(10));
    drop((pooled, from_b));
    assert_eq!(
        dma.mapping_count(),
        mapped,
        "no buffer of the context is unmapped"
    );
    let err = ctx.alloc_buffer(BLOCK).unwrap_err();
    assert!(err.to_string().contains("sim-a"), "{err}");
    assert!(
        b.alloc_buffer(BLOCK).is_err(),
        "B shares the retired context"
    );
}

/// Issue 19 item 3: two contexts made over one platform mapper (two `with_mapper` calls on one
/// `SimDma`, or two `DmaContext::from_vfio` on clones of one container) have two retirement
/// guards. A buffer of one context in flight on a controller of the other would not be kept
/// when that controller cannot be stopped (only its own context is retired), so each context
/// is a DMA domain of its own and refuses the other's buffers; so do the mapper's own buffers.
#[test]
fn two_contexts_over_one_mapper_do_not_share_buffers() {
    let _ = env_logger::builder().is_test(true).try_init();
    let dma = Arc::new(SimDma::new());
    let (ctx1, ctx2) = (
        DmaContext::with_mapper(dma.clone()),
        DmaContext::with_mapper(dma.clone()),
    );
    assert_ne!(ctx1.domain(), ctx2.domain());
    let (_sim_a, a) = in_context(&ctx1, &dma, SimConfig::default());
    let (sim_b, b) = in_context(&ctx2, &dma, SimConfig::default());
    let ns_b = b.namespace(NS).unwrap();
    let mut qb = b.create_queue_pair(QueuePairOptions::default()).unwrap();
    let raw: Arc<dyn nvme_driver::DmaMapper> = dma.clone();
    for foreign in [
        ctx1.alloc_buffer(BLOCK).unwrap(),
        a.alloc_buffer(BLOCK).unwrap(),
        nvme_driver::DmaBuffer::allocate(&raw, BLOCK).unwrap(),
    ] {
        let failure = qb
            .write(&ns_b, 7, 1, foreign, WriteFlags::NONE)
            .expect_err("a buffer outside controller B's context was accepted");
        assert!(
            matches!(failure.error, Error::ForeignBuffer { .. }),
            "{}",
            failure.error
        );
        assert!(failure.buffer.is_some(), "the refused buffer is given back");
    }
    assert_eq!(sim_b.stats().io_commands(), 0, "nothing reached B");
    let own = ctx2.alloc_buffer(BLOCK).unwrap();
    qb.write(&ns_b, 7, 1, own, WriteFlags::NONE).unwrap();
}
