//! A C queue pair after a namespace rescan (issue 19, item 2): it uses the controller's
//! current namespace set, so a namespace reformatted by another host is read with its new
//! block size, one now in a metadata format or detached is refused with NVME_ERR_NAMESPACE,
//! and an unchanged one keeps working.

use std::ptr;

use nvme_userspace::*;

mod common;
use common::{last_error, record, Seen};

/// Reads `blocks` blocks at `lba` of `nsid` into `buf` and waits: the submission's code, or
/// the completion's.
///
/// # Safety
/// Live handles owned by this thread.
unsafe fn read(qp: *mut nvme_qpair, nsid: u32, lba: u64, blocks: u32, buf: *mut nvme_buf) -> i32 {
    let seen = Seen::default();
    let arg = (&seen as *const Seen).cast_mut().cast();
    // SAFETY: caller contract; `seen` outlives the request (polled to completion below).
    let rc = unsafe { nvme_qpair_submit_read(qp, nsid, lba, blocks, buf, Some(record), arg) };
    if rc != NVME_OK {
        return rc;
    }
    common::poll_until(qp, &seen, 1)
}

#[test]
fn a_queue_pair_follows_a_rescan_to_the_new_format() {
    // SAFETY: every call below is made with live handles owned by this thread.
    unsafe {
        let mut ctrlr = ptr::null_mut();
        assert_eq!(nvme_ctrlr_open_emulated(&mut ctrlr), NVME_OK);
        let mut qp = ptr::null_mut();
        assert_eq!(nvme_qpair_create(ctrlr, 8, 5000, &mut qp), NVME_OK);
        let mut buf = ptr::null_mut();
        assert_eq!(nvme_buf_alloc(ctrlr, 4096, &mut buf), NVME_OK);
        let bytes = |buf: *mut nvme_buf| {
            std::slice::from_raw_parts(nvme_buf_ptr(buf).cast::<u8>(), nvme_buf_len(buf))
        };
        // The pair knows namespace 1 with 512-byte blocks.
        assert_eq!(read(qp, 1, 0, 8, buf), NVME_OK);

        // Another host formats namespace 1 with 4 KiB blocks; the application rescans.
        let sim = emulated_device(ctrlr).expect("an emulated controller");
        sim.format_namespace(1, 4096, 0);
        assert_eq!(
            nvme_ctrlr_rescan_namespaces(ctrlr),
            NVME_OK,
            "{}",
            last_error()
        );
        let mut ns = std::mem::zeroed::<nvme_ns_info>();
        assert_eq!(nvme_ctrlr_get_ns_info(ctrlr, 1, &mut ns), NVME_OK);
        assert_eq!((ns.block_size, ns.blocks), (4096, 4096));
        // The same queue pair reads one 4 KiB block, the one the device holds at LBA 2.
        sim.write_disk(1, 2 * 4096, &[0x6B; 4096]);
        let before = sim.stats();
        assert_eq!(read(qp, 1, 2, 1, buf), NVME_OK, "{}", last_error());
        assert!(bytes(buf).iter().all(|&b| b == 0x6B));
        assert_eq!(sim.stats().reads, before.reads + 1);
        assert_eq!(sim.stats().dma_errors, before.dma_errors);

        // Namespace 2 did not change: it keeps working.
        assert_eq!(read(qp, 2, 0, 1, buf), NVME_OK);

        // A format with metadata: a plain read is refused, with the driver's reason, before
        // the device (it would need a metadata buffer: nvme_qpair_submit_pi).
        sim.format_namespace(1, 512, 8);
        assert_eq!(nvme_ctrlr_rescan_namespaces(ctrlr), NVME_OK);
        let reads = sim.stats().reads;
        assert_eq!(read(qp, 1, 0, 8, buf), NVME_ERR_METADATA);
        assert!(last_error().contains("512+8 separate"), "{}", last_error());
        assert!(!nvme_buf_in_flight(buf));
        assert_eq!(sim.stats().reads, reads);

        // Detached: refused as inactive.
        sim.set_namespace_attached(2, false);
        assert_eq!(nvme_ctrlr_rescan_namespaces(ctrlr), NVME_OK);
        assert_eq!(read(qp, 2, 0, 1, buf), NVME_ERR_NAMESPACE);
        assert!(last_error().contains("not active"), "{}", last_error());
        assert_eq!(
            nvme_ctrlr_num_namespaces(ctrlr),
            1,
            "namespace 1, with metadata"
        );

        assert_eq!(
            nvme_ctrlr_rescan_namespaces(ptr::null()),
            NVME_ERR_NULL_POINTER
        );
        assert_eq!(nvme_buf_free(buf), NVME_OK);
        assert_eq!(nvme_qpair_destroy(qp), NVME_OK);
        assert_eq!(nvme_ctrlr_close(ctrlr), NVME_OK);
    }
}
