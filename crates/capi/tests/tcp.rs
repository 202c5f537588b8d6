//! The C API over NVMe/TCP, called through its exported functions against the in-process fake
//! target of `nvme-tcp`: `nvme_ctrlr_open` with an SPDK-style transport id, controller and
//! namespace info, buffers, queue pairs, read/write/flush with callbacks (data checked on the
//! target's disk), what the TCP host does not support, and a target that goes away with
//! requests held: every callback runs once with `NVME_ERR_TRANSPORT` and every buffer comes back.

use std::cell::Cell;
use std::ffi::{c_void, CStr, CString};
use std::ptr;
use std::time::{Duration, Instant};

use nvme_tcp::fake::{Config, FakeTarget, Fault};
use nvme_userspace::*;

/// The fake target's namespace with 4096-byte blocks (`Config::default`: nsid 1, 256 blocks).
const NS_4K: u32 = 1;
/// Its namespace with 512-byte blocks (nsid 2, 2048 blocks).
const NS_512: u32 = 2;
const DEADLINE: Duration = Duration::from_secs(20);

fn last_error() -> String {
    // SAFETY: the function returns a valid NUL-terminated string.
    unsafe { CStr::from_ptr(nvme_last_error_message()) }
        .to_string_lossy()
        .into_owned()
}

/// The target's transport id as a C string, as an application would pass it.
fn trid(t: &FakeTarget) -> CString {
    CString::new(format!(
        "trtype:TCP adrfam:IPv4 traddr:{} trsvcid:{} subnqn:{}",
        t.addr.ip(),
        t.addr.port(),
        t.trid().subnqn
    ))
    .unwrap()
}

fn open(t: &FakeTarget) -> *mut nvme_ctrlr {
    let trid = trid(t);
    let mut ctrlr = ptr::null_mut();
    // SAFETY: NUL-terminated string, valid out pointer.
    let rc = unsafe { nvme_ctrlr_open(trid.as_ptr(), &mut ctrlr) };
    assert_eq!(rc, NVME_OK, "{}", last_error());
    ctrlr
}

fn qpair(ctrlr: *mut nvme_ctrlr, depth: u32) -> *mut nvme_qpair {
    let mut qp = ptr::null_mut();
    // SAFETY: open controller, valid out pointer.
    let rc = unsafe { nvme_qpair_create(ctrlr, depth, 5000, &mut qp) };
    assert_eq!(rc, NVME_OK, "{}", last_error());
    qp
}

fn alloc(ctrlr: *mut nvme_ctrlr, len: usize) -> *mut nvme_buf {
    let mut buf = ptr::null_mut();
    // SAFETY: open controller, valid out pointer.
    assert_eq!(unsafe { nvme_buf_alloc(ctrlr, len, &mut buf) }, NVME_OK);
    buf
}

fn bytes<'a>(buf: *mut nvme_buf) -> &'a mut [u8] {
    // SAFETY: a live, idle buffer handle of this test; `len` bytes at `ptr`.
    unsafe { std::slice::from_raw_parts_mut(nvme_buf_ptr(buf).cast(), nvme_buf_len(buf)) }
}

fn pattern(len: usize, seed: u64) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u64).wrapping_mul(29).wrapping_add(seed * 13) as u8)
        .collect()
}

/// What callbacks saw.
#[derive(Default)]
struct Seen {
    calls: Cell<u32>,
    ok: Cell<u32>,
    transport_errors: Cell<u32>,
    other_errors: Cell<u32>,
    bufs_back: Cell<u32>,
}

impl Seen {
    fn arg(&self) -> *mut c_void {
        (self as *const Seen).cast_mut().cast()
    }
}

unsafe extern "C" fn record(arg: *mut c_void, status: *const nvme_cpl_status) {
    // SAFETY: `arg` is the `Seen` the test passed; `status` is valid during the call.
    let (seen, status) = unsafe { (&*arg.cast::<Seen>(), &*status) };
    seen.calls.set(seen.calls.get() + 1);
    match status.error {
        NVME_OK => seen.ok.set(seen.ok.get() + 1),
        NVME_ERR_TRANSPORT => seen.transport_errors.set(seen.transport_errors.get() + 1),
        _ => seen.other_errors.set(seen.other_errors.get() + 1),
    }
    // SAFETY: the request's buffer handle, live in the test.
    if !status.buf.is_null() && !unsafe { nvme_buf_in_flight(status.buf) } {
        seen.bufs_back.set(seen.bufs_back.get() + 1);
    }
}

fn poll_until(qp: *mut nvme_qpair, seen: &Seen, calls: u32) {
    let start = Instant::now();
    while seen.calls.get() < calls {
        // SAFETY: live queue pair owned by this thread.
        let n = unsafe { nvme_qpair_poll(qp, 0) };
        assert!(n >= 0, "{}", last_error());
        assert!(
            start.elapsed() < DEADLINE,
            "hang: {} of {calls} callbacks",
            seen.calls.get()
        );
    }
}

#[test]
fn open_by_transport_id_then_write_flush_read_back() {
    let t = FakeTarget::start(Config::default());
    let ctrlr = open(&t);
    // SAFETY: every call below gets live handles of this test and valid pointers.
    unsafe {
        let mut info: nvme_ctrlr_info = std::mem::zeroed();
        assert_eq!(nvme_ctrlr_get_info(ctrlr, &mut info), NVME_OK);
        assert_eq!(info.num_namespaces, 2);
        assert!(info.io_queue_pairs >= 1);
        assert!(info.max_transfer_bytes >= 4096);
        let mut ids = [0u32; 4];
        assert_eq!(nvme_ctrlr_namespace_ids(ctrlr, ids.as_mut_ptr(), 4), 2);
        assert_eq!(&ids[..2], &[NS_4K, NS_512]);
        let mut ns = nvme_ns_info {
            nsid: 0,
            block_size: 0,
            blocks: 0,
        };
        assert_eq!(nvme_ctrlr_get_ns_info(ctrlr, NS_512, &mut ns), NVME_OK);
        assert_eq!((ns.block_size, ns.blocks), (512, 2048));

        let qp = qpair(ctrlr, 16);
        let seen = Seen::default();
        // Eight writes of two blocks in flight at once.
        let bufs: Vec<*mut nvme_buf> = (0..8).map(|_| alloc(ctrlr, 1024)).collect();
        for (i, &b) in bufs.iter().enumerate() {
            bytes(b)[..1024].copy_from_slice(&pattern(1024, i as u64));
            let rc = nvme_qpair_submit_write(
                qp,
                NS_512,
                10 + 2 * i as u64,
                2,
                b,
                if i % 2 == 0 { NVME_IO_FUA } else { 0 },
                Some(record),
                seen.arg(),
            );
            assert_eq!(rc, NVME_OK, "{}", last_error());
            assert!(nvme_buf_in_flight(b));
        }
        // An in-flight buffer cannot be submitted again, on TCP as on PCIe.
        assert_eq!(
            nvme_qpair_submit_read(qp, NS_512, 0, 2, bufs[0], Some(record), seen.arg()),
            NVME_ERR_BUFFER_IN_FLIGHT
        );
        assert_eq!(nvme_qpair_outstanding(qp), 8);
        poll_until(qp, &seen, 8);
        assert_eq!((seen.ok.get(), seen.bufs_back.get()), (8, 8));
        for i in 0..8u64 {
            assert_eq!(
                t.disk(NS_512, (10 + 2 * i as usize) * 512, 1024),
                pattern(1024, i),
                "write {i} on the target's disk"
            );
        }
        assert_eq!(
            nvme_qpair_submit_flush(qp, NS_512, Some(record), seen.arg()),
            NVME_OK
        );
        poll_until(qp, &seen, 9);
        assert_eq!(seen.ok.get(), 9);
        // Read everything back into zeroed buffers.
        for (i, &b) in bufs.iter().enumerate() {
            bytes(b).fill(0);
            let rc = nvme_qpair_submit_read(
                qp,
                NS_512,
                10 + 2 * i as u64,
                2,
                b,
                Some(record),
                seen.arg(),
            );
            assert_eq!(rc, NVME_OK, "{}", last_error());
        }
        poll_until(qp, &seen, 17);
        assert_eq!(seen.ok.get(), 17);
        for (i, &b) in bufs.iter().enumerate() {
            assert_eq!(&bytes(b)[..1024], &pattern(1024, i as u64)[..], "read {i}");
        }

        // Verify: a typed command with no transport code of its own, over TCP too.
        assert_eq!(
            nvme_qpair_submit_verify(qp, NS_512, 0, 8, Some(record), seen.arg()),
            NVME_OK,
            "{}",
            last_error()
        );
        poll_until(qp, &seen, 18);
        assert_eq!(seen.ok.get(), 18);
        assert_eq!(
            nvme_qpair_submit_verify(qp, NS_512, 2047, 2, Some(record), seen.arg()),
            NVME_ERR_LBA_RANGE
        );

        // Write Zeroes: a typed command over TCP too; block 0 reads back as zeroes.
        assert_eq!(
            nvme_qpair_submit_write_zeroes(qp, NS_512, 0, 1, 0, Some(record), seen.arg()),
            NVME_OK,
            "{}",
            last_error()
        );
        poll_until(qp, &seen, 19);
        assert_eq!(
            nvme_qpair_submit_read(qp, NS_512, 0, 1, bufs[0], Some(record), seen.arg()),
            NVME_OK
        );
        poll_until(qp, &seen, 20);
        assert_eq!(seen.ok.get(), 20);
        assert!(bytes(bufs[0])[..512].iter().all(|&b| b == 0));

        // What the NVMe/TCP host does not send is refused up front, with a message.
        let range = nvme_lba_range { lba: 0, blocks: 1 };
        assert_eq!(
            nvme_qpair_submit_deallocate(qp, NS_512, &range, 1, Some(record), seen.arg()),
            NVME_ERR_UNSUPPORTED
        );
        // Out-of-range I/O is refused before the wire.
        assert_eq!(
            nvme_qpair_submit_read(qp, NS_512, 2048, 1, bufs[0], Some(record), seen.arg()),
            NVME_ERR_LBA_RANGE
        );
        assert!(!nvme_buf_in_flight(bufs[0]));
        assert_eq!(nvme_qpair_outstanding(qp), 0);

        for b in bufs {
            assert_eq!(nvme_buf_free(b), NVME_OK);
        }
        assert_eq!(nvme_qpair_destroy(qp), NVME_OK);
        assert_eq!(nvme_ctrlr_close(ctrlr), NVME_OK);
    }
}

#[test]
fn a_dropped_connection_completes_every_request_with_a_transport_error() {
    let t = FakeTarget::start(Config::default());
    let ctrlr = open(&t);
    let qp = qpair(ctrlr, 32);
    let seen = Seen::default();
    // SAFETY: live handles of this test, valid pointers.
    unsafe {
        let bufs: Vec<*mut nvme_buf> = (0..12).map(|_| alloc(ctrlr, 4096)).collect();
        // Four reads answered, then eight the target holds (never answers) ...
        for (i, &b) in bufs.iter().enumerate() {
            if i == 4 {
                poll_until(qp, &seen, 4);
                t.set_fault(Fault::Hold);
            }
            let rc = nvme_qpair_submit_read(qp, NS_4K, i as u64, 1, b, Some(record), seen.arg());
            assert_eq!(rc, NVME_OK, "{}", last_error());
        }
        assert_eq!(seen.ok.get(), 4);
        assert_eq!(nvme_qpair_outstanding(qp), 8);
        for _ in 0..100 {
            assert_eq!(nvme_qpair_poll(qp, 0), 0, "held reads do not complete");
        }
        // ... until the target goes away and closes every connection.
        t.stop();
        poll_until(qp, &seen, 12);
        assert_eq!(seen.calls.get(), 12, "each callback exactly once");
        assert_eq!(
            seen.transport_errors.get(),
            8,
            "the held reads fail with the connection"
        );
        assert_eq!(seen.other_errors.get(), 0);
        assert_eq!(seen.bufs_back.get(), 12, "every buffer handed back");
        assert_eq!(nvme_qpair_outstanding(qp), 0);
        // The closed queue refuses new requests with the same code; the buffer stays idle.
        let rc = nvme_qpair_submit_read(qp, NS_4K, 0, 1, bufs[0], Some(record), seen.arg());
        assert_eq!(rc, NVME_ERR_TRANSPORT, "{}", last_error());
        assert!(
            last_error().contains("closed the connection"),
            "{}",
            last_error()
        );
        assert!(!nvme_buf_in_flight(bufs[0]));
        assert_eq!(seen.calls.get(), 12, "no callback for a refused submission");
        for b in bufs {
            assert_eq!(nvme_buf_free(b), NVME_OK);
        }
        assert_eq!(nvme_qpair_destroy(qp), NVME_OK);
        assert_eq!(nvme_ctrlr_close(ctrlr), NVME_OK);
    }
}

#[test]
fn bad_transport_ids_are_clear_errors() {
    let t = FakeTarget::start(Config::default());
    let mut ctrlr = ptr::null_mut();
    let cases = [
        (
            format!(
                "trtype:TCP traddr:{} trsvcid:{}",
                t.addr.ip(),
                t.addr.port()
            ),
            NVME_ERR_INVALID_ARGUMENT,
            "discovery",
        ),
        (
            "trtype:TCP subnqn:nqn.x".to_string(),
            NVME_ERR_INVALID_ARGUMENT,
            "traddr",
        ),
        (
            format!(
                "trtype:TCP traddr:{} trsvcid:{} subnqn:nqn.2026-01.test:nope",
                t.addr.ip(),
                t.addr.port()
            ),
            NVME_ERR_TRANSPORT,
            "nqn.2026-01.test:nope",
        ),
        // The emulator is opened by function (nvme_ctrlr_open_emulated), never by name.
        (
            "sim".to_string(),
            NVME_ERR_INVALID_ARGUMENT,
            "nvme_ctrlr_open_emulated",
        ),
        (
            "trtype:RDMA traddr:1.2.3.4".to_string(),
            NVME_ERR_INVALID_ARGUMENT,
            "RDMA",
        ),
    ];
    for (trid, code, needle) in cases {
        let c = CString::new(trid.clone()).unwrap();
        // SAFETY: NUL-terminated string, valid out pointer.
        let rc = unsafe { nvme_ctrlr_open(c.as_ptr(), &mut ctrlr) };
        assert_eq!(rc, code, "{trid}: {}", last_error());
        assert!(last_error().contains(needle), "{trid}: {}", last_error());
    }
    // An NVMe/TCP controller has no IOMMU context to join.
    let mut ctx = ptr::null_mut();
    // SAFETY: valid out pointers; the context is freed below.
    unsafe {
        assert_eq!(nvme_dma_context_create_emulated(&mut ctx), NVME_OK);
        let c = trid(&t);
        assert_eq!(
            nvme_ctrlr_open_in(ctx, c.as_ptr(), &mut ctrlr),
            NVME_ERR_INVALID_ARGUMENT
        );
        assert!(last_error().contains("nvme_ctrlr_open"), "{}", last_error());
        assert_eq!(nvme_dma_context_free(ctx), NVME_OK);
    }
}

/// The fake target with MDTS 1: at most 8 KiB (two 4 KiB pages) per command.
fn small_mdts_target() -> FakeTarget {
    FakeTarget::start(Config {
        mdts: 1,
        ..Config::default()
    })
}

const SMALL_MDTS_BYTES: usize = 8192;

#[test]
fn transfers_larger_than_mdts_are_split_and_complete_once() {
    let t = small_mdts_target();
    let ctrlr = open(&t);
    let qp = qpair(ctrlr, 16);
    let seen = Seen::default();
    // SAFETY: live handles of this test, valid pointers.
    unsafe {
        let mut info: nvme_ctrlr_info = std::mem::zeroed();
        assert_eq!(nvme_ctrlr_get_info(ctrlr, &mut info), NVME_OK);
        assert_eq!(info.max_transfer_bytes, SMALL_MDTS_BYTES as u64);
        let mut calls = 0;
        // 64 KiB = 8 commands (4 KiB blocks), and 60.5 KiB = 7 full commands and a short
        // one (512-byte blocks): the last piece of a split need not be whole.
        for (nsid, block, blocks, lba) in [(NS_4K, 4096, 16u32, 3u64), (NS_512, 512, 121, 7)] {
            let len = block * blocks as usize;
            let buf = alloc(ctrlr, len);
            let data = pattern(len, u64::from(nsid));
            bytes(buf)[..len].copy_from_slice(&data);
            let rc =
                nvme_qpair_submit_write(qp, nsid, lba, blocks, buf, 0, Some(record), seen.arg());
            assert_eq!(rc, NVME_OK, "write nsid {nsid}: {}", last_error());
            assert_eq!(
                nvme_qpair_outstanding(qp),
                1,
                "one request, however many commands"
            );
            calls += 1;
            poll_until(qp, &seen, calls);
            assert_eq!((seen.ok.get(), seen.bufs_back.get()), (calls, calls));
            assert_eq!(
                t.disk(nsid, lba as usize * block, len),
                data,
                "nsid {nsid} on disk"
            );
            bytes(buf).fill(0);
            let rc = nvme_qpair_submit_read(qp, nsid, lba, blocks, buf, Some(record), seen.arg());
            assert_eq!(rc, NVME_OK, "read nsid {nsid}: {}", last_error());
            calls += 1;
            poll_until(qp, &seen, calls);
            assert_eq!((seen.ok.get(), seen.bufs_back.get()), (calls, calls));
            assert_eq!(&bytes(buf)[..len], &data[..], "nsid {nsid} read back");
            assert_eq!(nvme_qpair_outstanding(qp), 0);
            assert_eq!(nvme_buf_free(buf), NVME_OK);
        }
        assert_eq!(seen.calls.get(), calls, "one callback per request");
        assert_eq!(
            t.counters()
                .over_mdts
                .load(std::sync::atomic::Ordering::Relaxed),
            0,
            "no command on the wire exceeded MDTS"
        );

        // More commands than the pair has slots at all (1 MiB = 128 > 15): refused, idle.
        let whole = alloc(ctrlr, 256 * 4096);
        let rc = nvme_qpair_submit_read(qp, NS_4K, 0, 256, whole, Some(record), seen.arg());
        assert_eq!(rc, NVME_ERR_TOO_LARGE, "{}", last_error());
        assert!(!nvme_buf_in_flight(whole));
        // More than are free now: queue full, nothing sent, buffer idle.
        let small: Vec<*mut nvme_buf> = (0..10).map(|_| alloc(ctrlr, 4096)).collect();
        for (i, &b) in small.iter().enumerate() {
            let rc = nvme_qpair_submit_read(qp, NS_4K, i as u64, 1, b, Some(record), seen.arg());
            assert_eq!(rc, NVME_OK, "{}", last_error());
        }
        let rc = nvme_qpair_submit_read(qp, NS_4K, 0, 16, whole, Some(record), seen.arg());
        assert_eq!(rc, NVME_ERR_QUEUE_FULL, "{}", last_error());
        assert!(!nvme_buf_in_flight(whole));
        assert_eq!(nvme_qpair_outstanding(qp), 10);
        poll_until(qp, &seen, calls + 10);
        for b in small {
            assert_eq!(nvme_buf_free(b), NVME_OK);
        }
        assert_eq!(nvme_buf_free(whole), NVME_OK);
        assert_eq!(nvme_qpair_destroy(qp), NVME_OK);
        assert_eq!(nvme_ctrlr_close(ctrlr), NVME_OK);
    }
}

#[test]
fn a_split_transfer_that_fails_part_way_completes_once_with_the_error_and_its_buffer() {
    let t = small_mdts_target();
    let ctrlr = open(&t);
    let qp = qpair(ctrlr, 16);
    let seen = Seen::default();
    // SAFETY: live handles of this test, valid pointers.
    unsafe {
        // Warm-up read, then the target holds every command: the split read's pieces are
        // all in flight when the connection drops.
        let buf = alloc(ctrlr, 64 * 1024);
        let rc = nvme_qpair_submit_read(qp, NS_4K, 0, 16, buf, Some(record), seen.arg());
        assert_eq!(rc, NVME_OK, "{}", last_error());
        poll_until(qp, &seen, 1);
        t.set_fault(Fault::Hold);
        let rc = nvme_qpair_submit_read(qp, NS_4K, 0, 16, buf, Some(record), seen.arg());
        assert_eq!(rc, NVME_OK, "{}", last_error());
        for _ in 0..100 {
            assert_eq!(nvme_qpair_poll(qp, 0), 0, "held pieces do not complete");
        }
        assert!(nvme_buf_in_flight(buf));
        t.stop();
        poll_until(qp, &seen, 2);
        // Give stray piece completions a chance to show up as extra callbacks.
        for _ in 0..100 {
            assert!(nvme_qpair_poll(qp, 0) >= 0);
        }
        assert_eq!(seen.calls.get(), 2, "one callback for the eight commands");
        assert_eq!(seen.transport_errors.get(), 1);
        assert_eq!(seen.bufs_back.get(), 2, "the whole buffer handed back");
        assert_eq!(nvme_buf_len(buf), 64 * 1024);
        assert_eq!(nvme_qpair_outstanding(qp), 0);
        assert_eq!(nvme_buf_free(buf), NVME_OK);
        assert_eq!(nvme_qpair_destroy(qp), NVME_OK);
        assert_eq!(nvme_ctrlr_close(ctrlr), NVME_OK);
    }
}

/// Waits until the target has received `n` I/O commands.
fn wait_for_commands(t: &FakeTarget, n: u64) {
    let start = Instant::now();
    while t
        .counters()
        .io_commands
        .load(std::sync::atomic::Ordering::Relaxed)
        < n
    {
        assert!(
            start.elapsed() < DEADLINE,
            "the target did not get {n} commands"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn destroy_hands_back_answered_buffers_and_detaches_held_ones() {
    let t = FakeTarget::start(Config::default());
    let ctrlr = open(&t);
    let qp = qpair(ctrlr, 16);
    let seen = Seen::default();
    // SAFETY: live handles of this test, valid pointers; the buffers outlive the pair.
    unsafe {
        let bufs: Vec<*mut nvme_buf> = (0..4).map(|_| alloc(ctrlr, 4096)).collect();
        // Two reads the target answers (never polled here), two it holds.
        for (i, &b) in bufs.iter().enumerate() {
            if i == 2 {
                wait_for_commands(&t, 2);
                t.set_fault(Fault::Hold);
            }
            let rc = nvme_qpair_submit_read(qp, NS_4K, i as u64, 1, b, Some(record), seen.arg());
            assert_eq!(rc, NVME_OK, "{}", last_error());
        }
        // The third command was read after the second was answered (one connection, in order).
        wait_for_commands(&t, 4);
        let start = Instant::now();
        assert_eq!(nvme_qpair_destroy(qp), NVME_OK);
        let took = start.elapsed();
        assert!(took < Duration::from_secs(5), "destroy took {took:?}");
        assert_eq!(seen.calls.get(), 0, "destroy calls no callback");
        assert!(
            !nvme_buf_in_flight(bufs[0]) && !nvme_buf_in_flight(bufs[1]),
            "answered: idle"
        );
        assert!(
            nvme_buf_in_flight(bufs[2]) && nvme_buf_in_flight(bufs[3]),
            "held: detached"
        );
        // A detached buffer cannot be submitted again, only freed.
        let qp = qpair(ctrlr, 16);
        let rc = nvme_qpair_submit_read(qp, NS_4K, 0, 1, bufs[2], Some(record), seen.arg());
        assert_eq!(rc, NVME_ERR_BUFFER_IN_FLIGHT);
        t.set_fault(Fault::None);
        let rc = nvme_qpair_submit_read(qp, NS_4K, 0, 1, bufs[0], Some(record), seen.arg());
        assert_eq!(rc, NVME_OK, "{}", last_error());
        poll_until(qp, &seen, 1);
        assert_eq!(seen.ok.get(), 1);
        for b in bufs {
            assert_eq!(nvme_buf_free(b), NVME_OK);
        }
        assert_eq!(nvme_qpair_destroy(qp), NVME_OK);
        assert_eq!(nvme_ctrlr_close(ctrlr), NVME_OK);
    }
}

/// `nvme_qpair_submit_writev` / `_readv` over NVMe/TCP: the pieces go on the wire in order
/// (the target's disk holds their concatenation), and a read scatters the blocks back into
/// pieces of another shape.
#[test]
fn vectored_write_and_read_over_tcp() {
    let t = FakeTarget::start(Config::default());
    let ctrlr = open(&t);
    let qp = qpair(ctrlr, 8);
    let bufs: Vec<_> = (0..4).map(|_| alloc(ctrlr, 8192)).collect();
    let w = [
        nvme_iov_piece {
            buf: bufs[0],
            offset: 100,
            len: 1000,
        },
        nvme_iov_piece {
            buf: bufs[1],
            offset: 4,
            len: 8192 - 4,
        },
        nvme_iov_piece {
            buf: bufs[2],
            offset: 0,
            len: 3 * 4096 - 1000 - 8188,
        },
    ];
    let data = pattern(3 * 4096, 21);
    let mut at = 0;
    for p in &w {
        bytes(p.buf)[p.offset..p.offset + p.len].copy_from_slice(&data[at..at + p.len]);
        at += p.len;
    }
    let seen = Seen::default();
    // SAFETY: live handles of this thread; `seen` outlives the poll.
    let rc =
        unsafe { nvme_qpair_submit_writev(qp, 1, 10, w.as_ptr(), 3, 0, Some(record), seen.arg()) };
    assert_eq!(rc, NVME_OK, "{}", last_error());
    poll_until(qp, &seen, 1);
    assert_eq!(seen.ok.get(), 1);
    assert_eq!(t.disk(1, 10 * 4096, 3 * 4096), data);
    let r = [
        nvme_iov_piece {
            buf: bufs[3],
            offset: 8,
            len: 8192 - 8,
        },
        nvme_iov_piece {
            buf: bufs[0],
            offset: 0,
            len: 3 * 4096 - (8192 - 8),
        },
    ];
    let seen = Seen::default();
    // SAFETY: as above.
    let rc = unsafe { nvme_qpair_submit_readv(qp, 1, 10, r.as_ptr(), 2, Some(record), seen.arg()) };
    assert_eq!(rc, NVME_OK, "{}", last_error());
    poll_until(qp, &seen, 1);
    assert_eq!(seen.ok.get(), 1);
    let mut got = bytes(bufs[3])[8..].to_vec();
    got.extend_from_slice(&bytes(bufs[0])[..r[1].len]);
    assert_eq!(got, data);
    // SAFETY: idle handles of this test, released once.
    unsafe {
        assert_eq!(nvme_qpair_destroy(qp), NVME_OK);
        for b in bufs {
            assert_eq!(nvme_buf_free(b), NVME_OK);
        }
        assert_eq!(nvme_ctrlr_close(ctrlr), NVME_OK);
    }
}
