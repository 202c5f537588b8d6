//! Multipath basics against the emulator: two controllers of one NVM subsystem sharing their
//! namespaces (`SimController::start_sibling`) are recognised as two paths to one namespace
//! (SUBNQN, CNTLID, CMIC, NMIC and the identifiers, NVMe Base 2.0 §2.4.1, §5.17.2); a write
//! through one controller is read back through the other; a failed path fails over to the
//! other; a controller of another subsystem and private namespaces stay apart.

use std::time::Duration;

use nvme_driver::multipath::{Multipath, NamespaceIdentity, NotSameNamespace};
use nvme_driver::{Controller, ControllerOptions, IoQueue, WriteFlags};
use nvme_sim::{SimConfig, SimController};

mod common;

/// Controllers 0 and 1 of one subsystem, sharing the default two namespaces.
fn subsystem() -> (SimController, SimController, Controller, Controller) {
    let sim_a = SimController::start(SimConfig::subsystem_member(0));
    let sim_b = sim_a.start_sibling(SimConfig::subsystem_member(1));
    let (sim_a, a) = common::open_on(sim_a, ControllerOptions::default(), false);
    let (sim_b, b) = common::open_on(sim_b, ControllerOptions::default(), false);
    (sim_a, sim_b, a, b)
}

#[test]
fn two_controllers_reach_one_namespace() {
    let (_sim_a, _sim_b, a, b) = subsystem();
    let id_a = NamespaceIdentity::read(&a, 1).unwrap();
    let id_b = NamespaceIdentity::read(&b, 1).unwrap();
    assert_eq!(id_a.subnqn, nvme_sim::SIM_SUBNQN);
    assert_eq!((id_a.cntlid, id_b.cntlid), (0, 1));
    assert!(id_a.is_shared() && id_a.ids.nguid.is_some());
    assert_eq!(id_a.same_namespace(&id_b), Ok(()));
    // Namespace 2 is another namespace of the same subsystem.
    let id2 = NamespaceIdentity::read(&b, 2).unwrap();
    assert!(matches!(
        id_a.same_namespace(&id2),
        Err(NotSameNamespace::DifferentNsid { a: 1, b: 2 })
    ));

    let ctrls = [a, b];
    let mp = Multipath::discover(&ctrls).unwrap();
    assert_eq!(mp.namespaces().len(), 2, "{mp:?}");
    assert!(mp.kept_apart().is_empty(), "{:?}", mp.kept_apart());
    for nsid in [1, 2] {
        let ns = mp.find(nvme_sim::SIM_SUBNQN, nsid).unwrap();
        let paths: Vec<_> = ns
            .paths()
            .iter()
            .map(|p| (p.controller, p.cntlid))
            .collect();
        assert_eq!(paths, [(0, 0), (1, 1)], "namespace {nsid}");
    }
}

#[test]
fn write_through_one_controller_read_through_the_other() {
    let (_sim_a, sim_b, a, b) = subsystem();
    let ctrls = [a, b];
    let mp = Multipath::discover(&ctrls).unwrap();
    let entry = mp.find(nvme_sim::SIM_SUBNQN, 1).unwrap();
    let first = entry.select(|p| !ctrls[p.controller].is_failed()).unwrap();
    assert_eq!(first.controller, 0);

    let ns_a = ctrls[0].namespace(1).unwrap();
    let block = ns_a.block_size() as usize;
    let data = common::pattern(4 * block, 21);
    let mut qa = common::queue_pair(&ctrls[0]);
    let mut buf = ctrls[0].alloc_buffer(data.len()).unwrap();
    buf[..data.len()].copy_from_slice(&data);
    qa.write(&ns_a, 8, 4, buf, WriteFlags::NONE).unwrap();

    let other = entry.failover(first.controller, |_| true).unwrap();
    assert_eq!((other.controller, other.cntlid), (1, 1));
    let ns_b = ctrls[1].namespace(1).unwrap();
    let mut qb = common::queue_pair(&ctrls[1]);
    let buf = ctrls[1].alloc_buffer(data.len()).unwrap();
    let back = qb.read(&ns_b, 8, 4, buf).unwrap();
    assert_eq!(
        &back[..data.len()],
        &data[..],
        "controller 1 reads what controller 0 wrote"
    );
    // And the medium is one: the sibling's emulator sees the bytes too.
    assert_eq!(sim_b.read_disk(1, 8 * block as u64, data.len()), data);
}

#[test]
fn a_failed_path_fails_over_to_the_other_controller() {
    let (sim_a, _sim_b, a, b) = subsystem();
    let ctrls = [a, b];
    let mp = Multipath::discover(&ctrls).unwrap();
    let entry = mp.find(nvme_sim::SIM_SUBNQN, 2).unwrap();
    let ns_b = ctrls[1].namespace(2).unwrap();
    let block = ns_b.block_size() as usize;
    let data = common::pattern(block, 5);
    let mut qb = common::queue_pair(&ctrls[1]);
    let mut buf = ctrls[1].alloc_buffer(block).unwrap();
    buf[..data.len()].copy_from_slice(&data);
    qb.write(&ns_b, 0, 1, buf, WriteFlags::NONE).unwrap();

    // Controller 0 dies (CSTS.CFS): its I/O fails, the namespace is read through controller 1.
    let ns_a = ctrls[0].namespace(2).unwrap();
    let mut qa = ctrls[0]
        .create_queue_pair(nvme_driver::QueuePairOptions {
            timeout: Duration::from_secs(2),
            ..nvme_driver::QueuePairOptions::default()
        })
        .unwrap();
    sim_a.faults().set_fatal();
    let failed = qa.read(&ns_a, 0, 1, ctrls[0].alloc_buffer(block).unwrap());
    assert!(failed.is_err(), "a read through the dead controller fails");
    let next = entry
        .failover(0, |p| !ctrls[p.controller].is_failed())
        .expect("the other path");
    assert_eq!(next.controller, 1);
    let back = qb
        .read(&ns_b, 0, 1, ctrls[1].alloc_buffer(block).unwrap())
        .unwrap();
    assert_eq!(&back[..data.len()], &data[..]);
    // No third path: failing over from controller 1 with controller 0 unusable finds none.
    assert_eq!(entry.failover(1, |p| p.controller != 0), None);
}

#[test]
fn other_subsystems_and_private_namespaces_stay_apart() {
    // A controller of another subsystem with the same namespace layout.
    let (_sim_c, c) = common::start_sim(
        SimConfig {
            subnqn: "nqn.2026-01.io.example.nvme-sim:other".into(),
            shared_namespaces: true,
            ..SimConfig::default()
        },
        ControllerOptions::default(),
        false,
    );
    // Two single-controller emulators (private namespaces) with the same NQN and CNTLID,
    // i.e. indistinguishable from one controller reached twice.
    let lone = || SimConfig {
        subnqn: nvme_sim::SIM_SUBNQN.into(),
        ..SimConfig::default()
    };
    let (_sim_d, d) = common::start_sim(lone(), ControllerOptions::default(), false);
    let (_sim_e, e) = common::start_sim(lone(), ControllerOptions::default(), false);
    let (_sim_a, _sim_b, a, _b) = subsystem();
    let id_a = NamespaceIdentity::read(&a, 1).unwrap();
    let id_c = NamespaceIdentity::read(&c, 1).unwrap();
    assert!(matches!(
        id_a.same_namespace(&id_c),
        Err(NotSameNamespace::DifferentSubsystem { .. })
    ));
    let id_d = NamespaceIdentity::read(&d, 1).unwrap();
    assert!(!id_d.is_shared());
    let ctrls = [d, e];
    let mp = Multipath::discover(&ctrls).unwrap();
    assert_eq!(
        mp.namespaces().len(),
        4,
        "no namespace has two paths: {mp:?}"
    );
    assert!(mp.namespaces().iter().all(|n| n.paths().len() == 1));
    assert_eq!(mp.kept_apart().len(), 2);
    assert!(mp
        .kept_apart()
        .iter()
        .all(|k| matches!(k.reason, NotSameNamespace::SameController { cntlid: 0, .. })));
    // A controller reporting no NQN (the emulator's default) is never matched.
    let (_sim_f, f) = common::start_sim(SimConfig::default(), ControllerOptions::default(), false);
    let id_f = NamespaceIdentity::read(&f, 1).unwrap();
    assert_eq!(id_f.subnqn, "");
    assert_eq!(
        id_d.same_namespace(&id_f),
        Err(NotSameNamespace::NoSubsystemNqn { cntlid: 0 })
    );
}
