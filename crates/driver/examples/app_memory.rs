//! Bring your own memory: register a buffer pool the application allocated itself (here an
//! anonymous `mmap`, as a database's buffer pool or a hugepage arena would be), carve it into
//! per-request buffers, do I/O with them in flight together, put the pieces back together and
//! unregister the pool, then give the memory back to the system.
//!
//! `cargo run -p nvme-driver --example app_memory -- sim` (the in-process emulator) or
//! `-- 0000:01:00.0` (a controller bound to vfio-pci; this WRITES LBAs 2000.. of namespace 1).

use nvme_driver::IoQueue;
use std::ptr::NonNull;

use nvme_driver::{
    Controller, ControllerOptions, DmaBuffer, QueuePairOptions, Transport, WriteFlags,
};
use nvme_sim::{SimConfig, SimController};

/// Requests in flight at once, one pool piece each.
const PIECES: usize = 16;
/// Bytes per piece (one request).
const PIECE: usize = 16 * 1024;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let arg = std::env::args().nth(1).unwrap_or_else(|| "sim".into());
    let (_sim, ctrl) = if arg == "sim" {
        let sim = SimController::start(SimConfig::default());
        let t = Transport::new(sim.mmio(), sim.dma(), "sim");
        let ctrl = Controller::new(t, ControllerOptions::default())?;
        (Some(sim), ctrl)
    } else {
        let ctrl = Controller::open_pci(&arg, ControllerOptions::default())?;
        (None, ctrl)
    };
    let ns = ctrl.namespace(1)?;
    let blocks = (PIECE / ns.block_size() as usize) as u32;
    let mut qp = ctrl.create_queue_pair(QueuePairOptions::default())?;

    // The application's pool: page-aligned anonymous memory it owns.
    let len = PIECES * PIECE;
    let pool = memmap2::MmapMut::map_anon(len)?;
    let ptr = NonNull::new(pool.as_ptr() as *mut u8).expect("mmap returned a mapping");
    // SAFETY: `pool` stays mapped until after the last piece is dropped (the end of this
    // function drops the joined buffer before `pool`), and nothing else touches it meanwhile.
    let registered = unsafe { DmaBuffer::register_raw(ctrl.dma(), ptr, len) }?;

    // Carve it into one buffer per request and write them all at once.
    let mut pieces = Vec::with_capacity(PIECES);
    let mut rest = registered;
    for _ in 1..PIECES {
        let (piece, tail) = rest.split_at(PIECE).map_err(|_| "split")?;
        pieces.push(piece);
        rest = tail;
    }
    pieces.push(rest);
    for (i, mut piece) in pieces.into_iter().enumerate() {
        piece.fill(i as u8 + 1);
        let lba = 2000 + i as u64 * u64::from(blocks);
        qp.submit_write(&ns, lba, blocks, piece, WriteFlags::NONE, i as u64)
            .map_err(|f| f.error)?;
    }
    let mut back: Vec<Option<DmaBuffer>> = (0..PIECES).map(|_| None).collect();
    let mut done = 0;
    while done < PIECES {
        done += qp.poll(|c| {
            c.result.as_ref().expect("write");
            back[c.user_data as usize] = c.buffer;
        });
    }
    // Read everything back in one request through the rejoined pool.
    let mut whole = back[0].take().expect("buffer 0 came back");
    for piece in back.iter_mut().skip(1) {
        whole = whole
            .join(piece.take().expect("every buffer came back"))
            .map_err(|_| "pieces of one registration join")?;
    }
    whole.fill(0);
    let whole = qp
        .read(&ns, 2000, blocks * PIECES as u32, whole)
        .map_err(|f| f.error)?;
    for (i, chunk) in whole.chunks(PIECE).enumerate() {
        assert!(chunk.iter().all(|&b| b == i as u8 + 1), "piece {i}");
    }
    println!(
        "{}: {PIECES} writes from an application-owned {len}-byte pool, read back in one \
         request and verified",
        ctrl.name()
    );
    // Unregister (the last piece unmaps it), then the memory is the application's again.
    drop(whole);
    drop(pool);
    Ok(())
}
