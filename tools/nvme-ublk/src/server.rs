//! The ublk side, through the `libublk` crate: the control device (ADD_DEV, SET_PARAMS,
//! START_DEV, STOP_DEV, DEL_DEV on `/dev/ublk-control`) and one thread per ublk queue, each
//! with its own [`Engine`] (its own queue pair of our driver: no lock per I/O).
//!
//! A queue thread's loop: hand the kernel's new requests (FETCH_REQ / COMMIT_AND_FETCH_REQ
//! completions on the queue's io_uring) to the engine, then reap the queue pair and commit each
//! finished request with COMMIT_AND_FETCH_REQ. It sleeps in `io_uring_enter` only while no NVMe
//! command is in flight; while one is, it polls both sides without blocking. When the kernel
//! aborts the queue (STOP_DEV, or the device deleted) it drains the queue pair and ends.

use std::fs::OpenOptions;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use libublk::ctrl::{UblkCtrl, UblkCtrlBuilder};
use libublk::io::{BufDescList, UblkDev, UblkIOCtx, UblkQueue};
use libublk::{sys, BufDesc, UblkError, UblkFlags, UblkIORes};
use nvme_device::AnyQueuePair;

use crate::engine::{Engine, EngineStats};
use crate::mapping::{Geometry, SECTOR_SHIFT};

/// The kernel's ublk control node.
pub const CONTROL_PATH: &str = "/dev/ublk-control";
/// Present when the ublk driver is loaded (module or built in).
const MODULE_PATH: &str = "/sys/module/ublk_drv";
/// How often the main thread looks for a stop signal.
const SIGNAL_POLL: Duration = Duration::from_millis(100);
/// Polls without progress (requests in flight) before a queue thread sleeps between polls.
pub const IDLE_ROUNDS_BEFORE_SLEEP: u32 = 16;
/// Target name in the ublk device's JSON export.
const TARGET_NAME: &str = "nvme";

/// Why the ublk device could not be served.
#[derive(Debug, thiserror::Error)]
pub enum UblkServeError {
    #[error(
        "the kernel's ublk driver is not loaded ({CONTROL_PATH} is absent): load it with \
         `modprobe ublk_drv` (a kernel with CONFIG_BLK_DEV_UBLK, Linux 6.0 or later)"
    )]
    NoDriver,
    #[error(
        "{CONTROL_PATH} is absent although the ublk driver is loaded: is devtmpfs mounted \
         on /dev?"
    )]
    NoControlNode,
    #[error("no permission to open {CONTROL_PATH}: run nvme-ublk as root")]
    NoPermission,
    #[error("cannot open {CONTROL_PATH}: {0}")]
    Control(#[source] io::Error),
    #[error("ublk {what} failed: {}", ublk_message(.source))]
    Ublk {
        what: &'static str,
        #[source]
        source: UblkError,
    },
    #[error("ublk queue {qid} failed: {}", ublk_message(.source))]
    Queue {
        qid: u16,
        #[source]
        source: UblkError,
    },
}

/// libublk's errors carry a negative errno in `OtherError`; say which.
fn ublk_message(e: &UblkError) -> String {
    match e {
        UblkError::OtherError(errno) | UblkError::UringIOError(errno) => {
            format!("{e}: {}", io::Error::from_raw_os_error(-errno))
        }
        e => e.to_string(),
    }
}

/// Checks that the ublk control device can be opened, before anything else is set up.
pub fn check_control() -> Result<(), UblkServeError> {
    if !Path::new(CONTROL_PATH).exists() {
        return Err(if Path::new(MODULE_PATH).exists() {
            UblkServeError::NoControlNode
        } else {
            UblkServeError::NoDriver
        });
    }
    match OpenOptions::new().read(true).write(true).open(CONTROL_PATH) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => Err(UblkServeError::NoPermission),
        Err(e) => Err(UblkServeError::Control(e)),
    }
}

/// The device to create.
#[derive(Clone, Copy, Debug)]
pub struct DeviceConfig {
    /// ublk device id (`-1`: the kernel picks).
    pub id: i32,
    /// Tags per queue.
    pub depth: u16,
    /// The namespace's geometry (block size, size, largest I/O, discard/write-zeroes).
    pub geo: Geometry,
    /// The controller has a volatile write cache: announce it (flushes, FUA).
    pub volatile_cache: bool,
    /// While requests are in flight and nothing has moved for
    /// [`IDLE_ROUNDS_BEFORE_SLEEP`] polls, sleep this long between polls (zero: poll
    /// without sleeping).
    pub poll_sleep: Duration,
}

/// What a served device did, for the closing line.
#[derive(Clone, Debug, Default)]
pub struct ServeSummary {
    /// The block device it was (`/dev/ublkbN`).
    pub bdev: String,
    /// Counters of each queue.
    pub queues: Vec<EngineStats>,
}

/// How a queue thread ended (`None`: not yet).
type QueueOutcome = Option<Result<EngineStats, UblkError>>;

/// The ublk parameters of `cfg` (`struct ublk_params`: basic limits, plus discard and
/// write-zeroes limits when the controller offers them).
fn params(cfg: &DeviceConfig) -> sys::ublk_params {
    let geo = &cfg.geo;
    let shift = geo.block_shift();
    let mut attrs = 0;
    if cfg.volatile_cache {
        attrs |= sys::UBLK_ATTR_VOLATILE_CACHE | sys::UBLK_ATTR_FUA;
    }
    let mut p = sys::ublk_params {
        types: sys::UBLK_PARAM_TYPE_BASIC,
        basic: sys::ublk_param_basic {
            attrs,
            logical_bs_shift: shift,
            physical_bs_shift: shift,
            io_opt_shift: shift,
            io_min_shift: shift,
            max_sectors: geo.max_io_bytes >> SECTOR_SHIFT,
            dev_sectors: geo.sectors(),
            ..Default::default()
        },
        ..Default::default()
    };
    if geo.discard || geo.write_zeroes {
        p.types |= sys::UBLK_PARAM_TYPE_DISCARD;
        p.discard = sys::ublk_param_discard {
            discard_granularity: if geo.discard { geo.block_size } else { 0 },
            max_discard_sectors: geo.max_discard_sectors(),
            max_write_zeroes_sectors: geo.max_write_zeroes_sectors(),
            max_discard_segments: u16::from(geo.discard),
            ..Default::default()
        };
    }
    p
}

/// Serves `engines` (one per queue) as one ublk device until `stop` is set (SIGINT/SIGTERM)
/// or the device is deleted; then stops and deletes the device. `started(bdev)` is called
/// once the device is live.
pub fn serve(
    cfg: DeviceConfig,
    engines: Vec<Engine<AnyQueuePair>>,
    stop: Arc<AtomicBool>,
    started: impl FnOnce(&str) + Send + Sync + 'static,
) -> Result<ServeSummary, UblkServeError> {
    let nr_queues = engines.len() as u16;
    let ctrl = UblkCtrlBuilder::default()
        .name(TARGET_NAME)
        .id(cfg.id)
        .nr_queues(nr_queues)
        .depth(cfg.depth)
        .io_buf_bytes(cfg.geo.max_io_bytes)
        .dev_flags(UblkFlags::UBLK_DEV_F_ADD_DEV)
        .build()
        .map_err(|source| UblkServeError::Ublk {
            what: "ADD_DEV",
            source,
        })?;
    let bdev = ctrl.get_bdev_path();

    // Each queue thread takes its engine once, at its start (not per I/O).
    let slots: Arc<Mutex<Vec<Option<Engine<AnyQueuePair>>>>> =
        Arc::new(Mutex::new(engines.into_iter().map(Some).collect()));
    let results: Arc<Mutex<Vec<QueueOutcome>>> =
        Arc::new(Mutex::new((0..nr_queues).map(|_| None).collect()));
    let live = Arc::new(AtomicUsize::new(usize::from(nr_queues)));

    let tgt_init = move |dev: &mut UblkDev| {
        dev.tgt.dev_size = cfg.geo.sectors() << SECTOR_SHIFT;
        dev.tgt.params = params(&cfg);
        Ok(())
    };
    let q_fn = {
        let (slots, results, live) = (slots.clone(), results.clone(), live.clone());
        move |qid: u16, dev: &UblkDev| {
            let engine = slots
                .lock()
                .ok()
                .and_then(|mut s| s[usize::from(qid)].take());
            let outcome = match engine {
                Some(mut engine) => {
                    let r = serve_queue(qid, dev, &mut engine, cfg.poll_sleep);
                    engine.drain();
                    let stats = engine.stats();
                    // The queue pair is deleted here, on its own thread.
                    drop(engine);
                    r.map(|()| stats)
                }
                None => Err(UblkError::OtherError(-libc::EINVAL)),
            };
            if let Ok(mut r) = results.lock() {
                r[usize::from(qid)] = Some(outcome);
            }
            live.fetch_sub(1, Ordering::SeqCst);
        }
    };
    let device_fn = {
        let (bdev, live) = (bdev.clone(), live.clone());
        move |ctrl: &UblkCtrl| {
            started(&bdev);
            loop {
                if live.load(Ordering::SeqCst) == 0 {
                    break;
                }
                if stop.load(Ordering::Relaxed) {
                    // STOP_DEV: the kernel removes the disk and aborts the queues' commands,
                    // so every queue thread drains and ends.
                    if let Err(e) = ctrl.kill_dev() {
                        log::warn!("ublk STOP_DEV: {}", ublk_message(&e));
                    }
                    break;
                }
                std::thread::sleep(SIGNAL_POLL);
            }
        }
    };
    ctrl.run_target(tgt_init, q_fn, device_fn)
        .map_err(|source| UblkServeError::Ublk {
            what: "START_DEV",
            source,
        })?;
    ctrl.del_dev().map_err(|source| UblkServeError::Ublk {
        what: "DEL_DEV",
        source,
    })?;

    let mut summary = ServeSummary {
        bdev,
        queues: Vec::new(),
    };
    let results = std::mem::take(&mut *results.lock().unwrap_or_else(|p| p.into_inner()));
    for (qid, r) in results.into_iter().enumerate() {
        match r {
            Some(Ok(stats)) => summary.queues.push(stats),
            Some(Err(source)) => {
                return Err(UblkServeError::Queue {
                    qid: qid as u16,
                    source,
                })
            }
            None => summary.queues.push(EngineStats::default()),
        }
    }
    Ok(summary)
}

/// One queue's loop (see the module doc); returns when the kernel takes the queue down.
fn serve_queue(
    qid: u16,
    dev: &UblkDev,
    engine: &mut Engine<AnyQueuePair>,
    poll_sleep: Duration,
) -> Result<(), UblkError> {
    // The kernel's I/O buffer of each tag: it copies a write's data into it before handing
    // the request over, and a read's data out of it at COMMIT_AND_FETCH_REQ.
    let mut bufs = dev.alloc_queue_io_bufs();
    let queue = UblkQueue::new(qid, dev)?
        .submit_fetch_commands_unified(BufDescList::Slices(Some(&bufs)))?;
    let mut idle_rounds = 0u32;
    loop {
        // Sleep in io_uring_enter only when nothing is on the queue pair.
        let to_wait = usize::from(engine.in_flight() == 0);
        let r = queue.flush_and_wake_io_tasks(
            |user_data, cqe, _last| {
                // Only io commands are on this ring; a result other than OK is the kernel
                // aborting the command (queue going down).
                if cqe.result() != sys::UBLK_IO_RES_OK as i32 {
                    return;
                }
                let tag = UblkIOCtx::user_data_to_tag(user_data) as u16;
                let desc = crate::mapping::IoDesc::from_ublk(queue.get_iod(tag));
                let Some(buf) = bufs.get(usize::from(tag)) else {
                    return;
                };
                if let crate::engine::Started::Done(res) = engine.start(tag, &desc, buf) {
                    commit(&queue, tag, buf, res);
                }
            },
            to_wait,
        );
        let arrived = match r {
            Ok(n) => n,
            Err(UblkError::QueueIsDown) => return Ok(()),
            Err(e) => return Err(e),
        };
        let finished = engine.poll(|tag, res, data| {
            let Some(buf) = bufs.get_mut(usize::from(tag)) else {
                return;
            };
            if !data.is_empty() {
                buf[..data.len()].copy_from_slice(data);
            }
            commit(&queue, tag, buf, res);
        });
        // Requests in flight and nothing moved for a while: let the CPU go for a moment
        // (a busy core starves whoever emulates or shares it, e.g. a TCG guest's device).
        if arrived > 0 || finished > 0 || engine.in_flight() == 0 {
            idle_rounds = 0;
        } else {
            idle_rounds += 1;
            if !poll_sleep.is_zero() && idle_rounds >= IDLE_ROUNDS_BEFORE_SLEEP {
                std::thread::sleep(poll_sleep);
            }
        }
    }
}

/// COMMIT_AND_FETCH_REQ of `tag` with `res` (bytes or a negative errno).
fn commit(queue: &UblkQueue, tag: u16, buf: &[u8], res: i32) {
    if let Err(e) =
        queue.complete_io_cmd_unified(tag, BufDesc::Slice(buf), Ok(UblkIORes::Result(res)))
    {
        log::error!("ublk tag {tag}: commit failed: {}", ublk_message(&e));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_follow_the_namespace() {
        let cfg = DeviceConfig {
            id: -1,
            depth: 64,
            geo: Geometry {
                block_size: 4096,
                blocks: 16384,
                max_io_bytes: 128 << 10,
                discard: true,
                write_zeroes: true,
            },
            volatile_cache: true,
            poll_sleep: Duration::ZERO,
        };
        let p = params(&cfg);
        assert_eq!(
            p.types,
            sys::UBLK_PARAM_TYPE_BASIC | sys::UBLK_PARAM_TYPE_DISCARD
        );
        assert_eq!(p.basic.logical_bs_shift, 12);
        assert_eq!(p.basic.physical_bs_shift, 12);
        assert_eq!(p.basic.max_sectors, 256);
        assert_eq!(p.basic.dev_sectors, 16384 * 8);
        assert_eq!(
            p.basic.attrs,
            sys::UBLK_ATTR_VOLATILE_CACHE | sys::UBLK_ATTR_FUA
        );
        assert_eq!(p.discard.discard_granularity, 4096);
        assert_eq!(p.discard.max_discard_segments, 1);
        assert_eq!(p.discard.max_write_zeroes_sectors, (1 << 16) * 8);

        let plain = DeviceConfig {
            geo: Geometry {
                block_size: 512,
                discard: false,
                write_zeroes: false,
                ..cfg.geo
            },
            volatile_cache: false,
            ..cfg
        };
        let p = params(&plain);
        assert_eq!(p.types, sys::UBLK_PARAM_TYPE_BASIC);
        assert_eq!(p.basic.logical_bs_shift, 9);
        assert_eq!(p.basic.attrs, 0);
    }
}
