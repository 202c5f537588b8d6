//! Errors of the target: starting it (configuration, the backend, the listening socket).
//! What goes wrong on one connection is that connection's and is logged, never returned here.

use std::net::SocketAddr;

/// Why the target could not start.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    /// The configuration is not usable.
    #[error("invalid target configuration: {0}")]
    Config(String),
    /// A namespace to export is not on its backend controller.
    #[error("subsystem {subnqn}: namespace {nsid} of {controller}: {source}")]
    Namespace {
        /// The subsystem.
        subnqn: String,
        /// The backend's namespace id.
        nsid: u32,
        /// The backend controller.
        controller: String,
        /// What the backend said.
        #[source]
        source: nvme_core::Error,
    },
    /// The listening socket could not be opened.
    #[error("listening on {addr}: {source}")]
    Listen {
        /// The address asked for.
        addr: SocketAddr,
        /// The system's error.
        #[source]
        source: std::io::Error,
    },
    /// A poll group's wake-up eventfd could not be created (the process's descriptor limit?
    /// raise `ulimit -n`).
    #[error("creating a poll group's wake-up eventfd: {0}")]
    WakeEvent(#[source] std::io::Error),
    /// A thread could not be started.
    #[error("starting a thread: {0}")]
    Thread(#[source] std::io::Error),
}
