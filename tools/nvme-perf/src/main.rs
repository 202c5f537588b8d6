//! `nvme-perf` command line entry: parse, run, print; exit status 1 on any error (see
//! `nvme-perf --help`).

use std::io::Write;
use std::process::ExitCode;

use nvme_perf::{Args, PerfError, Report};

fn main() -> ExitCode {
    nvme_tool_support::main(|args: &Args| run(args))
}

fn run(args: &Args) -> Result<(), PerfError> {
    let config = args.validate()?;
    let report: Report = nvme_perf::run(&config)?;
    let text = if config.json {
        report.to_json() + "\n"
    } else {
        report.to_text(&config, config.histogram)
    };
    // A closed stdout (e.g. `| head`) is not worth an error message.
    let _ = std::io::stdout().lock().write_all(text.as_bytes());
    if let Some(v) = report.verify.as_ref().filter(|v| v.mismatches > 0) {
        return Err(PerfError::VerifyMismatch {
            count: v.mismatches,
            first: v.first_mismatch.clone().unwrap_or_default(),
        });
    }
    if report.errors > 0 {
        return Err(PerfError::IoErrors {
            count: report.errors,
            first: report.first_error.unwrap_or_default(),
        });
    }
    Ok(())
}
