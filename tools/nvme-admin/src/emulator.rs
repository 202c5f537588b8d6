//! DEVICE `sim`: the in-process emulated controller (`nvme-sim`), present only in builds with
//! the `emulator` feature (this crate's tests enable it through its self dev-dependency). A
//! plain build refuses `sim` with [`AdminError::NoEmulator`].

use nvme_driver::Controller;

use crate::AdminError;

/// Starts the emulator, opens our PCIe controller on it and runs `f`.
#[cfg(feature = "emulator")]
pub fn run<T>(f: impl FnOnce(&Controller) -> Result<T, AdminError>) -> Result<T, AdminError> {
    use nvme_driver::{ControllerOptions, Transport};
    use nvme_sim::{SimConfig, SimController, SimNamespace, SimZoned};

    /// Namespace 2 of `sim`: 16 MiB of 4 KiB blocks (namespace 1 is the default 512-byte one),
    /// zoned: 16 zones of 1 MiB.
    const NS2_BLOCK: u32 = 4096;
    const NS2_BLOCKS: u64 = (16 << 20) / NS2_BLOCK as u64;
    const NS2_ZONE_BLOCKS: u64 = NS2_BLOCKS / 16;

    let sim = SimController::start(SimConfig {
        namespaces: vec![
            SimNamespace::default(),
            SimNamespace {
                nsid: 2,
                block_size: NS2_BLOCK,
                blocks: NS2_BLOCKS,
                ..SimNamespace::default()
            },
        ],
        zoned: Some(SimZoned {
            nsid: 2,
            zone_blocks: NS2_ZONE_BLOCKS,
            zone_capacity: NS2_ZONE_BLOCKS,
            ..SimZoned::default()
        }),
        ..SimConfig::default()
    });
    let ctrl = Controller::new(
        Transport::new(sim.mmio(), sim.dma(), "sim"),
        ControllerOptions::default(),
    )?;
    f(&ctrl)
}

/// Without the emulator: `sim` is refused.
#[cfg(not(feature = "emulator"))]
pub fn run<T>(_f: impl FnOnce(&Controller) -> Result<T, AdminError>) -> Result<T, AdminError> {
    Err(AdminError::NoEmulator)
}

/// FOR TESTS: the emulator with `config` and our PCIe controller on it.
#[cfg(test)]
pub(crate) fn controller(config: nvme_sim::SimConfig) -> (nvme_sim::SimController, Controller) {
    use nvme_driver::{ControllerOptions, Transport};

    let sim = nvme_sim::SimController::start(config);
    let ctrl = Controller::new(
        Transport::new(sim.mmio(), sim.dma(), "sim"),
        ControllerOptions::default(),
    )
    .expect("the controller comes up on the emulator");
    (sim, ctrl)
}
