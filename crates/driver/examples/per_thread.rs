//! One queue pair per thread: each thread keeps a queue depth of reads in flight with the
//! callback API and polls its own pair; the controller handle is shared.
//!
//! `cargo run -p nvme-driver --example per_thread -- sim [THREADS] [IOS_PER_THREAD]`

use nvme_driver::IoQueue;
use std::thread;

use nvme_driver::{Controller, ControllerOptions, QueuePairOptions, Transport};
use nvme_sim::{SimConfig, SimController};

const QD: usize = 32;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let threads: usize = args.get(2).map_or(Ok(4), |s| s.parse())?;
    let ios: u64 = args.get(3).map_or(Ok(10_000), |s| s.parse())?;
    let (_sim, ctrl) = if args.get(1).map_or("sim", String::as_str) == "sim" {
        let sim = SimController::start(SimConfig::default());
        let t = Transport::new(sim.mmio(), sim.dma(), "sim");
        let ctrl = Controller::new(t, ControllerOptions::default())?;
        (Some(sim), ctrl)
    } else {
        (
            None,
            Controller::open_pci(&args[1], ControllerOptions::default())?,
        )
    };
    let ns = ctrl.namespace(1)?;
    let blocks = ns.blocks();
    let workers: Vec<_> = (0..threads)
        .map(|t| {
            let (ctrl, ns) = (ctrl.clone(), ns.clone());
            thread::spawn(move || -> Result<u64, nvme_driver::Error> {
                let mut qp = ctrl.create_queue_pair(QueuePairOptions::default())?;
                let mut free: Vec<_> = (0..QD)
                    .map(|_| ctrl.alloc_buffer(ns.block_size() as usize))
                    .collect::<Result<_, _>>()?;
                let (mut submitted, mut done, mut lba) = (0u64, 0u64, t as u64);
                while done < ios {
                    while submitted < ios {
                        let Some(buf) = free.pop() else { break };
                        lba = lba
                            .wrapping_mul(6364136223846793005)
                            .wrapping_add(1442695040888963407)
                            % blocks;
                        qp.submit_read(&ns, lba, 1, buf, submitted)
                            .map_err(|f| f.error)?;
                        submitted += 1;
                    }
                    let mut error = None;
                    qp.poll(|c| {
                        match c.result {
                            Ok(_) => done += 1,
                            Err(e) => error = Some(e),
                        }
                        free.extend(c.buffer);
                    });
                    if let Some(e) = error {
                        return Err(e);
                    }
                }
                Ok(done)
            })
        })
        .collect();
    let mut total = 0;
    for w in workers {
        total += w.join().expect("worker panicked")?;
    }
    println!("{threads} threads completed {total} reads");
    assert_eq!(total, threads as u64 * ios);
    Ok(())
}
