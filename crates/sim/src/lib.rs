//! `nvme-sim`: an in-process emulated NVMe controller behind the driver's register/DMA seam.
//!
//! [`SimController::start`] creates a controller with its own register BAR ([`BAR_SIZE`]
//! bytes of memory handed to the driver as an [`Mmio`]), its own IOMMU ([`SimDma`], an
//! [`DmaMapper`] whose IOVAs are *not* host addresses; [`SimController::start_in`] shares one
//! between several controllers, like one VFIO container) and a device thread that polls the
//! registers and doorbells like hardware would. The driver under test cannot tell it from a
//! real controller except by speed; tests additionally get [`Faults`] to inject errors,
//! [`SimStats`] to see what the device observed, and direct access to the medium
//! ([`SimController::read_disk`] / [`SimController::write_disk`]).
//! [`SimController::start_sibling`] adds a second controller of the same NVM subsystem on the
//! same medium (shared namespaces, multipath tests).
//!
//! Limits (by design): 4 KiB to 64 KiB memory pages, SGLs for I/O commands with Data Block,
//! Segment and Last Segment descriptors only (no Bit Bucket, no metadata SGLs; see
//! [`SimConfig::sgl`]), physically contiguous queues, metadata moved, protection information generated and checked (PRACT, PRCHK)
//! (see [`SimNamespace`]), Asynchronous Event Requests never complete.
//!
//! Teardown hazards: [`Faults::delay_execution`] runs commands late and out of order (reading
//! their PRP lists only then), [`Faults::stuck_on_disable`] keeps the controller running after
//! CC.EN is cleared, and [`SimController::function_control`] clears Bus Master Enable, after
//! which the device makes no DMA at all.
//!
//! Interrupts: MSI-X only ([`SimController::interrupts`] routes vectors to eventfds, like
//! VFIO). A completion queue created with IEN signals its vector once per batch of entries
//! the device posts to it in a poll pass; the admin completion queue signals vector 0 when
//! that vector is routed. No INTx/MSI, no masking, no interrupt coalescing feature.
//!
//! Shadow doorbells: after Doorbell Buffer Config, the entry for a doorbell lives at the same
//! byte offset in the shadow (and EventIdx) page as the doorbell has from `DOORBELL_BASE`, i.e.
//! at `doorbell index * (4 << CAP.DSTRD)`. The device also keeps watching the MMIO doorbells,
//! so a driver may mix both.
//!
//! # Example
//!
//! The emulator starts as a disabled controller; its namespaces are plain memory that tests can
//! inspect and seed behind the driver's back (the driver's own docs show a driver on top of it:
//! `Controller::new(Transport::new(sim.mmio(), sim.dma(), "sim"), ..)`):
//!
//! ```
//! use nvme_sim::{SimConfig, SimController};
//!
//! let sim = SimController::start(SimConfig::default());
//! assert!(!sim.cc_enabled()); // no driver has set CC.EN yet
//! sim.write_disk(1, 4096, b"seeded");
//! assert_eq!(sim.read_disk(1, 4096, 6), b"seeded");
//! assert_eq!(sim.config().namespaces.len(), 2);
//! ```

#![deny(missing_docs)]

mod config;
mod device;
mod disk;
mod dma;
mod faults;
mod irq;
mod power;
mod prp;
mod regs;
mod sgl;
mod stats;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use nvme_spec::regs::{Cc, Csts, CAP, CC, CSTS, VS};
use nvme_vfio::{DmaMapper, FunctionControl, InterruptController, InterruptEvent, Mmio, VfioError};

pub use config::{
    sim_firmware_image, PiFormat, SimConfig, SimCopy, SimFirmware, SimNamespace, SimZoned,
    MAX_MSIX_VECTORS, PI_FIRST, SIM_ACWU_BLOCKS, SIM_FIRMWARE_MAGIC, SIM_FIRMWARE_MAX_BYTES,
    SIM_FIRMWARE_REVISION, SIM_SUBNQN,
};
pub use device::{ERROR_LOG_ENTRIES, LBA_FORMATS, SIM_CNTLID, SIM_TEMPERATURE_K};
pub use dma::{SimDma, IOVA_BASE};
pub use faults::{ExecutionDelay, Faults, CORRUPT_CID_MASK, WRONG_SQID_MASK};
pub use power::{MediumEvent, PowerReplay, SimMedium, SimWriteCache};
pub use regs::BAR_SIZE;
pub use stats::SimStats;

use device::{Device, Shared};
use disk::Disks;
use irq::MsixTable;
use regs::RegisterBlock;

/// A running emulated controller. Dropping it stops and joins the device thread; register
/// windows and DMA mappings handed out stay valid (nothing answers them any more).
pub struct SimController {
    shared: Arc<Shared>,
    device: Arc<std::sync::Mutex<Device>>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for SimController {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimController")
            .field("config", &self.shared.config)
            .finish_non_exhaustive()
    }
}

impl SimController {
    /// Creates the controller (CC.EN = 0, CAP and VS set) and starts its device thread.
    ///
    /// Panics if `config` is inconsistent (the message names the field).
    pub fn start(config: SimConfig) -> SimController {
        Self::start_in(config, Arc::new(SimDma::new()))
    }

    /// As [`SimController::start`], but the device translates DMA through `dma`, an IOMMU
    /// address space shared with other emulated controllers (as functions whose IOMMU groups
    /// joined one VFIO container): a buffer mapped once is reachable by all of them.
    pub fn start_in(config: SimConfig, dma: Arc<SimDma>) -> SimController {
        let disks = Disks::new(&config.namespaces);
        Self::start_with(config, dma, Arc::new(disks))
    }

    /// Powers a controller on with `medium` (what [`SimController::medium`] took from a
    /// controller after [`SimController::power_cut`]) as its namespaces' contents: the same
    /// drive after a power cycle. The namespaces of `config` must match the medium's
    /// geometries; the write cache starts empty.
    ///
    /// Panics if they do not, or as [`SimController::start`].
    pub fn start_on(config: SimConfig, medium: &SimMedium) -> SimController {
        for ns in &config.namespaces {
            assert_eq!(
                medium.namespace(ns.nsid),
                ns,
                "namespace {} of the config differs from the medium's",
                ns.nsid
            );
        }
        let disks = Disks::from_medium(&config.namespaces, |nsid| medium.bytes(nsid).to_vec());
        Self::start_with(config, Arc::new(SimDma::new()), Arc::new(disks))
    }

    /// Starts a second controller of this controller's NVM subsystem (multi-path, NVMe Base
    /// 2.0 §2.4.1): the same IOMMU address space and the same namespaces (one medium, what
    /// one controller writes the other reads), with its own registers, queues and CNTLID.
    /// Both report the subsystem NQN, CMIC bit 1 and shared namespaces (NMIC bit 0), so both
    /// configs need [`SimConfig::shared_namespaces`] and the same [`SimConfig::subnqn`]. Limits: attachment state belongs to the
    /// shared medium (attaching or detaching through one controller does it for both), each
    /// controller's Changed Namespace List and Namespace Attribute notices are its own, and
    /// neither may have a write cache or a zoned namespace (their state is per controller).
    ///
    /// Panics if `config` does not fit (same SUBNQN and namespaces, another CNTLID).
    pub fn start_sibling(&self, config: SimConfig) -> SimController {
        let first = &self.shared.config;
        assert!(
            first.shared_namespaces && config.shared_namespaces,
            "start_sibling: both controllers need SimConfig::shared_namespaces"
        );
        assert!(
            !first.subnqn.is_empty() && config.subnqn == first.subnqn,
            "start_sibling: both controllers report the same, non-empty, SimConfig::subnqn"
        );
        assert_ne!(
            config.cntlid, first.cntlid,
            "start_sibling: a sibling needs its own SimConfig::cntlid"
        );
        assert_eq!(
            config.namespaces, first.namespaces,
            "start_sibling: a sibling has the same namespaces"
        );
        for c in [first, &config] {
            assert!(
                c.write_cache.is_none() && c.zoned.is_none(),
                "start_sibling: no write cache or zoned namespace (per-controller state)"
            );
        }
        Self::start_with(config, self.shared.dma.clone(), self.shared.disks.clone())
    }

    fn start_with(config: SimConfig, dma: Arc<SimDma>, disks: Arc<Disks>) -> SimController {
        config.validate();
        let regs = RegisterBlock::new();
        let (cap, version) = device::capabilities(&config);
        regs.store64(CAP, cap.0);
        regs.store(VS, version.0);
        let shared = Arc::new(Shared {
            faults: Faults::new(regs.clone()),
            regs,
            dma,
            counters: Default::default(),
            disks,
            msix: Arc::new(MsixTable::new(config.msix_vectors)),
            power: config
                .write_cache
                .clone()
                .map(|c| std::sync::Mutex::new(power::WriteCache::new(c))),
            config,
            stop: AtomicBool::new(false),
            bus_master: AtomicBool::new(true),
            inline: AtomicBool::new(false),
            request: Arc::new(
                InterruptEvent::new().expect("cannot create the emulator's request eventfd"),
            ),
        });
        let device = Arc::new(std::sync::Mutex::new(Device::new(shared.clone())));
        let thread = {
            let (device, shared) = (device.clone(), shared.clone());
            std::thread::Builder::new()
                .name("nvme-sim".into())
                .spawn(move || Device::run(device, shared))
                .expect("cannot spawn the nvme-sim device thread")
        };
        SimController {
            shared,
            device,
            thread: Some(thread),
        }
    }

    /// Signals the device request notifier ([`FunctionControl::request_notifier`]), as the
    /// kernel does when it wants the device back (unbind, hot-unplug request).
    pub fn request_device_release(&self) {
        self.shared
            .request
            .signal()
            .expect("signalling the emulator's request eventfd");
    }

    /// Stops (`true`) or resumes (`false`) the device thread's polling. While stopped, the
    /// device only acts when the host calls [`SimController::step`]: a single-threaded,
    /// deterministic device for instruction counts. Timers (delayed completions) still use
    /// the wall clock.
    pub fn set_inline(&self, inline: bool) {
        self.shared.inline.store(inline, Ordering::Release);
    }

    /// Runs one device poll pass on the calling thread (fetch, execute, post completions);
    /// returns whether anything happened. Meant for [`SimController::set_inline`] mode, but
    /// safe at any time (the pass is serialised with the device thread's).
    pub fn step(&self) -> bool {
        self.device.lock().unwrap_or_else(|p| p.into_inner()).poll()
    }

    /// The register window (BAR0) for the driver.
    pub fn mmio(&self) -> Mmio {
        self.shared.regs.mmio()
    }

    /// The controller's IOMMU, the platform mapper a driver `Transport` is built on. A driver
    /// controller maps through its DMA context's guard over it and refuses buffers allocated
    /// from this mapper directly (they would escape the guard): allocate I/O buffers through
    /// the controller or its context.
    pub fn dma(&self) -> Arc<dyn DmaMapper> {
        self.shared.dma.clone()
    }

    /// The concrete IOMMU (e.g. to check that every mapping was removed).
    pub fn sim_dma(&self) -> &Arc<SimDma> {
        &self.shared.dma
    }

    /// The function's MSI-X vectors, as VFIO offers them for a real device: route vectors to
    /// eventfds with [`InterruptController::enable_msix`]. The handle shares state with the
    /// device thread and may outlive the controller.
    pub fn interrupts(&self) -> Arc<dyn InterruptController> {
        self.shared.msix.clone()
    }

    /// The function's PCI control, as VFIO offers it for a real device: clearing Bus Master
    /// Enable stops all device DMA (SQE fetches, PRP list/data/metadata accesses, CQE posting,
    /// shadow doorbell reads and EventIdx writes). `disable_bus_master` returns once the
    /// device thread has finished any access it had started; counted in
    /// [`SimStats::dma_blocked`] while work is waiting. Register (MMIO) accesses, including a
    /// controller reset through CC, keep working. Bus mastering starts enabled.
    pub fn function_control(&self) -> Arc<dyn FunctionControl> {
        Arc::new(SimFunction {
            shared: self.shared.clone(),
        })
    }

    /// Whether Bus Master Enable is set (the device may make DMA).
    pub fn bus_master_enabled(&self) -> bool {
        self.shared.bus_master.load(Ordering::SeqCst)
    }

    /// Sets Bus Master Enable again (tests only: a driver never re-enables it). Work that
    /// waited (doorbells rung, deferred commands due) resumes.
    pub fn enable_bus_master(&self) {
        self.shared.bus_master.store(true, Ordering::SeqCst);
    }

    /// CC.EN as the host last wrote it (the register the device reads).
    pub fn cc_enabled(&self) -> bool {
        Cc(self.shared.regs.load(CC)).en()
    }

    /// CSTS.RDY as the device reports it.
    pub fn csts_ready(&self) -> bool {
        Csts(self.shared.regs.load(CSTS)).rdy()
    }

    /// Fault injection switches.
    pub fn faults(&self) -> &Faults {
        &self.shared.faults
    }

    /// The configuration the controller runs with.
    pub fn config(&self) -> &SimConfig {
        &self.shared.config
    }

    /// A snapshot of the device's counters.
    pub fn stats(&self) -> SimStats {
        self.shared.counters.snapshot()
    }

    /// Makes the zone holding `lba` of the zoned namespace Read Only, as a device does when a
    /// zone's media wears out (ZNS CS 1.1 §2.1.1.6): for tests of the Read Only and Offline
    /// states. Panics without a zoned namespace or when `lba` is past its zones.
    pub fn set_zone_read_only(&self, lba: u64) {
        let mut device = self.device.lock().unwrap_or_else(|p| p.into_inner());
        assert!(device.zone_read_only(lba), "no zone holds LBA {lba}");
    }

    /// Attaches (`true`) or detaches configured namespace `nsid`, as namespace management
    /// would: the active namespace list and Identify follow at once, I/O to a detached
    /// namespace fails with Invalid Namespace or Format, its bytes are kept. Records the
    /// change in the Changed Namespace List log page and raises the Namespace Attribute
    /// Changed notice (NVMe Base 2.0 §5.2.1), which completes an outstanding Asynchronous
    /// Event Request.
    ///
    /// Panics if `nsid` is not configured.
    pub fn set_namespace_attached(&self, nsid: u32, attached: bool) {
        assert!(
            self.shared.disks.set_attached(nsid, attached),
            "no namespace {nsid} in the emulated controller"
        );
        self.shared.faults.raise_async_event(
            nvme_spec::event::event_type::NOTICE,
            nvme_spec::event::notice::NAMESPACE_ATTRIBUTE_CHANGED,
            nvme_spec::opcode::log_page::CHANGED_NAMESPACE_LIST,
        );
    }

    /// Formats configured namespace `nsid` with `block_size`-byte blocks and `metadata_size`
    /// bytes of metadata per block in a separate buffer (0: none; protection information
    /// off), keeping its data capacity in bytes (NSZE becomes bytes / `block_size`), as a
    /// Format NVM from another host would. The medium reads zeros afterwards. Records the
    /// change in the Changed Namespace List and raises the Namespace Attribute Changed notice
    /// (NVMe Base 2.0 §5.2.1, §5.23); a driver learns of the new format only from that
    /// notice or a rescan.
    ///
    /// Panics if `nsid` is not configured or `block_size` is not a power of two >= 512.
    pub fn format_namespace(&self, nsid: u32, block_size: u32, metadata_size: u16) {
        assert!(
            block_size.is_power_of_two() && block_size >= config::SMALL_BLOCK,
            "block size {block_size} is not a power of two >= {}",
            config::SMALL_BLOCK
        );
        self.change_namespace(nsid, false, |ns| {
            let bytes = ns.blocks * u64::from(ns.block_size);
            ns.blocks = bytes / u64::from(block_size);
            ns.block_size = block_size;
            ns.metadata_size = metadata_size;
            ns.extended = false;
            ns.protection = 0;
        });
    }

    /// Resizes configured namespace `nsid` to `blocks` blocks (same format), keeping the data
    /// of the blocks both sizes have, as a namespace resize by another host or port would;
    /// posts the Namespace Attribute Changed notice like [`SimController::format_namespace`].
    ///
    /// Panics if `nsid` is not configured or `blocks` is 0.
    pub fn resize_namespace(&self, nsid: u32, blocks: u64) {
        assert!(blocks > 0, "a namespace cannot have zero blocks");
        self.change_namespace(nsid, true, |ns| ns.blocks = blocks);
    }

    fn change_namespace(&self, nsid: u32, keep_data: bool, change: impl FnOnce(&mut SimNamespace)) {
        let geometry = self
            .shared
            .disks
            .reformat(nsid, keep_data, change)
            .unwrap_or_else(|| panic!("no namespace {nsid} in the emulated controller"));
        log::debug!("sim: namespace {nsid} is now {geometry:?}");
        self.shared.faults.raise_async_event(
            nvme_spec::event::event_type::NOTICE,
            nvme_spec::event::notice::NAMESPACE_ATTRIBUTE_CHANGED,
            nvme_spec::opcode::log_page::CHANGED_NAMESPACE_LIST,
        );
    }

    /// Cuts the power now (see [`SimWriteCache`]): the write cache's unflushed blocks land on
    /// the medium as the seeded model decides, and from now on every I/O command completes
    /// with Commands Aborted due to Power Loss Notification and the medium stays as it is
    /// (admin commands still run, so a driver on it tears down normally). A second call does
    /// nothing.
    ///
    /// Panics if the controller has no write cache ([`SimConfig::write_cache`]).
    pub fn power_cut(&self) {
        let power = self.power();
        let mut cache = device::power_lock(power);
        device::cut_power(&self.shared, &mut cache);
    }

    /// Whether the power was cut ([`SimController::power_cut`] or
    /// [`SimWriteCache::cut_after`]).
    pub fn is_powered_off(&self) -> bool {
        self.shared
            .power
            .as_ref()
            .is_some_and(|p| device::power_lock(p).powered_off())
    }

    /// Medium events (writes and flushes) the write cache has seen: the position of a
    /// [`PowerReplay`] that has applied the same commands.
    ///
    /// Panics if the controller has no write cache.
    pub fn medium_events(&self) -> u64 {
        device::power_lock(self.power()).events()
    }

    /// Takes the journal of medium events recorded so far ([`SimWriteCache::record`]).
    ///
    /// Panics if the controller has no write cache.
    pub fn take_journal(&self) -> Vec<MediumEvent> {
        device::power_lock(self.power()).take_journal()
    }

    /// Blocks in the write cache that are not durable yet.
    ///
    /// Panics if the controller has no write cache.
    pub fn dirty_blocks(&self) -> usize {
        device::power_lock(self.power()).dirty_blocks()
    }

    /// A copy of the namespaces' bytes as they are now (after a power cut: what the drive
    /// keeps), for [`SimController::start_on`].
    pub fn medium(&self) -> SimMedium {
        let disks = self
            .shared
            .config
            .namespaces
            .iter()
            .map(|ns| {
                let disk = self.shared.disks.expect(ns.nsid);
                let bytes = disk.lock().clone();
                (disk.geometry(), Arc::new(bytes))
            })
            .collect();
        SimMedium { disks }
    }

    fn power(&self) -> &std::sync::Mutex<power::WriteCache> {
        self.shared
            .power
            .as_ref()
            .expect("the emulated controller has no write cache (SimConfig::write_cache)")
    }

    /// `len` bytes of namespace `nsid` from `byte_offset`, as the medium holds them.
    ///
    /// Panics if the namespace does not exist or the range is beyond its end.
    pub fn read_disk(&self, nsid: u32, byte_offset: u64, len: usize) -> Vec<u8> {
        let disk = self.shared.disks.expect(nsid);
        let (start, end) = disk_range(disk.bytes(), nsid, byte_offset, len);
        let bytes = disk.lock()[start..end].to_vec();
        bytes
    }

    /// Overwrites namespace `nsid` at `byte_offset` with `data`, bypassing the driver.
    ///
    /// Panics if the namespace does not exist or the range is beyond its end.
    pub fn write_disk(&self, nsid: u32, byte_offset: u64, data: &[u8]) {
        let disk = self.shared.disks.expect(nsid);
        let (start, end) = disk_range(disk.bytes(), nsid, byte_offset, data.len());
        disk.lock()[start..end].copy_from_slice(data);
    }
}

/// [`FunctionControl`] of the emulated function (see [`SimController::function_control`]).
struct SimFunction {
    shared: Arc<Shared>,
}

impl FunctionControl for SimFunction {
    fn disable_bus_master(&self) -> Result<(), VfioError> {
        self.shared.bus_master.store(false, Ordering::SeqCst);
        // The device checks the flag while holding a guest view: once no view is alive, no
        // access can start any more.
        self.shared.dma.quiesce();
        log::debug!("sim: bus master disabled");
        Ok(())
    }

    fn enable_bus_master(&self) -> Result<(), VfioError> {
        self.shared.bus_master.store(true, Ordering::SeqCst);
        log::debug!("sim: bus master enabled");
        Ok(())
    }

    fn request_notifier(&self) -> Result<Option<Arc<InterruptEvent>>, VfioError> {
        Ok(Some(self.shared.request.clone()))
    }
}

fn disk_range(size: u64, nsid: u32, offset: u64, len: usize) -> (usize, usize) {
    match offset.checked_add(len as u64) {
        Some(end) if end <= size => (offset as usize, end as usize),
        _ => panic!("bytes {offset}..+{len} are beyond the {size}-byte namespace {nsid}"),
    }
}

impl Drop for SimController {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take() {
            if thread.join().is_err() && !std::thread::panicking() {
                panic!("the nvme-sim device thread panicked (see its message above)");
            }
        }
    }
}
