//! `nvme-admin`: nvme-cli's management subcommands through our driver (see the library's
//! documentation for the subcommands and options).

use std::process::ExitCode;

use nvme_admin::{run, Cli};

fn main() -> ExitCode {
    nvme_tool_support::main(|cli: &Cli| run(cli))
}
