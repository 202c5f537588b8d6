//! `fw-download` and `fw-commit` (nvme-cli's names and options): Firmware Image Download
//! (NVMe Base 2.0 §5.13) of an image file in pieces, and Firmware Commit (§5.12) of it to a
//! slot. nvme-cli spells fw-download's offset `-o`; here `-o` is the output format (as for
//! every subcommand), so the offset is `-O/--offset` (as admin-passthru's opcode). A
//! controller whose OACS lacks Firmware Download/Commit (QEMU 7.2's) refuses both before
//! anything is sent; `fw-log` shows the slots.

use std::path::PathBuf;

use clap::Args;
use nvme_driver::spec::firmware::{CommitAction, CommitOutcome, FirmwareCommit};
use nvme_driver::{AdminCommands, NvmeController};
use serde_json::{json, Value};

use crate::{parse_u32, parse_u8, AdminError, Device};

/// `fw-download`.
#[derive(Debug, Args)]
pub struct FwDownloadArgs {
    #[command(flatten)]
    pub dev: Device,
    /// The firmware image file (its length a multiple of 4 bytes).
    #[arg(short = 'f', long = "fw")]
    pub fw: PathBuf,
    /// Bytes per Firmware Image Download (0: the controller's largest transfer, MDTS; a
    /// multiple of 4, and of FWUG where the controller states one).
    #[arg(short = 'x', long = "xfer", default_value = "0", value_parser = parse_u32)]
    pub xfer: u32,
    /// Byte offset of the file in the image (nvme-cli's `-o`).
    #[arg(short = 'O', long = "offset", default_value = "0", value_parser = parse_u32)]
    pub offset: u32,
}

/// `fw-commit`.
#[derive(Debug, Args)]
pub struct FwCommitArgs {
    #[command(flatten)]
    pub dev: Device,
    /// Firmware slot (1..=7; 0: the controller chooses).
    #[arg(short = 's', long = "slot", default_value = "0", value_parser = parse_u8)]
    pub slot: u8,
    /// Commit action: 0 replace, 1 replace and activate at the next reset, 2 activate the
    /// slot at the next reset, 3 replace and activate now, 6 replace the boot partition,
    /// 7 mark the boot partition active.
    #[arg(short = 'a', long = "action", value_parser = parse_action)]
    pub action: CommitAction,
    /// Boot partition (0 or 1), for actions 6 and 7.
    #[arg(short = 'b', long = "bpid", default_value = "0", value_parser = clap::value_parser!(u8).range(0..=1))]
    pub bpid: u8,
}

fn parse_action(s: &str) -> Result<CommitAction, String> {
    let raw = parse_u8(s)?;
    CommitAction::from_raw(raw).ok_or_else(|| {
        format!(
            "commit action {raw} is not 0 (replace), 1 (replace, activate at reset), 2 \
             (activate at reset), 3 (replace, activate now), 6 or 7 (boot partition)"
        )
    })
}

/// `fw-download`: reads the file, sends it; refused before sending anything when the
/// controller lacks the command or the layout does not fit it.
pub fn download<C: NvmeController>(ctrl: &C, args: &FwDownloadArgs) -> Result<Value, AdminError> {
    let image = std::fs::read(&args.fw).map_err(|source| AdminError::DataFile {
        path: args.fw.display().to_string(),
        source,
    })?;
    let chunk = Some(args.xfer as usize).filter(|&x| x != 0);
    let pieces = ctrl.firmware_download_chunked(u64::from(args.offset), &image, chunk)?;
    Ok(json!({
        "fw-download": "Success",
        "file": args.fw.display().to_string(),
        "offset": args.offset,
        "bytes": image.len(),
        "pieces": pieces,
    }))
}

/// `fw-commit`: the action's outcome (a "requires reset" status is an outcome, the image is
/// committed).
pub fn commit<C: NvmeController>(ctrl: &C, args: &FwCommitArgs) -> Result<Value, AdminError> {
    let commit = FirmwareCommit {
        bpid: args.bpid == 1,
        ..FirmwareCommit::new(args.slot, args.action)
    };
    let outcome = ctrl.firmware_commit(commit)?;
    let reset = match outcome {
        CommitOutcome::RequiresReset(r) => Value::from(r.name()),
        _ => Value::Null,
    };
    Ok(json!({
        "fw-commit": "Success",
        "slot": args.slot,
        "action": args.action.raw(),
        "bpid": args.bpid,
        "outcome": outcome.to_string(),
        "reset required": reset,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvme_sim::{sim_firmware_image, SimConfig};

    fn dev() -> Device {
        Device {
            device: vec!["sim".into()],
            output: crate::Format::Json,
        }
    }

    fn file(dir: &std::path::Path, name: &str, bytes: &[u8]) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, bytes).unwrap();
        path
    }

    fn tmpdir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("nvme-admin-fw-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn download_args(fw: PathBuf, xfer: u32, offset: u32) -> FwDownloadArgs {
        FwDownloadArgs {
            dev: dev(),
            fw,
            xfer,
            offset,
        }
    }

    fn commit_args(slot: u8, action: CommitAction) -> FwCommitArgs {
        FwCommitArgs {
            dev: dev(),
            slot,
            action,
            bpid: 0,
        }
    }

    /// An image downloaded in 16 KiB pieces and committed with activation shows in fw-log as
    /// the running slot's revision.
    #[test]
    fn download_commit_and_the_log_shows_it() {
        let dir = tmpdir("ok");
        let (_sim, ctrl) = crate::emulator::controller(SimConfig::default());
        let fw = file(&dir, "fw.bin", &sim_firmware_image("9.9.9", 40 << 10));
        let v = download(&ctrl, &download_args(fw, 16 << 10, 0)).unwrap();
        assert_eq!(v["fw-download"], "Success");
        assert_eq!(
            (v["bytes"].as_u64(), v["pieces"].as_u64()),
            (Some(40 << 10), Some(3))
        );
        let v = commit(&ctrl, &commit_args(3, CommitAction::ReplaceAndActivateNow)).unwrap();
        assert_eq!(v["outcome"], "activated");
        assert_eq!(v["reset required"], Value::Null);
        assert_eq!(v["slot"], 3);
        let log = crate::output::fw_log("sim", &ctrl.firmware_slot_log().unwrap());
        // afi: slot 3 running, nothing pending; slot 3 holds "9.9.9   ".
        assert_eq!(log["sim"]["Active Firmware Slot (afi)"], 3);
        let rev = log["sim"]["Firmware Rev Slot 3"].as_str().unwrap();
        assert!(rev.ends_with("(9.9.9...)"), "{rev}");
        // Slot 1 again at the next reset.
        let v = commit(&ctrl, &commit_args(1, CommitAction::ActivateAtReset)).unwrap();
        assert_eq!(v["outcome"], "activated at the next reset");
        assert_eq!(ctrl.firmware_slot_log().unwrap().next_slot(), Some(1));
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// Bad files and offsets, bad slots and a controller without the commands: each refused
    /// with a message that says why.
    #[test]
    fn refusals_say_why() {
        let dir = tmpdir("bad");
        let (_sim, ctrl) = crate::emulator::controller(SimConfig::default());
        let odd = file(&dir, "odd.bin", &[0; 4095]);
        let e = download(&ctrl, &download_args(odd, 0, 0))
            .unwrap_err()
            .to_string();
        assert!(e.contains("4095 bytes, not a multiple of 4"), "{e}");
        let fw = file(&dir, "fw.bin", &sim_firmware_image("2", 8192));
        let e = download(&ctrl, &download_args(fw.clone(), 0, 512))
            .unwrap_err()
            .to_string();
        assert!(e.contains("FWUG"), "{e}");
        let missing = dir.join("missing.bin");
        let e = download(&ctrl, &download_args(missing, 0, 0))
            .unwrap_err()
            .to_string();
        assert!(e.contains("cannot read the data file"), "{e}");
        download(&ctrl, &download_args(fw.clone(), 0, 0)).unwrap();
        let e = commit(&ctrl, &commit_args(1, CommitAction::Replace))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("Invalid Firmware Slot") && e.contains("read only"),
            "{e}"
        );

        let (_sim, ctrl) = crate::emulator::controller(SimConfig {
            firmware_update: None,
            ..SimConfig::default()
        });
        let e = download(&ctrl, &download_args(fw, 0, 0))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("Firmware Image Download") && e.contains("OACS bit 2"),
            "{e}"
        );
        let e = commit(&ctrl, &commit_args(1, CommitAction::ActivateAtReset))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("Firmware Commit") && e.contains("OACS bit 2"),
            "{e}"
        );
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn actions_parse() {
        assert_eq!(parse_action("3"), Ok(CommitAction::ReplaceAndActivateNow));
        assert_eq!(parse_action("0x7"), Ok(CommitAction::ActivateBootPartition));
        assert!(parse_action("4").unwrap_err().contains("not 0 (replace)"));
        assert!(parse_action("256").is_err());
    }
}
