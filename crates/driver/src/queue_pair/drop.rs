//! Dropping a queue pair: delete both queues (or stop the controller) before the rings, slot
//! pages and in-flight buffers are freed.
//!
//! INVARIANT: memory the device may still write is never freed: either the queues are
//! deleted, or the controller is stopped, or (when neither is confirmed) it leaks (see
//! `teardown`).

use nvme_spec::command;

use super::recover::generation;
use super::QueuePair;
use crate::controller::STATE_FAILED;

impl Drop for QueuePair {
    fn drop(&mut self) {
        // The rings, slot pages and the buffers of requests still in flight or retired are
        // freed when the fields drop after this. Before that the device must be unable to
        // reach them: either both queues are deleted (Delete I/O SQ completes only once every
        // command of the queue is completed or aborted, NVMe Base 2.0 §5.6), or the
        // controller is stopped (disabled, bus mastering off), or, when neither can be
        // confirmed, the controller's mapper is retired and all that memory leaks.
        // No reset may run while this decides (a reset disables the controller, and the
        // decision depends on whether that happened).
        let _no_reset = self.ctrl.hold_resets();
        let state = self.ctrl.state();
        if state & STATE_FAILED == 0 && generation(state) != generation(self.ctrl_state) {
            // A reset disabled the controller after these queues were created: they no longer
            // exist there, and nothing of the old generation can reach this pair's memory.
            self.ctrl.release_qid(self.qid);
            return;
        }
        let deleted = !self.ctrl.is_failed()
            && match self.ctrl.admin(command::delete_io_sq(self.qid), None) {
                Err(e) => {
                    log::error!(
                        "{}: deleting I/O submission queue {}: {e}",
                        self.ctrl.name,
                        self.qid
                    );
                    false
                }
                Ok(_) => match self.ctrl.admin(command::delete_io_cq(self.qid), None) {
                    Err(e) => {
                        log::error!(
                            "{}: deleting I/O completion queue {}: {e}",
                            self.ctrl.name,
                            self.qid
                        );
                        false
                    }
                    Ok(_) => true,
                },
            };
        if deleted {
            self.ctrl.release_qid(self.qid);
        } else {
            self.ctrl.fail_and_stop();
        }
    }
}
