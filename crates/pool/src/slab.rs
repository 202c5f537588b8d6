//! [`Slab`]: a table of per-request contexts indexed by a small integer, the `u64` a request
//! carries through a queue pair (its user data) and gets back with its completion.
//!
//! The layers above a queue pair each need one: the typed pair (`nvme_driver::TypedQueuePair`,
//! a caller's context per request), the async pair (`nvme_poll::AsyncQueuePair`, a waker or a
//! result per request) and the C API (callback, argument and buffer per request). Unlike
//! [`crate::TagSet`] it names no NVMe command id: it sits above the transport and holds what
//! only the caller's layer knows.
//!
//! * Fixed capacity chosen at creation: [`Slab::new`] allocates every entry, and
//!   [`Slab::try_insert`] gives the value back when all are occupied; nothing after `new`
//!   allocates. The one exception is [`Slab::insert`], which grows the table by one entry when
//!   it is full (an amortised `Vec` push), for a user whose number of outstanding requests has
//!   no bound known at creation.
//! * O(1) insert, take, get and get_mut; vacant entries form an intrusive free stack (no second
//!   table), most recently freed first, so a warm entry is reused; a fresh slab hands out
//!   index 0, 1, 2, ... in order.
//! * Every lookup checks its index: an index out of range or naming a vacant entry gives
//!   `None`, never a panic or another request's value, since the index comes back from a
//!   device, a transport or a C caller and is not trusted.
//! * Each entry counts its occupancies ([`Slab::generation`], advanced by [`Slab::take`]), so a
//!   user can put the generation beside the index in its `u64` and detect a stale one.
//!
//! One owner thread: no atomics, no locks (the layers using it are owned by one thread each).
//!
//! # Example
//!
//! ```
//! use nvme_pool::Slab;
//!
//! let mut slab = Slab::new(2);
//! let a = slab.try_insert("a").unwrap();
//! let b = slab.try_insert("b").unwrap();
//! assert_eq!(slab.try_insert("c"), Err("c")); // full: the value comes back
//! assert_eq!(slab.get(a), Some(&"a"));
//! assert_eq!(slab.take(b), Some("b"));
//! assert_eq!(slab.take(b), None); // vacant now
//! assert_eq!(slab.get(7), None); // out of range
//! assert_eq!(slab.len(), 1);
//! ```

/// Largest capacity of a [`Slab`]: indices are `u32`, and `u32::MAX` ends the free stack.
pub const MAX_SLAB_CAPACITY: usize = u32::MAX as usize;

/// Link of the free stack meaning "no further vacant entry".
const END: u32 = u32::MAX;

enum State<T> {
    /// On the free stack; `next` is the entry below it, or [`END`].
    Vacant {
        next: u32,
    },
    Occupied(T),
}

struct Entry<T> {
    /// Occupancies ended so far (wrapping).
    generation: u32,
    state: State<T>,
}

/// A fixed table of values indexed by `u32` with O(1) insert and take (see the module
/// documentation).
pub struct Slab<T> {
    entries: Vec<Entry<T>>,
    /// Top of the free stack, or [`END`].
    free: u32,
    /// Occupied entries.
    len: usize,
}

impl<T> Slab<T> {
    /// A slab of `capacity` vacant entries, all allocated now.
    ///
    /// # Panics
    /// If `capacity` exceeds [`MAX_SLAB_CAPACITY`].
    pub fn new(capacity: usize) -> Self {
        assert!(
            capacity <= MAX_SLAB_CAPACITY,
            "slab capacity {capacity} exceeds {MAX_SLAB_CAPACITY}"
        );
        let entries = (0..capacity)
            .map(|i| Entry {
                generation: 0,
                state: State::Vacant {
                    next: if i + 1 < capacity { i as u32 + 1 } else { END },
                },
            })
            .collect();
        Self {
            entries,
            free: if capacity > 0 { 0 } else { END },
            len: 0,
        }
    }

    /// Stores `value` in a vacant entry and returns its index, or gives `value` back when every
    /// entry is occupied. Never allocates.
    #[inline]
    pub fn try_insert(&mut self, value: T) -> Result<u32, T> {
        let index = self.free;
        let Some(entry) = self.entries.get_mut(index as usize) else {
            return Err(value);
        };
        match std::mem::replace(&mut entry.state, State::Occupied(value)) {
            State::Vacant { next } => self.free = next,
            State::Occupied(_) => unreachable!("slab entry {index} on the free stack is occupied"),
        }
        self.len += 1;
        Ok(index)
    }

    /// Stores `value` and returns its index like [`Slab::try_insert`], but when every entry is
    /// occupied it appends one (growth rule: one `Vec` push, so the table's memory doubles when
    /// its allocation is exhausted; entries never move out of their index and the table never
    /// shrinks). For tables whose bound is not known at creation; size them with [`Slab::new`]
    /// so that growth stays the exception.
    ///
    /// # Panics
    /// If the slab already holds [`MAX_SLAB_CAPACITY`] values.
    #[inline]
    pub fn insert(&mut self, value: T) -> u32 {
        match self.try_insert(value) {
            Ok(index) => index,
            Err(value) => self.grow(value),
        }
    }

    #[cold]
    fn grow(&mut self, value: T) -> u32 {
        let index = self.entries.len();
        assert!(
            index < MAX_SLAB_CAPACITY,
            "slab full at {MAX_SLAB_CAPACITY} entries"
        );
        self.entries.push(Entry {
            generation: 0,
            state: State::Occupied(value),
        });
        self.len += 1;
        index as u32
    }

    /// The value at `index`, or `None` when the entry is vacant or `index` is out of range.
    #[inline]
    pub fn get(&self, index: u32) -> Option<&T> {
        match self.entries.get(index as usize) {
            Some(Entry {
                state: State::Occupied(value),
                ..
            }) => Some(value),
            _ => None,
        }
    }

    /// The value at `index` mutably, or `None` when the entry is vacant or out of range.
    #[inline]
    pub fn get_mut(&mut self, index: u32) -> Option<&mut T> {
        match self.entries.get_mut(index as usize) {
            Some(Entry {
                state: State::Occupied(value),
                ..
            }) => Some(value),
            _ => None,
        }
    }

    /// Whether the entry at `index` holds a value.
    #[inline]
    pub fn contains(&self, index: u32) -> bool {
        self.get(index).is_some()
    }

    /// Removes and returns the value at `index` (the entry becomes vacant and its generation
    /// advances), or `None` when the entry is vacant or out of range (nothing changes then).
    #[inline]
    pub fn take(&mut self, index: u32) -> Option<T> {
        let entry = self.entries.get_mut(index as usize)?;
        if !matches!(entry.state, State::Occupied(_)) {
            return None;
        }
        let State::Occupied(value) =
            std::mem::replace(&mut entry.state, State::Vacant { next: self.free })
        else {
            unreachable!("checked above")
        };
        entry.generation = entry.generation.wrapping_add(1);
        self.free = index;
        self.len -= 1;
        Some(value)
    }

    /// The generation of the entry at `index`, vacant or not: how many values were taken from
    /// it (wrapping at `u32::MAX`). `None` when `index` is out of range. The next value stored
    /// there gets this generation; a user that keeps the generation beside the index can tell
    /// a stale index from the current occupant.
    #[inline]
    pub fn generation(&self, index: u32) -> Option<u32> {
        self.entries.get(index as usize).map(|e| e.generation)
    }

    /// Occupied entries.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no entry is occupied.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether every entry is occupied ([`Slab::try_insert`] would fail).
    #[inline]
    pub fn is_full(&self) -> bool {
        self.len == self.entries.len()
    }

    /// Entries, occupied or vacant (grows only by [`Slab::insert`]).
    #[inline]
    pub fn capacity(&self) -> usize {
        self.entries.len()
    }

    /// The occupied entries with their indices, in index order (for drop and drain paths: a
    /// walk of the whole table).
    pub fn iter(&self) -> impl Iterator<Item = (u32, &T)> + '_ {
        self.entries
            .iter()
            .enumerate()
            .filter_map(|(i, e)| match &e.state {
                State::Occupied(value) => Some((i as u32, value)),
                State::Vacant { .. } => None,
            })
    }

    /// The occupied entries with their indices, mutably, in index order.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (u32, &mut T)> + '_ {
        self.entries
            .iter_mut()
            .enumerate()
            .filter_map(|(i, e)| match &mut e.state {
                State::Occupied(value) => Some((i as u32, value)),
                State::Vacant { .. } => None,
            })
    }
}

impl<T> std::fmt::Debug for Slab<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Slab")
            .field("len", &self.len)
            .field("capacity", &self.entries.len())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fresh_slab_hands_out_indices_in_order_then_reuses_the_last_freed() {
        let mut s = Slab::new(4);
        assert_eq!(s.capacity(), 4);
        assert!(s.is_empty());
        for i in 0..4 {
            assert_eq!(s.try_insert(i * 10), Ok(i));
        }
        assert!(s.is_full());
        assert_eq!(s.try_insert(99), Err(99));
        assert_eq!(s.take(1), Some(10));
        assert_eq!(s.take(3), Some(30));
        assert_eq!(s.try_insert(5), Ok(3));
        assert_eq!(s.try_insert(6), Ok(1));
        assert_eq!(s.len(), 4);
    }

    #[test]
    fn lookups_of_vacant_or_out_of_range_indices_are_none() {
        let mut s = Slab::new(2);
        let i = s.try_insert('x').unwrap();
        assert_eq!(s.get(1), None);
        assert_eq!(s.get_mut(1), None);
        assert_eq!(s.take(1), None);
        assert_eq!(s.get(2), None);
        assert_eq!(s.take(u32::MAX), None);
        assert_eq!(s.generation(2), None);
        *s.get_mut(i).unwrap() = 'y';
        assert!(s.contains(i));
        assert_eq!(s.take(i), Some('y'));
        assert_eq!(s.take(i), None, "a second take of one index is refused");
        assert!(!s.contains(i));
        assert_eq!(s.len(), 0);
        // The refused takes did not corrupt the free stack: both entries are usable once.
        assert_eq!(s.try_insert('a'), Ok(0));
        assert_eq!(s.try_insert('b'), Ok(1));
        assert_eq!(s.try_insert('c'), Err('c'));
    }

    #[test]
    fn take_advances_the_generation() {
        let mut s = Slab::new(1);
        assert_eq!(s.generation(0), Some(0));
        let i = s.try_insert(()).unwrap();
        assert_eq!(s.generation(i), Some(0));
        s.take(i);
        assert_eq!(s.generation(i), Some(1));
        assert_eq!(s.take(i), None);
        assert_eq!(s.generation(i), Some(1), "a refused take changes nothing");
    }

    #[test]
    fn zero_capacity_is_always_full_until_it_grows() {
        let mut s = Slab::new(0);
        assert!(s.is_full());
        assert_eq!(s.try_insert(1), Err(1));
        assert_eq!(s.insert(1), 0);
        assert_eq!(s.insert(2), 1);
        assert_eq!(s.capacity(), 2);
        assert_eq!(s.take(0), Some(1));
        assert_eq!(s.insert(3), 0, "a vacant entry is used before growing");
        assert_eq!(s.capacity(), 2);
    }

    #[test]
    fn iter_lists_occupied_entries_in_index_order() {
        let mut s = Slab::new(5);
        for v in 0..5 {
            s.try_insert(v).unwrap();
        }
        s.take(0);
        s.take(3);
        assert_eq!(
            s.iter().map(|(i, v)| (i, *v)).collect::<Vec<_>>(),
            [(1, 1), (2, 2), (4, 4)]
        );
        for (_, v) in s.iter_mut() {
            *v += 10;
        }
        assert_eq!(s.get(4), Some(&14));
    }

    #[test]
    fn values_left_in_the_slab_are_dropped_with_it() {
        let value = std::rc::Rc::new(());
        let mut s = Slab::new(3);
        s.try_insert(value.clone()).unwrap();
        let i = s.try_insert(value.clone()).unwrap();
        drop(s.take(i));
        assert_eq!(std::rc::Rc::strong_count(&value), 2);
        drop(s);
        assert_eq!(std::rc::Rc::strong_count(&value), 1);
    }
}
