//! Protocol violations of the fake target, one per receive-side check of the host
//! (`Fault::Hostile`). Each answers one Read or Write with PDUs that break exactly one rule
//! of NVMe/TCP 1.0 and otherwise look right, so a test can tell that the host names that
//! rule.

use nvme_spec::tcp::{flags, pdu_type, C2HData, CommonHeader, R2T};
use nvme_spec::{opcode, Status, SubmissionEntry};

use super::{capsule_resp, Conn, Res};

/// One protocol violation (the host's check it trips, in its message: "check: ...").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hostile {
    /// Read: a C2HData PDU whose HLEN is not 24 ("HLEN").
    C2hHlen,
    /// Read: CapsuleResp whose PLEN is 4 bytes too long ("PLEN").
    RespPlen,
    /// Read: a C2HData PDU whose PLEN is far beyond any transfer ("PLEN").
    HugePlen,
    /// Read: C2HData whose PDO points into its header ("PDO").
    PdoOverlap,
    /// Read: C2HData whose DATAL disagrees with PLEN and PDO ("DATAL").
    DatalMismatch,
    /// Read: C2HData that starts at DATAO 8 before any data came ("DATAO").
    DataoGap,
    /// Read: C2HData for a command id that is not outstanding ("CCCID").
    UnknownCccid,
    /// Read: twice the read's length of C2HData in one PDU ("data past the transfer").
    DataPastEnd,
    /// Read: C2HData with SUCCESS but without LAST_PDU ("SUCCESS without LAST_PDU").
    SuccessWithoutLast,
    /// Read: half the data in a C2HData with LAST_PDU | SUCCESS ("SUCCESS before the end").
    SuccessEarly,
    /// Read: a successful CapsuleResp and no data at all ("short read").
    RespWithoutData,
    /// Read: half the data, then a successful CapsuleResp ("short read").
    RespAfterHalf,
    /// Read: an R2T for the read ("R2T for a read").
    R2tForRead,
    /// Read: a PDU of unknown type 0x0F ("PDU type").
    UnknownType,
    /// Read: an H2CData PDU, which only a host sends ("PDU type").
    HostPduType,
    /// Write: an R2T for bytes past the end of the write ("R2T past the end").
    R2tPastEnd,
    /// Write: 3,000 R2Ts for the whole write at once, the socket then left unread
    /// ("R2T for data already sent").
    R2tFlood,
    /// Write: an R2T for the first half, its data read, then the same R2T again
    /// ("R2T for data already sent" is not it: "R2T overlap").
    R2tOverlap,
    /// Write: a successful CapsuleResp with no R2T before it ("short write").
    RespWithoutR2t,
    /// In-capsule write: an R2T for data that went with the capsule
    /// ("R2T for data already sent").
    R2tForInCapsule,
}

/// Builds a C2HData PDU header (24 bytes; `frame` fills HLEN, PDO and PLEN).
pub(super) fn c2h(cid: u16, f: u8, datao: u32, datal: u32) -> Vec<u8> {
    let h = C2HData {
        ch: CommonHeader {
            pdu_type: pdu_type::C2H_DATA,
            flags: f,
            ..Default::default()
        },
        cccid: cid,
        rsvd1: 0,
        datao,
        datal,
        rsvd2: 0,
    };
    h.to_bytes().to_vec()
}

/// Builds an R2T PDU header (24 bytes; `frame` fills HLEN, PDO and PLEN).
pub(super) fn r2t(cid: u16, ttag: u16, offset: u32, len: u32) -> Vec<u8> {
    let h = R2T {
        ch: CommonHeader {
            pdu_type: pdu_type::R2T,
            ..Default::default()
        },
        cccid: cid,
        ttag,
        r2to: offset,
        r2tl: len,
        rsvd: 0,
    };
    h.to_bytes().to_vec()
}

/// Byte offsets in a framed PDU (no digests: the hostile tests run without them).
const HLEN_AT: usize = 2;
const PDO_AT: usize = 3;
const PLEN_AT: usize = 4;

impl Conn<'_> {
    /// Answers command `cid` (opcode `op`, `len` bytes, data in the capsule or not) with the
    /// violation `h`. Returns `false` when `h` does not apply to this command (it is then
    /// served normally).
    pub(super) fn hostile(
        &mut self,
        h: Hostile,
        op: u8,
        cid: u16,
        len: usize,
        in_capsule: bool,
    ) -> Res<bool> {
        let read = op == opcode::nvm::READ;
        let write = op == opcode::nvm::WRITE;
        let half = (len / 2) as u32;
        let data = vec![0x5Au8; len];
        let framed = |c: &Conn, header: Vec<u8>, data: Option<&[u8]>| {
            super::frame(header, data, c.digests, c.c2h_align, false)
        };
        match h {
            Hostile::C2hHlen if read => {
                let mut p = framed(self, c2h(cid, flags::LAST_PDU, 0, len as u32), Some(&data));
                p[HLEN_AT] += 1;
                self.write_all(&p)?;
            }
            Hostile::RespPlen if read => {
                let mut p = framed(
                    self,
                    capsule_resp(self.qid, cid, Status::SUCCESS, 0, 0),
                    None,
                );
                let plen = p.len() as u32 + 4;
                p[PLEN_AT..PLEN_AT + 4].copy_from_slice(&plen.to_le_bytes());
                p.extend_from_slice(&[0; 4]);
                self.write_all(&p)?;
            }
            Hostile::HugePlen if read => {
                let mut p = framed(self, c2h(cid, flags::LAST_PDU, 0, len as u32), Some(&data));
                p[PLEN_AT..PLEN_AT + 4].copy_from_slice(&u32::MAX.to_le_bytes());
                self.write_all(&p)?;
            }
            Hostile::PdoOverlap if read => {
                let mut p = framed(self, c2h(cid, flags::LAST_PDU, 0, len as u32), Some(&data));
                p[PDO_AT] = 16;
                self.write_all(&p)?;
            }
            Hostile::DatalMismatch if read => {
                let p = framed(
                    self,
                    c2h(cid, flags::LAST_PDU, 0, len as u32 + 4),
                    Some(&data),
                );
                self.write_all(&p)?;
            }
            Hostile::DataoGap if read => {
                let header = c2h(cid, flags::LAST_PDU, 8, len as u32 - 8);
                let p = framed(self, header, Some(&data[8..]));
                self.write_all(&p)?;
            }
            Hostile::UnknownCccid if read => {
                let p = framed(
                    self,
                    c2h(0x7777, flags::LAST_PDU, 0, len as u32),
                    Some(&data),
                );
                self.write_all(&p)?;
            }
            Hostile::DataPastEnd if read => {
                let double = vec![0x5Au8; 2 * len];
                let header = c2h(cid, flags::LAST_PDU, 0, double.len() as u32);
                let p = framed(self, header, Some(&double));
                self.write_all(&p)?;
            }
            Hostile::SuccessWithoutLast if read => {
                let p = framed(self, c2h(cid, flags::SUCCESS, 0, len as u32), Some(&data));
                self.write_all(&p)?;
            }
            Hostile::SuccessEarly if read => {
                let header = c2h(cid, flags::LAST_PDU | flags::SUCCESS, 0, half);
                let p = framed(self, header, Some(&data[..half as usize]));
                self.write_all(&p)?;
            }
            Hostile::RespWithoutData if read => self.respond(cid, Status::SUCCESS, 0, 0)?,
            Hostile::RespAfterHalf if read => {
                let p = framed(self, c2h(cid, 0, 0, half), Some(&data[..half as usize]));
                self.write_all(&p)?;
                self.respond(cid, Status::SUCCESS, 0, 0)?;
            }
            Hostile::R2tForRead if read => self.send(r2t(cid, 1, 0, len as u32), None, false)?,
            Hostile::UnknownType if read => {
                let mut p = framed(
                    self,
                    capsule_resp(self.qid, cid, Status::SUCCESS, 0, 0),
                    None,
                );
                p[0] = 0x0F;
                self.write_all(&p)?;
            }
            Hostile::HostPduType if read => {
                let mut p = framed(self, c2h(cid, flags::LAST_PDU, 0, len as u32), Some(&data));
                p[0] = pdu_type::H2C_DATA;
                self.write_all(&p)?;
            }
            Hostile::R2tPastEnd if write && !in_capsule => {
                self.send(r2t(cid, 1, half, len as u32), None, false)?
            }
            Hostile::R2tFlood if write && !in_capsule => {
                let one = framed(self, r2t(cid, 1, 0, len as u32), None);
                let mut all = Vec::with_capacity(one.len() * R2T_FLOOD);
                for _ in 0..R2T_FLOOD {
                    all.extend_from_slice(&one);
                }
                self.write_all(&all)?;
                // Then read nothing more: the host must neither queue a copy of the data
                // per R2T nor wait for this socket to drain.
                return Ok(true);
            }
            Hostile::R2tOverlap if write && !in_capsule => {
                self.send(r2t(cid, 1, 0, half), None, false)?;
                self.read_h2c(half as usize)?;
                self.send(r2t(cid, 2, 0, half), None, false)?;
            }
            Hostile::RespWithoutR2t if write && !in_capsule => {
                self.respond(cid, Status::SUCCESS, 0, 0)?
            }
            Hostile::R2tForInCapsule if write && in_capsule => {
                self.send(r2t(cid, 1, 0, len as u32), None, false)?
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// Reads H2CData PDUs until `len` bytes of data came.
    fn read_h2c(&mut self, len: usize) -> Res<()> {
        let mut got = 0;
        while got < len {
            let (ch, hdr, data) = self.recv()?;
            if ch.pdu_type == pdu_type::CAPSULE_CMD && hdr.len() == SubmissionEntry::SIZE {
                // A pipelined command: served after this one (as `pull` does).
                let sqe = SubmissionEntry::from_bytes(&hdr.try_into().expect("64 bytes"));
                self.pending.push_back((sqe, data));
                continue;
            }
            if ch.pdu_type != pdu_type::H2C_DATA {
                return Err(super::bad("expected H2CData"));
            }
            got += data.len();
        }
        Ok(())
    }
}

/// R2Ts the flood sends for one write (about 70 KiB of PDUs).
pub const R2T_FLOOD: usize = 3000;
