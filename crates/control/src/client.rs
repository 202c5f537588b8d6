//! A blocking client of the control socket (what `nvme-identify --socket` and `nvme-admin
//! --socket` use).

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};

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
            return Err(ControlError::Malformed("the server closed the connection".into()));
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
            return Err(ControlError::Malformed(format!("answer to another request: {v}")));
        }
        v.get("result")
            .cloned()
            .ok_or_else(|| ControlError::Malformed(format!("no result in {v}")))
    }
}
