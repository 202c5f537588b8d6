//! Queue memory shared with the controller: submission rings, completion rings and the
//! per-slot PRP list pages. This is the only module of the driver that reads or writes DMA
//! memory, and every such access is volatile.
//!
//! INVARIANT (all types here): the `DmaRegion` is owned by the ring and stays mapped for the
//! device until the ring drops; indices passed in are `< entries` (checked in debug builds and
//! guaranteed by the callers' wrap-around arithmetic).

use std::sync::atomic::{fence, Ordering};

use nvme_spec::queue::{CompletionEntry, SubmissionEntry, CQE_SIZE, SQE_SIZE};
use nvme_vfio::{DmaError, DmaMapper, DmaRegion, Doorbell, Iova};

use std::sync::Arc;

/// Submission queue ring: the host writes entries, the controller reads them.
pub(crate) struct SqRing {
    region: DmaRegion,
    entries: u32,
    /// Next slot the host fills.
    tail: u32,
    /// Tail value last written to the doorbell.
    published_tail: u32,
    /// Controller's consumption point, from the SQ Head Pointer of validated completions.
    head: u32,
    doorbell: Doorbell,
}

impl SqRing {
    pub(crate) fn new(dma: &Arc<dyn DmaMapper>, entries: u32, doorbell: Doorbell) -> Result<Self, DmaError> {
        let region = DmaRegion::allocate(dma, entries as usize * SQE_SIZE)?;
        Ok(Self { region, entries, tail: 0, published_tail: 0, head: 0, doorbell })
    }

    pub(crate) fn iova(&self) -> Iova {
        self.region.iova()
    }

    pub(crate) fn entries(&self) -> u32 {
        self.entries
    }

    /// True when one more entry would make the tail catch the head (a full ring keeps one
    /// slot empty, NVMe Base §4.1.2).
    #[inline(always)]
    pub(crate) fn is_full(&self) -> bool {
        self.next(self.tail) == self.head
    }

    /// Free entries left in the ring.
    #[inline(always)]
    pub(crate) fn free_entries(&self) -> u32 {
        (self.head + self.entries - self.tail - 1) % self.entries
    }

    #[inline(always)]
    fn next(&self, i: u32) -> u32 {
        if i + 1 == self.entries {
            0
        } else {
            i + 1
        }
    }

    /// Copies `sqe` into the tail slot and advances the local tail. The caller checked
    /// `!is_full()`. Nothing is visible to the controller until [`SqRing::publish`].
    #[inline(always)]
    pub(crate) fn push(&mut self, sqe: &SubmissionEntry) {
        debug_assert!(!self.is_full());
        debug_assert!(self.tail < self.entries);
        // SAFETY: `tail < entries` and the region holds `entries` SQEs (64-byte aligned since the
        // region is page aligned). The slot is not being read by the controller: it lies
        // between the published tail and the head, which the controller does not fetch from
        // until the doorbell moves past it.
        unsafe {
            let slot = self.region.as_ptr().as_ptr().cast::<SubmissionEntry>().add(self.tail as usize);
            slot.write_volatile(*sqe);
        }
        self.tail = self.next(self.tail);
    }

    /// Writes the tail doorbell if the tail moved since the last write. Returns whether an
    /// MMIO write happened.
    #[inline(always)]
    pub(crate) fn publish(&mut self) -> bool {
        if self.tail == self.published_tail {
            return false;
        }
        // Orders the SQE stores before the doorbell store: the controller may fetch the
        // entries as soon as it sees the new tail.
        fence(Ordering::Release);
        self.doorbell.ring(self.tail);
        self.published_tail = self.tail;
        true
    }

    /// Records the controller's SQ head from a completion. Values out of range are untrusted
    /// garbage and ignored (the caller counts them). Returns false for such values.
    #[inline(always)]
    pub(crate) fn update_head(&mut self, head: u16) -> bool {
        if (head as u32) < self.entries {
            self.head = head as u32;
            true
        } else {
            false
        }
    }
}

/// Completion queue ring: the controller writes entries, the host reads them.
pub(crate) struct CqRing {
    region: DmaRegion,
    entries: u32,
    head: u32,
    /// Phase tag value that marks a new entry (starts at 1, flips on every wrap).
    phase: bool,
    doorbell: Doorbell,
    /// Head value last written to the doorbell.
    published_head: u32,
}

impl CqRing {
    pub(crate) fn new(dma: &Arc<dyn DmaMapper>, entries: u32, doorbell: Doorbell) -> Result<Self, DmaError> {
        let region = DmaRegion::allocate(dma, entries as usize * CQE_SIZE)?;
        Ok(Self { region, entries, head: 0, phase: true, doorbell, published_head: 0 })
    }

    pub(crate) fn iova(&self) -> Iova {
        self.region.iova()
    }

    /// Returns the entry at the head if the controller has posted it, and advances the head.
    /// The head doorbell is not written here (see [`CqRing::publish`]).
    #[inline(always)]
    pub(crate) fn pop(&mut self) -> Option<CompletionEntry> {
        debug_assert!(self.head < self.entries);
        // SAFETY: `head < entries`; the region holds `entries` 16-byte CQEs. The controller may
        // be writing this slot concurrently, so it is read with volatile loads only: first the
        // dword holding the phase tag, then (after the fence) the whole entry.
        let entry = unsafe {
            let slot = self.region.as_ptr().as_ptr().cast::<CompletionEntry>().add(self.head as usize);
            let status_dword = slot.cast::<u32>().add(3).read_volatile();
            let phase = status_dword & (1 << 16) != 0;
            if phase != self.phase {
                return None;
            }
            // Orders the phase-tag load before the loads of the rest of the entry, so we never
            // combine a new phase with stale contents.
            fence(Ordering::Acquire);
            slot.read_volatile()
        };
        self.head += 1;
        if self.head == self.entries {
            self.head = 0;
            self.phase = !self.phase;
        }
        Some(entry)
    }

    /// Writes the head doorbell if the head moved (once per reaped batch). Returns whether an
    /// MMIO write happened.
    #[inline(always)]
    pub(crate) fn publish(&mut self) -> bool {
        if self.head == self.published_head {
            return false;
        }
        // The entries were fully read (plain loads above) before the controller may reuse
        // the slots: order those loads before the doorbell store.
        fence(Ordering::Release);
        self.doorbell.ring(self.head);
        self.published_head = self.head;
        true
    }
}

/// One page per request slot for PRP lists (and small command payloads such as Dataset
/// Management ranges), allocated once when the queue pair is created.
pub(crate) struct SlotPages {
    region: DmaRegion,
    page_size: usize,
    slots: usize,
}

impl SlotPages {
    pub(crate) fn new(dma: &Arc<dyn DmaMapper>, slots: usize, page_size: usize) -> Result<Self, DmaError> {
        Ok(Self { region: DmaRegion::allocate(dma, slots * page_size)?, page_size, slots })
    }

    /// IOVA of slot `index`'s page.
    #[inline(always)]
    pub(crate) fn iova(&self, index: usize) -> Iova {
        debug_assert!(index < self.slots);
        self.region.iova().add((index * self.page_size) as u64)
    }

    /// Writes `values` (little-endian u64s) at the start of slot `index`'s page.
    ///
    /// Panics if `values` does not fit in a page or the slot is out of range.
    #[inline]
    pub(crate) fn write_u64s(&mut self, index: usize, values: impl Iterator<Item = u64>) {
        assert!(index < self.slots);
        let capacity = self.page_size / std::mem::size_of::<u64>();
        let base = self.region.as_ptr().as_ptr().wrapping_add(index * self.page_size).cast::<u64>();
        for (i, v) in values.enumerate() {
            assert!(i < capacity, "PRP/range list overflows its page");
            // SAFETY: `index < slots` and `i < page_size / 8`, so the store is inside the
            // region and 8-byte aligned (pages are page aligned). The page belongs to a slot
            // that is not in flight (the caller fills it before submitting the command that
            // references it), so the controller does not read it concurrently.
            unsafe { base.add(i).write_volatile(v.to_le()) };
        }
    }
}
