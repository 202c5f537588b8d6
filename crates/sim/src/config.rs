//! Configuration of an emulated controller.

/// One namespace of the emulated controller, backed by zero-filled memory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimNamespace {
    /// Namespace ID (1-based, unique).
    pub nsid: u32,
    /// Logical block size in bytes: 512 or 4096.
    pub block_size: u32,
    /// Capacity in logical blocks.
    pub blocks: u64,
}

/// What the emulated controller reports and how it behaves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimConfig {
    /// Namespaces (active namespace list in ascending nsid order).
    pub namespaces: Vec<SimNamespace>,
    /// Identify Controller MDTS: max transfer = 2^mdts minimum-size pages (0 = no limit).
    pub mdts: u8,
    /// CAP.MQES: maximum queue entries, 0-based (1023 means 1024 entries).
    pub mqes: u16,
    /// I/O submission/completion queue pairs granted by Set Features Number of Queues.
    pub io_queue_pairs: u16,
    /// CAP.DSTRD: doorbell stride is `4 << dstrd` bytes.
    pub dstrd: u8,
    /// CAP.TO in 500 ms units: the worst-case time the driver waits for CSTS.RDY.
    pub timeout_500ms: u8,
    /// Identify Controller model number (MN, up to 40 ASCII characters).
    pub model: String,
    /// Identify Controller serial number (SN, up to 20 ASCII characters).
    pub serial: String,
    /// Identify Controller firmware revision (FR, up to 8 ASCII characters).
    pub firmware: String,
    /// Advertise and implement Doorbell Buffer Config (OACS bit 8, shadow doorbells).
    pub shadow_doorbells: bool,
    /// Skip the memory copies of Read/Write (PRPs are still validated): like QEMU's `null-co`
    /// backend, for measuring driver overhead.
    pub null_io: bool,
    /// MSI-X Table Size: interrupt vectors the function offers (1..=[`MAX_MSIX_VECTORS`]).
    /// Create I/O Completion Queue rejects vectors at or beyond it.
    pub msix_vectors: u32,
}

/// Largest MSI-X table a PCI function can have (PCIe Base 6.0 §7.7.2.2: Table Size is 11 bits,
/// 0-based).
pub const MAX_MSIX_VECTORS: u32 = 2048;
/// Default MSI-X table size: one vector for the admin queue and one per default I/O queue pair,
/// like a small real controller.
const DEFAULT_MSIX_VECTORS: u32 = 17;

/// Default namespace size of each of the two default namespaces.
const DEFAULT_NAMESPACE_BYTES: u64 = 16 << 20;
const SMALL_BLOCK: u32 = 512;
const LARGE_BLOCK: u32 = 4096;

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            namespaces: vec![
                SimNamespace {
                    nsid: 1,
                    block_size: SMALL_BLOCK,
                    blocks: DEFAULT_NAMESPACE_BYTES / u64::from(SMALL_BLOCK),
                },
                SimNamespace {
                    nsid: 2,
                    block_size: LARGE_BLOCK,
                    blocks: DEFAULT_NAMESPACE_BYTES / u64::from(LARGE_BLOCK),
                },
            ],
            mdts: 5,
            mqes: 1023,
            io_queue_pairs: 16,
            dstrd: 0,
            timeout_500ms: 4,
            model: "nvme-sim emulated controller".to_string(),
            serial: "SIM0001".to_string(),
            firmware: "1.0".to_string(),
            shadow_doorbells: true,
            null_io: false,
            msix_vectors: DEFAULT_MSIX_VECTORS,
        }
    }
}

impl SimConfig {
    /// Checks the configuration; panics with a message naming the bad field (the config is
    /// written by test code, so a mistake there is a bug in the test).
    pub(crate) fn validate(&self) {
        assert!(
            self.mqes >= 1,
            "SimConfig::mqes must be >= 1 (queues need 2 entries)"
        );
        assert!(
            self.io_queue_pairs >= 1,
            "SimConfig::io_queue_pairs must be >= 1"
        );
        assert!(
            self.dstrd <= 4,
            "SimConfig::dstrd too large for the 16 KiB BAR (use 0..=4)"
        );
        assert!(
            (1..=MAX_MSIX_VECTORS).contains(&self.msix_vectors),
            "SimConfig::msix_vectors must be 1..={MAX_MSIX_VECTORS}, not {}",
            self.msix_vectors
        );
        let doorbells_end = crate::regs::BAR_SIZE;
        let needed = nvme_spec::regs::cq_head_doorbell(self.io_queue_pairs, 4 << self.dstrd) + 4;
        assert!(
            needed <= doorbells_end,
            "SimConfig: {} queue pairs with DSTRD {} need doorbells up to {needed:#x}, beyond \
             the {doorbells_end:#x}-byte BAR; lower io_queue_pairs or dstrd",
            self.io_queue_pairs,
            self.dstrd
        );
        for ns in &self.namespaces {
            assert!(
                ns.block_size == SMALL_BLOCK || ns.block_size == LARGE_BLOCK,
                "namespace {}: block_size must be 512 or 4096, not {}",
                ns.nsid,
                ns.block_size
            );
            assert!(
                ns.nsid != 0 && ns.nsid != u32::MAX,
                "namespace ID {} is reserved",
                ns.nsid
            );
        }
        let mut ids: Vec<u32> = self.namespaces.iter().map(|n| n.nsid).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(
            ids.len(),
            self.namespaces.len(),
            "SimConfig: namespace IDs must be unique"
        );
    }
}
