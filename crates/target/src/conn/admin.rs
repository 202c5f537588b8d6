//! Admin commands of the target's controllers (NVMe Base 2.0 §5): Identify (§5.17), Get Log
//! Page (§5.16: Error Information, SMART / Health, Discovery), Set/Get Features (§5.27,
//! §5.15: Number of Queues, Keep Alive Timer, Asynchronous Event Configuration, Volatile Write
//! Cache), Keep Alive (§5.15), Abort (§5.1: answered "not aborted"), Asynchronous Event
//! Request (§5.2: held, up to AERL + 1).

use std::time::{Duration, Instant};

use nvme_spec::command::{self, Cns};
use nvme_spec::opcode::{admin, feature, log_page};
use nvme_spec::regs::{Cc, ShutdownStatus};
use nvme_spec::status::{command_specific, generic};
use nvme_spec::{fabrics, Status, StatusCodeType};

use super::fabrics::kato;
use super::{err, Conn, Role};
use crate::backend::Backend;
use crate::pages;

/// Asynchronous Event Requests held at once (Identify AERL + 1).
pub(crate) const AER_LIMIT: usize = pages::AERL as usize + 1;
/// Number of Queues field value meaning "65536" (reserved: NVMe Base 2.0 §5.27.1.5).
const NQ_RESERVED: u32 = 0xFFFF;
/// Mask of one 16-bit half of a dword.
const HALF: u32 = 0xFFFF;
/// Identify CNS field (CDW10 bits 7:0).
const CNS_MASK: u32 = 0xFF;
/// Largest log page data the target returns for one command.
const MAX_LOG_BYTES: usize = 1 << 20;
/// Features' FID field (CDW10 bits 7:0).
const FID_MASK: u32 = 0xFF;

/// The admin side of an association.
pub(crate) struct AdminState {
    pub cntlid: u16,
    /// The subsystem (`None`: discovery).
    pub subsys: Option<usize>,
    pub kato: Option<Duration>,
    deadline: Option<Instant>,
    pub cc: Cc,
    pub shst: ShutdownStatus,
    aers: Vec<u16>,
    io_queues: u16,
    async_config: u32,
}

impl AdminState {
    pub fn new(cntlid: u16, subsys: Option<usize>, kato_ms: u32, now: Instant) -> Self {
        let kato = kato(kato_ms);
        Self {
            cntlid,
            subsys,
            kato,
            deadline: kato.map(|k| now + k),
            cc: Cc(0),
            shst: ShutdownStatus::Normal,
            aers: Vec::with_capacity(AER_LIMIT),
            io_queues: 0,
            async_config: 0,
        }
    }

    /// Whether the Keep Alive timer expired (NVMe Base 2.0 §3.9.4).
    pub fn expired(&self, now: Instant) -> bool {
        self.deadline.is_some_and(|d| now > d)
    }

    fn restart_timer(&mut self, now: Instant) {
        self.deadline = self.kato.map(|k| now + k);
    }
}

impl<B: Backend> Conn<B> {
    fn admin_mut(&mut self) -> &mut AdminState {
        match &mut self.role {
            Role::Admin(a) => a,
            _ => unreachable!("admin commands run on admin connections"),
        }
    }

    pub(super) fn admin(&mut self, slot: u16) {
        let sqe = self.slots[usize::from(slot)].sqe;
        match sqe.opcode() {
            admin::IDENTIFY => self.identify(slot),
            admin::GET_LOG_PAGE => self.get_log_page(slot),
            admin::SET_FEATURES => self.set_features(slot),
            admin::GET_FEATURES => self.get_features(slot),
            admin::KEEP_ALIVE => {
                self.admin_mut().restart_timer(Instant::now());
                self.respond(slot, Status::SUCCESS, 0, 0);
            }
            admin::ABORT => {
                // Commands are not aborted (NVMe Base 2.0 §5.1: the controller may complete
                // an Abort without aborting; dword 0 bit 0 set).
                self.respond(slot, Status::SUCCESS, command::ABORT_DW0_NOT_ABORTED, 0)
            }
            admin::ASYNC_EVENT_REQUEST => {
                let cid = self.slots[usize::from(slot)].cid;
                let a = self.admin_mut();
                if a.aers.len() >= AER_LIMIT {
                    let st = Status::new(
                        StatusCodeType::CommandSpecific.raw(),
                        command_specific::ASYNC_EVENT_REQUEST_LIMIT_EXCEEDED,
                        true,
                    );
                    return self.respond(slot, st, 0, 0);
                }
                // Held: no event is ever raised (namespaces do not change while the target
                // runs); the slot is free again, the command id kept.
                a.aers.push(cid);
                self.slots[usize::from(slot)].state = super::SlotState::Done;
                self.tx.push_release(slot);
            }
            _ => self.respond(slot, err(generic::INVALID_OPCODE), 0, 0),
        }
    }

    fn identify(&mut self, slot: u16) {
        let sqe = self.slots[usize::from(slot)].sqe;
        let shared = self.s.clone();
        let a = self.admin_mut();
        let (cntlid, subsys) = (a.cntlid, a.subsys);
        let cns = sqe.cdw10 & CNS_MASK;
        let page = match (subsys.map(|i| &shared.subsystems[i]), cns) {
            (sub, c) if c == Cns::Controller as u32 => {
                Some(pages::identify_controller(&shared, sub, cntlid).to_bytes())
            }
            (Some(sub), c) if c == Cns::ActiveNamespaceList as u32 => {
                Some(pages::active_namespaces(sub, sqe.nsid))
            }
            (Some(sub), c) if c == Cns::Namespace as u32 => {
                match pages::identify_namespace(sub, sqe.nsid) {
                    Ok(p) => Some(p),
                    Err(st) => return self.respond(slot, st, 0, 0),
                }
            }
            (Some(sub), c) if c == Cns::NamespaceIdDescriptors as u32 => {
                match pages::namespace_descriptors(sub, sqe.nsid) {
                    Ok(p) => Some(p),
                    Err(st) => return self.respond(slot, st, 0, 0),
                }
            }
            _ => None,
        };
        match page {
            Some(p) => self.respond_data(slot, &p),
            None => self.respond(slot, err(generic::INVALID_FIELD), 0, 0),
        }
    }

    fn get_log_page(&mut self, slot: u16) {
        let sqe = self.slots[usize::from(slot)].sqe;
        let shared = self.s.clone();
        let subsys = self.admin_mut().subsys;
        let lid = command::log_page_lid(&sqe);
        let page = match (subsys.map(|i| &shared.subsystems[i]), lid) {
            (None, fabrics::DISCOVERY_LOG_LID) => {
                // The host NQN of this association filters the entries.
                let host = shared.registry.host(self.admin_mut().cntlid);
                Some(pages::discovery_log(
                    &shared,
                    host.as_ref(),
                    self.stream.local_addr().ok(),
                ))
            }
            (Some(_), log_page::ERROR_INFORMATION) => Some(pages::error_log()),
            (Some(sub), log_page::SMART_HEALTH) => Some(pages::smart_log(sub)),
            _ => None,
        };
        let Some(page) = page else {
            let st = Status::new(
                StatusCodeType::CommandSpecific.raw(),
                command_specific::INVALID_LOG_PAGE,
                true,
            );
            return self.respond(slot, st, 0, 0);
        };
        // What the host asked for, within its buffer and a bound (NUMD can ask for 16 GiB).
        let want = command::log_page_bytes(&sqe)
            .min(self.slots[usize::from(slot)].len)
            .min(MAX_LOG_BYTES);
        let offset = usize::try_from(command::log_page_offset(&sqe)).unwrap_or(usize::MAX);
        if offset > page.len() {
            return self.respond(slot, err(generic::INVALID_FIELD), 0, 0);
        }
        let mut out = page[offset..].to_vec();
        out.resize(want, 0);
        self.respond_data(slot, &out);
    }

    fn set_features(&mut self, slot: u16) {
        let sqe = self.slots[usize::from(slot)].sqe;
        let max = self.s.config.max_io_queues;
        let shared = self.s.clone();
        let a = self.admin_mut();
        match (sqe.cdw10 & FID_MASK) as u8 {
            feature::NUMBER_OF_QUEUES if a.subsys.is_some() => {
                let (nsqr, ncqr) = (sqe.cdw11 & HALF, sqe.cdw11 >> 16);
                if nsqr == NQ_RESERVED || ncqr == NQ_RESERVED {
                    return self.respond(slot, err(generic::INVALID_FIELD), 0, 0);
                }
                // One I/O queue is one SQ/CQ pair: grant the smaller ask, within the limit.
                let n = (nsqr.min(ncqr) + 1).min(u32::from(max)) as u16;
                a.io_queues = n;
                shared.registry.grant(a.cntlid, n);
                let v = u32::from(n - 1);
                self.respond(slot, Status::SUCCESS, v | v << 16, 0);
            }
            feature::KEEP_ALIVE_TIMER => {
                a.kato = kato(sqe.cdw11);
                a.restart_timer(Instant::now());
                self.respond(slot, Status::SUCCESS, 0, 0);
            }
            feature::ASYNC_EVENT_CONFIGURATION => {
                a.async_config = sqe.cdw11;
                self.respond(slot, Status::SUCCESS, 0, 0);
            }
            _ => self.respond(slot, err(generic::INVALID_FIELD), 0, 0),
        }
    }

    fn get_features(&mut self, slot: u16) {
        let sqe = self.slots[usize::from(slot)].sqe;
        let shared = self.s.clone();
        let a = self.admin_mut();
        let v = match (sqe.cdw10 & FID_MASK) as u8 {
            feature::NUMBER_OF_QUEUES if a.subsys.is_some() => {
                let n = u32::from(a.io_queues.max(1) - 1);
                n | n << 16
            }
            feature::KEEP_ALIVE_TIMER => a.kato.map_or(0, |k| k.as_millis() as u32),
            feature::ASYNC_EVENT_CONFIGURATION => a.async_config,
            feature::VOLATILE_WRITE_CACHE if a.subsys.is_some() => {
                let sub = &shared.subsystems[a.subsys.unwrap_or(0)];
                u32::from(sub.backend.identify().vwc_present())
            }
            _ => return self.respond(slot, err(generic::INVALID_FIELD), 0, 0),
        };
        self.respond(slot, Status::SUCCESS, v, 0);
    }
}
