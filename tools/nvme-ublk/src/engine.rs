//! [`Engine`]: one ublk queue's requests on one queue pair of our driver, without the kernel.
//!
//! The ublk side (the kernel's tag, its descriptor, the kernel's I/O buffer) comes in through
//! [`Engine::start`] and goes out through the callback of [`Engine::poll`]; the NVMe side is
//! any [`BlockQueue`] (an [`IoQueue`] that can also deallocate). So the mapping and the data
//! path run in `cargo test` against the emulator, and the same code serves `/dev/ublkbN`.
//!
//! Memory: one DMA buffer per tag, allocated once (depth x the largest I/O). A write's data
//! is copied from the kernel's I/O buffer into the tag's DMA buffer, a read's from the DMA
//! buffer into the kernel's I/O buffer: one copy by us (the kernel's own copy between the
//! request's pages and the ublk I/O buffer is the other). Nothing is allocated, locked or
//! called into the kernel per request, except a replacement buffer after a failed request
//! whose buffer the driver kept (the controller may still reach it).

use std::sync::Arc;

use nvme_device::AnyQueuePair;
use nvme_driver::{DmaBuffer, DmaMapper, Error, IoQueue, Namespace, WriteFlags};

use crate::mapping::{map, Geometry, IoDesc, Request};

/// A queue pair a ublk queue can be served from: the [`IoQueue`] operations plus
/// Deallocate (Dataset Management, NVM CS §3.3.3), a PCIe-only operation of our driver.
pub trait BlockQueue: IoQueue {
    /// Queues a deallocate of `blocks` blocks at `lba`.
    fn submit_discard(
        &mut self,
        ns: &Namespace,
        lba: u64,
        blocks: u32,
        user_data: u64,
    ) -> Result<(), Error>;
}

impl BlockQueue for AnyQueuePair {
    fn submit_discard(
        &mut self,
        ns: &Namespace,
        lba: u64,
        blocks: u32,
        user_data: u64,
    ) -> Result<(), Error> {
        let qid = IoQueue::qid(self);
        match self.as_pcie_mut() {
            Some(q) => q.submit_deallocate(ns, &[(lba, blocks)], user_data),
            None => Err(Error::Unsupported {
                controller: format!("queue {qid}"),
                what: "Dataset Management over NVMe/TCP".into(),
            }),
        }
    }
}

/// What became of a request handed to [`Engine::start`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Started {
    /// On the queue pair: its result comes through [`Engine::poll`].
    Queued,
    /// Finished at once with this result (a negative errno: refused or not submitted).
    Done(i32),
}

/// One tag's state.
#[derive(Debug)]
struct Slot {
    /// The tag's DMA buffer while it is not on the queue pair (`None` while it is, or after
    /// the driver kept it and no replacement could be allocated).
    buf: Option<DmaBuffer>,
    /// Result of a success: the bytes of the request (what ublk expects for every op).
    bytes: i32,
    /// Data bytes to copy back to the kernel's buffer (a read's), 0 otherwise.
    read_bytes: usize,
    /// On the queue pair.
    busy: bool,
}

/// Counters of one engine.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EngineStats {
    /// Requests completed successfully.
    pub ok: u64,
    /// Requests completed with an errno (refused, not submitted, or failed by the device).
    pub failed: u64,
}

/// One ublk queue served by one queue pair (see the module doc).
pub struct Engine<Q> {
    queue: Q,
    ns: Namespace,
    geo: Geometry,
    mapper: Arc<dyn DmaMapper>,
    slots: Box<[Slot]>,
    in_flight: usize,
    stats: EngineStats,
}

impl<Q: BlockQueue> Engine<Q> {
    /// An engine for `depth` tags on `queue`, with one `geo.max_io_bytes` DMA buffer per tag
    /// from `mapper` (the controller's).
    pub fn new(
        queue: Q,
        ns: Namespace,
        geo: Geometry,
        depth: u16,
        mapper: &Arc<dyn DmaMapper>,
    ) -> Result<Self, Error> {
        let bufs = DmaBuffer::allocate_many(mapper, depth.into(), geo.max_io_bytes as usize)?;
        let slots = bufs
            .into_iter()
            .map(|b| Slot {
                buf: Some(b),
                bytes: 0,
                read_bytes: 0,
                busy: false,
            })
            .collect();
        Ok(Engine {
            queue,
            ns,
            geo,
            mapper: mapper.clone(),
            slots,
            in_flight: 0,
            stats: EngineStats::default(),
        })
    }

    /// Requests on the queue pair.
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// The counters so far.
    pub fn stats(&self) -> EngineStats {
        self.stats
    }

    /// Starts the request of `tag` that `desc` describes; `data` is the kernel's I/O buffer
    /// of the tag (a write's data is read from it).
    pub fn start(&mut self, tag: u16, desc: &IoDesc, data: &[u8]) -> Started {
        let started = self.submit(tag, desc, data);
        match started {
            Started::Queued => self.in_flight += 1,
            Started::Done(_) => self.stats.failed += 1,
        }
        started
    }

    fn submit(&mut self, tag: u16, desc: &IoDesc, data: &[u8]) -> Started {
        let Some(slot) = self.slots.get_mut(usize::from(tag)) else {
            log::error!(
                "ublk tag {tag} is beyond the queue's {} tags",
                self.slots.len()
            );
            return Started::Done(-libc::EINVAL);
        };
        if slot.busy {
            log::error!("ublk tag {tag} arrived again while its request is in flight");
            return Started::Done(-libc::EBUSY);
        }
        let req = match map(desc, &self.geo) {
            Ok(r) => r,
            Err(e) => {
                log::warn!("ublk tag {tag}: {e}");
                return Started::Done(e.errno());
            }
        };
        let data_bytes = req.data_bytes(self.geo.block_size);
        let user_data = u64::from(tag);
        let (q, ns) = (&mut self.queue, &self.ns);
        let submitted = match req {
            Request::Read { .. } | Request::Write { .. } => {
                let Some(mut buf) = slot.buf.take() else {
                    return Started::Done(-libc::ENOMEM);
                };
                let r = match req {
                    Request::Write { lba, blocks, fua } => {
                        let Some(src) = data.get(..data_bytes) else {
                            slot.buf = Some(buf);
                            return Started::Done(-libc::EINVAL);
                        };
                        buf[..data_bytes].copy_from_slice(src);
                        let flags = if fua {
                            WriteFlags::FUA
                        } else {
                            WriteFlags::NONE
                        };
                        q.submit_write(ns, lba, blocks, buf, flags, user_data)
                    }
                    Request::Read { lba, blocks } => q.submit_read(ns, lba, blocks, buf, user_data),
                    _ => unreachable!("only data commands take this branch"),
                };
                r.map_err(|f| {
                    slot.buf = f.buffer;
                    f.error
                })
            }
            Request::Flush => q.submit_flush(ns, user_data),
            Request::Discard { lba, blocks } => q.submit_discard(ns, lba, blocks, user_data),
            Request::WriteZeroes {
                lba,
                blocks,
                deallocate,
            } => q.submit_write_zeroes(ns, lba, blocks, deallocate, user_data),
        };
        match submitted {
            Ok(()) => {
                slot.busy = true;
                slot.bytes = desc.bytes() as i32;
                slot.read_bytes = if matches!(req, Request::Read { .. }) {
                    data_bytes
                } else {
                    0
                };
                Started::Queued
            }
            Err(e) => {
                log::warn!("ublk tag {tag}: submission refused: {e}");
                Started::Done(-libc::EIO)
            }
        }
    }

    /// Reaps finished requests: `done(tag, result, read_data)` for each, where `result` is
    /// the request's bytes or a negative errno (`EIO` for any error of the device or the
    /// driver), and `read_data` a read's data (empty otherwise, and on failure). Returns how
    /// many finished.
    pub fn poll<F: FnMut(u16, i32, &[u8])>(&mut self, mut done: F) -> usize {
        let Engine {
            queue,
            slots,
            mapper,
            geo,
            in_flight,
            stats,
            ..
        } = self;
        queue.poll(|c| {
            let tag = c.user_data as usize;
            let Some(slot) = slots.get_mut(tag).filter(|s| s.busy) else {
                log::error!("completion for ublk tag {tag}, which is not in flight: dropped");
                return;
            };
            slot.busy = false;
            *in_flight -= 1;
            if let Some(b) = c.buffer {
                slot.buf = Some(b);
            } else if slot.buf.is_none() {
                // The driver kept the buffer (the controller may still write it): the tag gets
                // a new one, so the next request of this tag cannot meet late DMA.
                slot.buf = DmaBuffer::allocate(mapper, geo.max_io_bytes as usize)
                    .map_err(|e| log::error!("ublk tag {tag}: no replacement buffer: {e}"))
                    .ok();
            }
            match c.result {
                Ok(_) => {
                    stats.ok += 1;
                    let data = match (&slot.buf, slot.read_bytes) {
                        (Some(b), n) if n > 0 => &b[..n],
                        _ => &[][..],
                    };
                    done(tag as u16, slot.bytes, data);
                }
                Err(e) => {
                    stats.failed += 1;
                    log::warn!("ublk tag {tag}: {e}");
                    done(tag as u16, -libc::EIO, &[]);
                }
            }
        })
    }

    /// Polls until nothing is in flight (the driver's command timeout bounds the wait);
    /// results are dropped (the ublk queue is gone).
    pub fn drain(&mut self) {
        while self.in_flight > 0 {
            if self.poll(|_, _, _| {}) == 0 {
                std::thread::yield_now();
            }
        }
    }
}

#[cfg(test)]
#[path = "engine_tests.rs"]
mod tests;
