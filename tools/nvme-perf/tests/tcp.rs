//! nvme-perf over NVMe/TCP against the in-process fake target: a random read/write run
//! completes every I/O without errors and reports the queue pair's PDU and poll counts; PCIe-only options are refused with a message.

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
    // The queue pair's counters: every I/O went out as a capsule and came back as at least one
    // PDU; the fake target finishes reads with the SUCCESS flag.
    let tcp = &json["tcp"];
    let ios = json["ios"].as_u64().unwrap();
    assert!(tcp["commands"].as_u64().unwrap() >= ios, "{out}");
    assert!(tcp["pdus_received"].as_u64().unwrap() >= ios, "{out}");
    let shortcuts = tcp["success_shortcuts"].as_u64().unwrap();
    assert!(shortcuts > 0 && shortcuts < ios, "reads only: {out}");
    assert!(
        tcp["polls"].as_u64().unwrap() > tcp["idle_polls"].as_u64().unwrap(),
        "{out}"
    );
    // --yield-idle (sched_yield after an empty poll) is accepted over TCP and changes nothing
    // but the CPU use.
    let (ok, out, err) = perf(&[
        &trid,
        "-q",
        "4",
        "--ios",
        "500",
        "--yield-idle",
        "--json",
        "--quiet",
    ]);
    assert!(ok, "{out}{err}");
    let json: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(json["errors"], 0, "{out}");
    assert!(json["ios"].as_u64().unwrap() >= 500, "{out}");
    // --interrupts over TCP: hybrid polling that blocks in the socket after empty polls.
    let (ok, out, err) = perf(&[
        &trid,
        "-q",
        "8",
        "--ios",
        "2000",
        "--interrupts",
        "--json",
        "--quiet",
    ]);
    assert!(ok, "{out}{err}");
    let json: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(json["errors"], 0, "{out}");
    assert!(json["ios"].as_u64().unwrap() >= 2000, "{out}");
    let (ok, _, err) = perf(&[&trid, "--shadow-doorbells", "-t", "1"]);
    assert!(!ok);
    assert!(err.contains("PCI functions only"), "{err}");
}
