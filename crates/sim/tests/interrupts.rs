//! MSI-X emulation: vectors routed with `SimController::interrupts`, Create I/O Completion
//! Queue IEN/IV handling, and which event a completion signals.

mod common;
use common::*;

use std::time::Duration;

use nvme_sim::{SimConfig, SimController};
use nvme_spec::command;
use nvme_spec::status::command_specific;
use nvme_vfio::dma::PAGE_SIZE;
use nvme_vfio::{DmaBuffer, InterruptEvent, VfioError};

/// How long a test waits for an interrupt that must come.
const IRQ_WAIT: Duration = Duration::from_secs(1);
/// Blocks written by each test command (512-byte namespace 1: one page).
const BLOCKS: u32 = 8;
const NS: u32 = 1;
/// Create I/O CQ CDW11 bit 1, Interrupts Enabled.
const IEN: u32 = 1 << 1;

/// Creates I/O queue pair `qid` whose CQ interrupts on `vector` (`None`: polled).
fn create_pair_irq(host: &mut Host, qid: u16, vector: Option<u16>) -> Queue {
    let q = Queue::new(&host.dma, &host.mmio, qid, 16, 16, host.stride);
    let cqe = host
        .admin
        .run(command::create_io_cq(qid, 16, q.cq.iova().0, vector));
    assert!(cqe.status().is_success(), "create CQ: {}", cqe.status());
    let cqe = host
        .admin
        .run(command::create_io_sq(qid, 16, q.sq.iova().0, qid));
    assert!(cqe.status().is_success(), "create SQ: {}", cqe.status());
    q
}

fn write_once(host: &Host, q: &mut Queue) {
    let buf = DmaBuffer::allocate(&host.dma, PAGE_SIZE).unwrap();
    let cqe = q.run(with_prp(command::write(NS, 0, BLOCKS, false), &buf));
    assert!(cqe.status().is_success(), "write: {}", cqe.status());
}

fn pending(event: &InterruptEvent) -> u64 {
    event.clear().unwrap()
}

#[test]
fn io_completion_signals_only_its_cq_vector() {
    let mut host = Host::start(SimConfig::default());
    let irq = host.sim.interrupts();
    assert_eq!(irq.msix_vectors(), 17, "default table size");
    let events = irq.enable_msix(4).unwrap();
    assert_eq!(events.len(), 4);

    let mut q = create_pair_irq(&mut host, 1, Some(3));
    let mut polled = create_pair_irq(&mut host, 2, None);
    wait_for("admin interrupts", || {
        host.sim.stats().interrupts_signalled >= 4
    });
    assert!(
        pending(&events[0]) >= 1,
        "admin completions signal vector 0 once MSI-X is on"
    );
    assert_eq!(pending(&events[3]), 0, "nothing completed on CQ 1 yet");

    write_once(&host, &mut q);
    assert!(
        events[3].wait(Some(IRQ_WAIT)).unwrap() >= 1,
        "CQ 1 uses vector 3"
    );
    for (v, event) in events.iter().enumerate().take(3) {
        assert_eq!(pending(event), 0, "vector {v} must stay quiet");
    }

    write_once(&host, &mut polled);
    std::thread::sleep(Duration::from_millis(20));
    for (v, event) in events.iter().enumerate() {
        assert_eq!(
            pending(event),
            0,
            "a polled CQ signals nothing (vector {v})"
        );
    }
    assert_eq!(host.sim.stats().interrupts_lost, 0);
}

#[test]
fn a_batch_of_completions_raises_one_interrupt() {
    let mut host = Host::start(SimConfig::default());
    let events = host.sim.interrupts().enable_msix(2).unwrap();
    let mut q = create_pair_irq(&mut host, 1, Some(1));
    let buf = DmaBuffer::allocate(&host.dma, PAGE_SIZE).unwrap();
    const BATCH: usize = 8;
    for _ in 0..BATCH {
        q.push(with_prp(command::write(NS, 0, BLOCKS, false), &buf));
    }
    // One tail doorbell: the device fetches and completes all of them in one poll pass.
    q.ring();
    for _ in 0..BATCH {
        assert!(q.wait().status().is_success());
    }
    assert_eq!(
        events[1].wait(Some(IRQ_WAIT)).unwrap(),
        1,
        "one interrupt for the batch"
    );
}

#[test]
fn unrouted_vector_counts_lost_interrupts_until_msix_is_enabled() {
    let mut host = Host::start(SimConfig::default());
    let irq = host.sim.interrupts();
    let mut q = create_pair_irq(&mut host, 1, Some(1));
    assert_eq!(
        host.sim.stats().interrupts_lost,
        0,
        "admin completions without MSI-X are not lost interrupts"
    );

    write_once(&host, &mut q);
    wait_for("a lost interrupt", || host.sim.stats().interrupts_lost == 1);

    let events = irq.enable_msix(1).unwrap();
    write_once(&host, &mut q);
    wait_for("a second lost interrupt", || {
        host.sim.stats().interrupts_lost == 2
    });
    assert_eq!(pending(&events[0]), 0, "vector 1 is not routed to vector 0");

    let events = irq.enable_msix(2).unwrap();
    write_once(&host, &mut q);
    assert!(events[1].wait(Some(IRQ_WAIT)).unwrap() >= 1);
    let signalled = host.sim.stats().interrupts_signalled;

    irq.disable_msix();
    write_once(&host, &mut q);
    wait_for("a lost interrupt after disable", || {
        host.sim.stats().interrupts_lost == 3
    });
    assert_eq!(
        pending(&events[1]),
        0,
        "a disabled routing is not signalled"
    );
    assert_eq!(host.sim.stats().interrupts_signalled, signalled);
}

#[test]
fn create_cq_checks_the_interrupt_vector_only_when_enabled() {
    let mut host = Host::start(SimConfig {
        msix_vectors: 4,
        ..SimConfig::default()
    });
    let q = Queue::new(&host.dma, &host.mmio, 1, 16, 16, host.stride);
    let iova = q.cq.iova().0;
    let cqe = host.admin.run(command::create_io_cq(1, 16, iova, Some(4)));
    assert_eq!(
        cqe.status(),
        cs_err(command_specific::INVALID_INTERRUPT_VECTOR)
    );
    let cqe = host
        .admin
        .run(command::create_io_cq(1, 16, iova, Some(u16::MAX)));
    assert_eq!(
        cqe.status(),
        cs_err(command_specific::INVALID_INTERRUPT_VECTOR)
    );

    // IV is ignored while IEN is clear.
    let mut sqe = command::create_io_cq(1, 16, iova, None);
    sqe.cdw11 |= u32::from(u16::MAX) << 16;
    assert_eq!(sqe.cdw11 & IEN, 0);
    let cqe = host.admin.run(sqe);
    assert!(cqe.status().is_success(), "{}", cqe.status());

    let q2 = Queue::new(&host.dma, &host.mmio, 2, 16, 16, host.stride);
    let cqe = host
        .admin
        .run(command::create_io_cq(2, 16, q2.cq.iova().0, Some(3)));
    assert!(cqe.status().is_success(), "last vector: {}", cqe.status());
}

#[test]
fn enable_msix_rejects_zero_and_too_many_vectors() {
    let sim = SimController::start(SimConfig {
        msix_vectors: 8,
        ..SimConfig::default()
    });
    let irq = sim.interrupts();
    for wanted in [0, 9, u32::MAX] {
        let err = irq.enable_msix(wanted).expect_err("beyond the table");
        assert!(
            matches!(err, VfioError::Interrupts { wanted: w, available: 8, .. } if w == wanted),
            "enable_msix({wanted}) gave {err:?}"
        );
        assert!(err.to_string().contains("offers 8"), "{err}");
    }
    assert_eq!(irq.enable_msix(8).unwrap().len(), 8, "the whole table");
}

#[test]
#[should_panic(expected = "msix_vectors")]
fn zero_msix_vectors_is_a_config_error() {
    let _ = SimController::start(SimConfig {
        msix_vectors: 0,
        ..SimConfig::default()
    });
}
