//! I/O queue pairs: checking the options, the depth and the controller state, taking a queue
//! id, connecting its queue, and giving the id back.
//!
//! INVARIANT: a queue id is taken from `free_qids` only after the state checks and is given
//! back when the connection fails; a pair records the state word it was created under.

use nvme_core::{Error, QueuePairOptions, Result, TimeoutAction};

use super::{
    Inner, TcpController, DEFAULT_TCP_QUEUE_DEPTH, STATE_FAILED, STATE_LOST, STATE_RESETTING,
};
use crate::options::check_queue_pair_options;
use crate::qpair::TcpQueuePair;
use crate::queue::{Queue, QueueLimits};

impl TcpController {
    /// Creates an I/O queue pair on a new connection: ICReq/ICResp, then Connect with this
    /// controller's id. `options.depth` 0 means [`DEFAULT_TCP_QUEUE_DEPTH`] (clamped);
    /// `options.timeout` is the per-command timeout. The PCIe-only options
    /// (`QueuePairOptions::interrupts`, `QueuePairOptions::software_queue`) set to anything
    /// but their default are refused with `Error::UnsupportedOption`.
    pub fn create_queue_pair(&self, options: QueuePairOptions) -> Result<TcpQueuePair> {
        let inner = &self.inner;
        check_queue_pair_options(&inner.name, &options)?;
        let max = inner.max_entries.min(4096);
        let depth = match options.depth {
            0 => DEFAULT_TCP_QUEUE_DEPTH.min(max),
            d if (2..=max).contains(&d) => d,
            d => return Err(Error::QueueDepth { requested: d, max }),
        };
        let state = inner.state();
        if state & STATE_RESETTING != 0 {
            return Err(Error::Resetting {
                controller: inner.name.to_string(),
            });
        }
        if state & (STATE_FAILED | STATE_LOST) != 0 {
            return Err(Error::Failed {
                controller: inner.name.to_string(),
            });
        }
        let qid =
            inner
                .free_qids
                .lock()
                .expect("qid list lock")
                .pop()
                .ok_or(Error::NoQueuesLeft {
                    granted: inner.granted,
                })?;
        let (stream, neg) = match inner.connect_io(qid, depth) {
            Ok(v) => v,
            Err(e) => {
                inner.release_qid(qid);
                if inner.state() != state {
                    // A reset replaced the association meanwhile.
                    return Err(Error::Resetting {
                        controller: inner.name.to_string(),
                    });
                }
                return Err(e);
            }
        };
        let mut q = Queue::new(
            stream,
            inner.addr,
            qid,
            inner.name.clone(),
            neg,
            QueueLimits {
                slots: (depth - 1) as u16,
                in_capsule_max: inner.io_in_capsule,
                timeout: options.timeout,
            },
        );
        q.abort_on_timeout = inner.options.timeout_action != TimeoutAction::None;
        q.state_watch = Some((inner.state.clone(), state));
        Ok(TcpQueuePair::new(q, inner.clone(), depth, &options, state))
    }
}

impl Inner {
    pub(crate) fn release_qid(&self, qid: u16) {
        if let Ok(mut free) = self.free_qids.lock() {
            free.push(qid);
        }
    }
}
