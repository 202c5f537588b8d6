//! nvme-target: serve namespaces of a local controller over NVMe/TCP (see the library part,
//! `lib.rs`, and docs/target.md).

fn main() -> std::process::ExitCode {
    nvme_tool_support::main(nvme_target_tool::run)
}
