//! `blkexcl DEV...`: opens each block device read-only with `O_EXCL`, which Linux grants only
//! when nobody holds the device exclusively: a mounted filesystem, active swap, a ZFS vdev, a
//! btrfs member, a dm/md/LVM/bcache component, or a process that opened it with `O_EXCL`.
//! Prints `DEV: busy (...)` for each device that is held and exits 1 when any is; exits 0 when
//! every device is free, 2 on a usage error or when a device cannot be checked at all.
//!
//! `blkexcl --hold DEV` opens DEV exclusively and keeps it open until killed (test helper: it
//! plays the part of ZFS or a btrfs member in the guest test of `hugepage-setup.sh`).
//!
//! `hugepage-setup.sh` uses it (or perl / python3 when it is not installed) because busybox, the
//! test guest's shell, has no way to open a file with `O_EXCL`.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::process::ExitCode;

const USAGE: &str = "usage: blkexcl DEV...   (exit 0: all free, 1: some busy, 2: error)\n       blkexcl --hold DEV (hold DEV open exclusively until killed)";

fn open_exclusive(path: &str) -> std::io::Result<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_EXCL)
        .open(path)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        None | Some("-h" | "--help") => {
            eprintln!("{USAGE}");
            ExitCode::from(2)
        }
        Some("--hold") => {
            let [_, dev] = args.as_slice() else {
                eprintln!("{USAGE}");
                return ExitCode::from(2);
            };
            match open_exclusive(dev) {
                Ok(_file) => {
                    println!("holding {dev} exclusively");
                    loop {
                        std::thread::park();
                    }
                }
                Err(e) => {
                    eprintln!("blkexcl: cannot open {dev} exclusively: {e}");
                    ExitCode::from(2)
                }
            }
        }
        Some(_) => check(&args),
    }
}

fn check(devices: &[String]) -> ExitCode {
    let mut busy = false;
    for dev in devices {
        match std::fs::metadata(dev) {
            Ok(m) if m.file_type().is_block_device() => {}
            Ok(_) => {
                eprintln!("blkexcl: {dev} is not a block device");
                return ExitCode::from(2);
            }
            Err(e) => {
                eprintln!("blkexcl: {dev}: {e}");
                return ExitCode::from(2);
            }
        }
        match open_exclusive(dev) {
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                println!("{dev}: busy (opened exclusively by a filesystem, swap, ZFS, btrfs, dm/md or a process)");
                busy = true;
            }
            Err(e) => {
                eprintln!("blkexcl: cannot open {dev}: {e}");
                return ExitCode::from(2);
            }
        }
    }
    if busy {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
