//! Vectored I/O over NVMe/TCP: one Read/Write/Compare whose data is an [`IoVec`] of pieces.
//! The bytes go on the wire from and into the pieces in order (C2HData copied across piece
//! boundaries, H2CData PDUs cut at them), so pieces need no alignment here beyond the
//! shared checks ([`check_vectored`]: the total is the command's bytes, dword pieces).
//! One command per request: above MDTS the request is refused ([`Error::IoVecTooLarge`]),
//! not split, as on PCIe.

use nvme_core::command::DataDirection;
use nvme_core::iovec::check_vectored;
use nvme_core::{Error, IoFailure, IoVec, Namespace, NvmCommand};

use super::TcpQueuePair;
use crate::queue::Waiter;

impl TcpQueuePair {
    /// Queues a vectored Read, Write or Compare: `pieces` are its data in order. Every piece
    /// comes back in order in the completion's `pieces`; a refused request gets them back in
    /// [`IoFailure::pieces`], untouched.
    pub fn submit_vectored<C: NvmCommand>(
        &mut self,
        ns: &Namespace,
        cmd: C,
        pieces: Box<IoVec>,
        user_data: u64,
    ) -> std::result::Result<(), IoFailure> {
        let to_device = match self.check_vectored(ns, &cmd, &pieces) {
            Ok(to_device) => to_device,
            Err(e) => return Err(IoFailure::vectored(e, pieces)),
        };
        let len = pieces.total_bytes();
        let sqe = cmd.sqe_on(ns);
        self.q
            .submit_vectored(sqe, pieces, len, to_device, user_data, Waiter::Poll)
    }

    /// The checks of a vectored request; whether its data goes to the device.
    fn check_vectored<C: NvmCommand>(
        &mut self,
        ns: &Namespace,
        cmd: &C,
        pieces: &IoVec,
    ) -> nvme_core::Result<bool> {
        if self.state_changed() {
            self.sync_state()?;
        }
        let bytes = check_vectored(ns, cmd, pieces)?;
        if bytes > self.ctrl.max_transfer {
            return Err(Error::IoVecTooLarge {
                bytes,
                max_per_command: self.ctrl.max_transfer,
            });
        }
        cmd.check(ns, &self.command_context(), None)?;
        match cmd.direction() {
            DataDirection::ToDevice => Ok(true),
            DataDirection::FromDevice => Ok(false),
            _ => Err(Error::InvalidRequest(format!(
                "{}: only one-way transfers are vectored over NVMe/TCP",
                cmd.opcode().name()
            ))),
        }
    }
}
