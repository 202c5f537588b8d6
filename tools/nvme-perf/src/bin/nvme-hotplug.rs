//! `nvme-hotplug` command line entry (see `nvme-hotplug --help` and
//! `nvme_perf::hotplug`): exit status 1 when a controller's I/O failed with anything but
//! `Removed`.

use std::process::ExitCode;

use nvme_device::probe::{Attached, Probe, ProbeDecision};
use nvme_device::HotplugMonitor;
use nvme_driver::ControllerOptions;
use nvme_perf::hotplug::{HotplugArgs, WorkerEnd};
use nvme_perf::PerfError;

fn main() -> ExitCode {
    nvme_tool_support::main(|args: &HotplugArgs| run(args))
}

fn run(args: &HotplugArgs) -> Result<(), PerfError> {
    let probe = Probe::new().sysfs(nvme_vfio::Sysfs::new(&args.sysfs));
    let monitor = HotplugMonitor::new(
        probe,
        Attached::new(),
        |_| ProbeDecision::Attach(ControllerOptions::default()),
        |_, _| {},
    )
    .map_err(|source| PerfError::Driver {
        context: "hot-plug monitor".into(),
        source,
    })?;
    let summary = nvme_perf::hotplug::run(monitor, args, &mut std::io::stdout())?;
    let failed: Vec<String> = summary
        .iter()
        .filter_map(|(a, s)| match &s.end {
            WorkerEnd::Failed(e) => Some(format!("{a}: {e}")),
            _ => None,
        })
        .collect();
    if let Some(first) = failed.first() {
        return Err(PerfError::IoErrors {
            count: failed.len() as u64,
            first: first.clone(),
        });
    }
    Ok(())
}
