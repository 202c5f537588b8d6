//! Opening a connection: TCP connect, then the ICReq/ICResp exchange (NVMe/TCP §3.6.2.2)
//! that agrees on digests, data alignment and the largest H2CData payload.
//!
//! INVARIANT: the socket is blocking (with `timeout`) only during the handshake and is
//! non-blocking when it is handed back; ICResp is checked field by field (PDU type and
//! lengths, version, CPDA, MAXH2CDATA, no digest that was not asked for) before it is used.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use nvme_spec::tcp::{
    self, dgst, pdu_type, CommonHeader, Digests, IcReq, IcResp, PduFrame, TermReq,
};

use super::Negotiated;
use crate::error::TcpError;

/// Connects, sends ICReq and checks ICResp (blocking, with `timeout`), then switches the socket
/// to non-blocking mode.
pub(crate) fn handshake(
    addr: SocketAddr,
    qid: u16,
    want_hdgst: bool,
    want_ddgst: bool,
    timeout: Duration,
) -> Result<(TcpStream, Negotiated), TcpError> {
    let stream = TcpStream::connect_timeout(&addr, timeout)
        .map_err(|source| TcpError::Connect { addr, source })?;
    let io = |source| TcpError::Io { addr, qid, source };
    stream.set_nodelay(true).map_err(io)?;
    stream.set_read_timeout(Some(timeout)).map_err(io)?;
    stream.set_write_timeout(Some(timeout)).map_err(io)?;
    // ICReq and ICResp go before digests are on (NVMe/TCP §3.6.2.2).
    let ic = PduFrame::new(IcReq::SIZE, None, Digests::default(), 1);
    let req = IcReq {
        ch: ic.header(pdu_type::IC_REQ, 0),
        pfv: tcp::PFV_1_0,
        hpda: 0,
        dgst: if want_hdgst { dgst::HEADER } else { 0 } | if want_ddgst { dgst::DATA } else { 0 },
        maxr2t: crate::r2t::MAXR2T,
        rsvd: [0; 112],
    };
    (&stream).write_all(&req.to_bytes()).map_err(io)?;
    let mut raw = [0u8; IcResp::SIZE];
    (&stream)
        .read_exact(&mut raw)
        .map_err(|source| match source.kind() {
            ErrorKind::WouldBlock | ErrorKind::TimedOut => TcpError::Timeout {
                addr,
                qid,
                what: "waiting for ICResp",
                timeout,
            },
            ErrorKind::UnexpectedEof | ErrorKind::ConnectionReset => TcpError::Closed { addr, qid },
            _ => TcpError::Io { addr, qid, source },
        })?;
    let handshake_err = |what: String| TcpError::Handshake { addr, qid, what };
    let ch = CommonHeader::from_bytes(raw[..CommonHeader::SIZE].try_into().expect("8 bytes"));
    if ch.pdu_type == pdu_type::C2H_TERM_REQ {
        let t = TermReq::from_bytes(raw[..TermReq::SIZE].try_into().expect("24 bytes"));
        return Err(TcpError::Terminated {
            addr,
            qid,
            fes: t.fes,
            fei: t.fei(),
            name: tcp::fes::name(t.fes),
        });
    }
    if ch.pdu_type != pdu_type::IC_RESP
        || ch.hlen != tcp::IC_HLEN
        || ch.plen != u32::from(tcp::IC_HLEN)
    {
        return Err(handshake_err(format!(
            "a {} PDU (type {:#x}, hlen {}, plen {}) instead of ICResp",
            pdu_type::name(ch.pdu_type),
            ch.pdu_type,
            ch.hlen,
            ch.plen
        )));
    }
    let resp = IcResp::from_bytes(&raw);
    if resp.pfv != tcp::PFV_1_0 {
        return Err(handshake_err(format!(
            "PDU format version {} (this host speaks version 1.0)",
            resp.pfv
        )));
    }
    if resp.cpda > tcp::PDA_MAX {
        return Err(handshake_err(format!(
            "CPDA {} (at most {})",
            resp.cpda,
            tcp::PDA_MAX
        )));
    }
    if resp.maxh2cdata < tcp::MIN_MAXH2CDATA {
        return Err(handshake_err(format!(
            "MAXH2CDATA {} (at least {})",
            resp.maxh2cdata,
            tcp::MIN_MAXH2CDATA
        )));
    }
    let hdgst = resp.dgst & dgst::HEADER != 0;
    let ddgst = resp.dgst & dgst::DATA != 0;
    if (hdgst && !want_hdgst) || (ddgst && !want_ddgst) {
        return Err(handshake_err(format!(
            "digests {:#x} enabled that were not asked for",
            resp.dgst
        )));
    }
    if hdgst != want_hdgst || ddgst != want_ddgst {
        log::info!(
            "{addr} queue {qid}: target enabled header digest {hdgst}, data digest {ddgst} \
             (asked {want_hdgst}, {want_ddgst})"
        );
    }
    stream.set_nonblocking(true).map_err(io)?;
    Ok((
        stream,
        Negotiated {
            hdgst,
            ddgst,
            cpda_align: (usize::from(resp.cpda) + 1) * tcp::PDA_UNIT,
            maxh2cdata: resp.maxh2cdata as usize,
        },
    ))
}
