//! SQLite on an NVMe namespace, through the userspace driver's queue pairs: no kernel block
//! layer, no file system.
//!
//! [`NvmeVfs::register`] opens a [`Store`] (a small directory plus one contiguous extent per
//! file) on a [`BlockDevice`] — normally an [`NvmeDevice`], a namespace driven through one
//! queue pair, PCIe or NVMe/TCP (`nvme_device::AnyQueuePair`) — and registers it with SQLite as a VFS; open connections with
//! [`NvmeVfs::open`] (or `rusqlite::Connection::open_with_flags_and_vfs` and
//! [`NvmeVfs::name`]). See `docs/sqlite.md` for the layout and the durability argument.
//!
//! Single process: locks are tracked in process memory only. Within the process a namespace
//! serves one VFS at a time: registering a second on it fails with
//! [`Error::NamespaceInUse`] until the first is dropped. A second process is refused before
//! it reaches the VFS: on PCIe, VFIO gives the controller to one process
//! (`nvme_vfio::VfioError::InUse` from `Controller::open_pci`), and other processes reach the
//! databases only through the one that holds it.
//!
//! # Example
//!
//! SQLite on namespace 1 of the in-process emulator (on hardware, open the controller with
//! `Controller::open_pci`; over the network, `nvme_tcp::TcpController::connect`):
//!
//! ```
//! use nvme_driver::{Controller, ControllerOptions, Transport};
//! use nvme_sim::{SimConfig, SimController};
//! use nvme_sqlite_vfs::{Format, NvmeDevice, NvmeVfs};
//!
//! let sim = SimController::start(SimConfig::default());
//! let ctrl = Controller::new(Transport::new(sim.mmio(), sim.dma(), "sim"), ControllerOptions::default())?;
//! let vfs = NvmeVfs::register("doc-example", Box::new(NvmeDevice::new(ctrl, 1)?), Format::IfBlank)?;
//! let conn = vfs.open("test.db")?;
//! conn.execute_batch("CREATE TABLE t(x); INSERT INTO t VALUES (42);")?;
//! let x: i64 = conn.query_row("SELECT x FROM t", [], |r| r.get(0))?;
//! assert_eq!(x, 42);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![deny(missing_docs)]

mod claim;
mod device;
pub mod dir;
mod error;
mod guard;
mod read_cache;
mod redo;
mod store;
mod vfs;
pub mod workload;
mod write_behind;

pub use device::{BlockDevice, MemDevice, NvmeDevice};
pub use error::{Error, Result};
pub use store::{FileInfo, Format, Store, StoreStats};
/// The SQLite functions the VFS calls, through one table (linked SQLite, or a loader's
/// `sqlite3_api_routines` for a loadable extension).
pub use vfs::api;
pub use write_behind::IoStats;

use rusqlite::{Connection, OpenFlags};

/// `error` and its causes, joined with ": ".
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut s = error.to_string();
    let mut src = error.source();
    while let Some(e) = src {
        s.push_str(": ");
        s.push_str(&e.to_string());
        src = e.source();
    }
    s
}

/// A registered VFS. Dropping it unregisters the VFS and releases the device (closing the
/// controller's queue pair); close every connection first — a connection left open fails
/// its I/O from then on (it never touches freed memory).
pub struct NvmeVfs {
    name: String,
    shared: &'static vfs::Shared,
    /// The registered `sqlite3_vfs` (leaked: lives as long as the process), as an address.
    raw: usize,
    /// The namespace this VFS holds; dropped (released) after [`Drop::drop`] has closed the
    /// store.
    _claim: Option<claim::Claim>,
}

impl std::fmt::Debug for NvmeVfs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NvmeVfs").field("name", &self.name).finish()
    }
}

impl NvmeVfs {
    /// Opens the store on `device` (formatting it per `format`) and registers a VFS named
    /// `name` for it (not the default VFS).
    ///
    /// Fails with [`Error::NamespaceInUse`], before reading or writing the device, when
    /// another `NvmeVfs` of this process is on the same medium
    /// ([`BlockDevice::identity`]: for an [`NvmeDevice`], the same NVM subsystem and
    /// namespace ID, whichever controller handle it came through).
    pub fn register(name: &str, device: Box<dyn BlockDevice>, format: Format) -> Result<Self> {
        api::install_linked();
        Self::register_through_api(name, device, format)
    }

    /// [`NvmeVfs::register`] through the SQLite table installed with [`api::install`] (a
    /// loadable extension's loader): never calls the linked SQLite. Fails with
    /// [`Error::Loader`] when no table is installed.
    pub fn register_through_api(
        name: &str,
        device: Box<dyn BlockDevice>,
        format: Format,
    ) -> Result<Self> {
        let claim = device
            .identity()
            .map(|id| claim::Claim::take(id, name))
            .transpose()?;
        let store = Store::open(device, format)?;
        let (shared, raw) = vfs::register(name, store)?;
        Ok(Self {
            name: name.to_owned(),
            shared,
            raw: raw as usize,
            _claim: claim,
        })
    }

    /// The VFS name to give SQLite.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The registered `sqlite3_vfs` (for a VFS that forwards to this one, as the loadable
    /// extension's `nvme` VFS does). It stays allocated for the life of the process.
    pub fn raw_vfs(&self) -> *mut rusqlite::ffi::sqlite3_vfs {
        self.raw as *mut rusqlite::ffi::sqlite3_vfs
    }

    /// Bytes SQLite allocates per open file of an `NvmeVfs` (its `szOsFile`): a forwarding
    /// VFS must ask for at least this many.
    pub const OS_FILE_BYTES: usize = vfs::OS_FILE_BYTES;

    /// Opens (creating if needed) database `db` on this VFS.
    pub fn open(&self, db: &str) -> rusqlite::Result<Connection> {
        Connection::open_with_flags_and_vfs(
            db,
            OpenFlags::SQLITE_OPEN_READ_WRITE
                | OpenFlags::SQLITE_OPEN_CREATE
                | OpenFlags::SQLITE_OPEN_NO_MUTEX,
            self.name.as_str(),
        )
    }

    /// Runs `f` on the store (listing files, statistics). Fails with [`Error::Panicked`]
    /// once a panic in a SQLite callback (or in an earlier `f`) has broken the VFS.
    pub fn with_store<T>(&self, f: impl FnOnce(&mut Store) -> T) -> Result<T> {
        let mut inner = self.shared.lock();
        inner.store_mut().map(f)
    }

    /// SQLite's `xDeviceCharacteristics` flags for this VFS's files.
    pub fn device_characteristics(&self) -> i32 {
        self.with_store(|s| vfs::characteristics(s.layout().block_size, s.batch_atomic()))
            .unwrap_or(0)
    }
}

impl Drop for NvmeVfs {
    fn drop(&mut self) {
        vfs::unregister(&self.name);
        let store = self.shared.lock().store.take();
        drop(store);
    }
}
