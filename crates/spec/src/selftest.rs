//! Device Self-test (NVMe Base 2.0 §5.8) and the Device Self-test log page (Log Identifier
//! 06h, §5.16.1.7, Figures 213-214).
//!
//! The command carries a Self-test Code in CDW10 bits 3:0 and a namespace: 0 for no namespace,
//! FFFFFFFFh for every namespace, or one NSID. The log reports the test in progress and the
//! last 20 results, newest first.

use crate::opcode::admin;
use crate::queue::SubmissionEntry;

/// Device Self-test CDW10 bits 3:0: Self-test Code.
const STC_MASK: u32 = 0xF;
/// Result entry byte 0 bits 3:0: Device Self-test Result; bits 7:4: the Self-test Code.
const RESULT_MASK: u8 = 0xF;
const CODE_SHIFT: u8 = 4;
/// Log byte 0 bits 3:0: Current Device Self-Test Operation.
const OPERATION_MASK: u8 = 0xF;
/// Log byte 1 bits 6:0: Current Device Self-Test Completion (percent).
const COMPLETION_MASK: u8 = 0x7F;
/// Results the log page keeps.
pub const SELF_TEST_RESULTS: usize = 20;
/// Byte size of the log page.
pub const SELF_TEST_LOG_SIZE: usize = 564;

/// Self-test Code (§5.8, Figure 176).
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SelfTestCode {
    /// Start a short device self-test operation.
    Short = 0x1,
    /// Start an extended device self-test operation.
    Extended = 0x2,
    /// Abort the device self-test operation in progress.
    Abort = 0xF,
}

impl SelfTestCode {
    /// From the 4-bit field (0h, 3h..Dh reserved; Eh vendor specific, not typed here).
    pub fn from_raw(code: u8) -> Option<Self> {
        match code {
            0x1 => Some(SelfTestCode::Short),
            0x2 => Some(SelfTestCode::Extended),
            0xF => Some(SelfTestCode::Abort),
            _ => None,
        }
    }

    /// From a command's CDW10.
    pub fn from_cdw10(cdw10: u32) -> Option<Self> {
        Self::from_raw((cdw10 & STC_MASK) as u8)
    }
}

/// Device Self-test (§5.8) of `nsid` (0: no namespace; FFFFFFFFh: all) with `code`: no data.
#[must_use = "a built command does nothing until it is submitted"]
pub fn device_self_test(nsid: u32, code: SelfTestCode) -> SubmissionEntry {
    SubmissionEntry {
        nsid,
        cdw10: code as u32,
        ..SubmissionEntry::new(admin::DEVICE_SELF_TEST)
    }
}

/// Device Self-test Result (result entry byte 0 bits 3:0, Figure 214).
pub mod result {
    /// Operation completed without error.
    pub const NO_ERROR: u8 = 0x0;
    /// Aborted by a Device Self-test command.
    pub const ABORTED_BY_COMMAND: u8 = 0x1;
    /// Aborted by a Controller Level Reset.
    pub const ABORTED_BY_RESET: u8 = 0x2;
    /// Aborted by a namespace removal.
    pub const ABORTED_BY_NAMESPACE_REMOVAL: u8 = 0x3;
    /// Aborted by a Format NVM command.
    pub const ABORTED_BY_FORMAT: u8 = 0x4;
    /// A fatal error or unknown test error occurred.
    pub const FATAL_ERROR: u8 = 0x5;
    /// Completed with a failed segment (which one is not known).
    pub const UNKNOWN_SEGMENT_FAILED: u8 = 0x6;
    /// Completed with one or more failed segments (the first is in the entry).
    pub const SEGMENTS_FAILED: u8 = 0x7;
    /// Aborted for an unknown reason.
    pub const ABORTED_UNKNOWN: u8 = 0x8;
    /// Aborted by a sanitize operation.
    pub const ABORTED_BY_SANITIZE: u8 = 0x9;
    /// Entry not used (no result).
    pub const UNUSED: u8 = 0xF;
}

/// Valid Diagnostic Information bits (result entry byte 2).
pub mod valid {
    /// The Namespace Identifier field is valid.
    pub const NSID: u8 = 1 << 0;
    /// The Failing LBA field is valid.
    pub const FLBA: u8 = 1 << 1;
    /// The Status Code Type field is valid.
    pub const SCT: u8 = 1 << 2;
    /// The Status Code field is valid.
    pub const SC: u8 = 1 << 3;
}

wire_struct! {
    /// One Self-test Result Data Structure (§5.16.1.7, Figure 214).
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct SelfTestResult {
        /// Bits 3:0 the result ([`result`]), bits 7:4 the Self-test Code.
        status @ 0: u8,
        /// Segment Number of the first failed segment (1-based; 0: none).
        segment @ 1: u8,
        /// Valid Diagnostic Information ([`valid`]).
        valid @ 2: u8,
        /// Reserved.
        rsvd3 @ 3: u8,
        /// Power On Hours when the operation completed or was aborted (u64, as two dwords so
        /// the entry's 28 bytes need no padding).
        poh @ 4: [u32; 2],
        /// Namespace Identifier the failure was found in.
        nsid @ 12: u32,
        /// Failing LBA (u64 as two dwords).
        flba @ 16: [u32; 2],
        /// Status Code Type of the failure.
        sct @ 24: u8,
        /// Status Code of the failure.
        sc @ 25: u8,
        /// Vendor specific.
        vs @ 26: [u8; 2],
    }
    size 28;
}

impl SelfTestResult {
    /// An entry with `result` of a test run with `code` on `nsid`, completed at `poh` hours.
    pub fn new(code: SelfTestCode, result: u8, nsid: u32, poh: u64) -> Self {
        SelfTestResult {
            status: (code as u8) << CODE_SHIFT | result & RESULT_MASK,
            valid: valid::NSID,
            poh: split(poh),
            nsid,
            ..Self::default()
        }
    }

    /// An unused entry (result Fh).
    pub fn unused() -> Self {
        SelfTestResult {
            status: result::UNUSED,
            ..Self::default()
        }
    }

    /// The Device Self-test Result (bits 3:0 of byte 0).
    pub fn result(&self) -> u8 {
        self.status & RESULT_MASK
    }

    /// The Self-test Code the entry reports (bits 7:4 of byte 0).
    pub fn code(&self) -> u8 {
        self.status >> CODE_SHIFT
    }

    /// Whether the entry holds a result.
    pub fn is_used(&self) -> bool {
        self.result() != result::UNUSED
    }

    /// Power On Hours.
    pub fn power_on_hours(&self) -> u64 {
        join(self.poh)
    }

    /// Failing LBA.
    pub fn failing_lba(&self) -> u64 {
        join(self.flba)
    }
}

fn split(v: u64) -> [u32; 2] {
    [v as u32, (v >> 32) as u32]
}

fn join(v: [u32; 2]) -> u64 {
    u64::from(v[0]) | u64::from(v[1]) << 32
}

wire_struct! {
    /// Device Self-test log page (Log Identifier 06h, §5.16.1.7, Figure 213).
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct SelfTestLog {
        /// Bits 3:0: the operation in progress (0: none, 1h short, 2h extended).
        operation @ 0: u8,
        /// Bits 6:0: its completion, percent.
        completion @ 1: u8,
        /// Reserved.
        rsvd2 @ 2: [u8; 2],
        /// The last [`SELF_TEST_RESULTS`] results, newest first.
        results @ 4: [SelfTestResult; 20],
    }
    size 564;
}

impl Default for SelfTestLog {
    /// No test in progress, every entry unused.
    fn default() -> Self {
        SelfTestLog {
            operation: 0,
            completion: 0,
            rsvd2: [0; 2],
            results: [SelfTestResult::unused(); SELF_TEST_RESULTS],
        }
    }
}

impl SelfTestLog {
    /// The Self-test Code of the operation in progress (None: none).
    pub fn current_operation(&self) -> Option<u8> {
        Some(self.operation & OPERATION_MASK).filter(|&c| c != 0)
    }

    /// The completion of the operation in progress, percent.
    pub fn current_completion(&self) -> u8 {
        self.completion & COMPLETION_MASK
    }

    /// The used result entries, newest first.
    pub fn used(&self) -> impl Iterator<Item = &SelfTestResult> + '_ {
        self.results.iter().take_while(|r| r.is_used())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_and_log_round_trip() {
        let sqe = device_self_test(0xFFFF_FFFF, SelfTestCode::Extended);
        assert_eq!((sqe.opcode(), sqe.nsid, sqe.cdw10), (0x14, 0xFFFF_FFFF, 2));
        assert_eq!(SelfTestCode::from_cdw10(0xF), Some(SelfTestCode::Abort));
        assert_eq!(SelfTestCode::from_cdw10(0x3), None);
        assert_eq!(SelfTestCode::from_cdw10(0), None);

        let mut log = SelfTestLog::default();
        assert_eq!(log.used().count(), 0);
        log.results[0] = SelfTestResult::new(SelfTestCode::Short, result::NO_ERROR, 1, 1 << 33);
        log.operation = 2;
        log.completion = 0x80 | 40;
        let bytes = log.to_bytes();
        assert_eq!(bytes.len(), SELF_TEST_LOG_SIZE);
        // Entry 0 at byte 4: code 1h in bits 7:4, result 0; NSID valid; POH at byte 8.
        assert_eq!(&bytes[4..8], &[0x10, 0, valid::NSID, 0]);
        assert_eq!(&bytes[8..16], &(1u64 << 33).to_le_bytes());
        assert_eq!(&bytes[16..20], &1u32.to_le_bytes());
        // Entry 1 unused.
        assert_eq!(bytes[4 + 28], result::UNUSED);
        let back = SelfTestLog::from_bytes(&bytes);
        assert_eq!(back, log);
        assert_eq!(back.current_operation(), Some(2));
        assert_eq!(back.current_completion(), 40);
        let used: Vec<_> = back.used().collect();
        assert_eq!(used.len(), 1);
        assert_eq!((used[0].code(), used[0].result()), (1, 0));
        assert_eq!(used[0].power_on_hours(), 1 << 33);
        assert_eq!(used[0].failing_lba(), 0);
    }
}
