//! The receive path fuzzed in `cargo test` (`fuzzing.rs` holds the harness and its
//! invariants): structure-aware PDU scripts and raw bytes after a valid ICResp. A few
//! hundred cases by default; `PROPTEST_CASES=N` for a long run. Also the send buffer's
//! back-pressure against a target that asks for data and never reads.

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use nvme_core::DmaBuffer;
use nvme_spec::command;
use nvme_spec::tcp::pdu_type;
use nvme_vfio::DmaMapper;
use proptest::prelude::*;

use crate::fuzzing::{self, Case, Cmd, Op, MAX_LEN};
use crate::queue::{Negotiated, Queue, QueueLimits, Waiter};
use crate::r2t::{TX_COMPACT, TX_HIGH_WATER};
use nvme_core::HostMemory;

/// A command id: mostly one the case submitted, sometimes any value.
fn cid() -> impl Strategy<Value = u16> {
    prop_oneof![8 => 0u16..8, 1 => any::<u16>()]
}

/// Lengths around the interesting edges (0, 1, the transfer, past it).
fn len32() -> impl Strategy<Value = u32> {
    prop_oneof![
        2 => 0u32..=(2 * MAX_LEN as u32),
        1 => Just(0u32),
        1 => (1u32..=128).prop_map(|k| k * 512),
        1 => any::<u32>(),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (cid(), any::<bool>()).prop_map(|(cid, ok)| Op::Resp { cid, ok }),
        2 => (cid(), len32(), len32(), any::<u8>()).prop_map(|(cid, datao, datal, f)| Op::Data {
            cid,
            datao,
            datal: datal % (2 * MAX_LEN as u32),
            flags: f & 0x0C,
        }),
        4 => (cid(), any::<bool>()).prop_map(|(cid, success)| Op::DataRest { cid, success }),
        3 => (cid(), any::<u16>(), len32(), len32()).prop_map(|(cid, ttag, offset, len)| {
            Op::R2t {
                cid,
                ttag,
                offset,
                len,
            }
        }),
        1 => any::<u16>().prop_map(|fes| Op::TermReq { fes }),
        1 => proptest::collection::vec(any::<u8>(), 0..64).prop_map(Op::Raw),
        1 => (any::<u16>(), 1u8..=255).prop_map(|(back, xor)| Op::Flip { back, xor }),
        1 => (0u16..64).prop_map(Op::Truncate),
    ]
}

fn cmd() -> impl Strategy<Value = Cmd> {
    let len = (1usize..=MAX_LEN / 512).prop_map(|k| k * 512);
    prop_oneof![
        3 => len.clone().prop_map(Cmd::Read),
        3 => len.prop_map(Cmd::Write),
        1 => Just(Cmd::Flush),
    ]
}

fn case() -> impl Strategy<Value = Case> {
    (
        any::<bool>(),
        any::<bool>(),
        proptest::collection::vec(cmd(), 0..=8),
        proptest::collection::vec(op(), 0..24),
        proptest::collection::vec(0u16..4096, 1..4),
        prop_oneof![4 => Just(true), 1 => Just(false)],
        any::<bool>(),
        prop_oneof![3 => Just(false), 1 => Just(true)],
    )
        .prop_map(
            |(hdgst, ddgst, cmds, ops, chunks, drain, eof, socket)| Case {
                hdgst,
                ddgst,
                cmds,
                ops,
                chunks,
                drain,
                eof,
                socket,
            },
        )
}

/// Cases per property unless `PROPTEST_CASES` says otherwise (an explicit `cases` in the
/// config would override the variable).
const DEFAULT_CASES: u32 = 256;

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_CASES)
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: cases(),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// Structure-aware PDU scripts: no panic, one completion per request, bounded buffers,
    /// every buffer back after the close.
    #[test]
    fn receive_path_survives_structured_pdu_streams(c in case()) {
        fuzzing::run(&c);
    }

    /// Raw bytes through the same decoder the coverage-guided fuzzer uses.
    #[test]
    fn receive_path_survives_raw_bytes(data in proptest::collection::vec(any::<u8>(), 0..2048)) {
        fuzzing::run_bytes(&data);
    }
}

/// A well-behaved script: reads answered by C2HData (+ SUCCESS or CapsuleResp), writes by
/// R2T then CapsuleResp. All complete successfully (the harness is not vacuous).
#[test]
fn a_valid_script_completes_every_request() {
    let c = Case {
        hdgst: true,
        ddgst: true,
        cmds: vec![
            Cmd::Read(8192),
            Cmd::Write(16384),
            Cmd::Flush,
            Cmd::Read(512),
        ],
        ops: vec![
            Op::DataRest {
                cid: 0,
                success: true,
            },
            Op::R2t {
                cid: 1,
                ttag: 7,
                offset: 0,
                len: 16384,
            },
            Op::Resp { cid: 1, ok: true },
            Op::Resp { cid: 2, ok: true },
            Op::DataRest {
                cid: 3,
                success: false,
            },
            Op::Resp { cid: 3, ok: true },
        ],
        chunks: vec![7, 300, 4096],
        drain: true,
        eof: false,
        socket: true,
    };
    fuzzing::run(&c);
    assert_eq!(
        fuzzing::last_run_successes(),
        4,
        "all four succeed on a socket"
    );
    fuzzing::run(&Case {
        socket: false,
        ..c.clone()
    });
    assert_eq!(
        fuzzing::last_run_successes(),
        4,
        "and through the memory pipe"
    );
}

/// An I/O queue (qid 1, no digests, no in-capsule data, no timeout in sight) with `slots`
/// slots on a loopback connection, and the target's end of it.
fn socket_queue(name: &str, slots: u16) -> (Queue, std::net::TcpStream) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let host = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (target, _) = listener.accept().unwrap();
    host.set_nonblocking(true).unwrap();
    let addr = host.peer_addr().unwrap();
    let neg = Negotiated {
        hdgst: false,
        ddgst: false,
        cpda_align: 4,
        maxh2cdata: 128 * 1024,
    };
    let q = Queue::new(
        host,
        addr,
        1,
        Arc::from(name),
        neg,
        QueueLimits {
            slots,
            in_capsule_max: 0,
            timeout: Duration::from_secs(3600),
        },
    );
    (q, target)
}

/// A target that asks for the data of many large writes and never reads its socket: the
/// host queues at most TX_HIGH_WATER plus one answer, then stops handling PDUs (R2Ts stay
/// unread) instead of copying every write into its send buffer.
#[test]
fn r2ts_from_a_target_that_never_reads_leave_the_send_buffer_bounded() {
    const WRITES: u16 = 48;
    const LEN: usize = 1 << 20;
    let (mut q, mut target) = socket_queue("bp", WRITES);
    let mapper: Arc<dyn DmaMapper> = Arc::new(HostMemory::new());
    let blocks = (LEN / 512) as u32;
    for i in 0..WRITES {
        let buf = DmaBuffer::allocate(&mapper, LEN).unwrap();
        q.submit(
            command::write(1, 0, blocks, false),
            Some(buf),
            LEN,
            true,
            u64::from(i),
            Waiter::Poll,
        )
        .unwrap();
    }
    // One valid R2T for the whole of each write, all at once; then the target reads nothing.
    let mut r2ts = Vec::new();
    for cid in 0..WRITES {
        let mut h = vec![pdu_type::R2T, 0, 24, 0, 24, 0, 0, 0];
        h.extend_from_slice(&cid.to_le_bytes());
        h.extend_from_slice(&1u16.to_le_bytes());
        h.extend_from_slice(&0u32.to_le_bytes());
        h.extend_from_slice(&(LEN as u32).to_le_bytes());
        h.extend_from_slice(&[0; 4]);
        r2ts.extend_from_slice(&h);
    }
    target.write_all(&r2ts).unwrap();
    let mut most = 0;
    for _ in 0..2000 {
        q.progress();
        most = most.max(q.buffer_sizes().0);
        std::thread::sleep(Duration::from_micros(100));
    }
    eprintln!(
        "send buffer at most {most} bytes; {} of {WRITES} R2Ts answered",
        q.stats.r2ts
    );
    assert!(q.failed.is_none(), "a slow reader is not a protocol error");
    let bound = TX_HIGH_WATER + TX_COMPACT + LEN + 64 * 1024;
    assert!(
        most <= bound,
        "send buffer reached {most} bytes (bound {bound}); {} R2Ts answered",
        q.stats.r2ts
    );
    assert!(
        q.stats.r2ts < u64::from(WRITES),
        "the host stopped handling R2Ts while its backlog is over the mark"
    );
    drop(target);
}

/// A late or repeated completion for an earlier use of a slot (same slot index, older
/// generation) matches no request: the tag set's generation check fails the queue instead of
/// completing the slot's new command with another command's result.
#[test]
fn a_stale_cccid_for_a_reused_slot_is_caught_by_the_generation() {
    use std::io::Read;

    use nvme_spec::{CompletionEntry, Status};

    // One slot: the second command reuses the first one's.
    let (mut q, mut target) = socket_queue("stale", 1);
    // The command id of the capsule the host sent (8-byte header, then the SQE: CID at 2..4).
    let sent_cid = |target: &mut std::net::TcpStream| {
        let mut capsule = [0u8; 8 + 64];
        target.read_exact(&mut capsule).unwrap();
        assert_eq!(capsule[0], pdu_type::CAPSULE_CMD);
        u16::from_le_bytes([capsule[10], capsule[11]])
    };
    let resp = |cid: u16| {
        let cqe = CompletionEntry::new(0, 0, 1, cid, Status::SUCCESS, false);
        let mut pdu = vec![pdu_type::CAPSULE_RESP, 0, 24, 0, 24, 0, 0, 0];
        pdu.extend_from_slice(&cqe.to_bytes());
        pdu
    };
    let mut done = Vec::new();
    let poll_until = |q: &mut Queue, n: usize, done: &mut Vec<_>| {
        for _ in 0..10_000 {
            q.poll(usize::MAX, |c| done.push((c.user_data, c.result)));
            if done.len() >= n {
                return;
            }
            std::thread::sleep(Duration::from_micros(100));
        }
        panic!("no completion");
    };
    q.submit(command::flush(1), None, 0, false, 1, Waiter::Poll)
        .unwrap();
    let first = sent_cid(&mut target);
    target.write_all(&resp(first)).unwrap();
    poll_until(&mut q, 1, &mut done);
    assert!(matches!(done[0], (1, Ok(_))), "{done:?}");
    q.submit(command::flush(1), None, 0, false, 2, Waiter::Poll)
        .unwrap();
    let second = sent_cid(&mut target);
    assert_ne!(first, second, "the reused slot carries a new generation");
    // The first command's response again: stale for the slot's current command.
    target.write_all(&resp(first)).unwrap();
    poll_until(&mut q, 2, &mut done);
    assert!(
        matches!(&done[1], (2, Err(nvme_core::Error::Transport { .. }))),
        "the new command is not completed by the stale response: {done:?}"
    );
    let failed = q.failed.clone().expect("the queue failed");
    assert!(
        matches!(&*failed, crate::TcpError::Malformed { what, .. } if what.contains("not outstanding")),
        "{failed}"
    );
}
