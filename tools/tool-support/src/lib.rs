//! The entry point the tools share: logging from `RUST_LOG` (default `warn`), command-line
//! parsing where a usage error exits with status 1 (never a panic), and errors printed as
//! `error: <message>` followed by each distinct cause. The DEVICE argument (a PCI address or
//! an NVMe/TCP transport id) and the controller and queue-pair types over both transports
//! are the `nvme-device` library's, re-exported here for the tools.

use std::error::Error;
use std::process::ExitCode;

pub use nvme_device::{
    parse_target, AnyController, AnyQueuePair, AnyQueueStats, IoQueue, Target, TargetError,
    EMULATOR_DEVICE,
};

/// Runs a tool's `run` with its parsed command line and turns the outcome into an exit status:
/// 0 on success, 1 on a usage error or a failure (`--help`/`--version` exit 0).
pub fn main<C: clap::Parser, E: Error>(run: impl FnOnce(&C) -> Result<(), E>) -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let cli = match C::try_parse() {
        Ok(cli) => cli,
        Err(e) if e.use_stderr() => {
            let _ = e.print();
            return ExitCode::FAILURE;
        }
        Err(e) => e.exit(),
    };
    match run(&cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprint!("{}", error_report(&e));
            ExitCode::FAILURE
        }
    }
}

/// `error: <message>` and one `  caused by: <cause>` line per distinct cause (transparent
/// wrappers repeat their inner message; each message is shown once).
pub fn error_report(error: &dyn Error) -> String {
    let mut message = error.to_string();
    let mut out = format!("error: {message}\n");
    let mut source = error.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !message.contains(&text) {
            out.push_str(&format!("  caused by: {text}\n"));
        }
        message = text;
        source = cause.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Leaf;
    impl std::fmt::Display for Leaf {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("permission denied")
        }
    }
    impl Error for Leaf {}

    #[derive(Debug)]
    struct Wrapper(Leaf, &'static str);
    impl std::fmt::Display for Wrapper {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.1)
        }
    }
    impl Error for Wrapper {
        fn source(&self) -> Option<&(dyn Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn causes_are_listed_once() {
        let distinct = Wrapper(Leaf, "opening /dev/vfio/3");
        assert_eq!(
            error_report(&distinct),
            "error: opening /dev/vfio/3\n  caused by: permission denied\n"
        );
        let repeating = Wrapper(Leaf, "opening /dev/vfio/3: permission denied");
        assert_eq!(
            error_report(&repeating),
            "error: opening /dev/vfio/3: permission denied\n"
        );
    }
}
