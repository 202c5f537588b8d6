//! `nvme-admin admin-passthru`: nvme-cli's raw admin command, through the driver's safe
//! passthrough ([`AdminCommand::passthru`]): the driver fills the command id and the data
//! pointer, and refuses commands that would reach host memory or queues it owns, or whose
//! transfer it cannot bound (vendor specific opcodes stay behind the unsafe raw interface).
//! Output as nvme-cli: `NVMe command result:XXXXXXXX` and a hex dump of the data read, or
//! with `--raw-binary` the data's bytes unchanged (the result line then goes to stderr).

use clap::Args;
use nvme_driver::spec::opcode::DataDirection;
use nvme_driver::spec::SubmissionEntry;
use nvme_driver::{AdminCommand, NvmeController, PassthruData};

use crate::{parse_u32, parse_u8, AdminError, Device};

/// nvme-cli's `admin-passthru` options.
#[derive(Debug, Args)]
pub struct PassthruArgs {
    #[command(flatten)]
    pub dev: Device,
    /// Opcode (decimal or 0x hex).
    #[arg(short = 'O', long = "opcode", value_parser = parse_u8)]
    pub opcode: u8,
    /// CDW0 bits 15:8 (fused operation, PSDT): must be 0, the driver builds the data pointer.
    #[arg(short = 'f', long = "flags", default_value = "0", value_parser = parse_u8)]
    pub flags: u8,
    /// Reserved field (must be 0).
    #[arg(short = 'R', long = "rsvd", default_value = "0", value_parser = parse_u32)]
    pub rsvd: u32,
    /// Namespace ID.
    #[arg(short = 'n', long = "namespace-id", default_value = "0", value_parser = parse_u32)]
    pub nsid: u32,
    /// Data buffer length in bytes.
    #[arg(short = 'l', long = "data-len", default_value = "0", value_parser = parse_u32)]
    pub data_len: u32,
    /// Metadata buffer length (admin commands have none: must be 0).
    #[arg(short = 'm', long = "metadata-len", default_value = "0", value_parser = parse_u32)]
    pub metadata_len: u32,
    /// Timeout in ms (0: the driver's admin timeout, the only one it applies).
    #[arg(short = 't', long = "timeout", default_value = "0", value_parser = parse_u32)]
    pub timeout: u32,
    #[arg(short = '2', long = "cdw2", default_value = "0", value_parser = parse_u32)]
    pub cdw2: u32,
    #[arg(short = '3', long = "cdw3", default_value = "0", value_parser = parse_u32)]
    pub cdw3: u32,
    #[arg(short = '4', long = "cdw10", default_value = "0", value_parser = parse_u32)]
    pub cdw10: u32,
    #[arg(short = '5', long = "cdw11", default_value = "0", value_parser = parse_u32)]
    pub cdw11: u32,
    #[arg(short = '6', long = "cdw12", default_value = "0", value_parser = parse_u32)]
    pub cdw12: u32,
    #[arg(short = '7', long = "cdw13", default_value = "0", value_parser = parse_u32)]
    pub cdw13: u32,
    #[arg(short = '8', long = "cdw14", default_value = "0", value_parser = parse_u32)]
    pub cdw14: u32,
    #[arg(short = '9', long = "cdw15", default_value = "0", value_parser = parse_u32)]
    pub cdw15: u32,
    /// File with the data to send (write commands).
    #[arg(short = 'i', long = "input-file")]
    pub input_file: Option<String>,
    /// Write the data read unchanged to standard output.
    #[arg(short = 'b', long = "raw-binary")]
    pub raw: bool,
    /// Print the command before sending it.
    #[arg(short = 's', long = "show-command")]
    pub show: bool,
    /// Print the command and send nothing.
    #[arg(short = 'd', long = "dry-run")]
    pub dry_run: bool,
    /// The command reads from the controller (checked against the opcode's bits 1:0).
    #[arg(short = 'r', long = "read")]
    pub read: bool,
    /// The command writes to the controller (checked against the opcode's bits 1:0).
    #[arg(short = 'w', long = "write")]
    pub write: bool,
    /// Print the command's latency in microseconds.
    #[arg(short = 'T', long = "latency")]
    pub latency: bool,
}

/// What `admin-passthru` prints: text for stdout, and optionally bytes (`--raw-binary`).
pub struct PassthruOutput {
    pub text: String,
    pub raw: Option<Vec<u8>>,
}

fn bad(why: String) -> AdminError {
    AdminError::BadPassthru(why)
}

fn sqe(args: &PassthruArgs) -> SubmissionEntry {
    let mut sqe = SubmissionEntry::new(args.opcode);
    sqe.nsid = args.nsid;
    sqe.cdw2 = args.cdw2;
    sqe.cdw3 = args.cdw3;
    sqe.cdw10 = args.cdw10;
    sqe.cdw11 = args.cdw11;
    sqe.cdw12 = args.cdw12;
    sqe.cdw13 = args.cdw13;
    sqe.cdw14 = args.cdw14;
    sqe.cdw15 = args.cdw15;
    sqe
}

/// nvme-cli's `--show-command` listing.
fn show(args: &PassthruArgs) -> String {
    let mut s = format!(
        "opcode       : {:02x}\nflags        : {:02x}\nrsvd1        : {:04x}\nnsid         : {:08x}\n\
         cdw2         : {:08x}\ncdw3         : {:08x}\ndata_len     : {:08x}\nmetadata_len : {:08x}\n",
        args.opcode, args.flags, args.rsvd, args.nsid, args.cdw2, args.cdw3, args.data_len,
        args.metadata_len
    );
    for (n, v) in [
        (10, args.cdw10),
        (11, args.cdw11),
        (12, args.cdw12),
        (13, args.cdw13),
        (14, args.cdw14),
        (15, args.cdw15),
    ] {
        s += &format!("cdw{n}        : {v:08x}\n");
    }
    s += &format!("timeout_ms   : {:08x}\n", args.timeout);
    s
}

/// Runs `admin-passthru` on `ctrl`.
pub fn admin<C: NvmeController>(
    ctrl: &C,
    args: &PassthruArgs,
) -> Result<PassthruOutput, AdminError> {
    if args.flags != 0 || args.rsvd != 0 {
        return Err(bad(format!(
            "--flags {:#x} / --rsvd {:#x}: the driver builds the data pointer (PRPs, not fused): give 0",
            args.flags, args.rsvd
        )));
    }
    if args.metadata_len != 0 {
        return Err(bad(
            "--metadata-len: admin commands carry no metadata: give 0".into(),
        ));
    }
    if args.timeout != 0 {
        return Err(bad(
            "--timeout: the driver's admin timeout applies to every admin command: leave it out"
                .into(),
        ));
    }
    let sqe = sqe(args);
    let direction = match args.opcode & 0b11 {
        0b01 => DataDirection::ToDevice,
        0b10 => DataDirection::FromDevice,
        0b00 => DataDirection::None,
        _ => DataDirection::Bidirectional,
    };
    if (args.read && direction != DataDirection::FromDevice)
        || (args.write && direction != DataDirection::ToDevice)
    {
        return Err(bad(format!(
            "opcode {:#04x} moves data {direction:?} (opcode bits 1:0), not as --read/--write say",
            args.opcode
        )));
    }
    let len = args.data_len as usize;
    let data = match (&args.input_file, direction) {
        (Some(path), DataDirection::ToDevice) => {
            let mut bytes = std::fs::read(path).map_err(|source| AdminError::DataFile {
                path: path.clone(),
                source,
            })?;
            if bytes.len() < len {
                return Err(bad(format!(
                    "--input-file {path} holds {} bytes, fewer than --data-len {len}",
                    bytes.len()
                )));
            }
            bytes.truncate(len);
            PassthruData::Send(bytes)
        }
        (Some(_), _) => {
            return Err(bad(format!(
                "--input-file: opcode {:#04x} does not send data to the controller",
                args.opcode
            )))
        }
        (None, DataDirection::ToDevice) => PassthruData::Send(vec![0; len]),
        (None, _) => PassthruData::Receive(len),
    };
    let command = AdminCommand::passthru(sqe, data)?;
    let mut text = String::new();
    if args.show || args.dry_run {
        text += &show(args);
    }
    if args.dry_run {
        return Ok(PassthruOutput { text, raw: None });
    }
    let start = std::time::Instant::now();
    let reply = ctrl.admin(command)?;
    let elapsed = start.elapsed();
    if args.latency {
        text += &format!("  latency: admin-passthru: {} us\n", elapsed.as_micros());
    }
    let mut data = reply.data;
    data.truncate(len);
    let result = format!("NVMe command result:{:08x}\n", reply.dw0);
    if args.raw {
        eprint!("{result}");
        return Ok(PassthruOutput {
            text,
            raw: Some(data),
        });
    }
    text += &result;
    if direction == DataDirection::FromDevice && !data.is_empty() {
        text += "       0  1  2  3  4  5  6  7  8  9  a  b  c  d  e  f\n";
        crate::manage::hex_dump(&mut text, &data);
    }
    Ok(PassthruOutput { text, raw: None })
}
