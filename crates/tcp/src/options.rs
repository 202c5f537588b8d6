//! Which [`QueuePairOptions`] an NVMe/TCP queue pair honours. `depth`, `timeout`,
//! `max_completions_per_poll` and `resubmit_after_reset` are honoured; the PCIe-only fields
//! (`interrupts`: an MSI-X vector; `software_queue`: the PCIe pair's overflow FIFO) are
//! refused with [`Error::UnsupportedOption`] when set to anything but their default, so that
//! a caller relying on them learns at creation instead of never getting what it asked for.

use nvme_core::{Error, QueuePairOptions, Result};

/// Refuses `options` with a field this transport cannot honour set to a non-default value.
pub(crate) fn check_queue_pair_options(controller: &str, options: &QueuePairOptions) -> Result<()> {
    let refuse = |option, why| {
        Err(Error::UnsupportedOption {
            controller: controller.to_string(),
            option,
            why,
        })
    };
    if options.interrupts {
        return refuse(
            "QueuePairOptions::interrupts",
            "an NVMe/TCP queue has no MSI-X vector to wait on (poll it)",
        );
    }
    if options.software_queue != 0 {
        return refuse(
            "QueuePairOptions::software_queue",
            "the NVMe/TCP queue pair has no software queue (a full queue fails the \
             submission with Error::QueueFull)",
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use nvme_core::{IoQueue, NvmeController, WriteFlags};

    use super::*;
    use crate::fake::{Config, FakeTarget};
    use crate::{TcpController, TcpOptions};

    fn connect(target: &FakeTarget) -> TcpController {
        TcpController::connect(&target.trid(), TcpOptions::default()).expect("connect")
    }

    /// Creation through the controller trait: refused with the option named, before a queue
    /// id is taken or a connection opened.
    fn refused_by_controller<C: NvmeController>(ctrl: &C, options: QueuePairOptions) -> String {
        match ctrl.create_queue_pair(options) {
            Err(e @ Error::UnsupportedOption { .. }) => e.to_string(),
            Err(e) => panic!("refused with another error: {e:?}"),
            Ok(_) => panic!("not refused"),
        }
    }

    /// Every queue id is still free: one default pair per granted queue can be created.
    fn all_queues_usable(ctrl: &TcpController) {
        let pairs: Vec<_> = (0..ctrl.io_queue_pairs())
            .map(|_| ctrl.create_queue_pair(QueuePairOptions::default()).unwrap())
            .collect();
        assert_eq!(pairs.len(), usize::from(ctrl.io_queue_pairs()));
    }

    #[test]
    fn tcp_controller_refuses_interrupts() {
        let t = FakeTarget::start(Config::default());
        let c = connect(&t);
        for _ in 0..=c.io_queue_pairs() {
            let msg = refused_by_controller(&c, QueuePairOptions::default().interrupts(true));
            assert!(msg.contains("QueuePairOptions::interrupts"), "{msg}");
        }
        all_queues_usable(&c);
    }

    #[test]
    fn tcp_controller_refuses_a_software_queue() {
        let t = FakeTarget::start(Config::default());
        let c = connect(&t);
        for _ in 0..=c.io_queue_pairs() {
            let msg = refused_by_controller(&c, QueuePairOptions::default().software_queue(4));
            assert!(msg.contains("QueuePairOptions::software_queue"), "{msg}");
        }
        all_queues_usable(&c);
    }

    /// Generic code over the controller trait does I/O on NVMe/TCP.
    fn write_read_through_the_trait<C: NvmeController>(ctrl: &C) -> Vec<u8> {
        let ns = ctrl.namespace(1).unwrap();
        let mut qp = ctrl
            .create_queue_pair(QueuePairOptions::default().depth(8))
            .unwrap();
        let mut buf = ctrl.alloc_buffer(ns.block_size() as usize).unwrap();
        buf[..4].copy_from_slice(b"core");
        let mut buf = qp.write(&ns, 3, 1, buf, WriteFlags::NONE).unwrap();
        buf.fill(0);
        let buf = qp.read(&ns, 3, 1, buf).unwrap();
        assert!(!ctrl.is_failed());
        buf[..4].to_vec()
    }

    #[test]
    fn the_controller_trait_runs_io_on_tcp() {
        let t = FakeTarget::start(Config::default());
        let c = connect(&t);
        assert_eq!(NvmeController::name(&c), c.name());
        assert_eq!(
            NvmeController::max_transfer_bytes(&c),
            c.max_transfer_bytes()
        );
        assert_eq!(NvmeController::namespaces(&c).len(), c.namespaces().len());
        assert_eq!(write_read_through_the_trait(&c), b"core");
    }

    fn refused(options: QueuePairOptions) -> &'static str {
        match check_queue_pair_options("tcp", &options) {
            Err(Error::UnsupportedOption { option, .. }) => option,
            other => panic!("not refused: {other:?}"),
        }
    }

    #[test]
    fn defaults_and_shared_fields_are_accepted() {
        let options = QueuePairOptions::default()
            .depth(16)
            .max_completions_per_poll(4)
            .resubmit_after_reset(true)
            .software_queue(0)
            .interrupts(false);
        assert!(check_queue_pair_options("tcp", &options).is_ok());
    }

    #[test]
    fn interrupts_are_refused() {
        assert_eq!(
            refused(QueuePairOptions::default().interrupts(true)),
            "QueuePairOptions::interrupts"
        );
    }

    #[test]
    fn a_software_queue_is_refused() {
        assert_eq!(
            refused(QueuePairOptions::default().software_queue(8)),
            "QueuePairOptions::software_queue"
        );
    }
}
