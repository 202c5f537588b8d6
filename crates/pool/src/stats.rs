//! Counters for the pool. They are plain `u64` fields owned by the single owner thread, bumped
//! with ordinary adds on the paths they describe and read through a shared reference at no cost.
//! Remote frees are counted by the owner when it drains the remote stack, so no counter is shared
//! between threads.

/// Counters of one [`TagSet`](crate::TagSet).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TagStats {
    /// Tags handed out (by `alloc` and `alloc_many`).
    pub allocs: u64,
    /// Tags returned by the owner through `free`.
    pub frees: u64,
    /// Successful `plug` calls.
    pub plugs: u64,
    /// Allocations served from a plug reservation.
    pub plug_hits: u64,
    /// Reservations handed back unused by `unplug`.
    pub unplugged: u64,
    /// Successful `alloc_many` calls.
    pub alloc_many: u64,
    /// Tags freed on another thread and taken back by the owner.
    pub remote_frees: u64,
    /// Times the owner swapped the remote stack out and found it non-empty.
    pub remote_drains: u64,
    /// `alloc`, `alloc_many` or `plug` calls that failed because too few tags were free.
    pub exhausted: u64,
    /// Frees of a tag that was not live (double free or stale generation); they were ignored.
    pub bad_frees: u64,
}

/// Counters of one [`ObjectCache`](crate::ObjectCache).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// `get` calls served by a recycled object (local list, or remote list after a drain).
    pub hits: u64,
    /// `get` calls that had to allocate.
    pub misses: u64,
    /// Prune steps: a `put` (or a drain) took the cache past its bound and objects were released.
    pub prunes: u64,
    /// Objects released by prune steps.
    pub pruned_objects: u64,
    /// Objects returned from other threads and taken back by the owner.
    pub remote_frees: u64,
    /// Times the owner swapped the remote list out and found it non-empty.
    pub remote_drains: u64,
}
