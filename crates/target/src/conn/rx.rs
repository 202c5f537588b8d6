//! The receive side of a connection: a state machine over the non-blocking socket that
//! frames PDUs with the codec of `nvme_spec::tcp` (HLEN, PLEN, PDO and its alignment to CPDA,
//! digest flags, DATAL, then the header and data digests) and lands PDU data straight in the
//! buffer the connection names for it (a command slot's DMA buffer), so write data is not
//! copied again on its way to the backend.
//!
//! INVARIANT: a header is checked before its data is read; data is written only into the
//! destination the connection gave for this PDU, within its length; nothing here panics on
//! host input (every error ends the connection).

use std::io::{ErrorKind, Read};

use nvme_spec::tcp::{self, CommonHeader, Digests, IcReq, PduError, DIGEST_SIZE, IC_HLEN};

use super::Slot;

/// Bytes of the staging buffer the socket is read into (headers, and small data).
const STAGING: usize = 16 << 10;
/// Header area: a PDU header, its digest and padding up to PDO (PDO is one byte).
const HDR_MAX: usize = 256;
/// Data still to come of at least this many bytes, with the staging buffer empty, is read
/// from the socket straight into its destination.
const DIRECT_MIN: usize = 4096;

/// Where the data of the current PDU goes: `len` bytes at `offset` in slot `slot`'s buffer.
#[derive(Clone, Copy, Debug)]
pub(super) struct DataDst {
    pub slot: u16,
    pub offset: usize,
    pub len: usize,
}

/// What a receive pass produced.
#[derive(Debug)]
pub(super) enum Event {
    /// The ICReq (its fields are the caller's to check).
    IcReq(IcReq),
    /// A checked PDU header ([`Rx::header`]); `data_len` bytes of data follow, for which the
    /// caller must call [`Rx::expect_data`] (0: no data).
    Header { ch: CommonHeader, data_len: usize },
    /// The data of the current PDU is in its destination (digest checked).
    Data,
}

/// Why receiving stopped for good.
#[derive(Debug, thiserror::Error)]
pub(super) enum RxError {
    /// The host closed the connection.
    #[error("connection closed by the host")]
    Closed,
    /// A socket error.
    #[error("socket: {0}")]
    Io(#[from] std::io::Error),
    /// A PDU broke a rule of the codec's checks.
    #[error("host PDU: {0}")]
    Pdu(#[from] PduError),
    /// Data for a destination that is not there (a target bug, reported instead of a panic).
    #[error("no buffer for PDU data")]
    NoBuffer,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    IcReq,
    Header,
    /// Header delivered, waiting for [`Rx::expect_data`].
    AwaitDst,
    Data,
    DataDigest,
}

/// Receive state of one connection.
pub(super) struct Rx {
    stage: Stage,
    staging: Box<[u8]>,
    start: usize,
    end: usize,
    hdr: [u8; HDR_MAX],
    hgot: usize,
    hneed: usize,
    hlen: usize,
    laid_out: bool,
    ch: CommonHeader,
    dst: DataDst,
    dgot: usize,
    digest: [u8; DIGEST_SIZE],
    digest_got: usize,
    /// Digests negotiated in ICReq/ICResp.
    pub digests: Digests,
    /// PDU data alignment the target asked for (CPDA), bytes.
    pub align: usize,
    /// Largest PLEN accepted.
    pub max_plen: u32,
    /// The last staging read was short (the socket had no more then): the next
    /// [`Rx::fill`] reports "nothing now" without a read, saving the read that would only
    /// say EAGAIN (a poll pass ends there; the next pass or the group's poll(2) sees any
    /// later bytes).
    drained: bool,
}

impl Rx {
    /// A connection's receive state before ICReq.
    pub fn new(align: usize, max_plen: u32) -> Self {
        Self {
            stage: Stage::IcReq,
            staging: vec![0; STAGING].into_boxed_slice(),
            start: 0,
            end: 0,
            hdr: [0; HDR_MAX],
            hgot: 0,
            hneed: usize::from(IC_HLEN),
            hlen: 0,
            laid_out: false,
            ch: CommonHeader::default(),
            dst: DataDst {
                slot: 0,
                offset: 0,
                len: 0,
            },
            dgot: 0,
            digest: [0; DIGEST_SIZE],
            digest_got: 0,
            digests: Digests::default(),
            align,
            max_plen,
            drained: false,
        }
    }

    /// Starts a receive pass: the first staging read happens whatever the last pass saw.
    pub fn new_pass(&mut self) {
        self.drained = false;
    }

    /// The current PDU's header bytes (common header included, digest excluded).
    pub fn header(&self) -> &[u8] {
        &self.hdr[..self.hlen]
    }

    /// Names the destination of the current PDU's data (after [`Event::Header`] with data).
    pub fn expect_data(&mut self, dst: DataDst) {
        debug_assert_eq!(self.stage, Stage::AwaitDst);
        self.dst = dst;
        self.dgot = 0;
        self.digest_got = 0;
        self.stage = Stage::Data;
    }

    fn next_header(&mut self) {
        self.stage = Stage::Header;
        self.hgot = 0;
        self.hneed = CommonHeader::SIZE;
        self.laid_out = false;
    }

    /// Moves staged bytes into `dst`; how many.
    fn take(staging: &[u8], start: &mut usize, end: usize, dst: &mut [u8]) -> usize {
        let n = dst.len().min(end - *start);
        dst[..n].copy_from_slice(&staging[*start..*start + n]);
        *start += n;
        n
    }

    /// Reads what the socket has into the staging buffer: false when it has nothing now.
    fn fill<S: Read>(&mut self, s: &mut S) -> Result<bool, RxError> {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        } else if self.end == self.staging.len() {
            self.staging.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if std::mem::take(&mut self.drained) {
            return Ok(false);
        }
        let space = self.staging.len() - self.end;
        read_some(s, &mut self.staging[self.end..]).map(|n| {
            self.end += n;
            self.drained = n != 0 && n < space;
            n != 0
        })
    }

    /// Reads header bytes up to `hneed`: true when they are all there.
    fn header_bytes<S: Read>(&mut self, s: &mut S) -> Result<bool, RxError> {
        loop {
            let (need, got) = (self.hneed, self.hgot);
            self.hgot += Self::take(
                &self.staging,
                &mut self.start,
                self.end,
                &mut self.hdr[got..need],
            );
            if self.hgot == self.hneed {
                return Ok(true);
            }
            if !self.fill(s)? {
                return Ok(false);
            }
        }
    }

    /// Makes progress; `None` when the socket has nothing more now.
    pub fn pump<S: Read>(
        &mut self,
        s: &mut S,
        slots: &mut [Slot],
    ) -> Result<Option<Event>, RxError> {
        loop {
            match self.stage {
                Stage::IcReq => {
                    if !self.header_bytes(s)? {
                        return Ok(None);
                    }
                    let raw: [u8; IcReq::SIZE] =
                        self.hdr[..IcReq::SIZE].try_into().expect("128 bytes");
                    self.next_header();
                    return Ok(Some(Event::IcReq(IcReq::from_bytes(&raw))));
                }
                Stage::Header => {
                    if !self.header_bytes(s)? {
                        return Ok(None);
                    }
                    if !self.laid_out {
                        let raw: [u8; CommonHeader::SIZE] =
                            self.hdr[..CommonHeader::SIZE].try_into().expect("8 bytes");
                        self.ch = CommonHeader::from_bytes(&raw);
                        self.hlen = tcp::check_hlen(&self.ch)?;
                        let layout = tcp::check_layout(
                            &self.ch,
                            self.hlen,
                            self.digests,
                            self.max_plen,
                            self.align,
                        )?;
                        self.laid_out = true;
                        self.hneed = layout.header_end;
                        if self.hneed > HDR_MAX {
                            return Err(PduError::PlenTooLarge { plen: self.ch.plen }.into());
                        }
                        continue;
                    }
                    if self.digests.header {
                        let at = self.hlen;
                        let got = self.hdr[at..at + DIGEST_SIZE].try_into().expect("4 bytes");
                        tcp::check_digest("header", &self.hdr[..self.hlen], got)?;
                    }
                    let ch = self.ch;
                    if !tcp::has_data(&ch) {
                        self.next_header();
                        return Ok(Some(Event::Header { ch, data_len: 0 }));
                    }
                    let datal = (ch.pdu_type == tcp::pdu_type::H2C_DATA).then(|| {
                        let raw = self.hdr[..tcp::H2CData::SIZE].try_into().expect("24 bytes");
                        tcp::H2CData::from_bytes(&raw).datal
                    });
                    let range = tcp::check_data_length(&ch, self.digests, datal)?;
                    self.stage = Stage::AwaitDst;
                    return Ok(Some(Event::Header {
                        ch,
                        data_len: range.len(),
                    }));
                }
                Stage::AwaitDst => return Ok(None),
                Stage::Data => {
                    let d = self.dst;
                    let Some(buf) = slots
                        .get_mut(usize::from(d.slot))
                        .and_then(|s| s.buf.as_mut())
                        .and_then(|b| b.get_mut(d.offset..d.offset + d.len))
                    else {
                        return Err(RxError::NoBuffer);
                    };
                    while self.dgot < d.len {
                        self.dgot += Self::take(
                            &self.staging,
                            &mut self.start,
                            self.end,
                            &mut buf[self.dgot..],
                        );
                        if self.dgot == d.len {
                            break;
                        }
                        if d.len - self.dgot >= DIRECT_MIN {
                            let n = read_some(s, &mut buf[self.dgot..])?;
                            if n == 0 {
                                return Ok(None);
                            }
                            self.dgot += n;
                        } else if !self.fill(s)? {
                            return Ok(None);
                        }
                    }
                    if !self.digests.data {
                        self.next_header();
                        return Ok(Some(Event::Data));
                    }
                    self.stage = Stage::DataDigest;
                }
                Stage::DataDigest => {
                    loop {
                        let got = self.digest_got;
                        self.digest_got += Self::take(
                            &self.staging,
                            &mut self.start,
                            self.end,
                            &mut self.digest[got..],
                        );
                        if self.digest_got == DIGEST_SIZE {
                            break;
                        }
                        if !self.fill(s)? {
                            return Ok(None);
                        }
                    }
                    let d = self.dst;
                    let Some(data) = slots
                        .get(usize::from(d.slot))
                        .and_then(|s| s.buf.as_ref())
                        .and_then(|b| b.get(d.offset..d.offset + d.len))
                    else {
                        return Err(RxError::NoBuffer);
                    };
                    tcp::check_digest("data", data, self.digest)?;
                    self.next_header();
                    return Ok(Some(Event::Data));
                }
            }
        }
    }
}

/// One non-blocking read: the bytes read, 0 when the socket has none now; the host closing
/// the connection is [`RxError::Closed`].
fn read_some<S: Read>(s: &mut S, buf: &mut [u8]) -> Result<usize, RxError> {
    loop {
        return match s.read(buf) {
            Ok(0) if !buf.is_empty() => Err(RxError::Closed),
            Ok(n) => Ok(n),
            Err(e) if e.kind() == ErrorKind::WouldBlock => Ok(0),
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => Err(RxError::Io(e)),
        };
    }
}

#[cfg(test)]
mod tests {
    use std::io::{ErrorKind, Read};
    use std::sync::Arc;

    use nvme_core::{DmaBuffer, DmaMapper, HostMemory};
    use nvme_spec::tcp::{self, pdu_type, CommonHeader, Digests};
    use nvme_spec::SubmissionEntry;

    use super::super::Slot;
    use super::{DataDst, Event, Rx, RxError};

    /// A socket that hands out `step` bytes per read, with a WouldBlock between reads.
    struct Trickle {
        data: Vec<u8>,
        at: usize,
        step: usize,
        block: bool,
    }

    impl Read for Trickle {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            self.block = !self.block;
            if self.block {
                return Err(ErrorKind::WouldBlock.into());
            }
            if self.at == self.data.len() {
                return Ok(0);
            }
            let n = self.step.min(buf.len()).min(self.data.len() - self.at);
            buf[..n].copy_from_slice(&self.data[self.at..self.at + n]);
            self.at += n;
            Ok(n)
        }
    }

    fn capsule(len: usize, digests: Digests) -> (Vec<u8>, Vec<u8>) {
        let data: Vec<u8> = (0..len).map(|i| (i * 13 + 1) as u8).collect();
        let mut sqe = SubmissionEntry::new(nvme_spec::opcode::nvm::WRITE);
        sqe.set_sgl(tcp::sgl::IN_CAPSULE_DATA, 0, len as u32);
        let mut h = tcp::CapsuleCmd {
            ch: CommonHeader {
                pdu_type: pdu_type::CAPSULE_CMD,
                ..Default::default()
            },
            sqe,
        }
        .to_bytes();
        let mut out = Vec::new();
        tcp::frame_pdu(&mut out, &mut h, Some(&data), digests, 4);
        (out, data)
    }

    fn slots(len: usize) -> Vec<Slot> {
        let mapper: Arc<dyn DmaMapper> = Arc::new(HostMemory::new());
        let mut s = Slot::free();
        s.buf = Some(DmaBuffer::allocate(&mapper, len).unwrap());
        vec![s]
    }

    /// Runs the receive side over `stream` until it has a header, gives the data slot 0,
    /// and runs it until the data is in; the PDUs seen.
    fn receive_all(
        rx: &mut Rx,
        stream: &mut Trickle,
        slots: &mut [Slot],
    ) -> Result<usize, RxError> {
        let mut pdus = 0;
        for _ in 0..1_000_000 {
            match rx.pump(stream, slots) {
                Ok(Some(Event::Header { data_len, .. })) if data_len > 0 => {
                    rx.expect_data(DataDst {
                        slot: 0,
                        offset: 0,
                        len: data_len,
                    })
                }
                Ok(Some(_)) => pdus += 1,
                Ok(None) => {}
                Err(RxError::Closed) => return Ok(pdus),
                Err(e) => return Err(e),
            }
        }
        panic!("no end");
    }

    /// A socket holding `data`, counting reads (WouldBlock once empty).
    struct Counted {
        data: Vec<u8>,
        at: usize,
        reads: usize,
    }

    impl Read for Counted {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            self.reads += 1;
            if self.at == self.data.len() {
                return Err(ErrorKind::WouldBlock.into());
            }
            let n = buf.len().min(self.data.len() - self.at);
            buf[..n].copy_from_slice(&self.data[self.at..self.at + n]);
            self.at += n;
            Ok(n)
        }
    }

    #[test]
    fn a_short_read_ends_the_pass_without_a_read_that_would_block() {
        // A Read capsule (no data), twice.
        let mut h = tcp::CapsuleCmd {
            ch: CommonHeader {
                pdu_type: pdu_type::CAPSULE_CMD,
                ..Default::default()
            },
            sqe: SubmissionEntry::new(nvme_spec::opcode::nvm::READ),
        }
        .to_bytes();
        let mut bytes = Vec::new();
        tcp::frame_pdu(&mut bytes, &mut h, None, Digests::default(), 4);
        let one = bytes.len();
        bytes.extend_from_within(..);
        let mut s = Counted {
            data: bytes[..one].to_vec(),
            at: 0,
            reads: 0,
        };
        let mut rx = Rx::new(4, 1 << 20);
        rx.stage = super::Stage::Header;
        rx.hneed = CommonHeader::SIZE;
        let mut sl = slots(16);
        rx.new_pass();
        let first = rx.pump(&mut s, &mut sl);
        assert!(
            matches!(first, Ok(Some(Event::Header { data_len: 0, .. }))),
            "{first:?}"
        );
        assert!(rx.pump(&mut s, &mut sl).unwrap().is_none());
        assert_eq!(s.reads, 1, "the short read said the socket was empty");
        // More bytes later: the next pass reads them.
        s.data.extend_from_slice(&bytes[one..]);
        rx.new_pass();
        assert!(matches!(
            rx.pump(&mut s, &mut sl),
            Ok(Some(Event::Header { data_len: 0, .. }))
        ));
        assert_eq!(s.reads, 2);
        // A pass that finds nothing reads once (EAGAIN), and so does every later pass.
        rx.new_pass();
        assert!(rx.pump(&mut s, &mut sl).unwrap().is_none());
        rx.new_pass();
        assert!(rx.pump(&mut s, &mut sl).unwrap().is_none());
        assert_eq!(s.reads, 4);
    }

    #[test]
    fn pdus_arrive_whole_whatever_the_read_sizes() {
        for digests in [
            Digests::default(),
            Digests {
                header: true,
                data: true,
            },
        ] {
            for step in [1, 3, 7, 100, 5000] {
                let (mut bytes, data) = capsule(6000, digests);
                let (second, _) = capsule(6000, digests);
                bytes.extend_from_slice(&second);
                let mut rx = Rx::new(4, 1 << 20);
                rx.next_header();
                rx.digests = digests;
                let mut slots = slots(6000);
                let mut s = Trickle {
                    data: bytes,
                    at: 0,
                    step,
                    block: false,
                };
                assert_eq!(
                    receive_all(&mut rx, &mut s, &mut slots).unwrap(),
                    2,
                    "step {step}"
                );
                assert!(slots[0].buf.as_ref().unwrap()[..6000] == data[..]);
            }
        }
    }

    #[test]
    fn a_flipped_data_digest_is_an_error() {
        let digests = Digests {
            header: true,
            data: true,
        };
        let (mut bytes, _) = capsule(100, digests);
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        let mut rx = Rx::new(4, 1 << 20);
        rx.next_header();
        rx.digests = digests;
        let mut slots = slots(100);
        let mut s = Trickle {
            data: bytes,
            at: 0,
            step: 9,
            block: false,
        };
        assert!(matches!(
            receive_all(&mut rx, &mut s, &mut slots),
            Err(RxError::Pdu(tcp::PduError::Digest { kind: "data", .. }))
        ));
    }
}
