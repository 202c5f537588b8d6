//! A per-core cache of recycled boxed request objects: the analogue of Linux's per-CPU bio
//! allocation cache.
//!
//! [`ObjectCache::get`] pops an idle object (a hit) or allocates one (a miss);
//! [`ObjectCache::put`] pushes it back. The cache keeps at most `max + slack` idle objects; the
//! push that takes it past that bound releases `slack` objects in one step, so a burst of frees
//! costs one prune per `slack` objects instead of one `free()` per object, and the cache settles
//! between `max` and `max + slack`.
//!
//! Objects are **never zeroed** on recycle: a recycled object still holds the values of its
//! previous use, and the caller must set every field the next command reads. This is what makes
//! a hit cheaper than `Box::new(T::default())` (see `docs/pool-benchmarks.md`).
//!
//! Objects freed on other threads go through a [`RemoteHandle`] onto a lock-free list that the
//! owner takes with one atomic swap, and only when its local list is empty. The owner's
//! `get`/`put` fast path touches no atomics.

use std::cell::Cell;
use std::fmt;
use std::marker::PhantomData;

use crate::remote::BoxList;
use crate::stats::CacheStats;
use crate::sync::Arc;

/// Default idle objects kept (Linux's per-CPU bio cache uses the same figure).
pub const DEFAULT_MAX: usize = 512;
/// Default number of objects above `max` tolerated, and released per prune step.
pub const DEFAULT_SLACK: usize = 64;
/// Most idle-object slots preallocated up front; a larger bound grows on demand.
const PREALLOC_LIMIT: usize = 4096;

/// Bounds of an [`ObjectCache`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheConfig {
    /// Idle objects kept after a prune.
    pub max: usize,
    /// Idle objects tolerated above `max`; a push past `max + slack` releases `slack` objects
    /// at once. `0` means a strict bound of `max` (one object released per push above it).
    pub slack: usize,
}

impl Default for CacheConfig {
    fn default() -> Self {
        Self {
            max: DEFAULT_MAX,
            slack: DEFAULT_SLACK,
        }
    }
}

impl CacheConfig {
    /// Idle count above which a push prunes.
    fn limit(&self) -> usize {
        self.max.saturating_add(self.slack)
    }

    /// Objects released by one prune step (at least one, so the bound holds with `slack == 0`).
    fn prune_step(&self) -> usize {
        self.slack.max(1)
    }
}

/// A per-core cache of recycled `Box<T>`. `Send` when `T: Send`, never `Sync`.
///
/// ```compile_fail
/// fn assert_sync<T: Sync>() {}
/// assert_sync::<nvme_pool::ObjectCache<u64>>();
/// ```
// Cache-line aligned: per-core state must not share a line with a neighbour (style.md #9).
#[repr(align(64))]
pub struct ObjectCache<T> {
    idle: Vec<Box<T>>,
    /// `config.limit()`, computed once: `put` compares with it on every call.
    limit: usize,
    config: CacheConfig,
    stats: CacheStats,
    remote: Arc<BoxList<T>>,
    _not_sync: PhantomData<Cell<()>>,
}

impl<T> ObjectCache<T> {
    /// An empty cache with the given bounds.
    pub fn new(config: CacheConfig) -> Self {
        let prealloc = config.limit().saturating_add(1).min(PREALLOC_LIMIT);
        Self {
            idle: Vec::with_capacity(prealloc),
            limit: config.limit(),
            config,
            stats: CacheStats::default(),
            remote: Arc::new(BoxList::new()),
            _not_sync: PhantomData,
        }
    }

    /// The bounds this cache was built with.
    pub fn config(&self) -> CacheConfig {
        self.config
    }

    /// Idle objects in the local list (remote frees not yet drained excluded).
    pub fn len(&self) -> usize {
        self.idle.len()
    }

    /// Whether the local list is empty.
    pub fn is_empty(&self) -> bool {
        self.idle.is_empty()
    }

    /// An object: a recycled one if any (its fields hold whatever its last user left; set the
    /// ones you use), else `Box::new(make())`. Drains the remote list only when the local list
    /// is empty.
    #[inline]
    pub fn get(&mut self, make: impl FnOnce() -> T) -> Box<T> {
        if let Some(obj) = self.idle.pop() {
            self.stats.hits += 1;
            return obj;
        }
        self.get_slow(make)
    }

    #[cold]
    fn get_slow(&mut self, make: impl FnOnce() -> T) -> Box<T> {
        if self.drain_remote() > 0 {
            if let Some(obj) = self.idle.pop() {
                self.stats.hits += 1;
                return obj;
            }
        }
        self.stats.misses += 1;
        Box::new(make())
    }

    /// Returns an object to the cache. If that takes the idle count past `max + slack`, `slack`
    /// objects are dropped in one step.
    #[inline]
    pub fn put(&mut self, obj: Box<T>) {
        self.idle.push(obj);
        if self.idle.len() > self.limit {
            self.prune();
        }
    }

    #[cold]
    fn prune(&mut self) {
        let keep = self.idle.len().saturating_sub(self.config.prune_step());
        let released = self.idle.len() - keep;
        self.idle.truncate(keep);
        self.stats.prunes += 1;
        self.stats.pruned_objects += released as u64;
    }

    /// A handle other threads use to give objects back to this cache.
    pub fn remote_handle(&self) -> RemoteHandle<T> {
        RemoteHandle {
            list: Arc::clone(&self.remote),
        }
    }

    /// Counters; reading them costs nothing.
    pub fn stats(&self) -> &CacheStats {
        &self.stats
    }

    /// Takes every object freed on other threads. Keeps up to `max` in total and drops the rest
    /// (one prune step). Returns how many were taken off the remote list.
    fn drain_remote(&mut self) -> usize {
        if self.remote.is_empty() {
            return 0;
        }
        let max = self.config.max;
        let idle = &mut self.idle;
        let mut dropped = 0u64;
        let taken = self.remote.drain(|obj| {
            if idle.len() < max {
                idle.push(obj);
            } else {
                dropped += 1;
            }
        });
        if taken > 0 {
            self.stats.remote_frees += taken as u64;
            self.stats.remote_drains += 1;
        }
        if dropped > 0 {
            self.stats.prunes += 1;
            self.stats.pruned_objects += dropped;
        }
        taken
    }
}

impl<T> Default for ObjectCache<T> {
    fn default() -> Self {
        Self::new(CacheConfig::default())
    }
}

impl<T> fmt::Debug for ObjectCache<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ObjectCache")
            .field("idle", &self.idle.len())
            .field("config", &self.config)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

/// Gives objects back to one [`ObjectCache`] from any thread: one CAS onto the owner's
/// lock-free remote list (plus one small node allocation), never into the owner's local list.
/// `Send + Sync + Clone` when `T: Send`.
pub struct RemoteHandle<T> {
    list: Arc<BoxList<T>>,
}

impl<T> RemoteHandle<T> {
    /// Returns `obj` to the owning cache.
    pub fn put(&self, obj: Box<T>) {
        self.list.push(obj);
    }
}

impl<T> Clone for RemoteHandle<T> {
    fn clone(&self) -> Self {
        Self {
            list: Arc::clone(&self.list),
        }
    }
}

impl<T> fmt::Debug for RemoteHandle<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RemoteHandle").finish_non_exhaustive()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn cache(max: usize, slack: usize) -> ObjectCache<[u64; 4]> {
        ObjectCache::new(CacheConfig { max, slack })
    }

    #[test]
    fn default_bounds_are_512_plus_64() {
        let c = ObjectCache::<u8>::default();
        assert_eq!(
            c.config(),
            CacheConfig {
                max: 512,
                slack: 64
            }
        );
    }

    #[test]
    fn miss_then_hit_without_zeroing() {
        let mut c = cache(4, 2);
        let mut obj = c.get(|| [0; 4]);
        assert_eq!(c.stats().misses, 1);
        obj[2] = 42;
        c.put(obj);
        let obj = c.get(|| panic!("must be a hit"));
        assert_eq!(obj[2], 42, "recycled object keeps its old contents");
        assert_eq!((c.stats().hits, c.stats().misses), (1, 1));
    }

    #[test]
    fn prune_at_max_plus_slack_drops_exactly_slack() {
        let (max, slack) = (8, 3);
        let mut c = cache(max, slack);
        for _ in 0..max + slack {
            c.put(Box::new([0; 4]));
        }
        assert_eq!(c.len(), max + slack);
        assert_eq!(c.stats().prunes, 0, "at the bound, not above it");
        c.put(Box::new([0; 4]));
        assert_eq!(c.len(), max + 1);
        assert_eq!(c.stats().prunes, 1);
        assert_eq!(c.stats().pruned_objects, slack as u64);
        // The next prune needs another `slack` pushes.
        for _ in 0..slack - 1 {
            c.put(Box::new([0; 4]));
        }
        assert_eq!(c.stats().prunes, 1);
        c.put(Box::new([0; 4]));
        assert_eq!(c.stats().prunes, 2);
        assert_eq!(c.len(), max + 1);
    }

    #[test]
    fn zero_slack_is_a_strict_bound() {
        let mut c = cache(2, 0);
        for _ in 0..5 {
            c.put(Box::new([0; 4]));
        }
        assert_eq!(c.len(), 2);
        assert_eq!(c.stats().pruned_objects, 3);
    }

    #[test]
    fn pruned_objects_are_dropped() {
        let marker = std::sync::Arc::new(());
        let mut c = ObjectCache::new(CacheConfig { max: 1, slack: 2 });
        for _ in 0..4 {
            c.put(Box::new(marker.clone()));
        }
        assert_eq!(std::sync::Arc::strong_count(&marker), 3);
        drop(c);
        assert_eq!(std::sync::Arc::strong_count(&marker), 1);
    }

    #[test]
    fn remote_frees_return_to_owner_when_local_is_empty() {
        let mut c = cache(16, 4);
        let objs: Vec<_> = (0..6u64).map(|i| c.get(|| [i; 4])).collect();
        let handle = c.remote_handle();
        std::thread::scope(|s| {
            for chunk in objs.chunks(3) {
                let handle = handle.clone();
                let chunk = chunk.to_vec();
                s.spawn(move || chunk.into_iter().for_each(|o| handle.put(o)));
            }
        });
        drop(objs);
        assert_eq!(
            c.len(),
            0,
            "remote frees never land in the local list directly"
        );
        let mut got: Vec<u64> = (0..6)
            .map(|_| c.get(|| panic!("must be served from the remote list"))[0])
            .collect();
        got.sort_unstable();
        assert_eq!(got, vec![0, 1, 2, 3, 4, 5]);
        assert_eq!(c.stats().remote_frees, 6);
        assert_eq!(c.stats().remote_drains, 1);
        assert_eq!(c.stats().hits, 6);
    }

    #[test]
    fn drain_respects_max() {
        let mut c = cache(2, 1);
        let handle = c.remote_handle();
        for i in 0..5 {
            handle.put(Box::new([i; 4]));
        }
        let _ = c.get(|| unreachable!());
        // Two kept, one of them handed out; three dropped in one prune.
        assert_eq!(c.len(), 1);
        assert_eq!(c.stats().prunes, 1);
        assert_eq!(c.stats().pruned_objects, 3);
    }

    #[test]
    fn handles_are_send_and_sync() {
        fn send<T: Send>() {}
        fn send_sync_clone<T: Send + Sync + Clone>() {}
        send::<ObjectCache<Vec<u8>>>();
        // Sync needs only T: Send, like a channel.
        send_sync_clone::<RemoteHandle<std::cell::Cell<u8>>>();
    }
}
