//! Two subsystems on one controller: each host sees only the namespaces of the subsystem it
//! connected to (under the subsystem's ids), and a host not on a subsystem's list is refused
//! there while it keeps its own.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;

use common::*;
use nvme_core::{IoQueue, QueuePairOptions, WriteFlags};
use nvme_device::AnyController;
use nvme_driver::{Controller, ControllerOptions, Transport};
use nvme_sim::SimController;
use nvme_target::{ExportedNamespace, SubsystemConfig, Target, TargetConfig};
use nvme_tcp::{TcpController, TcpOptions, TransportId};

const SUB_A: &str = "nqn.2026-01.io.example:a";
const SUB_B: &str = "nqn.2026-01.io.example:b";
const HOST_A: &str = "nqn.2026-01.io.example:host-a";
const HOST_B: &str = "nqn.2026-01.io.example:host-b";

struct Two {
    target: Target<AnyController>,
    _backend: Arc<AnyController>,
    sim: SimController,
}

fn start_two() -> Two {
    let sim = SimController::start(sim_config());
    let ctrl = Controller::new(
        Transport::new(sim.mmio(), sim.dma(), "sim"),
        ControllerOptions::default(),
    )
    .unwrap();
    let backend = Arc::new(AnyController::Pcie(ctrl));
    let sub = |nqn: &str, backend_nsid, host: &str| SubsystemConfig {
        nqn: nqn.into(),
        backend: backend.clone(),
        namespaces: vec![ExportedNamespace {
            nsid: 1,
            backend_nsid,
        }],
        allowed_hosts: Some(vec![host.into()]),
        serial: "TWO".into(),
    };
    let target = Target::start(
        TargetConfig::new("127.0.0.1:0".parse::<SocketAddr>().unwrap()),
        vec![sub(SUB_A, 1, HOST_A), sub(SUB_B, 2, HOST_B)],
    )
    .unwrap();
    Two {
        target,
        _backend: backend,
        sim,
    }
}

fn connect(t: &Two, sub: &str, host: &str) -> nvme_core::Result<TcpController> {
    let a = t.target.local_addr();
    let trid = TransportId::parse(&format!(
        "trtype:TCP traddr:{} trsvcid:{} subnqn:{sub}",
        a.ip(),
        a.port()
    ))
    .unwrap();
    TcpController::connect(
        &trid,
        TcpOptions {
            hostnqn: Some(host.into()),
            ..options()
        },
    )
}

#[test]
fn each_host_sees_its_own_subsystem_only() {
    let t = start_two();
    let a = connect(&t, SUB_A, HOST_A).expect("A on A");
    let b = connect(&t, SUB_B, HOST_B).expect("B on B");
    assert!(connect(&t, SUB_B, HOST_A).is_err(), "A refused on B");
    assert!(connect(&t, SUB_A, HOST_B).is_err(), "B refused on A");
    let (na, nb) = (a.namespaces(), b.namespaces());
    assert_eq!(na.len(), 1);
    assert_eq!(nb.len(), 1);
    assert_eq!((na[0].nsid(), na[0].block_size()), (1, 4096));
    assert_eq!((nb[0].nsid(), nb[0].block_size()), (1, 512));
    assert!(a.namespace(2).is_err());

    // B's nsid 1 is the controller's namespace 2.
    let mut qp = b.create_queue_pair(QueuePairOptions::default()).unwrap();
    let data = pattern(512, 31);
    let mut buf = b.alloc_buffer(512).unwrap();
    buf[..512].copy_from_slice(&data);
    qp.write(&nb[0], 3, 1, buf, WriteFlags::NONE).unwrap();
    assert!(t.sim.read_disk(2, 3 * 512, 512) == data);
    assert!(
        t.sim.read_disk(1, 3 * 4096, 512).iter().all(|&x| x == 0),
        "A's namespace untouched"
    );
}
