//! The control server against emulated controllers: every method's answer decodes to what the
//! controller itself reports; a client reads SMART and queue statistics while another thread
//! runs verified I/O; malicious clients (oversized, malformed, slow, half-open, too many, the
//! wrong uid) are answered or cut off without holding up anyone else.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nvme_control::protocol::{self, from_hex_array};
use nvme_control::{
    ControlClient, ControlConfig, ControlError, ControlRegistry, ControlServer, QueueCounters,
};
use nvme_device::{AnyController, IoQueue};
use nvme_driver::spec::{ErrorLogEntry, IdentifyController, IdentifyNamespace, SmartLog};
use nvme_driver::{Controller, ControllerOptions, Transport, WriteFlags};
use nvme_sim::{SimConfig, SimController};
use serde_json::{json, Value};

fn socket_path(tag: &str) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    std::env::temp_dir().join(format!(
        "nvme-control-{tag}-{}-{}.sock",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ))
}

fn emulated(name: &str) -> Arc<AnyController> {
    let sim = Arc::new(SimController::start(SimConfig::default()));
    let mut t = Transport::new(sim.mmio(), sim.dma(), name);
    t.keepalive = Some(sim);
    Arc::new(AnyController::Pcie(
        Controller::new(t, ControllerOptions::default()).unwrap(),
    ))
}

fn server(tag: &str, config: impl FnOnce(&mut ControlConfig)) -> (ControlServer, ControlRegistry) {
    let registry = ControlRegistry::new();
    let mut cfg = ControlConfig::new(socket_path(tag));
    config(&mut cfg);
    (
        ControlServer::start(cfg, registry.clone()).unwrap(),
        registry,
    )
}

fn rpc_code(e: ControlError) -> i64 {
    match e {
        ControlError::Rpc { code, .. } => code,
        other => panic!("not an RPC error: {other:?}"),
    }
}

#[test]
fn every_method_answers_what_the_controller_reports() {
    let (srv, registry) = server("methods", |_| {});
    let mode = std::fs::metadata(srv.path()).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let ctrl = emulated("sim0");
    registry.add("sim0", ctrl.clone());
    let mut c = ControlClient::connect(srv.path()).unwrap();

    let list = c.call("list_controllers", json!({})).unwrap();
    assert_eq!(list[0]["name"], "sim0");
    assert_eq!(list[0]["transport"], "pcie");
    assert_eq!(list[0]["model"], ctrl.identify().model());
    assert_eq!(
        list[0]["namespaces"].as_array().unwrap().len(),
        ctrl.namespaces().len()
    );

    // The only controller may be left unnamed.
    let id = c.call("identify", json!({})).unwrap();
    let bytes: [u8; IdentifyController::SIZE] =
        from_hex_array(id["identify"].as_str().unwrap()).unwrap();
    let decoded = IdentifyController::from_bytes(&bytes);
    assert_eq!(decoded.to_bytes(), ctrl.identify().to_bytes());
    assert_eq!(id["cap"], ctrl.cap().0);
    let ns0: [u8; IdentifyNamespace::SIZE] =
        from_hex_array(id["namespaces"][0]["identify"].as_str().unwrap()).unwrap();
    assert_eq!(
        IdentifyNamespace::from_bytes(&ns0).nsze,
        ctrl.namespaces()[0].identify().nsze
    );

    let smart = c.call("smart_log", json!({"controller": "sim0"})).unwrap();
    let smart: [u8; SmartLog::SIZE] = from_hex_array(smart["log"].as_str().unwrap()).unwrap();
    let smart = SmartLog::from_bytes(&smart);
    let direct = ctrl.smart_log(u32::MAX).unwrap();
    assert_eq!(smart.composite_temperature, direct.composite_temperature);
    assert_eq!(smart.available_spare, direct.available_spare);

    let errors = c.call("error_log", json!({"entries": 4})).unwrap();
    for e in errors["entries"].as_array().unwrap() {
        let b: [u8; ErrorLogEntry::SIZE] = from_hex_array(e.as_str().unwrap()).unwrap();
        let _ = ErrorLogEntry::from_bytes(&b);
    }

    // Number of Queues (07h): the driver asked for queues at bring-up.
    let f = c.call("get_feature", json!({"fid": 7})).unwrap();
    assert_eq!(f["name"], "Number of Queues");
    assert!(f["value"].as_u64().unwrap() > 0, "{f}");
    let caps = c.call("get_feature", json!({"fid": 7, "sel": 3})).unwrap();
    assert!(caps["capabilities"].is_u64(), "{caps}");

    let fw = c.call("log_page", json!({"lid": 3, "bytes": 512})).unwrap();
    assert_eq!(fw["data"].as_str().unwrap().len(), 1024);
    // The Changed Namespace List is cleared by reading: refused.
    let e = c
        .call("log_page", json!({"lid": 4, "bytes": 4096}))
        .unwrap_err();
    assert_eq!(rpc_code(e), protocol::INVALID_PARAMS);

    let ns = c.call("identify_namespace", json!({"nsid": 1})).unwrap();
    assert_eq!(ns["nsid"], 1);
    let rescan = c.call("rescan", json!({})).unwrap();
    assert_eq!(rescan["added"], json!([]));
    assert_eq!(c.call("reset", json!({})).unwrap(), json!({}));
    assert_eq!(
        c.call("list_namespaces", json!({}))
            .unwrap()
            .as_array()
            .unwrap()
            .len(),
        2
    );

    let e = c.call("format_nvm", json!({})).unwrap_err();
    assert_eq!(rpc_code(e), protocol::METHOD_NOT_FOUND);
    let e = c
        .call("identify", json!({"controller": "nope"}))
        .unwrap_err();
    assert_eq!(rpc_code(e), protocol::UNKNOWN_CONTROLLER);
    let e = c.call("get_feature", json!({"fid": "seven"})).unwrap_err();
    assert_eq!(rpc_code(e), protocol::INVALID_PARAMS);
    let e = c.call("smart_log", json!([1])).unwrap_err();
    assert_eq!(rpc_code(e), protocol::INVALID_PARAMS);

    // With two controllers the name is needed.
    registry.add("sim1", emulated("sim1"));
    let e = c.call("identify", json!({})).unwrap_err();
    assert_eq!(rpc_code(e), protocol::UNKNOWN_CONTROLLER);
    assert!(registry.remove("sim1"));
    assert!(!registry.remove("sim1"));
}

#[test]
fn a_client_reads_smart_and_statistics_while_io_runs() {
    let (srv, registry) = server("io", |_| {});
    let ctrl = emulated("sim0");
    registry.add("sim0", ctrl.clone());
    let cell = registry.queue_stats("sim0", "worker-0").unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let io = {
        let (ctrl, stop) = (ctrl.clone(), stop.clone());
        std::thread::spawn(move || {
            let ns = ctrl.namespaces()[0].clone();
            let blocks = 4096 / ns.block_size();
            let mut qp = ctrl.create_queue_pair(Default::default()).unwrap();
            let mut done = 0u64;
            while !stop.load(Ordering::Relaxed) || done < 50 {
                let lba = (done % 64) * u64::from(blocks);
                let mut w = ctrl.alloc_buffer(4096).unwrap();
                w.fill((done % 251) as u8);
                let w = qp
                    .write(&ns, lba, blocks, w, WriteFlags::default())
                    .unwrap();
                let r = qp
                    .read(&ns, lba, blocks, ctrl.alloc_buffer(4096).unwrap())
                    .unwrap();
                assert_eq!(&r[..], &w[..], "I/O {done} read back what it wrote");
                done += 1;
                if done % 16 == 0 {
                    cell.publish(&QueueCounters::from_stats(&qp.stats_snapshot()));
                }
            }
            cell.publish(&QueueCounters::from_stats(&qp.stats_snapshot()));
            done
        })
    };
    let mut c = ControlClient::connect(srv.path()).unwrap();
    let mut reads = 0;
    let start = Instant::now();
    let mut last_completed = 0;
    while reads < 20 || last_completed == 0 {
        let smart = c.call("smart_log", json!({})).unwrap();
        assert_eq!(smart["log"].as_str().unwrap().len(), 2 * SmartLog::SIZE);
        let stats = c.call("queue_stats", json!({})).unwrap();
        assert_eq!(stats[0]["queue"], "worker-0");
        let completed = stats[0]["counters"]["requests_completed"].as_u64().unwrap();
        assert!(completed >= last_completed, "counters only grow");
        last_completed = completed;
        reads += 1;
        assert!(start.elapsed() < Duration::from_secs(30), "no progress");
    }
    stop.store(true, Ordering::Relaxed);
    let done = io.join().unwrap();
    let stats = c
        .call("queue_stats", json!({"controller": "sim0"}))
        .unwrap();
    assert_eq!(
        stats[0]["counters"]["requests_completed"].as_u64().unwrap(),
        2 * done
    );
    assert!(srv.stats().requests.load(Ordering::Relaxed) >= 40);
}

fn raw(path: &std::path::Path) -> UnixStream {
    let s = UnixStream::connect(path).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

fn read_answer(s: &UnixStream) -> Value {
    let mut line = String::new();
    BufReader::new(s).read_line(&mut line).unwrap();
    serde_json::from_str(&line).unwrap_or(Value::Null)
}

/// The connection is closed by the server (EOF, or a reset).
fn closed(s: &mut UnixStream) -> bool {
    let mut b = [0u8; 64];
    loop {
        match s.read(&mut b) {
            Ok(0) | Err(_) => return true,
            Ok(_) => continue,
        }
    }
}

#[test]
fn malicious_clients_are_answered_or_cut_off_and_others_still_served() {
    let (srv, registry) = server("evil", |c| {
        c.max_request_bytes = 1024;
        c.request_timeout = Duration::from_millis(300);
        c.write_timeout = Duration::from_millis(300);
        c.max_clients = 4;
    });
    registry.add("sim0", emulated("sim0"));
    let path = srv.path().to_owned();

    // Malformed: a parse error, the connection stays usable; a batch and a bad request too.
    let mut m = raw(&path);
    m.write_all(b"{not json\n[1,2]\n{\"id\":1,\"method\":7}\n")
        .unwrap();
    let mut r = BufReader::new(m.try_clone().unwrap());
    for code in [
        protocol::PARSE_ERROR,
        protocol::INVALID_REQUEST,
        protocol::INVALID_REQUEST,
    ] {
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        let v: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["error"]["code"], code, "{line}");
    }
    m.write_all(b"{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"list_controllers\"}\n")
        .unwrap();
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(&line).unwrap()["result"][0]["name"],
        "sim0"
    );
    // A notification (no id) gets no answer: the next answer is for id 3.
    m.write_all(b"{\"jsonrpc\":\"2.0\",\"method\":\"list_controllers\"}\n{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"reset\"}\n").unwrap();
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    assert_eq!(serde_json::from_str::<Value>(&line).unwrap()["id"], 3);
    drop((m, r));

    // Slow: half a request, then silence. Meanwhile another client is served at once.
    let mut slow = raw(&path);
    slow.write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,").unwrap();
    let t = Instant::now();
    let mut good = ControlClient::connect(&path).unwrap();
    good.call("smart_log", json!({})).unwrap();
    assert!(
        t.elapsed() < Duration::from_millis(300),
        "served while the slow one waits"
    );
    let v = read_answer(&slow);
    assert_eq!(v["error"]["code"], protocol::INVALID_REQUEST, "{v}");
    assert!(closed(&mut slow));

    // Oversized: no newline within the limit: an error, then closed.
    let mut big = raw(&path);
    let _ = big.write_all(&vec![b'x'; 4096]);
    let v = read_answer(&big);
    assert_eq!(v["error"]["code"], protocol::INVALID_REQUEST, "{v}");
    assert!(v["error"]["message"].as_str().unwrap().contains("1024"));
    assert!(closed(&mut big));

    // Half-open: many requests, never reading the answers. The server's writes time out and
    // it closes the connection; the good client is not held up meanwhile.
    let mut deaf = UnixStream::connect(&path).unwrap();
    deaf.set_write_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let request = b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"identify\"}\n";
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(3) {
        if deaf.write_all(request).is_err() {
            break;
        }
    }
    let t = Instant::now();
    good.call("queue_stats", json!({})).unwrap();
    assert!(t.elapsed() < Duration::from_millis(500));
    drop(deaf);

    // Too many clients: the fifth is refused with an answer; the others still work.
    let wait_for = |n: usize| {
        let t = Instant::now();
        while srv.clients() > n && t.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(srv.clients() <= n, "{} clients", srv.clients());
    };
    wait_for(1);
    let held: Vec<ControlClient> = (0..3)
        .map(|_| ControlClient::connect(&path).unwrap())
        .collect();
    let extra = raw(&path);
    let v = read_answer(&extra);
    assert_eq!(v["error"]["code"], protocol::TOO_MANY_CLIENTS, "{v}");
    good.call("list_controllers", json!({})).unwrap();
    drop(held);
    assert!(srv.stats().dropped.load(Ordering::Relaxed) >= 3);
}

#[test]
fn a_uid_not_allowed_is_refused_and_socket_files_are_handled() {
    // Allow only a uid that is not ours.
    let me = rustix::process::geteuid().as_raw();
    let (srv, _registry) = server("uid", |c| c.allowed_uids = vec![me.wrapping_add(12345)]);
    let s = raw(srv.path());
    let v = read_answer(&s);
    assert_eq!(v["error"]["code"], protocol::PERMISSION_DENIED, "{v}");
    assert_eq!(srv.stats().refused.load(Ordering::Relaxed), 1);

    // A live server's path is refused; a regular file is never replaced.
    let e =
        ControlServer::start(ControlConfig::new(srv.path()), ControlRegistry::new()).unwrap_err();
    assert!(e.to_string().contains("another server"), "{e}");
    let file = socket_path("file");
    std::fs::write(&file, b"keep me").unwrap();
    let e = ControlServer::start(ControlConfig::new(&file), ControlRegistry::new()).unwrap_err();
    assert!(e.to_string().contains("not a socket"), "{e}");
    assert_eq!(std::fs::read(&file).unwrap(), b"keep me");
    std::fs::remove_file(&file).unwrap();

    // A stale socket (its server gone without cleanup) is replaced; the socket file goes
    // away when the server stops.
    let path = srv.path().to_owned();
    let stale = std::os::unix::net::UnixListener::bind(socket_path("stale")).unwrap();
    let stale_path = stale
        .local_addr()
        .unwrap()
        .as_pathname()
        .unwrap()
        .to_owned();
    drop(stale);
    let again =
        ControlServer::start(ControlConfig::new(&stale_path), ControlRegistry::new()).unwrap();
    drop(again);
    assert!(!stale_path.exists());
    drop(srv);
    assert!(!path.exists());
}
