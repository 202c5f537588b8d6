//! Volatile access to a memory-mapped register window (a PCI BAR, or the in-process
//! emulator's register page).
//!
//! This is the only place where device registers are dereferenced. Every access is volatile,
//! naturally aligned and bounds-checked against the window, so callers never hold a `&T` to
//! device memory.
//!
//! INVARIANT (`Mmio`): `ptr` is valid for volatile reads and writes of `len` bytes for as long
//! as `owner` is alive; `owner` keeps the mapping (mmap of a BAR, or emulator memory) alive.
//!
//! Removal without SIGBUS: once the device is gone, vfio-pci may revoke the BAR mapping, and
//! the next register access or doorbell write would raise SIGBUS. A window made over a whole
//! BAR mapping ([`Mmio::new_mapping`]) can be *revoked* ([`Mmio::revoke`]): private anonymous
//! memory filled with all ones replaces the mapping in place (`mmap(MAP_FIXED)`), so every
//! later read returns `0xFFFF_FFFF` (what a removed PCIe device answers) and writes land in
//! that memory, never faulting. The driver revokes on a removal notice, before anything else
//! touches the registers. For a revocation nobody announced, a program may install a SIGBUS
//! handler ([`install_sigbus_handler`], opt-in, process-wide) and register its windows
//! ([`Mmio::guard_faults`]): a fault inside a registered window revokes that window from the
//! handler and the access is retried against the replacement; any other SIGBUS goes to the
//! previous handler (or kills the process as before).
//!
//! Atomic windows (the in-process emulator's register page, [`Mmio::new_atomic`]) exist only
//! with the `emulator` feature, which `nvme-sim` turns on. Without it (a build for real
//! hardware: no emulator in the dependency graph) the access mode is a one-variant, zero-sized
//! type, so a register access or a doorbell ring is the volatile store alone: no mode field is
//! loaded or compared per access.

use std::any::Any;
use std::fmt;
use std::ptr::NonNull;
#[cfg(feature = "emulator")]
use std::sync::atomic::AtomicU32;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering};
use std::sync::Arc;

/// Anything that keeps a register window mapped (a VFIO device with its BAR mmap, an emulator).
pub type MappingOwner = Arc<dyn Any + Send + Sync>;

/// How the window's words are accessed. Chosen when the window is made; without the
/// `emulator` feature there is only one choice and the type is zero-sized.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Access {
    /// Device memory (a BAR): volatile loads and stores.
    Volatile,
    /// Ordinary memory that another thread of this process serves with atomics (the
    /// in-process emulator): atomic loads and stores, so both sides agree under Rust's memory
    /// model (mixing volatile and atomic accesses to one word would be a data race).
    #[cfg(feature = "emulator")]
    Atomic,
}

// A build for real hardware carries no access mode: nothing to load or branch on per access.
#[cfg(not(feature = "emulator"))]
const _: () = assert!(std::mem::size_of::<Access>() == 0);

/// A mapped register window.
#[derive(Clone)]
pub struct Mmio {
    ptr: NonNull<u8>,
    len: usize,
    access: Access,
    /// For a window over one whole mapping ([`Mmio::new_mapping`]): set once the mapping was
    /// replaced ([`Mmio::revoke`] or the SIGBUS handler). `None`: not revocable.
    revoked: Option<Arc<AtomicBool>>,
    owner: MappingOwner,
}

// SAFETY: the window is plain device (or emulator) memory accessed only with volatile
// operations; by the type invariant it stays mapped while `owner` lives, and `owner` is
// `Send + Sync`.
unsafe impl Send for Mmio {}
// SAFETY: as above; concurrent volatile accesses to device registers are what hardware sees
// from several CPUs anyway, and the driver serialises the registers that need it.
unsafe impl Sync for Mmio {}

impl fmt::Debug for Mmio {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mmio")
            .field("ptr", &self.ptr)
            .field("len", &self.len)
            .finish()
    }
}

impl Mmio {
    /// Wraps a register window.
    ///
    /// # Safety
    /// `ptr` must be valid for volatile reads and writes of `len` bytes, aligned to 4 bytes, for
    /// as long as `owner` (or any clone of it) is alive.
    pub unsafe fn new(ptr: NonNull<u8>, len: usize, owner: MappingOwner) -> Self {
        Self {
            ptr,
            len,
            access: Access::Volatile,
            revoked: None,
            owner,
        }
    }

    /// Wraps a whole memory mapping (a BAR's mmap) that [`Mmio::revoke`] may replace.
    ///
    /// # Safety
    /// As [`Mmio::new`]; in addition `ptr` is page-aligned and `ptr..ptr + len` is exactly one
    /// mapping of this process that only this window (and its clones and doorbells) uses, and
    /// `owner` releases it with `munmap` of that range (which also releases a replacement).
    pub unsafe fn new_mapping(ptr: NonNull<u8>, len: usize, owner: MappingOwner) -> Self {
        Self {
            ptr,
            len,
            access: Access::Volatile,
            revoked: Some(Arc::new(AtomicBool::new(false))),
            owner,
        }
    }

    /// Wraps ordinary memory that another thread serves as registers with atomic 32-bit
    /// accesses (an in-process emulated device); this window then uses atomics too.
    ///
    /// # Safety
    /// As [`Mmio::new`]; in addition every other access to these words must be atomic.
    #[cfg(feature = "emulator")]
    pub unsafe fn new_atomic(ptr: NonNull<u8>, len: usize, owner: MappingOwner) -> Self {
        Self {
            ptr,
            len,
            access: Access::Atomic,
            revoked: None,
            owner,
        }
    }

    /// Length of the window in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when the window is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    #[inline]
    fn check(&self, offset: usize, size: usize) {
        assert!(
            offset % size == 0 && offset.checked_add(size).is_some_and(|end| end <= self.len),
            "register access at {offset:#x} (size {size}) outside the {:#x}-byte window",
            self.len
        );
    }

    /// Volatile 32-bit read at `offset`. Panics if the offset is misaligned or out of the
    /// window (register offsets are spec constants, so that is a driver bug).
    #[inline]
    pub fn read32(&self, offset: usize) -> u32 {
        self.check(offset, 4);
        // SAFETY: in bounds and aligned (checked above); valid by the type invariant.
        let ptr = unsafe { self.ptr.as_ptr().add(offset).cast::<u32>() };
        match self.access {
            // SAFETY: valid, aligned register (above).
            Access::Volatile => unsafe { ptr.read_volatile() },
            // SAFETY: valid and aligned; every access to these words is atomic (`new_atomic`).
            #[cfg(feature = "emulator")]
            Access::Atomic => unsafe { AtomicU32::from_ptr(ptr) }.load(Ordering::Acquire),
        }
    }

    /// Volatile 32-bit write at `offset`.
    #[inline]
    pub fn write32(&self, offset: usize, value: u32) {
        self.check(offset, 4);
        // SAFETY: in bounds and aligned (checked above); valid by the type invariant.
        let ptr = unsafe { self.ptr.as_ptr().add(offset).cast::<u32>() };
        match self.access {
            // SAFETY: valid, aligned register (above).
            Access::Volatile => unsafe { ptr.write_volatile(value) },
            // SAFETY: valid and aligned; every access to these words is atomic (`new_atomic`).
            #[cfg(feature = "emulator")]
            Access::Atomic => unsafe { AtomicU32::from_ptr(ptr) }.store(value, Ordering::Release),
        }
    }

    /// Whether this window uses atomic accesses (memory another thread of this process serves
    /// as registers, see [`Mmio::new_atomic`]) rather than volatile ones (a device BAR).
    pub fn is_atomic(&self) -> bool {
        #[cfg(feature = "emulator")]
        {
            self.access == Access::Atomic
        }
        #[cfg(not(feature = "emulator"))]
        {
            false
        }
    }

    /// Whether `offset..offset + 4` is a dword inside the window (for offsets computed from
    /// device-reported values, which must be checked before [`Mmio::doorbell`]).
    pub fn contains_dword(&self, offset: usize) -> bool {
        offset % 4 == 0 && offset.checked_add(4).is_some_and(|end| end <= self.len)
    }

    /// 64-bit register read as two 32-bit reads, low dword first (NVMe PCIe transport allows
    /// 64-bit registers to be accessed as a pair of 32-bit accesses).
    pub fn read64(&self, offset: usize) -> u64 {
        self.check(offset, 8);
        let lo = self.read32(offset) as u64;
        let hi = self.read32(offset + 4) as u64;
        lo | (hi << 32)
    }

    /// 64-bit register write as two 32-bit writes, low dword first.
    pub fn write64(&self, offset: usize, value: u64) {
        self.check(offset, 8);
        self.write32(offset, value as u32);
        self.write32(offset + 4, (value >> 32) as u32);
    }

    /// A doorbell at `offset`, checked once here so that ringing it costs one store.
    pub fn doorbell(&self, offset: usize) -> Doorbell {
        self.check(offset, 4);
        // SAFETY: checked in bounds and aligned above; the pointer is derived from a valid
        // non-null base.
        let ptr = unsafe { NonNull::new_unchecked(self.ptr.as_ptr().add(offset).cast::<u32>()) };
        Doorbell {
            ptr,
            access: self.access,
            _owner: self.owner.clone(),
        }
    }
}

impl Mmio {
    /// Replaces the window's mapping with private anonymous memory filled with all ones, in
    /// place: from then on reads return `0xFFFF_FFFF` and writes are absorbed, and nothing
    /// faults when the device's mapping has been (or is being) revoked. Every clone and
    /// doorbell of the window sees the replacement. Returns `Ok(false)` for a window that is
    /// not a whole mapping ([`Mmio::new`], the emulator's page): nothing is replaced. Call it
    /// once the device is known gone, after the last access that still had to reach it.
    pub fn revoke(&self) -> std::io::Result<bool> {
        let Some(revoked) = &self.revoked else {
            return Ok(false);
        };
        if revoked.load(Ordering::Acquire) {
            return Ok(true);
        }
        let start = self.ptr.as_ptr() as usize;
        if replace_with_ones(start, self.len) {
            revoked.store(true, Ordering::Release);
            log::warn!(
                "register window at {start:#x} ({:#x} bytes) revoked",
                self.len
            );
            Ok(true)
        } else {
            Err(std::io::Error::last_os_error())
        }
    }

    /// Whether the window was revoked ([`Mmio::revoke`], or the SIGBUS handler on a fault in
    /// a window registered with [`Mmio::guard_faults`]).
    pub fn is_revoked(&self) -> bool {
        self.revoked
            .as_ref()
            .is_some_and(|r| r.load(Ordering::Acquire))
    }

    /// Registers the window with the SIGBUS handler ([`install_sigbus_handler`], which must be
    /// installed for this to matter): a fault inside it revokes it instead of killing the
    /// process. The registration lasts as long as the returned guard. Fails for a window that
    /// cannot be revoked, or when [`MAX_GUARDED_WINDOWS`] are registered already.
    pub fn guard_faults(&self) -> Result<FaultGuard, GuardError> {
        let Some(revoked) = &self.revoked else {
            return Err(GuardError::NotAMapping);
        };
        let start = self.ptr.as_ptr() as usize;
        for (slot, w) in WINDOWS.iter().enumerate() {
            if w.start
                .compare_exchange(0, start, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                // The handler may still hold this pointer after the guard is gone (a fault
                // being handled on another thread): the flag is never freed (one word per
                // registration).
                let flag = Arc::into_raw(revoked.clone()).cast_mut();
                w.flag.store(flag, Ordering::Release);
                w.len.store(self.len, Ordering::Release);
                return Ok(FaultGuard {
                    slot,
                    _owner: self.owner.clone(),
                });
            }
        }
        Err(GuardError::Full)
    }
}

/// Most windows registered with the SIGBUS handler at once.
pub const MAX_GUARDED_WINDOWS: usize = 64;

/// Why [`Mmio::guard_faults`] refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum GuardError {
    /// The window is not a whole mapping ([`Mmio::new_mapping`]).
    #[error("the register window is not a whole mapping that can be replaced")]
    NotAMapping,
    /// The table of guarded windows is full.
    #[error("{MAX_GUARDED_WINDOWS} register windows are guarded already")]
    Full,
}

/// A window's registration with the SIGBUS handler; unregisters on drop. Keeps the mapping
/// alive meanwhile (the handler may replace it until then).
pub struct FaultGuard {
    slot: usize,
    _owner: MappingOwner,
}

impl fmt::Debug for FaultGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FaultGuard")
            .field("slot", &self.slot)
            .finish()
    }
}

impl Drop for FaultGuard {
    fn drop(&mut self) {
        let w = &WINDOWS[self.slot];
        w.len.store(0, Ordering::Release);
        w.flag.store(std::ptr::null_mut(), Ordering::Release);
        w.start.store(0, Ordering::Release);
    }
}

/// One registered window (all zero: free). Only atomics: the signal handler reads them.
struct Window {
    start: AtomicUsize,
    len: AtomicUsize,
    /// The window's revocation flag (never freed once stored, see `guard_faults`).
    flag: AtomicPtr<AtomicBool>,
}

#[allow(clippy::declare_interior_mutable_const)] // the initialiser of each array element
const FREE_WINDOW: Window = Window {
    start: AtomicUsize::new(0),
    len: AtomicUsize::new(0),
    flag: AtomicPtr::new(std::ptr::null_mut()),
};

/// The windows the SIGBUS handler may revoke (and the revocation flags of every window).
static WINDOWS: [Window; MAX_GUARDED_WINDOWS] = [FREE_WINDOW; MAX_GUARDED_WINDOWS];

/// Maps private anonymous memory over `start..start + len` and fills it with all ones.
/// Async-signal-safe (one `mmap` system call and plain stores). Returns false if `mmap` failed.
fn replace_with_ones(start: usize, len: usize) -> bool {
    // SAFETY: callers pass a window made by `Mmio::new_mapping`, whose contract makes
    // `start..start + len` one page-aligned mapping of this process used only through this
    // window: replacing it (MAP_FIXED) affects no other memory. The replacement is released
    // by the owner's `munmap` of the same range.
    let ptr = unsafe {
        libc::mmap(
            start as *mut libc::c_void,
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
            -1,
            0,
        )
    };
    if ptr == libc::MAP_FAILED {
        return false;
    }
    // SAFETY: the fresh anonymous mapping above covers `start..start + len`, readable and
    // writable.
    unsafe { std::ptr::write_bytes(start as *mut u8, 0xff, len) };
    true
}

/// The action SIGBUS had before [`install_sigbus_handler`] (chained to for faults outside the
/// registered windows).
static PREVIOUS: std::sync::OnceLock<libc::sigaction> = std::sync::OnceLock::new();

extern "C" fn on_sigbus(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo for a SA_SIGINFO handler.
    let addr = unsafe { (*info).si_addr() } as usize;
    for w in &WINDOWS {
        let (start, len) = (
            w.start.load(Ordering::Acquire),
            w.len.load(Ordering::Acquire),
        );
        if len != 0 && addr >= start && addr - start < len {
            if replace_with_ones(start, len) {
                let flag = w.flag.load(Ordering::Acquire);
                if !flag.is_null() {
                    // SAFETY: a flag stored by `guard_faults`, never freed.
                    unsafe { &*flag }.store(true, Ordering::Release);
                }
                // Returning retries the access, now against the replacement.
                return;
            }
            break;
        }
    }
    // Not ours: what SIGBUS did before.
    match PREVIOUS.get() {
        Some(prev) if prev.sa_flags & libc::SA_SIGINFO != 0 && prev.sa_sigaction > 1 => {
            // SAFETY: a SA_SIGINFO handler installed before ours, called as the kernel would.
            let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                unsafe { std::mem::transmute(prev.sa_sigaction) };
            f(sig, info, ctx);
        }
        Some(prev) if prev.sa_sigaction > 1 => {
            // SAFETY: a plain handler installed before ours.
            let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(prev.sa_sigaction) };
            f(sig);
        }
        _ => {
            // Default action: restore it and return; the access faults again and the process
            // dies of SIGBUS as it would have without us.
            // SAFETY: resetting a signal's disposition to SIG_DFL is async-signal-safe.
            unsafe { libc::signal(libc::SIGBUS, libc::SIG_DFL) };
        }
    }
}

/// Installs the process-wide SIGBUS handler for windows registered with
/// [`Mmio::guard_faults`] (opt-in: the library never installs it by itself). Idempotent. The
/// handler takes the previous disposition's place and calls it for faults outside the
/// registered windows.
pub fn install_sigbus_handler() -> std::io::Result<()> {
    static INSTALLED: std::sync::Mutex<bool> = std::sync::Mutex::new(false);
    let mut installed = INSTALLED.lock().unwrap_or_else(|p| p.into_inner());
    if *installed {
        return Ok(());
    }
    // SAFETY: zeroed sigaction is a valid starting value; the mask is emptied below.
    let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
    action.sa_sigaction = on_sigbus as *const () as usize;
    action.sa_flags = libc::SA_SIGINFO;
    // SAFETY: a valid sigaction to initialise.
    unsafe { libc::sigemptyset(&mut action.sa_mask) };
    // SAFETY: zeroed is a valid place for the previous action.
    let mut previous: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointers to a filled action and a place for the old one.
    if unsafe { libc::sigaction(libc::SIGBUS, &action, &mut previous) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let _ = PREVIOUS.set(previous);
    *installed = true;
    Ok(())
}

/// One 32-bit doorbell register (SQ tail or CQ head).
///
/// INVARIANT: `ptr` is a valid, aligned 32-bit register inside a window kept alive by `_owner`.
pub struct Doorbell {
    ptr: NonNull<u32>,
    access: Access,
    _owner: MappingOwner,
}

// SAFETY: see `Mmio`; the doorbell is a register inside a window kept alive by `_owner`.
unsafe impl Send for Doorbell {}

impl fmt::Debug for Doorbell {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Doorbell").field("ptr", &self.ptr).finish()
    }
}

impl Doorbell {
    /// Writes `value` to the doorbell (one store: volatile to a device, atomic to an
    /// in-process emulator). The caller orders its ring writes before it with
    /// [`crate::barrier::before_doorbell`]. Without the `emulator` feature this is the volatile
    /// store and nothing else (`Access` is zero-sized there).
    #[inline(always)]
    pub fn ring(&self, value: u32) {
        match self.access {
            // SAFETY: valid and aligned by the type invariant.
            Access::Volatile => unsafe { self.ptr.as_ptr().write_volatile(value) },
            #[cfg(feature = "emulator")]
            Access::Atomic => {
                // SAFETY: valid and aligned; all accesses to the word are atomic (`new_atomic`).
                unsafe { AtomicU32::from_ptr(self.ptr.as_ptr()) }.store(value, Ordering::Release)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A shared mapping of a memfd of `len` bytes, as a BAR mapping: truncating the file
    /// revokes the pages under the mapping, and the next access raises SIGBUS, as an access
    /// to a BAR that vfio-pci revoked does.
    struct FileMapping {
        ptr: NonNull<u8>,
        len: usize,
        fd: libc::c_int,
    }

    // SAFETY: test mapping used through `Mmio` only.
    unsafe impl Send for FileMapping {}
    // SAFETY: as above.
    unsafe impl Sync for FileMapping {}

    impl FileMapping {
        fn new(len: usize) -> Arc<Self> {
            // SAFETY: a NUL-terminated name and valid flags.
            let fd = unsafe { libc::memfd_create(c"nvme-vfio-mmio-test".as_ptr(), 0) };
            assert!(fd >= 0);
            // SAFETY: our fresh fd.
            assert_eq!(unsafe { libc::ftruncate(fd, len as libc::off_t) }, 0);
            // SAFETY: a fresh shared mapping of the whole file, no MAP_FIXED.
            let ptr = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED,
                    fd,
                    0,
                )
            };
            assert_ne!(ptr, libc::MAP_FAILED);
            Arc::new(Self {
                ptr: NonNull::new(ptr.cast()).unwrap(),
                len,
                fd,
            })
        }

        /// Takes the pages away under the mapping (what a revoked BAR is to an access).
        fn revoke_pages(&self) {
            // SAFETY: our fd.
            assert_eq!(unsafe { libc::ftruncate(self.fd, 0) }, 0);
        }

        fn window(self: &Arc<Self>) -> Mmio {
            let owner: MappingOwner = self.clone();
            // SAFETY: one whole page-aligned mapping used only through this window, unmapped
            // by the owner's drop.
            unsafe { Mmio::new_mapping(self.ptr, self.len, owner) }
        }
    }

    impl Drop for FileMapping {
        fn drop(&mut self) {
            // SAFETY: our mapping (or its replacement) and our fd; nothing uses them now.
            unsafe {
                libc::munmap(self.ptr.as_ptr().cast(), self.len);
                libc::close(self.fd);
            }
        }
    }

    #[test]
    fn a_revoked_window_reads_all_ones_and_absorbs_writes() {
        let map = FileMapping::new(4096);
        let mmio = map.window();
        let bell = mmio.doorbell(0x1000 - 4);
        mmio.write32(8, 0x1234_5678);
        assert_eq!(mmio.read32(8), 0x1234_5678);
        assert!(!mmio.is_revoked());
        assert!(mmio.revoke().unwrap());
        // The pages go away under the old mapping: an access to it would now be SIGBUS.
        map.revoke_pages();
        assert!(mmio.is_revoked());
        assert_eq!(mmio.read32(8), u32::MAX);
        assert_eq!(mmio.read64(0), u64::MAX);
        mmio.write32(8, 0);
        bell.ring(7);
        assert_eq!(
            mmio.clone().read32(0x1000 - 4),
            7,
            "the doorbell wrote the replacement"
        );
    }

    #[test]
    fn the_sigbus_handler_revokes_a_guarded_window_on_a_fault() {
        install_sigbus_handler().unwrap();
        install_sigbus_handler().unwrap(); // idempotent
        let map = FileMapping::new(8192);
        let mmio = map.window();
        let guard = mmio.guard_faults().unwrap();
        mmio.write32(0, 1);
        map.revoke_pages();
        // Without the handler this read kills the test process with SIGBUS.
        assert_eq!(mmio.read32(4096), u32::MAX);
        assert!(mmio.is_revoked());
        mmio.doorbell(0).ring(3);
        drop(guard);
    }

    #[test]
    fn only_whole_mappings_are_revoked_or_guarded() {
        let mut word = Box::new([0u32; 4]);
        let owner: MappingOwner = Arc::new(());
        // SAFETY: the box lives until the end of the test, longer than the window.
        let mmio = unsafe { Mmio::new(NonNull::from(&mut *word).cast(), 16, owner) };
        assert!(!mmio.revoke().unwrap());
        assert_eq!(mmio.guard_faults().unwrap_err(), GuardError::NotAMapping);
        mmio.write32(0, 5);
        assert_eq!(mmio.read32(0), 5);
    }
}
