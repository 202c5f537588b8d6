//! Device Self-test in the emulated controller (NVMe Base 2.0 §5.9) and its log page (06h,
//! §5.16.1.7): a short or extended test of the controller, one namespace or all of them
//! completes at once without error and is recorded (newest first, the last 20); an abort
//! with no test in progress does nothing.

use nvme_spec::selftest::{result, SelfTestCode, SelfTestLog, SelfTestResult, SELF_TEST_RESULTS};
use nvme_spec::status::generic;
use nvme_spec::SubmissionEntry;

use super::{Device, Outcome};
use crate::prp::{generic_status, Fail};

/// Broadcast namespace ID: every namespace.
const NSID_BROADCAST: u32 = u32::MAX;

impl Device {
    /// Device Self-test (§5.9).
    pub(super) fn device_self_test(&mut self, sqe: &SubmissionEntry) -> Result<Outcome, Fail> {
        if !self.shared.config.device_self_test {
            return Err(Fail::Status(generic_status(generic::INVALID_OPCODE)));
        }
        let code = SelfTestCode::from_cdw10(sqe.cdw10)
            .ok_or(Fail::Status(generic_status(generic::INVALID_FIELD)))?;
        let nsid = sqe.nsid;
        if nsid != 0 && nsid != NSID_BROADCAST && !self.shared.disks.is_attached(nsid) {
            return Err(Fail::Status(generic_status(
                generic::INVALID_NAMESPACE_OR_FORMAT,
            )));
        }
        if code == SelfTestCode::Abort {
            // Nothing runs long enough to be aborted.
            return Ok(Outcome::SUCCESS);
        }
        let poh = self.admin.power_on_hours();
        let tests = &mut self.admin.self_tests;
        tests.push_front(SelfTestResult::new(code, result::NO_ERROR, nsid, poh));
        tests.truncate(SELF_TEST_RESULTS);
        log::debug!("sim: device self-test {code:?} of namespace {nsid:#x}: no error");
        Ok(Outcome::SUCCESS)
    }

    /// The Device Self-test log page: no test in progress, the results newest first.
    pub(super) fn self_test_log_page(&self) -> Vec<u8> {
        let mut log = SelfTestLog::default();
        for (slot, r) in log.results.iter_mut().zip(&self.admin.self_tests) {
            *slot = *r;
        }
        log.to_bytes().to_vec()
    }
}
