//! Register handshakes shared by bring-up, reset and teardown (NVMe Base 2.0 §3.1, §3.5.1):
//! the CC value of an enabled controller, waiting for CSTS.RDY, and reading CMBSZ.
//!
//! INVARIANT: every wait here is bounded by CAP.TO, and a register reading all ones (the device
//! is gone) ends it at once with [`Error::Removed`].

use std::time::{Duration, Instant};

use nvme_core::{Error, Result};
use nvme_spec::queue::{CQES_LOG2, SQES_LOG2};
use nvme_spec::regs::{self, Cap, Cc, Cmbsz, Csts, ShutdownNotification};
use nvme_vfio::Mmio;

/// The host memory page size the driver uses (CC.MPS = 0).
pub const HOST_PAGE_SIZE: usize = 4096;
/// CC.MPS encoding of [`HOST_PAGE_SIZE`] (page = 2^(12 + MPS)).
const HOST_PAGE_MPS: u8 = 0;
/// Register polling interval during enable/disable/shutdown waits.
pub(super) const REGISTER_POLL: Duration = Duration::from_micros(100);

/// Registers read all ones when the device is gone (surprise removal, link down).
pub(crate) const ALL_ONES: u32 = u32::MAX;

/// CC for an enabled controller: all supported I/O command sets where CAP.CSS bit 6 offers
/// them (the profile is chosen after the enable, see `command_sets`), else the NVM command
/// set; our page size, 64/16-byte entries.
pub(super) fn enabled_cc(cap: Cap) -> Cc {
    let css = if cap.css_io_command_sets() {
        regs::CC_CSS_ALL_IO
    } else {
        regs::CC_CSS_NVM
    };
    Cc(0)
        .with_css(css)
        .with_mps(HOST_PAGE_MPS)
        .with_ams(0)
        .with_shn(ShutdownNotification::None)
        .with_iosqes(SQES_LOG2)
        .with_iocqes(CQES_LOG2)
        .with_en(true)
}

/// Reads CMBSZ, first setting CMBMSC.CRE where CAP.CMBS says the size registers read 0 until
/// it is set (NVMe 1.4+). CRE enables no memory space: the buffer stays unused.
pub(super) fn controller_memory_buffer(mmio: &Mmio, name: &str, cap: Cap) -> Cmbsz {
    if cap.cmbs() {
        mmio.write64(regs::CMBMSC, regs::CMBMSC_CRE);
    }
    let cmb = Cmbsz(mmio.read32(regs::CMBSZ));
    if cmb.0 != ALL_ONES && cmb.bytes() != 0 {
        log::info!(
            "{name}: controller memory buffer of {} bytes (uses {:#x}) left unused",
            cmb.bytes(),
            cmb.uses()
        );
        cmb
    } else {
        Cmbsz(0)
    }
}

/// Waits until CSTS.RDY equals `ready`, bounded by CAP.TO; fails early on CSTS.CFS when
/// waiting for ready, and at once when CSTS reads all ones (no device answers).
pub(super) fn wait_ready(mmio: &Mmio, name: &str, cap: Cap, ready: bool) -> Result<()> {
    let timeout = cap.timeout().max(REGISTER_POLL * 10);
    let start = Instant::now();
    loop {
        let raw = mmio.read32(regs::CSTS);
        if raw == ALL_ONES {
            return Err(Error::Removed {
                controller: name.to_string(),
                why: "its registers read all ones",
            });
        }
        let csts = Csts(raw);
        if csts.rdy() == ready {
            return Ok(());
        }
        if ready && csts.cfs() {
            return Err(Error::ControllerFatal {
                controller: name.to_string(),
            });
        }
        if start.elapsed() >= timeout {
            return Err(Error::NotReady {
                controller: name.to_string(),
                state: if ready {
                    "ready (CSTS.RDY=1)"
                } else {
                    "disabled (CSTS.RDY=0)"
                },
                timeout,
            });
        }
        std::thread::sleep(REGISTER_POLL);
    }
}
