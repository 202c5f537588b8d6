//! Metadata and end-to-end protection information against the emulator (NVM CS §5.2): every
//! combination of layout (extended LBA, separate metadata of PI size and larger, PI first or
//! last) x PI type 1/2/3 x PRACT 0/1 x a corrupted guard / application tag / reference tag,
//! through the typed `Protected` commands, in the 16-bit guard format and the 64-bit guard one
//! (NVM CS §5.2.1.3: CRC-64 NVMe, 48-bit reference tag in CDW14 + CDW3, read from the Extended
//! LBA Formats); data and PI read back are compared with what was written, and the check
//! errors come back typed (`Error::ProtectionCheck`).

mod common;

use nvme_driver::protection::{generate_pi, verify_pi};
use nvme_driver::{
    command::{Compare, Read, Verify, Write},
    Controller, ControllerOptions, Error, IoQueue, IoVec, MetadataLayout, Namespace, NvmCommand,
    PiCheck, PiFormat, PiType, Prinfo, ProtectableCommand, Protected, Protection, QueuePair,
    QueuePairOptions,
};
use nvme_sim::{SimConfig, SimController, SimNamespace, PI_FIRST};

type Layout = (u32, u16, bool, bool);

/// (block size, metadata size, extended, PI first) of the namespaces each PI type is tried on.
const LAYOUTS: [Layout; 4] = [
    (512, 8, true, false),
    (512, 8, false, false),
    (4096, 16, false, false),
    (4096, 16, true, true),
];

/// The same for the 64-bit guard format (16-byte PI: metadata of 16 bytes or more).
const LAYOUTS_64: [Layout; 4] = [
    (512, 16, true, false),
    (512, 16, false, false),
    (4096, 64, false, false),
    (4096, 64, true, true),
];

fn start(pi: u8) -> (SimController, Controller) {
    start_with(pi, PiFormat::Guard16, &LAYOUTS)
}

fn start_with(pi: u8, pi_format: PiFormat, layouts: &[Layout]) -> (SimController, Controller) {
    let namespaces = layouts
        .iter()
        .enumerate()
        .map(|(i, &(block_size, ms, extended, first))| SimNamespace {
            nsid: i as u32 + 1,
            block_size,
            blocks: 256,
            metadata_size: ms,
            extended,
            protection: pi | if first { PI_FIRST } else { 0 },
            pi_format,
        })
        .collect();
    common::start_sim(
        SimConfig {
            namespaces,
            ..SimConfig::default()
        },
        ControllerOptions::default(),
        false,
    )
}

fn qp(ctrl: &Controller) -> QueuePair {
    ctrl.create_queue_pair(QueuePairOptions::default()).unwrap()
}

/// Runs `cmd` with `data` (and `md` when the format moves separate metadata) as its buffers;
/// returns what the buffers hold afterwards.
fn run<C: ProtectableCommand>(
    q: &mut QueuePair,
    ctrl: &Controller,
    ns: &Namespace,
    cmd: Protected<C>,
    data: &[u8],
    md: &[u8],
) -> Result<(Vec<u8>, Vec<u8>), Error> {
    let blocks = u64::from(cmd.cmd.range().unwrap().blocks);
    let pract = cmd.protection.is_pract();
    let (dlen, mlen) = (
        ns.format().data_bytes(blocks, pract),
        ns.format().metadata_bytes(blocks, pract),
    );
    let mut buf = ctrl.alloc_buffer(dlen.max(1)).unwrap();
    buf[..data.len().min(dlen)].copy_from_slice(&data[..data.len().min(dlen)]);
    let has_data = cmd.opcode().has_data();
    if mlen == 0 {
        let buf = has_data.then_some(buf);
        let back = q.execute(ns, cmd, buf).map_err(|f| f.error)?;
        return Ok((
            back.map(|b| b[..dlen].to_vec()).unwrap_or_default(),
            Vec::new(),
        ));
    }
    let mut m = ctrl.alloc_buffer(mlen).unwrap();
    m[..md.len().min(mlen)].copy_from_slice(&md[..md.len().min(mlen)]);
    let mut v = IoVec::boxed();
    v.push(m).unwrap();
    let (b, v) = q
        .execute_with_metadata(ns, cmd, buf, v, |_| panic!("no other request"))
        .map_err(|f| f.error)?;
    Ok((b[..dlen].to_vec(), v.get(0).unwrap()[..mlen].to_vec()))
}

fn checks_for(pi: PiType) -> Prinfo {
    match pi {
        // Type 3 has no reference tag to check (PRCHK bit 0 is Invalid Protection Information).
        PiType::Type3 => Prinfo::CHECK_GUARD.union(Prinfo::CHECK_APP_TAG),
        _ => Prinfo::CHECK_ALL,
    }
}

/// The initial reference tag of a command at `lba`: type 1 must use the LBA, type 2 may use
/// any seed (this proves CDW14, and on the 64-bit guard CDW3's bits 47:32, are honoured; the
/// 16-bit guard drops those bits on both sides), type 3's is opaque.
fn ref_seed(pi: PiType, lba: u64) -> u64 {
    match pi {
        PiType::Type1 => lba,
        _ => 0x35_5A00_0000 | lba,
    }
}

fn pattern(len: usize, seed: u64) -> Vec<u8> {
    common::pattern(len, seed)
}

fn pi_byte(ns: &Namespace, block: usize, field: usize) -> (bool, usize) {
    let f = ns.format();
    let (bs, ms) = (f.block_size() as usize, usize::from(f.metadata_size()));
    match f.layout() {
        MetadataLayout::Extended => (true, block * (bs + ms) + bs + f.pi_offset() + field),
        _ => (false, block * ms + f.pi_offset() + field),
    }
}

#[test]
fn every_layout_type_and_pract_round_trips_and_checks() {
    round_trips_and_checks(PiFormat::Guard16, &LAYOUTS);
}

#[test]
fn the_64_bit_guard_format_round_trips_and_checks() {
    round_trips_and_checks(PiFormat::Guard64, &LAYOUTS_64);
}

fn round_trips_and_checks(pi_format: PiFormat, layouts: &[Layout]) {
    // Where the application and reference tags sit in the tuple.
    let (app_at, ref_at) = match pi_format {
        PiFormat::Guard64 => (8, 10),
        _ => (2, 4),
    };
    for pi in [PiType::Type1, PiType::Type2, PiType::Type3] {
        let (sim, ctrl) = start_with(pi as u8, pi_format, layouts);
        let mut q = qp(&ctrl);
        for nsid in 1..=layouts.len() as u32 {
            let ns = ctrl.namespace(nsid).unwrap();
            let f = ns.format();
            let what = format!("ns {nsid} {f}");
            assert_eq!(f.pi_type(), Some(pi), "{what}");
            assert_eq!(f.pi_format(), pi_format, "{what}: read from the ELBAF");
            let checks = checks_for(pi);
            let blocks = 4u32;
            let bs = f.block_size() as usize;

            // PRACT = 1: the controller generates the PI; read back raw, it verifies host-side.
            let lba = 8;
            let p = Protection::pract(lba, checks)
                .ref_tag(ref_seed(pi, lba))
                .app_tag(0x1234, 0xFFFF);
            let pract_bytes = f.data_bytes(u64::from(blocks), true);
            let data = pattern(pract_bytes, u64::from(nsid));
            let md_in = pattern(f.metadata_bytes(u64::from(blocks), true), 99);
            run(
                &mut q,
                &ctrl,
                &ns,
                Protected::new(Write::new(lba, blocks), p),
                &data,
                &md_in,
            )
            .unwrap_or_else(|e| panic!("{what}: PRACT write: {e}"));
            let raw = Protection::pass(lba, Prinfo::NONE)
                .ref_tag(p.ref_tag)
                .app_tag(0x1234, 0xFFFF);
            let (d, m) = run(
                &mut q,
                &ctrl,
                &ns,
                Protected::new(Read::new(lba, blocks), raw),
                &[],
                &[],
            )
            .unwrap_or_else(|e| panic!("{what}: raw read: {e}"));
            assert_eq!(verify_pi(&f, &raw, checks, &d, &m), Ok(()), "{what}");
            for i in 0..blocks as usize {
                let stride = f.data_bytes(1, false);
                let host = f.data_bytes(1, true);
                assert!(
                    d[i * stride..i * stride + bs] == data[i * host..i * host + bs],
                    "{what}"
                );
            }
            // PRACT = 1 read with every check: the data the host wrote, PI stripped when only PI.
            let (d2, _) = run(
                &mut q,
                &ctrl,
                &ns,
                Protected::new(Read::new(lba, blocks), p),
                &[],
                &[],
            )
            .unwrap_or_else(|e| panic!("{what}: PRACT read: {e}"));
            // The data as written (with metadata > PI the PI bytes are the controller's).
            let host = f.data_bytes(1, true);
            for i in 0..blocks as usize {
                let block = i * host..i * host + bs;
                assert!(d2[block.clone()] == data[block], "{what}: block {i}");
            }
            assert_eq!(d2.len(), data.len());
            run(
                &mut q,
                &ctrl,
                &ns,
                Protected::new(Verify::new(lba, blocks), p),
                &[],
                &[],
            )
            .unwrap_or_else(|e| panic!("{what}: verify: {e}"));

            // PRACT = 0: host-generated PI, checked on the way in, read back byte for byte.
            let lba = 32;
            let p = Protection::pass(lba, checks)
                .ref_tag(ref_seed(pi, lba))
                .app_tag(0xA5A5, 0xFFFF);
            let mut data = pattern(f.data_bytes(u64::from(blocks), false), 7 + u64::from(nsid));
            let mut md = pattern(f.metadata_bytes(u64::from(blocks), false), 8);
            assert_eq!(generate_pi(&f, &p, &mut data, &mut md), Ok(blocks as usize));
            run(
                &mut q,
                &ctrl,
                &ns,
                Protected::new(Write::new(lba, blocks), p),
                &data,
                &md,
            )
            .unwrap_or_else(|e| panic!("{what}: host-PI write: {e}"));
            let (d, m) = run(
                &mut q,
                &ctrl,
                &ns,
                Protected::new(Read::new(lba, blocks), p),
                &[],
                &[],
            )
            .unwrap_or_else(|e| panic!("{what}: host-PI read: {e}"));
            assert!(d == data && m == md, "{what}: host-PI data read back");
            run(
                &mut q,
                &ctrl,
                &ns,
                Protected::new(Compare::new(lba, blocks), p),
                &data,
                &md,
            )
            .unwrap_or_else(|e| panic!("{what}: compare: {e}"));

            // Each corrupted field: refused on a checked write (nothing stored), stored by an
            // unchecked one, then found by a checked read and by Verify.
            for (field, check) in [
                (0, PiCheck::Guard),
                (app_at, PiCheck::AppTag),
                (ref_at, PiCheck::RefTag),
            ] {
                let lba = 64 + 8 * field as u64;
                let p = Protection::pass(lba, checks)
                    .ref_tag(ref_seed(pi, lba))
                    .app_tag(0x0F0F, 0xFFFF);
                let mut data = pattern(f.data_bytes(u64::from(blocks), false), lba);
                let mut md = pattern(f.metadata_bytes(u64::from(blocks), false), lba + 1);
                generate_pi(&f, &p, &mut data, &mut md).unwrap();
                let (inline, at) = pi_byte(&ns, 2, field);
                if inline {
                    data[at] ^= 0x10;
                } else {
                    md[at] ^= 0x10;
                }
                let w = Protected::new(Write::new(lba, blocks), p);
                let r = run(&mut q, &ctrl, &ns, w, &data, &md);
                let expect_error = !(pi == PiType::Type3 && check == PiCheck::RefTag);
                match r {
                    Err(Error::ProtectionCheck {
                        check: c, status, ..
                    }) if expect_error => {
                        assert_eq!(c, check, "{what}");
                        let sc = match check {
                            PiCheck::Guard => 0x82,
                            PiCheck::AppTag => 0x83,
                            PiCheck::RefTag => 0x84,
                        };
                        assert_eq!((status.sct_raw(), status.sc()), (2, sc));
                    }
                    Ok(_) if !expect_error => {}
                    other => panic!("{what}: checked write with bad {check}: {other:?}"),
                }
                let unchecked = Protection {
                    prinfo: Prinfo::NONE,
                    ..p
                };
                run(
                    &mut q,
                    &ctrl,
                    &ns,
                    Protected::new(Write::new(lba, blocks), unchecked),
                    &data,
                    &md,
                )
                .unwrap_or_else(|e| panic!("{what}: unchecked write: {e}"));
                for cmd_result in [
                    run(
                        &mut q,
                        &ctrl,
                        &ns,
                        Protected::new(Read::new(lba, blocks), p),
                        &[],
                        &[],
                    )
                    .map(drop),
                    run(
                        &mut q,
                        &ctrl,
                        &ns,
                        Protected::new(Verify::new(lba, blocks), p),
                        &[],
                        &[],
                    )
                    .map(drop),
                    run(
                        &mut q,
                        &ctrl,
                        &ns,
                        Protected::new(
                            Read::new(lba, blocks),
                            Protection {
                                prinfo: Prinfo::PRACT.union(checks),
                                ..p
                            },
                        ),
                        &[],
                        &[],
                    )
                    .map(drop),
                ] {
                    match cmd_result {
                        Err(Error::ProtectionCheck { check: c, .. }) if expect_error => {
                            assert_eq!(c, check, "{what}")
                        }
                        Ok(()) if !expect_error => {}
                        other => panic!("{what}: read of bad {check}: {other:?}"),
                    }
                }
                // Without checks the stored bytes come back as written.
                let (d, m) = run(
                    &mut q,
                    &ctrl,
                    &ns,
                    Protected::new(Read::new(lba, blocks), unchecked),
                    &[],
                    &[],
                )
                .unwrap();
                assert!(d == data && m == md, "{what}: unchecked read back");
            }
        }
        // The queue pair and the controller first, while the emulator still answers their
        // Delete I/O SQ/CQ and shutdown (the other way round each waits out its timeouts).
        drop(q);
        drop(ctrl);
        drop(sim);
    }
}

#[test]
fn plain_commands_and_wrong_buffers_are_refused_before_the_device() {
    let (sim, ctrl) = start(1);
    let mut q = qp(&ctrl);
    let before = sim.stats();
    for nsid in 1..=LAYOUTS.len() as u32 {
        let ns = ctrl.namespace(nsid).unwrap();
        let buf = ctrl.alloc_buffer(8192).unwrap();
        let f = q.read(&ns, 0, 1, buf).unwrap_err();
        assert!(
            matches!(f.error, Error::MetadataMismatch { .. }),
            "{}",
            f.error
        );
        assert!(f.buffer.is_some(), "the buffer comes back");
    }
    // Separate metadata that must move, submitted without its buffer.
    let sep = ctrl.namespace(3).unwrap();
    let cmd = Protected::new(Read::new(0, 1), Protection::pass(0, Prinfo::NONE));
    let f = q
        .execute(&sep, cmd, Some(ctrl.alloc_buffer(4096).unwrap()))
        .unwrap_err();
    assert!(
        matches!(f.error, Error::MetadataMismatch { .. }),
        "{}",
        f.error
    );
    // A short metadata buffer, and a metadata buffer where none moves.
    let mut v = IoVec::boxed();
    v.push(ctrl.alloc_buffer(8).unwrap()).unwrap();
    let f = q
        .submit_with_metadata(&sep, cmd, ctrl.alloc_buffer(4096).unwrap(), v, 1)
        .unwrap_err();
    assert!(
        matches!(f.error, Error::BufferTooSmall { needed: 16, .. }),
        "{}",
        f.error
    );
    assert!(
        f.buffer.is_some() && f.pieces.is_some(),
        "both buffers come back"
    );
    let ext = ctrl.namespace(1).unwrap();
    let f = q
        .submit_with_metadata(
            &ext,
            cmd,
            ctrl.alloc_buffer(4096).unwrap(),
            f.pieces.unwrap(),
            1,
        )
        .unwrap_err();
    assert!(
        matches!(f.error, Error::MetadataMismatch { .. }),
        "{}",
        f.error
    );
    // A short data buffer for extended blocks (520 bytes each).
    let cmd = Protected::new(Read::new(0, 2), Protection::pass(0, Prinfo::NONE));
    let f = q
        .execute(&ext, cmd, Some(ctrl.alloc_buffer(1024).unwrap()))
        .unwrap_err();
    assert!(
        matches!(f.error, Error::BufferTooSmall { needed: 1040, .. }),
        "{}",
        f.error
    );
    // Type 1 with a reference tag check needs the LBA as initial tag: the device says so.
    let cmd = Protected::new(
        Read::new(5, 1),
        Protection::pass(5, Prinfo::CHECK_REF_TAG).ref_tag(9),
    );
    let f = q
        .execute(&ext, cmd, Some(ctrl.alloc_buffer(1024).unwrap()))
        .unwrap_err();
    assert_eq!(
        f.error.status().map(|s| (s.sct_raw(), s.sc())),
        Some((1, 0x81)),
        "{}",
        f.error
    );
    let after = sim.stats();
    assert_eq!(
        after.reads,
        before.reads + 1,
        "only the last read reached the device"
    );
    // Commands without data take the whole namespace.
    q.write_zeroes(&ext, 0, 4, false).unwrap();
    q.flush(&ext).unwrap();
}

#[test]
fn never_written_and_zeroed_blocks_read_unchecked() {
    let (_sim, ctrl) = start(2);
    let mut q = qp(&ctrl);
    let ns = ctrl.namespace(2).unwrap();
    let p = Protection::pract(0, Prinfo::CHECK_ALL);
    let read = Protected::new(Read::new(100, 4), p);
    let (d, _) = run(&mut q, &ctrl, &ns, read, &[], &[]).unwrap();
    assert!(d.iter().all(|&b| b == 0));
    let write = Protected::new(Write::new(100, 4), p);
    run(&mut q, &ctrl, &ns, write, &pattern(2048, 3), &[]).unwrap();
    q.write_zeroes(&ns, 100, 4, false).unwrap();
    let (d, _) = run(&mut q, &ctrl, &ns, read, &[], &[]).unwrap();
    assert!(d.iter().all(|&b| b == 0), "zeroed blocks escape the checks");
}
