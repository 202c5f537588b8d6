//! Shared bring-up for the integration tests: an in-process emulated controller and a driver
//! controller opened on it.

use nvme_driver::{Controller, ControllerOptions, Transport};
use nvme_sim::{SimConfig, SimController};

/// Starts the emulator with `config` and brings a controller up on it (see [`open_on`]).
pub fn start_sim(
    config: SimConfig,
    options: ControllerOptions,
    function_control: bool,
) -> (SimController, Controller) {
    open_on(SimController::start(config), options, function_control)
}

/// Brings a controller up on an emulator already started (and perhaps rearranged) with
/// `options`. With `function_control`, the transport can reset the emulated PCI function
/// (Function Level Reset), as vfio-pci's can. Logging goes to the test output.
pub fn open_on(
    sim: SimController,
    options: ControllerOptions,
    function_control: bool,
) -> (SimController, Controller) {
    let _ = env_logger::builder().is_test(true).try_init();
    let mut transport = Transport::new(sim.mmio(), sim.dma(), "sim");
    if function_control {
        transport = transport.with_function_control(sim.function_control());
    }
    let ctrl = Controller::new(transport, options).expect("bring-up");
    (sim, ctrl)
}

/// `len` bytes of a seeded xorshift sequence: distinct data per seed, so a read-back check
/// catches blocks from the wrong request.
#[allow(dead_code)] // not every test binary uses it
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// A queue pair of the default depth with a 10 s command timeout (tests on a loaded machine).
#[allow(dead_code)] // not every test binary uses it
pub fn queue_pair(ctrl: &Controller) -> nvme_driver::QueuePair {
    ctrl.create_queue_pair(nvme_driver::QueuePairOptions {
        timeout: std::time::Duration::from_secs(10),
        ..nvme_driver::QueuePairOptions::default()
    })
    .expect("queue pair")
}

/// The device's admin command count once it has stopped changing for 100 ms (at most 5 s).
///
/// The driver's background admin commands (the Asynchronous Event Requests posted at start)
/// are counted when the emulator's thread fetches them, which on a loaded host can come tens of
/// milliseconds after the call that submitted them returned: one quiet 20 ms sample was not
/// enough there, five in a row are.
#[allow(dead_code)] // not every test binary uses it
pub fn settled_admin_commands(sim: &SimController) -> u64 {
    const QUIET_SAMPLES: u32 = 5;
    let mut last = sim.stats().admin_commands;
    let mut quiet = 0;
    for _ in 0..250 {
        std::thread::sleep(std::time::Duration::from_millis(20));
        let now = sim.stats().admin_commands;
        if now == last {
            quiet += 1;
            if quiet == QUIET_SAMPLES {
                break;
            }
        } else {
            quiet = 0;
            last = now;
        }
    }
    last
}
