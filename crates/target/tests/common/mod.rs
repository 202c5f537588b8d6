//! A target on the emulator for the tests: the emulated controller behind our PCIe driver,
//! exported as one subsystem on a loopback port, and our initiator's options for it.

#![allow(dead_code)] // not every test binary uses every helper

pub mod raw;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use nvme_device::AnyController;
use nvme_driver::{Controller, ControllerOptions, Transport};
use nvme_sim::{SimConfig, SimController, SimNamespace};
use nvme_target::{ExportedNamespace, SubsystemConfig, Target, TargetConfig};
use nvme_tcp::{TcpController, TcpOptions, TransportId};

pub const SUBNQN: &str = "nqn.2026-01.io.example:target-test";
pub const HOSTNQN: &str = "nqn.2026-01.io.example:host-allowed";

/// Blocks of the emulator's namespaces: 8 MiB of 4 KiB blocks (nsid 1), 4 MiB of 512-byte
/// blocks (nsid 2).
pub const NS1_BLOCKS: u64 = 2048;
pub const NS2_BLOCKS: u64 = 8192;

/// Fields drop in order: the target (its threads and queue pairs), the driver's controller
/// (a normal shutdown), then the emulator.
pub struct Rig {
    pub target: Target<AnyController>,
    pub backend: Arc<AnyController>,
    pub sim: SimController,
}

pub fn sim_config() -> SimConfig {
    SimConfig {
        namespaces: vec![
            SimNamespace {
                nsid: 1,
                block_size: 4096,
                blocks: NS1_BLOCKS,
                ..SimNamespace::default()
            },
            SimNamespace {
                nsid: 2,
                block_size: 512,
                blocks: NS2_BLOCKS,
                ..SimNamespace::default()
            },
        ],
        io_queue_pairs: 16,
        ..SimConfig::default()
    }
}

/// The emulator, our driver on it (MSI-X routed to eventfds: idle poll groups block), and a
/// target exporting both namespaces (`allowed`: the host list; `tune` adjusts the target's
/// configuration).
pub fn start(allowed: Option<Vec<String>>, tune: impl FnOnce(&mut TargetConfig)) -> Rig {
    start_with(true, allowed, tune)
}

/// [`start`], with `interrupts` false: a polled-only backend (idle poll groups sleep between
/// passes while commands are in flight).
pub fn start_with(
    interrupts: bool,
    allowed: Option<Vec<String>>,
    tune: impl FnOnce(&mut TargetConfig),
) -> Rig {
    let _ = env_logger::builder().is_test(true).try_init();
    let sim = SimController::start(sim_config());
    let transport = Transport::new(sim.mmio(), sim.dma(), "sim").with_interrupts(sim.interrupts());
    let ctrl = Controller::new(
        transport,
        ControllerOptions::default().interrupts(interrupts),
    )
    .expect("bring-up");
    let backend = Arc::new(AnyController::Pcie(ctrl));
    let mut config = TargetConfig::new("127.0.0.1:0".parse::<SocketAddr>().unwrap());
    tune(&mut config);
    let target = Target::start(
        config,
        vec![SubsystemConfig {
            nqn: SUBNQN.into(),
            backend: backend.clone(),
            namespaces: vec![
                ExportedNamespace {
                    nsid: 1,
                    backend_nsid: 1,
                },
                ExportedNamespace {
                    nsid: 2,
                    backend_nsid: 2,
                },
            ],
            allowed_hosts: allowed,
            serial: "TGT0001".into(),
        }],
    )
    .expect("target starts");
    Rig {
        target,
        backend,
        sim,
    }
}

impl Rig {
    pub fn trid(&self, extra: &str) -> TransportId {
        let a = self.target.local_addr();
        TransportId::parse(&format!(
            "trtype:TCP traddr:{} trsvcid:{} subnqn:{SUBNQN} {extra}",
            a.ip(),
            a.port()
        ))
        .expect("trid")
    }

    pub fn connect(&self, options: TcpOptions) -> nvme_core::Result<TcpController> {
        TcpController::connect(&self.trid(""), options)
    }
}

pub fn options() -> TcpOptions {
    TcpOptions {
        hostnqn: Some(HOSTNQN.into()),
        io_queues: 2,
        timeout: Duration::from_secs(5),
        ..TcpOptions::default()
    }
}

/// `len` bytes of a seeded xorshift sequence.
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
