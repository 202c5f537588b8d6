//! Vectored I/O (one Read/Write/Compare whose data is an `IoVec` of pieces) through the PCIe
//! queue pair against the emulator: every piece shape (one piece; 16 scattered pool pages as
//! a PRP list and as an SGL segment; pieces of one region out of order; unaligned pieces with
//! SGLs, refused by index and rule without them), every refusal (too short, a non-dword
//! piece, above MDTS, a foreign piece, a command that cannot be vectored) returning every
//! piece untouched before anything reaches the device, Compare's status, and data read back
//! (vectored and plain) equal to data written.

use std::time::Duration;

use common::pattern;
use nvme_driver::command::{Compare, Read, Write};
use nvme_driver::spec::status::media;
use nvme_driver::{
    Controller, ControllerOptions, DmaBuffer, Error, IoFailure, IoQueue, IoVec, Namespace,
    PieceRule, QueuePair, QueuePairOptions, TimeoutAction, WriteFlags,
};
use nvme_sim::{SimConfig, SimController};

mod common;

const PAGE: usize = 4096;

fn start(sgl: bool) -> (SimController, Controller) {
    let config = SimConfig {
        sgl,
        ..SimConfig::default()
    };
    common::start_sim(config, ControllerOptions::default(), false)
}

fn qp(ctrl: &Controller) -> QueuePair {
    ctrl.create_queue_pair(QueuePairOptions {
        timeout: Duration::from_secs(10),
        ..QueuePairOptions::default()
    })
    .expect("queue pair")
}

/// A vector of the given pieces, each filled with the next bytes of `data`.
fn vec_of(pieces: Vec<DmaBuffer>, data: &[u8]) -> Box<IoVec> {
    let mut v = IoVec::boxed();
    for p in pieces {
        v.push(p).expect("within capacity");
    }
    assert_eq!(v.copy_from_slice(data), data.len().min(v.total_bytes()));
    v
}

/// `n` separate pool buffers of `len` bytes (scattered in IOVA space).
fn scattered(ctrl: &Controller, n: usize, len: usize) -> Vec<DmaBuffer> {
    // Allocate twice as many and keep every other one, so no two pieces are adjacent.
    let mut all: Vec<DmaBuffer> = (0..2 * n)
        .map(|_| ctrl.alloc_buffer(len).unwrap())
        .collect();
    let kept: Vec<DmaBuffer> = all.drain(..).step_by(2).collect();
    kept
}

/// One region cut at `sizes` (in order).
fn cut(ctrl: &Controller, sizes: &[usize]) -> Vec<DmaBuffer> {
    let total: usize = sizes.iter().sum();
    let mut rest = ctrl.alloc_buffer(total).unwrap();
    let mut out = Vec::new();
    for &s in &sizes[..sizes.len() - 1] {
        let (a, b) = rest.split_at(s).unwrap();
        out.push(a);
        rest = b;
    }
    out.push(rest);
    out
}

fn read_plain(
    ctrl: &Controller,
    q: &mut QueuePair,
    ns: &Namespace,
    lba: u64,
    len: usize,
) -> Vec<u8> {
    let blocks = (len / ns.block_size() as usize) as u32;
    let buf = ctrl.alloc_buffer(len).unwrap();
    q.read(ns, lba, blocks, buf).unwrap()[..len].to_vec()
}

fn writev(q: &mut QueuePair, ns: &Namespace, lba: u64, v: Box<IoVec>) -> Box<IoVec> {
    let blocks = (v.total_bytes() / ns.block_size() as usize) as u32;
    let cmd = Write::new(lba, blocks);
    q.execute_vectored(ns, cmd, v, |c| panic!("unexpected {c:?}"))
        .unwrap()
}

fn readv(q: &mut QueuePair, ns: &Namespace, lba: u64, v: Box<IoVec>) -> Box<IoVec> {
    let blocks = (v.total_bytes() / ns.block_size() as usize) as u32;
    q.execute_vectored(ns, Read::new(lba, blocks), v, |c| {
        panic!("unexpected {c:?}")
    })
    .unwrap()
}

/// Writes `pieces` vectored at `lba`, reads the range back plain and vectored into `fresh`
/// pieces, and checks all three agree; returns the emulator's SGL count.
fn round_trip(
    sim: &SimController,
    ctrl: &Controller,
    q: &mut QueuePair,
    ns: &Namespace,
    lba: u64,
    (pieces, fresh): (Vec<DmaBuffer>, Vec<DmaBuffer>),
    seed: u64,
) -> u64 {
    let sgl_before = sim.stats().sgl_commands;
    let lens: Vec<usize> = pieces.iter().map(DmaBuffer::len).collect();
    let total: usize = lens.iter().sum();
    let data = pattern(total, seed);
    let v = writev(q, ns, lba, vec_of(pieces, &data));
    assert_eq!(v.len(), lens.len(), "every piece comes back");
    assert_eq!(
        v.iter().map(DmaBuffer::len).collect::<Vec<_>>(),
        lens,
        "in order"
    );
    assert_eq!(v.to_vec(), data, "the written pieces are untouched");
    assert_eq!(
        read_plain(ctrl, q, ns, lba, total),
        data,
        "plain read of a vectored write"
    );
    let r = readv(q, ns, lba, vec_of(fresh, &vec![0; total]));
    assert_eq!(r.to_vec(), data, "vectored read of a vectored write");
    sim.stats().sgl_commands - sgl_before
}

#[test]
fn one_piece_with_and_without_sgl() {
    for sgl in [true, false] {
        let (sim, ctrl) = start(sgl);
        let ns = ctrl.namespace(1).unwrap();
        let mut q = qp(&ctrl);
        let sgls = round_trip(
            &sim,
            &ctrl,
            &mut q,
            &ns,
            8,
            (scattered(&ctrl, 1, 3 * PAGE), scattered(&ctrl, 1, 3 * PAGE)),
            1,
        );
        // Vectored write, plain read, vectored read.
        assert_eq!(sgls, if sgl { 3 } else { 0 });
        assert_eq!(q.stats().vectored_requests, 2);
    }
}

#[test]
fn sixteen_scattered_pool_pages_as_a_prp_list_and_as_an_sgl_segment() {
    for sgl in [true, false] {
        let (sim, ctrl) = start(sgl);
        for nsid in [1, 2] {
            let ns = ctrl.namespace(nsid).unwrap();
            let mut q = qp(&ctrl);
            let sgls = round_trip(
                &sim,
                &ctrl,
                &mut q,
                &ns,
                40,
                (scattered(&ctrl, 16, PAGE), scattered(&ctrl, 16, PAGE)),
                u64::from(nsid) + 10,
            );
            assert_eq!(sgls, if sgl { 3 } else { 0 }, "sgl offered: {sgl}");
        }
    }
}

#[test]
fn two_pages_use_prp2_and_multi_page_pieces_chain() {
    let (sim, ctrl) = start(false);
    let ns = ctrl.namespace(1).unwrap();
    let mut q = qp(&ctrl);
    // Two single pages: PRP1 + PRP2 (no list).
    round_trip(
        &sim,
        &ctrl,
        &mut q,
        &ns,
        0,
        (scattered(&ctrl, 2, PAGE), scattered(&ctrl, 2, PAGE)),
        3,
    );
    // Pieces of several pages each; the first starts mid-page, the last ends mid-page
    // (both allowed in a PRP chain, NVMe Base §4.1.1).
    let mut first = ctrl
        .alloc_buffer(2 * PAGE)
        .unwrap()
        .split_at(PAGE / 2)
        .unwrap()
        .1;
    assert_eq!(first.len(), PAGE + PAGE / 2);
    first.fill(0);
    let last = ctrl
        .alloc_buffer(2 * PAGE)
        .unwrap()
        .split_at(PAGE + 512)
        .unwrap()
        .0;
    let middle = ctrl.alloc_buffer(3 * PAGE).unwrap();
    let fresh = vec![
        ctrl.alloc_buffer(2 * PAGE)
            .unwrap()
            .split_at(PAGE / 2)
            .unwrap()
            .1,
        ctrl.alloc_buffer(3 * PAGE).unwrap(),
        ctrl.alloc_buffer(2 * PAGE)
            .unwrap()
            .split_at(PAGE + 512)
            .unwrap()
            .0,
    ];
    let sgls = round_trip(
        &sim,
        &ctrl,
        &mut q,
        &ns,
        100,
        (vec![first, middle, last], fresh),
        4,
    );
    assert_eq!(sgls, 0);
}

#[test]
fn pieces_of_one_region_out_of_order() {
    for sgl in [true, false] {
        let (sim, ctrl) = start(sgl);
        let ns = ctrl.namespace(1).unwrap();
        let mut q = qp(&ctrl);
        let mut pieces = cut(&ctrl, &[PAGE; 8]);
        pieces.reverse();
        let mut fresh = cut(&ctrl, &[PAGE; 8]);
        fresh.swap(0, 5);
        round_trip(&sim, &ctrl, &mut q, &ns, 300, (pieces, fresh), 5);
    }
}

#[test]
fn unaligned_pieces_go_as_sgl_data_blocks() {
    let (sim, ctrl) = start(true);
    let ns = ctrl.namespace(1).unwrap();
    let mut q = qp(&ctrl);
    // 512 + 1536 + 3072 + 516 + 508 + 2048 = 8192 bytes, 16 blocks; pieces start and end
    // inside pages (dword multiples, as SGLs need).
    let sizes = [512, 1536, 3072, 516, 508, 2048];
    let sgls = round_trip(
        &sim,
        &ctrl,
        &mut q,
        &ns,
        500,
        (cut(&ctrl, &sizes), cut(&ctrl, &sizes)),
        6,
    );
    assert_eq!(sgls, 3);
}

/// A refused request: every piece comes back, in order, with its content; nothing reached
/// the device.
fn refused(
    sim: &SimController,
    q: &mut QueuePair,
    ns: &Namespace,
    lba: u64,
    blocks: u32,
    pieces: Vec<DmaBuffer>,
) -> Error {
    let lens: Vec<usize> = pieces.iter().map(DmaBuffer::len).collect();
    let data = pattern(lens.iter().sum(), 99);
    let v = vec_of(pieces, &data);
    let ptrs: Vec<u64> = v.iter().map(|p| p.iova().0).collect();
    let before = sim.stats().io_commands();
    let IoFailure {
        error,
        buffer,
        pieces,
    } = q
        .submit_writev(ns, lba, blocks, v, WriteFlags::NONE, 7)
        .unwrap_err();
    assert!(buffer.is_none());
    let v = pieces.expect("the pieces come back");
    assert_eq!(
        v.iter().map(|p| p.iova().0).collect::<Vec<_>>(),
        ptrs,
        "{error}: in order"
    );
    assert_eq!(v.to_vec(), data, "{error}: untouched");
    assert_eq!(
        sim.stats().io_commands(),
        before,
        "{error}: reached the device"
    );
    assert_eq!(q.in_flight(), 0);
    error
}

#[test]
fn unaligned_pieces_without_sgl_are_refused_by_index_and_rule() {
    let (sim, ctrl) = start(false);
    let ns = ctrl.namespace(1).unwrap();
    let mut q = qp(&ctrl);
    // Piece 1 starts inside a page.
    let pieces = vec![
        ctrl.alloc_buffer(PAGE).unwrap(),
        ctrl.alloc_buffer(PAGE).unwrap().split_at(512).unwrap().1,
    ];
    let starts_mid = pieces[1].iova().0;
    match refused(&sim, &mut q, &ns, 0, 15, pieces) {
        Error::IoVecPiece {
            index: 1,
            iova,
            len: 3584,
            rule: PieceRule::StartNotPageAligned { page_size: PAGE },
        } => {
            assert_eq!(iova, starts_mid)
        }
        e => panic!("{e}"),
    }
    // Piece 0 ends inside a page.
    let pieces = vec![
        ctrl.alloc_buffer(PAGE).unwrap().split_at(512).unwrap().0,
        ctrl.alloc_buffer(PAGE).unwrap(),
    ];
    let e = refused(&sim, &mut q, &ns, 0, 9, pieces);
    assert!(
        matches!(
            e,
            Error::IoVecPiece {
                index: 0,
                rule: PieceRule::EndNotPageAligned { .. },
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("piece 0"), "{e}");
    // The same shapes go through once SGLs are offered.
    let (sim, ctrl) = start(true);
    let ns = ctrl.namespace(1).unwrap();
    let mut q = qp(&ctrl);
    let pieces = vec![
        ctrl.alloc_buffer(PAGE).unwrap().split_at(512).unwrap().0,
        ctrl.alloc_buffer(PAGE).unwrap(),
    ];
    let fresh = vec![
        ctrl.alloc_buffer(PAGE).unwrap().split_at(512).unwrap().0,
        ctrl.alloc_buffer(PAGE).unwrap(),
    ];
    assert_eq!(
        round_trip(&sim, &ctrl, &mut q, &ns, 0, (pieces, fresh), 8),
        3
    );
}

#[test]
fn bad_totals_and_pieces_are_refused_with_every_piece_back() {
    let (sim, ctrl) = start(true);
    let ns = ctrl.namespace(1).unwrap();
    let mut q = qp(&ctrl);
    // Too short: 15 pages for 16 pages' blocks.
    match refused(&sim, &mut q, &ns, 0, 128, scattered(&ctrl, 15, PAGE)) {
        Error::IoVecLength {
            pieces: 15,
            total,
            needed,
        } => {
            assert_eq!((total, needed), (15 * PAGE, 16 * PAGE))
        }
        e => panic!("{e}"),
    }
    // Too long as well.
    let e = refused(&sim, &mut q, &ns, 0, 7, scattered(&ctrl, 1, PAGE));
    assert!(matches!(e, Error::IoVecLength { .. }), "{e}");
    // A piece whose length is not a dword multiple.
    let e = refused(&sim, &mut q, &ns, 0, 2, cut(&ctrl, &[6, 1018]));
    assert!(
        matches!(
            e,
            Error::IoVecPiece {
                index: 0,
                len: 6,
                rule: PieceRule::LengthNotDword,
                ..
            }
        ),
        "{e}"
    );
    // Piece 1 then starts at a non-dword address.
    let mut v = cut(&ctrl, &[6, 1020]);
    let odd = v.pop().unwrap();
    assert_eq!(odd.iova().0 % 4, 2);
    let e = refused(
        &sim,
        &mut q,
        &ns,
        0,
        2,
        vec![ctrl.alloc_buffer(PAGE).unwrap().split_at(4).unwrap().0, odd],
    );
    assert!(
        matches!(
            e,
            Error::IoVecPiece {
                index: 1,
                rule: PieceRule::AddressNotDword,
                ..
            }
        ),
        "{e}"
    );
    // Empty vector, zero blocks.
    let e = refused(&sim, &mut q, &ns, 0, 1, Vec::new());
    assert!(matches!(e, Error::ZeroLength), "{e}");
    // Outside the namespace.
    let e = refused(
        &sim,
        &mut q,
        &ns,
        ns.blocks() - 4,
        8,
        scattered(&ctrl, 1, PAGE),
    );
    assert!(matches!(e, Error::LbaOutOfRange { .. }), "{e}");
}

#[test]
fn above_mdts_is_refused_not_split() {
    let (sim, ctrl) = start(true);
    let ns = ctrl.namespace(1).unwrap();
    let mut q = qp(&ctrl);
    let max = q.max_transfer_bytes();
    let n = max / (8 * 1024) + 1;
    assert!(n <= IoVec::CAPACITY);
    let bytes = n * 8 * 1024;
    let blocks = (bytes / 512) as u32;
    match refused(&sim, &mut q, &ns, 0, blocks, scattered(&ctrl, n, 8 * 1024)) {
        Error::IoVecTooLarge {
            bytes: b,
            max_per_command,
        } => {
            assert_eq!((b, max_per_command), (bytes, max))
        }
        e => panic!("{e}"),
    }
    // Exactly MDTS goes through as one command.
    let n = max / (8 * 1024);
    let before = sim.stats().io_commands();
    round_trip(
        &sim,
        &ctrl,
        &mut q,
        &ns,
        0,
        (scattered(&ctrl, n, 8 * 1024), scattered(&ctrl, n, 8 * 1024)),
        12,
    );
    // Write, plain read, vectored read: one command each.
    assert_eq!(sim.stats().io_commands() - before, 3);
}

#[test]
fn a_foreign_piece_and_a_copy_are_refused() {
    let (sim, ctrl) = start(true);
    let (_sim2, other) = start(true);
    let ns = ctrl.namespace(1).unwrap();
    let mut q = qp(&ctrl);
    let pieces = vec![
        ctrl.alloc_buffer(PAGE).unwrap(),
        other.alloc_buffer(PAGE).unwrap(),
    ];
    let e = refused(&sim, &mut q, &ns, 0, 16, pieces);
    assert!(matches!(e, Error::ForeignBuffer { .. }), "{e}");
    // A command that does not move data over its range cannot be vectored.
    let v = vec_of(scattered(&ctrl, 1, PAGE), &[]);
    let mut list = ctrl.alloc_buffer(PAGE).unwrap();
    let mut ranges = nvme_driver::command::CopyRanges::new(&mut list);
    ranges.push(0, 1).unwrap();
    let copy = ranges.copy_to(100);
    let f = q.submit_vectored(&ns, copy, v, 0).unwrap_err();
    assert!(matches!(f.error, Error::InvalidRequest(_)), "{}", f.error);
    assert_eq!(f.pieces.unwrap().len(), 1);
}

#[test]
fn compare_vectored_matches_and_mismatches() {
    let (_sim, ctrl) = start(true);
    let ns = ctrl.namespace(1).unwrap();
    let mut q = qp(&ctrl);
    let data = pattern(4 * PAGE, 21);
    writev(&mut q, &ns, 64, vec_of(scattered(&ctrl, 4, PAGE), &data));
    let same = vec_of(scattered(&ctrl, 4, PAGE), &data);
    let same = q
        .execute_vectored(&ns, Compare::new(64, 32), same, |_| {})
        .expect("the same data compares equal");
    assert_eq!(same.len(), 4);
    let mut other = data.clone();
    other[3 * PAGE + 17] ^= 1;
    let f = q
        .execute_vectored(
            &ns,
            Compare::new(64, 32),
            vec_of(scattered(&ctrl, 4, PAGE), &other),
            |_| {},
        )
        .unwrap_err();
    let status = f.error.status().expect("a status");
    assert_eq!(status.sc(), media::COMPARE_FAILURE, "{}", f.error);
    assert_eq!(
        f.pieces.expect("pieces back with the status").to_vec(),
        other
    );
}

#[test]
fn asynchronous_vectored_requests_complete_with_their_pieces() {
    let (_sim, ctrl) = start(false);
    let ns = ctrl.namespace(1).unwrap();
    let mut q = qp(&ctrl);
    let mut expect = Vec::new();
    for i in 0..8u64 {
        let data = pattern(4 * PAGE, 100 + i);
        let v = vec_of(scattered(&ctrl, 4, PAGE), &data);
        q.submit_writev(&ns, i * 32, 32, v, WriteFlags::NONE, i)
            .unwrap();
        expect.push(data);
    }
    let mut done = 0;
    while done < 8 {
        q.poll(|c| {
            c.result.unwrap();
            assert!(c.buffer.is_none());
            let v = c.pieces.expect("pieces");
            assert_eq!(v.to_vec(), expect[c.user_data as usize]);
            done += 1;
        });
    }
    for (i, data) in expect.iter().enumerate() {
        assert_eq!(
            &read_plain(&ctrl, &mut q, &ns, i as u64 * 32, 4 * PAGE),
            data
        );
    }
}

#[test]
fn a_full_queue_refuses_with_every_piece_back() {
    let (_sim, ctrl) = start(true);
    let ns = ctrl.namespace(1).unwrap();
    let mut q = ctrl
        .create_queue_pair(QueuePairOptions {
            depth: 2,
            timeout: Duration::from_secs(10),
            ..QueuePairOptions::default()
        })
        .unwrap();
    let cap = usize::from(q.capacity());
    for i in 0..cap {
        let v = vec_of(scattered(&ctrl, 2, PAGE), &pattern(2 * PAGE, i as u64));
        q.submit_readv(&ns, 0, 16, v, i as u64).unwrap();
    }
    let data = pattern(2 * PAGE, 77);
    let v = vec_of(scattered(&ctrl, 2, PAGE), &data);
    let f = q.submit_readv(&ns, 0, 16, v, 99).unwrap_err();
    assert!(matches!(f.error, Error::QueueFull { .. }), "{}", f.error);
    assert_eq!(f.pieces.expect("pieces back").to_vec(), data, "untouched");
    let mut done = 0;
    while done < cap {
        q.poll(|c| {
            c.result.unwrap();
            assert_eq!(c.pieces.expect("pieces").len(), 2);
            done += 1;
        });
    }
}

/// A timed-out vectored write is reported without its pieces (the device may still read
/// them); they stay in the request's slot, and its SGL segment in the slot's page, until the
/// late completion, and the data the device then writes is the data of those pieces.
#[test]
fn a_timed_out_vectored_request_keeps_its_pieces_until_the_late_completion() {
    // Abort only: with the default abort-then-reset, a reset one timeout after the declined
    // Abort (before the 700 ms late completion) would release the slot instead.
    let config = SimConfig {
        sgl: true,
        ..SimConfig::default()
    };
    let options = ControllerOptions {
        timeout_action: TimeoutAction::Abort,
        ..ControllerOptions::default()
    };
    let (sim, ctrl) = common::start_sim(config, options, false);
    let ns = ctrl.namespace(1).unwrap();
    let mut q = ctrl
        .create_queue_pair(QueuePairOptions {
            depth: 8,
            timeout: Duration::from_millis(150),
            ..QueuePairOptions::default()
        })
        .unwrap();
    sim.faults().delay_execution_with(
        1,
        nvme_sim::ExecutionDelay::new(Duration::from_millis(700)).not_abortable(),
    );
    let data = pattern(4 * PAGE, 31);
    let v = vec_of(scattered(&ctrl, 4, PAGE), &data);
    let f = q
        .execute_vectored(&ns, Write::new(0, 32), v, |c| panic!("{c:?}"))
        .unwrap_err();
    assert!(matches!(f.error, Error::Timeout { .. }), "{}", f.error);
    assert!(f.pieces.is_none(), "the device may still read the pieces");
    assert_eq!(q.retired(), 1);
    // Another vectored request meanwhile uses another slot and its own segment.
    let other = pattern(4 * PAGE, 32);
    writev(&mut q, &ns, 100, vec_of(scattered(&ctrl, 4, PAGE), &other));
    let start = std::time::Instant::now();
    while q.retired() > 0 {
        q.poll(|c| panic!("a late completion is not delivered twice: {c:?}"));
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "no late completion"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    assert_eq!(q.stats().late_completions, 1);
    assert_eq!(
        sim.read_disk(1, 0, 4 * PAGE),
        data,
        "the late write wrote its own pieces"
    );
    assert_eq!(sim.read_disk(1, 100 * 512, 4 * PAGE), other);
}
