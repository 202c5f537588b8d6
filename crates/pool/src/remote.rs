//! Lock-free remote stacks: how a thread that is not the owner gives something back.
//!
//! Both stacks are Treiber stacks with one twist that removes the hard part: only the owner
//! pops, and it pops everything at once with a single `swap` of the head. Pushers never read a
//! node that is already on the stack (they only copy the head *value* into their own node's link),
//! and a node cannot leave the stack and come back while a pusher still holds a stale head,
//! so there is no ABA problem and no reclamation problem.
//!
//! Ordering: a pusher writes its node's link, then publishes the node with a `Release` CAS on
//! the head. The owner takes the list with an `Acquire` swap. Every successful CAS is a
//! read-modify-write, so all earlier pushes are in the release sequence the owner acquires, and
//! every link in the list it walks is visible to it.
//!
//! * [`IndexStack`] links slot indices through a preallocated array of `AtomicU32`; it needs no
//!   allocation and no `unsafe`. Used by [`TagSet`](crate::TagSet).
//! * [`BoxList`] links heap nodes that carry a `Box<T>`; the owner's drain is the only `unsafe`.
//!   Used by [`ObjectCache`](crate::ObjectCache).

use std::marker::PhantomData;
use std::ptr;

use crate::sync::{AtomicPtr, AtomicU32, Ordering};

/// Head value meaning "stack empty".
const EMPTY: u32 = u32::MAX;
/// Low half of a link meaning "last entry".
const END: u32 = 0xFFFF;
/// Link value of a slot that is not on the stack. No real link equals it, because the high
/// half of a real link is a command identifier and the pool never issues cid `0xFFFF`.
const NOT_QUEUED: u32 = u32::MAX;
/// Where the cid sits in a link word.
const CID_SHIFT: u32 = 16;

/// Keeps the pushers' hot word off the owner's cache lines (x86 and most Arm cores use 64-byte
/// lines).
#[repr(align(64))]
struct CacheAligned<T>(T);

/// A stack of slot indices, pushed by any thread, drained by the owner. Each entry also carries
/// the command identifier the slot was freed under, so the owner can reject a stale free.
pub(crate) struct IndexStack {
    head: CacheAligned<AtomicU32>,
    /// `links[i]` is `NOT_QUEUED` while slot `i` is off the stack, otherwise
    /// `cid << CID_SHIFT | next` where `next` is the next index or `END`.
    links: Box<[AtomicU32]>,
}

fn link_word(cid: u16, next_head: u32) -> u32 {
    let next = if next_head == EMPTY { END } else { next_head };
    u32::from(cid) << CID_SHIFT | next
}

impl IndexStack {
    /// A stack for slots `0..len`; `len` must not exceed `END`.
    pub(crate) fn new(len: usize) -> Self {
        debug_assert!(len <= END as usize);
        Self {
            head: CacheAligned(AtomicU32::new(EMPTY)),
            links: (0..len).map(|_| AtomicU32::new(NOT_QUEUED)).collect(),
        }
    }

    /// Pushes slot `index`, freed under command identifier `cid` (never `0xFFFF`). Any thread
    /// may call this.
    ///
    /// # Panics
    /// If `index` is out of range or already on the stack (a double free from two threads);
    /// the check is done before the stack is modified, so the stack stays intact.
    pub(crate) fn push(&self, index: u16, cid: u16) {
        let link = self.links.get(usize::from(index)).unwrap_or_else(|| {
            panic!(
                "remote free of slot {index}, but the tag set has only {} slots: \
                 the tag belongs to another TagSet",
                self.links.len()
            )
        });
        let mut head = self.head.0.load(Ordering::Relaxed);
        // Claim the link first: it fails without writing if the slot is already queued.
        if link
            .compare_exchange(
                NOT_QUEUED,
                link_word(cid, head),
                Ordering::Relaxed,
                Ordering::Relaxed,
            )
            .is_err()
        {
            panic!("slot {index} freed remotely twice: each tag must be freed exactly once");
        }
        loop {
            match self.head.0.compare_exchange_weak(
                head,
                u32::from(index),
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => return,
                Err(current) => {
                    head = current;
                    // The slot is not published yet, so this store races with nobody.
                    link.store(link_word(cid, head), Ordering::Relaxed);
                }
            }
        }
    }

    /// Whether slot `index` is on the stack, freed under `cid` (freed remotely, not drained
    /// yet). A plain load; the answer may be stale by the time it is used, which only delays
    /// detection of the free. A stale entry with another cid does not count.
    pub(crate) fn is_queued_as(&self, index: usize, cid: u16) -> bool {
        // NOT_QUEUED's high half is 0xFFFF, which is never a cid, so it cannot match.
        self.links
            .get(index)
            .is_some_and(|link| link.load(Ordering::Relaxed) >> CID_SHIFT == u32::from(cid))
    }

    /// Whether the stack looks empty. A plain load, used to skip the swap.
    pub(crate) fn is_empty(&self) -> bool {
        // Under loom, answer "maybe not" so the owner always goes on to the swap. loom's
        // partial-order reduction keeps one last access per atomic, so it misses the schedule
        // where a pusher's load + CAS lands before this load, and would never let the owner see
        // a push. Skipping the check loses nothing: a stale "empty" is the same as the owner
        // running before the push, which the model explores anyway.
        if cfg!(loom) {
            return false;
        }
        self.head.0.load(Ordering::Relaxed) == EMPTY
    }

    /// Takes the whole stack with one swap and calls `f(index, cid)` on every entry (most
    /// recently pushed first). Returns how many there were. Owner only.
    pub(crate) fn drain(&self, mut f: impl FnMut(u16, u16)) -> usize {
        let mut cursor = self.head.0.swap(EMPTY, Ordering::Acquire);
        let mut count = 0;
        while cursor != EMPTY {
            let link = &self.links[cursor as usize];
            let word = link.load(Ordering::Relaxed);
            // Cheap (cold path) and the loom tests rely on it: a link not yet visible here would
            // mean the head swap failed to acquire the pusher's write.
            assert_ne!(
                word, NOT_QUEUED,
                "slot {cursor} on the remote stack without a link"
            );
            // Off the stack again: a later legitimate remote free of this slot may claim it.
            link.store(NOT_QUEUED, Ordering::Relaxed);
            // Both halves are 16-bit fields of the link word.
            f(cursor as u16, (word >> CID_SHIFT) as u16);
            count += 1;
            let next = word & END;
            cursor = if next == END { EMPTY } else { next };
        }
        count
    }
}

/// One entry of a [`BoxList`].
struct Node<T> {
    obj: Box<T>,
    next: *mut Node<T>,
}

/// A list of boxed objects, pushed by any thread, drained by the owner.
pub(crate) struct BoxList<T> {
    head: CacheAligned<AtomicPtr<Node<T>>>,
    /// `AtomicPtr` alone would make the list `Send + Sync` for any `T`. The list moves `T`s
    /// between threads and never shares one, which is exactly what `Mutex<T>` models:
    /// `Send + Sync` iff `T: Send`.
    _moves_t: PhantomData<std::sync::Mutex<T>>,
}

impl<T> BoxList<T> {
    pub(crate) fn new() -> Self {
        Self {
            head: CacheAligned(AtomicPtr::new(ptr::null_mut())),
            _moves_t: PhantomData,
        }
    }

    /// Pushes `obj`. Any thread may call this. Costs one small allocation for the node.
    pub(crate) fn push(&self, obj: Box<T>) {
        // Leaked until the owner's drain re-boxes it.
        let node: &mut Node<T> = Box::leak(Box::new(Node {
            obj,
            next: ptr::null_mut(),
        }));
        let mut head = self.head.0.load(Ordering::Relaxed);
        loop {
            node.next = head;
            let raw: *mut Node<T> = node;
            match self
                .head
                .0
                .compare_exchange_weak(head, raw, Ordering::Release, Ordering::Relaxed)
            {
                // Published: `node` is not touched again by this thread.
                Ok(_) => return,
                Err(current) => head = current,
            }
        }
    }

    /// Whether the list looks empty. A plain load, used to skip the swap.
    pub(crate) fn is_empty(&self) -> bool {
        // See `IndexStack::is_empty`.
        if cfg!(loom) {
            return false;
        }
        self.head.0.load(Ordering::Relaxed).is_null()
    }

    /// Takes the whole list with one swap and hands every object to `f`. Returns how many there
    /// were. Owner only (or `Drop`).
    pub(crate) fn drain(&self, mut f: impl FnMut(Box<T>)) -> usize {
        let mut cursor = self.head.0.swap(ptr::null_mut(), Ordering::Acquire);
        let mut count = 0;
        while !cursor.is_null() {
            // SAFETY: every non-null pointer in the list came from `Box::leak` in `push` and was
            // published by a `Release` CAS that our `Acquire` swap synchronises with, so the node
            // is initialised and visible. The swap removed the whole list from the shared head,
            // and pushers never dereference nodes already published, so this thread is the only
            // one that can reach this node: re-boxing it takes back sole ownership, once.
            let node = unsafe { Box::from_raw(cursor) };
            cursor = node.next;
            f(node.obj);
            count += 1;
        }
        count
    }
}

impl<T> Drop for BoxList<T> {
    fn drop(&mut self) {
        self.drain(drop);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn index_stack_drains_everything_once() {
        let stack = IndexStack::new(8);
        assert!(stack.is_empty());
        for i in [3, 5, 0] {
            stack.push(i, i + 100);
        }
        assert!(stack.is_queued_as(5, 105));
        assert!(!stack.is_queued_as(5, 5));
        assert!(!stack.is_queued_as(1, 101));
        let mut seen = Vec::new();
        assert_eq!(stack.drain(|i, cid| seen.push((i, cid))), 3);
        assert_eq!(seen, vec![(0, 100), (5, 105), (3, 103)]);
        assert!(stack.is_empty());
        assert!(!stack.is_queued_as(5, 105));
        assert_eq!(stack.drain(|_, _| panic!("stack should be empty")), 0);
        // A drained slot can be pushed again.
        stack.push(5, 0xFFFE);
        let mut seen = Vec::new();
        assert_eq!(stack.drain(|i, cid| seen.push((i, cid))), 1);
        assert_eq!(seen, vec![(5, 0xFFFE)]);
    }

    #[test]
    #[should_panic(expected = "freed remotely twice")]
    fn index_stack_rejects_double_push() {
        let stack = IndexStack::new(4);
        stack.push(2, 2);
        stack.push(2, 2);
    }

    #[test]
    fn box_list_drains_and_drops_leftovers() {
        let list = BoxList::new();
        let marker = std::sync::Arc::new(());
        for _ in 0..4 {
            list.push(Box::new(marker.clone()));
        }
        assert_eq!(std::sync::Arc::strong_count(&marker), 5);
        let mut taken = Vec::new();
        assert_eq!(list.drain(|b| taken.push(b)), 4);
        assert!(list.is_empty());
        list.push(taken.pop().unwrap());
        drop(taken);
        assert_eq!(std::sync::Arc::strong_count(&marker), 2);
        drop(list);
        assert_eq!(std::sync::Arc::strong_count(&marker), 1);
    }
}
