//! The receive side of a queue: PDU parsing and every check on what the target sends
//! (`docs/nvme-tcp.md`, "A hostile target"), C2HData payload copied into the caller's
//! buffer, R2Ts answered with H2CData. A child of `queue` so that it reaches the queue's
//! state directly; the per-command R2T rules themselves are in `crate::r2t`.

use nvme_core::Error;
use nvme_spec::tcp::{
    self, flags, pdu_type, C2HData, CapsuleResp, CommonHeader, H2CData, PduError, PduFrame,
    TermReq, DIGEST_SIZE, R2T,
};
use nvme_spec::Status;

use super::{command_name, Queue, Rx, Tag, Waiter, MAX_PLEN};
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
                    tag,
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
                        tcp::crc32c_append(crc, src)
                    } else {
                        crc
                    };
                    self.tags.get_mut(tag).write_data(pos, src);
                    self.rx_head += n;
                    self.rx_state = if n < remaining {
                        Rx::Data {
                            tag,
                            pos: pos + n,
                            remaining: remaining - n,
                            datal,
                            pdu_flags,
                            crc,
                        }
                    } else if self.neg.ddgst {
                        Rx::DataDigest {
                            tag,
                            datal,
                            pdu_flags,
                            crc,
                        }
                    } else {
                        self.data_done(tag, datal, pdu_flags);
                        Rx::Header
                    };
                }
                Rx::DataDigest {
                    tag,
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
                    self.data_done(tag, datal, pdu_flags);
                }
            }
        }
    }

    /// The payload of a C2HData PDU has arrived (and its digest matched).
    fn data_done(&mut self, tag: Tag, datal: usize, pdu_flags: u8) {
        let slot = self.tags.get_mut(tag);
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
            self.finish(tag, Ok(0));
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
        // The checks in this order: type, direction, HLEN, then (not for a termination
        // request) HDGSTF, PLEN and PDO; the rules shared with the target are the codec's.
        if tcp::expected_hlen(t).is_some()
            && !matches!(
                t,
                pdu_type::CAPSULE_RESP
                    | pdu_type::C2H_DATA
                    | pdu_type::R2T
                    | pdu_type::C2H_TERM_REQ
            )
        {
            self.malformed(
                t,
                "a controller must not send this PDU type after ICResp (check: PDU type)".into(),
            );
            return None;
        }
        let hlen = match tcp::check_hlen(&ch) {
            Ok(hlen) => hlen,
            Err(e) => {
                self.malformed(t, e.to_string());
                return None;
            }
        };
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
        // The host does not check the target's alignment of C2HData (HPDA 0 asks for 4).
        let layout = match tcp::check_layout(&ch, hlen, self.neg.digests(), MAX_PLEN, 1) {
            Ok(layout) => layout,
            Err(e) => {
                self.malformed(t, e.to_string());
                return None;
            }
        };
        // Bytes of this PDU that must be in the buffer before it is handled: everything for
        // PDUs without data, the header (and digest and padding) for C2HData.
        let need = layout.header_end;
        if avail < need {
            if self.rx.len() - self.rx_head < need {
                // Make room for the whole header.
                self.rx.copy_within(self.rx_head..self.rx_tail, 0);
                self.rx_tail -= self.rx_head;
                self.rx_head = 0;
            }
            return Some(false);
        }
        if let Some(at) = layout.header_digest() {
            let received = self.rx[h + at.start..h + at.end].try_into().expect("sized");
            if let Err(PduError::Digest {
                computed, received, ..
            }) = tcp::check_digest("header", &self.rx[h..h + hlen], received)
            {
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
                if let Err(e) = tcp::check_data_length(&ch, self.neg.digests(), Some(d.datal)) {
                    self.malformed(t, e.to_string());
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
                let tag = self.outstanding(t, cid)?;
                let s = self.tags.get(tag);
                if s.waiter == Waiter::Sync {
                    self.sync_dw0 = dw0;
                    self.sync_dw1 = dw1;
                }
                if status.is_success() {
                    let sends = s.to_device && s.has_data();
                    if let Err(what) = r2t::check_success(sends, s.len, s.received, &s.r2t) {
                        self.malformed(t, what);
                        return None;
                    }
                }
                let result = if status.is_success() {
                    Ok(dw0)
                } else {
                    Err(Error::command(command_name(s.opcode), status))
                };
                self.finish(tag, result);
            }
            Action::R2t(r2t) => self.answer_r2t(r2t)?,
            Action::Data {
                cid,
                datao,
                datal,
                pdu_flags,
            } => {
                let tag = self.outstanding(t, cid)?;
                let s = self.tags.get(tag);
                if s.to_device || !s.has_data() {
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
                    tag,
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

    /// The tag of command id `cid` from the target, checked by the tag set (index in range,
    /// slot in use, generation current); a CCCID that matches no request in flight (never
    /// issued, completed already, or of an earlier use of the slot) fails the queue.
    fn outstanding(&mut self, pdu: u8, cid: u16) -> Option<Tag> {
        let tag = self.tags.lookup(cid);
        if tag.is_none() {
            self.malformed(
                pdu,
                format!("command id {cid:#x} is not outstanding (check: CCCID)"),
            );
        }
        tag
    }

    /// Queues the H2CData PDUs an R2T asks for (at most MAXH2CDATA bytes each).
    fn answer_r2t(&mut self, r2t: R2T) -> Option<()> {
        let t = pdu_type::R2T;
        let cid = r2t.cccid;
        let tag = self.outstanding(t, cid)?;
        let (offset, len) = (r2t.r2to as usize, r2t.r2tl as usize);
        let s = self.tags.get(tag);
        let target = R2tTarget {
            cid,
            sends: s.to_device && s.has_data(),
            len: s.len,
            sent: self.tx_sent,
        };
        if let Err(what) = r2t::check(&s.r2t, &target, offset, len) {
            self.malformed(t, what);
            return None;
        }
        self.stats.r2ts += 1;
        let mut done = 0;
        while done < len {
            // A vectored request's PDU ends at the end of its piece (data PDUs may carry any
            // part of the R2T's range; NVMe/TCP §3.6.2.8 H2CData).
            let data = self
                .tags
                .get(tag)
                .data_at(offset + done, (len - done).min(self.neg.maxh2cdata));
            let chunk = data.len();
            let last = done + chunk == len;
            let frame = PduFrame::new(
                H2CData::SIZE,
                Some(chunk),
                self.neg.digests(),
                self.neg.cpda_align,
            );
            let pdu = H2CData {
                ch: frame.header(pdu_type::H2C_DATA, if last { flags::LAST_PDU } else { 0 }),
                cccid: cid,
                ttag: r2t.ttag,
                datao: (offset + done) as u32,
                datal: chunk as u32,
                rsvd: 0,
            };
            frame.encode(&mut self.tx, &pdu.to_bytes(), Some(data));
            done += chunk;
        }
        let answer_end = self.tx_sent + (self.tx.len() - self.tx_head) as u64;
        let s = &mut self.tags.get_mut(tag).r2t;
        s.asked_end = offset + len;
        s.asked += len;
        s.answer_end = answer_end;
        self.flush_tx();
        Some(())
    }
}
