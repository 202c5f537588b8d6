//! Management commands through the PCIe controller against the emulator: typed Get/Set
//! Features with every Select (NVMe Base §5.15, §5.27), Identify CNS 02h/03h (§5.17.2), and
//! the Firmware Slot, Changed Namespace List and Commands Supported and Effects log pages
//! (§5.16.1.4-6). Values read back equal values set; refusals carry the spec's status codes.

use nvme_driver::spec::admin_log::{CommandEffects, NsIdDescriptor};
use nvme_driver::spec::feature::{
    Arbitration, ErrorRecovery, Feature, FeatureCapabilities, FeatureId, InterruptCoalescing,
    Select, TemperatureThreshold, ThresholdType,
};
use nvme_driver::spec::opcode::{admin, nvm};
use nvme_driver::spec::status::{command_specific, generic, StatusCodeType};
use nvme_driver::{AdminCommands, Controller, ControllerOptions, Error, Transport};
use nvme_sim::{SimConfig, SimController, SimNamespace};

fn open() -> (SimController, Controller) {
    let sim = SimController::start(SimConfig {
        namespaces: vec![
            SimNamespace::default(),
            SimNamespace {
                nsid: 3,
                ..SimNamespace::default()
            },
        ],
        ..SimConfig::default()
    });
    let ctrl = Controller::new(
        Transport::new(sim.mmio(), sim.dma(), "sim"),
        ControllerOptions::default(),
    )
    .unwrap();
    (sim, ctrl)
}

fn status_of(e: &Error) -> (StatusCodeType, u8) {
    match e {
        Error::Command { status, .. } => (status.sct(), status.sc()),
        other => panic!("expected a command status, got {other:?}"),
    }
}

#[test]
fn features_set_saved_default_and_current() {
    let (_sim, ctrl) = open();
    let arb = Feature::Arbitration(Arbitration {
        burst: 3,
        low_weight: 1,
        medium_weight: 2,
        high_weight: 4,
    });
    assert_eq!(
        ctrl.get_feature(FeatureId::Arbitration, Select::Default)
            .unwrap(),
        Feature::Arbitration(Arbitration {
            burst: 7,
            ..Arbitration::default()
        })
    );
    ctrl.set_feature(arb, false).unwrap();
    assert_eq!(
        ctrl.get_feature(FeatureId::Arbitration, Select::Current)
            .unwrap(),
        arb
    );
    // Not saved: the saved value is still the default.
    assert_eq!(
        ctrl.get_feature(FeatureId::Arbitration, Select::Saved)
            .unwrap(),
        ctrl.get_feature(FeatureId::Arbitration, Select::Default)
            .unwrap()
    );
    let coalescing = Feature::InterruptCoalescing(InterruptCoalescing {
        threshold: 7,
        time: 2,
    });
    ctrl.set_feature(coalescing, true).unwrap();
    assert_eq!(
        ctrl.get_feature(FeatureId::InterruptCoalescing, Select::Saved)
            .unwrap(),
        coalescing
    );
    // A reset makes the saved values current again: arbitration back to its default,
    // interrupt coalescing kept.
    ctrl.reset().unwrap();
    assert_eq!(
        ctrl.get_feature(FeatureId::Arbitration, Select::Current)
            .unwrap(),
        ctrl.get_feature(FeatureId::Arbitration, Select::Default)
            .unwrap()
    );
    assert_eq!(
        ctrl.get_feature(FeatureId::InterruptCoalescing, Select::Current)
            .unwrap(),
        coalescing
    );
}

#[test]
fn every_typed_feature_round_trips() {
    let (_sim, ctrl) = open();
    let values = [
        Feature::TemperatureThreshold(TemperatureThreshold {
            kelvin: 350,
            sensor: 0,
            kind: ThresholdType::Over,
        }),
        Feature::ErrorRecovery(ErrorRecovery {
            tler: 30,
            dulbe: true,
        }),
        Feature::VolatileWriteCache(false),
        Feature::AsyncEventConfiguration(
            nvme_driver::spec::feature::AsyncEventConfig::NAMESPACE_ATTRIBUTE,
        ),
        Feature::PowerManagement(nvme_driver::spec::feature::PowerManagement {
            power_state: 0,
            workload_hint: 1,
        }),
    ];
    for v in values {
        ctrl.set_feature(v, false).unwrap();
        assert_eq!(ctrl.get_feature(v.id(), Select::Current).unwrap(), v);
    }
    assert_eq!(
        ctrl.get_feature(FeatureId::VolatileWriteCache, Select::Default)
            .unwrap(),
        Feature::VolatileWriteCache(true)
    );
    // Number of Queues answers what bring-up was granted (0's based).
    let Feature::NumberOfQueues(q) = ctrl
        .get_feature(FeatureId::NumberOfQueues, Select::Current)
        .unwrap()
    else {
        panic!("typed as Number of Queues")
    };
    assert_eq!(
        u32::from(q.submission) + 1,
        u32::from(ctrl.io_queue_pairs())
    );
}

#[test]
fn timestamp_moves_data_both_ways() {
    let (_sim, ctrl) = open();
    let set = 1_700_000_000_000u64;
    ctrl.set_feature(Feature::from_raw(FeatureId::Timestamp, set).unwrap(), false)
        .unwrap();
    let Feature::Timestamp(t) = ctrl
        .get_feature(FeatureId::Timestamp, Select::Current)
        .unwrap()
    else {
        panic!("typed as Timestamp")
    };
    assert!(t.millis >= set && t.millis < set + 60_000, "{}", t.millis);
    assert_eq!(t.origin, 1, "set by the host");
}

#[test]
fn capabilities_and_refusals() {
    let (_sim, ctrl) = open();
    let caps = ctrl
        .feature_capabilities(FeatureId::VolatileWriteCache)
        .unwrap();
    assert!(caps.contains(FeatureCapabilities::SAVEABLE | FeatureCapabilities::CHANGEABLE));
    let caps = ctrl.feature_capabilities(FeatureId::Timestamp).unwrap();
    assert!(!caps.contains(FeatureCapabilities::SAVEABLE));
    let e = ctrl
        .set_feature(Feature::from_raw(FeatureId::Timestamp, 5).unwrap(), true)
        .unwrap_err();
    assert_eq!(
        status_of(&e),
        (
            StatusCodeType::CommandSpecific,
            command_specific::FEATURE_ID_NOT_SAVEABLE
        )
    );
}

#[test]
fn namespace_lists_and_descriptors() {
    let (_sim, ctrl) = open();
    assert_eq!(ctrl.active_namespace_ids(0).unwrap(), [1, 3]);
    assert_eq!(ctrl.active_namespace_ids(1).unwrap(), [3]);
    let d1 = ctrl.namespace_descriptors(1).unwrap();
    let d3 = ctrl.namespace_descriptors(3).unwrap();
    assert_eq!(d1.len(), 4);
    assert!(matches!(d1[0], NsIdDescriptor::Eui64(_)));
    assert!(matches!(d1[1], NsIdDescriptor::Nguid(_)));
    assert!(matches!(d1[2], NsIdDescriptor::Uuid(_)));
    assert_eq!(d1[3], NsIdDescriptor::Csi(0));
    assert_ne!(d1[0], d3[0], "identifiers are unique per namespace");
    let e = ctrl.namespace_descriptors(2).unwrap_err();
    assert_eq!(
        status_of(&e),
        (
            StatusCodeType::Generic,
            generic::INVALID_NAMESPACE_OR_FORMAT
        )
    );
    let id = ctrl.identify_namespace(3).unwrap();
    assert_eq!(id.nsze, ctrl.namespace(3).unwrap().blocks());
}

#[test]
fn management_log_pages() {
    let (_sim, ctrl) = open();
    let fw = ctrl.firmware_slot_log().unwrap();
    assert_eq!(fw.active_slot(), 1);
    let fr = String::from_utf8_lossy(&ctrl.identify().fr)
        .trim_end()
        .to_owned();
    assert_eq!(fw.revision(1).unwrap(), fr);
    assert_eq!(fw.revision(2), None);
    let effects = ctrl.commands_effects_log().unwrap();
    let admin_ops: Vec<u8> = effects.admin().map(|(op, _)| op).collect();
    assert!(admin_ops.contains(&admin::IDENTIFY));
    assert!(admin_ops.contains(&admin::GET_FEATURES));
    assert!(!admin_ops.contains(&admin::FORMAT_NVM));
    let write = effects.io().find(|&(op, _)| op == nvm::WRITE).unwrap().1;
    assert!(write.contains(CommandEffects::LBCC));
    let read = effects.io().find(|&(op, _)| op == nvm::READ).unwrap().1;
    assert!(!read.contains(CommandEffects::LBCC));
    assert!(ctrl.changed_namespace_log().unwrap().is_empty());
}

#[test]
fn changed_namespace_list_reports_a_detach() {
    let (sim, ctrl) = open();
    sim.set_namespace_attached(3, false);
    assert_eq!(ctrl.changed_namespace_log().unwrap(), [3]);
    assert!(
        ctrl.changed_namespace_log().unwrap().is_empty(),
        "reading clears it"
    );
}
