use super::*;
use crate::command::IoCommand;
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

/// Every layout and PI type: generated PI verifies, and each corruption is found by its check.
#[test]
fn host_pi_generates_and_verifies_every_format() {
    for pi in [PiType::Type1, PiType::Type2, PiType::Type3] {
        for (bs, ms, extended, first) in [
            (512u32, 8u16, true, false),
            (512, 8, false, false),
            (4096, 16, false, false),
            (4096, 16, true, true),
            (512, 64, false, true),
        ] {
            let format = LbaFormatInfo::new(bs, ms, extended, Some(pi), first);
            let blocks = 4;
            let p = Protection::pass(0x20, Prinfo::CHECK_ALL).app_tag(0x1234, 0xFFFF);
            let mut data = pattern(format.data_bytes(blocks, false), pi as u8);
            let mut md = pattern(format.metadata_bytes(blocks, false), 7);
            assert_eq!(generate_pi(&format, &p, &mut data, &mut md), 4);
            let what = format!("{format}");
            assert_eq!(
                verify_pi(&format, &p, Prinfo::CHECK_ALL, &data, &md),
                Ok(()),
                "{what}"
            );
            // The tuple holds what the spec says.
            let tuple = {
                let (d, m) = block_parts(&format, &data, &md, 1);
                let t = PiTuple::from_bytes(&m[format.pi_offset()..]);
                assert_eq!(t.guard(), guard_of(&format, d, m));
                t
            };
            assert_eq!(tuple.app_tag(), 0x1234);
            let ref1 = if pi == PiType::Type3 { 0x20 } else { 0x21 };
            assert_eq!(tuple.ref_tag(), ref1, "{what}");

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
            assert_eq!(corrupt(0).unwrap_err().check, PiCheck::Guard, "{what}");
            assert_eq!(corrupt(0).unwrap_err().block, 2);
            assert_eq!(corrupt(2).unwrap_err().check, PiCheck::AppTag, "{what}");
            if pi == PiType::Type3 {
                assert_eq!(corrupt(4), Ok(()), "type 3: no reference tag check");
            } else {
                assert_eq!(corrupt(4).unwrap_err().check, PiCheck::RefTag, "{what}");
            }
            // A flipped data bit is a guard error; without the guard check it passes.
            let mut d = data.clone();
            d[3] ^= 1;
            let e = verify_pi(&format, &p, Prinfo::CHECK_ALL, &d, &md).unwrap_err();
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

#[test]
fn escape_tags_disable_the_checks() {
    let f1 = LbaFormatInfo::new(512, 8, true, Some(PiType::Type1), false);
    let mut data = pattern(2 * 520, 1);
    let p = Protection::pass(0, Prinfo::CHECK_ALL).app_tag(APP_TAG_ESCAPE, 0xFFFF);
    generate_pi(&f1, &p, &mut data, &mut []);
    data[0] ^= 0xFF; // bad guard, but the block is escaped
    assert_eq!(verify_pi(&f1, &p, Prinfo::CHECK_ALL, &data, &[]), Ok(()));
    // Type 3 needs both tags all ones.
    let f3 = LbaFormatInfo::new(512, 8, true, Some(PiType::Type3), false);
    let p3 = p.ref_tag(7);
    generate_pi(&f3, &p3, &mut data, &mut []);
    data[0] ^= 0xFF;
    let e = verify_pi(&f3, &p3, Prinfo::CHECK_ALL, &data, &[]).unwrap_err();
    assert_eq!(e.check, PiCheck::Guard);
    let p3 = p.ref_tag(REF_TAG_ESCAPE);
    generate_pi(&f3, &p3, &mut data, &mut []);
    data[0] ^= 0xFF;
    assert_eq!(verify_pi(&f3, &p3, Prinfo::CHECK_ALL, &data, &[]), Ok(()));
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
