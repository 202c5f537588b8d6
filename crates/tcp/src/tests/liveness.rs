//! Keep-alive detection of a target that keeps its connections open but stops answering
//! (busy, idle-polling and idle-calling-nothing programs, with timing asserted).

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use nvme_driver::{Completion, Error, QueuePairOptions, WriteFlags};

use super::{read_matches, tcp_source, write_blocks};
use crate::fake::{Config, FakeTarget, Unresponsive};
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
            qp.submit_write(&ns, i, 1, buf, WriteFlags::NONE, i).unwrap();
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
    assert!(noticed >= KATO / 2, "not before a Keep Alive went unanswered");
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
    assert_eq!(ids, (0..8).collect::<Vec<_>>(), "each completes exactly once");
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
    assert!(c.is_failed(), "the first call after the idle spell reports the loss");
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
