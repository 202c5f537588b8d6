//! Request pool for the NVMe queue-pair driver: the userspace counterpart of Linux's per-CPU bio
//! allocation cache and of plug-based batched tag allocation.
//!
//! Three pieces, each owned by exactly one thread (one core, one queue pair):
//!
//! * [`TagSet`] — the request slots of one queue pair. A [`Tag`] names a slot and carries a
//!   generation, and its [`Tag::cid`] is the NVMe command identifier placed in the SQE, so a
//!   completion for a recycled slot is detected by [`TagSet::lookup`]. [`TagSet::plug`] reserves
//!   the tags of a batch at once; [`TagSet::alloc_many`] takes several all-or-nothing.
//! * [`ObjectCache`] — a bounded cache of recycled `Box<T>` request objects (at most
//!   `max + slack` idle; a push past that releases `slack` in one step).
//! * [`Slab`] — per-request contexts of the layers above a queue pair (typed pair, async pair,
//!   C API), indexed by the request's user data: fixed capacity, O(1) insert and take, every
//!   lookup of an untrusted index checked. Plain data with no remote path: the invariants
//!   below about remote frees concern the first two.
//!
//! Invariants shared by the first two:
//!
//! * The owner's fast path (alloc/free, get/put) touches only owner-private memory: no atomics,
//!   no locks. Both types are `Send` but not `Sync`.
//! * A free from another thread goes through a `Send + Sync` handle ([`RemoteFreer`],
//!   [`RemoteHandle`]) onto the owner's lock-free remote stack, never into the owner's local
//!   list. Only the owner pops, and it takes the whole stack with one atomic swap, so the stack
//!   has no ABA problem. The owner drains it only when its local list is empty.
//! * Recycled objects are never zeroed: the caller sets the fields a command uses.
//!
//! The concurrent part is model-checked with `loom` (`tests/loom.rs`); build with
//! `RUSTFLAGS="--cfg loom"` to switch the crate's `sync` shims to loom's primitives.
//!
//! # Example
//!
//! Request slots of a queue pair of depth 4: a tag's command identifier finds the slot again
//! when the completion comes back.
//!
//! ```
//! use nvme_pool::TagSet;
//!
//! let mut tags = TagSet::new(4, |_| 0u64); // each slot holds a u64 of the caller
//! let tag = tags.alloc().expect("a free slot");
//! *tags.get_mut(tag) = 42;
//! let cid = tag.cid(); // goes into the submission queue entry
//! let found = tags.lookup(cid).expect("the slot is in use");
//! assert_eq!(*tags.get(found), 42);
//! tags.free(found);
//! assert_eq!(tags.lookup(cid), None); // a stale completion is detected
//! assert_eq!(tags.available(), 4);
//! ```

#![deny(missing_docs)]

mod cache;
mod remote;
mod slab;
mod stats;
mod sync;
mod tags;

pub use cache::{CacheConfig, ObjectCache, RemoteHandle, DEFAULT_MAX, DEFAULT_SLACK};
pub use slab::{Slab, MAX_SLAB_CAPACITY};
pub use stats::{CacheStats, TagStats};
pub use tags::{Exhausted, RemoteFreer, Tag, TagSet, MAX_DEPTH};
