//! What a control server serves: named controllers and the queue statistics the program's
//! I/O threads publish.
//!
//! INVARIANT: the I/O path never takes the registry's lock. A thread that owns a queue pair
//! gets its [`QueueStatsCell`] once (at setup) and then only stores counters into it with
//! relaxed atomic stores, when it chooses (e.g. once per progress interval): no lock, no
//! allocation, no system call. The server thread reads the cells under the lock.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use nvme_device::{AnyController, AnyQueueStats};
use serde::{Deserialize, Serialize};

/// The counters of one queue pair, as published.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueCounters {
    /// Commands submitted.
    pub commands_submitted: u64,
    /// Requests completed.
    pub requests_completed: u64,
    /// Calls to poll.
    pub polls: u64,
    /// Polls that found nothing.
    pub idle_polls: u64,
    /// MMIO writes to the SQ tail doorbell (PCIe; 0 on NVMe/TCP).
    pub sq_doorbell_writes: u64,
    /// MMIO writes to the CQ head doorbell (PCIe; 0 on NVMe/TCP).
    pub cq_doorbell_writes: u64,
    /// Commands that timed out (PCIe).
    pub timeouts: u64,
    /// Completion entries rejected (PCIe).
    pub bad_completions: u64,
    /// Requests the program saw fail (its own count; 0 if it does not publish one).
    pub failed_requests: u64,
}

impl QueueCounters {
    /// The counters of a queue pair's statistics snapshot.
    pub fn from_stats(stats: &AnyQueueStats) -> Self {
        match stats {
            AnyQueueStats::Pcie(s) => Self::from_pcie(s),
            AnyQueueStats::Tcp(s) => Self {
                commands_submitted: s.commands_submitted,
                requests_completed: s.requests_completed,
                polls: s.polls,
                idle_polls: s.idle_polls,
                ..Self::default()
            },
        }
    }

    /// The counters of a PCIe queue pair.
    pub fn from_pcie(s: &nvme_driver::QueuePairStats) -> Self {
        Self {
            commands_submitted: s.commands_submitted,
            requests_completed: s.requests_completed,
            polls: s.polls,
            idle_polls: s.idle_polls,
            sq_doorbell_writes: s.sq_doorbell_writes,
            cq_doorbell_writes: s.cq_doorbell_writes,
            timeouts: s.timeouts,
            bad_completions: s.bad_completions,
            failed_requests: 0,
        }
    }
}

/// One queue pair's published counters (written by its owner thread, read by the server).
#[derive(Debug, Default)]
pub struct QueueStatsCell {
    commands_submitted: AtomicU64,
    requests_completed: AtomicU64,
    polls: AtomicU64,
    idle_polls: AtomicU64,
    sq_doorbell_writes: AtomicU64,
    cq_doorbell_writes: AtomicU64,
    timeouts: AtomicU64,
    bad_completions: AtomicU64,
    failed_requests: AtomicU64,
    publications: AtomicU64,
}

impl QueueStatsCell {
    /// Stores `c` (relaxed stores: a reader may see fields of two publications, each a
    /// value the queue pair really had).
    #[inline]
    pub fn publish(&self, c: &QueueCounters) {
        let r = Ordering::Relaxed;
        self.commands_submitted.store(c.commands_submitted, r);
        self.requests_completed.store(c.requests_completed, r);
        self.polls.store(c.polls, r);
        self.idle_polls.store(c.idle_polls, r);
        self.sq_doorbell_writes.store(c.sq_doorbell_writes, r);
        self.cq_doorbell_writes.store(c.cq_doorbell_writes, r);
        self.timeouts.store(c.timeouts, r);
        self.bad_completions.store(c.bad_completions, r);
        self.failed_requests.store(c.failed_requests, r);
        self.publications.fetch_add(1, r);
    }

    /// The last published counters.
    pub fn read(&self) -> QueueCounters {
        let r = Ordering::Relaxed;
        QueueCounters {
            commands_submitted: self.commands_submitted.load(r),
            requests_completed: self.requests_completed.load(r),
            polls: self.polls.load(r),
            idle_polls: self.idle_polls.load(r),
            sq_doorbell_writes: self.sq_doorbell_writes.load(r),
            cq_doorbell_writes: self.cq_doorbell_writes.load(r),
            timeouts: self.timeouts.load(r),
            bad_completions: self.bad_completions.load(r),
            failed_requests: self.failed_requests.load(r),
        }
    }

    /// How many times counters were published.
    pub fn publications(&self) -> u64 {
        self.publications.load(Ordering::Relaxed)
    }
}

/// A served controller.
#[derive(Clone, Debug)]
pub(crate) struct Served {
    pub(crate) name: String,
    pub(crate) controller: Arc<AnyController>,
    pub(crate) queues: Vec<(String, Arc<QueueStatsCell>)>,
}

/// The controllers a control server serves, by name. Cheap to clone (shared).
#[derive(Clone, Debug, Default)]
pub struct ControlRegistry {
    inner: Arc<RwLock<Vec<Served>>>,
}

impl ControlRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Serves `controller` under `name` (replacing one of the same name).
    pub fn add(&self, name: impl Into<String>, controller: Arc<AnyController>) {
        let name = name.into();
        let mut list = self.inner.write().unwrap_or_else(|p| p.into_inner());
        list.retain(|s| s.name != name);
        list.push(Served {
            name,
            controller,
            queues: Vec::new(),
        });
    }

    /// Stops serving `name` (its remove callback, say). Returns whether it was served.
    pub fn remove(&self, name: &str) -> bool {
        let mut list = self.inner.write().unwrap_or_else(|p| p.into_inner());
        let before = list.len();
        list.retain(|s| s.name != name);
        list.len() != before
    }

    /// A new statistics cell for queue `queue` of controller `name`, which `queue_stats`
    /// reports; `None` when `name` is not served. Call once per queue pair, at setup.
    pub fn queue_stats(&self, name: &str, queue: impl Into<String>) -> Option<Arc<QueueStatsCell>> {
        let mut list = self.inner.write().unwrap_or_else(|p| p.into_inner());
        let served = list.iter_mut().find(|s| s.name == name)?;
        let cell = Arc::new(QueueStatsCell::default());
        served.queues.push((queue.into(), cell.clone()));
        Some(cell)
    }

    /// Names served, in the order added.
    pub fn names(&self) -> Vec<String> {
        self.snapshot().into_iter().map(|s| s.name).collect()
    }

    /// A copy of the list (the lock is not held while a request runs).
    pub(crate) fn snapshot(&self) -> Vec<Served> {
        self.inner.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The controller served as `name` (or the only one, when `name` is `None`).
    pub(crate) fn find(&self, name: Option<&str>) -> Result<Served, String> {
        let list = self.snapshot();
        match name {
            Some(n) => list.into_iter().find(|s| s.name == n).ok_or_else(|| {
                format!(
                    "no controller `{n}` is served (served: {})",
                    self.names().join(", ")
                )
            }),
            None if list.len() == 1 => Ok(list.into_iter().next().expect("one")),
            None => Err(format!(
                "name the controller: {} are served ({})",
                list.len(),
                self.names().join(", ")
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cell_reports_what_was_published() {
        let cell = QueueStatsCell::default();
        assert_eq!(cell.read(), QueueCounters::default());
        let c = QueueCounters {
            commands_submitted: 10,
            requests_completed: 9,
            polls: 100,
            failed_requests: 1,
            ..QueueCounters::default()
        };
        cell.publish(&c);
        assert_eq!(cell.read(), c);
        assert_eq!(cell.publications(), 1);
    }
}
