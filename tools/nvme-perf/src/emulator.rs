//! DEVICE `sim`: the in-process emulated controller (`nvme-sim`), present only in builds with
//! the `emulator` feature. A plain `cargo build --release` (the tool for a real machine) does
//! not compile the emulator at all; there `sim` is refused with [`PerfError::NoEmulator`] and
//! [`SimController`] is an uninhabited stand-in, so the engines keep one code shape and the
//! emulator-only branches (inline device polling, fault injection) compile to nothing.
//!
//! The crate's own tests get the feature through its self dev-dependency (see Cargo.toml), so
//! `cargo test` runs every emulator test; `tests/instr-per-io.sh` builds with the feature.

use crate::error::PerfError;
use nvme_driver::Transport;

#[cfg(feature = "emulator")]
pub use enabled::SimController;
#[cfg(feature = "emulator")]
pub use enabled::{sim_config, sim_verify_config};

#[cfg(not(feature = "emulator"))]
pub use disabled::SimController;

/// Whether this build has the emulator (DEVICE `sim`).
pub const AVAILABLE: bool = cfg!(feature = "emulator");

/// Starts the emulator (the `--verify` configuration when `verify`) and a transport to it.
pub fn start(verify: bool) -> Result<(SimController, Transport), PerfError> {
    #[cfg(feature = "emulator")]
    {
        Ok(enabled::start(verify))
    }
    #[cfg(not(feature = "emulator"))]
    {
        let _ = verify;
        Err(PerfError::NoEmulator)
    }
}

#[cfg(feature = "emulator")]
mod enabled {
    use nvme_driver::Transport;
    pub use nvme_sim::SimController;
    use nvme_sim::{SimConfig, SimNamespace, SimZoned};

    /// Blocks of the emulator's default namespace (nsid 1): 1 GiB of 4 KiB blocks. Never touched
    /// (null I/O), so it costs no memory.
    const SIM_LARGE_BLOCKS: u64 = (1 << 30) / SIM_LARGE_BLOCK as u64;
    /// LBA size of the emulator's namespace 1.
    const SIM_LARGE_BLOCK: u32 = 4096;
    /// Blocks of the emulator's namespace 2: 1 GiB of 512-byte blocks.
    const SIM_SMALL_BLOCKS: u64 = (1 << 30) / SIM_SMALL_BLOCK as u64;
    /// LBA size of the emulator's namespace 2.
    const SIM_SMALL_BLOCK: u32 = 512;
    /// Bytes of each emulator namespace with `--verify` (real data: memory-backed).
    const SIM_VERIFY_BYTES: u64 = 64 << 20;
    /// Queue pairs the emulator grants.
    const SIM_QUEUE_PAIRS: u16 = 64;
    /// Namespace 3: zoned (for `-w append`), 64 MiB of 4 KiB blocks in 1 MiB zones.
    const SIM_ZONED_NSID: u32 = 3;
    const SIM_ZONED_BLOCKS: u64 = (64 << 20) / SIM_LARGE_BLOCK as u64;
    const SIM_ZONE_BLOCKS: u64 = (1 << 20) / SIM_LARGE_BLOCK as u64;

    /// The emulator configuration `sim` runs: null I/O (no data copies), shadow doorbells, and two
    /// 1 GiB namespaces: nsid 1 with 4 KiB blocks, nsid 2 with 512-byte blocks.
    pub fn sim_config() -> SimConfig {
        SimConfig {
            namespaces: vec![
                SimNamespace {
                    nsid: 1,
                    block_size: SIM_LARGE_BLOCK,
                    blocks: SIM_LARGE_BLOCKS,
                    ..SimNamespace::default()
                },
                SimNamespace {
                    nsid: 2,
                    block_size: SIM_SMALL_BLOCK,
                    blocks: SIM_SMALL_BLOCKS,
                    ..SimNamespace::default()
                },
                SimNamespace {
                    nsid: SIM_ZONED_NSID,
                    block_size: SIM_LARGE_BLOCK,
                    blocks: SIM_ZONED_BLOCKS,
                    ..SimNamespace::default()
                },
            ],
            // SimZoned's limits: 4 open, 6 active zones.
            zoned: Some(SimZoned {
                nsid: SIM_ZONED_NSID,
                zone_blocks: SIM_ZONE_BLOCKS,
                zone_capacity: SIM_ZONE_BLOCKS,
                ..SimZoned::default()
            }),
            io_queue_pairs: SIM_QUEUE_PAIRS,
            null_io: true,
            shadow_doorbells: true,
            ..SimConfig::default()
        }
    }

    /// The emulator configuration `sim --verify` runs: as [`sim_config`], but the medium keeps the
    /// data (no null I/O) and the namespaces are 64 MiB each (they are memory-backed).
    pub fn sim_verify_config() -> SimConfig {
        let mut config = sim_config();
        config.null_io = false;
        for ns in &mut config.namespaces {
            if ns.nsid != SIM_ZONED_NSID {
                ns.blocks = SIM_VERIFY_BYTES / u64::from(ns.block_size);
            }
        }
        config
    }

    pub(super) fn start(verify: bool) -> (SimController, Transport) {
        let sim = SimController::start(if verify {
            sim_verify_config()
        } else {
            sim_config()
        });
        let transport =
            Transport::new(sim.mmio(), sim.dma(), "sim").with_interrupts(sim.interrupts());
        (sim, transport)
    }
}

#[cfg(not(feature = "emulator"))]
mod disabled {
    use std::time::Duration;

    /// Stand-in for `nvme_sim::SimController` in a build without the emulator: it has no
    /// values, so every method is unreachable and the code holding an
    /// `Option<SimController>` only ever sees `None`.
    #[derive(Debug)]
    pub enum SimController {}

    impl SimController {
        pub fn step(&self) -> bool {
            match *self {}
        }
        pub fn set_inline(&self, _inline: bool) {
            match *self {}
        }
        pub fn faults(&self) -> &Self {
            match *self {}
        }
        pub fn lose_write_at(&self, _nsid: u32, _slba: u64) {
            match *self {}
        }
        pub fn delay_execution(&self, _n: u32, _delay: Duration) {
            match *self {}
        }
        pub fn read_disk(&self, _nsid: u32, _byte_offset: u64, _len: usize) -> Vec<u8> {
            match *self {}
        }
        pub fn write_disk(&self, _nsid: u32, _byte_offset: u64, _data: &[u8]) {
            match *self {}
        }
    }
}
