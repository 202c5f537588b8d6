//! nvme-dd over NVMe/TCP against the in-process fake target: a file written to a namespace
//! (R2T writes pipelined at queue depth 4, a padded last record) lands on the target and reads
//! back the same.

use std::process::Command;

use nvme_tcp::fake::{Config, FakeTarget};

fn dd(args: &[&str]) {
    let out = Command::new(env!("CARGO_BIN_EXE_nvme-dd"))
        .args(args)
        .output()
        .expect("run nvme-dd");
    assert!(
        out.status.success(),
        "nvme-dd {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn round_trip_over_tcp() {
    let t = FakeTarget::start(Config::default());
    let trid = t.trid().to_string();
    let dir = std::env::temp_dir().join(format!("nvme-dd-tcp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let input = dir.join("in.bin");
    let output = dir.join("out.bin");
    let data: Vec<u8> = (0..300_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
    std::fs::write(&input, &data).unwrap();
    let iff = format!("if={}", input.display());
    let off = format!("of={}", output.display());
    dd(&[
        "--device",
        &trid,
        &iff,
        "of=nvme:2",
        "bs=64k",
        "--qd",
        "4",
        "--no-progress",
    ]);
    assert_eq!(t.disk(2, 0, data.len()), data);
    dd(&[
        "--device",
        &trid,
        "if=nvme:2",
        &off,
        "bs=64k",
        "count=5",
        "--no-progress",
    ]);
    let back = std::fs::read(&output).unwrap();
    assert_eq!(&back[..data.len()], &data[..]);
    assert!(back[data.len()..].iter().all(|&b| b == 0));
    std::fs::remove_dir_all(&dir).unwrap();
}
