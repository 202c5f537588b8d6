//! Reads and writes larger than one NVMe/TCP command carries (the controller's MDTS, NVMe
//! Base 2.0 §5.17.2.1), split into several commands on the same queue pair, with one
//! completion for the whole request: the PCIe `QueuePair` splits by itself, the TCP queue pair
//! does not (one command per request, one buffer per command).
//!
//! # How
//!
//! The request's buffer is cut into contiguous pieces ([`DmaBuffer::split_at`], no copy, no
//! allocation), one per command, and each piece is submitted with a *piece* user data
//! ([`PIECE`] set, the group and the piece's position below it). The TCP arm of the poll hands
//! piece completions to [`Splitter::complete`], which keeps the piece until all of its group
//! are back, then puts the buffer back together ([`DmaBuffer::join`]) and reports one
//! [`Completion`] with the request's user data: the first error of any piece wins, and the
//! buffer comes back only if every piece came back (a piece the transport kept — the target
//! may still send data for it — keeps the whole request's buffer away).
//!
//! Requests that fit one command never come here (one comparison in the TCP arm). A split
//! request reserves all its commands up front: it fails with `TransferTooLarge` when the pair
//! has fewer slots than it needs and with `QueueFull` when fewer are free, before anything is
//! sent. Group records are reused, so a warmed-up pair allocates nothing per split request.
//!
//! INVARIANT: user data of requests submitted by the C API is a request index (`u32`), so
//! [`PIECE`] is never set in it; only pieces have it.

use nvme_driver::{
    Completion, DmaBuffer, Error, IoFailure, IoQueue, LbaRange, Namespace, NvmCommand,
    MAX_BLOCKS_PER_COMMAND,
};
use nvme_tcp::TcpQueuePair;

/// User data bit of a piece of a split request.
pub(crate) const PIECE: u64 = 1 << 63;
/// Bits of a piece's position in its group (user data bits 0..16).
const POSITION_BITS: u32 = 16;
const POSITION_MASK: u64 = (1 << POSITION_BITS) - 1;
/// Bits of the group index (user data bits 16..48).
const GROUP_MASK: u64 = u32::MAX as u64;

/// An NVMe/TCP queue pair and the split requests in flight on it, borrowed for one call from
/// the C queue pair (`crate::transport::Pair`, which owns both and drops the connection
/// before the pieces kept in the splitter).
pub(crate) struct TcpPair<'a> {
    pub(crate) qp: &'a mut TcpQueuePair,
    pub(crate) split: &'a mut Splitter,
}

impl TcpPair<'_> {
    /// Whether `cmd` moves more data than one command carries here and may be split (a
    /// command that may not, Copy, goes to the queue pair whole, which refuses it if too big).
    #[inline]
    pub(crate) fn needs_split<C: NvmCommand>(&self, ns: &Namespace, cmd: &C) -> bool {
        cmd.range().is_some()
            && cmd.opcode().has_data()
            && cmd.splittable()
            && cmd.data_bytes(ns) > self.qp.max_transfer_bytes()
    }

    /// Submits a data command that [`TcpPair::needs_split`] as several commands, each over a
    /// block-aligned part of its range and the matching piece of `buf`.
    #[cold]
    pub(crate) fn submit_split<C: NvmCommand>(
        &mut self,
        ns: &Namespace,
        cmd: C,
        buf: DmaBuffer,
        user_data: u64,
    ) -> Result<(), IoFailure> {
        let Some(LbaRange { lba, blocks }) = cmd.range() else {
            // Not reached: `needs_split` is false without a range.
            return IoQueue::submit(self.qp, ns, cmd, Some(buf), user_data);
        };
        debug_assert_eq!(
            user_data & PIECE,
            0,
            "request user data never has the piece bit"
        );
        if let Err(e) = ns.check_range(lba, u64::from(blocks)) {
            return Err(IoFailure {
                error: e,
                buffer: Some(buf),
            });
        }
        let block_size = ns.block_size() as usize;
        let bytes = block_size * blocks as usize;
        if buf.len() < bytes {
            let error = Error::BufferTooSmall {
                needed: bytes,
                len: buf.len(),
            };
            return Err(IoFailure {
                error,
                buffer: Some(buf),
            });
        }
        // At least one block per command: a namespace whose block exceeds the transfer limit
        // is not usable for I/O (`Namespace::from_identify`).
        let chunk_blocks =
            ((self.qp.max_transfer_bytes() / block_size) as u32).clamp(1, MAX_BLOCKS_PER_COMMAND);
        let commands = blocks.div_ceil(chunk_blocks);
        let capacity = u32::from(self.qp.capacity());
        let free = capacity.saturating_sub(u32::from(self.qp.in_flight()));
        if commands > free {
            let error = if commands > capacity {
                Error::TransferTooLarge {
                    bytes,
                    commands: commands as usize,
                    max_per_command: chunk_blocks as usize * block_size,
                    free,
                    capacity,
                }
            } else {
                Error::QueueFull {
                    qid: self.qp.qid(),
                    depth: self.qp.depth(),
                }
            };
            return Err(IoFailure {
                error,
                buffer: Some(buf),
            });
        }
        let group = self.split.alloc(user_data, commands as usize);
        let mut rest = Some(buf);
        for i in 0..commands {
            let first = i * chunk_blocks;
            let n = chunk_blocks.min(blocks - first);
            let whole = rest
                .take()
                .expect("the rest of the buffer is there until the last piece");
            // The last piece keeps whatever the buffer has beyond the transfer.
            let piece = if i + 1 < commands {
                match whole.split_at(n as usize * block_size) {
                    Ok((piece, tail)) => {
                        rest = Some(tail);
                        piece
                    }
                    // Not reached: `bytes <= buf.len()` was checked above.
                    Err(whole) => whole,
                }
            } else {
                whole
            };
            let ud = PIECE | (u64::from(group) << POSITION_BITS) | u64::from(i);
            let lba = lba + u64::from(first);
            let part = cmd.with_range(LbaRange::new(lba, n));
            let submitted = self.qp.submit(ns, part, Some(piece), ud);
            if let Err(IoFailure { error, buffer }) = submitted {
                // The failed piece and the unsent rest go back into the group in one piece.
                let unsent = match (buffer, rest.take()) {
                    (Some(piece), Some(tail)) => join(piece, tail),
                    (piece, None) => piece,
                    (None, Some(tail)) => {
                        // Not reached: a refused submission gives its buffer back.
                        drop(tail);
                        None
                    }
                };
                if i == 0 {
                    // Nothing was sent: the request fails as a whole, now.
                    self.split.release(group);
                    return Err(IoFailure {
                        error,
                        buffer: unsent,
                    });
                }
                // Pieces are in flight: their completions end the request, with this error.
                self.split.refused(group, i as usize, error, unsent);
                return Ok(());
            }
        }
        Ok(())
    }

    /// Polls the connection: completions of single-command requests go to `f` as they are,
    /// pieces of split requests are collected and their request goes to `f` once complete.
    /// Returns the number of completions handed to `f`.
    #[inline]
    pub(crate) fn poll<F: FnMut(Completion)>(&mut self, mut f: F) -> usize {
        let split = &mut *self.split;
        let mut delivered = 0;
        self.qp.poll(|c: Completion| {
            if c.user_data & PIECE == 0 {
                delivered += 1;
                f(c);
            } else if let Some(done) = split.complete(c) {
                delivered += 1;
                f(done);
            }
        });
        delivered
    }
}

/// Joins two adjacent pieces; `None` (the memory is dropped) if they are not.
fn join(head: DmaBuffer, tail: DmaBuffer) -> Option<DmaBuffer> {
    match head.join(tail) {
        Ok(whole) => Some(whole),
        Err(_) => {
            log::error!("NVMe/TCP split request: pieces of a buffer do not join; buffer dropped");
            None
        }
    }
}

/// One split request in flight.
#[derive(Default)]
struct Group {
    /// The request's user data.
    user_data: u64,
    /// Pieces back from the transport, by position (kept allocated across requests).
    pieces: Vec<Option<DmaBuffer>>,
    /// Pieces still in flight.
    outstanding: usize,
    /// The first error of any piece.
    error: Option<Error>,
    /// A piece came back without its buffer (the transport kept it).
    lost: bool,
    live: bool,
}

/// The split requests of one queue pair.
#[derive(Default)]
pub(crate) struct Splitter {
    groups: Vec<Group>,
    free: Vec<u32>,
}

impl Splitter {
    /// A group for a request of `commands` pieces, all in flight.
    fn alloc(&mut self, user_data: u64, commands: usize) -> u32 {
        let index = self.free.pop().unwrap_or_else(|| {
            self.groups.push(Group::default());
            (self.groups.len() - 1) as u32
        });
        let g = &mut self.groups[index as usize];
        g.user_data = user_data;
        g.pieces.clear();
        g.pieces.resize_with(commands, || None);
        g.outstanding = commands;
        g.error = None;
        g.lost = false;
        g.live = true;
        index
    }

    fn release(&mut self, index: u32) {
        let g = &mut self.groups[index as usize];
        g.live = false;
        g.pieces.iter_mut().for_each(|p| *p = None);
        self.free.push(index);
    }

    /// Piece `position` and those after it were not sent (`error`); `unsent` is their
    /// memory in one piece.
    fn refused(&mut self, index: u32, position: usize, error: Error, unsent: Option<DmaBuffer>) {
        let g = &mut self.groups[index as usize];
        g.pieces.truncate(position + 1);
        g.lost |= unsent.is_none();
        g.pieces[position] = unsent;
        g.outstanding = position;
        g.error.get_or_insert(error);
    }

    /// Takes a piece's completion; returns the request's completion when it was the last.
    fn complete(&mut self, c: Completion) -> Option<Completion> {
        let index = ((c.user_data >> POSITION_BITS) & GROUP_MASK) as u32;
        let position = (c.user_data & POSITION_MASK) as usize;
        let Some(g) = self
            .groups
            .get_mut(index as usize)
            .filter(|g| g.live && g.outstanding > 0)
            .filter(|g| g.pieces.get(position).is_some_and(|p| p.is_none()))
        else {
            // Not reached: the transport hands back each submitted user data once.
            log::error!(
                "NVMe/TCP split request: unexpected completion {:#x} dropped",
                c.user_data
            );
            return None;
        };
        match c.buffer {
            Some(b) => g.pieces[position] = Some(b),
            None => g.lost = true,
        }
        if let Err(e) = c.result {
            g.error.get_or_insert(e);
        }
        g.outstanding -= 1;
        if g.outstanding > 0 {
            return None;
        }
        let buffer = if g.lost {
            None
        } else {
            let mut pieces = g.pieces.iter_mut().map(Option::take);
            let first = pieces.next().flatten();
            pieces.fold(first, |whole, piece| match (whole, piece) {
                (Some(whole), Some(piece)) => join(whole, piece),
                _ => None,
            })
        };
        let done = Completion {
            user_data: g.user_data,
            result: g.error.take().map_or(Ok(0), Err),
            buffer,
        };
        self.release(index);
        Some(done)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use nvme_driver::DmaMapper;
    use nvme_tcp::HostMemory;

    use super::*;

    const PIECE_LEN: usize = 4096;

    /// A buffer of `n` pieces cut as `submit_split` cuts it, the pieces' bytes numbered.
    fn pieces(n: usize) -> Vec<DmaBuffer> {
        let mapper: Arc<dyn DmaMapper> = Arc::new(HostMemory::new());
        let mut rest = DmaBuffer::allocate(&mapper, n * PIECE_LEN).unwrap();
        let mut out = Vec::new();
        for i in 0..n {
            rest[..PIECE_LEN].fill(i as u8);
            if i + 1 < n {
                let (piece, tail) = rest.split_at(PIECE_LEN).unwrap();
                out.push(piece);
                rest = tail;
            } else {
                out.push(rest);
                break;
            }
        }
        out
    }

    fn piece_done(
        group: u32,
        position: u16,
        result: Result<u32, Error>,
        buf: Option<DmaBuffer>,
    ) -> Completion {
        Completion {
            user_data: PIECE | (u64::from(group) << POSITION_BITS) | u64::from(position),
            result,
            buffer: buf,
        }
    }

    fn reset_error() -> Error {
        Error::Reset {
            controller: "first".into(),
        }
    }

    #[test]
    fn out_of_order_pieces_complete_once_with_the_first_error_and_the_whole_buffer() {
        let mut s = Splitter::default();
        let g = s.alloc(7, 3);
        let mut bufs = pieces(3).into_iter().map(Some).collect::<Vec<_>>();
        assert!(s
            .complete(piece_done(g, 2, Ok(0), bufs[2].take()))
            .is_none());
        assert!(s
            .complete(piece_done(g, 0, Err(reset_error()), bufs[0].take()))
            .is_none());
        let done = s
            .complete(piece_done(g, 1, Err(Error::ZeroLength), bufs[1].take()))
            .expect("the last piece completes the request");
        assert_eq!(done.user_data, 7);
        assert!(
            matches!(done.result, Err(Error::Reset { .. })),
            "first error wins"
        );
        let whole = done.buffer.expect("every piece came back");
        assert_eq!(whole.len(), 3 * PIECE_LEN);
        for i in 0..3 {
            assert!(whole[i * PIECE_LEN..(i + 1) * PIECE_LEN]
                .iter()
                .all(|&b| b == i as u8));
        }
        // The group is free again and reused; a stray completion for it is dropped.
        assert!(s.complete(piece_done(g, 0, Ok(0), None)).is_none());
        assert_eq!(s.alloc(8, 2), g);
    }

    #[test]
    fn a_piece_kept_by_the_transport_keeps_the_whole_buffer_away() {
        let mut s = Splitter::default();
        let g = s.alloc(1, 2);
        let mut bufs = pieces(2).into_iter().map(Some).collect::<Vec<_>>();
        assert!(s
            .complete(piece_done(g, 1, Ok(0), bufs[1].take()))
            .is_none());
        let timeout = Error::Timeout {
            command: "Read",
            cid: 1,
            timeout: std::time::Duration::from_secs(1),
        };
        let done = s.complete(piece_done(g, 0, Err(timeout), None)).unwrap();
        assert!(done.result.is_err());
        assert!(done.buffer.is_none());
    }

    #[test]
    fn a_refused_piece_ends_the_request_when_the_sent_ones_complete() {
        let mut s = Splitter::default();
        let g = s.alloc(3, 4);
        let mut bufs = pieces(4);
        // Pieces 0 and 1 were sent; piece 2 was refused, and goes back with piece 3 unsent.
        let p3 = bufs.pop().unwrap();
        let p2 = bufs.pop().unwrap();
        let unsent = join(p2, p3);
        s.refused(g, 2, reset_error(), unsent);
        let mut bufs = bufs.into_iter().map(Some).collect::<Vec<_>>();
        assert!(s
            .complete(piece_done(g, 1, Ok(0), bufs[1].take()))
            .is_none());
        let done = s.complete(piece_done(g, 0, Ok(0), bufs[0].take())).unwrap();
        assert!(matches!(done.result, Err(Error::Reset { .. })));
        assert_eq!(done.buffer.map(|b| b.len()), Some(4 * PIECE_LEN));
    }
}
