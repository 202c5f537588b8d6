//! Identify data structures (NVMe Base 2.0 §5.17.2; Identify Namespace from NVM CS 1.0 §4.1.5.1).
//!
//! Each structure is exactly [`IDENTIFY_DATA_SIZE`] bytes, `#[repr(C)]`, with every field's
//! offset asserted at compile time. Reserved ranges are named `rsvdNNN` after their first byte
//! offset. Decoding from a DMA buffer is done by [`IdentifyController::from_bytes`] and friends,
//! which parse little-endian fields and never reinterpret memory.

use bitflags::bitflags;

use crate::regs::Version;

/// Size of every Identify data structure.
pub const IDENTIFY_DATA_SIZE: usize = 4096;
/// Number of LBA Format entries in Identify Namespace (NVM CS Figure 97).
pub const MAX_LBA_FORMATS: usize = 64;
/// Number of Power State Descriptors in Identify Controller.
pub const MAX_POWER_STATES: usize = 32;
/// Number of NSIDs in an Active Namespace ID list.
pub const NAMESPACE_LIST_ENTRIES: usize = 1024;

/// Identify Namespace NSFEAT bits (NVM CS §4.1.5.1, Figure 97).
pub mod nsfeat {
    /// Bit 1 (NSABP): NAWUN, NAWUPF and NACWU are defined for this namespace and override the
    /// controller's AWUN, AWUPF and ACWU.
    pub const ATOMIC_PARAMETERS: u8 = 1 << 1;
}

wire_struct! {
    /// Identify Controller data structure (§5.17.2.1, Figure 275).
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct IdentifyController {
        /// PCI Vendor ID.
        vid @ 0: u16,
        /// PCI Subsystem Vendor ID.
        ssvid @ 2: u16,
        /// Serial Number (ASCII, space padded).
        sn @ 4: [u8; 20],
        /// Model Number (ASCII, space padded).
        mn @ 24: [u8; 40],
        /// Firmware Revision (ASCII, space padded).
        fr @ 64: [u8; 8],
        /// Recommended Arbitration Burst.
        rab @ 72: u8,
        /// IEEE OUI Identifier.
        ieee @ 73: [u8; 3],
        /// Controller Multi-Path I/O and Namespace Sharing Capabilities.
        cmic @ 76: u8,
        /// Maximum Data Transfer Size, log2 in units of CAP.MPSMIN pages; 0 = no limit.
        mdts @ 77: u8,
        /// Controller ID.
        cntlid @ 78: u16,
        /// Version (same encoding as the VS register).
        ver @ 80: u32,
        /// RTD3 Resume Latency (µs).
        rtd3r @ 84: u32,
        /// RTD3 Entry Latency (µs).
        rtd3e @ 88: u32,
        /// Optional Asynchronous Events Supported.
        oaes @ 92: u32,
        /// Controller Attributes.
        ctratt @ 96: u32,
        /// Read Recovery Levels Supported.
        rrls @ 100: u16,
        /// Reserved (bytes 102..111).
        rsvd102 @ 102: [u8; 9],
        /// Controller Type (1 I/O, 2 discovery, 3 administrative).
        cntrltype @ 111: u8,
        /// FRU Globally Unique Identifier.
        fguid @ 112: [u8; 16],
        /// Command Retry Delay Time 1 (100 ms units).
        crdt1 @ 128: u16,
        /// Command Retry Delay Time 2 (100 ms units).
        crdt2 @ 130: u16,
        /// Command Retry Delay Time 3 (100 ms units).
        crdt3 @ 132: u16,
        /// Reserved (bytes 134..253).
        rsvd134 @ 134: [u8; 119],
        /// NVM Subsystem Report.
        nvmsr @ 253: u8,
        /// VPD Write Cycle Information.
        vwci @ 254: u8,
        /// Management Endpoint Capabilities.
        mec @ 255: u8,
        /// Optional Admin Command Support, see [`Oacs`].
        oacs @ 256: u16,
        /// Abort Command Limit (0-based).
        acl @ 258: u8,
        /// Asynchronous Event Request Limit (0-based).
        aerl @ 259: u8,
        /// Firmware Updates.
        frmw @ 260: u8,
        /// Log Page Attributes.
        lpa @ 261: u8,
        /// Error Log Page Entries (0-based).
        elpe @ 262: u8,
        /// Number of Power States Support (0-based).
        npss @ 263: u8,
        /// Admin Vendor Specific Command Configuration.
        avscc @ 264: u8,
        /// Autonomous Power State Transition Attributes.
        apsta @ 265: u8,
        /// Warning Composite Temperature Threshold (K).
        wctemp @ 266: u16,
        /// Critical Composite Temperature Threshold (K).
        cctemp @ 268: u16,
        /// Maximum Time for Firmware Activation (100 ms units).
        mtfa @ 270: u16,
        /// Host Memory Buffer Preferred Size (4 KiB units).
        hmpre @ 272: u32,
        /// Host Memory Buffer Minimum Size (4 KiB units).
        hmmin @ 276: u32,
        /// Total NVM Capacity (bytes, 128-bit LE).
        tnvmcap @ 280: [u8; 16],
        /// Unallocated NVM Capacity (bytes, 128-bit LE).
        unvmcap @ 296: [u8; 16],
        /// Replay Protected Memory Block Support.
        rpmbs @ 312: u32,
        /// Extended Device Self-test Time (minutes).
        edstt @ 316: u16,
        /// Device Self-test Options.
        dsto @ 318: u8,
        /// Firmware Update Granularity (4 KiB units).
        fwug @ 319: u8,
        /// Keep Alive Support (100 ms units).
        kas @ 320: u16,
        /// Host Controlled Thermal Management Attributes.
        hctma @ 322: u16,
        /// Minimum Thermal Management Temperature (K).
        mntmt @ 324: u16,
        /// Maximum Thermal Management Temperature (K).
        mxtmt @ 326: u16,
        /// Sanitize Capabilities.
        sanicap @ 328: u32,
        /// Host Memory Buffer Minimum Descriptor Entry Size (4 KiB units).
        hmminds @ 332: u32,
        /// Host Memory Maximum Descriptors Entries.
        hmmaxd @ 336: u16,
        /// NVM Set Identifier Maximum.
        nsetidmax @ 338: u16,
        /// Endurance Group Identifier Maximum.
        endgidmax @ 340: u16,
        /// ANA Transition Time (s).
        anatt @ 342: u8,
        /// Asymmetric Namespace Access Capabilities.
        anacap @ 343: u8,
        /// ANA Group Identifier Maximum.
        anagrpmax @ 344: u32,
        /// Number of ANA Group Identifiers.
        nanagrpid @ 348: u32,
        /// Persistent Event Log Size (64 KiB units).
        pels @ 352: u32,
        /// Domain Identifier.
        domainid @ 356: u16,
        /// Reserved (bytes 358..368).
        rsvd358 @ 358: [u8; 10],
        /// Max Endurance Group Capacity (bytes, 128-bit LE).
        megcap @ 368: [u8; 16],
        /// Reserved (bytes 384..386: TMPTHHA and a reserved byte, not decoded here).
        rsvd384 @ 384: [u8; 2],
        /// Command Quiesce Time (milliseconds; 0 = not reported): how long after a command
        /// stopped being tracked by the host (its connection or association gone) the
        /// controller may still process it (NVMe Base 2.0 ECN / 2.1 Figure 313, bytes 387:386).
        cqt @ 386: u16,
        /// Reserved (bytes 388..512).
        rsvd388 @ 388: [u8; 124],
        /// Submission Queue Entry Size: bits 3:0 required, 7:4 maximum (log2 bytes).
        sqes @ 512: u8,
        /// Completion Queue Entry Size: bits 3:0 required, 7:4 maximum (log2 bytes).
        cqes @ 513: u8,
        /// Maximum Outstanding Commands (fabrics; 0 for PCIe).
        maxcmd @ 514: u16,
        /// Number of Namespaces: the largest valid NSID.
        nn @ 516: u32,
        /// Optional NVM Command Support, see [`Oncs`].
        oncs @ 520: u16,
        /// Fused Operation Support, see [`Fuses`].
        fuses @ 522: u16,
        /// Format NVM Attributes.
        fna @ 524: u8,
        /// Volatile Write Cache: bit 0 = present.
        vwc @ 525: u8,
        /// Atomic Write Unit Normal (0-based blocks).
        awun @ 526: u16,
        /// Atomic Write Unit Power Fail (0-based blocks).
        awupf @ 528: u16,
        /// I/O Command Set Vendor Specific Command Configuration.
        icsvscc @ 530: u8,
        /// Namespace Write Protection Capabilities.
        nwpc @ 531: u8,
        /// Atomic Compare & Write Unit (0-based blocks).
        acwu @ 532: u16,
        /// Optional Copy Formats Supported, see [`CopyFormats`].
        ocfs @ 534: u16,
        /// SGL Support.
        sgls @ 536: u32,
        /// Maximum Number of Allowed Namespaces.
        mnan @ 540: u32,
        /// Maximum Domain Namespace Attachments (128-bit LE).
        maxdna @ 544: [u8; 16],
        /// Maximum I/O Controller Namespace Attachments.
        maxcna @ 560: u32,
        /// Reserved (bytes 564..768).
        rsvd564 @ 564: [u8; 204],
        /// NVM Subsystem NVMe Qualified Name (UTF-8, NUL terminated).
        subnqn @ 768: [u8; 256],
        /// Reserved (bytes 1024..1792).
        rsvd1024 @ 1024: [u8; 768],
        /// I/O Queue Command Capsule Supported Size (fabrics).
        ioccsz @ 1792: u32,
        /// I/O Queue Response Capsule Supported Size (fabrics).
        iorcsz @ 1796: u32,
        /// In Capsule Data Offset (fabrics).
        icdoff @ 1800: u16,
        /// Fabrics Controller Attributes.
        fcatt @ 1802: u8,
        /// Maximum SGL Data Block Descriptors (fabrics).
        msdbd @ 1803: u8,
        /// Optional Fabric Commands Support.
        ofcs @ 1804: u16,
        /// Reserved (bytes 1806..2048).
        rsvd1806 @ 1806: [u8; 242],
        /// Power State Descriptors 0..=31, 32 bytes each.
        psd @ 2048: [[u8; 32]; 32],
        /// Vendor Specific.
        vs @ 3072: [u8; 1024],
    }
    size 4096;
}

/// Decodes a fixed-width ASCII field: trailing spaces and NULs trimmed, non-printable bytes
/// shown as `?`.
fn ascii_field(raw: &[u8]) -> String {
    let end = raw
        .iter()
        .rposition(|&b| b != b' ' && b != 0)
        .map_or(0, |i| i + 1);
    raw[..end]
        .iter()
        .map(|&b| {
            if b.is_ascii_graphic() || b == b' ' {
                char::from(b)
            } else {
                '?'
            }
        })
        .collect()
}

/// Writes `s` into a fixed-width ASCII field, padding with spaces and truncating if too long.
pub fn fill_ascii_field(field: &mut [u8], s: &str) {
    field.fill(b' ');
    for (dst, src) in field.iter_mut().zip(s.bytes()) {
        *dst = src;
    }
}

impl Default for IdentifyController {
    fn default() -> Self {
        Self::from_bytes(&[0; IDENTIFY_DATA_SIZE])
    }
}

impl IdentifyController {
    /// Serial number, trimmed.
    pub fn serial(&self) -> String {
        ascii_field(&self.sn)
    }

    /// Model number, trimmed.
    pub fn model(&self) -> String {
        ascii_field(&self.mn)
    }

    /// Firmware revision, trimmed.
    pub fn firmware(&self) -> String {
        ascii_field(&self.fr)
    }

    /// NVMe version the controller implements (0.0.0 for pre-1.2 controllers).
    pub fn version(&self) -> Version {
        Version(self.ver)
    }

    /// Maximum data transfer size in bytes for a controller whose CAP.MPSMIN page is
    /// `min_page_size` bytes; `None` when MDTS is 0 (no limit).
    pub fn mdts_bytes(&self, min_page_size: usize) -> Option<usize> {
        if self.mdts == 0 {
            return None;
        }
        // Saturate rather than overflow for absurd MDTS values reported by broken devices.
        Some(
            1usize
                .checked_shl(u32::from(self.mdts))
                .and_then(|pages| pages.checked_mul(min_page_size))
                .unwrap_or(usize::MAX),
        )
    }

    /// SGL Support for I/O commands (SGLS bits 1:0, §4.1.2).
    pub fn sgl_support(&self) -> crate::sgl::SglSupport {
        crate::sgl::SglSupport::from_sgls(self.sgls)
    }

    /// Firmware Updates (FRMW, byte 260): slots, slot 1 read only, activation without reset.
    pub fn firmware_updates(&self) -> crate::firmware::Frmw {
        crate::firmware::Frmw::from_raw(self.frmw)
    }

    /// Firmware Update Granularity (FWUG, byte 319).
    pub fn firmware_update_granularity(&self) -> crate::firmware::Fwug {
        crate::firmware::Fwug::from_raw(self.fwug)
    }

    /// Optional Admin Command Support.
    pub fn oacs_flags(&self) -> Oacs {
        Oacs::from_bits_retain(self.oacs)
    }

    /// Optional NVM Command Support.
    pub fn oncs_flags(&self) -> Oncs {
        Oncs::from_bits_retain(self.oncs)
    }

    /// Fused operations the controller supports (FUSES).
    pub fn fuses_flags(&self) -> Fuses {
        Fuses::from_bits_retain(self.fuses)
    }

    /// Copy Descriptor Formats the Copy command accepts (OCFS).
    pub fn copy_formats(&self) -> CopyFormats {
        CopyFormats::from_bits_retain(self.ocfs)
    }

    /// True when a volatile write cache is present (VWC bit 0), so Flush is meaningful.
    pub fn vwc_present(&self) -> bool {
        self.vwc & 1 != 0
    }

    /// (required, maximum) submission queue entry size, log2 of bytes.
    pub fn sqes_min_max(&self) -> (u8, u8) {
        (self.sqes & 0xF, self.sqes >> 4)
    }

    /// (required, maximum) completion queue entry size, log2 of bytes.
    pub fn cqes_min_max(&self) -> (u8, u8) {
        (self.cqes & 0xF, self.cqes >> 4)
    }
}

impl IdentifyController {
    /// The NVM Subsystem NVMe Qualified Name (SUBNQN, bytes 1023:768): the UTF-8 text up to
    /// the first NUL (invalid bytes replaced), surrounding blanks trimmed; empty when the
    /// controller reports none (before NVMe 1.2.1 the field was reserved).
    pub fn subsystem_nqn(&self) -> String {
        let end = self
            .subnqn
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(self.subnqn.len());
        String::from_utf8_lossy(&self.subnqn[..end])
            .trim()
            .to_string()
    }

    /// Controller Multi-Path I/O and Namespace Sharing Capabilities (CMIC), known bits.
    pub fn cmic_flags(&self) -> Cmic {
        Cmic::from_bits_truncate(self.cmic)
    }
}

bitflags! {
    /// Controller Multi-Path I/O and Namespace Sharing Capabilities (Identify Controller CMIC,
    /// byte 76; NVMe Base 2.0 §5.17.2.1, Figure 275).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct Cmic: u8 {
        /// Bit 0: the NVM subsystem may have two or more ports.
        const MULTI_PORT = 1 << 0;
        /// Bit 1: the NVM subsystem may have two or more controllers (namespaces can be
        /// shared between them).
        const MULTI_CONTROLLER = 1 << 1;
        /// Bit 2: the controller is associated with an SR-IOV Virtual Function.
        const SRIOV = 1 << 2;
        /// Bit 3: Asymmetric Namespace Access Reporting.
        const ANA_REPORTING = 1 << 3;
    }
}

bitflags! {
    /// Namespace Multi-path I/O and Namespace Sharing Capabilities (Identify Namespace NMIC,
    /// byte 30; NVM CS 1.0 Figure 97, NVMe Base 2.0 §5.17.2.1).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct Nmic: u8 {
        /// Bit 0: the namespace may be attached to two or more controllers of the subsystem
        /// at once (a shared namespace).
        const SHARED = 1 << 0;
    }
}

bitflags! {
    /// Optional Admin Command Support (Identify Controller OACS, bytes 257:256).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct Oacs: u16 {
        /// Security Send / Security Receive.
        const SECURITY_SEND_RECEIVE = 1 << 0;
        /// Format NVM.
        const FORMAT_NVM = 1 << 1;
        /// Firmware Commit / Firmware Image Download.
        const FIRMWARE_DOWNLOAD_COMMIT = 1 << 2;
        /// Namespace Management.
        const NAMESPACE_MANAGEMENT = 1 << 3;
        /// Device Self-test.
        const DEVICE_SELF_TEST = 1 << 4;
        /// Directives.
        const DIRECTIVES = 1 << 5;
        /// NVMe-MI Send / Receive.
        const NVME_MI_SEND_RECEIVE = 1 << 6;
        /// Virtualization Management.
        const VIRTUALIZATION_MANAGEMENT = 1 << 7;
        /// Doorbell Buffer Config.
        const DOORBELL_BUFFER_CONFIG = 1 << 8;
        /// Get LBA Status.
        const GET_LBA_STATUS = 1 << 9;
        /// Command and Feature Lockdown.
        const COMMAND_FEATURE_LOCKDOWN = 1 << 10;
    }
}

impl Oacs {
    /// Human-readable names of the set, known flags, in bit order.
    pub fn names(&self) -> Vec<&'static str> {
        const NAMES: [(Oacs, &str); 11] = [
            (Oacs::SECURITY_SEND_RECEIVE, "Security Send/Receive"),
            (Oacs::FORMAT_NVM, "Format NVM"),
            (Oacs::FIRMWARE_DOWNLOAD_COMMIT, "Firmware Download/Commit"),
            (Oacs::NAMESPACE_MANAGEMENT, "Namespace Management"),
            (Oacs::DEVICE_SELF_TEST, "Device Self-test"),
            (Oacs::DIRECTIVES, "Directives"),
            (Oacs::NVME_MI_SEND_RECEIVE, "NVMe-MI Send/Receive"),
            (Oacs::VIRTUALIZATION_MANAGEMENT, "Virtualization Management"),
            (Oacs::DOORBELL_BUFFER_CONFIG, "Doorbell Buffer Config"),
            (Oacs::GET_LBA_STATUS, "Get LBA Status"),
            (
                Oacs::COMMAND_FEATURE_LOCKDOWN,
                "Command and Feature Lockdown",
            ),
        ];
        NAMES
            .iter()
            .filter(|(flag, _)| self.contains(*flag))
            .map(|&(_, name)| name)
            .collect()
    }
}

bitflags! {
    /// Optional NVM Command Support (Identify Controller ONCS, bytes 521:520).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct Oncs: u16 {
        /// Compare.
        const COMPARE = 1 << 0;
        /// Write Uncorrectable.
        const WRITE_UNCORRECTABLE = 1 << 1;
        /// Dataset Management.
        const DATASET_MANAGEMENT = 1 << 2;
        /// Write Zeroes.
        const WRITE_ZEROES = 1 << 3;
        /// Save field in Set Features / Select field in Get Features.
        const SAVE_SELECT = 1 << 4;
        /// Reservations.
        const RESERVATIONS = 1 << 5;
        /// Timestamp feature.
        const TIMESTAMP = 1 << 6;
        /// Verify.
        const VERIFY = 1 << 7;
        /// Copy.
        const COPY = 1 << 8;
    }
}

impl Oncs {
    /// Human-readable names of the set, known flags, in bit order.
    pub fn names(&self) -> Vec<&'static str> {
        const NAMES: [(Oncs, &str); 9] = [
            (Oncs::COMPARE, "Compare"),
            (Oncs::WRITE_UNCORRECTABLE, "Write Uncorrectable"),
            (Oncs::DATASET_MANAGEMENT, "Dataset Management"),
            (Oncs::WRITE_ZEROES, "Write Zeroes"),
            (Oncs::SAVE_SELECT, "Save/Select"),
            (Oncs::RESERVATIONS, "Reservations"),
            (Oncs::TIMESTAMP, "Timestamp"),
            (Oncs::VERIFY, "Verify"),
            (Oncs::COPY, "Copy"),
        ];
        NAMES
            .iter()
            .filter(|(flag, _)| self.contains(*flag))
            .map(|&(_, name)| name)
            .collect()
    }
}

bitflags! {
    /// Fused Operation Support (Identify Controller FUSES, bytes 523:522; NVMe Base 2.0
    /// §5.17.2.1): the fused operations of §3.4.2 the controller executes.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct Fuses: u16 {
        /// Compare and Write: a Compare fused with a Write of the same blocks.
        const COMPARE_AND_WRITE = 1 << 0;
    }
}

bitflags! {
    /// Optional Copy Formats Supported (Identify Controller OCFS, bytes 535:534; NVMe Base
    /// 2.0 §5.17.2.1): the Copy Descriptor Formats of the Copy command (NVM CS §3.3.2.1).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct CopyFormats: u16 {
        /// Format 0h: 32-byte source ranges, 16-bit protection information tags
        /// ([`CopySourceRange`](crate::queue::CopySourceRange)).
        const FORMAT_0 = 1 << 0;
        /// Format 1h: 40-byte source ranges for the 32-bit and 64-bit guard protection
        /// formats ([`CopySourceRangeFormat1`](crate::queue::CopySourceRangeFormat1)).
        const FORMAT_1 = 1 << 1;
    }
}

wire_struct! {
    /// LBA Format Data Structure (NVM CS §4.1.5.1, Figure 98).
    #[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
    pub struct LbaFormat {
        /// Metadata Size in bytes per block.
        ms @ 0: u16,
        /// LBA Data Size as log2 of bytes (0 = format not available).
        lbads @ 2: u8,
        /// Relative Performance in bits 1:0 (0 best .. 3 degraded); bits 7:2 reserved.
        rp @ 3: u8,
    }
    size 4;
}

impl LbaFormat {
    /// A format with `1 << lbads`-byte blocks and `ms` bytes of metadata.
    pub const fn new(lbads: u8, ms: u16) -> Self {
        LbaFormat { ms, lbads, rp: 0 }
    }

    /// Metadata bytes per block.
    pub const fn metadata_size(&self) -> u16 {
        self.ms
    }

    /// Data bytes per block; 0 when the format is unused (LBADS = 0) or nonsensical (≥ 32).
    pub const fn data_size(&self) -> u32 {
        if self.lbads == 0 || self.lbads >= 32 {
            0
        } else {
            1u32 << self.lbads
        }
    }

    /// Relative Performance (0 = best).
    pub const fn relative_performance(&self) -> u8 {
        self.rp & 0b11
    }
}

wire_struct! {
    /// Identify Namespace data structure for the NVM command set (NVM CS §4.1.5.1, Figure 97).
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct IdentifyNamespace {
        /// Namespace Size in logical blocks.
        nsze @ 0: u64,
        /// Namespace Capacity in logical blocks.
        ncap @ 8: u64,
        /// Namespace Utilization in logical blocks.
        nuse @ 16: u64,
        /// Namespace Features.
        nsfeat @ 24: u8,
        /// Number of LBA Formats (0-based).
        nlbaf @ 25: u8,
        /// Formatted LBA Size: bits 3:0 format index low, bit 4 extended metadata, 6:5 index high.
        flbas @ 26: u8,
        /// Metadata Capabilities.
        mc @ 27: u8,
        /// End-to-end Data Protection Capabilities.
        dpc @ 28: u8,
        /// End-to-end Data Protection Type Settings.
        dps @ 29: u8,
        /// Namespace Multi-path I/O and Namespace Sharing Capabilities.
        nmic @ 30: u8,
        /// Reservation Capabilities.
        rescap @ 31: u8,
        /// Format Progress Indicator.
        fpi @ 32: u8,
        /// Deallocate Logical Block Features.
        dlfeat @ 33: u8,
        /// Namespace Atomic Write Unit Normal (0-based blocks).
        nawun @ 34: u16,
        /// Namespace Atomic Write Unit Power Fail (0-based blocks).
        nawupf @ 36: u16,
        /// Namespace Atomic Compare & Write Unit (0-based blocks).
        nacwu @ 38: u16,
        /// Namespace Atomic Boundary Size Normal.
        nabsn @ 40: u16,
        /// Namespace Atomic Boundary Offset.
        nabo @ 42: u16,
        /// Namespace Atomic Boundary Size Power Fail.
        nabspf @ 44: u16,
        /// Namespace Optimal I/O Boundary (blocks).
        noiob @ 46: u16,
        /// NVM Capacity (bytes, 128-bit LE).
        nvmcap @ 48: [u8; 16],
        /// Namespace Preferred Write Granularity (0-based blocks).
        npwg @ 64: u16,
        /// Namespace Preferred Write Alignment (0-based blocks).
        npwa @ 66: u16,
        /// Namespace Preferred Deallocate Granularity (0-based blocks).
        npdg @ 68: u16,
        /// Namespace Preferred Deallocate Alignment (0-based blocks).
        npda @ 70: u16,
        /// Namespace Optimal Write Size (0-based blocks).
        nows @ 72: u16,
        /// Maximum Single Source Range Length: most blocks in one Copy source range.
        mssrl @ 74: u16,
        /// Maximum Copy Length: most blocks one Copy copies, all its source ranges together.
        mcl @ 76: u32,
        /// Maximum Source Range Count: most source ranges of one Copy command (0-based).
        msrc @ 80: u8,
        /// Reserved (bytes 81..92).
        rsvd81 @ 81: [u8; 11],
        /// ANA Group Identifier.
        anagrpid @ 92: u32,
        /// Reserved (bytes 96..99).
        rsvd96 @ 96: [u8; 3],
        /// Namespace Attributes.
        nsattr @ 99: u8,
        /// NVM Set Identifier.
        nvmsetid @ 100: u16,
        /// Endurance Group Identifier.
        endgid @ 102: u16,
        /// Namespace Globally Unique Identifier.
        nguid @ 104: [u8; 16],
        /// IEEE Extended Unique Identifier.
        eui64 @ 120: [u8; 8],
        /// LBA Format Support, entries 0..=nlbaf valid.
        lbaf @ 128: [LbaFormat; 64],
        /// Vendor Specific.
        vs @ 384: [u8; 3712],
    }
    size 4096;
}

impl Default for IdentifyNamespace {
    fn default() -> Self {
        Self::from_bytes(&[0; IDENTIFY_DATA_SIZE])
    }
}

impl IdentifyNamespace {
    const FLBAS_INDEX_LO_MASK: u8 = 0x0F;
    /// FLBAS bit 4: metadata is transferred at the end of each block's data (extended LBA).
    pub const FLBAS_EXTENDED_BIT: u8 = 1 << 4;
    const DPS_PI_TYPE_MASK: u8 = 0b111;
    const FLBAS_INDEX_HI_SHIFT: u8 = 5;
    const FLBAS_INDEX_HI_MASK: u8 = 0b11;
    /// NLBAF (0-based) at or above which FLBAS bits 6:5 extend the format index.
    const NLBAF_EXTENDED_INDEX: u8 = 16;

    /// Index of the formatted LBA format: FLBAS bits 3:0, with bits 6:5 as bits 5:4 of the
    /// index when more than 16 formats exist. Clamped to the 64-entry table.
    pub fn lba_format_index(&self) -> usize {
        let lo = self.flbas & Self::FLBAS_INDEX_LO_MASK;
        let hi = if self.nlbaf >= Self::NLBAF_EXTENDED_INDEX {
            (self.flbas >> Self::FLBAS_INDEX_HI_SHIFT) & Self::FLBAS_INDEX_HI_MASK
        } else {
            0
        };
        usize::from(hi << 4 | lo).min(MAX_LBA_FORMATS - 1)
    }

    /// The LBA format the namespace is formatted with.
    pub fn current_lba_format(&self) -> LbaFormat {
        self.lbaf[self.lba_format_index()]
    }

    /// Logical block size in bytes (0 when the current format is invalid).
    pub fn block_size(&self) -> u32 {
        self.current_lba_format().data_size()
    }

    /// The supported LBA formats: NLBAF + 1 entries, clamped to 64.
    pub fn lba_formats(&self) -> &[LbaFormat] {
        let n = (usize::from(self.nlbaf) + 1).min(MAX_LBA_FORMATS);
        &self.lbaf[..n]
    }

    /// True when metadata is transferred inline at the end of each block (FLBAS bit 4),
    /// false when it goes to a separate buffer (or there is none).
    pub fn metadata_extended(&self) -> bool {
        self.flbas & Self::FLBAS_EXTENDED_BIT != 0
    }

    /// Most source ranges one Copy command may carry (MSRC + 1; NVM CS §4.1.5.1).
    pub fn copy_max_ranges(&self) -> u16 {
        u16::from(self.msrc) + 1
    }

    /// Namespace Multi-path I/O and Namespace Sharing Capabilities (NMIC), known bits.
    pub fn nmic_flags(&self) -> Nmic {
        Nmic::from_bits_truncate(self.nmic)
    }

    /// The namespace may be attached to several controllers at once (NMIC bit 0).
    pub fn is_shared(&self) -> bool {
        self.nmic_flags().contains(Nmic::SHARED)
    }

    /// Protection information type the namespace is formatted with (DPS bits 2:0): 0 for
    /// none, 1..=3 for PI types 1-3 (NVM Command Set §4.1.5.1).
    pub fn protection_type(&self) -> u8 {
        self.dps & Self::DPS_PI_TYPE_MASK
    }
}

wire_struct! {
    /// Active Namespace ID list (CNS 02h, §5.17.2.2): ascending NSIDs, zero-terminated.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct NamespaceList {
        /// Namespace identifiers; the first 0 ends the list.
        ids @ 0: [u32; 1024],
    }
    size 4096;
}

impl Default for NamespaceList {
    fn default() -> Self {
        NamespaceList {
            ids: [0; NAMESPACE_LIST_ENTRIES],
        }
    }
}

impl NamespaceList {
    /// The active NSIDs, up to (not including) the first zero entry.
    pub fn active(&self) -> impl Iterator<Item = u32> + '_ {
        self.ids.iter().copied().take_while(|&id| id != 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic, position-dependent test pattern so misplaced fields are caught.
    fn pattern() -> [u8; IDENTIFY_DATA_SIZE] {
        core::array::from_fn(|i| (i as u8).wrapping_mul(31).wrapping_add((i >> 8) as u8))
    }

    #[test]
    fn subsystem_nqn_and_sharing_bits() {
        let mut c = IdentifyController::default();
        assert_eq!(c.subsystem_nqn(), "");
        let nqn = b"nqn.2019-08.org.qemu:subsys0";
        c.subnqn[..nqn.len()].copy_from_slice(nqn);
        // Bytes after the terminating NUL are not part of the name.
        c.subnqn[nqn.len() + 1] = b'x';
        assert_eq!(c.subsystem_nqn(), "nqn.2019-08.org.qemu:subsys0");
        c.cmic = 0b1010 | 0x80;
        assert_eq!(c.cmic_flags(), Cmic::MULTI_CONTROLLER | Cmic::ANA_REPORTING);
        let mut ns = IdentifyNamespace::default();
        assert!(!ns.is_shared());
        ns.nmic = 0x01;
        assert!(ns.is_shared());
        ns.nmic = 0x02;
        assert!(!ns.is_shared());
    }

    #[test]
    fn controller_round_trip_and_offsets() {
        let b = pattern();
        let c = IdentifyController::from_bytes(&b);
        assert_eq!(c.to_bytes(), b);
        assert_eq!(c.vid, u16::from_le_bytes([b[0], b[1]]));
        assert_eq!(c.mdts, b[77]);
        assert_eq!(c.ver, u32::from_le_bytes([b[80], b[81], b[82], b[83]]));
        assert_eq!(c.oacs, u16::from_le_bytes([b[256], b[257]]));
        assert_eq!(c.nn, u32::from_le_bytes([b[516], b[517], b[518], b[519]]));
        assert_eq!(c.oncs, u16::from_le_bytes([b[520], b[521]]));
        assert_eq!(c.subnqn[0], b[768]);
        assert_eq!(c.psd[1][0], b[2048 + 32]);
        assert_eq!(c.vs[1023], b[4095]);
        assert_eq!(
            IdentifyController::default().to_bytes(),
            [0; IDENTIFY_DATA_SIZE]
        );
    }

    #[test]
    fn controller_helpers() {
        let mut c = IdentifyController::default();
        fill_ascii_field(&mut c.sn, "SN123");
        c.mn[..8].copy_from_slice(b"QEMU\x01NV\0");
        fill_ascii_field(&mut c.fr, "1.0");
        c.ver = Version::new(1, 4, 0).0;
        c.mdts = 7;
        c.oacs = (Oacs::FORMAT_NVM | Oacs::DOORBELL_BUFFER_CONFIG).bits();
        c.oncs = 0b1100 | 1 << 15;
        c.vwc = 0b111;
        c.sqes = 0x66;
        c.cqes = 0x44;
        let c = IdentifyController::from_bytes(&c.to_bytes());
        assert_eq!(c.serial(), "SN123");
        assert_eq!(c.model(), "QEMU?NV");
        assert_eq!(c.firmware(), "1.0");
        assert_eq!(c.version().to_string(), "1.4.0");
        assert_eq!(c.mdts_bytes(4096), Some(512 * 1024));
        assert_eq!(c.mdts_bytes(16384), Some(2 * 1024 * 1024));
        assert_eq!(
            c.oacs_flags().names(),
            ["Format NVM", "Doorbell Buffer Config"]
        );
        assert_eq!(
            c.oncs_flags().names(),
            ["Dataset Management", "Write Zeroes"]
        );
        assert!(c.oncs_flags().contains(Oncs::WRITE_ZEROES));
        assert!(!c.oncs_flags().contains(Oncs::COMPARE));
        assert!(c.vwc_present());
        assert_eq!(c.sqes_min_max(), (6, 6));
        assert_eq!(c.cqes_min_max(), (4, 4));
        let none = IdentifyController::default();
        assert_eq!(none.mdts_bytes(4096), None);
        assert!(!none.vwc_present());
        assert_eq!(none.serial(), "");
        assert!(none.oacs_flags().names().is_empty());
        let huge = IdentifyController { mdts: 200, ..none };
        assert_eq!(huge.mdts_bytes(4096), Some(usize::MAX));
        // Copy: ONCS bit 8, OCFS bit 0 for format 0h (QEMU 7.2 reports ONCS 15Dh).
        let (mut qemu, copy) = (none, Oncs::COPY);
        (qemu.oncs, qemu.ocfs) = (0x15D, 0b11);
        assert!(qemu.oncs_flags().contains(copy) && !qemu.oncs_flags().contains(Oncs::VERIFY));
        assert!(qemu.copy_formats().contains(CopyFormats::FORMAT_0));
        assert!(none.copy_formats().is_empty());
    }

    #[test]
    fn namespace_round_trip_and_offsets() {
        let b = pattern();
        let ns = IdentifyNamespace::from_bytes(&b);
        assert_eq!(ns.to_bytes(), b);
        assert_eq!(ns.nsze, u64::from_le_bytes(b[0..8].try_into().unwrap()));
        assert_eq!(ns.flbas, b[26]);
        assert_eq!(ns.eui64[0], b[120]);
        assert_eq!(ns.lbaf[1].ms, u16::from_le_bytes([b[132], b[133]]));
        assert_eq!(ns.lbaf[1].lbads, b[134]);
        assert_eq!(ns.lbaf[63].rp, b[383]);
        assert_eq!(ns.vs[0], b[384]);
        // MSRC (byte 80) is 0-based; the offsets of MSSRL, MCL, MSRC are asserted at compile time.
        assert_eq!(ns.copy_max_ranges(), u16::from(b[80]) + 1);
    }

    #[test]
    fn namespace_lba_format_selection() {
        let mut ns = IdentifyNamespace {
            nsze: 1 << 20,
            nlbaf: 1,
            flbas: 1,
            ..Default::default()
        };
        ns.lbaf[0] = LbaFormat::new(9, 0);
        ns.lbaf[1] = LbaFormat {
            ms: 8,
            lbads: 12,
            rp: 0b1110,
        };
        assert_eq!(ns.lba_format_index(), 1);
        assert_eq!(ns.block_size(), 4096);
        assert_eq!(ns.current_lba_format().metadata_size(), 8);
        assert_eq!(ns.current_lba_format().relative_performance(), 2);
        assert_eq!(ns.lba_formats().len(), 2);
        assert!(!ns.metadata_extended());
        ns.flbas = 0b0001_0000;
        assert!(ns.metadata_extended());
        assert_eq!(ns.block_size(), 512);
        // Bits 6:5 only count when more than 16 formats exist.
        ns.flbas = 0b0010_0011;
        assert_eq!(ns.lba_format_index(), 3);
        ns.nlbaf = 63;
        assert_eq!(ns.lba_format_index(), 0x13);
        assert_eq!(ns.lba_formats().len(), 64);
        ns.nlbaf = 255;
        assert_eq!(ns.lba_formats().len(), 64);
        assert_eq!(LbaFormat::default().data_size(), 0);
        assert_eq!(LbaFormat::new(40, 0).data_size(), 0);
    }

    #[test]
    fn namespace_list() {
        let mut l = NamespaceList::default();
        assert_eq!(l.active().count(), 0);
        l.ids[..3].copy_from_slice(&[1, 2, 7]);
        l.ids[5] = 9;
        let l = NamespaceList::from_bytes(&l.to_bytes());
        assert_eq!(l.active().collect::<Vec<_>>(), [1, 2, 7]);
        let b = l.to_bytes();
        assert_eq!(&b[8..12], &[7, 0, 0, 0]);
        let full = NamespaceList {
            ids: core::array::from_fn(|i| i as u32 + 1),
        };
        assert_eq!(full.active().count(), NAMESPACE_LIST_ENTRIES);
    }
}
