//! The device side of the power-loss model (`crate::power`): every command that changes the
//! medium goes through [`Device::modify`], Flush through [`Device::flush_cache`], and every I/O
//! command first through [`Device::power_gate`] (the configured cut point; after a cut, I/O
//! fails with Commands Aborted due to Power Loss Notification, NVMe Base 2.0 §4.6.1.2.1).
//!
//! Without [`crate::SimConfig::write_cache`] these are straight medium accesses: the medium is
//! memory and nothing is volatile.
//!
//! Lock order: the cache, then a namespace's bytes (as [`cut`] and the handle take them).

use std::sync::{Mutex, MutexGuard};

use nvme_spec::feature::{Feature, FeatureId};
use nvme_spec::opcode::feature;
use nvme_spec::status::generic;

use super::io::{block_range, status};
use super::{Device, Shared};
use crate::disk::Disk;
use crate::power::WriteCache;
use crate::prp::Fail;

/// Locks the cache (a panic while holding it leaves a consistent cache: every change is one
/// call that finishes its bookkeeping before it returns).
pub(crate) fn lock(power: &Mutex<WriteCache>) -> MutexGuard<'_, WriteCache> {
    power.lock().unwrap_or_else(|p| p.into_inner())
}

/// Cuts the power: resolves the cache onto the medium (what a real drive could have left) and
/// leaves the controller powered off. A second cut changes nothing.
pub(crate) fn cut(shared: &Shared, cache: &mut WriteCache) {
    if cache.powered_off() {
        return;
    }
    let overlay = cache.cut();
    for (&(nsid, lba), data) in &overlay {
        let disk = shared.disks.expect(nsid);
        let at = (lba * disk.lba_stride()) as usize;
        disk.lock()[at..at + data.len()].copy_from_slice(data);
    }
    log::debug!(
        "sim: power cut after {} medium events ({} dirty blocks resolved)",
        cache.events(),
        overlay.len()
    );
}

impl Device {
    /// Before an I/O command: cut the power if the configured cut point is reached; fail the
    /// command if the power is off.
    pub(super) fn power_gate(&self) -> Result<(), Fail> {
        let Some(power) = &self.shared.power else {
            return Ok(());
        };
        let mut cache = lock(power);
        if cache.cut_due() {
            cut(&self.shared, &mut cache);
        }
        if cache.powered_off() {
            return Err(status(generic::POWER_LOSS_ABORT));
        }
        Ok(())
    }

    /// Volatile Write Cache Enable (Set Features 06h, NVMe Base 2.0 §5.27.1.4) as currently set.
    fn write_cache_enabled(&self) -> bool {
        let value = self.admin.features.current(feature::VOLATILE_WRITE_CACHE);
        matches!(
            Feature::from_raw(FeatureId::VolatileWriteCache, u64::from(value)),
            Some(Feature::VolatileWriteCache(true))
        )
    }

    /// Runs `apply` on the bytes of blocks `slba..slba + nlb` of `disk` (LBA Out of Range
    /// when they are not all there), through the write cache when there is one; `fua`: the
    /// blocks must be durable before completion (NVM CS §3.3.6).
    pub(super) fn modify(
        &self,
        disk: &Disk,
        (slba, nlb): (u64, u64),
        fua: bool,
        apply: impl FnOnce(&mut [u8]) -> Result<(), Fail>,
    ) -> Result<(), Fail> {
        let (start, end) = block_range(disk, slba, nlb)?;
        // Written blocks are readable again (Write Uncorrectable's marks go).
        disk.clear_uncorrectable(slba, nlb);
        let Some(power) = &self.shared.power else {
            return apply(&mut disk.lock()[start..end]);
        };
        let durable = fua || !self.write_cache_enabled();
        let mut cache = lock(power);
        let mut data = disk.lock();
        cache.write(
            disk.nsid,
            disk.lba_stride() as usize,
            &mut data,
            (slba, nlb),
            durable,
            apply,
        )
    }

    /// Makes the cached writes of `nsid` (`None`: every namespace) durable: Flush (Base
    /// §7.1), a shutdown, or the cache being disabled.
    pub(super) fn flush_cache(&self, nsid: Option<u32>) {
        if let Some(power) = &self.shared.power {
            let mut cache = lock(power);
            if !cache.powered_off() {
                cache.flush(nsid);
            }
        }
    }

    /// Set Features Volatile Write Cache with `value`: turning the cache off writes it back
    /// first.
    pub(super) fn set_write_cache(&self, value: u32) {
        if matches!(
            Feature::from_raw(FeatureId::VolatileWriteCache, u64::from(value)),
            Some(Feature::VolatileWriteCache(false))
        ) {
            self.flush_cache(None);
        }
    }
}
