//! MSI-X emulation: the table of vectors the host routed to eventfds, shared between the
//! host-side [`InterruptController`] handle and the device thread.
//!
//! The host replaces the whole routing at once (`enable_msix` / `disable_msix`) under a mutex
//! and then bumps a generation counter. The device thread keeps its own copy of the routing
//! ([`RouteCache`]) and takes the mutex only when the generation moved, so posting a
//! completion costs one atomic load, never a lock.
//!
//! INVARIANT: `generation` is bumped (Release) only after `routes` holds the new table, so a
//! reader that saw a new generation (Acquire) and then locks `routes` sees that table or a
//! newer one.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use nvme_vfio::{InterruptController, InterruptEvent, PciAddress, VfioError};

/// The emulated function's PCI address, reported in errors (the emulator sits on no bus).
pub(crate) const SIM_PCI_ADDRESS: PciAddress = PciAddress {
    domain: 0,
    bus: 0,
    device: 0,
    function: 0,
};

/// Events indexed by vector; empty while MSI-X is disabled.
type Routes = Arc<[Arc<InterruptEvent>]>;

/// The MSI-X table of the emulated function (host side and shared state).
#[derive(Debug)]
pub(crate) struct MsixTable {
    /// MSI-X Table Size: vectors the function offers.
    vectors: u32,
    routes: Mutex<Routes>,
    /// Bumped after every change of `routes`.
    generation: AtomicU64,
}

impl MsixTable {
    pub(crate) fn new(vectors: u32) -> Self {
        Self {
            vectors,
            routes: Mutex::new(Arc::from(Vec::new())),
            generation: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Routes> {
        // The guarded value is a plain Arc swap: a panic elsewhere cannot leave it torn.
        self.routes.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn publish(&self, routes: Routes) {
        *self.lock() = routes;
        self.generation.fetch_add(1, Ordering::Release);
    }
}

impl InterruptController for MsixTable {
    fn msix_vectors(&self) -> u32 {
        self.vectors
    }

    fn enable_msix(&self, count: u32) -> Result<Vec<Arc<InterruptEvent>>, VfioError> {
        if count == 0 || count > self.vectors {
            return Err(VfioError::Interrupts {
                addr: SIM_PCI_ADDRESS,
                wanted: count,
                available: self.vectors,
            });
        }
        let events = (0..count)
            .map(|_| {
                InterruptEvent::new()
                    .map(Arc::new)
                    .map_err(|source| VfioError::Ioctl {
                        op: "eventfd for an emulated MSI-X vector",
                        source,
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        self.publish(Arc::from(events.clone()));
        log::debug!(
            "sim: MSI-X enabled with {count} of {} vectors",
            self.vectors
        );
        Ok(events)
    }

    fn disable_msix(&self) {
        self.publish(Arc::from(Vec::new()));
        log::debug!("sim: MSI-X disabled");
    }
}

/// The device thread's copy of the routing, refreshed when the generation moves.
#[derive(Debug)]
pub(crate) struct RouteCache {
    table: Arc<MsixTable>,
    generation: u64,
    routes: Routes,
}

impl RouteCache {
    pub(crate) fn new(table: Arc<MsixTable>) -> Self {
        let routes = table.lock().clone();
        let generation = table.generation.load(Ordering::Acquire);
        Self {
            table,
            generation,
            routes,
        }
    }

    /// The event routed to `vector`, if MSI-X is enabled with that vector.
    pub(crate) fn event(&mut self, vector: u16) -> Option<&InterruptEvent> {
        let current = self.table.generation.load(Ordering::Acquire);
        if current != self.generation {
            self.routes = self.table.lock().clone();
            self.generation = current;
        }
        self.routes.get(usize::from(vector)).map(|e| &**e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn enable_checks_the_count_and_routes_fresh_events() {
        let table = Arc::new(MsixTable::new(4));
        for bad in [0, 5] {
            match table.enable_msix(bad) {
                Err(VfioError::Interrupts {
                    wanted, available, ..
                }) => assert_eq!((wanted, available), (bad, 4)),
                other => panic!("enable_msix({bad}) gave {other:?}"),
            }
        }
        let mut cache = RouteCache::new(table.clone());
        assert!(cache.event(0).is_none(), "nothing routed before enable");
        let events = table.enable_msix(2).unwrap();
        assert_eq!(events.len(), 2);
        cache.event(1).expect("vector 1 routed").signal().unwrap();
        assert!(cache.event(2).is_none(), "vector 2 was not enabled");
        assert_eq!(events[1].wait(Some(Duration::from_secs(1))).unwrap(), 1);
        assert_eq!(events[0].clear().unwrap(), 0);
        table.disable_msix();
        assert!(cache.event(0).is_none(), "disable clears the routing");
    }
}
