//! A controller of either transport, and the device strings that name one.
//!
//! The PCIe controller (`nvme_driver::Controller`, through vfio-pci) and the NVMe/TCP
//! controller (`nvme_tcp::TcpController`) are two concrete types with the same queue-pair
//! API. Code that takes "either transport" (the C API, the tools, the SQLite VFS) holds an
//! [`AnyController`] and an [`AnyQueuePair`]: two-variant enums, one predictable branch per
//! call, then the transport's own method. The PCIe queue pair itself stays one concrete type
//! with no dispatch inside (its instruction count per I/O is unchanged;
//! `tests/instr-per-io.sh` measures the driver directly), and code generic over
//! `Q: nvme_driver::IoQueue` takes the enum as well as either concrete pair. What only one
//! transport has is reached through the explicit accessors `as_pcie()` / `as_tcp()`.
//!
//! [`parse_target`] is the one parser of a device string that may name either transport: a
//! PCI address or PCIe transport id (`0000:00:04.0`, `trtype:PCIe traddr:0000:00:04.0`,
//! [`nvme_driver::parse_device`]), an NVMe/TCP transport id as SPDK writes it
//! (`trtype:TCP adrfam:IPv4 traddr:127.0.0.1 trsvcid:4420 subnqn:NQN [hostnqn:NQN]`,
//! [`nvme_tcp::TransportId::parse`]), or `sim`, the word reserved for the in-process
//! emulator ([`Target::Emulator`]; the tools that offer it open it themselves, with their
//! own emulator settings, when built with their `emulator` feature).

//!
//! [`probe`]: enumerate the NVMe functions of the machine (sysfs), attach the ones a probe
//! callback chooses, and detach them with a remove callback ([`probe::Probe`],
//! [`probe::Attached`]).
//!
//! [`hotplug`]: the hot-plug monitor, kernel uevents driving probe and remove while the
//! program runs ([`hotplug::HotplugMonitor`]).

#![deny(missing_docs)]

mod controller;
pub mod hotplug;
pub mod probe;
mod queue_pair;
mod target;

pub use controller::AnyController;
pub use hotplug::{HotplugEvent, HotplugMonitor, MonitorStats, MonitorThread};
/// The queue-pair trait [`AnyQueuePair`] implements (in scope for its methods).
pub use nvme_driver::IoQueue;
pub use probe::{Attached, Attachment, Probe, ProbeDecision, ProbeOutcome};
pub use queue_pair::{AnyQueuePair, AnyQueueStats};
pub use target::{parse_target, Target, TargetError, EMULATOR_DEVICE};
