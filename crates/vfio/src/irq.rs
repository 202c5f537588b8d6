//! Interrupts: MSI-X vectors delivered to eventfds, so a thread with nothing to poll can
//! block until its completion queue's vector fires.
//!
//! [`InterruptController`] is the seam: VFIO (`VFIO_DEVICE_SET_IRQS` on the MSI-X index)
//! implements it for a PCI function, the in-process emulator for tests.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
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

/// A set of descriptors to block on together (poll(2)): sockets, interrupt eventfds, a wake-up
/// eventfd. A thread that serves several connections and queue pairs waits on all of them at
/// once instead of sleeping for a fixed time. The set holds descriptor numbers only (what
/// poll(2) takes): a descriptor closed before [`FdWait::wait`] is reported as not ready.
#[derive(Default)]
pub struct FdWait {
    fds: Vec<libc::pollfd>,
}

impl FdWait {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Empties the set (its capacity stays).
    pub fn clear(&mut self) {
        self.fds.clear();
    }

    /// Adds `fd`, waited for readability (`readable`) and writability (`writable`; errors and
    /// hang-ups always count as ready); returns its index for [`FdWait::ready`].
    pub fn add(&mut self, fd: BorrowedFd<'_>, readable: bool, writable: bool) -> usize {
        let events =
            if readable { libc::POLLIN } else { 0 } | if writable { libc::POLLOUT } else { 0 };
        self.fds.push(libc::pollfd {
            fd: fd.as_raw_fd(),
            events,
            revents: 0,
        });
        self.fds.len() - 1
    }

    /// Descriptors in the set.
    pub fn len(&self) -> usize {
        self.fds.len()
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.fds.is_empty()
    }

    /// Blocks until a descriptor is ready (readable, writable if asked, or in error / hung
    /// up) or `timeout` passes (`None`: no limit; rounded up to whole milliseconds); returns
    /// how many are ready (0: timed out or interrupted by a signal).
    pub fn wait(&mut self, timeout: Option<Duration>) -> io::Result<usize> {
        let ms = match timeout {
            None => -1,
            Some(t) if t.is_zero() => 0,
            Some(t) => {
                let ms = t.as_nanos().div_ceil(1_000_000);
                libc::c_int::try_from(ms).unwrap_or(libc::c_int::MAX)
            }
        };
        for p in &mut self.fds {
            p.revents = 0;
        }
        ioctl::poll_many(&mut self.fds, ms)
    }

    /// Whether descriptor `index` was ready after the last [`FdWait::wait`].
    pub fn ready(&self, index: usize) -> bool {
        self.fds.get(index).is_some_and(|p| p.revents != 0)
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

    #[test]
    fn fd_wait_reports_which_descriptor_is_ready() {
        let a = InterruptEvent::new().unwrap();
        let b = Arc::new(InterruptEvent::new().unwrap());
        let mut w = FdWait::new();
        let ia = w.add(a.as_fd(), true, false);
        let ib = w.add(b.as_fd(), true, false);
        assert_eq!(w.len(), 2);
        assert_eq!(w.wait(Some(Duration::from_millis(1))).unwrap(), 0);
        assert!(!w.ready(ia) && !w.ready(ib), "nothing ready on a timeout");
        let other = b.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            other.signal().unwrap();
        });
        assert_eq!(
            w.wait(None).unwrap(),
            1,
            "a blocked set wakes on one of its fds"
        );
        assert!(!w.ready(ia) && w.ready(ib));
        t.join().unwrap();
        assert_eq!(b.clear().unwrap(), 1);
        a.signal().unwrap();
        assert_eq!(w.wait(Some(Duration::ZERO)).unwrap(), 1);
        assert!(
            w.ready(ia) && !w.ready(ib),
            "readiness is recomputed each wait"
        );
        assert!(!w.ready(7), "an index out of the set is not ready");
        w.clear();
        assert!(w.is_empty());
    }
}
