//! `nvme-perf --control-socket PATH` on `sim`: while the run goes on, another client reads the
//! controller's SMART log and the workers' queue statistics through the socket; the run
//! finishes normally and the socket file is gone afterwards.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nvme_control::ControlClient;
use serde_json::json;

#[test]
fn a_run_is_inspected_through_its_control_socket() {
    let path = std::env::temp_dir().join(format!("nvme-perf-ctl-{}.sock", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let child = Command::new(env!("CARGO_BIN_EXE_nvme-perf"))
        .args([
            "sim",
            "-q",
            "8",
            "-t",
            "3",
            "-j",
            "2",
            "--json",
            "--control-socket",
        ])
        .arg(&path)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run nvme-perf");
    let start = Instant::now();
    let mut client = loop {
        if let Ok(c) = ControlClient::connect(&path) {
            break c;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "no socket at {}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let list = client.call("list_controllers", json!({})).unwrap();
    assert_eq!(list[0]["queues"], 2, "{list}");
    let smart = client.call("smart_log", json!({})).unwrap();
    assert!(smart["log"].as_str().unwrap().len() == 1024);
    // Statistics are published once a second by nvme-perf's main thread.
    let mut completed = 0;
    while completed == 0 && start.elapsed() < Duration::from_secs(20) {
        let stats = client.call("queue_stats", json!({})).unwrap();
        assert_eq!(stats.as_array().unwrap().len(), 2, "{stats}");
        completed = stats[0]["counters"]["requests_completed"].as_u64().unwrap();
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(completed > 0, "no I/O published");
    drop(client);
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(report.is_object(), "{report}");
    assert!(
        !path.exists(),
        "the socket file is removed at the end of the run"
    );
}

#[test]
fn the_control_socket_is_refused_for_io_uring() {
    let out = Command::new(env!("CARGO_BIN_EXE_nvme-perf"))
        .args([
            "/dev/null",
            "--engine",
            "io_uring",
            "--control-socket",
            "/tmp/x.sock",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--control-socket"), "{err}");
}
