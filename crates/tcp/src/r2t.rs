//! Receive-side checks that need per-command state: what an R2T may ask for, and what a
//! successful completion must follow. A target that breaks them closes the queue with
//! `TcpError::Malformed` (the caller gets `Error::Transport` and every buffer back).
//!
//! R2T (NVMe/TCP 1.0 §3.6.2.7): the host announces MAXR2T in ICReq (0's based: 0 means one
//! outstanding R2T per command). An R2T is outstanding from its arrival until the last
//! H2CData PDU answering it has been sent; before that the controller cannot have received
//! the data, so a second R2T for the same command is a violation of MAXR2T. Each R2T must
//! lie inside the command's transfer, name a write whose data goes by R2T (not in-capsule,
//! not a read), and ask for bytes after every byte already asked for (ascending,
//! non-overlapping: what Linux nvmet and SPDK send). So a command's data is queued for
//! sending at most once, and the send buffer holds at most the data of the writes in flight.

/// MAXR2T the host announces in ICReq (0's based: one outstanding R2T per command).
pub(crate) const MAXR2T: u32 = 0;

/// Bytes of queued PDUs above which the queue stops reading the socket (and stops handling
/// PDUs already read) until the socket has taken enough of them. A target that sends R2Ts
/// but does not read its socket thus gets no more data queued than this plus one R2T's
/// answer; its commands then time out. (A bound, not a failure: a legitimate target whose
/// socket is slow to drain must not lose its connection.)
pub(crate) const TX_HIGH_WATER: usize = 4 << 20;

/// Bytes already written from the front of the send buffer above which a partial flush
/// drops them (so the buffer holds at most this plus the backlog).
pub(crate) const TX_COMPACT: usize = 1 << 20;

/// R2T state of one command, reset at each (re)submission.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct R2tState {
    /// End of the highest range asked for so far (the whole transfer for in-capsule data).
    pub asked_end: usize,
    /// Bytes asked for so far.
    pub asked: usize,
    /// Position in the connection's send stream (bytes written since it opened) where the
    /// data of the last R2T ends: the R2T is outstanding until the stream passes it.
    pub answer_end: u64,
}

impl R2tState {
    /// State of a command just submitted: `in_capsule_len` bytes went with the capsule.
    pub fn new(in_capsule_len: usize) -> Self {
        R2tState {
            asked_end: in_capsule_len,
            asked: in_capsule_len,
            answer_end: 0,
        }
    }
}

/// What the queue knows of the command an R2T names.
pub(crate) struct R2tTarget {
    pub cid: u16,
    /// The command sends data (a write) and has a buffer.
    pub sends: bool,
    /// Bytes the command moves.
    pub len: usize,
    /// Bytes written to the socket so far on this connection.
    pub sent: u64,
}

/// Checks an R2T asking for `len` bytes at `offset`; the error names the check that failed.
pub(crate) fn check(
    state: &R2tState,
    target: &R2tTarget,
    offset: usize,
    len: usize,
) -> Result<(), String> {
    let cid = target.cid;
    if !target.sends {
        return Err(format!(
            "R2T for command {cid:#x}, which sends no data (check: R2T for a read)"
        ));
    }
    if len == 0 || offset.checked_add(len).map_or(true, |end| end > target.len) {
        return Err(format!(
            "R2T asks for bytes {offset}..{} of command {cid:#x}, which sends {} bytes \
             (check: R2T past the end)",
            offset.saturating_add(len),
            target.len
        ));
    }
    if state.asked_end == target.len && state.asked == target.len {
        return Err(format!(
            "R2T for command {cid:#x}, whose {} bytes were all sent or asked for already \
             (check: R2T for data already sent)",
            target.len
        ));
    }
    if target.sent < state.answer_end {
        return Err(format!(
            "second R2T for command {cid:#x} while {} bytes of the previous one are still \
             unsent (check: MAXR2T {MAXR2T}, one outstanding R2T per command)",
            state.answer_end - target.sent
        ));
    }
    if offset < state.asked_end {
        return Err(format!(
            "R2T asks for bytes {offset}..{} of command {cid:#x}, overlapping bytes \
             ..{} already asked for (check: R2T overlap)",
            offset + len,
            state.asked_end
        ));
    }
    Ok(())
}

/// Checks a successful CapsuleResp against the data moved: a read must have received its
/// whole transfer, a write by R2T must have been asked for all of it (NVMe/TCP §3.6.2.9:
/// the data precede the response). `received`: C2HData bytes of a read.
pub(crate) fn check_success(
    sends: bool,
    len: usize,
    received: usize,
    r2t: &R2tState,
) -> Result<(), String> {
    if !sends && received != len {
        return Err(format!(
            "successful completion of a {len}-byte read after {received} bytes of data \
             (check: short read)"
        ));
    }
    if sends && r2t.asked != len {
        return Err(format!(
            "successful completion of a {len}-byte write after R2Ts for {} bytes \
             (check: short write)",
            r2t.asked
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(len: usize, sent: u64) -> R2tTarget {
        R2tTarget {
            cid: 3,
            sends: true,
            len,
            sent,
        }
    }

    #[test]
    fn a_second_r2t_while_the_first_is_unsent_breaks_maxr2t() {
        let state = R2tState {
            asked_end: 4096,
            asked: 4096,
            answer_end: 5000,
        };
        let e = check(&state, &target(8192, 4999), 4096, 4096).unwrap_err();
        assert!(e.contains("check: MAXR2T"), "{e}");
        // Once the socket took the first answer, the next range is fine.
        check(&state, &target(8192, 5000), 4096, 4096).unwrap();
    }

    #[test]
    fn ranges_must_ascend_without_overlap_and_stay_inside_the_transfer() {
        let state = R2tState {
            asked_end: 4096,
            asked: 4096,
            answer_end: 0,
        };
        let t = target(8192, 0);
        assert!(check(&state, &t, 0, 4096)
            .unwrap_err()
            .contains("R2T overlap"));
        assert!(check(&state, &t, 4096, 4097)
            .unwrap_err()
            .contains("R2T past the end"));
        assert!(check(&state, &t, usize::MAX, 2)
            .unwrap_err()
            .contains("R2T past the end"));
        assert!(check(&state, &t, 4096, 0)
            .unwrap_err()
            .contains("R2T past the end"));
        check(&state, &t, 4096, 4096).unwrap();
        let read = R2tTarget {
            sends: false,
            ..target(8192, 0)
        };
        assert!(check(&R2tState::default(), &read, 0, 512)
            .unwrap_err()
            .contains("R2T for a read"));
    }

    #[test]
    fn success_must_follow_the_whole_transfer() {
        let none = R2tState::default();
        assert!(check_success(false, 1024, 512, &none)
            .unwrap_err()
            .contains("short read"));
        check_success(false, 1024, 1024, &none).unwrap();
        check_success(false, 0, 0, &none).unwrap();
        assert!(check_success(true, 1024, 0, &none)
            .unwrap_err()
            .contains("short write"));
        check_success(true, 1024, 0, &R2tState::new(1024)).unwrap();
    }
}
