//! Firmware update through the PCIe controller against the emulator: Firmware Image Download
//! (NVMe Base 2.0 §5.13) in pieces no larger than MDTS or the chunk given, Firmware Commit
//! (§5.12) with each action and its outcome, the Firmware Slot log (03h) and Identify
//! Controller FR following; every firmware status the emulator returns arrives typed; a bad
//! layout and a controller without OACS bit 2 are refused before anything is sent.

use nvme_driver::spec::firmware::{
    ActivationReset, CommitAction, CommitOutcome, FirmwareCommit, FirmwareStatus,
};
use nvme_driver::spec::{Cns, IdentifyController};
use nvme_driver::{
    AdminCommand, AdminCommands, Controller, ControllerOptions, Error, NvmeController,
};
use nvme_sim::{sim_firmware_image, SimConfig, SimController, SimFirmware};

mod common;

fn start(config: SimConfig) -> (SimController, Controller) {
    common::start_sim(config, ControllerOptions::default(), true)
}

fn commit(ctrl: &Controller, slot: u8, action: CommitAction) -> nvme_driver::Result<CommitOutcome> {
    ctrl.firmware_commit(FirmwareCommit::new(slot, action))
}

/// The firmware status of a failed firmware command.
fn kind(r: nvme_driver::Result<impl std::fmt::Debug>) -> FirmwareStatus {
    match r {
        Err(Error::Firmware { kind, status, .. }) => {
            assert_eq!(FirmwareStatus::from_status(status), Some(kind));
            kind
        }
        other => panic!("expected a firmware status, got {other:?}"),
    }
}

/// Identify Controller FR as the controller reports it now (not the copy from bring-up).
fn running_revision(ctrl: &Controller) -> String {
    let reply = ctrl
        .admin(AdminCommand::identify(Cns::Controller, 0))
        .unwrap();
    let id = IdentifyController::from_bytes(reply.data[..4096].try_into().unwrap());
    id.firmware()
}

#[test]
fn download_in_pieces_commit_and_activate() {
    let (sim, ctrl) = start(SimConfig::default());
    let id = ctrl.identify();
    let frmw = id.firmware_updates();
    assert_eq!(
        (
            frmw.slots,
            frmw.slot1_read_only,
            frmw.activation_without_reset
        ),
        (3, true, true)
    );
    let log = ctrl.firmware_slot_log().unwrap();
    assert_eq!((log.active_slot(), log.next_slot()), (1, None));
    assert_eq!(log.revision(1).as_deref(), Some("1.0"));

    // 300 KiB with MDTS 128 KiB (mdts 5 at 4 KiB pages): three pieces, three commands.
    let mdts = ctrl.max_transfer_bytes();
    assert_eq!(mdts, 128 << 10);
    let image = sim_firmware_image("2.0", 300 << 10);
    let before = common::settled_admin_commands(&sim);
    assert_eq!(ctrl.firmware_download(0, &image).unwrap(), 3);
    assert_eq!(common::settled_admin_commands(&sim) - before, 3);
    assert_eq!(
        commit(&ctrl, 2, CommitAction::Replace).unwrap(),
        CommitOutcome::Stored
    );
    let log = ctrl.firmware_slot_log().unwrap();
    assert_eq!((log.active_slot(), log.next_slot()), (1, None));
    assert_eq!(log.revision(2).as_deref(), Some("2.0"));

    // Activate slot 2 at the next reset; the reset runs it.
    assert_eq!(
        commit(&ctrl, 2, CommitAction::ActivateAtReset).unwrap(),
        CommitOutcome::ActivatesAtReset
    );
    assert_eq!(ctrl.firmware_slot_log().unwrap().next_slot(), Some(2));
    assert_eq!(running_revision(&ctrl), "1.0");
    ctrl.reset().unwrap();
    let log = ctrl.firmware_slot_log().unwrap();
    assert_eq!((log.active_slot(), log.next_slot()), (2, None));
    assert_eq!(running_revision(&ctrl), "2.0");

    // In 64 KiB chunks, at an offset and in two calls; then replace and activate at once.
    let image = sim_firmware_image("3.0-rc1", 200 << 10);
    let (head, tail) = image.split_at(128 << 10);
    assert_eq!(
        ctrl.firmware_download_chunked(0, head, Some(64 << 10))
            .unwrap(),
        2
    );
    assert_eq!(
        ctrl.firmware_download_chunked(128 << 10, tail, Some(64 << 10))
            .unwrap(),
        2
    );
    assert_eq!(
        commit(&ctrl, 3, CommitAction::ReplaceAndActivateNow).unwrap(),
        CommitOutcome::Activated
    );
    let log = ctrl.firmware_slot_log().unwrap();
    assert_eq!((log.active_slot(), log.next_slot()), (3, None));
    assert_eq!(log.revision(3).as_deref(), Some("3.0-rc1"));
    assert_eq!(log.revision(2).as_deref(), Some("2.0"));
    assert_eq!(running_revision(&ctrl), "3.0-rc1");

    // Slot 0: the controller stores in the first writable slot (2) and activates there at
    // the next reset.
    ctrl.firmware_download(0, &sim_firmware_image("4.0", 8192))
        .unwrap();
    assert_eq!(
        commit(&ctrl, 0, CommitAction::ReplaceAndActivateAtReset).unwrap(),
        CommitOutcome::ActivatesAtReset
    );
    let log = ctrl.firmware_slot_log().unwrap();
    assert_eq!((log.active_slot(), log.next_slot()), (3, Some(2)));
    assert_eq!(log.revision(2).as_deref(), Some("4.0"));
}

#[test]
fn firmware_statuses_arrive_typed() {
    let (_sim, ctrl) = start(SimConfig::default());
    let image = sim_firmware_image("2.0", 16 << 10);
    // Slot 1 is read only, slot 5 beyond the three; the download stays for another try.
    ctrl.firmware_download(0, &image).unwrap();
    assert_eq!(
        kind(commit(&ctrl, 1, CommitAction::Replace)),
        FirmwareStatus::InvalidSlot
    );
    assert_eq!(
        kind(commit(&ctrl, 5, CommitAction::Replace)),
        FirmwareStatus::InvalidSlot
    );
    // So a piece at offset 0 again overlaps it, and so does one inside it.
    for offset in [0, 4096] {
        let e = ctrl.firmware_download(offset, &image[..8192]);
        match &e {
            Err(e) => assert!(e.to_string().contains("Overlapping Range"), "{e}"),
            Ok(_) => panic!("overlap at {offset} accepted"),
        }
        assert_eq!(kind(e), FirmwareStatus::OverlappingRange);
    }
    assert_eq!(
        commit(&ctrl, 2, CommitAction::Replace).unwrap(),
        CommitOutcome::Stored
    );
    // The commit took the download: nothing left to store, and an empty slot cannot be
    // activated.
    assert_eq!(
        kind(commit(&ctrl, 3, CommitAction::ReplaceAndActivateAtReset)),
        FirmwareStatus::InvalidImage
    );
    assert_eq!(
        kind(commit(&ctrl, 3, CommitAction::ActivateAtReset)),
        FirmwareStatus::InvalidImage
    );
    // A gap (8 KiB missing) is not an image.
    ctrl.firmware_download(0, &image[..4096]).unwrap();
    ctrl.firmware_download(12288, &image[12288..]).unwrap();
    assert_eq!(
        kind(commit(&ctrl, 3, CommitAction::Replace)),
        FirmwareStatus::InvalidImage
    );
    // Nor is one without the emulator's magic.
    ctrl.firmware_download(0, &[0x55; 8192]).unwrap();
    assert_eq!(
        kind(commit(&ctrl, 3, CommitAction::Replace)),
        FirmwareStatus::InvalidImage
    );
    // Only the good commit changed the slots.
    let log = ctrl.firmware_slot_log().unwrap();
    assert_eq!((log.active_slot(), log.next_slot()), (1, None));
    assert_eq!(
        (log.revision(2).as_deref(), log.revision(3)),
        (Some("2.0"), None)
    );
}

#[test]
fn activation_needing_a_reset_is_an_outcome() {
    let (_sim, ctrl) = start(SimConfig {
        firmware_update: Some(SimFirmware {
            activation_without_reset: false,
            ..SimFirmware::default()
        }),
        ..SimConfig::default()
    });
    assert!(!ctrl.identify().firmware_updates().activation_without_reset);
    ctrl.firmware_download(0, &sim_firmware_image("2.1", 4096))
        .unwrap();
    assert_eq!(
        commit(&ctrl, 2, CommitAction::ReplaceAndActivateNow).unwrap(),
        CommitOutcome::RequiresReset(ActivationReset::ControllerLevel)
    );
    let log = ctrl.firmware_slot_log().unwrap();
    assert_eq!((log.active_slot(), log.next_slot()), (1, Some(2)));
    ctrl.reset().unwrap();
    assert_eq!(ctrl.firmware_slot_log().unwrap().active_slot(), 2);
}

#[test]
fn bad_layouts_and_missing_support_are_refused_before_sending() {
    let (sim, ctrl) = start(SimConfig::default());
    let before = common::settled_admin_commands(&sim);
    let refused = |r: nvme_driver::Result<usize>| match r {
        Err(e @ Error::FirmwareImage(_)) => e.to_string(),
        other => panic!("expected a layout refusal, got {other:?}"),
    };
    let e = refused(ctrl.firmware_download(0, &[0; 4098]));
    assert!(
        e.contains("not a multiple of 4") && e.contains("nothing was sent"),
        "{e}"
    );
    // FWUG is 4 KiB: an offset off it, a chunk below it.
    let e = refused(ctrl.firmware_download(2048, &[0; 4096]));
    assert!(e.contains("granularity (4096 bytes"), "{e}");
    let e = refused(ctrl.firmware_download_chunked(0, &[0; 8192], Some(2048)));
    assert!(e.contains("multiple of 4096"), "{e}");
    assert!(refused(ctrl.firmware_download(0, &[])).contains("empty"));
    let e = commit(&ctrl, 9, CommitAction::Replace).unwrap_err();
    assert!(e.to_string().contains("slot 9 does not exist"), "{e}");
    assert_eq!(
        common::settled_admin_commands(&sim),
        before,
        "nothing reached the device"
    );

    // QEMU 7.2's shape: OACS bit 2 clear.
    let (sim, ctrl) = start(SimConfig {
        firmware_update: None,
        ..SimConfig::default()
    });
    let frmw = ctrl.identify().firmware_updates();
    assert_eq!((frmw.slots, frmw.slot1_read_only), (1, true));
    let before = common::settled_admin_commands(&sim);
    for e in [
        ctrl.firmware_download(0, &[0; 4096]).unwrap_err(),
        commit(&ctrl, 1, CommitAction::ActivateAtReset).unwrap_err(),
    ] {
        assert!(matches!(e, Error::CommandNotSupported { .. }), "{e:?}");
        let text = e.to_string();
        assert!(
            text.contains("OACS bit 2") && text.contains("nothing was sent"),
            "{text}"
        );
    }
    assert_eq!(
        common::settled_admin_commands(&sim),
        before,
        "nothing reached the device"
    );
    assert_eq!(
        ctrl.firmware_slot_log().unwrap().revision(1).as_deref(),
        Some("1.0")
    );
}
