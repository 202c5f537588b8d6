//! Kernel uevents for the hot-plug monitor: the NETLINK_KOBJECT_UEVENT socket, a defensive
//! parser of its messages, and the [`UeventSource`] seam through which tests feed recorded or
//! hostile messages.
//!
//! A kernel uevent is one datagram (`lib/kobject_uevent.c`): a header `ACTION@DEVPATH`, then
//! NUL-separated `KEY=VALUE` records (`ACTION`, `DEVPATH`, `SUBSYSTEM`, `SEQNUM`, and for a
//! PCI function `DRIVER` (while one is bound), `PCI_CLASS`, `PCI_ID`, `PCI_SLOT_NAME`, ...,
//! added by `pci_uevent` in `drivers/pci/pci-driver.c`). The parser trusts nothing: a message
//! that is larger than [`MAX_UEVENT_LEN`], not in the kernel's format (udev's `libudev`
//! re-broadcasts), not UTF-8, with a record without `=`, a duplicate key, more than
//! [`MAX_UEVENT_RECORDS`] records, a header that disagrees with its records, or a PCI value that
//! does not parse is an error the caller skips; nothing here panics on input.
//!
//! The syscalls (socket, bind, recvfrom, poll) are in the crate's `ioctl` module.

use std::collections::BTreeMap;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::Duration;

use crate::enumerate::NVM_CLASS_SUBCLASS;
use crate::ioctl::{self, UeventRecv};
use crate::pci::PciAddress;

/// The largest message the parser accepts (bytes). The kernel builds a uevent in a buffer of
/// `UEVENT_BUFFER_SIZE` (2048) bytes; twice that leaves room and bounds what a hostile
/// sender can make us look at.
pub const MAX_UEVENT_LEN: usize = 4096;
/// The most `KEY=VALUE` records accepted in one message (the kernel's `UEVENT_NUM_ENVP` is 64).
pub const MAX_UEVENT_RECORDS: usize = 64;
/// The prefix of udev's re-broadcast messages (not the kernel's format; skipped).
const UDEV_MAGIC: &[u8] = b"libudev\0";
/// Class and subclass bits of a 24-bit PCI class code (the programming interface masked off).
const CLASS_SUBCLASS_MASK: u32 = 0xff_ff00;
/// The largest 24-bit class code.
const CLASS_CODE_MAX: u32 = 0xff_ffff;

/// What happened to a device (`enum kobject_action` of `include/linux/kobject.h`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UeventAction {
    /// The device appeared.
    Add,
    /// The device is gone.
    Remove,
    /// Something about it changed.
    Change,
    /// It was renamed or moved.
    Move,
    /// It was brought online.
    Online,
    /// It was taken offline.
    Offline,
    /// A driver was bound to it.
    Bind,
    /// Its driver was unbound.
    Unbind,
}

impl UeventAction {
    fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "add" => Self::Add,
            "remove" => Self::Remove,
            "change" => Self::Change,
            "move" => Self::Move,
            "online" => Self::Online,
            "offline" => Self::Offline,
            "bind" => Self::Bind,
            "unbind" => Self::Unbind,
            _ => return None,
        })
    }
}

/// Why a message was not a usable uevent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UeventError {
    /// Longer than [`MAX_UEVENT_LEN`].
    #[error("uevent of {len} bytes exceeds the limit of {max}")]
    Oversized {
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// udev's re-broadcast format, not the kernel's.
    #[error("udev-format message (not a kernel uevent)")]
    Udev,
    /// No `ACTION@DEVPATH` header.
    #[error("no ACTION@DEVPATH header")]
    BadHeader,
    /// Not UTF-8.
    #[error("uevent is not UTF-8")]
    NotUtf8,
    /// A record without `=` or with an empty or non-uppercase key.
    #[error("malformed record {index}")]
    BadRecord {
        /// Its position among the records (0 = the first after the header).
        index: usize,
    },
    /// More than [`MAX_UEVENT_RECORDS`] records.
    #[error("more than {max} records")]
    TooManyRecords {
        /// The limit.
        max: usize,
    },
    /// A key given twice.
    #[error("key {key} given twice")]
    Duplicate {
        /// The key.
        key: String,
    },
    /// A key every uevent carries is missing.
    #[error("no {key} record")]
    Missing {
        /// The key.
        key: &'static str,
    },
    /// A record disagrees with the header.
    #[error("{key} record disagrees with the header")]
    Mismatch {
        /// The key.
        key: &'static str,
    },
    /// An action the kernel does not send.
    #[error("unknown action {0:?}")]
    UnknownAction(String),
    /// A PCI value that does not parse.
    #[error("bad {key} value {value:?}")]
    BadValue {
        /// The key.
        key: &'static str,
        /// The value (as received).
        value: String,
    },
}

/// One parsed kernel uevent (the records the monitor uses; the rest are checked, not kept).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Uevent {
    /// What happened.
    pub action: UeventAction,
    /// The device's path below `/sys`.
    pub devpath: String,
    /// Its subsystem (`pci` for PCI functions).
    pub subsystem: String,
    /// The bound driver (`DRIVER`; absent on `unbind` and for unbound devices).
    pub driver: Option<String>,
    /// The 24-bit PCI class code (`PCI_CLASS`, hex without prefix).
    pub pci_class: Option<u32>,
    /// The PCI address (`PCI_SLOT_NAME`).
    pub pci_slot: Option<PciAddress>,
    /// The kernel's sequence number (`SEQNUM`).
    pub seqnum: Option<u64>,
}

/// A uevent about a PCI function that is (or, when the class is not given, may be) an NVM
/// Express controller.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NvmeUevent {
    /// What happened.
    pub action: UeventAction,
    /// The function.
    pub address: PciAddress,
    /// The driver bound to it, if the message names one.
    pub driver: Option<String>,
}

impl Uevent {
    /// Parses one message (the datagram as received).
    pub fn parse(msg: &[u8]) -> Result<Self, UeventError> {
        if msg.len() > MAX_UEVENT_LEN {
            return Err(UeventError::Oversized {
                len: msg.len(),
                max: MAX_UEVENT_LEN,
            });
        }
        if msg.starts_with(UDEV_MAGIC) {
            return Err(UeventError::Udev);
        }
        let text = std::str::from_utf8(msg).map_err(|_| UeventError::NotUtf8)?;
        let mut parts = text.split('\0');
        let header = parts.next().unwrap_or_default();
        let (action, devpath) = header.split_once('@').ok_or(UeventError::BadHeader)?;
        if action.is_empty() || !devpath.starts_with('/') {
            return Err(UeventError::BadHeader);
        }
        let mut records: BTreeMap<&str, &str> = BTreeMap::new();
        for (index, record) in parts.filter(|r| !r.is_empty()).enumerate() {
            if index >= MAX_UEVENT_RECORDS {
                return Err(UeventError::TooManyRecords {
                    max: MAX_UEVENT_RECORDS,
                });
            }
            let (key, value) = record
                .split_once('=')
                .filter(|(k, _)| is_key(k))
                .ok_or(UeventError::BadRecord { index })?;
            if records.insert(key, value).is_some() {
                return Err(UeventError::Duplicate {
                    key: key.to_owned(),
                });
            }
        }
        let get = |key: &'static str| records.get(key).copied();
        let need = |key: &'static str| get(key).ok_or(UeventError::Missing { key });
        if need("ACTION")? != action {
            return Err(UeventError::Mismatch { key: "ACTION" });
        }
        if need("DEVPATH")? != devpath {
            return Err(UeventError::Mismatch { key: "DEVPATH" });
        }
        let subsystem = need("SUBSYSTEM")?;
        let action =
            UeventAction::parse(action).ok_or_else(|| UeventError::UnknownAction(action.into()))?;
        let bad = |key: &'static str, value: &str| UeventError::BadValue {
            key,
            value: value.to_owned(),
        };
        let pci_class = match get("PCI_CLASS") {
            None => None,
            Some(v) => Some(
                u32::from_str_radix(v, 16)
                    .ok()
                    .filter(|c| *c <= CLASS_CODE_MAX)
                    .ok_or_else(|| bad("PCI_CLASS", v))?,
            ),
        };
        let pci_slot = match get("PCI_SLOT_NAME") {
            None => None,
            Some(v) => Some(v.parse().map_err(|_| bad("PCI_SLOT_NAME", v))?),
        };
        let seqnum = match get("SEQNUM") {
            None => None,
            Some(v) => Some(v.parse().map_err(|_| bad("SEQNUM", v))?),
        };
        Ok(Self {
            action,
            devpath: devpath.to_owned(),
            subsystem: subsystem.to_owned(),
            driver: get("DRIVER").map(str::to_owned),
            pci_class,
            pci_slot,
            seqnum,
        })
    }

    /// The event as one about an NVMe function: subsystem `pci`, a slot name, and a class
    /// code of NVM Express (0108xxh) or none given. `None` for everything else.
    pub fn nvme(&self) -> Option<NvmeUevent> {
        if self.subsystem != "pci" {
            return None;
        }
        if self
            .pci_class
            .is_some_and(|c| c & CLASS_SUBCLASS_MASK != NVM_CLASS_SUBCLASS)
        {
            return None;
        }
        Some(NvmeUevent {
            action: self.action,
            address: self.pci_slot?,
            driver: self.driver.clone(),
        })
    }
}

/// Keys are upper-case ASCII letters, digits and `_` (what the kernel's `add_uevent_var`
/// callers use).
fn is_key(k: &str) -> bool {
    !k.is_empty()
        && k.bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
}

/// What one [`UeventSource::recv`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Received {
    /// A whole message of this many bytes is at the start of the buffer.
    Message(usize),
    /// A message larger than the buffer (this many bytes): dropped.
    Truncated(usize),
    /// A message not sent by the kernel: dropped.
    NotKernel,
    /// The socket's receive queue overflowed: messages were lost (the caller rescans).
    Overrun,
    /// Nothing pending.
    Empty,
}

/// Where uevents come from: the kernel's netlink socket ([`UeventSocket`]), or a test's
/// queue of messages.
pub trait UeventSource: Send {
    /// Receives one pending message into `buf` without blocking.
    fn recv(&mut self, buf: &mut [u8]) -> io::Result<Received>;
    /// The descriptor that becomes readable when a message is pending, for the caller's
    /// event loop (`None` for a source without one).
    fn fd(&self) -> Option<BorrowedFd<'_>>;
    /// Waits up to `timeout` for a message; `Ok(false)` on timeout.
    fn wait(&self, timeout: Duration) -> io::Result<bool> {
        match self.fd() {
            Some(fd) => wait_readable(fd, timeout),
            None => {
                std::thread::sleep(timeout);
                Ok(false)
            }
        }
    }
}

/// Waits up to `timeout` for `fd` to become readable.
pub fn wait_readable(fd: BorrowedFd<'_>, timeout: Duration) -> io::Result<bool> {
    let ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
    ioctl::wait_readable(fd, ms)
}

/// The kernel's uevents: a non-blocking NETLINK_KOBJECT_UEVENT socket on the kernel's group.
/// Messages from any other sender (port id not 0) are dropped.
#[derive(Debug)]
pub struct UeventSocket {
    fd: OwnedFd,
}

impl UeventSocket {
    /// Opens and binds the socket (any user may listen to the kernel's uevents).
    pub fn open() -> io::Result<Self> {
        Ok(Self {
            fd: ioctl::uevent_socket()?,
        })
    }
}

impl UeventSource for UeventSocket {
    fn recv(&mut self, buf: &mut [u8]) -> io::Result<Received> {
        match ioctl::uevent_recv(self.fd.as_fd(), buf) {
            Ok(UeventRecv::Message { len, sender: 0 }) => Ok(Received::Message(len)),
            Ok(UeventRecv::Message { .. }) => Ok(Received::NotKernel),
            Ok(UeventRecv::Truncated { len }) => Ok(Received::Truncated(len)),
            Ok(UeventRecv::Empty) => Ok(Received::Empty),
            Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => Ok(Received::Overrun),
            Err(e) => Err(e),
        }
    }

    fn fd(&self) -> Option<BorrowedFd<'_>> {
        Some(self.fd.as_fd())
    }
}

#[cfg(test)]
mod tests;
