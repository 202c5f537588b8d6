//! `nvme-identify` without a device: every NVMe function of the machine, one line each, like
//! `nvme list` (address, driver binding, vendor:device, and for a controller this process
//! could open: model, serial, firmware and namespaces).

use serde::Serialize;

use nvme_driver::spec::IdentifyController;
use nvme_driver::Namespace;
use nvme_vfio::{Binding, PciFunction};

use crate::report::human_bytes;

/// One namespace in the list.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct ListNamespace {
    /// Namespace id.
    pub nsid: u32,
    /// Bytes per logical block.
    pub block_size: u32,
    /// Capacity in logical blocks.
    pub blocks: u64,
}

/// One controller in the list.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct ListEntry {
    /// PCI address (or a controller name from a control socket).
    pub address: String,
    /// Bound driver (`vfio-pci`, `nvme`, `-` for none).
    pub driver: String,
    /// `attachable` (on vfio-pci), `bindable` (allow-listed), `other` (another driver's),
    /// `owned` (attached by the program serving a control socket), `removed`.
    pub state: &'static str,
    /// PCI Vendor ID, 4 hex digits.
    pub vendor_id: String,
    /// PCI Device ID, 4 hex digits.
    pub device_id: String,
    /// IOMMU group, if any.
    pub iommu_group: Option<u32>,
    /// Model number (when opened).
    pub model: Option<String>,
    /// Serial number (when opened).
    pub serial: Option<String>,
    /// Firmware revision (when opened).
    pub firmware: Option<String>,
    /// Active namespaces (when opened).
    pub namespaces: Vec<ListNamespace>,
    /// Why the controller could not be opened (in use by another process, ...).
    pub error: Option<String>,
}

impl ListEntry {
    /// The entry of an enumerated function, without controller data.
    pub fn from_function(f: &PciFunction) -> Self {
        Self {
            address: f.address.to_string(),
            driver: f.binding.driver_name().to_owned(),
            state: match f.binding {
                Binding::Vfio => "attachable",
                Binding::Bindable { .. } => "bindable",
                Binding::Other { .. } => "other",
            },
            vendor_id: format!("{:04x}", f.vendor),
            device_id: format!("{:04x}", f.device),
            iommu_group: f.iommu_group,
            model: None,
            serial: None,
            firmware: None,
            namespaces: Vec::new(),
            error: None,
        }
    }

    /// The entry of a controller a control socket serves (`list_controllers`): owned by the
    /// program behind the socket.
    pub fn from_served(c: &serde_json::Value) -> Self {
        let text = |k: &str| c[k].as_str().map(str::to_owned);
        Self {
            address: text("name").unwrap_or_default(),
            driver: if c["transport"] == "tcp" {
                "nvme-tcp"
            } else {
                "vfio-pci"
            }
            .to_owned(),
            state: if c["removed"] == true {
                "removed"
            } else {
                "owned"
            },
            vendor_id: c["vid"].as_u64().map_or("-".into(), |v| format!("{v:04x}")),
            device_id: "-".to_owned(),
            iommu_group: None,
            model: text("model"),
            serial: text("serial"),
            firmware: text("firmware"),
            namespaces: c["namespaces"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|n| ListNamespace {
                    nsid: n["nsid"].as_u64().unwrap_or(0) as u32,
                    block_size: n["block_size"].as_u64().unwrap_or(0) as u32,
                    blocks: n["blocks"].as_u64().unwrap_or(0),
                })
                .collect(),
            error: None,
        }
    }

    /// Adds what the opened controller reports.
    pub fn with_controller(mut self, id: &IdentifyController, namespaces: &[Namespace]) -> Self {
        self.model = Some(id.model());
        self.serial = Some(id.serial());
        self.firmware = Some(id.firmware());
        self.namespaces = namespaces
            .iter()
            .map(|ns| ListNamespace {
                nsid: ns.nsid(),
                block_size: ns.block_size(),
                blocks: ns.blocks(),
            })
            .collect();
        self
    }
}

/// The whole list.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ListReport {
    /// One entry per controller, by address.
    pub devices: Vec<ListEntry>,
}

impl ListReport {
    /// Pretty JSON.
    pub fn to_json(&self) -> serde_json::Result<String> {
        serde_json::to_string_pretty(self)
    }

    /// A table, one line per controller, then one indented line per namespace.
    pub fn to_text(&self) -> String {
        if self.devices.is_empty() {
            return "No NVMe functions found (lspci -D -d ::0108 lists them)\n".to_owned();
        }
        let mut out = format!(
            "{:<13} {:<9} {:<10} {:<9} {:<24} {:<20} {:<8}\n",
            "Address", "Driver", "State", "Vid:Did", "Model", "Serial", "FW Rev"
        );
        for d in &self.devices {
            out.push_str(&format!(
                "{:<13} {:<9} {:<10} {:<9} {:<24} {:<20} {:<8}\n",
                d.address,
                d.driver,
                d.state,
                format!("{}:{}", d.vendor_id, d.device_id),
                d.model.as_deref().unwrap_or("-"),
                d.serial.as_deref().unwrap_or("-"),
                d.firmware.as_deref().unwrap_or("-"),
            ));
            for ns in &d.namespaces {
                out.push_str(&format!(
                    "  namespace {:<4} {:>12} ({} blocks of {} B)\n",
                    ns.nsid,
                    human_bytes(ns.blocks * u64::from(ns.block_size)),
                    ns.blocks,
                    ns.block_size
                ));
            }
            if let Some(e) = &d.error {
                out.push_str(&format!("  not opened: {e}\n"));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn function(binding: Binding) -> PciFunction {
        PciFunction {
            address: "0000:00:04.0".parse().unwrap(),
            class: 0x01_0802,
            vendor: 0x1b36,
            device: 0x0010,
            subsystem_vendor: 0,
            subsystem_device: 0,
            binding,
            iommu_group: Some(4),
        }
    }

    #[test]
    fn entries_name_driver_state_and_ids() {
        let e = ListEntry::from_function(&function(Binding::Vfio));
        assert_eq!(
            (e.driver.as_str(), e.state, e.vendor_id.as_str()),
            ("vfio-pci", "attachable", "1b36")
        );
        let e = ListEntry::from_function(&function(Binding::Other {
            driver: Some("nvme".into()),
        }));
        assert_eq!((e.driver.as_str(), e.state), ("nvme", "other"));
        let mut report = ListReport { devices: vec![e] };
        report.devices[0].error = Some("busy".into());
        let text = report.to_text();
        assert!(text.contains("0000:00:04.0  nvme"), "{text}");
        assert!(text.contains("1b36:0010"), "{text}");
        assert!(text.contains("not opened: busy"), "{text}");
        let json: serde_json::Value = serde_json::from_str(&report.to_json().unwrap()).unwrap();
        assert_eq!(json["devices"][0]["state"], "other");
        assert!(ListReport::default()
            .to_text()
            .contains("No NVMe functions"));
    }
}
