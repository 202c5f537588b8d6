//! The in-process emulated controller behind `nvme_ctrlr_open_emulated`,
//! `nvme_dma_context_create_emulated` and `nvme_ctrlr_open_emulated_in` (tests, CI, examples).
//!
//! Only builds with the `emulator` feature contain it; a plain `cargo build --release` of the
//! library for a real machine does not compile `nvme-sim`. The three functions are declared in
//! both builds (the header does not change); without the emulator they fail with
//! `NVME_ERR_UNSUPPORTED` and `nvme_last_error()` says how to get one. The crate's own tests
//! get the feature through its self dev-dependency (Cargo.toml).

#[cfg(feature = "emulator")]
pub(crate) use nvme_sim::{SimController, SimDma};

/// Stand-in for `nvme_sim::SimController` without the emulator: no values, so the
/// `Option<SimController>` a controller keeps is always `None`.
#[cfg(not(feature = "emulator"))]
pub(crate) enum SimController {}

/// Stand-in for `nvme_sim::SimDma` without the emulator (no emulated DMA context exists).
#[cfg(not(feature = "emulator"))]
pub(crate) enum SimDma {}

/// What `function` reports in a build without the emulator.
#[cfg(not(feature = "emulator"))]
pub(crate) fn missing(function: &str) -> std::ffi::c_int {
    crate::fail(
        crate::errors::NVME_ERR_UNSUPPORTED,
        format!("{function}: this build has no emulator: rebuild with --features emulator"),
    )
}

/// The emulator of `nvme_ctrlr_open_emulated_zoned`: the default namespaces, namespace 2
/// (16 MiB of 4096-byte blocks) zoned in 16 zones of 1 MiB, the emulator's default open and
/// active limits (4 and 6).
#[cfg(feature = "emulator")]
pub(crate) fn zoned_config() -> nvme_sim::SimConfig {
    use nvme_sim::{SimConfig, SimZoned};
    /// Zones of namespace 2.
    const ZONES: u64 = 16;
    let config = SimConfig::default();
    let ns2 = config
        .namespaces
        .iter()
        .find(|n| n.nsid == 2)
        .map_or(0, |n| n.blocks);
    let zone_blocks = ns2 / ZONES;
    SimConfig {
        zoned: Some(SimZoned {
            nsid: 2,
            zone_blocks,
            zone_capacity: zone_blocks,
            ..SimZoned::default()
        }),
        ..config
    }
}
