//! `nvme-identify` without a device lists the NVMe functions of a (fake) sysfs tree, like
//! `nvme list`: address, driver, state, vendor:device; a function on vfio-pci it cannot open
//! (no VFIO here) is listed with why.

use std::os::unix::fs::symlink;
use std::process::Command;

fn identify(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_nvme-identify"))
        .args(args)
        .output()
        .expect("run nvme-identify");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn lists_the_functions_of_a_fake_tree() {
    let root = std::env::temp_dir().join(format!("nvme-identify-list-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    for (addr, class, driver) in [
        ("0000:00:04.0", "0x010802", "vfio-pci"),
        ("0000:00:05.0", "0x010802", "nvme"),
        ("0000:00:06.0", "0x010802", "nvme"),
        ("0000:00:02.0", "0x030000", "bochs-drm"),
    ] {
        let dir = root.join("bus/pci/devices").join(addr);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("class"), format!("{class}\n")).unwrap();
        std::fs::write(dir.join("vendor"), "0x1b36\n").unwrap();
        std::fs::write(dir.join("device"), "0x0010\n").unwrap();
        symlink(
            format!("../../../bus/pci/drivers/{driver}"),
            dir.join("driver"),
        )
        .unwrap();
    }
    let sysfs = root.to_str().unwrap();
    let (rc, out, err) = identify(&["--sysfs", sysfs, "--allow", "0000:00:06.0"]);
    assert_eq!(rc, 0, "{out}{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].starts_with("Address"), "{out}");
    assert!(
        lines[1].starts_with("0000:00:04.0  vfio-pci  attachable 1b36:0010"),
        "{out}"
    );
    // No VFIO here: the function on vfio-pci is listed with why it was not opened.
    assert!(lines[2].starts_with("  not opened: "), "{out}");
    assert!(
        lines[3].starts_with("0000:00:05.0  nvme      other      1b36:0010"),
        "{out}"
    );
    assert!(
        lines[4].starts_with("0000:00:06.0  nvme      bindable"),
        "{out}"
    );
    assert_eq!(lines.len(), 5, "{out}");

    let (rc, out, err) = identify(&["--json", "--sysfs", sysfs]);
    assert_eq!(rc, 0, "{out}{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let devices = v["devices"].as_array().unwrap();
    assert_eq!(devices.len(), 3);
    assert_eq!(devices[0]["address"], "0000:00:04.0");
    assert_eq!(devices[1]["driver"], "nvme");
    assert_eq!(devices[2]["state"], "other");

    let empty = root.join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let (rc, out, _) = identify(&["--sysfs", empty.to_str().unwrap()]);
    assert_eq!(rc, 0);
    assert!(out.contains("No NVMe functions found"), "{out}");
    std::fs::remove_dir_all(&root).unwrap();
}
