//! A write that fails in flight (NVMe Write Fault from the emulator, after an earlier write
//! landed) must surface at the next sync (SQLite's `xSync` then fails with `SQLITE_IOERR`),
//! and must leave the store dirty, so that sync and the next still issue an NVMe Flush for
//! the blocks that did land.

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

/// An NVMe device that arms the emulator's `fail_next_io` just before its next flush when
/// `fail_on_flush` is set, so the write the flush submits (the last one, still buffered by
/// the write-behind queue) fails.
struct FailingWrites {
    dev: NvmeDevice,
    sim: Arc<SimController>,
    fail_on_flush: Arc<AtomicU32>,
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
        self.dev.write(lba, buf)
    }
    fn flush(&mut self) -> Result<()> {
        if self.fail_on_flush.swap(0, Ordering::Relaxed) == 1 {
            self.sim.faults().fail_next_io(write_fault(), 1);
        }
        self.dev.flush()
    }
}

#[test]
fn a_write_failing_in_flight_fails_the_sync_and_still_gets_flushed() {
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
    let fail_on_flush = Arc::new(AtomicU32::new(0));
    let dev = FailingWrites {
        dev: NvmeDevice::new(ctrl, 1).expect("device"),
        sim: sim.clone(),
        fail_on_flush: fail_on_flush.clone(),
    };
    let mut store = Store::open(Box::new(dev), Format::IfBlank).expect("format");
    store.create("f").expect("create");
    store.write("f", 0, &[1u8; 3 * BS as usize]).expect("write");
    store.sync().expect("sync");

    // Overwrite two blocks inside the file (its length and the directory do not change): the
    // first goes to the device when the second (not adjacent: its own command) is written;
    // reading it back waits for it, so it has landed before the fault is armed.
    let flushes = sim.stats().flushes;
    let writes = sim.stats().writes;
    store.write("f", 0, &[2u8; BS as usize]).expect("write");
    store
        .write("f", 2 * u64::from(BS), &[3u8; BS as usize])
        .expect("a write-behind write is accepted before the device has it");
    let mut head = [0u8; 4];
    store.read("f", 100, &mut head).expect("read");
    assert_eq!(head, [2; 4], "the first write landed");

    // xSync: submits the second write, which fails; the sync reports it.
    fail_on_flush.store(1, Ordering::Relaxed);
    let err = store
        .sync()
        .expect_err("the failed write surfaces at the sync");
    assert!(matches!(err, Error::Driver { .. }), "{err}");
    assert_eq!(
        sim.stats().writes,
        writes + 2,
        "both writes reached the device"
    );
    assert_eq!(
        sim.stats().flushes,
        flushes + 1,
        "the failing sync still flushed what landed"
    );
    // The next sync flushes again (the store stayed dirty) and succeeds.
    store.sync().expect("sync after the failure");
    assert_eq!(
        sim.stats().flushes,
        flushes + 2,
        "sync after a failed write issued no NVMe Flush"
    );
}
