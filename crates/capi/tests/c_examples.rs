//! Builds the C examples (`examples/c/*.c`) with the system C compiler against the static
//! library and runs them against the emulated controller: the C API works from C, with the
//! checked-in header, with no device.
//!
//! The compiler is `$CC` or `cc`; the library is the `libnvme_userspace.a` cargo built for this
//! test run (override with `NVME_CAPI_STATICLIB=/path/to/libnvme_userspace.a`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("repository root")
}

/// The static library built along with this test (cargo builds every crate type of the
/// library for integration tests and leaves the staticlib in `deps/`).
fn staticlib() -> PathBuf {
    if let Some(path) = std::env::var_os("NVME_CAPI_STATICLIB") {
        return PathBuf::from(path);
    }
    let exe = std::env::current_exe().expect("test executable path");
    let deps = exe.parent().expect("deps directory");
    let candidates = [
        deps.join("libnvme_userspace.a"),
        deps.join("../libnvme_userspace.a"),
    ];
    candidates
        .iter()
        .find(|p| p.is_file())
        .cloned()
        .unwrap_or_else(|| {
            panic!("libnvme_userspace.a not found at {candidates:?}; set NVME_CAPI_STATICLIB")
        })
}

/// Compiles `examples/c/<name>.c` and returns the executable.
fn build_example(name: &str) -> PathBuf {
    build_c(name, &repo_root().join(format!("examples/c/{name}.c")))
}

/// Compiles the C program `source` and returns the executable (one file per call: tests run
/// in parallel, and executing a file another test is rewriting fails with ETXTBSY).
fn build_c(name: &str, source: &Path) -> PathBuf {
    static BUILDS: AtomicUsize = AtomicUsize::new(0);
    let root = repo_root();
    let n = BUILDS.fetch_add(1, Ordering::Relaxed);
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("c-example-{name}-{n}"));
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
    let output = Command::new(&cc)
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-O1", "-I"])
        .arg(root.join("crates/capi/include"))
        .arg(source)
        .arg(staticlib())
        .args(["-lpthread", "-ldl", "-lm", "-o"])
        .arg(&out)
        .output()
        .unwrap_or_else(|e| panic!("running the C compiler `{cc}`: {e} (set CC)"));
    assert!(
        output.status.success(),
        "compiling {name}.c failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    out
}

/// Runs an example and returns its standard output, asserting exit status 0.
fn run(exe: &Path, args: &[&str]) -> String {
    let output = Command::new(exe).args(args).output().expect("run example");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{} {args:?} exited with {}\nstdout:\n{stdout}\nstderr:\n{}",
        exe.display(),
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

#[test]
fn hello_writes_and_reads_back_a_block_on_the_emulated_controller() {
    let exe = build_example("hello");
    let out = run(&exe, &["emulated"]);
    for expected in [
        "controller: nvme-sim emulated controller",
        "namespace 1: 32768 blocks of 512 bytes",
        "namespace 2: 4096 blocks of 4096 bytes",
        "resubmitting an in-flight buffer: the buffer is in flight",
        "namespace 1 LBA 32767: wrote and read back 512 bytes: OK",
        "hello: done",
    ] {
        assert!(out.contains(expected), "missing {expected:?} in:\n{out}");
    }
}

#[test]
fn qd_loop_verifies_data_at_queue_depth_on_the_emulated_controller() {
    let exe = build_example("qd_loop");
    let out = run(&exe, &["emulated", "8", "400"]);
    for expected in [
        "qd_loop: QD 8: 400 writes, 400 reads verified",
        "qd_loop: write zeroes, deallocate, flush: OK",
        "is outside namespace 1",
        "qd_loop: copy of 2 ranges (16 blocks) to LBA 64: OK",
        "qd_loop: done",
    ] {
        assert!(out.contains(expected), "missing {expected:?} in:\n{out}");
    }
    // Queue depth 1 (a ring of 2 entries) works too.
    let out = run(&exe, &["emulated", "1", "20"]);
    assert!(
        out.contains("qd_loop: QD 1: 20 writes, 20 reads verified"),
        "{out}"
    );
}

#[test]
fn commands_runs_compare_and_write_and_write_uncorrectable_on_the_emulated_controller() {
    let exe = build_example("commands");
    let out = run(&exe, &["emulated"]);
    for expected in [
        "compare and write: match wrote, mismatch (Compare Failure) did not: OK",
        "write uncorrectable: read failed (Unrecovered Read Error), write healed it: OK",
        "commands: done",
    ] {
        assert!(out.contains(expected), "missing {expected:?} in:\n{out}");
    }
    // Without a device string the example says how to run it.
    let output = Command::new(&exe).output().expect("run example");
    assert_eq!(output.status.code(), Some(2));
}

#[test]
fn qd_loop_rate_mode_reports_random_reads_on_the_emulated_controller() {
    let exe = build_example("qd_loop");
    let out = run(&exe, &["emulated", "--randread", "16", "0.2"]);
    let line = out
        .lines()
        .find(|l| l.starts_with("qd_loop: randread QD 16: "))
        .unwrap_or_else(|| panic!("no rate line in:\n{out}"));
    let ios: u64 = line["qd_loop: randread QD 16: ".len()..]
        .split(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no I/O count in {line:?}"));
    assert!(ios > 16, "{line}");
    assert!(line.ends_with(" IOPS"), "{line}");
    // Bad arguments are refused with a usage message.
    let output = Command::new(&exe)
        .args(["emulated", "--randread", "0", "1"])
        .output()
        .expect("run example");
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("needs QD >= 1"));
}

#[test]
fn hello_writes_and_reads_back_a_block_over_nvme_tcp() {
    use nvme_tcp::fake::{Config, FakeTarget};
    let t = FakeTarget::start(Config::default());
    let trid = format!(
        "trtype:TCP adrfam:IPv4 traddr:{} trsvcid:{} subnqn:{}",
        t.addr.ip(),
        t.addr.port(),
        t.trid().subnqn
    );
    let exe = build_example("hello");
    let out = run(&exe, &[&trid, "--write"]);
    for expected in [
        "namespace 1: 256 blocks of 4096 bytes",
        "namespace 2: 2048 blocks of 512 bytes",
        "resubmitting an in-flight buffer: the buffer is in flight",
        "namespace 1 LBA 255: wrote and read back 4096 bytes: OK",
        "hello: done",
    ] {
        assert!(out.contains(expected), "missing {expected:?} in:\n{out}");
    }
    // The block is on the target: hello writes byte i as i * 7 + 3.
    let expected: Vec<u8> = (0..4096u32).map(|i| (i * 7 + 3) as u8).collect();
    assert_eq!(t.disk(1, 255 * 4096, 4096), expected);
}

#[test]
fn a_callback_left_by_longjmp_leaves_the_pair_busy_until_recovered() {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/longjmp_callback.c");
    let exe = build_c("longjmp_callback", &source);
    let out = run(&exe, &[]);
    for expected in [
        "left a callback by longjmp: 1",
        // Indistinguishable from a callback still running: refused, not undefined.
        "poll after the longjmp: busy",
        "destroy after the longjmp: busy",
        "recover: 1",
        // The completion reaped with the abandoned one, and a new read.
        "callbacks after recover: 2",
        "recover again: 0",
        "longjmp_callback: done",
    ] {
        assert!(out.contains(expected), "missing {expected:?} in:\n{out}");
    }
}

#[test]
fn probe_attach_detach_from_c_on_a_fake_sysfs_tree() {
    use std::os::unix::fs::symlink;
    let root = Path::new(env!("CARGO_TARGET_TMPDIR")).join("capi-probe-sysfs");
    let _ = std::fs::remove_dir_all(&root);
    for (addr, class, driver) in [
        ("0000:00:04.0", "0x010802", "vfio-pci"),
        ("0000:00:05.0", "0x010802", "vfio-pci"),
        ("0000:00:06.0", "0x010802", "vfio-pci"),
        ("0000:00:07.0", "0x010802", "nvme"),
        ("0000:00:03.0", "0x020000", "vfio-pci"),
    ] {
        let dir = root.join("bus/pci/devices").join(addr);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("class"), format!("{class}\n")).unwrap();
        std::fs::write(dir.join("vendor"), "0x1b36\n").unwrap();
        std::fs::write(dir.join("device"), "0x0010\n").unwrap();
        symlink(
            format!("../../../bus/pci/drivers/{driver}"),
            dir.join("driver"),
        )
        .unwrap();
    }
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/probe.c");
    let exe = build_c("probe", &source);
    let out = run(&exe, &[root.to_str().unwrap()]);
    for expected in [
        "probe 0000:00:04.0 driver vfio-pci 1b36:0010 class 010802 vfio 1",
        "attach 0000:00:04.0: 2 namespaces",
        "probe 0000:00:05.0",
        "attach 0000:00:06.0: 2 namespaces",
        // Three on vfio-pci probed (the NIC and the kernel-bound one are not offered), one
        // declined.
        "attached 2 probed 3 failed 0",
        "check_removal 0",
        // The emulator has no BAR mapping to guard.
        "guard_register_faults unsupported",
        "remove: get_info ok",
        "removed 2",
        "filtered: attached 1",
        "vfio: attached 0 failed 2 message names it",
        "bad address: invalid argument",
        "probe: done",
    ] {
        assert!(out.contains(expected), "missing {expected:?} in:\n{out}");
    }
    assert!(!out.contains("attach 0000:00:05.0"), "{out}");
    assert!(!out.contains("0000:00:07.0"), "{out}");
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn zones_runs_vectored_io_and_the_zoned_flow_on_the_emulated_controller() {
    let exe = build_example("zones");
    let out = run(&exe, &["emulated"]);
    for expected in [
        "vectored: page-aligned pieces: 3 pieces written, 2 read back, 16384 bytes equal: OK",
        "vectored: unaligned pieces (SGL): 3 pieces written, 2 read back, 16384 bytes equal: OK",
        "vectored: 139264 bytes above the 131072-byte transfer refused: OK",
        "zones: namespace 2: 16 zones of 256 blocks, max open 4, max active 6",
        "zones: report: zones 0..3 Empty: OK",
        "zones: append: LBAs 0 2 4, write pointer 6, data read back: OK",
        "zones: full zone: the zone is full: reset it or write another zone (sct 1 sc 0xb9): OK",
        "zones: reset: Empty, write pointer back at 512: OK",
        "zones: offline of an empty zone: invalid zone state transition",
        "zones: reset all: 16 zones Empty: OK",
        "zones: done",
    ] {
        assert!(out.contains(expected), "missing {expected:?} in:\n{out}");
    }
    let output = Command::new(&exe).output().expect("run example");
    assert_eq!(output.status.code(), Some(2));
}
