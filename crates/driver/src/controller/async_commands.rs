//! Admin commands that run without a waiter: Asynchronous Event Requests (kept posted; their
//! events are queued for [`Controller::take_events`]) and Aborts sent for timed-out I/O (counted
//! in [`AbortStats`]). Their completions are accounted whenever the admin queue is used or polled.
//!
//! INVARIANT: the I/O path only ever `try_lock`s the admin queue here, never blocks on it; the
//! event queue is bounded (`MAX_QUEUED_EVENTS`, the oldest dropped).

use std::sync::MutexGuard;

use nvme_spec::identify::IDENTIFY_DATA_SIZE;
use nvme_spec::log::{ERROR_LOG_ENTRY_SIZE, NSID_BROADCAST, SMART_LOG_SIZE};
use nvme_spec::opcode::log_page;
use nvme_spec::queue::CompletionEntry;
use nvme_spec::{command, event, opcode, AsyncEvent};

use crate::admin::AdminQueue;

use super::{Controller, Inner};

/// Most Asynchronous Event Requests kept posted.
pub(super) const MAX_AERS: usize = 4;
/// Most events kept for [`Controller::take_events`]; older ones are dropped.
const MAX_QUEUED_EVENTS: usize = 64;

pub use nvme_core::AbortStats;

impl Controller {
    /// Asynchronous events (SMART/health critical warnings, namespace attribute changes,
    /// firmware activation, error log entries) received since the last call, oldest first.
    /// Reads the log page each names, which the controller requires before it reports
    /// another event of that type. Requests stay posted on their own (re-posted as each
    /// completes, and after a reset); events are collected whenever the admin queue is used
    /// and on every queue pair's health tick (about every 50 ms while polled). At most 64 are
    /// kept. A namespace attribute change also rescans the namespaces
    /// ([`Controller::rescan_namespaces`]; a failed rescan is logged and keeps the old list).
    pub fn take_events(&self) -> Vec<AsyncEvent> {
        self.inner.take_events()
    }

    /// Abort outcomes and timeout-driven resets so far.
    pub fn abort_stats(&self) -> AbortStats {
        self.inner.poll_admin();
        *self.inner.abort_stats_mut()
    }
}

impl Inner {
    /// Sends an Abort for command `cid` of queue `qid` without waiting: only if the admin queue
    /// is free right now (never blocks the I/O thread) and fewer Aborts than the controller's
    /// Abort Command Limit (Identify ACL + 1, NVMe Base 2.0 §5.1) are outstanding. Returns
    /// whether it was sent; the timeout clock retries one that was not on its next tick.
    pub(crate) fn abort_async(&self, qid: u16, cid: u16) -> bool {
        if self.is_failed() {
            return false;
        }
        let Ok(mut admin) = self.admin.try_lock() else {
            return false;
        };
        admin.reap_async();
        self.account_async(&mut admin);
        if admin.async_count(opcode::admin::ABORT) > usize::from(self.identify.acl) {
            return false;
        }
        let sent = admin.submit_async(command::abort(qid, cid)).is_some();
        if sent {
            self.abort_stats_mut().sent += 1;
        }
        sent
    }

    /// Picks up completions of Aborts if the admin queue is free (from a clock tick).
    pub(crate) fn poll_admin(&self) {
        if let Ok(mut admin) = self.admin.try_lock() {
            if admin.has_async() {
                admin.reap_async();
            }
            self.account_async(&mut admin);
        }
    }

    pub(super) fn account_async(&self, admin: &mut AdminQueue) {
        let finished: Vec<(u8, CompletionEntry)> = admin.take_async().collect();
        if finished.is_empty() {
            return;
        }
        let mut repost = 0;
        for (op, cqe) in finished {
            if op == opcode::admin::ASYNC_EVENT_REQUEST {
                if cqe.status().is_success() {
                    let event = AsyncEvent::from_dw0(cqe.dw0);
                    log::info!("{}: asynchronous event {event:?}", self.name);
                    let mut events = self.events.lock().unwrap_or_else(|p| p.into_inner());
                    if events.len() == MAX_QUEUED_EVENTS {
                        events.pop_front();
                    }
                    events.push_back(event);
                    repost += 1;
                }
                continue;
            }
            let mut stats = self.aborts.lock().unwrap_or_else(|p| p.into_inner());
            if !cqe.status().is_success() {
                stats.failed += 1;
            } else if cqe.dw0 & command::ABORT_DW0_NOT_ABORTED != 0 {
                stats.not_aborted += 1;
            } else {
                stats.aborted += 1;
            }
        }
        for _ in 0..repost {
            let _ = admin.submit_async(command::async_event_request());
        }
    }

    /// Enables the events this driver reports (SMART critical warnings, namespace attribute
    /// and firmware activation notices) and posts the Asynchronous Event Requests. Best
    /// effort: a controller that refuses gets no AERs, which only costs the events.
    pub(super) fn enable_async_events(&mut self) {
        let wanted = (usize::from(self.identify.aerl) + 1).min(MAX_AERS);
        let config = event::AEC_SMART_CRITICAL_WARNINGS
            | event::AEC_NAMESPACE_ATTRIBUTE_NOTICES
            | event::AEC_FIRMWARE_ACTIVATION_NOTICES;
        if let Err(e) = self.admin(
            command::set_features(opcode::feature::ASYNC_EVENT_CONFIGURATION, config),
            None,
        ) {
            log::info!(
                "{}: asynchronous event configuration refused ({e})",
                self.name
            );
        }
        self.aers = wanted;
        self.post_aers();
    }

    /// Tops the outstanding Asynchronous Event Requests up to `aers`.
    pub(super) fn post_aers(&self) {
        let mut admin = self.admin.lock().unwrap_or_else(|p| p.into_inner());
        let missing = self
            .aers
            .saturating_sub(admin.async_count(opcode::admin::ASYNC_EVENT_REQUEST));
        for _ in 0..missing {
            if admin.submit_async(command::async_event_request()).is_none() {
                break;
            }
        }
    }

    /// Events received so far; reads the log page each one names (which re-arms events of
    /// that type).
    pub(crate) fn take_events(&self) -> Vec<AsyncEvent> {
        self.poll_admin();
        let events: Vec<AsyncEvent> = self
            .events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain(..)
            .collect();
        for e in &events {
            let bytes = match e.log_page {
                log_page::ERROR_INFORMATION => ERROR_LOG_ENTRY_SIZE,
                log_page::SMART_HEALTH => SMART_LOG_SIZE,
                _ => IDENTIFY_DATA_SIZE,
            };
            if let Err(err) = self.read_log(e.log_page, NSID_BROADCAST, bytes) {
                log::warn!(
                    "{}: reading log page {:#04x} for an event: {err}",
                    self.name,
                    e.log_page
                );
            }
        }
        if events.iter().any(AsyncEvent::is_namespace_change) {
            if let Err(err) = self.rescan_namespaces() {
                log::warn!(
                    "{}: rescanning namespaces after a change notice: {err}",
                    self.name
                );
            }
        }
        events
    }

    pub(crate) fn abort_stats_mut(&self) -> MutexGuard<'_, AbortStats> {
        self.aborts.lock().unwrap_or_else(|p| p.into_inner())
    }
}
