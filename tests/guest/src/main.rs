//! `guest-check`: checks run inside the QEMU test guest.
//!
//! `guest-check identify ID.json [--sysfs /sys]` compares saved `nvme-identify --json` output
//! with the kernel nvme driver's view of the same controller and prints one `ok` / `MISMATCH`
//! line per comparison. Exit status: 0 when all agree, 1 on any mismatch, 2 when the comparison
//! could not run (unreadable JSON, controller not bound to the kernel driver).
//!
//! `guest-check admin DIR [--sysfs /sys]` compares saved `nvme-admin -o json` output with
//! nvme-cli's (or, with `--sysfs`, with the kernel's sysfs), see [`nvme_guest_tests::admin`].

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use nvme_guest_tests::{
    admin, compare, load_report, Check, CheckError, DEFAULT_KERNEL_MAX_TRANSFER_BYTES,
};

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
    /// Compare `nvme-admin -o json` output with nvme-cli's, both saved in DIR.
    Admin {
        /// Directory holding ours-*.json and kernel-*.json / kernel-feature-*.txt.
        dir: PathBuf,
        /// Compare with this sysfs tree instead (no nvme-cli in the guest).
        #[arg(long)]
        sysfs: Option<PathBuf>,
    },
}

/// Prints one line per check and the summary; the exit status says whether all agreed.
fn report(name: &str, result: Result<Vec<Check>, CheckError>) -> ExitCode {
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
        println!("guest-check {name}: all {} checks agree", checks.len());
        ExitCode::SUCCESS
    } else {
        println!(
            "guest-check {name}: {bad} of {} checks MISMATCH",
            checks.len()
        );
        ExitCode::from(EXIT_MISMATCH)
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Identify {
            json,
            sysfs,
            kernel_max_transfer,
        } => report(
            "identify",
            load_report(&json).and_then(|report| compare(&report, &sysfs, kernel_max_transfer)),
        ),
        Command::Admin { dir, sysfs } => report(
            "admin",
            match sysfs {
                Some(sys) => admin::compare_with_sysfs(&dir, &sys),
                None => admin::compare_with_nvme_cli(&dir),
            },
        ),
    }
}
