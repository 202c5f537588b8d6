//! The block device the store sits on: an NVMe namespace through one of our queue pairs (PCIe
//! or NVMe/TCP: `nvme_device::AnyQueuePair`), or memory (for unit tests). Every transfer is
//! whole blocks at block-aligned offsets; the store does the read-modify-write for anything
//! smaller.

use nvme_device::{AnyController, AnyQueuePair, IoQueue};
use nvme_driver::{DmaBuffer, Namespace, QueuePairOptions, WriteFlags};

use crate::error::{Error, Result};

/// Largest single transfer the NVMe device issues (bounce buffer size).
const MAX_CHUNK: usize = 256 * 1024;

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
    /// size. The data may sit in a volatile cache until [`BlockDevice::flush`].
    fn write(&mut self, lba: u64, buf: &[u8]) -> Result<()>;
    /// Makes every completed write durable.
    fn flush(&mut self) -> Result<()>;
    /// Bytes a single aligned write is guaranteed to store atomically across a power failure
    /// (at least one block: NVMe's AWUPF/NAWUPF are 0-based block counts).
    fn atomic_write_bytes(&self) -> u32 {
        self.block_size()
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

/// An NVMe namespace driven through one queue pair of our driver, PCIe or NVMe/TCP, with a
/// bounce buffer (DMA memory on PCIe, host memory on TCP).
///
/// A queue pair is `Send` but not `Sync`; the VFS keeps this device behind a mutex.
pub struct NvmeDevice {
    // Field order is drop order: the queue pair (deleted on the controller, or its
    // connection closed) and the bounce buffer go before the controller handle.
    qp: AnyQueuePair,
    bounce: Option<DmaBuffer>,
    ns: Namespace,
    ctrl: AnyController,
    chunk: usize,
    atomic: u32,
    identity: String,
}

impl std::fmt::Debug for NvmeDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NvmeDevice")
            .field("controller", &self.ctrl.name())
            .field("nsid", &self.ns.nsid())
            .field("block_size", &self.ns.block_size())
            .field("blocks", &self.ns.blocks())
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
        let qp = ctrl
            .create_queue_pair(QueuePairOptions::default())
            .map_err(|e| Error::driver("creating a queue pair", e))?;
        let bs = ns.block_size() as usize;
        let chunk = (MAX_CHUNK.min(qp.max_transfer_bytes()) / bs).max(1) * bs;
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
        Ok(Self {
            ctrl,
            ns,
            qp,
            bounce: None,
            chunk,
            atomic,
            identity,
        })
    }

    /// The controller.
    pub fn controller(&self) -> &AnyController {
        &self.ctrl
    }

    /// The namespace.
    pub fn namespace(&self) -> &Namespace {
        &self.ns
    }

    fn take_bounce(&mut self) -> Result<DmaBuffer> {
        match self.bounce.take() {
            Some(b) => Ok(b),
            None => self
                .ctrl
                .alloc_buffer(self.chunk)
                .map_err(|e| Error::driver("allocating a DMA buffer", e)),
        }
    }
}

/// The NVM subsystem `id` belongs to: its NQN (SUBNQN, Identify Controller bytes 1023:768),
/// or for a controller older than NVMe 1.2.1 that reports none, the vendor, subsystem vendor,
/// serial and model numbers the specification builds a subsystem NQN from (NVMe Base 2.0
/// §4.5). Every controller of one subsystem (e.g. two NVMe/TCP connections, or two controller
/// handles to one PCIe function) reports the same value, and a namespace ID names one
/// namespace across the subsystem (§3.2.1), so the pair identifies a namespace.
fn subsystem_identity(id: &nvme_driver::spec::identify::IdentifyController) -> String {
    let nqn = id.subnqn.split(|&b| b == 0).next().unwrap_or_default();
    let nqn = String::from_utf8_lossy(nqn);
    let nqn = nqn.trim();
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
        self.ns.block_size()
    }
    fn identity(&self) -> Option<String> {
        Some(self.identity.clone())
    }
    fn blocks(&self) -> u64 {
        self.ns.blocks()
    }
    fn atomic_write_bytes(&self) -> u32 {
        self.atomic
    }

    fn read(&mut self, lba: u64, buf: &mut [u8]) -> Result<()> {
        check_len(self.block_size(), lba, buf.len(), self.blocks())?;
        let bs = self.block_size() as usize;
        for (i, piece) in buf.chunks_mut(self.chunk).enumerate() {
            let at = lba + (i * self.chunk / bs) as u64;
            let bounce = self.take_bounce()?;
            match self
                .qp
                .read(&self.ns, at, (piece.len() / bs) as u32, bounce)
            {
                Ok(b) => {
                    piece.copy_from_slice(&b[..piece.len()]);
                    self.bounce = Some(b);
                }
                Err(f) => {
                    self.bounce = f.buffer;
                    return Err(Error::driver("reading", f.error));
                }
            }
        }
        Ok(())
    }

    fn write(&mut self, lba: u64, buf: &[u8]) -> Result<()> {
        check_len(self.block_size(), lba, buf.len(), self.blocks())?;
        let bs = self.block_size() as usize;
        for (i, piece) in buf.chunks(self.chunk).enumerate() {
            let at = lba + (i * self.chunk / bs) as u64;
            let mut bounce = self.take_bounce()?;
            bounce[..piece.len()].copy_from_slice(piece);
            match self.qp.write(
                &self.ns,
                at,
                (piece.len() / bs) as u32,
                bounce,
                WriteFlags::NONE,
            ) {
                Ok(b) => self.bounce = Some(b),
                Err(f) => {
                    self.bounce = f.buffer;
                    return Err(Error::driver("writing", f.error));
                }
            }
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        self.qp
            .flush(&self.ns)
            .map_err(|e| Error::driver("flushing", e))
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
