//! Bring-up (NVMe Base 2.0 §3.5.1): check CAP, disable, program the admin queue, enable and wait
//! for ready, then identify (the controller, the queue count, the namespaces) and set up what the
//! options ask for (SGLs, shadow doorbells, interrupts, asynchronous events).
//!
//! INVARIANT: once ASQ/ACQ are programmed the controller may DMA into the admin rings, so from
//! there on every failure returns through `Inner`'s drop, which stops the controller first.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use nvme_core::{Error, NamespaceSet, Result};
use nvme_spec::command::Cns;
use nvme_spec::identify::IDENTIFY_DATA_SIZE;
use nvme_spec::queue::{CQES_LOG2, SQES_LOG2};
use nvme_spec::regs::{self, Aqa, Cap, Cc, Version};
use nvme_spec::{command, IdentifyController, Oacs};
use nvme_vfio::{DmaBuffer, DmaMapper};

use crate::admin::AdminQueue;
use crate::context::DmaContext;
use crate::platform::CpuPlatform;
use crate::prp;
use crate::teardown::DmaState;

use super::registers::{controller_memory_buffer, enabled_cc, wait_ready, HOST_PAGE_SIZE};
use super::{AbortStats, Controller, ControllerOptions, Inner, Transport, STATE_FAILED};

/// Fewest entries an NVMe queue can have (one is always kept empty).
const MIN_QUEUE_ENTRIES: u32 = 2;

impl Controller {
    /// Brings up the controller behind `transport`, in a DMA context of its own.
    pub fn new(transport: Transport, options: ControllerOptions) -> Result<Self> {
        let ctx = DmaContext::with_mapper(transport.dma.clone());
        Self::new_in(&ctx, transport, options)
    }

    /// Brings up the controller behind `transport` as a member of `ctx`. The transport must
    /// map through the context's address space (its mapper is the one `ctx` was made from,
    /// e.g. one `nvme_sim::SimDma` shared by several emulated controllers); otherwise fails
    /// with [`Error::ForeignTransport`].
    pub fn new_in(
        ctx: &DmaContext,
        transport: Transport,
        options: ControllerOptions,
    ) -> Result<Self> {
        if !ctx.contains(&*transport.dma) {
            return Err(Error::ForeignTransport {
                controller: transport.name,
                transport: transport.dma.domain(),
                context: ctx.platform_domain(),
            });
        }
        let context = ctx;
        // `transport.dma` maps into the context's space (checked above); allocations go through
        // the context's guard over the same mapper.
        let Transport {
            mmio,
            dma: _,
            name,
            keepalive,
            interrupts,
            function,
        } = transport;
        let cap = Cap(mmio.read64(regs::CAP));
        let version = Version(mmio.read32(regs::VS));
        log::debug!("{name}: CAP {:#018x}, version {version}", cap.0);
        let unsupported = |what: String| Error::Unsupported {
            controller: name.clone(),
            what,
        };
        if !cap.css_nvm() {
            return Err(unsupported(
                "it does not support the NVM command set (CAP.CSS bit 0)".into(),
            ));
        }
        if cap.max_queue_entries() < MIN_QUEUE_ENTRIES {
            return Err(unsupported(format!(
                "CAP.MQES={} allows queues of {} entry; NVMe queues need at least \
                 {MIN_QUEUE_ENTRIES}",
                cap.mqes(),
                cap.max_queue_entries()
            )));
        }
        if cap.min_page_size() > HOST_PAGE_SIZE || cap.max_page_size() < HOST_PAGE_SIZE {
            return Err(unsupported(format!(
                "its memory page sizes {}..={} exclude the host's {HOST_PAGE_SIZE}",
                cap.min_page_size(),
                cap.max_page_size()
            )));
        }
        if !mmio.contains_dword(regs::cq_head_doorbell(0, cap.doorbell_stride())) {
            return Err(unsupported(format!(
                "BAR0 is only {} bytes, too small for the doorbells",
                mmio.len()
            )));
        }
        let stride = cap.doorbell_stride();

        // Disable (also clears a previous user's state) and wait for RDY=0.
        let cc = Cc(mmio.read32(regs::CC));
        if cc.en() {
            mmio.write32(regs::CC, cc.with_en(false).0);
        }
        wait_ready(&mmio, &name, cap, false)?;
        let cmb = controller_memory_buffer(&mmio, &name, cap);

        let admin_entries = options.admin_entries.clamp(
            2,
            regs::ADMIN_QUEUE_MAX_ENTRIES.min(cap.max_queue_entries()),
        );
        let removal_request = match &function {
            Some(f) => f.request_notifier()?,
            None => None,
        };
        let dma: Arc<dyn DmaMapper> = context.dma().clone();
        let admin = AdminQueue::new(&mmio, &dma, admin_entries, stride, HOST_PAGE_SIZE)?;
        mmio.write32(regs::AQA, Aqa::new(admin_entries, admin_entries).0);
        mmio.write64(regs::ASQ, admin.sq_iova());
        mmio.write64(regs::ACQ, admin.cq_iova());
        // From here on the controller may DMA into the admin rings: every failure path goes
        // through `Inner`'s drop, which stops the controller before the rings are freed.
        let mut partial = Inner {
            name,
            mmio,
            dma,
            context: context.clone(),
            dma_state: Mutex::new(DmaState::Running),
            function,
            cap,
            page_size: HOST_PAGE_SIZE,
            max_transfer: prp::max_bytes_with_one_list(HOST_PAGE_SIZE),
            sgl: None,
            version,
            cmb,
            admin: Mutex::new(admin),
            admin_timeout: options.admin_timeout,
            state: AtomicU64::new(0),
            reset_lock: Mutex::new(()),
            removed: AtomicBool::new(false),
            fault_guard: Mutex::new(None),
            removal_request,
            timeout_action: options.timeout_action,
            aborts: Mutex::new(AbortStats::default()),
            events: Mutex::new(VecDeque::new()),
            aers: 0,
            identify: Box::new(IdentifyController::default()),
            command_sets: Default::default(),
            namespaces: RwLock::new(Arc::new(NamespaceSet::default())),
            rescan_lock: Mutex::new(()),
            io_queues: 0,
            qid_in_use: Mutex::new(Vec::new()),
            shutdown_on_drop: options.shutdown_on_drop,
            shadow: None,
            irq_events: Vec::new(),
            interrupts,
            _keepalive: keepalive,
        };
        let (mmio, name) = (&partial.mmio, &partial.name);
        mmio.write32(regs::CC, enabled_cc(cap).0);
        if let Err(e) = wait_ready(mmio, name, cap, true) {
            partial.state.fetch_or(STATE_FAILED, Ordering::AcqRel);
            return Err(e);
        }
        log::info!(
            "{name}: controller enabled (NVMe {version}, {admin_entries}-entry admin queue)"
        );
        partial.identify_all(options.io_queues)?;
        let support = partial.identify.sgl_support();
        partial.sgl = (options.sgl && support.supported()).then(|| support.alignment_mask());
        log::info!(
            "{}: I/O data pointers: {} (controller SGLS {:#x}, ControllerOptions::sgl {})",
            partial.name,
            if partial.sgl.is_some() { "SGL" } else { "PRP" },
            partial.identify.sgls,
            options.sgl
        );
        let platform = CpuPlatform::detect();
        if options.shadow_doorbells.wanted(&platform) {
            partial.enable_shadow_doorbells()?;
        } else if partial
            .identify
            .oacs_flags()
            .contains(Oacs::DOORBELL_BUFFER_CONFIG)
        {
            log::info!(
                "{}: shadow doorbells offered but not used ({:?} on {platform:?})",
                partial.name,
                options.shadow_doorbells
            );
        }
        if options.interrupts {
            partial.enable_interrupts()?;
        }
        partial.enable_async_events();
        Ok(Controller {
            inner: Arc::new(partial),
        })
    }
}

impl Inner {
    fn identify_all(&mut self, io_queues: u16) -> Result<()> {
        let mut page = DmaBuffer::allocate(&self.dma, IDENTIFY_DATA_SIZE)?;
        let id =
            IdentifyController::from_bytes(&self.identify_page(Cns::Controller, 0, &mut page)?);
        let (sqes_min, _) = id.sqes_min_max();
        let (cqes_min, _) = id.cqes_min_max();
        if sqes_min > SQES_LOG2 || cqes_min > CQES_LOG2 {
            return Err(Error::Unsupported {
                controller: self.name.clone(),
                what: format!(
                    "it requires queue entry sizes 2^{sqes_min}/2^{cqes_min} bytes (we use 64/16)"
                ),
            });
        }
        if let Some(mdts) = id.mdts_bytes(self.cap.min_page_size()) {
            self.max_transfer = self.max_transfer.min(mdts);
        }
        log::info!(
            "{}: {} (serial {}, firmware {}), max transfer {} bytes",
            self.name,
            id.model(),
            id.serial(),
            id.firmware(),
            self.max_transfer
        );

        let asked = io_queues.max(1);
        let cqe = self.admin(command::set_number_of_queues(asked, asked), None)?;
        let (sq, cq) = command::number_of_queues_allocated(cqe.dw0);
        let granted = sq.min(cq).min(asked);
        // Only queues whose doorbells lie inside BAR0 can be used (a large CAP.DSTRD or a
        // small BAR leaves the higher ones unreachable).
        let stride = self.cap.doorbell_stride();
        let reachable = (0..=granted)
            .take_while(|&q| self.mmio.contains_dword(regs::cq_head_doorbell(q, stride)))
            .count() as u16;
        self.io_queues = granted.min(reachable.saturating_sub(1));
        if self.io_queues < granted {
            log::warn!(
                "{}: only {} of {granted} granted I/O queue pairs have doorbells inside the \
                 {}-byte BAR0 (doorbell stride {stride}); using those",
                self.name,
                self.io_queues,
                self.mmio.len()
            );
        }
        self.qid_in_use = Mutex::new(vec![false; self.io_queues as usize + 1]);
        log::debug!(
            "{}: {} I/O queue pairs granted ({sq} SQ / {cq} CQ)",
            self.name,
            self.io_queues
        );

        *self.identify = id;
        self.command_sets = self.select_command_sets(&mut page)?;
        let set = self.scan_namespaces(&mut page)?;
        *self.namespaces.get_mut().unwrap_or_else(|p| p.into_inner()) = Arc::new(set);
        Ok(())
    }
}
