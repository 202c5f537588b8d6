//! The handshake and the Fabrics commands (NVMe Base 2.0 §6): ICReq/ICResp (NVMe/TCP
//! §3.6.2.2-3), Connect (§6.3) with the access checks, Property Get/Set (§6.5-6.6) of CAP, VS,
//! CC and CSTS, Disconnect (§6.4).

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use nvme_spec::fabrics::{self, fctype, ConnectData};
use nvme_spec::regs::{self, Cap, Cc, ShutdownNotification, ShutdownStatus, Version};
use nvme_spec::status::generic;
use nvme_spec::tcp::{self, dgst, pdu_type, CommonHeader, IcReq, IcResp};
use nvme_spec::{Status, StatusCodeType};

use super::admin::AdminState;
use super::io::IoState;
use super::{csts_of, err, retry, Conn, Role, PDU_OVERHEAD};
use crate::backend::Backend;

/// NVMe version the target's controllers report (1.4.0).
const VERSION: Version = Version::new(1, 4, 0);
/// CAP.TO: worst-case time to ready, in 500 ms units (the target is ready at once).
const CAP_TO: u8 = 1;
/// Byte offset of SQSIZE in a Connect command (CDW11 bits 15:0), for Connect Invalid
/// Parameters.
const CONNECT_SQSIZE_OFFSET: u16 = 44;

fn connect_status(sc: u8) -> Status {
    Status::new(StatusCodeType::CommandSpecific.raw(), sc, true)
}

impl<B: Backend> Conn<B> {
    /// ICReq: checked, answered with ICResp (the digests the host asked for, CPDA,
    /// MAXH2CDATA); the connection is then ready for capsules.
    pub(super) fn icreq(&mut self, req: IcReq) {
        if req.ch.pdu_type != pdu_type::IC_REQ
            || req.ch.hlen != tcp::IC_HLEN
            || req.ch.plen != u32::from(tcp::IC_HLEN)
        {
            self.s.stats.protocol_errors.fetch_add(1, Ordering::Relaxed);
            return self.close_after_send("the first PDU is not an ICReq".into());
        }
        if req.pfv != tcp::PFV_1_0 || req.hpda > tcp::PDA_MAX {
            self.s.stats.protocol_errors.fetch_add(1, Ordering::Relaxed);
            return self.close_after_send(format!("ICReq PFV {} HPDA {}", req.pfv, req.hpda));
        }
        let dg = req.dgst & (dgst::HEADER | dgst::DATA);
        let maxh2cdata = self
            .s
            .subsystems
            .iter()
            .map(|s| s.max_io)
            .min()
            .unwrap_or(super::ADMIN_IN_CAPSULE);
        let resp = IcResp {
            ch: CommonHeader {
                pdu_type: pdu_type::IC_RESP,
                flags: 0,
                hlen: tcp::IC_HLEN,
                pdo: 0,
                plen: u32::from(tcp::IC_HLEN),
            },
            pfv: tcp::PFV_1_0,
            cpda: super::CPDA,
            dgst: dg,
            maxh2cdata: maxh2cdata as u32,
            rsvd: [0; 112],
        };
        self.tx.push_bytes(&resp.to_bytes());
        self.maxh2cdata = maxh2cdata;
        self.rx.digests = tcp::Digests::from_dgst(dg);
        self.c2h_align = tcp::pda_align(req.hpda);
        self.handshaken = true;
    }

    /// A Fabrics command.
    pub(super) fn fabrics(&mut self, slot: u16) {
        let sqe = self.slots[usize::from(slot)].sqe;
        let bound = !matches!(self.role, Role::Unbound);
        match fabrics::fctype_of(&sqe) {
            fctype::CONNECT if !bound => self.connect(slot),
            fctype::PROPERTY_GET if self.qid == 0 && bound => self.property_get(slot),
            fctype::PROPERTY_SET if self.qid == 0 && bound => self.property_set(slot),
            fctype::DISCONNECT if self.qid != 0 && bound => {
                self.respond(slot, Status::SUCCESS, 0, 0);
                self.close_after_send("Disconnect".into());
            }
            fctype::CONNECT | fctype::PROPERTY_GET | fctype::PROPERTY_SET | fctype::DISCONNECT => {
                self.respond(slot, err(generic::COMMAND_SEQUENCE_ERROR), 0, 0)
            }
            _ => self.respond(slot, err(generic::INVALID_FIELD), 0, 0),
        }
    }

    /// A refused Connect: the status, then the connection ends.
    fn refuse_connect(&mut self, slot: u16, sc: u8, dw0: u32, why: String) {
        self.s.stats.refused_hosts.fetch_add(1, Ordering::Relaxed);
        log::warn!("nvme-target: {}: Connect refused: {why}", self.peer);
        self.respond(slot, connect_status(sc), dw0, 0);
        self.close_after_send(why);
    }

    /// Connect (§6.3): the subsystem and host checked, then a new association (admin queue)
    /// or an I/O queue joined to one, with a backend queue pair of its own.
    fn connect(&mut self, slot: u16) {
        let sqe = self.slots[usize::from(slot)].sqe;
        let data: Option<[u8; ConnectData::SIZE]> = self.slots[usize::from(slot)]
            .buf
            .as_ref()
            .filter(|_| self.slots[usize::from(slot)].len == ConnectData::SIZE)
            .and_then(|b| b.get(..ConnectData::SIZE))
            .and_then(|b| b.try_into().ok());
        let Some(data) = data else {
            return self.refuse_connect(
                slot,
                fabrics::status::CONNECT_INVALID_PARAMETERS,
                0,
                "Connect without its 1024-byte data".into(),
            );
        };
        if sqe.cdw10 as u16 != fabrics::CONNECT_RECFMT {
            return self.refuse_connect(
                slot,
                fabrics::status::INCOMPATIBLE_FORMAT,
                0,
                "Connect record format".into(),
            );
        }
        let cd = ConnectData::from_bytes(&data);
        let qid = fabrics::connect_qid(&sqe);
        let entries = fabrics::connect_entries(&sqe);
        let discovery = fabrics::nqn_field(fabrics::DISCOVERY_NQN).expect("fits") == cd.subnqn;
        let shared = self.s.clone();
        let subsys = shared
            .subsystems
            .iter()
            .position(|s| s.nqn_field == cd.subnqn);
        let host = fabrics::field_text(&cd.hostnqn);
        if !discovery && subsys.is_none() {
            return self.refuse_connect(
                slot,
                fabrics::status::CONNECT_INVALID_PARAMETERS,
                fabrics::connect_invalid_data_field(fabrics::CONNECT_DATA_SUBNQN_OFFSET),
                format!("no subsystem {}", fabrics::field_text(&cd.subnqn)),
            );
        }
        if let Some(i) = subsys {
            if !shared.subsystems[i].allows(&cd.hostnqn) {
                return self.refuse_connect(
                    slot,
                    fabrics::status::CONNECT_INVALID_HOST,
                    0,
                    format!("host {host} is not allowed on {}", shared.subsystems[i].nqn),
                );
            }
        }
        if entries < 2 || entries > u32::from(shared.config.queue_entries) {
            return self.refuse_connect(
                slot,
                fabrics::status::CONNECT_INVALID_PARAMETERS,
                u32::from(CONNECT_SQSIZE_OFFSET),
                format!("queue of {entries} entries"),
            );
        }
        self.sqfc_disabled =
            fabrics::connect_cattr(&sqe) & fabrics::CATTR_DISABLE_SQ_FLOW_CONTROL != 0;
        if qid == 0 {
            if cd.cntlid != fabrics::CNTLID_DYNAMIC {
                return self.refuse_connect(
                    slot,
                    fabrics::status::CONNECT_INVALID_PARAMETERS,
                    fabrics::connect_invalid_data_field(fabrics::CONNECT_DATA_CNTLID_OFFSET),
                    "admin Connect with a static controller id".into(),
                );
            }
            let Some((cntlid, _alive)) = shared.registry.create(subsys, cd.hostnqn) else {
                return self.refuse_connect(
                    slot,
                    fabrics::status::CONTROLLER_BUSY,
                    0,
                    "no controller id left".into(),
                );
            };
            let kato_ms = fabrics::connect_kato_ms(&sqe);
            self.role = Role::Admin(AdminState::new(cntlid, subsys, kato_ms, Instant::now()));
            self.qid = 0;
            self.qsize = entries as u16;
            self.resize_slots(entries as usize);
            log::info!(
                "nvme-target: {}: host {host} associated with {} as controller {cntlid} (KATO {kato_ms} ms)",
                self.peer,
                subsys.map_or(fabrics::DISCOVERY_NQN, |i| shared.subsystems[i].nqn.as_str())
            );
            return self.respond(slot, Status::SUCCESS, u32::from(cntlid), 0);
        }
        let Some(i) = subsys else {
            return self.refuse_connect(
                slot,
                fabrics::status::CONNECT_INVALID_PARAMETERS,
                u32::from(fabrics::CONNECT_QID_OFFSET),
                "I/O queue on the discovery subsystem".into(),
            );
        };
        let alive = match shared.registry.join(cd.cntlid, i, &cd.hostnqn, qid) {
            Ok(a) => a,
            Err(crate::registry::JoinRefused::UnknownController) => {
                return self.refuse_connect(
                    slot,
                    fabrics::status::CONNECT_INVALID_PARAMETERS,
                    fabrics::connect_invalid_data_field(fabrics::CONNECT_DATA_CNTLID_OFFSET),
                    format!("no controller {} for this host and subsystem", cd.cntlid),
                )
            }
            Err(crate::registry::JoinRefused::BadQueue) => {
                return self.refuse_connect(
                    slot,
                    fabrics::status::CONNECT_INVALID_PARAMETERS,
                    u32::from(fabrics::CONNECT_QID_OFFSET),
                    format!("queue {qid} not granted or already connected"),
                )
            }
        };
        let sub = &shared.subsystems[i];
        let queue = match sub.backend.create_queue(entries) {
            Ok(q) => q,
            Err(e) => {
                shared.registry.leave(cd.cntlid, qid);
                log::warn!("nvme-target: {}: backend queue pair: {e}", self.peer);
                self.respond(slot, retry(generic::INTERNAL_ERROR), 0, 0);
                return self.close_after_send(format!("backend queue pair: {e}"));
            }
        };
        self.qid = qid;
        self.qsize = entries as u16;
        self.resize_slots(entries as usize);
        let size = sub.max_io.max(shared.config.in_capsule_bytes);
        self.use_pool(sub.backend.dma().clone(), size);
        self.rx.max_plen = (size + PDU_OVERHEAD) as u32;
        self.role = Role::Io(IoState::new(cd.cntlid, i, alive, queue, entries as usize));
        self.respond(slot, Status::SUCCESS, u32::from(cd.cntlid), 0);
    }

    fn admin_state(&mut self) -> Option<&mut AdminState> {
        match &mut self.role {
            Role::Admin(a) => Some(a),
            _ => None,
        }
    }

    /// The CAP the target's controllers report: MQES from the queue size, CQR, CAP.TO, NVM
    /// command set, 4 KiB pages.
    fn cap(&self) -> Cap {
        Cap::new(self.s.config.queue_entries - 1, true, CAP_TO, 0, true, 0, 0)
    }

    fn property_get(&mut self, slot: u16) {
        let sqe = self.slots[usize::from(slot)].sqe;
        let cap = self.cap();
        let Some(a) = self.admin_state() else {
            return self.respond(slot, err(generic::COMMAND_SEQUENCE_ERROR), 0, 0);
        };
        let v: u64 = match fabrics::property_offset(&sqe) as usize {
            regs::CAP => cap.0,
            regs::VS => u64::from(VERSION.0),
            regs::CC => u64::from(a.cc.0),
            regs::CSTS => u64::from(csts_of(a.cc, a.shst).0),
            _ => return self.respond(slot, err(generic::INVALID_FIELD), 0, 0),
        };
        self.respond(slot, Status::SUCCESS, v as u32, (v >> 32) as u32);
    }

    /// Property Set of CC: enabling readies the controller at once, clearing EN resets it,
    /// a shutdown notification completes at once (§3.6.1).
    fn property_set(&mut self, slot: u16) {
        let sqe = self.slots[usize::from(slot)].sqe;
        if fabrics::property_offset(&sqe) as usize != regs::CC {
            return self.respond(slot, err(generic::INVALID_FIELD), 0, 0);
        }
        let Some(a) = self.admin_state() else {
            return self.respond(slot, err(generic::COMMAND_SEQUENCE_ERROR), 0, 0);
        };
        let new = Cc(sqe.cdw12);
        if !new.en() {
            a.shst = ShutdownStatus::Normal;
        }
        if new.shn() != ShutdownNotification::None {
            a.shst = ShutdownStatus::Complete;
        }
        a.cc = new;
        self.respond(slot, Status::SUCCESS, 0, 0);
    }
}

/// A KATO of `ms` milliseconds, `None` for 0 (off).
pub(super) fn kato(ms: u32) -> Option<Duration> {
    (ms != 0).then(|| Duration::from_millis(u64::from(ms)))
}
