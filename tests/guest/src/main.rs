//! `guest-check`: checks run inside the QEMU test guest.
//!
//! `guest-check identify ID.json [--sysfs /sys]` compares saved `nvme-identify --json` output
//! with the kernel nvme driver's view of the same controller and prints one `ok` / `MISMATCH`
//! line per comparison. Exit status: 0 when all agree, 1 on any mismatch, 2 when the comparison
//! could not run (unreadable JSON, controller not bound to the kernel driver).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use nvme_guest_tests::{compare, load_report, DEFAULT_KERNEL_MAX_TRANSFER_BYTES};

/// Exit status when at least one comparison disagreed.
const EXIT_MISMATCH: u8 = 1;
/// Exit status when the comparison could not be made at all.
const EXIT_ERROR: u8 = 2;

#[derive(Parser)]
#[command(
    name = "guest-check",
    about = "Cross-check our NVMe tools against the kernel nvme driver"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Compare `nvme-identify --json` output with sysfs (controller bound to the kernel driver).
    Identify {
        /// File holding the output of `nvme-identify --json BDF`.
        json: PathBuf,
        /// Root of the sysfs tree to read.
        #[arg(long, default_value = "/sys")]
        sysfs: PathBuf,
        /// Largest transfer the kernel driver allows regardless of MDTS, in bytes.
        #[arg(long, default_value_t = DEFAULT_KERNEL_MAX_TRANSFER_BYTES)]
        kernel_max_transfer: u64,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Identify {
            json,
            sysfs,
            kernel_max_transfer,
        } => {
            let result =
                load_report(&json).and_then(|report| compare(&report, &sysfs, kernel_max_transfer));
            let checks = match result {
                Ok(checks) => checks,
                Err(e) => {
                    eprintln!("guest-check: error: {e}");
                    return ExitCode::from(EXIT_ERROR);
                }
            };
            for check in &checks {
                println!("{check}");
            }
            let bad = checks.iter().filter(|c| !c.ok).count();
            if bad == 0 {
                println!("guest-check identify: all {} checks agree", checks.len());
                ExitCode::SUCCESS
            } else {
                println!(
                    "guest-check identify: {bad} of {} checks MISMATCH",
                    checks.len()
                );
                ExitCode::from(EXIT_MISMATCH)
            }
        }
    }
}
