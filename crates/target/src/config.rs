//! What the target serves: the listening address, the subsystems (each a set of namespaces of
//! one backend controller, with the hosts allowed to connect), and the limits it announces.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use nvme_spec::fabrics;

use crate::error::TargetError;

/// One namespace of a subsystem: `nsid` as the hosts see it, `backend_nsid` on the backend
/// controller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExportedNamespace {
    /// Namespace id in the subsystem (1-based).
    pub nsid: u32,
    /// Namespace id on the backend controller.
    pub backend_nsid: u32,
}

/// An NVM subsystem: its NQN, the backend controller whose namespaces it exports, and who may
/// connect.
pub struct SubsystemConfig<B> {
    /// Subsystem NQN (NVMe Base 2.0 §4.5).
    pub nqn: String,
    /// The controller the namespaces are on.
    pub backend: Arc<B>,
    /// The namespaces exported.
    pub namespaces: Vec<ExportedNamespace>,
    /// Host NQNs allowed to connect; `None` allows any host. With a list, every host not on
    /// it is refused (Connect completes with Connect Invalid Host, and the connection closes).
    pub allowed_hosts: Option<Vec<String>>,
    /// Serial number reported in Identify Controller (ASCII, at most 20 characters).
    pub serial: String,
}

/// How the target listens and what it announces.
#[derive(Clone, Debug)]
pub struct TargetConfig {
    /// Address to listen on (explicit: there is no default that opens a port to a network).
    pub listen: SocketAddr,
    /// Poll group threads; connections are spread over them round robin.
    pub threads: usize,
    /// Most I/O queues a host may connect per association (Set Features Number of Queues is
    /// answered with at most this).
    pub max_io_queues: u16,
    /// Entries of each queue a host may connect (CAP.MQES + 1, Identify MAXCMD).
    pub queue_entries: u16,
    /// Upper bound of one command's data (announced as MDTS and MAXH2CDATA, lowered to what
    /// the backend takes and to a power of two of 4 KiB pages).
    pub max_io_bytes: usize,
    /// In-capsule data an I/O command may carry (announced through IOCCSZ).
    pub in_capsule_bytes: usize,
    /// Sleep of a poll group between passes once idle, where it cannot block (a queue pair
    /// with commands in flight that has no interrupt vector).
    pub idle_sleep: Duration,
    /// Passes with nothing to do a poll group spins before it blocks on its sockets and
    /// interrupts (or sleeps `idle_sleep`); 0 (the default): after the first empty pass
    /// (measured in `docs/target.md`, "Performance").
    pub idle_spins: u32,
    /// While commands are at a backend queue pair and no pass has moved anything for less
    /// than this, a poll group polls its queue pairs' completion queues (no socket reads, no
    /// syscalls) instead of blocking on their interrupts; a completion is then seen as soon as
    /// the controller posts it, not after its MSI-X reaches the thread. Zero (the default):
    /// block at once.
    pub device_poll: Duration,
    /// Adaptive spinning: a poll group that finds nothing to do keeps polling its sockets
    /// (instead of blocking) for up to twice the recent idle gap (an average of how long its
    /// idle spells lasted before work came), as long as that average is at most this; when
    /// the gaps grow longer (a busy host, a slow peer) it blocks at once again. Zero: off;
    /// default 1 ms.
    pub adaptive_spin: Duration,
    /// A connection that has not completed ICReq and Connect this long after it was accepted
    /// is closed (a host that holds a socket without using it).
    pub connect_timeout: Duration,
}

/// Defaults of [`TargetConfig`] other than the address.
pub(crate) mod defaults {
    /// Poll groups.
    pub const THREADS: usize = 1;
    /// I/O queues per association.
    pub const MAX_IO_QUEUES: u16 = 8;
    /// Queue entries (the Linux host's default queue size).
    pub const QUEUE_ENTRIES: u16 = 128;
    /// Largest command (128 KiB).
    pub const MAX_IO_BYTES: usize = 128 << 10;
    /// In-capsule data (8 KiB, as the Linux target).
    pub const IN_CAPSULE_BYTES: usize = 8 << 10;
    /// Idle sleep.
    pub const IDLE_SLEEP_US: u64 = 200;
    /// Empty passes before an idle group blocks (0: at once; spinning lost at QD1 under TCG,
    /// docs/target.md "What was changed").
    pub const IDLE_SPINS: u32 = 0;
    /// Completion polling while commands are at the controller: off (1 ms lost at QD1 and
    /// won at QD128 under TCG, docs/target.md "What was changed").
    pub const DEVICE_POLL_US: u64 = 0;
    /// Adaptive spinning's longest average idle gap: 1 ms (QD1 p50 0.72x and QD128 IOPS 1.30x
    /// of blocking at once on a quiet host, QD1 p50 0.90x with the host loaded; docs/target.md
    /// "Adaptive spinning").
    pub const ADAPTIVE_SPIN_US: u64 = 1000;
    /// Time to Connect after accept.
    pub const CONNECT_TIMEOUT_S: u64 = 10;
}

impl TargetConfig {
    /// The defaults, listening on `listen`.
    pub fn new(listen: SocketAddr) -> Self {
        Self {
            listen,
            threads: defaults::THREADS,
            max_io_queues: defaults::MAX_IO_QUEUES,
            queue_entries: defaults::QUEUE_ENTRIES,
            max_io_bytes: defaults::MAX_IO_BYTES,
            in_capsule_bytes: defaults::IN_CAPSULE_BYTES,
            idle_sleep: Duration::from_micros(defaults::IDLE_SLEEP_US),
            idle_spins: defaults::IDLE_SPINS,
            device_poll: Duration::from_micros(defaults::DEVICE_POLL_US),
            adaptive_spin: Duration::from_micros(defaults::ADAPTIVE_SPIN_US),
            connect_timeout: Duration::from_secs(defaults::CONNECT_TIMEOUT_S),
        }
    }

    pub(crate) fn check(&self) -> Result<(), TargetError> {
        let bad = |m: String| Err(TargetError::Config(m));
        if self.threads == 0 {
            return bad("--threads must be at least 1".into());
        }
        if self.max_io_queues == 0 {
            return bad("at least one I/O queue per association".into());
        }
        if self.queue_entries < MIN_QUEUE_ENTRIES {
            return bad(format!("queues need at least {MIN_QUEUE_ENTRIES} entries"));
        }
        if self.max_io_bytes < nvme_spec::tcp::MIN_MAXH2CDATA as usize {
            return bad(format!(
                "commands of at least {} bytes (MAXH2CDATA minimum)",
                nvme_spec::tcp::MIN_MAXH2CDATA
            ));
        }
        Ok(())
    }
}

/// Smallest queue (NVMe Base 2.0 §3.1.4.1: CAP.MQES at least 1, two entries).
const MIN_QUEUE_ENTRIES: u16 = 2;

/// Checks a subsystem's names and namespace ids.
pub(crate) fn check_subsystem<B>(s: &SubsystemConfig<B>) -> Result<(), TargetError> {
    let bad = |m: String| Err(TargetError::Config(m));
    if fabrics::nqn_field(&s.nqn).is_none() || s.nqn.is_empty() {
        return bad(format!("subsystem NQN `{}` is empty or too long", s.nqn));
    }
    if s.nqn == fabrics::DISCOVERY_NQN {
        return bad("the discovery NQN is served by the target itself".into());
    }
    for h in s.allowed_hosts.iter().flatten() {
        if fabrics::nqn_field(h).is_none() {
            return bad(format!("host NQN `{h}` is too long"));
        }
    }
    let mut seen = Vec::new();
    for ns in &s.namespaces {
        if ns.nsid == 0 || ns.nsid == u32::MAX || seen.contains(&ns.nsid) {
            return bad(format!(
                "subsystem {}: namespace id {} twice or invalid",
                s.nqn, ns.nsid
            ));
        }
        seen.push(ns.nsid);
    }
    Ok(())
}
