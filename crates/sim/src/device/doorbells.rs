//! Doorbells: the MMIO registers and, after Doorbell Buffer Config (NVMe Base 2.0 §5.8), the
//! shadow doorbell and EventIdx buffers in host memory.
//!
//! INVARIANTS: a doorbell value counts as written only when it differs from the last value
//! seen (`mmio_seen`, `shadow_seen`); with shadow doorbells on, the shadow entry is
//! authoritative and an MMIO write only says "look". A queue whose entry lies outside the
//! one-page shadow buffers keeps using its MMIO doorbell.

use nvme_spec::regs::{cq_head_doorbell, DOORBELL_BASE};

use super::{Device, DoorbellSource, ShadowBuffers};
use crate::dma::GuestView;
use crate::regs::BAR_SIZE;
use crate::stats::bump;

impl Device {
    /// Whether both doorbells of queue pair `qid` lie inside the BAR (with a large CAP.DSTRD
    /// the later ones do not: such queues cannot be created).
    pub(crate) fn doorbells_reachable(&self, qid: u16) -> bool {
        cq_head_doorbell(qid, self.stride)
            .checked_add(4)
            .is_some_and(|end| end <= BAR_SIZE)
    }

    /// A doorbell source for a new queue, remembering the current register and shadow values
    /// so that only later changes count as writes.
    pub(super) fn doorbell_source(
        &self,
        offset: usize,
        view: Option<&GuestView<'_>>,
    ) -> DoorbellSource {
        let mut source = DoorbellSource {
            offset,
            mmio_seen: self.regs().load(offset),
            shadow_seen: 0,
            event_written: None,
        };
        if let Some(view) = view {
            self.resync_shadow(view, &mut source);
        }
        source
    }

    /// The shadow buffers and the entry offset of `source` in them, when shadow doorbells are
    /// on and the entry lies inside the one-page buffers (with a large CAP.DSTRD it may not:
    /// such a queue keeps using its MMIO doorbell only).
    fn shadow_entry(&self, source: &DoorbellSource) -> Option<(ShadowBuffers, u64)> {
        let shadow = self.shadow?;
        let offset = source.offset - DOORBELL_BASE;
        (offset + 4 <= self.page_size).then_some((shadow, offset as u64))
    }

    /// Snapshots the shadow entry of `source` (when shadow doorbells are on) and forgets the
    /// last EventIdx written, so the next poll publishes it.
    fn resync_shadow(&self, view: &GuestView<'_>, source: &mut DoorbellSource) {
        source.event_written = None;
        if let Some((shadow, offset)) = self.shadow_entry(source) {
            let entry = shadow.doorbells + offset;
            match view.read_u32(entry) {
                Ok(value) => source.shadow_seen = value,
                Err(fault) => self.dma_error(fault, "shadow doorbell read"),
            }
        }
    }

    /// Re-snapshots every queue's shadow entry (after Doorbell Buffer Config).
    pub(super) fn resync_all_shadows(&mut self, view: &GuestView<'_>) {
        let mut sqs = std::mem::take(&mut self.sqs);
        let mut cqs = std::mem::take(&mut self.cqs);
        for sq in sqs.iter_mut().flatten() {
            self.resync_shadow(view, &mut sq.doorbell);
        }
        for cq in cqs.iter_mut().flatten() {
            self.resync_shadow(view, &mut cq.doorbell);
        }
        self.sqs = sqs;
        self.cqs = cqs;
    }

    /// Reads a doorbell value. Without shadow doorbells: the register, if it changed. With
    /// them, the shadow entry is authoritative (NVMe Base §5.8): an MMIO write only tells the
    /// device to look, because the host stores the shadow entry before the register and a
    /// register value read here may already be older than the shadow entry.
    /// Returns the new value, if any.
    pub(super) fn read_doorbell(
        &self,
        view: &GuestView<'_>,
        source: &mut DoorbellSource,
        sq: bool,
    ) -> Option<u32> {
        let counters = &self.shared.counters;
        let mmio = self.regs().load(source.offset);
        let mmio_changed = mmio != source.mmio_seen;
        if mmio_changed {
            source.mmio_seen = mmio;
            bump(if sq {
                &counters.sq_doorbell_writes
            } else {
                &counters.cq_doorbell_writes
            });
        }
        let Some((shadow, offset)) = self.shadow_entry(source) else {
            return mmio_changed.then_some(mmio);
        };
        let entry = shadow.doorbells + offset;
        match view.read_u32(entry) {
            Ok(value) if value != source.shadow_seen => {
                source.shadow_seen = value;
                bump(&counters.shadow_doorbell_updates);
                Some(value)
            }
            Ok(_) => None,
            Err(fault) => {
                self.dma_error(fault, "shadow doorbell read");
                None
            }
        }
    }

    /// Publishes `value` as the EventIdx of a queue (when shadow doorbells are on and it moved).
    pub(super) fn write_event_idx(
        &self,
        view: &GuestView<'_>,
        source: &mut DoorbellSource,
        value: u32,
    ) {
        let Some((shadow, offset)) = self.shadow_entry(source) else {
            return;
        };
        if source.event_written == Some(value) {
            return;
        }
        let entry = shadow.event_idx + offset;
        match view.write_u32(entry, value) {
            Ok(()) => source.event_written = Some(value),
            Err(fault) => self.dma_error(fault, "EventIdx write"),
        }
    }

    pub(super) fn invalid_doorbell(&self, qid: usize, what: &str, value: u32, size: u32) {
        bump(&self.shared.counters.invalid_doorbell_writes);
        log::warn!(
            "sim: ignoring {what} doorbell value {value} for queue {qid}: the queue has {size} \
             entries (valid values 0..{size})"
        );
    }
}
