//! A blocking client of the control socket (what `nvme-identify --socket` and `nvme-admin
//! --socket` use).

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use nvme_driver::spec::regs::{Cap, Version};
use nvme_driver::spec::{ErrorLogEntry, IdentifyController, IdentifyNamespace, SmartLog};
use serde_json::{json, Value};

use crate::protocol::from_hex_array;

/// Default time to wait for an answer (a reset or a slow log page takes a while).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// The socket could not be reached.
    #[error("control socket {}: {source}", path.display())]
    Connect {
        /// The socket path.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// Sending or receiving failed.
    #[error("control socket: {0}")]
    Io(#[from] std::io::Error),
    /// The answer was not JSON-RPC.
    #[error("control socket: malformed answer: {0}")]
    Malformed(String),
    /// The server answered with an error.
    #[error("{message} (JSON-RPC error {code})")]
    Rpc {
        /// The error code.
        code: i64,
        /// Its message.
        message: String,
    },
}

/// A connection to a control server.
#[derive(Debug)]
pub struct ControlClient {
    writer: UnixStream,
    reader: BufReader<UnixStream>,
    next_id: u64,
}

impl ControlClient {
    /// Connects to the server at `path`.
    pub fn connect(path: impl AsRef<Path>) -> Result<Self, ControlError> {
        let path = path.as_ref();
        let stream = UnixStream::connect(path).map_err(|source| ControlError::Connect {
            path: path.to_owned(),
            source,
        })?;
        stream.set_read_timeout(Some(DEFAULT_TIMEOUT))?;
        stream.set_write_timeout(Some(DEFAULT_TIMEOUT))?;
        Ok(Self {
            reader: BufReader::new(stream.try_clone()?),
            writer: stream,
            next_id: 1,
        })
    }

    /// Calls `method` with `params` and returns its result.
    pub fn call(&mut self, method: &str, params: Value) -> Result<Value, ControlError> {
        let id = self.next_id;
        self.next_id += 1;
        let mut line = serde_json::to_vec(
            &json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
        )
        .map_err(|e| ControlError::Malformed(e.to_string()))?;
        line.push(b'\n');
        self.writer.write_all(&line)?;
        let mut answer = String::new();
        if self.reader.read_line(&mut answer)? == 0 {
            return Err(ControlError::Malformed(
                "the server closed the connection".into(),
            ));
        }
        let v: Value =
            serde_json::from_str(&answer).map_err(|e| ControlError::Malformed(e.to_string()))?;
        if let Some(err) = v.get("error") {
            return Err(ControlError::Rpc {
                code: err["code"].as_i64().unwrap_or(0),
                message: err["message"].as_str().unwrap_or("").to_owned(),
            });
        }
        if v.get("id") != Some(&json!(id)) {
            return Err(ControlError::Malformed(format!(
                "answer to another request: {v}"
            )));
        }
        v.get("result")
            .cloned()
            .ok_or_else(|| ControlError::Malformed(format!("no result in {v}")))
    }
}

/// The answer of `identify`, decoded.
#[derive(Clone, Debug)]
pub struct RemoteIdentify {
    /// The controller's name at the server.
    pub name: String,
    /// Identify Controller data.
    pub identify: Box<IdentifyController>,
    /// CAP.
    pub cap: Cap,
    /// VS.
    pub version: Version,
    /// I/O queue pairs granted.
    pub io_queue_pairs: u16,
    /// Identify Namespace data of the usable active namespaces.
    pub namespaces: Vec<(u32, IdentifyNamespace)>,
    /// Active namespaces the driver cannot use, and why.
    pub unsupported: Vec<(u32, String)>,
}

fn malformed(what: &str, v: &Value) -> ControlError {
    ControlError::Malformed(format!("{what} in {v}"))
}

fn hex_field<const N: usize>(v: &Value, key: &str) -> Result<[u8; N], ControlError> {
    v.get(key)
        .and_then(Value::as_str)
        .and_then(from_hex_array::<N>)
        .ok_or_else(|| malformed(&format!("no {N}-byte `{key}`"), v))
}

fn params(controller: Option<&str>, mut rest: Value) -> Value {
    if let (Some(c), Some(obj)) = (controller, rest.as_object_mut()) {
        obj.insert("controller".into(), json!(c));
    }
    rest
}

impl ControlClient {
    /// `identify`, decoded (`controller`: `None` when the server serves one).
    pub fn identify(&mut self, controller: Option<&str>) -> Result<RemoteIdentify, ControlError> {
        let v = self.call("identify", params(controller, json!({})))?;
        let id = IdentifyController::from_bytes(&hex_field(&v, "identify")?);
        let mut namespaces = Vec::new();
        for ns in v["namespaces"].as_array().into_iter().flatten() {
            let nsid = ns["nsid"]
                .as_u64()
                .ok_or_else(|| malformed("no nsid", ns))? as u32;
            namespaces.push((
                nsid,
                IdentifyNamespace::from_bytes(&hex_field(ns, "identify")?),
            ));
        }
        let unsupported = v["unsupported"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|u| {
                (
                    u["nsid"].as_u64().unwrap_or(0) as u32,
                    u["reason"].as_str().unwrap_or("").to_owned(),
                )
            })
            .collect();
        Ok(RemoteIdentify {
            name: v["name"].as_str().unwrap_or("").to_owned(),
            identify: Box::new(id),
            cap: Cap(v["cap"].as_u64().ok_or_else(|| malformed("no cap", &v))?),
            version: Version(v["version"].as_u64().unwrap_or(0) as u32),
            io_queue_pairs: v["io_queue_pairs"].as_u64().unwrap_or(0) as u16,
            namespaces,
            unsupported,
        })
    }

    /// Identify Namespace `nsid`, decoded.
    pub fn identify_namespace(
        &mut self,
        controller: Option<&str>,
        nsid: u32,
    ) -> Result<IdentifyNamespace, ControlError> {
        let v = self.call(
            "identify_namespace",
            params(controller, json!({"nsid": nsid})),
        )?;
        Ok(IdentifyNamespace::from_bytes(&hex_field(&v, "identify")?))
    }

    /// The SMART / Health Information log for `nsid`, decoded.
    pub fn smart_log(
        &mut self,
        controller: Option<&str>,
        nsid: u32,
    ) -> Result<SmartLog, ControlError> {
        let v = self.call("smart_log", params(controller, json!({"nsid": nsid})))?;
        Ok(SmartLog::from_bytes(&hex_field(&v, "log")?))
    }

    /// The newest `entries` Error Information entries, decoded.
    pub fn error_log(
        &mut self,
        controller: Option<&str>,
        entries: usize,
    ) -> Result<Vec<ErrorLogEntry>, ControlError> {
        let v = self.call("error_log", params(controller, json!({"entries": entries})))?;
        let mut out = Vec::new();
        for e in v["entries"].as_array().into_iter().flatten() {
            let bytes = e
                .as_str()
                .and_then(from_hex_array::<{ ErrorLogEntry::SIZE }>)
                .ok_or_else(|| malformed("a bad entry", &v))?;
            out.push(ErrorLogEntry::from_bytes(&bytes));
        }
        Ok(out)
    }

    /// Log page `lid` (a read-only one), `bytes` long.
    pub fn log_page(
        &mut self,
        controller: Option<&str>,
        lid: u8,
        bytes: usize,
    ) -> Result<Vec<u8>, ControlError> {
        let v = self.call(
            "log_page",
            params(controller, json!({"lid": lid, "bytes": bytes})),
        )?;
        v["data"]
            .as_str()
            .and_then(crate::protocol::from_hex)
            .ok_or_else(|| malformed("no data", &v))
    }

    /// Get Features `fid` with Select `sel` (0..=2): the raw value (dword 0, or the
    /// Timestamp's milliseconds).
    pub fn get_feature(
        &mut self,
        controller: Option<&str>,
        fid: u8,
        sel: u8,
    ) -> Result<u64, ControlError> {
        let v = self.call(
            "get_feature",
            params(controller, json!({"fid": fid, "sel": sel})),
        )?;
        v["value"].as_u64().ok_or_else(|| malformed("no value", &v))
    }

    /// Get Features `fid` with Select 11b: the capability bits.
    pub fn feature_capabilities(
        &mut self,
        controller: Option<&str>,
        fid: u8,
    ) -> Result<u32, ControlError> {
        let v = self.call(
            "get_feature",
            params(controller, json!({"fid": fid, "sel": 3})),
        )?;
        v["capabilities"]
            .as_u64()
            .map(|c| c as u32)
            .ok_or_else(|| malformed("no capabilities", &v))
    }
}
