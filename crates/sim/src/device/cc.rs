//! Controller configuration (NVMe Base 2.0 §3.5.1 initialization, §3.6 shutdown): the CC
//! changes each poll pass acts on, enable (the admin queue from AQA/ASQ/ACQ), reset and
//! shutdown, and CSTS.
//!
//! INVARIANTS: CSTS.RDY becomes 1 only through an enable whose CC, AQA, ASQ and ACQ were all
//! valid (a refused enable leaves it 0); a reset leaves no queue, held or delayed completion,
//! deferred command or doorbell value behind.

use std::sync::atomic::Ordering;

use nvme_spec::queue::{CQES_LOG2, SQES_LOG2};
use nvme_spec::regs::{
    Aqa, Cc, Csts, ShutdownNotification, ShutdownStatus, ACQ, ADMIN_QUEUE_MAX_ENTRIES, AQA, ASQ,
    CC, CC_CSS_ALL_IO, CC_CSS_NVM, CSTS, DOORBELL_BASE, PAGE_SIZE_SHIFT_BASE,
};

use super::{admin, CqInterrupt, Device, MIN_PAGE_MASK};
use crate::regs::BAR_SIZE;

impl Device {
    fn write_csts(&self, shst: ShutdownStatus) {
        let csts = Csts::new(self.ready, self.shared.faults.is_fatal(), shst);
        self.regs().store(CSTS, csts.0);
    }

    pub(super) fn poll_cc(&mut self) -> bool {
        let cc = Cc(self.regs().load(CC));
        if cc == self.cc {
            return false;
        }
        if self.cc.en() && !cc.en() && self.shared.faults.is_stuck_on_disable() {
            // CC is not taken (`self.cc` keeps EN = 1), so the disable is acted on once the
            // fault is cleared; meanwhile everything keeps running with CSTS.RDY = 1.
            if !self.stuck {
                self.stuck = true;
                log::debug!("sim: CC.EN cleared, but the stuck_on_disable fault keeps running");
            }
            return false;
        }
        self.stuck = false;
        let old = std::mem::replace(&mut self.cc, cc);
        if old.en() && !cc.en() {
            self.reset();
        } else if !old.en() && cc.en() {
            self.enable(cc);
        }
        let shutdown_requested = !matches!(cc.shn(), ShutdownNotification::None);
        let was_requested = !matches!(old.shn(), ShutdownNotification::None);
        if shutdown_requested && !was_requested {
            // A normal or abrupt shutdown writes the volatile write cache back (NVMe Base 2.0
            // §3.6); without one everything is already on the medium.
            self.flush_cache(None);
            log::debug!("sim: shutdown ({:?}) complete", cc.shn());
            self.shut_down = true;
            self.write_csts(ShutdownStatus::Complete);
        }
        true
    }

    /// CC.EN 0 -> 1: take the admin queue from AQA/ASQ/ACQ and become ready.
    fn enable(&mut self, cc: Cc) {
        let aqa = Aqa(self.regs().load(AQA));
        let asq = self.regs().load64(ASQ);
        let acq = self.regs().load64(ACQ);
        let mqes_entries = u32::from(self.shared.config.mqes) + 1;
        let max_admin = ADMIN_QUEUE_MAX_ENTRIES.min(mqes_entries);
        let problem = if cc.css() != CC_CSS_NVM && cc.css() != CC_CSS_ALL_IO {
            Some(format!(
                "CC.CSS {} is neither the NVM command set ({CC_CSS_NVM}) nor all I/O command \
                 sets ({CC_CSS_ALL_IO})",
                cc.css()
            ))
        } else if cc.mps() > admin::MPSMAX {
            Some(format!(
                "CC.MPS {} exceeds CAP.MPSMAX {}",
                cc.mps(),
                admin::MPSMAX
            ))
        } else if cc.iosqes() != SQES_LOG2 || cc.iocqes() != CQES_LOG2 {
            Some(format!(
                "CC.IOSQES/IOCQES are {}/{}; this controller needs {SQES_LOG2}/{CQES_LOG2} \
                 (64-byte SQEs, 16-byte CQEs)",
                cc.iosqes(),
                cc.iocqes()
            ))
        } else if !(2..=max_admin).contains(&aqa.sq_entries())
            || !(2..=max_admin).contains(&aqa.cq_entries())
        {
            Some(format!(
                "AQA asks for {} SQ / {} CQ entries; each must be 2..={max_admin}",
                aqa.sq_entries(),
                aqa.cq_entries()
            ))
        } else if asq & MIN_PAGE_MASK != 0 || acq & MIN_PAGE_MASK != 0 || asq == 0 || acq == 0 {
            Some(format!(
                "ASQ {asq:#x} / ACQ {acq:#x} must be non-zero and page aligned"
            ))
        } else if !self.doorbells_reachable(0) {
            Some(format!(
                "the admin doorbells (stride {}) lie beyond the {BAR_SIZE:#x}-byte BAR",
                self.stride
            ))
        } else {
            None
        };
        if let Some(problem) = problem {
            log::warn!("sim: controller enable refused, CSTS.RDY stays 0: {problem}");
            return;
        }
        self.page_size = 1 << (PAGE_SIZE_SHIFT_BASE + u32::from(cc.mps()));
        self.create_cq(0, acq, aqa.cq_entries(), CqInterrupt::Admin, None);
        self.create_sq(0, asq, aqa.sq_entries(), 0, None);
        if self.shared.faults.is_never_ready() {
            log::debug!("sim: enable seen, but the never_ready fault keeps CSTS.RDY at 0");
            return;
        }
        self.ready = true;
        self.write_csts(ShutdownStatus::Normal);
        log::debug!(
            "sim: controller enabled (admin SQ {} / CQ {} entries)",
            aqa.sq_entries(),
            aqa.cq_entries()
        );
    }

    /// CC.EN 1 -> 0: controller reset. Drops every queue and pending completion, clears the
    /// doorbells, the shadow buffer configuration and an injected fatal status.
    fn reset(&mut self) {
        self.sqs.iter_mut().for_each(|q| *q = None);
        self.cqs.iter_mut().for_each(|q| *q = None);
        self.delayed.clear();
        let cancelled = self.deferred.len() as u64;
        self.deferred.clear();
        let counter = &self.shared.counters.deferred_cancelled;
        counter.store(
            counter.load(Ordering::Relaxed) + cancelled,
            Ordering::Relaxed,
        );
        self.shadow = None;
        self.admin.reset(&self.shared.config);
        self.ready = false;
        self.shut_down = false;
        self.shared.faults.clear_fatal();
        self.regs().clear_from(DOORBELL_BASE);
        self.write_csts(ShutdownStatus::Normal);
        log::debug!("sim: controller reset");
    }
}
