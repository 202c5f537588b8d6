//! Configuration of an emulated controller.

pub use nvme_spec::protection::PiFormat;

/// One namespace of the emulated controller, backed by zero-filled memory.
///
/// Metadata (`metadata_size > 0`) is reported by Identify Namespace (LBAF0.MS, FLBAS bit 4,
/// MC, DPC/DPS) and moved by Read/Write:
/// - `extended`: each logical block is `block_size + metadata_size` bytes in the data buffer
///   (metadata interleaved after each block's data), so Read/Write transfer
///   `blocks * (block_size + metadata_size)` bytes through PRP1/PRP2 (a driver that sizes its
///   buffer as `blocks * block_size` under-sizes it). The medium holds the extended blocks
///   back to back ([`crate::SimController::read_disk`] offsets are in that layout);
/// - separate (`!extended`): data moves through the PRPs as usual and `nlb * metadata_size`
///   metadata bytes through the contiguous buffer at MPTR (CDW4-5); an unmapped MPTR (e.g.
///   0 from a driver that ignores metadata) fails the command with Data Transfer Error. The
///   medium holds all data blocks first, then all metadata (`blocks * block_size` onwards).
///
/// With protection information (`protection`), Read, Write, Compare and Verify honour PRACT,
/// PRCHK and the tags, and return the end-to-end check error statuses (see the device's `pi`
/// module; NVM CS §5.2). Compare, Write Zeroes and Dataset Management act on data bytes (for
/// extended namespaces, on whole extended blocks); Write Zeroes and Deallocate leave escape
/// (all-ones, unchecked) PI, as never-written blocks have.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimNamespace {
    /// Namespace ID (1-based, unique).
    pub nsid: u32,
    /// Logical block size in bytes: 512 or 4096.
    pub block_size: u32,
    /// Capacity in logical blocks.
    pub blocks: u64,
    /// Metadata bytes per logical block (LBAF0.MS); 0 = no metadata.
    pub metadata_size: u16,
    /// Metadata interleaved with data as an extended LBA (FLBAS bit 4); needs
    /// `metadata_size > 0`.
    pub extended: bool,
    /// End-to-end protection settings as Identify Namespace DPS: bits 2:0 the PI type (0 =
    /// none, 1..=3 = PI type 1..3; needs `metadata_size >= 8`), bit 3 the PI in the first 8
    /// metadata bytes (else the last 8), [`PI_FIRST`].
    pub protection: u8,
    /// The PI format of the namespace's LBA formats (its Extended LBA Formats, reported with
    /// CTRATT.ELBAS when a namespace has PI): the 16-bit guard (8-byte PI) or the 64-bit guard
    /// (16-byte PI, CRC-64 NVMe, 48-bit reference tag; needs `metadata_size >= 16`), as
    /// QEMU's `nvme-ns` `pif=0` / `pif=2`. The 32-bit guard is not emulated.
    pub pi_format: PiFormat,
}

impl Default for SimNamespace {
    /// Namespace 1: 16 MiB of 512-byte blocks, no metadata.
    fn default() -> Self {
        Self {
            nsid: 1,
            block_size: SMALL_BLOCK,
            blocks: DEFAULT_NAMESPACE_BYTES / u64::from(SMALL_BLOCK),
            metadata_size: 0,
            extended: false,
            protection: 0,
            pi_format: PiFormat::Guard16,
        }
    }
}

/// The Copy command (NVM CS §3.3.2) of an emulated controller: advertised (Identify
/// Controller ONCS bit 8, OCFS format 0h) with these limits, reported by every namespace's
/// Identify Namespace. A Copy beyond them completes with Command Size Limit Exceeded. The
/// defaults are QEMU's emulated controller's (`nvme-ns` properties `mssrl`, `mcl`, `msrc`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SimCopy {
    /// Maximum Single Source Range Length: most blocks of one source range (1-based, >= 1).
    pub mssrl: u16,
    /// Maximum Copy Length: most blocks of one command, all ranges together (>= `mssrl`).
    pub mcl: u32,
    /// Maximum Source Range Count, 0-based: `msrc + 1` ranges per command at most.
    pub msrc: u8,
}

impl Default for SimCopy {
    /// MSSRL 128, MCL 128, MSRC 127 (128 ranges), as QEMU 7.2's `nvme-ns`.
    fn default() -> Self {
        Self {
            mssrl: DEFAULT_COPY_BLOCKS as u16,
            mcl: DEFAULT_COPY_BLOCKS,
            msrc: (DEFAULT_COPY_BLOCKS - 1) as u8,
        }
    }
}

/// Firmware update (NVMe Base 2.0 §5.12, §5.13) of an emulated controller: advertised in
/// Identify Controller (OACS bit 2, FRMW, FWUG) with these slots. Slot 1 holds
/// [`SimConfig::firmware`] and is active at power-on. An image the emulator accepts is
/// [`sim_firmware_image`]'s: bytes 0..4 [`SIM_FIRMWARE_MAGIC`], bytes 4..12 the revision
/// (ASCII), which the Firmware Slot log and Identify Controller FR then report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SimFirmware {
    /// Firmware slots (1..=7; FRMW bits 3:1).
    pub slots: u8,
    /// Slot 1 is read only (FRMW bit 0): a commit that replaces it gets Invalid Firmware Slot.
    pub slot1_read_only: bool,
    /// Commit Action 011b activates at once (FRMW bit 4); without it the image is committed
    /// and the command completes with Firmware Activation Requires Controller Level Reset.
    pub activation_without_reset: bool,
    /// FWUG in 4 KiB units (0: no information, FFh: no restriction): a download piece whose
    /// offset is not a multiple of it gets Invalid Field in Command.
    pub fwug: u8,
}

impl Default for SimFirmware {
    /// Three slots, slot 1 read only, activation without reset, FWUG 4 KiB.
    fn default() -> Self {
        Self {
            slots: 3,
            slot1_read_only: true,
            activation_without_reset: true,
            fwug: 1,
        }
    }
}

/// The first bytes of a firmware image the emulator accepts.
pub const SIM_FIRMWARE_MAGIC: [u8; 4] = *b"NVSF";
/// Where the revision sits in an emulator firmware image, and its length (as FR).
pub const SIM_FIRMWARE_REVISION: std::ops::Range<usize> = 4..12;
/// Largest image the emulator keeps: a piece ending beyond it gets Invalid Field in Command.
pub const SIM_FIRMWARE_MAX_BYTES: u64 = 1 << 20;

/// A firmware image of `len` bytes (at least [`SIM_FIRMWARE_REVISION`]`.end`, rounded up to
/// dwords) that the emulator accepts, carrying `revision` (up to 8 ASCII characters, space
/// padded); the rest is a pattern, so pieces sent in the wrong place are noticed.
pub fn sim_firmware_image(revision: &str, len: usize) -> Vec<u8> {
    let len = len.max(SIM_FIRMWARE_REVISION.end).next_multiple_of(4);
    let mut image: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
    image[..SIM_FIRMWARE_MAGIC.len()].copy_from_slice(&SIM_FIRMWARE_MAGIC);
    let rev = &mut image[SIM_FIRMWARE_REVISION];
    rev.fill(b' ');
    for (d, s) in rev.iter_mut().zip(revision.bytes()) {
        *d = s;
    }
    image
}

/// A zoned namespace (ZNS CS 1.1, CSI 02h) of an emulated controller: namespace `nsid` is
/// cut into zones of `zone_blocks` blocks (the last partial zone is not used), each with a
/// write pointer and the zone state machine of ZNS §2.1.1; Write must land at the write
/// pointer, Zone Append returns where it landed, Zone Management Send/Receive act on and
/// report the zones. The defaults are QEMU 7.2's `zoned.*` properties' shape (no limits
/// there; here 4 open and 6 active so that the limits can be tested).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SimZoned {
    /// The zoned namespace.
    pub nsid: u32,
    /// Zone size (ZSZE) in blocks, and capacity (ZCAP; every zone the same).
    pub zone_blocks: u64,
    /// Zone capacity in blocks (<= `zone_blocks`).
    pub zone_capacity: u64,
    /// Maximum open zones (MOR + 1); 0 = no limit.
    pub max_open: u32,
    /// Maximum active zones (MAR + 1); 0 = no limit.
    pub max_active: u32,
    /// ZRWA size in blocks (0 = no Zone Random Write Area offered).
    pub zrwa_blocks: u16,
    /// Zone Append Size Limit of the ZNS Identify Controller: appends of at most 2^ZASL
    /// minimum pages (0: the MDTS applies), refused with Invalid Field beyond it.
    pub zasl: u8,
}

impl Default for SimZoned {
    /// Namespace 1, zones of 1024 blocks, 4 open, 6 active, ZRWA of 16 blocks.
    fn default() -> Self {
        Self {
            nsid: 1,
            zone_blocks: DEFAULT_ZONE_BLOCKS,
            zone_capacity: DEFAULT_ZONE_BLOCKS,
            max_open: 4,
            max_active: 6,
            zrwa_blocks: 16,
            zasl: 0,
        }
    }
}

/// Default zone size of [`SimZoned`].
const DEFAULT_ZONE_BLOCKS: u64 = 1024;

/// QEMU's default MSSRL and MCL (and MSRC + 1).
const DEFAULT_COPY_BLOCKS: u32 = 128;

/// What the emulated controller reports and how it behaves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimConfig {
    /// Namespaces (active namespace list in ascending nsid order).
    pub namespaces: Vec<SimNamespace>,
    /// Identify Controller MDTS: max transfer = 2^mdts minimum-size pages (0 = no limit).
    pub mdts: u8,
    /// CAP.MQES: maximum queue entries, 0-based (1023 means 1024 entries). 0 is accepted
    /// although the specification calls it invalid: the controller then refuses to enable
    /// (AQA cannot ask for the 2 entries a queue needs) and rejects every queue creation.
    pub mqes: u16,
    /// I/O submission/completion queue pairs granted by Set Features Number of Queues.
    pub io_queue_pairs: u16,
    /// CAP.DSTRD: doorbell stride is `4 << dstrd` bytes (0..=15). Doorbells that fall beyond
    /// the [`crate::BAR_SIZE`]-byte BAR are unreachable: the controller refuses to enable when
    /// an admin doorbell is beyond it and rejects creating an I/O queue whose doorbell is
    /// (Invalid Queue Identifier).
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
    /// Advertise SGL support for I/O commands (Identify Controller SGLS bits 1:0 = 01b, like
    /// QEMU's emulated controller) and accept PSDT 01b: Data Block, Segment and Last Segment
    /// descriptors (NVMe Base 2.0 §4.1.2). `false` refuses any PSDT but 00b (PRPs).
    pub sgl: bool,
    /// Skip the memory copies of Read/Write (PRPs are still validated): like QEMU's `null-co`
    /// backend, for measuring driver overhead.
    pub null_io: bool,
    /// MSI-X Table Size: interrupt vectors the function offers (1..=[`MAX_MSIX_VECTORS`]).
    /// Create I/O Completion Queue rejects vectors at or beyond it.
    pub msix_vectors: u32,
    /// Abort Command Limit: Aborts outstanding at once (Identify ACL + 1; 0 counts as 1). The
    /// Aborts beyond it in one pass over the admin SQ complete with Abort Command Limit
    /// Exceeded.
    pub abort_limit: u8,
    /// The Copy command and its limits; `None`: not offered (ONCS bit 8 clear, Copy completes
    /// with Invalid Command Opcode).
    pub copy: Option<SimCopy>,
    /// A volatile write cache with power-loss behaviour (`None`: writes go straight to the
    /// medium, as before; Identify VWC reports a cache either way). Needs namespaces without
    /// metadata. See [`crate::SimWriteCache`].
    pub write_cache: Option<crate::SimWriteCache>,
    /// One zoned namespace ([`SimZoned`]); `None`: every namespace is a plain NVM one.
    pub zoned: Option<SimZoned>,
    /// Advertise and implement Format NVM (OACS bit 1, FNA bit 2: Cryptographic Erase).
    pub format_nvm: bool,
    /// Advertise and implement Namespace Attachment and Identify CNS 10h-13h (OACS bit 3;
    /// Namespace Management's create/delete is not offered, as in QEMU 7.2).
    pub namespace_management: bool,
    /// Advertise and implement Device Self-test and its log page 06h (OACS bit 4; QEMU 7.2
    /// lacks both). A short or extended test completes at once without error.
    pub device_self_test: bool,
    /// With [`SimConfig::copy`]: also advertise and accept Copy Descriptor Format 1h (OCFS
    /// bit 1; 40-byte source range entries), as QEMU 7.2 reports (OCFS 3h). The emulator's
    /// namespaces have 16-bit guards only and it does not tie the format to the guard size
    /// (QEMU refuses a format not matching the guard with Invalid Format, Command Specific 0Ah).
    pub copy_format_1: bool,
    /// Advertise and implement Write Uncorrectable (ONCS bit 1, NVM CS §3.3.7): the blocks
    /// read, compare and verify as Unrecovered Read Error until written again. QEMU 7.2 does
    /// not offer it.
    pub write_uncorrectable: bool,
    /// Advertise and implement the fused Compare and Write (FUSES bit 0, NVMe Base 2.0
    /// §3.4.2) of up to [`SIM_ACWU_BLOCKS`] blocks (ACWU). QEMU 7.2 does not offer it; `false`
    /// completes a fused entry with Invalid Field in Command.
    pub compare_and_write: bool,
    /// Identify Controller SUBNQN: the NVM subsystem's NQN (at most 223 bytes); empty by
    /// default (no NQN reported, as before NVMe 1.2.1), [`SIM_SUBNQN`] is one to use.
    pub subnqn: String,
    /// Identify Controller CNTLID (default [`crate::SIM_CNTLID`]); a second controller of the
    /// subsystem ([`crate::SimController::start_sibling`]) needs another one.
    pub cntlid: u16,
    /// The subsystem may have several controllers and its namespaces are shared: Identify
    /// Controller CMIC bit 1 and every namespace's NMIC bit 0 are set. Needed by
    /// [`crate::SimController::start_sibling`].
    pub shared_namespaces: bool,
    /// Firmware Image Download and Firmware Commit with the Firmware Slot log they change
    /// ([`SimFirmware`]); `None`: not offered (OACS bit 2 clear, FRMW 3h: one read-only slot,
    /// as QEMU 7.2; both commands complete with Invalid Command Opcode).
    pub firmware_update: Option<SimFirmware>,
}

/// A subsystem NQN for [`SimConfig::subnqn`] (needed by two controllers of one subsystem).
pub const SIM_SUBNQN: &str = "nqn.2026-01.io.example.nvme-sim:subsys0";
/// Longest SUBNQN the emulator takes (NVMe Base 2.0 §4.5: 223 bytes).
const MAX_NQN_BYTES: usize = 223;

/// Atomic Compare & Write Unit of the emulated controller in blocks (Identify Controller ACWU
/// + 1) when [`SimConfig::compare_and_write`] is set.
pub const SIM_ACWU_BLOCKS: u16 = 16;

/// Default [`SimConfig::abort_limit`].
const DEFAULT_ABORT_LIMIT: u8 = 4;

/// Largest MSI-X table a PCI function can have (PCIe Base 6.0 §7.7.2.2: Table Size is 11 bits,
/// 0-based).
pub const MAX_MSIX_VECTORS: u32 = 2048;
/// Default MSI-X table size: one vector for the admin queue and one per default I/O queue pair,
/// like a small real controller.
const DEFAULT_MSIX_VECTORS: u32 = 17;

/// Default namespace size of each of the two default namespaces.
const DEFAULT_NAMESPACE_BYTES: u64 = 16 << 20;
pub(crate) const SMALL_BLOCK: u32 = 512;
const LARGE_BLOCK: u32 = 4096;
/// CAP.DSTRD is a 4-bit field.
const MAX_DSTRD: u8 = 15;
/// Highest protection information type (DPS bits 2:0).
pub(crate) const MAX_PI_TYPE: u8 = 3;
/// [`SimNamespace::protection`] bit 3 (DPS bit 3): the PI is the first 8 metadata bytes.
pub const PI_FIRST: u8 = nvme_spec::protection::DPS_PI_FIRST;

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            namespaces: vec![
                SimNamespace::default(),
                SimNamespace {
                    nsid: 2,
                    block_size: LARGE_BLOCK,
                    blocks: DEFAULT_NAMESPACE_BYTES / u64::from(LARGE_BLOCK),
                    ..SimNamespace::default()
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
            sgl: true,
            null_io: false,
            msix_vectors: DEFAULT_MSIX_VECTORS,
            abort_limit: DEFAULT_ABORT_LIMIT,
            copy: Some(SimCopy::default()),
            write_cache: None,
            zoned: None,
            format_nvm: true,
            namespace_management: true,
            device_self_test: true,
            copy_format_1: true,
            write_uncorrectable: true,
            compare_and_write: true,
            subnqn: String::new(),
            cntlid: crate::SIM_CNTLID,
            shared_namespaces: false,
            firmware_update: Some(SimFirmware::default()),
        }
    }
}

impl SimConfig {
    /// Controller `cntlid` of the emulator's one NVM subsystem ([`crate::SIM_SUBNQN`]) with
    /// shared namespaces and the default layout: what [`crate::SimController::start_sibling`]
    /// needs of both configs (start one, then its siblings with other CNTLIDs).
    pub fn subsystem_member(cntlid: u16) -> Self {
        Self {
            cntlid,
            shared_namespaces: true,
            subnqn: crate::SIM_SUBNQN.into(),
            ..Self::default()
        }
    }

    /// Checks the configuration; panics with a message naming the bad field (the config is
    /// written by test code, so a mistake there is a bug in the test).
    pub(crate) fn validate(&self) {
        if let Some(f) = &self.firmware_update {
            assert!(
                (1..=nvme_spec::firmware::MAX_FIRMWARE_SLOT).contains(&f.slots),
                "SimConfig::firmware_update.slots must be 1..=7, not {}",
                f.slots
            );
        }
        if let Some(z) = &self.zoned {
            assert!(
                self.namespaces
                    .iter()
                    .any(|ns| ns.nsid == z.nsid && ns.metadata_size == 0),
                "SimConfig::zoned names namespace {}, which is not a configured namespace \
                 without metadata",
                z.nsid
            );
            assert!(
                z.zone_blocks > 0 && z.zone_capacity > 0 && z.zone_capacity <= z.zone_blocks,
                "SimZoned: zone_capacity must be 1..=zone_blocks"
            );
            assert!(
                self.write_cache.is_none(),
                "SimZoned: not with a write cache (the zone state is not cut by power loss)"
            );
        }
        assert!(
            self.subnqn.len() <= MAX_NQN_BYTES,
            "SimConfig::subnqn must be at most {MAX_NQN_BYTES} bytes"
        );
        assert!(
            self.io_queue_pairs >= 1,
            "SimConfig::io_queue_pairs must be >= 1"
        );
        assert!(
            self.dstrd <= MAX_DSTRD,
            "SimConfig::dstrd must be 0..={MAX_DSTRD} (a 4-bit field), not {}",
            self.dstrd
        );
        assert!(
            (1..=MAX_MSIX_VECTORS).contains(&self.msix_vectors),
            "SimConfig::msix_vectors must be 1..={MAX_MSIX_VECTORS}, not {}",
            self.msix_vectors
        );
        if let Some(copy) = self.copy {
            assert!(
                copy.mssrl >= 1 && copy.mcl >= u32::from(copy.mssrl),
                "SimConfig::copy: mssrl must be >= 1 and mcl >= mssrl (got {copy:?})"
            );
        }
        for ns in &self.namespaces {
            assert!(
                self.write_cache.is_none() || ns.metadata_size == 0,
                "namespace {}: the write cache model needs namespaces without metadata",
                ns.nsid
            );
            assert!(
                ns.block_size == SMALL_BLOCK || ns.block_size == LARGE_BLOCK,
                "namespace {}: block_size must be 512 or 4096, not {}",
                ns.nsid,
                ns.block_size
            );
            assert!(
                !ns.extended || ns.metadata_size > 0,
                "namespace {}: extended LBAs need metadata_size > 0",
                ns.nsid
            );
            assert!(
                ns.protection & !PI_FIRST <= MAX_PI_TYPE,
                "namespace {}: protection must be 0..={MAX_PI_TYPE}, with PI_FIRST, not {}",
                ns.nsid,
                ns.protection
            );
            assert!(
                ns.pi_format != PiFormat::Guard32,
                "namespace {}: the 32-bit guard PI format is not emulated",
                ns.nsid
            );
            let pi_bytes = ns.pi_format.tuple_bytes() as u16;
            assert!(
                ns.protection == 0 || ns.metadata_size >= pi_bytes,
                "namespace {}: protection information ({:?}) needs metadata_size >= {pi_bytes}",
                ns.nsid,
                ns.pi_format
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
