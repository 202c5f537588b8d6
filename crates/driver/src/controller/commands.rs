//! Admin commands that wait for their completion: the one path each of them takes
//! ([`Inner::admin`], under the admin lock), raw commands for callers
//! ([`Controller::admin_raw`]), Identify, and Get Log Page (SMART, error log).
//!
//! INVARIANT: a command that timed out or met a fatal status may still write its buffer: the
//! controller is marked failed and stopped, and the buffer is leaked, never freed or given back.

use std::sync::MutexGuard;

use nvme_core::{AdminCommand, AdminData, AdminReply, Error, IoFailure, Result};
use nvme_spec::command;
use nvme_spec::command::Cns;
use nvme_spec::identify::IDENTIFY_DATA_SIZE;
use nvme_spec::log::{
    ErrorLogEntry, SmartLog, ERROR_LOG_ENTRY_SIZE, NSID_BROADCAST, SMART_LOG_SIZE,
};
use nvme_spec::opcode::log_page;
use nvme_spec::queue::{CompletionEntry, SubmissionEntry};
use nvme_vfio::DmaBuffer;

use crate::admin::AdminQueue;

use super::{Controller, Inner};

impl Controller {
    /// Reads the SMART / Health Information log page (Log Identifier 02h, NVMe Base 2.0
    /// §5.16.1.3). `nsid` is [`NSID_BROADCAST`](nvme_spec::log::NSID_BROADCAST) (or 0) for the
    /// whole controller; a namespace ID asks for that namespace's data, which controllers
    /// without per-namespace SMART (Identify LPA bit 0 clear) refuse with Invalid Field in
    /// Command ([`Error::Command`]).
    pub fn smart_log(&self, nsid: u32) -> Result<SmartLog> {
        let mut page = [0u8; SMART_LOG_SIZE];
        self.read_log_page(log_page::SMART_HEALTH, nsid, &mut page)?;
        Ok(SmartLog::from_bytes(&page))
    }

    /// Reads the newest `entries` Error Information log entries (Log Identifier 01h, NVMe
    /// Base 2.0 §5.16.1.2), newest first, leaving out unused ones (Error Count 0). `entries`
    /// is capped by what the controller keeps (Identify ELPE + 1) and by what one command can
    /// transfer (MDTS); 0 reads nothing.
    pub fn error_log(&self, entries: usize) -> Result<Vec<ErrorLogEntry>> {
        let kept = usize::from(self.inner.identify.elpe) + 1;
        let fit = self.inner.max_transfer / ERROR_LOG_ENTRY_SIZE;
        let count = entries.min(kept).min(fit);
        if count == 0 {
            return Ok(Vec::new());
        }
        let mut page = vec![0u8; count * ERROR_LOG_ENTRY_SIZE];
        self.read_log_page(log_page::ERROR_INFORMATION, NSID_BROADCAST, &mut page)?;
        Ok(ErrorLogEntry::parse_entries(&page)
            .filter(ErrorLogEntry::is_valid)
            .collect())
    }

    /// Runs one typed admin command ([`nvme_core::NvmeController::admin`]): its data through a
    /// fresh DMA buffer of the command's length. After a timeout or fatal status the buffer
    /// is leaked, never freed (the controller may still reach it).
    pub fn admin_command(&self, command: AdminCommand) -> Result<AdminReply> {
        let len = command.data().len();
        let buf = match command.data() {
            AdminData::None => None,
            AdminData::FromDevice(n) => Some(DmaBuffer::allocate(&self.inner.dma, *n)?),
            AdminData::ToDevice(bytes) => {
                let mut b = DmaBuffer::allocate(&self.inner.dma, bytes.len())?;
                b[..bytes.len()].copy_from_slice(bytes);
                Some(b)
            }
        };
        match self
            .inner
            .admin(command.sqe(), buf.as_ref().map(|b| (b, len)))
        {
            Ok(cqe) => {
                let data = match (command.data(), &buf) {
                    (AdminData::FromDevice(n), Some(b)) => b[..*n].to_vec(),
                    _ => Vec::new(),
                };
                Ok(AdminReply { dw0: cqe.dw0, data })
            }
            Err(e @ (Error::Timeout { .. } | Error::ControllerFatal { .. })) => {
                if let Some(b) = buf {
                    b.leak();
                }
                Err(e)
            }
            Err(e) => Err(e),
        }
    }

    /// Get Log Page `lid` for `nsid` from offset 0 into `out` (a non-empty multiple of 4
    /// bytes, at most one admin transfer).
    fn read_log_page(&self, lid: u8, nsid: u32, out: &mut [u8]) -> Result<()> {
        let buf = self.inner.read_log(lid, nsid, out.len())?;
        out.copy_from_slice(&buf[..out.len()]);
        Ok(())
    }

    /// Runs a raw admin command. `data` is the command's data buffer (`len` bytes of it are
    /// described by the PRPs); the driver fills the command id and the data pointer (zero
    /// when there is no buffer). The buffer comes back with the completion, or in the error
    /// unless the command timed out (then the controller is marked failed and keeps it).
    ///
    /// # Safety
    /// The driver cannot tell how many bytes an arbitrary command transfers. The caller
    /// guarantees that the command, as the controller will interpret it, transfers at most
    /// `len` bytes (to or from the buffer) and no data at all when `data` is `None`; and that
    /// it does not make the controller write host memory through any other pointer in it
    /// (e.g. a command that sets up controller-owned host memory). Otherwise the controller
    /// writes memory the program owns.
    pub unsafe fn admin_raw(
        &self,
        sqe: SubmissionEntry,
        data: Option<(DmaBuffer, usize)>,
    ) -> std::result::Result<(CompletionEntry, Option<DmaBuffer>), IoFailure> {
        let (buf, len) = match data {
            Some((b, l)) => (Some(b), l),
            None => (None, 0),
        };
        match self.inner.admin(sqe, buf.as_ref().map(|b| (b, len))) {
            Ok(cqe) => Ok((cqe, buf)),
            Err(e @ (Error::Timeout { .. } | Error::ControllerFatal { .. })) => {
                // The controller may still write the buffer: never give it back.
                std::mem::forget(buf);
                Err(IoFailure::new(e, None))
            }
            Err(e) => Err(IoFailure::new(e, buf)),
        }
    }
}

impl Inner {
    /// Runs one admin command under the admin lock.
    pub(crate) fn admin(
        &self,
        sqe: SubmissionEntry,
        data: Option<(&DmaBuffer, usize)>,
    ) -> Result<CompletionEntry> {
        if self.is_failed() {
            return Err(Error::Failed {
                controller: self.name.clone(),
            });
        }
        if let Some((buf, _)) = data {
            self.check_domain(buf)?;
        }
        let mut admin: MutexGuard<'_, AdminQueue> =
            self.admin.lock().unwrap_or_else(|p| p.into_inner());
        let result = admin.execute(&self.mmio, self.page_size, sqe, data, self.admin_timeout);
        self.account_async(&mut admin);
        match result {
            Err(Error::Timeout { .. }) | Err(Error::ControllerFatal { .. }) => {
                drop(admin);
                log::error!(
                    "{}: admin command failed fatally; controller marked failed",
                    self.name
                );
                // The command may still run and write its data buffer or the admin rings:
                // stop the controller before any of that memory can be freed.
                self.fail_and_stop();
                result.map_err(|e| match e {
                    Error::ControllerFatal { .. } => Error::ControllerFatal {
                        controller: self.name.clone(),
                    },
                    e => e,
                })
            }
            r => r,
        }
    }

    /// Identify `cns` for `nsid` through `page` (an [`IDENTIFY_DATA_SIZE`]-byte buffer).
    pub(super) fn identify_page(
        &self,
        cns: Cns,
        nsid: u32,
        page: &mut DmaBuffer,
    ) -> Result<[u8; IDENTIFY_DATA_SIZE]> {
        self.identify_sqe_page(command::identify(cns, nsid), page)
    }

    /// The Identify command `sqe` through `page` (an [`IDENTIFY_DATA_SIZE`]-byte buffer).
    pub(super) fn identify_sqe_page(
        &self,
        sqe: SubmissionEntry,
        page: &mut DmaBuffer,
    ) -> Result<[u8; IDENTIFY_DATA_SIZE]> {
        page.fill(0);
        self.admin(sqe, Some((page, IDENTIFY_DATA_SIZE)))?;
        let mut bytes = [0u8; IDENTIFY_DATA_SIZE];
        bytes.copy_from_slice(&page[..IDENTIFY_DATA_SIZE]);
        Ok(bytes)
    }

    /// Reads `len` bytes of log page `lid` for `nsid` into a fresh DMA buffer. After a
    /// timeout or fatal status the buffer is leaked, never freed (the controller may still
    /// write it).
    pub(crate) fn read_log(&self, lid: u8, nsid: u32, len: usize) -> Result<DmaBuffer> {
        let bytes = u32::try_from(len)
            .ok()
            .filter(|&b| b != 0 && b % 4 == 0)
            .ok_or_else(|| {
                Error::InvalidRequest(format!(
                    "log page length {len} is not a non-zero multiple of 4 bytes"
                ))
            })?;
        let buf = DmaBuffer::allocate(&self.dma, len)?;
        match self.admin(command::get_log_page(lid, nsid, bytes), Some((&buf, len))) {
            Ok(_) => Ok(buf),
            Err(e @ (Error::Timeout { .. } | Error::ControllerFatal { .. })) => {
                buf.leak();
                Err(e)
            }
            Err(e) => Err(e),
        }
    }
}
