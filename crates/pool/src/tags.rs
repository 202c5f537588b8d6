//! Request slots of one queue pair, named by generation-carrying tags.
//!
//! A [`TagSet`] owns `depth` slots of `T` (the driver's per-command state) and hands out
//! [`Tag`]s. A tag's [`cid`](Tag::cid) is the NVMe Command Identifier put in CDW0 of the
//! submission queue entry (NVMe Base Spec 2.0, 4.2 "Submission Queue Entry") and echoed in DW3
//! of the completion (4.6 "Completion Queue Entry"): the low `index_bits` bits are the slot
//! index, the high bits the slot's generation. Freeing a slot bumps its generation, so a late or
//! duplicated completion for a recycled slot fails [`TagSet::lookup`] instead of completing the
//! wrong command.
//!
//! Invariants (owner thread only, no atomics on the fast path):
//! * every index is in exactly one place: live (allocated), on the local free stack, or on the
//!   remote stack (freed on another thread, still live until the owner drains it);
//! * `reserved <= free.len()`: a plug reservation is a promise on the top of the free stack.
//!   Only allocation removes entries from the free stack and allocation consumes reservations
//!   first, so the promise cannot be broken and no index has to move when plugging;
//! * no tag's cid is `0xFFFF` (see [`RESERVED_CID`]).

use std::cell::Cell;
use std::fmt;
use std::marker::PhantomData;

use crate::remote::IndexStack;
use crate::stats::TagStats;
use crate::sync::Arc;

/// Largest number of slots a [`TagSet`] may have. With 12 index bits a cid keeps 4 generation
/// bits, so a completion has to be stale by 16 reuses of its slot to go undetected.
pub const MAX_DEPTH: u16 = 4096;

/// Command Identifier value the pool never hands out: NVMe Base Spec 2.0, Figure 91
/// ("Command Dword 0") says FFFFh should not be used, because the Error Information log page
/// (5.16.1.2) uses it for errors not tied to a command.
const RESERVED_CID: u16 = 0xFFFF;

/// A live request slot: index plus generation. `Copy` so it can ride in a completion path, but
/// it is only meaningful to the [`TagSet`] that issued it.
///
/// The index is kept next to the cid so that reaching the slot costs no shift or mask.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Tag {
    cid: u16,
    index: u16,
    index_bits: u8,
}

impl Tag {
    /// The slot index, `0..capacity`.
    #[inline(always)]
    pub fn index(self) -> usize {
        usize::from(self.index)
    }

    /// The NVMe command identifier: `index | generation << index_bits`, where `index_bits` is
    /// the number of bits needed for `depth - 1` (at least 1).
    #[inline(always)]
    pub fn cid(self) -> u16 {
        self.cid
    }

    /// The slot generation this tag was issued with.
    #[inline]
    pub fn generation(self) -> u16 {
        self.cid >> self.index_bits
    }
}

#[inline]
fn index_mask(index_bits: u8) -> u16 {
    // index_bits is 1..=12, so the shift cannot overflow.
    (1u16 << index_bits) - 1
}

/// Not enough free tags for an all-or-nothing request ([`TagSet::plug`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Exhausted {
    /// Tags asked for.
    pub wanted: u16,
    /// Tags that were free and unreserved at the time.
    pub available: u16,
}

impl fmt::Display for Exhausted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "wanted {} request tags but only {} are free: reap completions before submitting \
             more, split the batch, or create the queue pair with a larger depth",
            self.wanted, self.available
        )
    }
}

impl std::error::Error for Exhausted {}

/// Owner-side state of one slot.
#[derive(Clone, Copy, Debug, Default)]
struct SlotMeta {
    /// The cid the slot's current (or next) tag carries: `index | generation << index_bits`.
    cid: u16,
    live: bool,
}

/// One slot: the owner's metadata and the caller's value.
struct Entry<T> {
    meta: SlotMeta,
    value: T,
}

/// The request slots of one queue pair.
///
/// Every slot is in exactly one place: live, on the local free stack, or on the remote stack
/// (freed on another thread, counted as live until the owner drains it). Plug reservations are
/// a count with `reserved <= available()`.
///
/// `Send` when `T: Send` (a queue pair may be built on one thread and moved to its core), never
/// `Sync`: the owner's operations take no locks.
///
/// ```compile_fail
/// fn assert_sync<T: Sync>() {}
/// assert_sync::<nvme_pool::TagSet<u64>>();
/// ```
// Cache-line aligned: per-core state must not share a line with a neighbour (style.md #9).
#[repr(align(64))]
pub struct TagSet<T> {
    // Hot: touched by every alloc/free.
    free: Vec<u16>,
    /// Per slot: the owner's metadata next to the caller's value, so that validating a cid and
    /// reaching its slot is one bounds check and (for small `T`) one cache line.
    entries: Box<[Entry<T>]>,
    reserved: u16,
    index_bits: u8,
    /// `(1 << index_bits) - 1`.
    index_mask: u16,
    /// `1 << index_bits`: added to a cid to advance its generation.
    cid_step: u16,
    stats: TagStats,
    // Cold: only when the local free stack runs dry, and by lookup.
    remote: Arc<IndexStack>,
    /// A [`RemoteFreer`] was ever handed out (sticky): until then nothing can be on the remote
    /// stack, and `lookup` skips its check.
    remote_issued: Cell<bool>,
    _not_sync: PhantomData<Cell<()>>,
}

impl<T> TagSet<T> {
    /// Creates `depth` slots, building slot `i` with `init(i)`.
    ///
    /// # Panics
    /// If `depth` is 0 or greater than [`MAX_DEPTH`] (4096).
    pub fn new(depth: u16, mut init: impl FnMut(u16) -> T) -> Self {
        assert!(
            (1..=MAX_DEPTH).contains(&depth),
            "TagSet depth {depth} is out of range: use 1..={MAX_DEPTH} slots \
             (cap the queue pair's depth at {MAX_DEPTH})"
        );
        let index_bits = (u16::BITS - (depth - 1).leading_zeros()).max(1) as u8;
        Self {
            // Popped from the end, so slot 0 goes out first.
            free: (0..depth).rev().collect(),
            entries: (0..depth)
                .map(|index| Entry {
                    meta: SlotMeta {
                        cid: index,
                        live: false,
                    },
                    value: init(index),
                })
                .collect(),
            reserved: 0,
            index_bits,
            index_mask: index_mask(index_bits),
            cid_step: 1u16 << index_bits,
            stats: TagStats::default(),
            remote: Arc::new(IndexStack::new(usize::from(depth))),
            remote_issued: Cell::new(false),
            _not_sync: PhantomData,
        }
    }

    /// Number of slots.
    pub fn capacity(&self) -> u16 {
        self.entries.len() as u16
    }

    /// Slots allocated and not yet freed. A slot freed on another thread counts as in use until
    /// the owner drains the remote stack.
    pub fn in_use(&self) -> u16 {
        // Every slot is live or on the local free stack (remotely freed ones count as live
        // until drained): derived, so allocation and free keep no count of their own.
        (self.entries.len() - self.free.len()) as u16
    }

    /// Slots on the local free stack, reserved ones included. Slots freed remotely and not yet
    /// drained are not counted; allocation drains them when it needs them.
    pub fn available(&self) -> u16 {
        self.free.len() as u16
    }

    /// Tags reserved by [`plug`](Self::plug) and not yet allocated.
    pub fn reserved(&self) -> u16 {
        self.reserved
    }

    /// Allocates one tag: a plug-reserved one first, else the top of the free stack. Drains the
    /// remote stack only when the local one is empty. `None` when every slot is in use.
    #[inline]
    pub fn alloc(&mut self) -> Option<Tag> {
        self.alloc_mut().map(|(tag, _)| tag)
    }

    /// [`alloc`](Self::alloc) and [`get_mut`](Self::get_mut) in one, with one bounds check:
    /// the new tag and its slot.
    #[inline]
    pub fn alloc_mut(&mut self) -> Option<(Tag, &mut T)> {
        let index = match self.free.pop() {
            Some(index) => index,
            None => self.alloc_slow()?,
        };
        if self.reserved > 0 {
            self.reserved -= 1;
            self.stats.plug_hits += 1;
        }
        self.stats.allocs += 1;
        Some(self.activate(index))
    }

    #[cold]
    fn alloc_slow(&mut self) -> Option<u16> {
        self.drain_remote();
        let index = self.free.pop();
        if index.is_none() {
            self.stats.exhausted += 1;
        }
        index
    }

    /// Allocates `n` tags into `out[..n]`, all or nothing (for the child commands of a transfer
    /// split at MDTS). Reservations are consumed first. Returns `false`, allocating nothing,
    /// when fewer than `n` slots are free even after draining the remote stack.
    ///
    /// # Panics
    /// If `out` is shorter than `n`.
    pub fn alloc_many(&mut self, n: u16, out: &mut [Tag]) -> bool {
        assert!(
            out.len() >= usize::from(n),
            "alloc_many of {n} tags into a slice of {}: pass a slice at least n long",
            out.len()
        );
        if self.free.len() < usize::from(n) {
            self.drain_remote();
            if self.free.len() < usize::from(n) {
                self.stats.exhausted += 1;
                return false;
            }
        }
        for slot in &mut out[..usize::from(n)] {
            let index = self.free.pop().expect("free stack length checked above");
            *slot = self.activate(index).0;
        }
        let from_plug = self.reserved.min(n);
        self.reserved -= from_plug;
        self.stats.plug_hits += u64::from(from_plug);
        self.stats.allocs += u64::from(n);
        self.stats.alloc_many += 1;
        true
    }

    /// Returns `tag`'s slot to the free stack and bumps its generation, so the old cid no longer
    /// passes [`lookup`](Self::lookup).
    ///
    /// Freeing a tag that is not live (double free, stale generation) is a caller bug: it
    /// asserts in debug builds; in release builds the free is ignored, logged and counted in
    /// [`TagStats::bad_frees`], so the free stack never holds an index twice.
    #[inline]
    pub fn free(&mut self, tag: Tag) {
        let index = tag.index();
        let live = self
            .entries
            .get(index)
            .map(|entry| &entry.meta)
            .is_some_and(|meta| meta.live && meta.cid == tag.cid)
            && tag.index_bits == self.index_bits;
        debug_assert!(
            live,
            "free of tag {tag:?} that is not live (double or stale free)"
        );
        if !live {
            self.bad_free(index);
            return;
        }
        // `index` was bounds-checked above, so it fits the u16 slot count.
        self.release(index as u16);
        self.stats.frees += 1;
    }

    /// [`free`](Self::free) for a tag that [`lookup`](Self::lookup) or
    /// [`lookup_mut`](Self::lookup_mut) of this set returned and that nothing freed since (the
    /// driver's completion path: validate the device's cid, read the slot, free it). The checks
    /// `lookup` made (index in range, generation current, same set) are not repeated; the
    /// slot's `live` flag still is, so even a caller bug never puts an index on the free stack
    /// twice (it is ignored and counted in [`TagStats::bad_frees`], as with `free`).
    #[inline]
    pub fn free_found(&mut self, tag: Tag) {
        debug_assert!(
            self.is_live(tag),
            "free_found of tag {tag:?} that is not live"
        );
        let index = tag.index();
        let live = self.entries.get(index).is_some_and(|entry| entry.meta.live);
        if !live {
            self.bad_free(index);
            return;
        }
        self.release(index as u16);
        self.stats.frees += 1;
    }

    /// The slot of a live tag.
    ///
    /// # Panics
    /// If the tag's index is out of range (a tag from another, larger set). A stale tag of this
    /// set asserts in debug builds only.
    #[inline]
    pub fn get(&self, tag: Tag) -> &T {
        debug_assert!(self.is_live(tag), "get of tag {tag:?} that is not live");
        &self.entries[tag.index()].value
    }

    /// The slot of a live tag, mutably. Same panics as [`get`](Self::get).
    #[inline]
    pub fn get_mut(&mut self, tag: Tag) -> &mut T {
        debug_assert!(self.is_live(tag), "get_mut of tag {tag:?} that is not live");
        &mut self.entries[tag.index()].value
    }

    /// Validates a command identifier that came from the device: its index must be in range,
    /// the slot in use (and not already freed remotely) and the generation current. Never
    /// panics; `None` means the completion must not be matched to any request.
    #[inline]
    pub fn lookup(&self, cid: u16) -> Option<Tag> {
        let index = cid & self.index_mask;
        let meta = &self.entries.get(usize::from(index))?.meta;
        if !meta.live || meta.cid != cid {
            return None;
        }
        if self.remote_issued.get() && self.remote.is_queued_as(usize::from(index), cid) {
            return None;
        }
        Some(self.make_tag(index, cid))
    }

    /// [`lookup`](Self::lookup) and [`get_mut`](Self::get_mut) in one: validates a cid from
    /// the device and gives its slot, with one bounds check. Never panics.
    #[inline]
    pub fn lookup_mut(&mut self, cid: u16) -> Option<(Tag, &mut T)> {
        let tag = self.lookup(cid)?;
        // In range: `lookup` found the entry (the compiler drops this second check).
        Some((tag, &mut self.entries[tag.index()].value))
    }

    /// Reserves `n` more tags for the batch about to be submitted, all or nothing: the next `n`
    /// allocations are guaranteed to succeed. Drains the remote stack if the local one is short.
    #[inline]
    pub fn plug(&mut self, n: u16) -> Result<(), Exhausted> {
        if self.unreserved() < n {
            self.drain_remote();
            if self.unreserved() < n {
                self.stats.exhausted += 1;
                return Err(Exhausted {
                    wanted: n,
                    available: self.unreserved(),
                });
            }
        }
        self.reserved += n;
        self.stats.plugs += 1;
        Ok(())
    }

    /// Ends the plug: returns the unused reservations to the free pool and says how many there
    /// were. (The driver rings the submission doorbell once at this point.)
    #[inline]
    pub fn unplug(&mut self) -> u16 {
        let unused = std::mem::take(&mut self.reserved);
        self.stats.unplugged += u64::from(unused);
        unused
    }

    /// A handle other threads use to free tags of this set; see [`RemoteFreer`].
    pub fn remote_freer(&self) -> RemoteFreer {
        self.remote_issued.set(true);
        RemoteFreer {
            stack: Arc::clone(&self.remote),
            index_bits: self.index_bits,
        }
    }

    /// Counters; reading them costs nothing.
    pub fn stats(&self) -> &TagStats {
        &self.stats
    }

    /// Tags currently in use (freed remotely and not yet drained excluded), in index order: for
    /// timeout scans and teardown.
    pub fn iter_in_use(&self) -> impl Iterator<Item = Tag> + '_ {
        self.entries
            .iter()
            .map(|entry| &entry.meta)
            .enumerate()
            .filter(|(_, meta)| meta.live)
            .map(move |(index, meta)| self.make_tag(index as u16, meta.cid))
            .filter(move |tag| !self.remote.is_queued_as(tag.index(), tag.cid()))
    }

    /// Takes back every tag freed on other threads. Returns how many.
    #[cold]
    fn drain_remote(&mut self) -> usize {
        if self.remote.is_empty() {
            return 0;
        }
        let remote = Arc::clone(&self.remote);
        let mut taken = 0;
        remote.drain(|index, cid| {
            let tag = self.make_tag(index, cid);
            if self.is_live(tag) {
                self.release(index);
                taken += 1;
            } else {
                // Freed locally too, or freed under an old generation.
                self.bad_free(usize::from(index));
            }
        });
        if taken > 0 {
            self.stats.remote_frees += taken as u64;
            self.stats.remote_drains += 1;
        }
        taken
    }

    #[inline]
    fn unreserved(&self) -> u16 {
        self.free.len() as u16 - self.reserved
    }

    #[inline]
    fn is_live(&self, tag: Tag) -> bool {
        tag.index_bits == self.index_bits
            && self
                .entries
                .get(tag.index())
                .map(|entry| &entry.meta)
                .is_some_and(|meta| meta.live && meta.cid == tag.cid)
    }

    #[inline]
    /// Marks the free slot `index` live: its tag and value.
    fn activate(&mut self, index: u16) -> (Tag, &mut T) {
        let index_bits = self.index_bits;
        let entry = &mut self.entries[usize::from(index)];
        debug_assert!(
            !entry.meta.live,
            "slot {index} on the free stack while live"
        );
        entry.meta.live = true;
        let tag = Tag {
            cid: entry.meta.cid,
            index,
            index_bits,
        };
        (tag, &mut entry.value)
    }

    #[inline]
    fn release(&mut self, index: u16) {
        let meta = &mut self.entries[usize::from(index)].meta;
        // Next generation: adding 1 << index_bits to the cid leaves the index bits alone and
        // wraps the generation bits (u16 arithmetic).
        let step = self.cid_step;
        let mut cid = meta.cid.wrapping_add(step);
        if cid == RESERVED_CID {
            cid = cid.wrapping_add(step);
        }
        meta.cid = cid;
        meta.live = false;
        self.free.push(index);
    }

    #[inline]
    fn make_tag(&self, index: u16, cid: u16) -> Tag {
        Tag {
            cid,
            index,
            index_bits: self.index_bits,
        }
    }

    #[cold]
    fn bad_free(&mut self, index: usize) {
        self.stats.bad_frees += 1;
        log::error!("ignored free of request slot {index}: it is not live (double or stale free)");
    }
}

impl<T> fmt::Debug for TagSet<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TagSet")
            .field("capacity", &self.capacity())
            .field("in_use", &self.in_use())
            .field("available", &self.available())
            .field("reserved", &self.reserved)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

/// Frees tags of one [`TagSet`] from any thread: the slot goes onto the owner's lock-free remote
/// stack (one CAS), never into the owner's local list, and the owner takes it back when its
/// local list runs dry. `Send + Sync + Clone`.
#[derive(Clone)]
pub struct RemoteFreer {
    stack: Arc<IndexStack>,
    index_bits: u8,
}

impl RemoteFreer {
    /// Frees `tag` on behalf of its owner. The tag must be live and freed exactly once.
    ///
    /// # Panics
    /// If the tag is out of range for its set, or is already on the remote stack (freed
    /// remotely twice). A tag freed both locally and remotely is caught and ignored by the owner.
    pub fn free(&self, tag: Tag) {
        debug_assert_eq!(
            tag.index_bits, self.index_bits,
            "tag {tag:?} belongs to another TagSet"
        );
        // A tag's index is below MAX_DEPTH, so it fits in u16.
        self.stack.push(tag.index() as u16, tag.cid());
    }
}

impl fmt::Debug for RemoteFreer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RemoteFreer").finish_non_exhaustive()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn set(depth: u16) -> TagSet<u32> {
        TagSet::new(depth, u32::from)
    }

    #[test]
    fn init_sees_every_index_and_slots_keep_contents() {
        let mut tags = set(8);
        let tag = tags.alloc().unwrap();
        assert_eq!(tag.index(), 0);
        assert_eq!(*tags.get(tag), 0);
        *tags.get_mut(tag) = 77;
        tags.free(tag);
        let again = tags.alloc().unwrap();
        assert_eq!(again.index(), 0);
        // Recycled, not re-initialised.
        assert_eq!(*tags.get(again), 77);
    }

    #[test]
    fn cid_layout_uses_bits_needed_for_depth() {
        for (depth, bits) in [(1, 1), (2, 1), (3, 2), (64, 6), (65, 7), (4096, 12)] {
            let mut tags = set(depth);
            let tag = tags.alloc().unwrap();
            tags.free(tag);
            let tag = tags.alloc().unwrap();
            assert_eq!(tag.index(), 0, "depth {depth}");
            assert_eq!(tag.generation(), 1, "depth {depth}");
            assert_eq!(tag.cid(), 1 << bits, "depth {depth}");
        }
    }

    #[test]
    #[should_panic(expected = "out of range")]
    fn depth_zero_panics() {
        set(0);
    }

    #[test]
    #[should_panic(expected = "out of range")]
    fn depth_above_max_panics() {
        set(MAX_DEPTH + 1);
    }

    #[test]
    fn free_found_releases_what_lookup_validated() {
        let mut tags = set(4);
        let tag = tags.alloc().unwrap();
        let (found, _) = tags.lookup_mut(tag.cid()).unwrap();
        assert_eq!(found, tag);
        tags.free_found(found);
        assert_eq!((tags.in_use(), tags.available()), (0, 4));
        assert_eq!(tags.stats().frees, 1);
        // The generation moved on: the device's old cid no longer matches anything.
        assert!(tags.lookup(tag.cid()).is_none());
        let again = tags.alloc().unwrap();
        assert_eq!(again.index(), tag.index());
        assert_ne!(again.cid(), tag.cid());
        assert_eq!(tags.lookup(again.cid()), Some(again));
    }

    #[test]
    fn generation_detects_stale_cid() {
        let mut tags = set(4);
        let old = tags.alloc().unwrap();
        assert_eq!(tags.lookup(old.cid()), Some(old));
        tags.free(old);
        assert_eq!(tags.lookup(old.cid()), None, "freed slot");
        let new = tags.alloc().unwrap();
        assert_eq!(new.index(), old.index());
        assert_ne!(new.cid(), old.cid());
        assert_eq!(
            tags.lookup(old.cid()),
            None,
            "recycled slot, old generation"
        );
        assert_eq!(tags.lookup(new.cid()), Some(new));
    }

    #[test]
    fn lookup_rejects_out_of_range_and_free_cids_without_panicking() {
        // depth 5 -> 3 index bits, indices 5..8 are out of range.
        let mut tags = set(5);
        let live = tags.alloc().unwrap();
        for cid in 0..=u16::MAX {
            let found = tags.lookup(cid);
            assert_eq!(found.is_some(), cid == live.cid(), "cid {cid:#x}");
        }
    }

    #[test]
    fn generation_wraps_and_never_yields_reserved_cid() {
        // depth 2: 1 index bit, 15 generation bits; slot 1 with all-ones generation is 0xFFFF.
        let mut tags = set(2);
        let first = tags.alloc().unwrap();
        let mut seen_wrap = false;
        let mut last_gen = 0;
        for _ in 0..(1u32 << 15) + 2 {
            let tag = tags.alloc().unwrap();
            assert_eq!(tag.index(), 1);
            assert_ne!(tag.cid(), RESERVED_CID);
            if tag.generation() < last_gen {
                seen_wrap = true;
            }
            last_gen = tag.generation();
            tags.free(tag);
        }
        assert!(seen_wrap);
        tags.free(first);
    }

    #[test]
    fn exhaustion_and_counts() {
        let mut tags = set(3);
        let all: Vec<Tag> = (0..3).map(|_| tags.alloc().unwrap()).collect();
        assert_eq!((tags.in_use(), tags.available()), (3, 0));
        assert_eq!(tags.alloc(), None);
        assert_eq!(tags.stats().exhausted, 1);
        let mut cids: Vec<u16> = all.iter().map(|t| t.cid()).collect();
        cids.dedup();
        assert_eq!(cids.len(), 3);
        assert_eq!(tags.iter_in_use().collect::<Vec<_>>(), all);
        tags.free(all[1]);
        assert_eq!((tags.in_use(), tags.available()), (2, 1));
        assert_eq!(tags.iter_in_use().count(), 2);
        assert_eq!(tags.stats().allocs, 3);
        assert_eq!(tags.stats().frees, 1);
    }

    #[test]
    fn plug_is_all_or_nothing_and_unplug_returns_unused() {
        let mut tags = set(8);
        let held = tags.alloc().unwrap();
        assert_eq!(
            tags.plug(8),
            Err(Exhausted {
                wanted: 8,
                available: 7
            })
        );
        assert_eq!(tags.reserved(), 0, "a failed plug reserves nothing");
        tags.plug(5).unwrap();
        assert_eq!((tags.reserved(), tags.available()), (5, 7));
        // Only 2 unreserved remain.
        assert!(tags.plug(3).is_err());
        tags.plug(2).unwrap();
        assert_eq!(tags.reserved(), 7);
        for _ in 0..3 {
            tags.alloc().unwrap();
        }
        assert_eq!(tags.reserved(), 4);
        assert_eq!(tags.stats().plug_hits, 3);
        assert_eq!(tags.unplug(), 4);
        assert_eq!(tags.reserved(), 0);
        assert_eq!(tags.available(), 4);
        assert_eq!(tags.stats().unplugged, 4);
        tags.free(held);
        assert_eq!(tags.unplug(), 0);
    }

    #[test]
    fn plug_guarantees_allocations() {
        let mut tags = set(4);
        tags.plug(4).unwrap();
        let got: Vec<Tag> = (0..4).map(|_| tags.alloc().unwrap()).collect();
        assert_eq!(tags.reserved(), 0);
        assert_eq!(tags.alloc(), None);
        assert_eq!(tags.unplug(), 0);
        for tag in got {
            tags.free(tag);
        }
    }

    #[test]
    fn alloc_many_is_all_or_nothing() {
        let mut tags = set(6);
        let mut out = [tags.alloc().unwrap(); 8];
        let before = tags.stats().allocs;
        assert!(!tags.alloc_many(6, &mut out));
        assert_eq!(tags.in_use(), 1, "nothing allocated on failure");
        assert_eq!(tags.stats().allocs, before);
        tags.plug(2).unwrap();
        assert!(tags.alloc_many(4, &mut out));
        assert_eq!(tags.in_use(), 5);
        assert_eq!(tags.reserved(), 0, "reservations consumed first");
        let mut indices: Vec<usize> = out[..4].iter().map(|t| t.index()).collect();
        indices.sort_unstable();
        indices.dedup();
        assert_eq!(indices.len(), 4);
        assert!(out[..4].iter().all(|t| tags.lookup(t.cid()) == Some(*t)));
    }

    #[test]
    fn remote_frees_return_to_owner_when_local_runs_dry() {
        let mut tags = set(4);
        let all: Vec<Tag> = (0..4).map(|_| tags.alloc().unwrap()).collect();
        let freer = tags.remote_freer();
        std::thread::scope(|s| {
            for pair in all.chunks(2) {
                let freer = freer.clone();
                s.spawn(move || pair.iter().for_each(|&t| freer.free(t)));
            }
        });
        // Freed remotely: no longer matchable, still counted in use until drained.
        assert_eq!(tags.in_use(), 4);
        assert!(all.iter().all(|t| tags.lookup(t.cid()).is_none()));
        assert_eq!(tags.iter_in_use().count(), 0);
        let again: Vec<Tag> = (0..4).map(|_| tags.alloc().unwrap()).collect();
        assert_eq!(tags.stats().remote_frees, 4);
        assert_eq!(tags.stats().remote_drains, 1);
        for (old, new) in all.iter().zip(&again) {
            assert!(tags.lookup(old.cid()).is_none());
            assert_eq!(tags.lookup(new.cid()), Some(*new));
        }
    }

    #[test]
    fn plug_drains_remote_stack() {
        let mut tags = set(2);
        let a = tags.alloc().unwrap();
        let b = tags.alloc().unwrap();
        let freer = tags.remote_freer();
        freer.free(a);
        freer.free(b);
        tags.plug(2).unwrap();
        assert_eq!(tags.available(), 2);
        assert_eq!(tags.stats().remote_frees, 2);
    }

    #[test]
    #[cfg(not(debug_assertions))]
    fn release_build_ignores_double_free() {
        let mut tags = set(2);
        let tag = tags.alloc().unwrap();
        tags.free(tag);
        tags.free(tag);
        assert_eq!(tags.stats().bad_frees, 1);
        assert_eq!(tags.available(), 2);
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "not live")]
    fn double_free_asserts_in_debug() {
        let mut tags = set(2);
        let tag = tags.alloc().unwrap();
        tags.free(tag);
        tags.free(tag);
    }

    #[test]
    fn local_then_remote_double_free_is_caught_at_drain() {
        let mut tags = set(1);
        let tag = tags.alloc().unwrap();
        let freer = tags.remote_freer();
        tags.free(tag);
        freer.free(tag);
        let new = tags.alloc().unwrap();
        // The stale remote entry carries the old cid: it does not hide the new command.
        assert_eq!(tags.lookup(new.cid()), Some(new));
        assert_eq!(tags.iter_in_use().collect::<Vec<_>>(), vec![new]);
        // The drain finds the stale remote free and must not release the new allocation.
        assert_eq!(tags.alloc(), None);
        assert_eq!(tags.stats().bad_frees, 1);
        assert_eq!(tags.in_use(), 1);
        assert_eq!(tags.lookup(new.cid()), Some(new));
    }

    #[test]
    fn exhausted_message_says_how_to_fix() {
        let msg = Exhausted {
            wanted: 3,
            available: 1,
        }
        .to_string();
        assert!(msg.contains("wanted 3") && msg.contains("only 1") && msg.contains("depth"));
    }

    #[test]
    fn handles_are_send_and_sync() {
        fn send<T: Send>() {}
        fn send_sync_clone<T: Send + Sync + Clone>() {}
        send::<TagSet<Vec<u8>>>();
        send_sync_clone::<RemoteFreer>();
    }
}
