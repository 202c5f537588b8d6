//! The socket: writing the send buffer as far as the socket takes it, reading into the fixed
//! receive buffer (PDUs then handled by `rx.rs`), back-pressure, and the blocking wait for
//! data. The fuzzing pipe replaces the socket's reads and writes here and only here.
//!
//! INVARIANT: an I/O error, end of stream or reset fails the queue (after reading what the
//! target sent, so its C2HTermReq reason wins); `WouldBlock` and `Interrupted` are not errors.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use nvme_spec::tcp::pdu_type;

use super::Queue;
use crate::error::TcpError;
use crate::r2t::{TX_COMPACT, TX_HIGH_WATER};

impl Queue {
    /// Writes queued PDUs as far as the socket takes them.
    pub(crate) fn flush_tx(&mut self) {
        while self.tx_head < self.tx.len() {
            match self.link_write() {
                Ok(n) if n > 0 => {
                    self.tx_head += n;
                    self.tx_sent += n as u64;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    if self.tx_head >= TX_COMPACT {
                        // The socket is slow to drain: drop what it took (cold path), so
                        // the buffer holds the backlog, not everything since the last
                        // complete flush.
                        self.tx.drain(..self.tx_head);
                        self.tx_head = 0;
                    }
                    return;
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                other => {
                    // The target may have said why before closing (C2HTermReq): read what
                    // is left so that reason wins over a bare "connection reset".
                    self.tx.clear();
                    self.tx_head = 0;
                    self.receive();
                    let err = match other {
                        Err(source) => self.io_error(source),
                        _ => TcpError::Closed {
                            addr: self.addr,
                            qid: self.qid,
                        },
                    };
                    self.fail(err);
                    return;
                }
            }
        }
        self.tx.clear();
        self.tx_head = 0;
    }

    fn io_error(&self, source: std::io::Error) -> TcpError {
        match source.kind() {
            ErrorKind::ConnectionReset | ErrorKind::BrokenPipe | ErrorKind::ConnectionAborted => {
                TcpError::Closed {
                    addr: self.addr,
                    qid: self.qid,
                }
            }
            _ => TcpError::Io {
                addr: self.addr,
                qid: self.qid,
                source,
            },
        }
    }

    pub(super) fn malformed(&mut self, pdu: u8, what: String) {
        self.fail(TcpError::Malformed {
            addr: self.addr,
            qid: self.qid,
            pdu: pdu_type::name(pdu),
            what,
        });
    }

    /// Reads what the socket has and handles it.
    pub(super) fn receive(&mut self) {
        // A few reads per poll at most: a busy connection cannot starve the caller.
        for _ in 0..4 {
            match self.read_some() {
                Some(true) => {}
                Some(false) | None => return,
            }
        }
    }

    /// One read into the receive buffer, then the PDUs it completed are handled.
    /// `Some(true)`: the read filled the buffer (more may be waiting); `Some(false)`: it
    /// did not; `None`: nothing to read (or the queue failed).
    pub(super) fn read_some(&mut self) -> Option<bool> {
        if self.rx_paused {
            // Back-pressure: nothing more is read or handled until the queued PDUs have
            // gone out (`flush_tx` at each poll).
            if self.tx_backlog() > TX_HIGH_WATER {
                return None;
            }
            self.rx_paused = false;
            self.parse();
            if self.rx_paused || self.failed.is_some() {
                return None;
            }
        }
        loop {
            if self.rx_head == self.rx_tail {
                self.rx_head = 0;
                self.rx_tail = 0;
            } else if self.rx_tail == self.rx.len() {
                self.rx.copy_within(self.rx_head..self.rx_tail, 0);
                self.rx_tail -= self.rx_head;
                self.rx_head = 0;
            }
            match self.link_read() {
                Ok(0) => {
                    self.fail(TcpError::Closed {
                        addr: self.addr,
                        qid: self.qid,
                    });
                    return None;
                }
                Ok(n) => {
                    self.rx_tail += n;
                    self.parse();
                    return (self.failed.is_none()).then_some(self.rx_tail == self.rx.len());
                }
                // Also a blocking read (wait_readable) whose SO_RCVTIMEO passed (EAGAIN).
                Err(e) if e.kind() == ErrorKind::WouldBlock => return None,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(source) => {
                    let err = self.io_error(source);
                    self.fail(err);
                    return None;
                }
            }
        }
    }

    /// Blocks until the target sends something or `timeout` passes, and handles what came
    /// (instead of spinning on empty polls: a target on the same CPU gets it). Returns
    /// whether completions are ready for `poll`. The socket is blocking for this one read
    /// (SO_RCVTIMEO = `timeout`), non-blocking again afterwards.
    pub(crate) fn wait_readable(&mut self, timeout: Duration) -> bool {
        if self.failed.is_none() && self.tx_head < self.tx.len() {
            self.flush_tx();
        }
        if !self.deferred.is_empty() || self.failed.is_some() || self.in_flight == 0 {
            return !self.deferred.is_empty();
        }
        let set = |s: &TcpStream| {
            s.set_read_timeout(Some(timeout.max(Duration::from_millis(1))))?;
            s.set_nonblocking(false)
        };
        if let Err(source) = set(&self.stream) {
            let err = self.io_error(source);
            self.fail(err);
            return true;
        }
        let _ = self.read_some();
        if self.failed.is_none() {
            if let Err(source) = self.stream.set_nonblocking(true) {
                let err = self.io_error(source);
                self.fail(err);
            }
        }
        !self.deferred.is_empty()
    }

    /// Reads from the socket into the free end of the receive buffer.
    fn link_read(&mut self) -> std::io::Result<usize> {
        let buf = &mut self.rx[self.rx_tail..];
        #[cfg(any(test, feature = "fuzzing"))]
        if let Some(m) = self.mem.as_mut() {
            return m.read(buf);
        }
        (&self.stream).read(buf)
    }

    /// Writes the unsent part of the send buffer to the socket.
    fn link_write(&mut self) -> std::io::Result<usize> {
        let buf = &self.tx[self.tx_head..];
        #[cfg(any(test, feature = "fuzzing"))]
        if let Some(m) = self.mem.as_mut() {
            return m.write(buf);
        }
        (&self.stream).write(buf)
    }

    /// Bytes queued for sending and not yet taken by the socket.
    pub(super) fn tx_backlog(&self) -> usize {
        self.tx.len() - self.tx_head
    }
}
