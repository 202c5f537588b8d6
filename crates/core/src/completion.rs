//! [`Completion`]: a finished request, as every transport's `poll` hands it to its callback.

use nvme_vfio::DmaBuffer;

use crate::error::Error;
use crate::iovec::IoVec;

/// A finished I/O, handed to the poll callback.
#[derive(Debug)]
pub struct Completion {
    /// The value given at submission.
    pub user_data: u64,
    /// Command-specific result (completion dword 0) or the error.
    pub result: std::result::Result<u32, Error>,
    /// The data buffer, given back. `None` for commands without data, or when the
    /// controller may still access it (timeout, fatal status).
    pub buffer: Option<DmaBuffer>,
    /// The pieces of a vectored request, every one and in order (`None` for other requests,
    /// or when the controller may still access them, as for `buffer`).
    pub pieces: Option<Box<IoVec>>,
}
