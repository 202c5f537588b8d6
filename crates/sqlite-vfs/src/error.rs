//! Errors of the store and the VFS.

/// What went wrong.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The NVMe driver failed.
    #[error("NVMe {context} failed")]
    Driver {
        /// What the store was doing.
        context: &'static str,
        /// The driver's error.
        #[source]
        source: nvme_driver::Error,
    },
    /// A transfer that is not a whole number of blocks (internal misuse).
    #[error("transfer of {len} bytes is not a whole number of blocks")]
    Unaligned {
        /// Length in bytes.
        len: usize,
    },
    /// A transfer past the end of the device.
    #[error("blocks {lba}..+{blocks} are past the end of the device")]
    OutOfRange {
        /// First block.
        lba: u64,
        /// Blocks (of the transfer, or of the device).
        blocks: u64,
    },
    /// Neither directory copy carries our magic number: the namespace was never formatted.
    #[error("the namespace holds no SQLite directory (no magic number in either copy); format it first (e.g. `nvme-sqlite --format`)")]
    NotFormatted,
    /// Directory copies exist but none is valid.
    #[error("the SQLite directory is corrupt: copy A: {a}; copy B: {b}")]
    DirectoryCorrupt {
        /// Why directory copy A is invalid.
        a: String,
        /// Why directory copy B is invalid.
        b: String,
    },
    /// The namespace is too small for the directory and a data area.
    #[error("the namespace ({blocks} blocks of {block_size} B) is too small: at least {needed} blocks are needed")]
    TooSmall {
        /// Blocks (of the transfer, or of the device).
        blocks: u64,
        /// The device's block size in bytes.
        block_size: u32,
        /// Bytes needed.
        needed: u64,
    },
    /// A block size the store does not support.
    #[error("block size {0} B is not supported (a power of two from 512 B to 64 KiB is)")]
    BlockSize(u32),
    /// Every directory entry is in use.
    #[error("the directory is full ({0} files)")]
    DirectoryFull(usize),
    /// No free extent is large enough.
    #[error("no free space for `{name}` to grow to {bytes} bytes")]
    NoSpace {
        /// The file name (NoSpace) or the VFS name (Register).
        name: String,
        /// Bytes asked for.
        bytes: u64,
    },
    /// A file name too long for a directory entry (or empty, or with a NUL).
    #[error("file name `{0}` is not usable: names are 1..={max} bytes without NUL", max = crate::dir::MAX_NAME)]
    BadName(String),
    /// No such file.
    #[error("no file `{0}`")]
    NotFound(String),
    /// The file exists already.
    #[error("file `{0}` exists")]
    Exists(String),
    /// The VFS was dropped while a connection still used it.
    #[error("the VFS was closed")]
    Closed,
    /// Another VFS of this process already stores its files on the namespace: two would each
    /// keep their own directory and overwrite the other's.
    #[error("namespace {namespace} is already used by the VFS `{vfs}` of this process; drop that VFS first")]
    NamespaceInUse {
        /// The namespace ([`crate::BlockDevice::identity`]).
        namespace: String,
        /// The VFS that holds it.
        vfs: String,
    },
    /// A SQLite callback of this VFS panicked (e.g. in the block device). The panic was
    /// stopped at the callback (SQLite got an I/O error), but the store's in-memory state
    /// may be half-updated, so the VFS refuses all I/O from then on: drop it and register
    /// a new one (what was synced before is intact on the medium).
    #[error("a panic in the VFS ({callback}: {message}); the VFS refuses all I/O until it is dropped and registered again")]
    Panicked {
        /// The callback (`xWrite`, ...), or where the panic was seen.
        callback: &'static str,
        /// The panic message.
        message: String,
    },
    /// Every write-behind buffer went with a request the device may still access (a timed
    /// out command keeps its buffer, which is leaked rather than reused).
    #[error("no I/O buffer left: every write-behind buffer is held by a timed-out request the device may still access; drop the VFS and open the namespace again (after resetting the controller)")]
    BuffersLost,
    /// The VFS could not be registered with SQLite.
    #[error("registering the VFS `{name}` with SQLite failed (code {code})")]
    Register {
        /// The file name (NoSpace) or the VFS name (Register).
        name: String,
        /// SQLite's result code.
        code: i32,
    },
    /// A redo record (batch-atomic write) passed its checksum but does not make sense.
    #[error("the redo record of a batch-atomic write is corrupt: {0}")]
    RedoCorrupt(String),
    /// A batch-atomic write is larger than a redo slot (SQLite then commits through its
    /// rollback journal instead).
    #[error("a batch-atomic write of {bytes} bytes does not fit the redo slot ({capacity} bytes)")]
    BatchTooLarge {
        /// Bytes the record would take.
        bytes: u64,
        /// Bytes a slot holds.
        capacity: u64,
    },
    /// A batch-atomic write was begun, written to or ended out of order.
    #[error("batch-atomic write on `{0}` out of order (begin, writes, commit or rollback)")]
    BatchOrder(String),
    /// No usable SQLite function table: none installed yet, or the one a loader passed to
    /// an extension lacks a function or is too old (see `api`).
    #[error("SQLite API: {0}")]
    Loader(String),
}

impl Error {
    pub(crate) fn driver(context: &'static str, source: nvme_driver::Error) -> Self {
        Self::Driver { context, source }
    }
}

/// Result with [`Error`].
pub type Result<T> = std::result::Result<T, Error>;
