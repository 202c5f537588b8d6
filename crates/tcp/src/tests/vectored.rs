//! Vectored I/O over NVMe/TCP against the fake target: the data goes on the wire from and
//! into the pieces in order (pieces of any dword shape, no alignment), with and without
//! digests, across H2CData PDUs cut at piece boundaries and C2HData copied across them; the
//! target's disk holds exactly the concatenation; refusals (a short total, above MDTS, a
//! non-dword piece) return every piece untouched before anything is sent.

use std::sync::atomic::Ordering;
use std::time::Duration;

use nvme_core::command::{Read, Write};
use nvme_core::{DmaBuffer, Error, IoQueue, IoVec, PieceRule, QueuePairOptions, WriteFlags};

use super::{connect, pattern, poll_n};
use crate::fake::{Config, FakeTarget};
use crate::{TcpController, TcpOptions, TransportId};

fn pieces(c: &TcpController, sizes: &[usize], data: &[u8]) -> Box<IoVec> {
    let mut v = IoVec::boxed();
    for &s in sizes {
        v.push(c.alloc_buffer(s).unwrap()).unwrap();
    }
    v.copy_from_slice(data);
    v
}

/// Writes `sizes`-shaped pieces at `lba`, checks the target's disk, reads back vectored in
/// `read_sizes`-shaped pieces and plain.
fn round_trip(
    t: &FakeTarget,
    c: &TcpController,
    nsid: u32,
    lba: u64,
    sizes: &[usize],
    read_sizes: &[usize],
) {
    let ns = c.namespace(nsid).unwrap();
    let mut qp = c.create_queue_pair(QueuePairOptions::default()).unwrap();
    let total: usize = sizes.iter().sum();
    assert_eq!(total, read_sizes.iter().sum::<usize>());
    let blocks = (total / ns.block_size() as usize) as u32;
    let data = pattern(total, lba as u8 ^ 0x5a);
    let v = pieces(c, sizes, &data);
    let v = qp
        .execute_vectored(&ns, Write::new(lba, blocks), v, |c| panic!("{c:?}"))
        .unwrap();
    assert_eq!(
        v.iter().map(DmaBuffer::len).collect::<Vec<_>>(),
        sizes,
        "every piece, in order"
    );
    let offset = (lba * u64::from(ns.block_size())) as usize;
    assert_eq!(
        t.disk(nsid, offset, total),
        data,
        "target got the pieces in order"
    );
    let r = qp
        .execute_vectored(
            &ns,
            Read::new(lba, blocks),
            pieces(c, read_sizes, &vec![0; total]),
            |c| panic!("{c:?}"),
        )
        .unwrap();
    assert_eq!(r.to_vec(), data, "vectored read");
    let plain = qp
        .read(&ns, lba, blocks, c.alloc_buffer(total).unwrap())
        .unwrap();
    assert_eq!(&plain[..total], &data[..]);
}

#[test]
fn unaligned_pieces_round_trip_in_order() {
    let t = FakeTarget::start(Config::default());
    let c = connect(&t);
    // 512-byte blocks: 20 blocks in odd dword-sized pieces; read back in another shape.
    round_trip(
        &t,
        &c,
        2,
        10,
        &[12, 500, 4096, 3076, 2556],
        &[5120, 4, 4, 5112],
    );
    // 16 scattered 4 KiB pages of 4 KiB blocks: above the in-capsule size, so by R2T with
    // H2CData PDUs of at most MAXH2CDATA (8 KiB) that end at piece boundaries.
    round_trip(&t, &c, 1, 32, &[4096; 16], &[8192; 8]);
    // Pieces larger than MAXH2CDATA: several PDUs per piece.
    round_trip(&t, &c, 1, 64, &[20480, 4096, 8192], &[4096, 28672]);
}

#[test]
fn with_digests() {
    let t = FakeTarget::start(Config::default());
    let trid = TransportId::parse(&format!("{} hdgst:1 ddgst:1", t.trid())).unwrap();
    let c = TcpController::connect(&trid, TcpOptions::default()).unwrap();
    round_trip(&t, &c, 2, 0, &[1024, 2048, 1536, 508, 4], &[512; 10]);
}

#[test]
fn asynchronous_vectored_requests() {
    let t = FakeTarget::start(Config::default());
    let c = connect(&t);
    let ns = c.namespace(2).unwrap();
    let mut qp = c.create_queue_pair(QueuePairOptions::default()).unwrap();
    let mut want = Vec::new();
    for i in 0..6u64 {
        let data = pattern(2048, i as u8);
        let v = pieces(&c, &[1024, 512, 512], &data);
        qp.submit_writev(&ns, i * 4, 4, v, WriteFlags::NONE, i)
            .unwrap();
        want.push(data);
    }
    for done in poll_n(&mut qp, 6, Duration::from_secs(10)) {
        done.result.unwrap();
        assert!(done.buffer.is_none());
        let v = done.pieces.expect("pieces back");
        assert_eq!(v.to_vec(), want[done.user_data as usize]);
    }
    for (i, data) in want.iter().enumerate() {
        assert_eq!(&t.disk(2, i * 2048, 2048), data);
    }
}

#[test]
fn refusals_return_every_piece_untouched_and_send_nothing() {
    let t = FakeTarget::start(Config {
        mdts: 1,
        ..Config::default()
    });
    let c = connect(&t);
    let ns = c.namespace(2).unwrap();
    let mut qp = c.create_queue_pair(QueuePairOptions::default()).unwrap();
    let sent = t.counters().io_commands.load(Ordering::Relaxed);
    let mut check = |sizes: &[usize], blocks: u32| -> Error {
        let total = sizes.iter().sum();
        let data = pattern(total, 3);
        let f = qp
            .submit_writev(
                &ns,
                0,
                blocks,
                pieces(&c, sizes, &data),
                WriteFlags::NONE,
                1,
            )
            .unwrap_err();
        let v = f.pieces.expect("the pieces come back");
        assert_eq!(v.len(), sizes.len());
        assert_eq!(v.to_vec(), data, "untouched");
        f.error
    };
    let e = check(&[512, 512], 3);
    assert!(
        matches!(
            e,
            Error::IoVecLength {
                total: 1024,
                needed: 1536,
                ..
            }
        ),
        "{e}"
    );
    let e = check(&[4096, 4096, 512], 17);
    assert!(
        matches!(
            e,
            Error::IoVecTooLarge {
                bytes: 8704,
                max_per_command: 8192
            }
        ),
        "{e}"
    );
    let e = check(&[510, 2], 1);
    assert!(
        matches!(
            e,
            Error::IoVecPiece {
                index: 0,
                rule: PieceRule::LengthNotDword,
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(
        t.counters().io_commands.load(Ordering::Relaxed),
        sent,
        "nothing sent"
    );
}
