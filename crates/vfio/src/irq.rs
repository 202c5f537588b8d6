//! Interrupts: MSI-X vectors delivered to eventfds, so a thread with nothing to poll can
//! block until its completion queue's vector fires.
//!
//! [`InterruptController`] is the seam: VFIO (`VFIO_DEVICE_SET_IRQS` on the MSI-X index)
//! implements it for a PCI function, the in-process emulator for tests.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;
use std::time::Duration;

use crate::error::VfioError;
use crate::ioctl;

/// An eventfd signalled when an interrupt vector fires.
#[derive(Debug)]
pub struct InterruptEvent {
    fd: OwnedFd,
}

impl InterruptEvent {
    /// A new, unsignalled, non-blocking eventfd.
    pub fn new() -> io::Result<Self> {
        Ok(Self {
            fd: ioctl::eventfd()?,
        })
    }

    /// Signals the event (what the kernel does when the vector fires; emulators call this).
    pub fn signal(&self) -> io::Result<()> {
        ioctl::eventfd_write(self.fd.as_fd())
    }

    /// Consumes pending signals without blocking; returns how many there were.
    pub fn clear(&self) -> io::Result<u64> {
        ioctl::eventfd_read(self.fd.as_fd())
    }

    /// Blocks until the event is signalled or `timeout` passes (`None`: no limit), consumes
    /// the signals and returns how many there were (0 on timeout).
    pub fn wait(&self, timeout: Option<Duration>) -> io::Result<u64> {
        let ms = match timeout {
            None => -1,
            Some(t) => libc::c_int::try_from(t.as_millis().max(1)).unwrap_or(libc::c_int::MAX),
        };
        if !ioctl::poll_readable(self.fd.as_fd(), ms)? {
            return Ok(0);
        }
        self.clear()
    }
}

impl AsFd for InterruptEvent {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// Routes a device's MSI-X vectors to eventfds.
pub trait InterruptController: Send + Sync {
    /// How many MSI-X vectors the function offers.
    fn msix_vectors(&self) -> u32;

    /// Routes vectors `0..count` to new eventfds (replacing any previous routing) and returns
    /// them, index = vector.
    fn enable_msix(&self, count: u32) -> Result<Vec<Arc<InterruptEvent>>, VfioError>;

    /// Stops routing MSI-X vectors.
    fn disable_msix(&self);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signal_wait_and_clear() {
        let ev = InterruptEvent::new().unwrap();
        assert_eq!(
            ev.wait(Some(Duration::from_millis(1))).unwrap(),
            0,
            "times out unsignalled"
        );
        ev.signal().unwrap();
        ev.signal().unwrap();
        assert_eq!(ev.wait(Some(Duration::from_secs(1))).unwrap(), 2);
        assert_eq!(ev.clear().unwrap(), 0);
        let ev = Arc::new(ev);
        let other = ev.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            other.signal().unwrap();
        });
        assert_eq!(
            ev.wait(None).unwrap(),
            1,
            "a blocked waiter wakes on a signal"
        );
        t.join().unwrap();
    }
}
