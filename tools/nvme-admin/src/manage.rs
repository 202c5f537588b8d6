//! The subcommands that change a controller's namespaces or read raw logs: `format`,
//! `attach-ns`, `detach-ns`, `list-ctrl` and `get-log`, with nvme-cli's names and options.
//!
//! `format` destroys the namespace's data: without `--force` it asks on standard error and
//! goes on only when standard input answers `y` or `yes` (like nvme-cli, which warns and
//! waits unless given `--force`). Each command the controller does not offer (Identify
//! Controller OACS) is refused by the driver before anything is sent.

use std::io::BufRead;

use clap::Args;
use nvme_driver::spec::identify::IdentifyNamespace;
use nvme_driver::spec::log::NSID_BROADCAST;
use nvme_driver::spec::manage::{FormatNvm, SecureErase};
use nvme_driver::{AdminCommands, NamespaceChanges, NvmeController};
use serde_json::{json, Value};

use crate::{parse_u8, AdminError, Device};

/// Highest Protection Information type Format NVM takes (CDW10 PI, §5.23).
const MAX_PI: u8 = 3;
/// Highest Secure Erase Setting nvme-admin types ([`SecureErase`]).
const MAX_SES: u8 = 2;
/// Bytes per line of `get-log`'s hex dump.
const HEX_LINE: usize = 16;

/// `format`: Format NVM (§5.23).
#[derive(Debug, Args)]
pub struct FormatArgs {
    #[command(flatten)]
    pub dev: Device,
    /// Namespace ID to format.
    #[arg(short = 'n', long = "namespace-id", default_value_t = 1)]
    pub nsid: u32,
    /// LBA format index (Identify Namespace LBAF; `id-ns` lists them).
    #[arg(short = 'l', long = "lbaf", value_parser = parse_u8)]
    pub lbaf: Option<u8>,
    /// Pick the LBA format with this data size and no metadata (instead of --lbaf).
    #[arg(short = 'b', long = "block-size", conflicts_with = "lbaf")]
    pub block_size: Option<u32>,
    /// Secure Erase Settings: 0 none, 1 user data erase, 2 cryptographic erase.
    #[arg(short = 's', long = "ses", default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=i64::from(MAX_SES)))]
    pub ses: u8,
    /// Protection Information: 0 none, 1..3 PI type 1..3.
    #[arg(short = 'i', long = "pi", default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=i64::from(MAX_PI)))]
    pub pi: u8,
    /// Protection Information Location: 1 first bytes of the metadata, 0 last.
    #[arg(short = 'p', long = "pil", default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=1))]
    pub pil: u8,
    /// Metadata Settings: 1 metadata inline after each block (extended LBA), 0 separate.
    #[arg(short = 'm', long = "ms", default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=1))]
    pub ms: u8,
    /// Do not ask for confirmation (the namespace's data is lost).
    #[arg(long = "force")]
    pub force: bool,
}

/// `attach-ns` / `detach-ns`: Namespace Attachment (§5.19).
#[derive(Debug, Args)]
pub struct AttachArgs {
    #[command(flatten)]
    pub dev: Device,
    /// Namespace ID to attach or detach.
    #[arg(short = 'n', long = "namespace-id")]
    pub nsid: u32,
    /// Controller identifiers, comma-separated (default: this controller's CNTLID).
    #[arg(short = 'c', long = "controllers", value_parser = parse_controllers)]
    pub controllers: Option<Controllers>,
}

/// `list-ctrl`: the Controller List (CNS 12h with `-n`, else 13h).
#[derive(Debug, Args)]
pub struct ListCtrlArgs {
    #[command(flatten)]
    pub dev: Device,
    /// Only the controllers this namespace is attached to.
    #[arg(short = 'n', long = "namespace-id")]
    pub nsid: Option<u32>,
    /// List controller identifiers from this one up.
    #[arg(short = 'c', long = "cntid", default_value_t = 0)]
    pub cntid: u16,
}

/// `get-log`: any log page, as bytes.
#[derive(Debug, Args)]
pub struct GetLogArgs {
    #[command(flatten)]
    pub dev: Device,
    /// Log page identifier (decimal or 0x hex).
    #[arg(short = 'i', long = "log-id", value_parser = parse_u8)]
    pub lid: u8,
    /// Bytes to read (a non-zero multiple of 4).
    #[arg(short = 'l', long = "log-len")]
    pub len: usize,
    /// Namespace ID (default: the whole controller).
    #[arg(short = 'n', long = "namespace-id", default_value_t = NSID_BROADCAST)]
    pub nsid: u32,
    /// Write the page's bytes unchanged to standard output.
    #[arg(short = 'b', long = "raw-binary")]
    pub raw: bool,
}

/// A parsed `--controllers` list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Controllers(pub Vec<u16>);

/// Parses `--controllers`: controller identifiers (decimal or 0x hex) separated by commas.
pub fn parse_controllers(s: &str) -> Result<Controllers, String> {
    let ids = s
        .split(',')
        .map(|part| {
            let part = part.trim();
            let v = crate::parse_number(part)?;
            u16::try_from(v).map_err(|_| format!("controller id {v} does not fit in 16 bits"))
        })
        .collect::<Result<Vec<u16>, String>>()?;
    Ok(Controllers(ids))
}

/// The LBA format index `args` asks for, checked against what `ns` offers.
fn chosen_lbaf(nsid: u32, ns: &IdentifyNamespace, args: &FormatArgs) -> Result<u8, AdminError> {
    let formats = ns.lba_formats();
    let offered = || {
        formats
            .iter()
            .enumerate()
            .map(|(i, f)| {
                format!(
                    "{i}: {} B + {} B metadata",
                    f.data_size(),
                    f.metadata_size()
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    let index = match (args.lbaf, args.block_size) {
        (Some(l), _) => usize::from(l),
        (None, Some(bs)) => formats
            .iter()
            .position(|f| f.metadata_size() == 0 && f.data_size() == bs)
            .ok_or_else(|| AdminError::BadFormat {
                nsid,
                why: format!("no LBA format of {bs}-byte blocks without metadata"),
                offered: offered(),
            })?,
        // nvme-cli's default: the format in use.
        (None, None) => ns.lba_format_index(),
    };
    match u8::try_from(index) {
        Ok(lbaf) if index < formats.len() => Ok(lbaf),
        _ => Err(AdminError::BadFormat {
            nsid,
            why: format!("LBA format {index} is not offered"),
            offered: offered(),
        }),
    }
}

/// Asks on stderr whether to format; true only for an answer `y` or `yes` on stdin.
fn confirmed(what: &str) -> Result<bool, AdminError> {
    eprintln!("WARNING: {what} erases all of its data. Type 'yes' to go on (or give --force):");
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line)?;
    Ok(matches!(line.trim(), "y" | "Y" | "yes" | "YES"))
}

fn changes(c: &NamespaceChanges) -> Value {
    json!({ "added": c.added, "removed": c.removed, "changed": c.changed })
}

/// `format`.
pub fn format<C: NvmeController>(ctrl: &C, args: &FormatArgs) -> Result<Value, AdminError> {
    let id = ctrl.identify_namespace(args.nsid)?;
    let lbaf = chosen_lbaf(args.nsid, &id, args)?;
    let settings = FormatNvm {
        lbaf,
        extended_metadata: args.ms == 1,
        pi: args.pi,
        pi_first: args.pil == 1,
        ses: SecureErase::from_raw(args.ses).unwrap_or_default(),
    };
    let what = format!("formatting namespace {} of {}", args.nsid, ctrl.name());
    if !args.force && !confirmed(&what)? {
        return Err(AdminError::NotConfirmed("format"));
    }
    let changed = ctrl.format_nvm(args.nsid, settings)?;
    let after = ctrl.identify_namespace(args.nsid)?;
    Ok(json!({
        "format": "Success",
        "nsid": args.nsid,
        "lbaf": lbaf,
        "ses": args.ses,
        "pi": args.pi,
        "pil": args.pil,
        "ms": args.ms,
        "block_size": after.block_size(),
        "nsze": after.nsze,
        "changes": changes(&changed),
    }))
}

/// `attach-ns` (`attach` true) or `detach-ns`.
pub fn attachment<C: NvmeController>(
    ctrl: &C,
    args: &AttachArgs,
    attach: bool,
) -> Result<Value, AdminError> {
    let ids = match &args.controllers {
        Some(c) => c.0.clone(),
        None => vec![ctrl.identify().cntlid],
    };
    let (name, changed) = if attach {
        ("attach-ns", ctrl.attach_namespace(args.nsid, &ids)?)
    } else {
        ("detach-ns", ctrl.detach_namespace(args.nsid, &ids)?)
    };
    Ok(json!({
        name: "Success",
        "nsid": args.nsid,
        "controllers": ids,
        "changes": changes(&changed),
    }))
}

/// `list-ctrl`: nvme-cli's `{"num_ctrl": N, "ctrl_list": [{"ctrl_id": ID}, ...]}`.
pub fn list_ctrl<C: NvmeController>(ctrl: &C, args: &ListCtrlArgs) -> Result<Value, AdminError> {
    let ids = ctrl.controller_list(args.nsid, args.cntid)?;
    let list: Vec<Value> = ids.iter().map(|id| json!({ "ctrl_id": id })).collect();
    Ok(json!({ "num_ctrl": ids.len(), "ctrl_list": list }))
}

/// `get-log`: the page's bytes.
pub fn get_log<C: NvmeController>(ctrl: &C, args: &GetLogArgs) -> Result<Vec<u8>, AdminError> {
    Ok(ctrl.namespace_log_page(args.lid, args.nsid, args.len)?)
}

/// `get-log -o json`: `{"log_id", "namespace_id", "log_len", "data": "<hex>"}`.
pub fn log_json(args: &GetLogArgs, page: &[u8]) -> Value {
    json!({
        "log_id": args.lid,
        "namespace_id": args.nsid,
        "log_len": page.len(),
        "data": crate::output::hex(page),
    })
}

/// `get-log` as text: a heading, then 16 bytes a line (offset, hex bytes, printable ASCII).
pub fn log_text(device: &str, args: &GetLogArgs, page: &[u8]) -> String {
    let mut out = format!(
        "Device:{device} log-id:{:#x} namespace-id:{:#x}\n",
        args.lid, args.nsid
    );
    hex_dump(&mut out, page);
    out
}

/// Appends `data` to `out` as 16-byte lines: offset, hex bytes, and the printable characters.
pub(crate) fn hex_dump(out: &mut String, data: &[u8]) {
    use std::fmt::Write as _;
    for (i, line) in data.chunks(HEX_LINE).enumerate() {
        let _ = write!(out, "{:04x}:", i * HEX_LINE);
        for b in line {
            let _ = write!(out, " {b:02x}");
        }
        for _ in line.len()..HEX_LINE {
            out.push_str("   ");
        }
        let ascii: String = line
            .iter()
            .map(|&b| {
                if b.is_ascii_graphic() || b == b' ' {
                    char::from(b)
                } else {
                    '.'
                }
            })
            .collect();
        let _ = writeln!(out, " \"{ascii}\"");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[test]
    fn controller_lists_parse() {
        assert_eq!(parse_controllers("0"), Ok(Controllers(vec![0])));
        assert_eq!(
            parse_controllers("1, 0x2,3"),
            Ok(Controllers(vec![1, 2, 3]))
        );
        assert!(parse_controllers("1,,2").is_err());
        assert!(parse_controllers("65536").unwrap_err().contains("16 bits"));
        assert!(parse_controllers("x").is_err());
    }

    #[test]
    fn format_options_are_checked_by_the_parser() {
        let ok = crate::Cli::try_parse_from([
            "nvme-admin",
            "format",
            "sim",
            "-n",
            "2",
            "--lbaf",
            "4",
            "--ses",
            "1",
            "--force",
        ]);
        assert!(ok.is_ok(), "{ok:?}");
        for bad in [
            &["--ses", "3"][..],
            &["--pi", "4"],
            &["--pil", "2"],
            &["--ms", "2"],
            &["--lbaf", "1", "--block-size", "4096"],
        ] {
            let mut argv = vec!["nvme-admin", "format", "sim"];
            argv.extend_from_slice(bad);
            assert!(crate::Cli::try_parse_from(&argv).is_err(), "{bad:?}");
        }
        assert!(crate::Cli::try_parse_from(["nvme-admin", "attach-ns", "sim"]).is_err());
    }

    #[test]
    fn log_text_is_a_hex_dump() {
        let args = GetLogArgs {
            dev: crate::Device {
                device: vec!["sim".into()],
                output: crate::Format::Normal,
            },
            lid: 2,
            len: 20,
            nsid: NSID_BROADCAST,
            raw: false,
        };
        let page: Vec<u8> = (0x41..0x41 + 20).collect();
        let text = log_text("sim", &args, &page);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "Device:sim log-id:0x2 namespace-id:0xffffffff");
        assert!(lines[1].starts_with("0000: 41 42 43"), "{}", lines[1]);
        assert!(lines[1].ends_with(" \"ABCDEFGHIJKLMNOP\""), "{}", lines[1]);
        assert!(
            lines[2].starts_with("0010: 51 52 53 54    "),
            "{}",
            lines[2]
        );
        assert_eq!(lines.len(), 3);
        assert_eq!(
            log_json(&args, &page)["data"],
            "4142434445464748494a4b4c4d4e4f5051525354"
        );
    }

    /// A controller whose OACS lacks Format NVM and Namespace Attachment: `format`,
    /// `attach-ns`, `detach-ns` are refused before anything is sent, naming OACS.
    #[test]
    fn commands_the_controller_lacks_are_refused() {
        let (_sim, ctrl) = crate::emulator::controller(nvme_sim::SimConfig {
            format_nvm: false,
            namespace_management: false,
            ..nvme_sim::SimConfig::default()
        });
        let dev = || crate::Device {
            device: vec!["sim".into()],
            output: crate::Format::Json,
        };
        let attach = AttachArgs {
            dev: dev(),
            nsid: 2,
            controllers: None,
        };
        for attach_it in [true, false] {
            let e = attachment(&ctrl, &attach, attach_it)
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("Namespace Attachment") && e.contains("OACS bit 3"),
                "{e}"
            );
        }
        let fmt = FormatArgs {
            dev: dev(),
            nsid: 1,
            lbaf: Some(4),
            block_size: None,
            ses: 0,
            pi: 0,
            pil: 0,
            ms: 0,
            force: true,
        };
        let e = format(&ctrl, &fmt).unwrap_err().to_string();
        assert!(e.contains("Format NVM") && e.contains("OACS bit 1"), "{e}");
        // Nothing was formatted: namespace 1 keeps its 512-byte blocks.
        assert_eq!(ctrl.namespace(1).unwrap().block_size(), 512);
    }
}
