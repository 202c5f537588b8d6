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
    /// Builds a handle from Identify Namespace data, or says why the namespace cannot be
    /// used: zero size, a bogus LBA data size, blocks larger than the largest transfer
    /// (`max_transfer` bytes), or a format with metadata or protection information, which this
    /// driver does not transfer (a device would move more bytes than the data buffer holds).
    /// Public for other transports (NVMe/TCP) that read Identify Namespace themselves.
    pub fn from_identify(
        nsid: u32,
        data: IdentifyNamespace,
        max_transfer: usize,
    ) -> std::result::Result<Self, String> {
        let format = data.current_lba_format();
        let shift = format.lbads as u32;
        if data.nsze == 0 {
            return Err("it reports zero size (NSZE = 0)".into());
        }
        if !(MIN_BLOCK_SHIFT..32).contains(&shift) {
            return Err(format!(
                "its LBA data size 2^{shift} is not a valid block size (LBADS must be 9..=31)"
            ));
        }
        let metadata = format.metadata_size();
        let pi_type = data.protection_type();
        if metadata != 0 || pi_type != 0 {
            let layout = if data.metadata_extended() {
                "extended LBA: metadata interleaved with each block"
            } else {
                "metadata in a separate buffer"
            };
            let pi = if pi_type != 0 {
                format!(", protection information type {pi_type}")
            } else {
                String::new()
            };
            return Err(format!(
                "its format (LBA format {}) is {} B blocks + {metadata} B metadata ({layout}{pi}); \
                 this driver supports only formats without metadata: reformat the namespace \
                 with a metadata-free LBA format (e.g. `nvme format /dev/nvmeX -n {nsid} --lbaf=N`) \
                 or use another namespace",
                data.lba_format_index(),
                1u64 << shift
            ));
        }
        if (1usize << shift) > max_transfer {
            return Err(format!(
                "its {} B blocks are larger than the controller's largest transfer \
                 ({max_transfer} B, MDTS)",
                1u64 << shift
            ));
        }
        Ok(Self {
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

    fn identify(lbads: u8, ms: u16, nsze: u64) -> IdentifyNamespace {
        let mut lbaf = [LbaFormat::default(); 64];
        lbaf[0] = LbaFormat { ms, lbads, rp: 0 };
        IdentifyNamespace {
            nsze,
            ncap: nsze,
            lbaf,
            ..IdentifyNamespace::default()
        }
    }

    fn ns(lbads: u8, nsze: u64) -> Option<Namespace> {
        Namespace::from_identify(1, identify(lbads, 0, nsze), 1 << 20).ok()
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

    #[test]
    fn refuses_metadata_and_protection_formats() {
        // 512 + 8, extended LBA (FLBAS bit 4).
        let mut d = identify(9, 8, 100);
        d.flbas = 1 << 4;
        let why = Namespace::from_identify(3, d, 1 << 20).unwrap_err();
        assert!(
            why.contains("8 B metadata") && why.contains("extended"),
            "{why}"
        );
        // 4096 + 16, separate buffer.
        let why = Namespace::from_identify(3, identify(12, 16, 100), 1 << 20).unwrap_err();
        assert!(
            why.contains("16 B metadata") && why.contains("separate"),
            "{why}"
        );
        // Protection information without metadata size is still refused.
        let mut d = identify(9, 0, 100);
        d.dps = 1;
        let why = Namespace::from_identify(3, d, 1 << 20).unwrap_err();
        assert!(why.contains("protection information type 1"), "{why}");
    }

    #[test]
    fn refuses_blocks_larger_than_the_largest_transfer() {
        // 64 KiB blocks with a 32 KiB MDTS: splitting would divide by zero blocks per command.
        let why = Namespace::from_identify(1, identify(16, 0, 100), 32 << 10).unwrap_err();
        assert!(why.contains("largest transfer"), "{why}");
        assert!(Namespace::from_identify(1, identify(15, 0, 100), 32 << 10).is_ok());
    }
}

/// The namespaces a controller found in one scan.
#[derive(Clone, Debug, Default)]
pub(crate) struct NamespaceSet {
    /// Usable namespaces, in namespace id order.
    pub active: Vec<Namespace>,
    /// Active namespaces that cannot be used, and why.
    pub unsupported: Vec<(u32, String)>,
}

impl NamespaceSet {
    /// Every active namespace id, usable or not, with its geometry (None when unusable).
    fn ids(&self) -> impl Iterator<Item = (u32, Option<(u32, u64)>)> + '_ {
        self.active
            .iter()
            .map(|n| (n.nsid, Some((n.block_size, n.blocks))))
            .chain(self.unsupported.iter().map(|(id, _)| (*id, None)))
    }
}

/// What a namespace rescan found different (namespace ids, ascending).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct NamespaceChanges {
    /// Newly active.
    pub added: Vec<u32>,
    /// No longer active.
    pub removed: Vec<u32>,
    /// Still active with a different block size, capacity or usability.
    pub changed: Vec<u32>,
}

impl NamespaceChanges {
    pub(crate) fn between(old: &NamespaceSet, new: &NamespaceSet) -> Self {
        let before: std::collections::BTreeMap<u32, Option<(u32, u64)>> = old.ids().collect();
        let after: std::collections::BTreeMap<u32, Option<(u32, u64)>> = new.ids().collect();
        let mut changes = Self::default();
        for (id, geometry) in &after {
            match before.get(id) {
                None => changes.added.push(*id),
                Some(g) if g != geometry => changes.changed.push(*id),
                Some(_) => {}
            }
        }
        changes.removed = before
            .keys()
            .filter(|id| !after.contains_key(id))
            .copied()
            .collect();
        changes
    }

    /// Nothing changed.
    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.removed.is_empty() && self.changed.is_empty()
    }
}
