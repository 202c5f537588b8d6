//! Open a controller, list its namespaces, write one block and read it back (synchronous).
//!
//! `cargo run -p nvme-driver --example hello -- sim` (the in-process emulator) or
//! `-- 0000:01:00.0` (a controller bound to vfio-pci; this WRITES LBA 1000 of namespace 1).

use nvme_driver::IoQueue;
use nvme_driver::WriteFlags;
use nvme_driver::{Controller, ControllerOptions, QueuePairOptions, Transport};
use nvme_sim::{SimConfig, SimController};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let arg = std::env::args().nth(1).unwrap_or_else(|| "sim".into());
    // Keep the emulator (if any) alive as long as the controller.
    let (_sim, ctrl) = if arg == "sim" {
        let sim = SimController::start(SimConfig::default());
        let t = Transport::new(sim.mmio(), sim.dma(), "sim");
        let ctrl = Controller::new(t, ControllerOptions::default())?;
        (Some(sim), ctrl)
    } else {
        (
            None,
            Controller::open_pci(&arg, ControllerOptions::default())?,
        )
    };
    println!("{}: {}", ctrl.name(), ctrl.identify().model());
    for ns in ctrl.namespaces() {
        println!(
            "  namespace {}: {} blocks of {} bytes",
            ns.nsid(),
            ns.blocks(),
            ns.block_size()
        );
    }
    let ns = ctrl.namespace(1)?;
    let mut qp = ctrl.create_queue_pair(QueuePairOptions::default())?;
    let mut buf = ctrl.alloc_buffer(ns.block_size() as usize)?;
    buf[..13].copy_from_slice(b"Hello world!\n");
    let mut buf = qp
        .write(&ns, 1000, 1, buf, WriteFlags::NONE)
        .map_err(|f| f.error)?;
    buf.fill(0);
    let buf = qp.read(&ns, 1000, 1, buf).map_err(|f| f.error)?;
    print!("{}", String::from_utf8_lossy(&buf[..13]));
    assert_eq!(&buf[..13], b"Hello world!\n");
    Ok(())
}
