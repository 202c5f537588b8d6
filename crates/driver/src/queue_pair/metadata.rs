//! Separate metadata on PCIe: a [`Protected`] Read, Write or Compare whose metadata goes to a
//! second, contiguous buffer named by MPTR (NVMe Base 2.0 §4.2, CDW4-5 "Metadata Pointer";
//! NVM CS §5.2.2: the metadata of the command's blocks, back to back).
//!
//! INVARIANT: both buffers are the request's from submission to completion: the data buffer
//! sits in the slot's `buffer`, the metadata vector (one piece) in its `pieces`, the same
//! fields every completion, timeout, retirement and reset path already gives back or keeps
//! (so a buffer still under DMA is never returned early). A refused submission gives both
//! back untouched in the [`IoFailure`]. The plain paths do not run this code.

use nvme_core::protection::ProtectableCommand;
use nvme_core::{Error, IoFailure, IoVec, Namespace, NvmCommand, Protected};
use nvme_vfio::DmaBuffer;

use super::submit::fill_group_head;
use super::QueuePair;

/// MPTR must be dword aligned (NVMe Base 2.0 §4.2: bits 1:0 of a contiguous MPTR are 0).
const MPTR_ALIGN_MASK: u64 = 3;

impl QueuePair {
    /// Queues a [`Protected`] command with a separate metadata buffer: `metadata` holds one
    /// piece of at least `blocks * metadata size` bytes (MPTR); see
    /// [`nvme_core::IoQueue::submit_with_metadata`]. Refused (both buffers back) when the
    /// namespace's format moves no separate metadata for this command, when a buffer is
    /// short, misaligned or of another DMA domain, or above one command's transfer.
    pub fn submit_with_metadata<C: ProtectableCommand>(
        &mut self,
        ns: &Namespace,
        cmd: Protected<C>,
        data: DmaBuffer,
        metadata: Box<IoVec>,
        user_data: u64,
    ) -> std::result::Result<(), IoFailure> {
        let refuse = |error, data, metadata| {
            Err(IoFailure {
                error,
                buffer: Some(data),
                pieces: Some(metadata),
            })
        };
        if let Err(e) = cmd.check_range(ns) {
            return refuse(e, data, metadata);
        }
        let blocks = cmd.range().map_or(0, |r| u64::from(r.blocks));
        let md_bytes = ns
            .format()
            .metadata_bytes(blocks, cmd.protection.is_pract());
        if md_bytes == 0 {
            let e = ns.metadata_mismatch(
                "this command moves no separate metadata (extended LBA, no metadata, or PRACT \
                 with metadata = PI): submit it without a metadata buffer",
            );
            return refuse(e, data, metadata);
        }
        let md_iova = match metadata.get(0) {
            Some(md) if metadata.len() == 1 => {
                if md.domain() != self.domain {
                    let e = self.foreign(md);
                    return refuse(e, data, metadata);
                }
                if md.len() < md_bytes {
                    let e = Error::BufferTooSmall {
                        needed: md_bytes,
                        len: md.len(),
                    };
                    return refuse(e, data, metadata);
                }
                md.iova().0
            }
            _ => {
                let e = ns.metadata_mismatch(
                    "the metadata vector must hold exactly one (contiguous) buffer",
                );
                return refuse(e, data, metadata);
            }
        };
        if md_iova & MPTR_ALIGN_MASK != 0 {
            let e = Error::BufferMisaligned {
                iova: md_iova,
                align: (MPTR_ALIGN_MASK + 1) as usize,
            };
            return refuse(e, data, metadata);
        }
        let bytes = cmd.data_bytes(ns);
        if let Err(e) = self.check_buffer(&data, bytes) {
            return refuse(e, data, metadata);
        }
        if bytes > self.max_transfer {
            let e = Error::InvalidRequest(format!(
                "{}: {bytes} bytes with separate metadata are more than one command carries \
                 ({} bytes, MDTS), and such a request is not split",
                cmd.opcode().name(),
                self.max_transfer
            ));
            return refuse(e, data, metadata);
        }
        if let Err(e) = self.check_room() {
            return refuse(e, data, metadata);
        }
        let mut sqe = cmd.sqe_on(ns);
        let addr = data.iova().0;
        let epoch = self.clock.epoch();
        let Some((tag, slot)) = self.tags.alloc_mut() else {
            let e = self.queue_full();
            return refuse(e, data, metadata);
        };
        fill_group_head(slot, tag, epoch, sqe.opcode(), user_data, Some(data), 1);
        slot.simple = false;
        let old = slot.pieces.replace(metadata);
        debug_assert!(old.is_none(), "a freed request slot still held pieces");
        std::mem::forget(old);
        self.set_data_pointer(&mut sqe, tag.index(), addr, bytes);
        sqe.mptr = md_iova;
        self.push_command(tag, sqe);
        self.after_submit();
        Ok(())
    }
}
