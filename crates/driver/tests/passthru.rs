//! The safe admin passthrough (`AdminCommand::passthru`) and I/O passthrough
//! (`IoPassthruCommand`) against the in-process emulated controller: what they return equals
//! the typed commands' data (a passthrough Read returns what a typed Write wrote, a typed
//! Read what a passthrough Write wrote), and what they refuse is refused before any
//! controller is involved.

use nvme_driver::spec::command::{self, Cns};
use nvme_driver::spec::log::NSID_BROADCAST;
use nvme_driver::spec::opcode::{admin, feature};
use nvme_driver::spec::SubmissionEntry;
use nvme_driver::{
    AdminCommand, ControllerOptions, Error, IoPassthruCommand, IoQueue, NvmeController,
    PassthruData, PassthruError, PassthruQueue, WriteFlags,
};
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
            queue: PassthruQueue::Admin,
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

#[test]
fn io_passthru_read_returns_what_a_typed_write_wrote() {
    let (_sim, ctrl) = common::start_sim(SimConfig::default(), ControllerOptions::default(), false);
    let ns = ctrl.namespace(1).expect("namespace 1");
    let mut q = common::queue_pair(&ctrl);
    let len = 3 * ns.block_size() as usize;
    let data = common::pattern(len, 21);
    let mut buf = ctrl.alloc_buffer(len).expect("buffer");
    buf.copy_from_slice(&data);
    q.write(&ns, 40, 3, buf, WriteFlags::NONE)
        .expect("typed write");

    // The user's entry: another NSID and pointers, all replaced by the driver.
    let mut sqe = command::read(0xFFFF_FFFF, 40, 3);
    sqe.prp1 = 0x1000;
    let cmd = IoPassthruCommand::new(sqe, &ns, len).expect("Read is passed through");
    let out = q
        .execute(&ns, cmd, Some(ctrl.alloc_buffer(len).expect("buffer")))
        .expect("passthru read")
        .expect("its buffer");
    assert_eq!(&out[..len], &data[..]);
}

#[test]
fn io_passthru_write_is_read_back_by_a_typed_read() {
    let (_sim, ctrl) = common::start_sim(SimConfig::default(), ControllerOptions::default(), false);
    let ns = ctrl.namespace(1).expect("namespace 1");
    let mut q = common::queue_pair(&ctrl);
    let bs = ns.block_size() as usize;
    let data = common::pattern(2 * bs, 22);
    let mut buf = ctrl.alloc_buffer(2 * bs).expect("buffer");
    buf.copy_from_slice(&data);
    let cmd = IoPassthruCommand::new(command::write(1, 7, 2, false), &ns, 2 * bs)
        .expect("Write is passed through");
    q.execute(&ns, cmd, Some(buf)).expect("passthru write");
    let back = q
        .read(&ns, 7, 2, ctrl.alloc_buffer(2 * bs).expect("buffer"))
        .expect("typed read");
    assert_eq!(&back[..2 * bs], &data[..]);
    // Flush moves no data: no buffer.
    let flush = IoPassthruCommand::new(command::flush(1), &ns, 0).expect("Flush");
    assert!(q.execute(&ns, flush, None).expect("flush").is_none());
}

#[test]
fn io_passthru_refuses_short_buffers_and_unknown_opcodes() {
    let (_sim, ctrl) = common::start_sim(SimConfig::default(), ControllerOptions::default(), false);
    let ns = ctrl.namespace(1).expect("namespace 1");
    let mut q = common::queue_pair(&ctrl);
    let bs = ns.block_size() as usize;
    assert!(matches!(
        IoPassthruCommand::new(command::read(1, 0, 2), &ns, 2 * bs - 1),
        Err(PassthruError::DataTooShort {
            queue: PassthruQueue::Io,
            ..
        })
    ));
    // Built for a full buffer, submitted with a short one: the transport refuses it, and
    // the buffer comes back.
    let cmd = IoPassthruCommand::new(command::read(1, 0, 2), &ns, 2 * bs).expect("read");
    let failure = q
        .execute(&ns, cmd, Some(ctrl.alloc_buffer(bs).expect("buffer")))
        .expect_err("short buffer");
    assert!(
        matches!(failure.error, Error::BufferTooSmall { .. }),
        "{}",
        failure.error
    );
    assert!(failure.buffer.is_some());
    assert_eq!(
        IoPassthruCommand::new(SubmissionEntry::new(0x0D), &ns, 4096).expect_err("reservation"),
        PassthruError::IoUnknownLength { opcode: 0x0D }
    );
}
