//! Shared test host: a minimal hand-rolled NVMe host (no driver crate) that drives the
//! emulated controller through its registers and guest memory.
// Each test binary uses a different subset of the helpers.
#![allow(dead_code)]

use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nvme_sim::{SimConfig, SimController};
use nvme_spec::command::{self, Cns};
use nvme_spec::identify::IDENTIFY_DATA_SIZE;
use nvme_spec::queue::{
    CompletionEntry, SubmissionEntry, CQES_LOG2, CQE_SIZE, SQES_LOG2, SQE_SIZE,
};
use nvme_spec::regs::{
    cq_head_doorbell, sq_tail_doorbell, Aqa, Cap, Cc, Csts, ACQ, AQA, ASQ, CAP, CC, CSTS,
};
use nvme_spec::status::{Status, StatusCodeType};
use nvme_vfio::dma::PAGE_SIZE;
use nvme_vfio::{DmaBuffer, DmaMapper, DmaRegion, Doorbell, Mmio};

pub const WAIT: Duration = Duration::from_secs(5);
pub const ADMIN_ENTRIES: u32 = 8;
pub const NS_512: u32 = 1;
pub const NS_4K: u32 = 2;

/// One submission/completion queue pair in host memory.
pub struct Queue {
    pub sq: DmaRegion,
    pub cq: DmaRegion,
    pub sq_entries: u32,
    pub cq_entries: u32,
    pub tail: u32,
    pub head: u32,
    pub phase: bool,
    pub next_cid: u16,
    pub sq_db: Doorbell,
    pub cq_db: Doorbell,
}

impl Queue {
    pub fn new(
        dma: &Arc<dyn DmaMapper>,
        mmio: &Mmio,
        qid: u16,
        sq_entries: u32,
        cq_entries: u32,
        stride: usize,
    ) -> Self {
        Queue {
            sq: DmaRegion::allocate(dma, sq_entries as usize * SQE_SIZE).unwrap(),
            cq: DmaRegion::allocate(dma, cq_entries as usize * CQE_SIZE).unwrap(),
            sq_entries,
            cq_entries,
            tail: 0,
            head: 0,
            phase: true,
            next_cid: 0,
            sq_db: mmio.doorbell(sq_tail_doorbell(qid, stride)),
            cq_db: mmio.doorbell(cq_head_doorbell(qid, stride)),
        }
    }

    /// Copies `sqe` (with a fresh cid) into the ring without ringing the doorbell.
    pub fn push(&mut self, mut sqe: SubmissionEntry) -> u16 {
        let cid = self.next_cid;
        self.next_cid += 1;
        sqe.set_cid(cid);
        let bytes = sqe.to_bytes();
        // SAFETY: the slot is inside the SQ region (tail < entries) and the device does not
        // read it until the tail doorbell moves past it.
        unsafe {
            let slot = self.sq.as_ptr().as_ptr().add(self.tail as usize * SQE_SIZE);
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), slot, SQE_SIZE);
        }
        self.tail = (self.tail + 1) % self.sq_entries;
        cid
    }

    pub fn ring(&self) {
        // The SQE must be visible before the doorbell store.
        fence(Ordering::Release);
        self.sq_db.ring(self.tail);
    }

    pub fn submit(&mut self, sqe: SubmissionEntry) -> u16 {
        let cid = self.push(sqe);
        self.ring();
        cid
    }

    /// The next completion if the device has posted it (does not ring the head doorbell).
    pub fn try_reap(&mut self) -> Option<CompletionEntry> {
        let base = self.cq.as_ptr().as_ptr();
        let offset = self.head as usize * CQE_SIZE;
        // SAFETY: in bounds of the CQ region; volatile because the device writes it.
        let dw3 = unsafe { base.add(offset + 12).cast::<u32>().read_volatile() };
        if (dw3 >> 16) & 1 != u32::from(self.phase) {
            return None;
        }
        fence(Ordering::Acquire);
        let mut bytes = [0u8; CQE_SIZE];
        // SAFETY: in bounds; the entry is complete once its phase tag flipped (the device
        // writes the phase dword last).
        unsafe { std::ptr::copy_nonoverlapping(base.add(offset), bytes.as_mut_ptr(), CQE_SIZE) };
        self.head += 1;
        if self.head == self.cq_entries {
            self.head = 0;
            self.phase = !self.phase;
        }
        Some(CompletionEntry::from_bytes(&bytes))
    }

    pub fn wait(&mut self) -> CompletionEntry {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(cqe) = self.try_reap() {
                self.cq_db.ring(self.head);
                return cqe;
            }
            assert!(Instant::now() < deadline, "no completion within {WAIT:?}");
            std::thread::yield_now();
        }
    }

    /// Waits a little and asserts that no completion arrives.
    pub fn expect_none(&mut self, for_how_long: Duration) {
        std::thread::sleep(for_how_long);
        assert_eq!(self.try_reap(), None);
    }

    pub fn run(&mut self, sqe: SubmissionEntry) -> CompletionEntry {
        let cid = self.submit(sqe);
        let cqe = self.wait();
        assert_eq!(cqe.cid, cid);
        cqe
    }
}

pub struct Host {
    pub sim: SimController,
    pub mmio: Mmio,
    pub dma: Arc<dyn DmaMapper>,
    pub stride: usize,
    pub admin: Queue,
}

pub fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::yield_now();
    }
}

pub fn cc_enabled() -> Cc {
    Cc(0)
        .with_iosqes(SQES_LOG2)
        .with_iocqes(CQES_LOG2)
        .with_en(true)
}

impl Host {
    /// Starts a controller and writes AQA/ASQ/ACQ, without enabling it.
    pub fn configure(config: SimConfig) -> Host {
        let sim = SimController::start(config);
        let mmio = sim.mmio();
        let dma = sim.dma();
        let stride = Cap(mmio.read64(CAP)).doorbell_stride();
        let admin = Queue::new(&dma, &mmio, 0, ADMIN_ENTRIES, ADMIN_ENTRIES, stride);
        mmio.write32(AQA, Aqa::new(ADMIN_ENTRIES, ADMIN_ENTRIES).0);
        mmio.write64(ASQ, admin.sq.iova().0);
        mmio.write64(ACQ, admin.cq.iova().0);
        Host {
            sim,
            mmio,
            dma,
            stride,
            admin,
        }
    }

    pub fn csts(&self) -> Csts {
        Csts(self.mmio.read32(CSTS))
    }

    pub fn start(config: SimConfig) -> Host {
        let host = Self::configure(config);
        host.mmio.write32(CC, cc_enabled().0);
        wait_for("CSTS.RDY", || host.csts().rdy());
        host
    }

    pub fn identify<T>(
        &mut self,
        cns: Cns,
        nsid: u32,
        decode: impl FnOnce(&[u8; IDENTIFY_DATA_SIZE]) -> T,
    ) -> Result<T, Status> {
        let mut buf = DmaBuffer::allocate(&self.dma, IDENTIFY_DATA_SIZE).unwrap();
        let mut sqe = command::identify(cns, nsid);
        sqe.prp1 = buf.iova().0;
        let status = self.admin.run(sqe).status();
        if !status.is_success() {
            return Err(status);
        }
        let bytes: &mut [u8; IDENTIFY_DATA_SIZE] = (&mut buf[..]).try_into().unwrap();
        Ok(decode(bytes))
    }

    /// Creates I/O queue pair `qid` (CQ and SQ of `entries` each).
    pub fn create_pair(&mut self, qid: u16, sq_entries: u32, cq_entries: u32) -> Queue {
        let q = Queue::new(
            &self.dma,
            &self.mmio,
            qid,
            sq_entries,
            cq_entries,
            self.stride,
        );
        let cqe = self
            .admin
            .run(command::create_io_cq(qid, cq_entries, q.cq.iova().0, None));
        assert!(cqe.status().is_success(), "create CQ: {}", cqe.status());
        let cqe = self
            .admin
            .run(command::create_io_sq(qid, sq_entries, q.sq.iova().0, qid));
        assert!(cqe.status().is_success(), "create SQ: {}", cqe.status());
        q
    }
}

pub fn generic_err(sc: u8) -> Status {
    Status::new(StatusCodeType::Generic.raw(), sc, true)
}

pub fn cs_err(sc: u8) -> Status {
    Status::new(StatusCodeType::CommandSpecific.raw(), sc, true)
}

pub fn with_prp(mut sqe: SubmissionEntry, buf: &DmaBuffer) -> SubmissionEntry {
    sqe.prp1 = buf.iova().0;
    if buf.len() > PAGE_SIZE {
        assert!(
            buf.len() <= 2 * PAGE_SIZE,
            "test helper handles at most two pages"
        );
        sqe.prp2 = buf.iova().0 + PAGE_SIZE as u64;
    }
    sqe
}
