//! Probe, attach, remove: finding the NVMe functions of the machine and keeping the ones a
//! program takes (in the spirit of SPDK's `spdk_nvme_probe` with its probe, attach and remove
//! callbacks).
//!
//! 1. **Enumerate** ([`Probe::enumerate`]): the NVMe functions in sysfs (class 0108xxh),
//!    narrowed by a filter (PCI addresses or PCIe transport ids), each with its driver binding
//!    ([`nvme_vfio::Binding`]): on vfio-pci, bindable (on the allow list), or another
//!    driver's.
//! 2. **Probe** ([`Probe::run`]): for each function on vfio-pci that is not attached yet, the
//!    probe callback decides ([`ProbeDecision`]): attach it, with which
//!    [`ControllerOptions`], or skip it.
//! 3. **Attach**: the controller is opened and brought up; the attach callback receives it
//!    (an `Arc`: clone it into the threads that create queue pairs) and it joins the
//!    [`Attached`] registry. A function that fails to come up (gone between probe and attach,
//!    in use, no IOMMU group) gets no attach callback: it is reported in
//!    [`ProbeOutcome::failed`] and the others go on.
//! 4. **Remove** ([`Attached::detach`], [`Attached::poll_removals`]): the remove callback runs
//!    while the controller is still in the registry's hands, then the registry's reference is
//!    dropped; the controller shuts down when the program drops its last clone (queue pairs
//!    hold one each). [`Attached::poll_removals`] detaches every controller whose device went
//!    away ([`nvme_driver::Controller::check_removal`]: the kernel asked for it back, or its
//!    registers read all ones).
//! 5. **Re-attach**: a later [`Probe::run`] with the same registry attaches only functions it
//!    does not hold, so a function that was detached (or newly bound to vfio-pci) is attached
//!    again.
//!
//! How a function is opened is a parameter ([`Probe::with_opener`]): VFIO by default, the
//! in-process emulator in tests.

use std::collections::BTreeMap;
use std::sync::Arc;

use nvme_driver::{Controller, ControllerOptions, Error, PciAddress, Result};
use nvme_vfio::{Binding, FunctionFilter, PciFunction, Sysfs};

use crate::controller::AnyController;
use crate::target::Target;

/// What the probe callback decides for one function.
#[derive(Clone, Debug)]
pub enum ProbeDecision {
    /// Attach it, brought up with these options.
    Attach(ControllerOptions),
    /// Leave it alone.
    Skip,
}

/// Opens one enumerated function (the seam between probing and VFIO).
pub type Opener = dyn Fn(&PciFunction, ControllerOptions) -> Result<AnyController> + Send + Sync;

/// The default opener: the function through vfio-pci.
fn open_vfio(function: &PciFunction, options: ControllerOptions) -> Result<AnyController> {
    Ok(AnyController::Pcie(Controller::open_pci(
        &function.address.to_string(),
        options,
    )?))
}

/// A controller in an [`Attached`] registry.
#[derive(Clone, Debug)]
pub struct Attachment {
    /// The function as enumerated when it was attached.
    pub function: PciFunction,
    /// The controller.
    pub controller: Arc<AnyController>,
}

/// The remove callback: the function and its controller, just before the registry lets go.
pub type RemoveCallback = Box<dyn FnMut(&PciFunction, &Arc<AnyController>) + Send>;

/// The controllers a program attached by probing, by PCI address, with the remove callback.
pub struct Attached {
    controllers: BTreeMap<PciAddress, Attachment>,
    on_remove: Option<RemoveCallback>,
}

impl std::fmt::Debug for Attached {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Attached")
            .field("controllers", &self.controllers.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl Default for Attached {
    fn default() -> Self {
        Self::new()
    }
}

impl Attached {
    /// An empty registry without a remove callback.
    pub fn new() -> Self {
        Self {
            controllers: BTreeMap::new(),
            on_remove: None,
        }
    }

    /// An empty registry that calls `on_remove` for every controller it detaches.
    pub fn with_remove_callback(
        on_remove: impl FnMut(&PciFunction, &Arc<AnyController>) + Send + 'static,
    ) -> Self {
        Self {
            controllers: BTreeMap::new(),
            on_remove: Some(Box::new(on_remove)),
        }
    }

    /// Whether `address` is attached.
    pub fn contains(&self, address: &PciAddress) -> bool {
        self.controllers.contains_key(address)
    }

    /// The controller attached at `address`.
    pub fn get(&self, address: &PciAddress) -> Option<&Arc<AnyController>> {
        self.controllers.get(address).map(|a| &a.controller)
    }

    /// Every attachment, by address.
    pub fn iter(&self) -> impl Iterator<Item = &Attachment> {
        self.controllers.values()
    }

    /// How many controllers are attached.
    pub fn len(&self) -> usize {
        self.controllers.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.controllers.is_empty()
    }

    fn insert(&mut self, function: PciFunction, controller: Arc<AnyController>) {
        self.controllers.insert(
            function.address,
            Attachment {
                function,
                controller,
            },
        );
    }

    /// Detaches `address`: runs the remove callback, then drops the registry's reference
    /// (the controller shuts down with its last clone). Returns the attachment, or `None`
    /// when the address was not attached.
    pub fn detach(&mut self, address: &PciAddress) -> Option<Attachment> {
        let attachment = self.controllers.remove(address)?;
        if let Some(cb) = self.on_remove.as_mut() {
            cb(&attachment.function, &attachment.controller);
        }
        Some(attachment)
    }

    /// Takes `address` out of the registry without the remove callback: its controller
    /// changes hands (the C API hands each to its caller). `None` when not attached.
    pub fn take(&mut self, address: &PciAddress) -> Option<Attachment> {
        self.controllers.remove(address)
    }

    /// Detaches every controller, in address order.
    pub fn detach_all(&mut self) {
        let addresses: Vec<PciAddress> = self.controllers.keys().copied().collect();
        for a in addresses {
            self.detach(&a);
        }
    }

    /// Detaches every controller whose device went away (the kernel asked for it back, or
    /// its registers read all ones); returns their addresses. Call it from a management
    /// thread now and then (it reads one register per PCIe controller), never per I/O.
    pub fn poll_removals(&mut self) -> Vec<PciAddress> {
        let gone: Vec<PciAddress> = self
            .controllers
            .iter()
            .filter(|(_, a)| a.controller.as_pcie().is_some_and(|c| c.check_removal()))
            .map(|(addr, _)| *addr)
            .collect();
        for a in &gone {
            self.detach(a);
        }
        gone
    }
}

impl Drop for Attached {
    /// A registry going away detaches what it holds, so every attach has its remove.
    fn drop(&mut self) {
        self.detach_all();
    }
}

/// What one [`Probe::run`] did.
#[derive(Debug, Default)]
pub struct ProbeOutcome {
    /// Functions attached by this run.
    pub attached: Vec<PciAddress>,
    /// Functions the probe callback chose that did not come up, with why.
    pub failed: Vec<(PciAddress, Error)>,
    /// Functions the probe callback skipped, or that were not on vfio-pci.
    pub skipped: Vec<PciAddress>,
}

/// Enumerates NVMe functions and attaches the ones a probe callback chooses.
pub struct Probe {
    sysfs: Sysfs,
    filter: FunctionFilter,
    opener: Box<Opener>,
}

impl std::fmt::Debug for Probe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Probe")
            .field("sysfs", &self.sysfs.root())
            .field("filter", &self.filter)
            .finish()
    }
}

impl Default for Probe {
    fn default() -> Self {
        Self::new()
    }
}

impl Probe {
    /// Every NVMe function of `/sys`, opened through vfio-pci.
    pub fn new() -> Self {
        Self {
            sysfs: Sysfs::default(),
            filter: FunctionFilter::all(),
            opener: Box::new(open_vfio),
        }
    }

    /// Reads sysfs under `sysfs` instead of `/sys` (tests, containers).
    pub fn sysfs(mut self, sysfs: Sysfs) -> Self {
        self.sysfs = sysfs;
        self
    }

    /// Only functions passing `filter`.
    pub fn filter(mut self, filter: FunctionFilter) -> Self {
        self.filter = filter;
        self
    }

    /// Only the functions `targets` name (PCI addresses or PCIe transport ids). An NVMe/TCP
    /// transport id or `sim` is refused: probing enumerates local PCI functions (open those
    /// with [`AnyController::open`]).
    pub fn targets(mut self, targets: &[Target]) -> Result<Self> {
        let mut addresses = Vec::with_capacity(targets.len());
        for t in targets {
            match t {
                Target::Pcie(a) => addresses.push(*a),
                other => {
                    return Err(Error::InvalidRequest(format!(
                        "probe enumerates local PCIe functions; `{other}` is not one (open it \
                         directly)"
                    )))
                }
            }
        }
        self.filter.addresses = addresses;
        Ok(self)
    }

    /// Opens functions with `opener` instead of vfio-pci.
    pub fn with_opener(
        mut self,
        opener: impl Fn(&PciFunction, ControllerOptions) -> Result<AnyController>
            + Send
            + Sync
            + 'static,
    ) -> Self {
        self.opener = Box::new(opener);
        self
    }

    /// The NVMe functions passing the filter, sorted by address, with their bindings.
    pub fn enumerate(&self) -> Result<Vec<PciFunction>> {
        Ok(self.sysfs.nvme_functions(&self.filter)?)
    }

    /// Enumerates, asks `probe` about every function on vfio-pci that `registry` does not
    /// hold, attaches the ones it chooses and hands each to `attach` (then to the registry).
    /// An enumeration error is returned; a function that fails to attach is reported in
    /// [`ProbeOutcome::failed`] and the run goes on.
    pub fn run(
        &self,
        registry: &mut Attached,
        mut probe: impl FnMut(&PciFunction) -> ProbeDecision,
        mut attach: impl FnMut(&PciFunction, &Arc<AnyController>),
    ) -> Result<ProbeOutcome> {
        let mut outcome = ProbeOutcome::default();
        for function in self.enumerate()? {
            self.probe_one(registry, function, &mut probe, &mut attach, &mut outcome);
        }
        Ok(outcome)
    }

    /// As [`Probe::run`] for the one function at `address` (a hot-plug event names it): an
    /// address the filter excludes, that is no NVMe function or that is gone from sysfs
    /// gives an empty outcome.
    pub fn run_address(
        &self,
        registry: &mut Attached,
        address: &PciAddress,
        mut probe: impl FnMut(&PciFunction) -> ProbeDecision,
        mut attach: impl FnMut(&PciFunction, &Arc<AnyController>),
    ) -> Result<ProbeOutcome> {
        let mut outcome = ProbeOutcome::default();
        if !self.filter.matches(address) {
            return Ok(outcome);
        }
        let function = match self.sysfs.nvme_function(address, &self.filter) {
            Ok(Some(f)) => f,
            Ok(None) => return Ok(outcome),
            // Gone again before we looked (removed right after its add).
            Err(nvme_vfio::VfioError::Sysfs { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                return Ok(outcome)
            }
            Err(e) => return Err(e.into()),
        };
        self.probe_one(registry, function, &mut probe, &mut attach, &mut outcome);
        Ok(outcome)
    }

    /// Probes and maybe attaches one enumerated function (skipped when already attached).
    fn probe_one(
        &self,
        registry: &mut Attached,
        function: PciFunction,
        probe: &mut impl FnMut(&PciFunction) -> ProbeDecision,
        attach: &mut impl FnMut(&PciFunction, &Arc<AnyController>),
        outcome: &mut ProbeOutcome,
    ) {
        if registry.contains(&function.address) {
            return;
        }
        if function.binding != Binding::Vfio {
            outcome.skipped.push(function.address);
            return;
        }
        let options = match probe(&function) {
            ProbeDecision::Attach(options) => options,
            ProbeDecision::Skip => {
                outcome.skipped.push(function.address);
                return;
            }
        };
        match (self.opener)(&function, options) {
            Ok(ctrl) => {
                let ctrl = Arc::new(ctrl);
                attach(&function, &ctrl);
                outcome.attached.push(function.address);
                registry.insert(function, ctrl);
            }
            Err(e) => {
                log::warn!("{}: not attached: {e}", function.address);
                outcome.failed.push((function.address, e));
            }
        }
    }
}
