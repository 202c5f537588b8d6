//! nvme-identify over NVMe/TCP against the in-process fake target: `--health` reads the SMART
//! / Health Information and Error Information log pages by Get Log Page on the admin queue
//! and prints them as it does for a PCIe controller (text and nvme-cli JSON keys).

use std::process::Command;

use nvme_tcp::fake::{
    Config, FakeTarget, NEWEST_ERROR_COUNT, SMART_POWER_ON_HOURS, SMART_TEMPERATURE_K,
};

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
fn health_over_tcp_prints_the_smart_and_error_logs() {
    let t = FakeTarget::start(Config::default());
    let trid = t.trid().to_string();
    let (rc, out, err) = identify(&["--health", &trid]);
    assert_eq!(rc, 0, "{out}{err}");
    assert!(
        out.contains(&format!(
            "SMART / Health Information of 127.0.0.1:{}",
            t.addr.port()
        )),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "Power on hours:             {SMART_POWER_ON_HOURS}"
        )),
        "{out}"
    );
    assert!(out.contains("Error Information Log: 2 entries"), "{out}");

    let (rc, out, err) = identify(&["--health", "--json", &trid]);
    assert_eq!(rc, 0, "{out}{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(v["smart_log"]["temperature"], SMART_TEMPERATURE_K);
    assert_eq!(
        v["smart_log"]["power_on_hours"].as_u64(),
        Some(SMART_POWER_ON_HOURS as u64)
    );
    let errors = v["error_log"]["errors"].as_array().expect("errors");
    assert_eq!(errors.len(), 2);
    assert_eq!(errors[0]["error_count"], NEWEST_ERROR_COUNT);
}
