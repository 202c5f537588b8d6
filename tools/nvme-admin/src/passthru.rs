//! `nvme-admin admin-passthru` and `nvme-admin io-passthru`: nvme-cli's raw admin and I/O
//! commands, through the driver's safe passthrough ([`AdminCommand::passthru`],
//! [`IoPassthruCommand`]): the driver fills the command id and the data pointer, and refuses
//! commands that would reach host memory or queues it owns, or whose transfer it cannot bound
//! (vendor specific and reservation opcodes stay behind the unsafe raw interfaces). Both take
//! nvme-cli's options ([`PassthruArgs`], parsed and checked once in [`prepare`]) and print as
//! nvme-cli ([`finish`]): `NVMe command result:XXXXXXXX` and a hex dump of the data read, or
//! with `--raw-binary` the data's bytes unchanged (the result line then goes to stderr).
//!
//! The opcode is `-O` / `--opcode`: `-o` is the output format, as in every nvme-admin
//! subcommand (nvme-cli 2.x spells the opcode `-o`).
//!
//! `io-passthru` runs on a queue pair of its own, with `--timeout` as its command timeout;
//! `--metadata-len` must be 0 (separate metadata is refused; an extended-LBA namespace's
//! inline metadata is part of `--data-len`).

use clap::Args;
use std::time::{Duration, Instant};

use nvme_driver::spec::opcode::DataDirection;
use nvme_driver::spec::SubmissionEntry;
use nvme_driver::{
    AdminCommand, IoPassthruCommand, IoQueue, NvmCommand, NvmeController, PassthruData,
    QueuePairOptions,
};

use crate::{parse_u32, parse_u8, AdminError, Device};

/// nvme-cli's `admin-passthru` / `io-passthru` options (the same set in nvme-cli).
#[derive(Debug, Args)]
pub struct PassthruArgs {
    #[command(flatten)]
    pub dev: Device,
    /// Opcode (decimal or 0x hex). `-O`: nvme-cli's `-o` is the output format here.
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
    /// Metadata buffer length (must be 0: admin commands have none, and io-passthru carries
    /// no separate metadata buffer).
    #[arg(short = 'm', long = "metadata-len", default_value = "0", value_parser = parse_u32)]
    pub metadata_len: u32,
    /// Timeout in ms (admin-passthru: must be 0, the driver's admin timeout applies;
    /// io-passthru: the queue pair's command timeout, 0 for the default).
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
    /// Byte the data buffer is filled with before the command (and past the input file).
    #[arg(short = 'p', long = "prefill", default_value = "0", value_parser = parse_u8)]
    pub prefill: u8,
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

fn bad(cmd: &'static str, why: String) -> AdminError {
    AdminError::BadPassthru { cmd, why }
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

/// What both subcommands take from the command line, checked: the entry, the opcode's
/// direction, the data length and the data to send.
struct Prepared {
    sqe: SubmissionEntry,
    direction: DataDirection,
    len: usize,
    data: PassthruData,
}

/// The checks and the data both subcommands share: `--flags`/`--rsvd` zero, `--read` /
/// `--write` matching the opcode's bits 1:0, the input file (or `--prefill`) as the data of a
/// command that sends.
fn prepare(cmd: &'static str, args: &PassthruArgs) -> Result<Prepared, AdminError> {
    if args.flags != 0 || args.rsvd != 0 {
        return Err(bad(
            cmd,
            format!(
                "--flags {:#x} / --rsvd {:#x}: the driver builds the data pointer (PRPs, not fused): give 0",
                args.flags, args.rsvd
            ),
        ));
    }
    let direction = match args.opcode & 0b11 {
        0b01 => DataDirection::ToDevice,
        0b10 => DataDirection::FromDevice,
        0b00 => DataDirection::None,
        _ => DataDirection::Bidirectional,
    };
    if (args.read && direction != DataDirection::FromDevice)
        || (args.write && direction != DataDirection::ToDevice)
    {
        return Err(bad(
            cmd,
            format!(
                "opcode {:#04x} moves data {direction:?} (opcode bits 1:0), not as --read/--write say",
                args.opcode
            ),
        ));
    }
    let len = args.data_len as usize;
    let data = match (&args.input_file, direction) {
        (Some(path), DataDirection::ToDevice) => {
            let mut bytes = std::fs::read(path).map_err(|source| AdminError::DataFile {
                path: path.clone(),
                source,
            })?;
            if bytes.len() < len {
                return Err(bad(
                    cmd,
                    format!(
                        "--input-file {path} holds {} bytes, fewer than --data-len {len}",
                        bytes.len()
                    ),
                ));
            }
            bytes.truncate(len);
            PassthruData::Send(bytes)
        }
        (Some(_), _) => {
            return Err(bad(
                cmd,
                format!(
                    "--input-file: opcode {:#04x} does not send data to the controller",
                    args.opcode
                ),
            ))
        }
        (None, DataDirection::ToDevice) => PassthruData::Send(vec![args.prefill; len]),
        (None, _) => PassthruData::Receive(len),
    };
    Ok(Prepared {
        sqe: sqe(args),
        direction,
        len,
        data,
    })
}

/// nvme-cli's output of a finished command: `text` so far, the latency (`--latency`), the
/// result line and the data read (hex dump, or `--raw-binary` bytes).
fn finish(
    cmd: &'static str,
    args: &PassthruArgs,
    mut text: String,
    elapsed: Duration,
    dw0: u32,
    direction: DataDirection,
    mut data: Vec<u8>,
) -> PassthruOutput {
    if args.latency {
        text += &format!("  latency: {cmd}: {} us\n", elapsed.as_micros());
    }
    data.truncate(args.data_len as usize);
    let result = format!("NVMe command result:{dw0:08x}\n");
    if args.raw {
        eprint!("{result}");
        return PassthruOutput {
            text,
            raw: Some(data),
        };
    }
    text += &result;
    if direction == DataDirection::FromDevice && !data.is_empty() {
        text += "       0  1  2  3  4  5  6  7  8  9  a  b  c  d  e  f\n";
        crate::manage::hex_dump(&mut text, &data);
    }
    PassthruOutput { text, raw: None }
}

/// Runs `admin-passthru` on `ctrl`.
pub fn admin<C: NvmeController>(
    ctrl: &C,
    args: &PassthruArgs,
) -> Result<PassthruOutput, AdminError> {
    const CMD: &str = "admin-passthru";
    if args.metadata_len != 0 {
        return Err(bad(
            CMD,
            "--metadata-len: admin commands carry no metadata: give 0".into(),
        ));
    }
    if args.timeout != 0 {
        return Err(bad(
            CMD,
            "--timeout: the driver's admin timeout applies to every admin command: leave it out"
                .into(),
        ));
    }
    let p = prepare(CMD, args)?;
    let command = AdminCommand::passthru(p.sqe, p.data)?;
    let mut text = String::new();
    if args.show || args.dry_run {
        text += &show(args);
    }
    if args.dry_run {
        return Ok(PassthruOutput { text, raw: None });
    }
    let start = Instant::now();
    let reply = ctrl.admin(command)?;
    let elapsed = start.elapsed();
    Ok(finish(
        CMD,
        args,
        text,
        elapsed,
        reply.dw0,
        p.direction,
        reply.data,
    ))
}

/// Runs `io-passthru` on `ctrl`: on namespace `--namespace-id`, through a queue pair of its
/// own whose command timeout is `--timeout` (when not 0).
pub fn io<C: NvmeController>(ctrl: &C, args: &PassthruArgs) -> Result<PassthruOutput, AdminError> {
    const CMD: &str = "io-passthru";
    if args.metadata_len != 0 {
        return Err(bad(
            CMD,
            "--metadata-len: the passthrough carries no separate metadata buffer: give 0 (an \
             extended-LBA namespace's metadata is part of --data-len)"
                .into(),
        ));
    }
    if args.nsid == 0 {
        return Err(bad(
            CMD,
            "--namespace-id: give the namespace the command goes to (`nvme-admin list` shows them)"
                .into(),
        ));
    }
    let p = prepare(CMD, args)?;
    let ns = ctrl.namespace(args.nsid)?;
    let command = IoPassthruCommand::new(p.sqe, &ns, p.len)?;
    let mut text = String::new();
    if args.show || args.dry_run {
        text += &show(args);
    }
    if args.dry_run {
        return Ok(PassthruOutput { text, raw: None });
    }
    let mut options = QueuePairOptions::default();
    if args.timeout != 0 {
        options.timeout = Duration::from_millis(u64::from(args.timeout));
    }
    let mut q = ctrl.create_queue_pair(options)?;
    let buf = if command.direction() == DataDirection::None {
        None
    } else {
        let mut buf = ctrl.alloc_buffer(p.len)?;
        match &p.data {
            PassthruData::Send(bytes) => buf[..bytes.len()].copy_from_slice(bytes),
            PassthruData::Receive(_) => buf.fill(args.prefill),
        }
        Some(buf)
    };
    let start = Instant::now();
    q.submit(&ns, command, buf, 0).map_err(|f| f.error)?;
    let mut done = None;
    while done.is_none() {
        q.poll(|c| done = Some(c));
    }
    let elapsed = start.elapsed();
    let c = done.expect("polled until done");
    let dw0 = c.result?;
    let data = c.buffer.map(|b| b[..p.len].to_vec()).unwrap_or_default();
    Ok(finish(CMD, args, text, elapsed, dw0, p.direction, data))
}
