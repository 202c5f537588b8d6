//! Connecting queues: Fabrics Connect on a fresh connection (with the reason when it is
//! refused), the admin connection of a new association, and the connection of an I/O queue.
//!
//! INVARIANT: Connect runs synchronously on a queue of its own before any other command; a
//! refused Connect is explained from its status and dword 0 (which `Error::Command` does not
//! carry), never reported as a bare status.

use std::net::TcpStream;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nvme_core::{AbortStats, DmaBuffer, DmaMapper, Error, Result};
use nvme_spec::fabrics::{self, ConnectData};
use nvme_spec::StatusCodeType;

use crate::error::TcpError;
use crate::keep_alive::KeepAlive;
use crate::queue::{handshake, Negotiated, Queue, QueueLimits, Waiter};
use crate::trid::TransportId;

use super::options::uuid_text;
use super::{Admin, Inner, TcpOptions, ADMIN_IN_CAPSULE, ADMIN_QUEUE_ENTRIES};

/// Explains a refused Connect.
fn connect_refused(q: &Queue, subnqn: &str, hostnqn: &str, error: Error, dw0: u32) -> Error {
    let Error::Command { status, .. } = &error else {
        return error;
    };
    let reason = if status.sct() == StatusCodeType::CommandSpecific {
        match status.sc() {
            fabrics::status::CONNECT_INVALID_PARAMETERS => {
                let (iattr, ipo) = fabrics::connect_invalid_parameter(dw0);
                match (iattr, ipo) {
                    (1, fabrics::CONNECT_DATA_SUBNQN_OFFSET) => format!(
                        "the target has no subsystem `{subnqn}` on this port: check subnqn, and \
                         that the subsystem is linked to the port (nvmet: ln -s \
                         /sys/kernel/config/nvmet/subsystems/{subnqn} \
                         /sys/kernel/config/nvmet/ports/N/subsystems/)"
                    ),
                    (1, fabrics::CONNECT_DATA_HOSTNQN_OFFSET) => format!(
                        "host NQN `{hostnqn}` is not accepted: give hostnqn: in the transport id"
                    ),
                    _ => format!(
                        "Connect Invalid Parameters (parameter at byte {ipo} of the {})",
                        if iattr == 1 { "Connect data" } else { "command" }
                    ),
                }
            }
            fabrics::status::CONNECT_INVALID_HOST => format!(
                "host `{hostnqn}` may not use this subsystem: allow it on the target (nvmet: echo 1 > \
                 /sys/kernel/config/nvmet/subsystems/{subnqn}/attr_allow_any_host, or add the host)"
            ),
            fabrics::status::CONTROLLER_BUSY => "controller busy: try again later".into(),
            _ => status.to_string(),
        }
    } else {
        status.to_string()
    };
    Error::Transport {
        controller: q.controller.to_string(),
        source: Arc::new(TcpError::ConnectRefused {
            addr: q.addr,
            qid: q.qid,
            subnqn: subnqn.to_owned(),
            reason,
        }),
    }
}

/// A Fabrics Connect command (NVMe over Fabrics 1.1 §3.3), as a typed value: what the
/// command dwords and its data (the host and subsystem NQNs, host id) carry.
pub(crate) struct Connect<'a> {
    /// Queue size (1-based).
    pub(crate) entries: u16,
    /// Keep Alive timeout (admin queue only; I/O queues send zero).
    pub(crate) kato: Duration,
    /// Controller id: `fabrics::CNTLID_DYNAMIC` for a new association, else the admin
    /// queue's.
    pub(crate) cntlid: u16,
    /// Subsystem NQN.
    pub(crate) subnqn: &'a str,
    /// Host NQN.
    pub(crate) hostnqn: &'a str,
    /// Host identifier.
    pub(crate) hostid: [u8; 16],
}

/// Fabrics Connect on a fresh queue; returns the controller id.
pub(crate) fn connect_queue(
    q: &mut Queue,
    mapper: &Arc<dyn DmaMapper>,
    connect: &Connect<'_>,
) -> Result<u16> {
    let &Connect {
        entries,
        kato,
        cntlid,
        subnqn,
        hostnqn,
        hostid,
    } = connect;
    let data = ConnectData::new(
        hostid,
        cntlid,
        fabrics::nqn_field(subnqn).ok_or_else(|| {
            Error::InvalidRequest(format!("subsystem NQN `{subnqn}` is too long"))
        })?,
        fabrics::nqn_field(hostnqn)
            .ok_or_else(|| Error::InvalidRequest(format!("host NQN `{hostnqn}` is too long")))?,
    );
    let bytes = data.to_bytes();
    let mut buf = DmaBuffer::allocate(mapper, bytes.len())?;
    buf[..bytes.len()].copy_from_slice(&bytes);
    let kato_ms = u32::try_from(kato.as_millis()).unwrap_or(u32::MAX);
    // I/O queues run without SQ flow control: this host never waits on SQ head pointers (it
    // keeps at most entries - 1 commands outstanding), and the target may then finish reads
    // with the C2HData SUCCESS flag, saving a response capsule per read (as SPDK does).
    let (cattr, kato_ms) = if q.qid == 0 {
        (0, kato_ms)
    } else {
        (fabrics::CATTR_DISABLE_SQ_FLOW_CONTROL, 0)
    };
    let sqe = fabrics::connect(q.qid, entries, cattr, kato_ms);
    q.submit(sqe, Some(buf), bytes.len(), true, 0, Waiter::Sync)
        .map_err(|f| f.error)?;
    let deadline = Instant::now() + q.timeout;
    let c = q.wait_sync(deadline, "waiting for the Connect response");
    // A refused Connect names the bad parameter in dword 0, which `Error::Command` does not
    // carry: the queue keeps it for synchronous commands.
    match c.result {
        Ok(dw0) => Ok(fabrics::connect_cntlid(dw0)),
        Err(e) => Err(connect_refused(q, subnqn, hostnqn, e, q.sync_dw0)),
    }
}

/// A connected admin queue: the queue, its buffer allocator, the controller id, the host NQN
/// presented, and what ICResp agreed.
type OpenedAdmin = (Admin, u16, String, Negotiated);

/// Connects the admin queue: TCP connection, ICReq/ICResp, Fabrics Connect (a new
/// association: dynamic controller id).
pub(crate) fn open_admin(
    trid: &TransportId,
    options: &TcpOptions,
    mapper: &Arc<dyn DmaMapper>,
) -> Result<OpenedAdmin> {
    let addr = trid.socket_addr();
    let name: Arc<str> = format!("{addr}/{}", trid.subnqn).into();
    let transport = |e: TcpError| Error::Transport {
        controller: name.to_string(),
        source: Arc::new(e),
    };
    let hostnqn = trid
        .hostnqn
        .clone()
        .or_else(|| options.hostnqn.clone())
        .unwrap_or_else(|| {
            format!(
                "nqn.2014-08.org.nvmexpress:uuid:{}",
                uuid_text(&options.hostid)
            )
        });
    let want_hdgst = trid.hdgst || options.header_digest;
    let want_ddgst = trid.ddgst || options.data_digest;
    let (stream, neg) =
        handshake(addr, 0, want_hdgst, want_ddgst, options.timeout).map_err(transport)?;
    let mut q = Queue::new(
        stream,
        addr,
        0,
        name.clone(),
        neg,
        QueueLimits {
            slots: ADMIN_QUEUE_ENTRIES - 1,
            in_capsule_max: ADMIN_IN_CAPSULE,
            timeout: options.timeout,
        },
    );
    let cntlid = connect_queue(
        &mut q,
        mapper,
        &Connect {
            entries: ADMIN_QUEUE_ENTRIES,
            kato: options.kato,
            cntlid: fabrics::CNTLID_DYNAMIC,
            subnqn: &trid.subnqn,
            hostnqn: &hostnqn,
            hostid: options.hostid,
        },
    )?;
    Ok((
        Admin {
            q,
            ka: KeepAlive::new(options.kato, Instant::now()),
            aborts: AbortStats::default(),
            aborts_outstanding: 0,
        },
        cntlid,
        hostnqn,
        neg,
    ))
}

impl Inner {
    /// A new connection for I/O queue `qid` of this controller's current association:
    /// ICReq/ICResp, then Fabrics Connect with the queue id and the controller id. Returns
    /// the connected socket and what ICResp agreed.
    pub(crate) fn connect_io(&self, qid: u16, depth: u32) -> Result<(TcpStream, Negotiated)> {
        let (stream, neg) = handshake(
            self.addr,
            qid,
            self.want_hdgst,
            self.want_ddgst,
            self.options.timeout,
        )
        .map_err(|e| Error::Transport {
            controller: self.name.to_string(),
            source: Arc::new(e),
        })?;
        // Connect runs on a one-slot queue of its own (the pair's slots may all hold
        // requests waiting to be sent again); the socket then moves to the pair. The target
        // sends nothing after the Connect response until it gets a command.
        let mut q = Queue::new(
            stream,
            self.addr,
            qid,
            self.name.clone(),
            neg,
            QueueLimits {
                slots: 1,
                in_capsule_max: self.io_in_capsule,
                timeout: self.options.timeout,
            },
        );
        connect_queue(
            &mut q,
            &self.mapper,
            &Connect {
                entries: depth as u16,
                kato: Duration::ZERO,
                cntlid: self.cntlid.load(Ordering::Acquire),
                subnqn: &self.trid.subnqn,
                hostnqn: &self.hostnqn,
                hostid: self.options.hostid,
            },
        )?;
        Ok((q.into_stream(), neg))
    }
}
