//! The VFS's store (directory, extents, growth and moves) through the real driver on the
//! emulator's power-loss model, cut at many points per seed (the scheme of
//! `power_cut_sqlite.rs`: one recorded run per seed, live cuts reattached through a new
//! driver, replayed cuts checked on an in-memory view of the image).
//!
//! A seeded sequence of steps; each step touches up to three files once (create and fill,
//! append, overwrite, truncate, delete) and ends with `Store::sync`. After a cut at a point
//! where step `a` was the last acknowledged: with no step in flight, the store holds exactly
//! the files of step `a`; with step `a + 1` in flight, files it did not touch are exactly as
//! in step `a`, and a touched file is absent only if it was deleted or new, has the length of
//! step `a` or `a + 1` (0 if new), and every byte is that of step `a` or of step `a + 1`.

mod power;

use std::collections::BTreeMap;

use nvme_sim::{MediumEvent, SimConfig, SimController, SimMedium};
use nvme_sqlite_vfs::{BlockDevice, Format, Store};
use power::{config, cut_points, nvme_device, pattern, replay_cuts, Figures, Knobs};

/// Steps per run.
const STEPS: usize = 40;
/// File names the steps choose from.
const FILES: usize = 6;
/// Files stop growing at this size.
const MAX_FILE: usize = 640 << 10;
/// Largest append or overwrite.
const MAX_WRITE: u64 = 160 << 10;
/// Namespace size.
const NS_BYTES: u64 = 16 << 20;
/// Spreads the live cut points over the seeds.
const LIVE_CUT_MIX: u64 = 0x2545_f491_4f6c_dd1d;

type Files = BTreeMap<String, Vec<u8>>;

/// One step as the workload ran it.
struct Step {
    /// Medium events before it.
    started: u64,
    /// Medium events when its sync returned.
    acked: Option<u64>,
    /// The files after it.
    files: Files,
    /// Files it touched.
    touched: Vec<String>,
}

struct Recorded {
    config: SimConfig,
    journal: Vec<MediumEvent>,
    formatted: Option<u64>,
    steps: Vec<Step>,
    live: Option<SimMedium>,
    relocations: u64,
}

struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

fn run(bs: u32, seed: u64, cut_after: Option<u64>) -> Recorded {
    let _one = power::EMULATOR.lock().unwrap_or_else(|p| p.into_inner());
    let config = config(bs, NS_BYTES / u64::from(bs), seed, cut_after);
    let sim = SimController::start(config.clone());
    let mut rec = Recorded {
        config,
        journal: Vec::new(),
        formatted: None,
        steps: Vec::new(),
        live: None,
        relocations: 0,
    };
    if let Err(e) = steps(&sim, seed, &mut rec) {
        assert!(
            cut_after.is_some() && sim.is_powered_off(),
            "seed {seed} ({bs} B): the workload failed without a power cut: {e}"
        );
    }
    if sim.is_powered_off() {
        rec.live = Some(sim.medium());
    }
    rec.journal = sim.take_journal();
    rec
}

/// One change to one file.
enum Op {
    Create(Vec<u8>),
    Write(u64, Vec<u8>),
    Truncate(u64),
    Delete,
}

/// Plans a step on the model `files`: the operations, applied to the model.
fn plan(rng: &mut Rng, files: &mut Files, data_seed: u64) -> Vec<(String, Op)> {
    let mut ops: Vec<(String, Op)> = Vec::new();
    for _ in 0..=rng.below(3) {
        let name = format!("f{}", rng.below(FILES as u64));
        if ops.iter().any(|(n, _)| *n == name) {
            continue;
        }
        let len = 1 + rng.below(MAX_WRITE) as usize;
        let data_seed = data_seed ^ ops.len() as u64;
        let data = || pattern(len, data_seed);
        let op = match files.get_mut(&name) {
            None => {
                files.insert(name.clone(), data());
                Op::Create(data())
            }
            Some(content) => match rng.below(5) {
                0 | 1 if content.len() < MAX_FILE => {
                    let (at, data) = (content.len() as u64, data());
                    content.extend_from_slice(&data);
                    Op::Write(at, data)
                }
                2 => {
                    let at = rng.below(content.len() as u64 + 1) as usize;
                    let data = data();
                    let end = at + data.len();
                    if end > content.len() {
                        content.resize(end, 0);
                    }
                    content[at..end].copy_from_slice(&data);
                    Op::Write(at as u64, data)
                }
                3 => {
                    let len = (rng.below(content.len() as u64 * 3 / 2 + 1) as usize).min(MAX_FILE);
                    content.resize(len, 0);
                    Op::Truncate(len as u64)
                }
                _ => {
                    files.remove(&name);
                    Op::Delete
                }
            },
        };
        ops.push((name, op));
    }
    ops
}

fn steps(sim: &SimController, seed: u64, rec: &mut Recorded) -> nvme_sqlite_vfs::Result<()> {
    let mut store = Store::open(nvme_device(sim), Format::IfBlank)?;
    rec.formatted = Some(sim.medium_events());
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut files = Files::new();
    for step in 0..STEPS {
        let ops = plan(&mut rng, &mut files, (seed << 16) ^ ((step as u64) << 4));
        rec.steps.push(Step {
            started: sim.medium_events(),
            acked: None,
            files: files.clone(),
            touched: ops.iter().map(|(n, _)| n.clone()).collect(),
        });
        for (name, op) in ops {
            match op {
                Op::Create(data) => {
                    store.create(&name)?;
                    store.write(&name, 0, &data)?;
                }
                Op::Write(at, data) => store.write(&name, at, &data)?,
                Op::Truncate(len) => store.truncate(&name, len)?,
                Op::Delete => store.delete(&name)?,
            }
        }
        store.sync()?;
        rec.steps.last_mut().expect("pushed").acked = Some(sim.medium_events());
        rec.relocations = store.stats().relocations;
    }
    Ok(())
}

/// The files on `dev` (None when the store does not open).
fn read_files(dev: Box<dyn BlockDevice>) -> nvme_sqlite_vfs::Result<Files> {
    let mut store = Store::open(dev, Format::Never)?;
    let mut files = Files::new();
    for f in store.files() {
        let mut data = vec![0; f.len as usize];
        store.read(&f.name, 0, &mut data)?;
        files.insert(f.name, data);
    }
    Ok(files)
}

/// Checks the store on `dev` after a cut at `cut`; returns the steps accounted for.
fn check(rec: &Recorded, bs: u32, seed: u64, cut: u64, dev: Box<dyn BlockDevice>) -> u64 {
    let at = format!("seed {seed} cut {cut} ({bs} B blocks)");
    let files = match read_files(dev) {
        Ok(f) => f,
        Err(e) => {
            assert!(
                rec.formatted.map_or(true, |f| cut < f),
                "{at}: the formatted store does not open: {}",
                nvme_sqlite_vfs::error_chain(&e)
            );
            return 0;
        }
    };
    let acked = rec
        .steps
        .iter()
        .rposition(|s| s.acked.is_some_and(|a| a <= cut))
        .map(|i| i + 1)
        .unwrap_or(0);
    let empty = Files::new();
    let before = if acked == 0 {
        &empty
    } else {
        &rec.steps[acked - 1].files
    };
    let in_flight = rec.steps.get(acked).filter(|s| s.started < cut);
    let Some(step) = in_flight else {
        assert!(
            files == *before,
            "{at}: the store differs from step {acked}'s files"
        );
        return acked as u64;
    };
    for (name, old) in before {
        if !step.touched.contains(name) {
            assert!(
                files.get(name) == Some(old),
                "{at}: {name}, untouched since step {acked}, differs or is gone"
            );
        }
    }
    for (name, data) in &files {
        let (old, new) = (before.get(name), step.files.get(name));
        assert!(
            old.is_some() || new.is_some(),
            "{at}: {name} is in neither step {acked} nor step {}",
            acked + 1
        );
        if !step.touched.contains(name) {
            continue;
        }
        let len_ok = old.map_or(data.is_empty(), |o| o.len() == data.len())
            || new.is_some_and(|n| n.len() == data.len());
        assert!(
            len_ok,
            "{at}: {name} has length {} (step {acked}: {:?}, next: {:?})",
            data.len(),
            old.map(Vec::len),
            new.map(Vec::len)
        );
        let whole = |f: Option<&Vec<u8>>| f.is_some_and(|f| f.get(..data.len()) == Some(&data[..]));
        if whole(old) || whole(new) {
            continue;
        }
        for (i, b) in data.iter().enumerate() {
            let ok = old.is_some_and(|o| o.get(i) == Some(b))
                || new.is_some_and(|n| n.get(i) == Some(b));
            assert!(
                ok,
                "{at}: {name} byte {i} is {b:#04x}, in neither step {acked} nor the next"
            );
        }
    }
    for name in before.keys().chain(step.files.keys()) {
        if !files.contains_key(name) {
            // Only a file the step deleted, or created, may be missing.
            let deleted = before.contains_key(name) && !step.files.contains_key(name);
            let created = !before.contains_key(name);
            assert!(deleted || created, "{at}: {name} is gone");
        }
    }
    acked as u64 + 1
}

fn suite(bs: u32, base_seed: u64, default_seeds: u64, default_cuts: usize) {
    let knobs = Knobs::from_env(default_seeds, default_cuts);
    let mut figures = Figures::default();
    let mut full_events = None;
    let mut relocations = 0;
    for seed in knobs.seeds(base_seed) {
        let cut_after = full_events.map(|events: u64| {
            events / 4 + seed.wrapping_mul(LIVE_CUT_MIX) % (events * 3 / 4).max(1)
        });
        let rec = run(bs, seed, cut_after);
        if cut_after.is_none() {
            full_events = Some(rec.journal.len() as u64);
        }
        figures.seeds += 1;
        figures.events += rec.journal.len() as u64;
        relocations += rec.relocations;
        if let Some(live) = &rec.live {
            let _one = power::EMULATOR.lock().unwrap_or_else(|p| p.into_inner());
            let sim = SimController::start_on(rec.config.clone(), live);
            figures.commits_checked +=
                check(&rec, bs, seed, rec.journal.len() as u64, nvme_device(&sim));
            figures.live_reattaches += 1;
        }
        let cuts = match knobs.only_cut {
            Some(c) => vec![c],
            None => cut_points(&rec.journal, knobs.cuts_per_seed, seed),
        };
        figures.cuts_losing_writes += replay_cuts(&rec.config, &rec.journal, &cuts, |cut, dev| {
            figures.cuts += 1;
            figures.commits_checked += check(&rec, bs, seed, cut, dev);
        });
    }
    assert!(relocations > 0, "the runs moved no extent");
    println!("power cuts, store {bs} B blocks: {figures:?}, {relocations} extent moves");
}

#[test]
fn store_4k() {
    suite(4096, 0x7000, 4, 240);
}

#[test]
fn store_512() {
    suite(512, 0x8000, 4, 240);
}
