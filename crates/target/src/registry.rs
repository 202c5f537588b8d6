//! The associations of the target (NVMe Base 2.0 §3.3: an admin queue and the I/O queues
//! connected to its controller id). Shared by the poll groups behind one lock that is taken
//! at Connect, Set Features Number of Queues, Keep Alive expiry and disconnect, never per I/O:
//! an I/O connection keeps a clone of its association's `alive` flag and reads it once per
//! poll pass.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use nvme_spec::fabrics::NQN_FIELD_SIZE;

/// Controller ids handed out: 1 ..= `MAX_CNTLID` (NVMe Base 2.0 §5.17.2.1: FFF0h and above
/// are reserved; 0 is left unused).
const MAX_CNTLID: u16 = 0xFFEF;

/// One association.
pub(crate) struct Assoc {
    /// Index of the subsystem (`None`: the discovery subsystem).
    pub subsys: Option<usize>,
    /// Host NQN of the admin Connect (I/O Connects must name the same).
    pub hostnqn: [u8; NQN_FIELD_SIZE],
    /// Cleared when the association ends; its I/O connections then close.
    pub alive: Arc<AtomicBool>,
    /// I/O queues granted by Set Features Number of Queues (0 before it).
    pub io_queues: u16,
    /// I/O queue ids connected.
    pub connected: Vec<u16>,
}

/// The association table.
#[derive(Default)]
pub(crate) struct Registry {
    inner: Mutex<Table>,
}

#[derive(Default)]
struct Table {
    next: u16,
    assocs: HashMap<u16, Assoc>,
}

impl Registry {
    fn table(&self) -> MutexGuard<'_, Table> {
        // A poisoned table is still consistent (every update is one insert or field store).
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A new association; its controller id, or `None` when every id is taken.
    pub fn create(
        &self,
        subsys: Option<usize>,
        hostnqn: [u8; NQN_FIELD_SIZE],
    ) -> Option<(u16, Arc<AtomicBool>)> {
        let mut t = self.table();
        for _ in 0..MAX_CNTLID {
            t.next = if t.next >= MAX_CNTLID { 1 } else { t.next + 1 };
            let id = t.next;
            if let std::collections::hash_map::Entry::Vacant(slot) = t.assocs.entry(id) {
                let alive = Arc::new(AtomicBool::new(true));
                slot.insert(Assoc {
                    subsys,
                    hostnqn,
                    alive: alive.clone(),
                    io_queues: 0,
                    connected: Vec::new(),
                });
                return Some((id, alive));
            }
        }
        None
    }

    /// Ends association `cntlid`: its I/O connections see `alive` cleared and close.
    pub fn end(&self, cntlid: u16) {
        if let Some(a) = self.table().assocs.remove(&cntlid) {
            a.alive.store(false, Ordering::Release);
        }
    }

    /// Records the I/O queues granted to `cntlid`.
    pub fn grant(&self, cntlid: u16, io_queues: u16) {
        if let Some(a) = self.table().assocs.get_mut(&cntlid) {
            a.io_queues = io_queues;
        }
    }

    /// Joins I/O queue `qid` to association `cntlid` of subsystem `subsys` for `hostnqn`;
    /// the association's `alive` flag, or why not.
    pub fn join(
        &self,
        cntlid: u16,
        subsys: usize,
        hostnqn: &[u8; NQN_FIELD_SIZE],
        qid: u16,
    ) -> Result<Arc<AtomicBool>, JoinRefused> {
        let mut t = self.table();
        let Some(a) = t.assocs.get_mut(&cntlid) else {
            return Err(JoinRefused::UnknownController);
        };
        if a.subsys != Some(subsys) || &a.hostnqn != hostnqn {
            return Err(JoinRefused::UnknownController);
        }
        if qid == 0 || qid > a.io_queues || a.connected.contains(&qid) {
            return Err(JoinRefused::BadQueue);
        }
        a.connected.push(qid);
        Ok(a.alive.clone())
    }

    /// I/O queue `qid` of `cntlid` went away.
    pub fn leave(&self, cntlid: u16, qid: u16) {
        if let Some(a) = self.table().assocs.get_mut(&cntlid) {
            a.connected.retain(|&q| q != qid);
        }
    }

    /// The host NQN of association `cntlid`.
    pub fn host(&self, cntlid: u16) -> Option<[u8; NQN_FIELD_SIZE]> {
        self.table().assocs.get(&cntlid).map(|a| a.hostnqn)
    }

    /// Associations alive.
    pub fn len(&self) -> usize {
        self.table().assocs.len()
    }
}

/// Why an I/O Connect cannot join an association.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum JoinRefused {
    /// No such controller id for this subsystem and host.
    UnknownController,
    /// Queue id 0, above the granted count, or already connected.
    BadQueue,
}
