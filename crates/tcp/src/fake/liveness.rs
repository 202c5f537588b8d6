//! Liveness and late-execution behaviours of the fake target, for the keep-alive and reset
//! tests: an association that keeps its connections open but stops answering (it reads and
//! drops every command, or stops reading), held writes that the "controller" still carries
//! out some time after their association ended (what a target without proof of quiescence
//! may do), and the Command Quiesce Time it reports in Identify Controller.
//! A CC.EN 1 -> 0 on an association discards its held commands (a controller reset aborts
//! them, NVMe Base 2.0 §3.7.2), so those are never applied late.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU16, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use super::State;

/// How an unresponsive association behaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unresponsive {
    /// Reads every PDU and never answers (nor executes) the command.
    ReadsButNeverAnswers,
    /// Stops reading its sockets altogether (the host's data piles up in the socket).
    StopsReading,
}

/// The fake's liveness state (one per target).
#[derive(Default)]
pub(super) struct Liveness {
    /// Unresponsive associations: controller id -> (mode, admin connection only).
    mute: Mutex<HashMap<u16, (Unresponsive, bool)>>,
    /// Held writes are applied this long after their association ended.
    late_writes: Mutex<Option<Duration>>,
    /// Identify Controller CQT (ms).
    pub(super) cqt_ms: AtomicU16,
    /// Held writes applied after their association ended.
    late_writes_applied: AtomicU64,
    /// Held commands discarded by CC.EN = 0.
    discarded_by_disable: AtomicU64,
}

/// A held write's effect: (namespace, byte offset, data).
pub(super) type HeldWrite = (u32, usize, Vec<u8>);

impl super::FakeTarget {
    /// Makes association `cntlid` unresponsive (`admin_only`: only its admin connection;
    /// else its I/O connections too); `None` makes it answer again.
    pub fn set_unresponsive(&self, cntlid: u16, mode: Option<Unresponsive>, admin_only: bool) {
        let mut mute = self.state.live.mute.lock().unwrap();
        match mode {
            Some(m) => mute.insert(cntlid, (m, admin_only)),
            None => mute.remove(&cntlid),
        };
    }

    /// Held writes (`Fault::Hold`) still held when their association ends are applied to
    /// the medium `delay` later instead of being dropped; `None` drops them (the default).
    pub fn set_late_writes(&self, delay: Option<Duration>) {
        *self.state.live.late_writes.lock().unwrap() = delay;
    }

    /// The Command Quiesce Time reported in Identify Controller (0: none).
    pub fn set_cqt(&self, ms: u16) {
        self.state.live.cqt_ms.store(ms, Ordering::SeqCst);
    }

    /// Held writes applied to the medium after their association ended.
    pub fn late_writes_applied(&self) -> u64 {
        self.state.live.late_writes_applied.load(Ordering::SeqCst)
    }

    /// Held commands discarded because their association got CC.EN = 0.
    pub fn discarded_by_disable(&self) -> u64 {
        self.state.live.discarded_by_disable.load(Ordering::SeqCst)
    }
}

/// How connection (`cntlid`, `qid`) behaves now, if it is unresponsive.
pub(super) fn muted(st: &State, cntlid: u16, qid: u16) -> Option<Unresponsive> {
    let mute = st.live.mute.lock().unwrap();
    match mute.get(&cntlid) {
        Some(&(mode, admin_only)) if qid == 0 || !admin_only => Some(mode),
        _ => None,
    }
}

/// Waits while the connection is told to stop reading (or the target stops).
pub(super) fn wait_while_deaf(st: &State, cntlid: u16, qid: u16) {
    while muted(st, cntlid, qid) == Some(Unresponsive::StopsReading)
        && !st.stopped.load(Ordering::SeqCst)
    {
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// A write to CC of association `cntlid`: EN going 1 -> 0 discards its held commands.
pub(super) fn cc_written(st: &State, cntlid: u16, old: u32, new: u32) {
    let en = |cc: u32| nvme_spec::regs::Cc(cc).en();
    if en(old) && !en(new) {
        let mut held = st.held.lock().unwrap();
        let before = held.len();
        held.retain(|k, _| k.0 != cntlid);
        let n = (before - held.len()) as u64;
        st.live.discarded_by_disable.fetch_add(n, Ordering::SeqCst);
    }
}

/// Association `cntlid` ended: its held commands are dropped, or their writes applied late.
pub(super) fn end_association(st: &std::sync::Arc<State>, cntlid: u16) {
    let writes: Vec<HeldWrite> = {
        let mut held = st.held.lock().unwrap();
        let keys: Vec<_> = held.keys().filter(|k| k.0 == cntlid).copied().collect();
        keys.into_iter()
            .filter_map(|k| held.remove(&k).and_then(|h| h.write))
            .collect()
    };
    let Some(delay) = *st.live.late_writes.lock().unwrap() else {
        return;
    };
    if writes.is_empty() {
        return;
    }
    let st = st.clone();
    std::thread::spawn(move || {
        std::thread::sleep(delay);
        let mut disks = st.disks.lock().unwrap();
        for (nsid, offset, data) in writes {
            if let Some(d) = disks.get_mut(&nsid) {
                d[offset..offset + data.len()].copy_from_slice(&data);
                st.live.late_writes_applied.fetch_add(1, Ordering::SeqCst);
            }
        }
    });
}
