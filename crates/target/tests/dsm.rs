//! Dataset Management (deallocate) through the target, from a raw host (our initiator offers
//! no Dataset Management over NVMe/TCP): the ranges are deallocated on the emulator's medium
//! (which reads back zeroes), their neighbours untouched; a range past the namespace is
//! refused with LBA Out of Range.

mod common;

use common::raw::{capsule, connect_data, raw, response};
use common::*;
use nvme_spec::command;
use nvme_spec::fabrics;
use nvme_spec::queue::DsmRange;
use nvme_spec::status::generic;
use std::io::Write;

#[test]
fn deallocate_ranges_through_the_target() {
    let rig = start(None, |_| {});
    // Admin queue: Connect, Number of Queues.
    let mut admin = raw(&rig, 0);
    admin
        .write_all(&capsule(
            fabrics::connect(0, 32, 0, 0),
            1,
            Some(&connect_data(fabrics::CNTLID_DYNAMIC)),
        ))
        .unwrap();
    let r = response(&mut admin);
    assert!(r.cqe.status().is_success());
    let cntlid = fabrics::connect_cntlid(r.cqe.dw0);
    admin
        .write_all(&capsule(command::set_number_of_queues(1, 1), 2, None))
        .unwrap();
    assert!(response(&mut admin).cqe.status().is_success());
    // I/O queue 1.
    let mut io = raw(&rig, 0);
    io.write_all(&capsule(
        fabrics::connect(1, 32, 0, 0),
        1,
        Some(&connect_data(cntlid)),
    ))
    .unwrap();
    assert!(response(&mut io).cqe.status().is_success());

    let bs = 4096u64;
    rig.sim.write_disk(1, 0, &pattern(64 * bs as usize, 21));
    let ranges = [DsmRange::new(8, 4), DsmRange::new(20, 2)];
    let list: Vec<u8> = ranges.iter().flat_map(|r| r.to_bytes()).collect();
    let sqe = command::dataset_management(1, 2, true);
    io.write_all(&capsule(sqe, 7, Some(&list))).unwrap();
    let r = response(&mut io);
    assert!(r.cqe.status().is_success(), "{:?}", r.cqe.status());
    assert_eq!(r.cqe.cid, 7);
    let disk = rig.sim.read_disk(1, 0, 64 * bs as usize);
    let want = pattern(64 * bs as usize, 21);
    let blk = |i: u64| (i * bs) as usize..((i + 1) * bs) as usize;
    for i in 0..64 {
        let zero = (8..12).contains(&i) || (20..22).contains(&i);
        if zero {
            assert!(
                disk[blk(i)].iter().all(|&b| b == 0),
                "block {i} not deallocated"
            );
        } else {
            assert!(disk[blk(i)] == want[blk(i)], "block {i} changed");
        }
    }

    // A Get Log Page asking for 16 GiB on the admin queue: answered within the host's
    // buffer, and the target is still there.
    let mut glp =
        command::get_log_page(nvme_spec::opcode::log_page::SMART_HEALTH, 0xFFFF_FFFF, 512);
    glp.cdw10 |= 0xFFFF << 16;
    glp.cdw11 = 0xFFFF;
    glp.set_cid(3);
    glp.set_sgl(nvme_spec::tcp::sgl::TRANSPORT_DATA, 0, 512);
    let mut header = nvme_spec::tcp::CapsuleCmd {
        ch: nvme_spec::tcp::CommonHeader {
            pdu_type: nvme_spec::tcp::pdu_type::CAPSULE_CMD,
            ..Default::default()
        },
        sqe: glp,
    }
    .to_bytes();
    let mut pdu = Vec::new();
    nvme_spec::tcp::frame_pdu(
        &mut pdu,
        &mut header,
        None,
        nvme_spec::tcp::Digests::default(),
        4,
    );
    admin.write_all(&pdu).unwrap();
    let mut c2h = [0u8; 24 + 512];
    std::io::Read::read_exact(&mut admin, &mut c2h).unwrap();
    assert_eq!(c2h[0], nvme_spec::tcp::pdu_type::C2H_DATA);
    assert_eq!(
        u32::from_le_bytes(c2h[16..20].try_into().unwrap()),
        512,
        "DATAL"
    );
    assert!(response(&mut admin).cqe.status().is_success());

    // A range past the end of the namespace.
    let bad = DsmRange::new(NS1_BLOCKS - 1, 2).to_bytes();
    io.write_all(&capsule(
        command::dataset_management(1, 1, true),
        8,
        Some(&bad),
    ))
    .unwrap();
    let r = response(&mut io);
    assert_eq!(r.cqe.status().sc(), generic::LBA_OUT_OF_RANGE);
}
