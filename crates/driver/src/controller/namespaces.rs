//! The active namespace set: scanning it (the Active Namespace ID list, or probing 1..=NN on
//! controllers without one), the snapshot readers clone, and rescans that mark superseded handles
//! stale before the new set is published.
//!
//! INVARIANT: rescans are serialised (`rescan_lock`) and compare, mark and publish under the set's
//! write lock, so two never interleave and a slower scan never publishes over a newer one.

use std::sync::Arc;

use nvme_core::{Error, Namespace, NamespaceChanges, NamespaceSet, Result};
use nvme_spec::command::Cns;
use nvme_spec::identify::IDENTIFY_DATA_SIZE;
use nvme_spec::{IdentifyNamespace, NamespaceList};
use nvme_vfio::DmaBuffer;

use super::{Controller, Inner};

/// Namespaces probed one by one (1..=NN, at most this many) on controllers without the
/// Active Namespace ID list (CNS 02h, NVMe 1.1).
const MAX_PROBED_NAMESPACES: u32 = 1024;

impl Controller {
    /// Active namespaces, in namespace id order (a snapshot: see
    /// [`Controller::rescan_namespaces`]).
    pub fn namespaces(&self) -> Vec<Namespace> {
        self.inner.namespace_set().active.clone()
    }

    /// The active namespace `nsid`, or [`Error::InactiveNamespace`], or
    /// [`Error::UnsupportedNamespace`] when it is active but unusable (e.g. a metadata format).
    pub fn namespace(&self, nsid: u32) -> Result<Namespace> {
        let set = self.inner.namespace_set();
        if let Some((_, reason)) = set.unsupported.iter().find(|(n, _)| *n == nsid) {
            return Err(Error::UnsupportedNamespace {
                nsid,
                reason: reason.clone(),
            });
        }
        set.active
            .iter()
            .find(|n| n.nsid() == nsid)
            .cloned()
            .ok_or_else(|| Error::InactiveNamespace {
                nsid,
                active: set.active.iter().map(|n| n.nsid()).collect(),
            })
    }

    /// Active namespaces this driver cannot do I/O on (not in [`Controller::namespaces`]),
    /// with the reason: formats with metadata or protection information, blocks larger than
    /// the largest transfer, bogus sizes.
    pub fn unsupported_namespaces(&self) -> Vec<(u32, String)> {
        self.inner.namespace_set().unsupported.clone()
    }

    /// Re-reads the active namespace list and each namespace's Identify data, replaces what
    /// [`Controller::namespaces`] returns, and says what changed. [`Controller::take_events`]
    /// calls it on its own when the controller reports a Namespace Attribute Changed notice.
    ///
    /// [`Namespace`] handles of a namespace found resized, reformatted or detached go stale:
    /// from the moment the rescan has marked them (before it returns, and before the new set
    /// is visible to [`Controller::namespace`]), their submissions fail with
    /// [`Error::StaleNamespace`] without reaching the device; take fresh handles. Handles of
    /// namespaces found unchanged stay valid. The driver cannot know of a change before the
    /// controller's notice is taken or a rescan runs: until then I/O goes out with the old
    /// geometry, as it does for a submission racing with the rescan on another thread.
    pub fn rescan_namespaces(&self) -> Result<NamespaceChanges> {
        self.inner.rescan_namespaces()
    }
}

impl Inner {
    /// Reads the active namespace list and each namespace's Identify data.
    pub(super) fn scan_namespaces(&self, page: &mut DmaBuffer) -> Result<NamespaceSet> {
        // Active namespace list (CNS 02h, NVMe 1.1+); older controllers: probe 1..=NN.
        let nsids: Vec<u32> = match self.identify_page(Cns::ActiveNamespaceList, 0, page) {
            Ok(bytes) => NamespaceList::from_bytes(&bytes).active().collect(),
            Err(Error::Command { .. }) => {
                (1..=self.identify.nn.min(MAX_PROBED_NAMESPACES)).collect()
            }
            Err(e) => return Err(e),
        };
        let mut set = NamespaceSet::default();
        for nsid in nsids {
            let data =
                IdentifyNamespace::from_bytes(&self.identify_page(Cns::Namespace, nsid, page)?);
            let ns = match Namespace::from_identify(nsid, data, self.max_transfer) {
                Ok(ns) => match self.with_extended_format(ns, page)? {
                    Ok(ns) => self.with_command_set(ns, page)?,
                    Err(reason) => Err(reason),
                },
                Err(reason) => Err(reason),
            };
            match ns {
                Ok(ns) => set.active.push(ns),
                Err(reason) => {
                    log::warn!("{}: namespace {nsid} skipped: {reason}", self.name);
                    set.unsupported.push((nsid, reason));
                }
            }
        }
        Ok(set)
    }

    /// The current namespace set.
    fn namespace_set(&self) -> Arc<NamespaceSet> {
        self.namespaces
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// See [`Controller::rescan_namespaces`].
    pub(super) fn rescan_namespaces(&self) -> Result<NamespaceChanges> {
        let _one_at_a_time = self.rescan_lock.lock().unwrap_or_else(|p| p.into_inner());
        let mut page = DmaBuffer::allocate(&self.dma, IDENTIFY_DATA_SIZE)?;
        let mut set = match self.scan_namespaces(&mut page) {
            Ok(set) => set,
            Err(e @ (Error::Timeout { .. } | Error::ControllerFatal { .. })) => {
                // The device may still write the page.
                page.leak();
                return Err(e);
            }
            Err(e) => return Err(e),
        };
        // Compared, marked and published under the write lock: two rescans cannot interleave
        // their marks, and a thread that reads the new set also sees the marks.
        let mut current = self.namespaces.write().unwrap_or_else(|p| p.into_inner());
        let changes = NamespaceChanges::between(&current, &set);
        set.supersede(&current);
        *current = Arc::new(set);
        drop(current);
        if !changes.is_empty() {
            log::info!("{}: namespaces changed: {changes:?}", self.name);
        }
        Ok(changes)
    }
}
