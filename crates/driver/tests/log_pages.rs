//! `Controller::smart_log` and `Controller::error_log` against the in-process emulated
//! controller (`nvme-sim`): the decoded values must match what the emulator did.

use nvme_driver::IoQueue;
use nvme_driver::WriteFlags;
use std::time::Duration;

use nvme_driver::spec::log::{CriticalWarning, NSID_BROADCAST};
use nvme_driver::spec::opcode::{admin, nvm};
use nvme_driver::spec::status::{generic, media};
use nvme_driver::spec::{SmartLog, Status, StatusCodeType};
use nvme_driver::{Controller, ControllerOptions, Error, QueuePair, QueuePairOptions};
use nvme_sim::{SimConfig, SimController, ERROR_LOG_ENTRIES, SIM_TEMPERATURE_K};

mod common;

/// Namespaces of the default emulator configuration.
const NS_512: u32 = 1;
const NS_4K: u32 = 2;

fn start() -> (SimController, Controller) {
    start_with(ControllerOptions::default())
}

fn start_with(options: ControllerOptions) -> (SimController, Controller) {
    common::start_sim(SimConfig::default(), options, false)
}

fn qp(ctrl: &Controller) -> QueuePair {
    ctrl.create_queue_pair(QueuePairOptions {
        depth: 8,
        timeout: Duration::from_secs(10),
        ..Default::default()
    })
    .expect("queue pair")
}

fn unrecovered_read_error() -> Status {
    Status::new(
        StatusCodeType::MediaDataIntegrity.raw(),
        media::UNRECOVERED_READ_ERROR,
        true,
    )
}

#[test]
fn fresh_controller_reports_a_healthy_idle_drive() {
    let (_sim, ctrl) = start();
    let log = ctrl.smart_log(NSID_BROADCAST).expect("SMART log");
    assert_eq!(log.critical_warning_flags(), CriticalWarning::empty());
    assert_eq!(log.temperature_kelvin(), SIM_TEMPERATURE_K);
    assert_eq!(log.temperature_sensor(1), Some(SIM_TEMPERATURE_K));
    assert_eq!(log.temperature_sensor(2), None);
    assert!(log.available_spare >= log.available_spare_threshold);
    assert_eq!(log.percentage_used, 0);
    assert_eq!(log.power_cycles, 1);
    assert_eq!(log.power_on_hours, 0);
    assert_eq!(
        (log.host_read_commands, log.host_write_commands),
        (0, 0),
        "bring-up does no I/O"
    );
    assert_eq!((log.data_units_read, log.data_units_written), (0, 0));
    assert_eq!((log.media_errors, log.error_log_entries), (0, 0));
    // NSID 0 also means "the controller".
    assert_eq!(ctrl.smart_log(0).unwrap(), log);
    assert!(ctrl.error_log(usize::MAX).unwrap().is_empty());
    assert_eq!(
        usize::from(ctrl.identify().elpe) + 1,
        ERROR_LOG_ENTRIES,
        "ELPE is 0-based"
    );
}

#[test]
fn smart_counts_host_commands_and_data_units() {
    let (sim, ctrl) = start();
    let mut q = qp(&ctrl);
    let ns4k = ctrl.namespace(NS_4K).unwrap();
    let ns512 = ctrl.namespace(NS_512).unwrap();
    // 5 reads of 32 x 4 KiB = 5 x 256 units of 512 bytes = 1280 units: 2 Data Units.
    const READS: u128 = 5;
    let mut buf = ctrl.alloc_buffer(32 * 4096).unwrap();
    for i in 0..READS as u64 {
        buf = q.read(&ns4k, i * 32, 32, buf).expect("read");
    }
    // 3 writes of one 512-byte block = 3 units: 1 Data Unit (rounded up).
    const WRITES: u128 = 3;
    for i in 0..WRITES as u64 {
        buf = q.write(&ns512, i, 1, buf, WriteFlags::NONE).expect("write");
    }
    let log = ctrl.smart_log(NSID_BROADCAST).unwrap();
    assert_eq!(log.host_read_commands, READS);
    assert_eq!(log.host_write_commands, WRITES);
    assert_eq!(log.data_units_read, SmartLog::data_units(5 * 256));
    assert_eq!(log.data_units_read, 2);
    assert_eq!(log.data_units_written, 1);
    let stats = sim.stats();
    assert_eq!(log.host_read_commands, u128::from(stats.reads));
    assert_eq!(log.host_write_commands, u128::from(stats.writes));
    assert_eq!(log.error_log_entries, 0);
}

#[test]
fn failed_io_lands_in_the_error_log_and_the_smart_counters() {
    let (sim, ctrl) = start();
    let mut q = qp(&ctrl);
    let ns = ctrl.namespace(NS_512).unwrap();
    sim.faults().fail_next_io(unrecovered_read_error(), 1);
    let buf = ctrl.alloc_buffer(4096).unwrap();
    let failure = q.read(&ns, 42, 2, buf).expect_err("injected media error");
    assert_eq!(failure.error.status(), Some(unrecovered_read_error()));

    let errors = ctrl.error_log(usize::MAX).unwrap();
    assert_eq!(errors.len(), 1, "{errors:?}");
    let e = errors[0];
    assert_eq!(e.error_count, 1);
    assert_eq!(e.sqid, q.qid());
    assert_ne!(e.cmdid, 0xFFFF);
    assert_eq!(e.status(), unrecovered_read_error());
    assert_eq!((e.lba, e.nsid, e.opcode), (42, NS_512, nvm::READ));
    assert_eq!(e.parameter_location(), None);

    let log = ctrl.smart_log(NSID_BROADCAST).unwrap();
    assert_eq!(log.media_errors, 1);
    assert_eq!(log.error_log_entries, 1);
    assert_eq!(log.host_read_commands, 1, "a failed read still counts");
    assert_eq!(log.data_units_read, 0, "but moved no data");
}

#[test]
fn per_namespace_smart_is_refused_and_logged() {
    let (_sim, ctrl) = start();
    // Identify LPA bit 0 is clear: only the controller-wide page exists.
    let err = ctrl.smart_log(NS_512).expect_err("no per-namespace SMART");
    assert!(matches!(err, Error::Command { .. }), "{err}");
    assert_eq!(
        err.status(),
        Some(Status::new(
            StatusCodeType::Generic.raw(),
            generic::INVALID_FIELD,
            true
        ))
    );
    let errors = ctrl.error_log(1).unwrap();
    assert_eq!(errors.len(), 1);
    let e = errors[0];
    assert_eq!((e.sqid, e.opcode, e.nsid), (0, admin::GET_LOG_PAGE, NS_512));
    assert_eq!(e.status().sc(), generic::INVALID_FIELD);
    // The controller still works.
    assert_eq!(ctrl.smart_log(NSID_BROADCAST).unwrap().error_log_entries, 1);
}

#[test]
fn error_log_is_newest_first_and_capped_by_elpe() {
    let (sim, ctrl) = start();
    let mut q = qp(&ctrl);
    let ns = ctrl.namespace(NS_4K).unwrap();
    let total = ERROR_LOG_ENTRIES as u64 + 4;
    let mut buf = ctrl.alloc_buffer(4096).unwrap();
    for lba in 0..total {
        sim.faults().fail_next_io(unrecovered_read_error(), 1);
        buf = q
            .read(&ns, lba, 1, buf)
            .expect_err("injected")
            .buffer
            .unwrap();
    }
    let all = ctrl.error_log(usize::MAX).unwrap();
    assert_eq!(all.len(), ERROR_LOG_ENTRIES, "ELPE + 1 entries kept");
    let counts: Vec<u64> = all.iter().map(|e| e.error_count).collect();
    let expected: Vec<u64> = (total - ERROR_LOG_ENTRIES as u64 + 1..=total)
        .rev()
        .collect();
    assert_eq!(counts, expected, "newest first");
    assert_eq!(all[0].lba, total - 1);
    let newest = ctrl.error_log(3).unwrap();
    assert_eq!(newest, all[..3]);
    assert!(ctrl.error_log(0).unwrap().is_empty());
    let log = ctrl.smart_log(NSID_BROADCAST).unwrap();
    assert_eq!(log.error_log_entries, u128::from(total), "lifetime count");
    assert_eq!(log.media_errors, u128::from(total));
}

#[test]
fn log_reads_on_a_failed_controller_are_typed_errors() {
    let (sim, ctrl) = start_with(ControllerOptions {
        admin_timeout: Duration::from_millis(200),
        ..Default::default()
    });
    sim.faults().drop_next_completions(1);
    let err = ctrl.smart_log(NSID_BROADCAST).expect_err("lost completion");
    assert!(
        matches!(err, Error::Timeout { .. } | Error::Failed { .. }),
        "{err}"
    );
    assert!(matches!(
        ctrl.error_log(4).expect_err("controller failed"),
        Error::Failed { .. }
    ));
}
