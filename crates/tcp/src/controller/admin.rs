//! The admin queue's commands: synchronous execution, the asynchronous Keep Alive and
//! Abort (reaped by `Admin::reap`), Property Get/Set, Identify, and the log pages.
//!
//! INVARIANT: asynchronous admin completions are told apart by their user data
//! (`KEEP_ALIVE_TAG`, `ABORT_TAG` with queue and command id); an Abort is sent only within the
//! Abort Command Limit and only when the admin queue is free (try-lock: never waits on it).

use std::sync::Arc;
use std::time::Instant;

use nvme_core::{AdminCommand, AdminData, AdminReply, DmaBuffer, DmaMapper, Error, Result};
use nvme_spec::command::{self, Cns};
use nvme_spec::fabrics;
use nvme_spec::identify::IDENTIFY_DATA_SIZE;
use nvme_spec::log::{ERROR_LOG_ENTRY_SIZE, NSID_BROADCAST, SMART_LOG_SIZE};
use nvme_spec::opcode::log_page;
use nvme_spec::{ErrorLogEntry, SmartLog};

use super::{
    Admin, Inner, TcpController, ABORT_TAG, KEEP_ALIVE_TAG, STATE_FAILED, STATE_LOST,
    STATE_RESETTING,
};
use crate::queue::Waiter;

impl Admin {
    /// Runs one admin command to completion: completion dword 0 (and dword 1) and the buffer.
    pub(crate) fn execute(
        &mut self,
        sqe: nvme_spec::SubmissionEntry,
        buffer: Option<DmaBuffer>,
        len: usize,
        to_device: bool,
    ) -> std::result::Result<(u32, u32, Option<DmaBuffer>), Error> {
        self.q
            .submit(sqe, buffer, len, to_device, 0, Waiter::Sync)
            .map_err(|f| f.error)?;
        let deadline = Instant::now() + self.q.timeout;
        let c = self.q.wait_sync(deadline, "waiting for an admin command");
        self.reap();
        if !matches!(c.result, Err(Error::Transport { .. })) {
            self.ka.heard(Instant::now());
        }
        let dw0 = c.result?;
        Ok((dw0, self.q.sync_dw1, c.buffer))
    }

    /// Consumes asynchronous admin completions (Keep Alive, Abort).
    pub(crate) fn reap(&mut self) {
        let name = self.q.controller.clone();
        let aborts = &mut self.aborts;
        let outstanding = &mut self.aborts_outstanding;
        let ka = &mut self.ka;
        self.q.poll(usize::MAX, |c| {
            if c.user_data == KEEP_ALIVE_TAG {
                match c.result {
                    // The queue failed: no answer came.
                    Err(Error::Transport { .. }) => ka.dropped(),
                    Err(e) => {
                        log::warn!("{name}: Keep Alive failed: {e}");
                        ka.answered(Instant::now());
                    }
                    Ok(_) => ka.answered(Instant::now()),
                }
            } else if c.user_data & ABORT_TAG != 0 {
                *outstanding = outstanding.saturating_sub(1);
                let (qid, cid) = ((c.user_data >> 16) as u16, c.user_data as u16);
                match c.result {
                    Ok(dw0) if dw0 & command::ABORT_DW0_NOT_ABORTED != 0 => {
                        log::warn!("{name}: Abort of queue {qid} command {cid:#x} declined");
                        aborts.not_aborted += 1;
                    }
                    Ok(_) => aborts.aborted += 1,
                    Err(e) => {
                        log::warn!("{name}: Abort of queue {qid} command {cid:#x} failed: {e}");
                        aborts.failed += 1;
                    }
                }
            }
        });
    }

    /// Sends a Keep Alive (asynchronously: its answer is picked up by [`Admin::reap`]).
    pub(crate) fn send_keep_alive(&mut self, now: Instant) {
        if self.ka.is_outstanding() || self.q.failed.is_some() {
            return;
        }
        if self
            .q
            .submit(
                fabrics::keep_alive(),
                None,
                0,
                false,
                KEEP_ALIVE_TAG,
                Waiter::Poll,
            )
            .is_ok()
        {
            self.ka.sent(now);
        }
    }
}

impl Admin {
    pub(crate) fn property_get(&mut self, offset: usize, eight: bool) -> Result<u64> {
        let (dw0, dw1, _) =
            self.execute(fabrics::property_get(offset as u32, eight), None, 0, false)?;
        Ok(if eight {
            u64::from(dw0) | u64::from(dw1) << 32
        } else {
            u64::from(dw0)
        })
    }

    /// Set Features Number of Queues asking for `wanted` submission and completion queues
    /// (at least 1); returns the I/O queue pairs the controller allocated (the smaller of its
    /// two counts, which may exceed `wanted`).
    pub(crate) fn set_number_of_queues(&mut self, wanted: u16) -> Result<u16> {
        let wanted = wanted.max(1);
        let (dw0, _, _) = self.execute(
            command::set_number_of_queues(wanted, wanted),
            None,
            0,
            false,
        )?;
        let (sq, cq) = command::number_of_queues_allocated(dw0);
        Ok(sq.min(cq))
    }

    pub(crate) fn property_set(&mut self, offset: usize, value: u32) -> Result<()> {
        self.execute(fabrics::property_set(offset as u32, value), None, 0, false)?;
        Ok(())
    }

    pub(super) fn identify(
        &mut self,
        mapper: &Arc<dyn DmaMapper>,
        cns: Cns,
        nsid: u32,
    ) -> Result<[u8; IDENTIFY_DATA_SIZE]> {
        let buf = DmaBuffer::allocate(mapper, IDENTIFY_DATA_SIZE)?;
        let (_, _, buf) = self.execute(
            command::identify(cns, nsid),
            Some(buf),
            IDENTIFY_DATA_SIZE,
            false,
        )?;
        let buf = buf.expect("a completed read returns its buffer");
        Ok(buf[..IDENTIFY_DATA_SIZE].try_into().expect("4096 bytes"))
    }
}

impl TcpController {
    /// Runs one typed admin command ([`nvme_core::NvmeController::admin`]) on the admin
    /// queue: its data in or after the command capsule, as the transport moves any data.
    pub fn admin_command(&self, command: AdminCommand) -> Result<AdminReply> {
        let len = command.data().len();
        let (buf, to_device) = match command.data() {
            AdminData::None => (None, false),
            AdminData::FromDevice(n) => (Some(DmaBuffer::allocate(&self.inner.mapper, *n)?), false),
            AdminData::ToDevice(bytes) => {
                let mut b = DmaBuffer::allocate(&self.inner.mapper, bytes.len())?;
                b[..bytes.len()].copy_from_slice(bytes);
                (Some(b), true)
            }
        };
        let mut admin = self.inner.admin.lock().unwrap_or_else(|p| p.into_inner());
        let (dw0, _, buf) = admin.execute(command.sqe(), buf, len, to_device)?;
        let data = match (command.data(), buf) {
            (AdminData::FromDevice(n), Some(b)) => b[..*n].to_vec(),
            _ => Vec::new(),
        };
        Ok(AdminReply { dw0, data })
    }

    /// Reads the SMART / Health Information log page (Log Identifier 02h, NVMe Base 2.0
    /// §5.16.1.3) by Get Log Page on the admin queue. `nsid` is
    /// [`NSID_BROADCAST`] (or 0) for the whole controller; a namespace
    /// ID asks for that namespace's data, which controllers without per-namespace SMART
    /// refuse with Invalid Field in Command (`Error::Command`).
    pub fn smart_log(&self, nsid: u32) -> Result<SmartLog> {
        let page = self
            .inner
            .read_log(log_page::SMART_HEALTH, nsid, SMART_LOG_SIZE)?;
        let bytes: &[u8; SMART_LOG_SIZE] = page[..SMART_LOG_SIZE]
            .try_into()
            .expect("a buffer of the page's size");
        Ok(SmartLog::from_bytes(bytes))
    }

    /// Reads the newest `entries` Error Information log entries (Log Identifier 01h, NVMe
    /// Base 2.0 §5.16.1.2), newest first, leaving out unused ones (Error Count 0). `entries`
    /// is capped by what the controller keeps (Identify ELPE + 1) and by what one command can
    /// transfer; 0 reads nothing.
    pub fn error_log(&self, entries: usize) -> Result<Vec<ErrorLogEntry>> {
        let kept = usize::from(self.inner.identify.elpe) + 1;
        let fit = self.inner.max_transfer / ERROR_LOG_ENTRY_SIZE;
        let count = entries.min(kept).min(fit);
        if count == 0 {
            return Ok(Vec::new());
        }
        let page = self.inner.read_log(
            log_page::ERROR_INFORMATION,
            NSID_BROADCAST,
            count * ERROR_LOG_ENTRY_SIZE,
        )?;
        Ok(
            ErrorLogEntry::parse_entries(&page[..count * ERROR_LOG_ENTRY_SIZE])
                .filter(ErrorLogEntry::is_valid)
                .collect(),
        )
    }
}

impl Inner {
    /// Sends an Abort for command `cid` of queue `qid` without waiting: the admin queue is
    /// only try-locked (a busy one means a retry at the next clock tick). Returns whether
    /// it went out.
    pub(crate) fn abort_async(&self, qid: u16, cid: u16) -> bool {
        if self.state() & (STATE_FAILED | STATE_RESETTING | STATE_LOST) != 0 {
            return false;
        }
        let Ok(mut admin) = self.admin.try_lock() else {
            return false;
        };
        admin.reap();
        // Abort Command Limit (Identify ACL, 0's based), and room on the admin queue.
        let limit = u32::from(self.identify.acl) + 1;
        if admin.aborts_outstanding >= limit || admin.q.failed.is_some() {
            return false;
        }
        let tag = ABORT_TAG | u64::from(qid) << 16 | u64::from(cid);
        if admin
            .q
            .submit(command::abort(qid, cid), None, 0, false, tag, Waiter::Poll)
            .is_err()
        {
            return false;
        }
        admin.aborts_outstanding += 1;
        admin.aborts.sent += 1;
        log::warn!("{}: Abort sent for queue {qid} command {cid:#x}", self.name);
        true
    }

    /// Picks up admin completions (Aborts, Keep Alive) if the admin queue is free.
    pub(crate) fn poll_admin(&self) {
        if let Ok(mut admin) = self.admin.try_lock() {
            admin.reap();
        }
    }

    /// Counts a reset started because an aborted command stayed outstanding.
    pub(crate) fn count_timeout_reset(&self) {
        let mut admin = self.admin.lock().unwrap_or_else(|p| p.into_inner());
        admin.aborts.resets += 1;
    }

    /// Get Log Page `lid` for `nsid` from offset 0, `bytes` long (a non-zero multiple of
    /// 4 bytes).
    fn read_log(&self, lid: u8, nsid: u32, bytes: usize) -> Result<DmaBuffer> {
        let buf = DmaBuffer::allocate(&self.mapper, bytes)?;
        let mut admin = self.admin.lock().unwrap_or_else(|p| p.into_inner());
        let sqe = command::get_log_page(lid, nsid, bytes as u32);
        let (_, _, buf) = admin.execute(sqe, Some(buf), bytes, false)?;
        Ok(buf.expect("a completed read returns its buffer"))
    }
}
