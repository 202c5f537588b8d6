//! nvme-perf over NVMe/TCP against the in-process fake target: a random read/write run
//! completes every I/O without errors; PCIe-only options are refused with a message.

use std::process::Command;

use nvme_tcp::fake::{Config, FakeTarget};

fn perf(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_nvme-perf"))
        .args(args)
        .output()
        .expect("run nvme-perf");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn randrw_over_tcp() {
    let t = FakeTarget::start(Config::default());
    let trid = t.trid().to_string();
    let (ok, out, err) = perf(&[
        &trid, "-n", "2", "-w", "randrw", "-q", "8", "--ios", "2000", "--json", "--quiet",
    ]);
    assert!(ok, "{out}{err}");
    let json: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(json["errors"], 0, "{out}");
    assert!(json["ios"].as_u64().unwrap() >= 2000, "{out}");
    assert_eq!(json["lba_size"], 512, "{out}");
    let (ok, _, err) = perf(&[&trid, "--interrupts", "-t", "1"]);
    assert!(!ok);
    assert!(err.contains("PCI functions only"), "{err}");
}
