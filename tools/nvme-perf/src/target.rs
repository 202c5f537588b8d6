//! What DEVICE names: a PCI function (plain address or SPDK-style transport id), an NVMe/TCP
//! subsystem (`trtype:TCP ...` transport id), the in-process emulator (`sim`), or a block
//! device / file path for the io_uring engine. All but the path are parsed by the one device
//! string parser of `nvme-device` (`nvme_tool_support::parse_target`).

use std::path::PathBuf;

use nvme_driver::PciAddress;
use nvme_tool_support::{parse_target, Target as DeviceTarget, TargetError};

/// DEVICE word that selects the in-process emulator.
pub const SIM_DEVICE: &str = nvme_tool_support::EMULATOR_DEVICE;

/// A parsed DEVICE argument.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// An NVMe controller bound to vfio-pci.
    Pci(PciAddress),
    /// The in-process emulator (`nvme-sim` with `null_io`).
    Sim,
    /// A block device (or a file, for testing) opened by the io_uring engine.
    Path(PathBuf),
    /// An NVMe/TCP subsystem (the spdk-like engine's TCP loop, `crate::tcp`).
    Tcp(nvme_tcp::TransportId),
}

impl Target {
    /// Parses DEVICE. A word starting with `/` or `.` is a path; `sim` the emulator; anything
    /// else must be a PCI address or transport id.
    pub fn parse(arg: &str) -> Result<Self, crate::PerfError> {
        let trimmed = arg.trim();
        let is_path = trimmed.starts_with('/') || trimmed.starts_with('.');
        if is_path && !nvme_tcp::is_tcp_transport_id(trimmed) {
            return Ok(Target::Path(PathBuf::from(trimmed)));
        }
        match parse_target(trimmed) {
            Ok(DeviceTarget::Pcie(a)) => Ok(Target::Pci(a)),
            Ok(DeviceTarget::Tcp(t)) => Ok(Target::Tcp(t)),
            Ok(DeviceTarget::Emulator) => Ok(Target::Sim),
            Err(TargetError::Pcie(e)) => Err(e.into()),
            Err(TargetError::Tcp(e)) => Err(e.into()),
        }
    }
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Pci(a) => write!(f, "{a}"),
            Target::Sim => f.write_str(SIM_DEVICE),
            Target::Path(p) => write!(f, "{}", p.display()),
            Target::Tcp(t) => write!(f, "{t}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvme_driver::DeviceArgError;

    #[test]
    fn device_forms() {
        assert_eq!(Target::parse("sim").unwrap(), Target::Sim);
        assert_eq!(Target::parse(" SIM ").unwrap(), Target::Sim);
        assert_eq!(
            Target::parse("/dev/nvme0n1").unwrap(),
            Target::Path("/dev/nvme0n1".into())
        );
        assert_eq!(
            Target::parse("./disk.img").unwrap(),
            Target::Path("./disk.img".into())
        );
        let pci = Target::parse("trtype:PCIe traddr:0000:00:04.0").unwrap();
        assert_eq!(pci.to_string(), "0000:00:04.0");
        assert_eq!(Target::parse("0000:00:04.0").unwrap(), pci);
        assert!(Target::parse("nvme0n1").is_err());
        assert!(matches!(
            Target::parse("trtype:RDMA traddr:1.2.3.4"),
            Err(crate::PerfError::Device(DeviceArgError::Transport { .. }))
        ));
        let tcp = Target::parse("trtype:TCP traddr:127.0.0.1 trsvcid:4420 subnqn:nqn.a:b").unwrap();
        assert!(matches!(tcp, Target::Tcp(ref t) if t.trsvcid == 4420));
        assert!(matches!(
            Target::parse("trtype:TCP subnqn:nqn.a:b"),
            Err(crate::PerfError::TransportId(_))
        ));
    }
}
