//! `nvme-identify --socket PATH` against a control server in this process (an emulated
//! controller behind it): the list of served controllers, the Identify report and the health
//! report, the same as opening the controller itself would print.

use std::process::Command;
use std::sync::Arc;

use nvme_control::{ControlConfig, ControlRegistry, ControlServer};
use nvme_device::AnyController;
use nvme_driver::{Controller, ControllerOptions, Transport};
use nvme_sim::{SimConfig, SimController};

fn identify(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_nvme-identify"))
        .args(args)
        .output()
        .expect("run nvme-identify");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn reports_through_the_control_socket() {
    let sim = Arc::new(SimController::start(SimConfig::default()));
    let mut t = Transport::new(sim.mmio(), sim.dma(), "0000:00:04.0");
    t.keepalive = Some(sim);
    let ctrl = Arc::new(AnyController::Pcie(
        Controller::new(t, ControllerOptions::default()).unwrap(),
    ));
    let registry = ControlRegistry::new();
    registry.add("0000:00:04.0", ctrl.clone());
    let cell = registry.queue_stats("0000:00:04.0", "worker-0").unwrap();
    let path = std::env::temp_dir().join(format!("nvme-identify-sock-{}.sock", std::process::id()));
    let server = ControlServer::start(ControlConfig::new(&path), registry).unwrap();
    let sock = path.to_str().unwrap();

    let (rc, out, err) = identify(&["--socket", sock]);
    assert_eq!(rc, 0, "{out}{err}");
    assert!(out.contains("0000:00:04.0  vfio-pci  owned"), "{out}");
    assert!(out.contains(&ctrl.identify().serial()), "{out}");
    assert!(out.contains("namespace 1"), "{out}");

    let (rc, out, err) = identify(&["--socket", sock, "--json", "0000:00:04.0"]);
    assert_eq!(rc, 0, "{out}{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["controller"]["serial"], ctrl.identify().serial(), "{out}");
    assert_eq!(v["namespaces"].as_array().unwrap().len(), 2);

    let (rc, out, err) = identify(&["--socket", sock, "--health"]);
    assert_eq!(rc, 0, "{out}{err}");
    assert!(out.contains("SMART / Health Information"), "{out}");

    cell.publish(&nvme_control::QueueCounters {
        requests_completed: 42,
        ..Default::default()
    });
    let (rc, out, err) = identify(&["--socket", sock, "--stats"]);
    assert_eq!(rc, 0, "{out}{err}");
    assert!(out.contains("0000:00:04.0 worker-0 "), "{out}");
    assert!(out.contains("requests_completed=42"), "{out}");

    let (rc, out, err) = identify(&["--socket", sock, "--stats", "--repeat", "2"]);
    assert_eq!(rc, 0, "{out}{err}");
    assert_eq!(out.matches("requests_completed=42").count(), 2, "{out}");

    let (rc, _, err) = identify(&["--socket", sock, "0000:00:09.0"]);
    assert_eq!(rc, 1);
    assert!(err.contains("no controller `0000:00:09.0`"), "{err}");
    drop(server);
    let (rc, _, err) = identify(&["--socket", sock]);
    assert_eq!(rc, 1);
    assert!(err.contains("control socket"), "{err}");
}
