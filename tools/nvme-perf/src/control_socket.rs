//! `--control-socket PATH`: a JSON-RPC control socket (`nvme-control`) during a run, so
//! another process can read the controller's identify data, SMART / Health log and the
//! workers' queue statistics while the benchmark owns the controller.
//!
//! The workers' loops are not touched: the main thread, which prints the progress line once
//! a second, also copies each worker's `Live` counters into that worker's statistics cell.

use std::sync::Arc;

use nvme_control::{ControlConfig, ControlRegistry, ControlServer, QueueCounters, QueueStatsCell};
use nvme_device::AnyController;
use nvme_driver::Controller;

use crate::args::Config;
use crate::control::Live;
use crate::error::PerfError;

/// A running control socket and the cells the main thread publishes into.
#[derive(Debug)]
pub struct Served {
    /// One cell per worker, in worker order.
    pub cells: Vec<Arc<QueueStatsCell>>,
    // Field order is drop order: the server stops before the registry lets go of the
    // controller.
    _server: ControlServer,
    _registry: ControlRegistry,
}

/// Starts the socket when `--control-socket` is given, serving `ctrl` under its name with
/// one statistics cell per worker (`worker-N`).
pub fn start(config: &Config, ctrl: &Controller) -> Result<Option<Served>, PerfError> {
    let Some(path) = &config.control_socket else {
        return Ok(None);
    };
    let registry = ControlRegistry::new();
    let name = ctrl.name().to_owned();
    registry.add(name.clone(), Arc::new(AnyController::Pcie(ctrl.clone())));
    let cells = (0..config.threads)
        .map(|t| {
            registry
                .queue_stats(&name, format!("worker-{t}"))
                .expect("the controller was just added")
        })
        .collect();
    let server = ControlServer::start(ControlConfig::new(path), registry.clone())?;
    Ok(Some(Served {
        cells,
        _server: server,
        _registry: registry,
    }))
}

/// Copies each worker's progress counters into its cell (the main thread, once a second).
pub fn publish(lives: &[Live], cells: &[Arc<QueueStatsCell>]) {
    for (live, cell) in lives.iter().zip(cells) {
        let s = live.sample();
        cell.publish(&QueueCounters {
            commands_submitted: s.submitted,
            requests_completed: s.ios,
            polls: s.reap_calls,
            ..QueueCounters::default()
        });
    }
}
