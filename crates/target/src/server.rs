//! [`Target`]: the listening socket, the poll group threads, and what they share (the
//! subsystems, resolved once at start, and the association table).

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use nvme_core::Namespace;
use nvme_spec::fabrics::{self, NQN_FIELD_SIZE};
use nvme_spec::regs;
use nvme_vfio::InterruptEvent;

use crate::backend::Backend;
use crate::config::{check_subsystem, SubsystemConfig, TargetConfig};
use crate::error::TargetError;
use crate::group;
use crate::registry::Registry;

/// How often the listener looks at the stop flag while nobody connects.
const ACCEPT_POLL: Duration = Duration::from_millis(10);
/// Smallest memory page of the fabrics controller (CAP.MPSMIN 0: 4 KiB), the unit of MDTS.
pub(crate) const PAGE: usize = 1 << regs::PAGE_SIZE_SHIFT_BASE;

/// A subsystem as served: the namespaces looked up on the backend, the limits computed.
pub(crate) struct Subsystem<B> {
    pub nqn: String,
    pub nqn_field: [u8; NQN_FIELD_SIZE],
    pub backend: Arc<B>,
    /// (subsystem nsid, backend namespace), ascending nsid.
    pub namespaces: Vec<(u32, Namespace)>,
    pub allowed: Option<Vec<[u8; NQN_FIELD_SIZE]>>,
    pub serial: String,
    /// Bytes of one command at most (a power of two of pages): MDTS and MAXH2CDATA.
    pub max_io: usize,
}

impl<B> Subsystem<B> {
    /// Whether host `hostnqn` may connect (NVMe Base 2.0 §6.3: Connect Invalid Host).
    pub fn allows(&self, hostnqn: &[u8; NQN_FIELD_SIZE]) -> bool {
        self.allowed.as_ref().map_or(true, |l| l.contains(hostnqn))
    }

    /// The namespace the subsystem calls `nsid`.
    #[inline]
    pub fn namespace(&self, nsid: u32) -> Option<&Namespace> {
        self.namespaces
            .iter()
            .find(|(id, _)| *id == nsid)
            .map(|(_, ns)| ns)
    }
}

/// Counters of a running target.
#[derive(Default)]
pub(crate) struct Stats {
    pub connections: AtomicU64,
    pub kato_expiries: AtomicU64,
    pub refused_hosts: AtomicU64,
    pub protocol_errors: AtomicU64,
}

/// A snapshot of the target's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TargetStats {
    /// Connections accepted.
    pub connections: u64,
    /// Associations ended because their Keep Alive timer expired.
    pub kato_expiries: u64,
    /// Connects refused for the host NQN or the subsystem.
    pub refused_hosts: u64,
    /// Connections ended for a malformed PDU, a bad digest or a sequence error.
    pub protocol_errors: u64,
    /// Associations alive now.
    pub associations: usize,
}

/// What the threads share.
pub(crate) struct Shared<B> {
    pub config: TargetConfig,
    pub subsystems: Vec<Subsystem<B>>,
    pub registry: Registry,
    pub stop: AtomicBool,
    /// The address bound (the port chosen when 0 was asked for).
    pub local: SocketAddr,
    pub stats: Stats,
}

/// A running NVMe/TCP target. Dropping it stops it ([`Target::stop`]).
pub struct Target<B: Backend> {
    shared: Arc<Shared<B>>,
    threads: Vec<JoinHandle<()>>,
    /// Each poll group's wake-up eventfd (a blocked group returns to its loop).
    wakes: Vec<Arc<InterruptEvent>>,
}

/// The largest power-of-two multiple of [`PAGE`] not above `limit`.
fn pow2_pages(limit: usize) -> usize {
    let mut v = PAGE;
    while v * 2 <= limit {
        v *= 2;
    }
    v
}

fn resolve<B: Backend>(
    config: &TargetConfig,
    s: SubsystemConfig<B>,
) -> Result<Subsystem<B>, TargetError> {
    check_subsystem(&s)?;
    let mut namespaces = Vec::new();
    for e in &s.namespaces {
        let ns = s
            .backend
            .namespace(e.backend_nsid)
            .map_err(|source| TargetError::Namespace {
                subnqn: s.nqn.clone(),
                nsid: e.backend_nsid,
                controller: s.backend.name().to_owned(),
                source,
            })?;
        namespaces.push((e.nsid, ns));
    }
    namespaces.sort_by_key(|(id, _)| *id);
    let max_io = pow2_pages(
        config
            .max_io_bytes
            .min(s.backend.max_transfer_bytes())
            .max(PAGE),
    );
    let nqn_field = fabrics::nqn_field(&s.nqn).expect("checked");
    let allowed = s.allowed_hosts.as_ref().map(|l| {
        l.iter()
            .map(|h| fabrics::nqn_field(h).expect("checked"))
            .collect()
    });
    Ok(Subsystem {
        nqn: s.nqn,
        nqn_field,
        backend: s.backend,
        namespaces,
        allowed,
        serial: s.serial,
        max_io,
    })
}

impl<B: Backend> Target<B> {
    /// Starts serving `subsystems` (and the discovery subsystem) on `config.listen` with
    /// `config.threads` poll groups.
    pub fn start(
        config: TargetConfig,
        subsystems: Vec<SubsystemConfig<B>>,
    ) -> Result<Self, TargetError> {
        config.check()?;
        let mut resolved = Vec::new();
        for s in subsystems {
            if resolved.iter().any(|r: &Subsystem<B>| r.nqn == s.nqn) {
                return Err(TargetError::Config(format!("subsystem {} twice", s.nqn)));
            }
            resolved.push(resolve(&config, s)?);
        }
        let listener = TcpListener::bind(config.listen).map_err(|source| TargetError::Listen {
            addr: config.listen,
            source,
        })?;
        let local = listener
            .local_addr()
            .map_err(|source| TargetError::Listen {
                addr: config.listen,
                source,
            })?;
        listener
            .set_nonblocking(true)
            .map_err(|source| TargetError::Listen {
                addr: config.listen,
                source,
            })?;
        let shared = Arc::new(Shared {
            config,
            subsystems: resolved,
            registry: Registry::default(),
            stop: AtomicBool::new(false),
            local,
            stats: Stats::default(),
        });
        let mut target = Target {
            shared,
            threads: Vec::new(),
            wakes: Vec::new(),
        };
        let mut groups = Vec::new();
        for i in 0..target.shared.config.threads {
            let wake = Arc::new(InterruptEvent::new().map_err(TargetError::WakeEvent)?);
            let (tx, rx) = mpsc::channel();
            let (s, w) = (target.shared.clone(), wake.clone());
            // On an error here, dropping `target` stops the threads started so far.
            let h = std::thread::Builder::new()
                .name(format!("nvmf-group{i}"))
                .spawn(move || group::run(s, rx, w))
                .map_err(TargetError::Thread)?;
            target.threads.push(h);
            target.wakes.push(wake.clone());
            groups.push((tx, wake));
        }
        let s = target.shared.clone();
        let h = std::thread::Builder::new()
            .name("nvmf-listen".into())
            .spawn(move || listen(listener, s, groups))
            .map_err(TargetError::Thread)?;
        target.threads.push(h);
        log::info!("nvme-target: listening on {local}");
        Ok(target)
    }

    /// The address the target listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.shared.local
    }

    /// The counters.
    pub fn stats(&self) -> TargetStats {
        let s = &self.shared.stats;
        TargetStats {
            connections: s.connections.load(Ordering::Relaxed),
            kato_expiries: s.kato_expiries.load(Ordering::Relaxed),
            refused_hosts: s.refused_hosts.load(Ordering::Relaxed),
            protocol_errors: s.protocol_errors.load(Ordering::Relaxed),
            associations: self.shared.registry.len(),
        }
    }

    /// Stops listening, closes every connection (their backend queue pairs drained and
    /// deleted) and joins the threads.
    pub fn stop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        for w in &self.wakes {
            let _ = w.signal();
        }
        for h in self.threads.drain(..) {
            let _ = h.join();
        }
    }
}

impl<B: Backend> Drop for Target<B> {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Accepts connections and hands them to the poll groups in turn.
fn listen<B: Backend>(
    listener: TcpListener,
    s: Arc<Shared<B>>,
    groups: Vec<(Sender<TcpStream>, Arc<InterruptEvent>)>,
) {
    let mut next = 0;
    while !s.stop.load(Ordering::Acquire) {
        match listener.accept() {
            Ok((stream, peer)) => {
                log::debug!("nvme-target: connection from {peer}");
                s.stats.connections.fetch_add(1, Ordering::Relaxed);
                if stream.set_nonblocking(true).is_err() || stream.set_nodelay(true).is_err() {
                    continue;
                }
                let (tx, wake) = &groups[next];
                if tx.send(stream).is_err() {
                    return;
                }
                // The group may be blocked in its wait: it picks the connection up now.
                let _ = wake.signal();
                next = (next + 1) % groups.len();
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::sleep(ACCEPT_POLL),
            Err(e) => {
                log::warn!("nvme-target: accept: {e}");
                std::thread::sleep(ACCEPT_POLL);
            }
        }
    }
}
