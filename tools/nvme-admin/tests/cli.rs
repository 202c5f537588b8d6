//! `nvme-admin` end to end on the emulator (DEVICE `sim`): every subcommand's JSON keys and
//! values (nvme-cli's keys), the text form, and bad input refused with a message and exit
//! status 1 (unknown feature, a value that does not fit, a status from the controller, a
//! bad option).

use std::process::{Command, Output};

use serde_json::Value;

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nvme-admin"))
        .args(args)
        .output()
        .expect("nvme-admin runs")
}

/// Runs `args` with `-o json`, expects success and returns the parsed output.
fn json(args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.extend(["-o", "json"]);
    let out = run(&all);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON output")
}

/// Runs `args`, expects exit status 1 and returns stderr.
fn fails(args: &[&str]) -> String {
    let out = run(args);
    assert_eq!(out.status.code(), Some(1), "{args:?} should fail");
    assert!(out.stdout.is_empty(), "nothing on stdout when failing");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn list_and_identify() {
    let v = json(&["list", "sim"]);
    let devices = v["Devices"].as_array().unwrap();
    assert_eq!(devices.len(), 2);
    assert_eq!(devices[0]["NameSpace"], 1);
    assert_eq!(devices[0]["SectorSize"], 512);
    assert_eq!(devices[0]["MaximumLBA"], 32768);
    assert_eq!(devices[0]["PhysicalSize"], 16 << 20);
    assert_eq!(devices[1]["SectorSize"], 4096);
    assert_eq!(devices[1]["SerialNumber"], "SIM0001");

    let c = json(&["id-ctrl", "sim"]);
    assert_eq!(c["vid"], 0x1b36);
    assert_eq!(c["sn"], "SIM0001");
    assert_eq!(c["mn"], "nvme-sim emulated controller");
    assert_eq!(c["fr"], "1.0");
    assert_eq!(c["nn"], 2);
    assert_eq!(c["elpe"], 15);
    assert_eq!(c["lpa"], 2, "Commands Supported and Effects log offered");
    // ONCS: Compare, Write Uncorrectable, DSM, Write Zeroes, Save/Select, Timestamp, Copy.
    assert_eq!(c["oncs"], 0x1 | 0x2 | 0x4 | 0x8 | 0x10 | 0x40 | 0x100);
    assert_eq!(c["sqes"], 0x66);
    assert_eq!(c["cqes"], 0x44);

    let n = json(&["id-ns", "sim", "-n", "2"]);
    assert_eq!(n["nsze"], 4096);
    assert_eq!(n["ncap"], 4096);
    // The emulator offers QEMU's eight LBA formats; namespace 2 is in format 4 (4 KiB).
    assert_eq!(n["flbas"], 4);
    assert_eq!(n["nlbaf"], 7);
    assert_eq!(n["lbafs"][4]["ds"], 12);
    assert_eq!(n["lbafs"][4]["ms"], 0);
    assert_eq!(n["lbafs"][0]["ds"], 9);
    assert_eq!(n["eui64"], "0000000000000000");
}

#[test]
fn namespace_lists_and_descriptors() {
    let v = json(&["list-ns", "sim"]);
    assert_eq!(
        v["nsid_list"],
        serde_json::json!([{"nsid": 1}, {"nsid": 2}])
    );
    let v = json(&["list-ns", "sim", "-n", "1"]);
    assert_eq!(v["nsid_list"], serde_json::json!([{"nsid": 2}]));

    let v = json(&["ns-descs", "sim", "-n", "2"]);
    let d = v["ns-descs"].as_array().unwrap();
    assert_eq!(d.len(), 4);
    assert_eq!(d[0]["type"], "eui64");
    assert_eq!(d[0]["nidt"], 1);
    assert_eq!(d[0]["nidl"], 8);
    assert_eq!(d[0]["loc"], 0);
    assert_eq!(d[0]["eui64"], "0200000000000002");
    assert_eq!(d[1]["type"], "nguid");
    assert_eq!(d[1]["loc"], 12);
    assert_eq!(d[1]["nguid"].as_str().unwrap().len(), 32);
    assert_eq!(d[2]["type"], "uuid");
    assert_eq!(d[2]["uuid"].as_str().unwrap().len(), 36);
    assert_eq!(d[3]["type"], "csi");
    // Namespace 2 of `sim` is zoned (CSI 02h), namespace 1 is an NVM one.
    assert_eq!(d[3]["csi"], "0x2");
    let v = json(&["ns-descs", "sim", "-n", "1"]);
    assert_eq!(v["ns-descs"][3]["csi"], "0");
}

#[test]
fn zns_identify_and_report_zones() {
    let v = json(&["zns", "id-ns", "sim", "-n", "2"]);
    // SimZoned's defaults: 4 open, 6 active (0-based 3 and 5), a 16-block ZRWA.
    assert_eq!((v["mor"].as_u64(), v["mar"].as_u64()), (Some(3), Some(5)));
    assert_eq!(v["zrwasz"], 16);
    assert_eq!(v["ozcs"], 2, "ZRWA supported");
    assert_eq!(v["lbafe"][0]["zsze"], 256);
    assert_eq!(v["lbafe"][0]["zdes"], 0);
    assert_eq!(json(&["zns", "id-ctrl", "sim"])["zasl"], 0);

    let r = json(&["zns", "report-zones", "sim", "-n", "2"]);
    assert_eq!(r["nr_zones"], 16);
    let zones = r["zone_list"].as_array().unwrap();
    assert_eq!(zones.len(), 16);
    for (i, z) in zones.iter().enumerate() {
        assert_eq!(z["slba"], i as u64 * 256);
        assert_eq!(z["wp"], i as u64 * 256);
        assert_eq!(z["cap"], 256);
        assert_eq!(z["state"], "EMPTY");
        assert_eq!(z["type"], "SEQWRITE_REQ");
    }
    // From zone 3, two descriptors; the filter on Full zones finds none.
    let r = json(&[
        "zns",
        "report-zones",
        "sim",
        "-n",
        "2",
        "-s",
        "768",
        "-d",
        "2",
    ]);
    let zones = r["zone_list"].as_array().unwrap();
    assert_eq!(zones.len(), 2);
    assert_eq!(
        (zones[0]["slba"].as_u64(), zones[1]["slba"].as_u64()),
        (Some(768), Some(1024))
    );
    assert_eq!(r["nr_zones"], 13, "every matching zone from zone 3");
    let r = json(&["zns", "report-zones", "sim", "-n", "2", "-S", "5"]);
    assert_eq!(r["nr_zones"], 0);
    assert!(r["zone_list"].as_array().unwrap().is_empty());
}

#[test]
fn zns_zone_management_and_append() {
    // Each run is a fresh emulator: every action succeeds on its own zones.
    for action in ["open-zone", "finish-zone", "reset-zone"] {
        let v = json(&["zns", action, "sim", "-n", "2", "-s", "512"]);
        assert_eq!(v["result"], "success", "{action}");
        assert_eq!(v["slba"], 512);
    }
    let v = json(&["zns", "reset-zone", "sim", "-n", "2", "-a"]);
    assert_eq!(v["select-all"], true);
    let v = json(&[
        "zns",
        "zone-mgmt-send",
        "sim",
        "-n",
        "2",
        "-s",
        "256",
        "-z",
        "2",
    ]);
    assert_eq!(v["zone-mgmt-send"], "Finish");
    // Offline is only allowed from Read Only, Close from an open zone: the zone error, named.
    let e = fails(&["zns", "offline-zone", "sim", "-n", "2", "-s", "0"]);
    assert!(
        e.contains("InvalidTransition") && e.contains("SC 0xbf"),
        "{e}"
    );
    let e = fails(&["zns", "close-zone", "sim", "-n", "2", "-s", "512"]);
    assert!(e.contains("InvalidTransition"), "{e}");

    let dir = std::env::temp_dir().join(format!("nvme-admin-zns-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let data = dir.join("data");
    std::fs::write(&data, vec![0xA5u8; 8192]).unwrap();
    let path = data.to_str().unwrap();
    let v = json(&[
        "zns",
        "zone-append",
        "sim",
        "-n",
        "2",
        "-s",
        "1280",
        "-z",
        "8192",
        "-d",
        path,
    ]);
    assert_eq!(
        v["lba"], 1280,
        "an empty zone takes the append at its start"
    );
    let out = run(&[
        "zns",
        "zone-append",
        "sim",
        "-n",
        "2",
        "-s",
        "0",
        "-z",
        "4096",
        "-d",
        path,
    ]);
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8(out.stdout).unwrap().trim_end(),
        "lba    : 0\nresult : Success appended data to LBA 0x0\nzslba  : 0"
    );

    // Bad input: a clear message, exit 1, nothing on stdout.
    let e = fails(&["zns", "report-zones", "sim", "-n", "1"]);
    assert!(e.contains("namespace 1 is not a zoned namespace"), "{e}");
    let e = fails(&[
        "zns",
        "zone-append",
        "sim",
        "-n",
        "2",
        "-z",
        "1000",
        "-d",
        path,
    ]);
    assert!(
        e.contains("not a positive multiple of the 4096-byte block size"),
        "{e}"
    );
    let e = fails(&[
        "zns",
        "zone-append",
        "sim",
        "-n",
        "2",
        "-z",
        "16384",
        "-d",
        path,
    ]);
    assert!(e.contains("fewer than --data-size 16384"), "{e}");
    let e = fails(&[
        "zns",
        "zone-append",
        "sim",
        "-n",
        "2",
        "-s",
        "7",
        "-z",
        "4096",
        "-d",
        path,
    ]);
    assert!(e.contains("not a zone start"), "{e}");
    let e = fails(&["zns", "zone-mgmt-send", "sim", "-n", "2", "-z", "9"]);
    assert!(e.contains("zone action 0x09"), "{e}");
    let missing = dir.join("missing");
    let e = fails(&[
        "zns",
        "zone-append",
        "sim",
        "-n",
        "2",
        "-z",
        "4096",
        "-d",
        missing.to_str().unwrap(),
    ]);
    assert!(e.contains("cannot read the data file"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn log_pages() {
    let s = json(&["smart-log", "sim"]);
    assert_eq!(s["temperature"], 300);
    assert_eq!(s["avail_spare"], 100);
    assert_eq!(s["spare_thresh"], 10);
    assert_eq!(s["power_cycles"], 1);
    assert_eq!(s["critical_warning"], 0);
    assert_eq!(s["num_err_log_entries"], 0);

    let e = json(&["error-log", "sim", "-e", "4"]);
    assert_eq!(e["errors"], serde_json::json!([]));

    let f = json(&["fw-log", "sim"]);
    let slots = &f["sim"];
    assert_eq!(slots["Active Firmware Slot (afi)"], 1);
    let rev = slots["Firmware Rev Slot 1"].as_str().unwrap();
    assert!(rev.ends_with(" (1.0.....)"), "{rev}");
    // The slot's 8 bytes "1.0     " as a little-endian u64, as nvme-cli prints them.
    assert!(rev.starts_with(&u64::from_le_bytes(*b"1.0     ").to_string()));
    assert!(slots.get("Firmware Rev Slot 2").is_none());

    let x = json(&["effects-log", "sim"]);
    let page = &x[0];
    assert_eq!(page["command_set_identifier"], 0);
    assert_eq!(page["admin_cmd_set"]["ACS_6 (Identify)"], 1);
    assert_eq!(page["admin_cmd_set"]["ACS_10 (Get Features)"], 1);
    assert!(page["admin_cmd_set"].get("ACS_128 (Format NVM)").is_none());
    assert_eq!(page["io_cmd_set"]["IOCS_1 (Write)"], 3, "CSUPP | LBCC");
    assert_eq!(page["io_cmd_set"]["IOCS_2 (Read)"], 1);
}

#[test]
fn get_feature_every_select() {
    let v = json(&["get-feature", "sim", "-f", "6"]);
    assert_eq!(v["feature: 0x06"]["name"], "Volatile Write Cache");
    assert_eq!(v["feature: 0x06"]["Current"], "0x00000001");
    assert_eq!(
        v["Feature: 0x06"]["Volatile Write Cache Enable (WCE)"],
        "Enabled"
    );
    let v = json(&["get-feature", "sim", "-f", "0x01", "-s", "1"]);
    assert_eq!(v["feature: 0x01"]["Default"], "0x00000007");
    assert_eq!(v["Feature: 0x01"]["Arbitration Burst (AB)"], "No limit");
    let v = json(&["get-feature", "sim", "-f", "4", "-s", "2"]);
    assert_eq!(v["feature: 0x04"]["Saved"], "0x00000157");
    assert_eq!(v["Feature: 0x04"]["TMPTH kelvin"], "343 K");
    let v = json(&["get-feature", "sim", "-f", "7", "-s", "3"]);
    assert_eq!(
        v["Feature: 0x07: select"],
        serde_json::json!(["changeable"])
    );
    let v = json(&["get-feature", "sim", "-f", "6", "-s", "3"]);
    assert_eq!(
        v["Feature: 0x06: select"],
        serde_json::json!(["saveable", "changeable"])
    );
    // Number of Queues: what bring-up was granted (the emulator's default 4 pairs, 0's based).
    let v = json(&["get-feature", "sim", "-f", "7"]);
    let q = &v["Feature: 0x07"];
    assert_eq!(
        q["Number of IO Submission Queues Allocated (NSQA)"],
        q["Number of IO Completion Queues Allocated (NCQA)"]
    );
    let v = json(&["get-feature", "sim", "-f", "0xe"]);
    assert_eq!(
        v["Feature: 0x0e"]["Timestamp Origin"], 0,
        "not set by a host"
    );
}

#[test]
fn set_feature_reports_what_it_set() {
    let v = json(&["set-feature", "sim", "-f", "8", "-v", "0x0a05", "-s"]);
    assert_eq!(v["set-feature"], "0x08");
    assert_eq!(v["name"], "Interrupt Coalescing");
    assert_eq!(v["value"], "0xa05");
    assert_eq!(v["save"], 1);
    let v = json(&["set-feature", "sim", "-f", "0xe", "-v", "1700000000000"]);
    assert_eq!(v["name"], "Timestamp");
}

#[test]
fn text_output_is_key_value_lines() {
    let out = run(&["get-feature", "sim", "-f", "6"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("Volatile Write Cache Enable (WCE) : Enabled"),
        "{text}"
    );
    assert!(text.contains("Current : 0x00000001"), "{text}");
    let out = run(&["id-ctrl", "sim"]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text
        .lines()
        .any(|l| l.starts_with("sn ") && l.ends_with(": SIM0001")));
}

#[test]
fn bad_input_is_refused_with_a_message() {
    let e = fails(&["get-feature", "sim", "-f", "3"]);
    assert!(
        e.contains("feature 0x03 is not one nvme-admin types"),
        "{e}"
    );
    assert!(e.contains("0x06 Volatile Write Cache"), "{e}");
    let e = fails(&["set-feature", "sim", "-f", "0x80", "-v", "1"]);
    assert!(e.contains("feature 0x80"), "{e}");
    let e = fails(&["set-feature", "sim", "-f", "6", "-v", "0x100000000"]);
    assert!(e.contains("does not fit feature 0x06"), "{e}");
    // Not saveable: the controller's status, named.
    let e = fails(&["set-feature", "sim", "-f", "0xe", "-v", "5", "-s"]);
    assert!(e.contains("Feature Identifier Not Saveable"), "{e}");
    let e = fails(&["id-ns", "sim", "-n", "9"]);
    assert!(e.contains("Invalid Namespace or Format"), "{e}");
    let e = fails(&["ns-descs", "sim", "-n", "9"]);
    assert!(e.contains("Invalid Namespace or Format"), "{e}");
    fails(&["get-feature", "sim", "-f", "6", "-s", "4"]);
    fails(&["get-feature", "sim", "-f", "0x1ff"]);
    fails(&["get-feature", "sim"]);
    fails(&["id-ctrl", "not-a-device"]);
    fails(&["id-ctrl", "sim", "-o", "yaml"]);
}

#[test]
fn admin_passthru_smart_log_equals_get_log() {
    let ours = run(&[
        "admin-passthru",
        "sim",
        "-O",
        "0x02",
        "-n",
        "0xffffffff",
        "--cdw10",
        "0x007f0002",
        "-l",
        "512",
        "-r",
        "-b",
    ]);
    assert!(
        ours.status.success(),
        "{}",
        String::from_utf8_lossy(&ours.stderr)
    );
    assert_eq!(ours.stdout.len(), 512);
    assert!(String::from_utf8_lossy(&ours.stderr).contains("NVMe command result:00000000"));
    let typed = run(&["get-log", "sim", "-i", "2", "-l", "512", "-b"]);
    assert!(typed.status.success());
    assert_eq!(ours.stdout, typed.stdout);
}

#[test]
fn admin_passthru_identify_dump_and_refusals() {
    let out = run(&[
        "admin-passthru",
        "sim",
        "-O",
        "6",
        "--cdw10",
        "1",
        "-l",
        "4096",
        "-r",
    ]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("NVMe command result:00000000\n"), "{text}");
    // 4096 bytes, 16 a line, after the result and the column header.
    assert_eq!(text.lines().count(), 2 + 256);
    assert!(fails(&["admin-passthru", "sim", "-O", "1"]).contains("refused"));
    assert!(fails(&["admin-passthru", "sim", "-O", "6", "-l", "100"]).contains("at least 4096"));
    assert!(fails(&["admin-passthru", "sim", "-O", "0xc0", "-l", "4096"]).contains("admin_raw"));
    assert!(
        fails(&["admin-passthru", "sim", "-O", "6", "-l", "4096", "-w"]).contains("--read/--write")
    );
}

#[test]
fn io_passthru_reads_writes_and_refuses() {
    // Read one 512-byte block of namespace 1 (NLB 0 in CDW12): the emulator's fresh blocks.
    let out = run(&[
        "io-passthru",
        "sim",
        "-O",
        "2",
        "-n",
        "1",
        "-l",
        "512",
        "-r",
        "-b",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.stdout, vec![0; 512]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("NVMe command result:00000000"));
    // A write of a prefilled block, and its dry run (nothing sent, the command shown).
    let w = run(&[
        "io-passthru",
        "sim",
        "-O",
        "1",
        "-n",
        "1",
        "-l",
        "1024",
        "--cdw12",
        "1",
        "-p",
        "0xab",
        "-w",
    ]);
    assert!(w.status.success(), "{}", String::from_utf8_lossy(&w.stderr));
    assert_eq!(
        String::from_utf8_lossy(&w.stdout),
        "NVMe command result:00000000\n"
    );
    let dry = run(&[
        "io-passthru",
        "sim",
        "-O",
        "1",
        "-n",
        "1",
        "-l",
        "512",
        "-d",
    ]);
    let text = String::from_utf8_lossy(&dry.stdout);
    assert!(text.starts_with("opcode       : 01\n"), "{text}");
    assert!(!text.contains("NVMe command result"), "{text}");
    // Two blocks need 1024 bytes; one byte short is refused before anything is sent.
    let e = fails(&[
        "io-passthru",
        "sim",
        "-O",
        "2",
        "-n",
        "1",
        "--cdw12",
        "1",
        "-l",
        "1023",
    ]);
    assert!(e.contains("at least 1024"), "{e}");
    assert!(
        fails(&["io-passthru", "sim", "-O", "0x81", "-n", "1", "-l", "512"]).contains("submit_raw")
    );
    assert!(fails(&[
        "io-passthru",
        "sim",
        "-O",
        "2",
        "-n",
        "1",
        "-l",
        "512",
        "-m",
        "8"
    ])
    .contains("--metadata-len"));
    assert!(fails(&["io-passthru", "sim", "-O", "2", "-l", "512"]).contains("--namespace-id"));
    assert!(fails(&[
        "io-passthru",
        "sim",
        "-O",
        "2",
        "-n",
        "1",
        "-l",
        "512",
        "-w"
    ])
    .contains("--read/--write"));
}
