//! The shared management commands (`nvme_core::AdminCommands`) over NVMe/TCP against the
//! fake target: the one typed admin primitive moves data from the target (Identify
//! Namespace, the Active Namespace ID list), sends data to it (Set Features Timestamp, in
//! the capsule), and a command the target does not implement comes back as its status.

use nvme_core::{AdminCommands, Error};
use nvme_spec::feature::{Feature, FeatureId, Select};
use nvme_spec::status::{generic, StatusCodeType};

use super::connect;
use crate::fake::{Config, FakeTarget};

#[test]
fn typed_admin_commands_over_tcp() {
    let t = FakeTarget::start(Config::default());
    let c = connect(&t);
    let ids = c.active_namespace_ids(0).unwrap();
    assert!(!ids.is_empty());
    assert_eq!(c.active_namespace_ids(ids[0]).unwrap(), ids[1..]);
    let id = c.identify_namespace(ids[0]).unwrap();
    assert_eq!(id.nsze, c.namespace(ids[0]).unwrap().blocks());
    // The fake target accepts any Set Features: the 8 data bytes go out with the command.
    c.set_feature(
        Feature::from_raw(FeatureId::Timestamp, 1234).unwrap(),
        false,
    )
    .unwrap();
    // It has no Get Features: Invalid Command Opcode, typed.
    match c.get_feature(FeatureId::VolatileWriteCache, Select::Current) {
        Err(Error::Command { status, .. }) => {
            assert_eq!(status.sct(), StatusCodeType::Generic);
            assert_eq!(status.sc(), generic::INVALID_OPCODE);
        }
        other => panic!("expected Invalid Command Opcode, got {other:?}"),
    }
    // Namespace descriptors (CNS 03h) are not offered by the fake: Invalid Field.
    assert!(matches!(
        c.namespace_descriptors(ids[0]),
        Err(Error::Command { .. })
    ));
}
