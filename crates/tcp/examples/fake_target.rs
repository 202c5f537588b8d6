//! Serves the in-process fake NVMe/TCP target on 127.0.0.1 (a free port) until killed, and
//! prints its transport id: `cargo run -p nvme-tcp --features fake-target --example fake_target`.

fn main() {
    let t = nvme_tcp::fake::FakeTarget::start(nvme_tcp::fake::Config::default());
    println!("{}", t.trid());
    loop {
        std::thread::park();
    }
}
