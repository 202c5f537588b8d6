//! Two VFSs on one namespace would each keep their own copy of the directory and overwrite
//! the other's: the second is refused, whether it comes through the same controller handle
//! or another controller of the same NVM subsystem, until the first is dropped.

use std::sync::atomic::{AtomicU32, Ordering};

use nvme_driver::{Controller, ControllerOptions, Transport};
use nvme_sim::{SimConfig, SimController, SimNamespace};
use nvme_sqlite_vfs::{Error, Format, NvmeDevice, NvmeVfs};

/// An emulator with one 4 KiB-block namespace and the given serial number (the tests of
/// this binary run in parallel, each on its own emulated subsystem).
fn sim(serial: &str) -> SimController {
    SimController::start(SimConfig {
        namespaces: vec![
            SimNamespace {
                nsid: 1,
                block_size: 4096,
                blocks: 4096,
                ..SimNamespace::default()
            },
            SimNamespace {
                nsid: 2,
                block_size: 4096,
                blocks: 4096,
                ..SimNamespace::default()
            },
        ],
        null_io: false,
        serial: serial.to_owned(),
        ..SimConfig::default()
    })
}

fn controller(sim: &SimController) -> Controller {
    let transport = Transport::new(sim.mmio(), sim.dma(), "sim");
    Controller::new(transport, ControllerOptions::default()).expect("controller")
}

fn name() -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    format!("one-vfs-{}", N.fetch_add(1, Ordering::Relaxed))
}

fn register(ctrl: &Controller, nsid: u32, format: Format) -> Result<NvmeVfs, Error> {
    let dev = NvmeDevice::new(ctrl.clone(), nsid)?;
    NvmeVfs::register(&name(), Box::new(dev), format)
}

#[test]
fn a_second_vfs_on_the_same_namespace_is_refused_until_the_first_is_dropped() {
    let sim = sim("ONE-VFS-1");
    let ctrl = controller(&sim);
    let first = register(&ctrl, 1, Format::IfBlank).expect("first");
    let conn = first.open("t.db").expect("open");
    conn.execute_batch("CREATE TABLE t(x); INSERT INTO t VALUES (7);")
        .expect("sql");

    // Format::Always would wipe the first VFS's files if it got as far as the store.
    let err = register(&ctrl, 1, Format::Always).expect_err("second VFS on namespace 1");
    let msg = err.to_string();
    assert!(matches!(err, Error::NamespaceInUse { .. }), "{msg}");
    assert!(
        msg.contains(first.name()),
        "names the VFS holding it: {msg}"
    );
    assert!(msg.contains("ONE-VFS-1"), "names the subsystem: {msg}");

    // Another namespace of the same controller is free.
    drop(register(&ctrl, 2, Format::IfBlank).expect("namespace 2"));

    // The first VFS was not disturbed.
    let x: i64 = conn
        .query_row("SELECT x FROM t", [], |r| r.get(0))
        .expect("row");
    assert_eq!(x, 7);
    drop(conn);
    drop(first);

    // Released on drop: the namespace can be opened again and still holds the table.
    let again = register(&ctrl, 1, Format::Never).expect("after the first is dropped");
    let conn = again.open("t.db").expect("open");
    let x: i64 = conn
        .query_row("SELECT x FROM t", [], |r| r.get(0))
        .expect("row");
    assert_eq!(x, 7);
}

#[test]
fn another_controller_of_the_same_subsystem_is_refused_too() {
    // Two emulated controllers reporting one subsystem identity (serial, model, vendor): two
    // controllers of one NVM subsystem, e.g. two NVMe/TCP connections, share its namespaces.
    let (a, b) = (sim("ONE-VFS-2"), sim("ONE-VFS-2"));
    let first = register(&controller(&a), 1, Format::IfBlank).expect("first");
    let err = register(&controller(&b), 1, Format::IfBlank).expect_err("same subsystem");
    assert!(matches!(err, Error::NamespaceInUse { .. }), "{err}");
    drop(first);
    drop(register(&controller(&b), 1, Format::IfBlank).expect("after drop"));
}
