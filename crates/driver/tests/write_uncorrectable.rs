//! Write Uncorrectable (NVM CS §3.3.7) through the PCIe queue pair against the emulator: the
//! marked blocks read, compare and verify as Unrecovered Read Error (and a Copy from them
//! fails) while the blocks around them read back what was written; writing them (Write,
//! Write Zeroes) makes them readable again; a controller without ONCS bit 1 refuses the
//! command by name before anything reaches the device.

use nvme_driver::command::{CopyRanges, Verify, WriteUncorrectable};
use nvme_driver::spec::status::{media, StatusCodeType};
use nvme_driver::{Controller, ControllerOptions, Error, IoQueue, QueuePair};
use nvme_driver::{Namespace, WriteFlags};
use nvme_sim::{SimConfig, SimController};

mod common;

fn start(write_uncorrectable: bool) -> (SimController, Controller) {
    let config = SimConfig {
        write_uncorrectable,
        ..SimConfig::default()
    };
    common::start_sim(config, ControllerOptions::default(), false)
}

fn qp(ctrl: &Controller) -> QueuePair {
    common::queue_pair(ctrl)
}

fn is_unrecovered(e: &Error) -> bool {
    e.status().is_some_and(|s| {
        s.sct_raw() == StatusCodeType::MediaDataIntegrity.raw()
            && s.sc() == media::UNRECOVERED_READ_ERROR
    })
}

fn read(
    ctrl: &Controller,
    q: &mut QueuePair,
    ns: &Namespace,
    lba: u64,
    n: u32,
) -> Result<Vec<u8>, Error> {
    let buf = ctrl
        .alloc_buffer(n as usize * ns.block_size() as usize)
        .unwrap();
    q.read(ns, lba, n, buf)
        .map(|b| b.to_vec())
        .map_err(|f| f.error)
}

fn write(ctrl: &Controller, q: &mut QueuePair, ns: &Namespace, lba: u64, data: &[u8]) {
    let bs = ns.block_size() as usize;
    let mut buf = ctrl.alloc_buffer(data.len()).unwrap();
    buf[..data.len()].copy_from_slice(data);
    q.write(ns, lba, (data.len() / bs) as u32, buf, WriteFlags::NONE)
        .unwrap();
}

#[test]
fn marked_blocks_fail_reads_until_written() {
    let (_sim, ctrl) = start(true);
    let ns = ctrl.namespace(1).unwrap();
    let bs = ns.block_size() as usize;
    let mut q = qp(&ctrl);
    let data = common::pattern(16 * bs, 21);
    write(&ctrl, &mut q, &ns, 100, &data);
    q.execute(&ns, WriteUncorrectable::new(104, 4), None)
        .unwrap();

    // Every read that touches 104..108 fails; the blocks around still hold the data.
    for (lba, n) in [(104, 1), (107, 1), (100, 16), (103, 2)] {
        let e = read(&ctrl, &mut q, &ns, lba, n).unwrap_err();
        assert!(is_unrecovered(&e), "read {lba}+{n}: {e:?}");
    }
    assert_eq!(read(&ctrl, &mut q, &ns, 100, 4).unwrap(), data[..4 * bs]);
    assert_eq!(read(&ctrl, &mut q, &ns, 108, 8).unwrap(), data[8 * bs..]);
    // Compare, Verify and a Copy from them fail the same way.
    let mut buf = ctrl.alloc_buffer(bs).unwrap();
    buf[..bs].copy_from_slice(&data[5 * bs..6 * bs]);
    let e = q.compare(&ns, 105, 1, buf).unwrap_err().error;
    assert!(is_unrecovered(&e), "{e:?}");
    let e = q.execute(&ns, Verify::new(100, 8), None).unwrap_err().error;
    assert!(is_unrecovered(&e), "{e:?}");
    let mut list = ctrl.alloc_buffer(4096).unwrap();
    let copy = CopyRanges::new(&mut list)
        .push(106, 2)
        .unwrap()
        .copy_to(500);
    let e = q.execute(&ns, copy, Some(list)).unwrap_err().error;
    assert!(is_unrecovered(&e), "{e:?}");

    // A write of two of them, Write Zeroes of the other two: all readable again.
    let fresh = common::pattern(2 * bs, 22);
    write(&ctrl, &mut q, &ns, 104, &fresh);
    assert_eq!(read(&ctrl, &mut q, &ns, 104, 2).unwrap(), fresh);
    assert!(read(&ctrl, &mut q, &ns, 106, 1).is_err());
    q.write_zeroes(&ns, 106, 2, false).unwrap();
    assert_eq!(read(&ctrl, &mut q, &ns, 106, 2).unwrap(), vec![0u8; 2 * bs]);
    q.execute(&ns, Verify::new(100, 16), None).unwrap();
}

#[test]
fn out_of_range_and_data_are_refused() {
    let (sim, ctrl) = start(true);
    let ns = ctrl.namespace(2).unwrap();
    let mut q = qp(&ctrl);
    let before = sim.stats().io_commands();
    let e = q
        .execute(&ns, WriteUncorrectable::new(ns.blocks() - 1, 2), None)
        .unwrap_err()
        .error;
    assert!(matches!(e, Error::LbaOutOfRange { .. }), "{e:?}");
    let buf = ctrl.alloc_buffer(4096).unwrap();
    let f = q
        .execute(&ns, WriteUncorrectable::new(0, 1), Some(buf))
        .unwrap_err();
    assert!(matches!(f.error, Error::InvalidRequest(_)), "{:?}", f.error);
    assert!(f.buffer.is_some(), "a refused buffer comes back");
    assert_eq!(
        sim.stats().io_commands(),
        before,
        "nothing reached the device"
    );
}

#[test]
fn a_controller_without_it_refuses_before_sending() {
    let (sim, ctrl) = start(false);
    let ns = ctrl.namespace(1).unwrap();
    let mut q = qp(&ctrl);
    let before = sim.stats().io_commands();
    let e = q
        .execute(&ns, WriteUncorrectable::new(0, 1), None)
        .unwrap_err()
        .error;
    assert!(
        matches!(&e, Error::CommandNotSupported { command: "Write Uncorrectable", why, .. } if why.contains("ONCS bit 1")),
        "{e:?}"
    );
    assert!(e.to_string().contains("ONCS"), "{e}");
    assert_eq!(
        sim.stats().io_commands(),
        before,
        "nothing reached the device"
    );
}
