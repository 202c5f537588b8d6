//! The safe admin passthrough (`AdminCommand::passthru`) against the in-process emulated
//! controller: what it returns equals the typed commands' data, and what it refuses is
//! refused before any controller is involved.

use nvme_driver::spec::command::{self, Cns};
use nvme_driver::spec::log::NSID_BROADCAST;
use nvme_driver::spec::opcode::{admin, feature};
use nvme_driver::spec::SubmissionEntry;
use nvme_driver::{AdminCommand, ControllerOptions, NvmeController, PassthruData, PassthruError};
use nvme_sim::SimConfig;

mod common;

#[test]
fn identify_through_passthru_equals_the_typed_identify() {
    let (_sim, ctrl) = common::start_sim(SimConfig::default(), ControllerOptions::default(), false);
    let cmd = AdminCommand::passthru(
        command::identify(Cns::Controller, 0),
        PassthruData::Receive(4096),
    )
    .expect("Identify is passed through");
    let reply = NvmeController::admin(&ctrl, cmd).expect("Identify");
    assert_eq!(reply.data, ctrl.identify().to_bytes().to_vec());
}

#[test]
fn smart_log_through_passthru_equals_the_typed_log() {
    let (_sim, ctrl) = common::start_sim(SimConfig::default(), ControllerOptions::default(), false);
    let cmd = AdminCommand::passthru(
        command::get_log_page(2, NSID_BROADCAST, 512),
        PassthruData::Receive(512),
    )
    .expect("Get Log Page is passed through");
    let reply = NvmeController::admin(&ctrl, cmd).expect("SMART log");
    let typed = ctrl.smart_log(NSID_BROADCAST).expect("typed SMART log");
    assert_eq!(reply.data, typed.to_bytes().to_vec());
}

#[test]
fn user_pointers_and_command_id_are_cleared() {
    let mut sqe = command::identify(Cns::Controller, 0);
    sqe.prp1 = 0xdead_0000;
    sqe.prp2 = 0xbeef_0000;
    sqe.mptr = 0x1234_0000;
    sqe.set_cid(77);
    let cmd = AdminCommand::passthru(sqe, PassthruData::Receive(4096)).expect("passed");
    let out = cmd.sqe();
    assert_eq!((out.prp1, out.prp2, out.mptr, out.cid()), (0, 0, 0, 0));
}

#[test]
fn queue_setup_and_host_memory_commands_are_refused() {
    for op in [
        admin::CREATE_IO_SQ,
        admin::CREATE_IO_CQ,
        admin::DELETE_IO_SQ,
        admin::DOORBELL_BUFFER_CONFIG,
        admin::ABORT,
    ] {
        let err = AdminCommand::passthru(SubmissionEntry::new(op), PassthruData::Receive(0))
            .expect_err("refused");
        assert!(
            matches!(err, PassthruError::Refused { opcode, .. } if opcode == op),
            "{err}"
        );
    }
    let hmb = command::set_features(feature::HOST_MEMORY_BUFFER, 1);
    assert!(matches!(
        AdminCommand::passthru(hmb, PassthruData::Receive(0)),
        Err(PassthruError::Refused { .. })
    ));
    assert_eq!(
        AdminCommand::passthru(SubmissionEntry::new(0xC1), PassthruData::Receive(4096))
            .expect_err("vendor specific"),
        PassthruError::UnknownLength { opcode: 0xC1 }
    );
}

#[test]
fn data_shorter_than_the_command_transfer_is_refused() {
    let err = AdminCommand::passthru(
        command::get_log_page(2, NSID_BROADCAST, 512),
        PassthruData::Receive(256),
    )
    .expect_err("short buffer");
    assert_eq!(
        err,
        PassthruError::DataTooShort {
            opcode: admin::GET_LOG_PAGE,
            needed: 512,
            given: 256
        }
    );
    assert!(err.to_string().contains("at least 512"), "{err}");
    assert!(matches!(
        AdminCommand::passthru(
            command::identify(Cns::Controller, 0),
            PassthruData::Receive(0)
        ),
        Err(PassthruError::DataTooShort { needed: 4096, .. })
    ));
}

#[test]
fn get_features_through_passthru_returns_the_value() {
    let (_sim, ctrl) = common::start_sim(SimConfig::default(), ControllerOptions::default(), false);
    let cmd = AdminCommand::passthru(
        command::get_features(feature::NUMBER_OF_QUEUES),
        PassthruData::Receive(0),
    )
    .expect("Get Features is passed through");
    let reply = NvmeController::admin(&ctrl, cmd).expect("Get Features");
    let typed = NvmeController::admin(
        &ctrl,
        AdminCommand::get_features(
            nvme_driver::spec::feature::FeatureId::NumberOfQueues,
            nvme_driver::spec::feature::Select::Current,
            0,
        ),
    )
    .expect("typed Get Features");
    assert_eq!(reply.dw0, typed.dw0);
}
