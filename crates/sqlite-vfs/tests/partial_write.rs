//! A write that fails part-way (NVMe Write Fault from the emulator after some of its blocks
//! landed) must leave the store dirty, so the next sync (SQLite's `xSync`) still issues an
//! NVMe Flush for the blocks that did land.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use nvme_driver::spec::status::{media, Status, StatusCodeType};
use nvme_driver::{Controller, ControllerOptions, Transport};
use nvme_sim::{SimConfig, SimController, SimNamespace};
use nvme_sqlite_vfs::{BlockDevice, Error, Format, NvmeDevice, Result, Store};

const BS: u32 = 4096;

fn write_fault() -> Status {
    Status::new(
        StatusCodeType::MediaDataIntegrity.raw(),
        media::WRITE_FAULT,
        true,
    )
}

/// An NVMe device that arms the emulator's `fail_next_io` just before its `fail_at`-th write
/// call from now (1 = the next write), so the writes before it succeed.
struct FailingWrites {
    dev: NvmeDevice,
    sim: Arc<SimController>,
    fail_at: Arc<AtomicU32>,
}

impl BlockDevice for FailingWrites {
    fn block_size(&self) -> u32 {
        self.dev.block_size()
    }
    fn blocks(&self) -> u64 {
        self.dev.blocks()
    }
    fn read(&mut self, lba: u64, buf: &mut [u8]) -> Result<()> {
        self.dev.read(lba, buf)
    }
    fn write(&mut self, lba: u64, buf: &[u8]) -> Result<()> {
        let left = self.fail_at.load(Ordering::Relaxed);
        if left > 0 {
            self.fail_at.store(left - 1, Ordering::Relaxed);
            if left == 1 {
                self.sim.faults().fail_next_io(write_fault(), 1);
            }
        }
        self.dev.write(lba, buf)
    }
    fn flush(&mut self) -> Result<()> {
        self.dev.flush()
    }
}

#[test]
fn a_write_failing_part_way_still_gets_flushed_by_the_next_sync() {
    let sim = Arc::new(SimController::start(SimConfig {
        namespaces: vec![SimNamespace {
            nsid: 1,
            block_size: BS,
            blocks: (16 << 20) / u64::from(BS),
            ..SimNamespace::default()
        }],
        null_io: false,
        ..SimConfig::default()
    }));
    let ctrl = Controller::new(
        Transport::new(sim.mmio(), sim.dma(), "sim"),
        ControllerOptions::default(),
    )
    .expect("controller");
    let fail_at = Arc::new(AtomicU32::new(0));
    let dev = FailingWrites {
        dev: NvmeDevice::new(ctrl, 1).expect("device"),
        sim: sim.clone(),
        fail_at: fail_at.clone(),
    };
    let mut store = Store::open(Box::new(dev), Format::IfBlank).expect("format");
    store.create("f").expect("create");
    store.write("f", 0, &[1u8; 3 * BS as usize]).expect("write");
    store.sync().expect("sync");

    // Overwrite inside the file (its length and the directory do not change): the partial
    // head block is written first and lands, the whole block after it fails.
    let flushes = sim.stats().flushes;
    let writes = sim.stats().writes;
    fail_at.store(2, Ordering::Relaxed);
    let err = store
        .write("f", 100, &[2u8; BS as usize + 100])
        .expect_err("the second device write fails");
    assert!(matches!(err, Error::Driver { .. }), "{err}");
    assert_eq!(
        sim.stats().writes,
        writes + 2,
        "head block written, body failed"
    );
    let mut head = [0u8; 4];
    store.read("f", 100, &mut head).expect("read");
    assert_eq!(head, [2; 4], "the head block landed");

    // xSync: the landed block is in the device's volatile cache until a Flush.
    store.sync().expect("sync after the failure");
    assert_eq!(
        sim.stats().flushes,
        flushes + 1,
        "sync after a partly failed write issued no NVMe Flush"
    );
}
