//! `--write-uncorrectable L` and `--compare-and-write L`: the optional NVM commands on one
//! block (DESTROYING its contents), each refused by the driver with the Identify field that
//! says the controller does not offer it (ONCS bit 1; FUSES bit 0), before anything is sent.
//!
//! * Write Uncorrectable marks block L (NVM CS §3.3.7); a read of it must then fail with
//!   Unrecovered Read Error, and a write makes it readable again.
//! * Compare and Write (NVMe Base 2.0 §3.4.2) reads block L, then sends the fused pair with
//!   what it read as the compare data and the greeting as the write data (it must write),
//!   then the same pair again (it must miscompare: the block holds the greeting now).

use std::io::Write;

use nvme_driver::command::WriteUncorrectable;
use nvme_driver::fused::{CompareAndWrite, CompareAndWriteOutcome};
use nvme_driver::spec::status::{media, StatusCodeType};
use nvme_driver::{Namespace, WriteFlags};
use nvme_tool_support::{AnyController, AnyQueuePair, IoQueue};

use crate::{io_error, HelloError, GREETING};

/// A buffer of one block holding the greeting, zero-padded.
fn greeting(ctrl: &AnyController, bs: usize) -> Result<nvme_driver::DmaBuffer, HelloError> {
    let mut buf = ctrl.alloc_buffer(bs)?;
    buf.fill(0);
    buf[..GREETING.len()].copy_from_slice(GREETING);
    Ok(buf)
}

/// Write Uncorrectable of block `lba`, the failing read, the healing write.
pub(crate) fn write_uncorrectable(
    out: &mut impl Write,
    ctrl: &AnyController,
    qp: &mut AnyQueuePair,
    ns: &Namespace,
    lba: u64,
) -> Result<(), HelloError> {
    let bs = ns.block_size() as usize;
    qp.execute(ns, WriteUncorrectable::new(lba, 1), None)
        .map_err(io_error("write uncorrectable", ns, lba))?;
    let unrecovered = |e: &nvme_driver::Error| {
        e.status().is_some_and(|s| {
            s.sct_raw() == StatusCodeType::MediaDataIntegrity.raw()
                && s.sc() == media::UNRECOVERED_READ_ERROR
        })
    };
    match qp.read(ns, lba, 1, ctrl.alloc_buffer(bs)?) {
        Err(f) if unrecovered(&f.error) => {}
        Err(f) => return Err(io_error("read of the uncorrectable block", ns, lba)(f)),
        Ok(_) => return Err(HelloError::StillReadable { lba }),
    }
    qp.write(ns, lba, 1, greeting(ctrl, bs)?, WriteFlags::NONE)
        .map_err(io_error("write", ns, lba))?;
    qp.read(ns, lba, 1, ctrl.alloc_buffer(bs)?)
        .map_err(io_error("read", ns, lba))?;
    writeln!(
        out,
        "  Write Uncorrectable of LBA {lba}: ok (a read failed with Unrecovered Read Error, a \
         write made it readable again)"
    )?;
    Ok(())
}

/// Compare and Write of block `lba`: a match that writes, then a miscompare.
pub(crate) fn compare_and_write(
    out: &mut impl Write,
    ctrl: &AnyController,
    qp: &mut AnyQueuePair,
    ns: &Namespace,
    lba: u64,
) -> Result<(), HelloError> {
    let bs = ns.block_size() as usize;
    let seen = qp
        .read(ns, lba, 1, ctrl.alloc_buffer(bs)?)
        .map_err(io_error("read", ns, lba))?;
    let new = greeting(ctrl, bs)?;
    let mut pair = ctrl.alloc_buffer(2 * bs)?;
    pair[..bs].copy_from_slice(&seen[..bs]);
    pair[bs..2 * bs].copy_from_slice(&new[..bs]);
    let cmd = CompareAndWrite::new(lba, 1);
    let (pair, first) = qp
        .compare_and_write(ns, cmd, pair, |_| {})
        .map_err(io_error("compare and write", ns, lba))?;
    // The block holds the greeting now; unless it already did, the same pair miscompares.
    let (_, second) = qp
        .compare_and_write(ns, cmd, pair, |_| {})
        .map_err(io_error("compare and write", ns, lba))?;
    let expected_second = if seen[..bs] == new[..bs] {
        CompareAndWriteOutcome::Written
    } else {
        CompareAndWriteOutcome::Miscompare
    };
    if first != CompareAndWriteOutcome::Written || second != expected_second {
        return Err(HelloError::FusedOutcome {
            lba,
            got: format!("{first:?} then {second:?}"),
        });
    }
    writeln!(
        out,
        "  Compare and Write of LBA {lba}: ok (written when equal, {second:?} after)"
    )?;
    Ok(())
}
