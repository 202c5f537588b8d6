//! The one parser of a device string that may name either transport. The PCIe-only and
//! TCP-only syntaxes stay with their transports ([`nvme_driver::parse_device`],
//! [`nvme_tcp::TransportId::parse`]); this module decides which of them a string is for.

use nvme_driver::{DeviceArgError, PciAddress};
use nvme_tcp::{TransportId, TridError};

/// The device string reserved for the in-process emulator (any letter case).
pub const EMULATOR_DEVICE: &str = "sim";

/// A controller named by a device string.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// A local PCI function (vfio-pci).
    Pcie(PciAddress),
    /// An NVMe/TCP subsystem.
    Tcp(TransportId),
    /// `sim`: the in-process emulator. Only tools built with their `emulator` feature open
    /// it; [`crate::AnyController::open`] refuses it.
    Emulator,
}

/// A device string that names no controller.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TargetError {
    /// Not a PCI address or PCIe transport id.
    #[error(transparent)]
    Pcie(#[from] DeviceArgError),
    /// A malformed NVMe/TCP transport id.
    #[error(transparent)]
    Tcp(#[from] TridError),
}

/// Parses a device string (a command line's words joined by spaces): an NVMe/TCP transport id
/// when it has a `trtype:TCP` token ([`nvme_tcp::is_tcp_transport_id`]), the emulator for
/// `sim`, else a PCI address or PCIe transport id.
pub fn parse_target(arg: &str) -> Result<Target, TargetError> {
    if nvme_tcp::is_tcp_transport_id(arg) {
        return Ok(Target::Tcp(TransportId::parse(arg)?));
    }
    if arg.trim().eq_ignore_ascii_case(EMULATOR_DEVICE) {
        return Ok(Target::Emulator);
    }
    Ok(Target::Pcie(nvme_driver::parse_device(arg)?))
}

impl std::str::FromStr for Target {
    type Err = TargetError;

    fn from_str(s: &str) -> Result<Self, TargetError> {
        parse_target(s)
    }
}

/// The canonical form: the PCI address, the transport id, or `sim`; it parses back to the
/// same target.
impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Pcie(a) => write!(f, "{a}"),
            Target::Tcp(t) => write!(f, "{t}"),
            Target::Emulator => f.write_str(EMULATOR_DEVICE),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pci_and_tcp_targets() {
        assert!(matches!(parse_target("0000:00:04.0"), Ok(Target::Pcie(_))));
        assert!(matches!(
            parse_target("trtype:PCIe traddr:0000:00:04.0"),
            Ok(Target::Pcie(_))
        ));
        let Ok(Target::Tcp(t)) = parse_target(
            "trtype:TCP adrfam:IPv4 traddr:127.0.0.1 trsvcid:4420 subnqn:nqn.2026-01.test:sub1",
        ) else {
            panic!("tcp")
        };
        assert_eq!(t.subnqn, "nqn.2026-01.test:sub1");
        assert!(matches!(
            parse_target("trtype:tcp traddr:127.0.0.1"),
            Ok(Target::Tcp(t)) if t.is_discovery()
        ));
        assert!(matches!(
            parse_target("trtype:tcp subnqn:nqn.x"),
            Err(TargetError::Tcp(TridError::MissingTraddr { .. }))
        ));
        assert!(matches!(
            parse_target("trtype:RDMA traddr:1.2.3.4"),
            Err(TargetError::Pcie(_))
        ));
    }

    #[test]
    fn the_emulator_word_in_any_case() {
        assert_eq!(parse_target("sim"), Ok(Target::Emulator));
        assert_eq!(parse_target(" SIM "), Ok(Target::Emulator));
        assert!(matches!(
            parse_target("simulator"),
            Err(TargetError::Pcie(_))
        ));
        assert!(matches!(parse_target("nvme0n1"), Err(TargetError::Pcie(_))));
    }

    #[test]
    fn the_displayed_form_parses_back() {
        for s in [
            "trtype:PCIe traddr:0000:00:04.0",
            "00:04.0",
            "trtype:TCP traddr:127.0.0.1 trsvcid:4421 subnqn:nqn.2026-01.test:sub1 hdgst:1",
            "sim",
        ] {
            let t = parse_target(s).unwrap();
            assert_eq!(parse_target(&t.to_string()), Ok(t.clone()), "{s} -> {t}");
        }
        assert_eq!(
            parse_target("trtype:PCIe traddr:0000:00:04.0")
                .unwrap()
                .to_string(),
            "0000:00:04.0"
        );
    }
}
