//! Errors of the NVMe/TCP transport. They reach callers inside
//! [`nvme_core::Error::Transport`], so completions and errors keep the PCIe queue pair's
//! types; each message says what happened and, where the caller can act, how to fix it.

use std::net::SocketAddr;
use std::time::Duration;

/// What went wrong on an NVMe/TCP connection.
#[derive(Debug, thiserror::Error)]
#[allow(missing_docs)]
pub enum TcpError {
    #[error(
        "cannot connect to {addr}: {source}; check that an NVMe/TCP target listens there (for \
         the kernel's nvmet: a port under /sys/kernel/config/nvmet/ports with this traddr and \
         trsvcid, the subsystem linked into it) and that the transport id's traddr/trsvcid are right"
    )]
    Connect {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("I/O on the connection to {addr} (queue {qid}) failed: {source}")]
    Io {
        addr: SocketAddr,
        qid: u16,
        source: std::io::Error,
    },
    #[error(
        "target {addr} closed the connection of queue {qid} (target removed, port disabled, \
         or the keep-alive timeout expired)"
    )]
    Closed { addr: SocketAddr, qid: u16 },
    #[error("malformed {pdu} PDU from {addr} on queue {qid}: {what}; the connection was closed")]
    Malformed {
        addr: SocketAddr,
        qid: u16,
        pdu: &'static str,
        what: String,
    },
    #[error(
        "{kind} digest mismatch on a {pdu} PDU from {addr} on queue {qid} (computed {computed:#010x}, \
         received {received:#010x}): data was corrupted in transit; the connection was closed"
    )]
    Digest {
        addr: SocketAddr,
        qid: u16,
        kind: &'static str,
        pdu: &'static str,
        computed: u32,
        received: u32,
    },
    #[error("target {addr} terminated the connection of queue {qid}: {name} (FES {fes:#x}, FEI {fei:#x})")]
    Terminated {
        addr: SocketAddr,
        qid: u16,
        fes: u16,
        fei: u32,
        name: &'static str,
    },
    #[error("target {addr} answered the connection setup (ICReq) of queue {qid} with {what}")]
    Handshake {
        addr: SocketAddr,
        qid: u16,
        what: String,
    },
    #[error("target {addr} refused to connect queue {qid} to subsystem {subnqn}: {reason}")]
    ConnectRefused {
        addr: SocketAddr,
        qid: u16,
        subnqn: String,
        reason: String,
    },
    #[error("no answer from {addr} on queue {qid} within {timeout:?} ({what}); the connection was closed")]
    Timeout {
        addr: SocketAddr,
        qid: u16,
        what: &'static str,
        timeout: Duration,
    },
    #[error(
        "the connection of queue {qid} to {addr} was closed by the host after a command timed out"
    )]
    ClosedAfterTimeout { addr: SocketAddr, qid: u16 },
    #[error(
        "the connection of queue {qid} to {addr} was closed for a reconnect (controller reset, or \
         a timed-out command whose Abort did not succeed); unless the queue pair's next poll \
         connects it again, call TcpQueuePair::reconnect or TcpController::reset"
    )]
    ClosedForReconnect { addr: SocketAddr, qid: u16 },
    #[error(
        "no answer to Keep Alive from {addr} within {waited:?} (KATO {kato:?}; last answer \
         {since_answer:?} ago): the target keeps the connection but does not answer, so the \
         association is considered lost and every connection of it was closed; call \
         TcpController::reset"
    )]
    KeepAliveUnanswered {
        addr: SocketAddr,
        waited: Duration,
        since_answer: Duration,
        kato: Duration,
    },
    #[error(
        "the keep-alive timeout expired: no Keep Alive was answered by {addr} for {idle:?}, \
         longer than the KATO {kato:?} (nothing polled a queue pair or called \
         TcpController::keep_alive for that long), so the controller has ended the association \
         (NVMe Base 2.0 §3.9); every connection of it was closed; call TcpController::reset"
    )]
    KeepAliveLapsed {
        addr: SocketAddr,
        idle: Duration,
        kato: Duration,
    },
}
