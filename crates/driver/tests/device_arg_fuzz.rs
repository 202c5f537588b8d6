//! Property tests (issue 10, "Fuzzing") of the DEVICE argument: `parse_device` (PCI addresses
//! and SPDK-style transport ids) takes any string without panicking, and every PCI address
//! it formats parses back to itself in each accepted spelling. `PROPTEST_CASES` sets the
//! number of cases (default 256); a long run is
//! `PROPTEST_CASES=100000 cargo test -p nvme-driver --release --test device_arg_fuzz`.

use nvme_driver::{parse_device, DeviceArgError, PciAddress};
use proptest::prelude::*;

/// Any valid PCI function address.
fn pci_address() -> impl Strategy<Value = PciAddress> {
    (any::<u16>(), any::<u8>(), 0u8..32, 0u8..8).prop_map(|(domain, bus, device, function)| {
        PciAddress {
            domain,
            bus,
            device,
            function,
        }
    })
}

/// Strings made of the pieces a device argument is built from, so the parser's branches are
/// reached far more often than with uniformly random text.
fn device_like() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("trtype".to_owned()),
        Just("TrAddr".to_owned()),
        Just("traddr".to_owned()),
        Just("PCIe".to_owned()),
        Just("pcie".to_owned()),
        Just(":".to_owned()),
        Just("=".to_owned()),
        Just(".".to_owned()),
        Just(" ".to_owned()),
        Just("\t".to_owned()),
        Just("\u{a0}".to_owned()),
        Just("é".to_owned()),
        "[0-9a-fA-FxXgG]{1,5}",
        pci_address().prop_map(|a| a.to_string()),
    ];
    prop::collection::vec(piece, 0..10).prop_map(|v| v.concat())
}

/// `Key:value` or `key=value` with the key in any letter case.
fn token(key: &'static str, value: String) -> impl Strategy<Value = String> {
    (
        prop::collection::vec(any::<bool>(), key.len()),
        prop::bool::ANY,
    )
        .prop_map(move |(upper, equals)| {
            let key: String = key
                .chars()
                .zip(upper)
                .map(|(c, u)| if u { c.to_ascii_uppercase() } else { c })
                .collect();
            format!("{key}{}{value}", if equals { '=' } else { ':' })
        })
}

fn whitespace() -> impl Strategy<Value = String> {
    "[ \t\n]{0,3}"
}

proptest! {
    #![proptest_config(ProptestConfig {
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn any_string_is_accepted_or_refused_without_panic(s in any::<String>()) {
        check_consistent(&s)?;
    }

    #[test]
    fn device_like_strings_are_accepted_or_refused_without_panic(s in device_like()) {
        check_consistent(&s)?;
    }

    #[test]
    fn formatted_address_parses_back(a in pci_address(), pad in whitespace()) {
        let text = a.to_string();
        prop_assert_eq!(parse_device(&text), Ok(a));
        prop_assert_eq!(text.parse::<PciAddress>(), Ok(a));
        prop_assert_eq!(parse_device(&format!("{pad}{text}{pad}")), Ok(a));
        prop_assert_eq!(parse_device(&text.to_uppercase()), Ok(a));
        if a.domain == 0 {
            // The short form BB:DD.F names domain 0.
            prop_assert_eq!(parse_device(&text[5..]), Ok(a));
        }
    }

    #[test]
    fn transport_id_round_trips(
        (a, trtype, traddr) in pci_address().prop_flat_map(|a| {
            (Just(a), token("trtype", "PCIe".to_owned()), token("traddr", a.to_string()))
        }),
        with_trtype: bool,
        trtype_first: bool,
        sep in "[ \t]{1,3}",
        pad in whitespace(),
    ) {
        let id = match (with_trtype, trtype_first) {
            (false, _) => traddr,
            (true, true) => format!("{trtype}{sep}{traddr}"),
            (true, false) => format!("{traddr}{sep}{trtype}"),
        };
        prop_assert_eq!(parse_device(&format!("{pad}{id}{pad}")), Ok(a), "{:?}", id);
    }

    #[test]
    fn transport_id_with_another_transport_is_refused(
        a in pci_address(),
        trtype in "[A-Za-z]{1,8}",
    ) {
        prop_assume!(!trtype.eq_ignore_ascii_case("pcie"));
        let r = parse_device(&format!("trtype:{trtype} traddr:{a}"));
        prop_assert_eq!(r, Err(DeviceArgError::Transport { trtype }));
    }
}

/// `parse_device` must not panic; what it accepts is a real address whose formatted form is
/// in the input, and its errors format.
fn check_consistent(s: &str) -> Result<(), TestCaseError> {
    match parse_device(s) {
        Ok(a) => {
            prop_assert!(a.device < 32 && a.function < 8, "{:?}", a);
            let text = a.to_string();
            let short = &text[5..];
            let lower = s.to_ascii_lowercase();
            prop_assert!(
                lower.contains(&text) || (a.domain == 0 && lower.contains(short)),
                "{:?} parsed as {}",
                s,
                text
            );
            prop_assert_eq!(parse_device(&text), Ok(a));
        }
        Err(e) => {
            prop_assert!(!e.to_string().is_empty());
        }
    }
    if let Ok(a) = s.parse::<PciAddress>() {
        prop_assert_eq!(a.to_string().parse::<PciAddress>(), Ok(a));
    }
    Ok(())
}
