//! The block device the store sits on: an NVMe namespace through one of our queue pairs (PCIe
//! or NVMe/TCP: `nvme_device::AnyQueuePair`), or memory (for unit tests). Every transfer is
//! whole blocks at block-aligned offsets; the store does the read-modify-write for anything
//! smaller.

use nvme_device::{AnyController, IoQueue};
use nvme_driver::{Namespace, QueuePairOptions};

use crate::error::{Error, Result};
use crate::write_behind::{IoStats, WriteBehind, SLOTS, SLOT_BYTES};

/// Whole-block storage.
pub trait BlockDevice: Send {
    /// Bytes per block (power of two, >= 512).
    fn block_size(&self) -> u32;
    /// Number of blocks.
    fn blocks(&self) -> u64;
    /// Reads `buf.len() / block_size` blocks at `lba`; `buf.len()` is a multiple of the block
    /// size.
    fn read(&mut self, lba: u64, buf: &mut [u8]) -> Result<()>;
    /// Writes `buf.len() / block_size` blocks at `lba`; `buf.len()` is a multiple of the block
    /// size. The data may sit in a volatile cache until [`BlockDevice::flush`], and the write
    /// may still be queued or in flight when this returns (write-behind): an error of such a
    /// write is returned by a later `write` or `flush`, and a later `read` sees the data.
    fn write(&mut self, lba: u64, buf: &[u8]) -> Result<()>;
    /// Makes every write so far durable (the barrier: waits for writes still in flight), or
    /// returns an error, also one of an earlier write that failed in flight.
    fn flush(&mut self) -> Result<()>;
    /// Bytes a single aligned write is guaranteed to store atomically across a power failure
    /// (at least one block: NVMe's AWUPF/NAWUPF are 0-based block counts).
    fn atomic_write_bytes(&self) -> u32 {
        self.block_size()
    }
    /// Counters of the device's I/O path, when it keeps any ([`NvmeDevice`]: its
    /// write-behind queue).
    fn io_stats(&self) -> Option<IoStats> {
        None
    }
    /// A name of the medium unique in the process (for an NVMe namespace: its subsystem and
    /// namespace ID), under which [`crate::NvmeVfs::register`] claims it so that a second
    /// VFS on the same medium is refused ([`Error::NamespaceInUse`]). `None` (the default):
    /// the medium is private to this device value, nothing to claim.
    fn identity(&self) -> Option<String> {
        None
    }
}

fn check_len(block_size: u32, lba: u64, len: usize, blocks: u64) -> Result<u64> {
    let bs = u64::from(block_size);
    if len as u64 % bs != 0 {
        return Err(Error::Unaligned { len });
    }
    let n = len as u64 / bs;
    match lba.checked_add(n) {
        Some(end) if end <= blocks => Ok(n),
        _ => Err(Error::OutOfRange { lba, blocks: n }),
    }
}

/// A device in memory: for unit tests and experiments.
#[derive(Debug, Clone)]
pub struct MemDevice {
    block_size: u32,
    data: Vec<u8>,
    /// Flushes seen (tests check that syncs reach the device).
    pub flushes: u64,
}

impl MemDevice {
    /// `blocks` zeroed blocks of `block_size` bytes.
    pub fn new(block_size: u32, blocks: u64) -> Self {
        Self {
            block_size,
            data: vec![0; (u64::from(block_size) * blocks) as usize],
            flushes: 0,
        }
    }

    /// The raw medium.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.data
    }
}

impl BlockDevice for MemDevice {
    fn block_size(&self) -> u32 {
        self.block_size
    }
    fn blocks(&self) -> u64 {
        self.data.len() as u64 / u64::from(self.block_size)
    }
    fn read(&mut self, lba: u64, buf: &mut [u8]) -> Result<()> {
        check_len(self.block_size, lba, buf.len(), self.blocks())?;
        let at = (lba * u64::from(self.block_size)) as usize;
        buf.copy_from_slice(&self.data[at..at + buf.len()]);
        Ok(())
    }
    fn write(&mut self, lba: u64, buf: &[u8]) -> Result<()> {
        check_len(self.block_size, lba, buf.len(), self.blocks())?;
        let at = (lba * u64::from(self.block_size)) as usize;
        self.data[at..at + buf.len()].copy_from_slice(buf);
        Ok(())
    }
    fn flush(&mut self) -> Result<()> {
        self.flushes += 1;
        Ok(())
    }
}

/// An NVMe namespace driven through one queue pair of our driver, PCIe or NVMe/TCP, with
/// write-behind (`crate::write_behind`): writes are copied into a pool of 16 buffers
/// allocated once (DMA memory on PCIe, host memory on TCP), merged when contiguous, and
/// several are in flight at once; [`BlockDevice::flush`] waits for them and flushes.
///
/// A queue pair is `Send` but not `Sync`; the VFS keeps this device behind a mutex.
pub struct NvmeDevice {
    // Field order is drop order: the write-behind queue (it waits for its requests, then
    // deletes the queue pair on the controller or closes its connection, then frees its
    // buffers) goes before the controller handle.
    io: WriteBehind,
    ctrl: AnyController,
    atomic: u32,
    identity: String,
}

impl std::fmt::Debug for NvmeDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NvmeDevice")
            .field("controller", &self.ctrl.name())
            .field("nsid", &self.io.namespace().nsid())
            .field("block_size", &self.io.namespace().block_size())
            .field("blocks", &self.io.namespace().blocks())
            .finish()
    }
}

impl NvmeDevice {
    /// Namespace `nsid` of `ctrl` (a PCIe `nvme_driver::Controller`, an NVMe/TCP
    /// `nvme_tcp::TcpController`, or either as an [`AnyController`]), through a new queue
    /// pair.
    pub fn new(ctrl: impl Into<AnyController>, nsid: u32) -> Result<Self> {
        let ctrl = ctrl.into();
        let ns = ctrl
            .namespace(nsid)
            .map_err(|e| Error::driver("looking up the namespace", e))?;
        // A PCIe controller opened with interrupts gives the pair an MSI-X vector: the
        // write-behind queue's waits then block on it after a short spin (`write_behind`).
        let irq = ctrl.as_pcie().is_some_and(|c| c.has_interrupts());
        let qp = ctrl
            .create_queue_pair(QueuePairOptions::default().interrupts(irq))
            .map_err(|e| Error::driver("creating a queue pair", e))?;
        let bs = ns.block_size() as usize;
        let slot = (SLOT_BYTES.min(qp.max_transfer_bytes()) / bs).max(1) * bs;
        // Power-fail atomic write unit: NAWUPF when the namespace defines it (NSFEAT bit 1),
        // else the controller's AWUPF; both count blocks, 0-based.
        let units =
            if ns.identify().nsfeat & nvme_driver::spec::identify::nsfeat::ATOMIC_PARAMETERS != 0 {
                ns.identify().nawupf
            } else {
                ctrl.identify().awupf
            };
        let atomic = (u64::from(units) + 1)
            .saturating_mul(u64::from(ns.block_size()))
            .min(u64::from(u32::MAX)) as u32;
        let identity = format!("{} nsid {nsid}", subsystem_identity(ctrl.identify()));
        // The pool, allocated once: every write and read of the device uses these buffers.
        let pool = ctrl
            .alloc_buffer(SLOTS * slot)
            .map_err(|e| Error::driver("allocating the write-behind buffers", e))?;
        Ok(Self {
            io: WriteBehind::new(qp, ns, pool, slot),
            ctrl,
            atomic,
            identity,
        })
    }

    /// Counters of the write-behind queue.
    pub fn stats(&self) -> IoStats {
        self.io.stats()
    }

    /// Whether `flush` may send a lone pending write with FUA instead of Write + Flush (on
    /// by default; off to compare the two).
    pub fn set_fua(&mut self, on: bool) {
        self.io.set_fua(on);
    }

    /// The controller.
    pub fn controller(&self) -> &AnyController {
        &self.ctrl
    }

    /// The namespace.
    pub fn namespace(&self) -> &Namespace {
        self.io.namespace()
    }
}

/// The NVM subsystem `id` belongs to: its NQN (SUBNQN, Identify Controller bytes 1023:768),
/// or for a controller older than NVMe 1.2.1 that reports none, the vendor, subsystem vendor,
/// serial and model numbers the specification builds a subsystem NQN from (NVMe Base 2.0
/// §4.5). Every controller of one subsystem (e.g. two NVMe/TCP connections, or two controller
/// handles to one PCIe function) reports the same value, and a namespace ID names one
/// namespace across the subsystem (§3.2.1), so the pair identifies a namespace.
fn subsystem_identity(id: &nvme_driver::spec::identify::IdentifyController) -> String {
    let nqn = id.subsystem_nqn();
    if nqn.is_empty() {
        format!(
            "subsystem vid {:04x} ssvid {:04x} serial `{}` model `{}`",
            id.vid,
            id.ssvid,
            id.serial(),
            id.model()
        )
    } else {
        format!("subsystem {nqn}")
    }
}

impl BlockDevice for NvmeDevice {
    fn block_size(&self) -> u32 {
        self.io.namespace().block_size()
    }
    fn identity(&self) -> Option<String> {
        Some(self.identity.clone())
    }
    fn blocks(&self) -> u64 {
        self.io.namespace().blocks()
    }
    fn atomic_write_bytes(&self) -> u32 {
        self.atomic
    }

    fn io_stats(&self) -> Option<IoStats> {
        Some(self.io.stats())
    }

    fn read(&mut self, lba: u64, buf: &mut [u8]) -> Result<()> {
        check_len(self.block_size(), lba, buf.len(), self.blocks())?;
        self.io.read(lba, buf)
    }

    fn write(&mut self, lba: u64, buf: &[u8]) -> Result<()> {
        check_len(self.block_size(), lba, buf.len(), self.blocks())?;
        self.io.write(lba, buf)
    }

    fn flush(&mut self) -> Result<()> {
        self.io.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::subsystem_identity;
    use nvme_driver::spec::identify::{fill_ascii_field, IdentifyController};

    fn controller(nqn: &str, serial: &str) -> IdentifyController {
        let mut id = IdentifyController::default();
        id.subnqn[..nqn.len()].copy_from_slice(nqn.as_bytes());
        fill_ascii_field(&mut id.sn, serial);
        id
    }

    #[test]
    fn the_subsystem_nqn_names_the_subsystem_when_reported() {
        let a = subsystem_identity(&controller("nqn.2026-01.example:subsys", "A"));
        // Another controller of the same subsystem (its own serial number).
        let b = subsystem_identity(&controller("nqn.2026-01.example:subsys", "B"));
        let other = subsystem_identity(&controller("nqn.2026-01.example:other", "A"));
        assert_eq!(a, b);
        assert_ne!(a, other);
        assert!(a.contains("nqn.2026-01.example:subsys"), "{a}");
    }

    #[test]
    fn without_a_subsystem_nqn_the_serial_and_model_name_it() {
        let a = subsystem_identity(&controller("", "SN-1"));
        assert_ne!(a, subsystem_identity(&controller("", "SN-2")));
        assert!(a.contains("SN-1"), "{a}");
    }
}
