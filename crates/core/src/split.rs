//! Requests larger than one command carries (the controller's MDTS, NVMe Base 2.0 §5.17.2.1,
//! and the 16-bit NLB), for a transport whose commands each take one contiguous buffer: the
//! request's buffer is cut into block-aligned pieces ([`DmaBuffer::split_at`], no copy), one
//! command per piece, and the pieces' completions are collected here into one [`Completion`]
//! ([`DmaBuffer::join`]). The NVMe/TCP queue pair splits with it; the PCIe pair keeps its own
//! in-slot groups (one PRP/SGL per child, no buffer cutting), whose limits and errors are the
//! same ([`SplitPlan`]).
//!
//! - All or nothing up front: a request that needs more commands than the pair has slots
//!   fails with [`Error::TransferTooLarge`], one that needs more than are free with
//!   [`Error::QueueFull`], before anything is sent ([`SplitPlan::new`]).
//! - The first error of any piece wins; the buffer comes back only if every piece came back
//!   (a piece the transport kept, e.g. after a timeout, keeps the whole buffer away).
//! - Group records are reused: a warmed-up pair allocates nothing per split request.
//!
//! INVARIANT: each piece a transport sent is handed to [`Splitter::complete`] exactly once,
//! with the piece id the splitter gave it.

use nvme_spec::command::MAX_NLB;
use nvme_vfio::DmaBuffer;

use crate::command::{LbaRange, NvmCommand};
use crate::completion::Completion;
use crate::error::{Error, IoFailure};

/// Bits of a piece's position in its group (piece id bits 0..16).
const POSITION_BITS: u32 = 16;
const POSITION_MASK: u64 = (1 << POSITION_BITS) - 1;

/// How a request's range is cut: `commands` commands of `chunk_blocks` blocks (the last one
/// shorter).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SplitPlan {
    /// The whole request.
    pub range: LbaRange,
    /// Blocks per command (at least 1, at most the 16-bit NLB's 65,536).
    pub chunk_blocks: u32,
    /// Commands the request takes.
    pub commands: u32,
    /// Bytes per block of the namespace.
    pub block_size: usize,
}

impl SplitPlan {
    /// The plan for `range` of a namespace of `block_size`-byte blocks on a pair that moves
    /// at most `max_transfer` bytes per command, has `capacity` slots and `free` of them
    /// free (`qid` and `depth` name it in a [`Error::QueueFull`]).
    pub fn new(
        range: LbaRange,
        block_size: usize,
        max_transfer: usize,
        capacity: u32,
        free: u32,
        qid: u16,
        depth: u32,
    ) -> Result<Self, Error> {
        // At least one block per command: a namespace whose block exceeds the transfer limit
        // is not usable for I/O (`Namespace::from_identify`).
        let chunk_blocks = ((max_transfer / block_size) as u32).clamp(1, MAX_NLB);
        let commands = range.blocks.div_ceil(chunk_blocks);
        if commands > free {
            return Err(if commands > capacity {
                Error::TransferTooLarge {
                    bytes: range.blocks as usize * block_size,
                    commands: commands as usize,
                    max_per_command: chunk_blocks as usize * block_size,
                    free,
                    capacity,
                }
            } else {
                Error::QueueFull { qid, depth }
            });
        }
        Ok(Self {
            range,
            chunk_blocks,
            commands,
            block_size,
        })
    }

    /// The range of command `i` (`i < commands`).
    #[inline]
    pub fn part(&self, i: u32) -> LbaRange {
        let first = i * self.chunk_blocks;
        let n = self.chunk_blocks.min(self.range.blocks - first);
        LbaRange::new(self.range.lba + u64::from(first), n)
    }
}

/// One split request in flight.
#[derive(Default)]
struct Group {
    /// The request's user data.
    user_data: u64,
    /// The request waits synchronously (the transport's flag, handed back on completion).
    sync: bool,
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

/// The split requests of one queue pair: a transport submits the pieces under the ids this
/// gives, and hands their completions back.
#[derive(Default)]
pub struct Splitter {
    groups: Vec<Group>,
    free: Vec<u32>,
}

impl Splitter {
    /// Cuts `buf` along `plan` and submits each piece with `submit_piece(part command, piece
    /// buffer, piece id)`. The caller checked the namespace, the range and that `buf` holds
    /// the range's bytes; `sync` comes back with the request's completion. When the first piece is refused nothing was sent and the request
    /// fails as a whole (its buffer back in the error); when a later one is, the request
    /// completes with that error once the pieces already sent are back.
    pub fn submit<C, S>(
        &mut self,
        cmd: C,
        plan: SplitPlan,
        buf: DmaBuffer,
        user_data: u64,
        sync: bool,
        mut submit_piece: S,
    ) -> Result<(), IoFailure>
    where
        C: NvmCommand,
        S: FnMut(C, DmaBuffer, u64) -> Result<(), IoFailure>,
    {
        let block_size = plan.block_size;
        let group = self.alloc(user_data, plan.commands as usize, sync);
        let mut rest = Some(buf);
        for i in 0..plan.commands {
            let part = plan.part(i);
            let whole = rest
                .take()
                .expect("the rest of the buffer is there until the last piece");
            // The last piece keeps whatever the buffer has beyond the transfer.
            let piece = if i + 1 < plan.commands {
                match whole.split_at(part.blocks as usize * block_size) {
                    Ok((piece, tail)) => {
                        rest = Some(tail);
                        piece
                    }
                    // Not reached: the caller checked the buffer's length.
                    Err(whole) => whole,
                }
            } else {
                whole
            };
            let id = Self::piece_id(group, i as u16);
            if let Err(IoFailure { error, buffer, .. }) =
                submit_piece(cmd.with_range(part), piece, id)
            {
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
                    self.release(group);
                    return Err(IoFailure {
                        error,
                        buffer: unsent,
                        pieces: None,
                    });
                }
                self.refused(group, i as usize, error, unsent);
                return Ok(());
            }
        }
        Ok(())
    }

    /// The id a transport gives piece `position` of `group` (its user data for the piece).
    #[inline]
    fn piece_id(group: u32, position: u16) -> u64 {
        (u64::from(group) << POSITION_BITS) | u64::from(position)
    }

    /// A group for a request of `commands` pieces, all in flight.
    fn alloc(&mut self, user_data: u64, commands: usize, sync: bool) -> u32 {
        let index = self.free.pop().unwrap_or_else(|| {
            self.groups.push(Group::default());
            (self.groups.len() - 1) as u32
        });
        let g = &mut self.groups[index as usize];
        g.user_data = user_data;
        g.sync = sync;
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

    /// Split requests in flight.
    pub fn in_flight(&self) -> usize {
        self.groups.len() - self.free.len()
    }

    /// Takes the completion of a piece (its `user_data` is the piece id); returns the
    /// request's completion, and whether it waits synchronously, when it was the last.
    pub fn complete(&mut self, c: Completion) -> Option<(Completion, bool)> {
        let index = (c.user_data >> POSITION_BITS) as u32;
        let position = (c.user_data & POSITION_MASK) as usize;
        let Some(g) = self
            .groups
            .get_mut(index as usize)
            .filter(|g| g.live && g.outstanding > 0)
            .filter(|g| g.pieces.get(position).is_some_and(|p| p.is_none()))
        else {
            // Not reached: the transport hands back each piece once (the INVARIANT).
            log::error!(
                "split request: unexpected piece completion {:#x} dropped",
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
            pieces: None,
        };
        let sync = g.sync;
        self.release(index);
        Some((done, sync))
    }
}

/// Joins two adjacent pieces; `None` (the memory is dropped) if they are not.
fn join(head: DmaBuffer, tail: DmaBuffer) -> Option<DmaBuffer> {
    match head.join(tail) {
        Ok(whole) => Some(whole),
        Err(_) => {
            log::error!("split request: pieces of a buffer do not join; buffer dropped");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use nvme_vfio::DmaMapper;

    use super::*;
    use crate::HostMemory;

    const PIECE_LEN: usize = 4096;

    /// A buffer of `n` pieces cut as `submit` cuts it, the pieces' bytes numbered.
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
            user_data: Splitter::piece_id(group, position),
            result,
            buffer: buf,
            pieces: None,
        }
    }

    fn reset_error() -> Error {
        Error::Reset {
            controller: "first".into(),
        }
    }

    #[test]
    fn the_plan_cuts_at_the_transfer_limit_and_refuses_what_cannot_fit() {
        let p = SplitPlan::new(LbaRange::new(10, 9), 512, 2048, 8, 8, 1, 9).unwrap();
        assert_eq!((p.chunk_blocks, p.commands), (4, 3));
        assert_eq!(p.part(0), LbaRange::new(10, 4));
        assert_eq!(p.part(2), LbaRange::new(18, 1));
        let busy = SplitPlan::new(LbaRange::new(0, 9), 512, 2048, 8, 2, 1, 9);
        assert!(matches!(busy, Err(Error::QueueFull { qid: 1, depth: 9 })));
        let huge = SplitPlan::new(LbaRange::new(0, 64), 512, 2048, 8, 8, 1, 9);
        assert!(matches!(
            huge,
            Err(Error::TransferTooLarge {
                commands: 16,
                max_per_command: 2048,
                ..
            })
        ));
        // A block larger than the limit still moves, one block per command.
        let big_blocks = SplitPlan::new(LbaRange::new(0, 2), 8192, 4096, 8, 8, 1, 9).unwrap();
        assert_eq!((big_blocks.chunk_blocks, big_blocks.commands), (1, 2));
    }

    #[test]
    fn out_of_order_pieces_complete_once_with_the_first_error_and_the_whole_buffer() {
        let mut s = Splitter::default();
        let g = s.alloc(7, 3, true);
        let mut bufs = pieces(3).into_iter().map(Some).collect::<Vec<_>>();
        assert!(s
            .complete(piece_done(g, 2, Ok(0), bufs[2].take()))
            .is_none());
        assert!(s
            .complete(piece_done(g, 0, Err(reset_error()), bufs[0].take()))
            .is_none());
        let (done, sync) = s
            .complete(piece_done(g, 1, Err(Error::ZeroLength), bufs[1].take()))
            .expect("the last piece completes the request");
        assert!(sync);
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
        assert_eq!(s.in_flight(), 0);
        assert_eq!(s.alloc(8, 2, false), g);
    }

    #[test]
    fn a_piece_kept_by_the_transport_keeps_the_whole_buffer_away() {
        let mut s = Splitter::default();
        let g = s.alloc(1, 2, false);
        let mut bufs = pieces(2).into_iter().map(Some).collect::<Vec<_>>();
        assert!(s
            .complete(piece_done(g, 1, Ok(0), bufs[1].take()))
            .is_none());
        let timeout = Error::Timeout {
            command: "Read",
            cid: 1,
            timeout: std::time::Duration::from_secs(1),
        };
        let (done, _) = s.complete(piece_done(g, 0, Err(timeout), None)).unwrap();
        assert!(done.result.is_err());
        assert!(done.buffer.is_none());
    }

    #[test]
    fn a_refused_piece_ends_the_request_when_the_sent_ones_complete() {
        let mut s = Splitter::default();
        let g = s.alloc(3, 4, false);
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
        let (done, _) = s.complete(piece_done(g, 0, Ok(0), bufs[0].take())).unwrap();
        assert!(matches!(done.result, Err(Error::Reset { .. })));
        assert_eq!(done.buffer.map(|b| b.len()), Some(4 * PIECE_LEN));
    }
}
