//! The receive side of a queue: PDU parsing and every check on what the target sends
//! (`docs/nvme-tcp.md`, "A hostile target"), C2HData payload copied into the caller's
//! buffer, R2Ts answered with H2CData. A child of `queue` so that it reaches the queue's
//! state directly; the per-command R2T rules themselves are in `crate::r2t`.

use nvme_driver::Error;
use nvme_spec::tcp::{
    self, flags, pdu_type, C2HData, CapsuleResp, CommonHeader, H2CData, TermReq, DIGEST_SIZE, R2T,
};
use nvme_spec::Status;

use super::{align_up, command_name, crc32c, Queue, Rx, MAX_PLEN};
use crate::error::TcpError;
use crate::r2t::{self, R2tTarget, TX_HIGH_WATER};

/// What a PDU header asks of the queue, decided while the header bytes are borrowed.
enum Action {
    Complete {
        cid: u16,
        status: Status,
        dw0: u32,
        dw1: u32,
    },
    R2t(R2T),
    Data {
        cid: u16,
        datao: usize,
        datal: usize,
        pdu_flags: u8,
    },
}

impl Queue {
    /// Handles every complete PDU (and partial C2HData payload) in the receive buffer.
    pub(super) fn parse(&mut self) {
        while self.failed.is_none() {
            let avail = self.rx_tail - self.rx_head;
            match self.rx_state {
                Rx::Header => {
                    if avail < CommonHeader::SIZE {
                        return;
                    }
                    if self.tx_backlog() > TX_HIGH_WATER {
                        self.flush_tx();
                        if self.tx_backlog() > TX_HIGH_WATER {
                            self.rx_paused = true;
                            return;
                        }
                    }
                    match self.parse_header(avail) {
                        Some(true) => {}
                        Some(false) | None => return,
                    }
                }
                Rx::Data {
                    cid,
                    pos,
                    remaining,
                    datal,
                    pdu_flags,
                    crc,
                } => {
                    if avail == 0 {
                        return;
                    }
                    let n = avail.min(remaining);
                    let src = &self.rx[self.rx_head..self.rx_head + n];
                    let crc = if self.neg.ddgst {
                        crc32c::crc32c_append(crc, src)
                    } else {
                        crc
                    };
                    let buf = self.slots[usize::from(cid)]
                        .buffer
                        .as_mut()
                        .expect("validated: a read slot has a buffer");
                    buf[pos..pos + n].copy_from_slice(src);
                    self.rx_head += n;
                    self.rx_state = if n < remaining {
                        Rx::Data {
                            cid,
                            pos: pos + n,
                            remaining: remaining - n,
                            datal,
                            pdu_flags,
                            crc,
                        }
                    } else if self.neg.ddgst {
                        Rx::DataDigest {
                            cid,
                            datal,
                            pdu_flags,
                            crc,
                        }
                    } else {
                        self.data_done(cid, datal, pdu_flags);
                        Rx::Header
                    };
                }
                Rx::DataDigest {
                    cid,
                    datal,
                    pdu_flags,
                    crc,
                } => {
                    if avail < DIGEST_SIZE {
                        return;
                    }
                    let received = u32::from_le_bytes(
                        self.rx[self.rx_head..self.rx_head + 4]
                            .try_into()
                            .expect("sized"),
                    );
                    self.rx_head += DIGEST_SIZE;
                    if received != crc {
                        self.fail(TcpError::Digest {
                            addr: self.addr,
                            qid: self.qid,
                            kind: "data",
                            pdu: "C2HData",
                            computed: crc,
                            received,
                        });
                        return;
                    }
                    self.rx_state = Rx::Header;
                    self.data_done(cid, datal, pdu_flags);
                }
            }
        }
    }

    /// The payload of a C2HData PDU has arrived (and its digest matched).
    fn data_done(&mut self, cid: u16, datal: usize, pdu_flags: u8) {
        let slot = &mut self.slots[usize::from(cid)];
        slot.received += datal;
        if pdu_flags & flags::SUCCESS != 0 {
            if slot.received != slot.len {
                let what = format!(
                    "SUCCESS flag after {} of the command's {} bytes (check: SUCCESS before the \
                     end of the transfer)",
                    slot.received, slot.len
                );
                self.malformed(pdu_type::C2H_DATA, what);
                return;
            }
            self.stats.success_shortcuts += 1;
            self.finish(cid, Ok(0));
        }
    }

    /// Parses one PDU header at `rx_head`. `Some(true)`: consumed, go on; `Some(false)`:
    /// incomplete, wait for more bytes; `None`: the queue failed.
    fn parse_header(&mut self, avail: usize) -> Option<bool> {
        let h = self.rx_head;
        let ch = CommonHeader::from_bytes(
            &self.rx[h..h + CommonHeader::SIZE]
                .try_into()
                .expect("sized"),
        );
        let t = ch.pdu_type;
        let Some(hlen) = tcp::expected_hlen(t) else {
            self.malformed(t, format!("unknown PDU type {t:#04x} (check: PDU type)"));
            return None;
        };
        if !matches!(
            t,
            pdu_type::CAPSULE_RESP | pdu_type::C2H_DATA | pdu_type::R2T | pdu_type::C2H_TERM_REQ
        ) {
            self.malformed(
                t,
                "a controller must not send this PDU type after ICResp (check: PDU type)".into(),
            );
            return None;
        }
        if ch.hlen != hlen {
            self.malformed(
                t,
                format!("HLEN {} (must be {hlen}) (check: HLEN)", ch.hlen),
            );
            return None;
        }
        let hlen = usize::from(hlen);
        if t == pdu_type::C2H_TERM_REQ {
            if avail < hlen {
                return Some(false);
            }
            let term =
                TermReq::from_bytes(&self.rx[h..h + TermReq::SIZE].try_into().expect("sized"));
            self.fail(TcpError::Terminated {
                addr: self.addr,
                qid: self.qid,
                fes: term.fes,
                fei: term.fei(),
                name: tcp::fes::name(term.fes),
            });
            return None;
        }
        let hd = if self.neg.hdgst { DIGEST_SIZE } else { 0 };
        if (ch.flags & flags::HDGSTF != 0) != self.neg.hdgst {
            self.malformed(
                t,
                format!(
                    "HDGSTF flag is {} but header digests are {} (check: HDGSTF)",
                    ch.flags & flags::HDGSTF != 0,
                    if self.neg.hdgst { "on" } else { "off" }
                ),
            );
            return None;
        }
        if ch.plen > MAX_PLEN {
            self.malformed(
                t,
                format!("PLEN {} is beyond any transfer (check: PLEN)", ch.plen),
            );
            return None;
        }
        let plen = ch.plen as usize;
        // Bytes of this PDU that must be in the buffer before it is handled: everything for
        // PDUs without data, the header (and digest and padding) for C2HData.
        let need = if t == pdu_type::C2H_DATA {
            let pdo = usize::from(ch.pdo);
            if pdo < hlen + hd {
                self.malformed(
                    t,
                    format!(
                        "PDO {pdo} overlaps the header ({} bytes) (check: PDO)",
                        hlen + hd
                    ),
                );
                return None;
            }
            pdo
        } else {
            if plen != hlen + hd {
                self.malformed(
                    t,
                    format!("PLEN {plen} (must be {}) (check: PLEN)", hlen + hd),
                );
                return None;
            }
            plen
        };
        if avail < need {
            if self.rx.len() - self.rx_head < need {
                // Make room for the whole header.
                self.rx.copy_within(self.rx_head..self.rx_tail, 0);
                self.rx_tail -= self.rx_head;
                self.rx_head = 0;
            }
            return Some(false);
        }
        if self.neg.hdgst {
            let computed = crc32c(&self.rx[h..h + hlen]);
            let received =
                u32::from_le_bytes(self.rx[h + hlen..h + hlen + 4].try_into().expect("sized"));
            if computed != received {
                self.fail(TcpError::Digest {
                    addr: self.addr,
                    qid: self.qid,
                    kind: "header",
                    pdu: pdu_type::name(t),
                    computed,
                    received,
                });
                return None;
            }
        }
        self.stats.pdus_received += 1;
        let action = match t {
            pdu_type::CAPSULE_RESP => {
                let r = CapsuleResp::from_bytes(
                    &self.rx[h..h + CapsuleResp::SIZE].try_into().expect("sized"),
                );
                Action::Complete {
                    cid: r.cqe.cid,
                    status: r.cqe.status(),
                    dw0: r.cqe.dw0,
                    dw1: r.cqe.dw1,
                }
            }
            pdu_type::R2T => Action::R2t(R2T::from_bytes(
                &self.rx[h..h + R2T::SIZE].try_into().expect("sized"),
            )),
            _ => {
                let d =
                    C2HData::from_bytes(&self.rx[h..h + C2HData::SIZE].try_into().expect("sized"));
                let dd = if self.neg.ddgst { DIGEST_SIZE } else { 0 };
                if (ch.flags & flags::DDGSTF != 0) != self.neg.ddgst {
                    self.malformed(
                        t,
                        "DDGSTF flag disagrees with the negotiated data digest (check: DDGSTF)"
                            .into(),
                    );
                    return None;
                }
                if d.datal == 0 || plen != usize::from(ch.pdo) + d.datal as usize + dd {
                    self.malformed(
                        t,
                        format!(
                            "DATAL {} does not fit PLEN {plen} and PDO {} (check: DATAL)",
                            d.datal, ch.pdo
                        ),
                    );
                    return None;
                }
                if ch.flags & flags::SUCCESS != 0 && ch.flags & flags::LAST_PDU == 0 {
                    self.malformed(
                        t,
                        "SUCCESS without LAST_PDU (check: SUCCESS without LAST_PDU)".into(),
                    );
                    return None;
                }
                Action::Data {
                    cid: d.cccid,
                    datao: d.datao as usize,
                    datal: d.datal as usize,
                    pdu_flags: ch.flags,
                }
            }
        };
        self.rx_head += need;
        match action {
            Action::Complete {
                cid,
                status,
                dw0,
                dw1,
            } => {
                if !self.slot_busy(cid) {
                    self.malformed(
                        t,
                        format!("command id {cid:#x} is not outstanding (check: CCCID)"),
                    );
                    return None;
                }
                if self.slots[usize::from(cid)].sync {
                    self.sync_dw0 = dw0;
                    self.sync_dw1 = dw1;
                }
                let s = &self.slots[usize::from(cid)];
                if status.is_success() {
                    let sends = s.to_device && s.buffer.is_some();
                    if let Err(what) = r2t::check_success(sends, s.len, s.received, &s.r2t) {
                        self.malformed(t, what);
                        return None;
                    }
                }
                let result = if status.is_success() {
                    Ok(dw0)
                } else {
                    Err(Error::Command {
                        command: command_name(self.slots[usize::from(cid)].opcode),
                        status,
                    })
                };
                self.finish(cid, result);
            }
            Action::R2t(r2t) => self.answer_r2t(r2t)?,
            Action::Data {
                cid,
                datao,
                datal,
                pdu_flags,
            } => {
                if !self.slot_busy(cid) {
                    self.malformed(
                        t,
                        format!("command id {cid:#x} is not outstanding (check: CCCID)"),
                    );
                    return None;
                }
                let s = &self.slots[usize::from(cid)];
                if s.to_device || s.buffer.is_none() {
                    self.malformed(
                        t,
                        format!("command id {cid:#x} reads no data (check: C2HData for a write)"),
                    );
                    return None;
                }
                if datao + datal > s.len {
                    let what = format!(
                        "data at {datao}..{} for a {}-byte transfer (check: data past the \
                         transfer)",
                        datao + datal,
                        s.len,
                    );
                    self.malformed(t, what);
                    return None;
                }
                if datao != s.received {
                    let what = format!(
                        "DATAO {datao} after {} bytes received (data arrive in order) \
                         (check: DATAO)",
                        s.received
                    );
                    self.malformed(t, what);
                    return None;
                }
                self.rx_state = Rx::Data {
                    cid,
                    pos: datao,
                    remaining: datal,
                    datal,
                    pdu_flags,
                    crc: 0,
                };
            }
        }
        Some(true)
    }

    fn slot_busy(&self, cid: u16) -> bool {
        self.slots.get(usize::from(cid)).is_some_and(|s| s.busy)
    }

    /// Queues the H2CData PDUs an R2T asks for (at most MAXH2CDATA bytes each).
    fn answer_r2t(&mut self, r2t: R2T) -> Option<()> {
        let t = pdu_type::R2T;
        let cid = r2t.cccid;
        if !self.slot_busy(cid) {
            self.malformed(
                t,
                format!("command id {cid:#x} is not outstanding (check: CCCID)"),
            );
            return None;
        }
        let (offset, len) = (r2t.r2to as usize, r2t.r2tl as usize);
        let s = &self.slots[usize::from(cid)];
        let target = R2tTarget {
            cid,
            sends: s.to_device && s.buffer.is_some(),
            len: s.len,
            sent: self.tx_sent,
        };
        if let Err(what) = r2t::check(&s.r2t, &target, offset, len) {
            self.malformed(t, what);
            return None;
        }
        self.stats.r2ts += 1;
        let hd = if self.neg.hdgst { DIGEST_SIZE } else { 0 };
        let dd = if self.neg.ddgst { DIGEST_SIZE } else { 0 };
        let hlen = H2CData::SIZE;
        let pdo = align_up(hlen + hd, self.neg.cpda_align);
        let mut done = 0;
        while done < len {
            let chunk = (len - done).min(self.neg.maxh2cdata);
            let last = done + chunk == len;
            let pdu = H2CData {
                ch: CommonHeader {
                    pdu_type: pdu_type::H2C_DATA,
                    flags: if self.neg.hdgst { flags::HDGSTF } else { 0 }
                        | if self.neg.ddgst { flags::DDGSTF } else { 0 }
                        | if last { flags::LAST_PDU } else { 0 },
                    hlen: hlen as u8,
                    pdo: pdo as u8,
                    plen: (pdo + chunk + dd) as u32,
                },
                cccid: cid,
                ttag: r2t.ttag,
                datao: (offset + done) as u32,
                datal: chunk as u32,
                rsvd: 0,
            };
            let start = self.tx.len();
            self.tx.extend_from_slice(&pdu.to_bytes());
            if self.neg.hdgst {
                let d = crc32c(&self.tx[start..start + hlen]);
                self.tx.extend_from_slice(&d.to_le_bytes());
            }
            self.tx.resize(start + pdo, 0);
            let buf = self.slots[usize::from(cid)]
                .buffer
                .as_ref()
                .expect("checked");
            let data = &buf[offset + done..offset + done + chunk];
            self.tx.extend_from_slice(data);
            if self.neg.ddgst {
                self.tx.extend_from_slice(&crc32c(data).to_le_bytes());
            }
            done += chunk;
        }
        let answer_end = self.tx_sent + (self.tx.len() - self.tx_head) as u64;
        let s = &mut self.slots[usize::from(cid)].r2t;
        s.asked_end = offset + len;
        s.asked += len;
        s.answer_end = answer_end;
        self.flush_tx();
        Some(())
    }
}
