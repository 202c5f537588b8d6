//! Two controllers in one DMA context sharing one buffer pool: a pattern is written on
//! controller A, read back on A into a buffer of the pool, that same buffer is written on
//! controller B, and B's copy is read back and checked.
//!
//! `cargo run -p nvme-driver --example two_controllers -- sim` (two in-process emulated
//! controllers sharing one emulated IOMMU) or `-- 0000:01:00.0 0000:02:00.0` (two controllers
//! bound to vfio-pci; this WRITES 64 KiB at byte offset 1 MiB of namespace 1 of both).

use nvme_driver::IoQueue;
use nvme_driver::WriteFlags;
use std::sync::Arc;

use nvme_driver::{Controller, ControllerOptions, DmaContext, QueuePairOptions, Transport};
use nvme_sim::{SimConfig, SimController, SimDma};

/// Bytes copied (a multiple of 512 and 4096 byte blocks).
const LEN: usize = 64 * 1024;
/// Where, in bytes from the start of namespace 1.
const OFFSET: u64 = 1 << 20;
/// The first bytes of the pattern (a guest test finds them with the kernel driver).
const MARKER: &[u8] = b"two-controllers pattern\n";

fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // Display, not Debug: the driver's messages say how to fix the problem.
            eprintln!("two_controllers: error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // Keep the emulators (if any) alive as long as the controllers.
    let (ctx, _sims, a, b) = if args.first().map_or(true, |a| a == "sim") {
        let dma = Arc::new(SimDma::new());
        let ctx = DmaContext::with_mapper(dma.clone());
        let mut sims = Vec::new();
        let mut open = |name: &str| -> nvme_driver::Result<Controller> {
            let sim = SimController::start_in(SimConfig::default(), dma.clone());
            let t = Transport::new(sim.mmio(), sim.dma(), name)
                .with_function_control(sim.function_control());
            sims.push(sim);
            Controller::new_in(&ctx, t, ControllerOptions::default())
        };
        let (a, b) = (open("sim-a")?, open("sim-b")?);
        (ctx, sims, a, b)
    } else {
        let [addr_a, addr_b] = args.as_slice() else {
            return Err(
                "usage: two_controllers sim | two_controllers PCI_ADDR_A PCI_ADDR_B".into(),
            );
        };
        let ctx = DmaContext::new()?;
        let a = Controller::open_pci_in(&ctx, addr_a, ControllerOptions::default())?;
        let b = Controller::open_pci_in(&ctx, addr_b, ControllerOptions::default())?;
        (ctx, Vec::new(), a, b)
    };
    let groups = ctx
        .vfio()
        .map(|v| format!(", IOMMU groups {:?}", v.iommu_groups()))
        .unwrap_or_default();
    println!(
        "two_controllers: A={} B={} in one DMA context ({}{groups})",
        a.name(),
        b.name(),
        ctx.domain()
    );
    let (ns_a, ns_b) = (a.namespace(1)?, b.namespace(1)?);
    let (mut qa, mut qb) = (
        a.create_queue_pair(QueuePairOptions::default())?,
        b.create_queue_pair(QueuePairOptions::default())?,
    );

    // One pool for both controllers: a single allocation from the context, carved up.
    let pool = ctx.alloc_buffer(3 * LEN)?;
    let (mut source, rest) = pool.split_at(LEN).map_err(|_| "pool too small")?;
    let (copy, check) = rest.split_at(LEN).map_err(|_| "pool too small")?;

    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .subsec_nanos() as u64
        | 1;
    let mut x = seed;
    for byte in source.iter_mut() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *byte = x as u8;
    }
    source[..MARKER.len()].copy_from_slice(MARKER);
    let pattern = source.to_vec();

    let blocks = |ns: &nvme_driver::Namespace| -> Result<(u64, u32), String> {
        let bs = u64::from(ns.block_size());
        if LEN as u64 % bs != 0 || (OFFSET + LEN as u64) > ns.blocks() * bs {
            return Err(format!(
                "namespace {} is too small or its blocks do not divide {LEN}",
                ns.nsid()
            ));
        }
        Ok((OFFSET / bs, (LEN as u64 / bs) as u32))
    };
    let ((lba_a, n_a), (lba_b, n_b)) = (blocks(&ns_a)?, blocks(&ns_b)?);

    let source = qa
        .write(&ns_a, lba_a, n_a, source, WriteFlags::NONE)
        .map_err(|f| f.error)?;
    let copy = qa.read(&ns_a, lba_a, n_a, copy).map_err(|f| f.error)?;
    if copy[..] != pattern[..] {
        return Err("read back on A differs from what was written".into());
    }
    let copy = qb
        .write(&ns_b, lba_b, n_b, copy, WriteFlags::NONE)
        .map_err(|f| f.error)?;
    let check = qb.read(&ns_b, lba_b, n_b, check).map_err(|f| f.error)?;
    if check[..] != pattern[..] {
        return Err("read back on B differs from what was written on A".into());
    }
    println!(
        "two_controllers: wrote {LEN} bytes on A (namespace 1, LBA {lba_a}), read them back on A \
         into a pool buffer, wrote that buffer on B (namespace 1, LBA {lba_b}), read back on B: \
         OK (seed {seed:#x})"
    );
    // The pieces of the pool join again (one mapping, adjacent).
    let pool = source
        .join(copy)
        .and_then(|p| p.join(check))
        .map_err(|_| "pool pieces did not join")?;
    assert_eq!(pool.len(), 3 * LEN);
    Ok(())
}
