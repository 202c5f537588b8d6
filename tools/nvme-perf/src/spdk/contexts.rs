//! Where the spdk-like loop keeps what a completion needs to account for its I/O.
//!
//! Three stores, chosen with `--contexts` and monomorphised into the loop (no dispatch per
//! I/O):
//! - [`Slots`] (default): one context per queue-depth slot, preallocated, as SPDK's perf
//!   preallocates its tasks. An I/O's index names its slot, so a context never moves and
//!   nothing is allocated or recycled per I/O.
//! - [`Cached`]: a `Box` per I/O from an [`ObjectCache`] (the per-CPU bio cache idea), put
//!   back at completion; the A/B against `Boxed` measures that cache.
//! - [`Boxed`]: `Box::new` per I/O and a drop at completion (the allocator's cost).
//!
//! INVARIANT (every store): `begin(i, ..)` is called only for an index with no I/O in flight,
//! `end(i)` returns the context of `begin(i, ..)` once and then `None` until the next
//! `begin(i, ..)`; `get(i)` sees the live context without ending it.

use nvme_pool::{CacheConfig, CacheStats, ObjectCache};

/// Idle contexts the cache tolerates above the queue depth before it prunes.
const CACHE_SLACK: usize = 64;

/// What the completion of I/O `i` needs. Plain data: every field is written at `begin`.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct IoContext {
    /// Submission time in ns since the worker's clock base.
    pub submitted: u64,
    pub lba: u64,
    pub is_write: bool,
    /// Resubmissions after a retryable completion error (`--reset-interval`).
    pub retries: u8,
}

/// A store of per-I/O contexts indexed by the I/O's slot (see the module's invariant).
pub(crate) trait ContextStore {
    /// Makes `ctx` the context of I/O `index` (in flight from now on).
    fn begin(&mut self, index: u32, ctx: IoContext);
    /// Ends I/O `index`: its context, or `None` when it has none (not in flight, or out of
    /// range: a device-reported index is untrusted).
    fn end(&mut self, index: usize) -> Option<IoContext>;
    /// The context of in-flight I/O `index`, left in flight.
    fn get(&self, index: usize) -> Option<&IoContext>;
    /// The cache's counters (only [`Cached`] has any).
    fn cache_stats(&self) -> Option<CacheStats> {
        None
    }
}

/// One context per slot, with the slot's in-flight flag beside it.
pub(crate) struct Slots {
    slots: Vec<(IoContext, bool)>,
}

impl Slots {
    pub(crate) fn new(depth: u32) -> Self {
        Self {
            slots: vec![(IoContext::default(), false); depth as usize],
        }
    }
}

impl ContextStore for Slots {
    #[inline(always)]
    fn begin(&mut self, index: u32, ctx: IoContext) {
        if let Some(slot) = self.slots.get_mut(index as usize) {
            *slot = (ctx, true);
        }
    }

    #[inline(always)]
    fn end(&mut self, index: usize) -> Option<IoContext> {
        let (ctx, live) = self.slots.get_mut(index)?;
        if !*live {
            return None;
        }
        *live = false;
        Some(*ctx)
    }

    #[inline(always)]
    fn get(&self, index: usize) -> Option<&IoContext> {
        self.slots
            .get(index)
            .and_then(|(ctx, live)| live.then_some(ctx))
    }
}

/// A boxed context per in-flight I/O, the boxes recycled through an [`ObjectCache`].
pub(crate) struct Cached {
    live: Boxes,
    cache: ObjectCache<IoContext>,
}

impl Cached {
    pub(crate) fn new(depth: u32) -> Self {
        Self {
            live: Boxes::new(depth),
            cache: ObjectCache::new(CacheConfig {
                max: depth as usize,
                slack: CACHE_SLACK,
            }),
        }
    }
}

impl ContextStore for Cached {
    #[inline(always)]
    fn begin(&mut self, index: u32, ctx: IoContext) {
        let mut boxed = self.cache.get(IoContext::default);
        *boxed = ctx;
        if let Some(old) = self.live.insert(index, boxed) {
            self.cache.put(old);
        }
    }

    #[inline(always)]
    fn end(&mut self, index: usize) -> Option<IoContext> {
        let boxed = self.live.take(index)?;
        let ctx = *boxed;
        self.cache.put(boxed);
        Some(ctx)
    }

    #[inline(always)]
    fn get(&self, index: usize) -> Option<&IoContext> {
        self.live.get(index)
    }

    fn cache_stats(&self) -> Option<CacheStats> {
        Some(*self.cache.stats())
    }
}

/// A `Box::new` per I/O, dropped at its end.
pub(crate) struct Boxed {
    live: Boxes,
}

impl Boxed {
    pub(crate) fn new(depth: u32) -> Self {
        Self {
            live: Boxes::new(depth),
        }
    }
}

impl ContextStore for Boxed {
    #[inline(always)]
    fn begin(&mut self, index: u32, ctx: IoContext) {
        // An old box (never, by the invariant) is dropped.
        self.live.insert(index, Box::new(ctx));
    }

    #[inline(always)]
    fn end(&mut self, index: usize) -> Option<IoContext> {
        self.live.take(index).map(|b| *b)
    }

    #[inline(always)]
    fn get(&self, index: usize) -> Option<&IoContext> {
        self.live.get(index)
    }
}

/// The boxes of the in-flight I/Os, by index.
struct Boxes(Vec<Option<Box<IoContext>>>);

impl Boxes {
    fn new(depth: u32) -> Self {
        Self((0..depth).map(|_| None).collect())
    }

    /// Stores `boxed` for `index`, handing back what was there (`None` by the invariant; an
    /// out-of-range index hands `boxed` itself back).
    #[inline(always)]
    fn insert(&mut self, index: u32, boxed: Box<IoContext>) -> Option<Box<IoContext>> {
        match self.0.get_mut(index as usize) {
            Some(place) => place.replace(boxed),
            None => Some(boxed),
        }
    }

    #[inline(always)]
    fn take(&mut self, index: usize) -> Option<Box<IoContext>> {
        self.0.get_mut(index).and_then(Option::take)
    }

    #[inline(always)]
    fn get(&self, index: usize) -> Option<&IoContext> {
        self.0.get(index).and_then(Option::as_deref)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx(lba: u64) -> IoContext {
        IoContext {
            submitted: lba * 10,
            lba,
            is_write: lba % 2 == 1,
            retries: 0,
        }
    }

    /// Every store keeps the module's invariant: begin, get, end once, then nothing.
    fn exercise(store: &mut impl ContextStore) {
        for round in 0..3u64 {
            for i in 0..4u32 {
                assert!(store.get(i as usize).is_none());
                store.begin(i, ctx(u64::from(i) + round));
            }
            for i in 0..4usize {
                assert_eq!(store.get(i).map(|c| c.lba), Some(i as u64 + round));
                let c = store.end(i).expect("in flight");
                assert_eq!(
                    (c.lba, c.submitted),
                    (i as u64 + round, (i as u64 + round) * 10)
                );
                assert!(store.end(i).is_none(), "ended twice");
            }
        }
        // A device-reported index past the depth is no I/O of ours.
        assert!(store.end(4).is_none() && store.end(usize::MAX).is_none());
        assert!(store.get(99).is_none());
        store.begin(99, ctx(1));
        assert!(store.end(99).is_none());
    }

    #[test]
    fn slots_keep_the_invariant() {
        exercise(&mut Slots::new(4));
    }

    #[test]
    fn cache_keeps_the_invariant_and_recycles() {
        let mut store = Cached::new(4);
        exercise(&mut store);
        let stats = store.cache_stats().expect("cache counters");
        // 12 begins in range and one past the depth (its box goes straight back): the first
        // 4 miss, the rest reuse the boxes the ends put back.
        assert_eq!((stats.misses, stats.hits), (4, 9));
    }

    #[test]
    fn boxes_keep_the_invariant() {
        let mut store = Boxed::new(4);
        exercise(&mut store);
        assert!(store.cache_stats().is_none());
    }
}
