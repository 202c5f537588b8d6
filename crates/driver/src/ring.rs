//! Queue memory shared with the controller: submission rings, completion rings and the
//! per-slot PRP list pages. This is the only module of the driver that reads or writes DMA
//! memory, and every such access is volatile.
//!
//! INVARIANT (all types here): the `DmaRegion` is owned by the ring and stays mapped for the
//! device until the ring drops; indices passed in are `< entries` (checked in debug builds and
//! guaranteed by the callers' wrap-around arithmetic).

use std::ptr::NonNull;
use std::sync::Arc;

use nvme_spec::queue::{CompletionEntry, SubmissionEntry, CQE_SIZE, SQE_SIZE};
use nvme_vfio::barrier;
use nvme_vfio::{DmaError, DmaMapper, DmaRegion, Doorbell, Iova};

/// The Shadow Doorbell and EventIdx buffers of a controller (Doorbell Buffer Config, NVMe
/// Base 2.0 §5.8): one page each, one entry per doorbell at the doorbell's stride.
///
/// INVARIANT: both regions are at least `entries * stride` bytes long.
pub(crate) struct ShadowBuffers {
    shadow: DmaRegion,
    event_idx: DmaRegion,
    stride: usize,
    entries: usize,
}

impl ShadowBuffers {
    /// Allocates the two pages; `None` if the doorbells of `queues` queue pairs (admin
    /// included) do not fit in a page at this stride.
    pub(crate) fn new(
        dma: &Arc<dyn DmaMapper>,
        page_size: usize,
        stride: usize,
        queues: usize,
    ) -> Result<Option<Self>, DmaError> {
        let entries = 2 * queues;
        if entries * stride > page_size {
            return Ok(None);
        }
        let shadow = DmaRegion::allocate(dma, page_size)?;
        let event_idx = DmaRegion::allocate(dma, page_size)?;
        Ok(Some(Self {
            shadow,
            event_idx,
            stride,
            entries,
        }))
    }

    /// Number of doorbell entries (SQ tail and CQ head of every queue, admin included).
    pub(crate) fn entries(&self) -> usize {
        self.entries
    }

    pub(crate) fn shadow_iova(&self) -> Iova {
        self.shadow.iova()
    }

    pub(crate) fn event_idx_iova(&self) -> Iova {
        self.event_idx.iova()
    }

    /// The shadow entry pair of doorbell number `index` (SQ y tail = 2y, CQ y head = 2y + 1),
    /// reset to `value`.
    pub(crate) fn slot(self: &Arc<Self>, index: usize, value: u32) -> ShadowSlot {
        assert!(
            index < self.entries,
            "doorbell {index} outside the shadow buffer"
        );
        let offset = index * self.stride;
        // SAFETY: `offset + 4 <= entries * stride <= len` (type invariant) and the regions are
        // page aligned, so the pointers are in bounds and 4-byte aligned.
        let (shadow, event_idx) = unsafe {
            (
                NonNull::new_unchecked(self.shadow.as_ptr().as_ptr().add(offset).cast::<u32>()),
                NonNull::new_unchecked(self.event_idx.as_ptr().as_ptr().add(offset).cast::<u32>()),
            )
        };
        let slot = ShadowSlot {
            shadow,
            event_idx,
            _buffers: self.clone(),
        };
        // SAFETY: valid pointers (above); the controller reads shadow entries and writes
        // EventIdx entries concurrently, hence volatile accesses only.
        unsafe {
            slot.shadow.as_ptr().write_volatile(value);
            slot.event_idx.as_ptr().write_volatile(value);
        }
        slot
    }
}

/// One doorbell's shadow entry and EventIdx entry.
///
/// INVARIANT: both pointers are valid, aligned u32 entries inside `_buffers`.
pub(crate) struct ShadowSlot {
    shadow: NonNull<u32>,
    event_idx: NonNull<u32>,
    _buffers: Arc<ShadowBuffers>,
}

// SAFETY: the slot only performs volatile accesses to DMA memory kept alive by `_buffers`;
// it is owned by one ring, which is owned by one thread at a time.
unsafe impl Send for ShadowSlot {}

impl ShadowSlot {
    /// Publishes `new` (moving from `old`) in the shadow entry and returns whether the
    /// controller asked, through EventIdx, for an MMIO doorbell write as well.
    #[inline(always)]
    fn update(&self, old: u32, new: u32) -> bool {
        // SAFETY: valid and aligned by the type invariant; volatile because the controller
        // reads this entry concurrently.
        unsafe { self.shadow.as_ptr().write_volatile(new) };
        // The shadow store must be globally visible before EventIdx is loaded (a store-load
        // ordering only a full fence gives); otherwise the controller could miss the new
        // value while we miss its request for an MMIO write.
        barrier::mb();
        // SAFETY: as above; the controller writes this entry concurrently.
        let event_idx = unsafe { self.event_idx.as_ptr().read_volatile() };
        need_event(event_idx, new, old)
    }
}

/// The EventIdx rule (as in virtio): an MMIO write is needed when the controller's event
/// index lies in `[old, new)`, computed in 16-bit wrap-around arithmetic.
#[inline(always)]
pub(crate) fn need_event(event_idx: u32, new: u32, old: u32) -> bool {
    (new.wrapping_sub(event_idx).wrapping_sub(1) as u16) < (new.wrapping_sub(old) as u16)
}

/// A doorbell register, optionally fronted by a shadow doorbell.
pub(crate) struct DoorbellWriter {
    mmio: Doorbell,
    shadow: Option<ShadowSlot>,
}

impl DoorbellWriter {
    pub(crate) fn new(mmio: Doorbell) -> Self {
        Self { mmio, shadow: None }
    }

    pub(crate) fn set_shadow(&mut self, slot: Option<ShadowSlot>) {
        self.shadow = slot;
    }

    /// Publishes `new` (previous value `old`); returns whether an MMIO write happened. The
    /// caller has already issued [`barrier::before_doorbell`], which orders the ring accesses
    /// before it.
    #[inline(always)]
    fn publish(&self, old: u32, new: u32) -> bool {
        match &self.shadow {
            Some(slot) => {
                if slot.update(old, new) {
                    self.mmio.ring(new);
                    true
                } else {
                    false
                }
            }
            None => {
                self.mmio.ring(new);
                true
            }
        }
    }
}

/// Phase tag in the CQE's fourth dword (bit 16: bit 0 of the status half, NVMe Base §4.6).
const CQE_PHASE_BIT: u32 = 1 << 16;

/// Submission queue ring: the host writes entries, the controller reads them.
///
/// INVARIANT: `base` is `region`'s first byte (set once in `new`; the region never moves),
/// kept here so that an access to an entry loads no pointer through the region's mapping.
pub(crate) struct SqRing {
    base: NonNull<SubmissionEntry>,
    region: DmaRegion,
    entries: u32,
    /// Next slot the host fills.
    tail: u32,
    /// Tail value last written to the doorbell.
    published_tail: u32,
    /// Controller's consumption point, from the SQ Head Pointer of validated completions.
    head: u32,
    /// The tail at which the ring is full (the slot before `head`): set whenever `head`
    /// moves (once per reaped batch), so that the check before every submission is one
    /// compare instead of a wrap-around increment and a compare.
    full_at: u32,
    doorbell: DoorbellWriter,
}

/// Zeroes a ring's memory.
///
/// The caller guarantees the controller does not access the region: it is disabled (CSTS.RDY
/// read 0 after CC.EN was cleared) or the queue was deleted.
fn zero(region: &DmaRegion) {
    // SAFETY: the region is `len` bytes of mapped memory owned by the ring; by the caller's
    // guarantee no device access is concurrent, and the host accesses it only through this
    // ring, which `&mut self` (at the callers) makes exclusive.
    unsafe { std::ptr::write_bytes(region.as_ptr().as_ptr(), 0, region.len()) };
}

impl SqRing {
    /// Back to the state of a new queue (indices 0, ring zeroed, MMIO doorbell only), for
    /// re-creating it after a controller reset. The controller must not be using the ring.
    pub(crate) fn reset(&mut self) {
        zero(&self.region);
        self.tail = 0;
        self.published_tail = 0;
        self.set_head(0);
        self.doorbell.set_shadow(None);
    }

    pub(crate) fn new(
        dma: &Arc<dyn DmaMapper>,
        entries: u32,
        doorbell: Doorbell,
    ) -> Result<Self, DmaError> {
        let region = DmaRegion::allocate(dma, entries as usize * SQE_SIZE)?;
        Ok(Self {
            base: region.as_ptr().cast(),
            region,
            entries,
            tail: 0,
            published_tail: 0,
            head: 0,
            full_at: entries - 1,
            doorbell: DoorbellWriter::new(doorbell),
        })
    }

    /// Routes doorbell writes through a shadow doorbell (or back to plain MMIO).
    pub(crate) fn set_shadow(&mut self, slot: Option<ShadowSlot>) {
        self.doorbell.set_shadow(slot);
    }

    /// Local tail (next slot to fill).
    pub(crate) fn tail(&self) -> u32 {
        self.tail
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
        debug_assert_eq!(self.full_at == self.tail, self.next(self.tail) == self.head);
        self.tail == self.full_at
    }

    /// Moves the head (and the full mark with it).
    #[inline(always)]
    fn set_head(&mut self, head: u32) {
        self.head = head;
        self.full_at = if head == 0 {
            self.entries - 1
        } else {
            head - 1
        };
    }

    /// Free entries left in the ring.
    #[inline(always)]
    pub(crate) fn free_entries(&self) -> u32 {
        // `head` and `tail` are both below `entries`, so one conditional subtraction does
        // what a `%` (a division) would.
        let free = self.head + self.entries - self.tail - 1;
        if free >= self.entries {
            free - self.entries
        } else {
            free
        }
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
        // SAFETY: `tail < entries`, and `base` starts the region (type invariant), which holds
        // `entries` SQEs (64-byte aligned since the region is page aligned). The slot is not
        // being read by the controller: it lies between the published tail and the head,
        // which the controller does not fetch from until the doorbell moves past it.
        unsafe {
            let slot = self.base.as_ptr().add(self.tail as usize);
            // A plain store (not volatile) lets the compiler build the entry in place instead
            // of on the stack and copying it; `publish` orders it before the doorbell with a
            // release fence, and the region's pointer escaped to the device mapping, so the
            // store is never elided.
            slot.write(*sqe);
        }
        self.tail = self.next(self.tail);
    }

    /// Publishes the tail if it moved since the last time. Returns `None` if there was
    /// nothing to publish, else whether an MMIO doorbell write happened (a shadow doorbell
    /// may make it unnecessary).
    #[inline(always)]
    pub(crate) fn publish(&mut self) -> Option<bool> {
        if self.tail == self.published_tail {
            return None;
        }
        // Orders the SQE stores before the doorbell (or shadow) store: the controller may
        // fetch the entries as soon as it sees the new tail.
        barrier::before_doorbell();
        let mmio = self.doorbell.publish(self.published_tail, self.tail);
        self.published_tail = self.tail;
        Some(mmio)
    }

    /// Records the controller's SQ head from a completion. The head may only move forward
    /// through entries the host has published: a value outside `[head, published tail]` (in
    /// ring order) is untrusted garbage and ignored (the caller counts it), since accepting it
    /// would let the host overwrite entries the controller has not fetched. Returns false for
    /// such values.
    #[inline(always)]
    pub(crate) fn update_head(&mut self, head: u16) -> bool {
        let head = head as u32;
        let (from, to) = (self.head, self.published_tail);
        // Compares against the window's two ends instead of computing two ring distances.
        let inside = if from <= to {
            // `[from, to]`, not wrapped (`to < entries`, so `head` is in range).
            from <= head && head <= to
        } else {
            // Wrapped: `[from, entries)` then `[0, to]`.
            (from <= head && head < self.entries) || head <= to
        };
        if inside {
            self.set_head(head);
        }
        inside
    }
}

/// Completion queue ring: the controller writes entries, the host reads them.
///
/// INVARIANT: `base` is `region`'s first byte, as for [`SqRing`]; `head_entry` is
/// `base + head` (the entry at the head, kept so that a poll loads one pointer instead of
/// computing the entry's address from two fields).
pub(crate) struct CqRing {
    base: NonNull<CompletionEntry>,
    head_entry: NonNull<CompletionEntry>,
    region: DmaRegion,
    entries: u32,
    head: u32,
    /// The phase tag bit of a new entry as it stands in the CQE's fourth dword
    /// ([`CQE_PHASE_BIT`] at first, 0 after the first wrap, flipping on every wrap): a poll
    /// compares the masked dword with it directly.
    phase_tag: u32,
    doorbell: DoorbellWriter,
    /// Head value last written to the doorbell.
    published_head: u32,
    /// How many consumed entries [`CqRing::publish_lazy`] may leave unpublished: the ring's
    /// entries beyond what the commands that can be in flight at once need (0: publish
    /// every time the head moved).
    slack: u32,
}

// SAFETY: `base` points into `region`, which the ring owns (as it owns the region's other
// users); the ring is used by one thread at a time (`&mut self` for every write), exactly as
// if it reached the memory through `region` (which is `Send`) on each access.
unsafe impl Send for SqRing {}
// SAFETY: as for `SqRing`.
unsafe impl Send for CqRing {}

impl CqRing {
    /// Back to the state of a new queue (head 0, phase 1, ring zeroed so no stale entry looks
    /// new, MMIO doorbell only). The controller must not be using the ring.
    pub(crate) fn reset(&mut self) {
        zero(&self.region);
        self.head = 0;
        self.head_entry = self.base;
        self.phase_tag = CQE_PHASE_BIT;
        self.published_head = 0;
        self.doorbell.set_shadow(None);
    }

    /// A ring of `entries` entries of which `slack` may stay consumed but unpublished (see
    /// [`CqRing::publish_lazy`]); the caller guarantees that at most `entries - 1 - slack`
    /// commands completing to this ring are ever outstanding at once.
    pub(crate) fn new(
        dma: &Arc<dyn DmaMapper>,
        entries: u32,
        slack: u32,
        doorbell: Doorbell,
    ) -> Result<Self, DmaError> {
        assert!(slack < entries, "a CQ's slack is below its size");
        let region = DmaRegion::allocate(dma, entries as usize * CQE_SIZE)?;
        let base = region.as_ptr().cast();
        Ok(Self {
            base,
            head_entry: base,
            region,
            entries,
            head: 0,
            phase_tag: CQE_PHASE_BIT,
            doorbell: DoorbellWriter::new(doorbell),
            published_head: 0,
            slack,
        })
    }

    /// Number of entries (the size the Create I/O Completion Queue command gives).
    pub(crate) fn entries(&self) -> u32 {
        self.entries
    }

    /// Routes doorbell writes through a shadow doorbell (or back to plain MMIO).
    pub(crate) fn set_shadow(&mut self, slot: Option<ShadowSlot>) {
        self.doorbell.set_shadow(slot);
    }

    /// Local head (next entry to read).
    pub(crate) fn head(&self) -> u32 {
        self.head
    }

    pub(crate) fn iova(&self) -> Iova {
        self.region.iova()
    }

    /// Whether the controller has posted the entry at the head (nothing is consumed).
    #[inline]
    pub(crate) fn has_entry(&self) -> bool {
        self.ready()
    }

    /// Whether the controller has posted the entry at the head (its phase tag is the current
    /// one); nothing is consumed.
    #[inline(always)]
    pub(crate) fn ready(&self) -> bool {
        debug_assert!(self.head < self.entries);
        debug_assert_eq!(
            self.head_entry.as_ptr(),
            self.base.as_ptr().wrapping_add(self.head as usize)
        );
        // SAFETY: `head_entry` is `base + head` with `head < entries` (type invariant), an
        // entry of the region, which holds `entries` 16-byte CQEs. The controller may be
        // writing this slot concurrently: one volatile load of the dword holding the tag.
        let status_dword = unsafe {
            self.head_entry
                .as_ptr()
                .cast::<u32>()
                .add(3)
                .read_volatile()
        };
        status_dword & CQE_PHASE_BIT == self.phase_tag
    }

    /// Returns the entry at the head if the controller has posted it, and advances the head.
    /// The head doorbell is not written here (see [`CqRing::publish`]).
    #[inline(always)]
    pub(crate) fn pop(&mut self) -> Option<CompletionEntry> {
        if !self.ready() {
            return None;
        }
        Some(self.take_ready())
    }

    /// The entry at the head, which [`CqRing::ready`] has just found posted (its phase tag
    /// loaded, nothing taken since); advances the head. Lets a reaping loop test each phase
    /// tag once: `ready` before the first entry and after each one, `take_ready` for the entry.
    #[inline(always)]
    pub(crate) fn take_ready(&mut self) -> CompletionEntry {
        debug_assert!(self.head < self.entries);
        debug_assert!(self.ready(), "take_ready without a posted entry");
        // Orders the phase-tag load (in `ready`) before the loads of the rest of the entry, so
        // we never combine a new phase with stale contents.
        barrier::dma_rmb();
        // SAFETY: `head_entry` is `base + head` with `head < entries` (type invariant), an
        // entry of the region. The controller may be writing this slot concurrently, so it is
        // read with a volatile load only.
        let entry = unsafe { self.head_entry.as_ptr().read_volatile() };
        self.head += 1;
        if self.head == self.entries {
            self.head = 0;
            self.head_entry = self.base;
            self.phase_tag ^= CQE_PHASE_BIT;
        } else {
            // SAFETY: `head < entries` after the increment, so `base + head` (one entry past
            // the old head) is still inside the region.
            self.head_entry = unsafe { self.head_entry.add(1) };
        }
        entry
    }

    /// Publishes the head if it moved (once per reaped batch). Returns `None` if there was
    /// nothing to publish, else whether an MMIO doorbell write happened.
    #[inline(always)]
    pub(crate) fn publish(&mut self) -> Option<bool> {
        if self.head == self.published_head {
            return None;
        }
        // The entries were fully read before the controller may reuse the slots: order those
        // loads before the doorbell (or shadow) store.
        barrier::before_doorbell();
        let mmio = self.doorbell.publish(self.published_head, self.head);
        self.published_head = self.head;
        Some(mmio)
    }

    /// Publishes the head only once more than `slack` consumed entries are unpublished;
    /// otherwise as [`CqRing::publish`].
    ///
    /// Why this is enough (Completion Queue flow control, NVMe Base 2.0 §3.3.1.2.2: a
    /// controller that finds no free slot stops posting until the head moves): from the
    /// controller's side the ring holds the unpublished entries plus those it has posted and
    /// we have not consumed, at most the outstanding commands, so at most
    /// `slack + (entries - 1 - slack) = entries - 1`, never more than a full ring, and no
    /// completion ever waits for a head doorbell. Consuming an entry moves it from the second
    /// group to the first, so only a new submission can raise the sum: the caller calls this
    /// before each tail doorbell (and may after reaping).
    #[inline(always)]
    pub(crate) fn publish_lazy(&mut self) -> Option<bool> {
        let unpublished = if self.head >= self.published_head {
            self.head - self.published_head
        } else {
            self.head + self.entries - self.published_head
        };
        if unpublished <= self.slack {
            return None;
        }
        self.publish()
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
    pub(crate) fn new(
        dma: &Arc<dyn DmaMapper>,
        slots: usize,
        page_size: usize,
    ) -> Result<Self, DmaError> {
        Ok(Self {
            region: DmaRegion::allocate(dma, slots * page_size)?,
            page_size,
            slots,
        })
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
        let base = self
            .region
            .as_ptr()
            .as_ptr()
            .wrapping_add(index * self.page_size)
            .cast::<u64>();
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Identity mapper over leaked test memory.
    struct TestMapper(nvme_vfio::DmaDomain);

    // SAFETY: identity mapping; memory stays alive for the test.
    unsafe impl DmaMapper for TestMapper {
        unsafe fn map(&self, vaddr: NonNull<u8>, _len: usize) -> Result<Iova, DmaError> {
            Ok(Iova(vaddr.as_ptr() as u64))
        }
        fn unmap(&self, _iova: Iova, _len: usize) -> Result<(), DmaError> {
            Ok(())
        }
        fn domain(&self) -> nvme_vfio::DmaDomain {
            self.0
        }
    }

    fn sq(entries: u32) -> SqRing {
        let regs = Box::leak(Box::new([0u32; 4]));
        let ptr = NonNull::from(&mut regs[0]).cast::<u8>();
        // SAFETY: 16 bytes of leaked memory, 4-byte aligned, never freed.
        let mmio = unsafe { nvme_vfio::Mmio::new(ptr, 16, Arc::new(())) };
        let dma: Arc<dyn DmaMapper> = Arc::new(TestMapper(nvme_vfio::DmaDomain::unique()));
        SqRing::new(&dma, entries, mmio.doorbell(0)).unwrap()
    }

    #[test]
    fn sq_head_only_moves_through_published_entries() {
        let mut q = sq(8);
        let e = SubmissionEntry::default();
        for _ in 0..3 {
            q.push(&e);
        }
        // Pushed but not published: the controller cannot have consumed any of them.
        assert!(!q.update_head(1));
        assert!(q.update_head(0), "no movement is always valid");
        q.publish();
        assert!(!q.update_head(4), "beyond the published tail");
        assert!(!q.update_head(7), "behind the current head");
        assert!(!q.update_head(200), "out of range");
        assert!(q.update_head(2));
        assert!(!q.update_head(1), "the head never moves back");
        assert!(q.update_head(3));
        assert_eq!(q.free_entries(), 7);
        // Across the wrap.
        for _ in 0..6 {
            q.push(&e);
        }
        q.publish();
        assert!(q.update_head(0));
        assert!(!q.update_head(2), "past the tail at 1");
        assert!(q.update_head(1));
    }

    /// `update_head`'s window test against its definition (the head moves forward, in ring
    /// order, by at most as many entries as lie between it and the published tail), for every
    /// head, published tail and reported value of small rings, out-of-range values included.
    #[test]
    fn sq_head_window_matches_ring_distances() {
        for entries in [2u32, 3, 8] {
            let distance = |from: u32, to: u32| {
                if to >= from {
                    to - from
                } else {
                    to + entries - from
                }
            };
            for head in 0..entries {
                for tail in 0..entries {
                    for reported in 0..entries + 3 {
                        let mut q = sq(entries);
                        q.set_head(head);
                        q.published_tail = tail;
                        let want =
                            reported < entries && distance(head, reported) <= distance(head, tail);
                        assert_eq!(
                            q.update_head(reported as u16),
                            want,
                            "entries {entries}, head {head}, tail {tail}, reported {reported}"
                        );
                        assert_eq!(q.head, if want { reported } else { head });
                    }
                }
            }
        }
    }

    /// `is_full` (the precomputed full mark) across head moves and wrap-arounds: the ring
    /// takes `entries - 1` commands, then none until the head moves.
    #[test]
    fn full_mark_follows_the_head() {
        let mut q = sq(4);
        let e = SubmissionEntry::default();
        for _ in 0..4 {
            for _ in 0..3 {
                assert!(!q.is_full());
                q.push(&e);
            }
            assert!(q.is_full());
            assert_eq!(q.free_entries(), 0);
            q.publish();
            // The controller consumed one entry: room for exactly one more.
            let one = if q.head + 1 == 4 { 0 } else { q.head + 1 };
            assert!(q.update_head(one as u16));
            assert!(!q.is_full());
            q.push(&e);
            assert!(q.is_full());
            q.publish();
            assert!(q.update_head(q.tail() as u16));
            assert_eq!(q.free_entries(), 3);
        }
    }

    #[test]
    fn event_index_rule() {
        // Controller caught up to the old tail: it asks for a write.
        assert!(need_event(5, 6, 5));
        // Controller's index already beyond the new value: no write.
        assert!(!need_event(10, 6, 5));
        // Index behind the old value (controller still busy): no write.
        assert!(!need_event(3, 8, 5));
        // Inside the published range.
        assert!(need_event(6, 8, 5));
        // Wrap-around in 16 bits.
        assert!(need_event(0xffff, 1, 0xfffe));
    }
}
