//! The send side of a connection: an ordered queue of byte runs (PDU headers, digests,
//! response capsules and admin data, kept in one reusable byte buffer) and references to
//! command slots' buffers (read data, sent from the backend's DMA buffer without a copy), sent
//! with vectored writes on the non-blocking socket. A release marker after a command's last
//! bytes hands its slot back once everything before it is on the wire.
//!
//! INVARIANT: segments go out in the order they were queued; a slot named by a queued segment
//! keeps its buffer until its release marker is reached.

use std::collections::VecDeque;
use std::io::{ErrorKind, IoSlice, Write};

use nvme_spec::tcp::{self, PduFrame};

use super::Slot;
use crate::trace::{self, Ev};

/// Sent bytes kept at the front of the byte buffer before it is compacted.
const COMPACT_AT: usize = 64 << 10;
/// Slices handed to one vectored write.
const IOV_MAX: usize = 16;

#[derive(Clone, Copy, Debug)]
enum Seg {
    /// The next `n` bytes of the byte buffer.
    Bytes(usize),
    /// `len` bytes at `start` of slot `slot`'s buffer.
    Slot { slot: u16, start: usize, len: usize },
    /// Everything before is sent: slot `slot` may be reused.
    Release(u16),
}

impl Seg {
    fn len(&self) -> usize {
        match *self {
            Seg::Bytes(n) => n,
            Seg::Slot { len, .. } => len,
            Seg::Release(_) => 0,
        }
    }
}

/// Send state of one connection.
#[derive(Default)]
pub(super) struct Tx {
    bytes: Vec<u8>,
    /// Start of the unsent part of `bytes` that the front segment (if Bytes) begins at.
    cursor: usize,
    segs: VecDeque<Seg>,
    /// Bytes of the front segment already sent.
    off: usize,
}

impl Tx {
    /// Nothing queued.
    pub fn is_empty(&self) -> bool {
        self.segs.is_empty()
    }

    fn note_bytes(&mut self, n: usize) {
        if n == 0 {
            return;
        }
        match self.segs.back_mut() {
            Some(Seg::Bytes(m)) => *m += n,
            _ => self.segs.push_back(Seg::Bytes(n)),
        }
    }

    /// Queues raw bytes.
    pub fn push_bytes(&mut self, b: &[u8]) {
        self.bytes.extend_from_slice(b);
        self.note_bytes(b.len());
    }

    /// Queues a PDU framed by the codec: `header` (common header filled here), optional
    /// `data` (copied), digests as negotiated, data aligned to `align`.
    pub fn push_pdu(
        &mut self,
        header: &mut [u8],
        data: Option<&[u8]>,
        digests: tcp::Digests,
        align: usize,
    ) {
        let before = self.bytes.len();
        tcp::frame_pdu(&mut self.bytes, header, data, digests, align);
        self.note_bytes(self.bytes.len() - before);
    }

    /// Queues a data PDU whose data is `data` = `slot`'s buffer `start..start + len`: the
    /// header (and its digest and padding) as bytes, the data by reference, the data digest.
    pub fn push_slot_pdu(
        &mut self,
        frame: &PduFrame,
        header: &[u8],
        slot: u16,
        start: usize,
        data: &[u8],
    ) {
        let before = self.bytes.len();
        self.bytes.extend_from_slice(header);
        if frame.hdgst {
            self.bytes
                .extend_from_slice(&tcp::crc32c(header).to_le_bytes());
        }
        self.bytes.resize(before + frame.pdo, 0);
        self.note_bytes(self.bytes.len() - before);
        self.segs.push_back(Seg::Slot {
            slot,
            start,
            len: data.len(),
        });
        if frame.ddgst {
            self.push_bytes(&tcp::crc32c(data).to_le_bytes());
        }
    }

    /// Queues the release of `slot` after everything queued so far.
    pub fn push_release(&mut self, slot: u16) {
        self.segs.push_back(Seg::Release(slot));
    }

    fn pop_releases(&mut self, released: &mut Vec<u16>) {
        while let Some(&Seg::Release(slot)) = self.segs.front() {
            released.push(slot);
            self.segs.pop_front();
        }
    }

    /// Sends what the socket takes now; the slots whose release was reached go to
    /// `released`. True if anything was sent.
    pub fn flush<S: Write>(
        &mut self,
        s: &mut S,
        slots: &[Slot],
        released: &mut Vec<u16>,
    ) -> std::io::Result<bool> {
        let mut progress = false;
        if self.cursor >= COMPACT_AT {
            // A connection that never drains completely: drop the sent bytes (a move, the
            // capacity stays).
            self.bytes.drain(..self.cursor);
            self.cursor = 0;
        }
        loop {
            self.pop_releases(released);
            if self.segs.is_empty() {
                self.bytes.clear();
                self.cursor = 0;
                return Ok(progress);
            }
            let mut iov = [IoSlice::new(&[]); IOV_MAX];
            let mut k = 0;
            let mut cur = self.cursor;
            for (i, seg) in self.segs.iter().enumerate() {
                if k == IOV_MAX {
                    break;
                }
                let skip = if i == 0 { self.off } else { 0 };
                let slice: &[u8] = match *seg {
                    Seg::Bytes(n) => {
                        let b = &self.bytes[cur + skip..cur + n];
                        cur += n;
                        b
                    }
                    Seg::Slot { slot, start, len } => {
                        match slots
                            .get(usize::from(slot))
                            .and_then(|s| s.buf.as_ref())
                            .and_then(|b| b.get(start + skip..start + len))
                        {
                            Some(b) => b,
                            None => {
                                return Err(std::io::Error::other("slot buffer missing"));
                            }
                        }
                    }
                    Seg::Release(_) => continue,
                };
                if !slice.is_empty() {
                    iov[k] = IoSlice::new(slice);
                    k += 1;
                }
            }
            if trace::on() {
                trace::ev(Ev::Write, iov[..k].iter().map(|v| v.len() as u32).sum(), 0);
            }
            let written = s.write_vectored(&iov[..k]);
            trace::ev(Ev::Wrote, *written.as_ref().unwrap_or(&0) as u32, 0);
            let mut n = match written {
                Ok(0) => return Err(ErrorKind::WriteZero.into()),
                Ok(n) => n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(progress),
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            progress = true;
            while n > 0 {
                let Some(front) = self.segs.front().copied() else {
                    break;
                };
                let left = front.len() - self.off;
                if n >= left {
                    n -= left;
                    if let Seg::Bytes(len) = front {
                        self.cursor += len;
                    }
                    self.segs.pop_front();
                    self.off = 0;
                    self.pop_releases(released);
                } else {
                    self.off += n;
                    n = 0;
                }
            }
        }
    }
}
