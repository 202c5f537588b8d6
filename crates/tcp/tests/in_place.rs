//! `IoQueue::submit_in_place` over NVMe/TCP (the trait's default, through `submit`), against
//! the fake target: the same checks as over PCIe (`tests/support/in_place.rs`).

use nvme_core::QueuePairOptions;
use nvme_tcp::fake::{Config, FakeTarget};
use nvme_tcp::{TcpController, TcpOptions};

#[path = "../../../tests/support/in_place.rs"]
mod in_place;

#[test]
fn refusals_leave_the_buffer_in_place_and_accepted_requests_take_it() {
    let t = FakeTarget::start(Config::default());
    let ctrl = TcpController::connect(&t.trid(), TcpOptions::default()).unwrap();
    let ns = ctrl.namespace(2).unwrap();
    let mut qp = ctrl.create_queue_pair(QueuePairOptions::default()).unwrap();
    let bs = ns.block_size() as usize;
    in_place::check_submit_in_place(
        &mut qp,
        &ns,
        ctrl.alloc_buffer(8 * bs).unwrap(),
        ctrl.alloc_buffer(4 * bs).unwrap(),
    );
}
