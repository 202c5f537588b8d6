//! `SimController::start_sibling`: a second controller of one subsystem on the same medium,
//! and the configurations it refuses.

use nvme_sim::{SimConfig, SimController};

#[test]
fn siblings_share_the_medium() {
    let a = SimController::start(SimConfig::subsystem_member(0));
    let b = a.start_sibling(SimConfig::subsystem_member(1));
    a.write_disk(1, 4096, b"through a");
    assert_eq!(b.read_disk(1, 4096, 9), b"through a");
    b.write_disk(2, 0, b"through b");
    assert_eq!(a.read_disk(2, 0, 9), b"through b");
}

#[test]
#[should_panic(expected = "its own SimConfig::cntlid")]
fn a_sibling_needs_another_cntlid() {
    SimController::start(SimConfig::subsystem_member(0))
        .start_sibling(SimConfig::subsystem_member(0));
}

#[test]
#[should_panic(expected = "same, non-empty, SimConfig::subnqn")]
fn a_sibling_reports_the_same_nqn() {
    let other = SimConfig {
        subnqn: "nqn.2026-01.io.example:other".into(),
        ..SimConfig::subsystem_member(1)
    };
    SimController::start(SimConfig::subsystem_member(0)).start_sibling(other);
}

#[test]
#[should_panic(expected = "shared_namespaces")]
fn private_namespaces_have_no_sibling() {
    let private = SimConfig {
        shared_namespaces: false,
        ..SimConfig::subsystem_member(0)
    };
    SimController::start(private).start_sibling(SimConfig::subsystem_member(1));
}
