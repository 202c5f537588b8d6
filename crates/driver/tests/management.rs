//! Namespace management through the PCIe controller against the emulator: Format NVM (NVMe
//! Base §5.23) changes the block size the driver uses and erases the data; Namespace
//! Attachment (§5.19) detaches and re-attaches a namespace with its data kept; the allocated
//! namespace and controller lists (CNS 10h-13h, §5.17.2.10-13) follow; bad requests get the
//! spec's command-specific statuses; a controller whose OACS lacks a command refuses it
//! before anything is sent.

use nvme_driver::spec::manage::{FormatNvm, SecureErase};
use nvme_driver::spec::status::{command_specific, StatusCodeType};
use nvme_driver::IoQueue;
use nvme_driver::{
    AdminCommands, Controller, ControllerOptions, Error, IoFailure, NamespaceChange,
    QueuePairOptions, WriteFlags,
};
use nvme_sim::{SimConfig, SimController, SIM_CNTLID};

mod common;

fn start(config: SimConfig) -> (SimController, Controller) {
    common::start_sim(config, ControllerOptions::default(), true)
}

fn command_specific(e: &Error) -> u8 {
    match e {
        Error::Command { status, .. } if status.sct() == StatusCodeType::CommandSpecific => {
            status.sc()
        }
        other => panic!("expected a command-specific status, got {other:?}"),
    }
}

#[test]
fn format_changes_the_block_size_and_erases_the_data() {
    let (_sim, ctrl) = start(SimConfig::default());
    let ns = ctrl.namespace(1).unwrap();
    assert_eq!(ns.block_size(), 512);
    let old_blocks = ns.blocks();
    let mut q = ctrl.create_queue_pair(QueuePairOptions::default()).unwrap();
    let data = common::pattern(4096, 7);
    let mut buf = ctrl.alloc_buffer(4096).unwrap();
    buf[..4096].copy_from_slice(&data);
    let buf = q.write(&ns, 0, 8, buf, WriteFlags::NONE).unwrap();

    // LBA format 4 of the emulator's table (QEMU's): 4096-byte blocks, no metadata.
    let id = ctrl.identify_namespace(1).unwrap();
    assert_eq!((id.nlbaf, id.flbas & 0xF), (7, 0));
    let changes = ctrl
        .format_nvm(
            1,
            FormatNvm {
                lbaf: 4,
                ses: SecureErase::UserData,
                ..FormatNvm::default()
            },
        )
        .unwrap();
    assert_eq!(changes.changed, [1]);
    assert!(!ns.is_current());
    match q.read(&ns, 0, 8, buf) {
        Err(IoFailure {
            error: Error::StaleNamespace { nsid: 1, change },
            ..
        }) => assert_eq!(change, NamespaceChange::Reformatted),
        other => panic!("read through the pre-format handle: {other:?}"),
    }
    let ns = ctrl.namespace(1).unwrap();
    assert_eq!(ns.block_size(), 4096);
    assert_eq!(ns.blocks(), old_blocks * 512 / 4096);
    assert_eq!(ctrl.identify_namespace(1).unwrap().flbas & 0xF, 4);
    let buf = q.read(&ns, 0, 1, ctrl.alloc_buffer(4096).unwrap()).unwrap();
    assert!(
        buf[..4096].iter().all(|&b| b == 0),
        "format erased the data"
    );
    let mut buf = buf;
    buf[..4096].copy_from_slice(&data);
    let buf = q.write(&ns, 3, 1, buf, WriteFlags::NONE).unwrap();
    let back = q.read(&ns, 3, 1, buf).unwrap();
    assert_eq!(&back[..4096], &data[..]);
}

#[test]
fn format_with_protection_information_and_bad_formats() {
    let (_sim, ctrl) = start(SimConfig::default());
    // LBA format 5: 4096 + 8 bytes of metadata, PI type 1 first, extended LBAs.
    ctrl.format_nvm(
        2,
        FormatNvm {
            lbaf: 5,
            extended_metadata: true,
            pi: 1,
            pi_first: true,
            ses: SecureErase::Cryptographic,
        },
    )
    .unwrap();
    let id = ctrl.identify_namespace(2).unwrap();
    assert_eq!(id.flbas, 5 | 1 << 4);
    assert_eq!(id.dps, 1 | 1 << 3);
    let ns = ctrl.namespace(2).unwrap();
    assert_eq!((ns.block_size(), ns.format().metadata_size()), (4096, 8));

    // An index past NLBAF, and PI without metadata: Invalid Format (§5.23).
    let e = ctrl
        .format_nvm(
            1,
            FormatNvm {
                lbaf: 8,
                ..FormatNvm::default()
            },
        )
        .unwrap_err();
    assert_eq!(command_specific(&e), command_specific::INVALID_FORMAT);
    let e = ctrl
        .format_nvm(
            1,
            FormatNvm {
                lbaf: 4,
                pi: 2,
                ..FormatNvm::default()
            },
        )
        .unwrap_err();
    assert_eq!(command_specific(&e), command_specific::INVALID_FORMAT);
    assert_eq!(ctrl.namespace(1).unwrap().block_size(), 512, "unchanged");
}

#[test]
fn detach_and_attach_keep_the_data() {
    let (_sim, ctrl) = start(SimConfig::default());
    assert_eq!(ctrl.identify().cntlid, SIM_CNTLID);
    assert_eq!(ctrl.controller_list(None, 0).unwrap(), [SIM_CNTLID]);
    assert_eq!(ctrl.controller_list(Some(2), 0).unwrap(), [SIM_CNTLID]);
    let ns = ctrl.namespace(2).unwrap();
    let mut q = ctrl.create_queue_pair(QueuePairOptions::default()).unwrap();
    let data = common::pattern(4096, 11);
    let mut buf = ctrl.alloc_buffer(4096).unwrap();
    buf[..4096].copy_from_slice(&data);
    let buf = q.write(&ns, 9, 1, buf, WriteFlags::NONE).unwrap();

    let changes = ctrl.detach_namespace(2, &[SIM_CNTLID]).unwrap();
    assert_eq!(changes.removed, [2]);
    assert!(matches!(
        ctrl.namespace(2),
        Err(Error::InactiveNamespace { nsid: 2, .. })
    ));
    assert_eq!(ctrl.active_namespace_ids(0).unwrap(), [1]);
    assert_eq!(ctrl.allocated_namespace_ids(0).unwrap(), [1, 2]);
    assert_eq!(ctrl.allocated_namespace_ids(1).unwrap(), [2]);
    assert_eq!(
        ctrl.identify_allocated_namespace(2).unwrap().nsze,
        ns.blocks()
    );
    assert!(ctrl.controller_list(Some(2), 0).unwrap().is_empty());
    assert!(ctrl
        .controller_list(None, SIM_CNTLID + 1)
        .unwrap()
        .is_empty());

    let e = ctrl.detach_namespace(2, &[SIM_CNTLID]).unwrap_err();
    assert_eq!(
        command_specific(&e),
        command_specific::NAMESPACE_NOT_ATTACHED
    );
    let e = ctrl.attach_namespace(2, &[SIM_CNTLID + 5]).unwrap_err();
    assert_eq!(
        command_specific(&e),
        command_specific::CONTROLLER_LIST_INVALID
    );

    let changes = ctrl.attach_namespace(2, &[SIM_CNTLID]).unwrap();
    assert_eq!(changes.added, [2]);
    let e = ctrl.attach_namespace(2, &[SIM_CNTLID]).unwrap_err();
    assert_eq!(
        command_specific(&e),
        command_specific::NAMESPACE_ALREADY_ATTACHED
    );
    let ns = ctrl.namespace(2).unwrap();
    let back = q.read(&ns, 9, 1, buf).unwrap();
    assert_eq!(
        &back[..4096],
        &data[..],
        "the detached namespace kept its data"
    );
}

#[test]
fn commands_the_controller_lacks_are_refused_before_sending() {
    let (sim, ctrl) = start(SimConfig {
        format_nvm: false,
        namespace_management: false,
        ..SimConfig::default()
    });
    // Bring-up leaves commands (Asynchronous Event Requests) that the device thread may
    // fetch a little later: count from a quiet device.
    let before = common::settled_admin_commands(&sim);
    fn refused<T: std::fmt::Debug>(r: Result<T, Error>, name: &str) {
        match r {
            Err(Error::CommandNotSupported { command, .. }) => assert_eq!(command, name),
            other => panic!("{name}: {other:?}"),
        }
    }
    refused(ctrl.format_nvm(1, FormatNvm::default()), "Format NVM");
    refused(ctrl.attach_namespace(1, &[0]), "Namespace Attachment");
    refused(ctrl.detach_namespace(1, &[0]), "Namespace Attachment");
    refused(ctrl.allocated_namespace_ids(0), "Identify CNS 10h");
    assert_eq!(
        common::settled_admin_commands(&sim),
        before,
        "nothing reached the device"
    );
    assert_eq!(ctrl.namespace(1).unwrap().block_size(), 512);
}
