//! `nvme_format`, `nvme_ns_attach` and `nvme_ns_detach` against the emulated controller
//! (issue 21, item 5): a format changes the block size the C API reports, a detached
//! namespace leaves the namespace list and its I/O is refused, attaching it again brings it
//! back with its data; bad arguments and the controller's refusals have their codes.

use std::ptr;

use nvme_userspace::*;

mod common;
use common::{last_error, record, Seen};

/// Submits a read or write of `blocks` blocks at LBA 0 of `nsid` and waits: the submission's
/// code, or the completion's.
///
/// # Safety
/// Live handles owned by this thread.
unsafe fn io(qp: *mut nvme_qpair, nsid: u32, blocks: u32, buf: *mut nvme_buf, write: bool) -> i32 {
    let seen = Seen::default();
    let arg = (&seen as *const Seen).cast_mut().cast();
    // SAFETY: caller contract; `seen` outlives the request (polled to completion below).
    let rc = unsafe {
        if write {
            nvme_qpair_submit_write(qp, nsid, 0, blocks, buf, 0, Some(record), arg)
        } else {
            nvme_qpair_submit_read(qp, nsid, 0, blocks, buf, Some(record), arg)
        }
    };
    if rc != NVME_OK {
        return rc;
    }
    common::poll_until(qp, &seen, 1)
}

/// The usable namespace ids.
///
/// # Safety
/// `ctrlr` is a live handle.
unsafe fn namespace_ids(ctrlr: *const nvme_ctrlr) -> Vec<u32> {
    let mut ids = [0u32; 8];
    // SAFETY: caller contract; `ids` holds 8.
    let n = unsafe { nvme_ctrlr_namespace_ids(ctrlr, ids.as_mut_ptr(), 8) };
    assert!(n >= 0, "{}", last_error());
    ids[..n as usize].to_vec()
}

#[test]
fn format_attach_and_detach() {
    // SAFETY: every call below is made with live handles owned by this thread.
    unsafe {
        let mut ctrlr = ptr::null_mut();
        assert_eq!(nvme_ctrlr_open_emulated(&mut ctrlr), NVME_OK);
        let mut qp = ptr::null_mut();
        assert_eq!(nvme_qpair_create(ctrlr, 8, 5000, &mut qp), NVME_OK);
        let mut buf = ptr::null_mut();
        assert_eq!(nvme_buf_alloc(ctrlr, 4096, &mut buf), NVME_OK);
        let data = std::slice::from_raw_parts_mut(nvme_buf_ptr(buf).cast::<u8>(), 4096);
        let mut info = nvme_ns_info {
            nsid: 0,
            block_size: 0,
            blocks: 0,
        };

        // Format namespace 1 (512-byte blocks) with LBA format 4: 4 KiB blocks, same bytes.
        assert_eq!(nvme_ctrlr_get_ns_info(ctrlr, 1, &mut info), NVME_OK);
        let (old_block, old_blocks) = (info.block_size, info.blocks);
        assert_eq!(old_block, 512);
        assert_eq!(
            nvme_format(ctrlr, 1, 4, 1, 0, 0),
            NVME_OK,
            "{}",
            last_error()
        );
        assert_eq!(nvme_ctrlr_get_ns_info(ctrlr, 1, &mut info), NVME_OK);
        assert_eq!(info.block_size, 4096);
        assert_eq!(info.blocks * 4096, old_blocks * u64::from(old_block));
        // The pair follows: one 4 KiB block reads (a user data erase left zeros).
        data.fill(0xEE);
        assert_eq!(io(qp, 1, 1, buf, false), NVME_OK, "{}", last_error());
        assert!(data.iter().all(|&b| b == 0), "the format erased the data");

        // Namespace 2: write a pattern, detach it from this controller (count 0).
        for (i, b) in data.iter_mut().enumerate() {
            *b = (i % 251) as u8;
        }
        let pattern = data.to_vec();
        assert_eq!(io(qp, 2, 1, buf, true), NVME_OK, "{}", last_error());
        assert_eq!(namespace_ids(ctrlr), [1, 2]);
        assert_eq!(
            nvme_ns_detach(ctrlr, 2, ptr::null(), 0),
            NVME_OK,
            "{}",
            last_error()
        );
        assert_eq!(namespace_ids(ctrlr), [1]);
        assert_eq!(io(qp, 2, 1, buf, false), NVME_ERR_NAMESPACE);
        // Detached twice: the controller's status.
        assert_eq!(nvme_ns_detach(ctrlr, 2, ptr::null(), 0), NVME_ERR_COMMAND);
        assert!(
            last_error().contains("Namespace Not Attached"),
            "{}",
            last_error()
        );

        // Attached again through an explicit list (CNTLID 0): back, data kept.
        let ids = [0u16];
        assert_eq!(
            nvme_ns_attach(ctrlr, 2, ids.as_ptr(), 1),
            NVME_OK,
            "{}",
            last_error()
        );
        assert_eq!(namespace_ids(ctrlr), [1, 2]);
        data.fill(0);
        assert_eq!(io(qp, 2, 1, buf, false), NVME_OK, "{}", last_error());
        assert_eq!(data, &pattern[..]);
        assert_eq!(nvme_ns_attach(ctrlr, 2, ids.as_ptr(), 1), NVME_ERR_COMMAND);
        assert!(
            last_error().contains("Namespace Already Attached"),
            "{}",
            last_error()
        );
        // A controller not in the subsystem.
        let other = [5u16];
        assert_eq!(
            nvme_ns_detach(ctrlr, 2, other.as_ptr(), 1),
            NVME_ERR_COMMAND
        );
        assert!(
            last_error().contains("Controller List Invalid"),
            "{}",
            last_error()
        );

        // Bad arguments: nothing sent.
        assert_eq!(nvme_format(ctrlr, 1, 0, 3, 0, 0), NVME_ERR_INVALID_ARGUMENT);
        assert!(last_error().contains("ses 3"), "{}", last_error());
        assert_eq!(nvme_format(ctrlr, 1, 0, 0, 4, 0), NVME_ERR_INVALID_ARGUMENT);
        assert_eq!(
            nvme_format(ctrlr, 1, 64, 0, 0, 0),
            NVME_ERR_INVALID_ARGUMENT
        );
        assert_eq!(
            nvme_format(ctrlr, 1, 0, 0, 0, 1 << 7),
            NVME_ERR_INVALID_ARGUMENT
        );
        assert_eq!(nvme_ctrlr_get_ns_info(ctrlr, 1, &mut info), NVME_OK);
        assert_eq!(info.block_size, 4096, "the refused formats changed nothing");
        assert_eq!(
            nvme_ns_attach(ctrlr, 2, ptr::null(), 2),
            NVME_ERR_NULL_POINTER
        );
        assert_eq!(
            nvme_format(ptr::null(), 1, 0, 0, 0, 0),
            NVME_ERR_NULL_POINTER
        );
        assert_eq!(
            nvme_ns_detach(ptr::null(), 1, ptr::null(), 0),
            NVME_ERR_NULL_POINTER
        );
        // An LBA format the namespace does not offer: Invalid Format from the controller.
        assert_eq!(nvme_format(ctrlr, 1, 9, 0, 0, 0), NVME_ERR_COMMAND);
        assert!(last_error().contains("Invalid Format"), "{}", last_error());

        assert_eq!(nvme_buf_free(buf), NVME_OK);
        assert_eq!(nvme_qpair_destroy(qp), NVME_OK);
        assert_eq!(nvme_ctrlr_close(ctrlr), NVME_OK);
    }
}

/// `nvme_fw_download` / `nvme_fw_commit` on the emulator (3 slots, slot 1 read only, FWUG
/// 4 KiB): an image in 8 KiB pieces committed and activated, activation at the next reset,
/// the controller's refusals as `NVME_ERR_COMMAND` with the status named, bad arguments
/// refused before anything is sent.
#[test]
fn firmware_download_and_commit() {
    // SAFETY: every call below is made with live handles owned by this thread.
    unsafe {
        let mut ctrlr = ptr::null_mut();
        assert_eq!(nvme_ctrlr_open_emulated(&mut ctrlr), NVME_OK);
        let image = nvme_sim::sim_firmware_image("7.7", 20 << 10);
        assert_eq!(
            nvme_fw_download(ctrlr, image.as_ptr(), image.len(), 0, 8192),
            NVME_OK,
            "{}",
            last_error()
        );
        let mut outcome = -1;
        assert_eq!(
            nvme_fw_commit(ctrlr, 2, 3, 0, &mut outcome),
            NVME_OK,
            "{}",
            last_error()
        );
        assert_eq!(outcome, NVME_FW_ACTIVATED);
        assert_eq!(nvme_fw_commit(ctrlr, 1, 2, 0, &mut outcome), NVME_OK);
        assert_eq!(outcome, NVME_FW_ACTIVATES_AT_RESET);
        // Outcome pointer optional.
        assert_eq!(nvme_fw_commit(ctrlr, 2, 2, 0, ptr::null_mut()), NVME_OK);

        // The controller's statuses: slot 1 is read only; nothing downloaded to store.
        assert_eq!(
            nvme_fw_download(ctrlr, image.as_ptr(), image.len(), 0, 0),
            NVME_OK
        );
        assert_eq!(
            nvme_fw_commit(ctrlr, 1, 0, 0, &mut outcome),
            NVME_ERR_COMMAND
        );
        assert!(
            last_error().contains("Invalid Firmware Slot"),
            "{}",
            last_error()
        );
        assert_eq!(nvme_fw_commit(ctrlr, 3, 0, 0, &mut outcome), NVME_OK);
        assert_eq!(outcome, NVME_FW_STORED);
        assert_eq!(
            nvme_fw_commit(ctrlr, 3, 1, 0, &mut outcome),
            NVME_ERR_COMMAND
        );
        assert!(
            last_error().contains("Invalid Firmware Image"),
            "{}",
            last_error()
        );

        // Refused before sending: not dwords, off FWUG, reserved action, bpid, NULLs.
        assert_eq!(
            nvme_fw_download(ctrlr, image.as_ptr(), 4094, 0, 0),
            NVME_ERR_INVALID_ARGUMENT
        );
        assert!(
            last_error().contains("not a multiple of 4"),
            "{}",
            last_error()
        );
        assert_eq!(
            nvme_fw_download(ctrlr, image.as_ptr(), 4096, 1024, 0),
            NVME_ERR_INVALID_ARGUMENT
        );
        assert!(last_error().contains("FWUG"), "{}", last_error());
        assert_eq!(
            nvme_fw_commit(ctrlr, 2, 4, 0, &mut outcome),
            NVME_ERR_INVALID_ARGUMENT
        );
        assert_eq!(
            nvme_fw_commit(ctrlr, 2, 6, 2, &mut outcome),
            NVME_ERR_INVALID_ARGUMENT
        );
        assert_eq!(
            nvme_fw_commit(ctrlr, 9, 2, 0, &mut outcome),
            NVME_ERR_INVALID_ARGUMENT
        );
        assert_eq!(
            nvme_fw_download(ctrlr, ptr::null(), 4096, 0, 0),
            NVME_ERR_NULL_POINTER
        );
        assert_eq!(
            nvme_fw_download(ptr::null(), image.as_ptr(), 4096, 0, 0),
            NVME_ERR_NULL_POINTER
        );
        assert_eq!(
            nvme_fw_commit(ptr::null(), 2, 2, 0, &mut outcome),
            NVME_ERR_NULL_POINTER
        );
        nvme_ctrlr_close(ctrlr);
    }
}
