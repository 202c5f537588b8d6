//! The options of an NVMe/TCP connection (`TcpOptions`) and the host NQN derived from the
//! host identifier.
//!
//! INVARIANT: the defaults are what `TcpController::connect` documents (a random-free,
//! reproducible host id unless one is given); nothing here opens a connection.

use std::time::Duration;

use nvme_core::TimeoutAction;

#[cfg(doc)]
use crate::{TcpController, TcpQueuePair};

/// Options of an NVMe/TCP connection.
#[derive(Clone, Debug)]
pub struct TcpOptions {
    /// Host NQN (a transport id's `hostnqn:` wins); default derived from `hostid`.
    pub hostnqn: Option<String>,
    /// Host identifier sent in every Connect.
    pub hostid: [u8; 16],
    /// Keep Alive Timeout asked of the controller (0 turns it off). Keep Alive commands go
    /// out every half of it from the owner threads' polls ([`TcpQueuePair::poll`]) or
    /// [`TcpController::keep_alive`]; one unanswered for half of it, or none answered for a
    /// whole KATO, declares the association lost (every request fails with
    /// `Error::Transport`, [`TcpController::is_failed`], [`TcpController::reset`] recovers).
    pub kato: Duration,
    /// I/O queue pairs to ask for.
    pub io_queues: u16,
    /// Limit for connecting, the handshake and each admin command.
    pub timeout: Duration,
    /// Ask for header digests (also `hdgst:1` in the transport id).
    pub header_digest: bool,
    /// Ask for data digests (also `ddgst:1` in the transport id).
    pub data_digest: bool,
    /// What an I/O queue pair does about a command that outlives its timeout (the same
    /// policy as the PCIe controller's `ControllerOptions::timeout_action`):
    /// [`TimeoutAction::AbortThenReset`] (default) sends an Abort on the admin queue and, if
    /// the command is still outstanding a further timeout later, resets the controller
    /// ([`TcpController::reset`]); [`TimeoutAction::Abort`] instead closes and reconnects only
    /// that queue pair's connection; [`TimeoutAction::None`] closes the connection at once
    /// (the command fails with `Error::Timeout`, the others with `Error::Transport`).
    pub timeout_action: TimeoutAction,
}

impl Default for TcpOptions {
    fn default() -> Self {
        use std::hash::{BuildHasher, Hasher};
        let mut hostid = [0u8; 16];
        for (i, chunk) in hostid.chunks_mut(8).enumerate() {
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_usize(i);
            h.write_u32(std::process::id());
            chunk.copy_from_slice(&h.finish().to_le_bytes());
        }
        Self {
            hostnqn: None,
            hostid,
            kato: Duration::from_secs(10),
            io_queues: 4,
            timeout: Duration::from_secs(10),
            header_digest: false,
            data_digest: false,
            timeout_action: TimeoutAction::AbortThenReset,
        }
    }
}

pub(super) fn uuid_text(id: &[u8; 16]) -> String {
    let h: String = id.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}
