//! [`AnyController`]: a PCIe or NVMe/TCP controller, one branch per call.

use std::sync::Arc;

use nvme_driver::spec::manage::FormatNvm;
use nvme_driver::spec::regs::{Cap, Version};
use nvme_driver::spec::{ErrorLogEntry, IdentifyController, SmartLog};
use nvme_driver::{
    AdminCommands, Controller, ControllerOptions, DmaBuffer, DmaMapper, Error, Namespace,
    NamespaceChanges, NamespaceIdentity, QueuePairOptions, Result,
};
use nvme_tcp::{TcpController, TcpOptions};

use crate::queue_pair::AnyQueuePair;
use crate::target::{Target, EMULATOR_DEVICE};

/// A PCIe or NVMe/TCP controller. What both transports offer is a method here; what only one
/// has (PCIe: events, namespace rescans, shadow doorbells, raw commands; TCP: the transport
/// id, Keep Alive, digests) is reached through [`AnyController::as_pcie`] /
/// [`AnyController::as_tcp`].
#[derive(Debug)]
pub enum AnyController {
    /// Through vfio-pci (or the emulator).
    Pcie(Controller),
    /// Over NVMe/TCP.
    Tcp(TcpController),
}

macro_rules! both {
    ($self:expr, $c:ident => $e:expr) => {
        match $self {
            AnyController::Pcie($c) => $e,
            AnyController::Tcp($c) => $e,
        }
    };
}

impl From<Controller> for AnyController {
    fn from(c: Controller) -> Self {
        AnyController::Pcie(c)
    }
}

impl From<TcpController> for AnyController {
    fn from(c: TcpController) -> Self {
        AnyController::Tcp(c)
    }
}

impl AnyController {
    /// Opens the controller `target` names: a PCI function through vfio-pci (with `options`),
    /// or an NVMe/TCP subsystem (default [`TcpOptions`]). [`Target::Emulator`] is refused
    /// with [`Error::Unsupported`]: the tools that offer `sim` start their emulator
    /// themselves.
    pub fn open(target: &Target, options: ControllerOptions) -> Result<Self> {
        Ok(match target {
            Target::Pcie(address) => {
                AnyController::Pcie(Controller::open_pci(&address.to_string(), options)?)
            }
            Target::Tcp(trid) => {
                AnyController::Tcp(TcpController::connect(trid, TcpOptions::default())?)
            }
            Target::Emulator => {
                return Err(Error::Unsupported {
                    controller: EMULATOR_DEVICE.to_owned(),
                    what: "`sim` names the in-process emulator; this program drives PCI \
                           functions and NVMe/TCP subsystems (nvme-perf and nvme-sqlite built \
                           with --features emulator take `sim`)"
                        .to_owned(),
                })
            }
        })
    }

    /// The PCIe controller, for what only PCIe offers (events, rescans, shadow doorbells, ...).
    pub fn as_pcie(&self) -> Option<&Controller> {
        match self {
            AnyController::Pcie(c) => Some(c),
            AnyController::Tcp(_) => None,
        }
    }

    /// The NVMe/TCP controller, for what only NVMe/TCP offers (transport id, Keep Alive, ...).
    pub fn as_tcp(&self) -> Option<&TcpController> {
        match self {
            AnyController::Pcie(_) => None,
            AnyController::Tcp(c) => Some(c),
        }
    }

    /// Name for messages.
    pub fn name(&self) -> &str {
        both!(self, c => c.name())
    }

    /// Identify Controller data.
    pub fn identify(&self) -> &IdentifyController {
        both!(self, c => c.identify())
    }

    /// CAP.
    pub fn cap(&self) -> Cap {
        both!(self, c => c.cap())
    }

    /// VS.
    pub fn version(&self) -> Version {
        both!(self, c => c.version())
    }

    /// I/O queue pairs granted.
    pub fn io_queue_pairs(&self) -> u16 {
        both!(self, c => c.io_queue_pairs())
    }

    /// Usable active namespaces.
    pub fn namespaces(&self) -> Vec<Namespace> {
        both!(self, c => c.namespaces())
    }

    /// Active namespaces that cannot be used.
    pub fn unsupported_namespaces(&self) -> Vec<(u32, String)> {
        both!(self, c => c.unsupported_namespaces())
    }

    /// Namespace `nsid`.
    pub fn namespace(&self, nsid: u32) -> Result<Namespace> {
        both!(self, c => c.namespace(nsid))
    }

    /// The SMART / Health Information log page (Log Identifier 02h) for `nsid`
    /// (`NSID_BROADCAST` for the whole controller).
    pub fn smart_log(&self, nsid: u32) -> Result<SmartLog> {
        both!(self, c => c.smart_log(nsid))
    }

    /// The newest `entries` Error Information log entries (Log Identifier 01h), newest first.
    pub fn error_log(&self, entries: usize) -> Result<Vec<ErrorLogEntry>> {
        both!(self, c => c.error_log(entries))
    }

    /// Format NVM of `nsid` (NVMe Base §5.23, [`AdminCommands::format_nvm`]): refused when
    /// OACS lacks it, followed by a namespace rescan. The namespace's data is lost.
    pub fn format_nvm(&self, nsid: u32, format: FormatNvm) -> Result<NamespaceChanges> {
        both!(self, c => c.format_nvm(nsid, format))
    }

    /// Namespace Attachment (§5.19): attaches `nsid` to `controllers`, then a rescan.
    pub fn attach_namespace(&self, nsid: u32, controllers: &[u16]) -> Result<NamespaceChanges> {
        both!(self, c => c.attach_namespace(nsid, controllers))
    }

    /// Namespace Attachment (§5.19): detaches `nsid` from `controllers`, then a rescan.
    pub fn detach_namespace(&self, nsid: u32, controllers: &[u16]) -> Result<NamespaceChanges> {
        both!(self, c => c.detach_namespace(nsid, controllers))
    }

    /// Who namespace `nsid` is as this controller reports it (subsystem NQN, CNTLID,
    /// sharing, identifiers): compare two with
    /// [`NamespaceIdentity::same_namespace`] to know whether two controllers reach one
    /// namespace ([`nvme_driver::multipath`]).
    pub fn namespace_identity(&self, nsid: u32) -> Result<NamespaceIdentity> {
        both!(self, c => NamespaceIdentity::read(c, nsid))
    }

    /// The identities of all active namespaces ([`NamespaceIdentity::read_active`]).
    pub fn namespace_identities(&self) -> Result<Vec<NamespaceIdentity>> {
        both!(self, c => NamespaceIdentity::read_active(c))
    }

    /// Whether the controller failed and was stopped (it must be reset or re-opened).
    pub fn is_failed(&self) -> bool {
        both!(self, c => nvme_driver::NvmeController::is_failed(c))
    }

    /// Firmware Image Download (NVMe Base 2.0 §5.13, [`AdminCommands::firmware_download`]) of
    /// `image` at byte `offset`, pieces of at most `chunk` bytes (None: MDTS); the pieces sent.
    pub fn firmware_download_chunked(
        &self,
        offset: u64,
        image: &[u8],
        chunk: Option<usize>,
    ) -> Result<usize> {
        both!(self, c => c.firmware_download_chunked(offset, image, chunk))
    }

    /// Firmware Commit (§5.12, [`AdminCommands::firmware_commit`]).
    pub fn firmware_commit(
        &self,
        commit: nvme_driver::spec::firmware::FirmwareCommit,
    ) -> Result<nvme_driver::spec::firmware::CommitOutcome> {
        both!(self, c => c.firmware_commit(commit))
    }

    /// Resets the controller (PCIe: through CC.EN; NVMe/TCP: a new association); queue
    /// pairs re-create or reconnect their queues at their next submission or poll.
    pub fn reset(&self) -> Result<()> {
        both!(self, c => c.reset())
    }

    /// Largest I/O queue.
    pub fn max_queue_entries(&self) -> u32 {
        both!(self, c => c.max_queue_entries())
    }

    /// Largest transfer of one command.
    pub fn max_transfer_bytes(&self) -> usize {
        both!(self, c => c.max_transfer_bytes())
    }

    /// The buffer allocator of this controller.
    pub fn dma(&self) -> &Arc<dyn DmaMapper> {
        both!(self, c => c.dma())
    }

    /// A buffer for I/O on this controller. PCIe: DMA memory mapped for the controller; TCP:
    /// page-aligned host memory (the data goes through the socket, `nvme_tcp::HostMemory`).
    pub fn alloc_buffer(&self, len: usize) -> Result<DmaBuffer> {
        both!(self, c => c.alloc_buffer(len))
    }

    /// A new I/O queue pair (on TCP: one more connection).
    pub fn create_queue_pair(&self, options: QueuePairOptions) -> Result<AnyQueuePair> {
        Ok(match self {
            AnyController::Pcie(c) => AnyQueuePair::Pcie(c.create_queue_pair(options)?),
            AnyController::Tcp(c) => AnyQueuePair::Tcp(c.create_queue_pair(options)?),
        })
    }
}
