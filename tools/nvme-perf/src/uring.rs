//! The io_uring engine: the kernel's block layer on a block device, as fio's t/io_uring drives
//! it: O_DIRECT, registered (fixed) buffers and a registered file, optional IOPOLL and SQPOLL.
//!
//! Batching mirrors the spdk-like engine: up to `--submit-batch` SQEs per `io_uring_enter`
//! (the kernel's counterpart of one doorbell write), and up to `--complete-batch` CQEs per reap
//! pass. When a pass finds nothing and no more I/O can be submitted, the thread waits in
//! `io_uring_enter(GETEVENTS, min_complete = 1)` (which polls the device with `--iopoll`).
//!
//! INVARIANT: buffer `i` is registered with the ring as fixed buffer `i`, and it is referenced
//! by at most one in-flight SQE: indices move from `free` into an SQE and come back only with
//! that SQE's CQE. The ring and its buffers live in one `FixedIo`, whose `Drop` waits for
//! every SQE in flight, drops the ring, and only then frees the buffers (or leaks them, when
//! the wait fails): no exit path, error or not, can free memory the kernel may still write.

use nvme_driver::NanoClock;
use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::fs::{File, OpenOptions};
use std::io::{Seek, SeekFrom};
use std::mem::ManuallyDrop;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;
use std::ptr::NonNull;

use io_uring::{opcode, types, IoUring};

use crate::args::Config;
use crate::control::{Control, Live, Pacer, Step, Tally, WorkerResult};
use crate::error::PerfError;
use crate::rng::LbaGen;
use crate::runner::{self, Geometry, Setup};
use crate::target::Target;
use crate::verify::{self, Check, NoCheck, Verifier};

/// Alignment of the I/O buffers (O_DIRECT needs the logical block size; a page covers all).
const BUFFER_ALIGN: usize = 4096;
/// LBA size assumed for a regular file.
const FILE_LBA_SIZE: u32 = 512;
/// Idle time after which the SQPOLL kernel thread sleeps, in ms.
const SQPOLL_IDLE_MS: u32 = 2000;
/// Index of the device in the ring's registered file table.
const FIXED_FILE: types::Fixed = types::Fixed(0);

/// `count` zeroed buffers of `len` bytes, each aligned to [`BUFFER_ALIGN`].
struct AlignedBuffers {
    ptrs: Vec<NonNull<u8>>,
    layout: Layout,
}

// SAFETY: the buffers are plain heap memory owned by this value; moving it to another thread
// moves that ownership (nothing is thread-affine).
unsafe impl Send for AlignedBuffers {}

impl AlignedBuffers {
    fn new(count: usize, len: usize) -> Result<Self, PerfError> {
        let layout =
            Layout::from_size_align(len, BUFFER_ALIGN).map_err(|_| PerfError::InvalidOption {
                option: "block size (-b)",
                value: len.to_string(),
                reason: "too large for an aligned allocation".into(),
            })?;
        let mut ptrs = Vec::with_capacity(count);
        for _ in 0..count {
            // SAFETY: `layout` has a non-zero size (the block size is validated > 0).
            let p = unsafe { alloc_zeroed(layout) };
            match NonNull::new(p) {
                Some(p) => ptrs.push(p),
                None => std::alloc::handle_alloc_error(layout),
            }
        }
        Ok(Self { ptrs, layout })
    }

    /// Buffer `i`'s bytes.
    ///
    /// # Safety
    /// No I/O in flight references buffer `i` (its index is free, or its CQE was just reaped).
    unsafe fn slice(&self, i: usize) -> &[u8] {
        // SAFETY: `ptrs[i]` is a live allocation of `layout.size()` initialised (zeroed)
        // bytes; by the caller's guarantee the kernel does not write it meanwhile.
        unsafe { std::slice::from_raw_parts(self.ptrs[i].as_ptr(), self.layout.size()) }
    }

    /// Buffer `i`'s bytes, to fill.
    ///
    /// # Safety
    /// As [`AlignedBuffers::slice`].
    unsafe fn slice_mut(&mut self, i: usize) -> &mut [u8] {
        // SAFETY: as in `slice`; `&mut self` makes this the only reference from this side.
        unsafe { std::slice::from_raw_parts_mut(self.ptrs[i].as_ptr(), self.layout.size()) }
    }

    fn iovecs(&self) -> Vec<libc::iovec> {
        self.ptrs
            .iter()
            .map(|p| libc::iovec {
                iov_base: p.as_ptr().cast(),
                iov_len: self.layout.size(),
            })
            .collect()
    }
}

impl Drop for AlignedBuffers {
    fn drop(&mut self) {
        for p in &self.ptrs {
            // SAFETY: allocated in `new` with `self.layout`, freed once here.
            unsafe { dealloc(p.as_ptr(), self.layout) };
        }
    }
}

/// What tearing down a ring needs from it.
trait Quiesce {
    /// Waits until `in_flight` more completions have arrived (submitting whatever still sits in
    /// the submission queue); false when waiting failed, so requests may still be in flight.
    fn quiesce(&mut self, in_flight: u32) -> bool;
}

impl Quiesce for IoUring {
    fn quiesce(&mut self, mut in_flight: u32) -> bool {
        while in_flight > 0 {
            match self.submit_and_wait(1) {
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    log::error!("io_uring: waiting for {in_flight} requests in flight failed: {e}");
                    return false;
                }
            }
            let reaped = self.completion().count();
            in_flight = in_flight.saturating_sub(u32::try_from(reaped).unwrap_or(u32::MAX));
        }
        true
    }
}

/// A ring and the buffers registered with it, owned together so that the buffers can never be
/// freed while the kernel may still write them.
///
/// `Drop` (below) is the only way the two are released: because this type implements `Drop`,
/// its fields cannot be moved out (E0509), so no caller can split them and drop the buffers
/// first, as destructuring a plain struct into locals did (locals drop in reverse order). On
/// drop it waits for the `in_flight` requests, drops the ring, then frees the buffers; if the
/// wait fails it leaks the buffers rather than free memory under in-flight DMA.
struct FixedIo<R: Quiesce = IoUring, B = AlignedBuffers> {
    ring: ManuallyDrop<R>,
    buffers: ManuallyDrop<B>,
    /// SQEs pushed to the ring whose CQE has not been reaped yet (submitted or not).
    in_flight: u32,
}

impl<R: Quiesce, B> FixedIo<R, B> {
    fn new(ring: R, buffers: B) -> Self {
        Self {
            ring: ManuallyDrop::new(ring),
            buffers: ManuallyDrop::new(buffers),
            in_flight: 0,
        }
    }
}

impl<R: Quiesce, B> Drop for FixedIo<R, B> {
    fn drop(&mut self) {
        let quiet = self.in_flight == 0 || self.ring.quiesce(self.in_flight);
        // SAFETY: each field is dropped at most once, here, and never used afterwards (this
        // is the end of `self`).
        unsafe { ManuallyDrop::drop(&mut self.ring) };
        if quiet {
            // SAFETY: as above; nothing in flight references the buffers any more.
            unsafe { ManuallyDrop::drop(&mut self.buffers) };
        } else {
            log::error!(
                "io_uring: {} requests may still be in flight; leaking their buffers instead of \
                 freeing memory the kernel may write",
                self.in_flight
            );
        }
    }
}

/// One thread's ring with its buffers, and its I/O generator.
struct Worker {
    io: FixedIo,
    gen: LbaGen,
    /// With `--verify`: this thread's verification state.
    verifier: Option<Verifier>,
}

fn uring_error(what: &'static str, hint: &'static str) -> impl FnOnce(std::io::Error) -> PerfError {
    move |source| PerfError::Uring { what, hint, source }
}

/// Opens the device with O_DIRECT and finds its LBA size and size in bytes.
fn open_device(path: &Path, write: bool) -> Result<(File, u32, u64), PerfError> {
    let io = |what| {
        move |source| PerfError::Io {
            what,
            path: path.to_path_buf(),
            source,
        }
    };
    let mut file = OpenOptions::new()
        .read(true)
        .write(write)
        .custom_flags(libc::O_DIRECT)
        .open(path)
        .map_err(io(
            "cannot open with O_DIRECT (check that it exists and that you may open it)",
        ))?;
    let meta = file.metadata().map_err(io("cannot stat"))?;
    let lba_size = if meta.file_type().is_block_device() {
        let mut size: libc::c_int = 0;
        // SAFETY: BLKSSZGET writes one int to the pointer, which points at `size`.
        let rc = unsafe { libc::ioctl(file.as_raw_fd(), libc::BLKSSZGET, &mut size) };
        if rc != 0 || size <= 0 {
            return Err(io("cannot read the logical block size (BLKSSZGET)")(
                std::io::Error::last_os_error(),
            ));
        }
        size as u32
    } else if meta.file_type().is_file() {
        FILE_LBA_SIZE
    } else {
        return Err(io("give a block device (or a regular file)")(
            std::io::Error::from(std::io::ErrorKind::InvalidInput),
        ));
    };
    let bytes = file
        .seek(SeekFrom::End(0))
        .map_err(io("cannot find the size"))?;
    Ok((file, lba_size, bytes))
}

/// Runs the benchmark through io_uring.
pub fn run(config: &Config) -> Result<runner::Outcome, PerfError> {
    let Target::Path(path) = &config.target else {
        unreachable!("Args::validate sends only paths to the io_uring engine");
    };
    let (file, lba_size, bytes) = open_device(path, config.mix.writes())?;
    let geometry = Geometry::new(config, 0, lba_size, bytes / u64::from(lba_size))?;
    if config.verify {
        verify::check_span(config, &geometry)?;
    }
    let run_id = verify::run_id(config.seed);
    let entries = config.queue_depth.next_power_of_two();
    let mut workers = Vec::with_capacity(config.threads as usize);
    for t in 0..config.threads as usize {
        let mut builder = IoUring::builder();
        if config.iopoll {
            builder.setup_iopoll();
        }
        if config.sqpoll {
            builder.setup_sqpoll(SQPOLL_IDLE_MS);
        }
        let ring = builder.build(entries).map_err(uring_error(
            "setup",
            " (SQPOLL may need CAP_SYS_NICE on older kernels; a large -q may exceed \
             RLIMIT_MEMLOCK)",
        ))?;
        let buffers = AlignedBuffers::new(config.queue_depth as usize, config.block_size)?;
        // Owned together from here on, so every exit below drops the ring first.
        let io = FixedIo::new(ring, buffers);
        let iovecs = io.buffers.iovecs();
        // SAFETY: every iovec points at a live allocation of `io.buffers`, which `FixedIo`
        // frees only after the ring is dropped.
        unsafe { io.ring.submitter().register_buffers(&iovecs) }.map_err(uring_error(
            "register_buffers",
            " (raise RLIMIT_MEMLOCK, e.g. `ulimit -l unlimited`, or lower -q/-b)",
        ))?;
        io.ring
            .submitter()
            .register_files(&[file.as_raw_fd()])
            .map_err(uring_error("register_files", ""))?;
        workers.push(Worker {
            io,
            gen: geometry.generator(config, t),
            verifier: config
                .verify
                .then(|| Verifier::new(config, &geometry, t, run_id, None)),
        });
    }
    let setup = Setup {
        device: path.display().to_string(),
        lba_size,
        nsid: None,
        shadow_doorbells: None,
        sgl: None,
    };
    let results = runner::drive(config, workers, |mut w, control, live| {
        match w.verifier.take() {
            Some(v) => run_worker(config, lba_size, w, control, live, v),
            None => run_worker(config, lba_size, w, control, live, NoCheck),
        }
    })?;
    drop(file);
    Ok(runner::Outcome { setup, results })
}

/// One thread's loop. `check` is [`NoCheck`] (compiled away) or the `--verify` state.
fn run_worker<C: Check>(
    config: &Config,
    lba_size: u32,
    worker: Worker,
    control: &Control,
    live: &Live,
    mut check: C,
) -> Result<WorkerResult, PerfError> {
    // `io` cannot be split (see FixedIo): its ring and buffers are only borrowed below, and
    // whatever way this function returns, dropping `io` waits for `io.in_flight` requests.
    let Worker {
        mut io, mut gen, ..
    } = worker;
    let qd = config.queue_depth;
    let len = config.block_size as u32;
    let reap_max = config.complete_batch as usize;
    let expect = Expect {
        len,
        iopoll: config.iopoll,
        timed: config.latency,
    };
    let clock = NanoClock::new();
    let mut slots = Slots::new(qd);
    let mut tally = Tally::new();
    let mut pacer = Pacer::new(control, live, config.ios);
    loop {
        let in_flight = io.in_flight;
        // Measuring restarts the counters; nothing else to snapshot for this engine.
        let _: Step = pacer.step(&mut tally);
        if pacer.finished(in_flight, &tally) {
            break;
        }
        let want = pacer.allowance((qd - in_flight).min(config.submit_batch), &tally);
        if want > 0 {
            let now = clock.now_ns();
            let mut queued = 0;
            {
                let mut sq = io.ring.submission();
                for _ in 0..want {
                    let Some(index) = slots.free.pop() else { break };
                    let i = index as usize;
                    let (lba, is_write) = check.next_io(&mut gen);
                    slots.submitted_at[i] = now;
                    slots.lbas[i] = lba;
                    slots.writes[i] = is_write;
                    // SAFETY: index `i` came from `free`: no I/O references buffer `i`.
                    check.prepare(index, lba, is_write, unsafe { io.buffers.slice_mut(i) });
                    let buf = io.buffers.ptrs[i].as_ptr();
                    let offset = lba * u64::from(lba_size);
                    let entry = if is_write {
                        opcode::WriteFixed::new(FIXED_FILE, buf, len, index as u16)
                            .offset(offset)
                            .build()
                    } else {
                        opcode::ReadFixed::new(FIXED_FILE, buf, len, index as u16)
                            .offset(offset)
                            .build()
                    }
                    .user_data(u64::from(index));
                    // SAFETY: buffer `index` stays allocated and untouched until this entry's
                    // completion returns the index to `free` (module INVARIANT).
                    if unsafe { sq.push(&entry) }.is_err() {
                        check.refused(index);
                        slots.free.push(index);
                        break;
                    }
                    queued += 1;
                }
            }
            // Counted before submitting: pushed SQEs belong to the kernel even if the submit
            // fails (SQPOLL may pick them up), so the drop of `io` waits for them too.
            io.in_flight += queued;
            io.ring.submit().map_err(uring_error("submit", ""))?;
            tally.submitted += u64::from(queued);
            tally.submit_calls += 1;
        }
        let mut reaped = reap(&mut io.ring, &clock, reap_max, |user_data, res, now| {
            if let Some(ok) = slots.complete(&mut tally, user_data, res, now, expect) {
                let i = user_data as usize;
                // SAFETY: this CQE completed the only I/O on buffer `i` (module INVARIANT).
                check.completed(i as u32, ok, Some(unsafe { io.buffers.slice(i) }));
            }
        });
        if reaped == 0 && io.in_flight > 0 {
            let can_submit =
                pacer.allowance((qd - io.in_flight).min(config.submit_batch), &tally) > 0;
            if !can_submit || config.iopoll {
                io.ring
                    .submit_and_wait(1)
                    .map_err(uring_error("wait for completions", ""))?;
                reaped = reap(&mut io.ring, &clock, reap_max, |user_data, res, now| {
                    if let Some(ok) = slots.complete(&mut tally, user_data, res, now, expect) {
                        let i = user_data as usize;
                        // SAFETY: this CQE completed the only I/O on buffer `i`.
                        check.completed(i as u32, ok, Some(unsafe { io.buffers.slice(i) }));
                    }
                });
            }
        }
        if reaped > 0 {
            io.in_flight = io.in_flight.saturating_sub(reaped);
            tally.reap_calls += 1;
        }
        pacer.publish(&tally);
    }
    pacer.publish_final(&tally);
    let (elapsed, cpu) = pacer.measured();
    let verify = match check.verifier() {
        Some(v) => {
            // After a failed I/O the device may not answer: no read-back then (the run fails).
            if tally.errors == 0 && io.in_flight == 0 {
                final_pass(&mut io, lba_size, len, v, &mut tally)?;
            }
            Some(v.stats.clone())
        }
        None => None,
    };
    drop(io);
    tally.finish();
    Ok(WorkerResult {
        tally,
        elapsed,
        cpu,
        driver: None,
        verify,
        recovery: None,
        tcp: None,
    })
}

/// `--verify`'s read-back: reads every position of the thread's slice that holds an
/// acknowledged write, up to one read per buffer in flight, and checks it. Outside the
/// measured phase.
fn final_pass(
    io: &mut FixedIo<IoUring, AlignedBuffers>,
    lba_size: u32,
    len: u32,
    v: &mut Verifier,
    tally: &mut Tally,
) -> Result<(), PerfError> {
    v.begin_final_pass();
    let mut free: Vec<u32> = (0..io.buffers.ptrs.len() as u32).rev().collect();
    let mut lbas = vec![0u64; io.buffers.ptrs.len()];
    let (mut next, total) = (0, v.positions());
    loop {
        let mut queued = 0;
        {
            let mut sq = io.ring.submission();
            while next < total && !free.is_empty() && !sq.is_full() {
                let Some(lba) = v.written(next) else {
                    next += 1;
                    continue;
                };
                next += 1;
                let Some(index) = free.pop() else { break };
                let i = index as usize;
                v.prepare_final_read(index, lba);
                lbas[i] = lba;
                let entry = opcode::ReadFixed::new(
                    FIXED_FILE,
                    io.buffers.ptrs[i].as_ptr(),
                    len,
                    index as u16,
                )
                .offset(lba * u64::from(lba_size))
                .build()
                .user_data(u64::from(index));
                // SAFETY: buffer `index` stays allocated and untouched until this entry's
                // completion returns the index to `free` (module INVARIANT).
                if unsafe { sq.push(&entry) }.is_err() {
                    free.push(index);
                    next -= 1;
                    break;
                }
                queued += 1;
            }
        }
        io.in_flight += queued;
        if io.in_flight == 0 {
            return Ok(());
        }
        io.ring
            .submit_and_wait(1)
            .map_err(uring_error("wait for the verify read-back", ""))?;
        let buffers = &io.buffers;
        let reaped = reap(
            &mut io.ring,
            &NanoClock::from_instant(),
            usize::MAX,
            |user_data, res, _| {
                let i = user_data as usize;
                if i >= lbas.len() {
                    tally.fail(|| format!("completion with unknown user data {user_data}"));
                    return;
                }
                let ok = res == len as i32;
                if !ok {
                    tally.fail(|| {
                        format!(
                            "verify: read back: {}",
                            describe_failure(res, len, false, lbas[i], false)
                        )
                    });
                }
                // SAFETY: this CQE completed the only read into buffer `i`.
                v.completed(i as u32, ok, Some(unsafe { buffers.slice(i) }));
                free.push(i as u32);
            },
        );
        io.in_flight = io.in_flight.saturating_sub(reaped);
        if tally.errors > 0 {
            // Stop submitting; drain what is in flight.
            next = total;
        }
    }
}

/// What every completion of a run is checked and timed against.
#[derive(Clone, Copy)]
struct Expect {
    /// Bytes each I/O transfers.
    len: u32,
    /// `--iopoll` (explains EOPNOTSUPP).
    iopoll: bool,
    /// Latency is measured per I/O.
    timed: bool,
}

/// Per-I/O state of one ring, indexed by buffer index (the SQE's user data).
struct Slots {
    /// Submission times, ns on the worker's [`NanoClock`].
    submitted_at: Vec<u64>,
    lbas: Vec<u64>,
    writes: Vec<bool>,
    /// Indices with no I/O in flight.
    free: Vec<u32>,
}

impl Slots {
    fn new(qd: u32) -> Self {
        Self {
            submitted_at: vec![0; qd as usize],
            lbas: vec![0; qd as usize],
            writes: vec![false; qd as usize],
            free: (0..qd).rev().collect(),
        }
    }

    /// Accounts for one CQE and frees its index; returns whether it succeeded, or None for
    /// an unknown index.
    #[inline(always)]
    fn complete(
        &mut self,
        tally: &mut Tally,
        user_data: u64,
        res: i32,
        now: u64,
        expect: Expect,
    ) -> Option<bool> {
        let Expect { len, iopoll, timed } = expect;
        let i = user_data as usize;
        if i >= self.submitted_at.len() {
            tally.fail(|| format!("completion with unknown user data {user_data}"));
            return None;
        }
        if res == len as i32 && !timed {
            tally.complete_untimed();
        } else if res == len as i32 {
            tally.complete_ns(now.saturating_sub(self.submitted_at[i]));
        } else {
            tally.unsuccessful += 1;
            tally.fail(|| describe_failure(res, len, self.writes[i], self.lbas[i], iopoll));
        }
        self.free.push(i as u32);
        Some(res == len as i32)
    }
}

/// Consumes up to `max` CQEs, calling `f(user_data, result)` for each; returns how many.
#[inline(always)]
fn reap(
    ring: &mut IoUring,
    clock: &NanoClock,
    max: usize,
    mut f: impl FnMut(u64, i32, u64),
) -> u32 {
    let cq = ring.completion();
    if cq.is_empty() {
        return 0;
    }
    // One clock read per pass, as the spdk-like engine does per poll call.
    let now = clock.now_ns();
    let mut n = 0;
    for cqe in cq.take(max) {
        f(cqe.user_data(), cqe.result(), now);
        n += 1;
    }
    n
}

#[cold]
fn describe_failure(res: i32, len: u32, is_write: bool, lba: u64, iopoll: bool) -> String {
    let op = if is_write { "write" } else { "read" };
    if res >= 0 {
        return format!("short {op} at LBA {lba}: {res} of {len} bytes");
    }
    let err = std::io::Error::from_raw_os_error(-res);
    let hint = if iopoll && -res == libc::EOPNOTSUPP {
        " (--iopoll needs polled queues: load nvme with poll_queues=N, e.g. nvme.poll_queues=4)"
    } else {
        ""
    };
    format!("{op} at LBA {lba}: {err}{hint}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::rc::Rc;

    type Log = Rc<RefCell<Vec<String>>>;

    /// A ring that records its quiesce call and its drop.
    struct ProbeRing {
        log: Log,
        quiesces: bool,
    }

    impl Quiesce for ProbeRing {
        fn quiesce(&mut self, in_flight: u32) -> bool {
            self.log.borrow_mut().push(format!("quiesce {in_flight}"));
            self.quiesces
        }
    }

    impl Drop for ProbeRing {
        fn drop(&mut self) {
            self.log.borrow_mut().push("ring".into());
        }
    }

    /// Buffers that record their drop.
    struct ProbeBuffers(Log);

    impl Drop for ProbeBuffers {
        fn drop(&mut self) {
            self.0.borrow_mut().push("buffers".into());
        }
    }

    fn fixed_io(in_flight: u32, quiesces: bool) -> (FixedIo<ProbeRing, ProbeBuffers>, Log) {
        let log = Log::default();
        let ring = ProbeRing {
            log: log.clone(),
            quiesces,
        };
        let mut io = FixedIo::new(ring, ProbeBuffers(log.clone()));
        io.in_flight = in_flight;
        (io, log)
    }

    #[test]
    fn the_ring_drops_before_its_buffers() {
        let (io, log) = fixed_io(0, true);
        drop(io);
        assert_eq!(*log.borrow(), ["ring", "buffers"]);
    }

    #[test]
    fn requests_in_flight_are_waited_for_before_anything_is_dropped() {
        let (io, log) = fixed_io(3, true);
        drop(io);
        assert_eq!(*log.borrow(), ["quiesce 3", "ring", "buffers"]);
    }

    #[test]
    fn buffers_are_leaked_when_requests_may_still_be_in_flight() {
        let (io, log) = fixed_io(2, false);
        drop(io);
        assert_eq!(
            *log.borrow(),
            ["quiesce 2", "ring"],
            "buffers must not be freed"
        );
    }

    #[test]
    fn an_early_error_exit_drops_the_ring_first() {
        // The shape of run_worker: the pair is taken from a Worker and an error returns early.
        fn work(worker: (FixedIo<ProbeRing, ProbeBuffers>, u32)) -> Result<(), ()> {
            let (mut io, _gen) = worker;
            io.in_flight += 4;
            Err(())
        }
        let (io, log) = fixed_io(0, true);
        assert!(work((io, 0)).is_err());
        assert_eq!(*log.borrow(), ["quiesce 4", "ring", "buffers"]);
    }

    /// A real ring, when this kernel lets us make one: `quiesce` submits reads still sitting in
    /// the submission queue and returns only once all of them have completed.
    #[test]
    fn a_real_ring_quiesces_reads_in_flight() {
        let Ok(ring) = IoUring::new(8) else {
            eprintln!("io_uring unavailable here; skipping");
            return;
        };
        let expected = std::fs::read("/proc/self/exe").unwrap();
        let file = std::fs::File::open("/proc/self/exe").unwrap();
        let mut io = FixedIo::new(ring, AlignedBuffers::new(4, 4096).unwrap());
        {
            let mut sq = io.ring.submission();
            for (i, p) in io.buffers.ptrs.iter().enumerate() {
                let entry = opcode::Read::new(types::Fd(file.as_raw_fd()), p.as_ptr(), 4096)
                    .offset(i as u64 * 4096)
                    .build()
                    .user_data(i as u64);
                // SAFETY: the buffer lives in `io`, which waits for this read before freeing it.
                unsafe { sq.push(&entry) }.unwrap();
            }
        }
        io.in_flight = 4;
        assert!(io.ring.quiesce(io.in_flight));
        io.in_flight = 0;
        assert!(io.ring.completion().is_empty());
        for (i, p) in io.buffers.ptrs.iter().enumerate() {
            // SAFETY: the read into buffer `i` has completed; it is 4096 initialised bytes.
            let got = unsafe { std::slice::from_raw_parts(p.as_ptr(), 4096) };
            assert_eq!(got, &expected[i * 4096..(i + 1) * 4096], "buffer {i}");
        }
    }
}
