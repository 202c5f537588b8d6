//! `nvme-admin SUBCOMMAND DEVICE [options]`: nvme-cli's management subcommands through our
//! driver. DEVICE is a PCI address or transport id (vfio-pci), an NVMe/TCP transport id, or
//! `sim` (the in-process emulator, in builds with the `emulator` feature).
//!
//! Subcommands (nvme-cli's names and options): `list`, `id-ctrl`, `id-ns -n NSID`,
//! `list-ns [-n NSID]`, `ns-descs -n NSID`, `smart-log [-n NSID]`, `error-log [-e N]`,
//! `fw-log`, `effects-log`, `list-subsys DEVICE...` (see [`subsys`]), `get-feature -f FID [-s SEL] [-c CDW11]`,
//! `set-feature -f FID -v VALUE [-s]`, `get-log -i LID -l LEN [-n NSID] [-b]`, `list-ctrl
//! [-n NSID] [-c CNTID]`, `attach-ns`/`detach-ns -n NSID [-c CNTLID,...]` and `format -n NSID
//! [--lbaf N | --block-size B] [--ses N] [--pi N] [--pil N] [--ms N] [--force]` (see
//! [`manage`]), `device-self-test -s CODE [-n NSID]` and `self-test-log [-e N]` (see
//! [`selftest`]), `fw-download -f FILE [-x XFER] [-O OFFSET]` and `fw-commit -a ACTION [-s
//! SLOT] [-b BPID]` (see [`firmware`]), and nvme-cli's zns plugin: `zns id-ns`, `zns id-ctrl`, `zns report-zones`,
//! `zns reset-zone`/`open-zone`/`close-zone`/`finish-zone`/`offline-zone`/`zone-mgmt-send`,
//! `zns zone-append` (see [`zns`]), and `admin-passthru` and `io-passthru` (see [`passthru`]).
//! `-o json` prints nvme-cli 2.x's JSON keys, the default
//! (`-o normal`) a `key : value` list of the same fields.
//!
//! Errors go to stderr as `error: <message>` and exit with status 1: a feature nvme-admin
//! does not type, a value that does not fit it, or a status from the controller (named).

mod emulator;
pub mod firmware;
pub mod manage;
mod output;
pub mod passthru;
pub mod selftest;
pub mod subsys;
pub mod zns;

use std::io::Write;

use clap::{Args, Parser, Subcommand, ValueEnum};
use nvme_driver::spec::feature::{Feature, FeatureId, Select};
use nvme_driver::spec::log::NSID_BROADCAST;
use nvme_driver::{AdminCommands, ControllerOptions, NvmeController};
use nvme_tool_support::{parse_target, AnyController, Target, TargetError};

/// Error Information entries nvme-cli's error-log reads by default.
const DEFAULT_ERROR_LOG_ENTRIES: usize = 64;

/// nvme-cli's management commands on a controller driven by this driver.
#[derive(Debug, Parser)]
#[command(name = "nvme-admin", version, about)]
pub struct Cli {
    /// Ask the program serving the control socket at PATH (nvme-control) instead of opening
    /// DEVICE: DEVICE is then the controller's name there (`nvme-identify --socket PATH`
    /// lists them). Read-only subcommands only (no set-feature).
    #[arg(long, global = true, value_name = "PATH")]
    socket: Option<std::path::PathBuf>,
    #[command(subcommand)]
    command: Command,
}

/// `-o normal|json`, as nvme-cli.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// `key : value` lines.
    Normal,
    /// nvme-cli's JSON.
    Json,
}

#[derive(Debug, Args)]
pub struct Device {
    /// PCI address, transport id (PCIe or NVMe/TCP, quoted or not), or `sim`.
    #[arg(required = true, num_args = 1..)]
    pub device: Vec<String>,
    /// Output format.
    #[arg(
        short = 'o',
        long = "output-format",
        value_enum,
        default_value = "normal"
    )]
    pub output: Format,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// The namespaces of the controller, one line each.
    List(Device),
    /// Identify Controller.
    IdCtrl(Device),
    /// Identify Namespace.
    IdNs {
        #[command(flatten)]
        dev: Device,
        /// Namespace ID.
        #[arg(short = 'n', long = "namespace-id", default_value_t = 1)]
        nsid: u32,
    },
    /// Active Namespace ID list (NSIDs above -n).
    ListNs {
        #[command(flatten)]
        dev: Device,
        /// List the active NSIDs greater than this one.
        #[arg(short = 'n', long = "namespace-id", default_value_t = 0)]
        nsid: u32,
    },
    /// Namespace Identification Descriptors.
    NsDescs {
        #[command(flatten)]
        dev: Device,
        /// Namespace ID.
        #[arg(short = 'n', long = "namespace-id", default_value_t = 1)]
        nsid: u32,
    },
    /// SMART / Health Information log.
    SmartLog {
        #[command(flatten)]
        dev: Device,
        /// Namespace ID (default: the whole controller).
        #[arg(short = 'n', long = "namespace-id", default_value_t = NSID_BROADCAST)]
        nsid: u32,
    },
    /// Error Information log.
    ErrorLog {
        #[command(flatten)]
        dev: Device,
        /// Entries to read (at most what the controller keeps).
        #[arg(short = 'e', long = "log-entries", default_value_t = DEFAULT_ERROR_LOG_ENTRIES)]
        entries: usize,
    },
    /// Firmware Slot Information log.
    FwLog(Device),
    /// Commands Supported and Effects log.
    EffectsLog(Device),
    /// Get Features.
    GetFeature {
        #[command(flatten)]
        dev: Device,
        /// Feature identifier (decimal or 0x hex).
        #[arg(short = 'f', long = "feature-id", value_parser = parse_u8)]
        fid: u8,
        /// Select: 0 current, 1 default, 2 saved, 3 supported capabilities.
        #[arg(short = 's', long = "sel", default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=3))]
        sel: u8,
    },
    /// Set Features.
    SetFeature {
        #[command(flatten)]
        dev: Device,
        /// Feature identifier (decimal or 0x hex).
        #[arg(short = 'f', long = "feature-id", value_parser = parse_u8)]
        fid: u8,
        /// The value (dword 11; the Timestamp: milliseconds), decimal or 0x hex.
        #[arg(short = 'v', long = "value", value_parser = parse_u64)]
        value: u64,
        /// Keep the value across resets (Save).
        #[arg(short = 's', long = "save")]
        save: bool,
    },
    /// Get Log Page: any log page's bytes (hex dump, JSON or --raw-binary).
    GetLog(manage::GetLogArgs),
    /// The controllers of the subsystem (Identify CNS 13h), or those a namespace is
    /// attached to (-n: CNS 12h).
    ListCtrl(manage::ListCtrlArgs),
    /// The subsystems of the controllers named (each argument one controller), their paths
    /// and which namespaces each path reaches (shared namespaces as one, with two paths).
    ListSubsys(Device),
    /// Namespace Attachment: attach a namespace to controllers.
    AttachNs(manage::AttachArgs),
    /// Namespace Attachment: detach a namespace from controllers.
    DetachNs(manage::AttachArgs),
    /// Format NVM: a new LBA format, metadata, protection or secure erase (data is lost).
    Format(manage::FormatArgs),
    /// Device Self-test: start a short or extended test, or abort the one in progress.
    DeviceSelfTest(selftest::SelfTestArgs),
    /// Device Self-test log: the test in progress and the last results.
    SelfTestLog(selftest::SelfTestLogArgs),
    /// Firmware Image Download: send a firmware image file in pieces.
    FwDownload(firmware::FwDownloadArgs),
    /// Firmware Commit: store the downloaded image in a slot and/or activate a slot.
    FwCommit(firmware::FwCommitArgs),
    /// A raw admin command through the driver's safe passthrough (nvme-cli's options).
    AdminPassthru(passthru::PassthruArgs),
    /// A raw NVM or ZNS I/O command through the driver's safe passthrough (nvme-cli's options).
    IoPassthru(passthru::PassthruArgs),
    /// Zoned namespaces (nvme-cli's `nvme zns` plugin).
    #[command(subcommand)]
    Zns(zns::ZnsCommand),
}

impl Command {
    fn device(&self) -> &Device {
        match self {
            Command::List(d)
            | Command::IdCtrl(d)
            | Command::FwLog(d)
            | Command::EffectsLog(d)
            | Command::ListSubsys(d) => d,
            Command::IdNs { dev, .. }
            | Command::ListNs { dev, .. }
            | Command::NsDescs { dev, .. }
            | Command::SmartLog { dev, .. }
            | Command::ErrorLog { dev, .. }
            | Command::GetFeature { dev, .. }
            | Command::SetFeature { dev, .. } => dev,
            Command::GetLog(a) => &a.dev,
            Command::ListCtrl(a) => &a.dev,
            Command::AttachNs(a) | Command::DetachNs(a) => &a.dev,
            Command::Format(a) => &a.dev,
            Command::DeviceSelfTest(a) => &a.dev,
            Command::SelfTestLog(a) => &a.dev,
            Command::FwDownload(a) => &a.dev,
            Command::FwCommit(a) => &a.dev,
            Command::AdminPassthru(a) | Command::IoPassthru(a) => &a.dev,
            Command::Zns(z) => z.device(),
        }
    }
}

pub(crate) fn parse_number(s: &str) -> Result<u64, String> {
    let parsed = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => s.parse(),
    };
    parsed.map_err(|e| format!("`{s}` is not a number: {e}"))
}

pub(crate) fn parse_u8(s: &str) -> Result<u8, String> {
    let v = parse_number(s)?;
    u8::try_from(v).map_err(|_| format!("{v} does not fit in 8 bits"))
}

pub(crate) fn parse_u32(s: &str) -> Result<u32, String> {
    let v = parse_number(s)?;
    u32::try_from(v).map_err(|_| format!("{v} does not fit in 32 bits"))
}

pub(crate) fn parse_u64(s: &str) -> Result<u64, String> {
    parse_number(s)
}

/// Why `nvme-admin` failed.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error(transparent)]
    Device(#[from] TargetError),
    #[error(transparent)]
    Driver(#[from] nvme_driver::Error),
    #[error(
        "feature {fid:#04x} is not one nvme-admin types (supported: {})",
        supported_features()
    )]
    UnknownFeature { fid: u8 },
    #[error("value {value:#x} does not fit feature {fid:#04x} ({name})")]
    BadValue {
        fid: u8,
        name: &'static str,
        value: u64,
    },
    #[error("DEVICE `sim` needs a build with the `emulator` feature")]
    #[cfg_attr(feature = "emulator", allow(dead_code))]
    NoEmulator,
    #[error(transparent)]
    Control(#[from] nvme_control::ControlError),
    #[error("{0} is not available through a control socket (it changes the controller or reads raw pages)")]
    NotRemote(&'static str),
    #[error("cannot format namespace {nsid}: {why} (offered: {offered}; `nvme-admin id-ns` lists the formats)")]
    BadFormat {
        nsid: u32,
        why: String,
        offered: String,
    },
    #[error("{0} not confirmed: nothing was sent (answer 'yes', or give --force)")]
    NotConfirmed(&'static str),
    #[error(
        "namespace {nsid} is not a zoned namespace this controller takes zone commands on \
         (Command Set Identifier 02h with the Zoned Namespace Command Set enabled); `nvme-admin \
         list` shows the namespaces"
    )]
    NotZoned { nsid: u32 },
    #[error("zone-append: {0}")]
    BadAppend(String),
    #[error("cannot read the data file {path}: {source}")]
    DataFile {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("zone action {0:#04x} is not one zone-mgmt-send takes (1 close, 2 finish, 3 open, 4 reset, 5 offline, 0x11 flush ZRWA)")]
    BadZoneAction(u8),
    #[error("the controller's zone report is malformed: {0}")]
    BadReport(String),
    #[error("{cmd}: {why}")]
    BadPassthru { cmd: &'static str, why: String },
    #[error("passthru: {0}")]
    Passthru(#[from] nvme_driver::PassthruError),
    #[error("cannot encode JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("cannot write to standard output: {0}")]
    Output(#[from] std::io::Error),
}

fn supported_features() -> String {
    FeatureId::ALL
        .iter()
        .map(|f| format!("{:#04x} {}", f.fid(), f.name()))
        .collect::<Vec<_>>()
        .join(", ")
}

fn feature_id(fid: u8) -> Result<FeatureId, AdminError> {
    FeatureId::from_fid(fid).ok_or(AdminError::UnknownFeature { fid })
}

/// Runs `command` on any controller and returns what to print.
fn execute<C: NvmeController>(ctrl: &C, command: &Command) -> Result<Output, AdminError> {
    let fmt = command.device().output;
    let value = match command {
        Command::GetLog(args) => {
            let page = manage::get_log(ctrl, args)?;
            return Ok(match (args.raw, fmt) {
                (true, _) => Output::Bytes(page),
                (false, Format::Json) => Output::Text(
                    serde_json::to_string_pretty(&manage::log_json(args, &page))? + "\n",
                ),
                (false, Format::Normal) => Output::Text(manage::log_text(ctrl.name(), args, &page)),
            });
        }
        Command::AdminPassthru(args) | Command::IoPassthru(args) => {
            let out = match command {
                Command::AdminPassthru(_) => passthru::admin(ctrl, args)?,
                _ => passthru::io(ctrl, args)?,
            };
            return Ok(match out.raw {
                Some(mut bytes) => {
                    let mut all = out.text.into_bytes();
                    all.append(&mut bytes);
                    Output::Bytes(all)
                }
                None => Output::Text(out.text),
            });
        }
        Command::ListCtrl(args) => manage::list_ctrl(ctrl, args)?,
        Command::ListSubsys(_) => subsys::list_subsys(&[subsys::ControllerView::read(
            ctrl,
            0,
            "pcie",
            ctrl.name().to_string(),
        )?]),
        Command::AttachNs(args) => manage::attachment(ctrl, args, true)?,
        Command::DetachNs(args) => manage::attachment(ctrl, args, false)?,
        Command::Format(args) => manage::format(ctrl, args)?,
        Command::DeviceSelfTest(args) => selftest::start(ctrl, args)?,
        Command::SelfTestLog(args) => selftest::log(ctrl, args)?,
        Command::FwDownload(args) => firmware::download(ctrl, args)?,
        Command::FwCommit(args) => firmware::commit(ctrl, args)?,
        Command::List(_) => output::list(ctrl),
        Command::IdCtrl(_) => output::id_ctrl(ctrl.identify()),
        Command::IdNs { nsid, .. } => output::id_ns(&ctrl.identify_namespace(*nsid)?),
        Command::ListNs { nsid, .. } => output::list_ns(&ctrl.active_namespace_ids(*nsid)?),
        Command::NsDescs { nsid, .. } => output::ns_descs(&ctrl.namespace_descriptors(*nsid)?),
        Command::SmartLog { nsid, .. } => output::smart_log(&ctrl.smart_log(*nsid)?),
        Command::ErrorLog { entries, .. } => output::error_log(&ctrl.error_log(*entries)?),
        Command::FwLog(_) => output::fw_log(ctrl.name(), &ctrl.firmware_slot_log()?),
        Command::EffectsLog(_) => output::effects_log(&ctrl.commands_effects_log()?),
        Command::GetFeature { fid, sel, .. } => {
            let id = feature_id(*fid)?;
            match *sel {
                0 => output::feature(&ctrl.get_feature(id, Select::Current)?, Select::Current),
                1 => output::feature(&ctrl.get_feature(id, Select::Default)?, Select::Default),
                2 => output::feature(&ctrl.get_feature(id, Select::Saved)?, Select::Saved),
                _ => output::feature_capabilities(id, ctrl.feature_capabilities(id)?),
            }
        }
        Command::SetFeature {
            fid, value, save, ..
        } => {
            let id = feature_id(*fid)?;
            let feature = Feature::from_raw(id, *value).ok_or(AdminError::BadValue {
                fid: *fid,
                name: id.name(),
                value: *value,
            })?;
            let dw0 = ctrl.set_feature(feature, *save)?;
            output::set_feature(&feature, *save, dw0)
        }
        Command::Zns(z) => zns::execute(ctrl, z)?,
    };
    Ok(Output::Text(match fmt {
        Format::Json => serde_json::to_string_pretty(&value)? + "\n",
        Format::Normal => output::to_text(&value),
    }))
}

/// What a subcommand prints: text, or a log page's raw bytes (`get-log --raw-binary`).
enum Output {
    Text(String),
    Bytes(Vec<u8>),
}

impl Output {
    fn bytes(&self) -> &[u8] {
        match self {
            Output::Text(t) => t.as_bytes(),
            Output::Bytes(b) => b,
        }
    }
}

/// Runs `command` through the control socket at `path` and returns what to print.
fn execute_remote(path: &std::path::Path, command: &Command) -> Result<String, AdminError> {
    use nvme_driver::spec::admin_log::{CommandsEffectsLog, FirmwareSlotLog};
    use nvme_driver::spec::feature::FeatureCapabilities;
    use nvme_driver::spec::opcode::log_page;

    let dev = command.device();
    let name = dev.device.join(" ");
    let name = Some(name.as_str());
    let mut c = nvme_control::ControlClient::connect(path)?;
    let value = match command {
        Command::List(_) => {
            let id = c.identify(name)?;
            output::list_of(
                &id.name,
                &id.identify,
                id.namespaces.iter().map(|(n, ns)| (*n, ns)),
            )
        }
        Command::IdCtrl(_) => output::id_ctrl(&c.identify(name)?.identify),
        Command::IdNs { nsid, .. } => output::id_ns(&c.identify_namespace(name, *nsid)?),
        Command::ListNs { nsid, .. } => {
            let id = c.identify(name)?;
            let mut ids: Vec<u32> = id.namespaces.iter().map(|(n, _)| *n).collect();
            ids.extend(id.unsupported.iter().map(|(n, _)| *n));
            ids.sort_unstable();
            ids.retain(|n| n > nsid);
            output::list_ns(&ids)
        }
        Command::NsDescs { .. } => return Err(AdminError::NotRemote("ns-descs")),
        Command::SmartLog { nsid, .. } => output::smart_log(&c.smart_log(name, *nsid)?),
        Command::ErrorLog { entries, .. } => output::error_log(&c.error_log(name, *entries)?),
        Command::FwLog(d) => {
            let page = c.log_page(name, log_page::FIRMWARE_SLOT, FirmwareSlotLog::SIZE)?;
            let page = page.try_into().map_err(|_| {
                nvme_control::ControlError::Malformed("short firmware slot log".into())
            })?;
            output::fw_log(&d.device.join(" "), &FirmwareSlotLog::from_bytes(&page))
        }
        Command::EffectsLog(_) => {
            let page = c.log_page(
                name,
                log_page::COMMANDS_SUPPORTED_AND_EFFECTS,
                CommandsEffectsLog::SIZE,
            )?;
            let page = page
                .try_into()
                .map_err(|_| nvme_control::ControlError::Malformed("short effects log".into()))?;
            output::effects_log(&CommandsEffectsLog::from_bytes(&page))
        }
        Command::GetFeature { fid, sel, .. } => {
            let id = feature_id(*fid)?;
            if *sel == 3 {
                let caps =
                    FeatureCapabilities::from_bits_truncate(c.feature_capabilities(name, *fid)?);
                output::feature_capabilities(id, caps)
            } else {
                let raw = c.get_feature(name, *fid, *sel)?;
                let f = Feature::from_raw(id, raw).ok_or(AdminError::BadValue {
                    fid: *fid,
                    name: id.name(),
                    value: raw,
                })?;
                let select = [Select::Current, Select::Default, Select::Saved][usize::from(*sel)];
                output::feature(&f, select)
            }
        }
        Command::SetFeature { .. } => return Err(AdminError::NotRemote("set-feature")),
        Command::GetLog(_) => return Err(AdminError::NotRemote("get-log")),
        Command::ListCtrl(_) => return Err(AdminError::NotRemote("list-ctrl")),
        Command::ListSubsys(_) => return Err(AdminError::NotRemote("list-subsys")),
        Command::AttachNs(_) => return Err(AdminError::NotRemote("attach-ns")),
        Command::DetachNs(_) => return Err(AdminError::NotRemote("detach-ns")),
        Command::Format(_) => return Err(AdminError::NotRemote("format")),
        Command::DeviceSelfTest(_) => return Err(AdminError::NotRemote("device-self-test")),
        Command::SelfTestLog(_) => return Err(AdminError::NotRemote("self-test-log")),
        Command::FwDownload(_) => return Err(AdminError::NotRemote("fw-download")),
        Command::FwCommit(_) => return Err(AdminError::NotRemote("fw-commit")),
        Command::AdminPassthru(_) => return Err(AdminError::NotRemote("admin-passthru")),
        Command::IoPassthru(_) => return Err(AdminError::NotRemote("io-passthru")),
        // Zone commands are I/O: the socket's server owns the queue pairs.
        Command::Zns(_) => return Err(AdminError::NotRemote("zns")),
    };
    Ok(match dev.output {
        Format::Json => serde_json::to_string_pretty(&value)? + "\n",
        Format::Normal => output::to_text(&value),
    })
}

/// Runs the parsed command line: opens DEVICE (or asks the control socket), runs the
/// subcommand, prints its output.
pub fn run(cli: &Cli) -> Result<(), AdminError> {
    let dev = cli.command.device();
    if let Some(path) = &cli.socket {
        let text = execute_remote(path, &cli.command)?;
        let mut out = std::io::stdout().lock();
        out.write_all(text.as_bytes())?;
        out.flush()?;
        return Ok(());
    }
    if let Command::ListSubsys(d) = &cli.command {
        let value = subsys::list_subsys(&subsys::read_all(&d.device)?);
        let text = match d.output {
            Format::Json => serde_json::to_string_pretty(&value)? + "\n",
            Format::Normal => output::to_text(&value),
        };
        let mut out = std::io::stdout().lock();
        out.write_all(text.as_bytes())?;
        out.flush()?;
        return Ok(());
    }
    let target = parse_target(&dev.device.join(" "))?;
    let output = match target {
        Target::Emulator => emulator::run(|ctrl| execute(ctrl, &cli.command))?,
        target => match AnyController::open(&target, ControllerOptions::default())? {
            AnyController::Pcie(c) => execute(&c, &cli.command)?,
            AnyController::Tcp(c) => execute(&c, &cli.command)?,
        },
    };
    let mut out = std::io::stdout().lock();
    out.write_all(output.bytes())?;
    out.flush()?;
    Ok(())
}
