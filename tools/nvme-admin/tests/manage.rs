//! `nvme-admin`'s management subcommands end to end on the emulator (DEVICE `sim`, one
//! controller, CNTLID 0, namespaces 1 (512 B) and 2 (4 KiB)): `list-ctrl`, `detach-ns` /
//! `attach-ns` with the rescan they cause, `format` with its confirmation, `get-log` as hex,
//! JSON and raw bytes; bad input refused with a message, exit status 1 and nothing done.

use std::io::Write;
use std::process::{Command, Output, Stdio};

use serde_json::{json, Value};

/// Runs nvme-admin with `args`, `stdin` on its standard input.
fn run_with(args: &[&str], stdin: &[u8]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_nvme-admin"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("nvme-admin runs");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin)
        .expect("stdin written");
    child.wait_with_output().expect("nvme-admin ends")
}

fn json(args: &[&str]) -> Value {
    json_with(args, b"")
}

fn json_with(args: &[&str], stdin: &[u8]) -> Value {
    let mut all = args.to_vec();
    all.extend(["-o", "json"]);
    let out = run_with(&all, stdin);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON output")
}

fn fails_with(args: &[&str], stdin: &[u8]) -> String {
    let out = run_with(args, stdin);
    assert_eq!(out.status.code(), Some(1), "{args:?} should fail");
    assert!(out.stdout.is_empty(), "nothing on stdout when failing");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn fails(args: &[&str]) -> String {
    fails_with(args, b"")
}

#[test]
fn list_ctrl_shows_the_one_controller() {
    let v = json(&["list-ctrl", "sim"]);
    assert_eq!(v, json!({"num_ctrl": 1, "ctrl_list": [{"ctrl_id": 0}]}));
    let v = json(&["list-ctrl", "sim", "-n", "2"]);
    assert_eq!(v["ctrl_list"], json!([{"ctrl_id": 0}]));
    // From identifier 1 up: none.
    let v = json(&["list-ctrl", "sim", "-c", "1"]);
    assert_eq!(v, json!({"num_ctrl": 0, "ctrl_list": []}));
    let out = run_with(&["list-ctrl", "sim"], b"");
    let text = String::from_utf8(out.stdout).unwrap();
    let words: Vec<Vec<&str>> = text
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert!(words.contains(&vec!["num_ctrl", ":", "1"]), "{text}");
    assert!(words.contains(&vec!["ctrl_id", ":", "0"]), "{text}");
}

#[test]
fn detach_and_attach_report_what_the_rescan_found() {
    // Namespace 2 leaves this controller (the default: its own CNTLID).
    let v = json(&["detach-ns", "sim", "-n", "2"]);
    assert_eq!(v["detach-ns"], "Success");
    assert_eq!(v["nsid"], 2);
    assert_eq!(v["controllers"], json!([0]));
    assert_eq!(v["changes"]["removed"], json!([2]));
    assert_eq!(v["changes"]["added"], json!([]));
    // Attaching an attached namespace: the spec's status, named.
    let e = fails(&["attach-ns", "sim", "-n", "1", "-c", "0"]);
    assert!(e.contains("Namespace Already Attached"), "{e}");
    // A controller that is not in the subsystem.
    let e = fails(&["detach-ns", "sim", "-n", "1", "-c", "7"]);
    assert!(e.contains("Controller List Invalid"), "{e}");
    let e = fails(&["attach-ns", "sim", "-n", "1", "-c", "0,x"]);
    assert!(e.contains("not a number"), "{e}");
}

#[test]
fn format_changes_the_lba_format_after_confirmation() {
    // Asked, and refused: nothing happens.
    let e = fails_with(&["format", "sim", "-n", "1", "--lbaf", "4"], b"no\n");
    assert!(e.contains("erases all of its data"), "{e}");
    assert!(
        e.contains("format not confirmed") && e.contains("--force"),
        "{e}"
    );
    // No answer at all (stdin at its end) is a refusal too.
    fails_with(&["format", "sim", "-n", "1", "--lbaf", "4"], b"");
    // Confirmed on stdin.
    let v = json_with(&["format", "sim", "-n", "1", "--lbaf", "4"], b"yes\n");
    assert_eq!(v["format"], "Success");
    assert_eq!(v["lbaf"], 4);
    assert_eq!(v["block_size"], 4096);
    // 16 MiB of 4 KiB blocks.
    assert_eq!(v["nsze"], 4096);
    assert_eq!(v["changes"]["changed"], json!([1]));
    // --force, by block size, with a user data erase.
    let v = json(&[
        "format",
        "sim",
        "-n",
        "2",
        "--block-size",
        "512",
        "--ses",
        "1",
        "--force",
    ]);
    assert_eq!(
        (v["lbaf"].clone(), v["block_size"].clone()),
        (json!(0), json!(512))
    );
    assert_eq!(v["ses"], 1);
    // Format 1 (512 B + 8 B metadata, extended) with PI type 1 in the first bytes.
    let v = json(&[
        "format", "sim", "-n", "1", "-l", "1", "--ms", "1", "--pi", "1", "--pil", "1", "--force",
    ]);
    assert_eq!(v["block_size"], 512);
    assert_eq!(v["changes"]["changed"], json!([1]));
}

#[test]
fn format_refuses_formats_the_namespace_lacks() {
    let e = fails(&["format", "sim", "-n", "1", "--lbaf", "9", "--force"]);
    assert!(e.contains("LBA format 9 is not offered"), "{e}");
    assert!(e.contains("4: 4096 B + 0 B metadata"), "{e}");
    let e = fails(&[
        "format",
        "sim",
        "-n",
        "1",
        "--block-size",
        "2048",
        "--force",
    ]);
    assert!(e.contains("no LBA format of 2048-byte blocks"), "{e}");
    let e = fails(&["format", "sim", "-n", "9", "--force"]);
    assert!(e.contains("Invalid Namespace or Format"), "{e}");
    fails(&["format", "sim", "--ses", "3", "--force"]);
    fails(&["format", "sim", "--pi", "4", "--force"]);
}

#[test]
fn get_log_as_hex_json_and_raw_bytes() {
    // SMART / Health (02h): Composite Temperature 300 K in bytes 2:1.
    let out = run_with(&["get-log", "sim", "-i", "2", "-l", "512", "-b"], b"");
    assert!(out.status.success());
    assert_eq!(out.stdout.len(), 512);
    assert_eq!(u16::from_le_bytes([out.stdout[1], out.stdout[2]]), 300);
    // Available Spare 100 %, threshold 10 %.
    assert_eq!((out.stdout[3], out.stdout[4]), (100, 10));

    let v = json(&["get-log", "sim", "--log-id", "0x02", "--log-len", "8"]);
    assert_eq!(v["log_id"], 2);
    assert_eq!(v["log_len"], 8);
    assert_eq!(v["namespace_id"], u64::from(u32::MAX));
    assert_eq!(v["data"], hex(&out.stdout[..8]));

    let out = run_with(&["get-log", "sim", "-i", "3", "-l", "64"], b"");
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "Device:sim log-id:0x3 namespace-id:0xffffffff");
    assert_eq!(lines.len(), 5);
    // Firmware Slot 1 at byte 8: "1.0".
    assert!(lines[1].starts_with("0000: 01 00"), "{}", lines[1]);
    assert!(lines[1].contains(" 31 2e 30 "), "{}", lines[1]);

    let e = fails(&["get-log", "sim", "-i", "2", "-l", "6"]);
    assert!(e.contains("multiple of 4"), "{e}");
    fails(&["get-log", "sim", "-i", "2"]);
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn device_self_test_and_its_log() {
    let v = json(&["device-self-test", "sim", "-n", "1", "-s", "1"]);
    assert_eq!(v["device-self-test"], "Short");
    assert_eq!(v["nsid"], 1);
    let v = json(&["device-self-test", "sim", "--self-test-code", "0xf"]);
    assert_eq!(v["device-self-test"], "Abort");
    // A new emulator each run: nothing logged yet.
    let v = json(&["self-test-log", "sim"]);
    assert_eq!(v["List of Valid Reports"], json!([]));
    assert_eq!(v["Current Device Self-Test Completion"], 0);
    let e = fails(&["device-self-test", "sim", "-s", "3"]);
    assert!(
        e.contains("not 1 (short), 2 (extended) or 0xf (abort)"),
        "{e}"
    );
    let e = fails(&["device-self-test", "sim", "-s", "2", "-n", "7"]);
    assert!(e.contains("Invalid Namespace or Format"), "{e}");
    fails(&["device-self-test", "sim"]);
}

/// `fw-download` / `fw-commit` on a fresh emulator each run (nothing persists between runs):
/// a download reports its pieces, activating the running slot succeeds, committing without a
/// download is the controller's typed status, bad input is refused with exit status 1.
#[test]
fn firmware_download_and_commit() {
    let dir = std::env::temp_dir().join(format!("nvme-admin-cli-fw-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let fw = dir.join("fw.bin");
    std::fs::write(&fw, nvme_sim::sim_firmware_image("5.0", 24 << 10)).unwrap();
    let fw = fw.to_str().unwrap();
    let v = json(&["fw-download", "sim", "-f", fw, "-x", "8192", "-O", "4096"]);
    assert_eq!(v["fw-download"], "Success");
    assert_eq!(
        (v["offset"].as_u64(), v["pieces"].as_u64()),
        (Some(4096), Some(3))
    );
    let out = run_with(&["fw-download", "sim", "--fw", fw], b"");
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("fw-download") && text.contains("Success"),
        "{text}"
    );
    assert!(text.contains("pieces") && text.contains(": 1"), "{text}");

    let v = json(&["fw-commit", "sim", "-s", "1", "-a", "2"]);
    assert_eq!(v["outcome"], "activated at the next reset");
    assert_eq!(
        (v["slot"].as_u64(), v["action"].as_u64()),
        (Some(1), Some(2))
    );
    let e = fails(&["fw-commit", "sim", "--slot", "2", "--action", "1"]);
    assert!(
        e.contains("Invalid Firmware Image") && e.contains("download"),
        "{e}"
    );
    let e = fails(&["fw-commit", "sim", "-s", "4", "-a", "2"]);
    assert!(e.contains("Invalid Firmware Slot"), "{e}");

    let odd = dir.join("odd.bin");
    std::fs::write(&odd, [1u8; 10]).unwrap();
    let e = fails(&["fw-download", "sim", "-f", odd.to_str().unwrap()]);
    assert!(e.contains("10 bytes, not a multiple of 4"), "{e}");
    let e = fails(&["fw-download", "sim", "-f", fw, "-x", "6"]);
    assert!(e.contains("transfer size 6"), "{e}");
    // A reserved commit action is a usage error.
    let e = fails(&["fw-commit", "sim", "-a", "4"]);
    assert!(e.contains("commit action 4 is not"), "{e}");
    std::fs::remove_dir_all(dir).unwrap();
}
