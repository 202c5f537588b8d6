//! The hot-plug monitor: the kernel's uevents drive [`Probe`] and [`Attached`] while the
//! program runs (in the spirit of SPDK's hot-plug poller).
//!
//! - A PCI function of NVMe class that is **bound to vfio-pci** (`bind` uevent with
//!   `DRIVER=vfio-pci`, or an `add` of a function that already is) goes through the probe
//!   and attach callbacks, as in [`Probe::run`]; one that is already attached is left alone
//!   (a duplicate `add`/`bind`). An `add` of a function still on another driver (or on none)
//!   is skipped: it comes back as a `bind` once somebody binds it to vfio-pci.
//! - An attached function that **leaves** (`remove` or `unbind`) is marked removed
//!   ([`nvme_driver::Controller::notify_removed`]: its in-flight and later I/O fails with
//!   `Removed`, its DMA is stopped or its memory leaked, never freed under a device that may
//!   still write it) and detached through the registry's remove callback. Events about
//!   functions the registry does not hold are ignored.
//! - vfio-pci does not let a function go while we hold it: it sends a **device request**
//!   first, and the `unbind`/`remove` uevents only follow once the program closed the device.
//!   So every [`HotplugMonitor::poll`] also runs [`Attached::poll_removals`] (one register read
//!   per controller), which acts on that request (and on registers that read all ones).
//! - Malformed, oversized or foreign messages are counted ([`MonitorStats`]) and skipped; an
//!   overrun of the socket's queue (messages lost) triggers a full rescan.
//!
//! Poll-style: [`HotplugMonitor::fd`] goes into the caller's event loop, [`HotplugMonitor::poll`]
//! dispatches what is pending (call it also on a timer, ~100 ms, for the device requests); or
//! [`HotplugMonitor::spawn`] runs the same loop on a thread of its own.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use nvme_driver::{Error, PciAddress, Result};
use nvme_vfio::pci::VFIO_PCI_DRIVER;
use nvme_vfio::uevent::{
    NvmeUevent, Received, Uevent, UeventAction, UeventSocket, UeventSource, MAX_UEVENT_LEN,
};
use nvme_vfio::{PciFunction, VfioError};

use crate::controller::AnyController;
use crate::probe::{Attached, Probe, ProbeDecision, ProbeOutcome};

/// The most messages one [`HotplugMonitor::poll`] reads, so that a flood of uevents cannot
/// keep the caller's loop from its other work (the rest waits for the next call).
pub const MAX_MESSAGES_PER_POLL: usize = 256;

/// The probe callback of a monitor.
pub type ProbeCallback = Box<dyn FnMut(&PciFunction) -> ProbeDecision + Send>;
/// The attach callback of a monitor.
pub type AttachCallback = Box<dyn FnMut(&PciFunction, &Arc<AnyController>) + Send>;

/// What a [`HotplugMonitor::poll`] did.
#[derive(Debug)]
pub enum HotplugEvent {
    /// The function was attached (after the attach callback ran).
    Attached(PciAddress),
    /// The probe callback chose the function but it did not come up.
    AttachFailed(PciAddress, Error),
    /// The function was detached (after the remove callback ran).
    Detached(PciAddress),
    /// Messages were lost (the socket's queue overflowed): everything was probed again.
    Rescanned,
}

/// Counters of a monitor's messages.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MonitorStats {
    /// Messages received.
    pub messages: u64,
    /// Messages that did not parse (skipped).
    pub malformed: u64,
    /// Messages dropped unread: larger than the buffer, or not from the kernel.
    pub dropped: u64,
    /// Overruns of the socket's queue (each followed by a rescan).
    pub overruns: u64,
    /// Well-formed messages that needed nothing: other devices, functions not attached,
    /// duplicates.
    pub ignored: u64,
}

/// Attaches NVMe functions as they appear on vfio-pci and detaches them as they leave.
pub struct HotplugMonitor {
    source: Box<dyn UeventSource>,
    probe: Probe,
    registry: Attached,
    on_probe: ProbeCallback,
    on_attach: AttachCallback,
    buf: Vec<u8>,
    stats: MonitorStats,
}

impl std::fmt::Debug for HotplugMonitor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HotplugMonitor")
            .field("probe", &self.probe)
            .field("registry", &self.registry)
            .field("stats", &self.stats)
            .finish()
    }
}

impl HotplugMonitor {
    /// A monitor on the kernel's uevent socket. Open it before the first
    /// [`HotplugMonitor::start`], so that no function appears unseen between the initial
    /// probe and the first event.
    pub fn new(
        probe: Probe,
        registry: Attached,
        on_probe: impl FnMut(&PciFunction) -> ProbeDecision + Send + 'static,
        on_attach: impl FnMut(&PciFunction, &Arc<AnyController>) + Send + 'static,
    ) -> Result<Self> {
        let socket = UeventSocket::open().map_err(|source| {
            Error::Vfio(VfioError::Uevent {
                op: "socket",
                source,
            })
        })?;
        Ok(Self::with_source(
            socket, probe, registry, on_probe, on_attach,
        ))
    }

    /// A monitor reading `source` (tests feed recorded or hostile messages through it).
    pub fn with_source(
        source: impl UeventSource + 'static,
        probe: Probe,
        registry: Attached,
        on_probe: impl FnMut(&PciFunction) -> ProbeDecision + Send + 'static,
        on_attach: impl FnMut(&PciFunction, &Arc<AnyController>) + Send + 'static,
    ) -> Self {
        Self {
            source: Box::new(source),
            probe,
            registry,
            on_probe: Box::new(on_probe),
            on_attach: Box::new(on_attach),
            buf: vec![0; MAX_UEVENT_LEN],
            stats: MonitorStats::default(),
        }
    }

    /// The initial probe: every function already on vfio-pci goes through the callbacks.
    pub fn start(&mut self) -> Result<Vec<HotplugEvent>> {
        let outcome = self.probe.run(
            &mut self.registry,
            &mut *self.on_probe,
            &mut *self.on_attach,
        )?;
        let mut events = Vec::new();
        push_outcome(outcome, &mut events);
        Ok(events)
    }

    /// The descriptor to wait on (readable when a uevent is pending); `None` for a source
    /// without one.
    pub fn fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        self.source.fd()
    }

    /// Waits up to `timeout` for a uevent; `Ok(false)` on timeout.
    pub fn wait(&self, timeout: Duration) -> Result<bool> {
        self.source
            .wait(timeout)
            .map_err(|source| Error::Vfio(VfioError::Uevent { op: "poll", source }))
    }

    /// Dispatches the pending uevents (at most [`MAX_MESSAGES_PER_POLL`]), then detaches
    /// controllers whose device asked to be released or went away. Never blocks. An error
    /// reading the socket is returned after what was read before it was handled.
    pub fn poll(&mut self) -> Result<Vec<HotplugEvent>> {
        let mut events = Vec::new();
        let mut failure = None;
        for _ in 0..MAX_MESSAGES_PER_POLL {
            let received = match self.source.recv(&mut self.buf) {
                Ok(r) => r,
                Err(source) => {
                    failure = Some(Error::Vfio(VfioError::Uevent { op: "recv", source }));
                    break;
                }
            };
            match received {
                Received::Empty => break,
                Received::Message(len) => {
                    self.stats.messages += 1;
                    let parsed = self.buf.get(..len).map(Uevent::parse);
                    match parsed {
                        Some(Ok(uevent)) => match uevent.nvme() {
                            Some(ev) => self.handle(ev, &mut events),
                            None => self.stats.ignored += 1,
                        },
                        Some(Err(e)) => {
                            self.stats.malformed += 1;
                            log::debug!("uevent skipped: {e}");
                        }
                        None => self.stats.dropped += 1,
                    }
                }
                Received::Truncated(_) | Received::NotKernel => self.stats.dropped += 1,
                Received::Overrun => {
                    self.stats.overruns += 1;
                    log::warn!("uevent queue overrun: messages lost, probing again");
                    self.rescan(&mut events);
                    events.push(HotplugEvent::Rescanned);
                }
            }
        }
        for address in self.registry.poll_removals() {
            events.push(HotplugEvent::Detached(address));
        }
        match failure {
            Some(e) if events.is_empty() => Err(e),
            Some(e) => {
                log::warn!("{e}");
                Ok(events)
            }
            None => Ok(events),
        }
    }

    /// One uevent about an NVMe function.
    fn handle(&mut self, ev: NvmeUevent, events: &mut Vec<HotplugEvent>) {
        match ev.action {
            UeventAction::Add | UeventAction::Bind => {
                let other_driver = ev.driver.as_deref().is_some_and(|d| d != VFIO_PCI_DRIVER);
                if self.registry.contains(&ev.address) || other_driver {
                    self.stats.ignored += 1;
                    return;
                }
                match self.probe.run_address(
                    &mut self.registry,
                    &ev.address,
                    &mut *self.on_probe,
                    &mut *self.on_attach,
                ) {
                    Ok(outcome) => push_outcome(outcome, events),
                    Err(e) => events.push(HotplugEvent::AttachFailed(ev.address, e)),
                }
            }
            UeventAction::Remove | UeventAction::Unbind => {
                if self.detach_removed(&ev.address) {
                    events.push(HotplugEvent::Detached(ev.address));
                } else {
                    self.stats.ignored += 1;
                }
            }
            _ => self.stats.ignored += 1,
        }
    }

    /// Marks `address`'s controller removed and detaches it; `false` when not attached.
    fn detach_removed(&mut self, address: &PciAddress) -> bool {
        let Some(ctrl) = self.registry.get(address) else {
            return false;
        };
        if let Some(pcie) = ctrl.as_pcie() {
            pcie.notify_removed();
        }
        self.registry.detach(address).is_some()
    }

    /// After lost messages: detaches what sysfs no longer shows on vfio-pci, then probes all.
    fn rescan(&mut self, events: &mut Vec<HotplugEvent>) {
        let present = match self.probe.enumerate() {
            Ok(found) => found,
            Err(e) => {
                log::warn!("rescan: enumeration failed: {e}");
                return;
            }
        };
        let gone: Vec<PciAddress> = self
            .registry
            .iter()
            .map(|a| a.function.address)
            .filter(|a| {
                !present
                    .iter()
                    .any(|f| f.address == *a && f.binding.is_vfio())
            })
            .collect();
        for address in gone {
            if self.detach_removed(&address) {
                events.push(HotplugEvent::Detached(address));
            }
        }
        match self.probe.run(
            &mut self.registry,
            &mut *self.on_probe,
            &mut *self.on_attach,
        ) {
            Ok(outcome) => push_outcome(outcome, events),
            Err(e) => log::warn!("rescan: probe failed: {e}"),
        }
    }

    /// The controllers attached so far.
    pub fn registry(&self) -> &Attached {
        &self.registry
    }

    /// The registry, to detach or take controllers by hand.
    pub fn registry_mut(&mut self) -> &mut Attached {
        &mut self.registry
    }

    /// The message counters.
    pub fn stats(&self) -> MonitorStats {
        self.stats
    }

    /// Runs the monitor on a thread of its own: wait up to `period` for a uevent, poll,
    /// hand every event to `on_event`; until [`MonitorThread::stop`]. The registry stays
    /// inside the monitor meanwhile: the program gets its controllers from the attach
    /// callback (which runs on that thread) and learns of removals from the remove callback.
    pub fn spawn(
        mut self,
        period: Duration,
        mut on_event: impl FnMut(&HotplugEvent) + Send + 'static,
    ) -> std::io::Result<MonitorThread> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let handle = std::thread::Builder::new()
            .name("nvme-hotplug".into())
            .spawn(move || {
                while !flag.load(Ordering::Acquire) {
                    if let Err(e) = self.wait(period) {
                        log::warn!("{e}");
                        std::thread::sleep(period);
                    }
                    match self.poll() {
                        Ok(events) => events.iter().for_each(&mut on_event),
                        Err(e) => {
                            log::warn!("{e}");
                            std::thread::sleep(period);
                        }
                    }
                }
                self
            })?;
        Ok(MonitorThread {
            stop,
            handle: Some(handle),
        })
    }
}

fn push_outcome(outcome: ProbeOutcome, events: &mut Vec<HotplugEvent>) {
    events.extend(outcome.attached.into_iter().map(HotplugEvent::Attached));
    events.extend(
        outcome
            .failed
            .into_iter()
            .map(|(a, e)| HotplugEvent::AttachFailed(a, e)),
    );
}

/// A monitor running on its own thread ([`HotplugMonitor::spawn`]). Dropping it stops the
/// thread and drops the monitor (which detaches every controller it holds).
#[derive(Debug)]
pub struct MonitorThread {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<HotplugMonitor>>,
}

impl MonitorThread {
    /// Stops the thread (within one period) and gives the monitor back.
    pub fn stop(mut self) -> Option<HotplugMonitor> {
        self.stop_and_join()
    }

    fn stop_and_join(&mut self) -> Option<HotplugMonitor> {
        self.stop.store(true, Ordering::Release);
        self.handle.take().and_then(|h| h.join().ok())
    }
}

impl Drop for MonitorThread {
    fn drop(&mut self) {
        self.stop_and_join();
    }
}
