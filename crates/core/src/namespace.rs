//! Namespace handles: block size, capacity and the range checks every I/O goes through.
//!
//! A handle also carries its namespace's [`Validity`], shared with the controller's current
//! namespace set: when a rescan finds the namespace resized, reformatted or detached, it marks
//! the validity stale, and every later submission through an old handle fails with
//! [`Error::StaleNamespace`] before anything reaches the device (an old 512-byte handle on a
//! namespace now formatted with 4 KiB blocks would otherwise size PRPs for 512 bytes per
//! block while the device moves 4096). Handles of a namespace the rescan found unchanged
//! share the validity of the new set and stay usable.

use std::fmt;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use nvme_spec::IdentifyNamespace;

use crate::error::{Error, Result};
use crate::protection::{LbaFormatInfo, MetadataLayout};
use crate::zns::ZoneGeometry;
use nvme_spec::protection::PI_TUPLE_BYTES;

/// An active namespace of a controller. Cheap to clone.
///
/// A handle describes the namespace as the scan that built it found it. When a later rescan
/// (the PCIe controller's `rescan_namespaces`, also run by its `take_events` on a Namespace
/// Attribute Changed notice) finds it resized, reformatted or detached, the handle goes stale: its
/// submissions fail with [`Error::StaleNamespace`] and nothing reaches the device. A rescan
/// that finds the namespace unchanged leaves old handles valid.
///
/// A namespace with metadata (an LBA format with MS > 0, with or without protection
/// information) is usable through [`Protected`](crate::Protected) commands only, which say
/// what moves (see [`crate::protection`]); plain commands that move data are refused with
/// [`Error::MetadataMismatch`] before anything reaches the device.
///
/// INVARIANT: `block_size` is a power of two >= 512 and `block_size == 1 << block_shift`;
/// `plain_blocks` is `blocks` without metadata and 0 with metadata (the plain commands' range
/// check is then never passed: one compare, the same as before metadata was accepted).
#[derive(Clone, Debug)]
pub struct Namespace {
    nsid: u32,
    block_size: u32,
    block_shift: u32,
    /// The blocks plain commands may address (see the INVARIANT).
    plain_blocks: u64,
    blocks: u64,
    format: LbaFormatInfo,
    validity: Arc<Validity>,
    data: Arc<IdentifyNamespace>,
    /// The zones of a zoned namespace (Command Set Identifier 02h).
    zones: Option<ZoneGeometry>,
}

/// What a namespace rescan found different about a namespace an old handle describes
/// ([`Error::StaleNamespace`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum NamespaceChange {
    /// Same block size, different capacity (NSZE).
    Resized = 1,
    /// A different LBA format: another block size or metadata format, or one this driver
    /// cannot use.
    Reformatted = 2,
    /// No longer active (detached or deleted).
    Detached = 3,
}

impl NamespaceChange {
    fn from_raw(raw: u8) -> Option<Self> {
        match raw {
            1 => Some(Self::Resized),
            2 => Some(Self::Reformatted),
            3 => Some(Self::Detached),
            _ => None,
        }
    }
}

impl fmt::Display for NamespaceChange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Resized => "resized",
            Self::Reformatted => "reformatted",
            Self::Detached => "detached",
        })
    }
}

/// Whether the handles built from one scan of a namespace still describe it: shared by those
/// handles and by the controller's namespace set, marked once by the rescan that finds the
/// namespace changed, never reset (a later change builds a new one).
///
/// What is guaranteed: the rescan marks it (under the namespace set's write lock, before the
/// new set is published and before the rescan returns), so a submission that happens after
/// that mark — on the thread that ran the rescan or `take_events`, or on any thread that
/// synchronised with it, for instance by taking a handle from the new set — sees it and fails.
/// The driver cannot know of a change before the notice is taken or a rescan runs: until then,
/// and for a submission racing with the rescan on another thread without synchronising with
/// it, old handles pass (as do commands already submitted).
#[derive(Debug, Default)]
struct Validity(AtomicU8);

/// [`Validity`]: the handles describe the namespace (otherwise a [`NamespaceChange`]).
const CURRENT: u8 = 0;

impl Validity {
    /// The change a rescan recorded, if any. One relaxed load: ordering with the rescan
    /// comes from the happens-before described on [`Validity`] (read-after-write coherence).
    #[inline(always)]
    fn change(&self) -> u8 {
        self.0.load(Ordering::Relaxed)
    }

    /// Records `change` (the first one recorded stays).
    fn mark(&self, change: NamespaceChange) {
        let _ =
            self.0
                .compare_exchange(CURRENT, change as u8, Ordering::Relaxed, Ordering::Relaxed);
    }
}

/// Smallest LBA data size the NVM command set allows (LBADS >= 9).
const MIN_BLOCK_SHIFT: u32 = 9;

impl Namespace {
    /// Builds a handle from Identify Namespace data, or says why the namespace cannot be
    /// used: zero size, a bogus LBA data size, blocks (with their interleaved metadata)
    /// larger than the largest transfer (`max_transfer` bytes), or protection information
    /// with less metadata than a PI tuple. Formats with metadata are accepted: plain commands
    /// are refused on them, [`Protected`](crate::Protected) ones move the metadata. Public
    /// for other transports (NVMe/TCP) that read Identify Namespace themselves.
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
        let info = LbaFormatInfo::from_identify(&data);
        if info.pi_type().is_some() && usize::from(info.metadata_size()) < PI_TUPLE_BYTES {
            return Err(format!(
                "its format ({info}) has protection information but {} B of metadata, less \
                 than the {PI_TUPLE_BYTES} B of a PI tuple",
                info.metadata_size()
            ));
        }
        if data.protection_type() != 0 && info.pi_type().is_none() {
            return Err(format!(
                "its protection information type {} (DPS) is reserved",
                data.protection_type()
            ));
        }
        let stride = info.data_bytes(1, false);
        if stride > max_transfer {
            return Err(format!(
                "its {stride} B blocks are larger than the controller's largest transfer \
                 ({max_transfer} B, MDTS)"
            ));
        }
        let blocks = data.nsze;
        Ok(Self {
            nsid,
            block_size: 1 << shift,
            block_shift: shift,
            plain_blocks: if info.has_metadata() { 0 } else { blocks },
            blocks,
            format: info,
            validity: Arc::default(),
            data: Arc::new(data),
            zones: None,
        })
    }

    /// The same namespace with its current format's Extended LBA Format (the NVM command
    /// set's Identify Namespace, CNS 05h CSI 00h, read when the controller sets CTRATT.ELBAS):
    /// the PI format (16-, 32- or 64-bit guard) and storage tag size. `Err(reason)` for the
    /// reserved PI format or PI larger than the metadata. Transports call it after
    /// [`Namespace::from_identify`].
    pub fn with_extended_format(
        self,
        elbaf: nvme_spec::ExtendedLbaFormat,
    ) -> std::result::Result<Self, String> {
        let format = self.format.with_extended_format(elbaf)?;
        if format.pi_type().is_some() && usize::from(format.metadata_size()) < format.pi_bytes() {
            return Err(format!(
                "its format ({format}) has protection information but {} B of metadata, less \
                 than the {} B of its PI tuple",
                format.metadata_size(),
                format.pi_bytes()
            ));
        }
        Ok(Self { format, ..self })
    }

    /// The same namespace as a zoned one (Zoned Namespace Command Set, CSI 02h) with `zones`.
    /// Transports call it once the ZNS Identify Namespace is read.
    pub fn with_zones(self, zones: ZoneGeometry) -> Self {
        Self {
            zones: Some(zones),
            ..self
        }
    }

    /// The zones, when this is a zoned namespace whose zone commands the controller takes
    /// (its Zoned Namespace Command Set enabled at bring-up); `None` for an NVM namespace.
    #[inline]
    pub fn zoned(&self) -> Option<&ZoneGeometry> {
        self.zones.as_ref()
    }

    /// The namespace's LBA format: block size, metadata size and layout, PI type and place.
    #[inline]
    pub fn format(&self) -> LbaFormatInfo {
        self.format
    }

    /// A request that does not fit the namespace's metadata format.
    #[cold]
    pub fn metadata_mismatch(&self, what: &'static str) -> Error {
        Error::MetadataMismatch {
            nsid: self.nsid,
            format: self.format.to_string(),
            what,
        }
    }

    /// Namespace id.
    #[inline]
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
    #[inline]
    pub fn size_bytes(&self) -> u64 {
        self.blocks << self.block_shift
    }

    /// The Identify Namespace data this handle was built from.
    #[inline]
    pub fn identify(&self) -> &IdentifyNamespace {
        &self.data
    }

    /// Whether this handle still describes its namespace: false once a rescan found the
    /// namespace resized, reformatted or detached (see [`Namespace`]).
    #[inline]
    pub fn is_current(&self) -> bool {
        self.validity.change() == CURRENT
    }

    /// Fails with [`Error::StaleNamespace`] when a rescan found the namespace changed: one
    /// load and compare on the submission path.
    #[inline(always)]
    pub fn check_current(&self) -> Result<()> {
        if self.validity.change() != CURRENT {
            return Err(self.stale());
        }
        Ok(())
    }

    #[cold]
    fn stale(&self) -> Error {
        Error::StaleNamespace {
            nsid: self.nsid,
            change: NamespaceChange::from_raw(self.validity.change())
                .unwrap_or(NamespaceChange::Reformatted),
        }
    }

    /// Checks that the handle is current ([`Namespace::check_current`]) and that `blocks`
    /// blocks starting at `lba` lie inside the namespace, for a plain command that moves
    /// data: on a namespace with metadata it fails with [`Error::MetadataMismatch`] (use a
    /// [`Protected`](crate::Protected) command).
    #[inline(always)]
    pub fn check_range(&self, lba: u64, blocks: u64) -> Result<()> {
        self.check_current()?;
        if blocks == 0 {
            return Err(Error::ZeroLength);
        }
        match lba.checked_add(blocks) {
            Some(end) if end <= self.plain_blocks => Ok(()),
            _ if self.format.has_metadata() => Err(self.plain_refused()),
            _ => Err(Error::LbaOutOfRange {
                nsid: self.nsid,
                lba,
                blocks,
                capacity: self.blocks,
            }),
        }
    }

    /// Like [`Namespace::check_range`] over every block, whatever the format: for commands
    /// that move no block data (Write Zeroes, Verify, Dataset Management, Copy) and for
    /// [`Protected`](crate::Protected) ones.
    #[inline]
    pub fn check_blocks(&self, lba: u64, blocks: u64) -> Result<()> {
        self.check_current()?;
        if blocks == 0 {
            return Err(Error::ZeroLength);
        }
        match lba.checked_add(blocks) {
            Some(end) if end <= self.blocks => Ok(()),
            _ => Err(self.out_of_range(lba, blocks)),
        }
    }

    /// Why [`Namespace::check_range`] fails on a namespace with metadata.
    #[cold]
    fn plain_refused(&self) -> Error {
        self.metadata_mismatch(match self.format.layout() {
            MetadataLayout::Extended => {
                "each block moves with its metadata (extended LBA): use a Protected \
                 command, whose buffer holds blocks x (block size + metadata size)"
            }
            _ => {
                "its metadata goes to a separate buffer: use a Protected command with a \
                 metadata buffer (or PRACT when the metadata is only the PI)"
            }
        })
    }

    #[cold]
    fn out_of_range(&self, lba: u64, blocks: u64) -> Error {
        Error::LbaOutOfRange {
            nsid: self.nsid,
            lba,
            blocks,
            capacity: self.blocks,
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
    fn metadata_formats_are_accepted_for_protected_commands_only() {
        use crate::protection::{MetadataLayout, PiType};
        // 512 + 8, extended LBA (FLBAS bit 4), PI type 1.
        let mut d = identify(9, 8, 100);
        d.flbas = 1 << 4;
        d.dps = 1;
        let n = Namespace::from_identify(3, d, 1 << 20).unwrap();
        let f = n.format();
        assert_eq!((f.block_size(), f.metadata_size()), (512, 8));
        assert_eq!(
            (f.layout(), f.pi_type()),
            (MetadataLayout::Extended, Some(PiType::Type1))
        );
        assert_eq!(f.to_string(), "512+8 extended, PI type 1 (last 8 bytes)");
        // Plain data commands are refused by name, whole-namespace checks pass.
        let e = n.check_range(0, 1).unwrap_err();
        assert!(matches!(e, Error::MetadataMismatch { nsid: 3, .. }), "{e}");
        assert!(e.to_string().contains("extended"), "{e}");
        assert!(n.check_blocks(0, 100).is_ok());
        assert!(matches!(
            n.check_blocks(99, 2),
            Err(Error::LbaOutOfRange { .. })
        ));
        // 4096 + 16, separate buffer, no PI.
        let n = Namespace::from_identify(3, identify(12, 16, 100), 1 << 20).unwrap();
        assert_eq!(n.format().layout(), MetadataLayout::Separate);
        let e = n.check_range(0, 1).unwrap_err();
        assert!(e.to_string().contains("separate"), "{e}");
        // Protection information without a PI tuple's worth of metadata is refused.
        let mut d = identify(9, 0, 100);
        d.dps = 1;
        let why = Namespace::from_identify(3, d, 1 << 20).unwrap_err();
        assert!(why.contains("protection information"), "{why}");
        // Extended blocks count their metadata against the largest transfer.
        let mut d = identify(12, 64, 100);
        d.flbas = 1 << 4;
        assert!(Namespace::from_identify(3, d, 4096).is_err());
    }

    #[test]
    fn a_rescan_marks_only_the_handles_of_changed_namespaces() {
        let handle = |nsid, lbads, nsze| {
            Namespace::from_identify(nsid, identify(lbads, 0, nsze), 1 << 20).unwrap()
        };
        let old = NamespaceSet {
            active: vec![
                handle(1, 9, 100),
                handle(2, 9, 100),
                handle(3, 9, 100),
                handle(4, 9, 100),
                handle(5, 9, 100),
            ],
            unsupported: Vec::new(),
        };
        let kept: Vec<Namespace> = old.active.clone();
        let mut new = NamespaceSet {
            // 1 unchanged, 2 resized, 3 reformatted, 4 now unusable, 5 detached.
            active: vec![handle(1, 9, 100), handle(2, 9, 50), handle(3, 12, 100)],
            unsupported: vec![(4, "metadata".into())],
        };
        new.supersede(&old);
        let change = |n: &Namespace| {
            n.check_current().err().map(|e| match e {
                Error::StaleNamespace { nsid, change } => {
                    assert_eq!(nsid, n.nsid());
                    change
                }
                other => panic!("{other:?}"),
            })
        };
        let found: Vec<Option<NamespaceChange>> = kept.iter().map(change).collect();
        assert_eq!(
            found,
            [
                None,
                Some(NamespaceChange::Resized),
                Some(NamespaceChange::Reformatted),
                Some(NamespaceChange::Reformatted),
                Some(NamespaceChange::Detached),
            ]
        );
        // The new set's handles are all current; the unchanged one shares the old validity,
        // and the range check refuses a stale handle first.
        assert!(new.active.iter().all(Namespace::is_current));
        assert!(Arc::ptr_eq(&new.active[0].validity, &kept[0].validity));
        assert!(matches!(
            kept[1].check_range(0, 1),
            Err(Error::StaleNamespace { nsid: 2, .. })
        ));
        // A second change keeps the first one recorded.
        kept[1].validity.mark(NamespaceChange::Detached);
        assert_eq!(change(&kept[1]), Some(NamespaceChange::Resized));
    }

    #[test]
    fn refuses_blocks_larger_than_the_largest_transfer() {
        // 64 KiB blocks with a 32 KiB MDTS: splitting would divide by zero blocks per command.
        let why = Namespace::from_identify(1, identify(16, 0, 100), 32 << 10).unwrap_err();
        assert!(why.contains("largest transfer"), "{why}");
        assert!(Namespace::from_identify(1, identify(15, 0, 100), 32 << 10).is_ok());
    }
}

/// The namespaces a controller found in one scan. For transports: a controller keeps its
/// current set, and a rescan builds a new one and calls [`NamespaceSet::supersede`] on it
/// before publishing it, so that old handles of changed namespaces go stale.
#[derive(Clone, Debug, Default)]
pub struct NamespaceSet {
    /// Usable namespaces, in namespace id order.
    pub active: Vec<Namespace>,
    /// Active namespaces that cannot be used, and why.
    pub unsupported: Vec<(u32, String)>,
}

impl NamespaceSet {
    /// Prepares `self`, a fresh scan, to replace `old`: a namespace found with the same
    /// geometry (block size and capacity, usable) shares the old handles' validity state, so
    /// they stay valid; every other old handle is marked stale with what changed
    /// ([`Namespace::is_current`] turns false). The caller holds the lock of the set it
    /// publishes under and publishes `self` right after: a submission that synchronises with
    /// the publication then sees the mark (see the `Validity` type's guarantee in the source).
    pub fn supersede(&mut self, old: &NamespaceSet) {
        for before in &old.active {
            let nsid = before.nsid;
            let change = match self.active.iter_mut().find(|n| n.nsid == nsid) {
                Some(now) if now.format == before.format => {
                    if now.blocks == before.blocks {
                        // Unchanged (or already stale, which stays stale: a later change
                        // back to the old geometry builds no bridge to handles of before).
                        now.validity = Arc::clone(&before.validity);
                        continue;
                    }
                    NamespaceChange::Resized
                }
                Some(_) => NamespaceChange::Reformatted,
                None if self.unsupported.iter().any(|(id, _)| *id == nsid) => {
                    NamespaceChange::Reformatted
                }
                None => NamespaceChange::Detached,
            };
            before.validity.mark(change);
        }
    }

    /// Every active namespace id, usable or not, with its geometry (None when unusable).
    fn ids(&self) -> impl Iterator<Item = (u32, Option<(LbaFormatInfo, u64)>)> + '_ {
        self.active
            .iter()
            .map(|n| (n.nsid, Some((n.format, n.blocks))))
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
    /// What changed from the scan `old` to the scan `new`.
    pub fn between(old: &NamespaceSet, new: &NamespaceSet) -> Self {
        type Geometry = Option<(LbaFormatInfo, u64)>;
        let before: std::collections::BTreeMap<u32, Geometry> = old.ids().collect();
        let after: std::collections::BTreeMap<u32, Geometry> = new.ids().collect();
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
