//! Naming a controller: a PCI address (`0000:00:04.0`) or an SPDK-style transport id
//! (`trtype:PCIe traddr:0000:00:04.0`; `key=value` is accepted too), as the tools take it.
//! The address itself is validated by [`nvme_vfio::PciAddress`], so every caller reports the
//! same message for a malformed address.

use nvme_vfio::{PciAddress, PciAddressError};

/// The only transport these tools drive: a local PCI function.
const TRTYPE_PCIE: &str = "pcie";
/// Transport id key naming the transport.
const KEY_TRTYPE: &str = "trtype";
/// Transport id key naming the address.
const KEY_TRADDR: &str = "traddr";

/// A DEVICE argument that names no usable controller.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeviceArgError {
    /// A transport other than PCIe.
    #[error("transport type `{trtype}` is not supported: these tools drive local PCI functions (trtype:PCIe)")]
    Transport {
        /// The transport type given.
        trtype: String,
    },
    /// A transport id without `traddr`.
    #[error(
        "transport id `{input}` names no address: write it as `trtype:PCIe traddr:0000:00:04.0`"
    )]
    MissingAddress {
        /// The whole argument as given.
        input: String,
    },
    /// A key other than `trtype` and `traddr`, or a token that is not `key:value`.
    #[error("`{token}` in transport id `{input}` is not understood: only trtype:VALUE and traddr:VALUE are accepted")]
    UnknownKey {
        /// The token not understood.
        token: String,
        /// The whole argument as given.
        input: String,
    },
    /// The same key twice.
    #[error("`{key}` appears more than once in transport id `{input}`")]
    Duplicate {
        /// The repeated key.
        key: String,
        /// The whole argument as given.
        input: String,
    },
    /// The address is not a PCI address.
    #[error(transparent)]
    Address(#[from] PciAddressError),
}

/// Parses DEVICE into the PCI address of the controller.
pub fn parse_device(arg: &str) -> Result<PciAddress, DeviceArgError> {
    let arg = arg.trim();
    let lower = arg.to_ascii_lowercase();
    let is_transport_id = arg.contains(char::is_whitespace)
        || lower.starts_with(KEY_TRTYPE)
        || lower.starts_with(KEY_TRADDR);
    if !is_transport_id {
        return Ok(arg.parse()?);
    }
    let (mut trtype, mut traddr) = (None, None);
    for token in arg.split_whitespace() {
        let unknown = || DeviceArgError::UnknownKey {
            token: token.to_owned(),
            input: arg.to_owned(),
        };
        let (key, value) = token.split_once([':', '=']).ok_or_else(unknown)?;
        let slot = match key.to_ascii_lowercase().as_str() {
            KEY_TRTYPE => &mut trtype,
            KEY_TRADDR => &mut traddr,
            _ => return Err(unknown()),
        };
        if slot.replace(value).is_some() {
            return Err(DeviceArgError::Duplicate {
                key: key.to_owned(),
                input: arg.to_owned(),
            });
        }
    }
    if let Some(t) = trtype.filter(|t| !t.eq_ignore_ascii_case(TRTYPE_PCIE)) {
        return Err(DeviceArgError::Transport {
            trtype: t.to_owned(),
        });
    }
    let traddr = traddr.ok_or_else(|| DeviceArgError::MissingAddress {
        input: arg.to_owned(),
    })?;
    Ok(traddr.parse()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(s: &str) -> String {
        parse_device(s)
            .map(|a| a.to_string())
            .unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn plain_and_transport_id_forms() {
        assert_eq!(addr("0000:00:04.0"), "0000:00:04.0");
        assert_eq!(addr("00:04.0"), "0000:00:04.0");
        assert_eq!(addr("trtype:PCIe traddr:0000:00:04.0"), "0000:00:04.0");
        assert_eq!(addr("traddr=0000:3b:00.1 trtype=pcie"), "0000:3b:00.1");
        assert_eq!(addr("  traddr:0000:00:04.0  "), "0000:00:04.0");
    }

    #[test]
    fn bad_arguments_are_errors() {
        assert!(matches!(
            parse_device("zz:zz"),
            Err(DeviceArgError::Address(_))
        ));
        assert!(matches!(
            parse_device("trtype:PCIe traddr:0000:00:04"),
            Err(DeviceArgError::Address(_))
        ));
        assert_eq!(
            parse_device("trtype:TCP traddr:10.0.0.1"),
            Err(DeviceArgError::Transport {
                trtype: "TCP".into()
            })
        );
        assert!(matches!(
            parse_device("trtype:PCIe"),
            Err(DeviceArgError::MissingAddress { .. })
        ));
        assert!(matches!(
            parse_device("trtype:PCIe traddr:0000:00:04.0 subnqn:x"),
            Err(DeviceArgError::UnknownKey { .. })
        ));
        assert!(matches!(
            parse_device("trtype:PCIe bogus"),
            Err(DeviceArgError::UnknownKey { .. })
        ));
        assert!(matches!(
            parse_device("traddr:0000:00:04.0 traddr:0000:00:05.0"),
            Err(DeviceArgError::Duplicate { .. })
        ));
    }

    #[test]
    fn malformed_address_message_shows_the_expected_form() {
        let msg = parse_device("zz:zz").unwrap_err().to_string();
        assert!(msg.contains("0000:"), "{msg}");
    }
}
