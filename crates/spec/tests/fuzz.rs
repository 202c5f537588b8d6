//! Property tests (issue 10, "Fuzzing"): everything in this crate that decodes bytes or
//! integers a device hands us must accept any input without panicking, and the codecs must
//! round-trip. `PROPTEST_CASES` sets the number of cases per property (default 256); a long
//! run is `PROPTEST_CASES=100000 cargo test -p nvme-spec --release --test fuzz`.

use nvme_spec::identify::{
    fill_ascii_field, IDENTIFY_DATA_SIZE, MAX_LBA_FORMATS, NAMESPACE_LIST_ENTRIES,
};
use nvme_spec::regs::{Cap, Csts, Version};
use nvme_spec::status::{command_specific, generic, media, path};
use nvme_spec::{
    CompletionEntry, IdentifyController, IdentifyNamespace, LbaFormat, NamespaceList, Status,
    StatusCodeType, SubmissionEntry,
};
use proptest::prelude::*;

/// An arbitrary Identify data buffer: uniformly random bytes, or mostly zeros with a few
/// random bytes (closer to what real devices return, and it reaches the "0 = none" branches).
fn identify_bytes() -> impl Strategy<Value = [u8; IDENTIFY_DATA_SIZE]> {
    let random = prop::collection::vec(any::<u8>(), IDENTIFY_DATA_SIZE);
    let sparse =
        prop::collection::vec((0..IDENTIFY_DATA_SIZE, any::<u8>()), 0..64).prop_map(|pokes| {
            let mut b = vec![0u8; IDENTIFY_DATA_SIZE];
            for (i, v) in pokes {
                b[i] = v;
            }
            b
        });
    prop_oneof![random, sparse].prop_map(|v| v.try_into().expect("4096 bytes"))
}

fn le16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

fn le64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

/// What an ASCII accessor returns: printable ASCII only, no trailing padding, never longer
/// than the field.
fn assert_ascii_field(s: &str, width: usize) {
    assert!(s.len() <= width, "{s:?} longer than {width}");
    assert!(
        s.bytes().all(|b| b.is_ascii_graphic() || b == b' '),
        "{s:?}"
    );
    assert!(!s.ends_with(' '), "{s:?} keeps its padding");
}

/// Printable ASCII as a device would put in SN/MN/FR (may contain inner spaces).
fn ascii_text(max: usize) -> impl Strategy<Value = String> {
    prop::collection::vec(0x20u8..0x7f, 0..=max + 4)
        .prop_map(|v| String::from_utf8(v).expect("ASCII"))
}

proptest! {
    // Failures print the minimal input; no regression files are written from this crate's
    // integration tests (proptest cannot find a lib.rs next to them).
    #![proptest_config(ProptestConfig {
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn identify_controller_decodes_anything(b in identify_bytes(), page_shift in 0u32..64) {
        let c = IdentifyController::from_bytes(&b);
        prop_assert_eq!(c.to_bytes(), b, "round trip");
        // Fields read back from where the specification places them.
        prop_assert_eq!(c.vid, le16(&b, 0));
        prop_assert_eq!(c.mdts, b[77]);
        prop_assert_eq!(c.ver, le32(&b, 80));
        prop_assert_eq!(c.oacs, le16(&b, 256));
        prop_assert_eq!(c.sqes, b[512]);
        prop_assert_eq!(c.cqes, b[513]);
        prop_assert_eq!(c.nn, le32(&b, 516));
        prop_assert_eq!(c.oncs, le16(&b, 520));
        prop_assert_eq!(c.vwc, b[525]);
        prop_assert_eq!(&c.subnqn[..], &b[768..1024]);
        prop_assert_eq!(&c.psd[31][..], &b[3040..3072]);
        prop_assert_eq!(&c.vs[..], &b[3072..]);

        assert_ascii_field(&c.serial(), 20);
        assert_ascii_field(&c.model(), 40);
        assert_ascii_field(&c.firmware(), 8);
        let v = c.version();
        prop_assert_eq!(
            v.to_string(),
            format!("{}.{}.{}", v.major(), v.minor(), v.tertiary())
        );
        let _ = format!("{c:?}");

        // MDTS: None only for 0; otherwise 2^MDTS pages, saturating, and never less than a page.
        let page = 1usize.checked_shl(page_shift).unwrap_or(0);
        match c.mdts_bytes(page) {
            None => prop_assert_eq!(c.mdts, 0),
            Some(bytes) => {
                prop_assert!(c.mdts != 0);
                let exact = 1u128.checked_shl(u32::from(c.mdts)).and_then(|p| p.checked_mul(page as u128));
                match exact {
                    Some(e) if e <= usize::MAX as u128 => prop_assert_eq!(bytes as u128, e),
                    _ => prop_assert_eq!(bytes, usize::MAX),
                }
            }
        }
        for page in [0, 1, 4096, 1 << 27, usize::MAX] {
            let _ = c.mdts_bytes(page);
        }

        let (sq_min, sq_max) = c.sqes_min_max();
        let (cq_min, cq_max) = c.cqes_min_max();
        prop_assert_eq!(sq_min | sq_max << 4, c.sqes);
        prop_assert_eq!(cq_min | cq_max << 4, c.cqes);
        prop_assert!(sq_min < 16 && sq_max < 16 && cq_min < 16 && cq_max < 16);
        prop_assert_eq!(c.vwc_present(), b[525] & 1 != 0);
        prop_assert_eq!(c.oacs_flags().bits(), c.oacs);
        prop_assert_eq!(c.oncs_flags().bits(), c.oncs);
        prop_assert!(c.oacs_flags().names().len() <= 11);
        prop_assert!(c.oncs_flags().names().len() <= 9);
    }

    #[test]
    fn identify_controller_strings_read_back(
        b in identify_bytes(),
        sn in ascii_text(20),
        mn in ascii_text(40),
        fr in ascii_text(8),
    ) {
        let mut c = IdentifyController::from_bytes(&b);
        fill_ascii_field(&mut c.sn, &sn);
        fill_ascii_field(&mut c.mn, &mn);
        fill_ascii_field(&mut c.fr, &fr);
        let c = IdentifyController::from_bytes(&c.to_bytes());
        let expect = |s: &str, width: usize| s[..s.len().min(width)].trim_end().to_owned();
        prop_assert_eq!(c.serial(), expect(&sn, 20));
        prop_assert_eq!(c.model(), expect(&mn, 40));
        prop_assert_eq!(c.firmware(), expect(&fr, 8));
    }

    #[test]
    fn identify_namespace_decodes_anything(b in identify_bytes()) {
        let ns = IdentifyNamespace::from_bytes(&b);
        prop_assert_eq!(ns.to_bytes(), b, "round trip");
        prop_assert_eq!(ns.nsze, le64(&b, 0));
        prop_assert_eq!(ns.ncap, le64(&b, 8));
        prop_assert_eq!(ns.nuse, le64(&b, 16));
        prop_assert_eq!(ns.nlbaf, b[25]);
        prop_assert_eq!(ns.flbas, b[26]);
        prop_assert_eq!(ns.dps, b[29]);
        prop_assert_eq!(&ns.eui64[..], &b[120..128]);
        for (i, f) in ns.lbaf.iter().enumerate() {
            let at = 128 + 4 * i;
            prop_assert_eq!(f.ms, le16(&b, at));
            prop_assert_eq!(f.lbads, b[at + 2]);
            prop_assert_eq!(f.rp, b[at + 3]);
        }
        prop_assert_eq!(&ns.vs[..], &b[384..]);

        let index = ns.lba_format_index();
        prop_assert!(index < MAX_LBA_FORMATS);
        prop_assert_eq!(index & 0xF, usize::from(ns.flbas & 0xF));
        if ns.nlbaf < 16 {
            prop_assert!(index < 16);
        }
        let current = ns.current_lba_format();
        prop_assert_eq!(current, ns.lbaf[index]);
        prop_assert_eq!(ns.block_size(), current.data_size());
        let formats = ns.lba_formats();
        prop_assert_eq!(formats.len(), (usize::from(ns.nlbaf) + 1).min(MAX_LBA_FORMATS));
        prop_assert_eq!(formats, &ns.lbaf[..formats.len()]);
        for f in formats {
            let size = f.data_size();
            prop_assert!(size == 0 || (size.is_power_of_two() && size == 1 << f.lbads));
            prop_assert!(f.relative_performance() <= 3);
            prop_assert_eq!(f.metadata_size(), f.ms);
        }
        prop_assert_eq!(ns.metadata_extended(), ns.flbas & 0x10 != 0);
        prop_assert!(ns.protection_type() <= 7);
        let _ = format!("{ns:?}");
    }

    #[test]
    fn lba_format_accessors(ms: u16, lbads: u8, rp: u8) {
        let f = LbaFormat { ms, lbads, rp };
        let size = f.data_size();
        if (1..32).contains(&lbads) {
            prop_assert_eq!(size, 1u32 << lbads);
        } else {
            prop_assert_eq!(size, 0);
        }
        prop_assert_eq!(f.relative_performance(), rp & 3);
        prop_assert_eq!(LbaFormat::from_bytes(&f.to_bytes()), f);
        prop_assert_eq!(LbaFormat::new(lbads, ms).data_size(), size);
    }

    #[test]
    fn namespace_list_decodes_anything(b in identify_bytes()) {
        let l = NamespaceList::from_bytes(&b);
        prop_assert_eq!(l.to_bytes(), b, "round trip");
        for i in 0..NAMESPACE_LIST_ENTRIES {
            prop_assert_eq!(l.ids[i], le32(&b, 4 * i));
        }
        let active: Vec<u32> = l.active().collect();
        let first_zero = l.ids.iter().position(|&id| id == 0).unwrap_or(NAMESPACE_LIST_ENTRIES);
        prop_assert_eq!(&active[..], &l.ids[..first_zero]);
    }

    #[test]
    fn namespace_list_built_from_ids_reads_back(
        mut ids in prop::collection::vec(1u32.., 0..=NAMESPACE_LIST_ENTRIES),
    ) {
        ids.sort_unstable();
        ids.dedup();
        let mut l = NamespaceList::default();
        l.ids[..ids.len()].copy_from_slice(&ids);
        let l = NamespaceList::from_bytes(&l.to_bytes());
        prop_assert_eq!(l.active().collect::<Vec<_>>(), ids);
    }

    // ----- status field and queue entries -------------------------------------------------

    #[test]
    fn any_status_decodes(raw: u16) {
        let s = Status(raw);
        prop_assert_eq!(u16::from(s.sc()), raw & 0xFF);
        prop_assert_eq!(u16::from(s.sct_raw()), raw >> 8 & 7);
        prop_assert_eq!(s.sct().raw(), s.sct_raw());
        prop_assert_eq!(u16::from(s.crd()), raw >> 11 & 3);
        prop_assert_eq!(s.more(), raw & 1 << 13 != 0);
        prop_assert_eq!(s.dnr(), raw & 1 << 14 != 0);
        prop_assert_eq!(s.is_success(), raw & 0x7FF == 0);
        let name = s.name();
        prop_assert!(!name.is_empty());
        let text = s.to_string();
        prop_assert!(text.starts_with(name), "{}", text);
        let sc_hex = format!("SC {:#04x}", s.sc());
        prop_assert!(text.contains(&sc_hex), "{}", text);
        prop_assert!(text.contains(s.sct().name()), "{}", text);
        prop_assert_eq!(text.contains(", DNR"), s.dnr());
        prop_assert_eq!(text.contains(", MORE"), s.more());
        prop_assert!(text.ends_with(')'));
        let _ = format!("{s:?} {}", s.sct());
        // The CQE encoding keeps the 15-bit field and the phase tag.
        for phase in [false, true] {
            let cqe = s.to_cqe(phase);
            prop_assert_eq!(cqe & 1 == 1, phase);
            prop_assert_eq!(Status::from_cqe(cqe), Status(raw & 0x7FFF));
        }
        // Any 16-bit CQE status word decodes.
        let from_word = Status::from_cqe(raw);
        prop_assert_eq!(from_word.0, raw >> 1);
        let _ = from_word.to_string();
    }

    #[test]
    fn status_names_match_the_tables(sct in 0u8..8, sc: u8, dnr: bool, more: bool, crd in 0u8..8) {
        let s = Status::new(sct, sc, dnr).with_more(more).with_crd(crd);
        prop_assert_eq!(s.sct_raw(), sct);
        prop_assert_eq!(s.sc(), sc);
        prop_assert_eq!(s.dnr(), dnr);
        prop_assert_eq!(s.more(), more);
        prop_assert_eq!(s.crd(), crd & 3);
        let table: &[u8] = match sct {
            0 => generic::ALL,
            1 => command_specific::ALL,
            2 => media::ALL,
            3 => path::ALL,
            _ => &[],
        };
        prop_assert_eq!(s.name() != "Unknown", table.contains(&sc), "{}", s);
        let expected = match sct {
            0 => StatusCodeType::Generic,
            1 => StatusCodeType::CommandSpecific,
            2 => StatusCodeType::MediaDataIntegrity,
            3 => StatusCodeType::Path,
            7 => StatusCodeType::VendorSpecific,
            r => StatusCodeType::Reserved(r),
        };
        prop_assert_eq!(s.sct(), expected);
    }

    #[test]
    fn any_sct_byte_decodes(raw: u8) {
        let t = StatusCodeType::from_raw(raw);
        prop_assert_eq!(t.raw(), raw & 7);
        prop_assert_eq!(t.to_string(), t.name());
        prop_assert_eq!(StatusCodeType::Reserved(raw).raw(), raw & 7);
    }

    #[test]
    fn any_completion_entry_decodes(b: [u8; 16], dw3: u32) {
        let cqe = CompletionEntry::from_bytes(&b);
        prop_assert_eq!(cqe.to_bytes(), b);
        prop_assert_eq!(cqe.dw0, le32(&b, 0));
        prop_assert_eq!(cqe.dw1, le32(&b, 4));
        prop_assert_eq!(cqe.sq_head, le16(&b, 8));
        prop_assert_eq!(cqe.sq_id, le16(&b, 10));
        prop_assert_eq!(cqe.cid, le16(&b, 12));
        prop_assert_eq!(cqe.phase(), b[14] & 1 != 0);
        prop_assert_eq!(cqe.status(), Status(le16(&b, 14) >> 1));
        let _ = format!("{cqe:?} {}", cqe.status());
        // Dword 3 as one 32-bit value: CID in bits 15:0, phase in 16, status in 31:17.
        let mut b3 = b;
        b3[12..16].copy_from_slice(&dw3.to_le_bytes());
        let cqe = CompletionEntry::from_bytes(&b3);
        prop_assert_eq!(u32::from(cqe.cid), dw3 & 0xFFFF);
        prop_assert_eq!(cqe.phase(), dw3 & 1 << 16 != 0);
        prop_assert_eq!(u32::from(cqe.status().0), dw3 >> 17);
    }

    #[test]
    fn built_completion_entries_read_back(
        dw0: u32, sq_head: u16, sq_id: u16, cid: u16, status in 0u16..0x8000, phase: bool,
    ) {
        let cqe = CompletionEntry::new(dw0, sq_head, sq_id, cid, Status(status), phase);
        let cqe = CompletionEntry::from_bytes(&cqe.to_bytes());
        prop_assert_eq!(
            (cqe.dw0, cqe.dw1, cqe.sq_head, cqe.sq_id, cqe.cid),
            (dw0, 0, sq_head, sq_id, cid)
        );
        prop_assert_eq!(cqe.status(), Status(status));
        prop_assert_eq!(cqe.phase(), phase);
    }

    #[test]
    fn any_submission_entry_decodes(b in prop::collection::vec(any::<u8>(), 64), cid: u16) {
        let b: [u8; 64] = b.try_into().unwrap();
        let mut sqe = SubmissionEntry::from_bytes(&b);
        prop_assert_eq!(sqe.to_bytes(), b);
        prop_assert_eq!(sqe.cdw0, le32(&b, 0));
        prop_assert_eq!(sqe.prp2, le64(&b, 32));
        prop_assert_eq!(sqe.opcode(), b[0]);
        prop_assert_eq!(sqe.fuse(), b[1] & 3);
        prop_assert_eq!(sqe.psdt(), b[1] >> 6);
        let before = sqe;
        sqe.set_cid(cid);
        prop_assert_eq!(sqe.cid(), cid);
        prop_assert_eq!(sqe.cdw0 & 0xFFFF, before.cdw0 & 0xFFFF);
        prop_assert_eq!(SubmissionEntry { cdw0: before.cdw0, ..sqe }, before);
    }

    // ----- registers the device reports ---------------------------------------------------

    #[test]
    fn any_register_value_decodes(cap: u64, csts: u32, vs: u32) {
        let cap = Cap(cap);
        prop_assert_eq!(cap.max_queue_entries(), u32::from(cap.mqes()) + 1);
        prop_assert!(cap.doorbell_stride() >= 4 && cap.doorbell_stride() <= 4 << 15);
        prop_assert!(cap.min_page_size() >= 4096 && cap.min_page_size() <= 1 << 27);
        prop_assert!(cap.max_page_size() >= 4096 && cap.max_page_size() <= 1 << 27);
        let _ = (cap.timeout(), cap.cqr(), cap.nssrs(), cap.css_nvm(), cap.bps());
        let _ = (cap.cmbs(), cap.pmrs(), format!("{cap:?}"));
        let csts = Csts(csts);
        let _ = (csts.rdy(), csts.cfs(), csts.shst(), csts.nssro(), csts.pp());
        let v = Version(vs);
        prop_assert_eq!(Version::new(v.major(), v.minor(), v.tertiary()), v);
        prop_assert!(!v.to_string().is_empty());
    }
}
