//! A debug trace of a poll group's rounds (issue 23: where a QD1 round's time goes), on when
//! the environment variable `NVME_TARGET_TRACE` names a file when the target starts.
//!
//! Each poll group records, in a buffer of its own thread reserved up front (no allocation,
//! lock or syscall per event beyond the clock read), `CLOCK_MONOTONIC` time stamps (the clock
//! of [`Instant`]) of: a command capsule complete (`recv`), its submission to the backend
//! queue (`submit`), its completion seen (`complete`), its response sent (`sent`, the slot's
//! release after the last byte left), each vectored socket write (`write` as it starts, `wrote`
//! as it returns), and each poll(2) wait (`wait` with the descriptor
//! count, `woke` with what it returned) or sleep. At the group's end the buffer is appended
//! to the file, one line per event: `<µs since the first event> <event> <a> <b>`.
//! Off (the default), each trace point is one relaxed atomic load and a branch.

use std::cell::RefCell;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;
use std::time::Instant;

/// Events kept per group; later events are dropped (counted in the dump's last line).
const CAPACITY: usize = 1 << 18;

static ON: AtomicBool = AtomicBool::new(false);
static PATH: OnceLock<Option<String>> = OnceLock::new();
static EPOCH: OnceLock<Instant> = OnceLock::new();

/// A trace event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ev {
    /// A command capsule (and its in-capsule data) is in: a = CID.
    Recv,
    /// Submitted to the backend queue pair: a = CID.
    Submit,
    /// Its completion was taken from the backend queue pair: a = CID.
    Complete,
    /// Its response's last byte went to the socket: a = CID.
    Sent,
    /// A vectored write to a connection's socket starts: a = bytes offered.
    Write,
    /// It returned: a = bytes taken (0: none, the socket was full or failed).
    Wrote,
    /// The group blocks in poll(2): a = descriptors.
    Wait,
    /// poll(2) returned: a = ready descriptors, b = 1 if the wake-up eventfd was among them.
    Woke,
    /// A connection had work when the group was about to block: no wait.
    Ready,
    /// A polled-only queue pair had commands: the group sleeps `idle_sleep`.
    Sleep,
}

impl Ev {
    fn name(self) -> &'static str {
        match self {
            Ev::Recv => "recv",
            Ev::Submit => "submit",
            Ev::Complete => "complete",
            Ev::Sent => "sent",
            Ev::Write => "write",
            Ev::Wrote => "wrote",
            Ev::Wait => "wait",
            Ev::Woke => "woke",
            Ev::Ready => "ready",
            Ev::Sleep => "sleep",
        }
    }
}

struct Buf {
    events: Vec<(Instant, Ev, u32, u32)>,
    dropped: u64,
}

thread_local! {
    static BUF: RefCell<Buf> = const { RefCell::new(Buf { events: Vec::new(), dropped: 0 }) };
}

/// Reads `NVME_TARGET_TRACE` (once per process) and, when set, reserves this thread's buffer.
pub(crate) fn start_group() {
    let path = PATH.get_or_init(|| {
        std::env::var("NVME_TARGET_TRACE")
            .ok()
            .filter(|p| !p.is_empty())
    });
    if path.is_some() {
        EPOCH.get_or_init(Instant::now);
        BUF.with(|b| b.borrow_mut().events.reserve_exact(CAPACITY));
        ON.store(true, Ordering::Release);
    }
}

/// Whether the trace is on (for a trace point whose arguments cost something to compute).
#[inline]
pub(crate) fn on() -> bool {
    ON.load(Ordering::Relaxed)
}

/// Records one event (nothing when the trace is off).
#[inline]
pub(crate) fn ev(e: Ev, a: u32, b: u32) {
    if ON.load(Ordering::Relaxed) {
        record(e, a, b);
    }
}

#[cold]
fn record(e: Ev, a: u32, b: u32) {
    let t = Instant::now();
    BUF.with(|buf| {
        let mut buf = buf.borrow_mut();
        if buf.events.len() < buf.events.capacity() {
            buf.events.push((t, e, a, b));
        } else {
            buf.dropped += 1;
        }
    });
}

/// Appends this thread's events to the trace file (at the group's end).
pub(crate) fn finish_group() {
    let (Some(Some(path)), Some(epoch)) = (PATH.get(), EPOCH.get()) else {
        return;
    };
    let name = std::thread::current().name().unwrap_or("group").to_owned();
    let out = BUF.with(|b| format_events(&b.borrow(), *epoch, &name));
    let r = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .and_then(|mut f| f.write_all(out.as_bytes()));
    if let Err(e) = r {
        log::warn!("nvme-target: trace file {path}: {e}; set NVME_TARGET_TRACE to a writable path");
    }
}

fn format_events(b: &Buf, epoch: Instant, name: &str) -> String {
    let mut out = String::with_capacity(b.events.len() * 32 + 64);
    for &(t, e, x, y) in &b.events {
        let us = t.saturating_duration_since(epoch).as_secs_f64() * 1e6;
        out.push_str(&format!("{name} {us:.1} {} {x} {y}\n", e.name()));
    }
    out.push_str(&format!("{name} end dropped {}\n", b.dropped));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_buffer_drops_events_and_the_dump_lists_them_in_order() {
        let epoch = Instant::now();
        BUF.with(|b| b.borrow_mut().events.reserve_exact(2));
        let cap = BUF.with(|b| b.borrow().events.capacity());
        for i in 0..cap as u32 + 3 {
            record(Ev::Recv, i, 0);
        }
        record(Ev::Woke, 2, 1);
        let text = BUF.with(|b| format_events(&b.borrow(), epoch, "g0"));
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), cap + 1, "{text}");
        assert!(
            lines[0].starts_with("g0 ") && lines[0].ends_with(" recv 0 0"),
            "{text}"
        );
        assert!(lines[1].ends_with(" recv 1 0"), "{text}");
        assert_eq!(lines[cap], format!("g0 end dropped {}", 4));
    }
}
