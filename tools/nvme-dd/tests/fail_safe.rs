//! `nvme-dd` refuses what it cannot do before it changes anything: the output file keeps its
//! content when the device is absent or an operand is out of range, and the process fails with
//! status 1 and a message, never a panic.

use std::path::PathBuf;
use std::process::{Command, Output};

/// A PCI address no machine has (bus 0xff, device 0x1f, function 7).
const ABSENT_DEVICE: &str = "0000:ff:1f.7";
const CONTENT: &[u8] = b"this file must survive a failed nvme-dd\n";

/// A file with [`CONTENT`], removed on drop.
struct Existing(PathBuf);

impl Existing {
    fn new(name: &str) -> Self {
        let path =
            std::env::temp_dir().join(format!("nvme-dd-fail-safe-{}-{name}", std::process::id()));
        std::fs::write(&path, CONTENT).unwrap();
        Existing(path)
    }

    fn of(&self) -> String {
        format!("of={}", self.0.display())
    }

    fn content(&self) -> Vec<u8> {
        std::fs::read(&self.0).unwrap()
    }
}

impl Drop for Existing {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn nvme_dd(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nvme-dd"))
        .args(args)
        .env("RUST_LOG", "off")
        .output()
        .unwrap()
}

/// Exit status 1 (not a panic's 101) with `error: ...` on stderr; returns stderr.
fn failed(out: &Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "stderr: {stderr}");
    assert!(stderr.starts_with("error: "), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    stderr
}

#[test]
fn an_absent_device_leaves_the_output_file_alone() {
    let file = Existing::new("absent");
    let out = nvme_dd(&["--device", ABSENT_DEVICE, "if=nvme:1", &file.of()]);
    failed(&out);
    assert_eq!(file.content(), CONTENT, "the output was truncated");
    // Also with a seek, which keeps the bytes before the seek offset but drops the rest.
    let out = nvme_dd(&["--device", ABSENT_DEVICE, "if=nvme:1", &file.of(), "seek=1"]);
    failed(&out);
    assert_eq!(file.content(), CONTENT, "the output was truncated");
}

#[test]
fn an_absent_output_file_is_not_created_when_the_device_is_absent() {
    let path = std::env::temp_dir().join(format!(
        "nvme-dd-fail-safe-{}-not-created",
        std::process::id()
    ));
    let _ = std::fs::remove_file(&path);
    let out = nvme_dd(&[
        "--device",
        ABSENT_DEVICE,
        "if=nvme:1",
        &format!("of={}", path.display()),
    ]);
    failed(&out);
    assert!(!path.exists(), "the output was created");
}

#[test]
fn an_overflowing_seek_fails_cleanly_and_leaves_the_output_alone() {
    let file = Existing::new("seek");
    // 2^52 records of 4 KiB: the byte offset wraps to 0.
    let out = nvme_dd(&[
        "--device",
        ABSENT_DEVICE,
        "if=nvme:1",
        &file.of(),
        "bs=4k",
        "seek=4503599627370496",
    ]);
    let stderr = failed(&out);
    assert!(
        stderr.contains("seek=4503599627370496 with bs=4096 overflows a 64-bit byte offset"),
        "{stderr}"
    );
    assert_eq!(file.content(), CONTENT);
    let out = nvme_dd(&[
        "--device",
        ABSENT_DEVICE,
        "if=nvme:1",
        &file.of(),
        "bs=1M",
        "skip=18446744073709551615",
    ]);
    let stderr = failed(&out);
    assert!(stderr.contains("skip=18446744073709551615"), "{stderr}");
    assert_eq!(file.content(), CONTENT);
}

#[test]
fn a_block_size_beyond_the_dma_budget_is_refused_with_the_limit() {
    let file = Existing::new("bs");
    let out = nvme_dd(&["--device", ABSENT_DEVICE, "if=nvme:1", &file.of(), "bs=4G"]);
    let stderr = failed(&out);
    assert!(
        stderr.contains("limit of 268435456 bytes") && stderr.contains("bs=256M or less"),
        "{stderr}"
    );
    assert_eq!(file.content(), CONTENT);
}

#[test]
fn a_queue_depth_beyond_the_limit_is_refused_before_anything_happens() {
    let file = Existing::new("qd");
    let out = nvme_dd(&[
        "--device",
        ABSENT_DEVICE,
        "--qd",
        "5000",
        "if=nvme:1",
        &file.of(),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("--qd 5000 is more than the 4096 requests"),
        "{stderr}"
    );
    assert_eq!(file.content(), CONTENT);
}
