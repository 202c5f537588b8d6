//! Namespace handles: block size, capacity and the range checks every I/O goes through.

use std::sync::Arc;

use nvme_spec::IdentifyNamespace;

use crate::error::{Error, Result};

/// An active namespace of a controller. Cheap to clone.
///
/// INVARIANT: `block_size` is a power of two >= 512 and `block_size == 1 << block_shift`.
#[derive(Clone, Debug)]
pub struct Namespace {
    nsid: u32,
    block_size: u32,
    block_shift: u32,
    blocks: u64,
    data: Arc<IdentifyNamespace>,
}

/// Smallest LBA data size the NVM command set allows (LBADS >= 9).
const MIN_BLOCK_SHIFT: u32 = 9;

impl Namespace {
    /// Builds a handle from Identify Namespace data; `None` when the data describes an
    /// unusable namespace (zero size or a bogus LBA data size).
    pub(crate) fn from_identify(nsid: u32, data: IdentifyNamespace) -> Option<Self> {
        let format = data.current_lba_format();
        let shift = format.lbads as u32;
        if !(MIN_BLOCK_SHIFT..32).contains(&shift) || data.nsze == 0 {
            return None;
        }
        Some(Self {
            nsid,
            block_size: 1 << shift,
            block_shift: shift,
            blocks: data.nsze,
            data: Arc::new(data),
        })
    }

    /// Namespace id.
    pub fn nsid(&self) -> u32 {
        self.nsid
    }

    /// Logical block (LBA) data size in bytes.
    #[inline(always)]
    pub fn block_size(&self) -> u32 {
        self.block_size
    }

    /// Namespace size in blocks (NSZE): valid LBAs are `0..blocks()`.
    #[inline(always)]
    pub fn blocks(&self) -> u64 {
        self.blocks
    }

    /// Namespace size in bytes.
    pub fn size_bytes(&self) -> u64 {
        self.blocks << self.block_shift
    }

    /// The Identify Namespace data this handle was built from.
    pub fn identify(&self) -> &IdentifyNamespace {
        &self.data
    }

    /// Checks that `blocks` blocks starting at `lba` lie inside the namespace.
    #[inline(always)]
    pub fn check_range(&self, lba: u64, blocks: u64) -> Result<()> {
        if blocks == 0 {
            return Err(Error::ZeroLength);
        }
        match lba.checked_add(blocks) {
            Some(end) if end <= self.blocks => Ok(()),
            _ => Err(Error::LbaOutOfRange {
                nsid: self.nsid,
                lba,
                blocks,
                capacity: self.blocks,
            }),
        }
    }

    /// Converts a byte length to blocks, rejecting zero and partial blocks.
    #[inline(always)]
    pub fn bytes_to_blocks(&self, len: usize) -> Result<u64> {
        if len == 0 {
            return Err(Error::ZeroLength);
        }
        if len & (self.block_size as usize - 1) != 0 {
            return Err(Error::NotBlockMultiple {
                nsid: self.nsid,
                len,
                block_size: self.block_size,
            });
        }
        Ok((len >> self.block_shift) as u64)
    }

    /// Bytes in `blocks` blocks.
    #[inline(always)]
    pub fn blocks_to_bytes(&self, blocks: u64) -> u64 {
        blocks << self.block_shift
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvme_spec::LbaFormat;

    fn ns(lbads: u8, nsze: u64) -> Option<Namespace> {
        let mut lbaf = [LbaFormat::default(); 64];
        lbaf[0] = LbaFormat {
            ms: 0,
            lbads,
            rp: 0,
        };
        let data = IdentifyNamespace {
            nsze,
            ncap: nsze,
            lbaf,
            ..IdentifyNamespace::default()
        };
        Namespace::from_identify(1, data)
    }

    #[test]
    fn range_checks() {
        let n = ns(12, 100).unwrap();
        assert_eq!(n.block_size(), 4096);
        assert!(n.check_range(0, 100).is_ok());
        assert!(matches!(
            n.check_range(99, 2),
            Err(Error::LbaOutOfRange { .. })
        ));
        assert!(matches!(
            n.check_range(u64::MAX, 2),
            Err(Error::LbaOutOfRange { .. })
        ));
        assert!(matches!(n.check_range(5, 0), Err(Error::ZeroLength)));
        assert_eq!(n.bytes_to_blocks(8192).unwrap(), 2);
        assert!(matches!(
            n.bytes_to_blocks(512),
            Err(Error::NotBlockMultiple { .. })
        ));
        assert!(matches!(n.bytes_to_blocks(0), Err(Error::ZeroLength)));
    }

    #[test]
    fn rejects_bogus_formats() {
        assert!(ns(8, 100).is_none());
        assert!(ns(40, 100).is_none());
        assert!(ns(9, 0).is_none());
    }
}
