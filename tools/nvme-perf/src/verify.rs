//! `--verify`: self-checking block contents and per-position sequence numbers.
//!
//! Every logical block a verifying run writes starts with a [`HEADER_LEN`]-byte header
//! (little-endian):
//!
//! ```text
//! 0..8    magic  "NVMPERFV"
//! 8..16   LBA of this block
//! 16..24  sequence number of the write (per I/O position, 1, 2, 3, ...)
//! 24..32  run id (random per run: content of an earlier run counts as never written)
//! 32..40  write id: the payload PRNG's seed, a hash of (run id, LBA, sequence)
//! 40..44  CRC-32 (crc32fast) of the whole block with these 4 bytes taken out
//! 44..48  block length in bytes
//! 48..    payload: xorshift64* output seeded with the write id
//! ```
//!
//! Each worker thread owns a disjoint slice of the LBA span and keeps, per I/O position of
//! its slice, the last acknowledged sequence number and whether a write is in flight (one
//! `u32`), so no state is shared. A position has at most one write or any number of reads in
//! flight, never a write and a read together (the address generator draws again otherwise):
//! a device need not keep a block whole against a concurrent command (QEMU's emulated
//! controller does not: a read racing a write to the same block was seen to return the new
//! header over the old payload), so an overlapping read could fail a correct device. A read
//! accepts a sequence number between the one
//! acknowledged when the read was submitted and the newest one issued when it completes;
//! lower is a lost write, higher a phantom. After the workload, a final pass reads back
//! every position written.
//!
//! With `--reset-interval` a write cut off by a controller reset (retryable error) may or
//! may not have reached the medium. The engine resubmits it unchanged (same buffer, same
//! sequence number) without reporting a completion here, so the position simply stays in
//! flight: reads accept the acknowledged or the new content until the retry is acknowledged.
//!
//! The non-verifying engines use [`NoCheck`], whose methods are empty and inline away: the
//! benchmark's hot path is the same code with or without this module.

use std::sync::Arc;

use crate::emulator::SimController;
use serde::Serialize;

use crate::args::{Config, SimFault};
use crate::error::PerfError;
use crate::rng::{LbaGen, XorShift64};
use crate::runner::Geometry;

/// Bytes of the per-block header.
pub const HEADER_LEN: usize = 48;
/// Header magic.
pub const MAGIC: u64 = u64::from_le_bytes(*b"NVMPERFV");
/// Most I/O positions a verifying run tracks (4 bytes of state each: 256 MiB at most).
pub const MAX_VERIFY_POSITIONS: u64 = 64 << 20;
/// State bit: a write to the position is in flight.
const IN_FLIGHT: u32 = 1 << 31;
/// State bits: the last acknowledged sequence number (0: not written in this run).
const SEQ_MASK: u32 = IN_FLIGHT - 1;
/// State of a position whose write failed: its content is unknown and never checked again.
const POISONED: u32 = u32::MAX;
/// Draws before the generator gives up finding a position free for the I/O drawn (no write in
/// flight; for a write, no read either) and reads instead (only a span with about as many
/// positions as the queue depth gets there).
const MAX_REDRAWS: u32 = 1 << 20;

const OFF_LBA: usize = 8;
const OFF_SEQ: usize = 16;
const OFF_RUN: usize = 24;
const OFF_WRITE_ID: usize = 32;
const OFF_CRC: usize = 40;
const OFF_LEN: usize = 44;

/// How a block failed its check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mismatch {
    /// A valid header of another LBA (misdirected write or read).
    WrongLba,
    /// Checksum, length or payload wrong: a torn or corrupted block.
    Corrupt,
    /// Older than the last acknowledged write (or no header where one was acknowledged).
    LostWrite,
    /// Newer than any write issued: impossible unless something invents data.
    Phantom,
}

impl Mismatch {
    fn name(self) -> &'static str {
        match self {
            Mismatch::WrongLba => "wrong LBA",
            Mismatch::Corrupt => "bad checksum (torn/corrupt)",
            Mismatch::LostWrite => "lost write (stale sequence)",
            Mismatch::Phantom => "phantom (sequence never issued)",
        }
    }
}

/// What a verifying run found (summed over threads; whole run, warmup included).
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct VerifyStats {
    /// Blocks checked, in workload reads and the final pass.
    pub blocks_verified: u64,
    /// Of those, checked by reads of the workload (randrw).
    pub blocks_verified_in_reads: u64,
    /// Of those, checked by the final read-back pass.
    pub blocks_verified_final: u64,
    /// Blocks read that this run never wrote (nothing to check).
    pub blocks_unwritten: u64,
    /// Mismatches of all kinds.
    pub mismatches: u64,
    /// Blocks with a valid header of another LBA.
    pub wrong_lba: u64,
    /// Blocks whose checksum, length or payload is wrong (torn or corrupt).
    pub bad_checksum: u64,
    /// Blocks older than their last acknowledged write.
    pub lost_write: u64,
    /// Blocks newer than any write issued.
    pub phantom: u64,
    /// Description of the first mismatch.
    pub first_mismatch: Option<String>,
}

impl VerifyStats {
    /// Adds another thread's counts.
    pub fn merge(&mut self, o: &VerifyStats) {
        self.blocks_verified += o.blocks_verified;
        self.blocks_verified_in_reads += o.blocks_verified_in_reads;
        self.blocks_verified_final += o.blocks_verified_final;
        self.blocks_unwritten += o.blocks_unwritten;
        self.mismatches += o.mismatches;
        self.wrong_lba += o.wrong_lba;
        self.bad_checksum += o.bad_checksum;
        self.lost_write += o.lost_write;
        self.phantom += o.phantom;
        if self.first_mismatch.is_none() {
            self.first_mismatch.clone_from(&o.first_mismatch);
        }
    }

    fn record(&mut self, kind: Mismatch, what: impl FnOnce() -> String) {
        self.mismatches += 1;
        match kind {
            Mismatch::WrongLba => self.wrong_lba += 1,
            Mismatch::Corrupt => self.bad_checksum += 1,
            Mismatch::LostWrite => self.lost_write += 1,
            Mismatch::Phantom => self.phantom += 1,
        }
        if self.first_mismatch.is_none() {
            let message = format!("{}: {}", kind.name(), what());
            log::error!("verify: {message}");
            self.first_mismatch = Some(message);
        }
    }
}

/// The engine loops' hook for verification. [`NoCheck`] does nothing (and costs nothing);
/// [`Verifier`] fills written blocks and checks read ones.
pub trait Check {
    /// The next I/O's `(lba, is_write)`.
    fn next_io(&mut self, gen: &mut LbaGen) -> (u64, bool);
    /// I/O `slot` is about to be submitted into `buf`.
    fn prepare(&mut self, slot: u32, lba: u64, is_write: bool, buf: &mut [u8]);
    /// The submission of I/O `slot` was refused (nothing reached the device).
    fn refused(&mut self, slot: u32);
    /// I/O `slot` completed (`buf`: its data, when the buffer came back).
    fn completed(&mut self, slot: u32, ok: bool, buf: Option<&[u8]>);
    /// The verifier, for the final pass.
    fn verifier(&mut self) -> Option<&mut Verifier>;
}

/// No verification.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoCheck;

impl Check for NoCheck {
    #[inline(always)]
    fn next_io(&mut self, gen: &mut LbaGen) -> (u64, bool) {
        gen.next_io()
    }
    #[inline(always)]
    fn prepare(&mut self, _: u32, _: u64, _: bool, _: &mut [u8]) {}
    #[inline(always)]
    fn refused(&mut self, _: u32) {}
    #[inline(always)]
    fn completed(&mut self, _: u32, _: bool, _: Option<&[u8]>) {}
    #[inline(always)]
    fn verifier(&mut self) -> Option<&mut Verifier> {
        None
    }
}

/// A test-only fault on the emulated medium (`--sim-fault`), with what it needs.
#[derive(Clone)]
pub struct FaultPlan {
    /// The fault and after how many completed I/Os it applies.
    pub fault: SimFault,
    /// The emulator.
    pub sim: Arc<SimController>,
    /// Namespace the run uses.
    pub nsid: u32,
}

impl std::fmt::Debug for FaultPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultPlan")
            .field("fault", &self.fault)
            .field("nsid", &self.nsid)
            .finish_non_exhaustive()
    }
}

#[derive(Clone, Copy, Debug, Default)]
struct Slot {
    lba: u64,
    /// Write: the sequence number written. Read: the one acknowledged at submission.
    seq: u32,
    write: bool,
}

/// Refuses spans whose per-position state would be too large or too small for the threads.
pub fn check_span(config: &Config, geometry: &Geometry) -> Result<(), PerfError> {
    if geometry.positions > MAX_VERIFY_POSITIONS {
        return Err(PerfError::VerifySpan {
            positions: geometry.positions,
            max: MAX_VERIFY_POSITIONS,
            max_blocks: MAX_VERIFY_POSITIONS * geometry.blocks_per_io,
        });
    }
    let smallest = geometry.positions / u64::from(config.threads);
    if smallest <= u64::from(config.queue_depth) {
        return Err(PerfError::VerifyShare {
            share: smallest,
            queue_depth: config.queue_depth,
            threads: config.threads,
            min_blocks: (u64::from(config.queue_depth) + 1)
                * u64::from(config.threads)
                * geometry.blocks_per_io,
        });
    }
    Ok(())
}

/// A run id unlikely to repeat across runs (blocks of an earlier run then count as
/// never written).
pub fn run_id(seed: u64) -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mut rng = XorShift64::new(seed ^ nanos, u64::from(std::process::id()));
    rng.next_u64()
}

/// The payload seed (write id) of a block.
#[inline]
pub fn write_id(run: u64, lba: u64, seq: u64) -> u64 {
    XorShift64::new(run ^ lba.rotate_left(32), seq).next_u64()
}

fn get64(b: &[u8], at: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(x)
}

fn get32(b: &[u8], at: usize) -> u32 {
    let mut x = [0u8; 4];
    x.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(x)
}

fn crc(block: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&block[..OFF_CRC]);
    h.update(&block[OFF_CRC + 4..]);
    h.finalize()
}

fn fill_payload(payload: &mut [u8], seed: u64) {
    let mut rng = XorShift64::new(seed, 0);
    for word in payload.chunks_mut(8) {
        let v = rng.next_u64().to_le_bytes();
        word.copy_from_slice(&v[..word.len()]);
    }
}

fn payload_matches(payload: &[u8], seed: u64) -> bool {
    let mut rng = XorShift64::new(seed, 0);
    payload
        .chunks(8)
        .all(|word| word == &rng.next_u64().to_le_bytes()[..word.len()])
}

/// Writes a verifiable block (`block.len()` >= [`HEADER_LEN`]).
pub fn fill_block(block: &mut [u8], lba: u64, seq: u64, run: u64) {
    let id = write_id(run, lba, seq);
    block[..8].copy_from_slice(&MAGIC.to_le_bytes());
    block[OFF_LBA..OFF_LBA + 8].copy_from_slice(&lba.to_le_bytes());
    block[OFF_SEQ..OFF_SEQ + 8].copy_from_slice(&seq.to_le_bytes());
    block[OFF_RUN..OFF_RUN + 8].copy_from_slice(&run.to_le_bytes());
    block[OFF_WRITE_ID..OFF_WRITE_ID + 8].copy_from_slice(&id.to_le_bytes());
    let len = block.len() as u32;
    block[OFF_LEN..OFF_LEN + 4].copy_from_slice(&len.to_le_bytes());
    fill_payload(&mut block[HEADER_LEN..], id);
    let sum = crc(block);
    block[OFF_CRC..OFF_CRC + 4].copy_from_slice(&sum.to_le_bytes());
}

/// Checks a block read from `lba` whose sequence number must lie in `lo..=hi` (0: the
/// block's content from before this run). Returns the sequence number found.
pub fn check_block(block: &[u8], lba: u64, lo: u64, hi: u64, run: u64) -> Result<u64, Mismatch> {
    if get64(block, 0) != MAGIC {
        // No header at all: never written (or overwritten by something else entirely).
        return if lo == 0 {
            Ok(0)
        } else {
            Err(Mismatch::LostWrite)
        };
    }
    if get32(block, OFF_CRC) != crc(block) || get32(block, OFF_LEN) as usize != block.len() {
        return Err(Mismatch::Corrupt);
    }
    if get64(block, OFF_LBA) != lba {
        return Err(Mismatch::WrongLba);
    }
    let seq = if get64(block, OFF_RUN) == run {
        get64(block, OFF_SEQ)
    } else {
        0
    };
    if seq < lo {
        return Err(Mismatch::LostWrite);
    }
    if seq > hi {
        return Err(Mismatch::Phantom);
    }
    if seq > 0 {
        let id = get64(block, OFF_WRITE_ID);
        if id != write_id(run, lba, seq) || !payload_matches(&block[HEADER_LEN..], id) {
            return Err(Mismatch::Corrupt);
        }
    }
    Ok(seq)
}

/// One thread's verification state over its slice of the span.
#[derive(Debug)]
pub struct Verifier {
    /// First I/O position of this thread's slice (in I/O-sized units from LBA 0).
    first_position: u64,
    blocks_per_io: u64,
    lba_size: usize,
    run: u64,
    /// Per position of the slice: [`IN_FLIGHT`] | last acknowledged sequence, or [`POISONED`].
    state: Vec<u32>,
    /// Per position of the slice: reads in flight (a write waits for none; at `u8::MAX` further
    /// reads of the position are drawn again).
    reads: Vec<u8>,
    /// Per I/O buffer index.
    slots: Vec<Slot>,
    /// A position no longer written (the target of a test fault, so the final pass sees it).
    frozen: Option<usize>,
    fault: Option<FaultPlan>,
    completions: u64,
    final_pass: bool,
    /// Counts.
    pub stats: VerifyStats,
}

impl Verifier {
    /// Thread `thread`'s verifier (allocates its state: call before the hot loop).
    pub fn new(
        config: &Config,
        geometry: &Geometry,
        thread: usize,
        run: u64,
        fault: Option<FaultPlan>,
    ) -> Self {
        let (first_position, positions) = geometry.share(config, thread);
        Self {
            first_position,
            blocks_per_io: geometry.blocks_per_io,
            lba_size: geometry.lba_size as usize,
            run,
            state: vec![0; positions as usize],
            reads: vec![0; positions as usize],
            slots: vec![Slot::default(); config.queue_depth as usize],
            frozen: None,
            fault: if thread == 0 { fault } else { None },
            completions: 0,
            final_pass: false,
            stats: VerifyStats::default(),
        }
    }

    #[inline]
    fn position(&self, lba: u64) -> usize {
        (lba / self.blocks_per_io - self.first_position) as usize
    }

    fn lba_of(&self, position: usize) -> u64 {
        (self.first_position + position as u64) * self.blocks_per_io
    }

    /// Positions of the slice.
    pub fn positions(&self) -> usize {
        self.state.len()
    }

    /// The LBA of `position` if it holds an acknowledged write to check.
    pub fn written(&self, position: usize) -> Option<u64> {
        let s = self.state[position];
        (s != POISONED && s & SEQ_MASK != 0).then(|| self.lba_of(position))
    }

    /// Starts the final pass: later reads count as final-pass checks.
    pub fn begin_final_pass(&mut self) {
        self.final_pass = true;
    }

    fn check_read(&mut self, slot: Slot, buf: &[u8]) {
        let p = self.position(slot.lba);
        let s = self.state[p];
        if s == POISONED {
            return;
        }
        let lo = u64::from(slot.seq);
        let hi = u64::from(s & SEQ_MASK) + u64::from(s & IN_FLIGHT != 0);
        let n = self.blocks_per_io as usize;
        if hi == 0 {
            self.stats.blocks_unwritten += n as u64;
            return;
        }
        for (i, block) in buf.chunks_exact(self.lba_size).take(n).enumerate() {
            let lba = slot.lba + i as u64;
            if let Err(kind) = check_block(block, lba, lo, hi, self.run) {
                let found = get64(block, OFF_SEQ);
                let magic = get64(block, 0) == MAGIC;
                let header_lba = get64(block, OFF_LBA);
                let final_pass = self.final_pass;
                self.stats.record(kind, || {
                    format!(
                        "LBA {lba} ({}): expected sequence {lo}..={hi}, block has {}",
                        if final_pass {
                            "final pass"
                        } else {
                            "workload read"
                        },
                        if magic {
                            format!("sequence {found}, header LBA {header_lba}")
                        } else {
                            "no header".to_string()
                        }
                    )
                });
            }
            self.stats.blocks_verified += 1;
            if self.final_pass {
                self.stats.blocks_verified_final += 1;
            } else {
                self.stats.blocks_verified_in_reads += 1;
            }
        }
    }

    /// Prepares a final-pass read of `lba` into slot `slot`.
    pub fn prepare_final_read(&mut self, slot: u32, lba: u64) {
        let p = self.position(lba);
        self.slots[slot as usize] = Slot {
            lba,
            seq: self.state[p] & SEQ_MASK,
            write: false,
        };
    }

    #[cold]
    fn apply_fault_at_submit(&mut self, p: usize, lba: u64) {
        let Some(plan) = &self.fault else { return };
        if let SimFault::LoseWriteAfter(n) = plan.fault {
            if self.completions >= n {
                plan.sim.faults().lose_write_at(plan.nsid, lba);
                self.frozen = Some(p);
                self.fault = None;
            }
        }
    }

    #[cold]
    fn apply_fault_at_completion(&mut self, p: usize, lba: u64) {
        let Some(plan) = &self.fault else { return };
        if let SimFault::StallAfter(n) = plan.fault {
            if self.completions >= n {
                plan.sim
                    .faults()
                    .delay_execution(crate::args::STALLED_COMMANDS, crate::args::STALL);
                self.fault = None;
            }
            return;
        }
        if let SimFault::CorruptAfter(n) = plan.fault {
            if self.completions >= n {
                // Flip a payload byte of the position's first block on the medium.
                let offset = lba * self.lba_size as u64 + HEADER_LEN as u64;
                let mut byte = plan.sim.read_disk(plan.nsid, offset, 1);
                byte[0] ^= 0x5a;
                plan.sim.write_disk(plan.nsid, offset, &byte);
                self.frozen = Some(p);
                self.fault = None;
            }
        }
    }
}

impl Check for Verifier {
    fn next_io(&mut self, gen: &mut LbaGen) -> (u64, bool) {
        let mut draws = 0;
        loop {
            let (lba, is_write) = gen.next_io();
            let p = self.position(lba);
            let writing = self.state[p] & IN_FLIGHT != 0;
            let free = if is_write {
                !writing && self.reads[p] == 0 && self.frozen != Some(p)
            } else {
                !writing && self.reads[p] < u8::MAX
            };
            if free {
                return (lba, is_write);
            }
            draws += 1;
            if draws >= MAX_REDRAWS {
                return (lba, false);
            }
        }
    }

    fn prepare(&mut self, slot: u32, lba: u64, is_write: bool, buf: &mut [u8]) {
        let p = self.position(lba);
        let acked = self.state[p] & SEQ_MASK;
        let seq = if is_write {
            let seq = (acked + 1).min(SEQ_MASK);
            self.state[p] = acked | IN_FLIGHT;
            for (i, block) in buf
                .chunks_exact_mut(self.lba_size)
                .take(self.blocks_per_io as usize)
                .enumerate()
            {
                fill_block(block, lba + i as u64, u64::from(seq), self.run);
            }
            if self.fault.is_some() {
                self.apply_fault_at_submit(p, lba);
            }
            seq
        } else {
            self.reads[p] = self.reads[p].saturating_add(1);
            acked
        };
        self.slots[slot as usize] = Slot {
            lba,
            seq,
            write: is_write,
        };
    }

    fn refused(&mut self, slot: u32) {
        let s = self.slots[slot as usize];
        let p = self.position(s.lba);
        if s.write {
            self.state[p] &= SEQ_MASK;
        } else {
            self.reads[p] = self.reads[p].saturating_sub(1);
        }
    }

    fn completed(&mut self, slot: u32, ok: bool, buf: Option<&[u8]>) {
        self.completions += 1;
        let s = self.slots[slot as usize];
        let p = self.position(s.lba);
        if s.write {
            if !ok {
                // The medium may or may not hold the write: nothing to expect any more.
                self.state[p] = POISONED;
                return;
            }
            if self.state[p] != POISONED {
                self.state[p] = s.seq;
            }
            if self.fault.is_some() {
                self.apply_fault_at_completion(p, s.lba);
            }
        } else {
            // Saturating: the final pass reads without `prepare`.
            self.reads[p] = self.reads[p].saturating_sub(1);
            if let (true, Some(buf)) = (ok, buf) {
                self.check_read(s, buf);
            }
        }
    }

    fn verifier(&mut self) -> Option<&mut Verifier> {
        Some(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(lba: u64, seq: u64, run: u64) -> Vec<u8> {
        let mut b = vec![0u8; 512];
        fill_block(&mut b, lba, seq, run);
        b
    }

    #[test]
    fn a_written_block_checks_and_each_kind_is_told_apart() {
        let b = block(7, 3, 99);
        assert_eq!(check_block(&b, 7, 3, 3, 99), Ok(3));
        assert_eq!(check_block(&b, 7, 2, 4, 99), Ok(3));
        assert_eq!(check_block(&b, 8, 3, 3, 99), Err(Mismatch::WrongLba));
        assert_eq!(check_block(&b, 7, 4, 4, 99), Err(Mismatch::LostWrite));
        assert_eq!(check_block(&b, 7, 1, 2, 99), Err(Mismatch::Phantom));
        // Another run's block is as good as unwritten.
        assert_eq!(check_block(&b, 7, 0, 1, 5), Ok(0));
        assert_eq!(check_block(&b, 7, 1, 1, 5), Err(Mismatch::LostWrite));
        let mut torn = b.clone();
        torn[300] ^= 1;
        assert_eq!(check_block(&torn, 7, 3, 3, 99), Err(Mismatch::Corrupt));
        // Half of a newer write over an older one: the checksum catches it.
        let newer = block(7, 4, 99);
        let mut mixed = b.clone();
        mixed[256..].copy_from_slice(&newer[256..]);
        assert_eq!(check_block(&mixed, 7, 3, 4, 99), Err(Mismatch::Corrupt));
        let zeros = vec![0u8; 512];
        assert_eq!(check_block(&zeros, 7, 0, 1, 99), Ok(0));
        assert_eq!(check_block(&zeros, 7, 1, 1, 99), Err(Mismatch::LostWrite));
    }

    fn config(line: &[&str]) -> Config {
        use clap::Parser;
        crate::args::Args::try_parse_from(std::iter::once("nvme-perf").chain(line.iter().copied()))
            .unwrap()
            .validate()
            .unwrap()
    }

    #[test]
    fn span_limits_are_refused_with_a_fix() {
        let c = config(&["sim", "--verify", "-w", "randwrite", "-q", "32", "-j", "2"]);
        let huge = Geometry::new(&c, 1, 512, 1 << 40).unwrap();
        let err = check_span(&c, &huge).unwrap_err().to_string();
        assert!(err.contains("--range-blocks 536870912 or less"), "{err}");
        let small = Geometry::new(&c, 1, 4096, 64).unwrap();
        let err = check_span(&c, &small).unwrap_err().to_string();
        assert!(err.contains("--range-blocks 66 or more"), "{err}");
        assert!(check_span(&c, &Geometry::new(&c, 1, 4096, 66).unwrap()).is_ok());
    }

    #[test]
    fn sequence_state_follows_writes_and_reads() {
        let c = config(&["sim", "--verify", "-w", "randrw", "-q", "4"]);
        let g = Geometry::new(&c, 1, 512, 64).unwrap();
        let mut v = Verifier::new(&c, &g, 0, 42, None);
        let mut w = vec![0u8; 4096];
        // Write position 1 (LBAs 8..16) twice; a read racing the second write may see 1 or 2.
        v.prepare(0, 8, true, &mut w);
        v.completed(0, true, None);
        v.prepare(1, 8, false, &mut []);
        v.prepare(2, 8, true, &mut w);
        assert_eq!(check_block(&w[..512], 8, 2, 2, 42), Ok(2));
        let mut old = vec![0u8; 4096];
        for i in 0..8 {
            fill_block(&mut old[i * 512..(i + 1) * 512], 8 + i as u64, 1, 42);
        }
        v.completed(1, true, Some(&old));
        v.completed(2, true, None);
        assert_eq!((v.stats.mismatches, v.stats.blocks_verified), (0, 8));
        // Now 2 is acknowledged: a read returning 1 is a lost write.
        v.prepare(3, 8, false, &mut []);
        v.completed(3, true, Some(&old));
        assert_eq!((v.stats.lost_write, v.stats.blocks_verified), (8, 16));
        assert!(v.stats.first_mismatch.as_deref().unwrap().contains("LBA 8"));
        assert_eq!(v.written(1), Some(8));
        assert_eq!(v.written(0), None);
        // A write cut off by a reset (retryable error) is resubmitted as is, same buffer and
        // sequence number, without a completion in between: the position stays in flight, so
        // a read may find the acknowledged content (2) or the retried one (3) until it is acked.
        let mut two = vec![0u8; 4096];
        for i in 0..8 {
            fill_block(&mut two[i * 512..(i + 1) * 512], 8 + i as u64, 2, 42);
        }
        v.prepare(0, 8, true, &mut w);
        let three = w.clone();
        for content in [&two, &three, &two] {
            v.prepare(1, 8, false, &mut []);
            v.completed(1, true, Some(content));
        }
        v.completed(0, true, None);
        assert_eq!((v.stats.lost_write, v.stats.blocks_verified), (8, 40));
        // Acknowledged: now only 3 passes.
        v.prepare(1, 8, false, &mut []);
        v.completed(1, true, Some(&two));
        assert_eq!(v.stats.lost_write, 16);
        // A failed write leaves its position unchecked.
        v.prepare(0, 16, true, &mut w);
        v.completed(0, false, None);
        assert_eq!(v.written(2), None);
    }

    #[test]
    fn payload_depends_on_lba_and_sequence() {
        let a = block(1, 1, 5);
        assert_ne!(a[HEADER_LEN..], block(2, 1, 5)[HEADER_LEN..]);
        assert_ne!(a[HEADER_LEN..], block(1, 2, 5)[HEADER_LEN..]);
        assert_eq!(a, block(1, 1, 5));
    }
}
