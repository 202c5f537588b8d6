//! The emulated controller's Copy (NVM CS §3.3.2) through its registers with the hand-rolled
//! host (no driver, so nothing is checked before the device): what Identify advertises, the
//! blocks copied, and the status of every violation (Command Size Limit Exceeded for MSRC,
//! MSSRL and MCL, LBA Out of Range for a source or the destination, Invalid Field for another
//! descriptor format, Invalid Command Opcode when Copy is not offered).

use nvme_sim::{SimConfig, SimCopy};
use nvme_spec::command::{self, Cns, CopyControl};
use nvme_spec::identify::{CopyFormats, IdentifyController, IdentifyNamespace, Oncs};
use nvme_spec::queue::{CopySourceRange, SubmissionEntry};
use nvme_spec::status::{command_specific, generic, Status};
use nvme_vfio::DmaBuffer;

mod common;
use common::*;

/// MSSRL 8, MCL 16, MSRC 3 (4 ranges).
const LIMITS: SimCopy = SimCopy {
    mssrl: 8,
    mcl: 16,
    msrc: 3,
};

fn start(copy: Option<SimCopy>) -> (Host, Queue) {
    let mut host = Host::start(SimConfig {
        copy,
        ..SimConfig::default()
    });
    let q = host.create_pair(1, 8, 8);
    (host, q)
}

/// A Copy of `ranges` (lba, blocks) to `dest` on the 512-byte namespace, its list in a new
/// buffer (kept alive by the caller).
fn copy_cmd(host: &Host, dest: u64, ranges: &[(u64, u32)]) -> (SubmissionEntry, DmaBuffer) {
    let mut list = DmaBuffer::allocate(&host.dma, 4096).unwrap();
    for (i, &(lba, blocks)) in ranges.iter().enumerate() {
        list[i * 32..(i + 1) * 32].copy_from_slice(&CopySourceRange::new(lba, blocks).to_bytes());
    }
    let sqe = with_prp(
        command::copy(NS_512, dest, CopyControl::new(ranges.len() as u32)),
        &list,
    );
    (sqe, list)
}

fn run_copy(host: &Host, q: &mut Queue, dest: u64, ranges: &[(u64, u32)]) -> Status {
    let (sqe, _list) = copy_cmd(host, dest, ranges);
    q.run(sqe).status()
}

#[test]
fn identify_advertises_copy_and_its_limits() {
    let (mut host, _q) = start(Some(LIMITS));
    let ctrl = host
        .identify(Cns::Controller, 0, IdentifyController::from_bytes)
        .unwrap();
    assert!(ctrl.oncs_flags().contains(Oncs::COPY));
    assert!(ctrl.copy_formats().contains(CopyFormats::FORMAT_0));
    let ns = host
        .identify(Cns::Namespace, NS_512, IdentifyNamespace::from_bytes)
        .unwrap();
    assert_eq!((ns.mssrl, ns.mcl, ns.msrc), (8, 16, 3));
    // The default is QEMU's.
    let (mut host, _q) = start(Some(SimCopy::default()));
    let ns = host
        .identify(Cns::Namespace, NS_512, IdentifyNamespace::from_bytes)
        .unwrap();
    assert_eq!((ns.mssrl, ns.mcl, ns.msrc), (128, 128, 127));
    let (mut host, _q) = start(None);
    let ctrl = host
        .identify(Cns::Controller, 0, IdentifyController::from_bytes)
        .unwrap();
    assert!(!ctrl.oncs_flags().contains(Oncs::COPY));
    assert!(ctrl.copy_formats().is_empty());
}

#[test]
fn copies_the_ranges_in_order_to_the_destination() {
    let (host, mut q) = start(Some(LIMITS));
    for lba in 0..64u64 {
        host.sim
            .write_disk(NS_512, lba * 512, &[lba as u8 + 1; 512]);
    }
    // 3 + 8 + 1 blocks from three places, the last overlapping the destination.
    let ranges = [(10, 3), (40, 8), (50, 1)];
    assert!(run_copy(&host, &mut q, 48, &ranges).is_success());
    let dest = host.sim.read_disk(NS_512, 48 * 512, 12 * 512);
    let expected: Vec<u8> = [10u64, 11, 12, 40, 41, 42, 43, 44, 45, 46, 47, 50]
        .iter()
        .flat_map(|&lba| [lba as u8 + 1; 512])
        .collect();
    assert!(dest == expected, "destination differs from the sources");
    // The sources before the destination are untouched.
    assert!(host
        .sim
        .read_disk(NS_512, 40 * 512, 512)
        .iter()
        .all(|&b| b == 41));
    assert_eq!(host.sim.stats().other_io, 1);
}

#[test]
fn violations_complete_with_the_spec_status_and_copy_nothing() {
    let (host, mut q) = start(Some(LIMITS));
    host.sim.write_disk(NS_512, 0, &[0xAB; 16 * 512]);
    let limit = cs_err(command_specific::COMMAND_SIZE_LIMIT_EXCEEDED);
    // MSRC 3 (0-based): five ranges are one too many, four are fine.
    let five = [(0, 1), (1, 1), (2, 1), (3, 1), (4, 1)];
    assert_eq!(run_copy(&host, &mut q, 100, &five), limit);
    assert!(run_copy(&host, &mut q, 100, &five[..4]).is_success());
    // MSSRL 8: a 9-block range.
    assert_eq!(run_copy(&host, &mut q, 200, &[(0, 9)]), limit);
    // MCL 16: 8 + 8 + 1.
    assert_eq!(
        run_copy(&host, &mut q, 200, &[(0, 8), (8, 8), (0, 1)]),
        limit
    );
    // A source past the end of the 32768-block namespace, and the destination.
    let lba_range = generic_err(generic::LBA_OUT_OF_RANGE);
    assert_eq!(run_copy(&host, &mut q, 200, &[(32767, 2)]), lba_range);
    assert_eq!(run_copy(&host, &mut q, 32760, &[(0, 8), (8, 1)]), lba_range);
    let tail = || host.sim.read_disk(NS_512, 32760 * 512, 8 * 512);
    assert!(tail().iter().all(|&b| b == 0), "a refused Copy wrote");
    assert!(run_copy(&host, &mut q, 32760, &[(0, 8)]).is_success());
    assert!(tail().iter().all(|&b| b == 0xAB));
    // A descriptor format not offered (2h, cross-namespace; formats 0h and 1h are).
    let (mut sqe, _list) = copy_cmd(&host, 200, &[(0, 1)]);
    sqe.cdw12 = CopyControl {
        format: 2,
        ..CopyControl::new(1)
    }
    .to_cdw12();
    assert_eq!(q.run(sqe).status(), generic_err(generic::INVALID_FIELD));
    // Nothing of the refused ones reached LBA 200.
    assert!(host
        .sim
        .read_disk(NS_512, 200 * 512, 9 * 512)
        .iter()
        .all(|&b| b == 0));
}

#[test]
fn without_copy_the_opcode_is_invalid() {
    let (host, mut q) = start(None);
    assert_eq!(
        run_copy(&host, &mut q, 100, &[(0, 1)]),
        generic_err(generic::INVALID_OPCODE)
    );
    assert_eq!(host.sim.stats().invalid_io, 0);
}
