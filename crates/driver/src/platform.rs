//! What the CPU the driver runs on says about the platform, for decisions whose pay-off
//! depends on what an MMIO write costs.
//!
//! Shadow doorbells (Doorbell Buffer Config, NVMe Base 2.0 §5.8) exist for emulated
//! controllers: the host writes doorbell values to memory and writes the MMIO doorbell only
//! when the controller's EventIdx asks for it, which saves MMIO writes where each one traps
//! to a hypervisor (hardware virtualisation: a VM exit per write). The emulated controller
//! pays for them with DMA per command instead (QEMU: a shadow tail read and an EventIdx write
//! per fetched command, a shadow head read and an EventIdx write per posted completion). Under
//! a software CPU emulator (QEMU's TCG) an MMIO write does not exit anywhere, so that DMA is
//! pure cost; docs/performance.md has the measurements behind this rule.

/// The kind of machine the CPU reports (CPUID leaf 4000_0000h, the hypervisor vendor
/// signature, where x86 hypervisors announce themselves).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CpuPlatform {
    /// A software CPU emulator (QEMU TCG: "TCGTCGTCGTCG"): MMIO writes do not trap.
    SoftwareEmulator,
    /// A hypervisor with hardware virtualisation (KVM, Hyper-V, VMware, Xen, ...), named by
    /// its signature: MMIO writes to an emulated device trap.
    Hypervisor(String),
    /// No hypervisor signature (bare metal, or not x86).
    Unknown,
}

/// QEMU's TCG signature in CPUID leaf 4000_0000h (EBX, ECX, EDX).
const TCG_SIGNATURE: &[u8; 12] = b"TCGTCGTCGTCG";
/// CPUID leaf with the hypervisor vendor signature.
#[cfg(target_arch = "x86_64")]
const HYPERVISOR_LEAF: u32 = 0x4000_0000;
/// CPUID.01h:ECX bit 31: running under a hypervisor.
#[cfg(target_arch = "x86_64")]
const HYPERVISOR_PRESENT: u32 = 1 << 31;

impl CpuPlatform {
    /// Classifies a 12-byte hypervisor vendor signature.
    pub fn from_signature(signature: &[u8; 12]) -> Self {
        if signature == TCG_SIGNATURE {
            return CpuPlatform::SoftwareEmulator;
        }
        let name: String = signature
            .iter()
            .take_while(|&&b| b != 0)
            .map(|&b| b as char)
            .collect();
        if name.trim().is_empty() {
            CpuPlatform::Unknown
        } else {
            CpuPlatform::Hypervisor(name)
        }
    }

    /// The platform this process runs on.
    pub fn detect() -> Self {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::x86_64::__cpuid;
            if __cpuid(1).ecx & HYPERVISOR_PRESENT == 0 {
                return CpuPlatform::Unknown;
            }
            let leaf = __cpuid(HYPERVISOR_LEAF);
            let mut signature = [0u8; 12];
            signature[0..4].copy_from_slice(&leaf.ebx.to_le_bytes());
            signature[4..8].copy_from_slice(&leaf.ecx.to_le_bytes());
            signature[8..12].copy_from_slice(&leaf.edx.to_le_bytes());
            Self::from_signature(&signature)
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            CpuPlatform::Unknown
        }
    }

    /// Whether shadow doorbells pay here: everywhere but under a software CPU emulator.
    pub fn shadow_doorbells_pay(&self) -> bool {
        !matches!(self, CpuPlatform::SoftwareEmulator)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_classify() {
        assert_eq!(
            CpuPlatform::from_signature(b"TCGTCGTCGTCG"),
            CpuPlatform::SoftwareEmulator
        );
        assert_eq!(
            CpuPlatform::from_signature(b"KVMKVMKVM\0\0\0"),
            CpuPlatform::Hypervisor("KVMKVMKVM".into())
        );
        assert_eq!(
            CpuPlatform::from_signature(b"Microsoft Hv"),
            CpuPlatform::Hypervisor("Microsoft Hv".into())
        );
        assert_eq!(CpuPlatform::from_signature(&[0; 12]), CpuPlatform::Unknown);
        assert!(!CpuPlatform::SoftwareEmulator.shadow_doorbells_pay());
        assert!(CpuPlatform::Hypervisor("KVMKVMKVM".into()).shadow_doorbells_pay());
        assert!(CpuPlatform::Unknown.shadow_doorbells_pay());
        // Whatever this machine is, detection does not panic and is stable.
        assert_eq!(CpuPlatform::detect(), CpuPlatform::detect());
    }
}
