//! The fake target's configuration and the counters tests read.

use std::sync::atomic::AtomicU64;

use super::Fault;

#[derive(Clone, Debug)]
pub struct Config {
    pub subnqn: String,
    /// (nsid, log2 block size, blocks)
    pub namespaces: Vec<(u32, u8, u64)>,
    /// IOCCSZ in 16-byte units (4 = no in-capsule data on I/O queues).
    pub ioccsz: u32,
    pub maxh2cdata: u32,
    pub cpda: u8,
    /// Largest C2HData payload per PDU.
    pub c2h_chunk: usize,
    /// Use the SUCCESS flag instead of a CapsuleResp after read data (on queues connected with
    /// SQ flow control disabled, as the spec allows it only there).
    pub success_shortcut: bool,
    pub fault: Fault,
    /// I/O commands answered normally before the fault strikes (per connection).
    pub fault_after: u64,
    /// Enforce the Keep Alive Timeout asked for in the admin Connect: an admin connection
    /// that receives nothing for that long is closed with its controller's I/O connections
    /// (NVMe Base 2.0 §3.9: the controller treats it as a lost host).
    pub enforce_kato: bool,
    /// Identify Controller MDTS (log2 of the largest transfer in minimum pages; 0 = no
    /// limit). Reads and writes larger than that fail with Invalid Field in Command.
    pub mdts: u8,
    /// CAP.MQES (0's based largest queue; the spec's minimum is 1).
    pub mqes: u16,
    /// Identify Controller MAXCMD (commands outstanding per queue).
    pub maxcmd: u16,
    /// Offer Copy (ONCS bit 8, OCFS format 0h, the limits of `fake::COPY_MSSRL` and the
    /// others in Identify Namespace); without it Copy completes with Invalid Command Opcode.
    pub copy: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            subnqn: "nqn.2026-01.test:sub1".into(),
            namespaces: vec![(1, 12, 256), (2, 9, 2048)],
            ioccsz: 4 + 8192 / 16,
            maxh2cdata: 8192,
            cpda: 0,
            c2h_chunk: 4096,
            success_shortcut: true,
            fault: Fault::None,
            fault_after: 0,
            enforce_kato: false,
            mdts: 0,
            mqes: 127,
            maxcmd: 128,
            copy: true,
        }
    }
}

#[derive(Default)]
pub struct Counters {
    pub connects: AtomicU64,
    pub keep_alives: AtomicU64,
    pub io_commands: AtomicU64,
    pub r2ts: AtomicU64,
    pub in_capsule_writes: AtomicU64,
    /// Admin Connects accepted (associations).
    pub admin_connects: AtomicU64,
    /// Aborts received, and those that aborted a held command.
    pub aborts: AtomicU64,
    pub aborts_honoured: AtomicU64,
    /// Admin connections closed because no command came within the KATO.
    pub kato_expiries: AtomicU64,
    /// Get Log Page commands served.
    pub log_pages: AtomicU64,
    /// Reads and writes refused for exceeding the configured MDTS.
    pub over_mdts: AtomicU64,
    /// Copy commands carried out.
    pub copies: AtomicU64,
}
