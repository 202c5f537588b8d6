//! End-to-end protection information on the C API (NVM CS §5.2): a Read or Write with PRINFO
//! (PRACT, PRCHK) and the reference / application tags, for namespaces whose format moves no
//! separate metadata buffer (extended LBA formats, whose buffer then holds `blocks *
//! (block_size + metadata_size)` bytes, or PRACT with metadata = PI, whose buffer holds only
//! data). A namespace whose metadata goes to a separate buffer is refused with
//! `NVME_ERR_METADATA` (the C API carries one buffer per request). The check errors of the
//! controller complete the request with `NVME_ERR_PROTECTION`.

use std::ffi::{c_int, c_void};

use nvme_driver::command::{Read, Write};
use nvme_driver::{Prinfo, Protected, Protection};

use crate::boundary::fail;
use crate::buffer::nvme_buf;
use crate::errors::NVME_ERR_INVALID_ARGUMENT;
use crate::qpair::{nvme_cb_fn, nvme_qpair};
use crate::submit::submit_data;

/// `nvme_qpair_submit_pi` operation: Read.
pub const NVME_PI_READ: u32 = 0;
/// `nvme_qpair_submit_pi` operation: Write.
pub const NVME_PI_WRITE: u32 = 1;
/// PRINFO bit: PRACT, the controller inserts (writes) / strips (reads) the PI.
pub const NVME_PI_PRACT: u32 = 1 << 3;
/// PRINFO bit: check the guard (CRC-16 T10-DIF; CRC-64 NVMe on a 64-bit guard format).
pub const NVME_PI_CHECK_GUARD: u32 = 1 << 2;
/// PRINFO bit: check the application tag under its mask.
pub const NVME_PI_CHECK_APP_TAG: u32 = 1 << 1;
/// PRINFO bit: check the reference tag (types 1 and 2).
pub const NVME_PI_CHECK_REF_TAG: u32 = 1 << 0;

/// Queues a Read (`op` `NVME_PI_READ`) or Write (`NVME_PI_WRITE`) of `blocks` blocks at `lba`
/// with protection information: `prinfo` is a combination of `NVME_PI_PRACT` and the
/// `NVME_PI_CHECK_*` bits, `ref_tag` the first block's (expected) reference tag (type 1: the
/// LBA's low 32 bits; on a 64-bit guard format, whose tag has 48 bits, its bits 47:32 are
/// zero, so type 1 there reaches LBAs below 2^32), `app_tag`/`app_mask` the (expected) application tag and the bits
/// checked. `buf` holds what the format moves (see the module text); one command, never split
/// (`NVME_ERR_INVALID_ARGUMENT` above `max_transfer_bytes`). Otherwise as
/// `nvme_qpair_submit_read`.
///
/// # Safety
/// As `nvme_qpair_submit_read`.
#[no_mangle]
// The C signature is the ABI (include/nvme_userspace.h).
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn nvme_qpair_submit_pi(
    qpair: *mut nvme_qpair,
    nsid: u32,
    op: u32,
    lba: u64,
    blocks: u32,
    buf: *mut nvme_buf,
    prinfo: u32,
    ref_tag: u32,
    app_tag: u16,
    app_mask: u16,
    cb_fn: nvme_cb_fn,
    cb_arg: *mut c_void,
) -> c_int {
    const WHAT: &str = "nvme_qpair_submit_pi";
    if prinfo > Prinfo::PRACT.union(Prinfo::CHECK_ALL).bits().into() {
        return fail(
            NVME_ERR_INVALID_ARGUMENT,
            format!("{WHAT}: unknown prinfo bits {prinfo:#x} (NVME_PI_PRACT, NVME_PI_CHECK_*)"),
        );
    }
    let protection = Protection {
        prinfo: Prinfo::from_bits(prinfo as u8),
        ref_tag: ref_tag.into(),
        app_tag,
        app_mask,
    };
    // SAFETY: forwarded caller contract.
    unsafe {
        match op {
            NVME_PI_READ => {
                let cmd = Protected::new(Read::new(lba, blocks), protection);
                submit_data(WHAT, qpair, nsid, cmd, buf, cb_fn, cb_arg)
            }
            NVME_PI_WRITE => {
                let cmd = Protected::new(Write::new(lba, blocks), protection);
                submit_data(WHAT, qpair, nsid, cmd, buf, cb_fn, cb_arg)
            }
            _ => fail(
                NVME_ERR_INVALID_ARGUMENT,
                format!("{WHAT}: unknown op {op} (NVME_PI_READ, NVME_PI_WRITE)"),
            ),
        }
    }
}
