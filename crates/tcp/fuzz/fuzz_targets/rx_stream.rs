//! The NVMe/TCP receive path after a valid ICResp, fed any bytes: `Case::from_bytes` reads
//! digests, commands and chunk sizes from the front, then either a raw stream or a script
//! of structure-aware PDUs (`nvme_tcp::fuzzing`). The harness panics when an invariant
//! breaks: at most one completion per request, bounded buffers, every buffer back.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    nvme_tcp::fuzzing::run_bytes(data);
});
