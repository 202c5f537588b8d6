//! The system-call layer: every VFIO ioctl, config-space pread/pwrite and BAR mmap of this
//! crate, and the hot-plug monitor's netlink uevent socket (socket, bind, recvfrom, poll),
//! each a small function over borrowed file descriptors.
//!
//! This module and `iommufd.rs` (the iommufd ioctls, built the same way) hold every `unsafe`
//! VFIO system call of the crate. Each wrapper passes the kernel a
//! pointer to a correctly sized, initialised `#[repr(C)]` structure from `vfio-bindings` (with
//! `argsz` set to the size of the buffer the kernel may write) and turns `-1` into
//! [`io::Error::last_os_error`]. Request numbers follow `linux/vfio.h`:
//! `_IO(VFIO_TYPE, VFIO_BASE + n)`; `_IO` has no direction and no size bits.

use std::ffi::CStr;
use std::io;
use std::mem::size_of;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;

use vfio_bindings::bindings::vfio::{
    vfio_device_info, vfio_group_status, vfio_iommu_type1_dma_map, vfio_iommu_type1_dma_unmap,
    vfio_iommu_type1_info, vfio_irq_info, vfio_region_info, VFIO_BASE, VFIO_DMA_MAP_FLAG_READ,
    VFIO_DMA_MAP_FLAG_WRITE, VFIO_IRQ_SET_ACTION_TRIGGER, VFIO_IRQ_SET_DATA_EVENTFD,
    VFIO_IRQ_SET_DATA_NONE, VFIO_TYPE,
};

/// `_IO(type, nr)` of `asm-generic/ioctl.h`: direction and size fields are zero, the type sits
/// in bits 8..16 and the number in bits 0..8.
const fn io(nr: u32) -> libc::Ioctl {
    const TYPE_SHIFT: u32 = 8;
    (((VFIO_TYPE as u32) << TYPE_SHIFT) | (VFIO_BASE + nr)) as libc::Ioctl
}

const VFIO_GET_API_VERSION: libc::Ioctl = io(0);
const VFIO_CHECK_EXTENSION: libc::Ioctl = io(1);
const VFIO_SET_IOMMU: libc::Ioctl = io(2);
const VFIO_GROUP_GET_STATUS: libc::Ioctl = io(3);
const VFIO_GROUP_SET_CONTAINER: libc::Ioctl = io(4);
const VFIO_GROUP_GET_DEVICE_FD: libc::Ioctl = io(6);
const VFIO_DEVICE_GET_INFO: libc::Ioctl = io(7);
const VFIO_DEVICE_GET_REGION_INFO: libc::Ioctl = io(8);
const VFIO_DEVICE_GET_IRQ_INFO: libc::Ioctl = io(9);
const VFIO_DEVICE_SET_IRQS: libc::Ioctl = io(10);
const VFIO_DEVICE_RESET: libc::Ioctl = io(11);
/// On a container fd (the same number is a device ioctl on device fds).
const VFIO_IOMMU_GET_INFO: libc::Ioctl = io(12);
const VFIO_IOMMU_MAP_DMA: libc::Ioctl = io(13);
const VFIO_IOMMU_UNMAP_DMA: libc::Ioctl = io(14);

// The request numbers as printed by the kernel headers (';' = 0x3b, VFIO_BASE = 100 = 0x64).
const _: () = assert!(VFIO_GET_API_VERSION == 0x3b64 as libc::Ioctl);
const _: () = assert!(VFIO_IOMMU_UNMAP_DMA == 0x3b72 as libc::Ioctl);

/// `size_of::<T>()` as the `u32` the `argsz` fields hold.
fn argsz<T>() -> u32 {
    u32::try_from(size_of::<T>()).expect("VFIO structures are small")
}

fn check(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// VFIO_GET_API_VERSION on a container.
pub(crate) fn api_version(container: BorrowedFd<'_>) -> io::Result<i32> {
    // SAFETY: this request takes no argument and touches no user memory.
    check(unsafe { libc::ioctl(container.as_raw_fd(), VFIO_GET_API_VERSION) })
}

/// VFIO_CHECK_EXTENSION on a container: whether `extension` (e.g. an IOMMU type) is supported.
pub(crate) fn check_extension(container: BorrowedFd<'_>, extension: u32) -> io::Result<bool> {
    // SAFETY: the argument is passed by value (an integer), no user memory is touched.
    let ret = check(unsafe {
        libc::ioctl(
            container.as_raw_fd(),
            VFIO_CHECK_EXTENSION,
            extension as libc::c_ulong,
        )
    })?;
    Ok(ret > 0)
}

/// VFIO_SET_IOMMU on a container (after a group has been attached).
pub(crate) fn set_iommu(container: BorrowedFd<'_>, iommu_type: u32) -> io::Result<()> {
    // SAFETY: the argument is passed by value (an integer), no user memory is touched.
    check(unsafe {
        libc::ioctl(
            container.as_raw_fd(),
            VFIO_SET_IOMMU,
            iommu_type as libc::c_ulong,
        )
    })?;
    Ok(())
}

/// VFIO_GROUP_GET_STATUS: the group's `VFIO_GROUP_FLAGS_*`.
pub(crate) fn group_status(group: BorrowedFd<'_>) -> io::Result<u32> {
    let mut status = vfio_group_status {
        argsz: argsz::<vfio_group_status>(),
        flags: 0,
    };
    // SAFETY: `status` is a live, initialised vfio_group_status whose argsz is its size; the
    // kernel writes at most argsz bytes into it.
    check(unsafe { libc::ioctl(group.as_raw_fd(), VFIO_GROUP_GET_STATUS, &mut status) })?;
    Ok(status.flags)
}

/// VFIO_GROUP_SET_CONTAINER: attaches the group to the container.
pub(crate) fn group_set_container(
    group: BorrowedFd<'_>,
    container: BorrowedFd<'_>,
) -> io::Result<()> {
    let fd: libc::c_int = container.as_raw_fd();
    // SAFETY: the kernel reads one int (the container fd) from the pointer, which points at a
    // live local.
    check(unsafe { libc::ioctl(group.as_raw_fd(), VFIO_GROUP_SET_CONTAINER, &fd) })?;
    Ok(())
}

/// VFIO_GROUP_GET_DEVICE_FD: opens the device named `name` (its sysfs name) in the group.
pub(crate) fn group_device_fd(group: BorrowedFd<'_>, name: &CStr) -> io::Result<OwnedFd> {
    // SAFETY: the kernel reads a NUL-terminated string from the pointer; `name` is one and
    // outlives the call.
    let fd =
        check(unsafe { libc::ioctl(group.as_raw_fd(), VFIO_GROUP_GET_DEVICE_FD, name.as_ptr()) })?;
    // SAFETY: on success the ioctl returns a new file descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// VFIO_DEVICE_GET_INFO.
pub(crate) fn device_info(device: BorrowedFd<'_>) -> io::Result<vfio_device_info> {
    let mut info = vfio_device_info {
        argsz: argsz::<vfio_device_info>(),
        ..Default::default()
    };
    // SAFETY: `info` is a live, initialised vfio_device_info and argsz is its size; the kernel
    // writes at most argsz bytes.
    check(unsafe { libc::ioctl(device.as_raw_fd(), VFIO_DEVICE_GET_INFO, &mut info) })?;
    Ok(info)
}

/// VFIO_DEVICE_GET_REGION_INFO for region `index` (without the capability chain).
pub(crate) fn region_info(device: BorrowedFd<'_>, index: u32) -> io::Result<vfio_region_info> {
    let mut info = vfio_region_info {
        argsz: argsz::<vfio_region_info>(),
        index,
        ..Default::default()
    };
    // SAFETY: `info` is a live, initialised vfio_region_info and argsz is its size; the kernel
    // writes at most argsz bytes (it reports a larger argsz when capabilities do not fit).
    check(unsafe { libc::ioctl(device.as_raw_fd(), VFIO_DEVICE_GET_REGION_INFO, &mut info) })?;
    Ok(info)
}

/// VFIO_DEVICE_GET_IRQ_INFO for interrupt index `index` (e.g. MSI-X).
pub(crate) fn irq_info(device: BorrowedFd<'_>, index: u32) -> io::Result<vfio_irq_info> {
    let mut info = vfio_irq_info {
        argsz: argsz::<vfio_irq_info>(),
        index,
        ..Default::default()
    };
    // SAFETY: `info` is a live, initialised vfio_irq_info and argsz is its size; the kernel
    // writes at most argsz bytes.
    check(unsafe { libc::ioctl(device.as_raw_fd(), VFIO_DEVICE_GET_IRQ_INFO, &mut info) })?;
    Ok(info)
}

/// Words of the fixed part of `struct vfio_irq_set` (argsz, flags, index, start, count).
const IRQ_SET_HEADER_WORDS: usize = 5;

/// VFIO_DEVICE_SET_IRQS: routes vectors `0..fds.len()` of interrupt index `index` to the
/// given eventfds (ACTION_TRIGGER, DATA_EVENTFD); an empty `fds` disables the index
/// (DATA_NONE with count 0).
pub(crate) fn set_irq_eventfds(
    device: BorrowedFd<'_>,
    index: u32,
    fds: &[BorrowedFd<'_>],
) -> io::Result<()> {
    // The structure is a 20-byte header followed by one i32 eventfd per vector: build it as
    // u32 words so it is 4-byte aligned like the kernel's struct.
    let mut words: Vec<u32> = Vec::with_capacity(IRQ_SET_HEADER_WORDS + fds.len());
    let bytes = u32::try_from((IRQ_SET_HEADER_WORDS + fds.len()) * size_of::<u32>())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let data = if fds.is_empty() {
        VFIO_IRQ_SET_DATA_NONE
    } else {
        VFIO_IRQ_SET_DATA_EVENTFD
    };
    let count =
        u32::try_from(fds.len()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    words.extend_from_slice(&[bytes, data | VFIO_IRQ_SET_ACTION_TRIGGER, index, 0, count]);
    words.extend(fds.iter().map(|fd| fd.as_raw_fd() as u32));
    // SAFETY: `words` is a live buffer of exactly `argsz` bytes laid out as struct
    // vfio_irq_set followed by `count` eventfd numbers; the kernel only reads it. The fds are
    // borrowed, so they are open for the duration of the call (the kernel takes its own
    // references to them).
    check(unsafe { libc::ioctl(device.as_raw_fd(), VFIO_DEVICE_SET_IRQS, words.as_ptr()) })?;
    Ok(())
}

/// eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK).
pub(crate) fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: no pointers are passed; on success the call returns a new fd nothing else owns.
    let fd = check(unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) })?;
    // SAFETY: `fd` is a fresh descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Reads (and so resets) an eventfd counter; `Ok(0)` when it was zero (EAGAIN).
pub(crate) fn eventfd_read(fd: BorrowedFd<'_>) -> io::Result<u64> {
    let mut value = 0u64;
    // SAFETY: reads 8 bytes into a live u64, the size an eventfd read requires.
    let ret = unsafe {
        libc::read(
            fd.as_raw_fd(),
            (&mut value as *mut u64).cast(),
            size_of::<u64>(),
        )
    };
    if ret < 0 {
        let e = io::Error::last_os_error();
        return if e.kind() == io::ErrorKind::WouldBlock {
            Ok(0)
        } else {
            Err(e)
        };
    }
    Ok(value)
}

/// Adds 1 to an eventfd counter.
pub(crate) fn eventfd_write(fd: BorrowedFd<'_>) -> io::Result<()> {
    let one = 1u64;
    // SAFETY: writes 8 bytes from a live u64, the size an eventfd write requires.
    let ret = unsafe {
        libc::write(
            fd.as_raw_fd(),
            (&one as *const u64).cast(),
            size_of::<u64>(),
        )
    };
    if ret < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// poll(2) for readability; returns whether `fd` became readable within `timeout_ms`
/// (-1: wait forever). EINTR counts as "not yet".
pub(crate) fn poll_readable(fd: BorrowedFd<'_>, timeout_ms: libc::c_int) -> io::Result<bool> {
    let mut pfd = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one live pollfd structure, count 1.
    let ret = unsafe { libc::poll(&mut pfd, 1, timeout_ms) };
    if ret < 0 {
        let e = io::Error::last_os_error();
        return if e.kind() == io::ErrorKind::Interrupted {
            Ok(false)
        } else {
            Err(e)
        };
    }
    Ok(ret > 0 && pfd.revents & libc::POLLIN != 0)
}

/// poll(2) on several descriptors: blocks until one is ready or `timeout_ms` passes (-1: no
/// limit); returns how many are ready (their `revents` set), 0 on timeout or EINTR.
pub(crate) fn poll_many(fds: &mut [libc::pollfd], timeout_ms: libc::c_int) -> io::Result<usize> {
    let count = libc::nfds_t::try_from(fds.len())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: `fds` is a live, initialised slice of `count` pollfd structures; the kernel
    // writes only their `revents` fields. A closed descriptor is reported as POLLNVAL, no
    // memory is touched through it.
    let ret = unsafe { libc::poll(fds.as_mut_ptr(), count, timeout_ms) };
    if ret < 0 {
        let e = io::Error::last_os_error();
        return if e.kind() == io::ErrorKind::Interrupted {
            Ok(0)
        } else {
            Err(e)
        };
    }
    Ok(ret as usize)
}

/// VFIO_DEVICE_RESET (function-level or other reset the kernel chooses).
pub(crate) fn device_reset(device: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: this request takes no argument and touches no user memory.
    check(unsafe { libc::ioctl(device.as_raw_fd(), VFIO_DEVICE_RESET) })?;
    Ok(())
}

/// VFIO_IOMMU_GET_INFO with its capability chain: returns the fixed part and the whole
/// buffer the kernel filled (the fixed part followed by capabilities at `cap_offset`).
///
/// The size of the chain is learnt by a first call with only the fixed part; the kernel then
/// reports the `argsz` it needs, and a second call passes a buffer that large.
pub(crate) fn iommu_info(
    container: BorrowedFd<'_>,
) -> io::Result<(vfio_iommu_type1_info, Vec<u8>)> {
    let fixed = size_of::<vfio_iommu_type1_info>();
    let mut info = vfio_iommu_type1_info {
        argsz: argsz::<vfio_iommu_type1_info>(),
        ..Default::default()
    };
    // SAFETY: `info` is a live, initialised vfio_iommu_type1_info and argsz is its size; the
    // kernel writes at most argsz bytes.
    check(unsafe { libc::ioctl(container.as_raw_fd(), VFIO_IOMMU_GET_INFO, &mut info) })?;
    let needed = info.argsz as usize;
    if needed <= fixed {
        return Ok((info, Vec::new()));
    }
    // A u64 buffer keeps the 8-byte alignment of the structure and its capabilities.
    let mut buf = vec![0u64; needed.div_ceil(size_of::<u64>())];
    let head = vfio_iommu_type1_info {
        argsz: info.argsz,
        ..Default::default()
    };
    // SAFETY: `buf` holds at least `fixed` bytes and is 8-byte aligned, so it can hold the
    // fixed structure.
    unsafe { buf.as_mut_ptr().cast::<vfio_iommu_type1_info>().write(head) };
    // SAFETY: `buf` is live, initialised and `needed` bytes long (rounded up), which is the
    // argsz written in its header; the kernel writes at most that many bytes.
    check(unsafe { libc::ioctl(container.as_raw_fd(), VFIO_IOMMU_GET_INFO, buf.as_mut_ptr()) })?;
    // SAFETY: `buf` starts with an initialised, aligned vfio_iommu_type1_info.
    let info = unsafe { buf.as_ptr().cast::<vfio_iommu_type1_info>().read() };
    let bytes = buf
        .iter()
        .flat_map(|w| w.to_ne_bytes())
        .take(needed)
        .collect();
    Ok((info, bytes))
}

/// VFIO_IOMMU_MAP_DMA with read and write permission.
///
/// # Safety
/// `[vaddr, vaddr + size)` must be memory of this process that stays allocated, and is not
/// remapped, until it is unmapped with [`unmap_dma`]: the device may access it at any time.
pub(crate) unsafe fn map_dma(
    container: BorrowedFd<'_>,
    vaddr: u64,
    iova: u64,
    size: u64,
) -> io::Result<()> {
    let map = vfio_iommu_type1_dma_map {
        argsz: argsz::<vfio_iommu_type1_dma_map>(),
        flags: VFIO_DMA_MAP_FLAG_READ | VFIO_DMA_MAP_FLAG_WRITE,
        vaddr,
        iova,
        size,
    };
    // SAFETY: the kernel only reads the structure, which is live and fully initialised; the
    // caller guarantees the lifetime of the memory it describes.
    check(unsafe { libc::ioctl(container.as_raw_fd(), VFIO_IOMMU_MAP_DMA, &map) })?;
    Ok(())
}

/// VFIO_IOMMU_UNMAP_DMA: returns the number of bytes the kernel unmapped.
pub(crate) fn unmap_dma(container: BorrowedFd<'_>, iova: u64, size: u64) -> io::Result<u64> {
    let mut unmap = vfio_iommu_type1_dma_unmap {
        argsz: argsz::<vfio_iommu_type1_dma_unmap>(),
        flags: 0,
        iova,
        size,
        ..Default::default()
    };
    // SAFETY: `unmap` is live and initialised and argsz is its fixed size (no dirty bitmap
    // requested); the kernel writes back `size` only.
    check(unsafe { libc::ioctl(container.as_raw_fd(), VFIO_IOMMU_UNMAP_DMA, &mut unmap) })?;
    Ok(unmap.size)
}

/// pread of exactly `buf.len()` bytes at `offset` of `fd`.
pub(crate) fn pread_exact(fd: BorrowedFd<'_>, buf: &mut [u8], offset: u64) -> io::Result<()> {
    let off =
        libc::off_t::try_from(offset).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: `buf` is valid for writes of `buf.len()` bytes for the duration of the call.
    let n = unsafe { libc::pread(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), off) };
    match usize::try_from(n) {
        Err(_) => Err(io::Error::last_os_error()),
        Ok(n) if n == buf.len() => Ok(()),
        Ok(_) => Err(io::Error::from(io::ErrorKind::UnexpectedEof)),
    }
}

/// pwrite of exactly `buf.len()` bytes at `offset` of `fd`.
pub(crate) fn pwrite_exact(fd: BorrowedFd<'_>, buf: &[u8], offset: u64) -> io::Result<()> {
    let off =
        libc::off_t::try_from(offset).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: `buf` is valid for reads of `buf.len()` bytes for the duration of the call.
    let n = unsafe { libc::pwrite(fd.as_raw_fd(), buf.as_ptr().cast(), buf.len(), off) };
    match usize::try_from(n) {
        Err(_) => Err(io::Error::last_os_error()),
        Ok(n) if n == buf.len() => Ok(()),
        Ok(_) => Err(io::Error::from(io::ErrorKind::WriteZero)),
    }
}

/// A shared, read-write mapping of `len` bytes at `offset` of `fd` (a VFIO device region).
/// The caller owns the mapping and releases it with [`munmap`].
pub(crate) fn mmap_shared(fd: BorrowedFd<'_>, len: usize, offset: u64) -> io::Result<NonNull<u8>> {
    let off =
        libc::off_t::try_from(offset).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: no address hint and no MAP_FIXED, so the kernel picks a fresh range and no
    // existing memory of this process is replaced.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd.as_raw_fd(),
            off,
        )
    };
    if ptr == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    NonNull::new(ptr.cast()).ok_or_else(|| io::Error::from(io::ErrorKind::AddrNotAvailable))
}

/// Releases a mapping made by [`mmap_shared`].
///
/// # Safety
/// `ptr` and `len` must describe exactly one live mapping returned by [`mmap_shared`], and no
/// reference or pointer into it may be used afterwards.
pub(crate) unsafe fn munmap(ptr: NonNull<u8>, len: usize) -> io::Result<()> {
    // SAFETY: the caller guarantees the range is our own mapping and no longer used.
    if unsafe { libc::munmap(ptr.as_ptr().cast(), len) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

// ---------------------------------------------------------------- kernel uevents (netlink)
// The hot-plug monitor's socket (`crate::uevent`): NETLINK_KOBJECT_UEVENT, the kernel's
// multicast group of kobject uevents (`lib/kobject_uevent.c`; group 1 carries the kernel's own
// messages, udev re-broadcasts on group 2, which we do not join).

/// The kernel's own uevent multicast group.
const UEVENT_KERNEL_GROUP: u32 = 1;

/// A non-blocking, close-on-exec NETLINK_KOBJECT_UEVENT datagram socket bound to the kernel's
/// uevent group (its port id chosen by the kernel).
pub(crate) fn uevent_socket() -> io::Result<OwnedFd> {
    // SAFETY: socket(2) takes no pointers; a non-negative return is a new descriptor we own.
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_DGRAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            libc::NETLINK_KOBJECT_UEVENT,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by socket(2) and is owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: all-zero is a valid `sockaddr_nl` (plain integers).
    let mut addr: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
    addr.nl_family = libc::AF_NETLINK as libc::sa_family_t;
    addr.nl_groups = UEVENT_KERNEL_GROUP;
    // SAFETY: `addr` is an initialised `sockaddr_nl` and the length passed is its size; the
    // kernel only reads it.
    let ret = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&addr as *const libc::sockaddr_nl).cast(),
            size_of::<libc::sockaddr_nl>() as libc::socklen_t,
        )
    };
    if ret != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fd)
}

/// One datagram of a uevent socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum UeventRecv {
    /// A message of this many bytes (the whole message) sent by the port id `sender` (0: the
    /// kernel).
    Message { len: usize, sender: u32 },
    /// A message longer than the buffer (its tail was dropped by the kernel): skipped.
    Truncated { len: usize },
    /// Nothing pending.
    Empty,
}

/// Receives one datagram without blocking. `MSG_TRUNC` makes the kernel report a datagram's
/// real length, so a message larger than `buf` is recognised and skipped, never parsed as
/// if it were whole.
pub(crate) fn uevent_recv(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<UeventRecv> {
    // SAFETY: all-zero is a valid `sockaddr_nl`.
    let mut from: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
    let mut from_len = size_of::<libc::sockaddr_nl>() as libc::socklen_t;
    // SAFETY: `buf` is writable for `buf.len()` bytes and `from`/`from_len` describe a
    // writable `sockaddr_nl`; the kernel writes at most those sizes.
    let n = unsafe {
        libc::recvfrom(
            fd.as_raw_fd(),
            buf.as_mut_ptr().cast(),
            buf.len(),
            libc::MSG_DONTWAIT | libc::MSG_TRUNC,
            (&mut from as *mut libc::sockaddr_nl).cast(),
            &mut from_len,
        )
    };
    if n < 0 {
        let e = io::Error::last_os_error();
        return match e.kind() {
            io::ErrorKind::WouldBlock => Ok(UeventRecv::Empty),
            io::ErrorKind::Interrupted => Ok(UeventRecv::Empty),
            _ => Err(e),
        };
    }
    let len = n as usize;
    if len > buf.len() {
        return Ok(UeventRecv::Truncated { len });
    }
    Ok(UeventRecv::Message {
        len,
        sender: from.nl_pid,
    })
}

/// Waits up to `timeout_ms` for `fd` to become readable (poll(2)); `Ok(false)` on timeout or
/// a signal.
pub(crate) fn wait_readable(fd: BorrowedFd<'_>, timeout_ms: i32) -> io::Result<bool> {
    let mut pfd = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one initialised `pollfd`, count 1; the kernel writes only its `revents`.
    let n = unsafe { libc::poll(&mut pfd, 1, timeout_ms) };
    if n < 0 {
        let e = io::Error::last_os_error();
        return if e.kind() == io::ErrorKind::Interrupted {
            Ok(false)
        } else {
            Err(e)
        };
    }
    Ok(n > 0)
}
