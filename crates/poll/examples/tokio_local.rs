//! Async I/O on a third-party runtime: a tokio current-thread runtime with a `LocalSet`.
//!
//! An [`AsyncQueuePair`] is `!Send` (one owner thread, like the queue pair under it), so its
//! futures run as `spawn_local` tasks. Nothing in tokio knows about NVMe completions: one more
//! local task is the reactor hook, calling [`AsyncQueuePair::reactor`] (which reaps completions
//! and wakes the futures they finish) and yielding to the runtime between calls. That is
//! busy polling, as everywhere in this driver; an application with idle periods can sleep in
//! that task when `in_flight()` is 0.
//!
//! Each of TASKS tasks writes a pattern to its own blocks, reads it back into the same buffer
//! and checks it, IOS times.
//!
//! `cargo run -p nvme-poll --example tokio_local -- sim [TASKS [IOS]]`, or
//! `... -- 0000:01:00.0 --write [TASKS [IOS]]` on a controller bound to vfio-pci (overwrites
//! the first blocks of namespace 1).

use nvme_driver::WriteFlags;
use std::cell::Cell;
use std::rc::Rc;

use nvme_driver::{Controller, ControllerOptions, QueuePairOptions, Transport};
use nvme_poll::AsyncQueuePair;
use nvme_sim::{SimConfig, SimController};

/// Blocks of its own that each task cycles through.
const BLOCKS_PER_TASK: u64 = 8;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let target = args.first().map_or("sim", String::as_str);
    let rest = if target == "sim" {
        &args[args.len().min(1)..]
    } else {
        if args.get(1).map(String::as_str) != Some("--write") {
            return Err(format!("pass --write to allow overwriting data on {target}").into());
        }
        &args[2..]
    };
    let tasks: u64 = rest.first().map_or(Ok(8), |s| s.parse())?;
    let ios: u64 = rest.get(1).map_or(Ok(200), |s| s.parse())?;

    let (_sim, ctrl) = if target == "sim" {
        let sim = SimController::start(SimConfig::default());
        let t = Transport::new(sim.mmio(), sim.dma(), "sim");
        (Some(sim), Controller::new(t, ControllerOptions::default())?)
    } else {
        (
            None,
            Controller::open_pci(target, ControllerOptions::default())?,
        )
    };
    let ns = ctrl.namespace(1)?;
    if tasks == 0 || tasks * BLOCKS_PER_TASK > ns.blocks() {
        return Err(format!("TASKS must be 1..={}", ns.blocks() / BLOCKS_PER_TASK).into());
    }
    let qp = AsyncQueuePair::new(ctrl.create_queue_pair(QueuePairOptions::default())?)
        .map_err(|busy| busy.to_string())?;

    let runtime = tokio::runtime::Builder::new_current_thread().build()?;
    let local = tokio::task::LocalSet::new();
    let verified = local.block_on(&runtime, async {
        let running = Rc::new(Cell::new(tasks));
        // The reactor hook: reap completions until every worker is done.
        let reactor = {
            let mut reap = qp.reactor();
            let running = running.clone();
            tokio::task::spawn_local(async move {
                while running.get() > 0 {
                    reap();
                    tokio::task::yield_now().await;
                }
            })
        };
        let workers: Vec<_> = (0..tasks)
            .map(|task| {
                let (qp, ns, ctrl, running) =
                    (qp.clone(), ns.clone(), ctrl.clone(), running.clone());
                tokio::task::spawn_local(async move {
                    let result = worker(&qp, &ns, &ctrl, task, ios).await;
                    running.set(running.get() - 1);
                    result
                })
            })
            .collect();
        let mut verified = 0;
        for w in workers {
            verified += w.await??;
        }
        reactor.await?;
        Ok::<u64, Box<dyn std::error::Error>>(verified)
    })?;
    println!(
        "tokio_local: {tasks} tasks on a current-thread runtime: {verified} writes read back and verified"
    );
    assert_eq!(verified, tasks * ios);
    assert_eq!(qp.in_flight(), 0);
    Ok(())
}

/// Writes, reads back and checks `ios` blocks; returns how many it verified.
async fn worker(
    qp: &AsyncQueuePair,
    ns: &nvme_driver::Namespace,
    ctrl: &Controller,
    task: u64,
    ios: u64,
) -> Result<u64, nvme_driver::Error> {
    let mut buf = ctrl.alloc_buffer(ns.block_size() as usize)?;
    for i in 0..ios {
        let lba = task * BLOCKS_PER_TASK + i % BLOCKS_PER_TASK;
        let tag = (task << 32 | i).to_le_bytes();
        for chunk in buf.chunks_mut(8) {
            chunk.copy_from_slice(&tag);
        }
        buf = qp
            .write(ns, lba, 1, buf, WriteFlags::NONE)
            .await
            .map_err(|f| f.error)?;
        buf.fill(0);
        buf = qp.read(ns, lba, 1, buf).await.map_err(|f| f.error)?;
        if buf.chunks(8).any(|c| c != tag) {
            panic!("task {task}: block {lba} read back other data than written");
        }
    }
    Ok(ios)
}
