//! NVMe specification types: controller registers, queue entries, command builders, opcodes,
//! status codes, Identify data structures and log pages.
//!
//! This crate is pure data. It performs no I/O and contains no `unsafe` code. Every structure
//! that the device reads or writes is `#[repr(C)]`, and its size and the offset of every
//! field are checked at compile time against the NVM Express Base Specification 2.0 (and the
//! NVM Command Set Specification 1.0 for I/O commands and Identify Namespace). Structures
//! that come from DMA memory are decoded by explicit little-endian parsing (`from_bytes`) and
//! encoded with `to_bytes`, never by reinterpreting memory.
//!
//! Section numbers in comments refer to NVMe Base 2.0 unless they say "NVM CS".
//!
//! # Example
//!
//! Build a Read command and round-trip a completion queue entry through its wire form:
//!
//! ```
//! use nvme_spec::{command, CompletionEntry, SubmissionEntry};
//!
//! let mut sqe: SubmissionEntry = command::read(1, 2048, 8); // nsid 1, LBA 2048, 8 blocks
//! sqe.set_cid(17);
//! assert_eq!(sqe.opcode(), nvme_spec::opcode::nvm::READ);
//! let bytes = sqe.to_bytes();
//! assert_eq!(bytes.len(), 64); // a submission queue entry is 64 bytes (NVMe Base 2.0 4.2)
//! assert_eq!(SubmissionEntry::from_bytes(&bytes).cid(), 17);
//! ```

#![forbid(unsafe_code)]
#![deny(missing_docs)]

#[macro_use]
mod le;

pub mod admin_log;
pub mod command;
pub mod event;
pub mod fabrics;
pub mod feature;
pub mod firmware;
pub mod identify;
pub mod log;
pub mod manage;
pub mod opcode;
pub mod passthru;
pub mod protection;
pub mod queue;
pub mod regs;
pub mod selftest;
pub mod sgl;
pub mod status;
pub mod tcp;
pub mod zns;

pub use admin_log::{CommandEffects, CommandsEffectsLog, FirmwareSlotLog, NsIdDescriptor};
pub use command::Cns;
pub use event::{AsyncEvent, AsyncEventType};
pub use feature::{Feature, FeatureCapabilities, FeatureId, Select};
pub use firmware::{CommitAction, CommitOutcome, FirmwareCommit, FirmwareStatus, Frmw, Fwug};
pub use identify::{
    CopyFormats, Fuses, IdentifyController, IdentifyNamespace, LbaFormat, NamespaceList, Oacs, Oncs,
};
pub use log::{CriticalWarning, ErrorLogEntry, ShortLogPage, SmartLog};
pub use manage::{Attach, ControllerList, FormatNvm, SecureErase};
pub use protection::{
    ExtendedLbaFormat, NvmIdentifyNamespace, Pi64Tuple, PiFormat, PiTuple, PiType, Prinfo,
};
pub use queue::{
    CompletionEntry, CopySourceRange, CopySourceRangeFormat1, DsmRange, SubmissionEntry,
};
pub use regs::{Aqa, Cap, Cc, Cmbsz, Csts, Version};
pub use sgl::{Fuse, Psdt, SglDescriptor, SglSupport};
pub use status::{Status, StatusCodeType};
