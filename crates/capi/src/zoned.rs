//! Zoned namespaces on the C API (ZNS Command Set 1.1): Zone Append with the written LBA in
//! the completion (`nvme_cpl_status.lba`), Zone Management Send (open, close, finish, reset,
//! offline, one zone or all), Report Zones into a buffer and its parse into `struct
//! nvme_zone`, and the zone geometry of a namespace. The zone status codes complete a request
//! with their own `NVME_ERR_ZONE_*` codes. The commands are the driver's typed ones
//! (`nvme_driver::zns`); see `docs/zoned.md`.
//!
//! The C constants are literals (the header is generated from them); each is asserted equal
//! to its spec value (`nvme_driver::spec::zns`) at compile time.

use std::ffi::{c_int, c_void};

use nvme_driver::spec::zns::{
    ZoneReport, ZoneReportFilter, ZoneSendAction, ZoneState, ZONE_STATE_SHIFT,
};
use nvme_driver::zns::{ZoneAppend, ZoneMgmtRecv, ZoneMgmtSend};

use crate::boundary::{fail, fail_with, guard};
use crate::buffer::{nvme_buf, BufState};
use crate::controller::nvme_ctrlr;
use crate::errors::*;
use crate::qpair::{nvme_cb_fn, nvme_qpair, RequestKind};
use crate::submit::{fua_flag, submit_data_kind, submit_no_data};

/// `nvme_qpair_submit_zone_mgmt` action: Close Zone (ZNS 1.1 §3.4.3, ZSA 01h).
pub const NVME_ZONE_ACTION_CLOSE: u32 = 0x01;
/// Finish Zone (ZSA 02h): the zone becomes Full.
pub const NVME_ZONE_ACTION_FINISH: u32 = 0x02;
/// Open Zone (ZSA 03h): Explicitly Opened.
pub const NVME_ZONE_ACTION_OPEN: u32 = 0x03;
/// Reset Zone (ZSA 04h): Empty, write pointer back at the zone start.
pub const NVME_ZONE_ACTION_RESET: u32 = 0x04;
/// Offline Zone (ZSA 05h): only from Read Only.
pub const NVME_ZONE_ACTION_OFFLINE: u32 = 0x05;

const _: () = {
    assert!(NVME_ZONE_ACTION_CLOSE == ZoneSendAction::Close as u32);
    assert!(NVME_ZONE_ACTION_FINISH == ZoneSendAction::Finish as u32);
    assert!(NVME_ZONE_ACTION_OPEN == ZoneSendAction::Open as u32);
    assert!(NVME_ZONE_ACTION_RESET == ZoneSendAction::Reset as u32);
    assert!(NVME_ZONE_ACTION_OFFLINE == ZoneSendAction::Offline as u32);
};

/// `nvme_qpair_submit_zone_mgmt` flag: Select All, the action applies to every zone it can
/// (`zslba` is then ignored).
pub const NVME_ZONE_ALL: u32 = 1;

/// `struct nvme_zone.state`: Empty (ZNS 1.1 §3.4.2.2.3, Figure 38).
pub const NVME_ZONE_STATE_EMPTY: u8 = 0x1;
/// Implicitly Opened.
pub const NVME_ZONE_STATE_IMPLICITLY_OPENED: u8 = 0x2;
/// Explicitly Opened.
pub const NVME_ZONE_STATE_EXPLICITLY_OPENED: u8 = 0x3;
/// Closed.
pub const NVME_ZONE_STATE_CLOSED: u8 = 0x4;
/// Read Only.
pub const NVME_ZONE_STATE_READ_ONLY: u8 = 0xD;
/// Full.
pub const NVME_ZONE_STATE_FULL: u8 = 0xE;
/// Offline.
pub const NVME_ZONE_STATE_OFFLINE: u8 = 0xF;

const _: () = {
    assert!(NVME_ZONE_STATE_EMPTY == ZoneState::Empty as u8);
    assert!(NVME_ZONE_STATE_IMPLICITLY_OPENED == ZoneState::ImplicitlyOpened as u8);
    assert!(NVME_ZONE_STATE_EXPLICITLY_OPENED == ZoneState::ExplicitlyOpened as u8);
    assert!(NVME_ZONE_STATE_CLOSED == ZoneState::Closed as u8);
    assert!(NVME_ZONE_STATE_READ_ONLY == ZoneState::ReadOnly as u8);
    assert!(NVME_ZONE_STATE_FULL == ZoneState::Full as u8);
    assert!(NVME_ZONE_STATE_OFFLINE == ZoneState::Offline as u8);
};

/// `nvme_qpair_submit_zone_report` filter: every zone (ZRASF 0h).
pub const NVME_ZONE_REPORT_ALL: u32 = 0;
/// Only Empty zones (1h). Filters 2h-7h (Implicitly Opened, Explicitly Opened, Closed, Full,
/// Read Only, Offline) are passed as their ZRASF values.
pub const NVME_ZONE_REPORT_EMPTY: u32 = 1;
/// Only Full zones (5h).
pub const NVME_ZONE_REPORT_FULL: u32 = 5;

const _: () = {
    assert!(NVME_ZONE_REPORT_ALL == ZoneReportFilter::All as u32);
    assert!(NVME_ZONE_REPORT_EMPTY == ZoneReportFilter::Empty as u32);
    assert!(NVME_ZONE_REPORT_FULL == ZoneReportFilter::Full as u32);
};

/// One zone of a report (`nvme_zone_report_parse`), from its Zone Descriptor.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct nvme_zone {
    /// Zone Start LBA.
    pub zslba: u64,
    /// Write pointer (LBA of the next write; meaningless when Full, Read Only or Offline).
    pub wp: u64,
    /// Zone capacity in blocks (writable blocks from the zone start).
    pub capacity: u64,
    /// `NVME_ZONE_STATE_*` (the raw 4-bit Zone State; a reserved value is passed as is).
    pub state: u8,
    /// Zone Type (2: Sequential Write Required).
    pub zone_type: u8,
    /// Zone Attributes (byte 2 of the descriptor: ZFC, FZR, RZR, ZRWAV, ZDEV bits).
    pub attributes: u8,
}

// The layout C sees: three u64 and three bytes, padded to 32 bytes.
const _: () = assert!(std::mem::size_of::<nvme_zone>() == 32);

/// Zone geometry of a zoned namespace (`nvme_ctrlr_get_zone_info`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct nvme_zone_info {
    /// Blocks per zone (ZSZE); zone `i` starts at LBA `i * zone_blocks`.
    pub zone_blocks: u64,
    /// Zones in the namespace.
    pub zones: u64,
    /// Most open zones at once (0: no limit).
    pub max_open: u32,
    /// Most active (open or closed) zones at once (0: no limit).
    pub max_active: u32,
    /// Most bytes one Zone Append moves.
    pub max_append_bytes: u32,
}

const _: () = assert!(std::mem::size_of::<nvme_zone_info>() == 32);

/// Fills `*info` with the zone geometry of namespace `nsid`; `NVME_ERR_NAMESPACE` when it is
/// not a zoned namespace (or not active).
///
/// # Safety
/// `ctrlr` is NULL or an open controller handle; `info` is NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvme_ctrlr_get_zone_info(
    ctrlr: *const nvme_ctrlr,
    nsid: u32,
    info: *mut nvme_zone_info,
) -> c_int {
    const WHAT: &str = "nvme_ctrlr_get_zone_info";
    guard(WHAT, || {
        check_null!("nvme_ctrlr_get_zone_info", ctrlr, info);
        // SAFETY: `ctrlr` is a live handle (caller contract).
        let ctrl = unsafe { &(&*ctrlr).shared.ctrl };
        let ns = match ctrl.namespace(nsid) {
            Ok(ns) => ns,
            Err(e) => return fail_with(&e),
        };
        let Some(z) = ns.zoned() else {
            return fail(
                NVME_ERR_NAMESPACE,
                format!("{WHAT}: namespace {nsid} is not a zoned namespace (ZNS, CSI 02h)"),
            );
        };
        // SAFETY: `info` is non-null and valid for a write (caller contract).
        unsafe {
            info.write(nvme_zone_info {
                zone_blocks: z.zone_blocks,
                zones: z.zones(ns.blocks()),
                max_open: z.max_open.unwrap_or(0),
                max_active: z.max_active.unwrap_or(0),
                max_append_bytes: u32::try_from(z.max_append_bytes).unwrap_or(u32::MAX),
            })
        };
        NVME_OK
    })
}

/// Queues a Zone Append (ZNS 1.1 §3.4.1) of `blocks` blocks from `buf` to the zone starting
/// at `zslba` of namespace `nsid`: the controller writes them at the zone's write pointer and
/// the callback's `status->lba` is where they landed (the first block). `flags` is 0 or
/// `NVME_IO_FUA`. Refused before anything is sent when `zslba` is not a zone start or the
/// append is larger than the namespace's append limit (`NVME_ERR_INVALID_ARGUMENT`); zone
/// errors complete with `NVME_ERR_ZONE_*` (e.g. `NVME_ERR_ZONE_FULL`). Never split. Otherwise
/// as `nvme_qpair_submit_write`.
///
/// # Safety
/// As `nvme_qpair_submit_read`.
#[no_mangle]
// The C signature is the ABI (include/nvme_userspace.h): its eight arguments stay.
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn nvme_qpair_submit_zone_append(
    qpair: *mut nvme_qpair,
    nsid: u32,
    zslba: u64,
    blocks: u32,
    buf: *mut nvme_buf,
    flags: u32,
    cb_fn: nvme_cb_fn,
    cb_arg: *mut c_void,
) -> c_int {
    const WHAT: &str = "nvme_qpair_submit_zone_append";
    let fua = match fua_flag(WHAT, flags) {
        Ok(fua) => fua,
        Err(code) => return code,
    };
    let mut cmd = ZoneAppend::new(zslba, blocks);
    if fua {
        cmd = cmd.fua();
    }
    let kind = RequestKind::ZoneAppend { zslba };
    // SAFETY: forwarded caller contract.
    unsafe { submit_data_kind(WHAT, qpair, nsid, cmd, buf, kind, cb_fn, cb_arg) }
}

/// Queues a Zone Management Send (ZNS 1.1 §3.4.3): `action` (`NVME_ZONE_ACTION_OPEN`,
/// `_CLOSE`, `_FINISH`, `_RESET`, `_OFFLINE`) on the zone starting at `zslba` of namespace
/// `nsid`, or with `flags` `NVME_ZONE_ALL` on every zone it applies to. A transition the
/// zone's state does not allow completes with `NVME_ERR_ZONE_INVALID_TRANSITION`, the open
/// and active limits with `NVME_ERR_ZONE_TOO_MANY_OPEN` / `_ACTIVE`.
///
/// # Safety
/// `qpair` is NULL or a live handle used only by the calling thread.
#[no_mangle]
pub unsafe extern "C" fn nvme_qpair_submit_zone_mgmt(
    qpair: *mut nvme_qpair,
    nsid: u32,
    zslba: u64,
    action: u32,
    flags: u32,
    cb_fn: nvme_cb_fn,
    cb_arg: *mut c_void,
) -> c_int {
    const WHAT: &str = "nvme_qpair_submit_zone_mgmt";
    let zsa = match action {
        NVME_ZONE_ACTION_CLOSE => ZoneSendAction::Close,
        NVME_ZONE_ACTION_FINISH => ZoneSendAction::Finish,
        NVME_ZONE_ACTION_OPEN => ZoneSendAction::Open,
        NVME_ZONE_ACTION_RESET => ZoneSendAction::Reset,
        NVME_ZONE_ACTION_OFFLINE => ZoneSendAction::Offline,
        other => {
            return fail(
                NVME_ERR_INVALID_ARGUMENT,
                format!(
                    "{WHAT}: unknown action {other} (NVME_ZONE_ACTION_OPEN, _CLOSE, _FINISH, \
                     _RESET, _OFFLINE)"
                ),
            )
        }
    };
    if flags & !NVME_ZONE_ALL != 0 {
        return fail(
            NVME_ERR_INVALID_ARGUMENT,
            format!("{WHAT}: unknown flags {flags:#x} (only NVME_ZONE_ALL)"),
        );
    }
    let mut cmd = ZoneMgmtSend::new(zslba, zsa);
    if flags & NVME_ZONE_ALL != 0 {
        cmd = cmd.all();
    }
    // SAFETY: forwarded caller contract.
    unsafe {
        submit_no_data(WHAT, qpair, nsid, cb_fn, cb_arg, |q, ns, ud| {
            q.qp.submit(ns, cmd, None, ud).map_err(|f| f.error)
        })
    }
}

/// Queues a Report Zones (Zone Management Receive, ZNS 1.1 §3.4.2) of the zones from the one
/// holding `slba` of namespace `nsid` that pass `filter` (`NVME_ZONE_REPORT_ALL`, or a ZRASF
/// value 1-7, e.g. `NVME_ZONE_REPORT_FULL`), as a partial report, into `buf`: a 64-byte
/// header and one 64-byte descriptor per zone, as many as fit (at least 128 bytes, a multiple
/// of 4). After the callback, `nvme_zone_report_parse` turns the buffer into `struct
/// nvme_zone` values. Otherwise as `nvme_qpair_submit_read`.
///
/// # Safety
/// As `nvme_qpair_submit_read`.
#[no_mangle]
pub unsafe extern "C" fn nvme_qpair_submit_zone_report(
    qpair: *mut nvme_qpair,
    nsid: u32,
    slba: u64,
    filter: u32,
    buf: *mut nvme_buf,
    cb_fn: nvme_cb_fn,
    cb_arg: *mut c_void,
) -> c_int {
    const WHAT: &str = "nvme_qpair_submit_zone_report";
    let Some(filter) = u8::try_from(filter)
        .ok()
        .and_then(ZoneReportFilter::from_raw)
    else {
        return fail(
            NVME_ERR_INVALID_ARGUMENT,
            format!("{WHAT}: unknown filter {filter} (NVME_ZONE_REPORT_ALL or a ZRASF value 1-7)"),
        );
    };
    if buf.is_null() {
        return fail(
            NVME_ERR_NULL_POINTER,
            format!("{WHAT}: argument `buf` is NULL"),
        );
    }
    // SAFETY: `buf` is a live handle (caller contract).
    let len = unsafe { (*buf).len };
    let bytes = match u32::try_from(len) {
        Ok(b) if b as usize >= 2 * ZONE_REPORT_ENTRY && b % 4 == 0 => b,
        _ => {
            return fail(
                NVME_ERR_INVALID_ARGUMENT,
                format!(
                    "{WHAT}: a {len}-byte buffer: a report needs at least {} bytes (a header and \
                     one descriptor), a multiple of 4, below 4 GiB",
                    2 * ZONE_REPORT_ENTRY
                ),
            )
        }
    };
    let cmd = ZoneMgmtRecv::report_zones(slba, bytes)
        .filter(filter)
        .partial();
    // SAFETY: forwarded caller contract.
    unsafe {
        submit_data_kind(
            WHAT,
            qpair,
            nsid,
            cmd,
            buf,
            RequestKind::Plain,
            cb_fn,
            cb_arg,
        )
    }
}

/// Bytes of the report header and of each Zone Descriptor (ZNS 1.1 Figures 36, 37).
const ZONE_REPORT_ENTRY: usize = nvme_driver::spec::zns::ZoneDescriptor::SIZE;

/// Parses the Report Zones in the idle buffer `buf` (filled by a completed
/// `nvme_qpair_submit_zone_report`) into `zones`, at most `max_zones` of them, and returns
/// how many it wrote (the descriptors the report holds, bounded by the buffer and by
/// `max_zones`), or a negative error code. The device's bytes are not trusted: a count larger
/// than the buffer holds is cut to what it holds.
///
/// # Safety
/// `buf` is NULL or a live buffer handle used only by the calling thread; `zones` is NULL or
/// valid for `max_zones` writes.
#[no_mangle]
pub unsafe extern "C" fn nvme_zone_report_parse(
    buf: *const nvme_buf,
    zones: *mut nvme_zone,
    max_zones: u32,
) -> c_int {
    const WHAT: &str = "nvme_zone_report_parse";
    guard(WHAT, || {
        check_null!("nvme_zone_report_parse", buf, zones);
        // SAFETY: `buf` is a live handle used by this thread only (caller contract).
        let BufState::Idle(dma) = (unsafe { &(*buf).state }) else {
            return fail(
                NVME_ERR_BUFFER_IN_FLIGHT,
                format!("{WHAT}: the buffer is in flight: wait for its request's callback"),
            );
        };
        let report = match ZoneReport::parse(dma, 0) {
            Ok(r) => r,
            Err(e) => {
                return fail(
                    NVME_ERR_INVALID_ARGUMENT,
                    format!("{WHAT}: {e:?}: the buffer holds no report header"),
                )
            }
        };
        let mut written = 0usize;
        for (d, _) in report.iter().take(max_zones as usize) {
            let zone = nvme_zone {
                zslba: d.zslba,
                wp: d.wp,
                capacity: d.zcap,
                state: d.state().map_or(d.zs >> ZONE_STATE_SHIFT, |s| s as u8),
                zone_type: d.zone_type().raw(),
                attributes: d.za,
            };
            // SAFETY: `zones` is valid for `max_zones` writes and `written < max_zones`.
            unsafe { zones.add(written).write(zone) };
            written += 1;
        }
        c_int::try_from(written).unwrap_or(c_int::MAX)
    })
}
