//! `nvme-admin --socket PATH SUBCOMMAND NAME` against a control server in this process: the
//! read-only subcommands print what `nvme-admin SUBCOMMAND sim` prints for an emulated
//! controller of the same configuration; set-feature is refused.

use std::process::Command;
use std::sync::Arc;

use nvme_control::{ControlConfig, ControlRegistry, ControlServer};
use nvme_device::AnyController;
use nvme_driver::{Controller, ControllerOptions, Transport};
use nvme_sim::{SimConfig, SimController, SimNamespace};

fn admin(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_nvme-admin"))
        .args(args)
        .output()
        .expect("run nvme-admin");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn read_only_subcommands_through_the_socket_match_a_direct_open() {
    // The configuration of nvme-admin's own `sim`.
    let sim = Arc::new(SimController::start(SimConfig {
        namespaces: vec![
            SimNamespace::default(),
            SimNamespace {
                nsid: 2,
                block_size: 4096,
                blocks: (16 << 20) / 4096,
                ..SimNamespace::default()
            },
        ],
        ..SimConfig::default()
    }));
    let mut t = Transport::new(sim.mmio(), sim.dma(), "sim");
    t.keepalive = Some(sim);
    let ctrl = Controller::new(t, ControllerOptions::default()).unwrap();
    let registry = ControlRegistry::new();
    registry.add("sim", Arc::new(AnyController::Pcie(ctrl)));
    let path = std::env::temp_dir().join(format!("nvme-admin-sock-{}.sock", std::process::id()));
    let _server = ControlServer::start(ControlConfig::new(&path), registry).unwrap();
    let sock = path.to_str().unwrap();

    for sub in [
        &["id-ctrl"][..],
        &["id-ns", "-n", "2"],
        &["list"],
        &["list-ns"],
        &["fw-log"],
        &["effects-log"],
        &["get-feature", "-f", "7"],
        &["get-feature", "-f", "4", "-s", "1"],
        &["get-feature", "-f", "7", "-s", "3"],
    ] {
        let mut direct: Vec<&str> = sub.to_vec();
        direct.extend(["sim", "-o", "json"]);
        let (rc, want, err) = admin(&direct);
        assert_eq!(rc, 0, "{sub:?}: {err}");
        let mut remote: Vec<&str> = vec!["--socket", sock];
        remote.extend(direct.iter().copied());
        let (rc, got, err) = admin(&remote);
        assert_eq!(rc, 0, "{sub:?}: {err}");
        assert_eq!(got, want, "{sub:?}");
    }
    // SMART: the same keys (the counters move with the admin commands).
    let (rc, out, err) = admin(&["--socket", sock, "smart-log", "sim", "-o", "json"]);
    assert_eq!(rc, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(v.get("critical_warning").is_some(), "{out}");
    let (rc, _, err) = admin(&["--socket", sock, "error-log", "sim", "-e", "4"]);
    assert_eq!(rc, 0, "{err}");
    let (rc, _, err) = admin(&[
        "--socket",
        sock,
        "set-feature",
        "sim",
        "-f",
        "4",
        "-v",
        "300",
    ]);
    assert_eq!(rc, 1);
    assert!(
        err.contains("not available through a control socket"),
        "{err}"
    );
    let (rc, _, err) = admin(&["--socket", sock, "id-ctrl", "nope"]);
    assert_eq!(rc, 1);
    assert!(err.contains("no controller `nope`"), "{err}");
}
