//! [`PollGroup`]: one thread polls many queue pairs, possibly of different controllers.
//!
//! Each [`PollGroup::poll`] call polls every pair exactly once; the pair polled first moves
//! one place on each call, so when callers stop after the first completions (or a pair's
//! batch cap is reached) no pair is consistently served last. Completions are batched per
//! pair by the driver (`QueuePairOptions::max_completions_per_poll`, one CQ head doorbell per
//! batch).
//!
//! INVARIANT: a [`QpId`] names a slot of `entries` and the generation the slot had when the
//! pair was added; removing a pair bumps the generation, so a stale id never reaches the pair
//! that reuses the slot. The poll path only indexes `entries`: it never allocates.

use nvme_driver::{Completion, IoQueue, QueuePair};

/// Names a queue pair inside one [`PollGroup`] (slot index and generation).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct QpId {
    index: u32,
    generation: u32,
}

impl QpId {
    /// The slot index (stable while the pair is in the group; reused after removal).
    pub fn index(self) -> usize {
        self.index as usize
    }
}

impl std::fmt::Display for QpId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "qp#{}.{}", self.index, self.generation)
    }
}

/// Poll counters, per pair and for the whole group.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PollStats {
    /// Polls (per pair: calls to `IoQueue::poll`; group: calls to `PollGroup::poll`).
    pub polls: u64,
    /// Polls that found nothing.
    pub idle_polls: u64,
    /// Requests completed.
    pub completions: u64,
}

impl PollStats {
    #[inline(always)]
    fn record(&mut self, completed: usize) {
        self.polls += 1;
        if completed == 0 {
            self.idle_polls += 1;
        } else {
            self.completions += completed as u64;
        }
    }
}

struct Entry<Q> {
    generation: u32,
    qp: Option<Q>,
    stats: PollStats,
}

/// Queue pairs polled together by one thread. `Send` (queue pairs are), not `Sync`.
///
/// Generic over the transport ([`IoQueue`]); the default is the PCIe [`QueuePair`]. A group
/// of another pair type starts as `PollGroup::<Q>::default()` (or is inferred from `add`).
pub struct PollGroup<Q: IoQueue = QueuePair> {
    entries: Vec<Entry<Q>>,
    /// Empty slots, reused before the vector grows.
    free: Vec<u32>,
    live: usize,
    /// Slot polled first by the next `poll` call.
    next_start: usize,
    totals: PollStats,
}

/// Slot indices of a `len`-slot group in polling order when `start` goes first.
#[inline(always)]
fn rotation(start: usize, len: usize) -> impl Iterator<Item = usize> {
    (start..len).chain(0..start)
}

impl<Q: IoQueue> Default for PollGroup<Q> {
    fn default() -> Self {
        Self {
            entries: Vec::new(),
            free: Vec::new(),
            live: 0,
            next_start: 0,
            totals: PollStats::default(),
        }
    }
}

impl PollGroup {
    /// An empty group of PCIe queue pairs (`PollGroup::<Q>::default()` for another
    /// [`IoQueue`]).
    pub fn new() -> Self {
        Self::default()
    }
}

impl<Q: IoQueue> PollGroup<Q> {
    /// Adds a queue pair; its counters start at zero.
    pub fn add(&mut self, qp: Q) -> QpId {
        self.live += 1;
        let stats = PollStats::default();
        if let Some(index) = self.free.pop() {
            let entry = &mut self.entries[index as usize];
            debug_assert!(entry.qp.is_none());
            entry.qp = Some(qp);
            entry.stats = stats;
            return QpId {
                index,
                generation: entry.generation,
            };
        }
        let index = u32::try_from(self.entries.len()).expect("more than 2^32 queue pairs");
        self.entries.push(Entry {
            generation: 0,
            qp: Some(qp),
            stats,
        });
        QpId {
            index,
            generation: 0,
        }
    }

    /// Takes a pair out of the group (with whatever it still has in flight: poll it
    /// yourself or drop it). `None` if `id` is stale or unknown.
    pub fn remove(&mut self, id: QpId) -> Option<Q> {
        let entry = self.entry_mut(id)?;
        let qp = entry.qp.take()?;
        entry.generation = entry.generation.wrapping_add(1);
        self.free.push(id.index);
        self.live -= 1;
        Some(qp)
    }

    /// The pair named `id`, e.g. to submit on it.
    pub fn get_mut(&mut self, id: QpId) -> Option<&mut Q> {
        self.entry_mut(id)?.qp.as_mut()
    }

    /// The pair named `id`.
    pub fn get(&self, id: QpId) -> Option<&Q> {
        let entry = self.entries.get(id.index as usize)?;
        if entry.generation != id.generation {
            return None;
        }
        entry.qp.as_ref()
    }

    fn entry_mut(&mut self, id: QpId) -> Option<&mut Entry<Q>> {
        self.entries
            .get_mut(id.index as usize)
            .filter(|e| e.generation == id.generation)
    }

    /// Pairs in the group.
    pub fn len(&self) -> usize {
        self.live
    }

    /// Whether the group has no pairs.
    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// Ids of the pairs in the group, in slot order.
    pub fn ids(&self) -> impl Iterator<Item = QpId> + '_ {
        self.entries.iter().enumerate().filter_map(|(i, e)| {
            e.qp.as_ref().map(|_| QpId {
                index: i as u32,
                generation: e.generation,
            })
        })
    }

    /// The pairs with their ids, in slot order.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (QpId, &mut Q)> + '_ {
        self.entries.iter_mut().enumerate().filter_map(|(i, e)| {
            let generation = e.generation;
            e.qp.as_mut().map(|qp| {
                (
                    QpId {
                        index: i as u32,
                        generation,
                    },
                    qp,
                )
            })
        })
    }

    /// Requests in flight over all pairs.
    pub fn in_flight(&self) -> usize {
        self.entries
            .iter()
            .filter_map(|e| e.qp.as_ref())
            .map(|qp| qp.in_flight() as usize)
            .sum()
    }

    /// Counters of the pair named `id`.
    pub fn pair_stats(&self, id: QpId) -> Option<PollStats> {
        let entry = self.entries.get(id.index as usize)?;
        (entry.generation == id.generation && entry.qp.is_some()).then_some(entry.stats)
    }

    /// Counters of every pair, in slot order.
    pub fn stats(&self) -> impl Iterator<Item = (QpId, PollStats)> + '_ {
        self.entries.iter().enumerate().filter_map(|(i, e)| {
            e.qp.as_ref().map(|_| {
                (
                    QpId {
                        index: i as u32,
                        generation: e.generation,
                    },
                    e.stats,
                )
            })
        })
    }

    /// Counters of the group: `polls` counts [`PollGroup::poll`] calls, `idle_polls` those
    /// that completed nothing on any pair.
    pub fn totals(&self) -> PollStats {
        self.totals
    }

    /// Polls every pair once (each reaps up to its batch cap and rings its CQ head doorbell
    /// once), calling `f` with the pair's id for each finished request. The pair polled first
    /// rotates on every call. Returns the number of requests finished.
    #[inline]
    pub fn poll<F: FnMut(QpId, Completion)>(&mut self, mut f: F) -> usize {
        let len = self.entries.len();
        if len == 0 {
            return 0;
        }
        let start = if self.next_start < len {
            self.next_start
        } else {
            0
        };
        self.next_start = start + 1;
        let mut total = 0;
        for index in rotation(start, len) {
            let entry = &mut self.entries[index];
            let Some(qp) = entry.qp.as_mut() else {
                continue;
            };
            let id = QpId {
                index: index as u32,
                generation: entry.generation,
            };
            let done = qp.poll(|c| f(id, c));
            entry.stats.record(done);
            total += done;
        }
        self.totals.record(total);
        total
    }

    /// Polls until a whole round completes nothing; returns the requests finished. Requests
    /// the controllers have not finished yet stay in flight: see [`PollGroup::drain`].
    pub fn poll_until_idle<F: FnMut(QpId, Completion)>(&mut self, mut f: F) -> usize {
        let mut total = 0;
        loop {
            let n = self.poll(&mut f);
            if n == 0 {
                return total;
            }
            total += n;
        }
    }

    /// Polls (busy-waiting) until no request is in flight on any pair; returns the requests
    /// finished. Terminates: every command either completes or fails with the driver's
    /// per-command timeout.
    pub fn drain<F: FnMut(QpId, Completion)>(&mut self, mut f: F) -> usize {
        let mut total = 0;
        while self.in_flight() > 0 {
            let n = self.poll(&mut f);
            if n == 0 {
                std::hint::spin_loop();
            }
            total += n;
        }
        total
    }
}

impl<Q: IoQueue> std::fmt::Debug for PollGroup<Q> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PollGroup")
            .field("pairs", &self.live)
            .field("totals", &self.totals)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rotation_visits_every_slot_once_starting_at_start() {
        let order: Vec<_> = rotation(2, 5).collect();
        assert_eq!(order, vec![2, 3, 4, 0, 1]);
        assert_eq!(rotation(0, 3).collect::<Vec<_>>(), vec![0, 1, 2]);
        assert_eq!(rotation(0, 0).count(), 0);
    }

    #[test]
    fn stats_count_idle_and_busy_polls() {
        let mut s = PollStats::default();
        s.record(0);
        s.record(3);
        s.record(1);
        assert_eq!(
            s,
            PollStats {
                polls: 3,
                idle_polls: 1,
                completions: 4
            }
        );
    }

    #[test]
    fn empty_group_polls_nothing() {
        let mut g = PollGroup::new();
        assert!(g.is_empty());
        assert_eq!(g.poll(|_, _| unreachable!()), 0);
        assert_eq!(g.poll_until_idle(|_, _| unreachable!()), 0);
        assert_eq!(g.drain(|_, _| unreachable!()), 0);
        let stale = QpId {
            index: 0,
            generation: 0,
        };
        assert!(g.get_mut(stale).is_none());
        assert!(g.remove(stale).is_none());
    }
}
