//! The tool end to end: `nvme-target sim` serves the emulator; our initiator writes and reads
//! back; SIGTERM stops it cleanly (exit status 0).

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use nvme_core::{IoQueue, QueuePairOptions, WriteFlags};
use nvme_tcp::{TcpController, TcpOptions, TransportId};

#[test]
fn serves_sim_and_stops_on_sigterm() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let mut child = Command::new(env!("CARGO_BIN_EXE_nvme-target"))
        .args([
            "sim",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--subnqn",
            "nqn.2026-01.io.example:tool",
            "--allow-host",
            "nqn.2026-01.io.example:h1",
            "--threads",
            "2",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .expect("nvme-target runs");
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert!(
        line.contains("serving nqn.2026-01.io.example:tool (2 namespace(s)"),
        "{line}"
    );

    let trid = TransportId::parse(&format!(
        "trtype:TCP traddr:127.0.0.1 trsvcid:{port} subnqn:nqn.2026-01.io.example:tool hostnqn:nqn.2026-01.io.example:h1"
    ))
    .unwrap();
    let options = TcpOptions {
        timeout: Duration::from_secs(5),
        ..TcpOptions::default()
    };
    {
        let c = TcpController::connect(&trid, options).expect("connect");
        let ns = c.namespace(1).unwrap();
        let mut qp = c.create_queue_pair(QueuePairOptions::default()).unwrap();
        let mut buf = c.alloc_buffer(16 << 10).unwrap();
        for (i, b) in buf.iter_mut().enumerate() {
            *b = (i * 7 + 3) as u8;
        }
        let mut buf = qp.write(&ns, 8, 4, buf, WriteFlags::NONE).unwrap();
        buf.fill(0);
        let buf = qp.read(&ns, 8, 4, buf).unwrap();
        assert!(buf.iter().enumerate().all(|(i, &b)| b == (i * 7 + 3) as u8));
    }
    let kill = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let status = child.wait().unwrap();
    assert!(status.success(), "{status:?}");
    let mut rest = String::new();
    let _ = std::io::Read::read_to_string(&mut out, &mut rest);
    assert!(rest.contains("nvme-target: stopped"), "{rest}");
}
