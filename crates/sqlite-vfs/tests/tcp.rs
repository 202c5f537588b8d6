//! SQLite on an NVMe/TCP namespace: the VFS over `nvme_device::AnyQueuePair`, against the
//! in-process fake NVMe/TCP target (`nvme-tcp` feature `fake-target`).

use nvme_device::AnyController;
use nvme_sqlite_vfs::{BlockDevice, Format, NvmeDevice, NvmeVfs};
use nvme_tcp::fake::{Config, FakeTarget};
use nvme_tcp::{TcpController, TcpOptions};

/// A target with one 16 MiB namespace of 4096-byte blocks (nsid 1) and one of 512-byte
/// blocks (nsid 2).
fn target(subnqn: &str) -> FakeTarget {
    FakeTarget::start(Config {
        subnqn: subnqn.into(),
        namespaces: vec![(1, 12, 4096), (2, 9, 32768)],
        ..Config::default()
    })
}

fn connect(t: &FakeTarget) -> TcpController {
    TcpController::connect(&t.trid(), TcpOptions::default()).expect("connect")
}

fn table_survives_a_reopen(subnqn: &str, nsid: u32) {
    let t = target(subnqn);
    {
        let dev = NvmeDevice::new(connect(&t), nsid).expect("device");
        assert!(matches!(dev.controller(), AnyController::Tcp(_)));
        assert_eq!(
            dev.identity().unwrap(),
            format!("subsystem {subnqn} nsid {nsid}")
        );
        let vfs = NvmeVfs::register(&format!("tcp-{subnqn}"), Box::new(dev), Format::IfBlank)
            .expect("register");
        let conn = vfs.open("tcp.db").expect("open");
        conn.execute_batch(
            "CREATE TABLE t(k INTEGER PRIMARY KEY, v TEXT);
             BEGIN;
             WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 2000)
             INSERT INTO t SELECT i, printf('row %d', i) FROM n;
             COMMIT;",
        )
        .expect("create and insert");
        drop(conn);
    }
    // A new association to the same subsystem finds the committed database on the namespace.
    let dev = NvmeDevice::new(AnyController::from(connect(&t)), nsid).expect("device again");
    let vfs = NvmeVfs::register(&format!("tcp-{subnqn}-again"), Box::new(dev), Format::Never)
        .expect("reopen");
    let conn = vfs.open("tcp.db").expect("open again");
    let (rows, last): (i64, String) = conn
        .query_row(
            "SELECT count(*), max(v) FROM t WHERE k = 2000 OR k < 10",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .expect("read back");
    assert_eq!((rows, last.as_str()), (10, "row 9"));
    let total: i64 = conn
        .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
        .expect("count");
    assert_eq!(total, 2000);
    let integrity: String = conn
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .expect("integrity_check");
    assert_eq!(integrity, "ok");
}

#[test]
fn sqlite_on_a_4k_nvme_tcp_namespace() {
    table_survives_a_reopen("nqn.2026-01.test:sqlite-tcp-4k", 1);
}

#[test]
fn sqlite_on_a_512_byte_nvme_tcp_namespace() {
    table_survives_a_reopen("nqn.2026-01.test:sqlite-tcp-512", 2);
}
