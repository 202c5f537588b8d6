//! Issue 8, "safety under failure": one test per hazard, named after the item it proves
//! (`docs/reliability.md` maps each to the behaviour). Each runs the driver against the
//! in-process emulator with the fault that reproduces the hazard; each failed on the code
//! before the fix.

use nvme_driver::IoQueue;
use nvme_driver::WriteFlags;
use std::time::{Duration, Instant};

use nvme_driver::spec::command;
use nvme_driver::spec::regs::{Cc, CC};
use nvme_driver::{
    Controller, ControllerOptions, DmaBuffer, Error, QueuePair, QueuePairOptions, TimeoutAction,
    Transport,
};
use nvme_sim::{ExecutionDelay, SimConfig, SimController, SimNamespace};

mod common;

/// The 512-byte namespace of the default emulator.
const NS: u32 = 1;
const BLOCK: usize = 512;
/// Three pages: the data pointer needs a PRP list (in the request slot's page).
const LIST_BYTES: usize = 3 * 4096;
const LIST_BLOCKS: u32 = (LIST_BYTES / BLOCK) as u32;

/// Timeouts abort but never escalate to a reset here (these tests are about what a late
/// device may touch; the escalation is tested in recovery.rs and in item 2 below).
fn options() -> ControllerOptions {
    ControllerOptions {
        admin_timeout: Duration::from_millis(500),
        timeout_action: TimeoutAction::Abort,
        ..ControllerOptions::default()
    }
}

/// Emulator + controller; `function_control` also hands the driver the bus-master switch.
fn start_with(config: SimConfig, function_control: bool) -> (SimController, Controller) {
    start_with_options(config, function_control, options())
}

fn start_with_options(
    config: SimConfig,
    function_control: bool,
    options: ControllerOptions,
) -> (SimController, Controller) {
    common::start_sim(config, options, function_control)
}

fn start() -> (SimController, Controller) {
    start_with(SimConfig::default(), true)
}

fn qp(ctrl: &Controller, depth: u32, timeout: Duration) -> QueuePair {
    ctrl.create_queue_pair(QueuePairOptions {
        depth,
        timeout,
        ..Default::default()
    })
    .expect("queue pair")
}

fn filled(ctrl: &Controller, len: usize, byte: u8) -> DmaBuffer {
    let mut b = ctrl.alloc_buffer(len).unwrap();
    b.fill(byte);
    b
}

fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Asserts that every byte of `bytes` is `value` (without dumping kilobytes on failure).
#[track_caller]
fn assert_all(bytes: &[u8], value: u8, what: &str) {
    if let Some(i) = bytes.iter().position(|&b| b != value) {
        panic!(
            "{what}: byte {i} of {} is {:#04x}, expected {value:#04x}",
            bytes.len(),
            bytes[i]
        );
    }
}

fn cc_enabled(sim: &SimController) -> bool {
    Cc(sim.mmio().read32(CC)).en()
}

// ----- item 1: timed-out commands keep their slot ----------------------------------------

/// A write times out while the device has fetched it but not yet run it. The next write must
/// not get the same slot: if it did, it would overwrite the slot's PRP-list page and the late
/// device would write the *new* data to the *old* LBAs.
#[test]
fn item1_timed_out_command_keeps_slot_and_prp_page_until_late_completion() {
    let (sim, ctrl) = start();
    let ns = ctrl.namespace(NS).unwrap();
    let mut q = qp(&ctrl, 4, Duration::from_millis(150));
    // Not abortable: the Abort the driver sends is refused, the command runs 700 ms late.
    sim.faults().delay_execution_with(
        1,
        ExecutionDelay::new(Duration::from_millis(700)).not_abortable(),
    );
    let f = q
        .write(
            &ns,
            0,
            LIST_BLOCKS,
            filled(&ctrl, LIST_BYTES, 0xaa),
            WriteFlags::NONE,
        )
        .unwrap_err();
    assert!(matches!(f.error, Error::Timeout { .. }), "{}", f.error);
    assert!(f.buffer.is_none(), "the device may still read the buffer");
    assert_eq!(q.retired(), 1);
    assert_eq!(q.in_flight(), 1, "the timed-out command's slot is not free");

    // The next request (same shape: it needs a PRP list too) goes to another slot.
    q.write(
        &ns,
        100,
        LIST_BLOCKS,
        filled(&ctrl, LIST_BYTES, 0x55),
        WriteFlags::NONE,
    )
    .unwrap();

    // The late command runs with its own PRP list and data, then completes: the slot is
    // released only then.
    wait_for("the late completion", || {
        q.poll(|_| panic!("a late completion is not delivered twice"));
        q.retired() == 0
    });
    assert_eq!(q.stats().late_completions, 1);
    assert_eq!(q.in_flight(), 0);
    assert_all(&sim.read_disk(NS, 0, LIST_BYTES), 0xaa, "medium");
    assert_all(
        &sim.read_disk(NS, 100 * BLOCK as u64, LIST_BYTES),
        0x55,
        "medium",
    );
    // All slots usable again.
    for lba in 0..3 {
        q.submit_read(&ns, lba, 1, ctrl.alloc_buffer(BLOCK).unwrap(), lba)
            .unwrap();
    }
}

/// When the Abort succeeds, the controller completes the command with Command Abort
/// Requested; that completion releases the retired slot, and the command never ran.
#[test]
fn item1_successful_abort_releases_the_slot_and_the_command_never_runs() {
    let (sim, ctrl) = start();
    let ns = ctrl.namespace(NS).unwrap();
    let mut q = qp(&ctrl, 4, Duration::from_millis(150));
    sim.faults().delay_execution(1, Duration::from_secs(3600));
    let f = q
        .write(&ns, 8, 1, filled(&ctrl, BLOCK, 0xee), WriteFlags::NONE)
        .unwrap_err();
    assert!(matches!(f.error, Error::Timeout { .. }), "{}", f.error);
    wait_for("the aborted command's completion", || {
        q.poll(|_| {});
        q.retired() == 0
    });
    assert_eq!(q.stats().late_completions, 1);
    assert_all(&sim.read_disk(NS, 8 * BLOCK as u64, BLOCK), 0, "medium");
    assert_eq!(sim.stats().deferred_executed, 0);
    let aborts = ctrl.abort_stats();
    assert_eq!(
        (aborts.sent, aborts.aborted, aborts.resets),
        (1, 1, 0),
        "{aborts:?}"
    );
}

// ----- item 2: teardown after a failure --------------------------------------------------

/// A failed controller with a command still pending: dropping the queue pair must stop the
/// controller (CC.EN=0, bus master off) before freeing rings and buffers; the late command
/// then never runs.
#[test]
fn item2_teardown_of_failed_controller_disables_it_before_freeing() {
    let (sim, ctrl) = start();
    let ns = ctrl.namespace(NS).unwrap();
    // The fatal status is noticed at the next timeout-clock tick (a third of the timeout).
    let mut q = qp(&ctrl, 8, Duration::from_millis(600));
    sim.faults().delay_execution_with(
        1,
        ExecutionDelay::new(Duration::from_millis(400))
            .without_completion()
            .not_abortable(),
    );
    q.submit_write(&ns, 16, 1, filled(&ctrl, BLOCK, 0x77), WriteFlags::NONE, 1)
        .unwrap();
    wait_for("the command to be deferred", || {
        sim.stats().commands_deferred == 1
    });
    sim.faults().set_fatal();
    let mut err = None;
    wait_for("the fatal status to fail the request", || {
        q.poll(|c| err = c.result.err());
        err.is_some()
    });
    assert!(
        matches!(err, Some(Error::ControllerFatal { .. })),
        "{err:?}"
    );
    assert!(ctrl.is_failed());
    drop(q);
    assert!(!cc_enabled(&sim), "controller disabled");
    assert!(!sim.bus_master_enabled(), "bus mastering cleared");
    drop(ctrl);
    assert_eq!(sim.sim_dma().mapping_count(), 0, "everything was freed");
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(
        sim.stats().deferred_executed,
        0,
        "the late command never ran"
    );
    assert_all(&sim.read_disk(NS, 16 * BLOCK as u64, BLOCK), 0, "medium");
}

/// The emulator and controller of the unstoppable-controller cases: CAP.TO of 500 ms (so a
/// controller that ignores CC.EN=0 is given up on quickly), the default timeout policy
/// (abort, then reset), without shadow doorbells.
fn start_unstoppable_setup() -> (SimController, Controller) {
    start_with_options(
        SimConfig {
            timeout_500ms: 1,
            ..SimConfig::default()
        },
        false,
        ControllerOptions {
            timeout_action: TimeoutAction::AbortThenReset,
            ..options()
        },
    )
}

/// A command times out, the Abort for it times out too (the controller is declared failed),
/// and the controller ignores CC.EN=0 (RDY stays 1) and keeps running commands: nothing can be
/// confirmed, so every DMA mapping of the controller leaks (stays mapped, its IOVA never
/// reused) instead of being freed while the device still runs the command.
#[test]
fn item2_unstoppable_controller_leaks_its_memory() {
    let (sim, ctrl) = start_unstoppable_setup();
    let ns = ctrl.namespace(NS).unwrap();
    let mut q = qp(&ctrl, 8, Duration::from_millis(300));
    let mapped_before_io = sim.sim_dma().mapping_count();
    sim.faults().delay_execution_with(
        1,
        ExecutionDelay::new(Duration::from_millis(2500))
            .without_completion()
            .not_abortable(),
    );
    q.submit_write(&ns, 24, 1, filled(&ctrl, BLOCK, 0x99), WriteFlags::NONE, 1)
        .unwrap();
    wait_for("the command to be deferred", || {
        sim.stats().commands_deferred == 1
    });
    // The Abort the driver sends on timeout gets no completion, so a timeout later the
    // driver resets the controller, which ignores CC.EN=0: it cannot be stopped.
    sim.faults().drop_next_completions(1);
    sim.faults().stuck_on_disable();
    let mut err = None;
    wait_for("the timeout to fail the request", || {
        q.poll(|c| err = c.result.err());
        err.is_some()
    });
    assert!(matches!(err, Some(Error::Timeout { .. })), "{err:?}");
    wait_for(
        "the abort-then-reset escalation to give up on the controller",
        || {
            q.poll(|_| {});
            ctrl.is_failed()
        },
    );
    assert_eq!(ctrl.abort_stats().resets, 1);
    drop(q);
    drop(ctrl);
    // Rings, slot pages, admin queue and the in-flight buffer: all still mapped.
    assert_eq!(
        sim.sim_dma().mapping_count(),
        mapped_before_io + 1,
        "no mapping of an unstoppable controller is removed"
    );
    // The device really does run the command (late), from memory that is still its own.
    wait_for("the late command", || sim.stats().deferred_executed == 1);
    assert_all(&sim.read_disk(NS, 24 * BLOCK as u64, BLOCK), 0x99, "medium");
}

/// A healthy controller dropped: disabled and bus mastering off before its memory goes.
#[test]
fn item2_controller_drop_disables_and_clears_bus_master() {
    let (sim, ctrl) = start();
    let ns = ctrl.namespace(NS).unwrap();
    let mut q = qp(&ctrl, 8, Duration::from_secs(5));
    q.write(&ns, 0, 1, filled(&ctrl, BLOCK, 1), WriteFlags::NONE)
        .unwrap();
    drop(q);
    assert!(cc_enabled(&sim));
    drop(ctrl);
    assert!(!cc_enabled(&sim));
    assert!(!sim.bus_master_enabled());
    assert_eq!(sim.sim_dma().mapping_count(), 0);
}

/// Create I/O CQ times out (the controller runs it but never answers): the controller is
/// stopped before the new rings are freed on the error path.
#[test]
fn item2_queue_creation_timeout_stops_controller_before_freeing_rings() {
    let (sim, ctrl) = start();
    sim.faults().drop_next_completions(1);
    let e = ctrl
        .create_queue_pair(QueuePairOptions::default())
        .err()
        .expect("creation must fail");
    assert!(matches!(e, Error::Timeout { .. }), "{e}");
    assert!(ctrl.is_failed());
    assert!(!cc_enabled(&sim));
    assert!(!sim.bus_master_enabled());
}

// ----- item 3: buffers of another controller ---------------------------------------------

#[test]
fn item3_buffer_of_another_controller_is_refused() {
    let (_sim_a, a) = start();
    let (sim_b, b) = start();
    let ns = a.namespace(NS).unwrap();
    let mut q = qp(&a, 8, Duration::from_secs(5));
    let foreign = filled(&b, BLOCK, 0x42);
    let f = q.write(&ns, 0, 1, foreign, WriteFlags::NONE).unwrap_err();
    assert!(
        matches!(f.error, Error::ForeignBuffer { .. }),
        "{}",
        f.error
    );
    assert!(f.error.to_string().contains("DMA domain"), "{}", f.error);
    let back = f.buffer.expect("a refused buffer comes back");
    assert!(back.iter().all(|&x| x == 0x42));
    // Reads too, and buffers allocated from the raw emulator mapper of another controller.
    let raw = DmaBuffer::allocate(&sim_b.dma(), BLOCK).unwrap();
    let f = q.read(&ns, 0, 1, raw).unwrap_err();
    assert!(matches!(f.error, Error::ForeignBuffer { .. }));
    // Its own buffers still work.
    q.write(&ns, 0, 1, filled(&a, BLOCK, 1), WriteFlags::NONE)
        .unwrap();
}

/// Issue 19 item 3: a buffer allocated straight from the platform mapper under the retirement
/// guard (here the emulator's `SimDma`, reachable from safe code as `sim.dma()` or the
/// transport's `dma`) does not go through the guard, so when the controller cannot be stopped
/// its mapping would be removed and its memory freed while the device still runs the command
/// that names it. The controller must refuse it up front, with the buffer given back whole.
#[test]
fn item3_raw_mapper_buffer_is_refused_so_retirement_cannot_free_it() {
    let (sim, ctrl) = start_unstoppable_setup();
    let ns = ctrl.namespace(NS).unwrap();
    let mut q = qp(&ctrl, 8, Duration::from_millis(300));
    // A buffer allocated through the controller (the guard) is accepted.
    q.write(&ns, 24, 1, filled(&ctrl, BLOCK, 0x11), WriteFlags::NONE)
        .unwrap();
    let mut raw = DmaBuffer::allocate(&sim.dma(), BLOCK).unwrap();
    raw.fill(0x99);
    sim.faults().delay_execution_with(
        1,
        ExecutionDelay::new(Duration::from_millis(2500))
            .without_completion()
            .not_abortable(),
    );
    let f = q
        .submit_write(&ns, 24, 1, raw, WriteFlags::NONE, 1)
        .expect_err(
            "a buffer of the raw emulator mapper was accepted: it bypasses the retirement \
             guard and would be freed while an unstoppable device still writes it",
        );
    assert!(
        matches!(f.error, Error::ForeignBuffer { .. }),
        "{}",
        f.error
    );
    let back = f.buffer.expect("a refused buffer comes back");
    assert_all(&back, 0x99, "the refused buffer");
    // Reads are refused too.
    let f = q.read(&ns, 24, 1, back).unwrap_err();
    assert!(
        matches!(f.error, Error::ForeignBuffer { .. }),
        "{}",
        f.error
    );
    assert_eq!(
        sim.stats().commands_deferred,
        0,
        "nothing reached the device"
    );
    assert_all(&sim.read_disk(NS, 24 * BLOCK as u64, BLOCK), 0x11, "medium");
}

// ----- item 4: raw passthrough -------------------------------------------------------------

/// A raw write without a buffer but with a caller-set PRP1: the driver clears the data
/// pointer, so the device cannot read the memory PRP1 named.
#[test]
fn item4_raw_command_without_buffer_gets_no_data_pointer() {
    let (sim, ctrl) = start();
    let mut q = qp(&ctrl, 8, Duration::from_secs(5));
    let secret = filled(&ctrl, BLOCK, 0x5e);
    let mut sqe = command::write(NS, 40, 1, false);
    sqe.prp1 = secret.iova().0;
    // SAFETY: the command names one block; with no buffer the driver must move no data.
    let r = unsafe { q.execute_raw(sqe, None) };
    let f = r.expect_err("a write without a data pointer fails");
    assert!(f.error.status().is_some(), "{}", f.error);
    assert_all(&sim.read_disk(NS, 40 * BLOCK as u64, BLOCK), 0, "medium");
    drop(secret);
}

// ----- item 5: metadata formats ------------------------------------------------------------

#[test]
fn item5_plain_io_on_metadata_namespaces_is_refused() {
    let config = SimConfig {
        namespaces: vec![
            SimNamespace {
                nsid: 1,
                ..SimNamespace::default()
            },
            SimNamespace {
                nsid: 2,
                metadata_size: 8,
                extended: true,
                ..SimNamespace::default()
            },
            SimNamespace {
                nsid: 3,
                block_size: 4096,
                blocks: 1024,
                metadata_size: 16,
                ..SimNamespace::default()
            },
            SimNamespace {
                nsid: 4,
                metadata_size: 8,
                protection: 1,
                ..SimNamespace::default()
            },
        ],
        ..SimConfig::default()
    };
    let (sim, ctrl) = start_with(config, true);
    // Accepted since issue 21 (metadata and PI): plain data commands are refused by name
    // before anything reaches the device, because the device would move more bytes than the
    // buffer holds (or DMA metadata through a null MPTR).
    let usable: Vec<u32> = ctrl.namespaces().iter().map(|n| n.nsid()).collect();
    assert_eq!(usable, vec![1, 2, 3, 4]);
    assert!(ctrl.unsupported_namespaces().is_empty());
    let mut q = qp(&ctrl, 8, Duration::from_secs(5));
    let before = sim.stats();
    for (nsid, words) in [
        (2, &["512+8 extended", "extended LBA"][..]),
        (3, &["4096+16 separate", "separate buffer"][..]),
        (4, &["512+8 separate, PI type 1"][..]),
    ] {
        let ns = ctrl.namespace(nsid).unwrap();
        let buf = ctrl.alloc_buffer(4096).unwrap();
        let f = q.read(&ns, 0, 1, buf).unwrap_err();
        let msg = f.error.to_string();
        assert!(matches!(f.error, Error::MetadataMismatch { .. }), "{msg}");
        assert!(msg.contains(&format!("namespace {nsid}")), "{msg}");
        for w in words {
            assert!(msg.contains(w), "{msg}");
        }
        assert!(f.buffer.is_some(), "the buffer comes back");
    }
    assert_eq!(
        sim.stats().reads,
        before.reads,
        "nothing reached the device"
    );
}

// ----- item 6: device or caller values that used to panic ----------------------------------

#[test]
fn item6_mqes_zero_is_an_error_not_a_panic() {
    let _ = env_logger::builder().is_test(true).try_init();
    let sim = SimController::start(SimConfig {
        mqes: 0,
        ..SimConfig::default()
    });
    let e = Controller::new(Transport::new(sim.mmio(), sim.dma(), "sim"), options())
        .expect_err("MQES=0 is refused");
    assert!(matches!(e, Error::Unsupported { .. }), "{e}");
    assert!(e.to_string().contains("MQES"), "{e}");
}

#[test]
fn item6_doorbells_beyond_bar0_are_not_used() {
    let _ = env_logger::builder().is_test(true).try_init();
    // Stride 4 KiB: in the 16 KiB BAR only the admin doorbells fit.
    let sim = SimController::start(SimConfig {
        dstrd: 10,
        ..SimConfig::default()
    });
    let ctrl = Controller::new(Transport::new(sim.mmio(), sim.dma(), "sim"), options())
        .expect("the admin queue still works");
    assert_eq!(ctrl.io_queue_pairs(), 0);
    let e = ctrl
        .create_queue_pair(QueuePairOptions::default())
        .err()
        .unwrap();
    assert!(matches!(e, Error::NoQueuesLeft { .. }), "{e}");
    // Stride 16 KiB: not even the admin doorbells fit.
    let sim = SimController::start(SimConfig {
        dstrd: 12,
        ..SimConfig::default()
    });
    let e = Controller::new(Transport::new(sim.mmio(), sim.dma(), "sim"), options())
        .expect_err("refused");
    assert!(matches!(e, Error::Unsupported { .. }), "{e}");
}

/// A depth the controller allows but the driver's slot table does not: refused before any
/// queue is created, and the queue id is not leaked.
#[test]
fn item6_queue_depth_beyond_the_slot_limit_is_refused_before_creation() {
    let (sim, ctrl) = start_with(
        SimConfig {
            mqes: u16::MAX,
            io_queue_pairs: 1,
            ..SimConfig::default()
        },
        true,
    );
    // Let the emulator fetch the Asynchronous Event Requests posted at bring-up first.
    std::thread::sleep(Duration::from_millis(50));
    let admin_before = sim.stats().admin_commands;
    for depth in [5000, 4097, 65536, 1] {
        let e = ctrl
            .create_queue_pair(QueuePairOptions {
                depth,
                ..Default::default()
            })
            .err()
            .expect("refused");
        assert!(
            matches!(e, Error::QueueDepth { max: 4096, .. }),
            "{depth}: {e}"
        );
    }
    assert_eq!(sim.stats().admin_commands, admin_before, "no command sent");
    // The single queue id is still free.
    let q = qp(&ctrl, 4096, Duration::from_secs(5));
    assert_eq!(q.qid(), 1);
}

// ----- item 9: SQ head -------------------------------------------------------------------

/// A completion whose SQ head is in range but ahead of what was submitted is ignored and
/// counted; the ring keeps working at full depth with correct data.
#[test]
fn item9_sq_head_outside_the_submitted_window_is_ignored() {
    let (sim, ctrl) = start();
    let ns = ctrl.namespace(NS).unwrap();
    let mut q = qp(&ctrl, 8, Duration::from_secs(5));
    sim.faults().bogus_sq_head(2);
    q.write(&ns, 0, 1, filled(&ctrl, BLOCK, 3), WriteFlags::NONE)
        .unwrap();
    q.write(&ns, 1, 1, filled(&ctrl, BLOCK, 4), WriteFlags::NONE)
        .unwrap();
    assert_eq!(q.stats().bad_sq_heads, 2);
    // The ignored heads leave the driver's view of free entries conservative (the ring looks
    // fuller than it is) until the next valid head, never optimistic.
    q.write(&ns, 2, 1, filled(&ctrl, BLOCK, 5), WriteFlags::NONE)
        .unwrap();
    for round in 0..4u8 {
        for i in 0..7u64 {
            q.submit_write(
                &ns,
                10 + i,
                1,
                filled(&ctrl, BLOCK, round * 16 + i as u8),
                WriteFlags::NONE,
                i,
            )
            .unwrap();
        }
        let mut done = 0;
        wait_for("a full queue of writes", || {
            done += q.poll(|c| assert!(c.result.is_ok()));
            done == 7
        });
    }
    for i in 0..7u64 {
        assert_all(
            &sim.read_disk(NS, (10 + i) * BLOCK as u64, BLOCK),
            48 + i as u8,
            "medium",
        );
    }
}

/// Eight commands stalled at once past their timeout: each is reported, aborted, and its
/// slot comes back, so the pair's whole depth is usable again.
#[test]
fn many_timed_out_commands_all_release_their_slots() {
    let (sim, ctrl) = start();
    let ns = ctrl.namespace(NS).unwrap();
    let mut q = qp(&ctrl, 17, Duration::from_millis(300));
    sim.faults().delay_execution(8, Duration::from_secs(2));
    for i in 0..16u64 {
        q.submit_write(
            &ns,
            i,
            1,
            filled(&ctrl, BLOCK, i as u8),
            WriteFlags::NONE,
            i,
        )
        .unwrap();
    }
    let (mut timeouts, mut ok, mut counted) = (0, 0, 0);
    wait_for("every command to finish", || {
        counted += q.poll(|c| match c.result {
            Ok(_) => ok += 1,
            Err(Error::Timeout { .. }) => timeouts += 1,
            Err(e) => panic!("{e}"),
        });
        ok + timeouts == 16
    });
    assert_eq!((ok, timeouts), (8, 8));
    assert_eq!(
        counted, 16,
        "poll's return counts the timed-out requests too"
    );
    wait_for("the retired slots to come back", || {
        q.poll(|_| {});
        q.retired() == 0
    });
    q.plug(16).expect("the whole depth is free again");
    q.unplug();
    let aborts = ctrl.abort_stats();
    assert_eq!(aborts.sent, 8, "{aborts:?}");
}
