//! The server: a Unix stream socket, its own accept thread, one thread per client.
//!
//! Framing: one JSON-RPC 2.0 request object per line (`\n`-terminated), one response line
//! per request, in order. Batches (arrays) are not supported (an Invalid Request answer).
//!
//! INVARIANT: no client can hold up another client or the program's I/O. Each client has its
//! own thread, bounded by [`ControlConfig::max_clients`]; its reads time out every
//! [`POLL_INTERVAL`] so it notices the server stopping; a request must arrive whole within
//! [`ControlConfig::request_timeout`] and within [`ControlConfig::max_request_bytes`]; an
//! idle connection is closed after [`ControlConfig::idle_timeout`]; an answer the client does
//! not read within [`ControlConfig::write_timeout`] closes it. Methods reach controllers only
//! through their admin path.

use std::io::{ErrorKind, Read, Write};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::methods;
use crate::protocol::{
    error_response, response, RpcError, INVALID_REQUEST, PARSE_ERROR, PERMISSION_DENIED,
    TOO_MANY_CLIENTS, VERSION,
};
use crate::registry::ControlRegistry;

/// How often a client thread wakes from a read to check for shutdown and deadlines.
pub const POLL_INTERVAL: Duration = Duration::from_millis(250);
/// Default socket file mode: owner read/write only.
pub const DEFAULT_MODE: u32 = 0o600;
/// Default largest request line.
pub const DEFAULT_MAX_REQUEST_BYTES: usize = 64 << 10;
/// Default most clients at once.
pub const DEFAULT_MAX_CLIENTS: usize = 8;

/// How a control server listens and whom it lets in.
#[derive(Clone, Debug)]
pub struct ControlConfig {
    /// The socket file (created; a stale socket there is replaced, anything else refused).
    pub path: PathBuf,
    /// The socket file's mode ([`DEFAULT_MODE`]).
    pub mode: u32,
    /// Peer uids allowed (SO_PEERCRED); empty: the server's effective uid and root.
    pub allowed_uids: Vec<u32>,
    /// Largest request line in bytes ([`DEFAULT_MAX_REQUEST_BYTES`]).
    pub max_request_bytes: usize,
    /// Most clients connected at once ([`DEFAULT_MAX_CLIENTS`]); more are refused.
    pub max_clients: usize,
    /// A request must arrive whole within this time from its first byte.
    pub request_timeout: Duration,
    /// A connection with no request for this long is closed.
    pub idle_timeout: Duration,
    /// An answer not taken by the client within this time closes the connection.
    pub write_timeout: Duration,
}

impl ControlConfig {
    /// The defaults for a socket at `path`.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            mode: DEFAULT_MODE,
            allowed_uids: Vec::new(),
            max_request_bytes: DEFAULT_MAX_REQUEST_BYTES,
            max_clients: DEFAULT_MAX_CLIENTS,
            request_timeout: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(300),
            write_timeout: Duration::from_secs(5),
        }
    }
}

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The socket could not be created.
    #[error("control socket {}: {source}", path.display())]
    Socket {
        /// The socket path.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// Another server answers on the path.
    #[error("control socket {}: another server is listening there", path.display())]
    InUse {
        /// The socket path.
        path: PathBuf,
    },
    /// The path exists and is not a socket.
    #[error("control socket {}: the path exists and is not a socket; not replacing it", path.display())]
    NotASocket {
        /// The path.
        path: PathBuf,
    },
}

/// Server-side counters (tests and logs).
#[derive(Debug, Default)]
pub struct ServerStats {
    /// Connections accepted and served.
    pub accepted: AtomicUsize,
    /// Connections refused (credentials, too many clients).
    pub refused: AtomicUsize,
    /// Requests answered.
    pub requests: AtomicUsize,
    /// Connections closed for a protocol violation or timeout.
    pub dropped: AtomicUsize,
}

struct Shared {
    registry: ControlRegistry,
    config: ControlConfig,
    allowed: Vec<u32>,
    stop: AtomicBool,
    clients: AtomicUsize,
    stats: ServerStats,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

/// A running control server; stops (and removes its socket file) when dropped.
pub struct ControlServer {
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for ControlServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControlServer")
            .field("path", &self.shared.config.path)
            .finish()
    }
}

/// Removes a stale socket at `path` (nobody accepts on it); refuses a live one or a file.
fn clear_stale(path: &Path) -> Result<(), ServerError> {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return Ok(());
    };
    if !meta.file_type().is_socket() {
        return Err(ServerError::NotASocket {
            path: path.to_owned(),
        });
    }
    if UnixStream::connect(path).is_ok() {
        return Err(ServerError::InUse {
            path: path.to_owned(),
        });
    }
    std::fs::remove_file(path).map_err(|source| ServerError::Socket {
        path: path.to_owned(),
        source,
    })
}

/// Binds at a temporary name next to `path`, sets the mode, then renames it into place, so the
/// socket never exists at `path` with a wider mode.
fn bind(path: &Path, mode: u32) -> Result<UnixListener, ServerError> {
    let err = |source| ServerError::Socket {
        path: path.to_owned(),
        source,
    };
    clear_stale(path)?;
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".{}.tmp", std::process::id()));
    let tmp = PathBuf::from(tmp);
    let _ = std::fs::remove_file(&tmp);
    let listener = UnixListener::bind(&tmp).map_err(err)?;
    let placed = std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(mode))
        .and_then(|()| std::fs::rename(&tmp, path));
    if let Err(e) = placed {
        let _ = std::fs::remove_file(&tmp);
        return Err(err(e));
    }
    Ok(listener)
}

impl ControlServer {
    /// Creates the socket and starts serving `registry` on a thread of its own.
    pub fn start(config: ControlConfig, registry: ControlRegistry) -> Result<Self, ServerError> {
        let listener = bind(&config.path, config.mode)?;
        let allowed = if config.allowed_uids.is_empty() {
            vec![rustix::process::geteuid().as_raw(), 0]
        } else {
            config.allowed_uids.clone()
        };
        let shared = Arc::new(Shared {
            registry,
            config,
            allowed,
            stop: AtomicBool::new(false),
            clients: AtomicUsize::new(0),
            stats: ServerStats::default(),
            threads: Mutex::new(Vec::new()),
        });
        let s = shared.clone();
        let accept = std::thread::Builder::new()
            .name("nvme-control".into())
            .spawn(move || accept_loop(&s, &listener))
            .map_err(|source| ServerError::Socket {
                path: shared.config.path.clone(),
                source,
            })?;
        log::info!("control socket at {}", shared.config.path.display());
        Ok(Self {
            shared,
            accept: Some(accept),
        })
    }

    /// The socket path.
    pub fn path(&self) -> &Path {
        &self.shared.config.path
    }

    /// The server's counters.
    pub fn stats(&self) -> &ServerStats {
        &self.shared.stats
    }

    /// Clients connected now.
    pub fn clients(&self) -> usize {
        self.shared.clients.load(Ordering::Acquire)
    }
}

impl Drop for ControlServer {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        // Wake the accept thread with a connection of our own.
        let _ = UnixStream::connect(&self.shared.config.path);
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
        let threads = std::mem::take(
            &mut *self
                .shared
                .threads
                .lock()
                .unwrap_or_else(|p| p.into_inner()),
        );
        for t in threads {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.shared.config.path);
    }
}

fn accept_loop(shared: &Arc<Shared>, listener: &UnixListener) {
    for stream in listener.incoming() {
        if shared.stop.load(Ordering::Acquire) {
            break;
        }
        let Ok(mut stream) = stream else { continue };
        let _ = stream.set_write_timeout(Some(shared.config.write_timeout));
        let uid = rustix::net::sockopt::socket_peercred(&stream).map(|c| c.uid.as_raw());
        match uid {
            Ok(uid) if shared.allowed.contains(&uid) => {}
            other => {
                log::warn!("control socket: refused a client with uid {other:?}");
                shared.stats.refused.fetch_add(1, Ordering::Relaxed);
                let e = RpcError::new(PERMISSION_DENIED, "permission denied: uid not allowed");
                let _ = send(&mut stream, &error_response(&Value::Null, &e));
                continue;
            }
        }
        if shared.clients.load(Ordering::Acquire) >= shared.config.max_clients {
            shared.stats.refused.fetch_add(1, Ordering::Relaxed);
            let e = RpcError::new(TOO_MANY_CLIENTS, "too many clients; try again later");
            let _ = send(&mut stream, &error_response(&Value::Null, &e));
            continue;
        }
        shared.clients.fetch_add(1, Ordering::AcqRel);
        shared.stats.accepted.fetch_add(1, Ordering::Relaxed);
        let s = shared.clone();
        let spawned = std::thread::Builder::new()
            .name("nvme-control-client".into())
            .spawn(move || {
                serve_client(&s, stream);
                s.clients.fetch_sub(1, Ordering::AcqRel);
            });
        let mut threads = shared.threads.lock().unwrap_or_else(|p| p.into_inner());
        threads.retain(|t| !t.is_finished());
        match spawned {
            Ok(t) => threads.push(t),
            Err(e) => {
                log::error!("control socket: cannot start a client thread: {e}");
                shared.clients.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }
}

fn send(stream: &mut UnixStream, message: &Value) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(message).unwrap_or_default();
    line.push(b'\n');
    stream.write_all(&line)
}

/// Why a connection ends.
enum End {
    /// The client closed it, or the server stops.
    Closed,
    /// A protocol violation or timeout (after an error answer where one is possible).
    Dropped,
}

fn serve_client(shared: &Shared, mut stream: UnixStream) {
    let _ = stream.set_read_timeout(Some(POLL_INTERVAL));
    let end = client_loop(shared, &mut stream);
    if matches!(end, End::Dropped) {
        shared.stats.dropped.fetch_add(1, Ordering::Relaxed);
    }
}

fn client_loop(shared: &Shared, stream: &mut UnixStream) -> End {
    let cfg = &shared.config;
    let mut buf: Vec<u8> = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    let mut last_activity = Instant::now();
    // When the first byte of the request being read arrived.
    let mut request_started: Option<Instant> = None;
    loop {
        // Answer every complete line already buffered.
        while let Some(nl) = buf.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = buf.drain(..=nl).collect();
            request_started = (!buf.is_empty()).then(Instant::now);
            let answer = answer(shared, &line[..line.len() - 1]);
            if let Some(answer) = answer {
                if send(stream, &answer).is_err() {
                    return End::Dropped;
                }
                shared.stats.requests.fetch_add(1, Ordering::Relaxed);
            }
            last_activity = Instant::now();
        }
        if buf.len() > cfg.max_request_bytes {
            let e = RpcError::new(
                INVALID_REQUEST,
                format!("request exceeds {} bytes", cfg.max_request_bytes),
            );
            let _ = send(stream, &error_response(&Value::Null, &e));
            return End::Dropped;
        }
        if shared.stop.load(Ordering::Acquire) {
            return End::Closed;
        }
        if request_started.is_some_and(|t| t.elapsed() > cfg.request_timeout) {
            let e = RpcError::new(INVALID_REQUEST, "request not completed in time");
            let _ = send(stream, &error_response(&Value::Null, &e));
            return End::Dropped;
        }
        if buf.is_empty() && last_activity.elapsed() > cfg.idle_timeout {
            return End::Closed;
        }
        // Never read past the limit (plus one byte to see that it is exceeded).
        let room =
            (cfg.max_request_bytes + 1 - buf.len().min(cfg.max_request_bytes)).min(chunk.len());
        match stream.read(&mut chunk[..room]) {
            Ok(0) => return End::Closed,
            Ok(n) => {
                if buf.is_empty() {
                    request_started = Some(Instant::now());
                }
                buf.extend_from_slice(&chunk[..n]);
            }
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                ) => {}
            Err(_) => return End::Dropped,
        }
    }
}

/// The answer to one request line (`None` for a notification: a request without `id`).
fn answer(shared: &Shared, line: &[u8]) -> Option<Value> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if line.iter().all(u8::is_ascii_whitespace) {
        return None;
    }
    let request: Value = match serde_json::from_slice(line) {
        Ok(v) => v,
        Err(e) => {
            return Some(error_response(
                &Value::Null,
                &RpcError::new(PARSE_ERROR, format!("parse error: {e}")),
            ))
        }
    };
    let Value::Object(obj) = &request else {
        return Some(error_response(
            &Value::Null,
            &RpcError::new(INVALID_REQUEST, "a request is one JSON object (no batches)"),
        ));
    };
    let id = obj.get("id").cloned();
    let method = obj.get("method").and_then(Value::as_str);
    let (Some(method), Some(VERSION)) = (method, obj.get("jsonrpc").and_then(Value::as_str)) else {
        return Some(error_response(
            &id.unwrap_or(Value::Null),
            &RpcError::new(
                INVALID_REQUEST,
                "a request needs \"jsonrpc\": \"2.0\" and a string \"method\"",
            ),
        ));
    };
    let params = obj.get("params").cloned().unwrap_or(Value::Null);
    let result = methods::call(&shared.registry, method, &params);
    let id = id?;
    Some(match result {
        Ok(v) => response(&id, v),
        Err(e) => error_response(&id, &e),
    })
}
