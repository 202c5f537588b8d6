//! nvme-hello over NVMe/TCP against the in-process fake target: the transport id on the
//! command line, a write/read-back round trip that lands on the target, a Copy, and the
//! errors for nothing listening and a wrong subsystem NQN.

use std::process::Command;

use nvme_tcp::fake::{Config, FakeTarget};

fn hello(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_nvme-hello"))
        .args(args)
        .output()
        .expect("run nvme-hello");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn hello_writes_and_reads_back_over_tcp() {
    let t = FakeTarget::start(Config::default());
    let trid = t.trid().to_string();
    let mut args: Vec<&str> = trid.split(' ').collect();
    args.extend(["--nsid", "2", "--write-lba", "9"]);
    let (rc, out, err) = hello(&args);
    assert_eq!(rc, 0, "{out}{err}");
    assert!(out.ends_with("Hello world!\n"), "{out}");
    assert_eq!(&t.disk(2, 9 * 512, 13), b"Hello world!\n");
    // The quoted single-argument form works too.
    let (rc, out, err) = hello(&[&trid, "--lba", "9", "--nsid", "2", "--verify"]);
    assert!(out.contains("Verify of LBA 9: ok"), "{out}{err}");
    assert_eq!(rc, 0, "{out}{err}");
    assert!(out.contains("|Hello world!....|"), "{out}");
}

#[test]
fn hello_copies_ranges_over_tcp() {
    let t = FakeTarget::start(Config::default());
    let trid = t.trid().to_string();
    let (rc, out, err) = hello(&[&trid, "--nsid", "2", "--write-lba", "9"]);
    assert_eq!(rc, 0, "{out}{err}");
    t.fill(2, 30 * 512, &[b'c'; 2 * 512]);
    // The greeting block, then two blocks of 'c', to LBAs 100..103.
    let (rc, out, err) = hello(&[
        &trid,
        "--nsid",
        "2",
        "--copy",
        "9:1,30:2",
        "--copy-to",
        "100",
        "--lba",
        "100",
    ]);
    assert_eq!(rc, 0, "{out}{err}");
    assert!(
        out.contains("Copy limits of namespace 2: 8 ranges (MSRC + 1), 32 blocks a range"),
        "{out}"
    );
    assert!(
        out.contains("Copy of 2 source ranges (3 blocks) to LBA 100..103: ok"),
        "{out}"
    );
    assert!(out.contains("|Hello world!....|"), "{out}");
    assert!(out.contains("Nothing else was written"), "{out}");
    assert_eq!(&t.disk(2, 100 * 512, 13), b"Hello world!\n");
    assert!(t.disk(2, 101 * 512, 1024).iter().all(|&b| b == b'c'));
    // Over the namespace's MSSRL (32): refused before the wire, with the limit named.
    let (rc, out, err) = hello(&[&trid, "--nsid", "2", "--copy", "0:33", "--copy-to", "500"]);
    assert_eq!(rc, 1, "{out}{err}");
    assert!(
        err.contains("copy of LBA 500") && err.contains("MSSRL"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn tcp_errors_are_clear() {
    let t = FakeTarget::start(Config::default());
    let wrong = format!(
        "trtype:TCP traddr:127.0.0.1 trsvcid:{} subnqn:nqn.2026-01.test:other",
        t.addr.port()
    );
    let (rc, _, err) = hello(&[&wrong]);
    assert_eq!(rc, 1);
    assert!(
        err.contains("no subsystem `nqn.2026-01.test:other`"),
        "{err}"
    );
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let nobody = format!("trtype:TCP traddr:127.0.0.1 trsvcid:{port} subnqn:nqn.x:y");
    let (rc, _, err) = hello(&[&nobody]);
    assert_eq!(rc, 1);
    assert!(err.contains("cannot connect to 127.0.0.1"), "{err}");
    let discovery = format!("trtype:TCP traddr:127.0.0.1 trsvcid:{}", t.addr.port());
    let (rc, _, err) = hello(&[&discovery]);
    assert_eq!(rc, 1);
    assert!(err.contains("discovery subsystem"), "{err}");
    let (rc, _, err) = hello(&["trtype:TCP", "subnqn:nqn.x:y"]);
    assert_eq!(rc, 1);
    assert!(err.contains("has no traddr"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn hello_with_a_reset_between_write_and_read_back_over_tcp() {
    let t = FakeTarget::start(Config::default());
    let trid = t.trid().to_string();
    let (rc, out, err) = hello(&[&trid, "--nsid", "2", "--write-lba", "11", "--reset"]);
    assert_eq!(rc, 0, "{out}{err}");
    assert!(out.contains("Controller reset"), "{out}");
    assert!(out.ends_with("Hello world!\n"), "{out}");
    assert_eq!(&t.disk(2, 11 * 512, 13), b"Hello world!\n");
    // Two associations: bring-up and the reset.
    assert_eq!(
        t.counters()
            .admin_connects
            .load(std::sync::atomic::Ordering::Relaxed),
        2
    );
    // --reset needs --write-lba.
    let (rc, _, err) = hello(&[&trid, "--reset"]);
    assert_eq!(rc, 1, "{err}");
    assert!(err.contains("--write-lba"), "{err}");
}

#[test]
fn hello_writes_scattered_pieces_in_one_vectored_command_over_tcp() {
    let t = FakeTarget::start(Config::default());
    let trid = t.trid().to_string();
    let dir = std::env::temp_dir().join(format!("nvme-hello-writev-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("src");
    let data: Vec<u8> = (0..16 * 4096u32)
        .map(|i| (i * 7 + i / 4096) as u8)
        .collect();
    std::fs::write(&file, &data).unwrap();
    let path = file.to_str().unwrap();
    let (rc, out, err) = hello(&[&trid, "--nsid", "2", "--writev", path, "--writev-lba", "40"]);
    assert_eq!(rc, 0, "{out}{err}");
    assert!(
        out.contains("Vectored write of 16 pieces (65536 bytes, 128 blocks) at LBA 40: ok"),
        "{out}"
    );
    assert!(
        out.contains("Vectored read of 16 pieces at LBA 40: equal"),
        "{out}"
    );
    assert_eq!(
        t.disk(2, 40 * 512, data.len()),
        data,
        "target got the pieces in order"
    );
    // Unaligned pieces (1 KiB + the rest) go as they are over TCP.
    let (rc, out, err) = hello(&[
        &trid,
        "--nsid",
        "2",
        "--writev",
        path,
        "--writev-lba",
        "400",
        "--piece-bytes",
        "2052",
    ]);
    assert_eq!(rc, 0, "{out}{err}");
    assert!(out.contains("Vectored write of 32 pieces"), "{out}");
    assert_eq!(t.disk(2, 400 * 512, data.len()), data);
    // More than 32 pieces: refused by name.
    let (rc, out, err) = hello(&[
        &trid,
        "--nsid",
        "2",
        "--writev",
        path,
        "--writev-lba",
        "400",
        "--piece-bytes",
        "1024",
    ]);
    assert_eq!(rc, 1, "{out}{err}");
    assert!(
        err.contains("64 pieces, more than one vectored command carries (32)"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
