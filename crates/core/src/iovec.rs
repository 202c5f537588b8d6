//! Vectored I/O: [`IoVec`], the pieces of one read or write command's data, in order.
//!
//! A database's buffer-pool pages are scattered; one Read or Write whose data is a list of
//! buffer pieces moves them all in one command (over PCIe a PRP list, NVMe Base 2.0 §4.1.1,
//! or SGL Data Block descriptors in one SGL segment, §4.1.2; over NVMe/TCP the bytes go on the
//! wire from and into the pieces in order).
//!
//! INVARIANT: the pieces are owned [`DmaBuffer`]s that move into the request with the
//! `IoVec` and come back, all of them and in order, in the [`Completion`](crate::Completion)
//! ([`Completion::pieces`](crate::Completion::pieces)) or in the
//! [`IoFailure`](crate::IoFailure) of a refused submission, so no piece is touched or freed
//! while the device may reach it.
//!
//! The container is array-backed ([`IOVEC_MAX_PIECES`] entries, no allocation per push or
//! per I/O); a request carries it boxed (`Box<IoVec>`, one pointer in the request slot), and
//! the caller recycles the box from completion to the next submission, so the hot path
//! allocates nothing.

use std::fmt;
use std::mem::ManuallyDrop;

use nvme_vfio::DmaBuffer;

use crate::command::NvmCommand;
use crate::error::{Error, Result};
use crate::namespace::Namespace;

/// Most pieces one vectored request carries (e.g. 32 scattered 4 KiB buffer-pool pages).
pub const IOVEC_MAX_PIECES: usize = 32;

/// The pieces of one vectored request, in transfer order (array-backed, fixed capacity).
///
/// INVARIANT: `pieces[..len]` are `Some`, the rest `None`. The pieces are `ManuallyDrop` and
/// released by `IoVec`'s own (out-of-line) `Drop`: the drop glue of the type is then one call,
/// small enough that `Option<Box<IoVec>>`'s glue (run for every [`Completion`](crate::Completion)
/// a poll callback drops, nearly always `None`) is inlined and its `None` test folds away;
/// with 32 inline `Option<DmaBuffer>` drops it was an out-of-line call per completion.
pub struct IoVec {
    pieces: [Option<ManuallyDrop<DmaBuffer>>; IOVEC_MAX_PIECES],
    len: usize,
}

impl Drop for IoVec {
    #[inline(never)]
    fn drop(&mut self) {
        for piece in &mut self.pieces {
            if let Some(piece) = piece.take() {
                drop(ManuallyDrop::into_inner(piece));
            }
        }
    }
}

impl Default for IoVec {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for IoVec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl IoVec {
    /// Most pieces (the container's capacity).
    pub const CAPACITY: usize = IOVEC_MAX_PIECES;

    /// No pieces.
    pub const fn new() -> Self {
        IoVec {
            pieces: [const { None }; IOVEC_MAX_PIECES],
            len: 0,
        }
    }

    /// No pieces, boxed: the form a request carries (allocate once, reuse per I/O).
    pub fn boxed() -> Box<Self> {
        Box::new(Self::new())
    }

    /// Appends a piece; a full vector gives it back.
    pub fn push(&mut self, piece: DmaBuffer) -> std::result::Result<(), DmaBuffer> {
        if self.len == IOVEC_MAX_PIECES {
            return Err(piece);
        }
        self.pieces[self.len] = Some(ManuallyDrop::new(piece));
        self.len += 1;
        Ok(())
    }

    /// Removes the last piece.
    pub fn pop(&mut self) -> Option<DmaBuffer> {
        if self.len == 0 {
            return None;
        }
        self.len -= 1;
        self.pieces[self.len].take().map(ManuallyDrop::into_inner)
    }

    /// Number of pieces.
    pub fn len(&self) -> usize {
        self.len
    }

    /// No pieces.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Sum of the pieces' lengths in bytes.
    pub fn total_bytes(&self) -> usize {
        self.iter().map(DmaBuffer::len).sum()
    }

    /// Piece `index`.
    pub fn get(&self, index: usize) -> Option<&DmaBuffer> {
        self.pieces[..self.len].get(index)?.as_deref()
    }

    /// Piece `index`, to fill or read by the CPU (the vector is not in flight: it is owned).
    pub fn get_mut(&mut self, index: usize) -> Option<&mut DmaBuffer> {
        self.pieces[..self.len].get_mut(index)?.as_deref_mut()
    }

    /// The pieces in order.
    pub fn iter(&self) -> impl Iterator<Item = &DmaBuffer> + '_ {
        self.pieces[..self.len].iter().flatten().map(|p| &**p)
    }

    /// The pieces in order, mutable.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut DmaBuffer> + '_ {
        self.pieces[..self.len]
            .iter_mut()
            .flatten()
            .map(|p| &mut **p)
    }

    /// Takes every piece out, in order (the vector is empty afterwards, ready for reuse).
    pub fn drain(&mut self) -> impl Iterator<Item = DmaBuffer> + '_ {
        let n = std::mem::take(&mut self.len);
        self.pieces[..n]
            .iter_mut()
            .filter_map(|p| p.take().map(ManuallyDrop::into_inner))
    }

    /// Copies `data` into the pieces in order (at most their total length); returns the
    /// bytes copied.
    pub fn copy_from_slice(&mut self, data: &[u8]) -> usize {
        let mut at = 0;
        for piece in self.iter_mut() {
            let n = piece.len().min(data.len() - at);
            piece[..n].copy_from_slice(&data[at..at + n]);
            at += n;
        }
        at
    }

    /// Copies `src` into the pieces at byte `offset` of their concatenation (a CPU-copy
    /// transport receiving data). Panics past the end (callers check against the length).
    pub fn write_at(&mut self, mut offset: usize, mut src: &[u8]) {
        for piece in self.iter_mut() {
            if src.is_empty() {
                return;
            }
            if offset >= piece.len() {
                offset -= piece.len();
                continue;
            }
            let n = (piece.len() - offset).min(src.len());
            piece[offset..offset + n].copy_from_slice(&src[..n]);
            src = &src[n..];
            offset = 0;
        }
        assert!(src.is_empty(), "IoVec::write_at past the pieces' end");
    }

    /// The contiguous bytes from byte `offset` of the pieces' concatenation to the end of the
    /// piece holding it (a CPU-copy transport sending data piece by piece); empty at the end.
    pub fn contiguous_at(&self, mut offset: usize) -> &[u8] {
        for piece in self.iter() {
            if offset < piece.len() {
                return &piece[offset..];
            }
            offset -= piece.len();
        }
        &[]
    }

    /// The pieces' bytes, concatenated in order (a copy, for checks and tests).
    pub fn to_vec(&self) -> Vec<u8> {
        self.iter().flat_map(|p| p.iter().copied()).collect()
    }
}

/// The rule a piece of a vectored request breaks (reported in [`Error::IoVecPiece`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PieceRule {
    /// A piece of zero bytes.
    Empty,
    /// Its length is not a multiple of 4 bytes (SGL Data Block lengths and PRP offsets are
    /// dword granular: NVMe Base 2.0 §4.1.1, §4.1.2).
    LengthNotDword,
    /// Its address is not dword aligned (§4.1.1: PRP entry offset bits 1:0 are zero; §4.1.2
    /// with SGLS dword alignment).
    AddressNotDword,
    /// A piece after the first starts inside a memory page, and the controller offers no
    /// SGLs: in a PRP list every entry after the first is page aligned (§4.1.1).
    StartNotPageAligned {
        /// The controller's memory page size.
        page_size: usize,
    },
    /// A piece before the last ends inside a memory page, and the controller offers no SGLs:
    /// PRP data is contiguous to the end of each page but the last (§4.1.1).
    EndNotPageAligned {
        /// The controller's memory page size.
        page_size: usize,
    },
}

impl fmt::Display for PieceRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PieceRule::Empty => write!(f, "is empty"),
            PieceRule::LengthNotDword => {
                write!(f, "has a length that is not a multiple of 4 bytes (dword)")
            }
            PieceRule::AddressNotDword => {
                write!(f, "starts at an address that is not dword aligned")
            }
            PieceRule::StartNotPageAligned { page_size } => write!(
                f,
                "starts inside a {page_size}-byte page: without SGLs every piece but the first \
                 must start page aligned (PRP list, NVMe Base §4.1.1)"
            ),
            PieceRule::EndNotPageAligned { page_size } => write!(
                f,
                "ends inside a {page_size}-byte page: without SGLs every piece but the last \
                 must end page aligned (PRP list, NVMe Base §4.1.1)"
            ),
        }
    }
}

/// The transport-neutral checks of a vectored request, before any slot is taken: the command
/// moves data over a range of the namespace and may be vectored (Read, Write, Compare: not a
/// range-list command such as Copy), the pieces add up to exactly its bytes, each piece is
/// non-empty and a whole number of dwords. Returns the transfer's bytes. The transports add
/// their own rules (PCIe: domain, PRP/SGL shape, MDTS).
pub fn check_vectored<C: NvmCommand>(ns: &Namespace, cmd: &C, iov: &IoVec) -> Result<usize> {
    let op = cmd.opcode();
    let Some(range) = cmd.range() else {
        return Err(not_vectorable(op.name()));
    };
    if !op.has_data() || !cmd.splittable() {
        return Err(not_vectorable(op.name()));
    }
    ns.check_range(range.lba, u64::from(range.blocks))?;
    if iov.is_empty() || range.blocks == 0 {
        return Err(Error::ZeroLength);
    }
    let needed = cmd.data_bytes(ns);
    let mut total = 0usize;
    for (index, piece) in iov.iter().enumerate() {
        let rule = if piece.is_empty() {
            Some(PieceRule::Empty)
        } else if piece.len() % DWORD != 0 {
            Some(PieceRule::LengthNotDword)
        } else if piece.iova().0 % DWORD as u64 != 0 {
            Some(PieceRule::AddressNotDword)
        } else {
            None
        };
        if let Some(rule) = rule {
            return Err(piece_error(index, piece, rule));
        }
        total += piece.len();
    }
    if total != needed {
        return Err(Error::IoVecLength {
            pieces: iov.len(),
            total,
            needed,
        });
    }
    Ok(needed)
}

/// Bytes in a dword, the granularity of data pointers (NVMe Base 2.0 §4.1.1, §4.1.2).
const DWORD: usize = 4;

/// [`Error::IoVecPiece`] for piece `index`.
#[cold]
pub fn piece_error(index: usize, piece: &DmaBuffer, rule: PieceRule) -> Error {
    Error::IoVecPiece {
        index,
        iova: piece.iova().0,
        len: piece.len(),
        rule,
    }
}

#[cold]
fn not_vectorable(name: &str) -> Error {
    Error::InvalidRequest(format!(
        "{name} cannot be vectored: only Read, Write and Compare take a list of pieces"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::HostMemory;

    #[test]
    fn pieces_keep_their_order_and_capacity_is_enforced() {
        let mem = HostMemory::mapper();
        let mut v = IoVec::new();
        for i in 0..IOVEC_MAX_PIECES {
            let mut b = DmaBuffer::allocate(&mem, 8).unwrap();
            b.fill(i as u8);
            v.push(b).unwrap();
        }
        let extra = DmaBuffer::allocate(&mem, 8).unwrap();
        assert!(v.push(extra).is_err());
        assert_eq!(v.len(), IOVEC_MAX_PIECES);
        assert_eq!(v.total_bytes(), 8 * IOVEC_MAX_PIECES);
        assert_eq!(v.get(3).unwrap()[0], 3);
        let firsts: Vec<u8> = v.drain().map(|b| b[0]).collect();
        assert_eq!(firsts, (0..IOVEC_MAX_PIECES as u8).collect::<Vec<_>>());
        assert!(v.is_empty());
        assert!(v.pop().is_none());
    }

    #[test]
    fn scatter_and_gather_cross_piece_boundaries() {
        let mem = HostMemory::mapper();
        let mut v = IoVec::new();
        for len in [4, 8, 12] {
            v.push(DmaBuffer::allocate(&mem, len).unwrap()).unwrap();
        }
        let data: Vec<u8> = (0..24).collect();
        v.write_at(0, &data[..2]);
        v.write_at(2, &data[2..17]);
        v.write_at(17, &data[17..]);
        assert_eq!(v.to_vec(), data);
        assert_eq!(v.contiguous_at(0), &data[..4]);
        assert_eq!(v.contiguous_at(5), &data[5..12]);
        assert_eq!(v.contiguous_at(12), &data[12..]);
        assert!(v.contiguous_at(24).is_empty());
    }
}
