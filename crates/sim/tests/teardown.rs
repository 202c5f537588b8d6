//! The emulator features that reproduce teardown hazards (deferred execution, Abort, bus
//! master, stuck disable, bogus SQ heads) and the configurations a driver must refuse or
//! handle (metadata formats, MQES 0, large DSTRD), driven by the hand-rolled test host.

use std::time::Duration;

use nvme_sim::{ExecutionDelay, SimConfig, SimController, SimNamespace};
use nvme_spec::command::{self, Cns};
use nvme_spec::identify::IdentifyNamespace;
use nvme_spec::queue::SubmissionEntry;
use nvme_spec::regs::{Aqa, ACQ, AQA, ASQ, CC};
use nvme_spec::status::{command_specific, generic, Status, StatusCodeType};
use nvme_vfio::dma::PAGE_SIZE;
use nvme_vfio::{DmaBuffer, DmaRegion};

mod common;
use common::*;

const PAGES: usize = 3;
/// Long enough that a test sees the command waiting, short enough to keep the suite fast.
const SHORT_DELAY: Duration = Duration::from_millis(200);
/// Longer than any test runs: the command only ever leaves the wait list by cancellation.
const FOREVER: Duration = Duration::from_secs(3600);

fn aborted_status(sc: u8) -> Status {
    Status::new(StatusCodeType::Generic.raw(), sc, false)
}

/// A buffer of `PAGES` pages filled with `byte`.
fn pattern(host: &Host, byte: u8) -> DmaBuffer {
    let mut buf = DmaBuffer::allocate(&host.dma, PAGES * PAGE_SIZE).unwrap();
    buf.fill(byte);
    buf
}

/// Points the PRP list in `list` at pages 1.. of `data`.
fn set_list(list: &mut DmaBuffer, data: &DmaBuffer) {
    for page in 1..PAGES {
        let entry = data.iova().0 + (page * PAGE_SIZE) as u64;
        list[(page - 1) * 8..page * 8].copy_from_slice(&entry.to_le_bytes());
    }
}

/// A 3-page write to the 4 KiB namespace at LBA 0 through a PRP list.
fn list_write(data: &DmaBuffer, list: &DmaBuffer) -> SubmissionEntry {
    let mut sqe = command::write(NS_4K, 0, PAGES as u32, false);
    sqe.prp1 = data.iova().0;
    sqe.prp2 = list.iova().0;
    sqe
}

fn medium(host: &Host) -> Vec<u8> {
    host.sim.read_disk(NS_4K, 0, PAGES * PAGE_SIZE)
}

fn wait_deferred(host: &Host, n: u64) {
    wait_for("the command to be fetched and deferred", || {
        host.sim.stats().commands_deferred >= n
    });
}

#[test]
fn deferred_write_reads_its_prp_list_at_execution_time() {
    let mut host = Host::start(SimConfig::default());
    let mut q = host.create_pair(1, 8, 8);
    let (old, new) = (pattern(&host, 0xaa), pattern(&host, 0xbb));
    let mut list = DmaBuffer::allocate(&host.dma, PAGE_SIZE).unwrap();
    set_list(&mut list, &old);

    host.sim.faults().delay_execution(1, SHORT_DELAY);
    let write = q.submit(list_write(&old, &list));
    // A later command of the same queue runs first: the deferred one does not block the queue.
    let flush = q.submit(command::flush(NS_4K));
    let cqe = q.wait();
    assert_eq!(cqe.cid, flush);
    assert_eq!(cqe.sq_head, 2, "both commands were fetched");
    assert!(medium(&host).iter().all(|&b| b == 0), "nothing written yet");

    // The host reuses the list page: the late device follows the new list.
    set_list(&mut list, &new);
    let cqe = q.wait();
    assert_eq!(cqe.cid, write);
    assert!(cqe.status().is_success(), "{}", cqe.status());
    let disk = medium(&host);
    assert!(disk[..PAGE_SIZE].iter().all(|&b| b == 0xaa), "PRP1 page");
    assert!(
        disk[PAGE_SIZE..].iter().all(|&b| b == 0xbb),
        "list pages read at execution time"
    );
    let stats = host.sim.stats();
    assert_eq!((stats.commands_deferred, stats.deferred_executed), (1, 1));
}

#[test]
fn deferred_command_without_completion_still_executes() {
    let mut host = Host::start(SimConfig::default());
    let mut q = host.create_pair(1, 8, 8);
    let data = pattern(&host, 0x5c);
    let mut list = DmaBuffer::allocate(&host.dma, PAGE_SIZE).unwrap();
    set_list(&mut list, &data);
    host.sim.faults().delay_execution_with(
        1,
        ExecutionDelay::new(Duration::from_millis(50))
            .without_completion()
            .not_abortable(),
    );
    let write = q.submit(list_write(&data, &list));
    wait_deferred(&host, 1);
    // Not abortable: Abort says "not aborted" and the command still runs.
    let cqe = host.admin.run(command::abort(1, write));
    assert!(cqe.status().is_success());
    assert_eq!(cqe.dw0 & 1, 1, "not aborted");
    wait_for("the late execution", || {
        host.sim.stats().deferred_executed == 1
    });
    assert!(medium(&host).iter().all(|&b| b == 0x5c));
    q.expect_none(Duration::from_millis(50));
}

#[test]
fn abort_cancels_a_deferred_command() {
    let mut host = Host::start(SimConfig::default());
    let mut q = host.create_pair(1, 8, 8);
    let data = pattern(&host, 0x11);
    let mut list = DmaBuffer::allocate(&host.dma, PAGE_SIZE).unwrap();
    set_list(&mut list, &data);
    host.sim.faults().delay_execution(1, FOREVER);
    let write = q.submit(list_write(&data, &list));
    wait_deferred(&host, 1);

    let cqe = host.admin.run(command::abort(1, write));
    assert!(cqe.status().is_success());
    assert_eq!(cqe.dw0 & 1, 0, "Abort dw0 bit 0 clear: aborted");
    let cqe = q.wait();
    assert_eq!(cqe.cid, write);
    assert_eq!(cqe.status(), aborted_status(generic::ABORT_REQUESTED));
    assert!(medium(&host).iter().all(|&b| b == 0));
    assert_eq!(host.sim.stats().deferred_cancelled, 1);

    // A command that already completed cannot be aborted.
    let flush = q.run(command::flush(NS_4K)).cid;
    let cqe = host.admin.run(command::abort(1, flush));
    assert_eq!(cqe.dw0 & 1, 1, "not aborted");
}

#[test]
fn delete_sq_cancels_deferred_commands() {
    let mut host = Host::start(SimConfig::default());
    let mut q = host.create_pair(1, 8, 8);
    let data = pattern(&host, 0x22);
    let mut list = DmaBuffer::allocate(&host.dma, PAGE_SIZE).unwrap();
    set_list(&mut list, &data);
    host.sim.faults().delay_execution(1, SHORT_DELAY);
    let write = q.submit(list_write(&data, &list));
    wait_deferred(&host, 1);

    let cqe = host.admin.run(command::delete_io_sq(1));
    assert!(cqe.status().is_success(), "{}", cqe.status());
    let cqe = q.wait();
    assert_eq!(cqe.cid, write);
    assert_eq!(cqe.status(), aborted_status(generic::ABORTED_SQ_DELETION));
    std::thread::sleep(SHORT_DELAY * 2);
    assert!(medium(&host).iter().all(|&b| b == 0), "never executed");
    let stats = host.sim.stats();
    assert_eq!((stats.deferred_executed, stats.deferred_cancelled), (0, 1));
}

#[test]
fn controller_reset_cancels_deferred_commands() {
    let mut host = Host::start(SimConfig::default());
    let mut q = host.create_pair(1, 8, 8);
    let data = pattern(&host, 0x33);
    let mut list = DmaBuffer::allocate(&host.dma, PAGE_SIZE).unwrap();
    set_list(&mut list, &data);
    host.sim.faults().delay_execution(1, SHORT_DELAY);
    q.submit(list_write(&data, &list));
    wait_deferred(&host, 1);

    host.mmio.write32(CC, cc_enabled().with_en(false).0);
    wait_for("CSTS.RDY = 0", || !host.csts().rdy());
    std::thread::sleep(SHORT_DELAY * 2);
    assert!(medium(&host).iter().all(|&b| b == 0), "never executed");
    assert_eq!(q.try_reap(), None);
    let stats = host.sim.stats();
    assert_eq!((stats.deferred_executed, stats.deferred_cancelled), (0, 1));
}

#[test]
fn bus_master_off_stops_all_dma() {
    let mut host = Host::start(SimConfig::default());
    let mut q = host.create_pair(1, 8, 8);
    let data = pattern(&host, 0x44);
    let mut list = DmaBuffer::allocate(&host.dma, PAGE_SIZE).unwrap();
    set_list(&mut list, &data);
    // A deferred command that becomes due while bus mastering is off.
    host.sim
        .faults()
        .delay_execution(1, Duration::from_millis(50));
    q.submit(list_write(&data, &list));
    wait_deferred(&host, 1);
    assert!(host.sim.bus_master_enabled());

    host.sim.function_control().disable_bus_master().unwrap();
    assert!(!host.sim.bus_master_enabled());
    let completions = host.sim.stats().completions_posted;
    // New commands are not fetched either (no SQE read, nothing posted).
    q.submit(command::write(NS_512, 0, 1, false));
    host.admin.submit(command::identify(Cns::Controller, 0));
    std::thread::sleep(Duration::from_millis(150));
    let stats = host.sim.stats();
    assert_eq!(stats.deferred_executed, 0);
    assert_eq!(stats.completions_posted, completions);
    assert_eq!(stats.writes, 0);
    assert!(stats.dma_blocked > 0);
    assert!(medium(&host).iter().all(|&b| b == 0));
    assert_eq!(q.try_reap(), None);
    assert_eq!(host.admin.try_reap(), None);

    // Registers still work: a reset completes without DMA.
    host.mmio.write32(CC, cc_enabled().with_en(false).0);
    wait_for("CSTS.RDY = 0", || !host.csts().rdy());
    assert!(!host.sim.cc_enabled());
    assert!(!host.sim.bus_master_enabled());
}

#[test]
fn bus_master_enable_resumes_waiting_work() {
    let mut host = Host::start(SimConfig::default());
    let mut q = host.create_pair(1, 8, 8);
    host.sim.function_control().disable_bus_master().unwrap();
    let flush = q.submit(command::flush(NS_4K));
    q.expect_none(Duration::from_millis(50));
    host.sim.enable_bus_master();
    assert_eq!(q.wait().cid, flush);
}

#[test]
fn stuck_on_disable_keeps_ready_and_keeps_executing() {
    let mut host = Host::start(SimConfig::default());
    let mut q = host.create_pair(1, 8, 8);
    host.sim.faults().stuck_on_disable();
    host.mmio.write32(CC, cc_enabled().with_en(false).0);
    std::thread::sleep(Duration::from_millis(50));
    assert!(host.csts().rdy(), "RDY stays 1");
    assert!(!host.sim.cc_enabled());
    assert!(host.sim.csts_ready());

    // Still executing: a write lands on the medium and completes.
    let mut buf = DmaBuffer::allocate(&host.dma, 4096).unwrap();
    buf.fill(0x66);
    let cqe = q.run(with_prp(command::write(NS_4K, 0, 1, false), &buf));
    assert!(cqe.status().is_success());
    assert!(host
        .sim
        .read_disk(NS_4K, 0, 4096)
        .iter()
        .all(|&b| b == 0x66));

    host.sim.faults().unstick();
    wait_for("CSTS.RDY = 0 once unstuck", || !host.csts().rdy());
    assert!(!host.sim.csts_ready());
}

#[test]
fn bogus_sq_head_is_in_range_but_outside_the_submitted_window() {
    let mut host = Host::start(SimConfig::default());
    let mut q = host.create_pair(1, 8, 8);
    assert_eq!(q.run(command::flush(NS_4K)).sq_head, 1);
    host.sim.faults().bogus_sq_head(1);
    // Tail is 2 after this submission; entries 1..2 are the submitted window.
    let cqe = q.run(command::flush(NS_4K));
    assert_eq!(cqe.sq_head, 3);
    assert!(cqe.status().is_success());
    assert_eq!(q.run(command::flush(NS_4K)).sq_head, 3, "disarmed after n");
}

#[test]
fn identify_namespace_reports_metadata_formats() {
    let config = SimConfig {
        namespaces: vec![
            SimNamespace {
                nsid: 1,
                blocks: 64,
                metadata_size: 8,
                extended: true,
                protection: 1,
                ..SimNamespace::default()
            },
            SimNamespace {
                nsid: 2,
                block_size: 4096,
                blocks: 16,
                metadata_size: 64,
                protection: 3,
                ..SimNamespace::default()
            },
            SimNamespace {
                nsid: 3,
                blocks: 8,
                ..SimNamespace::default()
            },
        ],
        ..SimConfig::default()
    };
    let mut host = Host::start(config);
    let ns = host
        .identify(Cns::Namespace, 1, IdentifyNamespace::from_bytes)
        .unwrap();
    assert_eq!(ns.block_size(), 512);
    assert_eq!(ns.current_lba_format().metadata_size(), 8);
    assert!(ns.metadata_extended());
    // MC and DPC: what the offered formats (QEMU's eight) allow; DPS: what is enabled.
    assert_eq!((ns.mc, ns.dps & 0b111, ns.dpc & 0b1), (0b11, 1, 1));

    let ns = host
        .identify(Cns::Namespace, 2, IdentifyNamespace::from_bytes)
        .unwrap();
    assert_eq!(ns.block_size(), 4096);
    assert_eq!(ns.current_lba_format().metadata_size(), 64);
    assert!(!ns.metadata_extended());
    assert_eq!((ns.mc, ns.dps & 0b111, ns.dpc & 0b100), (0b11, 3, 0b100));
    assert_eq!(ns.flbas & 0xF, 7, "4096 + 64 is format 7");

    let ns = host
        .identify(Cns::Namespace, 3, IdentifyNamespace::from_bytes)
        .unwrap();
    assert_eq!(ns.current_lba_format().metadata_size(), 0);
    assert_eq!((ns.flbas, ns.dps), (0, 0));
}

#[test]
fn extended_lbas_transfer_data_and_metadata() {
    let config = SimConfig {
        namespaces: vec![SimNamespace {
            nsid: 1,
            blocks: 64,
            metadata_size: 8,
            extended: true,
            ..SimNamespace::default()
        }],
        ..SimConfig::default()
    };
    let mut host = Host::start(config);
    let mut q = host.create_pair(1, 8, 8);
    // Two extended blocks: 2 * 520 bytes.
    let mut buf = DmaBuffer::allocate(&host.dma, 2 * 520).unwrap();
    for (i, b) in buf.iter_mut().enumerate() {
        *b = (i % 251) as u8;
    }
    let expected = buf.to_vec();
    let cqe = q.run(with_prp(command::write(1, 1, 2, false), &buf));
    assert!(cqe.status().is_success(), "{}", cqe.status());
    assert_eq!(host.sim.read_disk(1, 520, 2 * 520), expected);
    buf.fill(0);
    let cqe = q.run(with_prp(command::read(1, 1, 2), &buf));
    assert!(cqe.status().is_success());
    assert_eq!(&buf[..], &expected[..]);
}

#[test]
fn separate_metadata_goes_through_mptr() {
    let config = SimConfig {
        namespaces: vec![SimNamespace {
            nsid: 1,
            blocks: 64,
            metadata_size: 16,
            ..SimNamespace::default()
        }],
        ..SimConfig::default()
    };
    let mut host = Host::start(config);
    let mut q = host.create_pair(1, 8, 8);
    let mut data = DmaBuffer::allocate(&host.dma, 1024).unwrap();
    data.fill(0x77);
    // A driver that ignores metadata leaves MPTR at 0: the device's metadata DMA faults.
    let cqe = q.run(with_prp(command::write(1, 0, 2, false), &data));
    assert_eq!(cqe.status(), generic_err(generic::DATA_TRANSFER_ERROR));

    let mut md = DmaBuffer::allocate(&host.dma, 32).unwrap();
    md.fill(0x99);
    let mut sqe = with_prp(command::write(1, 2, 2, false), &data);
    sqe.mptr = md.iova().0;
    assert!(q.run(sqe).status().is_success());
    assert!(host.sim.read_disk(1, 1024, 1024).iter().all(|&b| b == 0x77));
    // Metadata follows the 64 data blocks on the medium.
    let md_base = 64 * 512 + 2 * 16;
    assert!(host
        .sim
        .read_disk(1, md_base, 32)
        .iter()
        .all(|&b| b == 0x99));
    md.fill(0);
    let mut sqe = with_prp(command::read(1, 2, 2), &data);
    sqe.mptr = md.iova().0;
    assert!(q.run(sqe).status().is_success());
    assert!(md.iter().all(|&b| b == 0x99));
}

#[test]
#[should_panic(expected = "extended LBAs need metadata_size > 0")]
fn extended_without_metadata_is_a_config_error() {
    let _ = Host::configure(SimConfig {
        namespaces: vec![SimNamespace {
            extended: true,
            ..SimNamespace::default()
        }],
        ..SimConfig::default()
    });
}

#[test]
fn mqes_zero_never_becomes_ready() {
    let host = Host::configure(SimConfig {
        mqes: 0,
        ..SimConfig::default()
    });
    host.mmio.write32(CC, cc_enabled().0);
    std::thread::sleep(Duration::from_millis(50));
    assert!(!host.csts().rdy());
    assert!(host.sim.cc_enabled() && !host.sim.csts_ready());
}

#[test]
fn dstrd_beyond_the_bar_refuses_unreachable_queues() {
    // DSTRD 15: even the admin CQ doorbell (0x1000 + 128 KiB) is beyond the 16 KiB BAR (so
    // the test host, which maps the admin doorbells, cannot be used).
    let sim = SimController::start(SimConfig {
        dstrd: 15,
        ..SimConfig::default()
    });
    let (mmio, dma) = (sim.mmio(), sim.dma());
    let sq = DmaRegion::allocate(&dma, PAGE_SIZE).unwrap();
    let cq = DmaRegion::allocate(&dma, PAGE_SIZE).unwrap();
    mmio.write32(AQA, Aqa::new(ADMIN_ENTRIES, ADMIN_ENTRIES).0);
    mmio.write64(ASQ, sq.iova().0);
    mmio.write64(ACQ, cq.iova().0);
    mmio.write32(CC, cc_enabled().0);
    std::thread::sleep(Duration::from_millis(50));
    assert!(sim.cc_enabled());
    assert!(!sim.csts_ready(), "enable refused, no panic");
    drop(sim);

    // DSTRD 11 (8 KiB stride): the admin doorbells fit, queue pair 1's do not.
    let mut host = Host::configure(SimConfig {
        dstrd: 11,
        ..SimConfig::default()
    });
    host.mmio.write32(CC, cc_enabled().0);
    wait_for("CSTS.RDY", || host.csts().rdy());
    let ring = DmaRegion::allocate(&host.dma, PAGE_SIZE).unwrap();
    let cqe = host
        .admin
        .run(command::create_io_cq(1, 8, ring.iova().0, None));
    assert_eq!(
        cqe.status(),
        cs_err(command_specific::INVALID_QUEUE_IDENTIFIER)
    );
}
