//! One VFS per namespace per process.
//!
//! A [`crate::Store`] keeps the directory in memory and writes it back whole, so two stores
//! on one namespace would each overwrite the other's files. [`Claim::take`] records a
//! medium's [`crate::BlockDevice::identity`] in a process-wide table before the store reads
//! or formats anything, and refuses an identity already there; dropping the claim (with its
//! [`crate::NvmeVfs`], after the store and its queue pair are gone) releases it.
//!
//! Another process never gets that far on PCIe: VFIO makes the controller's IOMMU group (or
//! its device cdev) exclusive to one process, so its `Controller::open_pci` fails with
//! `nvme_vfio::VfioError::InUse`, whose message says so and that a second process gets in
//! only through the first. Over NVMe/TCP nothing stops another host or process from
//! connecting to the same subsystem: the table here cannot see it (see `docs/sqlite.md`).

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

use crate::error::{Error, Result};

/// Claimed identities, each with the name of the VFS holding it.
static CLAIMS: Mutex<BTreeMap<String, String>> = Mutex::new(BTreeMap::new());

fn claims() -> MutexGuard<'static, BTreeMap<String, String>> {
    // The map is only inserted into and removed from (each a single call that leaves it
    // whole even if it unwinds), so a poisoned lock still guards a consistent map.
    CLAIMS.lock().unwrap_or_else(|e| e.into_inner())
}

/// A namespace held by one VFS; released on drop.
#[derive(Debug)]
pub(crate) struct Claim {
    identity: String,
}

impl Claim {
    /// Claims `identity` for the VFS named `vfs`, or fails with [`Error::NamespaceInUse`]
    /// naming the VFS that holds it.
    pub(crate) fn take(identity: String, vfs: &str) -> Result<Self> {
        let mut claims = claims();
        if let Some(holder) = claims.get(&identity) {
            return Err(Error::NamespaceInUse {
                namespace: identity,
                vfs: holder.clone(),
            });
        }
        claims.insert(identity.clone(), vfs.to_owned());
        Ok(Self { identity })
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        claims().remove(&self.identity);
    }
}
