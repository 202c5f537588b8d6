//! `list-subsys DEVICE...`: nvme-cli's `nvme list-subsys` over the controllers named (each
//! argument one controller: a PCI address, a quoted transport id, or `sim`). The controllers
//! are grouped by subsystem NQN (Identify Controller SUBNQN), and each subsystem lists its
//! namespaces as the driver recognises them ([`nvme_driver::multipath`]): one entry per
//! namespace with the paths (controllers) that reach it.
//!
//! JSON (`-o json`), nvme-cli 2.x's keys and ours added:
//! `[{"Subsystems": [{"Name": "nvme-subsys0", "NQN", "Paths": [{"Name": "nvme0",
//! "Transport": "pcie", "Address": "0000:00:04.0", "State": "live", "CNTLID", "Namespaces":
//! [NSID, ..]}, ..], "Namespaces": [{"NSID", "NGUID", "EUI64", "UUID", "Shared", "Paths":
//! ["nvme0", "nvme1"]}], "KeptApart": [{"Path", "NSID", "Reason"}]}]}]`. `nvmeN` is the N-th
//! controller of the command line (nvme-cli's are the kernel's names); "KeptApart" appears
//! when a namespace had the NQN and NSID of another but was not taken for it, and says why.

use nvme_driver::multipath::{Multipath, NamespaceIdentity};
use nvme_driver::NvmeController;
use nvme_tool_support::{parse_target, AnyController, Target};
use serde_json::{json, Map, Value};

use crate::output::{hex, uuid};
use crate::AdminError;

/// What one controller of the command line contributes.
#[derive(Clone, Debug)]
pub struct ControllerView {
    /// nvme-cli's path name (`nvmeN`, N its position on the command line).
    pub name: String,
    /// `pcie` or `tcp`.
    pub transport: &'static str,
    /// The PCI address, or `traddr=..,trsvcid=..`.
    pub address: String,
    /// `live`, or `failed` when the driver stopped the controller.
    pub state: &'static str,
    /// Its subsystem NQN (empty: not reported).
    pub subnqn: String,
    /// Its Controller ID.
    pub cntlid: u16,
    /// The identities of its active namespaces.
    pub namespaces: Vec<NamespaceIdentity>,
}

impl ControllerView {
    /// Reads what `list-subsys` shows of `ctrl`, the `index`-th controller of the command
    /// line.
    pub fn read<C: NvmeController>(
        ctrl: &C,
        index: usize,
        transport: &'static str,
        address: String,
    ) -> Result<Self, AdminError> {
        Ok(ControllerView {
            name: format!("nvme{index}"),
            transport,
            address,
            state: if ctrl.is_failed() { "failed" } else { "live" },
            subnqn: ctrl.identify().subsystem_nqn(),
            cntlid: ctrl.identify().cntlid,
            namespaces: NamespaceIdentity::read_active(ctrl)?,
        })
    }
}

/// Opens each of `devices` in turn (one controller each) and reads its view.
pub fn read_all(devices: &[String]) -> Result<Vec<ControllerView>, AdminError> {
    let mut views = Vec::with_capacity(devices.len());
    for (index, device) in devices.iter().enumerate() {
        let view = match parse_target(device)? {
            Target::Emulator => {
                crate::emulator::run(|c| ControllerView::read(c, index, "pcie", "sim".to_string()))?
            }
            target => {
                match AnyController::open(&target, nvme_driver::ControllerOptions::default())? {
                    AnyController::Pcie(c) => {
                        let address = match &target {
                            Target::Pcie(a) => a.to_string(),
                            _ => c.name().to_string(),
                        };
                        ControllerView::read(&c, index, "pcie", address)?
                    }
                    AnyController::Tcp(c) => {
                        let address = match &target {
                            Target::Tcp(t) => format!("traddr={},trsvcid={}", t.traddr, t.trsvcid),
                            _ => c.name().to_string(),
                        };
                        ControllerView::read(&c, index, "tcp", address)?
                    }
                }
            }
        };
        views.push(view);
    }
    Ok(views)
}

/// `list-subsys` of `views`: subsystems in the order their first controller was given.
pub fn list_subsys(views: &[ControllerView]) -> Value {
    let mp = Multipath::group(
        views
            .iter()
            .enumerate()
            .flat_map(|(i, v)| v.namespaces.iter().cloned().map(move |id| (i, id))),
    );
    // Controllers by subsystem NQN; a controller without one is a subsystem of its own.
    let mut subsystems: Vec<(String, Vec<usize>)> = Vec::new();
    for (i, v) in views.iter().enumerate() {
        match subsystems
            .iter_mut()
            .find(|(nqn, _)| !v.subnqn.is_empty() && *nqn == v.subnqn)
        {
            Some((_, members)) => members.push(i),
            None => subsystems.push((v.subnqn.clone(), vec![i])),
        }
    }
    let out: Vec<Value> = subsystems
        .iter()
        .enumerate()
        .map(|(s, (nqn, members))| {
            let paths: Vec<Value> = members
                .iter()
                .map(|&i| {
                    let v = &views[i];
                    let nsids: Vec<u32> = mp.of_controller(i).map(|n| n.nsid()).collect();
                    json!({
                        "Name": v.name,
                        "Transport": v.transport,
                        "Address": v.address,
                        "State": v.state,
                        "CNTLID": v.cntlid,
                        "Namespaces": nsids,
                    })
                })
                .collect();
            let namespaces: Vec<Value> = mp
                .namespaces()
                .iter()
                .filter(|n| n.paths().iter().any(|p| members.contains(&p.controller)))
                .map(|n| {
                    let ids = &n.identity().ids;
                    let names: Vec<&str> = n
                        .paths()
                        .iter()
                        .map(|p| views[p.controller].name.as_str())
                        .collect();
                    let mut e = Map::new();
                    e.insert("NSID".into(), n.nsid().into());
                    e.insert("NGUID".into(), ids.nguid.map(|b| hex(&b)).into());
                    e.insert("EUI64".into(), ids.eui64.map(|b| hex(&b)).into());
                    e.insert("UUID".into(), ids.uuid.map(|b| uuid(&b)).into());
                    e.insert("Shared".into(), n.identity().is_shared().into());
                    e.insert("Paths".into(), names.into());
                    Value::Object(e)
                })
                .collect();
            let mut e = Map::new();
            e.insert("Name".into(), format!("nvme-subsys{s}").into());
            e.insert("NQN".into(), nqn.clone().into());
            e.insert("Paths".into(), paths.into());
            e.insert("Namespaces".into(), namespaces.into());
            let apart: Vec<Value> = mp
                .kept_apart()
                .iter()
                .filter(|k| members.contains(&k.controller))
                .map(|k| {
                    json!({
                        "Path": views[k.controller].name,
                        "NSID": k.nsid,
                        "Reason": k.reason.to_string(),
                    })
                })
                .collect();
            if !apart.is_empty() {
                e.insert("KeptApart".into(), apart.into());
            }
            Value::Object(e)
        })
        .collect();
    json!([{ "Subsystems": out }])
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvme_driver::{Controller, ControllerOptions, Transport};
    use nvme_sim::{SimConfig, SimController};

    fn open(sim: &SimController) -> Controller {
        Controller::new(
            Transport::new(sim.mmio(), sim.dma(), "sim"),
            ControllerOptions::default(),
        )
        .expect("bring-up on the emulator")
    }

    #[test]
    fn two_controllers_of_one_subsystem_and_a_lone_one() {
        let sim_a = SimController::start(SimConfig::subsystem_member(0));
        let sim_b = sim_a.start_sibling(SimConfig::subsystem_member(1));
        let sim_c = SimController::start(SimConfig {
            subnqn: "nqn.2026-01.io.example:lone".into(),
            ..SimConfig::default()
        });
        let (a, b, c) = (open(&sim_a), open(&sim_b), open(&sim_c));
        let views = vec![
            ControllerView::read(&a, 0, "pcie", "0000:00:04.0".into()).unwrap(),
            ControllerView::read(&b, 1, "pcie", "0000:00:05.0".into()).unwrap(),
            ControllerView::read(&c, 2, "pcie", "0000:00:06.0".into()).unwrap(),
        ];
        let v = list_subsys(&views);
        let subs = v[0]["Subsystems"].as_array().unwrap();
        assert_eq!(subs.len(), 2, "{v:#}");
        let s0 = &subs[0];
        assert_eq!(s0["Name"], "nvme-subsys0");
        assert_eq!(s0["NQN"], nvme_sim::SIM_SUBNQN);
        let addrs: Vec<&str> = s0["Paths"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["Address"].as_str().unwrap())
            .collect();
        assert_eq!(addrs, ["0000:00:04.0", "0000:00:05.0"]);
        assert_eq!(s0["Paths"][1]["CNTLID"], 1);
        assert_eq!(s0["Paths"][1]["Namespaces"], json!([1, 2]));
        assert_eq!(s0["Paths"][0]["State"], "live");
        let ns = s0["Namespaces"].as_array().unwrap();
        assert_eq!(ns.len(), 2);
        assert_eq!(ns[0]["NSID"], 1);
        assert_eq!(ns[0]["Shared"], true);
        assert_eq!(ns[0]["Paths"], json!(["nvme0", "nvme1"]));
        assert!(ns[0]["NGUID"].as_str().is_some_and(|s| s.len() == 32));
        assert!(s0.get("KeptApart").is_none());
        let s1 = &subs[1];
        assert_eq!(s1["NQN"], "nqn.2026-01.io.example:lone");
        assert_eq!(s1["Namespaces"][0]["Paths"], json!(["nvme2"]));
        assert_eq!(s1["Namespaces"][0]["Shared"], false);
    }

    #[test]
    fn one_controller_given_twice_is_one_path() {
        let sim = SimController::start(SimConfig {
            subnqn: nvme_sim::SIM_SUBNQN.into(),
            ..SimConfig::default()
        });
        let ctrl = open(&sim);
        let view = ControllerView::read(&ctrl, 0, "pcie", "0000:00:04.0".into()).unwrap();
        let mut again = view.clone();
        again.name = "nvme1".into();
        let v = list_subsys(&[view, again]);
        let s = &v[0]["Subsystems"][0];
        assert_eq!(s["Paths"].as_array().unwrap().len(), 2);
        assert_eq!(s["Namespaces"][0]["Paths"], json!(["nvme0"]));
        let apart = s["KeptApart"].as_array().unwrap();
        assert_eq!(apart.len(), 2);
        assert!(apart[0]["Reason"]
            .as_str()
            .unwrap()
            .contains("same controller"));
    }
}
