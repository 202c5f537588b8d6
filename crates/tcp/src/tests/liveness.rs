//! Keep-alive detection of a target that keeps its connections open but stops answering
//! (busy, idle-polling and idle-calling-nothing programs, with timing asserted), and the
//! reset's handling of commands an old association may still carry out (a held write that
//! the fake target applies late, after its association closed).

use nvme_core::IoQueue;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use nvme_core::{Completion, Error, QueuePairOptions, WriteFlags};

use super::{pattern, read_matches, tcp_source, write_blocks};
use crate::fake::{Config, FakeTarget, Fault, Unresponsive};
use crate::{TcpController, TcpError, TcpOptions, TcpQueuePair};

const KATO: Duration = Duration::from_millis(400);

fn kato_target() -> (FakeTarget, TcpController) {
    let t = FakeTarget::start(Config::default());
    let c = TcpController::connect(
        &t.trid(),
        TcpOptions {
            kato: KATO,
            ..TcpOptions::default()
        },
    )
    .unwrap();
    (t, c)
}

/// Polls `qp` until a Keep Alive has just been answered (so the last answer is "now").
fn until_keep_alive_answered(t: &FakeTarget, c: &TcpController, qp: &mut TcpQueuePair) {
    let before = t.counters().keep_alives.load(Ordering::SeqCst);
    let start = Instant::now();
    while t.counters().keep_alives.load(Ordering::SeqCst) == before {
        qp.poll(|_| {});
        assert!(start.elapsed() < 4 * KATO, "no Keep Alive sent");
        std::thread::sleep(Duration::from_micros(100));
    }
    // Let its answer arrive and be reaped.
    for _ in 0..20 {
        qp.poll(|_| {});
        c.keep_alive();
        std::thread::sleep(Duration::from_micros(100));
    }
}

fn is_keep_alive_loss(e: &Error) -> bool {
    matches!(
        tcp_source(e),
        TcpError::KeepAliveUnanswered { .. } | TcpError::KeepAliveLapsed { .. }
    )
}

/// Reads and writes in flight, then the whole association goes silent (it reads every PDU
/// and answers none): the pair, busy polling, gets every request back with the keep-alive
/// error within 2 x KATO of the last answer; then a reset recovers.
#[test]
fn a_silent_target_is_noticed_within_two_katos_by_a_busy_pair() {
    let (t, c) = kato_target();
    let ns = c.namespace(2).unwrap();
    let mut qp = c.create_queue_pair(QueuePairOptions::default()).unwrap();
    write_blocks(&c, &mut qp, 2, 3, 33);
    until_keep_alive_answered(&t, &c, &mut qp);
    t.set_unresponsive(c.cntlid(), Some(Unresponsive::ReadsButNeverAnswers), false);
    let silent = Instant::now();
    for i in 0..8u64 {
        let buf = c.alloc_buffer(512).unwrap();
        if i % 2 == 0 {
            qp.submit_read(&ns, i, 1, buf, i).unwrap();
        } else {
            qp.submit_write(&ns, i, 1, buf, WriteFlags::NONE, i)
                .unwrap();
        }
    }
    let mut done: Vec<Completion> = Vec::new();
    while done.len() < 8 {
        qp.poll(|comp| done.push(comp));
        assert!(
            silent.elapsed() < 4 * KATO,
            "not noticed after {:?}: {} of 8 requests completed",
            silent.elapsed(),
            done.len()
        );
    }
    let noticed = silent.elapsed();
    eprintln!("silent target noticed by a busy pair after {noticed:?} (KATO {KATO:?})");
    assert!(noticed <= 2 * KATO, "noticed after {noticed:?}");
    assert!(
        noticed >= KATO / 2,
        "not before a Keep Alive went unanswered"
    );
    let mut ids: Vec<u64> = done
        .iter()
        .map(|comp| {
            let e = comp.result.as_ref().expect_err("association lost");
            assert!(
                matches!(tcp_source(e), TcpError::KeepAliveUnanswered { .. }),
                "{e}"
            );
            assert!(e.to_string().contains("Keep Alive"), "{e}");
            assert!(comp.buffer.is_some(), "buffers come back");
            comp.user_data
        })
        .collect();
    ids.sort_unstable();
    assert_eq!(
        ids,
        (0..8).collect::<Vec<_>>(),
        "each completes exactly once"
    );
    assert!(c.is_failed());
    let f = qp
        .submit_read(&ns, 0, 1, c.alloc_buffer(512).unwrap(), 99)
        .unwrap_err();
    assert!(is_keep_alive_loss(&f.error), "{f}");
    assert!(f.buffer.is_some());
    // The new association (a new controller id) answers.
    c.reset().unwrap();
    assert!(!c.is_failed());
    read_matches(&c, &mut qp, 2, 3, 33);
}

/// A target that stops reading its sockets, found by a pair that polls with nothing in
/// flight (an idle but polling program).
#[test]
fn a_target_that_stops_reading_is_noticed_within_two_katos_by_an_idle_polling_pair() {
    let (t, c) = kato_target();
    let mut qp = c.create_queue_pair(QueuePairOptions::default()).unwrap();
    until_keep_alive_answered(&t, &c, &mut qp);
    t.set_unresponsive(c.cntlid(), Some(Unresponsive::StopsReading), false);
    let silent = Instant::now();
    while qp.closed_error().is_none() {
        qp.poll(|_| panic!("nothing was in flight"));
        assert!(silent.elapsed() < 4 * KATO, "not noticed");
        std::thread::sleep(Duration::from_micros(100));
    }
    let noticed = silent.elapsed();
    eprintln!("deaf target noticed by an idle polling pair after {noticed:?} (KATO {KATO:?})");
    assert!(noticed <= 2 * KATO, "noticed after {noticed:?}");
    let e = qp.closed_error().unwrap();
    assert!(is_keep_alive_loss(&e), "{e}");
    assert!(c.is_failed());
    t.set_unresponsive(7, None, false);
    c.reset().unwrap();
    write_blocks(&c, &mut qp, 2, 4, 44);
    read_matches(&c, &mut qp, 2, 4, 44);
}

/// A program that calls nothing for 3 x KATO while the target went silent: its first call
/// reports the loss at once (detection time = however long it slept since the last answer),
/// and requests in flight complete at the pair's next polls.
#[test]
fn a_program_that_called_nothing_is_told_of_the_loss_at_its_next_call() {
    let (t, c) = kato_target();
    let ns = c.namespace(2).unwrap();
    let mut qp = c.create_queue_pair(QueuePairOptions::default()).unwrap();
    until_keep_alive_answered(&t, &c, &mut qp);
    t.set_unresponsive(c.cntlid(), Some(Unresponsive::ReadsButNeverAnswers), false);
    for i in 0..2u64 {
        qp.submit_read(&ns, i, 1, c.alloc_buffer(512).unwrap(), i)
            .unwrap();
    }
    std::thread::sleep(3 * KATO);
    let first_call = Instant::now();
    assert!(
        c.is_failed(),
        "the first call after the idle spell reports the loss"
    );
    let mut done = Vec::new();
    let mut polls = 0;
    while done.len() < 2 {
        qp.poll(|comp| done.push(comp));
        polls += 1;
        assert!(polls <= 64, "{} of 2 after {polls} polls", done.len());
    }
    let took = first_call.elapsed();
    eprintln!("loss reported {took:?} after the first call, in {polls} polls");
    assert!(took < Duration::from_millis(100), "{took:?}");
    for comp in &done {
        let e = comp.result.as_ref().unwrap_err();
        assert!(is_keep_alive_loss(e), "{e}");
        assert!(e.to_string().contains("keep-alive timeout expired"), "{e}");
        assert!(comp.buffer.is_some());
    }
    c.reset().unwrap();
    read_matches_zero_or_any(&c, &mut qp);
}

fn read_matches_zero_or_any(c: &TcpController, qp: &mut TcpQueuePair) {
    let ns = c.namespace(2).unwrap();
    qp.read(&ns, 0, 1, c.alloc_buffer(512).unwrap()).unwrap();
}

// ----- reset: commands the old association may still carry out ---------------------------

/// Late-write delay of the fake (after the old association's admin connection closed).
const LATE: Duration = Duration::from_millis(250);
/// The LBA the held write and the later writes go to (namespace 2, 512-byte blocks).
const LBA: u64 = 5;

/// A target that holds the next write, applies held writes `LATE` after their association
/// ends, with a CQT of `cqt_ms`.
fn late_write_target(cqt_ms: u16) -> (FakeTarget, TcpController) {
    let t = FakeTarget::start(Config::default());
    t.set_cqt(cqt_ms);
    t.set_late_writes(Some(LATE));
    let c = TcpController::connect(&t.trid(), TcpOptions::default()).unwrap();
    (t, c)
}

/// Submits write `seed` to [`LBA`], held by the target.
fn held_write(t: &FakeTarget, c: &TcpController, qp: &mut TcpQueuePair, seed: u8) {
    let ns = c.namespace(2).unwrap();
    t.set_fault(Fault::Hold);
    let mut buf = c.alloc_buffer(512).unwrap();
    buf[..512].copy_from_slice(&pattern(512, seed));
    qp.submit_write(&ns, LBA, 1, buf, WriteFlags::NONE, u64::from(seed))
        .unwrap();
    let before = t.counters().io_commands.load(Ordering::SeqCst);
    let start = Instant::now();
    while t.counters().io_commands.load(Ordering::SeqCst) == before
        && start.elapsed() < Duration::from_millis(50)
    {
        qp.poll(|_| panic!("held"));
        std::thread::sleep(Duration::from_millis(1));
    }
    t.set_fault(Fault::None);
}

/// What a caller that retries retryable errors sees: it retries the held write until it is
/// acknowledged, writes newer data (`newer`) over it, waits for the target's late writes,
/// and reads back. Returns the error the held write got.
fn caller_retries_then_overwrites(
    t: &FakeTarget,
    c: &TcpController,
    qp: &mut TcpQueuePair,
    held: Completion,
    newer: u8,
) -> Option<Error> {
    let ns = c.namespace(2).unwrap();
    let error = match held.result {
        Ok(_) => None,
        Err(e) if e.is_retryable() => {
            write_blocks(c, qp, 2, LBA, held.user_data as u8);
            None
        }
        Err(e) => Some(e),
    };
    if error.is_none() {
        // The held write was acknowledged (after a retry or a resubmission): newer data.
        write_blocks(c, qp, 2, LBA, newer);
        std::thread::sleep(2 * LATE);
        let back = qp.read(&ns, LBA, 1, c.alloc_buffer(512).unwrap()).unwrap();
        assert!(
            back[..512] == pattern(512, newer)[..],
            "the old association's write overtook an acknowledged newer write: LBA {LBA} \
             holds {} (the held write's data: {}), {} late writes applied",
            if back[..512] == pattern(512, held.user_data as u8)[..] {
                "the old write"
            } else {
                "other data"
            },
            held.user_data,
            t.late_writes_applied()
        );
    }
    error
}

/// The old admin connection does not answer CC.EN = 0 and the controller reports no CQT:
/// the held write's outcome is unknown. It must not come back retryable (the fake applies
/// it after the association closed, over whatever the caller wrote meanwhile).
#[test]
fn an_unconfirmed_write_is_reported_outcome_unknown_not_retryable() {
    let (t, c) = late_write_target(0);
    let mut qp = c.create_queue_pair(QueuePairOptions::default()).unwrap();
    held_write(&t, &c, &mut qp, 50);
    t.set_unresponsive(c.cntlid(), Some(Unresponsive::ReadsButNeverAnswers), true);
    c.reset().unwrap();
    let mut done = super::poll_n(&mut qp, 1, Duration::from_secs(10));
    let held = done.pop().unwrap();
    assert!(
        held.buffer.is_some(),
        "the connection is closed: the buffer is free"
    );
    let error = caller_retries_then_overwrites(&t, &c, &mut qp, held, 60)
        .expect("the held write is not acknowledged nor retryable");
    assert!(matches!(error, Error::OutcomeUnknown { .. }), "{error}");
    assert!(!error.is_retryable());
    // The hazard was real: the old write did land, late.
    std::thread::sleep(2 * LATE);
    assert_eq!(t.late_writes_applied(), 1);
    assert_eq!(t.disk(2, LBA as usize * 512, 512), pattern(512, 50));
}

/// The same with `resubmit_after_reset`: the unconfirmed write is not sent again (it would be
/// acknowledged and then overtaken); a read held with it is resubmitted and succeeds.
#[test]
fn with_resubmit_after_reset_an_unconfirmed_write_is_not_resubmitted() {
    let (t, c) = late_write_target(0);
    let ns = c.namespace(2).unwrap();
    let mut qp = c
        .create_queue_pair(QueuePairOptions::default().resubmit_after_reset(true))
        .unwrap();
    held_write(&t, &c, &mut qp, 51);
    t.set_fault(Fault::Hold);
    qp.submit_read(&ns, 9, 1, c.alloc_buffer(512).unwrap(), 900)
        .unwrap();
    for _ in 0..20 {
        qp.poll(|_| panic!("held"));
        std::thread::sleep(Duration::from_millis(1));
    }
    t.set_fault(Fault::None);
    t.set_unresponsive(c.cntlid(), Some(Unresponsive::ReadsButNeverAnswers), true);
    c.reset().unwrap();
    let done = super::poll_n(&mut qp, 2, Duration::from_secs(10));
    let (read, write): (Vec<_>, Vec<_>) = done.into_iter().partition(|d| d.user_data == 900);
    read[0].result.as_ref().expect("the read is resubmitted");
    let held = write.into_iter().next().unwrap();
    let error = caller_retries_then_overwrites(&t, &c, &mut qp, held, 61)
        .expect("the held write is not resubmitted");
    assert!(matches!(error, Error::OutcomeUnknown { .. }), "{error}");
}

/// The controller reports a CQT: the reset waits it out after closing the old association,
/// so the retried write and every later one land after the old one.
#[test]
fn with_a_command_quiesce_time_the_reset_waits_and_retries_are_safe() {
    let cqt = Duration::from_millis(600);
    let (t, c) = late_write_target(cqt.as_millis() as u16);
    let mut qp = c.create_queue_pair(QueuePairOptions::default()).unwrap();
    held_write(&t, &c, &mut qp, 52);
    t.set_unresponsive(c.cntlid(), Some(Unresponsive::ReadsButNeverAnswers), true);
    let start = Instant::now();
    c.reset().unwrap();
    let took = start.elapsed();
    let mut done = super::poll_n(&mut qp, 1, Duration::from_secs(10));
    let held = done.pop().unwrap();
    let e = held.result.as_ref().unwrap_err();
    assert!(
        matches!(e, Error::Reset { .. }),
        "retryable after the wait: {e}"
    );
    assert!(took >= cqt, "the reset took {took:?}, less than the CQT");
    assert!(caller_retries_then_overwrites(&t, &c, &mut qp, held, 62).is_none());
    assert_eq!(
        t.late_writes_applied(),
        1,
        "the old write did land, before the retry"
    );
}

/// The old association answers CC.EN = 0 with CSTS.RDY = 0: its held commands are gone
/// (the fake discards them), so the write is retryable and nothing lands late.
#[test]
fn when_the_old_association_confirms_the_disable_retries_are_safe() {
    let (t, c) = late_write_target(0);
    let mut qp = c.create_queue_pair(QueuePairOptions::default()).unwrap();
    held_write(&t, &c, &mut qp, 53);
    c.reset().unwrap();
    let mut done = super::poll_n(&mut qp, 1, Duration::from_secs(10));
    let held = done.pop().unwrap();
    let e = held.result.as_ref().unwrap_err();
    assert!(matches!(e, Error::Reset { .. }), "{e}");
    assert!(caller_retries_then_overwrites(&t, &c, &mut qp, held, 63).is_none());
    assert_eq!(t.discarded_by_disable(), 1);
    assert_eq!(t.late_writes_applied(), 0);
}
