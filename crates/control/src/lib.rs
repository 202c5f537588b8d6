//! A management control socket for a program that owns NVMe controllers: JSON-RPC 2.0 over a
//! local Unix stream socket, off unless the program starts a [`ControlServer`].
//!
//! While a program drives a controller through VFIO nobody else can open it (the IOMMU group
//! is exclusive). The control socket lets an operator (`nvme-identify --socket`, `nvme-admin
//! --socket`, or any JSON-RPC client such as `socat`) read its identify data, SMART / Health
//! and Error Information logs, features and queue statistics, rescan its namespaces or reset
//! it, without stopping the program.
//!
//! - [`registry`]: [`ControlRegistry`], the controllers served (added and removed by the
//!   program, e.g. from its probe attach and remove callbacks) and the queue statistics its
//!   I/O threads publish ([`QueueStatsCell`]: plain atomic stores, no lock, no system call).
//! - [`server`]: [`ControlServer`]: its own accept thread and one thread per client (at most
//!   [`ControlConfig::max_clients`]); every request goes to the controllers through their
//!   admin path (shared and locked as for any admin command), never through an I/O queue.
//! - [`methods`]: the methods and their parameters (the table in `docs/control.md`).
//! - [`client`]: [`ControlClient`], a blocking client.
//! - [`protocol`]: JSON-RPC error codes and the hex encoding of binary structures.
//!
//! # Access and robustness
//!
//! The socket file is created with mode [`ControlConfig::mode`] (0600 by default: the owner
//! only) and every connection's peer credentials (SO_PEERCRED) are checked against
//! [`ControlConfig::allowed_uids`] (default: the server's effective uid and root). A request
//! is one line of JSON of at most [`ControlConfig::max_request_bytes`]; a longer one is
//! answered with an error and the connection closed. A client that sends a request too
//! slowly, never reads its answers (half-open), or stays idle too long is disconnected by its
//! own thread's timeouts; other clients and the I/O threads never wait for it.

#![deny(missing_docs)]

pub mod client;
pub mod methods;
pub mod protocol;
pub mod registry;
pub mod server;

pub use client::{ControlClient, ControlError, RemoteIdentify};
pub use registry::{ControlRegistry, QueueCounters, QueueStatsCell};
pub use server::{ControlConfig, ControlServer, ServerError};
