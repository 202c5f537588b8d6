//! The methods a control server answers. Parameters are a JSON object; `controller` names a
//! served controller and may be left out when only one is served. Binary NVMe structures
//! travel as lower-case hex of their wire form (`protocol::to_hex`).
//!
//! | method | params | result |
//! |---|---|---|
//! | `list_controllers` | | `[{name, transport, model, serial, firmware, removed, failed, namespaces: [{nsid, block_size, blocks}], queues}]` |
//! | `list_namespaces` | `controller` | `[{nsid, block_size, blocks}]` |
//! | `identify` | `controller` | `{name, identify, cap, version, io_queue_pairs, namespaces: [{nsid, identify}], unsupported: [{nsid, reason}]}` |
//! | `identify_namespace` | `controller`, `nsid` | `{nsid, identify}` (Identify CNS 00h, NVMe Base 2.0 §5.17.2.1) |
//! | `smart_log` | `controller`, `nsid` (default FFFFFFFFh) | `{log}` (Log Identifier 02h, §5.16.1.3) |
//! | `error_log` | `controller`, `entries` (default 64) | `{entries: [..]}` (Log Identifier 01h, §5.16.1.2) |
//! | `log_page` | `controller`, `lid` (01h, 02h, 03h, 05h), `bytes` | `{lid, data}` |
//! | `get_feature` | `controller`, `fid`, `sel` (0 current, 1 default, 2 saved, 3 capabilities) | `{fid, name, sel, value}` or `{fid, name, sel, capabilities}` (§5.15) |
//! | `rescan` | `controller` | `{added, removed, changed}` (PCIe) |
//! | `reset` | `controller` | `{}` |
//! | `queue_stats` | `controller` (default: all) | `[{controller, queue, publications, counters}]` |
//!
//! Every method reaches the controller through its admin path (the admin queue's lock, as any
//! admin command issued while I/O runs) or through data the controller already holds; none
//! touches an I/O queue.

use nvme_device::AnyController;
use nvme_driver::spec::feature::{FeatureId, Select};
use nvme_driver::spec::log::NSID_BROADCAST;
use nvme_driver::spec::opcode::log_page as lid;
use nvme_driver::{AdminCommands, NvmeController};
use serde_json::{json, Map, Value};

use crate::protocol::{to_hex, RpcError, METHOD_NOT_FOUND, UNKNOWN_CONTROLLER};
use crate::registry::{ControlRegistry, Served};

/// Error Information entries returned when `entries` is not given.
pub const DEFAULT_ERROR_ENTRIES: usize = 64;
/// Most bytes `log_page` reads (one page of the supported logs fits well within it).
pub const MAX_LOG_BYTES: usize = 16 << 10;
/// Log pages `log_page` reads: reading them changes nothing on the controller (the Changed
/// Namespace List, 04h, is cleared by reading and belongs to the driver's rescan).
pub const READ_ONLY_LOGS: [u8; 4] = [
    lid::ERROR_INFORMATION,
    lid::SMART_HEALTH,
    lid::FIRMWARE_SLOT,
    lid::COMMANDS_SUPPORTED_AND_EFFECTS,
];

/// Every method name, for `rpc.discover`-style listings and error messages.
pub const METHODS: [&str; 11] = [
    "list_controllers",
    "list_namespaces",
    "identify",
    "identify_namespace",
    "smart_log",
    "error_log",
    "log_page",
    "get_feature",
    "rescan",
    "reset",
    "queue_stats",
];

fn param_u64(params: &Map<String, Value>, key: &str) -> Result<Option<u64>, RpcError> {
    match params.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .map(Some)
            .ok_or_else(|| RpcError::params(format!("`{key}` must be a non-negative integer"))),
    }
}

fn param_u32(params: &Map<String, Value>, key: &str) -> Result<Option<u32>, RpcError> {
    param_u64(params, key)?
        .map(|v| u32::try_from(v).map_err(|_| RpcError::params(format!("`{key}` exceeds 32 bits"))))
        .transpose()
}

fn required_u32(params: &Map<String, Value>, key: &str) -> Result<u32, RpcError> {
    param_u32(params, key)?.ok_or_else(|| RpcError::params(format!("`{key}` is required")))
}

fn controller_name(params: &Map<String, Value>) -> Result<Option<&str>, RpcError> {
    match params.get("controller") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(RpcError::params("`controller` must be a string")),
    }
}

fn namespaces_json(ctrl: &AnyController) -> Value {
    Value::Array(
        ctrl.namespaces()
            .iter()
            .map(|ns| json!({"nsid": ns.nsid(), "block_size": ns.block_size(), "blocks": ns.blocks()}))
            .collect(),
    )
}

/// Answers one request: `method` with `params` (an object, or absent).
pub fn call(registry: &ControlRegistry, method: &str, params: &Value) -> Result<Value, RpcError> {
    let empty = Map::new();
    let params = match params {
        Value::Object(m) => m,
        Value::Null => &empty,
        _ => return Err(RpcError::params("params must be an object")),
    };
    if method == "list_controllers" {
        return Ok(list_controllers(registry));
    }
    if method == "queue_stats" && controller_name(params)?.is_none() {
        return Ok(queue_stats(&registry.snapshot()));
    }
    if !METHODS.contains(&method) {
        return Err(RpcError::new(
            METHOD_NOT_FOUND,
            format!("no method `{method}` (methods: {})", METHODS.join(", ")),
        ));
    }
    let served = registry
        .find(controller_name(params)?)
        .map_err(|m| RpcError::new(UNKNOWN_CONTROLLER, m))?;
    let ctrl = &*served.controller;
    match method {
        "list_namespaces" => Ok(namespaces_json(ctrl)),
        "identify" => Ok(identify(&served.name, ctrl)),
        "smart_log" => {
            let nsid = param_u32(params, "nsid")?.unwrap_or(NSID_BROADCAST);
            Ok(json!({"log": to_hex(&ctrl.smart_log(nsid)?.to_bytes())}))
        }
        "error_log" => {
            let entries =
                param_u64(params, "entries")?.map_or(DEFAULT_ERROR_ENTRIES, |e| e as usize);
            let entries = ctrl.error_log(entries)?;
            Ok(
                json!({"entries": entries.iter().map(|e| to_hex(&e.to_bytes())).collect::<Vec<_>>()}),
            )
        }
        "reset" => {
            ctrl.reset()?;
            Ok(json!({}))
        }
        "rescan" => match ctrl.as_pcie() {
            Some(c) => {
                let ch = c.rescan_namespaces()?;
                Ok(json!({"added": ch.added, "removed": ch.removed, "changed": ch.changed}))
            }
            None => Err(RpcError::new(
                crate::protocol::CONTROLLER_ERROR,
                format!("{}: namespace rescans are PCIe-only", served.name),
            )),
        },
        "queue_stats" => Ok(queue_stats(std::slice::from_ref(&served))),
        _ => match ctrl {
            AnyController::Pcie(c) => admin_method(c, method, params),
            AnyController::Tcp(c) => admin_method(c, method, params),
        },
    }
}

/// The methods written over [`AdminCommands`].
fn admin_method<C: NvmeController>(
    c: &C,
    method: &str,
    params: &Map<String, Value>,
) -> Result<Value, RpcError> {
    match method {
        "identify_namespace" => {
            let nsid = required_u32(params, "nsid")?;
            let ns = c.identify_namespace(nsid)?;
            Ok(json!({"nsid": nsid, "identify": to_hex(&ns.to_bytes())}))
        }
        "log_page" => {
            let page = u8::try_from(required_u32(params, "lid")?)
                .map_err(|_| RpcError::params("`lid` is one byte"))?;
            if !READ_ONLY_LOGS.contains(&page) {
                return Err(RpcError::params(format!(
                    "log page {page:#04x} is not one the control socket reads (read-only pages: \
                     {READ_ONLY_LOGS:02x?})"
                )));
            }
            let bytes = required_u32(params, "bytes")? as usize;
            if bytes > MAX_LOG_BYTES {
                return Err(RpcError::params(format!(
                    "`bytes` {bytes} exceeds {MAX_LOG_BYTES}"
                )));
            }
            Ok(json!({"lid": page, "data": to_hex(&c.log_page(page, bytes)?)}))
        }
        "get_feature" => {
            let fid = u8::try_from(required_u32(params, "fid")?)
                .map_err(|_| RpcError::params("`fid` is one byte"))?;
            let id = FeatureId::from_fid(fid).ok_or_else(|| {
                RpcError::params(format!("feature {fid:#04x} is not one the driver types"))
            })?;
            let sel = param_u32(params, "sel")?.unwrap_or(0);
            let select = match sel {
                0 => Select::Current,
                1 => Select::Default,
                2 => Select::Saved,
                3 => {
                    let caps = c.feature_capabilities(id)?;
                    return Ok(
                        json!({"fid": fid, "name": id.name(), "sel": 3, "capabilities": caps.bits()}),
                    );
                }
                _ => return Err(RpcError::params("`sel` is 0, 1, 2 or 3")),
            };
            let f = c.get_feature(id, select)?;
            Ok(json!({"fid": fid, "name": id.name(), "sel": sel, "value": f.raw()}))
        }
        other => Err(RpcError::new(
            METHOD_NOT_FOUND,
            format!("no method `{other}`"),
        )),
    }
}

fn list_controllers(registry: &ControlRegistry) -> Value {
    Value::Array(
        registry
            .snapshot()
            .iter()
            .map(|s| {
                let c = &*s.controller;
                let id = c.identify();
                json!({
                    "name": s.name,
                    "vid": id.vid,
                    "transport": if c.as_pcie().is_some() { "pcie" } else { "tcp" },
                    "model": id.model(),
                    "serial": id.serial(),
                    "firmware": id.firmware(),
                    "removed": c.as_pcie().is_some_and(|p| p.is_removed()),
                    "failed": match c { AnyController::Pcie(p) => p.is_failed(), AnyController::Tcp(t) => t.is_failed() },
                    "namespaces": namespaces_json(c),
                    "queues": s.queues.len(),
                })
            })
            .collect(),
    )
}

fn identify(name: &str, ctrl: &AnyController) -> Value {
    let namespaces: Vec<Value> = ctrl
        .namespaces()
        .iter()
        .map(|ns| json!({"nsid": ns.nsid(), "identify": to_hex(&ns.identify().to_bytes())}))
        .collect();
    let unsupported: Vec<Value> = ctrl
        .unsupported_namespaces()
        .into_iter()
        .map(|(nsid, reason)| json!({"nsid": nsid, "reason": reason}))
        .collect();
    json!({
        "name": name,
        "identify": to_hex(&ctrl.identify().to_bytes()),
        "cap": ctrl.cap().0,
        "version": ctrl.version().0,
        "io_queue_pairs": ctrl.io_queue_pairs(),
        "namespaces": namespaces,
        "unsupported": unsupported,
    })
}

fn queue_stats(served: &[Served]) -> Value {
    let mut out = Vec::new();
    for s in served {
        for (queue, cell) in &s.queues {
            out.push(json!({
                "controller": s.name,
                "queue": queue,
                "publications": cell.publications(),
                "counters": cell.read(),
            }));
        }
    }
    Value::Array(out)
}
