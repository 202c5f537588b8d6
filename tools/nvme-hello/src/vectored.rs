//! `--writev FILE --writev-lba L`: one vectored Write of FILE's bytes, cut into pieces of
//! `--piece-bytes` each (every piece its own buffer, none adjacent to the next: scattered as a
//! buffer pool's pages are), then one vectored Read into fresh scattered pieces, compared.
//! Over PCIe the pieces go as SGL Data Blocks when the controller offers SGLs, as one PRP
//! list otherwise (`--no-sgl`), where pieces that do not start and end at pages are refused.

use std::io::Write;

use nvme_driver::command::{Read, Write as WriteCmd};
use nvme_driver::{DmaBuffer, IoFailure, IoVec, Namespace};
use nvme_tool_support::{AnyController, AnyQueuePair, IoQueue};

use crate::HelloError;

/// `n` buffers of `len` bytes, no two adjacent (every other one of `2n` allocations).
fn scattered(ctrl: &AnyController, n: usize, len: usize) -> Result<Vec<DmaBuffer>, HelloError> {
    let all = (0..2 * n)
        .map(|_| ctrl.alloc_buffer(len))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(all.into_iter().step_by(2).collect())
}

fn vector(pieces: Vec<DmaBuffer>) -> Result<Box<IoVec>, HelloError> {
    let n = pieces.len();
    let mut v = IoVec::boxed();
    for p in pieces {
        if v.push(p).is_err() {
            return Err(HelloError::TooManyPieces {
                pieces: n,
                max: IoVec::CAPACITY,
            });
        }
    }
    Ok(v)
}

fn failed(what: &'static str, ns: &Namespace, lba: u64) -> impl FnOnce(IoFailure) -> HelloError {
    crate::io_error(what, ns, lba)
}

/// Writes `data` vectored at `lba` in pieces of `piece_bytes`, reads it back vectored, and
/// compares.
pub(crate) fn write_read(
    out: &mut impl Write,
    ctrl: &AnyController,
    qp: &mut AnyQueuePair,
    ns: &Namespace,
    lba: u64,
    data: &[u8],
    piece_bytes: usize,
) -> Result<(), HelloError> {
    let bs = ns.block_size() as usize;
    if data.is_empty() || data.len() % bs != 0 || piece_bytes == 0 {
        return Err(HelloError::VectoredShape {
            len: data.len(),
            block_size: bs,
        });
    }
    let blocks = (data.len() / bs) as u32;
    let n = data.len().div_ceil(piece_bytes);
    let mut pieces = scattered(ctrl, n, piece_bytes)?;
    // The last piece holds the rest.
    let rest = data.len() - (n - 1) * piece_bytes;
    if rest != piece_bytes {
        let last = pieces.pop().expect("n >= 1");
        pieces.push(
            last.split_at(rest)
                .map_err(|_| HelloError::VectoredShape {
                    len: data.len(),
                    block_size: bs,
                })?
                .0,
        );
    }
    let mut v = vector(pieces)?;
    v.copy_from_slice(data);
    let v = qp
        .execute_vectored(ns, WriteCmd::new(lba, blocks), v, drop)
        .map_err(failed("vectored write", ns, lba))?;
    writeln!(
        out,
        "  Vectored write of {} pieces ({} bytes, {blocks} blocks) at LBA {lba}: ok (one command)",
        v.len(),
        data.len()
    )?;
    let mut fresh = scattered(ctrl, n, piece_bytes)?;
    if rest != piece_bytes {
        let last = fresh.pop().expect("n >= 1");
        fresh.push(last.split_at(rest).expect("as above").0);
    }
    let back = qp
        .execute_vectored(ns, Read::new(lba, blocks), vector(fresh)?, drop)
        .map_err(failed("vectored read", ns, lba))?;
    if back.to_vec() != data {
        return Err(HelloError::VectoredMismatch { lba });
    }
    writeln!(
        out,
        "  Vectored read of {} pieces at LBA {lba}: equal to the data written",
        back.len()
    )?;
    Ok(())
}
