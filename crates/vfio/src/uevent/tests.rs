//! The parser against messages in the kernel's format (as `kobject_uevent_env` builds them
//! for a QEMU NVMe controller behind a PCIe root port) and against hostile ones.

use super::*;

const DEVPATH: &str = "/devices/pci0000:00/0000:00:1c.1/0000:02:00.0";

/// A message as the kernel sends it: header, then NUL-terminated records.
fn message(action: &str, devpath: &str, records: &[&str]) -> Vec<u8> {
    let mut m = format!("{action}@{devpath}\0").into_bytes();
    for r in records {
        m.extend_from_slice(r.as_bytes());
        m.push(0);
    }
    m
}

/// The records of a PCI function's uevent (`pci_uevent`), NVMe class, with `extra` after.
fn nvme_message(action: &str, extra: &[&str]) -> Vec<u8> {
    let action_rec = format!("ACTION={action}");
    let devpath_rec = format!("DEVPATH={DEVPATH}");
    let mut recs = vec![action_rec.as_str(), devpath_rec.as_str(), "SUBSYSTEM=pci"];
    recs.extend_from_slice(extra);
    recs.extend_from_slice(&[
        "PCI_CLASS=10802",
        "PCI_ID=1B36:0010",
        "PCI_SUBSYS_ID=1AF4:1100",
        "PCI_SLOT_NAME=0000:02:00.0",
        "MODALIAS=pci:v00001B36d00000010sv00001AF4sd00001100bc01sc08i02",
        "SEQNUM=2231",
    ]);
    message(action, DEVPATH, &recs)
}

fn addr() -> PciAddress {
    "0000:02:00.0".parse().unwrap()
}

#[test]
fn recorded_add_bind_unbind_remove_of_an_nvme_function() {
    let add = Uevent::parse(&nvme_message("add", &[])).unwrap();
    assert_eq!(add.action, UeventAction::Add);
    assert_eq!(add.devpath, DEVPATH);
    assert_eq!(add.subsystem, "pci");
    assert_eq!(add.pci_class, Some(0x01_0802));
    assert_eq!(add.seqnum, Some(2231));
    assert_eq!(
        add.nvme(),
        Some(NvmeUevent {
            action: UeventAction::Add,
            address: addr(),
            driver: None
        })
    );

    let bind = Uevent::parse(&nvme_message("bind", &["DRIVER=vfio-pci"])).unwrap();
    let bind = bind.nvme().unwrap();
    assert_eq!(bind.action, UeventAction::Bind);
    assert_eq!(bind.driver.as_deref(), Some("vfio-pci"));

    // The kernel sends unbind after the driver is gone: no DRIVER record.
    let unbind = Uevent::parse(&nvme_message("unbind", &[])).unwrap();
    assert_eq!(unbind.nvme().unwrap().action, UeventAction::Unbind);
    assert_eq!(unbind.driver, None);

    let remove = Uevent::parse(&nvme_message("remove", &[])).unwrap();
    assert_eq!(remove.nvme().unwrap().action, UeventAction::Remove);
}

#[test]
fn other_devices_are_parsed_but_are_no_nvme_events() {
    // A NIC (class 020000h).
    let nic = message(
        "add",
        "/devices/pci0000:00/0000:00:03.0",
        &[
            "ACTION=add",
            "DEVPATH=/devices/pci0000:00/0000:00:03.0",
            "SUBSYSTEM=pci",
            "PCI_CLASS=20000",
            "PCI_SLOT_NAME=0000:00:03.0",
            "SEQNUM=7",
        ],
    );
    assert_eq!(Uevent::parse(&nic).unwrap().nvme(), None);
    // The kernel nvme driver's block device: subsystem block.
    let blk = message(
        "add",
        "/devices/virtual/block/nvme0n1",
        &[
            "ACTION=add",
            "DEVPATH=/devices/virtual/block/nvme0n1",
            "SUBSYSTEM=block",
            "MAJOR=259",
            "MINOR=0",
            "DEVNAME=nvme0n1",
            "DEVTYPE=disk",
            "SEQNUM=8",
        ],
    );
    assert_eq!(Uevent::parse(&blk).unwrap().nvme(), None);
    // A PCI event without a slot name tells us no address.
    let noslot = message(
        "change",
        DEVPATH,
        &[
            "ACTION=change",
            &format!("DEVPATH={DEVPATH}"),
            "SUBSYSTEM=pci",
        ],
    );
    assert_eq!(Uevent::parse(&noslot).unwrap().nvme(), None);
}

#[test]
fn hostile_messages_are_errors_not_panics() {
    let dp = format!("DEVPATH={DEVPATH}");
    let cases: Vec<(Vec<u8>, UeventError)> = vec![
        (
            vec![b'a'; MAX_UEVENT_LEN + 1],
            UeventError::Oversized {
                len: MAX_UEVENT_LEN + 1,
                max: MAX_UEVENT_LEN,
            },
        ),
        (b"libudev\0\xfe\xed\xca\xfe".to_vec(), UeventError::Udev),
        (Vec::new(), UeventError::BadHeader),
        (b"\0\0\0".to_vec(), UeventError::BadHeader),
        (b"add\0ACTION=add\0".to_vec(), UeventError::BadHeader),
        (b"@/devices\0".to_vec(), UeventError::BadHeader),
        (b"add@devices\0".to_vec(), UeventError::BadHeader),
        (b"add@/devices/\xff\0".to_vec(), UeventError::NotUtf8),
        (
            message("add", DEVPATH, &["ACTION=add", "garbage"]),
            UeventError::BadRecord { index: 1 },
        ),
        (
            message("add", DEVPATH, &["=add"]),
            UeventError::BadRecord { index: 0 },
        ),
        (
            message("add", DEVPATH, &["action=add"]),
            UeventError::BadRecord { index: 0 },
        ),
        (
            message("add", DEVPATH, &["ACTION=add", "ACTION=remove"]),
            UeventError::Duplicate {
                key: "ACTION".into(),
            },
        ),
        (
            message("add", DEVPATH, &["ACTION=remove", &dp, "SUBSYSTEM=pci"]),
            UeventError::Mismatch { key: "ACTION" },
        ),
        (
            message(
                "add",
                DEVPATH,
                &["ACTION=add", "DEVPATH=/x", "SUBSYSTEM=pci"],
            ),
            UeventError::Mismatch { key: "DEVPATH" },
        ),
        (
            message("add", DEVPATH, &["ACTION=add", &dp]),
            UeventError::Missing { key: "SUBSYSTEM" },
        ),
        (
            message("add", DEVPATH, &[&dp, "SUBSYSTEM=pci"]),
            UeventError::Missing { key: "ACTION" },
        ),
        (
            message(
                "explode",
                DEVPATH,
                &["ACTION=explode", &dp, "SUBSYSTEM=pci"],
            ),
            UeventError::UnknownAction("explode".into()),
        ),
        (
            nvme_message("add", &["PCI_CLASS=zz"]),
            UeventError::Duplicate {
                key: "PCI_CLASS".into(),
            },
        ),
        (
            message(
                "add",
                DEVPATH,
                &["ACTION=add", &dp, "SUBSYSTEM=pci", "PCI_CLASS=1010802"],
            ),
            UeventError::BadValue {
                key: "PCI_CLASS",
                value: "1010802".into(),
            },
        ),
        (
            message(
                "add",
                DEVPATH,
                &[
                    "ACTION=add",
                    &dp,
                    "SUBSYSTEM=pci",
                    "PCI_SLOT_NAME=0000:02:00",
                ],
            ),
            UeventError::BadValue {
                key: "PCI_SLOT_NAME",
                value: "0000:02:00".into(),
            },
        ),
        (
            message(
                "add",
                DEVPATH,
                &["ACTION=add", &dp, "SUBSYSTEM=pci", "SEQNUM=-1"],
            ),
            UeventError::BadValue {
                key: "SEQNUM",
                value: "-1".into(),
            },
        ),
    ];
    for (msg, want) in cases {
        assert_eq!(
            Uevent::parse(&msg),
            Err(want.clone()),
            "{:?}",
            String::from_utf8_lossy(&msg)
        );
    }
    // Too many records (each one distinct and well formed).
    let keys: Vec<String> = (0..=MAX_UEVENT_RECORDS)
        .map(|i| format!("K{i}=v"))
        .collect();
    let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
    assert_eq!(
        Uevent::parse(&message("add", DEVPATH, &refs)),
        Err(UeventError::TooManyRecords {
            max: MAX_UEVENT_RECORDS
        })
    );
    // Exactly at the size limit is still parsed (padding in a record the parser ignores).
    let mut m = nvme_message("add", &[]);
    let pad = MAX_UEVENT_LEN - m.len() - "PAD=".len() - 1;
    m.extend_from_slice(format!("PAD={}\0", "x".repeat(pad)).as_bytes());
    assert_eq!(m.len(), MAX_UEVENT_LEN);
    assert!(Uevent::parse(&m).is_ok());
}

#[test]
fn every_truncation_and_byte_flip_of_a_message_is_handled() {
    let m = nvme_message("bind", &["DRIVER=vfio-pci"]);
    for len in 0..=m.len() {
        let _ = Uevent::parse(&m[..len]).map(|e| e.nvme());
    }
    // A small deterministic generator (xorshift) flips bytes all over the message.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for _ in 0..20_000 {
        let mut c = m.clone();
        for _ in 0..3 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let i = (x as usize) % c.len();
            c[i] = (x >> 32) as u8;
        }
        let _ = Uevent::parse(&c).map(|e| e.nvme());
    }
}

#[test]
fn the_netlink_socket_opens_and_is_empty_or_has_kernel_messages() {
    // Any user may listen to the kernel's uevents; a sandbox without netlink is not a failure
    // of the code.
    let Ok(mut sock) = UeventSocket::open() else {
        return;
    };
    let mut buf = vec![0u8; MAX_UEVENT_LEN];
    match sock.recv(&mut buf).unwrap() {
        Received::Empty | Received::Message(_) | Received::Overrun => {}
        other => panic!("unexpected {other:?}"),
    }
    assert!(!sock.wait(Duration::from_millis(1)).unwrap() || sock.fd().is_some());
}
