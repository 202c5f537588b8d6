//! Multipath basics: when two controllers reach the same namespace, and the namespaces of
//! several open controllers grouped into paths (NVMe Base 2.0 §2.4.1 and §8.1 multi-path I/O
//! and namespace sharing; Identify §5.17.2.1 CMIC and SUBNQN, NVM CS 1.0 §4.1.5.1 NMIC, NGUID
//! and EUI64, Namespace Identification Descriptors §5.17.2.3).
//!
//! A namespace is one namespace through two controllers ([`NamespaceIdentity::same_namespace`])
//! when:
//! - both controllers report the same, non-empty, subsystem NQN (SUBNQN) and are different
//!   controllers of it (CNTLID), in a subsystem that may hold several (CMIC bit 1);
//! - the NSID is the same (NSIDs are unique within a subsystem) and the namespace is shared
//!   (NMIC bit 0) as both report it;
//! - it has at least one globally unique identifier (NGUID, EUI64 or UUID; an all-zero value
//!   means "not reported"), and each kind of identifier is the same through both (a kind one
//!   controller reports and the other does not is a mismatch, as for Linux's
//!   `nvme_ns_ids_equal`), and so is the Command Set Identifier when both report one.
//!
//! Anything else is a typed [`NotSameNamespace`]: taking two namespaces for one corrupts
//! data, missing that they are one only loses a path, so every doubt keeps them apart.
//!
//! [`Multipath`] groups the identities read from several controllers: one
//! [`MultipathNamespace`] per namespace with its [`NamespacePath`]s (the index of the
//! controller in the caller's list and its CNTLID), from which a program picks a path
//! ([`MultipathNamespace::select`]) and fails over to the next one
//! ([`MultipathNamespace::failover`]). Nothing here is on an I/O path: identities are read
//! with admin commands once, when the controllers are opened or rescanned.

use std::fmt::Write as _;

use nvme_spec::admin_log::NsIdDescriptor;
use nvme_spec::identify::{Cmic, IdentifyController, IdentifyNamespace, Nmic};

use crate::admin::AdminCommands;
use crate::controller::NvmeController;
use crate::error::{Error, Result};

/// A kind of globally unique namespace identifier.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IdKind {
    /// Namespace Globally Unique Identifier (16 bytes).
    Nguid,
    /// IEEE Extended Unique Identifier (8 bytes).
    Eui64,
    /// Namespace UUID (16 bytes; descriptors only).
    Uuid,
}

impl std::fmt::Display for IdKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            IdKind::Nguid => "NGUID",
            IdKind::Eui64 => "EUI64",
            IdKind::Uuid => "UUID",
        })
    }
}

/// The identifiers a controller reports for one namespace: from the Namespace Identification
/// Descriptors (CNS 03h) and, where a descriptor is missing, Identify Namespace's NGUID and
/// EUI64 fields. An all-zero identifier is not reported (`None`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct NamespaceIds {
    /// NGUID.
    pub nguid: Option<[u8; 16]>,
    /// EUI64.
    pub eui64: Option<[u8; 8]>,
    /// UUID.
    pub uuid: Option<[u8; 16]>,
    /// Command Set Identifier (0 NVM, 2 Zoned), when a descriptor reports it.
    pub csi: Option<u8>,
}

/// `Some(id)` unless every byte is zero.
fn reported<const N: usize>(id: [u8; N]) -> Option<[u8; N]> {
    id.iter().any(|&b| b != 0).then_some(id)
}

/// Lower-case hex of `id`, or "not reported".
fn hex_or_none(id: Option<&[u8]>) -> String {
    match id {
        None => "not reported".to_string(),
        Some(bytes) => bytes.iter().fold(String::new(), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        }),
    }
}

impl NamespaceIds {
    /// The identifiers of `ns` and its descriptor list (descriptors first: they are the
    /// identifiers of every NVMe 1.3+ controller, and the only place for a UUID).
    pub fn new(ns: &IdentifyNamespace, descriptors: &[NsIdDescriptor]) -> Self {
        let mut ids = NamespaceIds::default();
        for d in descriptors {
            match *d {
                NsIdDescriptor::Nguid(id) => ids.nguid = ids.nguid.or(reported(id)),
                NsIdDescriptor::Eui64(id) => ids.eui64 = ids.eui64.or(reported(id)),
                NsIdDescriptor::Uuid(id) => ids.uuid = ids.uuid.or(reported(id)),
                NsIdDescriptor::Csi(csi) => ids.csi = ids.csi.or(Some(csi)),
            }
        }
        ids.nguid = ids.nguid.or(reported(ns.nguid));
        ids.eui64 = ids.eui64.or(reported(ns.eui64));
        ids
    }

    /// Whether any globally unique identifier (NGUID, EUI64, UUID) is reported.
    pub fn any_unique(&self) -> bool {
        self.nguid.is_some() || self.eui64.is_some() || self.uuid.is_some()
    }

    /// The identifier of `kind`, as bytes.
    pub fn get(&self, kind: IdKind) -> Option<&[u8]> {
        match kind {
            IdKind::Nguid => self.nguid.as_ref().map(|b| &b[..]),
            IdKind::Eui64 => self.eui64.as_ref().map(|b| &b[..]),
            IdKind::Uuid => self.uuid.as_ref().map(|b| &b[..]),
        }
    }

    /// The first kind whose identifiers differ between `self` and `other`.
    fn first_difference(&self, other: &NamespaceIds) -> Option<IdKind> {
        [IdKind::Nguid, IdKind::Eui64, IdKind::Uuid]
            .into_iter()
            .find(|&k| self.get(k) != other.get(k))
    }
}

/// Who a namespace is, as one controller sees it: the controller's subsystem and identity
/// (Identify Controller SUBNQN, CNTLID, CMIC) and the namespace's NSID, sharing capability
/// (NMIC) and identifiers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NamespaceIdentity {
    /// NVM Subsystem NQN (empty: not reported).
    pub subnqn: String,
    /// Controller ID.
    pub cntlid: u16,
    /// The controller's multi-path capabilities.
    pub cmic: Cmic,
    /// Namespace ID.
    pub nsid: u32,
    /// The namespace's sharing capabilities.
    pub nmic: Nmic,
    /// The namespace's identifiers.
    pub ids: NamespaceIds,
}

/// Why two (controller, namespace) pairs are not two paths to one namespace.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NotSameNamespace {
    /// A controller reports no subsystem NQN.
    #[error(
        "controller {cntlid} reports no subsystem NQN (Identify Controller SUBNQN is empty): \
         its namespaces cannot be matched with another controller's"
    )]
    NoSubsystemNqn {
        /// The controller without one.
        cntlid: u16,
    },
    /// The controllers belong to different subsystems.
    #[error("the controllers belong to different subsystems ({a} and {b})")]
    DifferentSubsystem {
        /// The first controller's SUBNQN.
        a: String,
        /// The second controller's SUBNQN.
        b: String,
    },
    /// The NSIDs differ.
    #[error("namespace IDs differ ({a} and {b}): different namespaces")]
    DifferentNsid {
        /// The first NSID.
        a: u32,
        /// The second NSID.
        b: u32,
    },
    /// Both are the same controller (opened twice), not two paths.
    #[error(
        "both are controller {cntlid} of {subnqn}: the same controller reached twice is not \
         a second path"
    )]
    SameController {
        /// The subsystem.
        subnqn: String,
        /// The controller.
        cntlid: u16,
    },
    /// A controller reports a subsystem of one controller (CMIC bit 1 clear).
    #[error(
        "controller {cntlid} reports a subsystem with a single controller (Identify Controller \
         CMIC bit 1 clear), yet another controller claims the same NQN: not trusted as two paths"
    )]
    SingleController {
        /// The controller that says so.
        cntlid: u16,
    },
    /// The namespace is private to a controller (NMIC bit 0 clear).
    #[error(
        "namespace {nsid} is private to controller {cntlid} (Identify Namespace NMIC bit 0 \
         clear): not reachable through another controller"
    )]
    NotShared {
        /// The namespace.
        nsid: u32,
        /// The controller reporting it private.
        cntlid: u16,
    },
    /// No globally unique identifier to tell the namespace by.
    #[error(
        "namespace {nsid} has no unique identifier through controller {cntlid} (NGUID, EUI64 \
         and UUID all zero or absent): it cannot be recognised through another controller"
    )]
    NoIdentifier {
        /// The namespace.
        nsid: u32,
        /// The controller reporting none.
        cntlid: u16,
    },
    /// An identifier differs between the controllers.
    #[error("namespace {nsid}: {kind} is {a} through one controller and {b} through the other")]
    IdentifierDiffers {
        /// The namespace.
        nsid: u32,
        /// Which identifier.
        kind: IdKind,
        /// Through the first controller (hex, or "not reported").
        a: String,
        /// Through the second controller.
        b: String,
    },
    /// The Command Set Identifiers differ.
    #[error(
        "namespace {nsid}: command set {a:#04x} through one controller, {b:#04x} through the other"
    )]
    CommandSetDiffers {
        /// The namespace.
        nsid: u32,
        /// Through the first controller.
        a: u8,
        /// Through the second controller.
        b: u8,
    },
}

impl NamespaceIdentity {
    /// The identity of namespace `nsid` from the controller's and the namespace's Identify
    /// data and its Namespace Identification Descriptors.
    pub fn new(
        ctrl: &IdentifyController,
        nsid: u32,
        ns: &IdentifyNamespace,
        descriptors: &[NsIdDescriptor],
    ) -> Self {
        NamespaceIdentity {
            subnqn: ctrl.subsystem_nqn(),
            cntlid: ctrl.cntlid,
            cmic: ctrl.cmic_flags(),
            nsid,
            nmic: ns.nmic_flags(),
            ids: NamespaceIds::new(ns, descriptors),
        }
    }

    /// Reads the identity of namespace `nsid` from `ctrl`: Identify Namespace and the
    /// descriptor list (a controller that refuses CNS 03h with a status, as NVMe 1.2 ones
    /// may, leaves the Identify Namespace fields alone).
    pub fn read<C: NvmeController + ?Sized>(ctrl: &C, nsid: u32) -> Result<Self> {
        let ns = ctrl.identify_namespace(nsid)?;
        let descriptors = match ctrl.namespace_descriptors(nsid) {
            Ok(d) => d,
            Err(Error::Command { .. }) => Vec::new(),
            Err(e) => return Err(e),
        };
        Ok(Self::new(ctrl.identify(), nsid, &ns, &descriptors))
    }

    /// Reads the identity of every active namespace of `ctrl` (Identify CNS 02h, whether or
    /// not the driver can do I/O on it), in NSID order.
    pub fn read_active<C: NvmeController + ?Sized>(ctrl: &C) -> Result<Vec<Self>> {
        let mut out = Vec::new();
        let mut after = 0;
        loop {
            let ids = ctrl.active_namespace_ids(after)?;
            // A list that does not move forward ends the walk (a device's reply is untrusted).
            let Some(&last) = ids.last().filter(|&&last| last > after) else {
                break;
            };
            for nsid in ids.into_iter().filter(|&n| n > after) {
                out.push(Self::read(ctrl, nsid)?);
            }
            after = last;
            if after >= nvme_spec::log::NSID_BROADCAST - 1 {
                break;
            }
        }
        Ok(out)
    }

    /// The namespace may be attached to several controllers (NMIC bit 0).
    pub fn is_shared(&self) -> bool {
        self.nmic.contains(Nmic::SHARED)
    }

    /// `Ok` when `self` and `other` are two paths (two controllers of one subsystem) to one
    /// namespace; else why not (the rules in the module documentation, in that order).
    pub fn same_namespace(
        &self,
        other: &NamespaceIdentity,
    ) -> std::result::Result<(), NotSameNamespace> {
        for side in [self, other] {
            if side.subnqn.is_empty() {
                return Err(NotSameNamespace::NoSubsystemNqn {
                    cntlid: side.cntlid,
                });
            }
        }
        if self.subnqn != other.subnqn {
            return Err(NotSameNamespace::DifferentSubsystem {
                a: self.subnqn.clone(),
                b: other.subnqn.clone(),
            });
        }
        if self.nsid != other.nsid {
            return Err(NotSameNamespace::DifferentNsid {
                a: self.nsid,
                b: other.nsid,
            });
        }
        if self.cntlid == other.cntlid {
            return Err(NotSameNamespace::SameController {
                subnqn: self.subnqn.clone(),
                cntlid: self.cntlid,
            });
        }
        for side in [self, other] {
            if !side.cmic.contains(Cmic::MULTI_CONTROLLER) {
                return Err(NotSameNamespace::SingleController {
                    cntlid: side.cntlid,
                });
            }
        }
        for side in [self, other] {
            if !side.is_shared() {
                return Err(NotSameNamespace::NotShared {
                    nsid: side.nsid,
                    cntlid: side.cntlid,
                });
            }
        }
        for side in [self, other] {
            if !side.ids.any_unique() {
                return Err(NotSameNamespace::NoIdentifier {
                    nsid: side.nsid,
                    cntlid: side.cntlid,
                });
            }
        }
        if let Some(kind) = self.ids.first_difference(&other.ids) {
            return Err(NotSameNamespace::IdentifierDiffers {
                nsid: self.nsid,
                kind,
                a: hex_or_none(self.ids.get(kind)),
                b: hex_or_none(other.ids.get(kind)),
            });
        }
        if let (Some(a), Some(b)) = (self.ids.csi, other.ids.csi) {
            if a != b {
                return Err(NotSameNamespace::CommandSetDiffers {
                    nsid: self.nsid,
                    a,
                    b,
                });
            }
        }
        Ok(())
    }
}

/// One path to a namespace: a controller of the list given to [`Multipath`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct NamespacePath {
    /// Index of the controller in the caller's list.
    pub controller: usize,
    /// Its Controller ID.
    pub cntlid: u16,
}

/// One namespace and the paths that reach it, in the order the controllers were given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MultipathNamespace {
    identity: NamespaceIdentity,
    paths: Vec<NamespacePath>,
}

impl MultipathNamespace {
    /// The identity through the first path.
    pub fn identity(&self) -> &NamespaceIdentity {
        &self.identity
    }

    /// Namespace ID.
    pub fn nsid(&self) -> u32 {
        self.identity.nsid
    }

    /// Subsystem NQN (empty: not reported).
    pub fn subnqn(&self) -> &str {
        &self.identity.subnqn
    }

    /// The paths, first the one of the lowest controller index.
    pub fn paths(&self) -> &[NamespacePath] {
        &self.paths
    }

    /// Whether `controller` (an index of the caller's list) reaches this namespace.
    pub fn reachable_through(&self, controller: usize) -> bool {
        self.paths.iter().any(|p| p.controller == controller)
    }

    /// The first path `usable` accepts (e.g. whose controller is not failed), in path order.
    pub fn select(&self, mut usable: impl FnMut(&NamespacePath) -> bool) -> Option<NamespacePath> {
        self.paths.iter().copied().find(|p| usable(p))
    }

    /// After the path through `failed` (a controller index) failed: the next path after it,
    /// in path order and wrapping around, that `usable` accepts; never `failed` itself.
    /// `None` when no other path is usable. A controller that is not a path of this
    /// namespace starts the search from the first path.
    pub fn failover(
        &self,
        failed: usize,
        mut usable: impl FnMut(&NamespacePath) -> bool,
    ) -> Option<NamespacePath> {
        let start = self
            .paths
            .iter()
            .position(|p| p.controller == failed)
            .map_or(0, |i| i + 1);
        let n = self.paths.len();
        (0..n)
            .map(|k| self.paths[(start + k) % n])
            .find(|p| p.controller != failed && usable(p))
    }
}

/// A namespace kept out of an entry with the same subsystem NQN and NSID, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeptApart {
    /// The controller (index) whose namespace got an entry of its own.
    pub controller: usize,
    /// Its NSID.
    pub nsid: u32,
    /// Why it is not another path of the earlier entry.
    pub reason: NotSameNamespace,
}

/// The namespaces of several controllers, grouped: one entry per namespace with its paths.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Multipath {
    namespaces: Vec<MultipathNamespace>,
    kept_apart: Vec<KeptApart>,
}

impl Multipath {
    /// Groups `(controller index, identity)` pairs: an identity joins the first entry with
    /// its subsystem NQN and NSID that it is [`NamespaceIdentity::same_namespace`] with and
    /// that has no path through a controller of its CNTLID yet;
    /// otherwise it starts an entry of its own (recorded in [`Multipath::kept_apart`] when an
    /// entry with that NQN and NSID existed).
    pub fn group(identities: impl IntoIterator<Item = (usize, NamespaceIdentity)>) -> Self {
        let mut out = Multipath::default();
        for (controller, identity) in identities {
            let path = NamespacePath {
                controller,
                cntlid: identity.cntlid,
            };
            let mut reason = None;
            let mut joined = false;
            for entry in out.namespaces.iter_mut().filter(|e| {
                e.identity.subnqn == identity.subnqn && e.identity.nsid == identity.nsid
            }) {
                // A controller already on the entry, reached again, is no second path.
                let known = entry.paths.iter().any(|p| p.cntlid == identity.cntlid);
                let verdict = if known {
                    Err(NotSameNamespace::SameController {
                        subnqn: identity.subnqn.clone(),
                        cntlid: identity.cntlid,
                    })
                } else {
                    entry.identity.same_namespace(&identity)
                };
                match verdict {
                    Ok(()) => {
                        entry.paths.push(path);
                        joined = true;
                        break;
                    }
                    Err(why) => reason = reason.or(Some(why)),
                }
            }
            if joined {
                continue;
            }
            if let Some(reason) = reason {
                out.kept_apart.push(KeptApart {
                    controller,
                    nsid: identity.nsid,
                    reason,
                });
            }
            out.namespaces.push(MultipathNamespace {
                identity,
                paths: vec![path],
            });
        }
        out
    }

    /// Reads the identity of every active namespace of each of `controllers`
    /// ([`NamespaceIdentity::read_active`]) and groups them; paths name controllers by their
    /// index in the slice.
    pub fn discover<C: NvmeController>(controllers: &[C]) -> Result<Self> {
        let mut identities = Vec::new();
        for (i, ctrl) in controllers.iter().enumerate() {
            identities.extend(
                NamespaceIdentity::read_active(ctrl)?
                    .into_iter()
                    .map(|id| (i, id)),
            );
        }
        Ok(Self::group(identities))
    }

    /// The namespaces, in the order their first path was given.
    pub fn namespaces(&self) -> &[MultipathNamespace] {
        &self.namespaces
    }

    /// The namespace `nsid` of subsystem `subnqn` (the first entry, when several were kept
    /// apart).
    pub fn find(&self, subnqn: &str, nsid: u32) -> Option<&MultipathNamespace> {
        self.namespaces
            .iter()
            .find(|e| e.identity.subnqn == subnqn && e.identity.nsid == nsid)
    }

    /// The namespaces that `controller` (an index) reaches.
    pub fn of_controller(&self, controller: usize) -> impl Iterator<Item = &MultipathNamespace> {
        self.namespaces
            .iter()
            .filter(move |e| e.reachable_through(controller))
    }

    /// Namespaces that had the NQN and NSID of an earlier entry but were not taken for it.
    pub fn kept_apart(&self) -> &[KeptApart] {
        &self.kept_apart
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NQN: &str = "nqn.2019-08.org.qemu:subsys0";

    fn ctrl(nqn: &str, cntlid: u16, cmic: u8) -> IdentifyController {
        let mut c = IdentifyController::default();
        c.subnqn[..nqn.len()].copy_from_slice(nqn.as_bytes());
        c.cntlid = cntlid;
        c.cmic = cmic;
        c
    }

    fn ns(nmic: u8, nguid: [u8; 16], eui64: [u8; 8]) -> IdentifyNamespace {
        IdentifyNamespace {
            nmic,
            nguid,
            eui64,
            ..IdentifyNamespace::default()
        }
    }

    /// Namespace 1 through controller `cntlid` of subsystem `nqn`, shared, with its NGUID in
    /// both Identify Namespace and a descriptor.
    fn shared(nqn: &str, cntlid: u16, nguid: [u8; 16]) -> NamespaceIdentity {
        NamespaceIdentity::new(
            &ctrl(nqn, cntlid, Cmic::MULTI_CONTROLLER.bits()),
            1,
            &ns(Nmic::SHARED.bits(), nguid, [0; 8]),
            &[NsIdDescriptor::Nguid(nguid), NsIdDescriptor::Csi(0)],
        )
    }

    #[test]
    fn same_namespace_through_two_controllers() {
        let a = shared(NQN, 0, [7; 16]);
        let b = shared(NQN, 1, [7; 16]);
        assert_eq!(a.same_namespace(&b), Ok(()));
        assert_eq!(b.same_namespace(&a), Ok(()));
        assert_eq!(a.ids.nguid, Some([7; 16]));
        assert_eq!(a.ids.csi, Some(0));
        assert_eq!(a.subnqn, NQN);
    }

    #[test]
    fn different_subsystem() {
        let a = shared(NQN, 0, [7; 16]);
        let b = shared("nqn.2019-08.org.qemu:subsys1", 1, [7; 16]);
        assert!(matches!(
            a.same_namespace(&b),
            Err(NotSameNamespace::DifferentSubsystem { ref b, .. }) if b.ends_with("subsys1")
        ));
        let c = shared("", 1, [7; 16]);
        assert_eq!(
            a.same_namespace(&c),
            Err(NotSameNamespace::NoSubsystemNqn { cntlid: 1 })
        );
    }

    #[test]
    fn same_controller_and_different_nsid() {
        let a = shared(NQN, 0, [7; 16]);
        assert!(matches!(
            a.same_namespace(&a.clone()),
            Err(NotSameNamespace::SameController { cntlid: 0, .. })
        ));
        let mut b = shared(NQN, 1, [7; 16]);
        b.nsid = 2;
        assert_eq!(
            a.same_namespace(&b),
            Err(NotSameNamespace::DifferentNsid { a: 1, b: 2 })
        );
    }

    #[test]
    fn not_shared_or_single_controller() {
        let a = shared(NQN, 0, [7; 16]);
        let private = NamespaceIdentity::new(
            &ctrl(NQN, 1, Cmic::MULTI_CONTROLLER.bits()),
            1,
            &ns(0, [7; 16], [0; 8]),
            &[],
        );
        assert_eq!(
            a.same_namespace(&private),
            Err(NotSameNamespace::NotShared { nsid: 1, cntlid: 1 })
        );
        let single = NamespaceIdentity::new(
            &ctrl(NQN, 1, 0),
            1,
            &ns(Nmic::SHARED.bits(), [7; 16], [0; 8]),
            &[],
        );
        assert_eq!(
            a.same_namespace(&single),
            Err(NotSameNamespace::SingleController { cntlid: 1 })
        );
    }

    #[test]
    fn nguid_mismatch() {
        let a = shared(NQN, 0, [7; 16]);
        let b = shared(NQN, 1, [8; 16]);
        match a.same_namespace(&b) {
            Err(NotSameNamespace::IdentifierDiffers { kind, a, b, .. }) => {
                assert_eq!(kind, IdKind::Nguid);
                assert_eq!(a, "07".repeat(16));
                assert_eq!(b, "08".repeat(16));
            }
            other => panic!("expected an NGUID mismatch, got {other:?}"),
        }
        // An EUI64 reported by one controller only is a mismatch too.
        let mut c = shared(NQN, 1, [7; 16]);
        c.ids.eui64 = Some([1; 8]);
        assert!(matches!(
            a.same_namespace(&c),
            Err(NotSameNamespace::IdentifierDiffers { kind: IdKind::Eui64, ref a, .. }) if a == "not reported"
        ));
        // And a different command set.
        c.ids.eui64 = None;
        c.ids.csi = Some(2);
        assert_eq!(
            a.same_namespace(&c),
            Err(NotSameNamespace::CommandSetDiffers {
                nsid: 1,
                a: 0,
                b: 2
            })
        );
    }

    #[test]
    fn all_zero_identifiers_are_no_identity() {
        let zero = |cntlid| {
            NamespaceIdentity::new(
                &ctrl(NQN, cntlid, Cmic::MULTI_CONTROLLER.bits()),
                1,
                &ns(Nmic::SHARED.bits(), [0; 16], [0; 8]),
                &[
                    NsIdDescriptor::Nguid([0; 16]),
                    NsIdDescriptor::Eui64([0; 8]),
                    NsIdDescriptor::Uuid([0; 16]),
                ],
            )
        };
        let (a, b) = (zero(0), zero(1));
        assert_eq!(a.ids, NamespaceIds::default());
        assert_eq!(
            a.same_namespace(&b),
            Err(NotSameNamespace::NoIdentifier { nsid: 1, cntlid: 0 })
        );
    }

    #[test]
    fn identify_fields_fill_in_for_missing_descriptors() {
        let id = NamespaceIds::new(&ns(1, [3; 16], [4; 8]), &[NsIdDescriptor::Uuid([5; 16])]);
        assert_eq!(id.nguid, Some([3; 16]));
        assert_eq!(id.eui64, Some([4; 8]));
        assert_eq!(id.uuid, Some([5; 16]));
        // A descriptor wins over the Identify Namespace field.
        let id = NamespaceIds::new(&ns(1, [3; 16], [0; 8]), &[NsIdDescriptor::Nguid([9; 16])]);
        assert_eq!(id.nguid, Some([9; 16]));
    }

    #[test]
    fn grouping_and_failover() {
        // Controller 0 and 1 of one subsystem share namespace 1; controller 1 also has a
        // private namespace 2; controller 2 (another subsystem) has its own namespace 1.
        let private2 = NamespaceIdentity::new(
            &ctrl(NQN, 1, Cmic::MULTI_CONTROLLER.bits()),
            2,
            &ns(0, [2; 16], [0; 8]),
            &[],
        );
        let other = shared("nqn.other", 0, [7; 16]);
        let mp = Multipath::group([
            (0, shared(NQN, 0, [7; 16])),
            (1, shared(NQN, 1, [7; 16])),
            (1, private2),
            (2, other),
            // The same controller listed twice: kept apart, with the reason.
            (3, shared(NQN, 1, [7; 16])),
        ]);
        assert_eq!(mp.namespaces().len(), 4);
        let one = mp.find(NQN, 1).unwrap();
        assert_eq!(
            one.paths(),
            [
                NamespacePath {
                    controller: 0,
                    cntlid: 0
                },
                NamespacePath {
                    controller: 1,
                    cntlid: 1
                },
            ]
        );
        assert!(one.reachable_through(1) && !one.reachable_through(2));
        assert_eq!(mp.find(NQN, 2).unwrap().paths().len(), 1);
        assert_eq!(mp.find("nqn.other", 1).unwrap().paths()[0].controller, 2);
        assert_eq!(mp.of_controller(1).count(), 2);
        assert_eq!(mp.kept_apart().len(), 1);
        assert_eq!(mp.kept_apart()[0].controller, 3);
        assert!(matches!(
            mp.kept_apart()[0].reason,
            NotSameNamespace::SameController { cntlid: 1, .. }
        ));

        // Pick a path, fail over from it, and find none when every other path is down.
        assert_eq!(one.select(|_| true).unwrap().controller, 0);
        assert_eq!(one.select(|p| p.controller != 0).unwrap().controller, 1);
        assert_eq!(one.failover(0, |_| true).unwrap().controller, 1);
        assert_eq!(one.failover(1, |_| true).unwrap().controller, 0);
        assert_eq!(one.failover(0, |p| p.controller != 1), None);
        assert_eq!(one.select(|_| false), None);
    }
}
