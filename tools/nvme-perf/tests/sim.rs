//! End-to-end runs of the `nvme-perf` binary against the in-process emulator (and io_uring on a
//! temporary file where the kernel allows it): JSON output, no errors, sane latencies, and
//! clear failures for bad input.

use std::process::{Command, Output};

use serde_json::Value;

fn perf(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nvme-perf"))
        .args(args)
        .output()
        .expect("run nvme-perf")
}

fn json_run(args: &[&str]) -> Value {
    let out = perf(args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{args:?} failed: {stderr}");
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{args:?}: stdout is not JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

fn u(v: &Value, key: &str) -> u64 {
    v[key]
        .as_u64()
        .unwrap_or_else(|| panic!("{key} missing or not an integer in {v}"))
}

fn f(v: &Value, key: &str) -> f64 {
    v[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} missing or not a number in {v}"))
}

/// The checks every successful run must pass.
fn check_run(v: &Value, workload: &str, qd: u64) {
    assert_eq!(v["workload"], workload);
    assert_eq!(u(v, "queue_depth"), qd);
    assert!(f(v, "iops") > 0.0, "{v}");
    assert!(f(v, "mib_s") > 0.0, "{v}");
    assert!(u(v, "ios") > 0);
    assert_eq!(u(v, "errors"), 0, "{v}");
    let lat = &v["lat_ns"];
    let (min, max, avg) = (u(lat, "min"), u(lat, "max"), f(lat, "avg"));
    assert!(min as f64 <= avg && avg <= max as f64, "{lat}");
    let p = lat["p"].as_object().expect("percentile object");
    // serde_json's map sorts keys as strings: order the entries by percentile.
    let mut entries: Vec<(f64, u64)> = p
        .iter()
        .map(|(k, x)| (k.parse().expect("numeric key"), x.as_u64().expect("ns")))
        .collect();
    entries.sort_by(|a, b| a.0.total_cmp(&b.0));
    let keys: Vec<f64> = entries.iter().map(|e| e.0).collect();
    assert_eq!(
        keys,
        [
            1.0, 5.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0, 95.0, 99.0, 99.5, 99.9,
            99.99
        ]
    );
    let values: Vec<u64> = entries.iter().map(|e| e.1).collect();
    assert!(
        values.windows(2).all(|w| w[0] <= w[1]),
        "not monotonic: {values:?}"
    );
    assert!(values[0] >= min && values[15] <= max, "{lat}");
    assert!(u(v, "submit_calls") > 0 && u(v, "reap_calls") > 0);
}

#[test]
fn sim_randread_and_randwrite_at_qd32() {
    // Each workload with a context store: slots (the default) and the cache.
    for (workload, contexts) in [("randread", "slots"), ("randwrite", "cache")] {
        let v = json_run(&[
            "sim",
            "-q",
            "32",
            "-t",
            "0.5",
            "-w",
            workload,
            "--contexts",
            contexts,
            "--json",
            "--quiet",
        ]);
        check_run(&v, workload, 32);
        assert_eq!(v["engine"], "spdk-like");
        assert_eq!(v["device"], "sim");
        assert_eq!(u(&v, "bad_completions"), 0);
        assert!(f(&v, "runtime_s") >= 0.45, "{v}");
        // One doorbell per batch at most, and shadow doorbells are on by default.
        assert!(f(&v, "mmio_writes_per_io") <= 2.0, "{v}");
        assert_eq!(v["shadow_doorbells"], true);
        assert!(f(&v, "thread_cpu_ns_per_io") > 0.0);
        let pool = &v["pool"];
        assert!(
            u(pool, "tag_plugs") > 0 && u(pool, "tag_plug_hits") > 0,
            "{pool}"
        );
        assert_eq!(v["contexts"], contexts);
        if contexts == "cache" {
            assert!(u(pool, "cache_hits") > 0, "contexts are recycled: {pool}");
        } else {
            assert!(pool["cache_hits"].is_null(), "no cache with slots: {pool}");
        }
    }
}

#[test]
fn fixed_io_count_and_ab_switches() {
    let v = json_run(&[
        "sim",
        "-q",
        "8",
        "--ios",
        "3000",
        "--json",
        "--quiet",
        "--no-request-cache",
        "--no-batch-prefetch",
        "--no-shadow-doorbells",
        "-w",
        "randrw",
        "-j",
        "2",
    ]);
    check_run(&v, "randrw", 8);
    assert_eq!(u(&v, "ios"), 6000, "exactly --ios per thread");
    assert_eq!(v["contexts"], "box", "--no-request-cache is --contexts box");
    assert_eq!(v["batch_prefetch"], false);
    assert_eq!(v["shadow_doorbells"], false);
    let pool = &v["pool"];
    assert!(pool["cache_hits"].is_null(), "{pool}");
    assert_eq!(
        u(pool, "tag_plug_hits"),
        0,
        "plug(0) reserves nothing: {pool}"
    );
    // Without shadow doorbells every published update is an MMIO write: one SQ write per
    // submit call.
    assert_eq!(u(&v, "sq_mmio_writes"), u(&v, "submit_calls"), "{v}");
}

#[test]
fn text_output_has_progress_summary_and_driver_cost() {
    let out = perf(&["sim", "-q", "4", "-t", "1.2", "--histogram"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("IOPS=") && text.contains("IOS/call=submit "),
        "{text}"
    );
    for needle in [
        "lat percentiles (us):",
        "99.99th:",
        "MMIO doorbell writes/IO:",
        "bad completions: 0",
        "driver ns/IO:",
        "latency histogram",
    ] {
        assert!(text.contains(needle), "missing {needle}: {text}");
    }
}

#[test]
fn bad_input_fails_with_status_1_and_a_fix() {
    for (args, needle) in [
        (&["sim", "-b", "1000"][..], "multiple of 4096"),
        (&["sim", "-q", "2000"][..], "-q 1023 or less"),
        (&["sim", "-n", "9"][..], "not active"),
        (&["sim", "-j", "1000"][..], "-j 64 or less"),
        (&["/dev/nvme0n1"][..], "--engine io_uring"),
        (&["not-a-device"][..], "bad DEVICE"),
        (
            &["--engine", "io_uring", "/nonexistent/disk"][..],
            "cannot open",
        ),
    ] {
        let out = perf(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}

/// Runs `nvme-perf --engine io_uring FILE ARGS...` on a fresh 16 MiB file; None (with a note)
/// when this machine cannot (io_uring disabled by seccomp or sysctl, a temp filesystem without
/// O_DIRECT).
fn uring_on_a_file(args: &[&str]) -> Option<Value> {
    let dir = std::env::temp_dir().join(format!(
        "nvme-perf-test-{}-{}",
        std::process::id(),
        args.join("_").replace('-', "")
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("disk.img");
    std::fs::File::create(&path)
        .unwrap()
        .set_len(16 << 20)
        .unwrap();
    let mut line = vec!["--engine", "io_uring", path.to_str().unwrap()];
    line.extend_from_slice(args);
    let out = perf(&line);
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    let _ = std::fs::remove_dir_all(&dir);
    if !out.status.success()
        && (stderr.contains("io_uring setup") || stderr.contains("cannot open with O_DIRECT"))
    {
        eprintln!("skipping: {stderr}");
        return None;
    }
    assert!(out.status.success(), "{stderr}");
    Some(serde_json::from_slice(&out.stdout).unwrap())
}

#[test]
fn io_uring_on_a_file() {
    let Some(v) = uring_on_a_file(&[
        "-q", "16", "--ios", "2000", "-w", "randrw", "--json", "--quiet",
    ]) else {
        return;
    };
    check_run(&v, "randrw", 16);
    assert_eq!(u(&v, "ios"), 2000);
    assert_eq!(v["engine"], "io_uring");
    assert!(v["sq_mmio_writes"].is_null());
}

#[test]
fn io_uring_verify_on_a_file_checks_reads_and_the_final_pass() {
    // 1024 4 KiB positions of the 16 MiB file, two rings with disjoint slices.
    let Some(v) = uring_on_a_file(&[
        "-q",
        "16",
        "-j",
        "2",
        "--ios",
        "3000",
        "-w",
        "randrw",
        "--verify",
        "--range-blocks",
        "8192",
        "--json",
        "--quiet",
    ]) else {
        return;
    };
    check_run(&v, "randrw", 16);
    let ver = verify_of(&v);
    assert_eq!(u(ver, "mismatches"), 0, "{ver}");
    assert!(u(ver, "blocks_verified_in_reads") > 0, "{ver}");
    assert!(u(ver, "blocks_verified_final") > 0, "{ver}");
    assert_eq!(
        u(ver, "blocks_verified"),
        u(ver, "blocks_verified_in_reads") + u(ver, "blocks_verified_final")
    );
}

/// The `verify` object of a `--verify` run's JSON.
fn verify_of(v: &Value) -> &Value {
    assert!(v["verify"].is_object(), "no verify object: {v}");
    &v["verify"]
}

#[test]
fn verify_randwrite_and_randrw_find_no_mismatch() {
    // 2048 4 KiB positions, 3000 writes: most positions written, many more than once.
    let v = json_run(&[
        "sim",
        "--verify",
        "-w",
        "randwrite",
        "-q",
        "16",
        "--ios",
        "3000",
        "--range-blocks",
        "2048",
        "--json",
        "--quiet",
    ]);
    check_run(&v, "randwrite", 16);
    let ver = verify_of(&v);
    assert_eq!(u(ver, "mismatches"), 0, "{ver}");
    let final_pass = u(ver, "blocks_verified_final");
    // Distinct positions among 3000 uniform draws of 2048: about 1536.
    assert!((1300..=2048).contains(&final_pass), "{ver}");
    assert_eq!(u(ver, "blocks_verified"), final_pass, "{ver}");
    assert_eq!(u(ver, "blocks_verified_in_reads"), 0, "{ver}");

    // Mixed, two threads (disjoint slices), 512-byte LBAs: 8 headers per 4 KiB I/O.
    let v = json_run(&[
        "sim",
        "--verify",
        "-w",
        "randrw",
        "-n",
        "2",
        "-q",
        "16",
        "-j",
        "2",
        "--ios",
        "2000",
        "--range-blocks",
        "8192",
        "--json",
        "--quiet",
    ]);
    check_run(&v, "randrw", 16);
    let ver = verify_of(&v);
    assert_eq!(u(ver, "mismatches"), 0, "{ver}");
    assert!(u(ver, "blocks_verified_in_reads") > 0, "{ver}");
    assert!(u(ver, "blocks_verified_final") > 0, "{ver}");
    assert_eq!(u(ver, "blocks_verified_final") % 8, 0, "whole I/Os: {ver}");
    assert_eq!(
        u(ver, "blocks_verified"),
        u(ver, "blocks_verified_in_reads") + u(ver, "blocks_verified_final")
    );
    assert!(ver["first_mismatch"].is_null(), "{ver}");

    // Without --verify the JSON has no verify object.
    let plain = json_run(&["sim", "-q", "4", "--ios", "100", "--json", "--quiet"]);
    assert!(plain.get("verify").is_none(), "{plain}");
}

/// Runs a verifying randwrite with a medium fault; returns (exit code, JSON, stderr).
fn faulty_run(fault: &str) -> (Option<i32>, Value, String) {
    let out = perf(&[
        "sim",
        "--verify",
        "-w",
        "randwrite",
        "-q",
        "8",
        "--ios",
        "1500",
        "--range-blocks",
        "1024",
        "--sim-fault",
        fault,
        "--json",
        "--quiet",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    let v: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{fault}: stdout is not JSON ({e}); stderr: {stderr}"));
    (out.status.code(), v, stderr)
}

#[test]
fn verify_detects_corruption_and_lost_writes() {
    let (code, v, stderr) = faulty_run("corrupt-after=700");
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("mismatching block"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    let ver = verify_of(&v);
    assert_eq!(
        (
            u(ver, "mismatches"),
            u(ver, "bad_checksum"),
            u(ver, "lost_write")
        ),
        (1, 1, 0),
        "{ver}"
    );
    assert_eq!(u(&v, "errors"), 0, "the I/Os themselves succeeded: {v}");

    let (code, v, stderr) = faulty_run("lose-write-after=700");
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("lost write"), "{stderr}");
    let ver = verify_of(&v);
    assert_eq!(
        (
            u(ver, "mismatches"),
            u(ver, "lost_write"),
            u(ver, "bad_checksum"),
            u(ver, "wrong_lba"),
            u(ver, "phantom")
        ),
        (1, 1, 0, 0, 0),
        "{ver}"
    );
}

#[test]
fn verify_refuses_what_it_cannot_check() {
    for (args, needle) in [
        (&["sim", "--verify"][..], "writes nothing"),
        (
            &[
                "sim",
                "--verify",
                "-w",
                "randwrite",
                "-q",
                "64",
                "--range-blocks",
                "64",
            ][..],
            "--range-blocks 65 or more",
        ),
        (&["sim", "--sim-fault", "corrupt-after=1"][..], "--verify"),
    ] {
        let out = perf(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
    }
}

#[test]
fn resets_during_a_verifying_run_lose_nothing() {
    // The first worker resets the controller every 0.3 s; I/Os cut off by a reset are
    // resubmitted, and every block read (workload and final pass) must still check.
    let v = json_run(&[
        "sim",
        "--verify",
        "-w",
        "randrw",
        "--range-blocks",
        "8192",
        "-t",
        "2",
        "--reset-interval",
        "0.3",
        "--json",
        "--quiet",
    ]);
    assert_eq!(u(&v, "errors"), 0, "{v}");
    let rec = &v["recovery"];
    assert!(u(rec, "resets") >= 3, "{rec}");
    assert!(u(rec, "retried_ios") > 0, "{rec}");
    let ver = verify_of(&v);
    assert_eq!(u(ver, "mismatches"), 0, "{ver}");
    assert!(u(ver, "blocks_verified_final") > 0, "{ver}");

    // Text output names the counts; without the option there is no recovery object.
    let out = perf(&[
        "sim",
        "-w",
        "randwrite",
        "-t",
        "1",
        "--reset-interval",
        "0.2",
        "--quiet",
    ]);
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("controller resets"), "{text}");
    let plain = json_run(&["sim", "-q", "4", "--ios", "100", "--json", "--quiet"]);
    assert!(plain.get("recovery").is_none(), "{plain}");

    // Only the spdk-like engine resets a controller.
    let out = perf(&["--engine", "io_uring", "/dev/null", "--reset-interval", "1"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--reset-interval applies to the spdk-like engine only"),
        "{err}"
    );
}

#[test]
fn a_stalled_device_is_ridden_out_with_tolerate_timeouts() {
    // After 500 I/Os the emulator holds 8 writes for 2 s, past the 0.8 s I/O timeout: they are
    // reported, aborted, counted, and their positions no longer checked; everything
    // acknowledged still reads back. (With a 0.3 s timeout, writes that were not held timed out
    // too on a loaded host: 24 instead of 8.)
    let line = [
        "sim",
        "--verify",
        "-w",
        "randwrite",
        "-q",
        "16",
        "--ios",
        "3000",
        "--range-blocks",
        "4096",
        "--io-timeout",
        "0.8",
        "--tolerate-timeouts",
        "--sim-fault",
        "stall-after=500",
        "--json",
        "--quiet",
    ];
    let v = json_run(&line);
    assert_eq!(u(&v, "errors"), 0, "{v}");
    let rec = &v["recovery"];
    assert_eq!(u(rec, "timed_out_ios"), 8, "{v}");
    // The emulator cancels a held command on Abort: each one is aborted, no reset needed.
    assert_eq!(u(rec, "aborts_sent"), 8, "{rec}");
    assert_eq!(u(rec, "aborts_succeeded"), 8, "{rec}");
    assert_eq!(u(rec, "timeout_resets"), 0, "{rec}");
    let ver = verify_of(&v);
    assert_eq!(u(ver, "mismatches"), 0, "{ver}");
    assert!(u(ver, "blocks_verified_final") > 0, "{ver}");

    // Without --tolerate-timeouts the same stall fails the run with the timeout named.
    let strict: Vec<&str> = line
        .iter()
        .copied()
        .filter(|a| *a != "--tolerate-timeouts")
        .collect();
    let out = perf(&strict);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("timed out"),
        "{out:?}"
    );
}

#[test]
fn append_on_the_zoned_namespace() {
    // Namespace 3 of `sim`: 64 zones of 256 blocks, 4 open / 6 active. 2000 appends per thread
    // fill a zone in use about twice: without the resets they would fail with Zone Is Full,
    // and an append the device placed outside its zone fails the run.
    let v = json_run(&[
        "sim", "-n", "3", "-w", "append", "-q", "16", "-j", "2", "--ios", "2000", "--json",
        "--quiet",
    ]);
    check_run(&v, "append", 16);
    assert_eq!(u(&v, "ios"), 4000, "exactly --ios per thread");
    for (args, needle) in [
        (
            &["sim", "-n", "1", "-w", "append"][..],
            "not a zoned namespace",
        ),
        (
            &["sim", "-n", "3", "-w", "append", "-j", "5"][..],
            "use fewer threads",
        ),
        (
            &["sim", "-n", "3", "-w", "append", "-b", "262144"][..],
            "Zone Append limit",
        ),
        (
            &["sim", "-n", "3", "-w", "append", "--verify"][..],
            "drop --verify",
        ),
        (
            &["--engine", "io_uring", "/dev/null", "-w", "append"][..],
            "-w append runs on our driver",
        ),
    ] {
        let out = perf(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}
