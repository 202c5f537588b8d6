//! The copy engine of `nvme-dd`: plans a transfer against a namespace's geometry, then keeps up
//! to `qd` record-sized requests in flight through the driver's callback API.
//!
//! Invariants:
//! - every request's `user_data` is its record index (0-based, in units of `bs` from the start
//!   of the transfer), so a completion alone says where its data belongs;
//! - only the last record of a transfer can be partial, so byte counts need no per-request
//!   bookkeeping;
//! - output to a file lands at `(seek + index) * bs` whatever the completion order; output to a
//!   stream (stdout, a pipe) is written in record order through a reorder window that can hold
//!   at most `qd` records, because there are only `qd` buffers;
//! - after the first error nothing more is submitted, and the engine returns only once every
//!   request in flight has completed (the driver owns their buffers until then).
//!
//! The engine talks to the queue through [`IoQueue`], so its ordering and error handling are
//! unit-tested against an in-memory queue that completes requests out of order.

use nvme_driver::WriteFlags;
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

use crate::operands::MAX_BYTE_OFFSET;
use nvme_driver::{Completion, DmaBuffer, IoFailure, Namespace, MAX_BLOCKS_PER_COMMAND};
use nvme_tool_support::{AnyQueuePair, IoQueue as _};

/// Upper bound on the DMA memory the record buffers may take (the queue depth is lowered to
/// fit), so a large `bs` cannot exhaust hugepages. One record is one buffer, so `bs` itself may
/// not exceed it: the operands refuse a larger `bs`, and so does [`queue_shape`].
pub const DMA_BUDGET_BYTES: usize = 256 << 20;
/// Interval between progress lines.
const PROGRESS_INTERVAL: Duration = Duration::from_secs(1);
/// Bytes per MiB, for rates.
const MIB: f64 = (1u64 << 20) as f64;

/// Errors of planning or running a copy.
#[derive(Debug, thiserror::Error)]
pub enum CopyError {
    /// `bs` is not a whole number of blocks.
    #[error(
        "bs={bs} is not a multiple of namespace {nsid}'s block size of {block_size} bytes: \
         use bs={block_size} or a multiple of it"
    )]
    BlockSize {
        bs: usize,
        nsid: u32,
        block_size: u32,
    },
    /// One record needs more commands than a queue of this controller can hold.
    #[error(
        "bs={bs} needs {commands} commands of at most {per_command} bytes each, but this \
         controller's queues hold at most {slots}: use a smaller bs"
    )]
    RecordTooLarge {
        bs: usize,
        commands: usize,
        per_command: usize,
        slots: u32,
    },
    /// A record is larger than the DMA memory all records together may take.
    #[error(
        "bs={bs} needs a DMA buffer of {bs} bytes per record, more than nvme-dd's limit of \
         {limit} bytes: use a bs of at most {limit} bytes"
    )]
    RecordOverBudget { bs: usize, limit: usize },
    /// A record of a write of unknown length lies past the last 64-bit LBA.
    #[error(
        "record {record} of the input lies past the largest 64-bit LBA, beyond any namespace: \
         limit the input with count="
    )]
    PastLastLba { record: u64 },
    /// `skip`/`seek`/`count` in blocks does not fit in 64 bits.
    #[error("{operand}={value} with bs={bs} is beyond any namespace's last block")]
    Overflow {
        operand: &'static str,
        value: u64,
        bs: usize,
    },
    /// The transfer does not fit in the namespace (the driver's range error).
    #[error(transparent)]
    Range(nvme_driver::Error),
    /// A request failed.
    #[error("I/O on record {record} (LBA {lba}) failed: {source}")]
    Io {
        record: u64,
        lba: u64,
        source: nvme_driver::Error,
    },
    /// A completion came back without its data buffer.
    #[error("the driver completed record {record} without giving its buffer back")]
    MissingBuffer { record: u64 },
    /// Reading the input file failed.
    #[error("reading the input failed: {0}")]
    Input(#[source] io::Error),
    /// Writing the output file failed.
    #[error("writing the output failed: {0}")]
    Output(#[source] io::Error),
}

/// Size and range of a namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    /// Namespace id.
    pub nsid: u32,
    /// Bytes per logical block.
    pub block_size: u32,
    /// Blocks in the namespace (valid LBAs are `0..blocks`).
    pub blocks: u64,
}

impl Geometry {
    /// The geometry of a driver namespace.
    pub fn of(ns: &Namespace) -> Self {
        Geometry {
            nsid: ns.nsid(),
            block_size: ns.block_size(),
            blocks: ns.blocks(),
        }
    }

    /// `blocks` blocks from `lba` lie inside the namespace; the error is the driver's
    /// `LbaOutOfRange`.
    fn check_range(&self, lba: u64, blocks: u64) -> Result<(), CopyError> {
        match lba.checked_add(blocks) {
            Some(end) if end <= self.blocks => Ok(()),
            _ => Err(CopyError::Range(nvme_driver::Error::LbaOutOfRange {
                nsid: self.nsid,
                lba,
                blocks,
                capacity: self.blocks,
            })),
        }
    }

    /// Blocks per record of `bs` bytes; `bs` must be a whole number of blocks.
    fn blocks_per_record(&self, bs: usize) -> Result<u32, CopyError> {
        let block_size = self.block_size as usize;
        let blocks = (bs % block_size == 0)
            .then(|| bs / block_size)
            .and_then(|b| u32::try_from(b).ok());
        blocks.ok_or(CopyError::BlockSize {
            bs,
            nsid: self.nsid,
            block_size: self.block_size,
        })
    }
}

/// Where the records of a transfer lie on the namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    /// Bytes per record.
    pub bs: usize,
    /// Bytes per block.
    pub block_size: u32,
    /// LBA of record 0.
    pub start_lba: u64,
    /// Blocks per full record.
    pub blocks_per_record: u32,
    /// Records to transfer; `None`: until the input ends (writes only).
    pub records: Option<u64>,
    /// Blocks of the last record when it is partial (reads to the end of the namespace).
    pub last_record_blocks: u32,
}

impl Plan {
    /// Plans reading `count` records (all to the end when `None`) after skipping `skip`.
    pub fn read(
        geo: &Geometry,
        bs: usize,
        count: Option<u64>,
        skip: u64,
    ) -> Result<Plan, CopyError> {
        let bpr = geo.blocks_per_record(bs)?;
        let start_lba = skip
            .checked_mul(u64::from(bpr))
            .ok_or(CopyError::Overflow {
                operand: "skip",
                value: skip,
                bs,
            })?;
        let (records, last_record_blocks) = match count {
            Some(0) => (0, bpr),
            Some(n) => {
                let blocks = n.checked_mul(u64::from(bpr)).ok_or(CopyError::Overflow {
                    operand: "count",
                    value: n,
                    bs,
                })?;
                geo.check_range(start_lba, blocks)?;
                (n, bpr)
            }
            None => {
                if start_lba > geo.blocks {
                    geo.check_range(start_lba, 1)?;
                }
                let remaining = geo.blocks - start_lba;
                let records = remaining.div_ceil(u64::from(bpr));
                let tail = (remaining % u64::from(bpr)) as u32;
                (records, if tail == 0 { bpr } else { tail })
            }
        };
        Ok(Plan {
            bs,
            block_size: geo.block_size,
            start_lba,
            blocks_per_record: bpr,
            records: Some(records),
            last_record_blocks,
        })
    }

    /// Plans writing at most `count` records after skipping `seek` records of the namespace;
    /// `input_len` (bytes left in the input, when known) narrows the range check.
    pub fn write(
        geo: &Geometry,
        bs: usize,
        count: Option<u64>,
        seek: u64,
        input_len: Option<u64>,
    ) -> Result<Plan, CopyError> {
        let bpr = geo.blocks_per_record(bs)?;
        let start_lba = seek
            .checked_mul(u64::from(bpr))
            .ok_or(CopyError::Overflow {
                operand: "seek",
                value: seek,
                bs,
            })?;
        let limit = count.map(|n| {
            n.checked_mul(bs as u64).ok_or(CopyError::Overflow {
                operand: "count",
                value: n,
                bs,
            })
        });
        let limit = limit.transpose()?;
        let bytes = match (limit, input_len) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        match bytes {
            Some(0) => {}
            Some(bytes) => geo.check_range(start_lba, bytes.div_ceil(u64::from(geo.block_size)))?,
            // Unknown length: the first block must exist; the driver checks each request.
            None if start_lba > geo.blocks => geo.check_range(start_lba, 1)?,
            None => {}
        }
        Ok(Plan {
            bs,
            block_size: geo.block_size,
            start_lba,
            blocks_per_record: bpr,
            records: count,
            last_record_blocks: bpr,
        })
    }

    /// LBA of record `index`; `None` past the last 64-bit LBA (only a write of unknown length
    /// can get there: a read's records are range-checked by [`Plan::read`]).
    fn lba(&self, index: u64) -> Option<u64> {
        index
            .checked_mul(u64::from(self.blocks_per_record))
            .and_then(|offset| self.start_lba.checked_add(offset))
    }

    /// [`Plan::lba`] for error reports, where the LBA of a request that was submitted is
    /// wanted (it exists); `u64::MAX` stands for "past the last LBA".
    fn reported_lba(&self, index: u64) -> u64 {
        self.lba(index).unwrap_or(u64::MAX)
    }

    /// Blocks of record `index` of a read.
    fn read_blocks(&self, index: u64) -> u32 {
        if Some(index + 1) == self.records {
            self.last_record_blocks
        } else {
            self.blocks_per_record
        }
    }
}

/// Queue depth and request count for a transfer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueShape {
    /// Records in flight at once (= record buffers).
    pub qd: usize,
    /// Entries of the I/O queue pair: room for `qd` records split into commands, plus the one
    /// entry a full ring keeps empty.
    pub depth: u32,
}

/// Sizes the queue pair: each record of `bs` bytes may be split into several commands of at
/// most `max_transfer` bytes; `qd` is lowered to what the controller's queues (CAP.MQES+1
/// entries) and [`DMA_BUDGET_BYTES`] allow.
pub fn queue_shape(
    bs: usize,
    block_size: u32,
    max_transfer: usize,
    max_queue_entries: u32,
    qd: usize,
) -> Result<QueueShape, CopyError> {
    if bs > DMA_BUDGET_BYTES {
        return Err(CopyError::RecordOverBudget {
            bs,
            limit: DMA_BUDGET_BYTES,
        });
    }
    let block_size = block_size as usize;
    let per_command = (max_transfer / block_size * block_size)
        .clamp(block_size, MAX_BLOCKS_PER_COMMAND as usize * block_size);
    let commands = bs.div_ceil(per_command);
    let slots = max_queue_entries.saturating_sub(1);
    if commands > slots as usize {
        return Err(CopyError::RecordTooLarge {
            bs,
            commands,
            per_command,
            slots,
        });
    }
    let qd = qd
        .min(slots as usize / commands)
        .min((DMA_BUDGET_BYTES / bs).max(1))
        .max(1);
    Ok(QueueShape {
        qd,
        depth: (qd * commands + 1) as u32,
    })
}

/// The queue operations the engine needs.
pub trait IoQueue {
    /// Queues a read of `blocks` blocks at `lba` into `buf`.
    fn submit_read(
        &mut self,
        lba: u64,
        blocks: u32,
        buf: DmaBuffer,
        user_data: u64,
    ) -> Result<(), IoFailure>;
    /// Queues a write of `blocks` blocks at `lba` from `buf`.
    fn submit_write(
        &mut self,
        lba: u64,
        blocks: u32,
        buf: DmaBuffer,
        fua: bool,
        user_data: u64,
    ) -> Result<(), IoFailure>;
    /// Moves finished requests into `done`.
    fn poll(&mut self, done: &mut Vec<Completion>);
    /// Requests in flight.
    fn in_flight(&self) -> usize;
}

/// A driver queue pair (PCIe or NVMe/TCP) bound to one namespace.
pub struct NamespaceQueue {
    /// The queue pair.
    pub qp: AnyQueuePair,
    /// The namespace every request goes to.
    pub ns: Namespace,
}

impl IoQueue for NamespaceQueue {
    fn submit_read(
        &mut self,
        lba: u64,
        blocks: u32,
        buf: DmaBuffer,
        user_data: u64,
    ) -> Result<(), IoFailure> {
        self.qp.submit_read(&self.ns, lba, blocks, buf, user_data)
    }

    fn submit_write(
        &mut self,
        lba: u64,
        blocks: u32,
        buf: DmaBuffer,
        fua: bool,
        user_data: u64,
    ) -> Result<(), IoFailure> {
        self.qp.submit_write(
            &self.ns,
            lba,
            blocks,
            buf,
            WriteFlags::NONE.with_fua(fua),
            user_data,
        )
    }

    fn poll(&mut self, done: &mut Vec<Completion>) {
        self.qp.poll(|c| done.push(c));
    }

    fn in_flight(&self) -> usize {
        self.qp.in_flight() as usize
    }
}

/// Full and partial records, as dd counts them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Records {
    /// Records of exactly `bs` bytes.
    pub full: u64,
    /// Shorter records.
    pub partial: u64,
}

impl Records {
    fn count(&mut self, len: usize, bs: usize) {
        if len == bs {
            self.full += 1;
        } else {
            self.partial += 1;
        }
    }
}

/// What a copy did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CopyStats {
    /// Records read from the input.
    pub records_in: Records,
    /// Records written to the output.
    pub records_out: Records,
    /// Data bytes written to the output (zero padding excluded).
    pub bytes: u64,
    /// Zero bytes added to the last record to make it whole blocks (writes only).
    pub padding: usize,
    /// Wall time of the copy.
    pub elapsed: Duration,
}

impl CopyStats {
    /// dd's three summary lines.
    pub fn summary(&self) -> String {
        let secs = self.elapsed.as_secs_f64();
        let mib = self.bytes as f64 / MIB;
        let rate = if secs > 0.0 { mib / secs } else { 0.0 };
        format!(
            "{}+{} records in\n{}+{} records out\n{} bytes ({mib:.2} MiB) copied, {secs:.3} s, {rate:.1} MiB/s\n",
            self.records_in.full, self.records_in.partial, self.records_out.full, self.records_out.partial, self.bytes
        )
    }
}

/// A copy's statistics, and the error that stopped it, if any.
#[derive(Debug)]
pub struct CopyOutcome {
    /// What was copied before the end (or the error).
    pub stats: CopyStats,
    /// The first error; the copy stopped there.
    pub error: Option<CopyError>,
}

/// A progress line on stderr once per second, after the first second.
pub struct Progress {
    enabled: bool,
    start: Instant,
    last: Instant,
    printed: bool,
}

impl Progress {
    /// Starts the clock; `enabled = false` prints nothing.
    pub fn new(enabled: bool) -> Self {
        let now = Instant::now();
        Progress {
            enabled,
            start: now,
            last: now,
            printed: false,
        }
    }

    fn update(&mut self, bytes: u64) {
        if !self.enabled || self.last.elapsed() < PROGRESS_INTERVAL {
            return;
        }
        self.last = Instant::now();
        let secs = self.start.elapsed().as_secs_f64();
        let mib = bytes as f64 / MIB;
        eprint!(
            "\r{bytes} bytes ({mib:.2} MiB) copied, {secs:.0} s, {:.1} MiB/s   ",
            mib / secs
        );
        self.printed = true;
    }

    fn finish(&mut self) {
        if self.printed {
            eprintln!();
        }
    }
}

/// Where data read from the namespace goes.
pub enum Output<'a> {
    /// A file or block device, written at `(seek + index) * bs` with positional writes.
    Positional { file: File, seek: u64 },
    /// A stream (stdout, pipe): written in record order through a reorder window.
    Sequential {
        writer: Box<dyn Write + 'a>,
        next: u64,
        pending: BTreeMap<u64, (DmaBuffer, usize)>,
    },
}

impl<'a> Output<'a> {
    /// A stream output.
    pub fn sequential(writer: Box<dyn Write + 'a>) -> Self {
        Output::Sequential {
            writer,
            next: 0,
            pending: BTreeMap::new(),
        }
    }

    /// Writes record `index` (its first `len` bytes) or holds it until its predecessors are
    /// written; buffers that are done with go back to `free`.
    fn deliver(
        &mut self,
        index: u64,
        buf: DmaBuffer,
        len: usize,
        bs: usize,
        free: &mut Vec<DmaBuffer>,
        stats: &mut CopyStats,
    ) -> io::Result<()> {
        match self {
            Output::Positional { file, seek } => {
                let offset = seek
                    .checked_add(index)
                    .and_then(|record| record.checked_mul(bs as u64))
                    .filter(|&offset| offset <= MAX_BYTE_OFFSET);
                let result = match offset {
                    Some(offset) => file.write_all_at(&buf[..len], offset),
                    None => Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!(
                            "record {index} after seek={seek} with bs={bs} lies past the largest \
                             64-bit byte offset: use a smaller seek= or bs="
                        ),
                    )),
                };
                free.push(buf);
                result?;
                stats.records_out.count(len, bs);
                stats.bytes += len as u64;
            }
            Output::Sequential {
                writer,
                next,
                pending,
            } => {
                pending.insert(index, (buf, len));
                while let Some((buf, len)) = pending.remove(next) {
                    let result = writer.write_all(&buf[..len]);
                    free.push(buf);
                    result?;
                    stats.records_out.count(len, bs);
                    stats.bytes += len as u64;
                    *next += 1;
                }
            }
        }
        Ok(())
    }

    fn finish(&mut self) -> io::Result<()> {
        match self {
            Output::Positional { .. } => Ok(()),
            Output::Sequential { writer, .. } => writer.flush(),
        }
    }
}

/// Records the first error; later ones are only logged (they are usually consequences).
/// After a submission: the next record on success; otherwise the buffer goes back to the free
/// list and the error is kept (the copy stops submitting and drains).
fn account_submission(
    submitted: Result<(), IoFailure>,
    plan: &Plan,
    next: &mut u64,
    free: &mut Vec<DmaBuffer>,
    error: &mut Option<CopyError>,
) {
    match submitted {
        Ok(()) => *next += 1,
        Err(f) => {
            free.extend(f.buffer);
            set_error(
                error,
                CopyError::Io {
                    record: *next,
                    lba: plan.reported_lba(*next),
                    source: f.error,
                },
            );
        }
    }
}

fn set_error(slot: &mut Option<CopyError>, error: CopyError) {
    match slot {
        None => *slot = Some(error),
        Some(_) => log::error!("{error}"),
    }
}

/// Reads the namespace records of `plan` into `out`, with `buffers.len()` requests in flight.
pub fn read_namespace<Q: IoQueue>(
    queue: &mut Q,
    plan: &Plan,
    mut free: Vec<DmaBuffer>,
    out: &mut Output<'_>,
    progress: &mut Progress,
) -> CopyOutcome {
    let start = Instant::now();
    let records = plan.records.unwrap_or(0);
    let block_size = plan.block_size as usize;
    let mut stats = CopyStats::default();
    let mut error = None;
    let mut next = 0u64;
    let mut done = Vec::with_capacity(free.len());
    loop {
        while error.is_none() && next < records {
            let Some(buf) = free.pop() else { break };
            let Some(lba) = plan.lba(next) else {
                free.push(buf);
                set_error(&mut error, CopyError::PastLastLba { record: next });
                break;
            };
            let submitted = queue.submit_read(lba, plan.read_blocks(next), buf, next);
            account_submission(submitted, plan, &mut next, &mut free, &mut error);
        }
        if queue.in_flight() == 0 {
            break;
        }
        queue.poll(&mut done);
        if done.is_empty() {
            continue;
        }
        for c in done.drain(..) {
            let record = c.user_data;
            match (c.result, c.buffer) {
                (Ok(_), Some(buf)) => {
                    let len = plan.read_blocks(record) as usize * block_size;
                    stats.records_in.count(len, plan.bs);
                    if error.is_some() {
                        free.push(buf);
                    } else if let Err(e) =
                        out.deliver(record, buf, len, plan.bs, &mut free, &mut stats)
                    {
                        set_error(&mut error, CopyError::Output(e));
                    }
                }
                (Ok(_), None) => set_error(&mut error, CopyError::MissingBuffer { record }),
                (Err(e), buf) => {
                    free.extend(buf);
                    set_error(
                        &mut error,
                        CopyError::Io {
                            record,
                            lba: plan.reported_lba(record),
                            source: e,
                        },
                    );
                }
            }
        }
        progress.update(stats.bytes);
    }
    if error.is_none() {
        if let Err(e) = out.finish() {
            error = Some(CopyError::Output(e));
        }
    }
    progress.finish();
    stats.elapsed = start.elapsed();
    CopyOutcome { stats, error }
}

/// Fills `buf` from `input` until it is full or the input ends; returns the bytes read.
fn read_full(input: &mut dyn Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match input.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

/// Writes records read from `input` to the namespace as `plan` says, with `buffers.len()`
/// requests in flight. A short last record is padded with zeros to whole blocks.
pub fn write_namespace<Q: IoQueue>(
    queue: &mut Q,
    plan: &Plan,
    mut free: Vec<DmaBuffer>,
    input: &mut dyn Read,
    fua: bool,
    progress: &mut Progress,
) -> CopyOutcome {
    let start = Instant::now();
    let block_size = plan.block_size as usize;
    let mut stats = CopyStats::default();
    let mut error = None;
    let mut next = 0u64;
    let mut eof = false;
    // (record index, data bytes) of the short last record, if any.
    let mut short: Option<(u64, usize)> = None;
    let mut done = Vec::with_capacity(free.len());
    loop {
        while error.is_none() && !eof && plan.records.map_or(true, |r| next < r) {
            let Some(mut buf) = free.pop() else { break };
            let len = match read_full(input, &mut buf[..plan.bs]) {
                Ok(len) => len,
                Err(e) => {
                    free.push(buf);
                    set_error(&mut error, CopyError::Input(e));
                    break;
                }
            };
            if len == 0 {
                free.push(buf);
                eof = true;
                break;
            }
            stats.records_in.count(len, plan.bs);
            let padded = len.next_multiple_of(block_size);
            if len < plan.bs {
                eof = true;
                short = Some((next, len));
                buf[len..padded].fill(0);
                stats.padding = padded - len;
            }
            let blocks = (padded / block_size) as u32;
            let Some(lba) = plan.lba(next) else {
                free.push(buf);
                set_error(&mut error, CopyError::PastLastLba { record: next });
                break;
            };
            let submitted = queue.submit_write(lba, blocks, buf, fua, next);
            account_submission(submitted, plan, &mut next, &mut free, &mut error);
        }
        if queue.in_flight() == 0 {
            break;
        }
        queue.poll(&mut done);
        if done.is_empty() {
            continue;
        }
        for c in done.drain(..) {
            let record = c.user_data;
            free.extend(c.buffer);
            match c.result {
                Ok(_) => {
                    let len = match short {
                        Some((index, len)) if index == record => len,
                        _ => plan.bs,
                    };
                    stats.records_out.count(len, plan.bs);
                    stats.bytes += len as u64;
                }
                Err(e) => set_error(
                    &mut error,
                    CopyError::Io {
                        record,
                        lba: plan.reported_lba(record),
                        source: e,
                    },
                ),
            }
        }
        progress.update(stats.bytes);
    }
    progress.finish();
    stats.elapsed = start.elapsed();
    CopyOutcome { stats, error }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvme_driver::{DmaMapper, Error, Iova};
    use nvme_vfio::DmaError;
    use std::ptr::NonNull;
    use std::sync::Arc;

    /// Maps memory at its virtual address: enough for CPU-only tests.
    struct IdentityMapper;

    static IDENTITY_DOMAIN: std::sync::OnceLock<nvme_vfio::DmaDomain> = std::sync::OnceLock::new();

    // SAFETY: identity mapping of memory the tests keep alive; one process-unique domain.
    unsafe impl DmaMapper for IdentityMapper {
        fn domain(&self) -> nvme_vfio::DmaDomain {
            *IDENTITY_DOMAIN.get_or_init(nvme_vfio::DmaDomain::unique)
        }
        unsafe fn map(&self, vaddr: NonNull<u8>, _len: usize) -> Result<Iova, DmaError> {
            Ok(Iova(vaddr.as_ptr() as u64))
        }
        fn unmap(&self, _iova: Iova, _len: usize) -> Result<(), DmaError> {
            Ok(())
        }
    }

    fn buffers(count: usize, len: usize) -> Vec<DmaBuffer> {
        let mapper: Arc<dyn DmaMapper> = Arc::new(IdentityMapper);
        DmaBuffer::allocate_many(&mapper, count, len).unwrap()
    }

    /// An in-memory namespace whose requests complete in reverse submission order, one poll
    /// after they were submitted.
    struct MemQueue {
        disk: Vec<u8>,
        block_size: usize,
        pending: Vec<Completion>,
        fail_lba: Option<u64>,
        max_in_flight: usize,
        peak_in_flight: usize,
    }

    impl MemQueue {
        fn new(blocks: usize, block_size: usize, max_in_flight: usize) -> Self {
            let disk = (0..blocks * block_size).map(|i| (i % 251) as u8).collect();
            MemQueue {
                disk,
                block_size,
                pending: Vec::new(),
                fail_lba: None,
                max_in_flight,
                peak_in_flight: 0,
            }
        }

        fn geometry(&self) -> Geometry {
            Geometry {
                nsid: 1,
                block_size: self.block_size as u32,
                blocks: (self.disk.len() / self.block_size) as u64,
            }
        }

        fn range(
            &self,
            lba: u64,
            blocks: u32,
            buf: &DmaBuffer,
        ) -> Result<std::ops::Range<usize>, Error> {
            let geo = self.geometry();
            geo.check_range(lba, u64::from(blocks))
                .map_err(|e| match e {
                    CopyError::Range(e) => e,
                    other => panic!("{other}"),
                })?;
            assert!(
                self.pending.len() < self.max_in_flight,
                "more requests in flight than buffers"
            );
            let start = lba as usize * self.block_size;
            let len = blocks as usize * self.block_size;
            assert!(buf.len() >= len);
            Ok(start..start + len)
        }

        fn complete(&mut self, lba: u64, buf: DmaBuffer, user_data: u64) {
            let result = if self.fail_lba == Some(lba) {
                Err(Error::InvalidRequest(format!(
                    "injected failure at LBA {lba}"
                )))
            } else {
                Ok(0)
            };
            self.pending.push(Completion {
                user_data,
                result,
                buffer: Some(buf),
                pieces: None,
            });
            self.peak_in_flight = self.peak_in_flight.max(self.pending.len());
        }
    }

    impl IoQueue for MemQueue {
        fn submit_read(
            &mut self,
            lba: u64,
            blocks: u32,
            mut buf: DmaBuffer,
            user_data: u64,
        ) -> Result<(), IoFailure> {
            let range = match self.range(lba, blocks, &buf) {
                Ok(r) => r,
                Err(error) => {
                    return Err(IoFailure {
                        error,
                        buffer: Some(buf),
                        pieces: None,
                    })
                }
            };
            buf[..range.len()].copy_from_slice(&self.disk[range]);
            self.complete(lba, buf, user_data);
            Ok(())
        }

        fn submit_write(
            &mut self,
            lba: u64,
            blocks: u32,
            buf: DmaBuffer,
            _fua: bool,
            user_data: u64,
        ) -> Result<(), IoFailure> {
            let range = match self.range(lba, blocks, &buf) {
                Ok(r) => r,
                Err(error) => {
                    return Err(IoFailure {
                        error,
                        buffer: Some(buf),
                        pieces: None,
                    })
                }
            };
            let len = range.len();
            self.disk[range].copy_from_slice(&buf[..len]);
            self.complete(lba, buf, user_data);
            Ok(())
        }

        fn poll(&mut self, done: &mut Vec<Completion>) {
            while let Some(c) = self.pending.pop() {
                done.push(c);
            }
        }

        fn in_flight(&self) -> usize {
            self.pending.len()
        }
    }

    const BS: usize = 2048;
    const BLOCK: usize = 512;

    #[test]
    fn read_to_file_lands_at_the_right_offsets_despite_reordering() {
        let mut q = MemQueue::new(64, BLOCK, 4);
        let plan = Plan::read(&q.geometry(), BS, Some(10), 3).unwrap();
        let path =
            std::env::temp_dir().join(format!("nvme-dd-test-{}-positional", std::process::id()));
        let file = File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        let mut out = Output::Positional { file, seek: 2 };
        let outcome = read_namespace(
            &mut q,
            &plan,
            buffers(4, BS),
            &mut out,
            &mut Progress::new(false),
        );
        let written = std::fs::read(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert!(outcome.error.is_none(), "{:?}", outcome.error);
        assert_eq!(q.peak_in_flight, 4, "keeps qd requests in flight");
        assert_eq!(
            outcome.stats.records_in,
            Records {
                full: 10,
                partial: 0
            }
        );
        assert_eq!(
            outcome.stats.records_out,
            Records {
                full: 10,
                partial: 0
            }
        );
        assert_eq!(outcome.stats.bytes, 10 * BS as u64);
        assert_eq!(written.len(), 12 * BS);
        assert!(
            written[..2 * BS].iter().all(|&b| b == 0),
            "seek region untouched"
        );
        assert_eq!(&written[2 * BS..], &q.disk[3 * BS..13 * BS]);
    }

    #[test]
    fn read_to_stream_keeps_order_and_handles_a_partial_tail() {
        // 21 blocks of 512 B = 5 records of 4 blocks + 1 block.
        let mut q = MemQueue::new(21, BLOCK, 3);
        let plan = Plan::read(&q.geometry(), BS, None, 0).unwrap();
        assert_eq!(plan.records, Some(6));
        let mut sink = Vec::new();
        let mut out = Output::sequential(Box::new(&mut sink));
        let outcome = read_namespace(
            &mut q,
            &plan,
            buffers(3, BS),
            &mut out,
            &mut Progress::new(false),
        );
        drop(out);
        assert!(outcome.error.is_none(), "{:?}", outcome.error);
        assert_eq!(
            outcome.stats.records_in,
            Records {
                full: 5,
                partial: 1
            }
        );
        assert_eq!(
            outcome.stats.records_out,
            Records {
                full: 5,
                partial: 1
            }
        );
        assert_eq!(sink, q.disk);
    }

    #[test]
    fn write_from_input_pads_the_last_record() {
        let mut q = MemQueue::new(64, BLOCK, 4);
        q.disk.fill(0xee);
        let data: Vec<u8> = (0..3 * BS + 100).map(|i| (i * 7 % 256) as u8).collect();
        let plan = Plan::write(&q.geometry(), BS, None, 1, Some(data.len() as u64)).unwrap();
        let outcome = write_namespace(
            &mut q,
            &plan,
            buffers(4, BS),
            &mut &data[..],
            false,
            &mut Progress::new(false),
        );
        assert!(outcome.error.is_none(), "{:?}", outcome.error);
        assert_eq!(
            outcome.stats.records_in,
            Records {
                full: 3,
                partial: 1
            }
        );
        assert_eq!(
            outcome.stats.records_out,
            Records {
                full: 3,
                partial: 1
            }
        );
        assert_eq!(outcome.stats.bytes, data.len() as u64);
        assert_eq!(outcome.stats.padding, BLOCK - 100);
        assert!(
            q.disk[..BS].iter().all(|&b| b == 0xee),
            "before seek untouched"
        );
        assert_eq!(&q.disk[BS..BS + data.len()], &data[..]);
        assert!(
            q.disk[BS + data.len()..BS + 3 * BS + BLOCK]
                .iter()
                .all(|&b| b == 0),
            "padding is zeros"
        );
        assert!(
            q.disk[BS + 3 * BS + BLOCK..].iter().all(|&b| b == 0xee),
            "after the last block untouched"
        );
    }

    #[test]
    fn write_stops_at_count() {
        let mut q = MemQueue::new(64, BLOCK, 2);
        let original = q.disk.clone();
        let data = vec![0x5a; 10 * BS];
        let plan = Plan::write(&q.geometry(), BS, Some(2), 0, None).unwrap();
        let outcome = write_namespace(
            &mut q,
            &plan,
            buffers(2, BS),
            &mut &data[..],
            false,
            &mut Progress::new(false),
        );
        assert!(outcome.error.is_none());
        assert_eq!(
            outcome.stats.records_out,
            Records {
                full: 2,
                partial: 0
            }
        );
        assert!(q.disk[..2 * BS].iter().all(|&b| b == 0x5a));
        assert_eq!(
            q.disk[2 * BS..],
            original[2 * BS..],
            "nothing written past count"
        );
    }

    #[test]
    fn an_io_error_stops_submission_and_drains() {
        let mut q = MemQueue::new(64, BLOCK, 4);
        q.fail_lba = Some(4 * 4); // record 4
        let plan = Plan::read(&q.geometry(), BS, None, 0).unwrap();
        let mut sink = Vec::new();
        let mut out = Output::sequential(Box::new(&mut sink));
        let outcome = read_namespace(
            &mut q,
            &plan,
            buffers(4, BS),
            &mut out,
            &mut Progress::new(false),
        );
        drop(out);
        match outcome.error {
            Some(CopyError::Io {
                record: 4, lba: 16, ..
            }) => {}
            other => panic!("expected the injected error on record 4, got {other:?}"),
        }
        assert_eq!(q.in_flight(), 0, "everything in flight was drained");
        // Records 0..4 were written in order; nothing after the failed one.
        assert_eq!(sink, q.disk[..4 * BS]);
        assert!(outcome.stats.records_in.full < 16);
    }

    #[test]
    fn unknown_length_input_past_the_end_fails_with_the_range_error() {
        let mut q = MemQueue::new(8, BLOCK, 4);
        let data = vec![1u8; 5 * BS];
        let plan = Plan::write(&q.geometry(), BS, None, 0, None).unwrap();
        let outcome = write_namespace(
            &mut q,
            &plan,
            buffers(4, BS),
            &mut &data[..],
            false,
            &mut Progress::new(false),
        );
        assert!(matches!(
            outcome.error,
            Some(CopyError::Io {
                record: 2,
                source: Error::LbaOutOfRange { .. },
                ..
            })
        ));
        assert_eq!(
            outcome.stats.records_out,
            Records {
                full: 2,
                partial: 0
            }
        );
        assert_eq!(q.in_flight(), 0);
    }

    #[test]
    fn plans_check_block_size_and_range() {
        let geo = Geometry {
            nsid: 3,
            block_size: 4096,
            blocks: 100,
        };
        let msg = Plan::read(&geo, 512, None, 0).unwrap_err().to_string();
        assert!(msg.contains("bs=512") && msg.contains("4096"), "{msg}");
        assert!(matches!(
            Plan::read(&geo, 6144, None, 0),
            Err(CopyError::BlockSize { .. })
        ));
        assert!(matches!(
            Plan::read(&geo, 8192, Some(51), 0),
            Err(CopyError::Range(Error::LbaOutOfRange { .. }))
        ));
        assert!(Plan::read(&geo, 8192, Some(50), 0).is_ok());
        assert!(matches!(
            Plan::read(&geo, 4096, None, 101),
            Err(CopyError::Range(_))
        ));
        assert_eq!(Plan::read(&geo, 4096, None, 100).unwrap().records, Some(0));
        assert!(matches!(
            Plan::read(&geo, 8192, Some(1), u64::MAX),
            Err(CopyError::Overflow { .. })
        ));
        assert!(matches!(
            Plan::read(&geo, 4096, Some(1), u64::MAX),
            Err(CopyError::Range(_))
        ));
        // Writes: the input length narrows the check; a short last record counts whole blocks.
        assert!(Plan::write(&geo, 8192, None, 49, Some(8192)).is_ok());
        assert!(matches!(
            Plan::write(&geo, 8192, None, 49, Some(8193)),
            Err(CopyError::Range(_))
        ));
        assert!(Plan::write(&geo, 8192, Some(1), 49, Some(1 << 30)).is_ok());
        assert!(matches!(
            Plan::write(&geo, 8192, Some(2), 49, None),
            Err(CopyError::Range(_))
        ));
        assert!(
            Plan::write(&geo, 8192, Some(0), 1000, None).is_ok(),
            "nothing to copy, nothing to check"
        );
    }

    #[test]
    fn queue_shapes() {
        // 512 KiB MDTS, 2 MiB records: 4 commands each.
        let s = queue_shape(2 << 20, 512, 512 << 10, 2048, 16).unwrap();
        assert_eq!(s, QueueShape { qd: 16, depth: 65 });
        // A shallow controller lowers qd.
        let s = queue_shape(2 << 20, 512, 512 << 10, 9, 16).unwrap();
        assert_eq!(s, QueueShape { qd: 2, depth: 9 });
        // The DMA budget lowers qd for huge records.
        let s = queue_shape(128 << 20, 4096, 512 << 10, 65536, 16).unwrap();
        assert_eq!(s.qd, 2);
        assert!(matches!(
            queue_shape(8 << 20, 512, 4096, 64, 16),
            Err(CopyError::RecordTooLarge { .. })
        ));
        assert_eq!(
            queue_shape(512, 512, 512 << 10, 2048, 1).unwrap(),
            QueueShape { qd: 1, depth: 2 }
        );
    }

    #[test]
    fn record_offsets_never_wrap() {
        let mut q = MemQueue::new(64, BLOCK, 4);
        let plan = Plan::read(&q.geometry(), BS, Some(4), 0).unwrap();
        let path = std::env::temp_dir().join(format!("nvme-dd-test-{}-wrap", std::process::id()));
        std::fs::write(&path, b"precious").unwrap();
        let file = File::options().write(true).open(&path).unwrap();
        // (seek + index) * bs wraps past 2^64: it used to land at a small offset.
        let mut out = Output::Positional {
            file,
            seek: u64::MAX / BS as u64,
        };
        let outcome = read_namespace(
            &mut q,
            &plan,
            buffers(4, BS),
            &mut out,
            &mut Progress::new(false),
        );
        drop(out);
        let content = std::fs::read(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        match &outcome.error {
            Some(CopyError::Output(e)) => {
                assert!(e.to_string().contains("largest 64-bit byte offset"), "{e}")
            }
            other => panic!("expected an output error, got {other:?}"),
        }
        assert_eq!(content, b"precious", "nothing written at a wrapped offset");
        assert_eq!(q.in_flight(), 0);

        let plan = Plan {
            bs: BLOCK,
            block_size: BLOCK as u32,
            start_lba: u64::MAX - 1,
            blocks_per_record: 1,
            records: None,
            last_record_blocks: 1,
        };
        assert_eq!(plan.lba(1), Some(u64::MAX));
        assert_eq!(plan.lba(2), None);
        assert_eq!(plan.lba(u64::MAX), None);
        assert_eq!(plan.reported_lba(2), u64::MAX);
    }

    #[test]
    fn records_larger_than_the_dma_budget_are_refused() {
        // bs=4G used to get qd 1 and a 4 GiB buffer, whatever the budget.
        let err = queue_shape(4 << 30, 4096, 512 << 10, 65536, 16).unwrap_err();
        assert!(
            matches!(err, CopyError::RecordOverBudget { bs, limit: DMA_BUDGET_BYTES } if bs == 4 << 30),
            "{err:?}"
        );
        assert!(
            err.to_string().contains("limit of 268435456 bytes"),
            "{err}"
        );
        let s = queue_shape(DMA_BUDGET_BYTES, 4096, 512 << 10, 65536, 16).unwrap();
        assert_eq!(s.qd, 1);
    }

    #[test]
    fn summary_looks_like_dd() {
        let stats = CopyStats {
            records_in: Records {
                full: 3,
                partial: 1,
            },
            records_out: Records {
                full: 3,
                partial: 1,
            },
            bytes: 3 << 20,
            padding: 0,
            elapsed: Duration::from_secs(2),
        };
        assert_eq!(stats.summary(), "3+1 records in\n3+1 records out\n3145728 bytes (3.00 MiB) copied, 2.000 s, 1.5 MiB/s\n");
    }
}

/// The engine against the real driver and the in-process emulated controller.
#[cfg(test)]
mod sim_tests {
    use super::*;
    use nvme_driver::{Controller, ControllerOptions, Error, QueuePairOptions, Transport};
    use nvme_sim::{SimConfig, SimController};

    fn open(sim: &SimController) -> Controller {
        let transport = Transport::new(sim.mmio(), sim.dma(), "sim");
        Controller::new(transport, ControllerOptions::default()).expect("sim controller comes up")
    }

    /// A queue pair sized as `nvme-dd` sizes it, and its record buffers.
    fn queue(
        ctrl: &Controller,
        nsid: u32,
        bs: usize,
        qd: usize,
    ) -> (NamespaceQueue, Vec<DmaBuffer>) {
        let ns = ctrl.namespace(nsid).unwrap();
        let shape = queue_shape(
            bs,
            ns.block_size(),
            ctrl.max_transfer_bytes(),
            ctrl.max_queue_entries(),
            qd,
        )
        .unwrap();
        let qp = ctrl
            .create_queue_pair(QueuePairOptions {
                depth: shape.depth,
                ..QueuePairOptions::default()
            })
            .unwrap();
        let buffers = DmaBuffer::allocate_many(ctrl.dma(), shape.qd, bs).unwrap();
        (
            NamespaceQueue {
                qp: AnyQueuePair::Pcie(qp),
                ns,
            },
            buffers,
        )
    }

    #[test]
    fn round_trip_with_records_split_by_mdts() {
        let sim = SimController::start(SimConfig::default());
        let ctrl = open(&sim);
        // Records larger than one command can carry (MDTS), so the driver splits each one.
        let bs = 2 * ctrl.max_transfer_bytes();
        let data: Vec<u8> = (0..5 * bs + 1000).map(|i| (i * 31 % 253) as u8).collect();
        let geo = Geometry::of(&ctrl.namespace(1).unwrap());
        let seek = 2;

        let plan = Plan::write(&geo, bs, None, seek, Some(data.len() as u64)).unwrap();
        let (mut q, buffers) = queue(&ctrl, 1, bs, 4);
        let outcome = write_namespace(
            &mut q,
            &plan,
            buffers,
            &mut &data[..],
            false,
            &mut Progress::new(false),
        );
        assert!(outcome.error.is_none(), "{:?}", outcome.error);
        assert_eq!(
            outcome.stats.records_out,
            Records {
                full: 5,
                partial: 1
            }
        );
        assert_eq!(sim.read_disk(1, seek * bs as u64, data.len()), data);

        let plan = Plan::read(&geo, bs, Some(6), seek).unwrap();
        let buffers = DmaBuffer::allocate_many(ctrl.dma(), 4, bs).unwrap();
        let mut sink = Vec::new();
        let mut out = Output::sequential(Box::new(&mut sink));
        let outcome = read_namespace(&mut q, &plan, buffers, &mut out, &mut Progress::new(false));
        drop(out);
        assert!(outcome.error.is_none(), "{:?}", outcome.error);
        assert_eq!(
            outcome.stats.records_in,
            Records {
                full: 6,
                partial: 0
            }
        );
        assert_eq!(sink.len(), 6 * bs);
        assert_eq!(sink[..data.len()], data[..]);
        assert!(
            sink[data.len()..].iter().all(|&b| b == 0),
            "padding and untouched blocks read as zeros"
        );
    }

    #[test]
    fn writing_past_the_end_stops_with_the_drivers_range_error() {
        let sim = SimController::start(SimConfig::default());
        let ctrl = open(&sim);
        let ns = ctrl.namespace(2).unwrap();
        let bs = ns.block_size() as usize;
        let geo = Geometry::of(&ns);
        let seek = geo.blocks - 2;
        // Unknown input length (as from stdin): only the driver can catch the overrun.
        let plan = Plan::write(&geo, bs, None, seek, None).unwrap();
        let (mut q, buffers) = queue(&ctrl, 2, bs, 8);
        let data = vec![0xa5u8; 4 * bs];
        let outcome = write_namespace(
            &mut q,
            &plan,
            buffers,
            &mut &data[..],
            false,
            &mut Progress::new(false),
        );
        assert!(
            matches!(
                outcome.error,
                Some(CopyError::Io {
                    record: 2,
                    source: Error::LbaOutOfRange { nsid: 2, .. },
                    ..
                })
            ),
            "{:?}",
            outcome.error
        );
        assert_eq!(
            outcome.stats.records_out,
            Records {
                full: 2,
                partial: 0
            }
        );
        assert_eq!(q.in_flight(), 0);
        assert_eq!(sim.read_disk(2, seek * bs as u64, 2 * bs), data[..2 * bs]);
    }
}
