use super::*;
use crate::command::IoCommand;
use nvme_spec::protection::{crc16_t10dif, crc64_nvme};
use nvme_spec::LbaFormat;

fn namespace(lbads: u8, ms: u16, extended: bool, dps: u8) -> Namespace {
    let mut lbaf = [LbaFormat::default(); 64];
    lbaf[0] = LbaFormat::new(lbads, ms);
    let id = IdentifyNamespace {
        nsze: 64,
        ncap: 64,
        flbas: if extended { 1 << 4 } else { 0 },
        dps,
        lbaf,
        ..IdentifyNamespace::default()
    };
    Namespace::from_identify(1, id, 1 << 20).unwrap()
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[test]
fn protected_commands_encode_prinfo_and_tags() {
    let p = Protection::pass(0x1_0000_0010, Prinfo::CHECK_ALL).app_tag(0xBEEF, 0xFF00);
    let sqe = Protected::new(Read::new(0x1_0000_0010, 4), p).sqe(2);
    assert_eq!(sqe.cdw12 & 0xFFFF, 3, "NLB stays 0-based");
    assert_eq!(Prinfo::from_cdw12(sqe.cdw12), Prinfo::CHECK_ALL);
    assert_eq!(
        sqe.cdw14, 0x10,
        "the LBA's low 32 bits seed the reference tag"
    );
    assert_eq!(
        sqe.cdw3, 1,
        "bits 47:32, until placed for a 16-bit guard namespace"
    );
    assert_eq!(sqe.cdw15, 0xFF00_BEEF);
    let w = Protected::new(Write::new(5, 1).fua(), Protection::pract(5, Prinfo::NONE)).sqe(1);
    assert_eq!(w.cdw12 >> 26 & 0xF, 0b1000);
    assert_ne!(w.cdw12 & 1 << 30, 0, "FUA kept");
    // A split part advances the reference tag by the blocks skipped.
    let part = Protected::new(Read::new(100, 8), Protection::pass(100, Prinfo::NONE))
        .with_range(LbaRange::new(104, 4));
    assert_eq!(part.protection.ref_tag, 104);
    // The erased form keeps every rule.
    let typed = Protected::new(Compare::new(8, 2), p.ref_tag(8));
    let erased = IoCommand::of(typed);
    assert_eq!(erased.sqe(3), typed.sqe(3));
    assert_eq!(erased.protection(), Some(typed.protection));
    assert!(!erased.splittable());
    let part = LbaRange::new(9, 1);
    assert_eq!(
        erased.with_range(part).sqe(3),
        typed.with_range(part).sqe(3)
    );
    assert_eq!(IoCommand::of(Read::new(1, 1)).protection(), None);
}

#[test]
fn data_and_metadata_bytes_follow_the_format() {
    let ext = namespace(9, 8, true, 1);
    let sep = namespace(12, 16, false, 0);
    let pi8 = namespace(9, 8, false, 2);
    let none = Protection::pass(0, Prinfo::NONE);
    let pract = Protection::pract(0, Prinfo::NONE);
    let read = |ns: &Namespace, p| Protected::new(Read::new(0, 4), p).data_bytes(ns);
    assert_eq!(read(&ext, none), 4 * 520);
    assert_eq!(
        read(&ext, pract),
        4 * 512,
        "PRACT with metadata = PI moves no PI"
    );
    assert_eq!(read(&sep, none), 4 * 4096);
    assert_eq!(sep.format().metadata_bytes(4, false), 64);
    assert_eq!(
        sep.format().metadata_bytes(4, true),
        64,
        "no PI: PRACT changes nothing"
    );
    assert_eq!(pi8.format().metadata_bytes(4, true), 0);
    let ctx_identify = nvme_spec::IdentifyController::default();
    let ctx = CommandContext {
        controller: "test",
        identify: &ctx_identify,
    };
    // Without a metadata buffer only formats that move none pass the command's check.
    let check = |ns: &Namespace, p| Protected::new(Read::new(0, 4), p).check(ns, &ctx, None);
    assert!(check(&ext, none).is_ok());
    assert!(check(&pi8, pract).is_ok());
    assert!(matches!(
        check(&sep, none),
        Err(Error::MetadataMismatch { .. })
    ));
    assert!(check(&pi8, none).is_err());
    // The whole namespace is addressable for Protected commands.
    let r = Protected::new(Read::new(60, 4), none);
    assert!(r.check_range(&sep).is_ok());
    assert!(Read::new(60, 4).check_range(&sep).is_err());
    assert!(Protected::new(Read::new(61, 4), none)
        .check_range(&sep)
        .is_err());
}

/// The mismatch of a failed [`verify_pi`] (panics on any other result).
fn mismatch(r: std::result::Result<(), PiError>) -> PiMismatch {
    match r {
        Err(PiError::Mismatch(m)) => m,
        other => panic!("expected a mismatch, got {other:?}"),
    }
}

/// Every layout, PI type and host-computed PI format (16- and 64-bit guard): generated PI
/// verifies, and each corruption is found by its check.
#[test]
fn host_pi_generates_and_verifies_every_format() {
    let layouts16 = [
        (512u32, 8u16, true, false),
        (512, 8, false, false),
        (4096, 16, false, false),
        (4096, 16, true, true),
        (512, 64, false, true),
    ];
    let layouts64 = [
        (512u32, 16u16, true, false),
        (4096, 16, false, false),
        (4096, 64, true, true),
        (512, 64, false, false),
    ];
    for (pif, layouts) in [
        (PiFormat::Guard16, &layouts16[..]),
        (PiFormat::Guard64, &layouts64[..]),
    ] {
        // Where the tags sit in the tuple.
        let (app_at, ref_at) = match pif {
            PiFormat::Guard64 => (8, 10),
            _ => (2, 4),
        };
        for pi in [PiType::Type1, PiType::Type2, PiType::Type3] {
            for &(bs, ms, extended, first) in layouts {
                let format =
                    LbaFormatInfo::new(bs, ms, extended, Some(pi), first).with_pi_format(pif, 0);
                let blocks = 4;
                // A reference tag above 32 bits: the 64-bit guard keeps 48 of them.
                let p = Protection::pass(0x7_0000_0020, Prinfo::CHECK_ALL).app_tag(0x1234, 0xFFFF);
                let mut data = pattern(format.data_bytes(blocks, false), pi as u8);
                let mut md = pattern(format.metadata_bytes(blocks, false), 7);
                assert_eq!(generate_pi(&format, &p, &mut data, &mut md), Ok(4));
                let what = format!("{format}");
                assert_eq!(
                    verify_pi(&format, &p, Prinfo::CHECK_ALL, &data, &md),
                    Ok(()),
                    "{what}"
                );
                // The tuple holds what the spec says.
                let (d, m) = block_parts(&format, &data, &md, 1);
                let raw = &m[format.pi_offset()..format.pi_offset() + format.pi_bytes()];
                let (guard, app, reft) = match pif {
                    PiFormat::Guard64 => {
                        let t = Pi64Tuple::from_bytes(raw);
                        (t.guard(), t.app_tag(), t.ref_tag())
                    }
                    _ => {
                        let t = PiTuple::from_bytes(raw);
                        (u64::from(t.guard()), t.app_tag(), u64::from(t.ref_tag()))
                    }
                };
                let before = &m[..format.pi_offset()];
                let crc = match pif {
                    PiFormat::Guard64 => crc64_nvme(crc64_nvme(0, d), before),
                    _ => u64::from(crc16_t10dif(crc16_t10dif(0, d), before)),
                };
                assert_eq!(guard, crc, "{what}");
                assert_eq!(app, 0x1234);
                let ref1 = if pi == PiType::Type3 {
                    0x7_0000_0020
                } else {
                    0x7_0000_0021
                };
                let ref1 = match pif {
                    PiFormat::Guard64 => ref1,
                    _ => ref1 & 0xFFFF_FFFF,
                };
                assert_eq!(reft, ref1, "{what}");

                let pi_at = |i: usize| match format.layout() {
                    MetadataLayout::Extended => {
                        i * (bs + u32::from(ms)) as usize + bs as usize + format.pi_offset()
                    }
                    _ => i * ms as usize + format.pi_offset(),
                };
                let corrupt = |offset: usize| {
                    let (mut d, mut m) = (data.clone(), md.clone());
                    let at = pi_at(2) + offset;
                    match format.layout() {
                        MetadataLayout::Extended => d[at] ^= 0x40,
                        _ => m[at] ^= 0x40,
                    }
                    verify_pi(&format, &p, Prinfo::CHECK_ALL, &d, &m)
                };
                assert_eq!(mismatch(corrupt(0)).check, PiCheck::Guard, "{what}");
                assert_eq!(mismatch(corrupt(0)).block, 2);
                // The last guard byte too (64-bit: byte 7 of the tuple).
                let last = app_at - 1;
                assert_eq!(mismatch(corrupt(last)).check, PiCheck::Guard, "{what}");
                assert_eq!(mismatch(corrupt(app_at)).check, PiCheck::AppTag, "{what}");
                if pi == PiType::Type3 {
                    assert_eq!(corrupt(ref_at), Ok(()), "type 3: no reference tag check");
                } else {
                    assert_eq!(mismatch(corrupt(ref_at)).check, PiCheck::RefTag, "{what}");
                }
                // A flipped data bit is a guard error; without the guard check it passes.
                let mut d = data.clone();
                d[3] ^= 1;
                let e = mismatch(verify_pi(&format, &p, Prinfo::CHECK_ALL, &d, &md));
                assert_eq!((e.check, e.block), (PiCheck::Guard, 0));
                let no_guard = Prinfo::CHECK_APP_TAG.union(Prinfo::CHECK_REF_TAG);
                assert_eq!(verify_pi(&format, &p, no_guard, &d, &md), Ok(()));
                // A masked-out application tag difference passes.
                let other = p.app_tag(0x12FF, 0xFF00);
                assert_eq!(
                    verify_pi(&format, &other, Prinfo::CHECK_APP_TAG, &data, &md),
                    Ok(())
                );
            }
        }
    }
}

/// The 64-bit guard of a 4 KiB block of zeros is the spec's test vector, in the tuple's
/// first 8 bytes, big-endian.
#[test]
fn the_64_bit_guard_is_the_crc64_test_vector() {
    let format = LbaFormatInfo::new(4096, 16, true, Some(PiType::Type1), false)
        .with_pi_format(PiFormat::Guard64, 0);
    let mut data = vec![0u8; 4096 + 16];
    let p = Protection::pass(5, Prinfo::CHECK_ALL);
    assert_eq!(generate_pi(&format, &p, &mut data, &mut []), Ok(1));
    assert_eq!(data[4096..4104], 0x6482_D367_EB22_B64Eu64.to_be_bytes());
    assert_eq!(data[4096 + 10..], [0, 0, 0, 0, 0, 5]);
    assert_eq!(
        format.to_string(),
        "4096+16 extended, PI type 1 (last 16 bytes, 64-bit guard)"
    );
}

/// The 32-bit guard format and storage tags are refused host-side with why; PRACT still
/// encodes.
#[test]
fn guard32_and_storage_tags_are_refused_host_side() {
    let base = LbaFormatInfo::new(512, 16, true, Some(PiType::Type1), false);
    let g32 = base.with_pi_format(PiFormat::Guard32, 0);
    let sts = base.with_pi_format(PiFormat::Guard64, 8);
    let p = Protection::pass(0, Prinfo::CHECK_ALL);
    let mut data = pattern(2 * 528, 3);
    let before = data.clone();
    assert_eq!(
        generate_pi(&g32, &p, &mut data, &mut []),
        Err(HostPiUnsupported::Guard32)
    );
    assert_eq!(
        generate_pi(&sts, &p, &mut data, &mut []),
        Err(HostPiUnsupported::StorageTag { bits: 8 })
    );
    assert_eq!(data, before, "nothing written");
    assert_eq!(
        verify_pi(&g32, &p, Prinfo::CHECK_ALL, &data, &[]),
        Err(PiError::Unsupported(HostPiUnsupported::Guard32))
    );
    let msg = HostPiUnsupported::StorageTag { bits: 8 }.to_string();
    assert!(
        msg.contains("8-bit storage tag") && msg.contains("PRACT"),
        "{msg}"
    );
    assert!(HostPiUnsupported::Guard32
        .to_string()
        .contains("32-bit guard"));
    assert_eq!(
        sts.to_string(),
        "512+16 extended, PI type 1 (last 16 bytes, 64-bit guard, 8-bit storage tag)"
    );
    // A format without PI has nothing to refuse.
    let none = LbaFormatInfo::new(512, 8, true, None, false).with_pi_format(PiFormat::Guard32, 0);
    assert_eq!(generate_pi(&none, &p, &mut data, &mut []), Ok(0));
}

/// The 48-bit reference tag goes in CDW14 and CDW3 15:0 on a 64-bit guard namespace, CDW14
/// alone on a 16-bit one; the erased form and split parts keep it.
#[test]
fn the_48_bit_reference_tag_is_placed_per_format() {
    let id = |ms: u16| {
        let mut lbaf = [LbaFormat::default(); 64];
        lbaf[0] = LbaFormat::new(12, ms);
        IdentifyNamespace {
            nsze: 64,
            ncap: 64,
            dps: 1,
            lbaf,
            ..IdentifyNamespace::default()
        }
    };
    let ns16 = Namespace::from_identify(1, id(16), 1 << 20).unwrap();
    let ns64 = Namespace::from_identify(1, id(16), 1 << 20)
        .unwrap()
        .with_extended_format(ExtendedLbaFormat::new(0, PiFormat::Guard64))
        .unwrap();
    assert_eq!(ns64.format().pi_format(), PiFormat::Guard64);
    assert_eq!(
        ns64.format().moved_metadata(true),
        0,
        "metadata = the 16-byte PI"
    );
    assert_eq!(
        ns16.format().moved_metadata(true),
        16,
        "8-byte PI in 16 bytes"
    );
    let lba = 0x1234_5678_9ABCu64;
    let cmd = Protected::new(Read::new(lba, 2), Protection::pract(lba, Prinfo::CHECK_ALL));
    let s64 = cmd.sqe_on(&ns64);
    assert_eq!((s64.cdw14, s64.cdw3), (0x5678_9ABC, 0x1234));
    let s16 = cmd.sqe_on(&ns16);
    assert_eq!(
        (s16.cdw14, s16.cdw3),
        (0x5678_9ABC, 0),
        "CDW3 reserved on 16-bit guard"
    );
    let erased = IoCommand::of(cmd);
    assert_eq!(erased.sqe_on(&ns64), s64);
    assert_eq!(erased.sqe_on(&ns16), s16);
    assert_eq!(erased.protection(), Some(cmd.protection));
    // A split part's tag carries into the upper bits.
    let c = Protected::new(Read::new(0, 8), Protection::pass(0xFFFF_FFFE, Prinfo::NONE));
    let part = LbaRange::new(4, 4);
    let s = c.with_range(part).sqe_on(&ns64);
    assert_eq!((s.cdw14, s.cdw3), (2, 1));
    assert_eq!(IoCommand::of(c).with_range(part).sqe_on(&ns64), s);
    // The reserved PIF and a PI larger than the metadata are refused with why.
    let ns8 = Namespace::from_identify(1, id(8), 1 << 20).unwrap();
    let e = ns8
        .with_extended_format(ExtendedLbaFormat::new(0, PiFormat::Guard64))
        .unwrap_err();
    assert!(e.contains("8 B of metadata") && e.contains("16 B"), "{e}");
    let e = ns16
        .with_extended_format(ExtendedLbaFormat(3 << 7))
        .unwrap_err();
    assert!(e.contains("reserved"), "{e}");
}

#[test]
fn escape_tags_disable_the_checks() {
    let f1 = LbaFormatInfo::new(512, 8, true, Some(PiType::Type1), false);
    let mut data = pattern(2 * 520, 1);
    let p = Protection::pass(0, Prinfo::CHECK_ALL).app_tag(APP_TAG_ESCAPE, 0xFFFF);
    generate_pi(&f1, &p, &mut data, &mut []).unwrap();
    data[0] ^= 0xFF; // bad guard, but the block is escaped
    assert_eq!(verify_pi(&f1, &p, Prinfo::CHECK_ALL, &data, &[]), Ok(()));
    // Type 3 needs both tags all ones.
    let f3 = LbaFormatInfo::new(512, 8, true, Some(PiType::Type3), false);
    let p3 = p.ref_tag(7);
    generate_pi(&f3, &p3, &mut data, &mut []).unwrap();
    data[0] ^= 0xFF;
    let e = mismatch(verify_pi(&f3, &p3, Prinfo::CHECK_ALL, &data, &[]));
    assert_eq!(e.check, PiCheck::Guard);
    let p3 = p.ref_tag(REF_TAG_ESCAPE.into());
    generate_pi(&f3, &p3, &mut data, &mut []).unwrap();
    data[0] ^= 0xFF;
    assert_eq!(verify_pi(&f3, &p3, Prinfo::CHECK_ALL, &data, &[]), Ok(()));
    // 64-bit guard, type 3: the 48-bit all-ones reference tag escapes, 32 bits of ones not.
    let f64 = LbaFormatInfo::new(512, 16, true, Some(PiType::Type3), false)
        .with_pi_format(PiFormat::Guard64, 0);
    let mut data = pattern(2 * 528, 1);
    let p = p.ref_tag(REF_TAG_ESCAPE.into());
    generate_pi(&f64, &p, &mut data, &mut []).unwrap();
    data[0] ^= 0xFF;
    assert_eq!(
        mismatch(verify_pi(&f64, &p, Prinfo::CHECK_ALL, &data, &[])).check,
        PiCheck::Guard
    );
    let p = p.ref_tag(REF_TAG48_ESCAPE);
    generate_pi(&f64, &p, &mut data, &mut []).unwrap();
    data[0] ^= 0xFF;
    assert_eq!(verify_pi(&f64, &p, Prinfo::CHECK_ALL, &data, &[]), Ok(()));
}

#[test]
fn check_statuses_are_typed() {
    for check in [PiCheck::Guard, PiCheck::AppTag, PiCheck::RefTag] {
        let status = Status::new(
            StatusCodeType::MediaDataIntegrity.raw(),
            check.status_code(),
            true,
        );
        assert_eq!(PiCheck::from_status(status), Some(check));
        match Error::command("Read", status) {
            Error::ProtectionCheck {
                check: c,
                status: s,
                ..
            } => {
                assert_eq!((c, s), (check, status));
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(
        Status::new(2, 0x82, false).sc(),
        media::END_TO_END_GUARD_CHECK_ERROR
    );
    // Other statuses stay Command errors: Compare Failure (SCT 2h, SC 85h), and 82h of SCT 0h.
    let compare = Status::new(2, media::COMPARE_FAILURE, true);
    assert!(matches!(
        Error::command("Compare", compare),
        Error::Command { .. }
    ));
    assert!(matches!(
        Error::command("Read", Status::new(0, 0x82, true)),
        Error::Command { .. }
    ));
    let m = PiMismatch {
        block: 0,
        check: PiCheck::RefTag,
        expected: 1,
        found: 2,
    };
    assert_eq!(
        mismatch_error("Read", &m).status().map(|s| s.sc()),
        Some(0x84)
    );
}
