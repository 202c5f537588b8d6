//! Drives the emulated controller through its registers with a minimal hand-rolled host (no
//! driver crate): enable, admin commands, one I/O queue pair, and the fault switches.

use std::sync::atomic::{fence, Ordering};
use std::time::{Duration, Instant};

use nvme_sim::{SimConfig, SimNamespace, CORRUPT_CID_MASK, IOVA_BASE};
use nvme_spec::command::{self, Cns};
use nvme_spec::identify::{IdentifyController, IdentifyNamespace, NamespaceList, Oacs};
use nvme_spec::opcode::{feature, log_page};
use nvme_spec::queue::SubmissionEntry;
use nvme_spec::regs::{
    sq_tail_doorbell, Cap, Cc, ShutdownNotification, ShutdownStatus, Version, ACQ, ASQ, CAP, CC, VS,
};
use nvme_spec::status::{command_specific, generic, media, Status, StatusCodeType};
use nvme_vfio::dma::PAGE_SIZE;
use nvme_vfio::{DmaBuffer, DmaRegion};

mod common;
use common::*;

#[test]
fn registers_after_start_and_enable() {
    let config = SimConfig {
        mqes: 255,
        dstrd: 1,
        timeout_500ms: 6,
        ..SimConfig::default()
    };
    let host = Host::configure(config);
    let cap = Cap(host.mmio.read64(CAP));
    assert_eq!(cap.mqes(), 255);
    assert!(cap.cqr() && cap.css_nvm());
    assert_eq!(cap.timeout(), Duration::from_secs(3));
    assert_eq!(cap.doorbell_stride(), 8);
    assert_eq!((cap.min_page_size(), cap.max_page_size()), (4096, 65536));
    assert_eq!(Version(host.mmio.read32(VS)), Version::new(1, 4, 0));
    assert!(!host.csts().rdy());
    host.mmio.write32(CC, cc_enabled().0);
    wait_for("CSTS.RDY", || host.csts().rdy());
    // Disable: RDY drops.
    host.mmio.write32(CC, cc_enabled().with_en(false).0);
    wait_for("CSTS.RDY = 0", || !host.csts().rdy());
}

#[test]
fn enable_with_bad_entry_sizes_is_refused() {
    let host = Host::configure(SimConfig::default());
    host.mmio.write32(CC, Cc(0).with_en(true).0); // IOSQES/IOCQES left at 0
    std::thread::sleep(Duration::from_millis(20));
    assert!(!host.csts().rdy());
}

#[test]
fn identify_controller_namespaces_and_list() {
    let config = SimConfig {
        model: "Test Model".into(),
        serial: "SN42".into(),
        mdts: 6,
        ..SimConfig::default()
    };
    let mut host = Host::start(config);
    let ctrl = host
        .identify(Cns::Controller, 0, IdentifyController::from_bytes)
        .unwrap();
    assert_eq!(ctrl.vid, 0x1b36);
    assert_eq!(ctrl.model(), "Test Model");
    assert_eq!(ctrl.serial(), "SN42");
    assert_eq!(ctrl.mdts, 6);
    assert_eq!((ctrl.sqes, ctrl.cqes, ctrl.nn), (0x66, 0x44, 2));
    assert!(ctrl.oacs_flags().contains(Oacs::DOORBELL_BUFFER_CONFIG));
    assert!(ctrl.vwc_present());

    let ns = host
        .identify(Cns::Namespace, NS_4K, IdentifyNamespace::from_bytes)
        .unwrap();
    assert_eq!((ns.block_size(), ns.nsze), (4096, 4096));
    let ns = host
        .identify(Cns::Namespace, NS_512, IdentifyNamespace::from_bytes)
        .unwrap();
    assert_eq!((ns.block_size(), ns.nsze), (512, 32768));
    let list = host
        .identify(Cns::ActiveNamespaceList, 0, NamespaceList::from_bytes)
        .unwrap();
    assert_eq!(list.active().collect::<Vec<_>>(), vec![1, 2]);
    let list = host
        .identify(Cns::ActiveNamespaceList, 1, NamespaceList::from_bytes)
        .unwrap();
    assert_eq!(list.active().collect::<Vec<_>>(), vec![2]);
    let missing = host.identify(Cns::Namespace, 7, |_| ());
    assert_eq!(
        missing,
        Err(generic_err(generic::INVALID_NAMESPACE_OR_FORMAT))
    );
}

#[test]
fn admin_features_queues_and_unknown_opcode() {
    let mut host = Host::start(SimConfig {
        io_queue_pairs: 4,
        ..SimConfig::default()
    });
    let cqe = host.admin.run(command::set_number_of_queues(8, 2));
    assert!(cqe.status().is_success());
    assert_eq!(command::number_of_queues_allocated(cqe.dw0), (4, 2));
    let cqe = host
        .admin
        .run(command::get_features(feature::NUMBER_OF_QUEUES));
    assert_eq!(command::number_of_queues_allocated(cqe.dw0), (4, 2));
    let cqe = host
        .admin
        .run(command::set_features(feature::ARBITRATION, 0x1234));
    assert!(cqe.status().is_success());
    assert_eq!(
        host.admin
            .run(command::get_features(feature::ARBITRATION))
            .dw0,
        0x1234
    );

    // CQ 3 is beyond the 2 granted completion queues.
    let q = Queue::new(&host.dma, &host.mmio, 3, 4, 4, host.stride);
    let cqe = host
        .admin
        .run(command::create_io_cq(3, 4, q.cq.iova().0, None));
    assert_eq!(
        cqe.status(),
        cs_err(command_specific::INVALID_QUEUE_IDENTIFIER)
    );
    let cqe = host
        .admin
        .run(command::create_io_cq(1, 2048, q.cq.iova().0, None));
    assert_eq!(cqe.status(), cs_err(command_specific::INVALID_QUEUE_SIZE));
    let cqe = host
        .admin
        .run(command::create_io_sq(1, 4, q.sq.iova().0, 1));
    assert_eq!(
        cqe.status(),
        cs_err(command_specific::COMPLETION_QUEUE_INVALID)
    );

    let _pair = host.create_pair(1, 4, 4);
    let cqe = host.admin.run(command::delete_io_cq(1));
    assert_eq!(
        cqe.status(),
        cs_err(command_specific::INVALID_QUEUE_DELETION)
    );
    assert!(host
        .admin
        .run(command::delete_io_sq(1))
        .status()
        .is_success());
    assert!(host
        .admin
        .run(command::delete_io_cq(1))
        .status()
        .is_success());
    assert_eq!(
        host.admin.run(command::delete_io_cq(1)).status(),
        cs_err(command_specific::INVALID_QUEUE_IDENTIFIER)
    );

    let cqe = host.admin.run(command::abort(1, 0));
    assert!(cqe.status().is_success());
    assert_eq!(cqe.dw0 & 1, 1, "abort reports 'not aborted'");
    let log = DmaBuffer::allocate(&host.dma, 512).unwrap();
    let mut sqe = command::get_log_page(log_page::SMART_HEALTH, u32::MAX, 512);
    sqe.prp1 = log.iova().0;
    assert!(host.admin.run(sqe).status().is_success());
    let unknown = SubmissionEntry::new(0x7f);
    assert_eq!(
        host.admin.run(unknown).status(),
        generic_err(generic::INVALID_OPCODE)
    );
    assert!(host.sim.stats().admin_commands >= 14);
}

#[test]
fn write_then_read_through_an_io_queue() {
    let mut host = Host::start(SimConfig::default());
    let mut q = host.create_pair(1, 16, 16);
    let mut buf = DmaBuffer::allocate(&host.dma, 2 * PAGE_SIZE).unwrap();
    for (i, b) in buf.iter_mut().enumerate() {
        *b = (i % 251) as u8;
    }
    // 16 blocks of 512 bytes at LBA 8 = two pages: PRP1 + PRP2.
    let cqe = q.run(with_prp(command::write(NS_512, 8, 16, true), &buf));
    assert!(cqe.status().is_success(), "{}", cqe.status());
    assert_eq!((cqe.sq_id, cqe.sq_head), (1, 1));
    assert_eq!(
        host.sim.read_disk(NS_512, 8 * 512, buf.len()),
        buf[..].to_vec()
    );

    // Seed the medium directly and read it back through the queue.
    let pattern: Vec<u8> = (0..4096u32).map(|i| (i * 7 % 256) as u8).collect();
    host.sim.write_disk(NS_4K, 3 * 4096, &pattern);
    let out = DmaBuffer::allocate(&host.dma, 4096).unwrap();
    let cqe = q.run(with_prp(command::read(NS_4K, 3, 1), &out));
    assert!(cqe.status().is_success());
    assert_eq!(out[..], pattern[..]);
    let stats = host.sim.stats();
    assert_eq!((stats.reads, stats.writes), (1, 1));
    assert!(stats.sq_doorbell_writes >= 2 && stats.completions_posted >= 2);
}

#[test]
fn prp_list_transfer_with_offset_first_entry() {
    let mut host = Host::start(SimConfig::default());
    let mut q = host.create_pair(1, 8, 8);
    // Data: starts 512 bytes before the end of page 0 and spans 3 more pages (PRP list).
    let len = 512 + 3 * PAGE_SIZE;
    let mut data = DmaBuffer::allocate(&host.dma, 4 * PAGE_SIZE).unwrap();
    let start = PAGE_SIZE - 512;
    for (i, b) in data[start..].iter_mut().enumerate() {
        *b = (i / 512) as u8 + 1;
    }
    let list = DmaRegion::allocate(&host.dma, PAGE_SIZE).unwrap();
    let entries: Vec<u64> = (1..4)
        .map(|p| data.iova().0 + (p * PAGE_SIZE) as u64)
        .collect();
    // SAFETY: the list page is ours and not yet referenced by any submitted command.
    unsafe {
        let ptr = list.as_ptr().as_ptr().cast::<u64>();
        for (i, e) in entries.iter().enumerate() {
            ptr.add(i).write_volatile(e.to_le());
        }
    }
    let mut sqe = command::write(NS_512, 100, (len / 512) as u32, false);
    sqe.prp1 = data.iova().0 + start as u64;
    sqe.prp2 = list.iova().0;
    assert!(q.run(sqe).status().is_success());
    assert_eq!(
        host.sim.read_disk(NS_512, 100 * 512, len),
        data[start..start + len].to_vec()
    );

    // Same shape, but PRP1 not dword aligned.
    sqe.prp1 += 2;
    assert_eq!(
        q.run(sqe).status(),
        generic_err(generic::INVALID_PRP_OFFSET)
    );
}

#[test]
fn phase_tag_flips_when_the_completion_queue_wraps() {
    let mut host = Host::start(SimConfig::default());
    let mut q = host.create_pair(1, 4, 4);
    let buf = DmaBuffer::allocate(&host.dma, 512).unwrap();
    let mut phases = Vec::new();
    let mut heads = Vec::new();
    for _ in 0..10 {
        let cqe = q.run(with_prp(command::read(NS_512, 0, 1), &buf));
        assert!(cqe.status().is_success());
        phases.push(cqe.phase());
        heads.push(cqe.sq_head);
    }
    let expected: Vec<bool> = (0..10).map(|i| (i / 4) % 2 == 0).collect();
    assert_eq!(phases, expected);
    assert_eq!(heads, vec![1, 2, 3, 0, 1, 2, 3, 0, 1, 2]);
}

#[test]
fn full_completion_queue_holds_completions_until_the_head_moves() {
    let mut host = Host::start(SimConfig::default());
    // CQ of 4 entries holds 3 unreaped completions; the SQ takes 6 commands.
    let mut q = host.create_pair(1, 8, 4);
    let buf = DmaBuffer::allocate(&host.dma, 512).unwrap();
    let cids: Vec<u16> = (0..6)
        .map(|_| q.push(with_prp(command::read(NS_512, 0, 1), &buf)))
        .collect();
    q.ring();
    wait_for("3 completions", || {
        host.sim.stats().completions_posted >= 3 + 2
    } /* admin */);
    std::thread::sleep(Duration::from_millis(10));
    assert_eq!(
        host.sim.stats().completions_posted,
        5,
        "must not overwrite unreaped entries"
    );
    let mut seen = Vec::new();
    while seen.len() < 6 {
        seen.push(q.wait().cid);
    }
    assert_eq!(seen, cids);
}

#[test]
fn unmapped_prp_is_a_data_transfer_error() {
    let mut host = Host::start(SimConfig::default());
    let mut q = host.create_pair(1, 4, 4);
    let mut sqe = command::read(NS_512, 0, 1);
    sqe.prp1 = IOVA_BASE - PAGE_SIZE as u64; // below every mapping
    let status = q.run(sqe).status();
    assert_eq!(
        (status.sct(), status.sc()),
        (StatusCodeType::Generic, generic::DATA_TRANSFER_ERROR)
    );
    // A host pointer is not an IOVA either.
    let buf = DmaBuffer::allocate(&host.dma, 512).unwrap();
    sqe.prp1 = buf.as_ptr() as u64;
    assert_eq!(q.run(sqe).status().sc(), generic::DATA_TRANSFER_ERROR);
    assert_eq!(host.sim.stats().dma_errors, 2);
}

#[test]
fn lba_range_mdts_namespace_and_opcode_checks() {
    let mut host = Host::start(SimConfig::default());
    let mut q = host.create_pair(1, 8, 8);
    let buf = DmaBuffer::allocate(&host.dma, 4096).unwrap();
    let blocks = 16 << 20 >> 12;
    let cqe = q.run(with_prp(command::read(NS_4K, blocks, 1), &buf));
    assert_eq!(cqe.status(), generic_err(generic::LBA_OUT_OF_RANGE));
    let cqe = q.run(with_prp(command::write(NS_4K, blocks - 1, 2, false), &buf));
    assert_eq!(cqe.status(), generic_err(generic::LBA_OUT_OF_RANGE));
    // MDTS 5 = 128 KiB: 33 blocks of 4 KiB is too much.
    let cqe = q.run(with_prp(command::read(NS_4K, 0, 33), &buf));
    assert_eq!(cqe.status(), generic_err(generic::INVALID_FIELD));
    let cqe = q.run(with_prp(command::read(9, 0, 1), &buf));
    assert_eq!(
        cqe.status(),
        generic_err(generic::INVALID_NAMESPACE_OR_FORMAT)
    );
    assert_eq!(
        q.run(SubmissionEntry::new(0x7e)).status(),
        generic_err(generic::INVALID_OPCODE)
    );
    assert!(q.run(command::flush(u32::MAX)).status().is_success());
    assert_eq!(host.sim.stats().invalid_io, 1);
}

#[test]
fn write_zeroes_dsm_and_compare() {
    let mut host = Host::start(SimConfig::default());
    let mut q = host.create_pair(1, 8, 8);
    host.sim.write_disk(NS_512, 0, &[0xaa; 8 * 512]);
    assert!(q
        .run(command::write_zeroes(NS_512, 1, 2, false, false))
        .status()
        .is_success());
    let disk = host.sim.read_disk(NS_512, 0, 8 * 512);
    assert!(disk[..512].iter().all(|&b| b == 0xaa));
    assert!(disk[512..1536].iter().all(|&b| b == 0));
    assert!(disk[1536..].iter().all(|&b| b == 0xaa));

    // Deallocate LBA 5..7 and LBA 0 (two ranges).
    let mut ranges = DmaBuffer::allocate(&host.dma, 32).unwrap();
    ranges[..16].copy_from_slice(&nvme_spec::queue::DsmRange::new(5, 2).to_bytes());
    ranges[16..].copy_from_slice(&nvme_spec::queue::DsmRange::new(0, 1).to_bytes());
    let mut sqe = command::dataset_management(NS_512, 2, true);
    sqe.prp1 = ranges.iova().0;
    assert!(q.run(sqe).status().is_success());
    let disk = host.sim.read_disk(NS_512, 0, 8 * 512);
    assert!(disk[..512].iter().all(|&b| b == 0));
    assert!(disk[1536..2560].iter().all(|&b| b == 0xaa));
    assert!(disk[2560..3584].iter().all(|&b| b == 0));

    let mut buf = DmaBuffer::allocate(&host.dma, 512).unwrap();
    buf.fill(0xaa);
    assert!(q
        .run(with_prp(command::compare(NS_512, 3, 1), &buf))
        .status()
        .is_success());
    let status = q
        .run(with_prp(command::compare(NS_512, 0, 1), &buf))
        .status();
    assert_eq!(
        (status.sct(), status.sc()),
        (StatusCodeType::MediaDataIntegrity, media::COMPARE_FAILURE)
    );
}

#[test]
fn shadow_doorbells_replace_mmio_writes() {
    let mut host = Host::start(SimConfig::default());
    // The queue pair is created first: once Doorbell Buffer Config completes, the shadow
    // entries are authoritative for every queue, and this host rings the admin SQ by MMIO only.
    // 3 completions fit in the 8-entry CQ, whose shadow head stays 0.
    let mut q = host.create_pair(1, 8, 8);
    let shadow = DmaRegion::allocate(&host.dma, PAGE_SIZE).unwrap();
    let event_idx = DmaRegion::allocate(&host.dma, PAGE_SIZE).unwrap();
    let cqe = host.admin.run(command::doorbell_buffer_config(
        shadow.iova().0,
        event_idx.iova().0,
    ));
    assert!(cqe.status().is_success(), "{}", cqe.status());
    let buf = DmaBuffer::allocate(&host.dma, 512).unwrap();
    let mmio_before = host.sim.stats().sq_doorbell_writes;
    let sq_entry = (sq_tail_doorbell(1, host.stride) - sq_tail_doorbell(0, host.stride)) / 4;
    for i in 1..=3u32 {
        let cid = q.push(with_prp(command::read(NS_512, 0, 1), &buf));
        fence(Ordering::Release);
        // SAFETY: the shadow page is ours; entry `sq_entry` is SQ 1's tail (dword index).
        unsafe {
            shadow
                .as_ptr()
                .as_ptr()
                .cast::<u32>()
                .add(sq_entry)
                .write_volatile(q.tail)
        };
        let cqe = q.wait();
        assert_eq!((cqe.cid, cqe.status()), (cid, Status::SUCCESS));
        let read_event = || {
            // SAFETY: the EventIdx page is ours; the device writes it, so read volatilely.
            unsafe {
                event_idx
                    .as_ptr()
                    .as_ptr()
                    .cast::<u32>()
                    .add(sq_entry)
                    .read_volatile()
            }
        };
        wait_for("EventIdx", || read_event() == i);
    }
    let stats = host.sim.stats();
    assert_eq!(
        stats.sq_doorbell_writes, mmio_before,
        "no MMIO tail writes were made"
    );
    assert_eq!(stats.shadow_doorbell_updates, 3);
}

#[test]
fn shutdown_and_reset() {
    let mut host = Host::start(SimConfig::default());
    let _q = host.create_pair(1, 4, 4);
    host.mmio
        .write32(CC, cc_enabled().with_shn(ShutdownNotification::Normal).0);
    wait_for("SHST complete", || {
        matches!(host.csts().shst(), ShutdownStatus::Complete)
    });
    host.mmio.write32(CC, cc_enabled().with_en(false).0);
    wait_for("reset", || {
        !host.csts().rdy() && matches!(host.csts().shst(), ShutdownStatus::Normal)
    });
    // After re-enabling, the old I/O queues are gone.
    host.admin = Queue::new(
        &host.dma,
        &host.mmio,
        0,
        ADMIN_ENTRIES,
        ADMIN_ENTRIES,
        host.stride,
    );
    host.mmio.write64(ASQ, host.admin.sq.iova().0);
    host.mmio.write64(ACQ, host.admin.cq.iova().0);
    host.mmio.write32(CC, cc_enabled().0);
    wait_for("RDY", || host.csts().rdy());
    assert_eq!(
        host.admin.run(command::delete_io_sq(1)).status(),
        cs_err(command_specific::INVALID_QUEUE_IDENTIFIER)
    );
}

#[test]
fn never_ready_and_fatal_faults() {
    let host = Host::configure(SimConfig::default());
    host.sim.faults().never_ready();
    host.mmio.write32(CC, cc_enabled().0);
    std::thread::sleep(Duration::from_millis(20));
    assert!(!host.csts().rdy());

    let mut host = Host::start(SimConfig::default());
    host.sim.faults().set_fatal();
    assert!(host.csts().cfs());
    let cid = host
        .admin
        .submit(command::get_features(feature::ARBITRATION));
    host.admin.expect_none(Duration::from_millis(20));
    // A reset clears the fault; the controller comes back.
    host.mmio.write32(CC, cc_enabled().with_en(false).0);
    wait_for("CFS cleared", || !host.csts().cfs() && !host.csts().rdy());
    let _ = cid;
}

#[test]
fn completion_faults() {
    let mut host = Host::start(SimConfig::default());
    let mut q = host.create_pair(1, 8, 8);
    let buf = DmaBuffer::allocate(&host.dma, 512).unwrap();
    let read = with_prp(command::read(NS_512, 0, 1), &buf);

    host.sim.faults().corrupt_next_cid(1);
    let cid = q.submit(read);
    assert_eq!(q.wait().cid, cid ^ CORRUPT_CID_MASK);

    host.sim.faults().duplicate_next_completion();
    let cid = q.submit(read);
    assert_eq!(q.wait().cid, cid);
    assert_eq!(q.wait().cid, cid);

    host.sim.faults().wrong_sqid_next();
    q.submit(read);
    assert_ne!(q.wait().sq_id, 1);

    host.sim.faults().drop_next_completions(1);
    q.submit(read);
    wait_for("the dropped command to execute", || {
        host.sim.stats().reads == 4
    });
    q.expect_none(Duration::from_millis(20));

    let injected = Status::new(
        StatusCodeType::MediaDataIntegrity.raw(),
        media::UNRECOVERED_READ_ERROR,
        false,
    );
    host.sim.faults().fail_next_io(injected, 2);
    assert_eq!(q.run(read).status(), injected);
    assert_eq!(q.run(read).status(), injected);
    assert!(q.run(read).status().is_success());

    host.sim
        .faults()
        .delay_completions(Duration::from_millis(30));
    let started = Instant::now();
    assert!(q.run(read).status().is_success());
    assert!(started.elapsed() >= Duration::from_millis(30));
    host.sim.faults().delay_completions(Duration::ZERO);
}

#[test]
fn null_io_skips_copies_but_checks_prps() {
    let config = SimConfig {
        null_io: true,
        namespaces: vec![SimNamespace {
            nsid: 1,
            block_size: 512,
            blocks: 64,
            ..SimNamespace::default()
        }],
        ..SimConfig::default()
    };
    let mut host = Host::start(config);
    let mut q = host.create_pair(1, 4, 4);
    let mut buf = DmaBuffer::allocate(&host.dma, 512).unwrap();
    buf.fill(0x5a);
    assert!(q
        .run(with_prp(command::write(1, 0, 1, false), &buf))
        .status()
        .is_success());
    assert!(
        host.sim.read_disk(1, 0, 512).iter().all(|&b| b == 0),
        "null I/O must not store data"
    );
    let mut sqe = command::read(1, 0, 1);
    sqe.prp1 = 0x1000;
    assert_eq!(q.run(sqe).status().sc(), generic::DATA_TRANSFER_ERROR);
}

#[test]
fn dma_mappings_are_removed_when_buffers_drop() {
    let host = Host::start(SimConfig::default());
    let before = host.sim.sim_dma().mapping_count();
    let buf = DmaBuffer::allocate(&host.dma, 3 * PAGE_SIZE).unwrap();
    assert_eq!(host.sim.sim_dma().mapping_count(), before + 1);
    assert!(buf.iova().0 >= IOVA_BASE);
    drop(buf);
    assert_eq!(host.sim.sim_dma().mapping_count(), before);
}
