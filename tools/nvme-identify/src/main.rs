//! `nvme-identify [--json] [--health] DEVICE`: opens an NVMe controller through vfio-pci (or
//! over NVMe/TCP when DEVICE is a TCP transport id) and
//! prints its Identify Controller data, capabilities, and every active namespace with its LBA
//! formats; with `--health`, its SMART / Health Information and Error Information logs instead.
//! An NVMe/TCP transport id without `subnqn` (the discovery subsystem) lists the subsystems the
//! target's discovery controller reports, one transport id each.
//!
//! Without DEVICE it lists every NVMe function of the machine, like `nvme list`: address,
//! driver binding, vendor:device, and for each function on vfio-pci that it can open, model,
//! serial, firmware and namespaces (`--sysfs ROOT` reads another sysfs tree, `--allow BDF`
//! marks functions bindable).
//!
//! Errors go to stderr as `error: <message>` (with the chain of causes) and exit with status 1;
//! bad input never panics.

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;
use nvme_driver::ControllerOptions;
use nvme_tool_support::{parse_target, AnyController, Target, TargetError};

use nvme_driver::spec::log::NSID_BROADCAST;

/// Time between two reports with `--repeat`.
const REPEAT_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);
/// Error Information entries read through a control socket with `--health`.
const DEFAULT_ERROR_ENTRIES: usize = 64;
use nvme_device::Probe;
use nvme_identify::health::HealthReport;
use nvme_identify::list::{ListEntry, ListReport};
use nvme_identify::report::{Registers, Report};
use nvme_vfio::FunctionFilter;

/// Print an NVMe controller's Identify data (the controller must be bound to vfio-pci).
#[derive(Debug, Parser)]
#[command(version, about)]
struct Cli {
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
    /// Print the SMART / Health Information log and the Error Information log (JSON keys as
    /// nvme-cli's smart-log and error-log) instead of the Identify data.
    #[arg(long)]
    health: bool,
    /// Ask the program serving the control socket at PATH (nvme-control) instead of opening
    /// the controller: DEVICE is then the controller's name there (may be left out when it
    /// serves one); without DEVICE, list the controllers it serves.
    #[arg(long, value_name = "PATH")]
    socket: Option<std::path::PathBuf>,
    /// With --socket: print the queue statistics the program publishes (one line per queue,
    /// or JSON with --json).
    #[arg(long, requires = "socket")]
    stats: bool,
    /// With --socket: print the report N times, one second apart, over one connection (an
    /// operator watching a running program; SMART with --health, statistics with --stats).
    #[arg(long, value_name = "N", requires = "socket", default_value_t = 1)]
    repeat: u32,
    /// The sysfs root the list reads (without DEVICE).
    #[arg(long, default_value = "/sys")]
    sysfs: std::path::PathBuf,
    /// A function not on vfio-pci that may be bound to it (listed as `bindable`); repeatable.
    #[arg(long = "allow", value_name = "BDF")]
    allow: Vec<nvme_driver::PciAddress>,
    /// PCI address (0000:00:04.0) or transport id (trtype:PCIe traddr:0000:00:04.0, or
    /// trtype:TCP traddr:127.0.0.1 trsvcid:4420 subnqn:NQN for NVMe/TCP; quoted or not).
    /// Without it: list the NVMe functions of the machine.
    #[arg(num_args = 0..)]
    device: Vec<String>,
}

/// Why `nvme-identify` failed.
#[derive(Debug, thiserror::Error)]
enum IdentifyError {
    #[error(transparent)]
    Device(#[from] TargetError),
    #[error(transparent)]
    Driver(#[from] nvme_driver::Error),
    #[error("cannot encode the report as JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("cannot write to standard output: {0}")]
    Output(#[from] std::io::Error),
    #[error(transparent)]
    Control(#[from] nvme_control::ControlError),
}

fn run(cli: &Cli) -> Result<(), IdentifyError> {
    if let Some(path) = &cli.socket {
        return remote(cli, path);
    }
    if cli.device.is_empty() {
        return list(cli);
    }
    let target = parse_target(&cli.device.join(" "))?;
    if let Target::Tcp(trid) = &target {
        if trid.is_discovery() {
            return discovery(cli, trid);
        }
    }
    let ctrl = AnyController::open(&target, ControllerOptions::default())?;
    if cli.health {
        let smart = ctrl.smart_log(NSID_BROADCAST)?;
        let errors = ctrl.error_log(usize::MAX)?;
        let report = HealthReport::new(ctrl.name(), &smart, &errors);
        let text = if cli.json {
            report.to_json()? + "\n"
        } else {
            report.to_text()
        };
        return print(&text);
    }
    let regs = Registers {
        cap: ctrl.cap(),
        version: ctrl.version(),
        io_queue_pairs: ctrl.io_queue_pairs(),
    };
    let report = Report::new(
        ctrl.name(),
        ctrl.identify(),
        regs,
        ctrl.namespaces()
            .iter()
            .map(|ns| (ns.nsid(), ns.identify())),
    )
    .with_unsupported(&ctrl.unsupported_namespaces());
    let text = if cli.json {
        report.to_json()? + "\n"
    } else {
        report.to_text()
    };
    print(&text)
}

/// Lists what an NVMe/TCP discovery controller knows, one transport id per subsystem.
fn discovery(cli: &Cli, trid: &nvme_tcp::TransportId) -> Result<(), IdentifyError> {
    let entries = nvme_tcp::discover(trid, nvme_tcp::TcpOptions::default())?;
    if cli.json {
        let list: Vec<serde_json::Value> = entries
            .iter()
            .map(|e| {
                serde_json::json!({
                    "trtype": nvme_driver::spec::fabrics::trtype::name(e.trtype),
                    "subtype": e.subtype,
                    "portid": e.portid,
                    "traddr": e.traddr,
                    "trsvcid": e.trsvcid,
                    "subnqn": e.subnqn,
                    "transport_id": e.transport_id(),
                })
            })
            .collect();
        return print(&(serde_json::to_string_pretty(&list)? + "\n"));
    }
    let mut text = format!(
        "Discovery controller at {}: {} record(s)\n",
        trid.socket_addr(),
        entries.len()
    );
    for e in &entries {
        let kind = match e.subtype {
            nvme_driver::spec::fabrics::subtype::NVM => "subsystem",
            nvme_driver::spec::fabrics::subtype::DISCOVERY_REFERRAL => "referral",
            _ => "discovery",
        };
        text.push_str(&format!("  {kind:<9} {}\n", e.transport_id()));
    }
    print(&text)
}

/// The same reports through a control socket.
fn remote(cli: &Cli, path: &std::path::Path) -> Result<(), IdentifyError> {
    let mut client = nvme_control::ControlClient::connect(path)?;
    for round in 0..cli.repeat.max(1) {
        if round > 0 {
            std::thread::sleep(REPEAT_INTERVAL);
        }
        remote_once(cli, &mut client)?;
    }
    Ok(())
}

/// One report through the control socket.
fn remote_once(cli: &Cli, client: &mut nvme_control::ControlClient) -> Result<(), IdentifyError> {
    let name = (!cli.device.is_empty()).then(|| cli.device.join(" "));
    let name = name.as_deref();
    let text = if cli.stats {
        let params = match name {
            Some(n) => serde_json::json!({"controller": n}),
            None => serde_json::json!({}),
        };
        let stats = client.call("queue_stats", params)?;
        if cli.json {
            serde_json::to_string_pretty(&stats)? + "\n"
        } else {
            stats_text(&stats)
        }
    } else if cli.health {
        let smart = client.smart_log(name, NSID_BROADCAST)?;
        let errors = client.error_log(name, DEFAULT_ERROR_ENTRIES)?;
        let report = HealthReport::new(name.unwrap_or("controller"), &smart, &errors);
        if cli.json {
            report.to_json()? + "\n"
        } else {
            report.to_text()
        }
    } else if name.is_none() {
        let list = client.call("list_controllers", serde_json::json!({}))?;
        let mut report = ListReport::default();
        for c in list.as_array().into_iter().flatten() {
            report.devices.push(ListEntry::from_served(c));
        }
        if cli.json {
            report.to_json()? + "\n"
        } else {
            report.to_text()
        }
    } else {
        let id = client.identify(name)?;
        let regs = Registers {
            cap: id.cap,
            version: id.version,
            io_queue_pairs: id.io_queue_pairs,
        };
        let report = Report::new(
            &id.name,
            &id.identify,
            regs,
            id.namespaces.iter().map(|(nsid, ns)| (*nsid, ns)),
        )
        .with_unsupported(&id.unsupported);
        if cli.json {
            report.to_json()? + "\n"
        } else {
            report.to_text()
        }
    };
    print(&text)
}

/// `queue_stats` as text: `CONTROLLER QUEUE key=value ...` per queue.
fn stats_text(stats: &serde_json::Value) -> String {
    let mut out = String::new();
    for q in stats.as_array().into_iter().flatten() {
        out.push_str(&format!(
            "{} {}",
            q["controller"].as_str().unwrap_or("?"),
            q["queue"].as_str().unwrap_or("?")
        ));
        if let Some(c) = q["counters"].as_object() {
            for (k, v) in c {
                out.push_str(&format!(" {k}={v}"));
            }
        }
        out.push('\n');
    }
    if out.is_empty() {
        out.push_str("no queue statistics published\n");
    }
    out
}

/// Lists the NVMe functions of the machine (`nvme list`).
fn list(cli: &Cli) -> Result<(), IdentifyError> {
    let probe = Probe::new()
        .sysfs(nvme_vfio::Sysfs::new(&cli.sysfs))
        .filter(FunctionFilter::all().allow(cli.allow.iter().copied()));
    let mut report = ListReport::default();
    for function in probe.enumerate()? {
        let mut entry = ListEntry::from_function(&function);
        if function.binding.is_vfio() {
            match AnyController::open(
                &Target::Pcie(function.address),
                ControllerOptions::default(),
            ) {
                Ok(ctrl) => entry = entry.with_controller(ctrl.identify(), &ctrl.namespaces()),
                Err(e) => entry.error = Some(e.to_string()),
            }
        }
        report.devices.push(entry);
    }
    let text = if cli.json {
        report.to_json()? + "\n"
    } else {
        report.to_text()
    };
    print(&text)
}

fn print(text: &str) -> Result<(), IdentifyError> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()?;
    Ok(())
}

fn main() -> ExitCode {
    nvme_tool_support::main(|cli: &Cli| run(cli))
}
